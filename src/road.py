"""The one road to a verdict: a notebook's step-cell sources in, each check cell's result out.

The live check in a student's kernel (``src/live.py``), ``python verify.py NOTEBOOK``
(``src/checks/runner.py``), nbgrader's Validate (``attention_validate.py`` and its warm
worker, ``src/validate.py``) and autograding (``src/grading.py``) all call
:func:`verdicts`. They differ only in where the replay runs (in the student's own
process, or in a fork server, sandboxed when bubblewrap works) and in where the sources
come from; what is judged, and how, is this module's. Lesson facts come from the spec.

Shape legend: not applicable (sources and results; the tensors stay in the replay).
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from src.checks.judge import judge_replay
from src.checks.results import Summary
from src.checks.verdict import _failed, _Reader


@dataclass
class Verdicts:
    """Every check cell's :class:`Summary` (by check cell id, in lesson order), and what
    the replay said about each step cell (``raised``: [step cell, error, message];
    ``seeds``: the second run's seed by check cell, to reproduce it)."""

    lesson: object
    summaries: dict
    raised: list = field(default_factory=list)
    seeds: dict = field(default_factory=dict)

    @property
    def results(self):
        return [r for s in self.summaries.values() for r in s.results]

    @property
    def summary(self) -> Summary:
        return Summary(self.results)


def notebook_cells(nb) -> list[tuple[str, str]]:
    """[(label, source)] of a notebook's code cells, in order: the label is the cell's
    nbgrader grade_id, else its cell id, else its position ("code cell 3")."""
    out = []
    for i, cell in enumerate(c for c in nb.get("cells", []) if c.get("cell_type") == "code"):
        md = cell.get("metadata", {}) or {}
        label = (md.get("nbgrader", {}) or {}).get("grade_id") or cell.get("id") or \
            f"code cell {i + 1}"
        source = cell.get("source", "")
        out.append((str(label), "".join(source) if isinstance(source, list) else source))
    return out


def step_sources(lesson, cells) -> dict:
    """{step cell id: source} of the lesson's step cells among ``cells`` [(label, source)]
    (the last cell of each label counts, as nbgrader reads a notebook)."""
    found = dict(cells)
    return {s.cell: found[s.cell] for s in lesson.steps if isinstance(found.get(s.cell), str)}


def setup_sources(lesson, cells) -> list[str] | None:
    """The lesson's set-up cells' sources among ``cells``, or None when one is missing."""
    found = dict(cells)
    if not all(isinstance(found.get(c), str) for c in lesson.setup_cells):
        return None
    return [found[c] for c in lesson.setup_cells]


def _bound(source: str) -> set:
    """Top-level names a cell's source binds (assignments, defs, imports, for targets)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    names = set()
    for node in tree.body:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                names.add(sub.id)
            elif isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(sub.name)
            elif isinstance(sub, (ast.Import, ast.ImportFrom)):
                names.update((a.asname or a.name).split(".")[0] for a in sub.names)
            if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                break  # (names bound inside a function are its own)
    return names


def _where_made(lesson, name: str, step, cells) -> str:
    """Which other cell binds ``name`` ("Cell 4's cell", "the cell `scale = ...`"), or ""."""
    numbers = {s.cell: s.number for s in lesson.steps}
    for label, source in cells:
        if label == step.cell or name not in _bound(source):
            continue
        if label in numbers:
            return f"Cell {numbers[label]}'s cell"
        line = next((ln.strip() for ln in source.splitlines()
                     if re.match(rf"\s*{re.escape(name)}\b", ln)), "")
        return f"another cell (`{line[:60]}`)" if line else "another cell"
    return ""


def _replay_only(lesson, step, data: dict, cells) -> None:
    """Words a fact that holds only when the cell runs on its own as such: a NameError for
    a name another cell makes (the kernel, where that cell ran, knew it)."""
    raised = _Reader(data).strings("cell.raised")
    m = re.match(r"NameError: name '(\w+)' is not defined", raised[0]) if raised else None
    where = _where_made(lesson, m.group(1), step, cells) if m else ""
    if where:
        data["replay.made_elsewhere"] = np.array([m.group(1), where], dtype=str)


def judge_as_graded(grade_id, data, own=None, *, strict=True) -> Summary:
    """``judge_replay``'s Summary in the form grading receives it: through the JSON the
    judging child sends (src/grading.py, ``judge_isolated``). A verdict that cannot cross
    that pipe fails on every road, not only in grading."""
    out = judge_replay(grade_id, data, own, strict=strict).to_dict(values=True)
    return Summary.from_dict(json.loads(json.dumps(out)))


def verdicts(lesson, sources: dict, replay: Callable[[dict], dict], *,
             cells=(), only=None, judge: Callable = judge_as_graded) -> Verdicts:
    """The verdict of every check cell of ``lesson`` (or of those of the step cells
    ``only``) on the step cells' ``sources`` {step cell id: source}.

    ``replay(steps)`` answers {step cell id: data or why none, "own:"+id: data} for
    {step cell id: source} (``src/replay.py``: the fork server's :meth:`replay`, or
    :func:`replay_in_process`). ``cells`` [(label, source)]: every code cell of the
    notebook, to say where a name the replay missed is made. ``judge(test id, data,
    own, strict=True)`` gives a Summary (by default :func:`judge_as_graded`; grading
    passes one that runs it in a child with its own limits). Every verdict is the
    graded run's (strict): what a student sees while working is what grading decides.
    """
    steps = [s for s in lesson.steps if only is None or s.cell in only]
    answer = replay({s: src for s, src in sources.items() if s in lesson.by_cell})
    out = Verdicts(lesson, {})
    for step in steps:
        data = answer.get(step.cell)
        if step.cell not in sources:
            data = f"the notebook has no cell with grade_id {step.cell}"
        if isinstance(data, dict):
            _replay_only(lesson, step, data, cells)
            summary = judge(step.test, data, answer.get("own:" + step.cell), strict=True)
            raised = _Reader(data).strings("cell.raised")
            if raised:
                name, _, message = raised[0].partition(": ")
                out.raised.append([step.cell, name, message])
            if "variant.seed" in data:
                out.seeds[step.test] = str(data["variant.seed"])
        else:
            why = data or "no answer"
            summary = Summary([_failed(c, f"Not judged: {why}.") for c in step.checks])
        out.summaries[step.test] = summary
    return out
