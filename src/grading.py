"""Secure autograding: nbgrader preprocessors that nbgrader_config.py puts in its pipeline.

``nbgrader autograde`` normally executes a submission with the instructor's
rights and takes each test cell's score from what the student's own kernel
printed. Here (see docs/internals.md, "Secure grading") no kernel runs at all:

1. :class:`RefuseUnsafeSubmission` (first sanitizing step) refuses a
   submission that holds a symlink or a special file anywhere.
2. :class:`SubmittedOutputs` (in nbgrader's ``Execute``'s place) keeps the
   outputs the notebook was submitted with, capped per cell, and records the
   score each check cell showed. Nothing the student's notebook says is a score.
3. :class:`TrustedScores` (in the instructor's process) takes each check cell's
   score from the one road (``src/road.py``): each step cell's own code replayed
   in the sandboxed fork server (``src/replay.py``) and judged with the
   instructor's judge (in a child with its own limits). It replaces each check
   cell's outputs with that result and a text table of each figure the lesson
   draws there; the figures' numbers go to ``grading_report.json`` and
   :class:`DrawFigures` draws them into the feedback. Where the submitted notebook
   showed another score, the instructor is told ("shown 9/9, verified 0/9").
4. :class:`RevealInvisibles` shows bidi and invisible format characters as
   ``⟦U+202E⟧`` in the stored notebook and names them in the report.
5. :class:`SafeOutputs` (autograde and feedback) keeps only inert output types
   and stores markdown in a form no later render revives (src/safe_html.py).
6. :class:`ClearStudentMetadata` (autograde and feedback) keeps only the notebook and
   cell metadata grading needs (an allow-list): no widget state, no unknown key.

Shape legend: not applicable (no tensors here).
"""

from __future__ import annotations

import atexit
import base64
import fnmatch
import json
import os
import shutil
import stat
import time
import unicodedata
from pathlib import Path

from nbconvert.preprocessors import ClearMetadataPreprocessor
from nbformat import from_dict
from nbformat.v4 import new_output
from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Float, Integer, List, Unicode

from src import safe_html
from src import sandbox as sb
from src import visualizations as viz
from src.layout import SHIPPED, course_dir

ROOT = Path(__file__).resolve().parent.parent
#: The file beside each autograded notebook with the trusted step's findings.
REPORT_NAME = "grading_report.json"
UNSAFE_ENV = "ATTENTION_UNSAFE_GRADING"
_KEY = "attention_grading"  # our entry in nbconvert's resources
#: Output types the feedback may show (no HTML, JavaScript or SVG from a student).
SAFE_MIME = ("text/plain", "image/png", "image/jpeg")


class GradingError(Exception):
    """A submission that cannot be graded; the message is the reason shown to the instructor."""


def _lesson(resources=None, assignment: str = ""):
    """The spec of the lesson graded: the one named as the nbgrader assignment, else the
    first lesson (an assignment named otherwise)."""
    from src import lessons

    name = assignment or (resources or {}).get("nbgrader", {}).get("assignment", "")
    return lessons.LESSONS.get(name) or lessons.lesson()


def unsafe_requested() -> bool:
    return os.environ.get(UNSAFE_ENV, "") not in ("", "0")


# ------------------------------------------------------------------ inputs
def submission_problems(folder: Path) -> list[str]:
    """Symlinks and special files anywhere below ``folder`` (its own name included)."""
    problems = []
    if folder.is_symlink():
        return [f"{folder.name} is a symlink"]
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            mode = p.lstat().st_mode
            rel = p.relative_to(folder)
            if stat.S_ISLNK(mode):
                problems.append(f"{rel} is a symlink (to {os.readlink(p)})")
            elif not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                problems.append(f"{rel} is not a regular file")
    return problems


def id_problem(student: str) -> str | None:
    """Why a student id cannot be used literally, or None."""
    if not student or student in (".", ".."):
        return f"student id {student!r} is not a name"
    bad = sorted({ch for ch in student if ch in "*?[]/\\" or not ch.isprintable()})
    if bad:
        return (f"student id {student!r} contains {' '.join(repr(c) for c in bad)}: nbgrader "
                "would read it as a file pattern and grade other students; rename the folder")
    return None


