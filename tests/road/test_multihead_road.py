"""Lesson 2's corpus down both roads: the live check in a real kernel, and grading.

Each attempt of tests/corpus_multihead.py is saved as the student's multihead.ipynb and
run in a real kernel as JupyterLab runs it (cell ids in the execute requests); its check
cells' points and first lines must equal grading's on the saved notebook (the sandboxed
replay server, the judge in a child), as tests/road/test_corpora.py does for lesson 1.
``make test-road``; a few attempts run in ``make test`` (tests/test_multihead.py).
"""

from __future__ import annotations

import copy
import time

import nbformat
import pytest

from src import grading, lessons, sandbox
from tests import corpus_multihead as corpus
from tests.lab_kernel import LabKernel, results_of, write_notebook
from tests.notebook_utils import load

SPEC = lessons.lesson("multihead")
RELEASE = load(corpus.RELEASE)  # the student's notebook as released


def notebook(sources: dict) -> dict:
    """The released notebook with the step cells' ``sources``."""
    nb = copy.deepcopy(RELEASE)
    for cell in nb["cells"]:
        if cell.get("id") in sources and cell["id"] in SPEC.by_cell:
            cell["source"] = sources[cell["id"]]
    return nb


def both_roads(kernel, nb) -> tuple[dict, dict]:
    """({check cell: [(points, first line)]} live in ``kernel``, the same from grading)."""
    write_notebook(kernel.folder / f"{SPEC.notebook}.ipynb", nb)
    kernel.run("%reset -f")  # a fresh student: nothing left from the one before
    live, last = {}, SPEC.steps[-1].test
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        shown = kernel.run(src, cell["id"])
        if cell["id"] in SPEC.by_test:
            live[cell["id"]] = results_of(shown)
        if cell["id"] == last:
            break
    found = grading.grade_notebook(nbformat.from_dict(copy.deepcopy(nb)), SPEC.name)
    graded = {test: [(r.score, r.message.partition("\n")[0]) for r in s.results]
              for test, s in found.summaries.items()}
    return live, graded


@pytest.mark.road
@pytest.mark.filterwarnings("ignore")
@pytest.mark.skipif(sandbox.unavailable_reason() is not None,
                    reason=f"no sandbox here: {sandbox.unavailable_reason()}")
def test_every_lesson_2_attempt_gets_the_same_points_and_first_lines_on_both_roads(
        tmp_path, record_property):
    kernel = LabKernel(tmp_path, f"{SPEC.notebook}.ipynb")
    differ, started = [], time.monotonic()
    try:
        for a in corpus.ATTEMPTS:
            live, graded = both_roads(kernel, notebook(corpus.sources(a)))
            differ += [(a.name, t, live.get(t), graded[t]) for t in graded
                       if live.get(t) != graded[t]]
    finally:
        kernel.close()
        grading.close_replay_servers()
    record_property("lesson 2 road figure", f"{len(corpus.ATTEMPTS)} attempts, "
                    f"{len(differ)} differ, {time.monotonic() - started:.0f} s")
    assert differ == [], differ[:5]
