"""A whole assignment on a real JupyterHub class, in headless Chromium, through the UI.

The class comes from a class list (CSV) and the hub is reached over TLS on this machine's
outside address: each student's first login is the one-time link the launcher printed
(they choose their password there; the link then no longer works), and their JupyterLab
never asks about Jupyter news.

The instructor generates and releases in the Formgrader; student1 fetches, types the four
answers into cells 4-7, validates and submits; student2 first submits the untouched
notebook, then types answers with a named mistake (Cell 5 without the division by
sqrt(d_k)), sees it in Validate and submits again (the last submission counts, with its
timestamp). The instructor collects and autogrades each (sandboxed, trusted scores): the
gradebook holds 9/9 and 7/9, cell by cell. Feedback is generated and released; each
student fetches their own and sees their verified score and the failing check.

Then isolation, tried as a student would: student1's own kernel and terminal on the hub try
to read student2's home and exchange files and the instructor's course, source/,
gradebook.db and autograded/. Screenshots: screenshots/hub-*.png.
"""

from __future__ import annotations

import json
import pwd
import re
import socket
import ssl
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from playwright.sync_api import expect

from hub import classroom
from src import pages
from tests.cohort.build import NO_SCALING, solved_sources
from tests.hub.conftest import first_login_links
from tests.hub.lab import (
    CHOSEN,
    MENU,
    NOTEBOOK,
    Person,
    assignment_list,
    formgrader_action,
    record,
    rss_mb,
    student_action,
    submit,
)

pytestmark = [pytest.mark.hub, pytest.mark.slow]
ANSWERS = ("cell4_projections", "cell5_scores", "cell6_softmax", "cell7_values")
#: Each test cell's points (verify.GRADE_CELLS); the mistake costs exactly Cell 5's 2.
RIGHT = {"cell4_projections_test": 2.0, "cell5_scores_test": 2.0,
         "cell6_softmax_test": 3.0, "cell7_values_test": 2.0}
WRONG = {**RIGHT, "cell5_scores_test": 0.0}
#: JupyterLab's question when fetchNews is "none" (its default).
NEWS = "Would you like to get notified about official Jupyter news?"


@pytest.fixture(scope="module")
def people(browser, room):
    room_, _ = room
    out = {}
    yield lambda name: out.setdefault(name, Person(browser, room_, name))
    for p in out.values():
        p.context.close()


@pytest.fixture(scope="module")
def names(room):
    room_, _ = room
    return room_.instructor, *room_.student_names


def open_lesson(person, assignment="attention", notebook="lesson"):
    page = person.page
    page.goto(f"{person.url}/lab/tree/{assignment}/{notebook}.ipynb")
    page.wait_for_selector(f"{NOTEBOOK} .jp-Cell")
    expect(page.locator(f"{NOTEBOOK} .jp-Cell").first).to_be_visible()
    return page


def cell(page, cell_id, ids):
    return page.locator(f"{NOTEBOOK} .jp-Cell").nth(ids.index(cell_id))


def type_answers(person, sources, assignment="attention", notebook="lesson", answers=ANSWERS):
    """Type each answer into its cell (cells 4-7), then save."""
    page = open_lesson(person, assignment, notebook)
    ids = classroom_cell_ids(person, assignment, notebook)
    for cid in answers:
        editor = cell(page, cid, ids).locator(".cm-content")
        editor.click()
        page.keyboard.press("Control+A")
        page.keyboard.insert_text(sources[cid])  # no auto-indent or auto-brackets
    page.keyboard.press("Escape")
    page.keyboard.press("Control+S")
    expect(page.locator(f"{NOTEBOOK} .jp-mod-dirty")).to_have_count(0)
    expect(page.locator(".jp-mod-current.jp-mod-dirty")).to_have_count(0)