def lookalike_groups(students) -> list[list[str]]:
    """Ids that become equal after Unicode NFKC normalisation and case folding."""
    groups = {}
    for s in students:
        groups.setdefault(unicodedata.normalize("NFKC", s).casefold(), []).append(s)
    return [sorted(g) for g in groups.values() if len(g) > 1]


def notebook_size_problem(path: Path, cap_mb: int) -> str | None:
    """Why the notebook at ``path`` is too big to grade, or None (read before parsing it:
    a 120 MB notebook grows its grading process by half a gigabyte)."""
    try:
        size = path.stat().st_size
    except OSError:
        return None
    if size > cap_mb * 10**6:
        return (f"{path.name} is {size:,} bytes, over the cap of {cap_mb} MB "
                "(c.RefuseUnsafeSubmission.max_notebook_mb)")
    return None


class RefuseUnsafeSubmission(NbGraderPreprocessor):
    """Sanitizing step: a submission with a symlink, a special file, an id that is a
    pattern, or a notebook over the size or cell caps is refused with the reason (nbgrader
    then reports the student as failed)."""

    max_notebook_mb = Integer(sb.LIMITS.notebook_mb, help="largest notebook file graded "
                              "(MB)").tag(config=True)
    max_cells = Integer(sb.LIMITS.max_cells, help="most cells a graded notebook may have"
                        ).tag(config=True)

    def preprocess(self, nb, resources):
        info = resources.get("nbgrader", {})
        meta = resources.get("metadata", {})
        folder = Path(meta.get("path", "."))
        problem = id_problem(info.get("student", ""))
        problems = ([problem] if problem else []) + submission_problems(folder)
        size = notebook_size_problem(folder / f"{meta.get('name', '')}.ipynb",
                                     self.max_notebook_mb)
        if size:
            problems.append(size)
        if len(nb.cells) > self.max_cells:
            problems.append(f"the notebook has {len(nb.cells)} cells, over the cap of "
                            f"{self.max_cells} (c.RefuseUnsafeSubmission.max_cells)")
        for index, cell in enumerate(nb.cells):
            md = cell.get("metadata", {}).get("nbgrader")
            if md and not (isinstance(md, dict) and md.get("grade_id")):
                start = " ".join(str(cell.get("source", "")).split())[:40]
                problems.append(f"nbgrader cell does not have a grade_id (cell #{index}, "
                                f"starting {start!r}): its nbgrader metadata was copied or "
                                "edited")
        if problems:
            raise GradingError("refused: " + "; ".join(problems))
        return nb, resources


# ------------------------------------------------------------- copied files
def copy_ignore(root: Path) -> list[str]:
    """``CourseDirectory.ignore`` entries under which nbgrader copies nothing of a
    submission (into autograded/) or of an autograded folder (into feedback/) but the
    notebooks it converts: each names the folders themselves (nbgrader's walk then skips
    them whole, in one glob, however many files they hold). :class:`CopyAllowedFiles`
    brings what the instructor allows."""
    import glob as globmod

    base = globmod.escape(str(root))
    return [f"{base}/{folder}/{student}/{assignment}" for folder in ("submitted", "autograded")
            for student in ("*", ".*") for assignment in ("*", ".*")]


#: Where the files beside a notebook go, by the folder nbgrader converts from.
_COPY_INTO = {"submitted": "autograded", "autograded": "feedback"}


class CopyAllowedFiles(NbGraderPreprocessor):
    """Sanitizing (autograde) and feedback step: copy the files beside the notebook that
    ``patterns`` allow (an allow-list; empty by default, nbgrader_config.py) from the
    submission into autograded/, and from there into feedback/. Regular files only, at
    most ``max_files`` files and ``max_kb`` KiB in all; the rest is left behind, logged."""

    patterns = List(Unicode(), [], help="fnmatch patterns of paths relative to the "
                    "submission folder (e.g. 'figures/*.png')").tag(config=True)
    max_files = Integer(20, help="files copied per submission at most").tag(config=True)
    max_kb = Integer(4096, help="KiB copied per submission at most").tag(config=True)

    #: nbgrader's own files beside the notebook (the submission's time and secret): its
    #: exchange's release_feedback reads them from feedback/, so they always travel.
    always = ("timestamp.txt", "submission_secret.txt")

    def preprocess(self, nb, resources):
        allowed = [*self.patterns, *self.always]
        folder = Path(resources.get("metadata", {}).get("path", "."))
        into = _COPY_INTO.get(folder.parent.parent.name)
        if into is None:
            return nb, resources
        dest = folder.parent.parent.parent / into / folder.parent.name / folder.name
        budget, count = self.max_kb * 1024, 0
        for path in sorted(folder.rglob("*")):
            rel = path.relative_to(folder).as_posix()
            if (path.is_symlink() or not path.is_file() or rel.endswith(".ipynb")
                    or not any(fnmatch.fnmatch(rel, p) for p in allowed)):
                continue
            size = path.stat().st_size
            if count >= self.max_files or size > budget:
                self.log.warning("not copied: %s (over %d files or %d KiB, "
                                 "CopyAllowedFiles.max_files/max_kb)", rel, self.max_files,
                                 self.max_kb)
                continue
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target, follow_symlinks=False)
            budget, count = budget - size, count + 1
        return nb, resources


