"""A class-sized cohort graded for real: `make test-cohort` (a few minutes).

Hostile and broken submissions and one submission per catalogued mistake,
graded in parallel with nbgrader's own machinery: each gets a sensible score
or a clear error for that student alone, the run finishes, grading twice
gives the same gradebook and submitted/ is left byte-identical.
"""

import pytest

from src import course
from tests.cohort.build import hostile_cases, mistake_cases, write_submissions

pytestmark = pytest.mark.cohort
TIMEOUT = 10  # seconds per cell; the lesson's slowest cell takes < 1 s


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("ATTENTION_COURSE_DIR", str(tmp_path_factory.mktemp("course")))
    course.release()
    cases = hostile_cases() + mistake_cases()
    write_submissions(cases)
    report = course.grade(jobs=2, timeout=TIMEOUT)
    yield cases, report, course.per_cell_scores()
    mp.undo()


def test_every_submission_gets_its_expected_scores(graded):
    cases, report, scores = graded
    by_name = {r.student: r for r in report.results}
    assert sorted(by_name) == sorted(c["name"] for c in cases)
    for case in cases:
        result = by_name[case["name"]]
        if case.get("fails"):
            assert not result.ok and case["fails"] in result.error, (case["name"], result)
            continue
        assert result.ok, (case["name"], result.error)
        got = scores[case["name"]]
        for grade_id, points in case["expected"].items():
            auto, _, manual = got[grade_id]
            if points is None:
                assert auto is None and manual, (case["name"], grade_id)
            else:
                assert auto == pytest.approx(points), (case["name"], grade_id, got)


def test_failures_are_named_and_isolated(graded):
    _, report, _ = graded
    failed = {r.student: r.error for r in report.failed}
    assert set(failed) == {"not-json", "empty-file", "missing-notebook"}
    summary = report.summary()
    assert "3 failed" in summary and "not-json (lesson.ipynb is not valid JSON" in summary
    assert "needs manual grading: deleted-graded-cell" in summary


def test_grading_again_gives_the_same_gradebook(graded):
    _, _, first = graded
    before = course.tree_digest(course.course_dir() / "submitted")
    course.grade(jobs=2, timeout=TIMEOUT)
    assert course.per_cell_scores() == first
    assert course.tree_digest(course.course_dir() / "submitted") == before
