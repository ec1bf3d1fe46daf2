"""Grading without a kernel against plain sequential `nbgrader autograde` (``make bench-grade``).

48 synthetic submissions (the correct solution and the catalogued mistakes,
in turn) are graded three times from identical copies of one course, in the
same run:

- ours: ``src.course.grade`` with JOBS workers (what ``make grade`` does): no
  kernel, each step cell replayed in a sandboxed fork server per worker, whose
  start is counted in the class's time;
- ours, UNSAFE=1: the same without the sandbox, to measure its cost;
- plain: ``nbgrader autograde attention --force`` in a subprocess with
  nbgrader's own default pipeline (a kernel per submission; an
  nbgrader_config.py that sets only the course and the stub), one submission
  after another.

Targets (issue 23): ours at least 10x faster than plain, and the same per-cell
scores for every submission (these are honest: none attacks the grader); one
student's autograde on a warm server (the Formgrader's button after the first) and
one Validate on a warm worker (attention_validate.py, as the student's server runs it)
each at most 1/4 of a fresh kernel doing only the lesson's imports, measured here;
``python verify.py NOTEBOOK`` from a shell (cold) at most 1.5x ``python -c "import
torch"``, each the median of 5 runs alternated. Core-seconds per submission are wall x
jobs / submissions.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

from benchmarks.bench_lesson import imports_only, run_notebook
from src import course
from src.layout import ASSIGNMENT, NOTEBOOK, SOURCE_NOTEBOOK
from src.release import CODE_STUB
from tests.cohort.build import mistake_cases, submission_notebook, write_submissions

ROOT = Path(__file__).resolve().parent.parent


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--submissions", type=int, default=48)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        ours_dir, seq_dir = Path(tmp) / "ours", Path(tmp) / "sequential"
        os.environ["ATTENTION_COURSE_DIR"] = str(ours_dir)
        course.release()
        mistakes = [c["nb"] for c in mistake_cases()]
        correct = submission_notebook()
        # every third student is right, the others make the catalogued mistakes in turn
        cases = [{"name": f"student{i:02d}",
                  "nb": correct if i % 3 == 0 else mistakes[i % len(mistakes)]}
                 for i in range(args.submissions)]
        write_submissions(cases)
        shutil.copytree(ours_dir, seq_dir)
        unsafe_dir = Path(tmp) / "unsafe"
        shutil.copytree(ours_dir, unsafe_dir)

        with open(os.devnull, "w") as quiet:
            t0 = time.perf_counter()
            report = course.grade(jobs=args.jobs, stream=quiet)
            ours = time.perf_counter() - t0
            os.environ["ATTENTION_COURSE_DIR"] = str(unsafe_dir)
            t0 = time.perf_counter()
            course.grade(jobs=args.jobs, stream=quiet, unsafe=True)
            unsafe = time.perf_counter() - t0
            os.environ.pop("ATTENTION_UNSAFE_GRADING", None)
        unsafe_scores = course.per_cell_scores()
        os.environ["ATTENTION_COURSE_DIR"] = str(ours_dir)

        # nbgrader's own pipeline: a config that sets only what the course needs (nbgrader
        # also reads one in the course's root: make release wrote ours there, remove it).
        (seq_dir / "nbgrader_config.py").unlink()
        plain_cfg = Path(tmp) / "plain"
        plain_cfg.mkdir()
        (plain_cfg / "nbgrader_config.py").write_text(
            f"c = get_config()\nc.CourseDirectory.root = {str(seq_dir)!r}\n"
            "c.CourseDirectory.course_id = 'attention-course'\n"
            f"c.ClearSolutions.code_stub = {{'python': {CODE_STUB!r}}}\n")
        env = dict(os.environ, ATTENTION_COURSE_DIR=str(seq_dir),
                   PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
        t0 = time.perf_counter()
        res = subprocess.run([sys.executable, "-m", "nbgrader", "autograde", ASSIGNMENT,
                              "--force"], cwd=plain_cfg, env=env, capture_output=True,
                             text=True)
        sequential = time.perf_counter() - t0
        if res.returncode != 0:
            raise SystemExit(f"sequential nbgrader autograde failed:\n{res.stderr[-2000:]}")

        ours_scores = course.per_cell_scores()
        plain_scores = course.per_cell_scores(seq_dir / "gradebook.db")
        differ = sorted(s for s in ours_scores if ours_scores[s] != plain_scores.get(s))
        same = not differ and ours_scores == unsafe_scores
        nb = nbformat.read(SOURCE_NOTEBOOK, as_version=4)
        floor = min(run_notebook(imports_only(nb)) for _ in range(3))
        one = one_student_warm(ours_dir, cases[1]["name"])
        released = ours_dir / "release" / ASSIGNMENT
        shutil.copyfile(ours_dir / "submitted" / cases[1]["name"] / ASSIGNMENT /
                        f"{NOTEBOOK}.ipynb", released / "validate-me.ipynb")
        validate = validate_warm(released / "validate-me.ipynb")
        verify_cold, torch_cold = cold_verify(released / "validate-me.ipynb")

    n, jobs = args.submissions, args.jobs
    speedup = sequential / ours
    print(f"{n} submissions, {jobs} jobs, {os.cpu_count()} cores, load average "
          f"{os.getloadavg()[0]:.2f} at the end")
    print(f"  ours (make grade, sandboxed)  {ours:7.1f} s   {ours / n:5.2f} s per submission, "
          f"{ours * jobs / n:5.2f} core-s (start of {jobs} replay servers included)")
    print(f"  ours, UNSAFE=1 (no sandbox)   {unsafe:7.1f} s   {unsafe / n:5.2f} s per submission")
    print(f"  sandbox cost                  {(ours - unsafe) / n * jobs:+7.2f} core-s per "
          f"submission ({ours / unsafe:.2f}x)")
    print(f"  nbgrader autograde (serial)   {sequential:7.1f} s   {sequential / n:5.2f} s per "
          "submission")
    print(f"  speed-up                      {speedup:7.2f}x  (target >= 10: "
          f"{'met' if speedup >= 10 else 'MISSED'})")
    print(f"  one student, warm server      {one:7.2f} s   = {one / floor:.2f} x a fresh kernel "
          f"doing only the lesson's imports ({floor:.2f} s; target <= 0.25: "
          f"{'met' if one <= floor / 4 else 'MISSED'})")
    print(f"  one Validate, warm worker     {validate:7.2f} s   = {validate / floor:.2f} x that "
          f"kernel (target <= 0.25: {'met' if validate <= floor / 4 else 'MISSED'})")
    ratio = verify_cold / torch_cold
    print(f"  verify.py NOTEBOOK, cold      {verify_cold:7.2f} s   = {ratio:.2f} x `python -c "
          f"'import torch'` ({torch_cold:.2f} s; target <= 1.5: "
          f"{'met' if ratio <= 1.5 else 'MISSED'})")
    print(f"  per-cell scores identical     {same}" + (f" (differ: {differ})" if differ else ""))
    print(f"  failures                      {len(report.failed)}")
    per = ours / n
    print(f"  500 students at this rate: about {500 * per / 60:.1f} min with {jobs} jobs")
    if not same:
        raise SystemExit("the two gradebooks differ")


def one_student_warm(course_root: Path, student: str, repeats: int = 3) -> float:
    """Seconds of one student's autograde in a process that graded before (its replay
    server warm), as the Formgrader's button runs it in the instructor's server: the
    fastest of ``repeats``."""
    from src import grading

    os.environ["ATTENTION_COURSE_DIR"] = str(course_root)
    api = course.make_api()
    api.autograde(ASSIGNMENT, student, force=True, create=True)  # starts the server
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = api.autograde(ASSIGNMENT, student, force=True, create=True)
        best = min(best, time.perf_counter() - t0)
        if not result["success"]:
            raise SystemExit(f"autograde of {student} failed: {result.get('error')}")
    grading.close_replay_servers()
    return best


def validate_warm(notebook: Path, repeats: int = 3) -> float:
    """Seconds of one Validate of ``notebook`` as the student's server answers it
    (attention_validate.py: its warm worker's verdicts, then nbgrader's Validator), after
    a first one that starts the worker: the fastest of ``repeats``."""
    import attention_validate as av

    def once():
        validator = av.ReplayValidator()
        validator.reply = av.worker_for(notebook).ask(notebook)
        return validator.validate(str(notebook))

    once()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = once()
        best = min(best, time.perf_counter() - t0)
    if "failed" not in result:  # (a submission with mistakes: Validate must say so)
        raise SystemExit(f"Validate of {notebook.name} found nothing wrong: {result}")
    for worker in av._WORKERS.values():
        worker.close()
    return best


def cold_verify(notebook: Path, runs: int = 5) -> tuple[float, float]:
    """Medians of ``runs`` cold ``python verify.py NOTEBOOK`` and ``python -c "import
    torch"``, alternated (the machine's load falls on both alike)."""
    import statistics

    def timed(cmd):
        t0 = time.perf_counter()
        subprocess.run(cmd, cwd=ROOT, capture_output=True, check=False)
        return time.perf_counter() - t0

    verify, torch = [], []
    for _ in range(runs):
        verify.append(timed([sys.executable, "verify.py", str(notebook)]))
        torch.append(timed([sys.executable, "-c", "import torch"]))
    return statistics.median(verify), statistics.median(torch)


if __name__ == "__main__":
    main()
