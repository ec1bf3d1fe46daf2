"""One road to a verdict: the live check in a real kernel and grading agree.

A real IPython kernel runs the student's cells as JupyterLab runs them (each
execute request carries the cell's id) or as nbclient does (none); its check
cells' points and first lines are compared with grading's on the saved
notebook (src/grading.py: the sandboxed replay server, the judge in a child).
The situations a newcomer meets: the untouched lesson, code typed into a new
cell, a name made in another cell, a cell edited after it ran, a cell run
twice, and right and wrong attempts (the whole corpora: ``make test-road``).
"""

from __future__ import annotations

import copy
import json

import pytest

import verify
from src import grading, road, sandbox
from tests.lab_kernel import LabKernel, results_of, write_notebook
from tests.notebook_utils import LESSON, SOURCE, load

pytestmark = [pytest.mark.filterwarnings("ignore"),
              pytest.mark.skipif(sandbox.unavailable_reason() is not None,
                                 reason=f"no sandbox here: {sandbox.unavailable_reason()}")]
SPEC = verify.LESSON
RELEASE = load(LESSON)  # the student's notebook as released
STEP_OF_CELL = {s.cell: s for s in SPEC.steps}


def solved() -> dict:
    """{step cell id: the reference solution as a student leaves it}."""
    from tests.cohort.build import solved_sources

    return solved_sources()


def notebook(sources: dict, extra: list | None = None) -> dict:
    """The released notebook with the step cells' ``sources``; ``extra`` [(after cell id,
    new cell id, source)] adds code cells (a student's scratch cells)."""
    nb = copy.deepcopy(RELEASE)
    for cell in nb["cells"]:
        if cell.get("id") in sources:
            cell["source"] = sources[cell["id"]]
    for after, cid, src in extra or []:
        at = next(i for i, c in enumerate(nb["cells"]) if c.get("id") == after)
        nb["cells"].insert(at + 1, {"cell_type": "code", "id": cid, "metadata": {},
                                    "source": src, "outputs": [], "execution_count": None})
    return nb


def code_cells(nb):
    return [(c["id"], "".join(c["source"]) if isinstance(c["source"], list) else c["source"])
            for c in nb["cells"] if c["cell_type"] == "code"]


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    k = LabKernel(tmp_path_factory.mktemp("student"))
    yield k
    k.close()


def live(kernel, nb, runs=None, ids=True) -> dict:
    """Save ``nb``, run its cells up to the last check cell (or the ``runs`` [(cell id,
    source)] given) in ``kernel``, and return {check cell id: [(points, first line)]}."""
    write_notebook(kernel.folder / "lesson.ipynb", nb)
    out = {}
    last = SPEC.steps[-1].test
    for cid, src in runs or code_cells(nb):
        shown = kernel.run(src, cid if ids else None)
        if cid in SPEC.by_test:
            out[cid] = results_of(shown)
            out[cid + ":notes"] = "\n".join(shown["texts"])
        if cid == last and runs is None:
            break
    return out


def graded(nb) -> dict:
    """{check cell id: [(points, first line)]} as autograding gives them."""
    found = grading.grade_notebook(_node(nb))
    return {test: [(r.score, r.message.partition("\n")[0]) for r in s.results]
            for test, s in found.summaries.items()}


def _node(nb):
    import nbformat

    return nbformat.from_dict(copy.deepcopy(nb))


def same(live_out, graded_out):
    for test in graded_out:
        assert live_out[test] == graded_out[test], (test, live_out[test], graded_out[test])


def test_the_untouched_lesson_says_the_truth(kernel):
    got = live(kernel, RELEASE)
    same(got, graded(RELEASE))
    first = got["cell4_projections_test"][0]
    assert first[0] == 0.0 and "still holds its stub" in first[1]
    assert "never assigns" not in json.dumps(got)


def test_a_solved_lesson_gets_full_marks_on_both_roads_with_or_without_cell_ids(kernel):
    nb = notebook(solved())
    for ids in (True, False):  # JupyterLab, then nbclient (nbval, Validate): the file
        got = live(kernel, nb, ids=ids)
        same(got, graded(nb))
        assert sum(p for t in SPEC.by_test for p, _ in got[t]) == SPEC.max_score


def test_code_in_a_new_cell_does_not_count_and_the_check_says_where_to_move_it(kernel):
    cell4 = solved()["cell4_projections"]
    nb = notebook({}, extra=[("cell4_projections", "scratch-1", cell4)])
    got = live(kernel, nb)
    same(got, graded(nb))
    assert got["cell4_projections_test"][0][0] == 0.0
    notes = got["cell4_projections_test:notes"]
    assert "Code run in another cell" in notes and "Move that code into Cell 4" in notes


def test_a_name_made_in_another_cell_is_worded_as_the_replay_sees_it(kernel):
    sources = solved()
    sources["cell4_projections"] += "\nscale = 1 / math.sqrt(d_k)\n"
    sources["cell5_scores"] = ("attention_scores = query @ key.transpose(-2, -1) * scale\n")
    nb = notebook(sources)
    got = live(kernel, nb)
    same(got, graded(nb))
    found = grading.grade_notebook(_node(nb)).summaries["cell5_scores_test"].results[0]
    assert "run again on its own" in found.message and "Cell 4's cell" in found.message
    assert "run again on its own" in got["cell5_scores_test:notes"]


