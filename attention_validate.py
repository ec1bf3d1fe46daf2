"""nbgrader's Validate without a kernel, for the course's lesson notebooks: a Jupyter server
extension in place of nbgrader's ``validate_assignment``.

The Validate button (nbgrader's lab extension) posts a notebook's path to
``/assignments/validate``. nbgrader's own handler starts a kernel and runs the whole
notebook (2.5 s of kernel start and imports before the first check, the server blocked
meanwhile). This one answers a lesson notebook from a worker of ``src/validate.py`` kept
warm per course folder (the folder holding the notebook and its ``src/``, as the
notebook's own kernel imports it): the step cells replayed and judged on the road
grading takes, so Validate says what grading will. nbgrader's :class:`Validator` does
the rest as always (changed or retyped cells, the report's form); any other notebook is
validated by nbgrader's kernel, unchanged.

The extension imports nothing of the course (a hub copies this one file into the class's
environment: ``hub/classroom.py``); ``jupyter_server_config.json`` beside it switches
nbgrader's handler off and this one on (``make lesson``, the browser tests and the hub
read that file). Shape legend: not applicable.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

from nbgrader.server_extensions.validate_assignment.handlers import (
    NbGraderVersionHandler,
    ValidateAssignmentHandler,
)
from nbgrader.validator import Validator
from tornado import web
from tornado.ioloop import IOLoop

#: The server extension this one replaces (its routes are the same).
REPLACES = "nbgrader.server_extensions.validate_assignment"
#: Seconds a worker may take to answer one Validate: its first answer starts a replay
#: server (torch, the set-up: a few seconds), the replay has its own budget inside.
ANSWER_SECONDS = 120.0
#: A worker (and its replay server: docs/instructor.md, "Past one machine") stops after this many
#: seconds without a Validate; the next one starts it again (a cold Validate: a few
#: seconds).
IDLE_SECONDS = 600
_WORKERS: dict = {}  # course folder -> _Worker
_LOCK = threading.Lock()


class _Worker:
    """``python -m src.validate serve`` in a course folder, as this server's user; one
    request at a time. It exits when this server does (its stdin closes)."""

    def __init__(self, folder: Path):
        env = dict(os.environ, PYTHONPATH=str(folder), PYTHONDONTWRITEBYTECODE="1",
                   ATTENTION_VALIDATE_IDLE=str(IDLE_SECONDS))
        self.folder, self.lock = folder, threading.Lock()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "src.validate", "serve"], cwd=folder, env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            text=True, bufsize=1)

    def ask(self, path: Path) -> dict:
        ident = os.urandom(8).hex()
        with self.lock:
            self.proc.stdin.write(json.dumps({"id": ident, "path": str(path)}) + "\n")
            self.proc.stdin.flush()
            line = _readline(self.proc, time.monotonic() + ANSWER_SECONDS)
        reply = json.loads(line) if line else None
        if not isinstance(reply, dict) or reply.get("id") != ident:
            self.close()
            raise RuntimeError("the lesson's checks stopped answering (they start again on "
                               "the next Validate)")
        if "error" in reply:
            raise RuntimeError(f"the lesson's checks could not read this notebook: "
                               f"{reply['error']}")
        return reply

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self):
        try:
            self.proc.kill()
            self.proc.wait(timeout=5)
        except Exception:  # noqa: BLE001  (already gone)
            pass


def _readline(proc, deadline: float) -> str:
    """The worker's next line, or "" at ``deadline`` or when it stopped."""
    import select

    fd = proc.stdout.fileno()
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return ""
        return proc.stdout.readline()


def worker_for(notebook: Path):
    """The warm worker of the course folder holding ``notebook`` (the folder with its
    ``src/validate.py``), started on first use; None when it is not in one."""
    folder = notebook.parent
    if not (folder / "src" / "validate.py").is_file():
        return None
    with _LOCK:
        worker = _WORKERS.get(folder)
        if worker is None or not worker.alive():
            worker = _WORKERS[folder] = _Worker(folder)
    return worker


