"""nbgrader's Validate without a kernel: a notebook's step cells on the one road, warm.

The Validate button (nbgrader's lab extension) asks the student's own Jupyter server;
``attention_validate.py`` (the server extension) hands a lesson notebook to a worker
of this module, one per course folder, started on the first Validate and kept until
the server stops. The worker keeps one replay fork server warm (``src/replay.py``,
sandboxed when bubblewrap works here, as ``python verify.py NOTEBOOK`` runs it) and
answers each request with every check cell's verdict from ``src/road.py``: the
points and words grading gives the same cells. Nothing is shared between users: each
server runs its own worker, as its own user.

Protocol (``python -m src.validate serve``, ``ATTENTION_VALIDATE_IDLE`` seconds in its
environment): one JSON object a line on stdin, ``{"id": str, "path": notebook}``; one a
line on stdout, ``{"id", "lesson": name or null (not a lesson notebook), "cells": {check
cell id: {"score", "max_score", "text"}}}`` or ``{"id", "error": text}``. The worker exits
when stdin closes, or after that many seconds without a request (its replay server holds
about 250 MiB: a student who stopped validating gives it back; the next Validate starts a
worker again, cold).

Shape legend: not applicable (sources and verdicts; the tensors stay in the replay).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

#: The course's root: the verify.py, src/ and data/ the replay ships (as verify.py's).
HERE = Path(__file__).resolve().parent.parent


def read_notebook(path: Path) -> dict:
    """The notebook at ``path`` as JSON (nbformat's reader costs ~3 s of imports, more than
    the rest of a cold run: a lesson notebook is nbformat 4, read as plain JSON); a
    ValueError says what was expected and what was seen."""
    try:
        nb = json.loads(Path(path).read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"{Path(path).name} is not a notebook: not valid JSON ({exc})") \
            from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list) or \
            nb.get("nbformat") != 4:
        got = nb.get("nbformat") if isinstance(nb, dict) else type(nb).__name__
        raise ValueError(f"{Path(path).name}: expected a Jupyter notebook of nbformat 4 with "
                         f"a list of cells, got nbformat {got!r}")
    return nb


def lesson_of(cells):
    """The lesson whose set-up cells the notebook holds (cells [(label, source)]), or
    None."""
    from src import lessons

    labels = {label for label, _ in cells}
    for spec in lessons.LESSONS.values():
        if set(spec.setup_cells) <= labels:
            return spec
    return None


class WarmReplay:
    """One replay fork server kept between requests (restarted when a notebook's lesson or
    set-up cells differ from the ones it runs, or when it died).

    ``sandboxed``: None, inside bubblewrap when it works here (else a plain child
    process: the student's own code, run as the student, in a process of its own).
    """

    def __init__(self, sandboxed: bool | None = None):
        self.sandboxed, self.server, self.key = sandboxed, None, None

    def _server(self, lesson, setup):
        from src import replay, sandbox

        key = (lesson.name, tuple(setup))
        if self.server is not None and (self.key != key or not self.server.alive()):
            self.close()
        if self.server is None:
            sandboxed = self.sandboxed
            if sandboxed is None:
                sandboxed = sandbox.unavailable_reason() is None
            shipped = {n: HERE / n for n in ("verify.py", "src", "data")}
            self.server = replay.ReplayServer(lesson, setup, shipped, sandboxed=sandboxed)
            self.key = key
        return self.server

    def verdicts(self, nb: dict, seconds: float | None = None):
        """(lesson, the road's Verdicts) of notebook ``nb`` (JSON), or (None, None) when it
        is not a lesson notebook; ``seconds``: the replay's budget for the notebook (the
        server's per-student default, the one grading uses)."""
        from src import road

        cells = road.notebook_cells(nb)
        lesson = lesson_of(cells)
        if lesson is None:
            return None, None
        setup = road.setup_sources(lesson, cells)
        server = self._server(lesson, setup)
        found = road.verdicts(lesson, road.step_sources(lesson, cells),
                              lambda steps: server.replay(steps, seconds=seconds),
                              cells=cells)
        return lesson, found

    def close(self):
        if self.server is not None:
            self.server.close()
        self.server, self.key = None, None


def answer(warm: WarmReplay, request: dict) -> dict:
    """The worker's answer to one request (see the module's docstring); never raises."""
    from src.checks.util import _error_text

    out = {"id": request.get("id")}
    try:
        lesson, found = warm.verdicts(read_notebook(Path(str(request["path"]))))
    except Exception as exc:  # noqa: BLE001  (said to the student, the worker goes on)
        return out | {"error": _error_text(exc)}
    out["lesson"] = lesson.name if lesson is not None else None
    if found is not None:
        out["cells"] = {test: {"score": s.score, "max_score": s.max_score, "text": str(s)}
                        for test, s in found.summaries.items()}
    return out


def serve(stdin=None, stdout=None, idle_seconds: float | None = None) -> None:
    """The worker's loop (see the module's docstring)."""
    import select

    stdin, stdout = stdin or sys.stdin, stdout or sys.stdout
    warm = WarmReplay()
    try:
        while True:
            if idle_seconds is not None and not select.select([stdin], [], [],
                                                                idle_seconds)[0]:
                return  # (idle: the server's memory goes back)
            line = stdin.readline()
            if not line:
                return
            try:
                request = json.loads(line)
            except ValueError:
                request = None
            if not isinstance(request, dict):
                reply = {"id": None, "error": f"expected a JSON object, got {line[:80]!r}"}
            else:
                reply = answer(warm, request)
            stdout.write(json.dumps(reply) + "\n")
            stdout.flush()
    finally:
        warm.close()


if __name__ == "__main__":
    if sys.argv[1:] == ["serve"]:
        import os

        idle = os.environ.get("ATTENTION_VALIDATE_IDLE")
        serve(idle_seconds=float(idle) if idle else None)
    else:
        print("usage: [ATTENTION_VALIDATE_IDLE=seconds] python -m src.validate serve",
              file=sys.stderr)
        sys.exit(2)
