"""The nbgrader course behind the Makefile's instructor targets.

``python -m src.course release|grade|feedback|export`` (``make release``,
``make grade JOBS=N``, ``make feedback``, ``make export``). The course lives in
course/ (git-ignored):

    course/source/attention/     complete_lesson.ipynb as lesson.ipynb, verify.py, src/, data/
    course/source/multihead/     complete_multihead.ipynb as multihead.ipynb, the same files
    course/release/<assignment>/    what students get (nbgrader generate_assignment)
    course/submitted/<student>/attention/lesson.ipynb   what you collect (and multihead/...)
    course/autograded/, course/feedback/, course/gradebook.db, course/grades.csv

Every lesson of ``src/lessons`` is an assignment (its spec's name): the commands handle
each (``--assignment NAME``: one); the functions take ``assignment`` (lesson 1's by
default).

Parallel grading (nbgrader has none: its request #174 is open since 2015)
runs nbgrader's own autograder, ``NbGraderAPI.autograde`` (the code behind
``nbgrader autograde --student S``), for several students at once in forked
worker processes that import nbgrader once. They share the one SQLite
gradebook, which waits for a busy database instead of failing (see
nbgrader_config.py); the scores are those a sequential ``nbgrader autograde``
writes. Each kernel runs under an address-space limit, so a hostile
allocation fails in that student's notebook instead of exhausting the machine.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from nbgrader.preprocessors import ClearHiddenTests

from src.layout import (  # noqa: F401 (course_dir, NOTEBOOK...: read through course too)
    ASSIGNMENT,
    ASSIGNMENTS,
    NOTEBOOK,
    ROOT,
    SHIPPED,
    SOURCE_NOTEBOOK,
    course_dir,
    notebook_of,
    source_of,
)

# nbgrader runs the `alembic` command by name when it creates a gradebook; the one that
# belongs to this interpreter must be found even when .venv/bin is not on PATH.
_BIN = str(Path(sys.executable).parent)
if _BIN not in os.environ.get("PATH", "").split(os.pathsep):
    os.environ["PATH"] = _BIN + os.pathsep + os.environ.get("PATH", "")


class CourseError(Exception):
    """A failure with a message for the instructor."""


class StripHiddenTests(ClearHiddenTests):
    """Feedback preprocessor: hidden tests leave no trace (nbgrader #917, #1363).

    Autograded notebooks hold the hidden tests (they ran there), and nbgrader's
    feedback shows them. This removes the hidden region of each test cell and
    shortens the tracebacks of its errors to ``Name: message``, since a
    traceback quotes the failing line of the hidden test.
    """

    def preprocess_cell(self, cell, resources, cell_index):
        if cell.cell_type == "code" and self.begin_test_delimeter in cell.source:
            self._remove_hidden_test_region(cell)
            for out in cell.get("outputs", []):
                if out.get("output_type") == "error":
                    out["traceback"] = [f"{out['ename']}: {out['evalue']}"]
        return cell, resources


# ------------------------------------------------------------------ set-up
#: This run's overrides of nbgrader_config.py's limits (``make grade TIMEOUT=N BUDGET=N``),
#: set by :func:`grade` before it forks its workers, which inherit them.
_OVERRIDES: dict = {}


def load_config(timeout: float | None = None, budget: float | None = None):
    """nbgrader_config.py as a traitlets Config, with this run's overrides: ``timeout``
    (seconds of one step cell's replay, c.TrustedScores.replay_run_seconds) and
    ``budget`` (seconds of all of one submission's replays,
    c.TrustedScores.replay_student_seconds)."""
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", path=str(ROOT)).load_config()
    timeout = timeout if timeout is not None else _OVERRIDES.get("timeout")
    budget = budget if budget is not None else _OVERRIDES.get("budget")
    if timeout is not None:
        config.TrustedScores.replay_run_seconds = float(timeout)
    if budget is not None:
        config.TrustedScores.replay_student_seconds = float(budget)
    return config


def make_api(timeout: float | None = None, memory_gb: float | None = None):
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory

    config = load_config(timeout)
    if memory_gb is not None:
        config.TrustedScores.memory_gb = float(memory_gb)
    return NbGraderAPI(CourseDirectory(config=config), config=config)


def build_source(assignment: str = ASSIGNMENT) -> Path:
    """course/source/<assignment>/ from the repository (it is generated: never edit it)."""
    dest = course_dir() / "source" / assignment
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    shutil.copyfile(source_of(assignment), dest / f"{notebook_of(assignment)}.ipynb")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in SHIPPED:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=ignore)
        else:
            shutil.copyfile(src, dest / name)
    return dest


#: Written into the course directory: nbgrader run from there (its conventional root)
#: gets the repository's configuration, sandbox and trusted scoring included.
COURSE_CONFIG = '''"""Generated by `make release`: the repository's configuration."""
load_subconfig("nbgrader_config.py", path={root!r})  # noqa: F821
'''


def release(assignment: str = ASSIGNMENT) -> Path:
    """Build ``assignment``'s source and run nbgrader generate_assignment; return the
    release dir."""
    build_source(assignment)
    (course_dir() / "nbgrader_config.py").write_text(COURSE_CONFIG.format(root=str(ROOT)))
    (course_dir() / "exchange").mkdir(exist_ok=True)  # nbgrader's pages ask for one
    result = make_api().generate_assignment(assignment, force=True, create=True)
    if not result["success"]:
        raise CourseError("nbgrader generate_assignment failed:\n" + (result.get("log") or "")
                          + (result.get("error") or ""))
    return course_dir() / "release" / assignment


# ----------------------------------------------------------------- grading
def submitted_students(assignment: str = ASSIGNMENT) -> list[str]:
    """Every folder of submitted/ with an entry for ``assignment`` (a symlinked one too: it
    is then refused by name instead of silently skipped)."""
    base = course_dir() / "submitted"
    if not base.is_dir():
        return []
    return sorted(p.name for p in base.iterdir() if (p / assignment).exists())


def tree_digest(path: Path) -> str:
    """sha256 over the names and bytes of every file below ``path``."""
    h = hashlib.sha256()
    for p in sorted(path.rglob("*")):
        h.update(str(p.relative_to(path)).encode())
        if p.is_file() and not p.is_symlink():
            h.update(p.read_bytes())
    return h.hexdigest()


def _init_worker(timeout, memory_gb, worker_memory_gb=None):
    """In a forked grading process: an address-space limit of its own (a huge notebook
    then fails that student only), and nbgrader's API with this run's overrides."""
    global _API
    if worker_memory_gb:
        import resource

        limit = int(worker_memory_gb * 2**30)
        # The soft limit only: the kernel and the judge set their own below the hard one.
        resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(
            resource.RLIMIT_AS)[1]))
    _API = make_api(timeout, memory_gb)


_API = None
#: The assignment this run grades or gives feedback on (set by grade() and feedback()
#: before they fork their workers, which inherit it).
_RUN = {"assignment": ASSIGNMENT}


def _grade_one(student, worker_memory_gb=None):
    t0 = time.perf_counter()
    result = _API.autograde(_RUN["assignment"], student, force=True, create=True)
    error = None if result["success"] else _why_failed(student, result)
    if error and error.endswith("(MemoryError)") and worker_memory_gb:
        error += (f": the grading process ran out of its {worker_memory_gb:g} GiB "
                  "(c.Grading.worker_memory_gb)")
    return student, bool(result["success"]), error, time.perf_counter() - t0


def _feedback_one(student, worker_memory_gb=None):
    t0 = time.perf_counter()
    result = _API.generate_feedback(_RUN["assignment"], student, force=True)
    error = None if result["success"] else log_reason(
        (result.get("log") or "") + "\n" + (result.get("error") or ""))
    return student, bool(result["success"]), error, time.perf_counter() - t0


def _why_failed(student, result) -> str:
    """A one-line reason for the instructor: the real one, from the submission or the log."""
    import json

    folder = course_dir() / "submitted" / student / _RUN["assignment"]
    notebook = folder / f"{notebook_of(_RUN['assignment'])}.ipynb"
    if not notebook.exists():
        found = sorted(p.name for p in folder.glob("*.ipynb"))
        return f"no {notebook.name} in the submission" + (
            f" (found {', '.join(found)})" if found else "")
    raw = notebook.read_bytes()
    if not raw.strip():
        return f"{notebook.name} is an empty file"
    try:
        json.loads(raw)
    except ValueError as exc:
        return f"{notebook.name} is not valid JSON ({exc})"
    return log_reason((result.get("log") or "") + "\n" + (result.get("error") or ""))


# nbgrader's closing lines, which name no cause.
_BOILERPLATE = ("Please see the", "There was an error processing assignment",
                "Traceback (most recent call last)")


def _traceback_ends(text: str) -> list[tuple[str, str]]:
    """(exception name, message) of each traceback in ``text``: the first line after the
    frames at the indentation of its "Traceback" line, whatever the exception's name."""
    import re

    lines, out = text.splitlines(), []
    for i, line in enumerate(lines):
        if line.strip() != "Traceback (most recent call last):":
            continue
        indent = len(line) - len(line.lstrip())
        for later in lines[i + 1:]:
            if later.strip() and len(later) - len(later.lstrip()) <= indent:
                m = re.match(r"\s*(?:[\w.]+\.)?(\w+)(?::\s?(.*))?$", later)
                if m:
                    out.append((m.group(1), (m.group(2) or "").strip()))
                break
    return out


def log_reason(text: str) -> str:
    """The last exception message in an nbgrader log (``Name: message``, whatever the
    exception's name), else its last ERROR line that says something."""
    import re

    def useful(error):
        return error[0] != "NbGraderException" and not any(b in error[1] for b in _BOILERPLATE)

    errors = [e for e in _traceback_ends(text) if useful(e)] or [e for e in re.findall(
        r"^\s*(?:[\w.]+\.)?(\w+(?:Error|Exception)): (.+)$", text, re.M) if useful(e)]
    if errors:
        name, message = errors[-1]
        return f"{message.strip()[:300]} ({name})" if message.strip() else name
    lines = [ln.strip() for ln in text.splitlines()
             if ("ERROR" in ln or "Error" in ln) and not any(b in ln for b in _BOILERPLATE)]
    return lines[-1][:300] if lines else "nbgrader could not grade it (see its log)"


@dataclass
class StudentResult:
    student: str
    ok: bool
    seconds: float
    error: str | None = None
    score: float | None = None
    max_score: float | None = None
    needs_manual_grade: bool = False
    #: total the notebook's own test cells showed while grading (None: not graded)
    shown: float | None = None
    #: {grade cell: (shown in the notebook, verified, what the verified result found)}
    #: where the two differ
    mismatches: dict = field(default_factory=dict)
    stopped: str | None = None  # why later cells were not run, if they were not
    #: what the instructor should know (invisible characters, limits that bit)
    notes: list = field(default_factory=list)


@dataclass
class GradeReport:
    results: list = field(default_factory=list)
    seconds: float = 0.0
    jobs: int = 1
    unsafe: bool = False
    warnings: list = field(default_factory=list)

    @property
    def failed(self):
        return [r for r in self.results if not r.ok]

    def summary(self) -> str:
        manual = [r.student for r in self.results if r.ok and r.needs_manual_grade]
        parts = [f"graded {len(self.results)} submissions in {self.seconds:.1f} s with "
                 f"{self.jobs} job{'s' * (self.jobs > 1)}: "
                 f"{len(self.results) - len(self.failed)} ok, {len(self.failed)} failed"]
        if self.unsafe:
            parts.insert(0, UNSAFE_BANNER)
        if self.failed:
            parts.append("failed: " + "; ".join(f"{r.student} ({r.error})" for r in self.failed))
        if manual:
            parts.append("needs manual grading: " + ", ".join(manual))
        differ = [r for r in self.results if r.mismatches]
        if differ:
            parts.append("score shown in the notebook differs from the verified one: " + "; ".join(
                f"{r.student} (shown {r.shown:g}/{r.max_score:g}, verified {r.score:g}/"
                f"{r.max_score:g})" for r in differ))
        stopped = [r for r in self.results if r.ok and r.stopped]
        if stopped:
            parts.append("stopped early: " + "; ".join(f"{r.student} ({r.stopped})"
                                                       for r in stopped))
        noted = [r for r in self.results if r.notes]
        if noted:
            parts.append("notes: " + "; ".join(f"{r.student} ({'; '.join(r.notes)})"
                                              for r in noted))
        parts += self.warnings
        return " | ".join(parts)


UNSAFE_BANNER = ("UNSAFE: graded WITHOUT the sandbox (UNSAFE=1): student code ran with your "
                 "rights and could read or change the course")


class _Progress:
    """A progress bar on a terminal, one line per submission elsewhere (CI logs)."""

    def __init__(self, total, stream):
        self.total, self.stream, self.done, self.failed = total, stream, 0, 0
        self.tty = hasattr(stream, "isatty") and stream.isatty()

    def update(self, student, ok, note):
        self.done += 1
        self.failed += not ok
        if self.tty:
            filled = int(30 * self.done / max(self.total, 1))
            self.stream.write(f"\r  [{'#' * filled}{'.' * (30 - filled)}] {self.done}/"
                              f"{self.total} graded, {self.failed} failed  ({student})   ")
            if self.done == self.total:
                self.stream.write("\n")
        else:
            self.stream.write(f"  [{self.done}/{self.total}] {student}: {note}\n")
        self.stream.flush()


def _gradebook_scores(students, assignment: str = ASSIGNMENT):
    from nbgrader.api import Gradebook, MissingEntry

    config = load_config()
    out = {}
    with Gradebook(config.CourseDirectory.db_url, config.CourseDirectory.course_id) as gb:
        for s in students:
            try:
                sub = gb.find_submission(assignment, s)
            except MissingEntry:
                continue
            out[s] = (sub.score, sub.max_score, sub.needs_manual_grade)
    return out


def per_cell_scores(db_path: Path | None = None, assignment: str = ASSIGNMENT) -> dict:
    """{student: {grade_id: (auto_score, manual_score, needs_manual_grade)}} of
    ``assignment``."""
    from nbgrader.api import Gradebook

    config = load_config()
    url = config.CourseDirectory.db_url if db_path is None else f"sqlite:///{db_path}"
    out = {}
    with Gradebook(url, config.CourseDirectory.course_id) as gb:
        for sub in gb.assignment_submissions(assignment):
            cells = {}
            for nb in sub.notebooks:
                for g in nb.grades:
                    cells[g.name] = (g.auto_score, g.manual_score, g.needs_manual_grade)
            out[sub.student_id] = cells
    return out


def _worker_main(conn, init_args, scratch, task=_grade_one, slot=0):
    """A forked process that grades students (or runs ``task``) one after another, as the
    parent sends their names, and sends back each outcome; it uses the replay server of
    worker slot ``slot``. Kept for many students: nbgrader's first conversion in a process
    costs about half as much again as the next ones."""
    import tempfile
    import warnings

    from src import grading

    grading.use_slot(slot)
    # nbgrader's gradebook code trips SQLAlchemy's autoflush warning on every submission
    # ("Object of type <SubmittedAssignment> not in session"): harmless, and noise here.
    warnings.filterwarnings("ignore", message=r".*not in session.*")
    # The sandbox's files go here: the parent removes them even if this process dies.
    tempfile.tempdir = scratch
    try:
        _init_worker(*init_args)
        while True:
            try:
                student = conn.recv()
            except EOFError:
                break
            if student is None:
                break
            try:
                outcome = task(student, *init_args[2:])
            except MemoryError:
                outcome = (student, False, f"the grading process ran out of its "
                           f"{init_args[2]:g} GiB (c.Grading.worker_memory_gb)", 0.0)
            except BaseException as exc:  # noqa: BLE001  (reported for this student only)
                outcome = (student, False, f"grading raised {type(exc).__name__}: {exc}", 0.0)
            conn.send(outcome)
    finally:
        conn.close()
        grading.close_replay_servers()  # one this worker had to start (the shared one died)


def _run_workers(students, jobs, init_args, deadline, on_done, task=_grade_one,
                 what="grading"):
    """Grade each student (or run ``task``) in ``jobs`` forked worker processes, each
    taking the next student when it is done with one.

    A worker that dies without an answer, or spends over ``deadline`` seconds on one
    student (it is killed), fails that student only: a fresh worker takes its place and
    the run always goes on.
    """
    import multiprocessing
    import tempfile
    from multiprocessing.connection import wait

    from src import grading, sandbox

    ctx = multiprocessing.get_context("fork")  # inherits the imported nbgrader (~5 s)
    jobs = max(1, min(jobs, len(students)))
    if task is _grade_one:  # a replay fork server per worker slot (torch imported once each)
        # (the replay servers start here, before nbgrader's pipeline: its limits first)
        trusted = load_config(*init_args[:2]).TrustedScores
        grading.configure(**{k: trusted[t] for k, t in grading.TRUSTED_TRAITS.items()
                             if t in trusted})
        grading.start_replay_servers(_RUN["assignment"], jobs)
    pending, workers = list(students), {}  # slot -> [proc, conn, scratch, student, t0]

    def start(slot):
        conn, child = ctx.Pipe()
        scratch = tempfile.mkdtemp(prefix="attention-grading-worker-")
        proc = ctx.Process(target=_worker_main, args=(child, init_args, scratch, task, slot),
                           name=f"grade-worker-{slot}", daemon=True)
        proc.start()
        child.close()
        workers[slot] = [proc, conn, scratch, None, 0.0]

    def stop(slot, kill=False):
        proc, conn, scratch, _, _ = workers.pop(slot)
        if kill:
            proc.kill()
        else:
            try:
                conn.send(None)
            except OSError:
                pass
        proc.join(5)
        if proc.is_alive():
            proc.kill()
            proc.join(5)
        conn.close()
        sandbox.remove_ipc_dirs(scratch)  # a killed worker leaves them
        shutil.rmtree(scratch, ignore_errors=True)

    try:
        for slot in range(jobs):
            start(slot)
        while pending or any(w[3] is not None for w in workers.values()):
            for slot, w in list(workers.items()):
                if w[3] is None and pending:
                    w[3], w[4] = pending.pop(0), time.monotonic()
                    try:
                        w[1].send(w[3])
                    except OSError:
                        pass  # (found dead below)
            busy = [w for w in workers.values() if w[3] is not None]
            wait([w[1] for w in busy] + [w[0].sentinel for w in busy], timeout=1.0)
            for slot, (proc, conn, _, student, t0) in list(workers.items()):
                if student is None:
                    continue
                outcome, restart = None, False
                if conn.poll():
                    try:
                        outcome = conn.recv()
                    except (EOFError, OSError):
                        outcome, restart = (student, False, "the grading process died (exit "
                                            f"code {proc.exitcode})", time.monotonic() - t0), True
                elif not proc.is_alive():
                    outcome, restart = (student, False, f"the grading process died (exit code "
                                        f"{proc.exitcode})", time.monotonic() - t0), True
                elif time.monotonic() - t0 > deadline:
                    outcome, restart = (student, False, f"{what} did not finish within "
                                        f"{deadline:.0f} s (process stopped)",
                                        time.monotonic() - t0), True
                if outcome is None:
                    continue
                workers[slot][3] = None
                if restart:
                    stop(slot, kill=True)
                    if pending:
                        start(slot)
                on_done(*outcome)
    finally:
        for slot in list(workers):
            stop(slot)


def _trusted_report(student, assignment: str = ASSIGNMENT) -> dict:
    import json

    from src.grading import REPORT_NAME

    path = course_dir() / "autograded" / student / assignment / REPORT_NAME
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def grade(jobs: int = 0, timeout: float | None = None, memory_gb: float | None = None,
          students=None, stream=sys.stdout, unsafe: bool | None = None,
          budget: float | None = None, assignment: str = ASSIGNMENT) -> GradeReport:
    """Autograde every submission of ``assignment`` (or ``students``), ``jobs`` at a time:
    no kernel, each
    step cell replayed in the sandbox. ``timeout`` and ``budget`` override
    nbgrader_config.py's seconds of one step cell's replay and of one submission's.

    Submissions that cannot be graded safely (a symlink, a special file, an id that
    is a pattern) are refused with the reason; nbgrader never sees them.
    """
    from src import grading, sandbox

    _OVERRIDES.clear()
    _OVERRIDES.update({k: v for k, v in (("timeout", timeout), ("budget", budget))
                       if v is not None})
    _RUN["assignment"] = assignment
    if not (course_dir() / "gradebook.db").exists():
        raise CourseError("no gradebook: run `make release` first")
    unsafe = grading.unsafe_requested() if unsafe is None else unsafe
    if unsafe:
        os.environ[grading.UNSAFE_ENV] = "1"
        stream.write(f"WARNING: {UNSAFE_BANNER}\n")
    else:
        os.environ.pop(grading.UNSAFE_ENV, None)
        reason = sandbox.unavailable_reason()
        if reason:
            raise CourseError(f"cannot grade safely: {reason}")
    base = course_dir() / "submitted"
    students = list(students) if students is not None else submitted_students(assignment)
    if not students:
        raise CourseError(f"nothing to grade: expected folders {base}/<student>/{assignment}/")
    report, progress = GradeReport(unsafe=unsafe), _Progress(len(students), stream)
    refused = {}
    config = load_config(timeout)
    cap_mb = config.RefuseUnsafeSubmission.get("max_notebook_mb", sandbox.LIMITS.notebook_mb)
    for s in students:
        problem = grading.id_problem(s)
        if problem is None:
            folder = base / s / assignment
            found = grading.submission_problems(base / s) if (base / s).exists() else [
                f"no folder {folder}"]
            size = grading.notebook_size_problem(folder / f"{notebook_of(assignment)}.ipynb",
                                                 cap_mb)
            found += [size] if size and not found else []
            problem = ("refused: " + "; ".join(found)) if found else None
        if problem:
            refused[s] = problem
    for group in grading.lookalike_groups(students):
        report.warnings.append("ids that look alike (Unicode): " + ", ".join(map(repr, group)))
    todo = [s for s in students if s not in refused]
    report.jobs = jobs = max(1, min(jobs or os.cpu_count() or 1, max(len(todo), 1)))
    before = tree_digest(base)
    t0 = time.perf_counter()
    for s, why in refused.items():
        report.results.append(StudentResult(s, False, 0.0, why))
        progress.update(s, False, f"FAILED: {why}")

    def done(student, ok, error, seconds):
        report.results.append(StudentResult(student, ok, seconds, error))
        progress.update(student, ok, f"done in {seconds:.1f} s" if ok else f"FAILED: {error}")

    trusted = config.TrustedScores
    replay = trusted.get("replay_student_seconds", sandbox.LIMITS.replay_student_seconds)
    judges = trusted.get("judge_seconds", sandbox.LIMITS.judge_seconds)
    # nbgrader's own work (copying, the gradebook) on top of the replay's and the judges'.
    steps = len(grading._lesson(assignment=assignment).steps)
    deadline = replay + steps * judges + 120
    if todo:
        try:
            _run_workers(todo, jobs, (timeout, memory_gb, worker_memory_gb(config)),
                         deadline, done)
        finally:
            grading.close_replay_servers()
            _OVERRIDES.clear()  # (this run's only: a later load_config reads the file's)
    _OVERRIDES.clear()
    report.seconds = time.perf_counter() - t0
    if tree_digest(base) != before:
        raise CourseError("submitted/ changed while grading; this must never happen")
    scores = _gradebook_scores([r.student for r in report.results if r.ok], assignment)
    for r in report.results:
        if r.student in scores:
            r.score, r.max_score, r.needs_manual_grade = scores[r.student]
        if r.ok:
            trusted = _trusted_report(r.student, assignment)
            cells = trusted.get("cells", [])
            r.stopped = trusted.get("stopped")
            r.notes = list(trusted.get("notes", []))
            r.mismatches = {c["cell"]: (c["shown"], c["verified"], c.get("verified_says", ""))
                            for c in cells
                            if c["shown"] is not None and abs(c["shown"] - c["verified"]) > 1e-9}
            r.shown = sum(c["shown"] or 0.0 for c in cells)
    report.results.sort(key=lambda r: r.student)
    if unsafe:
        stream.write(f"WARNING: {UNSAFE_BANNER}\n")
    return report


def worker_memory_gb(config) -> float:
    """Address-space limit of each grading or feedback process (c.Grading)."""
    from src import sandbox

    return float(config.Grading.get("worker_memory_gb", sandbox.LIMITS.worker_memory_gb))


def feedback(jobs: int = 0, stream=sys.stdout, assignment: str = ASSIGNMENT) -> Path:
    """nbgrader's feedback on ``assignment`` for every autograded student, each in a
    process of its own with
    a deadline (c.Grading.feedback_seconds) and a memory limit: one submission cannot hold
    up the rest. Raises CourseError naming the students whose feedback failed."""
    from src import sandbox

    _RUN["assignment"] = assignment
    base = course_dir() / "autograded"
    students = sorted(p.name for p in base.iterdir() if (p / assignment).is_dir()) \
        if base.is_dir() else []
    if not students:
        raise CourseError(f"no autograded submissions in {base}: run `make grade` first")
    config = load_config()
    deadline = int(config.Grading.get("feedback_seconds", sandbox.LIMITS.feedback_seconds))
    failed = {}

    def done(student, ok, error, seconds):
        if not ok:
            failed[student] = error
        stream.write(f"  feedback {student}: " + (f"done in {seconds:.1f} s" if ok else
                                                  f"FAILED: {error}") + "\n")

    jobs = max(1, min(jobs or os.cpu_count() or 1, len(students)))
    _run_workers(students, jobs, (None, None, worker_memory_gb(config)), deadline, done,
                 task=_feedback_one, what="feedback")
    if failed:
        raise CourseError(f"feedback failed for {len(failed)} of {len(students)}: " + "; ".join(
            f"{s} ({why})" for s, why in sorted(failed.items())))
    return course_dir() / "feedback"


def export(dest: Path | None = None) -> Path:
    from nbgrader.api import Gradebook
    from nbgrader.plugins import CsvExportPlugin

    dest = dest or course_dir() / "grades.csv"
    config = load_config()
    with Gradebook(config.CourseDirectory.db_url, config.CourseDirectory.course_id) as gb:
        CsvExportPlugin(to=str(dest)).export(gb)
    return dest


def _with_work(assignments, folder: str) -> list[str]:
    """The assignments some student has a folder for under course/<folder>/."""
    base = course_dir() / folder
    people = [p for p in base.iterdir() if p.is_dir()] if base.is_dir() else []
    return [a for a in assignments if any((p / a).exists() for p in people)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="The nbgrader course of the lessons.")
    parser.add_argument("--assignment", choices=ASSIGNMENTS, default=None,
                        help="only this assignment (default: every lesson)")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("release", help="build course/source and generate the student releases")
    g = sub.add_parser("grade", help="autograde course/submitted/*/<assignment> in parallel")
    g.add_argument("--jobs", type=int, default=0, help="workers (default: cores)")
    g.add_argument("--timeout", type=float, default=None,
                   help="seconds of one step cell's replay (default: nbgrader_config.py, 1)")
    g.add_argument("--budget", type=float, default=None,
                   help="seconds of one submission's replays (default: nbgrader_config.py, 3)")
    g.add_argument("--memory-gb", type=float, default=None,
                   help="address space of each process in the replay's sandbox "
                        "(default: nbgrader_config.py)")
    g.add_argument("students", nargs="*", help="only these students")
    sub.add_parser("feedback", help="HTML feedback in course/feedback (no hidden tests)")
    sub.add_parser("export", help="course/grades.csv (every assignment)")
    args = parser.parse_args(argv)
    chosen = [args.assignment] if args.assignment else list(ASSIGNMENTS)
    failed = False
    try:
        if args.command == "release":
            for a in chosen:
                print(f"released to {release(a)}")
        elif args.command == "grade":
            # (each assignment someone submitted; none at all: the first one's message)
            for a in _with_work(chosen, "submitted") or chosen[:1]:
                print(f"{a}:")
                report = grade(args.jobs, args.timeout, args.memory_gb,
                               args.students or None, budget=args.budget, assignment=a)
                for r in report.results:
                    score = "-" if r.score is None else f"{r.score:g}/{r.max_score:g}"
                    flag = "" if r.ok else f"  FAILED: {r.error}"
                    flag += "  (needs manual grading)" if r.needs_manual_grade else ""
                    if r.mismatches:
                        flag += f"  shown {r.shown:g}/{r.max_score:g}, verified " \
                                f"{r.score:g}/{r.max_score:g}: " + ", ".join(
                                    f"{cell} {x:g} vs {y:g}" + (f" ({says})" if says else "")
                                    for cell, (x, y, says) in r.mismatches.items())
                    if r.stopped:
                        flag += f"  (later cells not run: {r.stopped})"
                    print(f"  {r.student!r:<26} {score:>7}{flag}")
                print(report.summary())
                failed = failed or bool(report.failed)
            return 1 if failed else 0
        elif args.command == "feedback":
            for a in _with_work(chosen, "autograded") or chosen[:1]:
                print(f"feedback on {a} in {feedback(assignment=a)}")
        elif args.command == "export":
            print(f"grades written to {export()}")
    except CourseError as exc:
        print(f"course: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
