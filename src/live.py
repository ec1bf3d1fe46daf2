"""The live check, in a student's own kernel: the code last run in each step cell, on the road.

JupyterLab and Notebook 7 put the cell's id in every execute request's metadata
(``cellId``); ipykernel hands it to IPython, which passes it to ``pre_run_cell``
callbacks. :func:`install` (run when ``verify`` is imported in a kernel) records,
for every cell id, the source last run in it. A check cell then judges the step
cell by the source last run *in that cell*, on the road every verdict takes
(``src/road.py``), with the replay run in this process: what grading does to
the saved notebook, done to what the student ran.

Front ends that send no cell id (nbclient, so nbval and nbgrader's Validate) run
a notebook file top to bottom: there the step cell's source is read from that
file (the notebook in the kernel's folder whose step cell was run here).

Code that made a step's names in another cell does not count; the check says so,
and where to move it. Shape legend: not applicable (sources and results).
"""

from __future__ import annotations

import ast
import copy
import json
import os
import sys
from pathlib import Path

from src.checks.util import _listing

#: What this kernel ran: {"cells": {cell id: source last run there}, "order": [(cell id,
#: source) of every run, the latest last, at most 200], "ids": whether the front end
#: sends cell ids, "raised": {cell id: the error its last run raised, or ""}}.
_RAN: dict = {"cells": {}, "order": [], "ids": False, "raised": {}}
_CACHE: dict = {}


def _pre_run_cell(info):
    cell_id = getattr(info, "cell_id", None)
    source = getattr(info, "raw_cell", None)
    if not isinstance(source, str):
        return
    if cell_id:
        _RAN["ids"] = True
        _RAN["cells"][cell_id] = source
    _RAN["order"].append((cell_id, source))
    del _RAN["order"][:-200]


def _post_run_cell(result):
    info = getattr(result, "info", None)
    cell_id = getattr(info, "cell_id", None)
    if cell_id:
        exc = getattr(result, "error_in_exec", None) or getattr(result, "error_before_exec",
                                                                  None)
        _RAN["raised"][cell_id] = f"{type(exc).__name__}: {exc}"[:160] if exc else ""


def install(shell=None) -> bool:
    """Record every cell run in this IPython ``shell`` (default: the running one) from
    now on; idempotent. False outside IPython."""
    if shell is None:
        ipython = sys.modules.get("IPython")
        shell = ipython.get_ipython() if ipython is not None else None
    if shell is None or not hasattr(shell, "events"):
        return False
    if _pre_run_cell not in shell.events.callbacks.get("pre_run_cell", []):
        shell.events.register("pre_run_cell", _pre_run_cell)
    if _post_run_cell not in shell.events.callbacks.get("post_run_cell", []):
        shell.events.register("post_run_cell", _post_run_cell)
    return True


