"""LTI 1.3 launches (`make hub AUTH=lti13`, jupyterhub-ltiauthenticator), as far as they
can be tested without an LMS: on a real hub, against a stand-in platform that is only a
signing key and its JWKS endpoint (this test's own HTTP server on 127.0.0.1).

What is tested: the tool's configuration JSON (what an LMS imports); the OIDC login
initiation (the hub redirects to the platform's authorization endpoint with the LTI
parameters, a state and a nonce, and sets their cookies); a launch signed with the
platform's key, carrying the class list's id in a custom parameter, logs the student in;
refused: a launch signed with another key under the platform's key id (a forgery), one for
another tool's client id, one whose state is not the browser's, and a genuine one for
someone not on the class list.

Not tested: a real LMS (Canvas, Moodle...) and its registration screens, the LMS's own
authorization step (here the test plays it by signing the id_token), a browser's
cross-site POST of the launch (its SameSite cookie rules), grades passed back (LTI AGS:
not configured).
"""

from __future__ import annotations

import http.cookiejar
import http.server
import json
import os
import re
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from hub import classroom
from tests.hub.conftest import TAG, start_launcher, stop_and_clean

pytestmark = [pytest.mark.hub, pytest.mark.slow]
PREFIX = f"att{TAG}lti-"
STUDENT = f"{PREFIX}fay"
ISSUER = "https://lms.example.org"
CLIENT_ID = "attention-tool-1"
KID = "platform-key-1"
CLAIM = "https://purl.imsglobal.org/spec/lti/claim/"


class Platform:
    """The LMS's side that the hub talks to: its JWKS endpoint, and its signing key."""

    def __init__(self):
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))
        body = json.dumps({"keys": [{**jwk, "kid": KID, "use": "sig", "alg": "RS256"}]})

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200 if self.path == "/jwks" else 404)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body.encode())

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def lti(room):
    main, _ = room
    platform = Platform()
    base = Path(tempfile.mkdtemp(prefix="attention-hub-lti-"))
    os.chmod(base, 0o755)
    (base / "students.csv").write_text(f"id,name,email\n{STUDENT},Fay Lti,fay@example.org\n")
    small = classroom.Classroom(base=base, port=classroom.free_port(), prefix=PREFIX,
                                home_base=base / "home", release=False, venv=main.venv,
                                auth="lti13")
    small.roster = classroom.parse_class_list(base / "students.csv", small.instructor)
    classroom.remove_users(small)
    args = ["--class-list", str(base / "students.csv"), "--venv", str(main.venv),
            "--auth", "lti13", "--lti-issuer", ISSUER, "--lti-client-id", CLIENT_ID,
            "--lti-authorize-url", f"{platform.url}/authorize",
            "--lti-jwks-url", f"{platform.url}/jwks"]
    try:
        launcher = start_launcher(small, args)
    except BaseException:
        classroom.remove_users(small)
        platform.close()
        raise
    try:
        yield small, platform
    finally:
        stop_and_clean(small, launcher)
        platform.close()


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def call(opener, url, form):
    """POST ``form``; (status, Location header)."""
    data = urllib.parse.urlencode(form).encode()
    try:
        with opener.open(url, data=data, timeout=30) as r:
            return r.status, r.headers.get("Location")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Location")


def initiate(room):
    """The LMS's login initiation, as the browser carries it: (opener with the hub's
    cookies, the authorization request's parameters)."""
    opener = urllib.request.build_opener(
        urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()), NoRedirect)
    status, location = call(opener, f"{room.url}/hub/lti13/oauth_login", {
        "iss": ISSUER, "login_hint": "lms-user-42", "target_link_uri": f"{room.url}/hub/",
        "client_id": CLIENT_ID, "lti_message_hint": "resource-link-7"})
    assert status == 302, status
    parts = urllib.parse.urlsplit(location)
    return opener, parts, {k: v[0] for k, v in urllib.parse.parse_qs(parts.query).items()}