# ------------------------------------------------------------ no execution
class SubmittedOutputs(NbGraderPreprocessor):
    """Autograde step in nbgrader's Execute's place: no kernel runs. Each score comes
    from the replay of the step cells' own code (:class:`TrustedScores`); the outputs
    the student's notebook was submitted with stay, as the student saw them (SafeOutputs
    then keeps only their inert types), at most ``output_kb`` per cell (the rest is cut
    with a note). The score each check cell showed is recorded, for the instructor's
    "shown 9/9, verified 0/9" line."""

    output_kb = Integer(sb.LIMITS.output_kb, help="stored output per cell (KiB)"
                        ).tag(config=True)

    def preprocess(self, nb, resources):
        cells = set(_lesson(resources).by_test)
        state = {"shown": {}, "stopped": None}
        for cell in nb.cells:
            if cell.cell_type != "code":
                continue
            cell.outputs = self._capped(cell.get("outputs", []))
            md = cell.metadata.get("nbgrader", {})
            gid = md.get("grade_id")
            if md.get("grade") and gid in cells:
                state["shown"][gid] = _shown_score(cell)
        resources[_KEY] = state
        return nb, resources

    def _capped(self, outputs) -> list:
        kept, used = [], 0
        for out in outputs:
            used += len(json.dumps(out, default=str))
            if used > self.output_kb * 1024:
                # A display, not a stream: nbgrader's LimitOutput merges streams and cuts
                # them to 1000 lines, which would drop the note.
                kept.append(new_output("display_data", data={
                    "text/plain": f"[output cut: this cell's submitted output is over "
                                  f"{self.output_kb} KiB]"}))
                break
            kept.append(out)
        return kept


def _first_finding(text: str) -> str:
    """What the verified result found first (its mistake's title, or its first failing
    line), for the instructor's line on a shown-versus-verified difference."""
    lines = [ln.strip() for ln in text.splitlines()]
    found = next((ln for ln in lines if ln.startswith(("Mistake:", "Not graded:"))), "")
    found = found or next((ln for ln in lines[1:] if ln and not ln.startswith("[")), "")
    return found.partition(". Next step")[0][:160]


def _shown_score(cell) -> float | None:
    for out in cell.get("outputs", []):
        if out.get("output_type") == "execute_result":
            try:
                return float(out.get("data", {}).get("text/plain", ""))
            except ValueError:
                return None
    return None


# -------------------------------------------------------------- trusted side
JUDGE_SECONDS = sb.LIMITS.judge_seconds
JUDGE_MEMORY = int(sb.LIMITS.judge_memory_gb * 2**30)


