"""`make hub` stops before touching anything, with what to do, when the class cannot run:
not root, the port in use, no bwrap, no Node. Each case runs the real launcher
(`python -m hub.classroom up`) in a real situation: another user, a port really taken, a
PATH without the tool."""

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


def launch(tmp_path, port=None, env=None, **kw):
    """The launcher with a fresh base and prefix; (exit status, stderr)."""
    port = port or classroom.free_port()
    cmd = [sys.executable, "-m", "hub.classroom", "up", "--base", str(tmp_path / "base"),
           "--home-base", str(tmp_path / "home"), "--prefix", "attpre-", "--port", str(port)]
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
