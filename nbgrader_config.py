"""nbgrader configuration of the course; the Makefile targets use it (see
docs/instructor.md). Paths are relative to this file, so any working directory works."""

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
    DrawFigures,
    RefuseUnsafeSubmission,
    RevealInvisibles,
    SafeOutputs,
    SubmittedOutputs,
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

# Secure autograding without a kernel (docs/internals.md, "Secure grading"): every road to
# `nbgrader autograde` (make grade, the plain command, the Formgrader's button) reads this file. A
# submission with a symlink is refused; no kernel runs: each test cell's score is computed
# here, in the instructor's process, from a replay of its step cell's own code in a
# sandboxed fork server (src/road.py, src/replay.py), never from what the notebook shows.
# nbgrader's own lists, with our steps added, Execute replaced by SubmittedOutputs and
# ClearOutput left out (the feedback shows the outputs the student submitted, made inert).
c.Autograde.sanitize_preprocessors = [
    RefuseUnsafeSubmission, CopyAllowedFiles, DeduplicateIds, OverwriteKernelspec,
    OverwriteCells, CheckCellMetadata]
# RevealInvisibles and SafeOutputs also here: the Formgrader and JupyterLab show autograded
# notebooks as they are stored (the Formgrader renders their markdown again, unsanitised).
# ClearStudentMetadata (in nbconvert's ClearMetadataPreprocessor's place, which is off by
# default) keeps only the metadata grading needs: no widget state the file held.
c.Autograde.autograde_preprocessors = [
    SubmittedOutputs, RevealInvisibles, TrustedScores, SafeOutputs, IgnorePattern,
    ClearStudentMetadata, LimitOutput, SaveAutoGrades, AssignLatePenalties,
    CheckCellMetadata]
c.SubmittedOutputs.output_kb = 512  # stored output per cell (KiB); more is cut with a note
# The replay of each step cell: its fork server's sandbox, and the time of its runs.
# `make grade TIMEOUT=N BUDGET=M` overrides the two times for one run (plain nbgrader:
# --TrustedScores.replay_run_seconds=N --TrustedScores.replay_student_seconds=M).
c.TrustedScores.memory_gb = 4.0  # address space (GiB)
c.TrustedScores.processes = 256  # tasks, threads included
c.TrustedScores.file_mb = 64  # largest file written (MiB)
c.TrustedScores.tmp_mb = 256  # /tmp and the working directory, each (MiB)
c.TrustedScores.replay_run_seconds = 1.0  # one cell run (wall; CPU too)
c.TrustedScores.replay_student_seconds = 3.0  # all of one submission's runs
# The judge of each check cell, in a child of the grading process.
c.TrustedScores.judge_seconds = 60.0
c.TrustedScores.judge_memory_gb = 4.0
# A submission over these caps is refused with the reason, before anything reads its code.
c.RefuseUnsafeSubmission.max_notebook_mb = 20  # notebook file (MB)
c.RefuseUnsafeSubmission.max_cells = 400  # cells in the notebook
# Each grading (and feedback) process: an address-space limit, and a deadline per student
# for `make feedback` (a grading process's: the replay's and the judges' times + 120 s).
c.Grading.worker_memory_gb = 4.0
c.Grading.feedback_seconds = 60
# Without bubblewrap (macOS, no user namespaces): `make grade UNSAFE=1` sets
# ATTENTION_UNSAFE_GRADING=1, which runs the replay unsandboxed and says so on every run.

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
# DrawFigures then draws each check cell's heatmaps from the numbers grading stored.
c.GenerateFeedback.preprocessors = [ClearStudentMetadata, GetGrades, StripHiddenTests,
                                    SafeOutputs, DrawFigures, CopyAllowedFiles,
                                    CSSHTMLHeaderPreprocessor]
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