def test_a_cell_edited_after_it_ran(kernel):
    sources = solved()
    wrong = sources["cell5_scores"].replace("/ math.sqrt(d_k)", "")
    assert wrong != sources["cell5_scores"]
    nb = notebook(sources)
    cells = code_cells(nb)
    runs = [(c, wrong if c == "cell5_scores" else s) for c, s in cells]  # ran the wrong one
    got = live(kernel, nb, runs=runs)  # ... and saved the right one, not run again
    assert got["cell5_scores_test"][0][0] == 0.0  # the check judged what ran
    assert "holds other code than the code that last ran" in got["cell5_scores_test:notes"]
    again = runs + [("cell5_scores", sources["cell5_scores"]),  # run again: both agree
                    ("cell5_scores_test", dict(cells)["cell5_scores_test"])]
    got = live(kernel, nb, runs=again)
    assert got["cell5_scores_test"] == graded(nb)["cell5_scores_test"]
    assert "holds other code" not in got["cell5_scores_test:notes"]


def test_the_saved_code_note_follows_the_file_at_every_check(kernel):
    """Saved with other code than ran: said at once; saved back: gone at once."""
    sources = solved()
    nb = notebook(sources)
    live(kernel, nb)  # everything run and saved as run
    test = dict(code_cells(nb))["cell5_scores_test"]
    wrong = dict(sources, cell5_scores=sources["cell5_scores"].replace("/ math.sqrt(d_k)", ""))
    write_notebook(kernel.folder / "lesson.ipynb", notebook(wrong))  # edited, saved, not run
    shown = "\n".join(kernel.run(test, "cell5_scores_test")["texts"])
    assert "holds other code than the code that last ran" in shown
    write_notebook(kernel.folder / "lesson.ipynb", nb)  # the edit undone and saved
    shown = "\n".join(kernel.run(test, "cell5_scores_test")["texts"])
    assert "holds other code" not in shown


def test_after_a_restart_the_checks_judge_the_saved_notebook(kernel):
    nb = notebook(solved())
    write_notebook(kernel.folder / "lesson.ipynb", nb)
    kernel.restart()
    cells = code_cells(nb)
    runs = [(c, s) for c, s in cells if c in SPEC.setup_cells or c in SPEC.by_test]
    got = live(kernel, nb, runs=runs)  # only the set-up and the check cells
    same(got, graded(nb))
    assert "has not run in this kernel yet" in got["cell7_values_test:notes"]


def test_a_cell_that_raised_in_the_kernel_but_not_when_replayed_says_so(kernel):
    nb = notebook(solved())
    cells = code_cells(nb)
    kernel.restart()
    runs = [(c, s) for c, s in cells if c not in ("cell4_projections",)]  # Cell 4 skipped
    got = live(kernel, nb, runs=runs)
    assert got["cell5_scores_test"][0][0] == 2.0  # its own code is right
    notes = got["cell5_scores_test:notes"]
    assert "In your kernel, Cell 5 raised" in notes and "Run the cells above it" in notes


def test_another_step_cell_rebinding_a_name_is_not_code_moved_away(kernel):
    sources = solved()
    sources["cell5_scores"] = ("query = query / math.sqrt(d_k)\n"
                               "attention_scores = query @ key.transpose(-2, -1)\n")
    nb = notebook(sources)
    cells = code_cells(nb)
    runs = cells + [("cell4_projections_test", dict(cells)["cell4_projections_test"])]
    got = live(kernel, nb, runs=runs)
    assert "Code run in another cell" not in got["cell4_projections_test:notes"]
    assert "differs from the reference" not in got["cell5_scores_test:notes"]


def test_a_cell_run_twice_is_judged_once(kernel):
    sources = solved()
    sources["cell5_scores"] = ("query = query / math.sqrt(d_k)  # runs twice: twice as small\n"
                               "attention_scores = query @ key.transpose(-2, -1)\n")
    nb = notebook(sources)
    cells = code_cells(nb)
    at = next(i for i, (c, _) in enumerate(cells) if c == "cell5_scores")
    runs = cells[:at + 1] + [cells[at]] + cells[at + 1:]
    got = live(kernel, nb, runs=runs)
    same(got, graded(nb))


@pytest.mark.parametrize("name", ["no_scaling", "exp_without_normalising",
                                  "missing_bias", "elementwise_scores"])
def test_wrong_attempts_agree(kernel, name):
    from tests.catalogue import CATALOGUE

    (_, edits, _, _), = [c for c in CATALOGUE if c[0] == name]
    sources = solved()
    for cid, pairs in edits.items():
        for old, new in pairs:
            sources[cid] = sources[cid].replace(old, new)
    nb = notebook(sources)
    same(live(kernel, nb), graded(nb))


def test_the_road_is_the_only_road():
    """verify.py NOTEBOOK and Validate (through src/validate.py's WarmReplay), grading and
    the live check all call src/road.py's verdicts."""
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    for path in ("src/validate.py", "src/grading.py", "src/live.py"):
        assert "road.verdicts(" in (root / path).read_text(), path
    for path in ("src/checks/runner.py", "attention_validate.py"):  # (through the worker)
        text = (root / path).read_text()
        assert "WarmReplay" in text or "src.validate" in text, path
    assert road.verdicts.__module__ == "src.road"
    assert SOURCE.exists()


def test_a_verdict_on_one_tensor_under_several_names_agrees(kernel):
    """The road's judge sends every verdict through grading's JSON form (src/road.py's
    judge_as_graded): a verdict that could not cross the judging child's pipe once earned
    0 in grading ("checking this data failed") while the live check named the mistake."""
    sources = solved()
    sources["cell4_projections"] = ("query = key = value = torch.zeros(1, 6, 64)\n")
    nb = notebook(sources)
    got, want = live(kernel, nb), graded(nb)
    same(got, want)
    assert "one tensor under several names" in want["cell4_projections_test"][0][1]
    assert road.verdicts.__kwdefaults__["judge"] is road.judge_as_graded
