"""Credentials of the class on one machine: password hashes, first-login codes, private
files. Standard library only: both the hub's process (hub/parts.py) and the set-up
(hub/classroom.py) use them, and neither imports the other for them.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path

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


def first_login_code_hash(code: str) -> str:
    """What the hub keeps of a first-login code (128 random bits: a plain hash suffices)."""
    return hashlib.sha256(code.encode()).hexdigest()


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` created 0600 (never readable by anyone else, even briefly)."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)