def classroom_cell_ids(person, assignment="attention", notebook="lesson") -> list[str]:
    """The cell ids of the student's fetched notebook, in order (read as root)."""
    path = person.room.home(person.name) / assignment / f"{notebook}.ipynb"
    return [c.get("id") for c in json.loads(path.read_text())["cells"]]


def validate(person):
    page = person.page
    page.locator(f"{NOTEBOOK} .jp-Toolbar").get_by_text("Validate", exact=True).click()
    dialog = page.locator(".jp-Dialog")
    expect(dialog).to_contain_text("Validation Results", timeout=300_000)
    return dialog


def close_dialog(page):
    page.locator(".jp-Dialog").locator("button").last.click()
    expect(page.locator(".jp-Dialog")).to_have_count(0)


def validate_workers(user: str) -> list[int]:
    """Pids of the Validate workers (python -m src.validate serve) running as ``user``."""
    uid, found = pwd.getpwnam(user).pw_uid, []
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and d.stat().st_uid == uid:
                cmd = (d / "cmdline").read_bytes().split(b"\0")
                if b"src.validate" in cmd and b"serve" in cmd:
                    found.append(int(d.name))
        except OSError:
            continue
    return found


def inbound(room, student):
    """The names of ``student``'s submissions in the exchange (as root)."""
    return sorted(p.name for p in (room.exchange / classroom.COURSE_ID / "inbound").iterdir()
                  if p.name.startswith(f"{student}+"))


def gradebook_cells(room, student, assignment=classroom.ASSIGNMENT) -> dict:
    from nbgrader.api import Gradebook

    url = f"sqlite:///{room.course_dir / 'gradebook.db'}"
    with Gradebook(url, classroom.COURSE_ID) as gb:
        sub = gb.find_submission(assignment, student)
        return {g.name: g.auto_score for nb in sub.notebooks for g in nb.grades}


# ------------------------------------------------------ TLS, class list, first login
def test_0_tls_on_the_chosen_address(room):
    room_, _ = room
    host, port = room_.ip, room_.port
    # The certificate the hub serves is the one given, checked properly (not ignored).
    context = ssl.create_default_context(cafile=str(room_.ssl_cert))
    with socket.create_connection((host, port), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname=host) as tls:
            assert tls.version() in ("TLSv1.2", "TLSv1.3"), tls.version()
    with urllib.request.urlopen(f"https://{host}:{port}/hub/api", context=context,
                                timeout=10) as r:
        assert json.loads(r.read())["version"]
    # No plain HTTP on that port; nothing on 127.0.0.1 when another address was chosen.
    with pytest.raises((urllib.error.URLError, ConnectionError)):
        urllib.request.urlopen(f"http://{host}:{port}/hub/api", timeout=10).read()
    if host != "127.0.0.1":
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=5).close()


