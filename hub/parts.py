"""The JupyterHub parts `make hub` adds: a login against per-user passwords, a one-time
first-login page where a student of the class list chooses their password, and a local
process spawner that starts the instructor's server in the course directory.

Each is a small subclass of JupyterHub's own classes; hub/jupyterhub_config.py wires
them in. `make hub AUTH=oidc` and `AUTH=lti13` swap the login for an OpenID Connect
provider's (oauthenticator) or an LMS's LTI 1.3 launches (jupyterhub-ltiauthenticator),
with the small subclasses below, and keep everything else.
"""

from __future__ import annotations

import hmac
import json
import os
from pathlib import Path

from jupyterhub._xsrf_utils import _set_xsrf_cookie
from jupyterhub.auth import Authenticator
from jupyterhub.handlers.login import LoginHandler
from jupyterhub.spawner import LocalProcessSpawner, set_user_setuid
from ltiauthenticator.lti13.auth import LTI13Authenticator
from oauthenticator.generic import GenericOAuthenticator
from traitlets import Dict, Integer, Unicode

from hub.credentials import (
    check_password,
    first_login_code_hash,
    hash_password,
    write_private,
)


class PasswordFileAuthenticator(Authenticator):
    """JupyterHub's login form, checked against a root-only file of scrypt hashes.

    One password per person (never a shared one); the file maps each user name to
    :func:`hash_password` of their password. It is read at each login, so a re-run of
    `make hub` that adds students needs no restart of the logic here.
    """

    password_file = Unicode(config=True, help="JSON {user: scrypt hash}, mode 0600")
    first_login_file = Unicode(config=True,
                               help="JSON {user: sha256 of their unused first-login code}")
    min_password = Integer(8, config=True, help="shortest password chosen at first login")

    def get_handlers(self, app):
        return [*super().get_handlers(app), ("/first-login", FirstLoginHandler)]

    #: What a student sees for a used, replaced or mistyped link.
    USED = ("This first-login link has been used already, or is not valid. Log in with the "
            "password you chose, or ask your instructor for a new link.")

    def _pending(self) -> dict:
        try:
            return json.loads(Path(self.first_login_file).read_text())
        except FileNotFoundError:
            return {}

    def code_is_valid(self, name: str, code: str) -> bool:
        """Whether ``code`` is ``name``'s unused first-login code (it is not used up)."""
        stored = self._pending().get(name)
        return stored is not None and hmac.compare_digest(stored, first_login_code_hash(code))

    def redeem(self, name: str, code: str, password: str,
               repeat: str) -> tuple[int, str] | None:
        """Use ``name``'s first-login ``code`` to set their password; None, or (HTTP
        status, what is wrong for the student). The code works once: it is gone once the
        password is set.

        Runs on the hub's event loop without awaiting, so two submissions of one code
        cannot both pass.
        """
        pending = self._pending()
        if not self.code_is_valid(name, code):
            self.log.warning("first login refused for %r: unknown or used code", name)
            return 403, self.USED
        if len(password) < self.min_password:
            return 400, (f"Your password has {len(password)} characters: expected at least "
                         f"{self.min_password}.")
        if password != repeat:
            return 400, "The two passwords differ: type the same password twice."
        hashes = json.loads(Path(self.password_file).read_text()) \
            if Path(self.password_file).exists() else {}
        hashes[name] = hash_password(password)
        write_private(Path(self.password_file), json.dumps(hashes, indent=1, sort_keys=True))
        del pending[name]
        write_private(Path(self.first_login_file), json.dumps(pending, indent=1,
                                                               sort_keys=True))
        self.log.info("first login: %s chose a password", name)
        return None

    async def authenticate(self, handler, data):
        name, password = data.get("username", ""), data.get("password", "")
        try:
            hashes = json.loads(Path(self.password_file).read_text())
        except (OSError, ValueError) as exc:
            self.log.error("cannot read the password file %s: %s", self.password_file, exc)
            return None
        stored = hashes.get(name)
        if stored is None or not check_password(password, stored):
            self.log.warning("failed login for %r", name)
            return None
        return name


