"""Checks for lesson.ipynb that name the mistake and say what to do next.

One check per step of the lesson:

- ``check_projections(query, key, value)``                       Cell 4
- ``check_attention_scores(query, key, attention_scores)``       Cell 5
- ``check_softmax(softmax)``  probes your softmax function        Cell 6
- ``check_attention_weights(attention_scores, attention_weights)``  Cell 6
- ``check_attended_values(attention_weights, value, attended_values)``  Cell 7
- ``check_all(globals())``  a summary of every step

Each returns a :class:`CheckResult` (passed, score, max_score, message) that
prints as plain text, renders as Markdown in Jupyter, and is truthy only
when the step passed, so ``assert check_...(...)`` works in a test cell.

How a step is judged (README, "How the checks judge"): the step cell's own
code is replayed (``src/replay.py``) on the release's set-up cells and the
reference tensors of the steps before it, and what it computes is judged.
A check called in the notebook with the notebook's own names does exactly
what grading does; called with other tensors (a script, a test), it judges
the tensors as given. An earlier slip is charged once, in its own cell.

This file is the face of the checks; each concern has its own module:

- ``src/checks/lesson.py``     names, shapes, points, tolerances, the reference
- ``src/checks/catalogue.py``  the mistakes, one entry each, read top to bottom
- ``src/checks/observe.py``    the kernel side: live objects to plain data
- ``src/checks/judge.py``      the trusted judge: results from that data only
- ``src/checks/results.py``    CheckResult and Summary, the messages' form
- ``src/checks/runner.py``     ``python verify.py NOTEBOOK [--json] [--strict]``

Importing this module is cheap (NumPy only): no torch, nbformat or nbclient
on the student's path. Shape legend: B = 1 batch, L = S = 6 tokens,
d_k = d_model = 64.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # src/ is importable wherever verify.py is run from
    sys.path.insert(0, str(HERE))

# What tests, the grader and course authors read through verify (one place each: the
# module named).
from src.checks.catalogue import MISTAKES, Mistake  # noqa: E402
from src.checks.judge import _judge_step, _Reader, judge, judge_replay  # noqa: E402
from src.checks.lesson import (  # noqa: E402
    GRADE_CELL_OF,
    GRADE_CELLS,
    LIMITS,
    NAMES,
    POINTS,
    SHAPES,
    STEP_CELLS,
    _softmax,
)
from src.checks.observe import INFO_FIELDS, _Lookup, _observe_steps, export, observe  # noqa: E402
from src.checks.results import (  # noqa: E402
    EVIDENCE_CHARS,
    FIRST_LINE_CHARS,
    CheckResult,
    Points,
    Summary,
)
from src.checks.runner import main, run_notebook  # noqa: E402

__all__ = [
    "EVIDENCE_CHARS", "FIRST_LINE_CHARS", "GRADE_CELL_OF", "GRADE_CELLS", "INFO_FIELDS",
    "LIMITS", "MISTAKES", "NAMES", "POINTS", "SHAPES", "STEP_CELLS", "CheckResult", "Mistake",
    "Points", "Summary", "check_all", "check_attended_values", "check_attention_scores",
    "check_attention_weights", "check_projections", "check_softmax",
    "compare_with_torch_softmax", "export", "judge", "judge_replay", "main", "observe",
    "run_notebook",
]


# ------------------------------------------------------------ public checks
def _check(step, objects, strict):
    grade_id = GRADE_CELL_OF[step]
    live = _live_replay(grade_id, objects)
    if live is None:  # no kernel history (a script, a test): the tensors as given
        data = _observe_steps(grade_id, [step], _Lookup(objects))
        return _judge_step(step, data, grade_id, strict)
    summary = judge_replay(grade_id, *live, strict=strict)
    return summary.results[list(GRADE_CELLS[grade_id]).index(step)]


_LAST_REPLAY: dict = {}  # the last live replay: Cell 6's two checks share one


def _live_replay(grade_id, objects):
    """In a Jupyter kernel, when the check is given the names the notebook holds (as the
    test cells do): the replay (src/replay.py) of the step cell's code, found in the
    kernel's input history, exactly as grading runs it. None outside IPython, before the
    set-up cells ran, or for tensors the notebook's names do not hold."""
    try:
        ipython = sys.modules.get("IPython")
        shell = ipython.get_ipython() if ipython is not None else None
        if shell is None or any(obj is not None and shell.user_ns.get(name) is not obj
                                for name, obj in objects.items()):
            return None
        from src import replay

        step = STEP_CELLS[grade_id]
        setup = replay.live_setup(shell.user_ns)
        source = replay.source_in_history(step, shell.user_ns.get("In") or [])
        if setup is None or source is None:
            return None
        key = (grade_id, source, len(shell.user_ns.get("In") or []))
        if _LAST_REPLAY.get("key") != key:
            own = replay.own_upstream(shell.user_ns)
            data = replay.replay_step(step, source, setup)
            again = None if step == "cell4_projections" or replay.same_as_reference(
                own, setup, step) else replay.replay_step(step, source, setup, own)
            _LAST_REPLAY.update(key=key, data=(data, again))
        return _LAST_REPLAY["data"]
    except Exception:  # noqa: BLE001  (fall back to the tensors as given)
        return None


