"""A real IPython kernel driven as JupyterLab drives it, for the road tests.

JupyterLab (and Notebook 7) send each execution with the cell's id in the execute
request's metadata (``{"cellId": ...}``); nbclient sends none. :class:`LabKernel`
does either, in a folder that holds the student's saved notebook beside the
course's ``verify.py``, ``src/`` and ``data/``, and reads back what each check cell
showed: its points (the ``execute_result``) and the first line of each result.
"""

from __future__ import annotations

import json
import os
import queue
import re
import time
from pathlib import Path

from jupyter_client import KernelManager

ROOT = Path(__file__).resolve().parent.parent


class LabKernel:
    """A kernel started in ``folder`` (made ready: the course's files linked in)."""

    def __init__(self, folder: Path, notebook: str = "lesson.ipynb"):
        self.folder = Path(folder)
        for name in ("verify.py", "src", "data"):
            link = self.folder / name
            if not link.exists():
                link.symlink_to(ROOT / name)
        env = {**os.environ, "JPY_SESSION_NAME": str(self.folder / notebook),
               "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
        env.pop("PYTHONPATH", None)
        # IPC sockets in the folder, as verify.py's CLI does: no TCP port, no TCP warning
        self.km = KernelManager(kernel_name="python3", transport="ipc",
                                ip=str(self.folder / "kernel"))
        self.km.start_kernel(cwd=str(self.folder), env=env)
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=120)

    def run(self, source: str, cell_id: str | None = None, timeout: float = 120) -> dict:
        """Execute ``source`` (with ``cell_id`` in the request's metadata, as JupyterLab
        sends it; None: as nbclient). Returns {"error": (ename, evalue) or None,
        "result": the execute_result's text, "texts": [display text/plain, ...]}."""
        content = {"code": source, "silent": False, "store_history": True,
                   "user_expressions": {}, "allow_stdin": False, "stop_on_error": False}
        msg = self.kc.session.msg("execute_request", content,
                                  metadata={"cellId": cell_id} if cell_id else {})
        self.kc.shell_channel.send(msg)
        ident = msg["header"]["msg_id"]
        out = {"error": None, "result": None, "texts": [], "stream": ""}
        deadline = time.monotonic() + timeout
        while True:
            try:
                m = self.kc.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                raise TimeoutError(f"no answer within {timeout} s to {source[:60]!r}") from None
            if m["parent_header"].get("msg_id") != ident:
                continue
            kind, c = m["msg_type"], m["content"]
            if kind == "status" and c["execution_state"] == "idle":
                break
            if kind == "error":
                out["error"] = (c["ename"], c["evalue"])
            elif kind == "execute_result":
                out["result"] = c["data"].get("text/plain")
            elif kind == "display_data":
                out["texts"].append(c["data"].get("text/plain", ""))
            elif kind == "stream":
                out["stream"] += c.get("text", "")
        self.kc.get_shell_msg(timeout=timeout)  # (the execute_reply)
        return out

    def restart(self):
        """Restart the kernel, as the Kernel menu does: a fresh process, nothing run."""
        self.km.restart_kernel(now=True)
        self.kc.wait_for_ready(timeout=120)

    def close(self):
        try:
            self.kc.stop_channels()
        finally:
            self.km.shutdown_kernel(now=True)


def results_of(shown: dict) -> list[tuple[str, str]]:
    """[(points, first line of the message)] of each CheckResult a check cell displayed
    (its plain-text form: ``[PASS] title: 2/2 points`` then the message, indented)."""
    out = []
    for text in shown["texts"]:
        m = re.match(r"\[(PASS|FAIL)\] .*?: ([0-9.]+)/([0-9.]+) points\n  (.*)", text)
        if m:
            out.append((float(m.group(2)), m.group(4)))
    return out


def write_notebook(path: Path, nb) -> None:
    """Save ``nb`` (a dict or nbformat node) as the student's notebook file."""
    path.write_text(json.dumps(nb), encoding="utf-8")
