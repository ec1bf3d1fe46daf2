"""Every shell command the documentation shows is run: here, or by the test named for it.

Each fenced ```bash block of README.md and docs/**/*.md is split into commands (comments
dropped, continuation lines joined). A command is either run by this test (cheap and
offline, never writing into the repository) or matched by a row of ELSEWHERE, which names
the slow test or target that runs it for real; that test file must exist and hold the
command's core (the words it runs it with). An unlisted, unrun command fails, with its
file and line. ``make hub ...`` commands are also expanded by ``make -n``: each setting the
guide gives must reach the launcher as its option.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs import DOCS
from tests.notebook_utils import ROOT

FILES = (*DOCS, *sorted((ROOT / "docs").glob("*/*.md")))

#: (pattern of a command, the test file that runs it for real, that command's core in it).
ELSEWHERE = [
    (r"make lesson", "tests/test_student_package.py", '"-n", "lesson"'),
    (r"make lesson", "tests/package/test_package.py", '"lab", "--no-browser"'),
    (r"make test", "tests/test_setup.py", "make test"),
    (r"make test", ".ci/run", "\nmake test\n"),
    (r"make student", "tests/test_student_package.py", "sp.build(out)"),
    (r"make student", "tests/package/test_package.py", '"src.student_package", "--out"'),
    (r"python3\.11 -m venv \.venv", "tests/package/test_package.py", '"-m", "venv", ".venv"'),
    (r"\.venv/bin/pip install -r requirements\.txt", "tests/package/test_package.py",
     '".venv/bin/pip", "install", "--disable-pip-version-check",\n                          '
     '"--quiet", "-r", "requirements.txt"'),
    (r"\.venv/bin/jupyter lab", "tests/package/test_package.py",
     '".venv" / "bin" / "jupyter"), "lab"'),
    (r"make release", "tests/test_course_lessons.py", '_cli("release")'),
    (r"make release", "tests/test_student_package.py", '["-m", "src.course", "release"]'),
    (r"make grade", "tests/test_course_lessons.py", '_cli("grade"'),
    (r"make feedback", "tests/test_course_lessons.py", '_cli("feedback")'),
    (r"make export", "tests/test_course_lessons.py", '_cli("export")'),
    (r"sudo make hub(\s+#.*)?", "tests/hub/conftest.py", '"-m", "hub.classroom", "up"'),
    (r"sudo make hub CLASS_LIST=.* SSL_CERT=.*", "tests/hub/conftest.py",
     '"--class-list", str(base / "students.csv"), "--ip", ip, "--ssl-cert"'),
    (r"sudo make hub AUTH=oidc .*", "tests/hub/test_oidc.py", '"--auth", "oidc"'),
    (r"sudo make hub AUTH=lti13 .*", "tests/hub/test_lti.py", '"--auth", "lti13"'),
    (r"sudo make hub EXCHANGE=ngshare .*", "tests/hub/test_ngshare.py",
     '"--exchange", "ngshare"'),
]


def commands(path: Path) -> list[tuple[int, str]]:
    """(line, command) of every ```bash block of ``path``."""
    out, block, pending, start = [], False, "", 0
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        s = line.strip()
        if s.startswith("```"):
            block = (not block) and s == "```bash"
            continue
        if not block:
            continue
        code = "" if s.startswith("#") else s
        code = re.sub(r"\s+#\s.*$", "", code).strip()
        if not code and not pending:
            continue
        start = start if pending else n
        if code.endswith("\\"):
            pending += code[:-1] + " "
            continue
        out.append((start, " ".join((pending + code).split())))
        pending = ""
    return out


ALL = [(p, n, c) for p in FILES for n, c in commands(p)]


def _run_verify(cmd: str, tmp_path):
    """`.venv/bin/python verify.py lesson.ipynb`: the repository's untouched lesson, read
    only; every step still a stub, so exit status 1 and each cell named."""
    args = shlex.split(cmd)[1:]
    proc = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 1, proc.stderr
    assert "Cell 4" in proc.stdout and "NotImplementedError" in proc.stdout, proc.stdout


