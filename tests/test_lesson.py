"""complete_lesson.ipynb is the source; lesson.ipynb is generated from it."""

import ast
import contextlib
import io
import json
import re
import subprocess
import sys

import nbformat
import numpy as np
import pytest
import torch

import verify
from src import release
from tests.notebook_utils import (
    LESSON,
    ROOT,
    SOURCE,
    cells_by_id,
    check_calls,
    load,
    run_steps,
    source,
)

#: grade cell -> its points, as nbgrader's metadata must carry them.
GRADED = {gid: sum(steps.values()) for gid, steps in verify.GRADE_CELLS.items()}


def test_committed_lesson_is_what_the_source_generates():
    release.check()  # raises with "run `make release`" on drift


def test_generation_is_byte_identical_across_runs():
    nb = release.read(SOURCE)
    assert release.dumps(release.generate(nb)) == release.dumps(release.generate(nb))


def test_the_notebooks_mirror_each_other():
    ref, les = load(SOURCE)["cells"], load(LESSON)["cells"]
    assert [c["id"] for c in ref] == [c["id"] for c in les]
    assert [c["cell_type"] for c in ref] == [c["cell_type"] for c in les]
    for r, s in zip(ref, les, strict=True):
        if r["cell_type"] == "markdown":
            assert source(r) == source(s), r["id"]


def test_lesson_has_stubs_no_solutions_no_hidden_tests_no_outputs():
    text = LESSON.read_text()
    for marker in ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"):
        assert marker not in text
    for cell in load(LESSON)["cells"]:
        meta = cell["metadata"].get("nbgrader", {})
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and cell["execution_count"] is None
        if meta.get("solution"):
            assert 'raise NotImplementedError("Your turn' in source(cell), cell["id"]
    ref = {c["id"]: source(c) for c in load(SOURCE)["cells"]}
    assert "q_proj(x)" in ref["cell4_projections"]
    assert "q_proj(x)" not in {c["id"]: source(c) for c in load(LESSON)["cells"]}[
        "cell4_projections"]


def test_headings_and_nbgrader_metadata():
    cells = load(SOURCE)["cells"]
    text = "\n".join(source(c) for c in cells if c["cell_type"] == "markdown")
    for n, title in [(1, "What you will learn"), (2, "Set-up"), (3, "The data"),
                     (4, "Linear projections"), (5, "Scaled dot-product scores"),
                     (6, "Softmax and attention weights"), (7, "Value aggregation")]:
        assert f"## Cell {n} — {title}" in text
    ids = [c["metadata"]["nbgrader"]["grade_id"] for c in cells if "nbgrader" in c["metadata"]]
    assert len(ids) == len(set(ids)) and all(re.fullmatch(r"[A-Za-z0-9_-]+", i) for i in ids)
    points = {c["metadata"]["nbgrader"]["grade_id"]: c["metadata"]["nbgrader"]["points"]
              for c in cells if c["metadata"].get("nbgrader", {}).get("grade")}
    assert points == GRADED
    # every step cell and its test carry the cell number in their grade_id
    for n in (4, 5, 6, 7):
        assert sum(i.startswith(f"cell{n}_") for i in ids) >= 2


def test_points_agree_with_verify():
    assert GRADED == {"cell4_projections_test": 2.0, "cell5_scores_test": 2.0,
                      "cell6_softmax_test": 3.0, "cell7_values_test": 2.0}
    # each test cell calls exactly the checks verify.GRADE_CELLS lists for it
    step_of = {"check_projections": "projections", "check_attention_scores":
               "attention_scores", "check_softmax": "softmax",
               "check_attention_weights": "attention_weights",
               "check_attended_values": "attended_values"}
    for gid, calls in check_calls(SOURCE).items():
        assert [step_of[c.split("(")[0]] for c in calls] == list(verify.GRADE_CELLS[gid])


