"""The blind sets (tests/blind/): every attempt judged as grading judges it.

Their figures are in README ("The blind set", "The second blind set"); this test keeps
them: no right cell loses a point (no false negative, no cascade), every failing
message's first line is at most 200 characters, and a wrong cell gets full marks only
where README says it was decided so.
"""

import pytest

import verify
from tests.blind import evaluate

#: Cells labelled wrong by a blind writer that the lesson decided are right, each with the
#: decision of the lesson's spec it rests on (README, "Right in general, not on this
#: example only"); the figures count them apart.
DECIDED = {"attempts.json": {},
           "attempts2.json": {("mix-022", "5"): "constant_sqrt_dk",
                              ("mix-023", "5"): "width_for_dk",
                              ("mix-052", "6"): "logsumexp_softmax"}}


def test_every_decision_is_the_specs_and_readme_states_it():
    from tests.notebook_utils import ROOT

    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    used = {d for cells in DECIDED.values() for d in cells.values()}
    assert used <= set(verify.LESSON.decisions)
    for text in verify.LESSON.decisions.values():
        assert text in readme, text


@pytest.mark.parametrize("name", sorted(DECIDED))
def test_a_blind_set_is_judged_as_its_labels_say(name):
    rows = evaluate.evaluate(evaluate.attempts(evaluate.HERE / name))
    assert rows
    bad = [(r["id"], r["cell"], r["verdict"]) for r in rows
           if r["verdict"] in ("false negative", "cascade")]
    assert bad == []
    passed = {(r["id"], r["cell"]) for r in rows if r["verdict"] == "false positive"}
    assert passed == set(DECIDED[name])
    wrong = [r for r in rows if not r["label"]["correct"]]
    assert max(len(r["first"]) for r in wrong) <= verify.FIRST_LINE_CHARS
