"""The later blind sets, judged as tests/test_blind.py judges the first ones (a file of their
own, so that `make test`'s two workers share the time: --dist loadfile)."""

import pytest

from tests.test_blind import DECIDED, HERE_SETS, judged_as_labelled


def test_every_set_is_judged_in_one_file_or_the_other():
    assert set(HERE_SETS) | set(LATER) == set(DECIDED)


LATER = tuple(sorted(set(DECIDED) - set(HERE_SETS)))


@pytest.mark.parametrize("name", LATER)
def test_a_later_blind_set_is_judged_as_its_labels_say(name):
    judged_as_labelled(name)


#: The sets measured since messages stopped handing out code (issue 22): every fragment of
#: every failing message, pasted alone into its step cell and replayed, earns nothing.
PASTED = ("attempts7.json", "attempts8.json", "attempts9.json", "attempts10.json",
          "attempts11.json", "multihead2.json", "multihead3.json", "multihead4.json",
          "multihead5.json", "multihead6.json")


@pytest.mark.parametrize("name", PASTED)
def test_no_message_of_a_later_blind_set_earns_a_check_when_pasted(name):
    from src import lessons
    from tests.blind import evaluate

    spec = lessons.lesson(evaluate.LESSON_OF.get(name, lessons.lesson().name))
    rows = evaluate.evaluate(evaluate.attempts(evaluate.HERE / name), spec)
    assert evaluate.pasted(rows, spec) == []
    assert evaluate.pasted.tried >= 40  # (the messages do hold code-like fragments to try)


def test_the_pasted_check_finds_a_message_that_hands_out_the_line():
    from tests.blind import evaluate

    row = {"id": "planted", "cell": "5", "message": "Mistake: not scaled. Next step: write "
           "`attention_scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)`."}
    earned = evaluate.pasted([row])
    assert [(e[0], e[3]) for e in earned] == [("planted", "attention_scores")]