def test_test_cells_have_no_hidden_tests_and_end_with_their_points():
    """The stricter checks live in verify.judge(strict=True), run by the trusted grader;
    nbgrader reads a cell's partial credit from its last line."""
    assert "HIDDEN TESTS" not in SOURCE.read_text()
    for cell in load(SOURCE)["cells"]:
        if not cell["metadata"].get("nbgrader", {}).get("grade"):
            continue
        text = source(cell)
        assert "importlib" not in text and "strict=True" not in text
        last = ast.parse(text).body[-1]
        assert isinstance(last, ast.Expr) and ast.unparse(last) in (
            "result.points", "Summary(results).points"), cell["id"]


def test_hints_are_collapsed_details_and_never_the_answer():
    cells = {c["id"]: source(c) for c in load(SOURCE)["cells"]}
    answers = {"cell4-hint": "q_proj(x)", "cell5-hint": "query @ key.transpose",
               "cell6-hint": "exps /", "cell7-hint": "attention_weights @ value"}
    for cid, answer in answers.items():
        hint = cells[cid]
        assert hint.startswith("<details>") and "<details open" not in hint
        assert hint.count("<details>") == 2  # a nudge, then a walk through the shapes
        assert answer not in hint


def test_reference_is_committed_clean_with_text_outputs():
    nb = load(SOURCE)
    counts = [c["execution_count"] for c in nb["cells"] if c["cell_type"] == "code"]
    assert counts == list(range(1, len(counts) + 1))  # run once, top to bottom
    for cell in nb["cells"]:
        assert "execution" not in cell["metadata"]
        for out in cell.get("outputs", []):
            assert out["output_type"] != "error", cell["id"]
            assert not any(k.startswith("image/") for k in out.get("data", {}))
    assert "widgets" not in nb["metadata"]


def copy_pair(tmp_path):
    src, les = tmp_path / SOURCE.name, tmp_path / LESSON.name
    src.write_bytes(SOURCE.read_bytes())
    les.write_bytes(LESSON.read_bytes())
    return src, les


def test_release_leaves_an_up_to_date_lesson_alone(tmp_path):
    src, les = copy_pair(tmp_path)
    assert "up to date" in release.release(src, les)
    assert les.read_bytes() == LESSON.read_bytes()


def test_release_regenerates_an_untouched_lesson_after_a_source_change(tmp_path):
    src, les = copy_pair(tmp_path)
    nb = nbformat.read(src, as_version=4)
    nb.cells[0].source += "\n\nA new sentence."
    nbformat.write(nb, src)
    assert "generated" in release.release(src, les)
    assert "A new sentence." in les.read_text()
    assert not list(tmp_path.glob("*.~*~"))


@pytest.mark.parametrize("edit", [
    lambda nb: setattr(nb.cells[7], "source", nb.cells[7].source + "\nquery = q_proj(x)"),
    lambda nb: nb.cells.append(nbformat.v4.new_code_cell("my notes")),
])
def test_release_refuses_to_overwrite_a_students_work(tmp_path, edit):
    src, les = copy_pair(tmp_path)
    nb = nbformat.read(les, as_version=4)
    edit(nb)
    nbformat.write(nb, les)
    edited = les.read_bytes()
    with pytest.raises(release.ReleaseError, match="has been edited.*FORCE=1"):
        release.release(src, les)
    assert les.read_bytes() == edited
    # forced: regenerated, and the student's file kept beside it
    assert "saved as lesson.ipynb.~1~" in release.release(src, les, force=True)
    assert (tmp_path / "lesson.ipynb.~1~").read_bytes() == edited
    assert les.read_bytes() == LESSON.read_bytes()


def test_release_refuses_a_lesson_that_is_not_json(tmp_path):
    src, les = copy_pair(tmp_path)
    les.write_text("{ not json")
    with pytest.raises(release.ReleaseError, match="has been edited"):
        release.release(src, les)
    assert les.read_text() == "{ not json"