class FirstLoginHandler(LoginHandler):
    """/hub/first-login?user=ID&code=CODE: the student chooses a password, once, and is
    logged in. The login form's xsrf protection, JupyterHub's page template."""

    async def _page(self, user="", code="", error=None, status=200, form=True):
        xsrf_token = self.xsrf_token
        if self.request.headers.get("Sec-Fetch-Mode", "navigate") == "navigate":
            _set_xsrf_cookie(self, self._xsrf_token_id, cookie_path=self.hub.base_url,
                             xsrf_token=xsrf_token)
        self.set_status(status)
        html = await self.render_template(
            "first-login.html", xsrf=xsrf_token.decode("ascii"), first_user=user,
            code=code, error=error, min_password=self.authenticator.min_password,
            action=self.request.path, form=form)
        self.finish(html)

    async def get(self):
        name = self.get_argument("user", "", strip=True)
        code = self.get_argument("code", "", strip=True)
        if not self.authenticator.code_is_valid(name, code):  # said at once, not after typing
            return await self._page(name, "", self.authenticator.USED, 403, form=False)
        await self._page(name, code)

    async def post(self):
        name = self.get_argument("user", "", strip=True)
        code = self.get_argument("code", "", strip=True)
        password = self.get_argument("password", "")
        refused = self.authenticator.redeem(name, code, password,
                                            self.get_argument("repeat", ""))
        if refused:
            status, error = refused
            return await self._page(name, code, error, status, form=status != 403)
        user = await self.login_user({"username": name, "password": password})
        if user is None:  # not allowed on this hub (no longer on the class list)
            return await self._page(name, "", "Your password is set, but this hub does not "
                                    "let you in: ask your instructor.", 403, form=False)
        self._jupyterhub_user = user
        self.redirect(self.get_next_url(user))


class CourseOAuthenticator(GenericOAuthenticator):
    """oauthenticator's GenericOAuthenticator (an OpenID Connect provider's code flow with
    PKCE and the client secret; the user name from a userinfo claim) whose names may be
    mapped: the instructor's login at the provider to the hub's instructor. Who may log
    in stays JupyterHub's ``allowed_users`` (the class list): anyone else the provider
    knows is refused (403)."""

    aliases = Dict(Unicode(), config=True,
                   help="the provider's user name -> the hub's (the instructor's)")

    def user_info_to_username(self, user_info):
        name = super().user_info_to_username(user_info)
        return self.aliases.get(name, name)


class CourseLTI13Authenticator(LTI13Authenticator):
    """jupyterhub-ltiauthenticator's LTI 1.3 tool with the same mapping of the
    instructor's login; the class list's ``allowed_users`` decides who is let in."""

    aliases = Dict(Unicode(), config=True,
                   help="the LMS's user name -> the hub's (the instructor's)")

    def get_username(self, token):
        name = super().get_username(token)
        return self.aliases.get(name, name)


class CourseSpawner(LocalProcessSpawner):
    """LocalProcessSpawner whose servers may start in a directory other than the home.

    nbgrader's extensions read ``nbgrader_config.py`` from the server's working
    directory, so the instructor's server must run from the course directory; JupyterHub
    itself always changes to the home directory after dropping to the user.
    """

    start_dirs = Dict(Unicode(), config=True,
                      help="user name -> directory their server starts and serves from")

    def make_preexec_fn(self, name):
        setuid = set_user_setuid(name)
        start = self.start_dirs.get(name)

        def preexec():
            setuid()  # drops to the user and changes to their home
            if start:
                os.chdir(start)

        return preexec

    async def start(self):
        start = self.start_dirs.get(self.user.name)
        if start:
            self.notebook_dir = start  # the file browser and the Formgrader's links
        return await super().start()