class ReplayValidator(Validator):
    """nbgrader's Validator whose check cells are answered by the road, not a kernel: each
    check cell's outputs become its verdict (its text on stderr when it falls short, as a
    check cell writes it under nbgrader's Validate, then its score), so nbgrader reads the
    points and shows the words as it does after running the notebook. ``reply``: the
    worker's answer for the notebook; without one (not a lesson notebook) nbgrader's own
    kernel runs it."""

    reply: dict | None = None

    def _preprocess(self, nb):
        from nbformat.v4 import new_output
        from nbgrader.preprocessors import CheckCellMetadata
        from nbgrader.utils import is_grade

        if not self.reply or self.reply.get("lesson") is None:
            return super()._preprocess(nb)
        nb, _ = CheckCellMetadata(parent=self).preprocess(nb, {})
        verdicts = self.reply.get("cells", {})
        for cell in nb.cells:
            gid = cell.metadata.get("nbgrader", {}).get("grade_id")
            if cell.cell_type != "code" or not is_grade(cell) or gid not in verdicts:
                continue
            v = verdicts[gid]
            cell.outputs = [new_output("stream", name="stderr", text=v["text"])] \
                if v["score"] < v["max_score"] else []
            cell.outputs.append(new_output("execute_result", data={
                "text/plain": repr(float(v["score"]))}, execution_count=None))
        return nb


class ReplayValidateHandler(ValidateAssignmentHandler):
    """``/assignments/validate`` answered by :class:`ReplayValidator`. The worker is asked
    off the server's event loop (nbgrader's handler blocks the whole server while its
    kernel runs); nbgrader's reading and report then run on it, as nbgrader runs them
    (they change the process's directory for a moment, which a thread must not)."""

    def target(self, path) -> Path:
        root = Path(self.root_dir).resolve()
        target = (root / path).resolve()
        if not target.is_relative_to(root):
            raise web.HTTPError(403, "Access denied: path outside allowed directory")
        return target

    def validate_notebook(self, path, reply=None):
        try:
            validator = ReplayValidator(config=self.load_config())
            validator.reply = reply
            result = validator.validate(str(self.target(path)))
        except web.HTTPError:
            raise
        except Exception:  # noqa: BLE001  (nbgrader's handler answers the same way)
            self.log.error(traceback.format_exc())
            return {"success": False, "value": traceback.format_exc()}
        return {"success": True, "value": result}

    @web.authenticated
    async def post(self):
        try:
            path = self.get_argument("path")
        except web.MissingArgumentError:
            path = self.get_json_body()["path"]
        target = self.target(path)
        worker = worker_for(target)
        reply = None
        for attempt in (0, 1) if worker is not None else ():
            try:
                reply = await IOLoop.current().run_in_executor(None, worker.ask, target)
                break
            except Exception as exc:  # noqa: BLE001
                if attempt == 0 and not worker.alive():  # (it stopped, idle: a new one)
                    worker = worker_for(target)
                    continue
                # A folder whose checks cannot answer (another version of the course's
                # code, a broken copy): nbgrader's kernel validates it, as before.
                self.log.warning("attention_validate: %s; validating %s in a kernel", exc,
                                 target.name)
        self.finish(json.dumps(self.validate_notebook(path, reply)))


def _jupyter_server_extension_points():
    return [{"module": "attention_validate"}]


def _load_jupyter_server_extension(serverapp):
    from jupyter_server.utils import url_path_join as ujoin

    webapp = serverapp.web_app
    webapp.settings["root_dir"] = serverapp.root_dir
    base_url = webapp.settings["base_url"]
    webapp.add_handlers(".*$", [
        (ujoin(base_url, "/assignments/validate"), ReplayValidateHandler),
        (ujoin(base_url, "/nbgrader_version"), NbGraderVersionHandler)])
    serverapp.log.info("attention_validate: Validate replays lesson notebooks (no kernel); "
                       "other notebooks run in nbgrader's kernel")
