"""The instructor's day in the real Formgrader: JupyterLab's Nbgrader menu, real headless
Chromium, a course built by `make release` and graded by `make grade` in the sandbox.

Three students: alice (right), bob (no 1/√d_k) and mallory (no 1/√d_k, a forged
np.allclose, and script in a markdown cell and in an output). The Formgrader must list
what the gradebook holds, show an autograded notebook without running mallory's script,
regrade mallory through the same sandbox and trusted scoring when its Autograde button is
pressed, and generate feedback that runs no script either. Screenshots: screenshots/.
"""

import csv
import io
import json
import re

import pytest
from playwright.sync_api import expect

from src import course
from src.lessons import lesson
from tests.browser.conftest import start_lab
from tests.cohort import attacks
from tests.cohort.build import NO_SCALING, submission_notebook, write_submissions

pytestmark = pytest.mark.slow
MENU = ".lm-MenuBar-itemLabel"
SCRIPT_MARKDOWN = attacks.XSS_MARKDOWN + "\n\n" + attacks.MARKDOWN_LINK


@pytest.fixture(scope="module")
def instructor(tmp_path_factory):
    """(URL, course dir): a released, collected and sandbox-graded course in a Formgrader."""
    base = tmp_path_factory.mktemp("instructor")
    root = base / "course"
    mp = pytest.MonkeyPatch()
    mp.setenv("ATTENTION_COURSE_DIR", str(root))
    course.release()
    write_submissions([
        dict(name="alice", nb=submission_notebook()),
        dict(name="bob", nb=submission_notebook(NO_SCALING)),
        dict(name="mallory", nb=submission_notebook(NO_SCALING, added=[
            ("cell3_data", "markdown", SCRIPT_MARKDOWN),
            ("cell4_projections_test", "code", attacks.FORGE_ALLCLOSE + attacks.XSS)])),
    ])
    report = course.grade(jobs=2, stream=io.StringIO())
    assert not report.failed, report.summary()
    # The server runs from the repository (its nbgrader_config.py), as `make lesson` does.
    for url in start_lab(base, base, env={"ATTENTION_COURSE_DIR": str(root)}):
        yield url, root
    mp.undo()


def totals():
    return {s: sum(auto for auto, _, _ in cells.values())
            for s, cells in course.per_cell_scores().items()}


def no_script_ran(page, dialogs):
    assert dialogs == [], dialogs
    assert "pwned" not in page.title()