def _binds(source: str, names) -> bool:
    """Whether ``source`` binds one of ``names`` at its top level."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        try:
            from IPython.core.inputtransformer2 import TransformerManager

            tree = ast.parse(TransformerManager().transform_cell(source))
        except Exception:  # noqa: BLE001
            return False
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and \
                node.name in names:
            return True
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
                             ast.Lambda)):
            continue
        if any(isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and n.id in names
               for n in ast.walk(node)):
            return True
    return False


# ------------------------------------------------------------- the notebook file
def _read(path: Path):
    """([(label, source)] of a notebook file's code cells, {nbgrader grade_id: cell id}),
    cached by the file's mtime; None when it cannot be read."""
    from src import road

    try:
        mtime = path.stat().st_mtime
        if _CACHE.get(("nb", path), (None,))[0] != mtime:
            nb = json.loads(path.read_text())
            ids = {(c.get("metadata", {}).get("nbgrader", {}) or {}).get("grade_id"):
                   c.get("id") for c in nb.get("cells", []) if c.get("id")}
            _CACHE[("nb", path)] = (mtime, road.notebook_cells(nb), ids)
        return _CACHE[("nb", path)][1:]
    except (OSError, ValueError, AttributeError):
        return None


def _session_notebook() -> Path | None:
    """The notebook the server started this kernel for (JPY_SESSION_NAME), if known."""
    session = os.environ.get("JPY_SESSION_NAME", "")
    if not session.endswith(".ipynb"):
        return None
    path = Path(session) if Path(session).is_absolute() else Path.cwd() / session
    return path if path.is_file() else None


def _file_cells(lesson, history):
    """([(label, source)], {grade_id: cell id}) of the notebook file this kernel runs: the
    one the server named (JPY_SESSION_NAME); else the first notebook in the kernel's folder
    (the lesson's first) one of whose step cells' sources this kernel ran (``history``:
    IPython's ``In``), else the first that holds the lesson's cells; or (None, {})."""
    named = _session_notebook()
    if named is not None:
        found = _read(named)
        if found:
            return found
    ran = set(history or []) | {src for _, src in _RAN["order"]}
    here = Path.cwd()
    paths = [here / f"{lesson.notebook}.ipynb", *sorted(here.glob("*.ipynb"))]
    fallback = (None, {})
    for path in dict.fromkeys(p for p in paths if p.is_file()):
        found = _read(path)
        if not found or not found[0]:
            continue
        labels = dict(found[0])
        if any(labels.get(s.cell) in ran for s in lesson.steps):
            return found
        if fallback[0] is None and all(s.cell in labels for s in lesson.steps):
            fallback = found
    return fallback


# ------------------------------------------------------------------ the check
def sources(lesson, shell) -> tuple[dict, list, list, str, dict]:
    """({step cell id: the source last run in it}, [(label, source)] of the notebook's
    cells, the set-up cells' sources or None, how the sources were found: "cell ids",
    "file" or "" (none found), {step cell id: its cell id in the front end})."""
    history = shell.user_ns.get("In") or []
    cells, ids = _file_cells(lesson, history)
    cells = cells or []
    file_steps = {s.cell: src for s, src in ((s, dict(cells).get(s.cell)) for s in lesson.steps)
                  if isinstance(src, str)}
    from src import road

    setup = road.setup_sources(lesson, cells)
    if _RAN["ids"]:
        # (a step cell's id is its grade_id in the release; a copy pasted in its place
        # keeps the grade_id but gets a new id, which the saved file tells)
        ids = {s.cell: ids.get(s.cell) or s.cell for s in lesson.steps}
        ran = {s.cell: _RAN["cells"][ids[s.cell]] for s in lesson.steps
               if ids[s.cell] in _RAN["cells"]}
        # A step cell not run in this kernel yet (a restart, say): the saved one, as
        # grading reads it (the check says so).
        ran |= {s: src for s, src in file_steps.items() if s not in ran}
        # The notebook's own labels for the cells this kernel ran, for "made in another cell".
        cells = [(cid or "this kernel", src) for cid, src in _RAN["order"]] + cells
        return ran, cells, setup, "cell ids", ids
    if file_steps:
        return file_steps, cells, setup, "file", {}
    return {}, cells, setup, "", {}


def moved_away(lesson, step, mine: str) -> str:
    """A note when the step's names were last made by code run in another cell than
    ``mine`` (the step cell's id), or ""."""
    names = set(step.names)
    lesson_cells = {*lesson.by_cell, *lesson.by_test, *lesson.setup_cells}
    for cell_id, source in reversed(_RAN["order"]):
        if cell_id == mine:
            return ""
        # (another step cell that rebinds a name is that cell's own business: its check
        # says so; only code outside the lesson's cells is "moved away")
        if cell_id in lesson_cells or "check_" in source or not _binds(source, names):
            continue
        first = next((ln.strip() for ln in source.splitlines()
                      if ln.strip() and not ln.strip().startswith("#")), "")[:60]
        made = sorted(names & set(_assigned(source))) or sorted(names)
        return (f"Code run in another cell (`{first}`) made {_listing(made)} after your "
                f"Cell {step.number} last ran: only Cell {step.number}'s own code counts. "
                f"Move that code into Cell {step.number} and run it there.")
    return ""


def not_run_here(step, mine: str, how: str, replay_raised: bool) -> str:
    """A note when the step cell has not run in this kernel (judged from the saved file),
    or when its last run here raised while its replay did not, or ""."""
    if how != "cell ids":
        return ""
    if mine not in _RAN["cells"]:
        return (f"Your Cell {step.number} has not run in this kernel yet (after a restart, "
                "say): this check judged the code of the saved notebook, as grading does. "
                f"Run Cell {step.number} to judge what you run.")
    raised = _RAN["raised"].get(mine, "")
    if raised and not replay_raised:
        return (f"In your kernel, Cell {step.number} raised {raised} when it last ran; this "
                "check runs it again on the lesson's own inputs from the cells before, as "
                "grading does. Run the cells above it in order, then this one.")
    return ""


def edited(step, ran: dict, saved: dict) -> str:
    """A note when the saved notebook's step cell holds other code than the code last run
    in it (grading judges the saved code), or "". Only when the server named the notebook
    this kernel runs (JPY_SESSION_NAME): another file in the folder is not the student's."""
    if not os.environ.get("JPY_SESSION_NAME", "").endswith(".ipynb"):
        return ""
    now = saved.get(step.cell)
    if not isinstance(now, str) or step.cell not in ran or now.strip() == ran[step.cell].strip():
        return ""
    return (f"Your saved notebook's Cell {step.number} holds other code than the code that "
            f"last ran in it, which is what this check judged: grading judges the saved "
            f"code. Run Cell {step.number} again (and save) so that both are the same.")


def _assigned(source):
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    return [n.id for n in ast.walk(tree) if isinstance(n, ast.Name)
            and isinstance(n.ctx, ast.Store)] + [
        n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def live_verdict(lesson, step, shell):
    """The Summary of ``step``'s check cell, judged on the road from the code last run in
    its step cell (and the cells before it, for their own tensors); None when this kernel
    ran no set-up or no step cell that can be found (the caller then judges the names as
    given)."""
    from src import replay, road

    found, cells, setup_src, how, ids = sources(lesson, shell)
    saved = dict(cells)
    if not how:
        return None
    if setup_src is None:
        setup = _live_setup(lesson, shell.user_ns)
        key_setup = "kernel"
    else:
        key_setup = tuple(setup_src)
        if _CACHE.get(("setup", key_setup)) is None:
            _CACHE.clear() if len(_CACHE) > 64 else None
            _CACHE[("setup", key_setup)] = replay.setup_namespace(setup_src)
        setup = _CACHE[("setup", key_setup)]
    if setup is None:
        return None
    if step.cell not in found:
        from src.checks.results import Summary
        from src.checks.verdict import _failed

        where = ("has not been run in this kernel yet, and the saved notebook has none"
                 if how == "cell ids" else "was not found in the notebook file")
        return road.Verdicts(lesson, {step.test: Summary([_failed(c, (
            f"Not judged yet: your Cell {step.number} {where}. Next step: run Cell "
            f"{step.number} itself (its own code is what counts), then this check.")) for c in
            step.checks])})
    chain = {s: src for s, src in found.items() if not lesson.later_than(s, step.cell)}
    key = (id(lesson), step.cell, key_setup, tuple(sorted(chain.items())))
    if _CACHE.get("last", (None,))[0] != key:  # (Cell 6's two checks share one replay)
        _CACHE["last"] = (key, road.verdicts(
            lesson, chain, lambda steps: replay.replay_in_process(
                lesson, steps, setup, only=[step.cell]), cells=cells, only=[step.cell]))
    verdict = copy.deepcopy(_CACHE["last"][1])
    # What the kernel did around the step cell: said afresh at every check.
    mine = ids.get(step.cell, step.cell)
    replay_raised = any(cell == step.cell for cell, *_ in verdict.raised)
    notes = [not_run_here(step, mine, how, replay_raised), moved_away(lesson, step, mine),
             edited(step, found, saved)] if how == "cell ids" else []
    verdict.summaries[step.test].results[0].kernel_notes[:0] = [n for n in notes if n]
    return verdict


def _live_setup(lesson, user_ns) -> dict | None:
    """The set-up names from the kernel's namespace (when no notebook file holds the set-up
    cells), or None if the set-up has not run."""
    if not all(n in user_ns for n in lesson.setup_names):
        return None
    return {**{n: user_ns[n] for n in lesson.setup_names}, "__builtins__": __builtins__}
