"""``python verify.py NOTEBOOK``: a notebook's step cells replayed and judged as grading does.

The replay runs in a fork server (``src/replay.py``), inside a bubblewrap sandbox
when bwrap works here; the verdicts come from the one road (``src/road.py``).
"""

from __future__ import annotations

import sys
from pathlib import Path

from src.checks.util import _error_text, _num


def run_notebook(path, timeout=60, strict=True):
    """Replay a notebook's step cells as grading does; return (report dict, cell errors).

    Each step cell (found by its nbgrader grade_id) is run on its own by the replay of
    src/replay.py: in a fork server (inside a bubblewrap sandbox when bwrap works here),
    on the notebook's set-up cells and the reference tensors of the steps before it, and
    judged on the road every verdict takes (src/road.py; the same code as nbgrader's
    Validate, src/validate.py). ``timeout`` bounds the whole replay (seconds).
    ``strict`` is kept for old callers: every verdict is the graded run's.
    """
    from src import lessons, road
    from src.validate import WarmReplay, lesson_of, read_notebook

    nb = read_notebook(Path(path))
    cells = road.notebook_cells(nb)
    lesson = lesson_of(cells)
    if lesson is None:
        lesson = lessons.lesson()
        missing = [c for c in lesson.setup_cells if c not in dict(cells)]
        raise ValueError(f"expected the set-up cells {', '.join(lesson.setup_cells)}, "
                         f"missing {', '.join(missing)}")
    warm = WarmReplay()
    try:
        _, found = warm.verdicts(nb, seconds=float(timeout))
    finally:
        warm.close()
    per_cell = {test: summary.to_dict() | {"test_cell_present": test in dict(cells)}
                for test, summary in found.summaries.items()}
    report = found.summary.to_dict() | {"cells": per_cell, "strict": True,
                                        "lesson": lesson.name}
    errors = [{"cell": c, "title": f"Cell {lesson.by_cell[c].number}", "error": e,
               "message": m} for c, e, m in found.raised]
    return report, errors


def main(argv=None) -> int:
    """``python verify.py NOTEBOOK [--json] [--strict]``; exit 1 when a check fails."""
    import argparse
    import json

    parser = argparse.ArgumentParser(
        description="Replay a lesson notebook's step cells as grading does, and check each.")
    parser.add_argument("notebook", type=Path)
    parser.add_argument("--json", action="store_true", help="print a JSON report")
    parser.add_argument("--strict", action="store_true",
                        help="(the default: every check judges as the graded run does)")
    parser.add_argument("--timeout", type=int, default=60,
                        help="seconds for the whole replay")
    args = parser.parse_args(argv)
    if not args.notebook.is_file():
        print(f"verify: expected a notebook file, got {args.notebook} (not found)",
              file=sys.stderr)
        return 2
    try:
        report, errors = run_notebook(args.notebook, args.timeout, args.strict)
    except Exception as exc:  # noqa: BLE001
        print(f"verify: could not run {args.notebook}: {_error_text(exc)}", file=sys.stderr)
        return 2
    report["cell_errors"] = errors
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"{args.notebook}: {_num(report['score'])}/{_num(report['max_score'])} points")
        for r in report["results"]:
            mark = "PASS" if r["passed"] else "FAIL"
            print(f"[{mark}] {r['title']}: {_num(r['score'])}/{_num(r['max_score'])}")
            if not r["passed"]:
                print("\n".join("    " + line for line in r["message"].splitlines()))
            for note in r["notes"]:
                print(f"    note: {note}")
        if errors:
            print("Step cells that raised an error when run again on their own, as grading "
                  "runs them:")
            for e in errors:
                print(f"    {e['title']}: {e['error']}: {e['message']}")
    return 0 if report["passed"] else 1