def _run_openssl(cmd: str, tmp_path):
    """The self-signed certificate command, in a temporary folder."""
    if shutil.which("openssl") is None:
        pytest.fail("openssl is missing: the guide's certificate command cannot be run")
    proc = subprocess.run(shlex.split(cmd), cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "BEGIN CERTIFICATE" in (tmp_path / "cert.pem").read_text()
    assert "PRIVATE KEY" in (tmp_path / "key.pem").read_text()


#: make's variable -> the launcher's option (the Makefile's HUB_ARGS).
HUB_FLAGS = {"CLASS_LIST": "--class-list", "HUB_IP": "--ip", "PORT": "--port",
             "SSL_CERT": "--ssl-cert", "SSL_KEY": "--ssl-key", "HUB_URL": "--public-url",
             "AUTH": "--auth", "OIDC_ISSUER": "--oidc-issuer",
             "OIDC_CLIENT_ID": "--oidc-client-id",
             "OIDC_CLIENT_SECRET_FILE": "--oidc-client-secret-file",
             "INSTRUCTOR_LOGIN": "--instructor-login", "LTI_ISSUER": "--lti-issuer",
             "LTI_CLIENT_ID": "--lti-client-id", "LTI_AUTHORIZE_URL": "--lti-authorize-url",
             "LTI_JWKS_URL": "--lti-jwks-url", "EXCHANGE": "--exchange",
             "STUDENTS": "--students", "HUB_DIR": "--base", "HUB_PREFIX": "--prefix"}


def _expand_hub(cmd: str) -> str:
    """``make -n hub SETTINGS``: the launcher's command line the settings make; each setting
    must reach it as its option."""
    settings = [w for w in shlex.split(cmd)[3:] if "=" in w]
    proc = subprocess.run(["make", "-n", "hub", *settings], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if "-m hub.classroom up" in ln)
    for setting in settings:
        key, value = setting.split("=", 1)
        assert f"{HUB_FLAGS[key]} {value}" in line, (setting, line)
    return line


RUN_HERE = [(r"\.venv/bin/python verify\.py lesson\.ipynb", _run_verify),
            (r"openssl req -x509 .*", _run_openssl)]


def _where(path: Path, line: int) -> str:
    return f"{path.relative_to(ROOT)}:{line}"


def test_the_guides_show_commands():
    files = {p.relative_to(ROOT).as_posix() for p, _, _ in ALL}
    assert {"README.md", "docs/student.md", "docs/instructor.md"} <= files
    assert len(ALL) >= 20


@pytest.mark.parametrize("path,line,cmd", ALL, ids=[_where(p, n) for p, n, _ in ALL])
def test_every_command_is_run_here_or_by_the_test_named_for_it(path, line, cmd, tmp_path):
    for pattern, run in RUN_HERE:
        if re.fullmatch(pattern, cmd):
            run(cmd, tmp_path)
            return
    rows = [(f, core) for pattern, f, core in ELSEWHERE if re.fullmatch(pattern, cmd)]
    assert rows, (f"{_where(path, line)}: `{cmd}` is neither run by tests/test_docs.py nor "
                  "listed in its ELSEWHERE table with the test that runs it")
    for name, core in rows:
        test_file = ROOT / name
        assert test_file.is_file(), f"{_where(path, line)}: {name} does not exist"
        assert core in test_file.read_text(encoding="utf-8"), (
            f"{_where(path, line)}: {name} no longer holds `{core}`, the core of `{cmd}`")
    if cmd.startswith("sudo make hub"):
        _expand_hub(cmd)


def test_an_unlisted_command_is_refused_with_its_file_and_line(tmp_path):
    doc = tmp_path / "guide.md"
    doc.write_text("Intro\n\n```bash\nmake lesson\nrm -rf course/  # never\n```\n")
    found = commands(doc)
    assert found == [(4, "make lesson"), (5, "rm -rf course/")]
    unlisted = [(n, c) for n, c in found
                if not any(re.fullmatch(p, c) for p, _ in RUN_HERE)
                and not any(re.fullmatch(p, c) for p, _, _ in ELSEWHERE)]
    assert unlisted == [(5, "rm -rf course/")]
