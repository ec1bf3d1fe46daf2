"""No verdict depends on whether two floats are bitwise equal (exact ties).

The lesson's two "the" tokens have the same embedding, so two scores of every row are
equal in exact arithmetic; whether they are equal to the last bit depends on the CPU and
on how Cell 5 was written. At an exact tie, a correct softmax written with max or abs
(``exp(-|x - m|)``) splits its gradient between the tied entries differently from the
softmax's own Jacobian. Here every right Cell 6 spelling of the blind sets is run on the
lesson's scores forced to tie exactly, and on the same scores one ulp apart: the gradient
rule must give the same verdict on both (src/checks/util.py, tie_group_sums).

Shape legend: scores, weights, gradients [1, 6, 6] (batch, query, key).
"""

import numpy as np
import pytest
import torch

from src import replay
from src.checks.util import _softmax, output_gradient
from src.lessons import attention_diagnose as diag
from src.lessons.attention import LESSON
from src.lessons.attention import reference as _reference
from tests.blind import evaluate
from tests.corpus import release_setup

#: The lesson's columns that tie in exact arithmetic ("The" and "the").
TIED = (0, 4)


def _forced(scores, nudge):
    """The scores [1, 6, 6] (float32) with column 4 a bitwise copy of column 0, or one
    ulp above it."""
    s = np.array(scores, dtype=np.float32)
    s[..., TIED[1]] = s[..., TIED[0]]
    if nudge:
        s[..., TIED[1]] = np.nextafter(s[..., TIED[0]], np.float32(np.inf))
    return s


def _right_cell6_spellings():
    out = {}
    for name in ("attempts.json", "attempts2.json"):
        for a in evaluate.attempts(evaluate.HERE / name):
            if a["labels"].get("6", {}).get("correct") and "6" in a["cells"]:
                out.setdefault(a["cells"]["6"], f"{name}:{a['id']}")
    return sorted(out.items(), key=lambda kv: kv[1])


SPELLINGS = _right_cell6_spellings()
#: Written for this test: the spelling found tied on AVX-512, and one whose gradient is
#: really wrong (its denominator is detached), which must be charged at both.
ABS = ("def softmax(x, dim=-1):\n    m = x.amax(dim=dim, keepdim=True)\n"
       "    e = torch.exp(-torch.abs(x - m))\n    return e / e.sum(dim=dim, keepdim=True)\n"
       "attention_weights = softmax(attention_scores)\n")
DETACHED = ("def softmax(x, dim=-1):\n    e = torch.exp(x - x.amax(dim=dim, keepdim=True))\n"
            "    return e / e.sum(dim=dim, keepdim=True).detach()\n"
            "attention_weights = softmax(attention_scores)\n")


def _gradient(source, scores):
    """(weights, d sum(weights * G) / d scores) of a Cell 6 source run on ``scores``."""
    s = torch.from_numpy(scores).requires_grad_()
    # the release's set-up
    ns, _ = replay.fresh_namespace(LESSON, release_setup(), "cell6_softmax")
    ns["attention_scores"] = s / 1.0  # (a non-leaf, as in the lesson)
    with replay._quiet():
        exec(compile(source, "<cell6>", "exec"), ns)  # noqa: S102  (the test's own corpus)
    w = ns["attention_weights"]
    g = torch.from_numpy(output_gradient(tuple(w.shape))).to(w.dtype)
    (grad,) = torch.autograd.grad((w * g).sum(), s)
    return w.detach().double().numpy(), grad.double().numpy()


def test_the_corpora_hold_right_softmax_spellings():
    assert len(SPELLINGS) >= 40


def test_the_forced_tie_is_one_that_changes_autograds_gradient():
    # (else the tests below would not force anything)
    ref = _reference()["attention_scores"]
    tied, nudged = _forced(ref, False), _forced(ref, True)
    assert (tied[..., 0] == tied[..., 4]).all() and (nudged[..., 0] != nudged[..., 4]).all()
    _, at_tie = _gradient(ABS, tied)
    _, off_tie = _gradient(ABS, nudged)
    assert not np.allclose(at_tie, off_tie, rtol=1e-2, atol=1e-4)


@pytest.mark.parametrize("source", [ABS] + [s for s, _ in SPELLINGS],
                         ids=["abs"] + [i for _, i in SPELLINGS])
def test_a_right_softmax_keeps_its_gradient_verdict_at_an_exact_tie(source):
    ref = _reference()["attention_scores"]
    for nudge in (False, True):
        scores = _forced(ref, nudge)
        weights, grad = _gradient(source, scores)
        assert np.allclose(weights, _softmax(scores.astype(np.float64)), atol=1e-5)
        right = diag.softmax_gradient_is_right(scores, grad, LESSON.tolerances)
        assert right, "one ulp apart" if nudge else "exact tie"


def test_a_wrong_gradient_is_charged_at_a_tie_and_one_ulp_off():
    ref = _reference()["attention_scores"]
    for nudge in (False, True):
        _, grad = _gradient(DETACHED, _forced(ref, nudge))
        scores = _forced(ref, nudge)
        assert not diag.softmax_gradient_is_right(scores, grad, LESSON.tolerances)


def test_tie_groups_are_chained_within_a_row_and_never_across_rows():
    from src.checks.util import tie_group_sums

    scores = np.array([[[1.0, 1.0, 2.0], [1.0, 3.0, 1.0 + 1e-9]]])
    a = np.array([[[1.0, 2.0, 4.0], [8.0, 16.0, 32.0]]])
    tie = LESSON.tolerances["tie"]
    assert tie_group_sums(a, scores, tie).tolist() == [[[3.0, 3.0, 4.0], [40.0, 16.0, 40.0]]]
