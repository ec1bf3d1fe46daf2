"""``python verify.py NOTEBOOK``: replay a notebook's step cells as grading does.

The replay runs in a fork server (``src/replay.py``), inside a bubblewrap
sandbox when bwrap works here; each step cell is judged by
:func:`src.checks.judge.judge_replay`.
"""

from __future__ import annotations

import sys
from pathlib import Path

from src.checks.judge import _failed, _Reader, judge_replay
from src.checks.lesson import GRADE_CELLS, _num
from src.checks.observe import _error_text
from src.checks.results import Summary

# The course's root: the verify.py, src/ and data/ that the replay ships.
HERE = Path(__file__).resolve().parents[2]


def run_notebook(path, timeout=60, strict=False):
    """Replay a notebook's step cells as grading does; return (report dict, cell errors).

    Each step cell (Cells 4-7, found by their nbgrader grade_id) is run on its own by
    the replay of src/replay.py: in a fork server (inside a bubblewrap sandbox when
    bwrap works here), on the notebook's set-up cells and the reference tensors of the
    steps before it, and judged here. ``timeout`` bounds the whole replay (seconds).
    """
    import nbformat

    from src import replay, sandbox

    nb = nbformat.read(Path(path), as_version=4)
    cells = {c.get("metadata", {}).get("nbgrader", {}).get("grade_id"): c.source
             for c in nb.cells if c.cell_type == "code"}
    missing = [g for g in replay.SETUP_CELLS if g not in cells]
    if missing:
        raise ValueError(f"expected the set-up cells {', '.join(replay.SETUP_CELLS)}, "
                         f"missing {', '.join(missing)}")
    steps = {s: cells[s] for s in replay.STEPS if s in cells}
    server = replay.ReplayServer([cells[g] for g in replay.SETUP_CELLS],
                                 {n: HERE / n for n in ("verify.py", "src", "data")},
                                 sandboxed=sandbox.unavailable_reason() is None)
    try:
        answer = server.replay(steps, seconds=float(timeout))
    finally:
        server.close()
    results, per_cell, errors = [], {}, []
    for step, (gid, _) in replay.STEPS.items():
        data = answer.get(step, f"the notebook has no cell with grade_id {step}")
        if isinstance(data, dict):
            summary = judge_replay(gid, data, answer.get(f"own:{step}"), strict=strict)
            raised = _Reader(data).strings("cell.raised")
            if raised:
                name, _, message = raised[0].partition(": ")
                errors.append({"cell": step, "error": name, "message": message})
        else:
            summary = Summary([_failed(s, f"Not judged: {data}.") for s in GRADE_CELLS[gid]])
        per_cell[gid] = summary.to_dict() | {"test_cell_present": gid in cells}
        results += summary.results
    report = Summary(results).to_dict() | {"cells": per_cell, "strict": strict}
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
                        help="judge as the graded run does (strict-only items deducted)")
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
        print(f"{args.notebook}: {_num(report['score'])}/{_num(report['max_score'])} points"
              f"{' (graded run)' if args.strict else ''}")
        for r in report["results"]:
            mark = "PASS" if r["passed"] else "FAIL"
            print(f"[{mark}] {r['title']}: {_num(r['score'])}/{_num(r['max_score'])}")
            if not r["passed"]:
                print("\n".join("    " + line for line in r["message"].splitlines()))
            for note in r["notes"]:
                print(f"    note: {note}")
        if errors:
            print("Cells that raised an error:")
            for e in errors:
                print(f"    {e['cell']}: {e['error']}: {e['message']}")
    return 0 if report["passed"] else 1