def test_0_class_list_makes_users_students_and_one_time_links(room, people, names, shots):
    room_, launcher = room
    output = (room_.base / "launcher.log").read_text()
    links = first_login_links(output)
    assert sorted(links) == sorted(names[1:]), output
    for sid in names[1:]:  # Unix users made by `make hub`, nbgrader students with names
        assert pwd.getpwnam(sid).pw_gecos.split(",")[0] == classroom.MARK
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{room_.course_dir / 'gradebook.db'}", classroom.COURSE_ID) as gb:
        got = {s.id: (s.first_name, s.last_name, s.email) for s in gb.students}
    assert got == {names[1]: ("Ada", "Lovelace", "ada@example.org"),
                   names[2]: ("Bo", "Li", "bo.li@example.org")}, got
    assert names[1] not in classroom.read_passwords(room_)  # no password handed out
    # Someone else opens the first student's link before they use it (a forwarded mail).
    other = people("second browser")
    other.page.goto(links[names[1]])
    expect(other.page.locator("#first-login-user")).to_have_text(names[1])

    for i, sid in enumerate(names[1:]):
        person = people(sid)
        page = person.page
        page.goto(links[sid])
        assert page.url.startswith(f"https://{room_.ip}:"), page.url
        expect(page.locator("#first-login-user")).to_have_text(sid)
        page.fill("#password_input", "short")
        page.fill("#repeat_input", "short")
        page.click("#first_login_submit")
        expect(page.locator("#first-login-error")).to_contain_text(
            "Your password has 5 characters: expected at least 8.")
        chosen = f"chosen-by-{sid}-{i}"
        page.fill("#password_input", chosen)
        page.fill("#repeat_input", chosen)
        if i == 0:
            page.screenshot(path=shots / "hub-0-first-login.png")
        page.click("#first_login_submit")
        person.wait_for_lab()  # logged in, their own server started
        CHOSEN[sid] = chosen

    # The link worked once: the form opened before is refused when sent, and the link
    # opened again says at once that it has been used, with no form.
    other.page.fill("#password_input", "another-password")
    other.page.fill("#repeat_input", "another-password")
    with other.page.expect_response(lambda r: r.request.method == "POST") as resp:
        other.page.click("#first_login_submit")
    assert resp.value.status == 403
    expect(other.page.locator("#first-login-error")).to_contain_text(
        "has been used already")
    again = other.page.goto(links[names[1]])
    assert again.status == 403
    expect(other.page.locator("#first-login-error")).to_contain_text(
        "has been used already, or is not valid. Log in with the password you chose, or "
        "ask your instructor for a new link.")
    expect(other.page.locator("#password_input")).to_have_count(0)
    # ... and the password chosen with it is the one that logs in (in a fresh browser).
    other.page.goto(f"{room_.url}/hub/login")
    other.page.fill("#username_input", names[1])
    other.page.fill("#password_input", "another-password")
    other.page.click("#login_submit")
    expect(other.page.locator(".login_error")).to_contain_text("Invalid username or password")
    other.page.fill("#username_input", names[1])
    other.page.fill("#password_input", CHOSEN[names[1]])
    other.page.click("#login_submit")
    other.page.wait_for_selector(f"{MENU} >> text=Nbgrader", timeout=240_000)
    assert other.page.url.startswith(f"{room_.url}/user/{names[1]}/"), other.page.url
    other.context.close()


# ------------------------------------------------------------------ the lifecycle
def test_1_instructor_releases_in_the_formgrader(room, people, names, shots):
    room_, _ = room
    teacher = people(names[0])
    teacher.login(shot=shots / "hub-1-login.png")
    teacher.menu("Nbgrader", "Formgrader")
    frame = teacher.page.frame_locator("iframe[src*='formgrader']")
    expect(frame.locator("body")).to_contain_text("Manage Assignments", timeout=120_000)
    page = teacher.page
    page.goto(f"{teacher.url}/formgrader/manage_assignments")
    row = page.locator("#main-table tr", has=page.locator("td.name", has_text="attention"))
    expect(row).to_have_count(1)
    generated = formgrader_action(page, row, "assign", "/assign")
    assert generated["success"], generated
    released = formgrader_action(page, row, "release", "/release")
    assert released["success"], released
    expect(row.locator("td.status")).to_contain_text("released")
    page.screenshot(path=shots / "hub-2-released.png")
    outbound = room_.exchange / classroom.COURSE_ID / "outbound" / classroom.ASSIGNMENT
    assert (outbound / "lesson.ipynb").exists()
    assert "BEGIN SOLUTION" not in (outbound / "lesson.ipynb").read_text()


