"""Checks for the course's notebooks that name the mistake and say what to do next.

One check per graded part of each lesson, made from the lesson's spec
(``src/lessons/<name>.py``), each with its cell's names as arguments. Lesson 1,
lesson.ipynb (``src/lessons/attention.py``):

- ``check_projections(query, key, value)``                       Cell 4
- ``check_attention_scores(query, key, attention_scores)``       Cell 5
- ``check_softmax(softmax)``  probes your softmax function        Cell 6
- ``check_attention_weights(attention_scores, attention_weights)``  Cell 6
- ``check_attended_values(attention_weights, value, attended_values)``  Cell 7
- ``check_all(globals())``  a summary of every step, from the names as they are

Lesson 2, multihead.ipynb (``src/lessons/multihead.py``): ``check_split_heads``,
``check_head_scores``, ``check_head_weights``, ``check_head_outputs`` and
``check_multihead_output``, Cells 4-7 (``check_all(globals(), lesson="multihead")``).

Each returns a :class:`CheckResult` (passed, score, max_score, message) that
prints as plain text, renders as Markdown in Jupyter, and is truthy only
when the step passed, so ``assert check_...(...)`` works in a test cell.

How a step is judged (docs/internals.md, "How the checks judge"): the code last run in
the step cell itself is replayed (``src/replay.py``) on the release's set-up
and the reference tensors of the steps before it, and what it computes is
judged, on the one road every verdict takes (``src/road.py``): the check cell
in the notebook, ``python verify.py NOTEBOOK``, nbgrader's Validate and
autograding give the same points and the same words. Called outside a kernel
(a script, a test) with other tensors, a check judges the tensors as given.
An earlier slip is charged once, in its own cell.

This file is the face of the checks; each concern has its own module:

- ``src/lessons/``             the lessons' specs: names, shapes, points, mistakes
- ``src/road.py``              sources in, verdicts out
- ``src/live.py``              the live check in the student's kernel
- ``src/checks/observe.py``    where student code runs: live objects to plain data
- ``src/checks/judge.py``      the trusted judge: results from that data only
- ``src/checks/results.py``    CheckResult and Summary, the messages' form
- ``src/checks/runner.py``     ``python verify.py NOTEBOOK [--json]``

Importing this module is cheap (NumPy only): no torch, nbformat or nbclient
on the student's path. Shape legend: B = 1 batch, L = S = 6 tokens,
d_k = d_model = 64.
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # src/ is importable wherever verify.py is run from
    sys.path.insert(0, str(HERE))

# What tests, the grader and course authors read through verify (one place each: the
# module named).
from src import lessons  # noqa: E402
from src.checks.judge import judge, judge_replay  # noqa: E402
from src.checks.observe import _Lookup, _observe_checks, observe  # noqa: E402
from src.checks.results import (  # noqa: E402
    EVIDENCE_CHARS,
    FIRST_LINE_CHARS,
    CheckResult,
    Points,
    Summary,
)
from src.checks.runner import main, run_notebook  # noqa: E402
from src.checks.util import INFO_FIELDS, LIMITS  # noqa: E402
from src.lessons.attention import compare_with_torch_softmax  # noqa: E402
from src.spec import Mistake  # noqa: E402

#: Lesson 1's spec and facts (old callers know one lesson; each check reads its own).
LESSON = lessons.lesson()
MISTAKES = LESSON.mistakes
GRADE_CELLS = LESSON.grade_cells
POINTS = LESSON.points
NAMES = LESSON.checks
SHAPES = LESSON.shapes
STEP_CELLS = {s.test: s.cell for s in LESSON.steps}
GRADE_CELL_OF = {c.name: s.test for s in LESSON.steps for c in s.checks}

__all__ = [
    "EVIDENCE_CHARS", "FIRST_LINE_CHARS", "GRADE_CELL_OF", "GRADE_CELLS", "INFO_FIELDS",
    "LESSON", "LIMITS", "MISTAKES", "NAMES", "POINTS", "SHAPES", "STEP_CELLS", "CheckResult",
    "Mistake", "Points", "Summary", "check_all", "compare_with_torch_softmax", "judge",
    "judge_replay", "main", "observe", "run_notebook", "show",
    *(f"check_{name}" for spec in lessons.LESSONS.values() for name in spec.checks),
]


# ------------------------------------------------------------ public checks
def _check(check, objects):
    """The result of ``check`` (a spec's Check) for the names in ``objects``."""
    lesson, _ = lessons.by_check(check.name)
    step = lesson.step_of_check[check.name]
    verdict = _live(lesson, step, objects, optional=check.arguments[1])
    if verdict is None:  # no kernel, or not the notebook's names: the tensors as given
        data = _observe_checks(lesson, [check], _Lookup(objects))
        return judge(step.test, data, strict=True, checks=(check.name,)).results[0]
    summary = verdict.summaries[step.test]
    return summary.results[[c.name for c in step.checks].index(check.name)]


def _live(lesson, step, objects, optional=()):
    """In a Jupyter kernel, when the check is given the names the notebook holds (as the
    check cells do): the road's verdict on the code last run in the step cell. None
    outside IPython, or for objects the notebook's names do not hold (a None given for a
    name the notebook holds a tensor under among them; an ``optional`` one left out is
    fine)."""
    try:
        ipython = sys.modules.get("IPython")
        shell = ipython.get_ipython() if ipython is not None else None
        if shell is None or any((obj is not None or name not in optional)
                                and shell.user_ns.get(name) is not obj
                                for name, obj in objects.items()):
            return None
        from src import live

        return live.live_verdict(lesson, step, shell)
    except Exception:  # noqa: BLE001  (fall back to the tensors as given)
        return None


def _make_check(check):
    """verify.check_<name>: the public check of ``check``, its parameters the check's
    inputs and outputs (then its extras, keyword-only, and ``strict``)."""
    positional, extras = check.arguments

    def run(*args, **kwargs):
        bound = run.__signature__.bind(*args, **kwargs)
        bound.apply_defaults()
        objects = {n: bound.arguments[n] for n in positional + extras}
        return _check(check, objects)

    params = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD)
              for n in positional]
    params += [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=None)
               for n in extras]
    # (kept for old callers: every check judges as the graded run does)
    params.append(inspect.Parameter("strict", inspect.Parameter.KEYWORD_ONLY, default=True))
    run.__signature__ = inspect.Signature(params, return_annotation=CheckResult)
    run.__name__ = run.__qualname__ = f"check_{check.name}"
    run.__doc__ = check.doc
    run.__module__ = __name__
    return run