def test_release_cli_exit_codes(tmp_path):
    res = subprocess.run([sys.executable, "-m", "src.release", "--check"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and "up to date" in res.stdout


@pytest.mark.slow
def test_untouched_lesson_stops_at_the_first_stub_with_a_friendly_message():
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(LESSON, as_version=4)
    for cell in nb.cells:  # JupyterLab ignores the raises-exception tags nbval needs
        cell.metadata.pop("tags", None)
    client = NotebookClient(nb, timeout=60, kernel_name="python3",
                            resources={"metadata": {"path": str(ROOT)}})
    with pytest.raises(CellExecutionError) as info:
        client.execute()
    assert "NotImplementedError" in str(info.value)
    assert "Your turn: replace this line with your code" in str(info.value)
    ran = [c.id for c in nb.cells if c.cell_type == "code" and c.get("execution_count")]
    assert ran == ["cell2_setup", "cell3_data", "cell4_projections"]
    errors = [c.id for c in nb.cells
              if any(o.get("output_type") == "error" for o in c.get("outputs", []))]
    assert errors == ["cell4_projections"]


def nbgrader_validate(tmp_path, name, *flags):
    """Run `nbgrader validate` on a copy of ``name`` beside the course files."""
    for item in ("src", "data", "verify.py"):
        (tmp_path / item).symlink_to(ROOT / item)
    (tmp_path / name).write_bytes((ROOT / name).read_bytes())
    res = subprocess.run([sys.executable, "-m", "nbgrader", "validate", *flags, name],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    return res.stdout + res.stderr


@pytest.mark.slow
def test_nbgrader_validate_passes_on_the_reference(tmp_path):
    out = nbgrader_validate(tmp_path, SOURCE.name)
    # nbgrader exits 0 even when tests fail (#1908): read what it says
    assert "Success! Your notebook passes all the tests." in out, out


@pytest.mark.slow
def test_nbgrader_validate_invert_fails_every_test_of_the_lesson(tmp_path):
    out = nbgrader_validate(tmp_path, LESSON.name, "--invert")
    assert "Success! The notebook does not pass any tests." in out, out


def test_lesson_metadata_stamp():
    meta = json.loads(LESSON.read_text())["metadata"][release.STAMP_KEY]
    assert meta["generated_from"] == "complete_lesson.ipynb"
    assert release.is_pristine(LESSON)


# Any value a student can leave in a name, for the locked lines to survive.
JUNK = [None, "text", 3, [1.0, 2.0], np.zeros((1, 6, 6)), torch.zeros(1, 6, 6, dtype=torch.int64),
        torch.full((1, 6, 6), float("nan")), torch.zeros(1, 6, 6, dtype=torch.complex64),
        torch.zeros(1, 6, 6).to_sparse(), torch.zeros(1, 6, 6, device="meta"),
        torch.zeros(1, 6, 6, dtype=torch.float64), torch.zeros(6, 6), torch.zeros(1, 6, 64),
        torch.zeros(0), lambda *a, **k: None]


@pytest.fixture(scope="module")
def solved():
    return run_steps(cells_by_id(SOURCE))


def _run(code, ns):
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(code, "<locked>", "exec"), ns)  # noqa: S102


@pytest.mark.parametrize("junk", JUNK, ids=range(len(JUNK)))
def test_locked_lines_work_for_any_value_a_student_leaves(solved, junk):
    """The test cells never raise, and the student cells' own lines after the solution
    raise only their clear AssertionError, whatever the names hold: every name at once,
    and the weights or the values alone (the others right)."""
    cells = cells_by_id(SOURCE)
    names = ["query", "key", "value", "attention_scores", "softmax", "attention_weights",
             "attended_values"]
    locked = cells["cell6_softmax"].split("### END SOLUTION\n")[-1]
    for changed, tests in ((names, list(verify.GRADE_CELLS)),
                           (["attention_weights"], ["cell6_softmax_test", "cell7_values_test"]),
                           (["attended_values"], ["cell7_values_test"])):
        ns = dict(solved, display=lambda *a, **k: None)
        ns.update(dict.fromkeys(changed, junk))
        for cid in tests:
            _run(cells[cid], ns)
        try:
            _run(locked, ns)
        except AssertionError:
            pass
