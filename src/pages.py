"""What the course adds to nbgrader's HTML pages of a notebook (the feedback file and the
Formgrader's view of a submission): each graded cell named by the lesson's spec, and
messages that wrap instead of running off the page.

``src/templates/feedback/attention.html.j2`` and ``src/templates/formgrade/attention.html.j2``
extend nbgrader's own templates (nbgrader_config.py: ``HTMLExporter.template_file``) and
call :func:`cell_name` as the ``cell_name`` filter; MathJax is ``src/mathjax.py``.

Shape legend: not applicable (no tensors here).
"""

from __future__ import annotations

from functools import lru_cache

#: CSS of both pages: output (a check's message) wraps at the page's width; code input
#: keeps its lines and scrolls inside its own box; nothing a markdown cell draws (typeset
#: TeX with \raise, \kern or a huge \rule) paints outside that cell's box, so a formula
#: cannot cover the scores or another cell.
WRAP_CSS = """
div.output_area pre, div.output_subarea pre, div.output_text pre, div.output pre {
  white-space: pre-wrap; overflow-wrap: anywhere; word-break: normal; max-width: 100%; }
div.output_subarea { max-width: 100%; min-width: 0; overflow-x: hidden; }
div.output_subarea img { max-width: 100%; height: auto; }
div.input_area pre { overflow-x: auto; }
div.text_cell_render { contain: paint; }
""".strip()


@lru_cache(maxsize=None)
def _names() -> dict:
    from src.lessons import LESSONS

    out = {}
    for spec in LESSONS.values():
        for step in spec.steps:
            prefix = f"{step.title} \u2014 "
            parts = [c.title[len(prefix):] if c.title.startswith(prefix) else c.title
                     for c in step.checks]
            out[step.test] = f"{step.title} \u2014 {' and '.join(parts)}"
    return out


def cell_name(grade_id) -> str:
    """The check cell ``grade_id`` as the lesson names it ("Cell 5 — scaled dot-product
    scores"), or "" for a cell the lessons do not know."""
    return _names().get(grade_id, "") if isinstance(grade_id, str) else ""


def wrap_css(_=None) -> str:
    """:data:`WRAP_CSS` in a ``<style>`` element (the ``attention_css`` filter)."""
    from markupsafe import Markup

    return Markup(f"<style>\n{WRAP_CSS}\n</style>")
