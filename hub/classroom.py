"""`make hub`: a real class on this machine, on 127.0.0.1 or (with TLS) any address.

``python -m hub.classroom up`` (as root) sets up, idempotently, and then runs:

- local Unix users: one instructor and either the students of a class list
  (``--class-list``: a CSV of id, name, email; each id is the Unix user, the hub's user
  and the nbgrader student id) or ``--students`` made-up ones (``<prefix>student1`` ...),
  each home 0700; a bad class list stops everything before anything is made;
- the instructor's password (and made-up students'), printed once when it is made and
  kept in ``<base>/hub/passwords.txt`` (0600, root); each student of a class list gets a
  first-login link instead, printed once (and kept in ``<base>/hub/first-logins.csv``,
  0600, for mailing), that works once: the student chooses their password with it
  (hub/parts.py); the hub checks scrypt hashes only;
- the class's Python environment ``<venv>``, built from requirements.txt with an
  interpreter every user can run (the project's own .venv may sit under a 0700 home);
- nbgrader's file-system exchange ``<base>/exchange``: root-owned, ``ugo+rwx`` as
  nbgrader documents, plus the sticky bit (nbgrader's check ignores it) so no student can
  rename or delete the course's folder in it;
- the instructor's copy of the course, ``~<instructor>/attention`` (the project's
  nbgrader_config.py, verify.py, src/, data/, notebooks) with the nbgrader course in its
  ``course/``, whose nbgrader_config.py loads the project's (sandboxed grading, trusted
  scores, safe outputs) and sets ``course_id = "attention"`` and the exchange;
- the assignment generated and released to the exchange (``--no-release``: left to the
  instructor's Formgrader);
- JupyterHub (the project's .venv, as root) with configurable-http-proxy from
  hub/node_modules and LocalProcessSpawner: each server runs as its own user; on
  ``--ip`` (127.0.0.1 by default), over TLS with ``--ssl-cert``/``--ssl-key`` (required
  on any other address unless ``--allow-http``); jupyterhub-idle-culler as a hub service
  stops servers idle for ``--idle-timeout`` seconds (their files stay);
- the login (``--auth``): the hub's password form (above), an OpenID Connect provider
  (``oidc``: its endpoints from its discovery document; without ``--oidc-issuer`` this
  machine's provider, hub/oidc-provider.mjs, with the class's people as its accounts and
  their passwords printed once, started before the hub and stopped after it), or LTI 1.3
  launches from an LMS (``lti13``); whichever it is, only the class list's ids and the
  instructor are let in.

Ctrl-C (or SIGTERM) stops the hub, which stops every server and the proxy; then no
process of the class's users may be left, and any that is, is named and stopped.
"""

from __future__ import annotations

import argparse
import csv
import errno
import hashlib
import ipaddress
import json
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from hub.credentials import first_login_code_hash, hash_password, write_private

ROOT = Path(__file__).resolve().parent.parent
PROXY = ROOT / "hub" / "node_modules" / ".bin" / "configurable-http-proxy"
COURSE_ID = "attention"
ASSIGNMENT = "attention"
#: Every assignment the class releases, in course order (each lesson's spec's name).
ASSIGNMENTS = ("attention", "multihead")
#: The comment of every user `make hub` creates: it never adopts an account it did not make.
MARK = "attention course hub"
#: What the instructor's copy of the course holds (src.course builds the source from it).
COURSE_FILES = ("nbgrader_config.py", "verify.py", "src", "data", "complete_lesson.ipynb",
                "lesson.ipynb", "complete_multihead.ipynb", "multihead.ipynb")
#: JupyterLab's defaults for everyone on the hub, in the class's environment
#: (<venv>/share/jupyter/lab/settings/overrides.json, JupyterLab's own mechanism; a
#: person's own settings still win): no "get notified about Jupyter news?" pop-up.
LAB_OVERRIDES = {"@jupyterlab/apputils-extension:notification": {"fetchNews": "false"}}
#: What a class list's id may be: a Unix user name (useradd's default rule, lowercase,
#: at most 32 characters), which is also the hub's user name (JupyterHub lowercases
#: names) and the nbgrader student id (nbgrader separates the parts of a submission's
#: name with "+", and the exchange's paths use it).
SAFE_ID = re.compile(r"[a-z][a-z0-9_-]{0,31}")
CLASS_LIST_COLUMNS = ("id", "name", "email")
EMAIL = re.compile(r"[^@\s,;<>]+@[^@\s,;<>]+\.[^@\s,;<>]+")
#: Shortest password a student may choose at first login.
MIN_PASSWORD = 8
#: nbgrader's instructor tools, switched off for students (server side and in the UI).
INSTRUCTOR_ONLY_SERVER = ("nbgrader.server_extensions.formgrader",
                          "nbgrader.server_extensions.course_list")
INSTRUCTOR_ONLY_LAB = ("@jupyter/nbgrader:formgrader", "@jupyter/nbgrader:course-list",
                       "@jupyter/nbgrader:create-assignment")
HUB_CONFIG_COURSE = '''"""Written by `make hub`: the course's configuration, then the class's."""
load_subconfig("nbgrader_config.py", path={root!r})  # noqa: F821
c = get_config()  # noqa: F821
c.CourseDirectory.course_id = {course_id!r}
{exchange}
'''
USER_NBGRADER_CONFIG = '''"""Written by `make hub`: this class's course and nbgrader exchange."""
c = get_config()  # noqa: F821
c.CourseDirectory.course_id = {course_id!r}
{exchange}
'''
#: Validate without a kernel for everyone (the server extension, and the switch that puts
#: it in nbgrader's validate_assignment's place: the one file `make lesson` also reads).
VALIDATE_EXTENSION = ROOT / "attention_validate.py"


def validate_server_extensions() -> dict:
    """The server extensions jupyter_server_config.json switches (read when a person's
    configuration is written: `make hub`'s checks run before, with only hub/ at hand)."""
    config = json.loads((ROOT / "jupyter_server_config.json").read_text())
    return config["ServerApp"]["jpserver_extensions"]


#: EXCHANGE=ngshare: the service's environment and nbgrader's side (Makefile, $(NGSHARE)).
#: ("venv" and "site-packages": names ruff and other tools skip by default.)
NGSHARE_ENV = ROOT / "hub" / "ngshare" / "venv"
NGSHARE_EXCHANGE = ROOT / "hub" / "ngshare" / "site-packages"
#: The hub service that is ngshare's admin: it registers the course and its students.
NGSHARE_ADMIN = "attention-setup"
#: How people log in: the hub's password form (first-login links for a class list), an
#: OpenID Connect provider (oauthenticator's GenericOAuthenticator), or LTI 1.3 launches
#: from an LMS (jupyterhub-ltiauthenticator).
AUTH_KINDS = ("password", "oidc", "lti13")
#: AUTH=oidc without OIDC_ISSUER: the provider for trying it on this machine.
OIDC_PROVIDER = ROOT / "hub" / "oidc-provider.mjs"
#: The scopes the hub asks an OpenID Connect provider for.
OIDC_SCOPES = ["openid", "profile", "email"]


class HubError(Exception):
    """Something the operator must fix; the message says what and how."""


@dataclass(frozen=True)
class Student:
    """One line of a class list."""

    id: str
    name: str
    email: str


