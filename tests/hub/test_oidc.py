"""The login through an OpenID Connect provider (`make hub AUTH=oidc`), on a real hub.

A class of its own (a class list of one student, plain HTTP on 127.0.0.1, nbgrader's
exchange through ngshare: the combination hub/k8s/config.yaml describes) whose hub logs
people in with oauthenticator's GenericOAuthenticator against this machine's provider
(hub/oidc-provider.mjs: Node's oidc-provider, pinned in hub/package-lock.json), which the
launcher starts with the class's people as its accounts and whose endpoints it takes from
the provider's discovery document. The flow is the real one: the hub sends the browser to
the provider's authorization endpoint with a PKCE challenge (S256); the person signs in on
the provider's page; the hub exchanges the code with its client secret and the PKCE
verifier at the token endpoint and reads the user name (preferred_username = the class
list's id) from the userinfo endpoint.

The student signs in through the provider in Chromium (a wrong password is refused by the
provider), reaches their server, fetches and submits in the Assignment List; the instructor,
signed in the same way, releases, collects, autogrades and releases feedback through the
Formgrader's endpoints; the student fetches their feedback and opens it. Someone the
provider knows but the class list does not is signed in by the provider and refused by
the hub (403), and gets no user, no server.

The class's Python environment is the main test hub's (`--venv`), so nothing is rebuilt.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import sqlite3
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from playwright.sync_api import expect

from hub import classroom
from hub.credentials import hash_password, write_private
from tests.hub.conftest import TAG, start_launcher, stop_and_clean
from tests.hub.lab import Person, assignment_list, student_action

pytestmark = [pytest.mark.hub, pytest.mark.slow]
PREFIX = f"att{TAG}oidc-"
STUDENT = f"{PREFIX}ed"
#: Known to the provider (added to its accounts), not on the class list.
STRANGER = f"{PREFIX}eve"


@pytest.fixture(scope="module")
def oidc_room(room):
    main, _ = room
    base = Path(tempfile.mkdtemp(prefix="attention-hub-oidc-"))
    os.chmod(base, 0o755)
    (base / "students.csv").write_text(f"id,name,email\n{STUDENT},Ed Oidc,ed@example.org\n")
    small = classroom.Classroom(base=base, port=classroom.free_port(), prefix=PREFIX,
                                home_base=base / "home", release=False, venv=main.venv,
                                auth="oidc", oidc_port=classroom.free_port(),
                                exchange_kind="ngshare")
    small.roster = classroom.parse_class_list(base / "students.csv", small.instructor)
    classroom.remove_users(small)
    args = ["--class-list", str(base / "students.csv"), "--venv", str(main.venv),
            "--auth", "oidc", "--oidc-port", str(small.oidc_port), "--exchange", "ngshare"]
    try:
        launcher = start_launcher(small, args)
    except BaseException:
        classroom.remove_users(small)
        raise
    try:
        yield small
    finally:
        stop_and_clean(small, launcher)


class Signer(Person):
    """A browser session that logs in through the OpenID Connect provider's page."""

    def login(self, password=None, shot=None):
        page = self.page
        page.goto(f"{self.room.url}/hub/login")
        page.get_by_text("Sign in with this machine's provider").click()
        # The provider's page, on its own origin.
        expect(page.locator("#signin")).to_be_visible()
        assert page.url.startswith(f"{self.room.issuer}/interaction/"), page.url
        page.fill("#username", self.name)
        page.fill("#password", password or self.password())
        if shot:
            page.screenshot(path=shot)
        page.click("#signin")


def post(person, path, form=None):
    """POST to the person's own server (its xsrf token); nbgrader's JSON answer."""
    response = person.page.request.post(f"{person.url}{path}", headers=person.xsrf(),
                                        form=form, timeout=300_000)
    assert response.ok, (path, response.status, response.text()[:2000])
    value = response.json()
    return json.loads(value) if isinstance(value, str) else value


def test_the_hub_uses_the_providers_discovery_and_pkce(oidc_room):
    settings = json.loads((oidc_room.state / "settings.json").read_text())
    with urllib.request.urlopen(f"{oidc_room.issuer}/.well-known/openid-configuration",
                                timeout=10) as r:
        doc = json.loads(r.read())
    assert settings["auth"] == "oidc"
    assert {k: settings["oidc"][k] for k in ("authorize_url", "token_url", "userdata_url")} \
        == {"authorize_url": doc["authorization_endpoint"], "token_url": doc["token_endpoint"],
            "userdata_url": doc["userinfo_endpoint"]}
    assert settings["users"] == [oidc_room.instructor, STUDENT]

    # The hub's login sends the browser to the provider with a code flow and a PKCE
    # challenge (followed by hand: the redirect is what is checked).
    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    opener = urllib.request.build_opener(NoRedirect)
    with pytest.raises(urllib.error.HTTPError) as redirect:
        opener.open(f"{oidc_room.url}/hub/oauth_login", timeout=10)
    assert redirect.value.code == 302
    target = urllib.parse.urlsplit(redirect.value.headers["Location"])
    query = urllib.parse.parse_qs(target.query)
    assert f"{target.scheme}://{target.netloc}{target.path}" == doc["authorization_endpoint"]
    assert query["response_type"] == ["code"] and query["client_id"] == ["attention-hub"]
    assert query["code_challenge_method"] == ["S256"] and len(query["code_challenge"][0]) == 43
    assert query["redirect_uri"] == [f"{oidc_room.url}/hub/oauth_callback"]
    assert set(query["scope"][0].split()) == {"openid", "profile", "email"}
    # The first-login page of the password login is not offered.
    with pytest.raises(urllib.error.HTTPError) as gone:
        urllib.request.urlopen(f"{oidc_room.url}/hub/first-login?user={STUDENT}&code=x",
                               timeout=10)
    assert gone.value.code == 404