def judge_isolated(grade_id, data, own=None, *, strict=True, seconds=JUDGE_SECONDS,
                   memory=JUDGE_MEMORY, judge=None):
    """The Summary of ``judge(grade_id, data, own, strict=True)`` (default: the
    instructor's judge_replay), computed in a forked child with an address-space limit and
    a deadline: the data came from student code, and no data may cost the grader more than
    this. Raises GradingError."""
    import resource
    import select
    import signal

    from src.checks.judge import judge_replay
    from src.checks.results import Summary

    judge = judge or judge_replay
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: judge, send the result, exit
        code = 0
        try:
            os.close(read)
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
            out = judge(grade_id, data, own, strict=True).to_dict(values=True)
        except BaseException as exc:  # noqa: BLE001  (reported to the parent)
            out, code = f"{type(exc).__name__}", 1
        try:
            payload = json.dumps(out).encode()
            while payload:
                payload = payload[os.write(write, payload):]
        finally:
            os._exit(code)
    os.close(write)
    chunks, deadline = [], time.monotonic() + seconds
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([read], [], [], left)[0]:
                os.kill(pid, signal.SIGKILL)
                raise GradingError(f"checking this data took over {seconds} s")
            chunk = os.read(read, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(read)
        os.waitpid(pid, 0)
    try:
        out = json.loads(b"".join(chunks))
    except ValueError:
        raise GradingError("checking this data failed (out of memory?)") from None
    if isinstance(out, str):
        raise GradingError(f"checking this data failed ({out})")
    return Summary.from_dict(out)


#: This process's replay and judge limits (src/limits.py, overridden by
#: c.TrustedScores in nbgrader_config.py through :func:`configure`).
_CONFIGURED = dict(run_seconds=sb.LIMITS.replay_run_seconds,
                   student_seconds=sb.LIMITS.replay_student_seconds,
                   judge_seconds=sb.LIMITS.judge_seconds,
                   judge_memory_gb=sb.LIMITS.judge_memory_gb,
                   memory_gb=sb.LIMITS.memory_gb, processes=sb.LIMITS.processes,
                   file_mb=sb.LIMITS.file_mb, tmp_mb=sb.LIMITS.tmp_mb)


#: configure()'s keys -> TrustedScores' traits (nbgrader_config.py's c.TrustedScores).
TRUSTED_TRAITS = {"run_seconds": "replay_run_seconds",
                  "student_seconds": "replay_student_seconds",
                  "judge_seconds": "judge_seconds", "judge_memory_gb": "judge_memory_gb",
                  "memory_gb": "memory_gb", "processes": "processes", "file_mb": "file_mb",
                  "tmp_mb": "tmp_mb"}


def configure(**limits) -> None:
    """Set this process's replay and judge limits (keys of :data:`_CONFIGURED`); a replay
    server started before keeps the limits it was started with."""
    unknown = set(limits) - set(_CONFIGURED)
    if unknown:
        raise ValueError(f"unknown limits {sorted(unknown)}; expected {sorted(_CONFIGURED)}")
    _CONFIGURED.update({k: float(v) for k, v in limits.items()})


def _sandbox_limits() -> sb.Limits:
    """The replay sandbox's limits as configured (c.TrustedScores)."""
    import dataclasses

    return dataclasses.replace(sb.LIMITS, memory_gb=float(_CONFIGURED["memory_gb"]),
                               processes=int(_CONFIGURED["processes"]),
                               file_mb=int(_CONFIGURED["file_mb"]),
                               tmp_mb=int(_CONFIGURED["tmp_mb"]))


def _judge_or_say(grade_id, data, own=None, *, strict=True):
    """:func:`judge_isolated`, or a Summary that says why this cell was not graded."""
    from src import lessons
    from src.checks.results import Summary
    from src.checks.verdict import _failed

    try:
        return judge_isolated(grade_id, data, own, seconds=_CONFIGURED["judge_seconds"],
                              memory=int(_CONFIGURED["judge_memory_gb"] * 2**30))
    except GradingError as exc:
        _, step = lessons.by_cell(grade_id)
        return Summary([_failed(c, f"Not graded: {exc}.") for c in step.checks])


# ------------------------------------------------------------------ replay
_REPLAY: dict = {}  # (assignment, sandboxed, slot) -> a replay server of this process
#: Which of the run's servers this process uses: a grading worker takes the one of its
#: slot, so no submission ever waits for another's replay (no class-wide lock).
_SLOT = [0]


def setup_sources(assignment: str = "") -> list[str]:
    """The release's set-up cells (the lesson spec's ``setup_cells``), from the
    instructor's source notebook (course/source/<assignment>/<notebook>.ipynb, else the
    lesson's reference in the repository): never from a submission."""
    import nbformat

    from src import road

    lesson = _lesson(assignment=assignment)
    for path in (course_dir() / "source" / assignment / f"{lesson.notebook}.ipynb",
                 ROOT / f"{lesson.source}.ipynb"):
        if assignment == "" and "source" in path.parts:
            continue
        if path.is_file():
            found = road.setup_sources(lesson, road.notebook_cells(
                nbformat.read(path, as_version=4)))
            if found is not None:
                return found
    raise GradingError(f"no set-up cells {', '.join(lesson.setup_cells)} in the course's "
                       "source")


def shipped_files(assignment: str = "") -> dict:
    """verify.py, src/, data/ as released: course/source/<assignment>/ (else the repo)."""
    base = course_dir() / "source" / assignment
    if not assignment or not all((base / n).exists() for n in SHIPPED):
        base = ROOT
    return {n: base / n for n in SHIPPED}


def use_slot(slot: int) -> None:
    """In a forked grading worker: use the replay server of worker slot ``slot``."""
    _SLOT[0] = slot


def start_replay_servers(assignment: str = "", slots: int = 1,
                         unsafe: bool | None = None) -> None:
    """Start one replay server per worker slot, all at once (each imports torch), from
    this thread (a server dies with the thread that started it)."""
    started = [replay_server(assignment, unsafe, slot=s, wait=False)
               for s in range(max(1, slots))]
    for server in started:
        if not getattr(server, "ready", True):
            server.wait_ready()
            server.ready = True


def replay_server(assignment: str = "", unsafe: bool | None = None, fresh: bool = False,
                  slot: int | None = None, wait: bool = True):
    """This process's replay fork server for ``assignment`` and worker slot ``slot``
    (default: this process's, see :func:`use_slot`), started on first use; a forked
    grading worker inherits its parent's. ``wait=False``: not waited for yet (its
    ``ready`` is False until :meth:`wait_ready`)."""
    from src.replay import ReplayServer

    unsafe = unsafe_requested() if unsafe is None else unsafe
    key = (assignment, not unsafe, _SLOT[0] if slot is None else slot)
    server = _REPLAY.get(key)
    if server is not None and (fresh or not server.alive()):
        server.close() if server.owner == os.getpid() else None
        server = None
    if server is None:
        if not unsafe:
            reason = sb.unavailable_reason()
            if reason:
                raise GradingError(f"cannot sandbox the replay: {reason}")
        server = ReplayServer(_lesson(assignment=assignment), setup_sources(assignment),
                              shipped_files(assignment), sandboxed=not unsafe, wait=wait,
                              run_seconds=_CONFIGURED["run_seconds"],
                              student_seconds=_CONFIGURED["student_seconds"],
                              limits=_sandbox_limits())
        server.owner, server.ready = os.getpid(), wait
        if not _REPLAY:  # (its folder would outlive a process that never closed it)
            atexit.register(close_replay_servers)
        _REPLAY[key] = server
    return server


def close_replay_servers():
    """Stop the replay servers this process started."""
    for key, server in list(_REPLAY.items()):
        if server.owner == os.getpid():
            server.close()
        del _REPLAY[key]


def replay_steps(steps: dict, assignment: str = "", unsafe: bool | None = None) -> dict:
    """The replay server's answer for one submission's step cells {step cell id: source}:
    {step cell id: data or why none, "own:"+id: data} (src/replay.py)."""
    import fcntl

    from src.replay import ReplayTamperedError

    for attempt in (0, 1):
        server = replay_server(assignment, unsafe, fresh=attempt == 1)
        # (a slot's server serves one worker at a time; the lock guards other callers)
        fd = os.open(server.box.root / "lock", os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            return server.replay(steps)
        except ReplayTamperedError as exc:
            # The server stopped before any other submission met the tampered set-up; the
            # next one gets a fresh server.
            raise GradingError(f"not graded: this submission's code tampered with the "
                               f"replay server ({exc}); no other submission was replayed "
                               "on what it changed. Look at this notebook.") from None
        except RuntimeError as exc:
            if attempt:
                raise GradingError(f"the replay failed twice ({exc})") from None
        finally:
            os.close(fd)
    return {}


def grade_notebook(nb, assignment: str = "", unsafe: bool | None = None):
    """The road's verdicts (src/road.py) on a submitted notebook: its step cells' own
    code, replayed in the sandboxed fork server and judged in a child of this process."""
    from src import road

    lesson = _lesson(assignment=assignment)
    cells = road.notebook_cells(nb)
    return road.verdicts(lesson, road.step_sources(lesson, cells),
                         lambda steps: replay_steps(steps, assignment, unsafe),
                         cells=cells, judge=_judge_or_say)


class TrustedScores(NbGraderPreprocessor):
    """Each check cell's score from the road (src/road.py): a trusted replay of its step
    cell's own code, judged in the instructor's process."""

    replay_run_seconds = Float(sb.LIMITS.replay_run_seconds, help="the replay: one cell "
                               "run (wall; CPU too)").tag(config=True)
    replay_student_seconds = Float(sb.LIMITS.replay_student_seconds, help="the replay: all "
                                   "of one submission's runs").tag(config=True)
    judge_seconds = Float(sb.LIMITS.judge_seconds, help="the judge of one check cell, in a "
                          "child").tag(config=True)
    judge_memory_gb = Float(sb.LIMITS.judge_memory_gb, help="the judge's address space "
                            "(GiB)").tag(config=True)
    memory_gb = Float(sb.LIMITS.memory_gb, help="the replay sandbox: address space per "
                      "process (GiB)").tag(config=True)
    processes = Integer(sb.LIMITS.processes, help="the replay sandbox: tasks").tag(config=True)
    file_mb = Integer(sb.LIMITS.file_mb, help="the replay sandbox: largest file written (MiB)"
                      ).tag(config=True)
    tmp_mb = Integer(sb.LIMITS.tmp_mb, help="the replay sandbox: size of /tmp and the "
                     "working directory (MiB)").tag(config=True)

    def preprocess(self, nb, resources):
        configure(**{key: getattr(self, trait) for key, trait in TRUSTED_TRAITS.items()})
        state = resources.get(_KEY)
        if state is None:
            raise GradingError("TrustedScores needs SubmittedOutputs before it in "
                               "Autograde.autograde_preprocessors")
        assignment = resources.get("nbgrader", {}).get("assignment", "")
        found = grade_notebook(nb, assignment)
        rows, drawn = [], {}
        for cell in nb.cells:
            md = cell.metadata.get("nbgrader", {})
            gid = md.get("grade_id")
            if not (cell.cell_type == "code" and md.get("grade") and gid in found.summaries):
                continue
            summary = found.summaries[gid]
            score, max_score = float(summary.score), float(summary.max_score)
            text, markdown = str(summary), summary._repr_markdown_()
            shown = state["shown"].get(gid)
            rows.append({"cell": gid, "verified": score, "max": max_score, "shown": shown})
            if gid in found.seeds:
                rows[-1]["second_run_seed"] = found.seeds[gid]  # (to reproduce it)
            if score < max_score:
                rows[-1]["verified_says"] = _first_finding(text)
            # The verdict, a text table of each figure the lesson draws here (the
            # figures themselves are drawn into the feedback, DrawFigures), the score.
            figures = viz.check_figures(found.lesson, summary.results)
            if figures:
                drawn[gid] = [{k: (f[k].tolist() if k == "matrix" else f[k]) for k in f}
                              for f in figures]
            cell.outputs = [
                new_output("display_data",
                           data={"text/plain": text, "text/markdown": markdown}),
                *(new_output("stream", name="stdout", text=f["table"] + "\n")
                  for f in figures),
                new_output("execute_result", data={"text/plain": repr(score)},
                           execution_count=cell.get("execution_count")),
            ]
        self._report(rows, state, resources, drawn)
        return nb, resources

    def _report(self, rows, state, resources, figures):
        differ = [r for r in rows
                  if r["shown"] is not None and abs(r["shown"] - r["verified"]) > 1e-9]
        student = resources.get("nbgrader", {}).get("student", "?")
        if differ:
            shown = sum(r["shown"] if r["shown"] is not None else 0.0 for r in rows)
            verified = sum(r["verified"] for r in rows)
            top = sum(r["max"] for r in rows)
            cells = "; ".join(f"{r['cell']} shown {r['shown']:g}, verified {r['verified']:g}"
                              + (f": {r['verified_says']}" if r.get("verified_says") else "")
                              for r in differ)
            self.log.warning("%s: shown %g/%g, verified %g/%g (%s)", student, shown, top,
                             verified, top, cells)
        else:  # (the line the Formgrader's log of one student's autograde is read for)
            lost = "; ".join(f"{r['cell']} {r['verified']:g}/{r['max']:g}"
                             + (f": {r['verified_says']}" if r.get("verified_says") else "")
                             for r in rows if r["verified"] < r["max"])
            self.log.info("%s: verified %g/%g%s", student, sum(r["verified"] for r in rows),
                          sum(r["max"] for r in rows), f" ({lost})" if lost else "")
        path = resources.get("metadata", {}).get("path")
        if path:
            report = Path(path) / REPORT_NAME
            if report.exists() or report.is_symlink():
                report.unlink()
            report.write_text(json.dumps({"student": student, "cells": rows,
                                          "stopped": state["stopped"],
                                          "notes": state.get("notes", []),
                                          "figures": figures}, indent=1))


# ------------------------------------------------------------------ feedback
#: HTML a markdown cell may keep (src/safe_html.py: the lesson's hints use details/summary).
SAFE_TAGS = tuple(sorted(safe_html.TAGS))


def safe_markdown(source: str, attachments=None) -> str:
    """A markdown cell in the inert form that autograded notebooks store (src/safe_html.py):
    no script, event handler, class, style, id, remote image, or link to anything but
    http(s)/mailto, whatever markdown or HTML syntax produced it, and nothing a second
    markdown render can revive."""
    return safe_html.stored_markdown(source, attachments)


def _safe_output(out) -> dict | None:
    """A copy of one output with only inert, well-formed fields (the template puts some of
    them into attributes), or None when nothing of it may be shown."""
    kind = out.get("output_type")
    if kind == "stream":
        name = out.get("name") if out.get("name") in ("stdout", "stderr") else "stdout"
        return new_output("stream", name=name, text=str(out.get("text", "")))
    if kind == "error":
        return new_output("error", ename=str(out.get("ename", "")),
                          evalue=str(out.get("evalue", "")),
                          traceback=[str(t) for t in out.get("traceback", [])])
    if kind not in ("display_data", "execute_result"):
        return None
    data = {}
    for mime, value in out.get("data", {}).items():
        if mime == "text/plain":
            data[mime] = value if isinstance(value, str) else "".join(map(str, value))
        elif mime in SAFE_MIME and isinstance(value, str) and safe_html.raster_ok(mime, value):
            data[mime] = "".join(value.split())
    if not data:
        return None
    if kind == "execute_result":
        count = out.get("execution_count")
        return new_output(kind, data=data,
                          execution_count=count if isinstance(count, int) else None)
    return new_output(kind, data=data)


class SafeOutputs(NbGraderPreprocessor):
    """Autograde and feedback step: keep only inert outputs (text, real PNG/JPEG; no HTML,
    JavaScript, SVG or widgets) and store markdown and raw cells in the inert form of
    src/safe_html.py (the Formgrader renders stored markdown again, unsanitised)."""

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "markdown":
            cell.source = safe_markdown(cell.source, cell.get("attachments"))
        elif cell.cell_type == "raw":  # raw cells pass HTML through untouched: drop the type
            cell.metadata.pop("raw_mimetype", None)
            cell.metadata.pop("format", None)
            if not safe_html.is_stored_form(cell.source):
                cell.source = safe_html.inert_text(cell.source)
        if cell.cell_type == "code":
            cell.outputs = [o for o in map(_safe_output, cell.get("outputs", [])) if o]
        cell.pop("attachments", None)  # safe images are inlined in the markdown
        return cell, resources


class DrawFigures(NbGraderPreprocessor):
    """Feedback step: draw the heatmaps of each check cell from the numbers grading stored
    (grading_report.json beside the autograded notebook), each before its text table,
    with its text alternative. Grading itself draws nothing (about 0.1 s a figure)."""

    def preprocess(self, nb, resources):
        path = Path(resources.get("metadata", {}).get("path", ".")) / REPORT_NAME
        try:
            figures = json.loads(path.read_text()).get("figures") or {}
        except (OSError, ValueError, AttributeError):
            figures = {}
        if not isinstance(figures, dict) or not figures:
            return nb, resources
        for cell in nb.cells:
            gid = cell.metadata.get("nbgrader", {}).get("grade_id")
            wanted = figures.get(gid) if cell.cell_type == "code" else None
            if isinstance(wanted, list) and wanted:
                cell.outputs = self._with_figures(cell.get("outputs", []), wanted)
        return nb, resources

    def _with_figures(self, outputs, figures) -> list:
        drawn = []
        for fig in figures:
            try:
                labels = [str(t) for t in fig["labels"]] if fig.get("labels") else None
                mat = viz.drawable(fig["matrix"], labels)
                title, label = str(fig["title"]), str(fig["value_label"])
                alt, table = str(fig["alt"]), str(fig["table"])
            except (KeyError, TypeError, ValueError):
                continue
            if mat is None:
                continue
            png = viz.figure_png({"matrix": mat, "labels": labels, "title": title,
                                  "value_label": label})
            drawn.append((table, new_output(
                "display_data", data={"image/png": base64.b64encode(png).decode()},
                metadata={"image/png": {"alt": alt}})))
        tables = {t + "\n" for t, _ in drawn}
        rest = [o for o in outputs if not (o.get("output_type") == "stream"
                                           and o.get("text") in tables)]
        pairs = [o for t, img in drawn
                 for o in (img, new_output("stream", name="stdout", text=t + "\n"))]
        return rest[:1] + pairs + rest[1:]


#: What grading keeps of a notebook's own metadata, as key paths (nbconvert's mask form): the
#: kernel nbgrader runs and the language the pages highlight code in. Everything else a
#: student's file or kernel wrote there is dropped: widget state above all (nbclient stores
#: the state of every widget the kernel made, the lesson's explorer included; a page or
#: JupyterLab that restores an HTML widget sets its value as live HTML), titles, unknown keys.
KEPT_NOTEBOOK_METADATA = frozenset(
    [("kernelspec", k) for k in ("name", "display_name", "language")]
    + [("language_info", k) for k in ("name", "version", "mimetype", "file_extension",
                                      "pygments_lexer", "codemirror_mode",
                                      "nbconvert_exporter")])
#: ... and of each cell's: nbgrader's own (its schema, which CheckCellMetadata enforces at
#: the end of autograding, allows no other key) and the tags below.
KEPT_CELL_METADATA = frozenset(("nbgrader", "tags"))
#: Cell tags kept: the lesson's own (nbval's raises-exception on the step cells' stubs;
#: tests/test_grading.py checks that the lesson uses no other). nbconvert writes each tag
#: into the page as a class.
KEPT_TAGS = frozenset(("raises-exception",))


class ClearStudentMetadata(NbGraderPreprocessor, ClearMetadataPreprocessor):
    """Autograde and feedback step: keep only the metadata grading needs (the allow-lists
    above), of the notebook and of every cell, whatever its type.

    nbconvert's ClearMetadataPreprocessor filtering by the key paths above, always (its
    switches and masks are not read: the lists above are the one source), on markdown and
    raw cells too (it clears code cells only: nbconvert PR #2239, open), with tags also
    filtered by value, and enabled as an nbgrader step (nbconvert's is off by default, so
    listing it did nothing). Outputs and attachments are SafeOutputs' part."""

    def nested_masks(self, mask):
        """{key: its sub-paths}. nbconvert 7.17's keeps one sub-path per key (a dict
        comprehension), so ("kernelspec", "name") would lose ("kernelspec", "language")."""
        nested = {}
        for path in mask:
            if not isinstance(path, str) and len(path) > 1:
                nested.setdefault(path[0], set()).add(tuple(path[1:]))
        return nested

    def preprocess_cell(self, cell, resources, index):
        meta = dict(self.nested_filter(cell.metadata.items(), KEPT_CELL_METADATA))
        tags = meta.pop("tags", None)
        tags = [t for t in tags if t in KEPT_TAGS] if isinstance(tags, list) else []
        if tags:
            meta["tags"] = tags
        cell.metadata = from_dict(meta)
        return cell, resources

    def preprocess(self, nb, resources):
        for index, cell in enumerate(nb.cells):
            self.preprocess_cell(cell, resources, index)
        nb.metadata = from_dict(dict(self.nested_filter(nb.metadata.items(),
                                                        KEPT_NOTEBOOK_METADATA)))
        return nb, resources


class RevealInvisibles(NbGraderPreprocessor):
    """Autograde step: bidi controls and invisible format characters in a cell (code that
    displays differently from how it runs, "Trojan Source") are shown as ``⟦U+202E⟧`` in
    the stored notebook, after the kernel ran it, and named in grading_report.json."""

    def preprocess(self, nb, resources):
        notes = []
        for index, cell in enumerate(nb.cells):
            cell.source, found = safe_html.reveal_invisibles(cell.source)
            if found:
                notes.append(f"cell #{index} ({cell.cell_type}) holds invisible or "
                             f"bidirectional characters, now shown as \u27e6U+....\u27e7: "
                             f"{', '.join(found)}")
        resources.setdefault(_KEY, {}).setdefault("notes", []).extend(notes)
        return nb, resources
