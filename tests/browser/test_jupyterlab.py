"""The lesson as a student sees it: real JupyterLab, real headless Chromium.

Screenshots of each state go to screenshots/ (git-ignored) for a person to look at.
"""

import json
import re

import pytest
from playwright.sync_api import expect

from tests.catalogue import SCALE
from tests.cohort.build import solved_sources
from tests.notebook_utils import LESSON

pytestmark = pytest.mark.slow
IDS = [c["id"] for c in json.loads(LESSON.read_text())["cells"]]


NOTEBOOK = ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook"  # the tab in front


def open_notebook(page, lab, name):
    """Open ``name`` alone: a workspace of its own, so no tab of another test is restored."""
    url, _ = lab
    page.goto(f"{url}/lab/workspaces/{name.replace('.', '-')}/tree/{name}?reset")
    page.wait_for_selector(f"{NOTEBOOK} .jp-Cell")
    expect(page.get_by_text("Python 3 (ipykernel) | Idle")).to_be_visible(timeout=60_000)
    return page


def cell(page, cell_id):
    return page.locator(f"{NOTEBOOK} .jp-Cell").nth(IDS.index(cell_id))


def menu(page, top, item):
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(f"^{top}$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(f"^{item}$")).click()


def run_all(page):
    """Clear every stored output and prompt number, then Run All Cells."""
    menu(page, "Edit", "Clear Outputs of All Cells")
    expect(page.locator(f"{NOTEBOOK} .jp-OutputArea-output")).to_have_count(0)
    menu(page, "Run", "Run All Cells")


def stderr_outputs(page):
    return page.locator(f"{NOTEBOOK} .jp-OutputArea-output"
                        "[data-mime-type='application/vnd.jupyter.stderr']")


def wait_executed(page, cell_id, timeout=120_000, locate=None):
    """Wait until ``cell_id`` has run (``locate(page, id)``: another notebook's cells)."""
    try:
        expect((locate or cell)(page, cell_id).locator(".jp-InputPrompt").first).to_have_text(
            re.compile(r"\[\d+\]:"), timeout=timeout)
    except AssertionError as exc:  # say what stopped the run
        prompts = page.locator(f"{NOTEBOOK} .jp-CodeCell .jp-InputPrompt").all_inner_texts()
        status = page.locator(".jp-StatusBar-TextItem").all_inner_texts()
        raise AssertionError(f"{cell_id} did not run; prompts {prompts}; status {status}; "
                             f"errors shown: {stderr_outputs(page).all_inner_texts()}") from exc


def rendered_markdown_text(page):
    return "\n".join(page.locator(f"{NOTEBOOK} .jp-MarkdownCell .jp-RenderedMarkdown")
                     .all_inner_texts())


def test_lesson_opens_with_title_formulas_headings_and_closed_hints(page, lab, shots):
    open_notebook(page, lab, "lesson.ipynb")
    assert page.title().startswith("lesson.ipynb")
    expect(page.locator(f"{NOTEBOOK} .jp-RenderedMarkdown h1").first).to_contain_text(
        "Attention, hands on: scaled dot-product attention")
    headings = " | ".join(page.locator(f"{NOTEBOOK} .jp-RenderedMarkdown h2").all_inner_texts())
    for title in ("Cell 4 — Linear projections", "Cell 5 — Scaled dot-product scores",
                  "Cell 6 — Softmax and attention weights", "Cell 7 — Value aggregation"):
        assert title in headings
    # MathJax has typeset every formula: no raw TeX delimiters are left in the text
    assert page.locator(f"{NOTEBOOK} .jp-RenderedMarkdown mjx-container").count() >= 20
    text = rendered_markdown_text(page)
    assert "$$" not in text and "\\frac" not in text and "\\sqrt" not in text
    page.screenshot(path=shots / "01-lesson-opened.png")

    hints = page.locator(f"{NOTEBOOK} .jp-RenderedMarkdown details")
    assert hints.count() == 8  # a nudge and a walk through the shapes, for cells 4-7
    for i in range(hints.count()):
        assert hints.nth(i).get_attribute("open") is None
    hint = cell(page, "cell4-hint")
    nudge = hint.get_by_text("An nn.Linear layer is a function")
    expect(nudge).to_be_hidden()
    hint.locator("summary").first.click()
    expect(nudge).to_be_visible()
    expect(hint.get_by_text("x is [1, 6, 64]", exact=False)).to_be_hidden()  # tier 2 still shut
    hint.scroll_into_view_if_needed()
    hint.screenshot(path=shots / "02-lesson-hint-opened.png")


def test_reference_runs_all_with_feedback_heatmaps_and_explorer(page, lab, shots):
    open_notebook(page, lab, "complete_lesson.ipynb")
    run_all(page)
    wait_executed(page, "closing_explore")
    assert stderr_outputs(page).count() == 0, stderr_outputs(page).all_inner_texts()
    # verify's feedback is rendered as Markdown, with the points
    for cid, line in (("cell4_projections_test", "Cell 4 — linear projections: 2/2 points"),
                      ("cell5_scores_test", "Cell 5 — scaled dot-product scores: 2/2 points"),
                      ("cell7_values_test", "Cell 7 — value aggregation: 2/2 points")):
        out = cell(page, cid).locator(".jp-OutputArea .jp-RenderedMarkdown").first
        expect(out).to_contain_text(line)
        expect(out).to_contain_text("✔")
        expect(out).to_contain_text("(passed)")
    for cid in ("cell5_scores_test", "cell6_softmax_test", "cell7_values_test"):
        expect(cell(page, cid).locator(".jp-OutputArea img")).to_have_count(1)
    cell(page, "cell6_softmax_test").scroll_into_view_if_needed()
    cell(page, "cell6_softmax_test").screenshot(path=shots / "03-reference-cell6-check.png")

    explorer = cell(page, "closing_explore")
    image = explorer.locator(".widget-output img")
    expect(image).to_have_count(1, timeout=30_000)
    before = image.get_attribute("src")
    explorer.get_by_role("button", name="temperature").click()
    # The kernel enables the slider in answer to the click: ipywidgets drops the
    # slider element's `disabled` attribute then. Keys pressed before that are ignored.
    slider = explorer.locator(".noUi-target").first
    page.wait_for_function("s => !s.hasAttribute('disabled')", arg=slider.element_handle())
    readout = explorer.locator(".widget-html pre")
    for attempt in range(3):
        handle = explorer.locator(".noUi-handle").first
        handle.focus()
        handle.press("Home")  # the lowest temperature: the sharpest rows
        try:
            expect(readout).to_contain_text("scores = Q·Kᵀ / 0.25", timeout=10_000)
            break
        except AssertionError:
            if attempt == 2:
                raise
    expect(image).not_to_have_attribute("src", before)
    explorer.scroll_into_view_if_needed()
    explorer.screenshot(path=shots / "04-reference-explorer-temperature.png")


def test_student_answers_get_a_pass_and_a_named_mistake(page, lab, shots):
    open_notebook(page, lab, "student.ipynb")
    solved = solved_sources()
    wrong = solved["cell5_scores"].replace(SCALE, "attention_scores = raw_scores")
    for cid, source in (("cell4_projections", solved["cell4_projections"]),
                        ("cell5_scores", wrong)):
        editor = cell(page, cid).locator(".cm-content")
        editor.click()
        page.keyboard.press("Control+A")
        page.keyboard.insert_text(source)  # no auto-indent or auto-brackets
    page.keyboard.press("Escape")
    run_all(page)  # stops at the first stub left, in Cell 6
    wait_executed(page, "cell6_softmax")

    check4 = cell(page, "cell4_projections_test").locator(".jp-OutputArea").first
    expect(check4).to_contain_text("(passed)")
    expect(check4).to_contain_text("Cell 4 — linear projections: 2/2 points")
    check5 = cell(page, "cell5_scores_test").locator(".jp-OutputArea").first
    expect(check5).to_contain_text("✘")
    expect(check5).to_contain_text("(not yet)")
    expect(check5).to_contain_text("Mistake: the scores are not scaled by 1/√d_k.")
    expect(check5).to_contain_text("Next step: divide by math.sqrt(d_k)")
    expect(cell(page, "cell6_softmax").locator(".jp-OutputArea")).to_contain_text(
        "NotImplementedError: Your turn: replace this line with your code.")
    cell(page, "cell4_projections_test").scroll_into_view_if_needed()
    cell(page, "cell4_projections_test").screenshot(path=shots / "05-student-cell4-pass.png")
    cell(page, "cell5_scores_test").scroll_into_view_if_needed()
    cell(page, "cell5_scores_test").screenshot(path=shots / "06-student-cell5-mistake.png")


MH_IDS = [c["id"] for c in json.loads((LESSON.parent / "complete_multihead.ipynb").read_text())[
    "cells"]]


def mh_cell(page, cell_id):
    return page.locator(f"{NOTEBOOK} .jp-Cell").nth(MH_IDS.index(cell_id))


def test_lesson_2_opens_typeset_with_closed_hints_and_runs_with_per_head_heatmaps(
        page, lab, shots):
    """Lesson 2 (multihead.ipynb) as a student opens it, then its reference run in Lab:
    each check cell passes and draws one figure of its heads; the closing cell agrees
    with PyTorch's own layers."""
    open_notebook(page, lab, "multihead.ipynb")
    expect(page.locator(f"{NOTEBOOK} .jp-RenderedMarkdown h1").first).to_contain_text(
        "lesson 2: multi-head and causal attention")
    headings = " | ".join(page.locator(f"{NOTEBOOK} .jp-RenderedMarkdown h2").all_inner_texts())
    for title in ("Cell 4 — Split into heads", "Cell 5 — Masked scaled scores, per head",
                  "Cell 6 — Weights and weighted values, per head",
                  "Cell 7 — Merge the heads, apply"):
        assert title in headings
    assert page.locator(f"{NOTEBOOK} .jp-RenderedMarkdown mjx-container").count() >= 15
    text = rendered_markdown_text(page)
    assert "$$" not in text and "\\frac" not in text and "\\begin{cases}" not in text
    hints = page.locator(f"{NOTEBOOK} .jp-RenderedMarkdown details")
    assert hints.count() == 12  # a nudge, the shapes, then the lines, for cells 4-7
    assert all(hints.nth(i).get_attribute("open") is None for i in range(hints.count()))
    page.screenshot(path=shots / "20-lesson2-opened.png")

    open_notebook(page, lab, "complete_multihead.ipynb")
    run_all(page)
    wait_executed(page, "mh_closing_heads", locate=mh_cell)
    assert stderr_outputs(page).count() == 0, stderr_outputs(page).all_inner_texts()
    for cid, line in (("mh_cell4_split_test", "Cell 4 — split into heads: 2/2 points"),
                      ("mh_cell5_scores_test", "Cell 5 — masked scaled scores per head: 2/2"),
                      ("mh_cell7_merge_test", "Cell 7 — merge the heads and apply W_o: 2/2")):
        out = mh_cell(page, cid).locator(".jp-OutputArea .jp-RenderedMarkdown").first
        expect(out).to_contain_text(line)
        expect(mh_cell(page, cid).locator(".jp-OutputArea img")).to_have_count(1)
        # the text alternative beside the figure: one line per head
        expect(mh_cell(page, cid).locator(".jp-OutputArea")).to_contain_text("head 7: ")
    expect(mh_cell(page, "mh_closing_torch")).to_contain_text(
        "same as nn.MultiheadAttention: True")
    mh_cell(page, "mh_cell5_scores_test").scroll_into_view_if_needed()
    mh_cell(page, "mh_cell5_scores_test").screenshot(path=shots / "21-lesson2-cell5-heads.png")
