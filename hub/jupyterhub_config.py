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

from hub.parts import (  # noqa: E402
    CourseLTI13Authenticator,
    CourseOAuthenticator,
    CourseSpawner,
    PasswordFileAuthenticator,
)

s = json.loads(Path(os.environ["ATTENTION_HUB_SETTINGS"]).read_text())
state = Path(s["state"])
c = get_config()  # noqa: F821  (provided by traitlets when it loads this file)

# The public port on the chosen address (127.0.0.1 unless told), over TLS when given a
# certificate (the proxy then serves it); the hub's API and the proxy's stay on 127.0.0.1.
scheme = "https" if s["ssl_cert"] else "http"
host = f"[{s['ip']}]" if ":" in s["ip"] else s["ip"]
c.JupyterHub.bind_url = f"{scheme}://{host}:{s['port']}"
if s["ssl_cert"]:
    c.JupyterHub.ssl_cert = s["ssl_cert"]
    c.JupyterHub.ssl_key = s["ssl_key"]
c.JupyterHub.hub_bind_url = f"http://127.0.0.1:{s['hub_port']}"
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{s['proxy_api_port']}"
# configurable-http-proxy from the project's hub/package-lock.json (npm ci), not global.
c.ConfigurableHTTPProxy.command = [s["proxy"]]
c.ConfigurableHTTPProxy.pid_file = str(state / "proxy.pid")
# The hub's own state stays in a root-only directory.
c.JupyterHub.db_url = f"sqlite:///{state / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(state / "jupyterhub_cookie_secret")
c.JupyterHub.pid_file = str(state / "jupyterhub.pid")

if s["auth"] == "oidc":
    # An OpenID Connect provider (make hub AUTH=oidc): its endpoints from its discovery
    # document (hub/classroom.py, discover_oidc), the authorization code flow with PKCE
    # (S256) and the client secret (HTTP basic at the token endpoint), the user name from
    # the userinfo claim that holds the class list's id.
    o = s["oidc"]
    c.JupyterHub.authenticator_class = CourseOAuthenticator
    c.CourseOAuthenticator.authorize_url = o["authorize_url"]
    c.CourseOAuthenticator.token_url = o["token_url"]
    c.CourseOAuthenticator.userdata_url = o["userdata_url"]
    c.CourseOAuthenticator.client_id = o["client_id"]
    c.CourseOAuthenticator.client_secret = o["client_secret"]
    c.CourseOAuthenticator.oauth_callback_url = f"{s['url']}/hub/oauth_callback"
    c.CourseOAuthenticator.scope = o["scope"]
    c.CourseOAuthenticator.username_claim = o["username_claim"]
    c.CourseOAuthenticator.enable_pkce = True
    c.CourseOAuthenticator.basic_auth = True
    c.CourseOAuthenticator.login_service = o["login_service"]
    c.CourseOAuthenticator.aliases = s["login_aliases"]
elif s["auth"] == "lti13":
    # LTI 1.3 launches from an LMS (make hub AUTH=lti13): the platform's issuer, the
    # hub's client id there, its authorization and JWKS endpoints; the class list's id
    # from a custom parameter of the launch (custom_id: `id=$User.username` in the LMS).
    lti = s["lti13"]
    c.JupyterHub.authenticator_class = CourseLTI13Authenticator
    c.CourseLTI13Authenticator.issuer = lti["issuer"]
    c.CourseLTI13Authenticator.client_id = set(lti["client_id"])
    c.CourseLTI13Authenticator.authorize_url = lti["authorize_url"]
    c.CourseLTI13Authenticator.jwks_endpoint = lti["jwks_endpoint"]
    c.CourseLTI13Authenticator.username_key = lti["username_key"]
    c.CourseLTI13Authenticator.tool_name = "Attention, hands on"
    c.CourseLTI13Authenticator.tool_description = "The attention course's JupyterHub"
    c.CourseLTI13Authenticator.aliases = s["login_aliases"]
else:
    c.JupyterHub.authenticator_class = PasswordFileAuthenticator
    c.PasswordFileAuthenticator.password_file = s["password_hashes"]
    c.PasswordFileAuthenticator.first_login_file = s["first_logins"]
    c.PasswordFileAuthenticator.min_password = s["min_password"]
# The first-login page (hub/templates/first-login.html) extends JupyterHub's page.html.
c.JupyterHub.template_paths = [str(ROOT / "hub" / "templates")]
# Only the class: the instructor and the class list's ids, whatever else the provider or
# the LMS knows (those are refused with 403).
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
# Idle servers are stopped by jupyterhub-idle-culler, a service the hub starts and stops
# (its README's set-up): the scopes it needs, nothing more. A stopped server's files stay;
# the student's next visit starts it again. Activity is reported to the hub often enough
# for the timeout (JupyterHub's defaults, 300 s, are meant for timeouts of an hour).
timeout = int(s["idle_timeout"])
activity = max(5, min(300, timeout // 4))
c.JupyterHub.last_activity_interval = activity
c.Spawner.environment["JUPYTERHUB_ACTIVITY_INTERVAL"] = str(activity)
c.JupyterHub.services = [{
    "name": "idle-culler",
    "command": [sys.executable, "-m", "jupyterhub_idle_culler", f"--timeout={timeout}",
                f"--cull-every={max(5, min(300, timeout // 2))}"],
    # How `make hub`'s stop() recognises this hub's culler among processes (leftovers()).
    "environment": {"ATTENTION_HUB_STATE": str(state)},
}]
c.JupyterHub.load_roles = [{
    "name": "idle-culler",
    "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers"],
    "services": ["idle-culler"],
}]
if s["exchange"] == "ngshare":
    # nbgrader's exchange as a hub service (make hub EXCHANGE=ngshare; docs/hub/ngshare.md):
    # ngshare from its own environment, its data in the hub's root-only state directory;
    # it checks every caller's hub token. Its admin is a token-only service that
    # hub/classroom.py uses to register the course, its instructor and its students.
    # ngshare itself listens on every interface (its code: "Must listen on all
    # interfaces for proxy"), on a port of its own.
    c.JupyterHub.services += [{
        "name": "ngshare",
        "url": f"http://127.0.0.1:{s['ngshare_port']}",
        "command": [s["ngshare_python"], "-m", "ngshare", "--admins", s["ngshare_admin"],
                    "--database", f"sqlite:///{state / 'ngshare.sqlite'}",
                    "--storage", f"{state / 'ngshare-files'}/"],
        "environment": {"ATTENTION_HUB_STATE": str(state)},
    }, {
        "name": s["ngshare_admin"],
        "api_token": s["ngshare_admin_token"],
    }]
# Stopping the hub stops every server it started, and the proxy.
c.JupyterHub.cleanup_servers = True
c.JupyterHub.cleanup_proxy = True
