"""The instructor workflow end to end on a small class (`make test-cohort`, which CI runs;
the browser test of the Formgrader grades in the sandbox within `make test`).

Grading is sandboxed and scored outside the kernel (src/grading.py) on every road: `make
grade` (src.course.grade) and plain `nbgrader autograde` write the same gradebook, and a
submission that forges its displayed points gets its honest score from both."""

import csv
import html
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from src import course
from src.grading import KEPT_CELL_METADATA, KEPT_TAGS, UNSAFE_ENV
from tests.cohort import attacks
from tests.cohort.build import attack_cases, hostile_cases, mistake_cases, write_submissions
from tests.notebook_utils import LESSON, ROOT

pytestmark = pytest.mark.cohort
# A small class: the hostile cohort (make test-cohort) grades the rest.
NAMES = {"correct", "not-json", "mistake-softmax_wrong_axis", "forge-formatter", "widget-state"}
#: What the kernel must never hold, nor feedback show: hidden tests, the export plumbing.
HIDDEN = ("BEGIN HIDDEN TESTS", "strict=True", "importlib.reload", "verify').export(")


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    root = tmp_path_factory.mktemp("course")
    mp.setenv("ATTENTION_COURSE_DIR", str(root))
    course.release()
    cases = [c for c in hostile_cases() + mistake_cases() + attack_cases()
             if c["name"] in NAMES]
    write_submissions(cases)
    sequential = tmp_path_factory.mktemp("sequential") / "course"
    shutil.copytree(root, sequential)
    report = course.grade(jobs=2)
    course.feedback()
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
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    # From the course directory, nbgrader's conventional root: course/nbgrader_config.py
    # (written by `make release`) loads the repository's, sandbox and trusted scoring included.
    res = subprocess.run([sys.executable, "-m", "nbgrader", "autograde", course.ASSIGNMENT,
                          "--force"], cwd=sequential, env=env,
                         capture_output=True, text=True, timeout=900)
    assert "No nbgrader_config.py file found" not in res.stdout + res.stderr
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
    assert scores["correct"] == 9.0 and scores["forge-formatter"] == 7.0
    assert "forge-formatter (shown 9/9, verified 7/9)" in report.summary()
    # ... and per cell, what the verified result found there
    forged = next(r for r in report.results if r.student == "forge-formatter").mismatches
    assert forged and all(says for _, _, says in forged.values()), forged


def page_text(path):
    """What the feedback page says, without the syntax-highlighting markup."""
    return html.unescape(re.sub(r"<[^>]+>", "", path.read_text()))


def test_feedback_shows_the_trusted_score_and_nothing_hidden(graded):
    root, *_ = graded
    for student in ("correct", "forge-formatter"):
        autograded = (root / "autograded" / student / course.ASSIGNMENT
                      / "lesson.ipynb").read_text()
        text = page_text(root / "feedback" / student / course.ASSIGNMENT / "lesson.html")
        assert "check_attention_scores(query, key, attention_scores)" in text
        for secret in HIDDEN:
            assert secret not in autograded and secret not in text, (student, secret)
    text = page_text(root / "feedback" / "forge-formatter" / course.ASSIGNMENT / "lesson.html")
    assert "[FAIL] Cell 5" in text  # the verified result, not the one the kernel showed


def test_student_metadata_is_dropped_and_grading_metadata_kept(graded):
    """Issue 20: widget state with active HTML in the notebook's and every cell's metadata, a
    widget the kernel makes while graded, unknown keys, a tag and an SVG attachment carrying
    the same payload: none of it reaches autograded/ or the feedback page; nbgrader's cell
    metadata, the kernelspec, language_info and the lesson's tags stay, with the scores."""
    root, *_ = graded
    student = "widget-state"
    nb = json.loads((root / "autograded" / student / course.ASSIGNMENT
                     / "lesson.ipynb").read_text())
    page = (root / "feedback" / student / course.ASSIGNMENT / "lesson.html").read_text()
    for where, text in (("autograded", json.dumps(nb)), ("feedback", page),
                        ("feedback, unescaped", html.unescape(page))):
        assert attacks.METADATA_MARKER not in text, where
        for mime in ("widget-state+json", "widget-view+json", "image/svg+xml"):
            assert mime not in text, (where, mime)
    assert set(nb["metadata"]) == {"kernelspec", "language_info"}
    for cell in nb["cells"]:
        assert set(cell["metadata"]) <= KEPT_CELL_METADATA and "attachments" not in cell
        assert set(cell["metadata"].get("tags", [])) <= KEPT_TAGS, cell["metadata"]
    release = json.loads((root / "release" / course.ASSIGNMENT / "lesson.ipynb").read_text())
    nbgrader = {c["id"]: c["metadata"]["nbgrader"] for c in release["cells"]
                if "nbgrader" in c["metadata"]}
    assert {c["id"]: c["metadata"]["nbgrader"] for c in nb["cells"]
            if "nbgrader" in c["metadata"]} == nbgrader
    tags = {c["id"]: c["metadata"].get("tags") for c in nb["cells"]}
    assert tags["cell5_scores"] == ["raises-exception"]
    case = next(c for c in graded[2] if c["name"] == student)
    scores = course.per_cell_scores()[student]
    assert {g: auto for g, (auto, _, _) in scores.items()} == case["expected"]
    assert sum(case["expected"].values()) == 9.0
    assert "Score: 9" in page_text(root / "feedback" / student / course.ASSIGNMENT
                                  / "lesson.html")


def test_unsafe_grading_says_so_and_still_scores_outside_the_kernel(graded, monkeypatch):
    root, *_ = graded
    monkeypatch.setenv(UNSAFE_ENV, "1")
    out = io.StringIO()
    report = course.grade(jobs=1, students=["forge-formatter"], stream=out)
    assert out.getvalue().count("UNSAFE: graded WITHOUT the sandbox") == 2  # start and end
    assert report.summary().startswith("UNSAFE")
    assert report.results[0].score == 7.0  # the forged check still earns nothing


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


def test_a_cell_that_kills_its_replay_costs_its_own_step_only(graded, monkeypatch):
    """Unsandboxed (UNSAFE=1) a step cell can kill the process that replays it: that
    submission's step loses its points, the class goes on with a fresh replay."""
    from tests.cohort.build import submission_notebook

    root, *_ = graded
    kill = "\nimport os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n"
    write_submissions([dict(name="kills-its-grader", nb=submission_notebook(
        {"cell7_values": [("attended_values = attention_weights @ value",
                           "attended_values = attention_weights @ value" + kill)]}))])
    monkeypatch.setenv(UNSAFE_ENV, "1")
    report = course.grade(jobs=2, students=["kills-its-grader", "correct"],
                          stream=io.StringIO())
    by_name = {r.student: r for r in report.results}
    assert by_name["correct"].ok and by_name["correct"].score == 9.0
    killer = by_name["kills-its-grader"]
    assert (killer.ok and killer.score == 7.0) or "replay" in (killer.error or ""), killer
    shutil.rmtree(root / "submitted" / "kills-its-grader")
