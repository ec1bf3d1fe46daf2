"""The instructor workflow end to end, on a small class (the full cohort: make test-cohort)."""

import csv
import html
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from src import course
from tests.cohort.build import hostile_cases, mistake_cases, write_submissions
from tests.notebook_utils import LESSON, ROOT

pytestmark = pytest.mark.slow
TIMEOUT = 10
NAMES = {"correct", "tampered-verify-py", "redefined-verify", "not-json",
         "mistake-softmax_wrong_axis"}
HIDDEN = ("BEGIN HIDDEN TESTS", "strict=True", "importlib.reload", "tampered with\"")


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    root = tmp_path_factory.mktemp("course")
    mp.setenv("ATTENTION_COURSE_DIR", str(root))
    course.release()
    cases = [c for c in hostile_cases() + mistake_cases() if c["name"] in NAMES]
    write_submissions(cases)
    sequential = tmp_path_factory.mktemp("sequential") / "course"
    shutil.copytree(root, sequential)
    report = course.grade(jobs=2, timeout=TIMEOUT)
    yield root, sequential, cases, report
    mp.undo()


def test_release_ships_the_lesson_with_the_course_files(graded):
    root, *_ = graded
    rel = root / "release" / course.ASSIGNMENT
    assert json.loads((rel / "lesson.ipynb").read_text())["cells"] == \
        json.loads(LESSON.read_text())["cells"]  # generate_assignment == make release
    assert (rel / "verify.py").read_bytes() == (ROOT / "verify.py").read_bytes()
    assert (rel / "src" / "attention.py").is_file() and (rel / "data" / "SHA256SUMS").is_file()
    assert not list(rel.rglob("__pycache__"))


def test_parallel_grading_writes_what_sequential_nbgrader_writes(graded):
    root, sequential, cases, report = graded
    env = dict(os.environ, ATTENTION_COURSE_DIR=str(sequential),
               ATTENTION_CELL_TIMEOUT=str(TIMEOUT),
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    res = subprocess.run([sys.executable, "-m", "nbgrader", "autograde", course.ASSIGNMENT,
                          "--force"], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=600)
    assert "database is locked" not in res.stdout + res.stderr
    assert "Autograding" in res.stdout + res.stderr, res.stderr[-2000:]
    parallel = course.per_cell_scores()
    assert parallel == course.per_cell_scores(sequential / "gradebook.db")
    for case in cases:
        if case.get("fails"):
            continue
        got = {g: auto for g, (auto, _, _) in parallel[case["name"]].items()}
        assert got == case["expected"], case["name"]


def test_report_names_the_broken_submission(graded):
    *_, report = graded
    assert [r.student for r in report.failed] == ["not-json"]
    assert report.failed[0].error
    assert report.summary().startswith("graded 5 submissions in ")
    assert "4 ok, 1 failed" in report.summary()
    scores = {r.student: r.score for r in report.results}
    assert scores["correct"] == 9.0 and scores["tampered-verify-py"] == 7.0
    assert scores["redefined-verify"] == 7.0


def page_text(path):
    """What the feedback page says, without the syntax-highlighting markup."""
    return html.unescape(re.sub(r"<[^>]+>", "", path.read_text()))


def test_feedback_never_shows_hidden_tests(graded):
    root, *_ = graded
    course.feedback()
    autograded = (root / "autograded" / "redefined-verify" / course.ASSIGNMENT
                  / "lesson.ipynb").read_text()
    assert "strict=True" in autograded  # the hidden tests did run ...
    for student in ("correct", "redefined-verify"):
        text = page_text(root / "feedback" / student / course.ASSIGNMENT / "lesson.html")
        assert "check_attention_scores(query, key, attention_scores)" in text
        for secret in HIDDEN:  # ... and leave no trace in the feedback
            assert secret not in text, (student, secret)
    text = page_text(root / "feedback" / "redefined-verify" / course.ASSIGNMENT / "lesson.html")
    assert "AssertionError: the check was tampered with" in text  # the reason, not the code


def test_export_writes_grades_csv(graded):
    root, *_ = graded
    with open(course.export(), newline="") as f:
        rows = {r["student_id"]: r for r in csv.DictReader(f)}
    assert set(rows) >= NAMES - {"not-json"}
    assert float(rows["correct"]["score"]) == 9.0 and float(rows["correct"]["max_score"]) == 9.0


def test_grade_without_a_release_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTENTION_COURSE_DIR", str(tmp_path))
    with pytest.raises(course.CourseError, match="run `make release` first"):
        course.grade(jobs=1)