def id_token(key, nonce, ident, aud=CLIENT_ID, kid=KID):
    """The launch's id_token as a platform signs it (LtiResourceLinkRequest)."""
    now = int(time.time())
    claims = {"iss": ISSUER, "aud": aud, "sub": "lms-user-42", "iat": now, "exp": now + 300,
              "nonce": nonce, f"{CLAIM}version": "1.3.0",
              f"{CLAIM}deployment_id": "deployment-1",
              f"{CLAIM}message_type": "LtiResourceLinkRequest",
              f"{CLAIM}target_link_uri": "https://hub.example.org/hub/",
              f"{CLAIM}resource_link": {"id": "attention-lesson"},
              f"{CLAIM}roles": ["http://purl.imsglobal.org/vocab/lis/v2/membership#Learner"],
              f"{CLAIM}custom": {"id": ident}}
    return jwt.encode(claims, key, algorithm="RS256", headers={"kid": kid})


def launch(room, key, ident=STUDENT, aud=CLIENT_ID, state=None):
    """Initiation, then the launch POSTed to the hub's redirect URI: (status, Location,
    who the browser is logged in as on the hub afterwards, or None)."""
    opener, _, params = initiate(room)
    token = id_token(key, params["nonce"], ident, aud)
    status, location = call(opener, params["redirect_uri"],
                            {"id_token": token, "state": state or params["state"]})
    return status, location, logged_in_as(room, opener)


def logged_in_as(room, opener) -> str | None:
    """The hub user of the browser's cookies (its home page names them), or None."""
    try:
        with opener.open(f"{room.url}/hub/home", timeout=30) as r:
            page = r.read().decode()
    except urllib.error.HTTPError as exc:
        assert exc.code == 302 and "/hub/login" in exc.headers["Location"], exc.code
        return None
    return re.search(r'<span class="me-1">([^<]+)</span>', page).group(1)  # its navbar


def test_the_tools_configuration_and_login_initiation(lti):
    room, platform = lti
    with urllib.request.urlopen(f"{room.url}/hub/lti13/config", timeout=10) as r:
        config = json.loads(r.read())
    assert config["title"] == "Attention, hands on"
    assert config["oidc_initiation_url"] == f"{room.url}/hub/lti13/oauth_login"
    assert config["target_link_uri"] == room.url
    _, parts, params = initiate(room)
    assert f"{parts.scheme}://{parts.netloc}{parts.path}" == f"{platform.url}/authorize"
    assert {k: params[k] for k in ("response_type", "scope", "response_mode", "prompt",
                                   "client_id", "login_hint", "lti_message_hint")} == {
        "response_type": "id_token", "scope": "openid", "response_mode": "form_post",
        "prompt": "none", "client_id": CLIENT_ID, "login_hint": "lms-user-42",
        "lti_message_hint": "resource-link-7"}
    assert params["redirect_uri"] == f"{room.url}/hub/lti13/oauth_callback"
    assert len(params["nonce"]) >= 16 and params["state"]
    # An initiation without the LMS's required parameters is refused.
    opener = urllib.request.build_opener(NoRedirect)
    assert call(opener, f"{room.url}/hub/lti13/oauth_login", {"iss": ISSUER})[0] == 400


def test_forged_or_foreign_launches_are_refused(lti):
    room, platform = lti
    forger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    # Signed with another key under the platform's key id; for another tool; with a state
    # that is not the one the hub gave this browser: refused, nobody logged in.
    assert launch(room, forger)[::2] == (400, None)
    assert launch(room, platform.key, aud="another-tool")[::2] == (401, None)
    assert launch(room, platform.key, state="not-the-browsers")[::2] == (400, None)


def test_a_genuine_launch_logs_in_the_class_list_id_and_no_one_else(lti):
    room, platform = lti
    # Signed by the platform, for someone not on the class list: refused.
    assert launch(room, platform.key, ident=f"{PREFIX}zed")[::2] == (403, None)
    status, location, who = launch(room, platform.key)
    assert (status, location, who) == (302, "/hub/", STUDENT)
