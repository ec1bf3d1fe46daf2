"""The blind sets (tests/blind/): every attempt judged as grading judges it.

Their figures are in README ("The blind set", "The second blind set"); this test keeps
them: no right cell loses a point (no false negative, no cascade), every failing
message's first line is at most 200 characters, and a wrong cell gets full marks only
where README says it was decided so.
"""

import pytest

import verify
from tests.blind import evaluate

#: Cells labelled wrong by a blind writer that the course decided are right (README,
#: "Right in general, not on this example only"): `/ 8` for `/ √d_k`, `x.shape[-1]` for
#: d_k (both 64 in this lesson), a logsumexp softmax.
DECIDED = {"attempts.json": set(),
           "attempts2.json": {("mix-022", "5"), ("mix-023", "5"), ("mix-052", "6")}}


@pytest.mark.parametrize("name", sorted(DECIDED))
def test_a_blind_set_is_judged_as_its_labels_say(name):
    rows = evaluate.evaluate(evaluate.attempts(evaluate.HERE / name))
    assert rows
    bad = [(r["id"], r["cell"], r["verdict"]) for r in rows
           if r["verdict"] in ("false negative", "cascade")]
    assert bad == []
    passed = {(r["id"], r["cell"]) for r in rows if r["verdict"] == "false positive"}
    assert passed == DECIDED[name]
    wrong = [r for r in rows if not r["label"]["correct"]]
    assert max(len(r["first"]) for r in wrong) <= verify.FIRST_LINE_CHARS
