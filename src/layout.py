"""Where the course lives: the repository, course/, and what the assignment ships.

The one place for these facts; src/course.py (the instructor's commands) and
src/grading.py (nbgrader's preprocessors) both read them, so neither imports the
other.
"""

from __future__ import annotations

import os
from pathlib import Path

from src import lessons

ROOT = Path(__file__).resolve().parent.parent
#: Each nbgrader assignment is a lesson (its spec's name), its notebook the lesson's, and
#: the instructor's source notebook the lesson's reference; in course order.
ASSIGNMENTS = tuple(lessons.LESSONS)
#: The first lesson's (for callers that know only one).
ASSIGNMENT = lessons.lesson().name
NOTEBOOK = lessons.lesson().notebook
SOURCE_NOTEBOOK = ROOT / f"{lessons.lesson().source}.ipynb"


def notebook_of(assignment: str = ASSIGNMENT) -> str:
    """The student notebook's name (without .ipynb) of ``assignment``."""
    return lessons.lesson(assignment).notebook


def source_of(assignment: str = ASSIGNMENT) -> Path:
    """The reference notebook ``assignment``'s student notebook is generated from."""
    return ROOT / f"{lessons.lesson(assignment).source}.ipynb"
#: What the assignment ships beside the notebook. Autograding always copies the
#: source versions over whatever a student submitted with the same names.
SHIPPED = ("verify.py", "src", "data")
def course_dir() -> Path:
    """course/ beside the repository, or $ATTENTION_COURSE_DIR (tests use a temporary one)."""
    return Path(os.environ.get("ATTENTION_COURSE_DIR") or ROOT / "course").resolve()
