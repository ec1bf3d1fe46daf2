"""Idle servers are culled, and JupyterLab's news question is off, on a second real hub.

A small class of its own (one student from a class list, plain HTTP on 127.0.0.1, the
default address) with `--idle-timeout 10`: jupyterhub-idle-culler runs as the hub's
service with exactly the scopes its README lists. The student logs in with their
first-login link, writes a file, closes the browser; the culler stops the server (no
process of the student is left) and the file is still there.

The same student's JupyterLab has fetchNews "none" in their own settings (what a new user
of a plain JupyterLab has): the news question appears, which shows that the test of its
absence on the main hub (test_class, test_2) looks for the right thing.

The class's Python environment is the main test hub's (`--venv`), so nothing is rebuilt.
"""

from __future__ import annotations

import json
import os
import pwd
import sqlite3
import tempfile
import time
from pathlib import Path

import pytest
from playwright.sync_api import expect

from hub import classroom
from tests.hub.conftest import TAG, first_login_links, start_launcher, stop_and_clean

pytestmark = [pytest.mark.hub, pytest.mark.slow]
PREFIX = f"att{TAG}idle-"
STUDENT = f"{PREFIX}cy"
#: The student who keeps working: their server must outlive the timeout.
ACTIVE = f"{PREFIX}dee"
TIMEOUT = 10
NEWS = "Would you like to get notified about official Jupyter news?"
ASK_NEWS = {"apputils-extension/notification": {"fetchNews": "none"}}


@pytest.fixture(scope="module")
def idle_room(room):
    main, _ = room
    base = Path(tempfile.mkdtemp(prefix="attention-hub-idle-"))
    os.chmod(base, 0o755)
    (base / "students.csv").write_text(f"id,name,email\n{STUDENT},Cy Young,cy@example.org\n"
                                       f"{ACTIVE},Dee Active,dee@example.org\n")
    small = classroom.Classroom(base=base, port=classroom.free_port(), prefix=PREFIX,
                                home_base=base / "home", release=False, venv=main.venv,
                                idle_timeout=TIMEOUT)
    small.roster = classroom.parse_class_list(base / "students.csv", small.instructor)
    classroom.remove_users(small)
    args = ["--class-list", str(base / "students.csv"), "--venv", str(main.venv),
            "--idle-timeout", str(TIMEOUT), "--lab-settings", json.dumps(ASK_NEWS)]
    try:
        launcher = start_launcher(small, args)
    except BaseException:
        classroom.remove_users(small)
        raise
    try:
        yield small
    finally:
        stop_and_clean(small, launcher)


def culler_processes(room) -> list[str]:
    """Command lines of this hub's idle-culler service (found by its marker)."""
    return [cmd for _, cmd in classroom.leftovers(room) if "jupyterhub_idle_culler" in cmd]


def student_pids(name: str) -> list[int]:
    uid = pwd.getpwnam(name).pw_uid
    out = []
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and d.stat().st_uid == uid:
                out.append(int(d.name))
        except OSError:
            continue
    return out


def test_the_culler_is_a_hub_service_with_only_its_scopes(idle_room):
    cmds = culler_processes(idle_room)
    assert len(cmds) == 1, cmds
    assert f"--timeout={TIMEOUT}" in cmds[0] and "--cull-every=5" in cmds[0], cmds
    db = sqlite3.connect(f"file:{idle_room.state / 'jupyterhub.sqlite'}?mode=ro", uri=True)
    try:
        services = [r[0] for r in db.execute("select name from services")]
        role = db.execute("select scopes from roles where name = 'idle-culler'").fetchone()
        linked = db.execute("select services.name from services join service_role_map on "
                            "services.id = service_role_map.service_id join roles on "
                            "roles.id = service_role_map.role_id where roles.name = "
                            "'idle-culler'").fetchall()
    finally:
        db.close()
    assert services == ["idle-culler"], services
    assert sorted(json.loads(role[0])) == sorted(
        ["list:users", "read:users:activity", "read:servers", "delete:servers"]), role
    assert linked == [("idle-culler",)], linked


def test_an_idle_server_is_culled_and_its_files_stay(idle_room, browser, shots):
    links = first_login_links((idle_room.base / "launcher.log").read_text())
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(120_000)
    try:
        page.goto(links[STUDENT])
        page.fill("#password_input", "cy-chooses-this")
        page.fill("#repeat_input", "cy-chooses-this")
        page.click("#first_login_submit")
        page.wait_for_selector(".lm-MenuBar-itemLabel >> text=Nbgrader", timeout=240_000)
        # The control for test_class: with fetchNews "none" the question is asked.
        expect(page.get_by_text(NEWS)).to_be_visible(timeout=60_000)
        page.screenshot(path=shots / "hub-idle-news-question-when-asked-for.png")
        xsrf = [c["value"] for c in context.cookies() if c["name"] == "_xsrf"]
        work = {"type": "file", "format": "text", "content": "my notes\n"}
        answer = page.request.put(f"{idle_room.url}/user/{STUDENT}/api/contents/notes.txt",
                                  headers={"X-XSRFToken": xsrf[0]} if xsrf else {},
                                  data=json.dumps(work))
        assert answer.ok, answer.text()
    finally:
        context.close()  # the student leaves: nothing talks to the server any more
    assert student_pids(STUDENT), "expected the student's server to be running"
    t0 = time.monotonic()
    while student_pids(STUDENT) and time.monotonic() - t0 < 120:
        time.sleep(1)
    waited = time.monotonic() - t0
    assert not student_pids(STUDENT), f"the idle server was not culled within {waited:.0f} s"
    log = (idle_room.state / "jupyterhub.log").read_text()
    assert f"Culling server {STUDENT}" in log, log[-3000:]
    notes = idle_room.home(STUDENT) / "notes.txt"
    assert notes.read_text() == "my notes\n"  # nothing the student wrote is lost


