"""The corpus of student attempts (tests/corpus.py) through the checks, in-process.

Its figure is printed at the end of ``make test``; ``python -m tests.corpus``
prints it with one line per attempt.
"""

import pytest

import verify
from tests import corpus, corpus_multihead

pytestmark = pytest.mark.filterwarnings("ignore")  # students' code may warn


@pytest.fixture(scope="module")
def records():
    return {r.attempt.name: r for r in corpus.run_corpus()}


def test_the_corpus_figure(records, record_property):
    recs = list(records.values())
    figure = corpus.figure(recs)
    record_property("corpus figure", figure)
    counted = [r for r in recs if not r.attempt.same_idea_as]
    correct = [r for r in counted if r.attempt.correct]
    wrong = [r for r in counted if not r.attempt.correct]
    assert len(counted) >= 100 and len(correct) >= 20 and len(wrong) >= 80, figure
    assert all(not r.problems() for r in correct), figure
    assert not [r.attempt.name for r in wrong if any(
        p.startswith(("false positive", "cascade")) for p in r.problems())], figure
    assert sum(r.named for r in wrong) >= 0.9 * len(wrong), figure


@pytest.mark.parametrize("name", [a.name for a in corpus.ATTEMPTS])
def test_each_attempt_gets_the_verdict_it_deserves(records, name):
    assert records[name].problems() == []


def test_the_names_are_unique_and_every_mistake_is_met():
    names = [a.name for a in corpus.ATTEMPTS]
    assert len(names) == len(set(names))
    assert {a.same_idea_as for a in corpus.ATTEMPTS} - {""} <= set(names)
    met = {m for a in corpus.ATTEMPTS for m in (*a.expect.values(), *a.by_design.values())}
    # (the engine's general entries are written once, here; lesson 2's corpus meets some)
    met |= {m for a in corpus_multihead.ATTEMPTS for m in a.expect.values()
            if m in verify.MISTAKES and verify.MISTAKES[m].step == "any"}
    # not_computed is the untouched lesson (tests/test_verify.py), not an attempt; the
    # behaviour and replay entries are met by real code in tests/test_verify.py
    # (BEHAVIOUR_CODE, and every entry injected) and tests/test_replay.py.
    replay_kinds = {"behaviour", "misspelled", "mutated_input", "left_autograd", "gradient",
                    "custom_function", "builtin_weights", "detached_output", "course_code",
                    "recomputed"}
    later = {mid for mid, m in verify.MISTAKES.items() if m.kind in replay_kinds} | {
        "undefined_name", "stub_left", "not_computed", "used_before_computed", "upstream_slip",
        "degenerate_upstream", "returned_none", "cell_raised"}
    assert set(verify.MISTAKES) - met <= later


def test_explicit_check_calls_equal_judge_of_observe_and_its_round_trip(records):
    """Invariant (a): the test cells' own calls (the live check, on the code run in each
    step cell), the replay judged as grading judges it, and that judge after
    np.savez/np.load(allow_pickle=False) give the same results, message for message."""
    def verdict(results):  # (what the live check adds about the kernel is not a verdict)
        return [{k: v for k, v in r.items() if k != "kernel_notes"} for r in results]

    for name, rec in records.items():
        for gid in verify.GRADE_CELLS:
            assert verdict(rec.explicit[gid]) == verdict(rec.observed[gid]) == \
                verdict(rec.reloaded[gid]), (name, gid)


def test_strict_differs_from_visible_only_by_the_strict_only_items(records):
    """Invariant (b): the graded run deducts what the visible run shows as pending."""
    seen_pending = 0
    for name, rec in records.items():
        for step in verify.POINTS:
            visible, strict = rec.visible[step].to_dict(), rec.strict[step].to_dict()
            pending = visible["pending"]
            assert all(verify.MISTAKES[p].strict_only for p in pending), (name, step)
            assert strict["pending"] == []
            if not pending:
                assert strict == visible, (name, step)
                continue
            seen_pending += 1
            cost = sum(verify.MISTAKES[p].cost for p in pending) * visible["max_score"]
            assert strict["score"] == pytest.approx(max(0.0, visible["score"] - cost))
            assert set(pending) <= set(strict["shortfalls"]) | {strict["mistake"]}
    assert seen_pending >= 3  # the corpus has strict-only mistakes


def test_the_docs_tell_the_corpus_and_the_catalogue_as_they_are(records):
    from tests.docs import docs_text

    text = docs_text()
    recs = [r for r in records.values() if not r.attempt.same_idea_as]
    wrong = [r for r in recs if not r.attempt.correct]
    n = len(verify.MISTAKES)
    assert f"one of the {n} in its catalogue" in text and f"`verify.MISTAKES`, {n} entries" in text
    assert (f"holds {len(recs)} realistic attempts" in text
            and f"({len(recs) - len(wrong)} correct alternatives" in text
            and f"{len(wrong)} wrong ones" in text
            and f"{sum(r.named for r in wrong)} of {len(wrong)} are named" in text), text