def test_2_students_fetch_validate_and_submit(room, people, names, shots):
    room_, _ = room
    right, wrong = people(names[1]), people(names[2])
    solved = solved_sources()
    mistaken = dict(solved)
    for old, new in NO_SCALING["cell5_scores"]:
        assert old in mistaken["cell5_scores"]
        mistaken["cell5_scores"] = mistaken["cell5_scores"].replace(old, new)

    for person in (right, wrong):
        person.login()
        assignment_list(person)
        answer = student_action(person, "Fetch", "/assignments/fetch",
                                "#released_assignments_list")
        assert answer.ok and answer.json()["success"], answer.text()
        expect(person.page.locator("#fetched_assignments_list")).to_contain_text("attention")
    right.page.screenshot(path=shots / "hub-3-fetched.png")

    # student2 submits the untouched notebook first: it must not be what counts.
    submit(wrong)
    first = inbound(room_, wrong.name)
    assert len(first) == 1, first
    time.sleep(1.1)  # nbgrader's timestamps have microseconds; keep them clearly apart

    type_answers(right, solved)
    dialog = validate(right)
    expect(dialog).to_contain_text("Success!")
    close_dialog(right.page)
    # answered by the warm worker of attention_validate.py, run as the student, not by a
    # kernel (a fallback would pass the same assertions)
    assert validate_workers(right.name), "Validate ran no worker as " + right.name
    submit(right)

    record(shots, server_mb_after_validate=round(rss_mb(right.name)))
    type_answers(wrong, mistaken)
    t0 = time.monotonic()
    dialog = validate(wrong)
    record(shots, validate_seconds=round(time.monotonic() - t0, 1))
    text = dialog.inner_text()
    # nbgrader shows the failing test cells' code: only Cell 5's check failed.
    assert "check_attention_scores" in text, text
    for other in ("check_projections", "check_softmax", "check_attended_values"):
        assert other not in text, (other, text)
    wrong.page.screenshot(path=shots / "hub-4-validate-cell5-wrong.png")
    close_dialog(wrong.page)
    submit(wrong)
    both = inbound(room_, wrong.name)
    assert len(both) == 2, both
    expect(wrong.page.locator("#submitted_assignments_list")).to_contain_text("attention")
    wrong.page.screenshot(path=shots / "hub-5-submitted.png")
    # Minutes in JupyterLab, and never asked about Jupyter news (the question comes as
    # soon as JupyterLab is restored when fetchNews is "none": test_idle shows it does).
    for person in (right, wrong):
        expect(person.page.get_by_text(NEWS)).to_have_count(0)


def test_3_instructor_collects_and_autogrades_in_the_sandbox(room, people, names, shots):
    room_, _ = room
    teacher = people(names[0])
    page = teacher.page
    page.goto(f"{teacher.url}/formgrader/manage_assignments")
    row = page.locator("#main-table tr", has=page.locator("td.name", has_text="attention"))
    collected = formgrader_action(page, row, "collect", "/collect")
    assert collected["success"], collected
    expect(row.locator("td.num-submissions")).to_have_text("2")

    # The last submission counts, with its own timestamp.
    latest = inbound(room_, names[2])[-1].split("+")[2]
    stamp = room_.course_dir / "submitted" / names[2] / classroom.ASSIGNMENT / "timestamp.txt"
    assert stamp.read_text().strip() == latest

    page.goto(f"{teacher.url}/formgrader/manage_submissions/{classroom.ASSIGNMENT}")
    for student in names[1:]:
        srow = page.locator("#main-table tr",
                            has=page.locator(".student-id", has_text=student))
        t0 = time.monotonic()
        result = formgrader_action(page, srow, "autograde", f"/{student}/autograde")
        assert result["success"], result.get("error") or result.get("log")
        record(shots, **{f"autograde_seconds_{student}": round(time.monotonic() - t0, 1)})
    for student, total in ((names[1], "9 / 9"), (names[2], "7 / 9")):
        srow = page.locator("#main-table tr", has=page.locator(".student-id", has_text=student))
        expect(srow.locator(".score")).to_have_text(total)
    page.screenshot(path=shots / "hub-6-autograded.png")

    assert gradebook_cells(room_, names[1]) == RIGHT
    assert gradebook_cells(room_, names[2]) == WRONG
    # Graded in the sandbox, scored by the trusted step: its report lies beside each.
    for student in names[1:]:
        report = (room_.course_dir / "autograded" / student / classroom.ASSIGNMENT /
                  "grading_report.json")
        assert report.exists(), report


