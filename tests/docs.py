"""The course's documentation as one text, for tests that check a stated fact.

README.md is the front page; the facts live in docs/student.md, docs/instructor.md and
docs/internals.md. ``docs_text()`` is all of them with every run of whitespace made one
space, so that a fact wrapped across lines is still found.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: The front page, then each reader's guide.
DOCS = (ROOT / "README.md", ROOT / "docs" / "student.md", ROOT / "docs" / "instructor.md",
        ROOT / "docs" / "internals.md")


def docs_text() -> str:
    """README.md and docs/*.md, whitespace normalised."""
    return " ".join(" ".join(p.read_text(encoding="utf-8").split()) for p in DOCS)
