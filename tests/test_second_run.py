"""The second run's inputs are a fresh random draw for every submission: a right cell
must stay right whatever the draw (no verdict may depend on which sentence was drawn).

Every right Cells 4, 5 and 7 of the corpus (its correct alternatives and the reference)
is replayed with several seeds spread over the whole 63-bit range, judged strictly.
"""

import numpy as np
import pytest

import verify
from src import replay
from tests import corpus

#: Seeds spread over the range grading draws from (src/replay.py, draw_seed).
SEEDS = [int(s) >> 1 for s in np.random.SeedSequence(20261125).generate_state(12, np.uint64)]
RIGHT = [a for a in corpus.ATTEMPTS if a.correct]


@pytest.mark.parametrize("step", [s.cell for s in verify.LESSON.steps if s.variant])
def test_a_right_cell_keeps_its_points_whatever_the_second_run_draws(step):
    gid = verify.LESSON.by_cell[step].test
    setup = corpus.release_setup()
    codes = {corpus.sources(a)[step] for a in RIGHT}
    assert len(codes) >= 5
    lost = []
    for code in sorted(codes):
        for seed in SEEDS:
            data = replay.replay_step(verify.LESSON, step, code, setup, None, seed)
            assert "variant.in.x" in data
            s = verify.judge_replay(gid, data, strict=True)
            if s.score != s.max_score:
                lost.append((seed, code[-120:], s.results[0].message[:160]))
    assert lost == []
