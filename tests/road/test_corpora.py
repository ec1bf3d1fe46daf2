"""Every attempt of the corpora down both roads: the live check in a real kernel, and grading.

Each attempt (tests/corpus.py, every spelling; every blind set, tests/blind/) is
saved as the student's notebook and run in a real kernel as JupyterLab runs it
(cell ids in the execute requests); its check cells' points and first lines must
equal grading's on the saved notebook (the sandboxed replay server, the judge in a
child). ``make test-road`` (a few minutes); the situations of tests/test_road.py
run in ``make test``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

import verify
from tests import corpus
from tests.blind.evaluate import CELL
from tests.test_road import code_cells, graded, live, notebook

pytestmark = [pytest.mark.road, pytest.mark.filterwarnings("ignore")]
SPEC = verify.LESSON
BLIND = Path(__file__).resolve().parent.parent / "blind"


def attempts():
    """[(name, {step cell id: source})] of every attempt of the corpora."""
    out = [(f"corpus: {a.name}", {c: s for c, s in corpus.sources(a).items()
                                  if c in SPEC.by_cell}) for a in corpus.ATTEMPTS]
    for path in sorted(BLIND.glob("attempts*.json")):
        for a in json.loads(path.read_text(encoding="utf-8")):
            out.append((f"{path.stem}: {a['id']}",
                        {CELL[n]: src for n, src in a["cells"].items()}))
    return out


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    from tests.lab_kernel import LabKernel

    k = LabKernel(tmp_path_factory.mktemp("student"))
    yield k
    k.close()


#: The attempts are dealt into this many shards, so that `make test-road`'s workers (one
#: kernel each, pytest -n 2) share them: every attempt still runs alone in its kernel.
SHARDS = 4


def test_the_shards_hold_every_attempt_once():
    items = attempts()
    assert len(items) >= 400
    dealt = [name for k in range(SHARDS) for name, _ in items[k::SHARDS]]
    assert sorted(dealt) == sorted(name for name, _ in items)


@pytest.mark.parametrize("shard", range(SHARDS))
def test_every_attempt_gets_the_same_points_and_first_lines_on_both_roads(kernel, shard,
                                                                           record_property):
    items = attempts()[shard::SHARDS]
    differ, started = [], time.monotonic()
    for name, sources in items:
        nb = notebook(sources)
        kernel.run("%reset -f")  # a fresh student: nothing left from the one before
        runs = [(c, s) for c, s in code_cells(nb)]
        got, want = live(kernel, nb, runs=runs[:runs.index(
            next(r for r in runs if r[0] == SPEC.steps[-1].test)) + 1]), graded(nb)
        for test in want:
            if got.get(test) != want[test]:
                differ.append((name, test, got.get(test), want[test]))
    seconds = time.monotonic() - started
    record_property("road figure", f"shard {shard + 1} of {SHARDS}: {len(items)} attempts, "
                                   f"{len(differ)} differ, {seconds:.0f} s")
    assert differ == [], differ[:5]
