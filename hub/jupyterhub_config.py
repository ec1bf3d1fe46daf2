"""JupyterHub's configuration for `make hub` (hub/classroom.py writes the settings it reads).

Everything that differs between runs (ports, users, directories) comes from the JSON file
named by $ATTENTION_HUB_SETTINGS, so one file serves `make hub` and the tests.
"""

import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from hub.parts import CourseSpawner, PasswordFileAuthenticator  # noqa: E402

s = json.loads(Path(os.environ["ATTENTION_HUB_SETTINGS"]).read_text())
state = Path(s["state"])
c = get_config()  # noqa: F821  (provided by traitlets when it loads this file)

# Everything on 127.0.0.1: the public port, the hub's API, the proxy's API.
c.JupyterHub.bind_url = f"http://127.0.0.1:{s['port']}"
c.JupyterHub.hub_bind_url = f"http://127.0.0.1:{s['hub_port']}"
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{s['proxy_api_port']}"
# configurable-http-proxy from the project's hub/package-lock.json (npm ci), not global.
c.ConfigurableHTTPProxy.command = [s["proxy"]]
c.ConfigurableHTTPProxy.pid_file = str(state / "proxy.pid")
# The hub's own state stays in a root-only directory.
c.JupyterHub.db_url = f"sqlite:///{state / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(state / "jupyterhub_cookie_secret")
c.JupyterHub.pid_file = str(state / "jupyterhub.pid")

c.JupyterHub.authenticator_class = PasswordFileAuthenticator
c.PasswordFileAuthenticator.password_file = s["password_hashes"]
c.Authenticator.allowed_users = set(s["users"])
c.Authenticator.admin_users = set()  # nobody may open another person's server

# Each person's server is a local process running as their own Unix user, from the
# class's Python environment (readable by all; the project's .venv may not be).
c.JupyterHub.spawner_class = CourseSpawner
c.Spawner.cmd = [str(Path(s["venv"]) / "bin" / "jupyterhub-singleuser")]
c.Spawner.default_url = "/lab"
c.Spawner.environment = {
    "PATH": f"{Path(s['venv']) / 'bin'}:/usr/local/bin:/usr/bin:/bin",
    "VIRTUAL_ENV": s["venv"],
    "LANG": "C.UTF-8",
}
c.CourseSpawner.start_dirs = {s["instructor"]: s["course_dir"]}
# Servers import torch and nbgrader: give a loaded machine time to start them.
c.Spawner.start_timeout = 180
c.Spawner.http_timeout = 180
# Stopping the hub stops every server it started, and the proxy.
c.JupyterHub.cleanup_servers = True
c.JupyterHub.cleanup_proxy = True
