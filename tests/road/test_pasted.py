"""Messages teach without handing out the answer, on the blind sets measured since issue 22:
every code fragment of every failing message, pasted alone into its step cell and replayed
as grading replays it, earns no check (a replay per fragment: a few minutes, so it runs
with the road, `make test-road`)."""

import pytest

pytestmark = pytest.mark.road


#: The sets measured since messages stopped handing out code (issue 22): every fragment of
#: every failing message, pasted alone into its step cell and replayed, earns nothing.
PASTED = ("attempts7.json", "attempts8.json", "attempts9.json", "attempts10.json",
          "attempts11.json", "attempts12.json", "multihead2.json", "multihead3.json",
          "multihead4.json", "multihead5.json", "multihead6.json", "multihead7.json",
          "attempts13.json", "attempts14.json", "attempts15.json", "attempts16.json",
          "attempts17.json", "attempts18.json", "attempts19.json", "attempts20.json",
          "attempts21.json", "attempts22.json", "attempts23.json")


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
