"""Both assignments through the instructor's commands: `make release`, `make grade`,
`make feedback` and `make export` (``python -m src.course ...``) handle every lesson.

One course in a temporary folder: both lessons released; alice submits both (right),
bob submits lesson 2 only, with the causal mask left out of Cell 5. Graded in the
sandbox, with feedback and the grades' export.
"""

from __future__ import annotations

import contextlib
import csv
import io

import nbformat
import pytest

from src import course, lessons, sandbox
from src.layout import ASSIGNMENTS
from tests.notebook_utils import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    sandbox.unavailable_reason() is not None,
    reason=f"no sandbox here: {sandbox.unavailable_reason()}")]


def _submission(spec, replace=()):
    """The released notebook with the reference's solutions, ``replace`` edits applied."""
    ref = {c.id: c.source for c in nbformat.read(ROOT / f"{spec.source}.ipynb", 4).cells}
    nb = nbformat.read(course.course_dir() / "release" / spec.name / f"{spec.notebook}.ipynb", 4)
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("solution"):
            cell.source = ref[cell.id]
            for old, new in replace:
                cell.source = cell.source.replace(old, new)
    return nbformat.writes(nb)


def _cli(*args) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = course.main(list(args))
    return code, out.getvalue()


def test_release_grade_feedback_and_export_handle_both_assignments(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTENTION_COURSE_DIR", str(tmp_path / "course"))
    assert ASSIGNMENTS == ("attention", "multihead")
    code, said = _cli("release")
    assert code == 0 and said.count("released to") == 2, said
    for name in ASSIGNMENTS:
        spec = lessons.lesson(name)
        assert (tmp_path / "course" / "release" / name / f"{spec.notebook}.ipynb").is_file()
    mh = lessons.lesson("multihead")
    no_mask = [('(raw_scores / math.sqrt(d_k)).masked_fill(~causal_mask, float("-inf"))',
                "raw_scores / math.sqrt(d_k)")]
    subs = {("alice", "attention"): _submission(lessons.lesson("attention")),
            ("alice", "multihead"): _submission(mh),
            ("bob", "multihead"): _submission(mh, no_mask)}
    for (student, name), text in subs.items():
        folder = tmp_path / "course" / "submitted" / student / name
        folder.mkdir(parents=True)
        (folder / f"{lessons.lesson(name).notebook}.ipynb").write_text(text)
    code, said = _cli("grade", "--jobs", "1")
    assert code == 0, said
    assert "attention:" in said and "multihead:" in said, said
    scores = course.per_cell_scores(assignment="multihead")
    assert {g: a for g, (a, _, _) in scores["alice"].items()} == {
        s.test: 2.0 for s in mh.steps}
    assert scores["bob"]["mh_cell5_scores_test"][0] == 0.0
    assert sum(a for a, _, _ in scores["bob"].values()) == 6.0
    assert sum(a for a, _, _ in course.per_cell_scores()["alice"].values()) == 9.0
    code, said = _cli("feedback")
    assert code == 0 and said.count("feedback on") == 2, said
    html = (tmp_path / "course" / "feedback" / "bob" / "multihead" / "multihead.html").read_text()
    assert "the causal mask is missing" in html and "data:image/png" in html
    code, said = _cli("export")
    assert code == 0, said
    with open(tmp_path / "course" / "grades.csv", newline="") as f:
        rows = {(r["assignment"], r["student_id"]): float(r["score"]) for r in csv.DictReader(f)}
    assert rows[("attention", "alice")] == 9.0
    assert rows[("multihead", "alice")] == 8.0 and rows[("multihead", "bob")] == 6.0