@dataclass
class Classroom:
    """Where everything of one class lives, and who is in it."""

    base: Path = Path("/srv/attention-hub")
    port: int = 8000
    students: int = 3
    prefix: str = "att-"
    home_base: Path = Path("/home")
    venv: Path | None = None  # default: <base>/venv
    release: bool = True
    extra_lab_settings: dict = field(default_factory=dict)
    #: The class list's students; None: ``students`` made-up ones.
    roster: list[Student] | None = None
    ip: str = "127.0.0.1"
    ssl_cert: Path | None = None
    ssl_key: Path | None = None
    allow_http: bool = False
    #: Where people reach the hub, for the banner and the links (default from ip and port).
    public_url: str | None = None
    idle_timeout: int = 3600
    #: nbgrader's exchange: "fs" (a shared directory) or "ngshare" (a hub service).
    exchange_kind: str = "fs"
    ngshare_port: int = 0  # chosen by setup()
    #: How people log in: one of AUTH_KINDS.
    auth: str = "password"
    #: AUTH=oidc: the provider's issuer URL; None: this machine's (hub/oidc-provider.mjs,
    #: the class's people as its accounts) on 127.0.0.1:``oidc_port``.
    oidc_issuer: str | None = None
    oidc_port: int = 0  # the local provider's; 0: PORT + 1
    oidc_client_id: str = "attention-hub"
    #: A file holding the client secret the provider gave the hub (the local one: made).
    oidc_client_secret_file: Path | None = None
    #: The claim of the provider's userinfo whose value is the class list's id.
    oidc_username_claim: str = "preferred_username"
    #: The instructor's user name at the provider or the LMS (default: the hub's name),
    #: mapped to the hub's instructor.
    instructor_login: str | None = None
    #: AUTH=lti13: the platform's (LMS's) issuer, the hub's client id there, its
    #: authorization and JWKS endpoints, and the launch's claim holding the class list id.
    lti_issuer: str = ""
    lti_client_id: str = ""
    lti_authorize_url: str = ""
    lti_jwks_url: str = ""
    lti_username_key: str = "custom_id"
    #: The local provider's process while the class runs (start(), stop()).
    provider: subprocess.Popen | None = field(default=None, repr=False, compare=False)

    def __post_init__(self):
        self.base, self.home_base = Path(self.base), Path(self.home_base)
        self.venv = Path(self.venv) if self.venv else self.base / "venv"
        self.ssl_cert = Path(self.ssl_cert) if self.ssl_cert else None
        self.ssl_key = Path(self.ssl_key) if self.ssl_key else None
        if self.oidc_client_secret_file:
            self.oidc_client_secret_file = Path(self.oidc_client_secret_file)
        if not self.oidc_port:
            self.oidc_port = self.port + 1

    @property
    def state(self) -> Path:
        return self.base / "hub"

    @property
    def exchange(self) -> Path:
        return self.base / "exchange"

    @property
    def instructor(self) -> str:
        return f"{self.prefix}instructor"

    @property
    def student_names(self) -> list[str]:
        if self.roster is not None:
            return [st.id for st in self.roster]
        return [f"{self.prefix}student{i}" for i in range(1, self.students + 1)]

    @property
    def users(self) -> list[str]:
        return [self.instructor, *self.student_names]

    def home(self, user: str) -> Path:
        return self.home_base / user

    @property
    def course_copy(self) -> Path:
        """The instructor's copy of the course files (its src/ grades)."""
        return self.home(self.instructor) / "attention"

    @property
    def course_dir(self) -> Path:
        """nbgrader's course root; the instructor's server runs here."""
        return self.course_copy / "course"

    @property
    def passwords(self) -> Path:
        return self.state / "passwords.txt"

    @property
    def password_hashes(self) -> Path:
        return self.state / "passwords.scrypt.json"

    @property
    def first_logins(self) -> Path:
        """{user: sha256 of their unused first-login code} (the hub consumes them)."""
        return self.state / "first-logins.json"

    @property
    def first_login_links(self) -> Path:
        """id, name, email, link of each link handed out (0600, root; for mailing)."""
        return self.state / "first-logins.csv"

    @property
    def saved_roster(self) -> Path:
        return self.state / "class-list.json"

    @property
    def oidc_dir(self) -> Path:
        """The local provider's files (root only): settings, accounts, signing key."""
        return self.state / "oidc"

    @property
    def local_provider(self) -> bool:
        """Whether this machine's provider (hub/oidc-provider.mjs) is the class's."""
        return self.auth == "oidc" and not self.oidc_issuer

    @property
    def issuer(self) -> str:
        """The OpenID Connect provider's issuer URL (AUTH=oidc)."""
        return (self.oidc_issuer or f"http://127.0.0.1:{self.oidc_port}").rstrip("/")

    @property
    def ngshare_url(self) -> str:
        """ngshare as the users' servers reach it: its own port, on this machine."""
        return f"http://127.0.0.1:{self.ngshare_port}/services/ngshare"

    @property
    def scheme(self) -> str:
        return "https" if self.ssl_cert else "http"

    @property
    def url(self) -> str:
        """Where people reach the hub."""
        if self.public_url:
            return self.public_url.rstrip("/")
        host = self.ip
        if _wildcard(host):
            host = socket.getfqdn()
        return f"{self.scheme}://{_url_host(host)}:{self.port}"

    @property
    def local_url(self) -> str:
        """Where this machine reaches the hub (the start-up probe)."""
        host = "127.0.0.1" if _wildcard(self.ip) else self.ip
        return f"{self.scheme}://{_url_host(host)}:{self.port}"


def _wildcard(ip: str) -> bool:
    return ip in ("0.0.0.0", "::", "")


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


