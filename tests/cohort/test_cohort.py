"""A class-sized hostile cohort graded for real: `make test-cohort` (several minutes).

Broken submissions, one per catalogued mistake, and one per class of attack on
the grader (tests/cohort/attacks.py) beside honest students and victims, all
graded in parallel in the sandbox by nbgrader's own machinery. Each gets the
score its real answers deserve or a named failure; no attack earns a point,
changes anything outside its folder, leaks a secret into any notebook or
feedback, leaves a process running or stops the run; a regrade through a pipe
returns and writes the same gradebook.
"""

import hashlib
import json
import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from src import course
from src.grading import REPORT_NAME
from tests.cohort import attacks
from tests.cohort.build import attack_cases, hostile_cases, mistake_cases, write_submissions

pytestmark = pytest.mark.cohort
# The replay's limits for the regrade through a pipe (the defaults, stated on its command line).
TIMEOUT, BUDGET = 1.0, 3.0
ROOT = course.ROOT


def _digest(paths):
    h = hashlib.sha256()
    for path in paths:
        for p in sorted(Path(path).rglob("*")) if Path(path).is_dir() else [Path(path)]:
            if "__pycache__" in p.parts:
                continue
            h.update(str(p).encode())
            if p.is_file() and not p.is_symlink():
                h.update(p.read_bytes())
    return h.hexdigest()


def _outside_state():
    """Everything of the instructor's that a submission must never change."""
    site = Path(sysconfig.get_paths()["purelib"])
    return {"repo": _digest([ROOT / "nbgrader_config.py", ROOT / "verify.py", ROOT / "src"]),
            "pth": sorted(p.name for p in site.glob("*.pth")),
            "source": _digest([course.course_dir() / "source"]),
            "release": _digest([course.course_dir() / "release"]),
            "secret": (course.course_dir() / "INSTRUCTOR_SECRET.txt").read_text()}


def _grading_dirs():
    import tempfile

    # The cohort's own TMPDIR (other grading runs on the machine use /tmp).
    return set(Path(tempfile.gettempdir()).glob("attention-grading-*")) | set(
        Path("/tmp").glob(f"attention-ipc-{os.getuid()}/*"))


def _lingering():
    out = subprocess.run(["pgrep", "-af", attacks.LINGER], capture_output=True, text=True)
    return [ln for ln in out.stdout.splitlines() if "pgrep" not in ln]


#: The whole cohort is graded under a TMPDIR this long (Unix socket paths hold 107 bytes).
LONG_TMPDIR_CHARS = 100


def _long_tmpdir(base: Path) -> Path:
    path = base / ("t" * (LONG_TMPDIR_CHARS - len(str(base)) - 1))
    path.mkdir()
    assert len(str(path)) == LONG_TMPDIR_CHARS
    return path


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    import tempfile

    mp = pytest.MonkeyPatch()
    mp.setenv("ATTENTION_COURSE_DIR", str(tmp_path_factory.mktemp("course")))
    tmpdir = _long_tmpdir(tmp_path_factory.mktemp("tmp"))
    mp.setenv("TMPDIR", str(tmpdir))
    mp.setattr(tempfile, "tempdir", str(tmpdir))
    course.release()
    (course.course_dir() / "INSTRUCTOR_SECRET.txt").write_text(attacks.INSTRUCTOR_SECRET)
    cases = hostile_cases() + mistake_cases() + attack_cases(slow_cells=6)
    write_submissions(cases)
    before = _outside_state()
    before["tmp"] = _grading_dirs()
    report = course.grade(jobs=2)
    course.feedback()
    yield cases, report, course.per_cell_scores(), before
    mp.undo()


def test_every_submission_gets_what_its_answers_deserve(graded):
    cases, report, scores, _ = graded
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


def test_failures_are_named_one_line_each(graded):
    cases, report, _, _ = graded
    failed = {r.student: r.error for r in report.failed}
    assert set(failed) == {c["name"] for c in cases if c.get("fails")}
    for student, error in failed.items():
        assert "\n" not in error and "Please see the" not in error, (student, error)
    summary = report.summary()
    assert "not-json (lesson.ipynb is not valid JSON" in summary
    assert "needs manual grading: deleted-graded-cell" in summary
    assert "'alice', 'ａlice'" in summary  # look-alike ids are flagged


