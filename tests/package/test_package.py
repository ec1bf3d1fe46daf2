"""The student package, for real (make test-package; not in make test).

From an empty temporary directory, as a student given only the package: `make student`'s
code writes it there (``python -m src.student_package --out DIR``); ``python3.11 -m venv
.venv`` and ``.venv/bin/pip install -r requirements.txt`` install it (pip takes torch's
CPU build from its local find-links here, in seconds); both notebooks run top to bottom
in that venv's own kernel from that directory, with nothing of the repository on the path
(the step cells raise NotImplementedError by design: the set-up cells must run and every
check cell must say its step still holds its stub, with 0 points); ``python verify.py
lesson.ipynb --json`` runs there; and ``.venv/bin/jupyter lab`` started there serves
lesson.ipynb (GET /api/contents/lesson.ipynb and /lab/tree/lesson.ipynb: 200).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from src.layout import ASSIGNMENTS, notebook_of
from src.lessons import lesson as spec_of
from tests.notebook_utils import ROOT

pytestmark = pytest.mark.package
PYTHON311 = shutil.which("python3.11")


def _env(home: Path) -> dict:
    """The environment of a student's shell: no repository on the path, private Jupyter
    folders."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "ATTENTION_COURSE_DIR")
           and not k.startswith("JUPYTER")}
    env.update(JUPYTER_CONFIG_DIR=str(home / "jupyter-config"),
               JUPYTER_DATA_DIR=str(home / "jupyter-data"),
               JUPYTER_RUNTIME_DIR=str(home / "jupyter-runtime"),
               IPYTHONDIR=str(home / "ipython"), MPLBACKEND="Agg")
    settings = (home / "jupyter-config" / "lab" / "user-settings" / "@jupyterlab"
                / "apputils-extension")
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
    return env


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(package dir, its venv's python, env): the package written into an empty folder and
    installed there into a fresh venv."""
    if PYTHON311 is None:
        pytest.skip("no python3.11 on PATH")
    base = tmp_path_factory.mktemp("student-home")
    pkg = base / "attention-course"
    built = subprocess.run([sys.executable, "-m", "src.student_package", "--out", str(pkg)],
                           cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr
    env = _env(base)
    subprocess.run([PYTHON311, "-m", "venv", ".venv"], cwd=pkg, env=env, check=True,
                   timeout=300)
    pip = subprocess.run([".venv/bin/pip", "install", "--disable-pip-version-check",
                          "--quiet", "-r", "requirements.txt"], cwd=pkg, env=env,
                         capture_output=True, text=True, timeout=1200)
    assert pip.returncode == 0, pip.stderr[-3000:]
    return pkg, pkg / ".venv" / "bin" / "python", env


def _kernelspec(pkg: Path, python: Path, env: dict) -> str:
    """A kernelspec that starts the package venv's own ipykernel; its name."""
    spec = Path(env["JUPYTER_DATA_DIR"]) / "kernels" / "student-venv"
    spec.mkdir(parents=True, exist_ok=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "the package's venv", "language": "python", "env": {}}))
    return "student-venv"


def _text(cell) -> str:
    out = []
    for o in cell.get("outputs", []):
        if o.get("output_type") == "stream":
            out.append(o["text"])
        elif "data" in o:
            out.append(o["data"].get("text/plain", ""))
        elif o.get("output_type") == "error":
            out.append(f"{o['ename']}: {o['evalue']}")
    return "".join(out)


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_each_notebook_runs_in_the_packages_own_kernel(installed, assignment, monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    pkg, python, env = installed
    for key in list(os.environ):
        if key not in env:
            monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    spec = spec_of(assignment)
    nb = nbformat.read(pkg / f"{notebook_of(assignment)}.ipynb", as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(
        "import sys, src, verify\nprint(sys.executable)\nprint(verify.__file__)\n"
        "print(src.__file__)"))
    NotebookClient(nb, kernel_name=_kernelspec(pkg, python, env), timeout=180,
                   allow_errors=True, resources={"metadata": {"path": str(pkg)}}).execute()
    by_id = {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in nb.cells}
    where = _text(nb.cells[-1]).split()
    assert where[0] == str(python)
    assert all(Path(p).resolve().is_relative_to(pkg.resolve()) for p in where[1:]), where
    for cell_id in spec.setup_cells:
        assert not [o for o in by_id[cell_id].outputs if o.output_type == "error"], cell_id
    for step in spec.steps:
        said = _text(by_id[step.cell])
        assert "NotImplementedError" in said, (step.cell, said)
        checked = _text(by_id[step.test])
        assert "still holds its stub" in checked and "[FAIL]" in checked, (step.test, checked)
        assert not [o for o in by_id[step.test].outputs if o.output_type == "error"], step.test
        assert float(by_id[step.test].outputs[-1]["data"]["text/plain"]) == 0, checked
    # no other cell raised: the closing cells run on the stubs too
    errors = [c.metadata.get("nbgrader", {}).get("grade_id") or c.get("id") for c in nb.cells
              if c.cell_type == "code" and any(o.output_type == "error" for o in c.outputs)]
    assert set(errors) == {s.cell for s in spec.steps}, errors


def test_verify_runs_from_the_package(installed):
    pkg, python, env = installed
    proc = subprocess.run([str(python), "verify.py", "lesson.ipynb", "--json"], cwd=pkg,
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr  # every step fails: the stubs
    report = json.loads(proc.stdout)
    assert report and "NotImplementedError" in proc.stdout


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_jupyter_lab_starts_there_and_serves_the_lesson(installed):
    pkg, python, env = installed
    port = _port()
    cmd = [str(pkg / ".venv" / "bin" / "jupyter"), "lab", "--no-browser", "--ip", "127.0.0.1",
           "--port", str(port), "--IdentityProvider.token=", "--ServerApp.password="]
    if os.geteuid() == 0:
        cmd.append("--allow-root")
    log = open(pkg.parent / "lab.log", "w")
    server = subprocess.Popen(cmd, cwd=pkg, env=env, stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True)
    try:
        deadline, status = time.monotonic() + 90, {}
        while time.monotonic() < deadline and len(status) < 2:
            assert server.poll() is None, (pkg.parent / "lab.log").read_text()[-2000:]
            for path in ("/api/contents/lesson.ipynb", "/lab/tree/lesson.ipynb"):
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}",
                                                timeout=5) as r:
                        status[path] = (r.status, r.read())
                except OSError:
                    time.sleep(0.5)
        assert {p: s for p, (s, _) in status.items()} == {
            "/api/contents/lesson.ipynb": 200, "/lab/tree/lesson.ipynb": 200}, status
        content = json.loads(status["/api/contents/lesson.ipynb"][1])
        assert content["type"] == "notebook" and content["name"] == "lesson.ipynb"
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()
