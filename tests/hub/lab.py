"""Helpers of the hub tests that drive JupyterLab and nbgrader's pages in Chromium, shared
by test_class (the password login), test_oidc (an OpenID Connect provider's login) and
test_idle: a person's browser session, the Formgrader's and the Assignment List's
buttons, a student's memory, the measured figures."""

from __future__ import annotations

import json
import re

from playwright.sync_api import expect

from hub import classroom

NOTEBOOK = ".jp-NotebookPanel:not(.lm-mod-hidden)"
MENU = ".lm-MenuBar-itemLabel"


#: Passwords the students choose at first login.
CHOSEN = {}


class Person:
    """One logged-in browser session of one user of the class."""

    def __init__(self, browser, room, name):
        self.room, self.name = room, name
        # The test's certificate is self-signed: Chromium is told to accept it (Python's
        # check of the same certificate, test_0, verifies it properly).
        self.context = browser.new_context(viewport={"width": 1400, "height": 1000},
                                           ignore_https_errors=True)
        self.page = self.context.new_page()
        self.page.set_default_timeout(120_000)
        self.url = f"{room.url}/user/{name}"
        self.logged_in = False

    def password(self) -> str:
        return CHOSEN.get(self.name) or classroom.read_passwords(self.room)[self.name]

    def login(self, shot=None):
        if self.logged_in:
            return
        page = self.page
        page.goto(f"{self.room.url}/hub/login")
        page.fill("#username_input", self.name)
        page.fill("#password_input", self.password())
        if shot:
            page.screenshot(path=shot)
        page.click("#login_submit")
        self.wait_for_lab()

    def wait_for_lab(self):
        # The server starts as this Unix user (torch, nbgrader: seconds on a busy machine).
        self.page.wait_for_selector(f"{MENU} >> text=Nbgrader", timeout=240_000)
        assert self.page.url.startswith(self.url), self.page.url
        self.logged_in = True

    def menu(self, top, item):
        self.page.locator(MENU, has_text=re.compile(f"^{top}$")).click()
        self.page.locator(".lm-Menu-itemLabel", has_text=re.compile(f"^{item}$")).click()

    def xsrf(self) -> dict:
        cookie = [c for c in self.context.cookies() if c["name"] == "_xsrf"]
        return {"X-XSRFToken": cookie[0]["value"]} if cookie else {}


def formgrader_action(page, row, cls, endpoint):
    """Click a Formgrader button (``td.<cls> a``) and return nbgrader's JSON answer."""
    with page.expect_response(lambda r: r.url.endswith(endpoint), timeout=300_000) as resp:
        row.locator(f"td.{cls} a").first.click()
    result = json.loads(resp.value.json()) if isinstance(resp.value.json(), str) else \
        resp.value.json()
    # Each action answers with a modal (nbgrader's log): close it.
    modal = page.locator(".modal.in")
    expect(modal).to_be_visible()
    modal.locator(".modal-footer button", has_text="OK").click()
    expect(page.locator(".modal.in")).to_have_count(0)
    expect(page.locator(".modal-backdrop")).to_have_count(0)
    return result


def assignment_list(person):
    """Nbgrader > Assignment List; its panel."""
    person.menu("Nbgrader", "Assignment List")
    panel = person.page.locator("#released_assignments_list").locator("xpath=../../../..")
    expect(person.page.locator("#released_assignments_list")).to_be_visible()
    return panel


def student_action(person, button, endpoint, scope="body"):
    """Press an Assignment List button and return nbgrader's answer to it."""
    page = person.page
    with page.expect_response(lambda r: endpoint in r.url and r.request.method == "POST",
                              timeout=300_000) as resp:
        page.locator(scope).locator("button", has_text=re.compile(f"^{button}$")).first.click()
    return resp.value


def submit(person, assignment="attention"):
    page = person.page
    page.goto(f"{person.url}/lab")
    assignment_list(person)
    answer = student_action(person, "Submit", "/assignments/submit",
                            f"#fetched_assignments_list > .list_item:has-text('{assignment}')")
    assert answer.ok and answer.json()["success"], answer.text()


def rss_mb(user: str) -> float:
    """Resident memory of every process of ``user`` (their server and kernels), MiB."""
    import pwd
    from pathlib import Path

    uid, total = pwd.getpwnam(user).pw_uid, 0
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and d.stat().st_uid == uid:
                for line in (d / "status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


FIGURES = {}


def record(shots, **figures):
    """Measured figures for docs/instructor.md ("Past one machine"):
    screenshots/hub-figures.json."""
    FIGURES.update(figures)
    (shots / "hub-figures.json").write_text(json.dumps(FIGURES, indent=1))
