"""The student's Validate button (nbgrader's lab extension) on this lesson, in real JupyterLab
and headless Chromium: a wrong Cell 7 is named with what the check said, four right cells
get nbgrader's success message, both answered without a kernel by the warm worker of
attention_validate.py (the road grading takes); an edited check cell is reported as
nbgrader reports it, and a notebook that is not a lesson still runs in nbgrader's kernel.
Screenshots: screenshots/validate-*.png."""

import json
import os
from pathlib import Path

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


def workers(folder: Path) -> list[int]:
    """Pids of the Validate workers (``python -m src.validate serve``) running in
    ``folder``."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
            cwd = os.readlink(proc / "cwd")
        except OSError:
            continue
        if b"src.validate" in cmd and b"serve" in cmd and Path(cwd) == folder.resolve():
            found.append(int(proc.name))
    return found


def test_validate_names_the_failing_cell_with_the_checks_message(page, lab, shots):
    _, work = lab
    dialog = validate(page, lab, student_notebook(work, "validate-wrong7.ipynb", True))
    assert len(workers(work)) == 1  # answered by the lesson's worker, not a kernel
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


def test_a_second_validate_reuses_the_warm_worker_and_agrees_with_verify(page, lab):
    import verify

    _, work = lab
    name = student_notebook(work, "validate-again.ipynb", True)
    before = workers(work)
    dialog = validate(page, lab, name)
    assert workers(work) == before and before  # the same worker, warm
    report, _ = verify.run_notebook(work / name)
    cell7 = report["cells"]["cell7_values_test"]["results"][0]
    first = cell7["message"].splitlines()[0]
    assert first in " ".join(dialog.inner_text().split()) or first in dialog.inner_text()


def test_an_edited_check_cell_is_reported_as_nbgrader_reports_it(page, lab):
    _, work = lab
    nb = json.loads((work / student_notebook(work, "validate-edited.ipynb", False)).read_text())
    test = next(c for c in nb["cells"] if c.get("id") == "cell7_values_test")
    test["source"] = "# Check for Cell 7\npass\n"
    (work / "validate-edited.ipynb").write_text(json.dumps(nb))
    dialog = validate(page, lab, "validate-edited.ipynb")
    expect(dialog).to_contain_text("The source of the following cell has changed")


def test_a_notebook_that_is_not_a_lesson_runs_in_nbgraders_kernel(page, lab):
    _, work = lab
    cell = {"cell_type": "code", "execution_count": None, "id": "other_test", "outputs": [],
            "source": "assert 1 + 1 == 3, 'arithmetic is off'",
            "metadata": {"nbgrader": {"grade": True, "solution": False, "locked": False,
                                      "points": 1, "grade_id": "other_test",
                                      "schema_version": 3}}}
    nb = {"cells": [cell], "metadata": {"kernelspec": {"name": "python3",
                                                        "display_name": "Python 3",
                                                        "language": "python"}},
          "nbformat": 4, "nbformat_minor": 5}
    (work / "validate-other.ipynb").write_text(json.dumps(nb))
    dialog = validate(page, lab, "validate-other.ipynb")
    expect(dialog).to_contain_text("arithmetic is off")  # (from the kernel's traceback)
