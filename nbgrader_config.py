"""nbgrader configuration of the course; the Makefile targets use it (see README,
"For instructors"). Paths are relative to this file, so any working directory works."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import nbgrader  # noqa: E402
from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor  # noqa: E402
from nbgrader.preprocessors import (  # noqa: E402
    AssignLatePenalties,
    CheckCellMetadata,
    ClearOutput,
    DeduplicateIds,
    GetGrades,
    IgnorePattern,
    LimitOutput,
    OverwriteCells,
    OverwriteKernelspec,
    SaveAutoGrades,
)

from src.course import StripHiddenTests, course_dir  # noqa: E402
from src.grading import (  # noqa: E402
    ClearStudentMetadata,
    CopyAllowedFiles,
    RefuseUnsafeSubmission,
    RevealInvisibles,
    SafeOutputs,
    SandboxedExecute,
    TrustedScores,
    copy_ignore,
)
from src.release import CODE_STUB  # noqa: E402

c = get_config()  # noqa: F821  (provided by traitlets when it loads this file)

c.CourseDirectory.root = str(course_dir())  # course/, or $ATTENTION_COURSE_DIR
c.CourseDirectory.course_id = "attention-course"
# Parallel autograding writes to one SQLite gradebook: wait for a busy database (up to
# 5 minutes) instead of failing with "database is locked".
c.CourseDirectory.db_url = f"sqlite:///{course_dir() / 'gradebook.db'}?timeout=300"

# Seconds each cell may run while autograding; then the kernel is interrupted, the cell
# scores 0 and the later cells still run. The lesson's slowest cell takes < 1 s here.
# Override for one run with `make grade TIMEOUT=N` (plain nbgrader: --Execute.timeout=N).
c.Execute.timeout = 30

# Secure autograding (README, "For instructors"): every road to `nbgrader autograde` (make
# grade, the plain command, the Formgrader's button) reads this file. A submission with a
# symlink is refused; each kernel runs in a bubblewrap sandbox; each test cell's score is
# computed here, in the instructor's process, from a replay of its step cell's own code in
# a sandboxed fork server (src/road.py, src/replay.py), never from what the kernel printed.
# nbgrader's own lists, with our steps added and Execute replaced.
c.Autograde.sanitize_preprocessors = [
    RefuseUnsafeSubmission, CopyAllowedFiles, ClearOutput, DeduplicateIds, OverwriteKernelspec,
    OverwriteCells, CheckCellMetadata]
# RevealInvisibles and SafeOutputs also here: the Formgrader and JupyterLab show autograded
# notebooks as they are stored (the Formgrader renders their markdown again, unsanitised).
# ClearStudentMetadata (in nbconvert's ClearMetadataPreprocessor's place, which is off by
# default) keeps only the metadata grading needs: no widget state the kernel or the file held.
c.Autograde.autograde_preprocessors = [
    SandboxedExecute, RevealInvisibles, TrustedScores, SafeOutputs, IgnorePattern,
    ClearStudentMetadata, LimitOutput, SaveAutoGrades, AssignLatePenalties,
    CheckCellMetadata]
# Limits of each sandboxed kernel (the defaults, src/limits.py LIMITS, are stated here).
c.SandboxedExecute.memory_gb = 4.0  # address space (GiB)
c.SandboxedExecute.processes = 256  # tasks, threads included
c.SandboxedExecute.file_mb = 64  # largest file written (MiB)
c.SandboxedExecute.tmp_mb = 256  # /tmp and the working directory, each (MiB)
# Whole notebook (wall clock): budget_factor x the reference run that `make release` times
# in the sandbox (about 5 s here), never under budget_floor, never over notebook_seconds.
# Later cells of a notebook past it score 0; the summary says "stopped early" and why.
# `make grade BUDGET=N` (plain nbgrader: --SandboxedExecute.notebook_seconds=N).
c.SandboxedExecute.notebook_seconds = 60
c.SandboxedExecute.budget_factor = 8.0
c.SandboxedExecute.budget_floor = 30
c.SandboxedExecute.output_kb = 512  # stored output per cell (KiB); more is cut with a note
# The replay of each step cell (its fork server) and the judge of each check cell.
c.TrustedScores.replay_run_seconds = 1.0  # one cell run (wall; CPU too)
c.TrustedScores.replay_student_seconds = 3.0  # all of one submission's runs
c.TrustedScores.judge_seconds = 60.0  # the judge of one check cell, in a child
c.TrustedScores.judge_memory_gb = 4.0  # its address space
# Everything a kernel can write is bounded: /tmp, its working directory and /dev/shm are
# tmpfs of tmp_mb each; its stderr file at most file_mb; its IPC directory
# takes no new file once the kernel has started (Limits.write_mb states the sum).
# A submission over these caps is refused with the reason, before its kernel starts.
c.RefuseUnsafeSubmission.max_notebook_mb = 20  # notebook file (MB)
c.RefuseUnsafeSubmission.max_cells = 400  # cells in the notebook
# Each grading (and feedback) process: an address-space limit, and a deadline per student
# for `make feedback` (a grading process's deadline is the notebook's budget + 150 s).
c.Grading.worker_memory_gb = 4.0
c.Grading.feedback_seconds = 60
# Without bubblewrap (macOS, no user namespaces): `make grade UNSAFE=1` sets
# ATTENTION_UNSAFE_GRADING=1, which runs kernels unsandboxed and says so on every run.

# Files of a submission that reach autograded/ and feedback/ beside the notebook: an
# allow-list, empty by default (only the notebook). A student's HTML, SVG, .shtml, ... beside
# it would be served by the Formgrader as a page of yours. Patterns are relative to the
# submission folder, e.g. ["figures/*.png"]; caps per submission: max_files, max_kb.
c.CopyAllowedFiles.patterns = []
c.CopyAllowedFiles.max_files = 20
c.CopyAllowedFiles.max_kb = 4096
# nbgrader itself copies nothing of a submission or an autograded folder (copy_ignore).
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback",
                            *copy_ignore(course_dir())]
# Not needed here (no JupyterHub exchange); kept inside the course so nothing complains.
c.Exchange.root = str(course_dir() / "exchange")

# The same stub `make release` writes into lesson.ipynb (one source: src/release.py).
c.ClearSolutions.code_stub = {"python": CODE_STUB}

# Feedback must never show hidden tests (nbgrader #917, #1363).
# Student output in feedback is kept to text and images, and HTML in markdown is sanitised:
# no script from a submission runs in the browser that opens the feedback.
# Metadata is cleared again first (a notebook autograded before it was, or edited since),
# before GetGrades adds the scores to each cell's nbgrader metadata.
c.GenerateFeedback.preprocessors = [ClearStudentMetadata, GetGrades, StripHiddenTests,
                                    SafeOutputs, CopyAllowedFiles, CSSHTMLHeaderPreprocessor]
c.HTMLExporter.sanitize_html = True
# ...and loads no script from another origin (nbconvert's pages take MathJax from a CDN):
# src/templates/base/mathjax.html.j2 is found before nbconvert's and inlines a local MathJax
# instead (below). nbgrader's own templates come next, as GenerateFeedback sets them.
c.HTMLExporter.extra_template_basedirs = [
    str(ROOT / "src" / "templates"),
    str(Path(nbgrader.__file__).parent / "server_extensions" / "formgrader" / "templates")]
# Both pages nbgrader makes of a notebook (the feedback file and the Formgrader's view of a
# submission) typeset their formulas with the MathJax of the jupyter-server-mathjax package,
# inlined and locked down (src/mathjax.py; the `mathjax` macro above calls it), and name
# each graded cell as the lesson's spec does, with messages that wrap (src/pages.py,
# src/templates/{feedback,formgrade}/attention.html.j2, which extend nbgrader's own).
c.HTMLExporter.template_file = "attention.html.j2"
c.HTMLExporter.filters = {"attention_mathjax": "src.mathjax.mathjax_filter",
                          "attention_css": "src.pages.wrap_css",
                          "cell_name": "src.pages.cell_name"}
