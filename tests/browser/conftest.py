"""A real JupyterLab server and a real headless Chromium for the browser tests.

The server runs on 127.0.0.1 with a private config directory (no token, the news
popup off, autosave off, every cell rendered), from a temporary copy of the course
files, so nothing in the repository is ever changed by a test. Chromium is
Debian's (/usr/bin/chromium, installed by .ci/run); Playwright only drives it.
"""

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
SCREENSHOTS = ROOT / "screenshots"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SETTINGS = {
    "apputils-extension/notification": '{"fetchNews": "false"}',
    "notebook-extension/tracker": '{"windowingMode": "none"}',
    "docmanager-extension/plugin": '{"autosave": false}',
}


def pytest_collection_modifyitems(config, items):
    reason = None
    if not CHROMIUM.exists():
        reason = f"Chromium not found at {CHROMIUM}: .ci/run installs it with apt"
    else:
        try:
            import playwright  # noqa: F401
        except ImportError:
            reason = "playwright is not installed: run `make venv`"
    if reason:
        for item in items:
            if "browser" in item.nodeid:
                item.add_marker(pytest.mark.skip(reason=reason))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_lab(base, root_dir, cwd=ROOT, env=None):
    """A JupyterLab server on 127.0.0.1 serving ``root_dir``; yields its URL, then stops it.

    Its private config directory lives in ``base``; nbgrader's extensions read
    nbgrader_config.py from ``cwd`` (the repository's, as `make lesson` runs it).
    """
    settings = base / "config" / "lab" / "user-settings" / "@jupyterlab"
    for name, text in SETTINGS.items():
        path = settings / f"{name}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    port = free_port()
    # (as `make lesson` starts it: Validate without a kernel, attention_validate.py)
    env = dict(os.environ, **(env or {}), JUPYTER_CONFIG_DIR=str(base / "config"),
               JUPYTER_RUNTIME_DIR=str(base / "runtime"), PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ip", "127.0.0.1",
           "--port", str(port), "--IdentityProvider.token=", f"--ServerApp.root_dir={root_dir}",
           f"--config={ROOT / 'jupyter_server_config.json'}"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    log = open(base / "server.log", "w")
    server = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(f"{url}/api/status", timeout=2)
            break
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                log_text = (base / "server.log").read_text()
                raise RuntimeError(f"JupyterLab did not start:\n{log_text}")
            time.sleep(0.25)
    try:
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


@pytest.fixture(scope="session")
def lab(tmp_path_factory):
    """(base URL, work dir) of a JupyterLab serving a copy of the course."""
    base = tmp_path_factory.mktemp("lab")
    work = base / "work"
    work.mkdir()
    for name in ("lesson.ipynb", "complete_lesson.ipynb", "multihead.ipynb",
                 "complete_multihead.ipynb", "verify.py"):
        shutil.copy(ROOT / name, work / name)
    shutil.copy(ROOT / "lesson.ipynb", work / "student.ipynb")  # edited by a test
    for name in ("src", "data"):
        shutil.copytree(ROOT / name, work / name, ignore=shutil.ignore_patterns("__pycache__"))
    for url in start_lab(base, work):
        yield url, work


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(60_000)
    yield page
    context.close()


@pytest.fixture(scope="session")
def shots():
    SCREENSHOTS.mkdir(exist_ok=True)
    return SCREENSHOTS
