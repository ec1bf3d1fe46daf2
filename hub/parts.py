"""The two JupyterHub parts `make hub` adds: a login against per-user passwords, and a
local process spawner that starts the instructor's server in the course directory.

Both are small subclasses of JupyterHub's own classes; hub/jupyterhub_config.py wires
them in. A real deployment swaps the authenticator for PAM, OAuth or LTI (README,
"Running a real class") and keeps everything else.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from pathlib import Path

from jupyterhub.auth import Authenticator
from jupyterhub.spawner import LocalProcessSpawner, set_user_setuid
from traitlets import Dict, Unicode

#: scrypt's cost parameters (RFC 7914's interactive-login figures): ~50 ms per login.
SCRYPT = dict(n=2**14, r=8, p=1, dklen=32)


def hash_password(password: str, salt: bytes | None = None) -> str:
    """``scrypt$<salt hex>$<hash hex>`` of ``password``."""
    salt = salt or secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, **SCRYPT)
    return f"scrypt${salt.hex()}${digest.hex()}"


def check_password(password: str, stored: str) -> bool:
    """Whether ``password`` matches a :func:`hash_password` string (constant time)."""
    try:
        kind, salt, digest = stored.split("$")
        wanted = bytes.fromhex(digest)
        salt_bytes = bytes.fromhex(salt)
    except ValueError:
        return False
    if kind != "scrypt":
        return False
    got = hashlib.scrypt(password.encode(), salt=salt_bytes, **SCRYPT)
    return hmac.compare_digest(got, wanted)


class PasswordFileAuthenticator(Authenticator):
    """JupyterHub's login form, checked against a root-only file of scrypt hashes.

    One password per person (never a shared one); the file maps each user name to
    :func:`hash_password` of their password. It is read at each login, so a re-run of
    `make hub` that adds students needs no restart of the logic here.
    """

    password_file = Unicode(config=True, help="JSON {user: scrypt hash}, mode 0600")

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