def test_a_new_link_replaces_a_forgotten_password(idle_room, browser):
    """`make hub-link ID=...` (python -m hub.classroom new-link): a new one-time link; the
    old password stops working; the new link works and starts the server again."""
    import subprocess
    import sys

    from tests.hub.conftest import ROOT

    res = subprocess.run([sys.executable, "-m", "hub.classroom", "new-link", STUDENT,
                          "--base", str(idle_room.base), "--prefix", PREFIX,
                          "--home-base", str(idle_room.home_base)],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    link = first_login_links(res.stdout)[STUDENT]
    assert link.startswith(f"{idle_room.url}/hub/first-login?user={STUDENT}&code="), link
    context = browser.new_context()
    page = context.new_page()
    page.set_default_timeout(120_000)
    try:
        page.goto(f"{idle_room.url}/hub/login")
        page.fill("#username_input", STUDENT)
        page.fill("#password_input", "cy-chooses-this")
        page.click("#login_submit")
        expect(page.locator(".login_error")).to_contain_text("Invalid username or password")
        old = first_login_links((idle_room.base / "launcher.log").read_text())[STUDENT]
        assert page.goto(old).status == 403  # the first link stays used
        page.goto(link)
        page.fill("#password_input", "cy-chooses-again")
        page.fill("#repeat_input", "cy-chooses-again")
        page.click("#first_login_submit")
        page.wait_for_selector(".lm-MenuBar-itemLabel >> text=Nbgrader", timeout=240_000)
        assert (idle_room.home(STUDENT) / "notes.txt").exists()
    finally:
        context.close()
    res = subprocess.run([sys.executable, "-m", "hub.classroom", "new-link", f"{PREFIX}nobody",
                          "--base", str(idle_room.base), "--prefix", PREFIX,
                          "--home-base", str(idle_room.home_base)],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert res.returncode == 2
    assert (f"not a student of the class list: {PREFIX}nobody (expected one of {STUDENT}, "
            f"{ACTIVE})" in res.stderr)


def test_a_student_running_cells_is_not_culled_while_an_idle_one_is(idle_room, browser, shots):
    """ACTIVE runs a cell every 2 s for 4 timeouts: their server stays (the same process),
    while STUDENT's server, left idle by the test before (its new link started it again),
    is culled in the same time. The activity the culler sees is the hub's: the server
    reports its kernels' activity every JUPYTERHUB_ACTIVITY_INTERVAL (5 s here), the
    proxy its traffic."""
    from tests.hub.lab import NOTEBOOK, record, rss_mb

    log_file = idle_room.state / "jupyterhub.log"
    culled_before = log_file.read_text().count(f"Culling server {STUDENT}")
    assert student_pids(STUDENT), "expected the idle student's server to be running"
    links = first_login_links((idle_room.base / "launcher.log").read_text())
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(120_000)
    url = f"{idle_room.url}/user/{ACTIVE}"
    try:
        page.goto(links[ACTIVE])
        page.fill("#password_input", "dee-chooses-this")
        page.fill("#repeat_input", "dee-chooses-this")
        page.click("#first_login_submit")
        page.wait_for_selector(".lm-MenuBar-itemLabel >> text=Nbgrader", timeout=240_000)
        server = server_pid(ACTIVE)
        xsrf = [c["value"] for c in context.cookies() if c["name"] == "_xsrf"]
        nb = {"cells": [{"cell_type": "code", "execution_count": None, "id": "work",
                         "metadata": {}, "outputs": [],
                         "source": "n = globals().get('n', 0) + 1\nprint('run', n)"}],
              "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                          "language": "python"}},
              "nbformat": 4, "nbformat_minor": 5}
        answer = page.request.put(f"{url}/api/contents/work.ipynb",
                                  headers={"X-XSRFToken": xsrf[0]} if xsrf else {},
                                  data=json.dumps({"type": "notebook", "content": nb}))
        assert answer.ok, answer.text()
        page.goto(f"{url}/lab/tree/work.ipynb")
        expect(page.get_by_text("Python 3 (ipykernel) | Idle")).to_be_visible()
        page.locator(f"{NOTEBOOK} .jp-Cell .cm-content").first.click()
        t0, runs = time.monotonic(), 0
        while time.monotonic() - t0 < 4 * TIMEOUT:
            page.keyboard.press("Control+Enter")  # run the cell, stay in it
            runs += 1
            time.sleep(2)
        output = page.locator(f"{NOTEBOOK} .jp-OutputArea-output").first
        expect(output).to_have_text(f"run {runs}")  # every run reached the kernel
        worked = time.monotonic() - t0
        record(shots, active_student_server_mb=round(rss_mb(ACTIVE)))
        assert server_pid(ACTIVE) == server, "the active student's server was restarted"
        log = log_file.read_text()
        assert f"Culling server {ACTIVE}" not in log, log[-3000:]
        # ... while the idle one was culled in the same time (or is, within a minute).
        deadline = time.monotonic() + 60
        while student_pids(STUDENT) and time.monotonic() < deadline:
            time.sleep(1)
        assert not student_pids(STUDENT), "the idle server was not culled"
        assert log_file.read_text().count(f"Culling server {STUDENT}") == culled_before + 1
        assert worked >= 4 * TIMEOUT
    finally:
        context.close()


def server_pid(name: str) -> int:
    """The pid of ``name``'s jupyterhub-singleuser process."""
    for pid in student_pids(name):
        try:
            if b"jupyterhub-singleuser" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return pid
        except OSError:
            continue
    raise AssertionError(f"no server of {name} is running")