def test_4_feedback_is_released_and_each_student_sees_their_own(room, people, names, shots):
    room_, _ = room
    teacher = people(names[0])
    page = teacher.page
    page.goto(f"{teacher.url}/formgrader/manage_assignments")
    row = page.locator("#main-table tr", has=page.locator("td.name", has_text="attention"))
    for cls, endpoint in (("generate-feedback", "/generate_feedback"),
                          ("release-feedback", "/release_feedback")):
        result = formgrader_action(page, row, cls, endpoint)
        assert result["success"], (endpoint, result.get("error"), result.get("log"))

    for student, score, cells in ((names[1], "9", RIGHT), (names[2], "7", WRONG)):
        person = people(student)
        person.page.goto(f"{person.url}/lab")
        assignment_list(person)
        answer = student_action(person, "Fetch Feedback", "/assignments/fetch_feedback",
                                "#submitted_assignments_list")
        assert answer.ok and answer.json()["success"], answer.text()
        feedback = sorted((room_.home(student) / "attention" / "feedback").glob(
            "*/lesson.html"))
        assert len(feedback) == 1, feedback  # the last submission's only
        html = feedback[0].read_text()
        totals = re.findall(r"\(Score: ([\d.]+) / ([\d.]+)\)", html)
        assert totals and totals[0] == (f"{score}", "9"), (student, totals[:6])
        # Open it in the student's own server, as the Assignment List's link does.
        rel = feedback[0].relative_to(room_.home(student))
        person.page.goto(f"{person.url}/files/{rel}")
        expect(person.page.locator("h4").first).to_contain_text(f"(Score: {score} / 9)")
        for grade_id, points in cells.items():  # the table of contents, each cell named
            entry = person.page.locator(f"#toc li:has(a[href='#{grade_id}'])")
            expect(entry).to_contain_text(
                f"{pages.cell_name(grade_id)}: {points:g} / {RIGHT[grade_id]:g}")
        if student == names[2]:
            person.page.screenshot(path=shots / "hub-7-feedback-cell5.png")


# -------------------------------------------------------------------- isolation
def targets(room, me, other) -> dict:
    """What ``me`` must not reach: {label: path}, each checked to exist (as root)."""
    inbound_dir = room.exchange / classroom.COURSE_ID / "inbound"
    theirs = inbound(room, other)[-1]
    out = {
        "other's home": room.home(other),
        "other's notebook": room.home(other) / "attention" / "lesson.ipynb",
        "other's nbgrader cache": room.home(other) / ".local" / "share" / "jupyter",
        "other's feedback": next((room.home(other) / "attention" / "feedback").iterdir()),
        "the exchange's inbound": inbound_dir,
        "the exchange's feedback": room.exchange / classroom.COURSE_ID / "feedback",
        "instructor's course": room.course_dir,
        "source/": room.course_dir / "source" / classroom.ASSIGNMENT / "lesson.ipynb",
        "gradebook.db": room.course_dir / "gradebook.db",
        "autograded/": room.course_dir / "autograded",
        "other's autograded notebook": room.course_dir / "autograded" / other /
        classroom.ASSIGNMENT / "lesson.ipynb",
        "submitted/": room.course_dir / "submitted",
        "the solutions": room.course_copy / "complete_lesson.ipynb",
    }
    for label, path in out.items():
        assert path.exists(), (label, path)
    # Without the submission's random suffix (72 bits) its name cannot be guessed.
    guess = inbound_dir / "+".join(theirs.split("+")[:3])
    out["other's submission, guessed name"] = guess / "lesson.ipynb"
    return {k: str(v) for k, v in out.items()}


