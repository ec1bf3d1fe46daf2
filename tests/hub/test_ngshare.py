"""The exchange through ngshare (`make hub EXCHANGE=ngshare`), on a third real hub.

ngshare runs as the hub's service from its own environment (hub/ngshare/venv, SQLAlchemy
1.4: docs/hub/ngshare.md), ngshare-exchange 0.5.3 in the class's environment without its
dependencies (it declares jupyter-core<4.11.2; the course has 5.9.1). The launcher
registers the course, its instructor and its student in ngshare. Then the whole exchange,
through the same server endpoints the Formgrader's and the Assignment List's buttons call
(test_class drives those buttons on the file-system exchange): the instructor generates and
releases, the student fetches and submits, the instructor collects, autogrades (in the
sandbox), generates and releases feedback, the student fetches it. Nothing goes through
the file-system exchange; ngshare's own database holds the release and the submission.
"""

from __future__ import annotations

import json
import os
import sqlite3
import tempfile
from pathlib import Path

import pytest

from hub import classroom
from tests.hub.conftest import TAG, first_login_links, start_launcher, stop_and_clean

pytestmark = [pytest.mark.hub, pytest.mark.slow]
PREFIX = f"att{TAG}ng-"
STUDENT = f"{PREFIX}di"
MENU = ".lm-MenuBar-itemLabel"


@pytest.fixture(scope="module")
def ng_room(room):
    main, _ = room
    base = Path(tempfile.mkdtemp(prefix="attention-hub-ngshare-"))
    os.chmod(base, 0o755)
    (base / "students.csv").write_text(f"id,name,email\n{STUDENT},Di Ng,di@example.org\n")
    ng = classroom.Classroom(base=base, port=classroom.free_port(), prefix=PREFIX,
                             home_base=base / "home", release=False, venv=main.venv,
                             exchange_kind="ngshare")
    ng.roster = classroom.parse_class_list(base / "students.csv", ng.instructor)
    classroom.remove_users(ng)
    args = ["--class-list", str(base / "students.csv"), "--venv", str(main.venv),
            "--exchange", "ngshare"]
    try:
        launcher = start_launcher(ng, args)
    except BaseException:
        classroom.remove_users(ng)
        raise
    try:
        yield ng
    finally:
        stop_and_clean(ng, launcher)


def answer(response) -> dict:
    assert response.ok, (response.url, response.status, response.text()[:2000])
    value = response.json()
    return json.loads(value) if isinstance(value, str) else value


class Session:
    """A logged-in browser session; POSTs to the user's own server with its xsrf token."""

    def __init__(self, browser, room, name):
        self.context = browser.new_context()
        self.page = self.context.new_page()
        self.page.set_default_timeout(120_000)
        self.url = f"{room.url}/user/{name}"

    def post(self, path, form=None, timeout=300_000):
        xsrf = [c["value"] for c in self.context.cookies() if c["name"] == "_xsrf"]
        return answer(self.page.request.post(
            f"{self.url}{path}", headers={"X-XSRFToken": xsrf[0]} if xsrf else {},
            form=form, timeout=timeout))


