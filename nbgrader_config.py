"""nbgrader configuration of the course; the Makefile targets use it (see README,
"For instructors"). Paths are relative to this file, so any working directory works."""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor  # noqa: E402
from nbgrader.preprocessors import GetGrades  # noqa: E402

from src.course import StripHiddenTests, course_dir  # noqa: E402
from src.release import CODE_STUB  # noqa: E402

c = get_config()  # noqa: F821  (provided by traitlets when it loads this file)

c.CourseDirectory.root = str(course_dir())  # course/, or $ATTENTION_COURSE_DIR
c.CourseDirectory.course_id = "attention-course"
# Parallel autograding writes to one SQLite gradebook: wait for a busy database (up to
# 5 minutes) instead of failing with "database is locked".
c.CourseDirectory.db_url = f"sqlite:///{course_dir() / 'gradebook.db'}?timeout=300"

# Seconds each cell may run while autograding; then the kernel is interrupted, the cell
# scores 0 and the later cells still run. The lesson's slowest cell takes < 1 s here.
# Override with `make grade TIMEOUT=N` (environment variable ATTENTION_CELL_TIMEOUT).
c.Execute.timeout = int(os.environ.get("ATTENTION_CELL_TIMEOUT", "30"))

# The same stub `make release` writes into lesson.ipynb (one source: src/release.py).
c.ClearSolutions.code_stub = {"python": CODE_STUB}

# Feedback must never show hidden tests (nbgrader #917, #1363).
c.GenerateFeedback.preprocessors = [GetGrades, StripHiddenTests, CSSHTMLHeaderPreprocessor]
