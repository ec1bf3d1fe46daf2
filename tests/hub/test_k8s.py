"""Kubernetes on paper (hub/k8s/) says what the tested local set-up does.

Fast and offline, in `make test` (no hub marker): no cluster, no image is built. The Zero
to JupyterHub values (hub/k8s/config.yaml) and the two Dockerfiles must name the versions
the local set-up pins (requirements.txt, hub/requirements-*.txt, this machine's Python),
the login settings `make hub AUTH=oidc` gives oauthenticator (read from
hub/jupyterhub_config.py run on settings hub/classroom.py writes), the culler's timeout
and period, the single-user server's command and URL, and the files `make hub` writes for
every user (nbgrader's exchange, the instructor-only tools, JupyterLab's news question).
What it cannot say: that the chart accepts the values, that the pods start and reach each
other, that bwrap works in the instructor's pod, or that the sizes are right for a class.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import yaml
from traitlets.config import Config

from hub import classroom

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "hub" / "k8s"


def pins(text: str) -> dict[str, str]:
    return {m[0].lower(): m[1] for m in re.findall(r"^\s*([A-Za-z0-9_.-]+)==(\S+)", text, re.M)}


def values() -> dict:
    return yaml.safe_load((K8S / "config.yaml").read_text())


def local_hub_config(tmp_path) -> tuple[Config, classroom.Classroom]:
    """hub/jupyterhub_config.py's configuration for the settings `make hub AUTH=oidc`
    writes (with made-up endpoints), and that class."""
    room = classroom.Classroom(base=tmp_path, auth="oidc", oidc_issuer="https://idp.example")
    room.state.mkdir(parents=True)
    secret = tmp_path / "secret"
    secret.write_text("s3cret")
    room.oidc_client_secret_file = secret
    endpoints = {"authorize_url": "A", "token_url": "T", "userdata_url": "U"}
    path = classroom.write_settings(room, endpoints)
    c = Config()
    namespace = {"get_config": lambda: c, "__file__": str(ROOT / "hub" / "jupyterhub_config.py")}
    old = os.environ.get("ATTENTION_HUB_SETTINGS")
    os.environ["ATTENTION_HUB_SETTINGS"] = str(path)
    try:
        exec(compile((ROOT / "hub" / "jupyterhub_config.py").read_text(),
                     "jupyterhub_config.py", "exec"), namespace)
    finally:
        if old is None:
            del os.environ["ATTENTION_HUB_SETTINGS"]
        else:
            os.environ["ATTENTION_HUB_SETTINGS"] = old
    return c, room


def test_the_images_install_the_tested_versions():
    req = pins((ROOT / "requirements.txt").read_text())
    single = (K8S / "Dockerfile").read_text()
    # The single-user image installs the course's own pin list and ngshare-exchange's, on
    # this machine's Python build.
    assert re.search(r"^FROM python:(\S+)-slim", single, re.M)[1] == \
        ".".join(map(str, sys.version_info[:3]))
    assert "-r /tmp/attention/requirements.txt" in single
    assert "COPY requirements.txt hub/requirements-ngshare-exchange.txt /tmp/attention/" \
        in single
    assert "--no-deps -r /tmp/attention/requirements-ngshare-exchange.txt" in single
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in single
    assert req["torch"] == "2.13.0"
    # The hub image pins JupyterHub and the authenticators as requirements.txt does.
    hub = pins((K8S / "Dockerfile.hub").read_text())
    for name in ("jupyterhub", "oauthenticator", "jupyterhub-ltiauthenticator",
                 "jupyterhub-idle-culler"):
        assert hub[name] == req[name], (name, hub[name], req[name])
    assert set(hub) == {"jupyterhub", "oauthenticator", "jupyterhub-ltiauthenticator",
                        "jupyterhub-idle-culler", "jupyterhub-kubespawner"}, hub
    # ... and what `make hub`'s configuration imports from the project (hub.parts).
    assert "COPY hub/__init__.py hub/parts.py hub/credentials.py /srv/attention/hub/" in \
        (K8S / "Dockerfile.hub").read_text()
    assert values()["hub"]["image"]["tag"] == f"jupyterhub-{req['jupyterhub']}"
    assert values()["singleuser"]["image"]["tag"] == \
        f"python-{'.'.join(map(str, sys.version_info[:3]))}-torch-{req['torch']}"


def test_the_login_is_configured_as_make_hub_configures_it(tmp_path):
    c, room = local_hub_config(tmp_path)
    local = c.CourseOAuthenticator
    k8s = values()["hub"]["config"]
    assert k8s["JupyterHub"]["authenticator_class"] == "hub.parts.CourseOAuthenticator"
    assert c.JupyterHub.authenticator_class.__module__ + "." + \
        c.JupyterHub.authenticator_class.__name__ == "hub.parts.CourseOAuthenticator"
    there = k8s["CourseOAuthenticator"]
    for key in ("scope", "username_claim", "enable_pkce", "basic_auth", "client_id"):
        assert there[key] == local[key], (key, there[key], local[key])
    assert there["oauth_callback_url"].endswith("/hub/oauth_callback")
    assert local.oauth_callback_url == f"{room.url}/hub/oauth_callback"
    for key in ("authorize_url", "token_url", "userdata_url"):
        assert there[key].startswith("https://login.example.edu/realms/uni/"), there[key]
    # Only the class list and the instructor; nobody is an admin.
    assert k8s["Authenticator"]["admin_users"] == [] and not c.Authenticator.admin_users
    assert room.instructor in k8s["Authenticator"]["allowed_users"]
    assert set(there["aliases"].values()) == {room.instructor}
    assert k8s["KubeSpawner"]["start_timeout"] == c.Spawner.start_timeout
    assert k8s["KubeSpawner"]["http_timeout"] == c.Spawner.http_timeout


def test_the_culler_and_the_servers_match(tmp_path):
    c, room = local_hub_config(tmp_path)
    culler = next(s for s in c.JupyterHub.services if s["name"] == "idle-culler")
    args = dict(a.lstrip("-").split("=") for a in culler["command"][3:])
    cull = values()["cull"]
    assert room.idle_timeout == 3600  # make hub's default IDLE_TIMEOUT
    assert cull["enabled"] is True
    assert (cull["timeout"], cull["every"]) == (int(args["timeout"]), int(args["cull-every"]))
    single = values()["singleuser"]
    assert single["defaultUrl"] == c.Spawner.default_url == "/lab"
    assert single["cmd"] == Path(c.Spawner.cmd[0]).name == "jupyterhub-singleuser"
    # The resources docs/instructor.md derives from the figures measured by make test-hub.
    assert (single["memory"]["guarantee"], single["memory"]["limit"]) == ("1G", "2G")
    hook = values()["hub"]["extraConfig"]["attention.py"]
    assert f'INSTRUCTOR = "{room.instructor}"' in hook
    assert 'JUPYTER_CONFIG_PATH"] = "/opt/attention/instructor"' in hook


def test_the_image_holds_the_files_make_hub_writes():
    image = K8S / "image"
    for who, student in (("student", True), ("instructor", False)):
        assert json.loads((image / who / "jupyter_server_config.json").read_text()) == \
            classroom.server_config(student)
        assert json.loads((image / who / "labconfig" / "page_config.json").read_text()) == \
            classroom.page_config(student)
    assert json.loads((image / "overrides.json").read_text()) == classroom.LAB_OVERRIDES
    # (the Validate extension those files switch on is in the image's site-packages)
    assert (f"COPY {classroom.VALIDATE_EXTENSION.name} /usr/local/lib/python3.11/"
            f"site-packages/{classroom.VALIDATE_EXTENSION.name}") in (
        K8S / "Dockerfile").read_text()
    # nbgrader's: the course and the ngshare exchange at the hub's service in the cluster.
    url = "http://proxy-public/services/ngshare"
    expected = classroom.USER_NBGRADER_CONFIG.format(
        course_id=classroom.COURSE_ID, exchange=classroom.ngshare_exchange_config(url))
    got = (image / "nbgrader_config.py").read_text()
    assert got.splitlines()[1:] == expected.splitlines()[1:]
    service = values()["hub"]["services"]["ngshare"]
    assert service["url"] == "http://ngshare:8080"