def test_a_student_signs_in_through_the_provider_and_gets_feedback(oidc_room, browser,
                                                                   shots):
    room = oidc_room
    student, teacher = Signer(browser, room, STUDENT), Signer(browser, room, room.instructor)
    try:
        student.login(password="not-the-password")
        expect(student.page.locator("#error")).to_have_text(
            "Unknown user name or wrong password.")
        student.page.fill("#password", student.password())
        student.page.screenshot(path=shots / "hub-oidc-provider-sign-in.png")
        student.page.click("#signin")
        student.wait_for_lab()  # the hub took the id from userinfo; their server started
        teacher.login()
        teacher.wait_for_lab()

        api = f"/formgrader/api/assignment/{classroom.ASSIGNMENT}"
        for step in ("assign", "release"):
            result = post(teacher, f"{api}/{step}")
            assert result["success"], (step, result)

        assignment_list(student)
        answer = student_action(student, "Fetch", "/assignments/fetch",
                                "#released_assignments_list")
        assert answer.ok and answer.json()["success"], answer.text()
        expect(student.page.locator("#fetched_assignments_list")).to_contain_text("attention")
        answer = student_action(student, "Submit", "/assignments/submit",
                                "#fetched_assignments_list")
        assert answer.ok and answer.json()["success"], answer.text()

        result = post(teacher, f"{api}/collect")
        assert result["success"], result
        result = post(teacher, f"/formgrader/api/submission/{classroom.ASSIGNMENT}/{STUDENT}"
                               "/autograde")
        assert result["success"], result.get("error") or result.get("log")
        for step in ("generate_feedback", "release_feedback"):
            result = post(teacher, f"{api}/{step}")
            assert result["success"], (step, result.get("error"), result.get("log"))

        student.page.goto(f"{student.url}/lab")
        assignment_list(student)
        answer = student_action(student, "Fetch Feedback", "/assignments/fetch_feedback",
                                "#submitted_assignments_list")
        assert answer.ok and answer.json()["success"], answer.text()
        feedback = sorted((room.home(STUDENT) / "attention" / "feedback").glob("*/lesson.html"))
        assert len(feedback) == 1, feedback
        student.page.goto(f"{student.url}/files/{feedback[0].relative_to(room.home(STUDENT))}")
        # The untouched notebook: every check failed, verified by the grader.
        expect(student.page.locator("h4").first).to_contain_text("(Score: 0 / 9)")
        student.page.screenshot(path=shots / "hub-oidc-feedback.png")
    finally:
        student.context.close()
        teacher.context.close()
    # The exchange was ngshare (as in hub/k8s/config.yaml): nothing in the shared directory.
    assert not (room.exchange / classroom.COURSE_ID).exists()
    log = (room.state / "oidc-provider.log").read_text()
    assert f"signed in: {STUDENT}" in log and f'failed sign-in for "{STUDENT}"' in log, log


def test_someone_the_provider_knows_is_refused_when_not_on_the_class_list(oidc_room,
                                                                          browser):
    room = oidc_room
    accounts_file = room.oidc_dir / "accounts.json"
    accounts = json.loads(accounts_file.read_text())
    accounts[STRANGER] = {"name": "Eve Else", "email": "eve@example.org",
                          "password": hash_password("eve-knows-this")}
    write_private(accounts_file, json.dumps(accounts))
    eve = Signer(browser, room, STRANGER)
    try:
        with eve.page.expect_response(lambda r: "/hub/oauth_callback" in r.url) as callback:
            eve.login(password="eve-knows-this")
        assert callback.value.status == 403, callback.value.status
        expect(eve.page.locator("body")).to_contain_text("403")
        assert not re.search(r"/user/", eve.page.url), eve.page.url
    finally:
        eve.context.close()
    # The provider signed her in; the hub made no user of her, and there is no account.
    assert f"signed in: {STRANGER}" in (room.state / "oidc-provider.log").read_text()
    db = sqlite3.connect(f"file:{room.state / 'jupyterhub.sqlite'}?mode=ro", uri=True)
    try:
        users = sorted(r[0] for r in db.execute("select name from users"))
    finally:
        db.close()
    assert STRANGER not in users and STUDENT in users, users
    with pytest.raises(KeyError):
        pwd.getpwnam(STRANGER)
    log = (room.state / "jupyterhub.log").read_text()
    assert STRANGER in log, log[-2000:]
