"""What one submission that loops in the replay costs the rest of its class (``make
bench-grade``).

A class of 6 is graded with ``make grade``'s code (JOBS workers, sandboxed) twice in
turn, from identical copies of one course, ``--rounds`` times (alternating, so that a
drift of the machine's load hits both): all six honest, and the same six with one of them
replaced by a submission whose step cells are right in the kernel but loop forever when
replayed (so its notebook runs normally, and only the replay's budget stops it).

Reported: the medians of the whole class's wall time and of the time at which the last
honest student was done, and their ratio (target: at most 1.2, docs/internals.md
"Grading performance"); and each looping step's score (0: it is stopped, not credited).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import nbformat

from src import course, lessons
from tests.cohort.build import submission_notebook, write_submissions

#: Put before each step cell's code: right in the kernel, a busy loop in the replay
#: (which runs the cell in a namespace without IPython's get_ipython).
LOOP_WHEN_REPLAYED = ("try:\n    get_ipython()\nexcept NameError:\n    while True:\n"
                      "        pass\n")
STEP_CELLS = tuple(lessons.lesson().by_cell)  # (from the lesson's spec)


def looper_notebook() -> str:
    nb = nbformat.reads(submission_notebook(), as_version=4)
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") in STEP_CELLS:
            cell.source = LOOP_WHEN_REPLAYED + cell.source
    return nbformat.writes(nb)


def grade_class(base: Path, cases, jobs: int) -> tuple[float, float, dict]:
    """(whole class seconds, seconds until the last honest student was done, report)."""
    done = {}
    os.environ["ATTENTION_COURSE_DIR"] = str(base)
    t0 = time.perf_counter()

    class Stream:  # the report's lines arrive as each student is done
        def write(self, text):
            for c in cases:
                if c["name"] in text and c["name"] not in done:
                    done[c["name"]] = time.perf_counter() - t0
            return len(text)

        def flush(self):
            pass

    report = course.grade(jobs=jobs, stream=Stream())
    whole = time.perf_counter() - t0
    honest = [done.get(c["name"], whole) for c in cases if c["name"] != "a-looper"]
    return whole, max(honest), report


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        template = Path(tmp) / "template"
        os.environ["ATTENTION_COURSE_DIR"] = str(template)
        course.release()
        # (the looper's name comes first: it is graded first and holds a worker the longest)
        honest = [{"name": f"honest{i}", "nb": submission_notebook()} for i in range(5)]
        classes = {"honest": [{"name": "a-looper", "nb": submission_notebook()}] + honest,
                   "with a looper": [{"name": "a-looper", "nb": looper_notebook()}] + honest}
        times = {k: ([], []) for k in classes}
        looper_scores = None
        for r in range(args.rounds):
            for label, cases in classes.items():
                base = Path(tmp) / f"{r}-{label.replace(' ', '-')}"
                shutil.copytree(template, base)
                os.environ["ATTENTION_COURSE_DIR"] = str(base)
                write_submissions(cases)
                whole, last_honest, _ = grade_class(base, cases, args.jobs)
                times[label][0].append(whole)
                times[label][1].append(last_honest)
                if label != "honest":
                    looper_scores = course.per_cell_scores().get("a-looper")
                shutil.rmtree(base, ignore_errors=True)
    med = {k: (statistics.median(a), statistics.median(b)) for k, (a, b) in times.items()}
    ratio = med["with a looper"][1] / med["honest"][1]
    print(f"class of 6, {args.jobs} jobs, {args.rounds} alternating rounds (medians)")
    for k, (whole, last) in med.items():
        print(f"  {k:14s} whole class {whole:6.1f} s   last honest student done {last:6.1f} s")
    print(f"  the honest students' time with a looper / alone: {ratio:.2f}x (target <= 1.2: "
          f"{'met' if ratio <= 1.2 else 'MISSED'})")
    print(f"  the looper's scores per cell: {looper_scores}")


if __name__ == "__main__":
    main()
