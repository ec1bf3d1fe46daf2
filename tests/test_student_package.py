"""The student's package (make student) and the student's work folder (make lesson).

The package is built once here, as `make student` builds it (its notebooks run in a fresh
Python to find what ships): no reference notebook, no complete_* file and no solution in
it; its pins are the course's. Installing it into a fresh venv and running it is
tests/package/ (make test-package).

Separate trees: a work folder made from the package, a notebook in it edited, then
`make release FORCE=1`'s code (src.release --force, then src.course release) run in a copy
of the course: the student's files stay byte-identical, the course's own edited lesson is
regenerated with its copy kept.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from src import student_package as sp
from src.layout import ASSIGNMENTS, notebook_of, source_of
from tests.notebook_utils import ROOT

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    out = tmp_path_factory.mktemp("pkg") / sp.NAME
    recorded = sp.build(out)
    return out, recorded


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file())


def solution_lines() -> set[str]:
    """Every code line of every solution in the references (between nbgrader's markers, or
    a whole solution cell without them) that is long enough to be telling."""
    lines = set()
    for a in ASSIGNMENTS:
        for cell in json.loads(source_of(a).read_text(encoding="utf-8"))["cells"]:
            if not cell["metadata"].get("nbgrader", {}).get("solution"):
                continue
            src = "".join(cell["source"])
            blocks = re.findall(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", src, re.S) or [src]
            for block in blocks:
                lines |= {ln.strip() for ln in block.splitlines()
                          if len(ln.strip()) >= 12 and not ln.strip().startswith("#")}
    assert len(lines) > 10
    return lines


def test_the_package_ships_the_student_notebooks_and_no_solution(package):
    out, recorded = package
    names = {p.relative_to(out).as_posix() for p in _files(out)}
    notebooks = {f"{notebook_of(a)}.ipynb" for a in ASSIGNMENTS}
    assert notebooks | {"README.md", "requirements.txt", "verify.py"} <= names
    assert not [n for n in names if "complete" in n or n.endswith(".~1~")], names
    # exactly the notebooks `make release` generates, byte for byte
    for name, text in sp.student_notebooks().items():
        assert (out / name).read_text(encoding="utf-8") == text
    for p in _files(out):
        text = p.read_text(encoding="utf-8", errors="replace")
        for marker in ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS"):
            assert marker not in text, (p, marker)
    # no solution line in a code cell nor in the README (lesson 2's last hint tier, a
    # markdown dropdown the student opens on purpose, writes the lines by design)
    code = [(out / "README.md").read_text(encoding="utf-8")] + [
        "".join(c["source"]) for n in notebooks
        for c in json.loads((out / n).read_text(encoding="utf-8"))["cells"]
        if c["cell_type"] == "code"]
    leaked = [ln for ln in solution_lines() if any(ln in text for text in code)]
    assert leaked == []
    for name in notebooks:
        cells = json.loads((out / name).read_text(encoding="utf-8"))["cells"]
        for cell in cells:
            if cell["metadata"].get("nbgrader", {}).get("solution"):
                assert 'raise NotImplementedError("Your turn' in "".join(cell["source"])


def test_what_ships_is_what_the_notebooks_import_and_no_instructor_tool(package):
    out, recorded = package
    py = {p.relative_to(out).as_posix() for p in _files(out) if p.suffix == ".py"}
    assert py == set(recorded["files"])
    # the live check and the set-up cells need these; the instructor's tools never ship
    for needed in ("verify.py", "src/live.py", "src/road.py", "src/replay.py", "src/data.py",
                   "src/lessons/attention.py", "src/lessons/multihead.py"):
        assert needed in py, needed
    for tool in ("src/course.py", "src/grading.py", "src/release.py", "src/student_package.py",
                 "src/pages.py", "src/safe_html.py", "src/mathjax.py", "attention_validate.py",
                 "nbgrader_config.py"):
        assert tool not in py, tool
    assert not any(p.startswith(("hub/", "tests/", "benchmarks/")) for p in py)
    data = {p.relative_to(out).as_posix() for p in _files(out / "data")}
    assert data == set(recorded["data"]) and "data/embeddings.npy" in data
    readme = (out / "README.md").read_text(encoding="utf-8")
    for rel in recorded["files"] + recorded["data"]:
        if rel != "verify.py":
            assert f"`{rel}`" in readme, rel
    assert "pip install -r requirements.txt" in readme and "jupyter lab" in readme


def test_its_requirements_are_pinned_as_the_courses(package):
    out, _ = package
    course = sp.pins((ROOT / "requirements.txt").read_text(encoding="utf-8"))
    text = (out / "requirements.txt").read_text(encoding="utf-8")
    mine = sp.pins(text)
    assert mine["torch"] == "2.13.0" == course["torch"]
    assert {n: course[n] for n in mine} == mine
    assert {"numpy", "matplotlib", "jupyterlab", "ipykernel", "ipywidgets"} <= set(mine)
    # only what a student needs: no grader, no test or hub tools
    assert not set(mine) & {"nbgrader", "pytest", "ruff", "playwright", "jupyterhub", "nbval"}
    code = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    assert len(code) == len(mine)  # every line a pin


def test_build_refuses_a_folder_it_did_not_write(tmp_path, package):
    _, recorded = package
    (tmp_path / "mine.txt").write_text("someone's")
    with pytest.raises(sp.PackageError, match="left untouched"):
        sp.build(tmp_path, recorded=recorded)
    assert (tmp_path / "mine.txt").read_text() == "someone's"


def _course_copy(dest: Path) -> Path:
    """The files `make release` reads and writes, copied to ``dest`` (its ROOT there)."""
    dest.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("src", "data"):
        shutil.copytree(ROOT / name, dest / name, ignore=ignore)
    for name in ("verify.py", "nbgrader_config.py", "attention_validate.py",
                 *(f"{notebook_of(a)}.ipynb" for a in ASSIGNMENTS),
                 *(source_of(a).name for a in ASSIGNMENTS)):
        shutil.copyfile(ROOT / name, dest / name)
    return dest


def test_release_with_force_never_touches_the_students_work_folder(tmp_path, package):
    _, recorded = package
    root = _course_copy(tmp_path / "repo")
    work = root / "student"
    said = sp.work_folder(work, recorded=recorded)
    assert "made from the student package" in said
    nb = work / "lesson.ipynb"
    doc = json.loads(nb.read_text(encoding="utf-8"))
    for cell in doc["cells"]:
        if cell["metadata"].get("nbgrader", {}).get("grade_id") == "cell4_projections":
            cell["source"] = "query, key, value = q_proj(x), k_proj(x), v_proj(x)\n"
    nb.write_text(json.dumps(doc), encoding="utf-8")
    before = {p: p.read_bytes() for p in _files(work)}
    # the course's own lesson edited too, so that FORCE has something to regenerate
    own = root / "lesson.ipynb"
    own.write_text(own.read_text(encoding="utf-8").replace("YOUR CODE HERE", "mine", 1))
    env = {k: v for k, v in os.environ.items() if k not in ("ATTENTION_COURSE_DIR", "PYTHONPATH")}
    said = []
    for args in (["-m", "src.release", "--force"], ["-m", "src.course", "release"]):
        proc = subprocess.run([sys.executable, *args], cwd=root, env=env, capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        said.append(proc.stdout)
    assert "the edited copy was saved as lesson.ipynb.~1~" in said[0], said
    assert (root / "lesson.ipynb.~1~").exists() and "mine" not in own.read_text()
    assert (root / "course" / "release" / "attention" / "lesson.ipynb").is_file()
    assert {p: p.read_bytes() for p in _files(work)} == before
    # make lesson again: the folder exists, so it is opened as it is
    assert "opened as it is" in sp.work_folder(work, recorded=recorded)
    assert {p: p.read_bytes() for p in _files(work)} == before


def test_make_lesson_opens_the_work_folder_and_formgrader_the_repository():
    env = dict(os.environ, MAKEFLAGS="")
    lesson = subprocess.run(["make", "-n", "lesson"], cwd=ROOT, capture_output=True,
                            text=True, timeout=60, env=env).stdout
    assert "-m src.student_package --work student" in lesson
    assert re.search(r"^cd student && .*jupyter lab lesson\.ipynb", lesson, re.M), lesson
    grader = subprocess.run(["make", "-n", "formgrader"], cwd=ROOT, capture_output=True,
                            text=True, timeout=60, env=env).stdout
    assert re.search(r"^PYTHONPATH=\S+ \.venv/bin/jupyter lab ", grader, re.M), grader
    with pytest.raises(sp.PackageError):
        sp.work_folder(ROOT)
    assert "/student/" in (ROOT / ".gitignore").read_text().splitlines()