def test_a_forged_score_is_caught_and_reported(graded):
    cases, report, _, _ = graded
    by_name = {r.student: r for r in report.results}
    for case in cases:
        if case.get("shown_differs"):
            r = by_name[case["name"]]
            assert r.shown == 9.0 and r.score == 7.0, (case["name"], r)
            assert f"{case['name']} (shown 9/9, verified 7/9)" in report.summary()


def _outputs(student):
    nb = course.course_dir() / "autograded" / student / course.ASSIGNMENT / "lesson.ipynb"
    cells = json.loads(nb.read_text())["cells"]
    return json.dumps([c.get("outputs", []) for c in cells])


def test_no_attack_succeeded_and_no_secret_leaked(graded):
    cases, report, _, _ = graded
    root = course.course_dir()
    for r in report.results:
        if not r.ok:
            continue
        outputs = _outputs(r.student)
        assert attacks.SUCCESS not in outputs, (r.student, outputs[:3000])
        for secret in (attacks.INSTRUCTOR_SECRET, "SQLite format 3", "BEGIN SOLUTION",
                       "c.CourseDirectory"):
            assert secret not in outputs, (r.student, secret)
        if r.student != "victim-1":
            assert attacks.VICTIM_SECRET not in outputs, r.student
    for page in (root / "feedback").rglob("*.html"):
        text = page.read_text()
        assert attacks.INSTRUCTOR_SECRET not in text, page
        if "victim-1" not in page.parts:
            assert attacks.VICTIM_SECRET not in text, page


def test_nothing_outside_the_attackers_folder_changed(graded):
    *_, before = graded
    assert _outside_state() == {k: v for k, v in before.items() if k != "tmp"}
    root = course.course_dir()
    assert (root / "gradebook.db").is_file()
    assert (root / "submitted" / "victim-1" / course.ASSIGNMENT / "lesson.ipynb").is_file()


def test_no_process_survives_grading(graded):
    *_, before = graded
    assert _lingering() == []
    assert _grading_dirs() <= before["tmp"]  # every sandbox's files were removed


def test_flooded_output_is_capped_with_a_note(graded):
    outputs = _outputs("output-flood")  # a file submitted with 4 MB of one cell's output
    assert len(outputs) < 2**20 and "[output cut: this cell's submitted output is over" in outputs


def test_autograded_notebooks_hold_only_inert_outputs(graded):
    outputs = _outputs("xss-feedback")  # what the Formgrader shows
    for active in ("text/html", "application/javascript", "image/svg+xml", "<script"):
        assert active not in outputs, active


def test_feedback_runs_no_script_from_a_student(graded):
    page = (course.course_dir() / "feedback" / "xss-feedback" / course.ASSIGNMENT
            / "lesson.html").read_text()
    assert "My notes &lt;script&gt;" in page  # the student's markdown is there, defused
    assert "<script>document.title" not in page and "<svg" not in page
    assert "application/javascript" not in page
    assert not re.search(r"<[a-z]+[^<>]*\son[a-z]+\s*=", page)  # no event handler in a tag


def test_links_and_files_that_would_run_script_are_gone(graded):
    root = course.course_dir()
    page = (root / "feedback" / "xss-markdown-link" / course.ASSIGNMENT / "lesson.html")
    assert "open my grading notes" in page.read_text()
    assert not re.search(r"""(href|src)\s*=\s*["']?\s*javascript:""", page.read_text())
    for folder in ("autograded", "feedback"):
        assert not (root / folder / "xss-markdown-link" / course.ASSIGNMENT
                    / "summary.html").exists()


def test_a_regrade_through_a_pipe_returns_and_gives_the_same_gradebook(graded):
    _, _, first, _ = graded
    before = course.tree_digest(course.course_dir() / "submitted")
    env = dict(os.environ, ATTENTION_COURSE_DIR=str(course.course_dir()))
    # `make grade | cat`: the pipe closes when grading ends, whatever a kernel left behind.
    proc = subprocess.run([sys.executable, "-m", "src.course", "grade", "--jobs", "2",
                           "--timeout", str(TIMEOUT), "--budget", str(BUDGET)], cwd=ROOT,
                          env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=1800)
    assert proc.returncode == 1, proc.stdout[-3000:]  # the broken submissions fail again
    assert b"graded " in proc.stdout
    assert course.per_cell_scores() == first
    assert course.tree_digest(course.course_dir() / "submitted") == before
    assert _lingering() == []