def open_formgrader(page, url):
    """JupyterLab > Nbgrader > Formgrader: the frame of the Formgrader tab."""
    page.goto(f"{url}/lab")
    page.locator(MENU, has_text=re.compile("^Nbgrader$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile("^Formgrader$")).click()
    frame = page.frame_locator("iframe[src*='formgrader']")
    expect(frame.locator("body")).to_contain_text("Manage Assignments", timeout=60_000)
    return frame


def test_formgrader_lists_the_assignment_and_the_gradebooks_scores(page, instructor, shots):
    url, _ = instructor
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    frame = open_formgrader(page, url)
    expect(frame.locator("table")).to_contain_text("attention")
    page.screenshot(path=shots / "formgrader-1-assignments.png")
    frame.locator("a", has_text="Manual Grading").first.click()
    average = sum(totals().values()) / 3
    expect(frame.locator("table")).to_contain_text("attention")
    expect(frame.locator("table")).to_contain_text(f"{average:.2f} / 9")  # out of its 9 points
    frame.locator("a", has_text="Manage Assignments").first.click()
    frame.locator("td a", has_text=re.compile(r"^3$")).click()  # its 3 submissions
    rows = frame.locator("#main-table tr")
    expect(rows).to_have_count(3)
    shown = {r.locator(".student-id").inner_text(): r.locator(".score").inner_text()
             for r in rows.all()}
    assert shown == {s: f"{t:g} / 9" for s, t in totals().items()}
    assert shown == {"alice": "9 / 9", "bob": "7 / 9", "mallory": "7 / 9"}
    page.screenshot(path=shots / "formgrader-2-submissions.png")
    no_script_ran(page, dialogs)


def test_an_autograded_notebook_shows_per_cell_scores_and_runs_no_student_script(
        page, instructor, shots):
    url, _ = instructor
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(f"{url}/formgrader/gradebook/attention/lesson")
    link = page.locator("a.name-shown", has_text="mallory")
    link.wait_for(state="attached")
    page.goto(url + link.get_attribute("href"))
    body = page.locator("body")
    expect(body).to_contain_text("cell7_values_test", timeout=60_000)
    text = body.inner_text()
    # Each graded cell's box shows its autograded score (as the placeholder of the
    # manual-score input) and the cell's points. The formgrader's script fills the
    # placeholders after fetching the grades: wait for all four.
    page.wait_for_function("() => { const s = document.querySelectorAll('input.score');"
                           " return s.length === 4 && [...s].every(i => i.placeholder !== '');"
                           " }")
    scores = dict(page.locator("input.score").evaluate_all(
        "inputs => inputs.map(i => [i.id, Number(i.placeholder)])"))
    assert scores == {g: auto for g, (auto, _, _) in course.per_cell_scores()["mallory"].items()}
    assert scores == {"cell4_projections_test": 2, "cell5_scores_test": 0,
                      "cell6_softmax_test": 3, "cell7_values_test": 2}
    assert "[FAIL] Cell 5" in text  # the verified result, not the forged one
    assert "My notes <script>" in text  # shown as text, not run
    for hidden in ("BEGIN HIDDEN TESTS", "verify').export(", "strict=True"):
        assert hidden not in text
    page.locator("#cell5_scores_test").scroll_into_view_if_needed()
    page.screenshot(path=shots / "formgrader-3-mallory.png", full_page=False)
    no_script_ran(page, dialogs)


def test_autograde_button_regrades_through_the_sandbox_and_trusted_scoring(
        page, instructor, shots):
    url, root = instructor
    report = root / "autograded" / "mallory" / course.ASSIGNMENT / "grading_report.json"
    before = report.stat().st_mtime_ns
    page.goto(f"{url}/formgrader/manage_submissions/attention")
    row = page.locator("#main-table tr", has=page.locator(".student-id", has_text="mallory"))
    with page.expect_response(lambda r: r.url.endswith("/mallory/autograde"),
                              timeout=180_000) as response:
        row.locator(".autograde a").click()
    result = response.value.json()
    assert result["success"], result.get("error")
    # Her forged np.allclose no longer changes what her own checks show either: they
    # replay her step cells as grading does (docs/internals.md, "How the checks judge").
    assert "Traceback" not in result["log"]
    assert report.stat().st_mtime_ns > before  # graded again, by the trusted step
    assert json.loads(report.read_text())["cells"][1]["verified"] == 0.0
    expect(row.locator(".score")).to_have_text("7 / 9")
    assert totals()["mallory"] == 7.0
    page.screenshot(path=shots / "formgrader-4-autograded.png")


#: What the lesson's spec calls each graded cell (src/pages.py), as the pages show it.
NAMED = {"cell4_projections_test": "Cell 4 \u2014 linear projections",
         "cell5_scores_test": "Cell 5 \u2014 scaled dot-product scores",
         "cell6_softmax_test": "Cell 6 \u2014 your softmax function and attention weights",
         "cell7_values_test": "Cell 7 \u2014 value aggregation"}
#: Every message block (a cell's output) that runs wider than its box: none may.
OVERFLOWING = """() => [...document.querySelectorAll('div.output_area pre, div.output_subarea')]
  .filter(e => e.scrollWidth > e.clientWidth + 1)
  .map(e => `${e.className} ${e.scrollWidth}>${e.clientWidth} ${e.innerText.slice(0, 60)}`)"""


def typeset(page):
    page.wait_for_function("() => window.MathJax && MathJax.Hub && !MathJax.Hub.queue.pending"
                           " && document.querySelector('.MathJax_Display')", timeout=60_000)
    page.evaluate("() => new Promise(r => MathJax.Hub.Queue(r))")
    assert page.locator(".MathJax_Display").count() >= 3  # the lesson's displayed formulas
    text = page.locator("body").inner_text()
    assert "$$" not in text and "\\mathrm{Attention}" not in text and "not typeset" not in text


def test_the_feedback_names_each_cell_and_typesets_its_formulas_offline(
        page, instructor, shots):
    _, root = instructor
    course.feedback(stream=io.StringIO())
    requests = []
    page.on("request", lambda r: requests.append(r.url))
    page.set_viewport_size({"width": 900, "height": 1000})  # a narrow window: wrap, no cut
    feedback = root / "feedback" / "bob" / course.ASSIGNMENT / "lesson.html"
    page.goto(feedback.as_uri())
    typeset(page)
    scores = course.per_cell_scores()["bob"]
    listed = page.locator("#toc li").all_inner_texts()
    points = {g: sum(checks.values()) for g, checks in lesson().grade_cells.items()}
    assert listed == [f"{NAMED[g]}: {scores[g][0]:g} / {points[g]:g}" for g in NAMED]
    assert listed[1] == "Cell 5 \u2014 scaled dot-product scores: 0 / 2"
    assert "Test cell" not in page.locator("#toc").inner_text()
    heading = page.locator(".panel-heading", has=page.locator("code", has_text=re.compile(
        "^cell5_scores_test$")))
    expect(heading).to_contain_text("Cell 5 \u2014 scaled dot-product scores: 0 / 2")
    assert page.evaluate(OVERFLOWING) == []
    assert [u for u in requests if u != feedback.as_uri() and u != "about:blank"] == []
    page.get_by_text("[FAIL] Cell 5").first.scroll_into_view_if_needed()
    page.screenshot(path=shots / "feedback-1-named-cells.png")
    page.goto(feedback.as_uri())
    typeset(page)
    page.screenshot(path=shots / "feedback-2-formulas.png")
    size = feedback.stat().st_size
    assert size < 4_000_000, size  # MathJax and its fonts inlined: about 2.1 MB of it


def test_the_formgrader_view_names_cells_typesets_and_wraps(page, instructor, shots):
    url, _ = instructor
    requests = []
    page.on("request", lambda r: requests.append(r.url))
    page.set_viewport_size({"width": 1000, "height": 1000})
    page.goto(f"{url}/formgrader/gradebook/attention/lesson")
    link = page.locator("a.name-shown", has_text="bob")
    link.wait_for(state="attached")
    page.goto(url + link.get_attribute("href"))
    typeset(page)
    for grade_id, name in NAMED.items():
        label = page.locator(".nbgrader-label", has=page.locator("code", has_text=grade_id))
        expect(label).to_contain_text(name)
    assert page.evaluate(OVERFLOWING) == []
    assert [u for u in requests if not u.startswith(url) and u != "about:blank"] == []
    page.wait_for_timeout(1000)  # the Formgrader's own scroll (after MathJax) ends first
    page.locator(".nbgrader-label", has_text="Cell 5").scroll_into_view_if_needed()
    page.screenshot(path=shots / "formgrader-6-named-typeset.png")


def test_feedback_generated_from_the_formgrader_runs_no_script(page, instructor, shots):
    url, root = instructor
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(f"{url}/formgrader/manage_submissions/attention")
    row = page.locator("#main-table tr", has=page.locator(".student-id", has_text="mallory"))
    with page.expect_response(lambda r: "generate_feedback" in r.url,
                              timeout=180_000) as response:
        row.locator(".generate-feedback a").click()
    assert response.value.json()["success"]
    feedback = root / "feedback" / "mallory" / course.ASSIGNMENT / "lesson.html"
    page.goto(feedback.as_uri())
    expect(page.locator("body")).to_contain_text("[FAIL] Cell 5")
    expect(page.locator("body")).to_contain_text("My notes <script>")
    assert page.locator("a[href^='javascript:']").count() == 0
    page.get_by_text("[FAIL] Cell 5").first.scroll_into_view_if_needed()
    page.screenshot(path=shots / "formgrader-5-feedback.png")
    no_script_ran(page, dialogs)
    with open(course.export(), newline="") as f:  # the day ends with the export
        rows = {r["student_id"]: float(r["score"]) for r in csv.DictReader(f)}
    assert rows == {"alice": 9.0, "bob": 7.0, "mallory": 7.0}
