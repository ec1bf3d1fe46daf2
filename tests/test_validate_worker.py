"""The Validate worker (src/validate.py) as attention_validate.py drives it: a real process
with a real replay server, its line protocol, its answers equal to verify.py's, its errors
said, and its exit when idle (the browser tests drive it through JupyterLab's button)."""

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import verify

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A course folder as a student has it: the lesson, verify.py, src/ and data/."""
    work = tmp_path_factory.mktemp("validate")
    for name in ("lesson.ipynb", "complete_lesson.ipynb", "verify.py"):
        shutil.copy(ROOT / name, work / name)
    for name in ("src", "data"):
        shutil.copytree(ROOT / name, work / name, ignore=shutil.ignore_patterns("__pycache__"))
    return work


def start(folder, idle=None):
    env = {"PYTHONPATH": str(folder), "PATH": "/usr/bin"}
    if idle is not None:
        env["ATTENTION_VALIDATE_IDLE"] = str(idle)
    return subprocess.Popen([sys.executable, "-m", "src.validate", "serve"], cwd=folder,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)


def ask(proc, line):
    proc.stdin.write(line + "\n")
    proc.stdin.flush()
    return json.loads(proc.stdout.readline())


def test_the_worker_answers_each_check_cell_as_verify_py_does(folder):
    proc = start(folder)
    try:
        right = ask(proc, json.dumps({"id": "a", "path": str(folder / "complete_lesson.ipynb")}))
        assert right["id"] == "a" and right["lesson"] == verify.LESSON.name
        assert set(right["cells"]) == set(verify.GRADE_CELLS)
        assert all(c["score"] == c["max_score"] for c in right["cells"].values())
        stub = ask(proc, json.dumps({"id": "b", "path": str(folder / "lesson.ipynb")}))
        report, _ = verify.run_notebook(folder / "lesson.ipynb")
        for test, cell in stub["cells"].items():
            assert cell["score"] == report["cells"][test]["score"] == 0
            assert report["cells"][test]["results"][0]["message"].splitlines()[0] in cell["text"]
        # what it cannot read is said, and the worker goes on
        (folder / "not-a-notebook.ipynb").write_text("{")
        bad = ask(proc, json.dumps({"id": "c", "path": str(folder / "not-a-notebook.ipynb")}))
        assert "not valid JSON" in bad["error"]
        assert "expected a JSON object" in ask(proc, "[1, 2]")["error"]
        (folder / "other.ipynb").write_text(json.dumps({"cells": [], "nbformat": 4}))
        other = ask(proc, json.dumps({"id": "d", "path": str(folder / "other.ipynb")}))
        assert other["lesson"] is None and "cells" not in other  # (nbgrader's kernel, then)
    finally:
        proc.stdin.close()
        assert proc.wait(timeout=30) == 0  # stdin closed: it stops


def test_an_idle_worker_stops_and_gives_its_memory_back(folder):
    proc = start(folder, idle=1)
    t0 = time.monotonic()
    assert proc.wait(timeout=30) == 0
    assert time.monotonic() - t0 >= 1