def test_report_file_is_beside_each_autograded_notebook(graded):
    _, report, _, _ = graded
    for r in report.results:
        if r.ok:
            path = course.course_dir() / "autograded" / r.student / course.ASSIGNMENT / REPORT_NAME
            cells = json.loads(path.read_text())["cells"]
            assert {c["cell"] for c in cells} == {
                "cell4_projections_test", "cell5_scores_test", "cell6_softmax_test",
                "cell7_values_test"} or r.student == "deleted-graded-cell"


# ------------------------------------------------------------------ issue 14
def _folder(kind, student):
    return course.course_dir() / kind / student / course.ASSIGNMENT


def test_only_the_notebook_reaches_autograded_and_feedback(graded):
    _, report, _, _ = graded
    for r in report.results:
        if not r.ok:
            continue
        # the course's own files (source/) and the report; nothing of the student's
        assert {p.name for p in _folder("autograded", r.student).iterdir()} == {
            "lesson.ipynb", REPORT_NAME, "verify.py", "src", "data"}, r.student
        assert [p.name for p in _folder("feedback", r.student).iterdir()] == [
            "lesson.html"], r.student


def test_stored_markdown_stays_inert_when_the_formgrader_renders_it_again(graded):
    from nbconvert.filters.markdown import markdown2html

    from tests.test_grading import _ACTIVE, _tags

    for student in ("xss-second-render", "xss-feedback", "xss-markdown-link", "deep-nesting"):
        nb = json.loads((_folder("autograded", student) / "lesson.ipynb").read_text())
        for cell in nb["cells"]:
            if cell["cell_type"] != "markdown":
                continue
            source = "".join(cell["source"])
            for html in (source, markdown2html(source)):
                for name, attributes in _tags(html):
                    assert not _ACTIVE.search(attributes) and "data:" not in attributes, (
                        student, html[:500])
    page = (_folder("feedback", "xss-second-render") / "lesson.html").read_text()
    for beacon in ("tracker.example", "198.51.100.7"):
        assert not re.search(rf"""src\s*=\s*["'][^"']*{re.escape(beacon)}""", page), beacon
    # the banner is there as text; no element wears the page's own classes (Bootstrap's
    # stylesheet, inlined in the page, names modal-backdrop itself)
    assert "Score: 9 / 9" in page
    assert not re.search(r"""class\s*=\s*["'][^"']*(modal-backdrop|navbar-fixed)""", page)


def test_a_pasted_picture_is_graded_and_shown_in_the_feedback(graded):
    _, report, _, _ = graded
    assert {r.student: r.ok for r in report.results}["pasted-picture"]
    page = (_folder("feedback", "pasted-picture") / "lesson.html").read_text()
    assert re.search(r'<img [^>]*src="data:image/png;base64,iVBORw0KGgo', page)


def test_trojan_source_is_shown_and_named(graded):
    cases, report, _, _ = graded
    cells = json.loads((_folder("autograded", "trojan-source") / "lesson.ipynb").read_text())
    sources = "".join("".join(c["source"]) for c in cells["cells"])
    assert "\u27e6U+202E\u27e7" in sources and "\u202e" not in sources
    summary = report.summary()
    assert re.search(r"trojan-source \(cell #\d+ \(code\) holds invisible or bidirectional "
                     r"characters.*U\+202E RIGHT-TO-LEFT OVERRIDE", summary), summary
    for case in cases:  # no other notebook gets such a note
        if not case.get("trojan"):
            assert not re.search(rf"{re.escape(case['name'])} \(cell #\d+ \(\w+\) holds "
                                 "invisible", summary), case["name"]


def test_code_outside_the_step_cells_never_runs(graded):
    """No kernel runs a submission: an attack in a cell of its own does nothing at all (it
    leaves no output), whatever it is; the same attacks inside a step cell run in the
    replay's sandbox and change nothing (the tests above)."""
    cases, report, _, _ = graded
    for case in cases:
        if case["name"].startswith(("attack-", "fill-disk", "forge-")):
            outputs = _outputs(case["name"])
            assert "stopped:" not in outputs and attacks.SUCCESS not in outputs, case["name"]
    assert "stopped early" not in report.summary()