# --------------------------------------------------------------- class list
def parse_class_list(path: Path, instructor: str | None = None) -> list[Student]:
    """The students of a class list CSV (header id,name,email); HubError naming every
    problem (line by line: what was expected, what was seen) if any."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")  # a spreadsheet's BOM is fine
    except FileNotFoundError:
        raise HubError(f"the class list {path} does not exist (expected a CSV file with the "
                       "header id,name,email)") from None
    except UnicodeDecodeError as exc:
        raise HubError(f"the class list {path} is not UTF-8 text (byte {exc.start}): expected "
                       "a CSV saved as UTF-8 with the header id,name,email") from None
    except OSError as exc:
        raise HubError(f"cannot read the class list {path}: {exc}") from None
    rows = list(csv.reader(text.splitlines()))
    while rows and not any(cell.strip() for cell in rows[0]):
        rows.pop(0)
    if not rows:
        raise HubError(f"the class list {path} is empty: expected a header line id,name,email "
                       "and one line per student")
    header = [h.strip().lower() for h in rows[0]]
    missing = [c for c in CLASS_LIST_COLUMNS if c not in header]
    if missing:
        raise HubError(f"the class list {path} lacks the column(s) {', '.join(missing)}: "
                       f"expected a header with {', '.join(CLASS_LIST_COLUMNS)} (any order), "
                       f"saw {', '.join(repr(h) for h in rows[0]) or 'an empty line'}. "
                       "Nothing was created.")
    dupes = sorted({h for h in header if header.count(h) > 1 and h in CLASS_LIST_COLUMNS})
    if dupes:
        raise HubError(f"the class list {path} has the column(s) {', '.join(dupes)} more "
                       "than once in its header: expected each of id, name, email once. "
                       "Nothing was created.")
    col = {c: header.index(c) for c in CLASS_LIST_COLUMNS}
    problems, students, seen = [], [], {}
    for line, row in enumerate(rows[1:], 2):
        if not any(cell.strip() for cell in row):
            continue  # blank lines
        if len(row) != len(header):
            problems.append(f"line {line}: {len(row)} fields, expected {len(header)} like the "
                            "header (a name or e-mail with a comma needs double quotes)")
            continue
        sid, name, email = (row[col[c]].strip() for c in CLASS_LIST_COLUMNS)
        if not SAFE_ID.fullmatch(sid):
            problems.append(f"line {line}: id {sid!r} is not a safe user name: expected a "
                            "lowercase letter, then up to 31 lowercase letters, digits, "
                            "'_' or '-' (it becomes the Unix user, the hub's user and the "
                            "nbgrader student id)")
        elif sid in seen:
            problems.append(f"line {line}: id {sid!r} again (first on line {seen[sid]}): "
                            "expected each id once")
        elif sid == instructor:
            problems.append(f"line {line}: id {sid!r} is the instructor's user name: expected "
                            "students only")
        seen.setdefault(sid, line)
        if not name or any(ord(ch) < 32 for ch in name):
            problems.append(f"line {line}: name {name!r}: expected a non-empty name without "
                            "control characters")
        if not EMAIL.fullmatch(email):
            problems.append(f"line {line}: e-mail {email!r}: expected one address like "
                            "ada@example.org")
        students.append(Student(sid, name, email))
    if not students and not problems:
        problems.append("no students: expected one line per student after the header")
    if problems:
        shown = problems[:20] + ([f"... and {len(problems) - 20} more"]
                                 if len(problems) > 20 else [])
        raise HubError(f"the class list {path} has {len(problems)} problem(s); nothing was "
                       "created:\n  " + "\n  ".join(shown))
    return students


def load_saved_roster(room: Classroom) -> list[Student] | None:
    """The class list of an earlier run (``make hub`` without CLASS_LIST keeps it)."""
    try:
        return [Student(**d) for d in json.loads(room.saved_roster.read_text())]
    except FileNotFoundError:
        return None


# ------------------------------------------------------------------ checks
def port_in_use(port: int, ip: str = "127.0.0.1") -> bool:
    """Whether ``ip``:``port`` is taken (HubError if ``ip`` is not this machine's)."""
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    with socket.socket(family) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((ip, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return True
            raise HubError(f"cannot listen on {ip} ({exc.strerror}): expected an address of "
                           "this machine (see `hostname -I`), 0.0.0.0 for all, or the default "
                           "127.0.0.1, e.g. `make hub HUB_IP=0.0.0.0 SSL_CERT=... SSL_KEY=...`"
                           ) from None
    return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def preflight(room: Classroom) -> None:
    """Stop early, saying what to do, when the class cannot run here."""
    if os.geteuid() != 0:
        raise HubError(
            f"expected to run as root (to create the class's Unix users and start each "
            f"server as its user), but running as uid {os.geteuid()}: run `sudo make hub`")
    check_address(room)
    if port_in_use(room.port, room.ip):
        raise HubError(f"port {room.port} on {room.ip} is in use (another hub or server?): "
                       f"stop it, or choose another port: `make hub PORT={room.port + 10}`")
    if room.roster is not None:
        check_roster_accounts(room)
    if shutil.which("bwrap") is None:
        raise HubError("bubblewrap (bwrap) is not installed, and every grading kernel runs "
                       "in it: `apt-get install bubblewrap`")
    if shutil.which("node") is None:
        raise HubError("Node.js is not installed, and JupyterHub's proxy "
                       "(configurable-http-proxy) runs on it: `apt-get install nodejs npm`, "
                       "then `make hub`")
    if not os.access(PROXY, os.X_OK):
        raise HubError(f"configurable-http-proxy is missing ({PROXY}): run `make hub`, which "
                       "installs it with `npm ci --prefix hub` from hub/package-lock.json")
    if shutil.which("useradd") is None:
        raise HubError("useradd is missing: install the `passwd` package")
    if room.exchange_kind not in ("fs", "ngshare"):
        raise HubError(f"EXCHANGE={room.exchange_kind!r}: expected fs (nbgrader's shared "
                       "directory, the default) or ngshare")
    built = (NGSHARE_ENV / ".installed").exists() and (NGSHARE_EXCHANGE /
                                                         "ngshare_exchange").is_dir()
    check_auth(room)
    if room.exchange_kind == "ngshare" and not built:
        raise HubError(f"the ngshare exchange is not installed ({NGSHARE_ENV}, "
                       f"{NGSHARE_EXCHANGE}): run `make hub EXCHANGE=ngshare`, which builds "
                       "them from hub/requirements-ngshare*.txt")


def check_auth(room: Classroom) -> None:
    """AUTH and its settings: complete, and the local provider only where it can work."""
    if room.auth not in AUTH_KINDS:
        raise HubError(f"AUTH={room.auth!r}: expected password (the hub's own form, the "
                       "default), oidc (an OpenID Connect provider) or lti13 (launches from "
                       "an LMS)")
    if room.auth == "oidc" and room.local_provider:
        if not (ROOT / "hub" / "node_modules" / "oidc-provider").is_dir():
            raise HubError("oidc-provider is missing (hub/node_modules): run `make hub "
                           "AUTH=oidc`, which installs it with `npm ci --prefix hub`")
        if not ipaddress.ip_address(room.ip).is_loopback:
            raise HubError(f"AUTH=oidc without OIDC_ISSUER runs this machine's provider, for "
                           f"trying the login out on 127.0.0.1 only, but HUB_IP is {room.ip}: "
                           "for a class on other machines give OIDC_ISSUER=https://... (your "
                           "institution's provider), OIDC_CLIENT_ID and OIDC_CLIENT_SECRET_FILE")
        if port_in_use(room.oidc_port):
            raise HubError(f"port {room.oidc_port} (the local OpenID Connect provider's) is "
                           f"in use: choose another, e.g. `OIDC_PORT={room.oidc_port + 10}`")
    elif room.auth == "oidc":
        issuer = urllib.parse.urlsplit(room.oidc_issuer)
        loopback = issuer.hostname in ("127.0.0.1", "localhost", "::1")
        if issuer.scheme != "https" and not (issuer.scheme == "http" and loopback):
            raise HubError(f"OIDC_ISSUER {room.oidc_issuer!r}: expected an https:// URL (the "
                           "provider's issuer, as in its /.well-known/openid-configuration)")
        secret = room.oidc_client_secret_file
        if not secret or not secret.is_file() or not secret.read_text().strip():
            raise HubError(f"OIDC_CLIENT_SECRET_FILE {secret}: expected a file holding the "
                           "client secret the provider gave the hub when you registered it "
                           f"(redirect URI {room.url}/hub/oauth_callback)")
        discover_oidc(room)  # the provider answers and suits, before anything is made
    elif room.auth == "lti13":
        missing = [name for name, value in (
            ("LTI_ISSUER", room.lti_issuer), ("LTI_CLIENT_ID", room.lti_client_id),
            ("LTI_AUTHORIZE_URL", room.lti_authorize_url), ("LTI_JWKS_URL", room.lti_jwks_url))
            if not value]
        if missing:
            raise HubError(f"AUTH=lti13 needs {', '.join(missing)}: the values your LMS shows "
                           "when you register the hub as an LTI 1.3 tool (its configuration "
                           f"is at {room.url}/hub/lti13/config)")


def check_address(room: Classroom) -> None:
    """The bind address and TLS: a certificate and its key together, readable, matching;
    never a login form in clear text on an address other machines reach."""
    try:
        addr = ipaddress.ip_address(room.ip)
    except ValueError:
        raise HubError(f"HUB_IP {room.ip!r} is not an IP address: expected e.g. 127.0.0.1 "
                       "(this machine only, the default), 0.0.0.0 (every interface) or one "
                       "of `hostname -I`") from None
    if bool(room.ssl_cert) != bool(room.ssl_key):
        given, lacking = (("SSL_CERT", "SSL_KEY") if room.ssl_cert else ("SSL_KEY", "SSL_CERT"))
        raise HubError(f"{given} was given without {lacking}: expected both, the "
                       "certificate (PEM, with its chain) and its private key (PEM)")
    if room.ssl_cert:
        for what, path in (("SSL_CERT", room.ssl_cert), ("SSL_KEY", room.ssl_key)):
            if not path.is_file() or not os.access(path, os.R_OK):
                raise HubError(f"{what} {path} is not a readable file: expected a PEM file")
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            context.load_cert_chain(room.ssl_cert, room.ssl_key)
        except ssl.SSLError as exc:
            raise HubError(f"SSL_CERT {room.ssl_cert} and SSL_KEY {room.ssl_key} do not "
                           f"load together ({exc.reason or exc}): expected a PEM certificate "
                           "and the PEM private key that belongs to it") from None
    elif not addr.is_loopback and not room.allow_http:
        raise HubError(f"HUB_IP {room.ip} is reachable from other machines, and without TLS "
                       "every password would cross the network in clear text: expected "
                       "SSL_CERT=cert.pem SSL_KEY=key.pem (or HUB_ALLOW_HTTP=1 when a proxy "
                       "in front of the hub does TLS)")


def check_roster_accounts(room: Classroom) -> None:
    """Every id of the class list is a new user or one `make hub` made (checked before
    anything is created)."""
    problems = []
    for sid in room.users:
        try:
            pw = pwd.getpwnam(sid)
        except KeyError:
            continue
        if pw.pw_gecos.split(",")[0] != MARK:
            problems.append(f"{sid!r} (uid {pw.pw_uid}, comment {pw.pw_gecos!r})")
    if problems:
        raise HubError("the class list names account(s) that exist on this machine and were "
                       f"not created by `make hub`: {', '.join(problems)}. Expected new user "
                       "names (or ones an earlier `make hub` made): change those ids, e.g. "
                       "with a prefix. Nothing was created.")


# ------------------------------------------------------------------- users
def run_as(user: str, cmd: list[str], cwd: Path, timeout: float = 300, env=None,
           check: bool = True) -> subprocess.CompletedProcess:
    """``cmd`` as ``user`` (uid, gid, no extra groups, their HOME), bounded in time."""
    pw = pwd.getpwnam(user)
    base_env = {"HOME": pw.pw_dir, "USER": user, "LOGNAME": user, "LANG": "C.UTF-8",
                "PATH": "/usr/local/bin:/usr/bin:/bin"}
    res = subprocess.run(cmd, cwd=cwd, user=pw.pw_uid, group=pw.pw_gid, extra_groups=[],
                         env={**base_env, **(env or {})}, capture_output=True, text=True,
                         timeout=timeout)
    if check and res.returncode != 0:
        raise HubError(f"`{' '.join(cmd)}` as {user} in {cwd} exited with {res.returncode} "
                       f"(expected 0):\n{res.stdout[-2000:]}{res.stderr[-3000:]}")
    return res


def ensure_users(room: Classroom) -> list[str]:
    """Create the class's users that are missing; return those created."""
    room.home_base.mkdir(parents=True, exist_ok=True)
    created = []
    for name in room.users:
        try:
            pw = pwd.getpwnam(name)
        except KeyError:
            subprocess.run(["useradd", "--create-home", "--home-dir", str(room.home(name)),
                            "--shell", "/bin/bash", "--user-group", "--comment", MARK, name],
                           check=True, capture_output=True, timeout=60)
            created.append(name)
            pw = pwd.getpwnam(name)
        if pw.pw_gecos.split(",")[0] != MARK:
            raise HubError(f"user {name!r} exists but was not created by `make hub` (its "
                           f"comment is {pw.pw_gecos!r}, expected {MARK!r}): choose another "
                           "prefix, e.g. `make hub HUB_PREFIX=cls-`")
        if Path(pw.pw_dir) != room.home(name):
            raise HubError(f"user {name!r} has home {pw.pw_dir}, expected {room.home(name)}: "
                           "remove the user (`userdel -r`) or use its home base")
        home = Path(pw.pw_dir)
        home.mkdir(exist_ok=True)
        os.chown(home, pw.pw_uid, pw.pw_gid)
        os.chmod(home, 0o700)  # nobody else reads a person's files
    return created


def remove_users(room: Classroom) -> None:
    """Delete the class's users and their homes (tests; only users `make hub` made)."""
    for name in room.users:
        try:
            pw = pwd.getpwnam(name)
        except KeyError:
            continue
        if pw.pw_gecos.split(",")[0] == MARK:
            subprocess.run(["userdel", "--remove", name], capture_output=True, timeout=60)


def ensure_passwords(room: Classroom) -> dict[str, str]:
    """A password for each user that has none yet (the instructor; made-up students, not
    a class list's, who choose theirs at first login); return only the new ones."""

    room.state.mkdir(parents=True, exist_ok=True)
    os.chmod(room.state, 0o700)
    known = read_passwords(room) if room.passwords.exists() else {}
    given = [room.instructor] if room.roster is not None else room.users
    if room.local_provider:  # every person's password at this machine's provider
        given = room.users
    elif room.auth != "password":  # the provider or the LMS knows everyone's
        given = []
    new = {u: secrets.token_urlsafe(12) for u in given if u not in known}
    known.update(new)
    write_private(room.passwords, "# user password (make hub; keep this file private)\n"
                   + "".join(f"{u} {p}\n" for u, p in sorted(known.items())))
    hashes = {}
    if room.password_hashes.exists():
        hashes = json.loads(room.password_hashes.read_text())
    for u, p in known.items():
        if u not in hashes or u in new:
            hashes[u] = hash_password(p)
    write_private(room.password_hashes, json.dumps(hashes, indent=1, sort_keys=True))
    return new


def ensure_first_logins(room: Classroom, reissue: tuple[str, ...] = ()) -> dict[str, str]:
    """A one-time first-login link for each student of the class list who has neither a
    password nor an unused link (and for each of ``reissue``, whose password is then
    dropped: a forgotten password); return {id: link} of the new ones only."""
    if room.roster is None or room.auth != "password":
        return {}
    hashes = json.loads(room.password_hashes.read_text()) if room.password_hashes.exists() \
        else {}
    pending = json.loads(room.first_logins.read_text()) if room.first_logins.exists() else {}
    unknown = [u for u in reissue if u not in room.student_names]
    if unknown:
        raise HubError(f"not a student of the class list: {', '.join(unknown)} (expected one "
                       f"of {', '.join(room.student_names)})")
    new = {}
    for st in room.roster:
        if st.id in reissue or (st.id not in hashes and st.id not in pending):
            code = secrets.token_urlsafe(16)
            pending[st.id] = first_login_code_hash(code)
            hashes.pop(st.id, None)
            new[st.id] = f"{room.url}/hub/first-login?user={st.id}&code={code}"
    if new:
        if reissue:
            write_private(room.password_hashes, json.dumps(hashes, indent=1, sort_keys=True))
        write_private(room.first_logins, json.dumps(pending, indent=1, sort_keys=True))
        old = room.first_login_links.read_text() if room.first_login_links.exists() else \
            "id,name,email,first_login_link\n"
        by_id = {st.id: st for st in room.roster}
        lines = [old] + [_csv_line([u, by_id[u].name, by_id[u].email, link])
                         for u, link in new.items()]
        write_private(room.first_login_links, "".join(lines))
    return new


def _csv_line(cells: list[str]) -> str:
    import io

    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerow(cells)
    return out.getvalue()


def read_passwords(room: Classroom) -> dict[str, str]:
    """{user: password} from the root-only passwords file."""
    out = {}
    for line in room.passwords.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            user, password = line.split(None, 1)
            out[user] = password.strip()
    return out


# ------------------------------------------------------- Python for everyone
def _requirements_digest() -> str:
    """What the class's environment is built from: requirements.txt and this interpreter."""
    return hashlib.sha256((ROOT / "requirements.txt").read_bytes()
                          + sys.version.encode()).hexdigest()


def _runs_for(user: str, python: str) -> bool:
    """Whether ``user`` can run ``python`` and it is exactly the project's version."""
    try:
        res = run_as(user, [python, "-c", f"import sys, venv; sys.exit(sys.version_info[:3] != "
                                          f"{tuple(sys.version_info[:3])!r})"],
                     Path("/"), timeout=60, check=False)
    except OSError:  # not executable for this user
        return False
    return res.returncode == 0


def _interpreter_for(room: Classroom, log=print) -> str:
    """The project's own interpreter, made runnable by every user of the class.

    The same build as the project's .venv, not merely the same minor version: Debian's
    3.11.2, for one, has regex bugs (possessive quantifiers) that break soupsieve, and so
    nbconvert's feedback. An interpreter under a 0700 home (pyenv's under /root) is
    hard-linked into <base>/python; a shared build's launcher is given a relative library
    path ($ORIGIN/../lib), in place of its absolute RUNPATH into that home.
    """
    real = os.path.realpath(sys.executable)
    if _runs_for(room.instructor, real):
        return real
    prefix, dest = Path(sys.base_prefix), room.base / "python"
    try:
        binary = dest / Path(real).relative_to(prefix)
    except ValueError:
        raise HubError(f"the project's Python {real} lies outside its prefix {prefix} and "
                       f"{room.instructor} cannot run it: make the project's Python readable "
                       "by all (e.g. /usr/local), then run `make venv` and `make hub`") from None
    if not _runs_for(room.instructor, str(binary)):
        log(f"Making the project's Python ({prefix}) readable by the class in {dest}...")
        shutil.rmtree(dest, ignore_errors=True)
        if subprocess.run(["cp", "-al", str(prefix), str(dest)], capture_output=True,
                          timeout=600).returncode != 0:
            shutil.rmtree(dest, ignore_errors=True)
            subprocess.run(["cp", "-a", str(prefix), str(dest)], check=True, timeout=1800)
        data = binary.read_bytes()
        old = f"{prefix}/lib".encode() + b"\0"
        new = b"$ORIGIN/../lib"
        if old in data and len(new) < len(old):
            binary.unlink()  # a file of its own, not a link to the original
            binary.write_bytes(data.replace(old, new.ljust(len(old), b"\0")))
            binary.chmod(0o755)
        os.chmod(dest, 0o755)
    if not _runs_for(room.instructor, str(binary)):
        raise HubError(f"{room.instructor} cannot run the class's copy {binary} of the "
                       f"project's Python {real} (expected exactly Python "
                       f"{sys.version.split()[0]}): make the project's Python readable by all")
    return str(binary)


def ensure_venv(room: Classroom, log=print) -> None:
    """<venv>: the project's .venv for every user to read, rebuilt when requirements change.

    The project's own .venv may be out of others' reach (a clone under a 0700 /root, an
    interpreter from pyenv there). So: a new venv from a Python 3.11 every user can run,
    holding the .venv's packages as hard links (seconds; a copy across file systems),
    its scripts pointed at the new interpreter. Same packages, same versions, no download.
    """
    stamp = room.venv / ".attention-requirements"
    if stamp.exists() and stamp.read_text() == _requirements_digest():
        return
    source = Path(sys.prefix)
    if source == Path(sys.base_prefix) or not (source / "pyvenv.cfg").exists():
        raise HubError(f"expected to run from the project's .venv, but sys.prefix is {source}: "
                       "run `make hub`")
    python = _interpreter_for(room, log)
    log(f"Building the class's Python environment {room.venv} from {source} with {python}...")
    old = os.umask(0o022)  # world-readable: every user's server runs from here
    try:
        if room.venv.exists():
            shutil.rmtree(room.venv)
        subprocess.run([python, "-m", "venv", "--without-pip", str(room.venv)], check=True,
                       timeout=300)
        site = Path("lib") / "python3.11" / "site-packages"
        shutil.rmtree(room.venv / site)
        for part in (site, Path("share"), Path("etc")):
            if not (source / part).exists():
                continue
            dest = (room.venv / part).parent
            linked = subprocess.run(["cp", "-al", str(source / part), str(dest)],
                                    capture_output=True, timeout=600)
            if linked.returncode != 0:  # another file system: copy
                shutil.rmtree(room.venv / part, ignore_errors=True)
                subprocess.run(["cp", "-a", str(source / part), str(dest)], check=True,
                               timeout=1800)
        # A .venv reached through a symlink (a git worktree's) has scripts whose
        # shebangs name its real path: rewrite both spellings.
        shebangs = {f"#!{p}/bin/python".encode() for p in (source, source.resolve())}
        for script in (source / "bin").iterdir():
            target = room.venv / "bin" / script.name
            if target.exists() or target.is_symlink() or not script.is_file():
                continue  # the new venv's own python and activate scripts
            data = script.read_bytes()
            for shebang in shebangs:
                if data.startswith(shebang):
                    data = f"#!{room.venv}/bin/python".encode() + data[len(shebang):]
                    break
            target.write_bytes(data)
            target.chmod(0o755)
    except (OSError, subprocess.SubprocessError) as exc:
        raise HubError(f"could not build {room.venv} from {source}: {exc}") from exc
    finally:
        os.umask(old)
    # soupsieve's selectors fail on interpreters with broken regexes (see _interpreter_for).
    check = run_as(room.instructor, [str(room.venv / "bin" / "python"), "-c",
                                     "import torch, nbgrader, jupyterhub.singleuser, soupsieve; "
                                     "soupsieve.compile('img:not([alt])')"],
                   Path("/"), timeout=120, check=False)
    if check.returncode != 0:
        raise HubError(f"the class's Python environment {room.venv} does not work for "
                       f"{room.instructor} (expected torch, nbgrader and jupyterhub to "
                       f"import):\n{check.stderr[-2000:]}")
    stamp.write_text(_requirements_digest())


def ensure_lab_overrides(room: Classroom) -> None:
    """JupyterLab's defaults for everyone (LAB_OVERRIDES), written as a new file: the
    venv's files are hard links to the project's, never changed in place."""
    path = room.venv / "share" / "jupyter" / "lab" / "settings" / "overrides.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    tmp.write_text(json.dumps(LAB_OVERRIDES, indent=1))
    tmp.chmod(0o644)
    os.replace(tmp, path)


def ensure_validate_extension(room: Classroom) -> None:
    """Validate without a kernel (attention_validate.py, the project's one file) in the
    class's environment, as a new file: the venv's files are hard links to the project's,
    never changed in place. Each person's server switches it on (ensure_user_config)."""
    path = room.venv / "lib" / "python3.11" / "site-packages" / VALIDATE_EXTENSION.name
    tmp = path.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    shutil.copyfile(VALIDATE_EXTENSION, tmp)
    tmp.chmod(0o644)
    os.replace(tmp, path)


# ----------------------------------------------------------- the exchange
def ensure_exchange(room: Classroom) -> None:
    """nbgrader's exchange: root-owned, ugo+rwx (nbgrader's docs), sticky (see module doc)."""
    room.base.mkdir(parents=True, exist_ok=True)
    os.chmod(room.base, 0o755)
    room.exchange.mkdir(exist_ok=True)
    os.chown(room.exchange, 0, 0)
    os.chmod(room.exchange, 0o1777)


# ------------------------------------------------- per-user configuration
def _write_owned(path: Path, text: str, user: str) -> None:
    pw = pwd.getpwnam(user)
    for parent in reversed(path.relative_to(pw.pw_dir).parents):
        d = Path(pw.pw_dir) / parent
        if not d.exists():
            d.mkdir()
            os.chown(d, pw.pw_uid, pw.pw_gid)
    path.write_text(text)
    os.chown(path, pw.pw_uid, pw.pw_gid)


def exchange_config(room: Classroom) -> str:
    """The nbgrader configuration lines of the class's exchange."""
    if room.exchange_kind == "ngshare":
        return ngshare_exchange_config(room.ngshare_url)
    return f"c.Exchange.root = {str(room.exchange)!r}"


def ngshare_exchange_config(url: str) -> str:
    """nbgrader's configuration of the ngshare exchange at ``url`` (also hub/k8s's)."""
    return ("import ngshare_exchange  # noqa: E402\n\n"
            f"ngshare_exchange.configureExchange(c, {url!r})")


def ensure_ngshare_exchange(room: Classroom) -> None:
    """nbgrader's side of ngshare in the class's environment, as new files (the venv's
    other files are hard links to the project's)."""
    site = room.venv / "lib" / "python3.11" / "site-packages"
    for part in NGSHARE_EXCHANGE.iterdir():
        if part.name.startswith("ngshare_exchange"):
            shutil.rmtree(site / part.name, ignore_errors=True)
            shutil.copytree(part, site / part.name,
                            ignore=shutil.ignore_patterns("__pycache__"))
            subprocess.run(["chmod", "-R", "a+rX", str(site / part.name)], check=True,
                           timeout=60)


def ensure_user_config(room: Classroom) -> None:
    """Each person's ~/.jupyter: the course and exchange; students without grader tools."""
    settings = room.extra_lab_settings
    for user in room.users:
        jupyter = room.home(user) / ".jupyter"
        _write_owned(jupyter / "nbgrader_config.py", USER_NBGRADER_CONFIG.format(
            course_id=COURSE_ID, exchange=exchange_config(room)), user)
        for name, value in settings.items():
            _write_owned(jupyter / "lab" / "user-settings" / "@jupyterlab" /
                         f"{name}.jupyterlab-settings", json.dumps(value), user)
        student = user != room.instructor
        _write_owned(jupyter / "jupyter_server_config.json",
                     json.dumps(server_config(student)), user)
        _write_owned(jupyter / "labconfig" / "page_config.json",
                     json.dumps(page_config(student)), user)


def server_config(student: bool) -> dict:
    """jupyter_server_config.json of a student's server (nbgrader's instructor tools off)
    or the instructor's (on; hub/k8s/image/ holds the same for Kubernetes)."""
    server = {"jpserver_extensions": {e: not student for e in INSTRUCTOR_ONLY_SERVER}
              | validate_server_extensions()}
    if not student:
        # JupyterHub's servers forbid every frame ("frame-ancestors 'none'"), and
        # JupyterLab shows the Formgrader in one: allow frames from the same origin only.
        server["tornado_settings"] = {
            "headers": {"Content-Security-Policy": "frame-ancestors 'self'"}}
    return {"ServerApp": server}


def page_config(student: bool) -> dict:
    """JupyterLab's labconfig/page_config.json: the instructor-only extensions off for a
    student."""
    return {"disabledExtensions": {e: student for e in INSTRUCTOR_ONLY_LAB}}


# --------------------------------------------------------------- the course
def ensure_course(room: Classroom, log=print) -> None:
    """The instructor's copy of the course, its nbgrader course, and (``release``) the
    assignment generated and released to the exchange, all done as the instructor."""
    pw = pwd.getpwnam(room.instructor)
    copy = room.course_copy
    copy.mkdir(exist_ok=True)
    for name in COURSE_FILES:  # refreshed on every start: the project is the source
        src, dst = ROOT / name, copy / name
        if dst.is_dir():
            shutil.rmtree(dst)
        if src.is_dir():
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copyfile(src, dst)
    room.course_dir.mkdir(exist_ok=True)
    (room.course_dir / "nbgrader_config.py").write_text(HUB_CONFIG_COURSE.format(
        root=str(copy), course_id=COURSE_ID, exchange=exchange_config(room)))
    subprocess.run(["chown", "-R", f"{pw.pw_uid}:{pw.pw_gid}", str(copy)], check=True,
                   timeout=120)
    python = str(room.venv / "bin" / "python")
    # The source (src.course.build_source, the same as `make release`) and the students.
    script = ("import json, sys\nfrom nbgrader.api import Gradebook\nfrom src.course import "
              "build_source\nfrom src.layout import ASSIGNMENTS\nfor a in ASSIGNMENTS:\n"
              "    build_source(a)\nwith Gradebook(sys.argv[1], sys.argv[2]) as gb:\n"
              "    for s in json.loads(sys.argv[3]):\n"
              "        gb.update_or_create_student(s.pop('id'), **s)\n")
    run_as(room.instructor, [python, "-c", script,
                             f"sqlite:///{room.course_dir / 'gradebook.db'}", COURSE_ID,
                             json.dumps(gradebook_students(room))], copy,
           env={"PYTHONPATH": str(copy)})
    if room.release and room.exchange_kind == "ngshare":
        log("ngshare: the instructor releases the assignment in the Formgrader (the "
            "exchange is a hub service, not up yet).")
    elif room.release:
        nbgrader = str(room.venv / "bin" / "nbgrader")
        for assignment in ASSIGNMENTS:
            released = room.exchange / COURSE_ID / "outbound" / assignment
            if released.exists():
                log(f"The assignment {assignment} is already released ({released}).")
                continue
            log(f"Generating and releasing the assignment {assignment} to the exchange (as "
                "the instructor)...")
            for cmd in ([nbgrader, "generate_assignment", assignment, "--force"],
                        [nbgrader, "release_assignment", assignment]):
                run_as(room.instructor, cmd, room.course_dir, env={
                    "PATH": f"{room.venv / 'bin'}:/usr/bin:/bin"})


def gradebook_students(room: Classroom) -> list[dict]:
    """nbgrader's student records: a class list's names as "Last, First" or split at the
    last space of "First Last" (the Formgrader shows "last, first"), its e-mails;
    made-up students numbered."""
    if room.roster is None:
        return [{"id": s, "last_name": "Student", "first_name": str(i)}
                for i, s in enumerate(room.student_names, 1)]
    out = []
    for st in room.roster:
        if "," in st.name:
            last, _, first = (part.strip() for part in st.name.partition(","))
        else:
            first, _, last = st.name.rpartition(" ")
        out.append({"id": st.id, "first_name": first or None, "last_name": last,
                    "email": st.email})
    return out


def setup(room: Classroom, log=print) -> tuple[dict[str, str], dict[str, str]]:
    """Everything before the hub starts; return the passwords and the first-login links
    made now (to print once)."""
    preflight(room)
    ensure_exchange(room)
    created = ensure_users(room)
    if created:
        log(f"Created users: {', '.join(created)}")
    new = ensure_passwords(room)
    if room.roster is not None:
        write_private(room.saved_roster, json.dumps(
            [st.__dict__ for st in room.roster], indent=1))
    links = ensure_first_logins(room)
    ensure_venv(room, log)
    ensure_lab_overrides(room)
    ensure_validate_extension(room)
    if room.exchange_kind == "ngshare":
        room.ngshare_port = free_port()
        ensure_ngshare_exchange(room)
    ensure_user_config(room)
    ensure_course(room, log)
    if room.local_provider:
        ensure_oidc_provider_files(room)
    return new, links


# ------------------------------------------------- OpenID Connect, LTI 1.3
def ensure_oidc_provider_files(room: Classroom) -> None:
    """The local provider's settings, the hub's client secret there, and its accounts: the
    class's people (the class list's ids, names and e-mails; the instructor) with the
    scrypt hashes of their passwords. Accounts of other people already in its accounts
    file are kept (a provider knows more people than one class)."""
    d = room.oidc_dir
    d.mkdir(mode=0o700, exist_ok=True)
    os.chmod(d, 0o700)
    secret = d / "client-secret"
    if not secret.exists():
        write_private(secret, secrets.token_urlsafe(32))
    room.oidc_client_secret_file = secret
    hashes = json.loads(room.password_hashes.read_text())
    accounts_file = d / "accounts.json"
    accounts = json.loads(accounts_file.read_text()) if accounts_file.exists() else {}
    people = {st.id: (st.name, st.email) for st in room.roster or []}
    for user in room.users:
        name, email = people.get(user, (user, ""))
        accounts[user] = {"name": name, "email": email, "password": hashes[user]}
    write_private(accounts_file, json.dumps(accounts, indent=1, sort_keys=True))
    write_private(d / "provider.json", json.dumps({
        "issuer": room.issuer, "host": "127.0.0.1", "port": room.oidc_port,
        "accounts": str(accounts_file), "keys": str(d / "signing-key.json"),
        "clients": [{"client_id": room.oidc_client_id, "client_secret": secret.read_text(),
                     "redirect_uris": [f"{room.url}/hub/oauth_callback"]}]}, indent=1))


def start_oidc_provider(room: Classroom) -> subprocess.Popen:
    """This machine's provider (node hub/oidc-provider.mjs), as root, its log beside the
    hub's; found by leftovers() like the hub's services."""
    logf = open(room.state / "oidc-provider.log", "a")
    proc = subprocess.Popen(["node", str(OIDC_PROVIDER), str(room.oidc_dir / "provider.json")],
                            cwd=room.state, stdout=logf, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True,
                            env={**os.environ, "ATTENTION_HUB_STATE": str(room.state)})
    logf.close()
    return proc


def discover_oidc(room: Classroom, timeout: float = 30) -> dict:
    """The provider's endpoints from its discovery document (OpenID Connect Discovery
    1.0), checked for what the hub uses: its issuer, the code flow, PKCE with S256.
    Another's provider is asked once; this machine's, until it answers (``timeout``)."""
    url = f"{room.issuer}/.well-known/openid-configuration"
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                doc = json.loads(r.read())
            break
        except (OSError, ValueError) as exc:
            if room.provider is not None and room.provider.poll() is not None:
                raise HubError(f"the local OpenID Connect provider exited with "
                               f"{room.provider.returncode}; its log, "
                               f"{room.state / 'oidc-provider.log'}:\n"
                               + (room.state / "oidc-provider.log").read_text()[-2000:]
                               ) from None
            if room.provider is None or time.monotonic() > deadline:  # waits for its own
                raise HubError(f"no OpenID Connect discovery document at {url} ({exc}): "
                               "expected OIDC_ISSUER to be the provider's issuer URL") from None
            time.sleep(0.3)
    problems = []
    if doc.get("issuer", "").rstrip("/") != room.issuer:
        problems.append(f"its issuer is {doc.get('issuer')!r}, not {room.issuer!r}")
    if "code" not in doc.get("response_types_supported", []):
        problems.append("it does not offer the authorization code flow (response type code)")
    if "S256" not in doc.get("code_challenge_methods_supported", ["S256"]):
        problems.append("it does not accept PKCE with S256")
    for key in ("authorization_endpoint", "token_endpoint", "userinfo_endpoint"):
        if not doc.get(key):
            problems.append(f"it names no {key}")
    if problems:
        raise HubError(f"the OpenID Connect provider at {room.issuer} cannot log people in to "
                       f"the hub: {'; '.join(problems)} (from {url})")
    return {"authorize_url": doc["authorization_endpoint"], "token_url": doc["token_endpoint"],
            "userdata_url": doc["userinfo_endpoint"]}


def auth_settings(room: Classroom, endpoints: dict | None) -> dict:
    """What hub/jupyterhub_config.py needs of the login (settings.json)."""
    aliases = {}
    if room.instructor_login and room.instructor_login != room.instructor:
        aliases[room.instructor_login] = room.instructor
    out = {"auth": room.auth, "login_aliases": aliases}
    if room.auth == "oidc":
        out["oidc"] = {**endpoints, "client_id": room.oidc_client_id,
                       "client_secret": room.oidc_client_secret_file.read_text().strip(),
                       "username_claim": room.oidc_username_claim, "scope": OIDC_SCOPES,
                       "login_service": ("this machine's provider" if room.local_provider
                                         else urllib.parse.urlsplit(room.issuer).hostname)}
    elif room.auth == "lti13":
        out["lti13"] = {"issuer": room.lti_issuer, "client_id": [room.lti_client_id],
                        "authorize_url": room.lti_authorize_url,
                        "jwks_endpoint": room.lti_jwks_url,
                        "username_key": room.lti_username_key}
    return out


# ------------------------------------------------------------------ running
def write_settings(room: Classroom, endpoints: dict | None = None) -> Path:
    path = room.state / "settings.json"
    write_private(path, json.dumps({**auth_settings(room, endpoints),
        "state": str(room.state), "port": room.port, "hub_port": free_port(),
        "proxy_api_port": free_port(), "proxy": str(PROXY), "venv": str(room.venv),
        "password_hashes": str(room.password_hashes), "users": room.users,
        "instructor": room.instructor, "course_dir": str(room.course_dir),
        "ip": room.ip, "ssl_cert": str(room.ssl_cert or ""), "ssl_key": str(room.ssl_key or ""),
        "first_logins": str(room.first_logins), "min_password": MIN_PASSWORD,
        "idle_timeout": room.idle_timeout, "url": room.url,
        "exchange": room.exchange_kind, "ngshare_port": room.ngshare_port,
        "ngshare_python": str(NGSHARE_ENV / "bin" / "python"),
        "ngshare_admin": NGSHARE_ADMIN, "ngshare_admin_token": secrets.token_hex(32)},
        indent=1))
    return path


def wait_until_up(room: Classroom, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    # A probe of the process just started, on this machine: its certificate (maybe
    # self-signed, maybe for a name, not this address) is not what is checked here.
    context = ssl._create_unverified_context()
    while True:
        try:
            with urllib.request.urlopen(f"{room.local_url}/hub/api", timeout=5,
                                        context=context) as r:
                if r.status == 200:
                    return
        except (OSError, urllib.error.URLError):
            pass
        if proc.poll() is not None:
            raise HubError(f"JupyterHub exited with {proc.returncode} while starting "
                           f"(expected it to answer on {room.local_url}); its log: "
                           f"{room.state / 'jupyterhub.log'}:\n{_tail(room)}")
        if time.monotonic() > deadline:
            raise HubError(f"JupyterHub did not answer on {room.local_url} within "
                           f"{timeout:.0f} s; "
                           f"its log:\n{_tail(room)}")
        time.sleep(0.5)


def _tail(room: Classroom, n: int = 30) -> str:
    try:
        return "\n".join((room.state / "jupyterhub.log").read_text().splitlines()[-n:])
    except OSError:
        return "(no log)"


def leftovers(room: Classroom) -> list[tuple[int, str]]:
    """(pid, command) of every process still running as one of the class's users, this
    hub's idle culler, and the proxy if its pid file names a live one."""
    uids = set()
    for u in room.users:
        try:
            uids.add(pwd.getpwnam(u).pw_uid)
        except KeyError:
            pass
    out = []
    marker = f"ATTENTION_HUB_STATE={room.state}".encode()  # the hub's idle culler
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            mine = d.stat().st_uid in uids
            if not mine and d.stat().st_uid == 0:
                mine = marker in (d / "environ").read_bytes().split(b"\0")
            if mine:
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                out.append((int(d.name), cmd.strip()))
        except OSError:
            continue
    pid_file = room.state / "proxy.pid"
    try:
        pid = int(pid_file.read_text())
        os.kill(pid, 0)
        out.append((pid, "configurable-http-proxy"))
    except (OSError, ValueError):
        pass
    return out


def stop(proc: subprocess.Popen | None, room: Classroom,
         log=print) -> list[tuple[int, str]]:
    """Stop the hub (it stops the servers and the proxy) and the local OpenID Connect
    provider; return what had to be killed."""
    if proc is not None and proc.poll() is None:
        proc.send_signal(signal.SIGTERM)  # JupyterHub's clean shutdown
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            log("JupyterHub did not stop within 60 s: killing it")
            proc.kill()
            proc.wait(timeout=10)
    if room.provider is not None and room.provider.poll() is None:
        room.provider.terminate()
        try:
            room.provider.wait(timeout=15)
        except subprocess.TimeoutExpired:
            room.provider.kill()
            room.provider.wait(timeout=10)
    deadline = time.monotonic() + 15
    left = leftovers(room)
    while left and time.monotonic() < deadline:  # servers may take a moment to exit
        time.sleep(0.5)
        left = leftovers(room)
    for pid, _ in left:  # started by this hub: stopped by their ids
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return left


def start(room: Classroom, log=print) -> subprocess.Popen:
    """Start JupyterHub for a set-up class (and the local OpenID Connect provider first);
    return its process once it answers."""
    endpoints = None
    if room.auth == "oidc":
        if room.local_provider:
            room.oidc_client_secret_file = room.oidc_dir / "client-secret"
            room.provider = start_oidc_provider(room)
        try:
            endpoints = discover_oidc(room)
        except BaseException:
            stop(None, room, log)
            raise
    settings = write_settings(room, endpoints)
    env = {**os.environ, "ATTENTION_HUB_SETTINGS": str(settings)}
    logf = open(room.state / "jupyterhub.log", "a")
    proc = subprocess.Popen([sys.executable, "-m", "jupyterhub", "-f",
                             str(ROOT / "hub" / "jupyterhub_config.py")],
                            cwd=room.state, env=env, stdout=logf, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL,
                            # Its own session: Ctrl-C reaches this launcher only, which then
                            # stops the hub once, cleanly (stop()).
                            start_new_session=True)
    logf.close()
    try:
        wait_until_up(room, proc)
        if room.exchange_kind == "ngshare":
            register_ngshare_course(room, json.loads(settings.read_text())["ngshare_admin_token"])
    except BaseException:
        stop(proc, room, log)
        raise
    return proc


def register_ngshare_course(room: Classroom, token: str, timeout: float = 60) -> None:
    """The course in ngshare, its instructor and its students (names, e-mails), as
    ngshare's admin service; again on every start (existing ones are updated)."""
    import urllib.parse

    def call(path: str, data: dict | None = None) -> dict:
        req = urllib.request.Request(
            f"{room.ngshare_url}{path}", headers={"Authorization": f"token {token}"},
            data=urllib.parse.urlencode(data).encode() if data is not None else None)
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as exc:
            return {"status": exc.code, **json.loads(exc.read() or b"{}")}

    deadline = time.monotonic() + timeout
    while True:  # the hub answers before its services do
        try:
            if call("/healthz").get("success"):
                break
        except (OSError, ValueError):
            pass
        if time.monotonic() > deadline:
            raise HubError(f"ngshare did not answer on {room.ngshare_url} within {timeout:.0f} "
                           f"s; the hub's log:\n{_tail(room)}")
        time.sleep(0.5)
    made = call(f"/course/{COURSE_ID}", {"instructors": json.dumps([room.instructor])})
    if not made.get("success") and made.get("status") != 409:  # 409: made by an earlier run
        raise HubError(f"ngshare refused the course {COURSE_ID}: {made}")
    for st in gradebook_students(room):
        fields = {k: v for k, v in st.items() if k != "id" and v}
        added = call(f"/student/{COURSE_ID}/{st['id']}", fields)
        if not added.get("success"):
            raise HubError(f"ngshare refused the student {st['id']}: {added}")


def banner(room: Classroom, new: dict[str, str], links: dict[str, str] | None = None) -> str:
    students = room.student_names
    shown = ", ".join(students[:8]) + (f" ... ({len(students)} in all)"
                                       if len(students) > 8 else "")
    lines = [f"The class is up: log in at {room.url}/hub/login",
             f"  instructor: {room.instructor} (Nbgrader > Formgrader; course in "
             f"{room.course_dir})",
             f"  students:   {shown} (Nbgrader > Assignment List)"]
    if room.ssl_cert:
        lines.append(f"  TLS: {room.ssl_cert}; listening on {room.ip}:{room.port}")
    lines.append(f"  idle servers are stopped after {room.idle_timeout} s (files are kept)")
    if room.auth == "oidc":
        lines.append(f"  login: OpenID Connect, {room.issuer} ({room.oidc_username_claim} = "
                     "the class list's id)" + (
                         f"; this machine's provider, its log {room.state / 'oidc-provider.log'}"
                         if room.local_provider else ""))
    elif room.auth == "lti13":
        lines.append(f"  login: LTI 1.3 launches from {room.lti_issuer} (the tool's "
                     f"configuration: {room.url}/hub/lti13/config)")
    if links:
        lines.append("First-login links (each works once: the student chooses a password "
                     f"with it; also in {room.first_login_links}, mode 0600, for mailing):")
        lines += [f"  {u:<22} {link}" for u, link in sorted(links.items())]
    elif room.roster is not None:
        lines.append(f"First-login links: none new (handed out before: {room.first_login_links}"
                     "; a new one for a student: `python -m hub.classroom new-link ID`)")
    if new:
        where = "this machine's OpenID Connect provider; " if room.local_provider else ""
        lines.append(f"New passwords ({where}shown only this once; kept in "
                     f"{room.passwords}, mode 0600):")
        lines += [f"  {u:<22} {p}" for u, p in sorted(new.items())]
    elif room.auth == "password" or room.local_provider:
        lines.append(f"Passwords: unchanged, in {room.passwords} (mode 0600, root only).")
    lines.append(f"Exchange: {room.exchange}   Hub log: {room.state / 'jupyterhub.log'}")
    lines.append("Ctrl-C stops the hub, every server and the proxy.")
    return "\n".join(lines)


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="Run the course as a class on JupyterHub.")
    p.add_argument("command", choices=["up", "setup", "new-link"],
                   help="up: set up and run until Ctrl-C; setup: set up only; new-link ID...: "
                        "a new first-login link for students of the class list (a lost link "
                        "or a forgotten password; their old password stops working)")
    p.add_argument("ids", nargs="*", help="new-link: the students' ids")
    p.add_argument("--base", default=os.environ.get("HUB_DIR", "/srv/attention-hub"))
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--students", type=int, default=3,
                   help="made-up students, when there is no class list")
    p.add_argument("--class-list", default=None,
                   help="CSV with the header id,name,email: the class's students (kept for "
                        "later runs)")
    p.add_argument("--prefix", default="att-", help="of the user names")
    p.add_argument("--home-base", default="/home")
    p.add_argument("--venv", default=None, help="the class's Python (default: BASE/venv)")
    p.add_argument("--no-release", action="store_true",
                   help="leave generating and releasing to the instructor's Formgrader")
    p.add_argument("--lab-settings", default=None,
                   help="JSON {plugin: settings} added to every user's JupyterLab settings")
    p.add_argument("--ip", default="127.0.0.1", help="the address to listen on")
    p.add_argument("--ssl-cert", default=None, help="TLS certificate (PEM)")
    p.add_argument("--ssl-key", default=None, help="its private key (PEM)")
    p.add_argument("--allow-http", action="store_true",
                   help="plain HTTP on an address other than loopback (TLS done in front)")
    p.add_argument("--public-url", default=None,
                   help="where people reach the hub, for the links (default: from ip, port)")
    p.add_argument("--idle-timeout", type=int, default=3600,
                   help="seconds after which an idle server is stopped (files are kept)")
    p.add_argument("--exchange", default="fs", help="nbgrader's exchange: fs or ngshare")
    p.add_argument("--auth", default="password", choices=AUTH_KINDS,
                   help="how people log in: the hub's password form, an OpenID Connect "
                        "provider, or LTI 1.3 launches from an LMS")
    p.add_argument("--oidc-issuer", default=None,
                   help="the OpenID Connect provider's issuer URL (default: this machine's "
                        "provider, hub/oidc-provider.mjs, on 127.0.0.1)")
    p.add_argument("--oidc-port", type=int, default=0,
                   help="the port of this machine's provider (default: PORT + 1)")
    p.add_argument("--oidc-client-id", default="attention-hub")
    p.add_argument("--oidc-client-secret-file", default=None)
    p.add_argument("--oidc-username-claim", default="preferred_username",
                   help="the userinfo claim whose value is the class list's id")
    p.add_argument("--instructor-login", default=None,
                   help="the instructor's user name at the provider or the LMS (default: "
                        "the hub's, PREFIXinstructor)")
    p.add_argument("--lti-issuer", default="")
    p.add_argument("--lti-client-id", default="")
    p.add_argument("--lti-authorize-url", default="")
    p.add_argument("--lti-jwks-url", default="")
    p.add_argument("--lti-username-key", default="custom_id",
                   help="the launch's claim holding the class list's id (custom_X: the "
                        "custom parameter X)")
    a = p.parse_args(argv)
    try:
        if a.idle_timeout < 10:
            raise HubError(f"IDLE_TIMEOUT {a.idle_timeout}: expected at least 10 seconds")
        room = Classroom(Path(a.base), a.port, a.students, a.prefix, Path(a.home_base),
                         Path(a.venv) if a.venv else None, not a.no_release,
                         json.loads(a.lab_settings) if a.lab_settings else {},
                         ip=a.ip, ssl_cert=a.ssl_cert, ssl_key=a.ssl_key,
                         allow_http=a.allow_http, public_url=a.public_url,
                         idle_timeout=a.idle_timeout, exchange_kind=a.exchange,
                         auth=a.auth, oidc_issuer=a.oidc_issuer, oidc_port=a.oidc_port,
                         oidc_client_id=a.oidc_client_id,
                         oidc_client_secret_file=a.oidc_client_secret_file,
                         oidc_username_claim=a.oidc_username_claim,
                         instructor_login=a.instructor_login, lti_issuer=a.lti_issuer,
                         lti_client_id=a.lti_client_id, lti_authorize_url=a.lti_authorize_url,
                         lti_jwks_url=a.lti_jwks_url, lti_username_key=a.lti_username_key)
        if a.class_list:
            room.roster = parse_class_list(Path(a.class_list), room.instructor)
        else:
            room.roster = load_saved_roster(room)
        if a.command == "new-link":
            return _new_link(room, a.ids)
        new, links = setup(room)
        if a.command == "setup":
            print(banner(room, new, links).replace("The class is up", "The class is set up"))
            return 0
        # Ctrl-C and SIGTERM both end the wait below; the hub is then stopped cleanly. (A
        # process started in the background by a shell without job control inherits SIGINT
        # ignored, and Python then leaves it so: Ctrl-C is set here, not inherited.)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, _interrupt)
        proc = start(room)
        print(banner(room, new, links), flush=True)
        try:
            while proc.poll() is None:
                time.sleep(0.5)
            print(f"JupyterHub exited with {proc.returncode}; see {room.state}/jupyterhub.log",
                  file=sys.stderr)
        except KeyboardInterrupt:
            print("\nStopping the hub, its servers and the proxy...", flush=True)
        left = stop(proc, room)
        if left:
            print("Stopped what the hub left running: " + "; ".join(
                f"{pid} {cmd[:80]}" for pid, cmd in left), file=sys.stderr)
            return 1
        print("Stopped; nothing left running.")
        return 0 if proc.returncode in (0, -signal.SIGTERM, 128 + signal.SIGTERM) else 1
    except HubError as exc:
        print(f"make hub: {exc}", file=sys.stderr)
        return 2


def _new_link(room: Classroom, ids: list[str]) -> int:
    if room.auth != "password":
        raise HubError(f"AUTH={room.auth}: there are no first-login links; the identity "
                       "provider (or the LMS) holds the students' passwords")
    if room.roster is None:
        raise HubError(f"no class list in {room.state}: expected a class set up with "
                       "`make hub CLASS_LIST=students.csv`")
    if not ids:
        raise HubError("new-link: expected the ids of the students who need a new link")
    settings = room.state / "settings.json"
    if not room.public_url and settings.exists():  # the address of the last `make hub`
        room.public_url = json.loads(settings.read_text()).get("url")
    links = ensure_first_logins(room, reissue=tuple(ids))
    for u, link in sorted(links.items()):
        print(f"  {u:<22} {link}")
    print(f"(each works once; also in {room.first_login_links}; the old link and password "
          "no longer work)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
