"""`make hub` stops before touching anything, with what to do, when the class cannot run:
not root, the port in use, no bwrap, no Node, a bad class list, a bad address or TLS
files. Each case runs the real launcher (`python -m hub.classroom up`) in a real
situation: another user, a port really taken, a PATH without the tool, a real CSV file."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from hub import classroom

pytestmark = pytest.mark.hub
ROOT = Path(__file__).resolve().parents[2]


def launch(tmp_path, port=None, env=None, args=(), **kw):
    """The launcher with a fresh base and prefix; (exit status, stderr)."""
    port = port or classroom.free_port()
    cmd = [sys.executable, "-m", "hub.classroom", "up", "--base", str(tmp_path / "base"),
           "--home-base", str(tmp_path / "home"), "--prefix", "attpre-", "--port", str(port),
           *args]
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={**os.environ, **(env or {})}, **kw)
    return res.returncode, res.stderr


def nothing_made(tmp_path):
    assert not (tmp_path / "base").exists() and not (tmp_path / "home").exists()
    with pytest.raises(KeyError):
        import pwd

        pwd.getpwnam("attpre-instructor")


def test_not_root_says_to_use_sudo():
    # As an ordinary user, with a Python every user can run; the checks need only stdlib.
    python = "/usr/bin/python3.11"
    work = Path(tempfile.mkdtemp(prefix="attention-hub-preflight-"))  # not under 0700 dirs
    try:
        os.chmod(work, 0o755)
        shutil.copytree(ROOT / "hub", work / "hub", ignore=shutil.ignore_patterns(
            "node_modules", "__pycache__"))
        res = subprocess.run([python, "-m", "hub.classroom", "up", "--base", str(work / "base")],
                             cwd=work, capture_output=True, text=True, timeout=60,
                             user=65534, group=65534, extra_groups=[],
                             env={"PATH": "/usr/bin:/bin", "HOME": "/tmp"})
        assert res.returncode == 2, res.stderr
        assert "expected to run as root" in res.stderr and "sudo make hub" in res.stderr
        assert not (work / "base").exists()
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_port_in_use_names_the_port_and_another(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        status, err = launch(tmp_path, port=port)
    assert status == 2
    assert f"port {port} on 127.0.0.1 is in use" in err and f"PORT={port + 10}" in err
    nothing_made(tmp_path)


def test_no_bwrap_says_how_to_install_it(tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    status, err = launch(tmp_path, env={"PATH": str(empty)})
    assert status == 2
    assert "bubblewrap (bwrap) is not installed" in err and "apt-get install bubblewrap" in err
    nothing_made(tmp_path)


def test_no_node_says_how_to_install_it(tmp_path):
    only_bwrap = tmp_path / "bin"
    only_bwrap.mkdir()
    (only_bwrap / "bwrap").symlink_to(shutil.which("bwrap"))
    status, err = launch(tmp_path, env={"PATH": str(only_bwrap)})
    assert status == 2
    assert "Node.js is not installed" in err and "apt-get install nodejs npm" in err
    nothing_made(tmp_path)


# ------------------------------------------------------------------- class list
GOOD = "id,name,email\nattpre-ada,Ada Lovelace,ada@example.org\n"
BAD_LISTS = {
    "missing column": (
        "id,name\nattpre-ada,Ada Lovelace\n",
        ["lacks the column(s) email", "expected a header with id, name, email",
         "saw 'id', 'name'", "Nothing was created"]),
    "duplicate id": (
        GOOD + "attpre-bo,Bo Li,bo@example.org\nattpre-ada,Ada King,king@example.org\n",
        ["1 problem(s); nothing was created",
         "line 4: id 'attpre-ada' again (first on line 2): expected each id once"]),
    "unsafe ids": (
        "email,name,id\nx@example.org,X,Ada\ny@example.org,Y,../etc\n"
        "z@example.org,Z,attpre-a+b\nw@example.org,W,attpre-" + "w" * 30 + "\n",
        ["4 problem(s); nothing was created",
         "line 2: id 'Ada' is not a safe user name: expected a lowercase letter, then up to "
         "31 lowercase letters, digits, '_' or '-'",
         "line 3: id '../etc' is not a safe user name", "line 4: id 'attpre-a+b'",
         "line 5: id 'attpre-" + "w" * 30 + "'"]),
    "bad fields": (
        GOOD + "attpre-bo,Li, Bo,bo@example.org\nattpre-cy,,cy-at-example.org\n",
        ["line 3: 4 fields, expected 3 like the header (a name or e-mail with a comma "
         "needs double quotes)",
         "line 4: name '': expected a non-empty name",
         "line 4: e-mail 'cy-at-example.org': expected one address like ada@example.org"]),
    "only a header": ("id,name,email\n", ["no students: expected one line per student"]),
    "an existing account": (
        GOOD + "root,Root,root@example.org\n",
        ["account(s) that exist on this machine and were not created by `make hub`: 'root'",
         "Expected new user names", "Nothing was created"]),
}


@pytest.mark.parametrize("case", sorted(BAD_LISTS))
def test_a_bad_class_list_says_what_was_expected_and_creates_nothing(tmp_path, case):
    text, messages = BAD_LISTS[case]
    csv_file = tmp_path / "students.csv"
    csv_file.write_text(text)
    status, err = launch(tmp_path, args=["--class-list", str(csv_file)])
    assert status == 2, err
    assert str(csv_file) in err or case == "an existing account", err
    for message in messages:
        assert message in err, (message, err)
    nothing_made(tmp_path)
    with pytest.raises(KeyError):
        import pwd

        pwd.getpwnam("attpre-ada")


def test_a_missing_class_list_names_the_file(tmp_path):
    status, err = launch(tmp_path, args=["--class-list", str(tmp_path / "nope.csv")])
    assert status == 2
    assert f"the class list {tmp_path / 'nope.csv'} does not exist" in err
    nothing_made(tmp_path)


# ------------------------------------------------------------- address and TLS
def test_an_outside_address_without_tls_is_refused(tmp_path):
    status, err = launch(tmp_path, args=["--ip", "0.0.0.0"])
    assert status == 2
    assert "HUB_IP 0.0.0.0 is reachable from other machines" in err
    assert "expected SSL_CERT=cert.pem SSL_KEY=key.pem" in err
    nothing_made(tmp_path)


def test_bad_tls_files_and_addresses_say_what_was_expected(tmp_path):
    from tests.hub.conftest import OPENSSL

    certs = []
    for name in ("a", "b"):  # two pairs: a's certificate with b's key does not match
        cert, key = tmp_path / f"{name}-cert.pem", tmp_path / f"{name}-key.pem"
        subprocess.run(OPENSSL.format(key=key, cert=cert, ip="127.0.0.1").split(), check=True,
                       capture_output=True, timeout=60)
        certs.append((cert, key))
    (a_cert, _), (_, b_key) = certs
    cases = [
        (["--ssl-cert", str(a_cert)], "SSL_CERT was given without SSL_KEY: expected both"),
        (["--ssl-cert", str(a_cert), "--ssl-key", str(b_key)],
         "do not load together (KEY_VALUES_MISMATCH): expected a PEM certificate and the PEM "
         "private key that belongs to it"),
        (["--ssl-cert", str(tmp_path / "none.pem"), "--ssl-key", str(b_key)],
         "is not a readable file: expected a PEM file"),
        (["--ip", "hub.example.org"], "HUB_IP 'hub.example.org' is not an IP address"),
        (["--ip", "203.0.113.7", "--allow-http"], "cannot listen on 203.0.113.7"),
    ]
    for args, message in cases:
        status, err = launch(tmp_path, args=args)
        assert status == 2 and message in err, (args, err)
        nothing_made(tmp_path)


# ------------------------------------------------------- the Makefile's wiring
def make(*args, timeout=120):
    res = subprocess.run(["make", "--no-print-directory", *args], cwd=ROOT, capture_output=True,
                         text=True, timeout=timeout)
    return res.returncode, res.stdout + res.stderr


def test_make_hub_passes_the_class_list_and_tls_settings(tmp_path):
    bad = tmp_path / "students.csv"
    bad.write_text("id,name\nattpre-ada,Ada\n")
    base, home = tmp_path / "base", tmp_path / "home"
    # docs/instructor.md's command, for real: it stops at the class list, before anything is made.
    status, out = make("hub", f"CLASS_LIST={bad}", "HUB_IP=0.0.0.0", f"HUB_DIR={base}",
                       f"HUB_HOME={home}", "HUB_PREFIX=attpre-")
    assert status != 0 and f"the class list {bad} lacks the column(s) email" in out, out
    status, out = make("hub", "HUB_IP=0.0.0.0", f"HUB_DIR={base}", f"HUB_HOME={home}",
                       "HUB_PREFIX=attpre-", f"PORT={classroom.free_port()}")
    assert status != 0 and "HUB_IP 0.0.0.0 is reachable from other machines" in out, out
    nothing_made(tmp_path)
    status, out = make("-n", "hub", "CLASS_LIST=s.csv", "HUB_IP=0.0.0.0", "SSL_CERT=c.pem",
                       "SSL_KEY=k.pem", "HUB_URL=https://hub.example.org:8000",
                       "IDLE_TIMEOUT=600", "PORT=8443")
    assert status == 0, out
    for flag in ("--class-list s.csv", "--ip 0.0.0.0", "--ssl-cert c.pem", "--ssl-key k.pem",
                 "--public-url https://hub.example.org:8000", "--idle-timeout 600",
                 "--port 8443"):
        assert flag in out, (flag, out)
    status, out = make("hub-link")
    assert status == 2 and "expected ID=<student id from the class list>" in out, out
    status, out = make("-n", "hub-link", "ID=s1234")
    assert status == 0 and "-m hub.classroom new-link s1234 --base /srv/attention-hub" in out


def test_login_settings_are_checked_before_anything_is_made(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("s3cret\n")
    silent = classroom.free_port()  # nothing listens there
    cases = [
        (["--auth", "oidc", "--ip", "0.0.0.0", "--allow-http"],
         "AUTH=oidc without OIDC_ISSUER runs this machine's provider, for trying the login "
         "out on 127.0.0.1 only, but HUB_IP is 0.0.0.0"),
        (["--auth", "oidc", "--oidc-issuer", "http://idp.example.org"],
         "OIDC_ISSUER 'http://idp.example.org': expected an https:// URL"),
        (["--auth", "oidc", "--oidc-issuer", "https://idp.example.org"],
         "OIDC_CLIENT_SECRET_FILE None: expected a file holding the client secret"),
        (["--auth", "oidc", "--oidc-issuer", f"http://127.0.0.1:{silent}",
          "--oidc-client-secret-file", str(secret)],
         f"no OpenID Connect discovery document at http://127.0.0.1:{silent}/.well-known/"
         "openid-configuration"),
        (["--auth", "lti13", "--lti-issuer", "https://lms.example.org"],
         "AUTH=lti13 needs LTI_CLIENT_ID, LTI_AUTHORIZE_URL, LTI_JWKS_URL"),
    ]
    for args, message in cases:
        status, err = launch(tmp_path, args=args)
        assert status == 2 and message in err, (args, err)
        nothing_made(tmp_path)


def test_make_hub_passes_the_login_settings():
    status, out = make("-n", "hub", "AUTH=oidc", "OIDC_ISSUER=https://idp.example.org/r",
                       "OIDC_CLIENT_ID=hub1", "OIDC_CLIENT_SECRET_FILE=/root/s",
                       "OIDC_USERNAME_CLAIM=email", "OIDC_PORT=9001", "INSTRUCTOR_LOGIN=jdoe")
    assert status == 0, out
    for flag in ("--auth oidc", "--oidc-issuer https://idp.example.org/r",
                 "--oidc-client-id hub1", "--oidc-client-secret-file /root/s",
                 "--oidc-username-claim email", "--oidc-port 9001", "--instructor-login jdoe"):
        assert flag in out, (flag, out)
    status, out = make("-n", "hub", "AUTH=lti13", "LTI_ISSUER=https://lms", "LTI_CLIENT_ID=7",
                       "LTI_AUTHORIZE_URL=https://lms/a", "LTI_JWKS_URL=https://lms/j",
                       "LTI_USERNAME_KEY=custom_uid")
    assert status == 0, out
    for flag in ("--auth lti13", "--lti-issuer https://lms", "--lti-client-id 7",
                 "--lti-authorize-url https://lms/a", "--lti-jwks-url https://lms/j",
                 "--lti-username-key custom_uid"):
        assert flag in out, (flag, out)