PROBE = '''import json, os, pwd
targets = json.loads({targets!r})
seen = {{"whoami": pwd.getpwuid(os.getuid()).pw_name}}
for label, path in targets.items():
    try:
        if os.path.isdir(path):
            os.listdir(path)
        else:
            open(path, "rb").read(1)
        seen[label] = "READ"
    except OSError as exc:
        seen[label] = type(exc).__name__
released = {released!r}
for label, attempt in (("overwrite the release", lambda: open(released, "a")),
                       ("rename the course in the exchange",
                        lambda: os.rename({course!r}, {course!r} + "-x"))):
    try:
        attempt()
        seen[label] = "DONE"
    except OSError as exc:
        seen[label] = type(exc).__name__
print("PROBE" + json.dumps(seen))
'''


def test_5_a_students_kernel_cannot_reach_other_people(room, people, names, shots):
    room_, _ = room
    me, other = names[1], names[2]
    person = people(me)
    course = room_.exchange / classroom.COURSE_ID
    code = PROBE.format(targets=json.dumps(targets(room_, me, other)),
                        released=str(course / "outbound" / classroom.ASSIGNMENT /
                                     "lesson.ipynb"), course=str(course))
    nb = {"cells": [{"cell_type": "code", "execution_count": None, "id": "probe",
                     "metadata": {}, "outputs": [], "source": code}],
          "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                      "language": "python"}},
          "nbformat": 4, "nbformat_minor": 5}
    page = person.page
    page.goto(f"{person.url}/lab")
    answer = page.request.put(f"{person.url}/api/contents/probe.ipynb", headers=person.xsrf(),
                              data=json.dumps({"type": "notebook", "content": nb}))
    assert answer.ok, answer.text()
    page.goto(f"{person.url}/lab/tree/probe.ipynb")
    page.wait_for_selector(f"{NOTEBOOK} .jp-Cell")
    # The student's own kernel is up (the status bar, as in tests/browser).
    expect(page.get_by_text("Python 3 (ipykernel) | Idle")).to_be_visible(timeout=120_000)
    page.locator(f"{NOTEBOOK} .jp-Cell .cm-content").first.click()
    page.keyboard.press("Shift+Enter")
    output = page.locator(f"{NOTEBOOK} .jp-OutputArea-output")
    expect(output).to_contain_text("PROBE", timeout=120_000)
    seen = json.loads(output.inner_text().split("PROBE", 1)[1])
    page.screenshot(path=shots / "hub-8-isolation-kernel.png")
    assert seen.pop("whoami") == me
    guessed = seen.pop("other's submission, guessed name")
    assert guessed in ("FileNotFoundError", "PermissionError"), guessed
    assert seen == {label: "PermissionError" for label in seen}, seen


def test_6_a_students_terminal_cannot_reach_other_people(room, people, names):
    room_, _ = room
    me, other = names[1], names[2]
    person = people(me)
    paths = targets(room_, me, other)
    result = room_.home(me) / "terminal-probe.txt"
    script = "; ".join(
        f"if cat {json.dumps(p)} >/dev/null 2>&1 || ls {json.dumps(p)} >/dev/null 2>&1; "
        f"then echo OPEN {json.dumps(label)}; else echo DENIED {json.dumps(label)}; fi"
        for label, p in paths.items())
    page = person.page
    page.goto(f"{person.url}/lab")
    page.locator(MENU, has_text=re.compile("^File$")).click()  # File > New > Terminal
    page.locator(".lm-Menu-itemLabel", has_text=re.compile("^New$")).hover()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile("^Terminal$")).click()
    terminal = page.locator(".jp-Terminal .xterm-screen")
    expect(terminal).to_be_visible(timeout=60_000)
    terminal.click()
    page.keyboard.insert_text(f"(whoami; {script}) > {result}.tmp; mv {result}.tmp {result}")
    page.keyboard.press("Enter")
    deadline = time.monotonic() + 60
    while not result.exists() and time.monotonic() < deadline:
        time.sleep(0.5)
    lines = result.read_text().splitlines()
    assert lines[0] == me
    assert [ln for ln in lines[1:] if not ln.startswith("DENIED")] == [], lines
    assert len(lines) == 1 + len(paths)
    assert result.stat().st_uid == room_.home(me).stat().st_uid  # written by the student


