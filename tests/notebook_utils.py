"""Helpers shared by the notebook tests."""

import contextlib
import io
import json
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "complete_lesson.ipynb"
LESSON = ROOT / "lesson.ipynb"
#: The code cells that hold the lesson's steps, in order.
STEP_CELLS = ["cell2_setup", "cell3_data", "cell4_projections", "cell5_scores",
              "cell6_softmax", "cell7_values"]


def load(path):
    return json.loads(Path(path).read_text(encoding="utf-8"))


def source(cell):
    src = cell["source"]
    return "".join(src) if isinstance(src, list) else src


def cells_by_id(path):
    return {c["id"]: source(c) for c in load(path)["cells"]}


def run_steps(codes: dict, replace: dict | None = None) -> dict:
    """Execute the step cells' code in-process, as a student running them in order.

    ``replace`` maps cell id -> [(old, new), ...] substitutions (a mistake).
    A cell that raises stops, like a notebook cell, and the next one runs,
    like a student who moves on. Returns the namespace.
    """
    ns = {"__name__": "__lesson__"}
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        for cid in STEP_CELLS:
            code = codes[cid]
            for old, new in (replace or {}).get(cid, []):
                assert old in code, f"{old!r} not found in {cid}"
                code = code.replace(old, new)
            with contextlib.redirect_stdout(io.StringIO()):
                try:
                    exec(compile(code, cid, "exec"), ns)  # noqa: S102
                except (NotImplementedError, AssertionError, RuntimeError):
                    pass
    finally:
        os.chdir(cwd)
    return ns
