"""The one limits object of grading: the replay's sandbox and runs, the judge's, the
grading processes' and the submissions'.

Defaults here; nbgrader_config.py states each one, and an instructor changes them there
(c.TrustedScores, c.SubmittedOutputs, c.Grading, c.RefuseUnsafeSubmission:
docs/internals.md, "Limits of grading"). Standard library only: the replay server and the
grader both read it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    """The limits of grading; nbgrader_config.py sets them (see docs/internals.md)."""

    memory_gb: float = 4.0  # address space of every process in the sandbox
    processes: int = 256  # tasks (threads count: torch starts ~20)
    file_mb: int = 64  # largest file a process in the sandbox may write
    tmp_mb: int = 256  # each of /tmp and the working directory (tmpfs)
    output_kb: int = 512  # a submitted cell's output kept when graded; more is cut, noted
    message_mb: int = 64  # largest message a client of a sandboxed kernel accepts
    notebook_mb: int = 20  # largest notebook file graded
    max_cells: int = 400  # most cells a graded notebook may have
    worker_memory_gb: float = 4.0  # address space of each grading process (not its kernel)
    feedback_seconds: int = 60  # deadline of one student's feedback
    # The replay (src/replay.py): a right step cell's run takes 2-20 ms here (74 ms at most
    # over the blind sets' right cells, on a loaded machine), a whole submission's well
    # under a second: these caps are 10 times that and more, and they are what a
    # submission that loops when replayed costs its worker (benchmarks/bench_isolation.py).
    replay_run_seconds: float = 1.0  # one cell run (wall; CPU too)
    replay_student_seconds: float = 3.0  # all of one submission's runs
    replay_data_mb: int = 4  # the data one run sends back
    # The judge, in a child of the grading process (src/grading.py, judge_isolated).
    judge_seconds: int = 60
    judge_memory_gb: float = 4.0

    def write_mb(self) -> int:
        """Everything a kernel can write, at most: /tmp, its working directory and /dev/shm
        (size-capped tmpfs) and its stderr file (file_mb)."""
        return 3 * self.tmp_mb + self.file_mb


LIMITS = Limits()
