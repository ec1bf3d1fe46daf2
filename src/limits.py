"""The one limits object of grading: each sandboxed kernel's, the replay's and the judge's.

Defaults here; nbgrader_config.py states each one, and an instructor changes them there
(c.SandboxedExecute, c.Grading, c.RefuseUnsafeSubmission, c.TrustedScores: README,
"Limits"). Standard library only: the replay server and the grader both read it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    """The limits of grading; nbgrader_config.py sets them (see README)."""

    memory_gb: float = 4.0  # address space of every process in the sandbox
    processes: int = 256  # tasks (threads count: torch and ipykernel start ~20)
    file_mb: int = 64  # largest file the kernel may write
    tmp_mb: int = 256  # each of /tmp and the working directory (tmpfs)
    cell_timeout: int = 30  # seconds per cell (c.Execute.timeout)
    notebook_seconds: int = 60  # wall-clock budget of the whole notebook, at most
    budget_factor: float = 8.0  # ... and at most this many times the reference run
    budget_floor: int = 30  # ... but never less than this (a loaded machine)
    output_kb: int = 512  # stored output per cell; more is cut with a note
    message_mb: int = 64  # largest message the grader accepts from the kernel
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

    def budget(self, reference_seconds: float | None) -> int:
        """The whole-notebook budget: ``budget_factor`` times the reference run, between
        ``budget_floor`` and ``notebook_seconds`` (the cap alone without a reference)."""
        if not reference_seconds:
            return self.notebook_seconds
        derived = max(self.budget_floor, round(self.budget_factor * reference_seconds))
        return min(self.notebook_seconds, derived)

    def write_mb(self) -> int:
        """Everything a kernel can write, at most: /tmp, its working directory and /dev/shm
        (size-capped tmpfs) and its stderr file (file_mb)."""
        return 3 * self.tmp_mb + self.file_mb


LIMITS = Limits()
