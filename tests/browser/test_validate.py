"""The student's Validate button (nbgrader's lab extension) on this lesson, in real JupyterLab
and headless Chromium: a wrong Cell 7 is named with what the check said, four right cells
get nbgrader's success message. Screenshots: screenshots/validate-*.png."""

import json

import pytest
from playwright.sync_api import expect

from tests.cohort.build import solved_sources
from tests.notebook_utils import LESSON

pytestmark = pytest.mark.slow
NOTEBOOK = ".jp-NotebookPanel:not(.lm-mod-hidden)"
WRONG_CELL7 = ("attended_values = attention_weights @ value",
               "attended_values = attention_weights.transpose(-2, -1) @ value")


def student_notebook(work, name, wrong_cell7):
    """lesson.ipynb with the four answers filled in as a student types them."""
    nb = json.loads(LESSON.read_text())
    solved = solved_sources()
    for cell in nb["cells"]:
        if cell.get("id") in solved and cell["metadata"].get("nbgrader", {}).get("solution"):
            src = solved[cell["id"]]
            if wrong_cell7 and cell["id"] == "cell7_values":
                assert WRONG_CELL7[0] in src
                src = src.replace(*WRONG_CELL7)
            cell["source"] = src
    (work / name).write_text(json.dumps(nb))
    return name


def validate(page, lab, name):
    """Open ``name``, press the toolbar's Validate button, return the results dialog."""
    url, _ = lab
    page.goto(f"{url}/lab/workspaces/{name.replace('.', '-')}/tree/{name}?reset")
    page.wait_for_selector(f"{NOTEBOOK} .jp-Cell")
    page.locator(f"{NOTEBOOK} .jp-Toolbar").get_by_text("Validate", exact=True).click()
    dialog = page.locator(".jp-Dialog")
    expect(dialog).to_contain_text("Validation Results", timeout=180_000)
    return dialog


def test_validate_names_the_failing_cell_with_the_checks_message(page, lab, shots):
    _, work = lab
    dialog = validate(page, lab, student_notebook(work, "validate-wrong7.ipynb", True))
    text = dialog.inner_text()
    assert "The following cell failed:" in text
    assert "check_attended_values" in text  # the failing cell is shown ...
    assert "[FAIL] Cell 7 — value aggregation: 0/2 points" in text  # ... with what it said
    assert "Mistake:" in text and "Next step:" in text
    for cell in ("Cell 4", "Cell 5", "Cell 6"):
        assert f"[FAIL] {cell}" not in text
    assert "Traceback" not in text and "Partial credit" not in text
    page.screenshot(path=shots / "validate-1-cell7-wrong.png")


def test_validate_reports_success_when_all_four_are_right(page, lab, shots):
    _, work = lab
    dialog = validate(page, lab, student_notebook(work, "validate-right.ipynb", False))
    expect(dialog).to_contain_text("Success! Your notebook passes all the tests.")
    page.screenshot(path=shots / "validate-2-success.png")