for _spec in lessons.LESSONS.values():  # (check names are unique across the course)
    for _c in _spec.checks.values():
        globals()[f"check_{_c.name}"] = _make_check(_c)


def check_all(namespace=None, *, lesson: str = LESSON.name, **tensors) -> Summary:
    """Every step's check of ``lesson`` (lesson 1 unless named), from a namespace such as
    ``globals()`` or keywords.

    It judges the names as they are now (not a replay of the cells);
    ``python verify.py NOTEBOOK`` replays the notebook's step cells as grading
    does. Shape legend (lesson 1): query, key, value [1, 6, 64]; attention_scores,
    attention_weights [1, 6, 6]; attended_values [1, 6, 64]; lesson 2's in its spec.
    """
    ns = dict(namespace or {})
    ns.update(tensors)
    results = []
    for step in lessons.lesson(lesson).steps:
        results += judge(step.test, observe(step.test, ns), strict=True).results
    return Summary(results)


def show(*results) -> None:
    """Display check results as a check cell does: each result, then each heatmap the
    lesson draws of the values they read (``Step.figures``), with its text table. The
    feedback of a graded notebook draws the same figures from the graded results."""
    from IPython.display import display

    from src import visualizations as viz

    display(*results)
    lesson = next((spec for spec, _ in map(lessons.by_check, (r.step for r in results))
                   if spec is not None), LESSON)
    for fig in viz.check_figures(lesson, results):
        viz.show_png(viz.figure_png(fig), fig["alt"])
        print(fig["table"])


def _install_live_check():
    """In a Jupyter kernel, record from now on what each cell runs (src/live.py)."""
    if "IPython" in sys.modules:
        try:
            from src import live

            live.install()
        except Exception:  # noqa: BLE001  (the checks then judge the names as given)
            pass


_install_live_check()

if __name__ == "__main__":
    sys.exit(main())