# --------------------------------------------------------------------- lesson 2
def test_7_a_class_takes_lesson_2_from_release_to_feedback(room, people, names, shots):
    """Lesson 2 (the assignment multihead) on the same hub: released in the Formgrader;
    student1 fetches it, types the four answers, validates and submits; student2 submits
    it with Cell 5's causal mask left out. Collected and autograded in the sandbox: 8/8
    and 6/8, cell by cell; feedback released, student2 sees Cell 5 named."""
    from src import lessons
    from tests import corpus_multihead as mh

    room_, _ = room
    spec = lessons.lesson("multihead")
    teacher, right, wrong = (people(n) for n in names[:3])
    page = teacher.page
    page.goto(f"{teacher.url}/formgrader/manage_assignments")
    row = page.locator("#main-table tr", has=page.locator("td.name", has_text="multihead"))
    expect(row).to_have_count(1)
    for cls, endpoint in (("assign", "/assign"), ("release", "/release")):
        result = formgrader_action(page, row, cls, endpoint)
        assert result["success"], (endpoint, result.get("error"), result.get("log"))

    solved = mh.sources(mh.ATTEMPTS[0])
    no_mask = mh.sources(next(a for a in mh.ATTEMPTS if a.name == "no mask"))
    answers = tuple(s.cell for s in spec.steps)
    for person, sources in ((right, solved), (wrong, no_mask)):
        person.page.goto(f"{person.url}/lab")
        assignment_list(person)
        answer = student_action(
            person, "Fetch", "/assignments/fetch",
            "#released_assignments_list > .list_item:has-text('multihead')")
        assert answer.ok and answer.json()["success"], answer.text()
        type_answers(person, sources, spec.name, spec.notebook, answers)
        if person is right:
            dialog = validate(person)
            expect(dialog).to_contain_text("Success!")
            close_dialog(person.page)
        submit(person, spec.name)

    page.goto(f"{teacher.url}/formgrader/manage_assignments")
    row = page.locator("#main-table tr", has=page.locator("td.name", has_text="multihead"))
    assert formgrader_action(page, row, "collect", "/collect")["success"]
    page.goto(f"{teacher.url}/formgrader/manage_submissions/{spec.name}")
    for student in names[1:3]:
        srow = page.locator("#main-table tr", has=page.locator(".student-id", has_text=student))
        result = formgrader_action(page, srow, "autograde", f"/{student}/autograde")
        assert result["success"], result.get("error") or result.get("log")
    full = {s.test: 2.0 for s in spec.steps}
    assert gradebook_cells(room_, names[1], spec.name) == full
    assert gradebook_cells(room_, names[2], spec.name) == {**full, "mh_cell5_scores_test": 0.0}
    page.screenshot(path=shots / "hub-8-lesson2-autograded.png")

    page.goto(f"{teacher.url}/formgrader/manage_assignments")
    row = page.locator("#main-table tr", has=page.locator("td.name", has_text="multihead"))
    for cls, endpoint in (("generate-feedback", "/generate_feedback"),
                          ("release-feedback", "/release_feedback")):
        result = formgrader_action(page, row, cls, endpoint)
        assert result["success"], (endpoint, result.get("error"), result.get("log"))
    wrong.page.goto(f"{wrong.url}/lab")
    assignment_list(wrong)
    answer = student_action(
        wrong, "Fetch Feedback", "/assignments/fetch_feedback",
        "#submitted_assignments_list > .list_item:has-text('multihead')")
    assert answer.ok and answer.json()["success"], answer.text()
    (feedback,) = (room_.home(names[2]) / spec.name / "feedback").glob(
        f"*/{spec.notebook}.html")
    html = feedback.read_text()
    assert re.findall(r"\(Score: ([\d.]+) / ([\d.]+)\)", html)[0] == ("6", "8")
    assert "the causal mask is missing" in html
