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

