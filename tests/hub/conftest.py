"""A real class on JupyterHub for the hub tests, started by the code behind `make hub`.

`python -m hub.classroom up` runs as a subprocess (as `make hub` runs it) with two
students, a private base directory, users with a prefix of their own (removed again at
the end) and no release: the instructor releases in the Formgrader. At the end the
launcher gets SIGINT, as from Ctrl-C, and nothing of the class may be left running.

These tests need root (users, LocalProcessSpawner), bwrap, Node with hub/node_modules and
Debian's Chromium; without one of them they are skipped with the reason. They never run
in `make test` (marker ``hub``): `make test-hub`.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from hub import classroom
from tests.browser.conftest import CHROMIUM, FLAGS

ROOT = Path(__file__).resolve().parents[2]
PREFIX = "atttest-"  # never the users of a running `make hub` ("att-")
#: What the tests need in JupyterLab: every cell rendered (Playwright finds them by index).
TEST_LAB_SETTINGS = {"notebook-extension/tracker": {"windowingMode": "none"}}


def skip_reason() -> str | None:
    if os.geteuid() != 0:
        return ("the hub tests create Unix users and start servers as them: they need root "
                f"(running as uid {os.geteuid()}); run `sudo make test-hub`")
    if shutil.which("bwrap") is None:
        return "bubblewrap (bwrap) is missing: .ci/run installs it with apt"
    if shutil.which("node") is None:
        return "Node.js is missing: .ci/run installs nodejs and npm with apt"
    if not os.access(classroom.PROXY, os.X_OK):
        return f"{classroom.PROXY} is missing: run `make test-hub` (npm ci --prefix hub)"
    if not CHROMIUM.exists():
        return f"Chromium not found at {CHROMIUM}: .ci/run installs it with apt"
    return None


def pytest_collection_modifyitems(config, items):
    reason = skip_reason()
    if reason:
        for item in items:
            if "tests/hub/" in item.nodeid:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def room():
    """A running class: (Classroom, its launcher's process), stopped with SIGINT after."""
    base = Path(tempfile.mkdtemp(prefix="attention-hub-test-"))
    os.chmod(base, 0o755)  # the users traverse it to their homes and the exchange
    room = classroom.Classroom(base=base, port=classroom.free_port(), students=2,
                               prefix=PREFIX, home_base=base / "home", release=False,
                               extra_lab_settings=TEST_LAB_SETTINGS)
    classroom.remove_users(room)  # a crashed earlier run's users, if any
    log = open(base / "launcher.log", "w")
    cmd = [sys.executable, "-m", "hub.classroom", "up", "--base", str(room.base),
           "--port", str(room.port), "--students", "2", "--prefix", PREFIX,
           "--home-base", str(room.home_base), "--no-release",
           "--lab-settings", json.dumps(TEST_LAB_SETTINGS)]
    launcher = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        deadline = time.monotonic() + 600  # the first run builds the class's environment
        while "The class is up" not in (base / "launcher.log").read_text():
            if launcher.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("make hub's launcher did not bring the class up (expected "
                                   "'The class is up'); its output:\n"
                                   + (base / "launcher.log").read_text())
            time.sleep(0.5)
        yield room, launcher
    finally:
        stopped = _stop(launcher)
        log.close()
        left = classroom.leftovers(room)
        output = (base / "launcher.log").read_text()
        classroom.remove_users(room)
        shutil.rmtree(base, ignore_errors=True)
        assert stopped == 0 and "nothing left running" in output, (
            f"expected Ctrl-C to stop everything (exit 0, 'nothing left running'); exit "
            f"{stopped}, output:\n{output[-3000:]}")
        assert left == [], f"still running after the hub stopped: {left}"


def _stop(launcher: subprocess.Popen) -> int:
    """Ctrl-C for the launcher; its own return code (killed after 120 s: -9)."""
    if launcher.poll() is None:
        launcher.send_signal(signal.SIGINT)
        try:
            return launcher.wait(timeout=120)
        except subprocess.TimeoutExpired:
            launcher.kill()
            return launcher.wait(timeout=10)
    return launcher.returncode


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)
        yield chromium
        chromium.close()


@pytest.fixture(scope="session")
def shots():
    path = ROOT / "screenshots"
    path.mkdir(exist_ok=True)
    return path