def test_the_whole_exchange_goes_through_ngshare(ng_room, browser):
    room = ng_room
    teacher = Session(browser, room, room.instructor)
    student = Session(browser, room, STUDENT)
    try:
        teacher.page.goto(f"{room.url}/hub/login")
        teacher.page.fill("#username_input", room.instructor)
        teacher.page.fill("#password_input", classroom.read_passwords(room)[room.instructor])
        teacher.page.click("#login_submit")
        teacher.page.wait_for_selector(f"{MENU} >> text=Nbgrader", timeout=240_000)
        student.page.goto(first_login_links((room.base / "launcher.log").read_text())[STUDENT])
        student.page.fill("#password_input", "di-chooses-this")
        student.page.fill("#repeat_input", "di-chooses-this")
        student.page.click("#first_login_submit")
        student.page.wait_for_selector(f"{MENU} >> text=Nbgrader", timeout=240_000)

        api = f"/formgrader/api/assignment/{classroom.ASSIGNMENT}"
        for step in ("assign", "release"):
            result = teacher.post(f"{api}/{step}")
            assert result["success"], (step, result)
        ids = {"course_id": classroom.COURSE_ID, "assignment_id": classroom.ASSIGNMENT}
        result = student.post("/assignments/fetch", ids)
        assert result["success"], result
        fetched = room.home(STUDENT) / classroom.ASSIGNMENT / "lesson.ipynb"
        assert fetched.exists() and "BEGIN SOLUTION" not in fetched.read_text()
        result = student.post("/assignments/submit", ids)
        assert result["success"], result

        result = teacher.post(f"{api}/collect")
        assert result["success"], result
        submitted = room.course_dir / "submitted" / STUDENT / classroom.ASSIGNMENT
        assert (submitted / "lesson.ipynb").exists(), sorted(room.course_dir.rglob("*"))[:20]
        result = teacher.post(f"/formgrader/api/submission/{classroom.ASSIGNMENT}/{STUDENT}"
                              "/autograde")
        assert result["success"], result.get("error") or result.get("log")
        for step in ("generate_feedback", "release_feedback"):
            result = teacher.post(f"{api}/{step}")
            assert result["success"], (step, result.get("error"), result.get("log"))
        result = student.post("/assignments/fetch_feedback", ids)
        assert result["success"], result
        feedback = sorted((room.home(STUDENT) / classroom.ASSIGNMENT / "feedback").glob(
            "*/lesson.html"))
        assert len(feedback) == 1, feedback
        # The untouched notebook: every check failed, so 0 of 9, verified by the grader.
        assert "(Score: 0 / 9)" in feedback[0].read_text()
    finally:
        teacher.context.close()
        student.context.close()

    # Nothing went through the file-system exchange; ngshare holds it all.
    assert not (room.exchange / classroom.COURSE_ID).exists()
    db = sqlite3.connect(f"file:{room.state / 'ngshare.sqlite'}?mode=ro", uri=True)
    try:
        assignments = db.execute("select id from assignments").fetchall()
        submissions = db.execute("select count(*) from submissions").fetchone()[0]
    finally:
        db.close()
    assert assignments == [(classroom.ASSIGNMENT,)] and submissions == 1, (assignments,
                                                                            submissions)


def server_token(user: str) -> str:
    """The hub token in ``user``'s running server's environment (what their own kernel
    and terminal can read), read as root."""
    import pwd
    import re

    uid = pwd.getpwnam(user).pw_uid
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and d.stat().st_uid == uid and \
                    b"jupyterhub-singleuser" in (d / "cmdline").read_bytes():
                env = (d / "environ").read_bytes().decode(errors="replace")
                return re.search(r"JUPYTERHUB_API_TOKEN=([^\0]+)", env).group(1)
        except (OSError, AttributeError):
            continue
    raise AssertionError(f"no running server of {user}")


def test_a_student_cannot_use_ngshare_as_the_instructor(ng_room):
    """With the token their own server holds, a student is refused what is the
    instructor's in ngshare: the class's submissions, the student list, releasing."""
    import urllib.error
    import urllib.request

    token = server_token(STUDENT)
    # The launcher chose ngshare's port; the test's Classroom learns it from the settings.
    settings = json.loads((ng_room.state / "settings.json").read_text())
    ng_room.ngshare_port = settings["ngshare_port"]
    course, assignment = classroom.COURSE_ID, classroom.ASSIGNMENT
    for method, path in (("GET", f"/submissions/{course}/{assignment}"),
                         ("GET", f"/students/{course}"),
                         ("GET", f"/submission/{course}/{assignment}/{STUDENT}"),
                         ("POST", f"/assignment/{course}/another")):
        req = urllib.request.Request(f"{ng_room.ngshare_url}{path}", method=method,
                                     headers={"Authorization": f"token {token}"},
                                     data=b"" if method == "POST" else None)
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(req, timeout=10)
        assert refused.value.code == 403, (path, refused.value.code)
    # ... while the same token does reach ngshare as this student (not a dead token).
    req = urllib.request.Request(f"{ng_room.ngshare_url}/assignments/{course}",
                                 headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(req, timeout=10) as r:
        assert json.loads(r.read())["success"]
