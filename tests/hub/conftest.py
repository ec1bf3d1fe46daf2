"""A real class on JupyterHub for the hub tests, started by the code behind `make hub`.

`python -m hub.classroom up` runs as a subprocess (as `make hub` runs it) with a class
list of two students, a private base directory, users with a prefix of their own (removed
again at the end) and no release: the instructor releases in the Formgrader. It listens
over TLS (a self-signed certificate made with openssl, docs/instructor.md's command) on this
machine's non-loopback address (127.0.0.1 only if it has none). At the end the launcher gets
SIGINT, as from Ctrl-C, and nothing of the class may be left running.

These tests need root (users, LocalProcessSpawner), bwrap, Node with hub/node_modules and
Debian's Chromium; without one of them they are skipped with the reason. They never run
in `make test` (marker ``hub``): `make test-hub`.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from hub import classroom
from tests.browser.conftest import CHROMIUM, FLAGS

ROOT = Path(__file__).resolve().parents[2]
#: HUB_TEST_TAG=x: users "attxtest-"... instead of "atttest-"..., so that two runs of the
#: hub tests on one machine (two worktrees) never share a user.
TAG = os.environ.get("HUB_TEST_TAG", "")
PREFIX = f"att{TAG}test-"  # never the users of a running `make hub` ("att-")
#: What the tests need in JupyterLab: every cell rendered (Playwright finds them by index).
TEST_LAB_SETTINGS = {"notebook-extension/tracker": {"windowingMode": "none"}}
#: The class list of the tests' hub: its ids carry PREFIX, so they are cleaned up with it.
CLASS_LIST = ('id,name,email\n'
              f'{PREFIX}ada,Ada Lovelace,ada@example.org\n'
              f'{PREFIX}bo,"Li, Bo",bo.li@example.org\n')
#: docs/instructor.md's command for a self-signed certificate (only for trying TLS out), {ip}
#: filled in.
OPENSSL = ("openssl req -x509 -newkey rsa:2048 -nodes -days 30 -keyout {key} -out {cert} "
           "-subj /CN=attention-hub -addext subjectAltName=IP:{ip},IP:127.0.0.1")


def outside_address() -> str:
    """This machine's first non-loopback IPv4 address (`hostname -I`), else 127.0.0.1."""
    try:
        out = subprocess.run(["hostname", "-I"], capture_output=True, text=True,
                             timeout=10).stdout.split()
    except OSError:
        out = []
    for a in out:
        try:
            ip = ipaddress.ip_address(a)
        except ValueError:
            continue
        if ip.version == 4 and not ip.is_loopback:
            with socket.socket() as s:  # usable here
                try:
                    s.bind((a, 0))
                except OSError:
                    continue
            return a
    return "127.0.0.1"


def first_login_links(output: str) -> dict[str, str]:
    """{id: link} from the launcher's banner, as the instructor reads them."""
    return dict(re.findall(r"^  (\S+)\s+(https?://\S+/hub/first-login\?\S+)$", output,
                           re.MULTILINE))


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
    if shutil.which("openssl") is None:
        return ("openssl is missing (the tests make a self-signed certificate): "
                "apt-get install openssl")
    return None


def pytest_collection_modifyitems(config, items):
    reason = skip_reason()
    if reason:
        for item in items:  # test_k8s (no hub marker) needs none of it
            if "tests/hub/" in item.nodeid and item.get_closest_marker("hub"):
                item.add_marker(pytest.mark.skip(reason=reason))


def start_launcher(room: classroom.Classroom, args: list[str]):
    """`python -m hub.classroom up` for ``room`` (its launcher.log), once the class is up."""
    base = room.base
    log = open(base / "launcher.log", "w")
    cmd = [sys.executable, "-m", "hub.classroom", "up", "--base", str(room.base),
           "--port", str(room.port), "--prefix", room.prefix,
           "--home-base", str(room.home_base), "--no-release", *args]
    launcher = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    log.close()
    deadline = time.monotonic() + 600  # the first run builds the class's environment
    while "The class is up" not in (base / "launcher.log").read_text():
        if launcher.poll() is not None or time.monotonic() > deadline:
            _stop(launcher)
            raise RuntimeError("make hub's launcher did not bring the class up (expected "
                               "'The class is up'); its output:\n"
                               + (base / "launcher.log").read_text())
        time.sleep(0.5)
    return launcher


def stop_and_clean(room: classroom.Classroom, launcher) -> None:
    """Ctrl-C; then nothing of the class may run; its users and files are removed."""
    stopped = _stop(launcher)
    left = classroom.leftovers(room)
    output = (room.base / "launcher.log").read_text()
    classroom.remove_users(room)
    shutil.rmtree(room.base, ignore_errors=True)
    assert stopped == 0 and "nothing left running" in output, (
        f"expected Ctrl-C to stop everything (exit 0, 'nothing left running'); exit "
        f"{stopped}, output:\n{output[-3000:]}")
    assert left == [], f"still running after the hub stopped: {left}"


@pytest.fixture(scope="session")
def room():
    """A running class: (Classroom, its launcher's process), stopped with SIGINT after."""
    base = Path(tempfile.mkdtemp(prefix="attention-hub-test-"))
    os.chmod(base, 0o755)  # the users traverse it to their homes and the exchange
    (base / "students.csv").write_text(CLASS_LIST)
    ip = outside_address()
    cert, key = base / "tls" / "cert.pem", base / "tls" / "key.pem"
    cert.parent.mkdir(mode=0o700)
    subprocess.run(OPENSSL.format(key=key, cert=cert, ip=ip).split(), check=True,
                   capture_output=True, timeout=60)
    room = classroom.Classroom(base=base, port=classroom.free_port(), prefix=PREFIX,
                               home_base=base / "home", release=False,
                               extra_lab_settings=TEST_LAB_SETTINGS, ip=ip,
                               ssl_cert=cert, ssl_key=key)
    room.roster = classroom.parse_class_list(base / "students.csv", room.instructor)
    classroom.remove_users(room)  # a crashed earlier run's users, if any
    args = ["--class-list", str(base / "students.csv"), "--ip", ip, "--ssl-cert", str(cert),
            "--ssl-key", str(key), "--lab-settings", json.dumps(TEST_LAB_SETTINGS)]
    try:
        launcher = start_launcher(room, args)
    except BaseException:
        classroom.remove_users(room)
        shutil.rmtree(base, ignore_errors=True)
        raise
    try:
        yield room, launcher
    finally:
        stop_and_clean(room, launcher)


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
