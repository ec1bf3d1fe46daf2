"""The course's lessons: one spec each (:class:`src.spec.Lesson`), found by name or by
any of its cell ids (cell ids are unique across the course)."""

from __future__ import annotations

from src.lessons.attention import LESSON as ATTENTION
from src.lessons.multihead import LESSON as MULTIHEAD

#: Every lesson, by name (also its nbgrader assignment's name), in course order.
LESSONS = {ATTENTION.name: ATTENTION, MULTIHEAD.name: MULTIHEAD}


def lesson(name: str = ATTENTION.name):
    """The spec of lesson ``name``; a KeyError names the lessons there are."""
    try:
        return LESSONS[name]
    except KeyError:
        raise KeyError(f"no lesson {name!r}; expected one of {', '.join(LESSONS)}") from None


def by_cell(cell_id):
    """(lesson, step) of a step cell or a check cell id, or (None, None)."""
    for spec in LESSONS.values():
        step = spec.by_cell.get(cell_id) or spec.by_test.get(cell_id) if isinstance(
            cell_id, str) else None
        if step is not None:
            return spec, step
    return None, None


def by_check(name):
    """(lesson, check) of a check name, or (None, None)."""
    for spec in LESSONS.values():
        if name in spec.checks:
            return spec, spec.checks[name]
    return None, None