def check_projections(query, key, value, *, strict=False) -> CheckResult:
    """Cell 4: query, key, value == q_proj(x), k_proj(x), v_proj(x), each [1, 6, 64]."""
    return _check("projections", {"query": query, "key": key, "value": value}, strict)


def check_attention_scores(query, key, attention_scores, *, strict=False) -> CheckResult:
    """Cell 5: attention_scores == query @ keyᵀ / √d_k: [1, 6, 64] x2 -> [1, 6, 6]."""
    return _check("attention_scores", {"query": query, "key": key,
                                       "attention_scores": attention_scores}, strict)


def check_attention_weights(attention_scores, attention_weights, *, strict=False) -> CheckResult:
    """Cell 6: attention_weights == softmax(attention_scores, dim=-1): [1, 6, 6] -> [1, 6, 6]."""
    return _check("attention_weights", {"attention_scores": attention_scores,
                                        "attention_weights": attention_weights}, strict)


def check_attended_values(attention_weights, value, attended_values, *, attention_scores=None,
                          query=None, key=None, strict=False) -> CheckResult:
    """Cell 7: attended_values == attention_weights @ value: [1, 6, 6] @ [1, 6, 64] -> [1, 6, 64].

    Passing ``attention_scores``, ``query`` and ``key`` as well lets the
    check recognise them used in place of the weights or the values.
    """
    return _check("attended_values", {
        "attention_weights": attention_weights, "value": value,
        "attended_values": attended_values, "attention_scores": attention_scores,
        "query": query, "key": key}, strict)


def check_softmax(softmax, *, strict=False) -> CheckResult:
    """Cell 6: probe your softmax function itself, ``softmax(x, dim=...)``.

    It is called on fixed inputs (:func:`_probes`): ordinary rows, rows whose
    maxima are far apart, logits of ±1e4, -inf entries, a row that is
    entirely -inf (it must give zeros: a shortfall of half the point
    otherwise), and dims 0, 1, -1 and -2. It must be built from torch.exp
    (calling a built-in softmax is named), return a real dense float tensor
    of x's shape and leave x unchanged. Shape legend: x of any shape.
    """
    return _check("softmax", {"softmax": softmax}, strict)


def check_all(namespace=None, **tensors) -> Summary:
    """Every step's check, from a namespace such as ``globals()`` or keywords.

    It sees the names as they are now; ``python verify.py NOTEBOOK`` instead
    reports what each test cell saw when it ran. Shape legend: query, key, value
    [1, 6, 64]; attention_scores, attention_weights [1, 6, 6]; attended_values
    [1, 6, 64].
    """
    ns = dict(namespace or {})
    ns.update(tensors)
    results = []
    for grade_id, steps in GRADE_CELLS.items():
        results += judge(grade_id, observe(grade_id, ns)).results
    return Summary(results)


def compare_with_torch_softmax(attention_scores, attention_weights) -> str:
    """Cell 6's quick look: do the rows sum to 1, and is it torch.softmax of the scores?

    Works for any inputs (compared in float64); never raises.
    Shape legend: both [1, 6, 6] (batch, query, key).
    """
    data = _observe_steps("cell6_softmax_test", ["attention_weights"],
                          _Lookup({"attention_scores": attention_scores,
                                   "attention_weights": attention_weights}))
    r = _Reader(data)
    w, s = r.tensor("attention_weights").real, r.tensor("attention_scores").real
    if w is None or w.ndim == 0:
        return "rows sum to 1: (attention_weights is not a tensor of real numbers yet)"
    with np.errstate(all="ignore"):
        rows = bool(np.allclose(w.sum(-1), 1.0, atol=1e-5))
        lines = [f"rows sum to 1: {rows}"]
        if s is None or s.shape != w.shape:
            lines.append("same as torch.softmax: (needs attention_scores of the same shape)")
        else:
            try:
                import torch

                ref = torch.softmax(torch.from_numpy(s), dim=-1).numpy()
            except Exception:  # noqa: BLE001
                ref = _softmax(s)
            lines.append(f"same as torch.softmax: {bool(np.allclose(w, ref, atol=1e-6))}")
    return "\n".join(lines)




if __name__ == "__main__":
    sys.exit(main())
