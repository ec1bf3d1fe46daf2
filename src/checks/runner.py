"""``python verify.py NOTEBOOK``: a notebook's step cells replayed and judged as grading does.

The replay runs in a fork server (``src/replay.py``), inside a bubblewrap sandbox
when bwrap works here; the verdicts come from the one road (``src/road.py``).
"""

from __future__ import annotations

import sys
from pathlib import Path

from src.checks.util import _error_text, _num

# The course's root: the verify.py, src/ and data/ that the replay ships.
HERE = Path(__file__).resolve().parents[2]


def run_notebook(path, timeout=60, strict=True):
    """Replay a notebook's step cells as grading does; return (report dict, cell errors).

    Each step cell (found by its nbgrader grade_id) is run on its own by the replay of
    src/replay.py: in a fork server (inside a bubblewrap sandbox when bwrap works here),
    on the notebook's set-up cells and the reference tensors of the steps before it, and
    judged on the road every verdict takes (src/road.py). ``timeout`` bounds the whole
    replay (seconds). ``strict`` is kept for old callers: every verdict is the graded
    run's.
    """
    from src import lessons, replay, road, sandbox

    cells = road.notebook_cells(_read_notebook(Path(path)))
    lesson = _lesson_of(lessons, cells)
    setup = road.setup_sources(lesson, cells)
    if setup is None:
        missing = [c for c in lesson.setup_cells if c not in dict(cells)]
        raise ValueError(f"expected the set-up cells {', '.join(lesson.setup_cells)}, "
                         f"missing {', '.join(missing)}")
    shipped = {n: HERE / n for n in ("verify.py", "src", "data")}
    server = replay.ReplayServer(lesson, setup, shipped,
                                 sandboxed=sandbox.unavailable_reason() is None)
    try:
        found = road.verdicts(lesson, road.step_sources(lesson, cells),
                              lambda steps: server.replay(steps, seconds=float(timeout)),
                              cells=cells)
    finally:
        server.close()
    per_cell = {test: summary.to_dict() | {"test_cell_present": test in dict(cells)}
                for test, summary in found.summaries.items()}
    report = found.summary.to_dict() | {"cells": per_cell, "strict": True,
                                        "lesson": lesson.name}
    errors = [{"cell": c, "title": f"Cell {lesson.by_cell[c].number}", "error": e,
               "message": m} for c, e, m in found.raised]
    return report, errors


def _read_notebook(path: Path) -> dict:
    """The notebook at ``path`` as JSON (nbformat's reader costs ~3 s of imports, more than
    the rest of a cold run: a graded notebook is nbformat 4, read as plain JSON)."""
    import json

    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"{path.name} is not a notebook: not valid JSON ({exc})") from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list) or \
            nb.get("nbformat") != 4:
        got = nb.get("nbformat") if isinstance(nb, dict) else type(nb).__name__
        raise ValueError(f"{path.name}: expected a Jupyter notebook of nbformat 4 with a list "
                         f"of cells, got nbformat {got!r}")
    return nb


def _lesson_of(lessons, cells):
    """The lesson whose set-up and step cells the notebook holds (the first, else lesson 1)."""
    labels = {label for label, _ in cells}
    for spec in lessons.LESSONS.values():
        if set(spec.setup_cells) <= labels:
            return spec
    return lessons.lesson()


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

