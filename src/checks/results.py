"""What a check returns: :class:`CheckResult` per check, :class:`Summary` per test cell.

Both print as plain text and render as Markdown in Jupyter; a result is truthy
only when its check passed. Messages open with one short line (the mistake and
the next step, at most ``FIRST_LINE_CHARS``), then capped evidence.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field

from src.checks.util import _num, _short

#: The most numbers of one array a result carries to another process (a [1, 6, 64] is 384).
VALUES_SIZE = 4096


class Points(float):
    """A score that nbgrader reads as a number and Jupyter shows as a sentence.

    nbgrader takes a test cell's numeric output as its partial credit; its
    plain-text form must therefore be the bare number.
    """

    max_score: float = 0.0

    def __new__(cls, score, max_score):
        obj = super().__new__(cls, score)
        obj.max_score = max_score
        return obj

    def __repr__(self):
        return repr(float(self))

    def _repr_markdown_(self):
        return f"**{_num(self)} / {_num(self.max_score)} points**"


@dataclass
class CheckResult:
    """The outcome of one check; truthy when ``passed``.

    ``mistake`` is the main diagnosis (an id of the lesson's catalogue) or None;
    ``shortfalls`` every id whose cost was deducted (partial credit);
    ``pending`` the strict-only ids found by a visible check, which only the
    graded (strict) run deducts.
    """

    step: str
    passed: bool
    score: float
    max_score: float
    message: str
    mistake: str | None = None
    notes: list = field(default_factory=list)
    shortfalls: list = field(default_factory=list)
    pending: list = field(default_factory=list)
    seen: dict = field(default_factory=dict, repr=False, compare=False)
    title: str = ""  # the check's title in its lesson ("Cell 5 — scaled dot-product scores")
    mistake_title: str = ""  # the title of ``mistake`` in its lesson's catalogue
    #: What the live check saw in the student's kernel (code run in another cell, a saved
    #: cell that differs from what ran, ...): shown first, never part of the verdict.
    kernel_notes: list = field(default_factory=list)

    def __post_init__(self):
        self.title = self.title or str(self.step)

    def __bool__(self):
        return self.passed

    @property
    def points(self) -> Points:
        """The score, as nbgrader reads it from a test cell's last line."""
        return _nbgrader_points(self)

    @property
    def diagnoses(self) -> list:
        """Every mistake id this result names (main, deducted and pending)."""
        ids = [self.mistake] if self.mistake else []
        return ids + [i for i in self.shortfalls + self.pending if i not in ids]

    def values_of(self, name):
        """The float64 array of ``name`` this check read, if real and finite (or -inf where
        a mask put it); else None.

        For drawing (``verify.show`` draws the lesson's figures from them).
        """
        return self.seen.get(name)

    def __str__(self):
        mark = "PASS" if self.passed else "FAIL"
        lines = [f"[{mark}] {self.title}: {_num(self.score)}/{_num(self.max_score)} points",
                 *("  " + line for line in self.message.splitlines())]
        lines += [f"  note: {n}" for n in self.kernel_notes + self.notes]
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_markdown_(self):
        # ✔/✘ are in DejaVu Sans, the usual fallback font; emoji need an emoji font. The
        # words carry the status too, for screen readers and without colour.
        mark = "✔" if self.passed else "✘"
        state = "passed" if self.passed else "not yet"
        body = self.message.replace("\n", "  \n")
        notes = "".join(f"\n\n> Note: {n}" for n in self.kernel_notes + self.notes)
        return (f"{mark} **{self.title}: {_num(self.score)}/{_num(self.max_score)} "
                f"points** ({state})\n\n{body}{notes}")

    def to_dict(self, values: bool = False):
        """A JSON-able form; ``values``: with the arrays it read (at most
        ``VALUES_SIZE`` numbers each), for drawing them in another process."""
        out = {"step": self.step, "title": self.title, "passed": self.passed,
                "score": self.score, "max_score": self.max_score,
                "mistake": self.mistake, "mistake_title": self.mistake_title,
                "shortfalls": list(self.shortfalls), "pending": list(self.pending),
                "message": self.message, "notes": list(self.notes),
                "kernel_notes": list(self.kernel_notes)}
        if values:
            out["seen"] = {k: v.tolist() for k, v in self.seen.items()
                           if getattr(v, "size", VALUES_SIZE + 1) <= VALUES_SIZE}
        return out

    @classmethod
    def from_dict(cls, d):
        """A result from :meth:`to_dict`'s form (with the arrays it read if it has them)."""
        import numpy as np

        seen = {}
        for name, value in (d.get("seen") or {}).items():
            try:
                arr = np.asarray(value, dtype=np.float64)
            except (TypeError, ValueError):
                continue
            # (finite, or -inf where a mask put it)
            if arr.size <= VALUES_SIZE and not (np.isnan(arr).any() or np.isposinf(arr).any()):
                seen[str(name)] = arr
        return cls(str(d["step"]), bool(d["passed"]), float(d["score"]),
                   float(d["max_score"]), str(d["message"]), d.get("mistake"),
                   list(d.get("notes", [])), list(d.get("shortfalls", [])),
                   list(d.get("pending", [])), seen=seen, title=str(d.get("title", "")),
                   mistake_title=str(d.get("mistake_title", "")),
                   kernel_notes=list(d.get("kernel_notes", [])))



def _nbgrader_points(result) -> Points:
    """``result``'s Points. Under nbgrader's Validate (NBGRADER_VALIDATING is set in the
    kernel it starts) a shortfall is also written to stderr: Validate shows a failed
    cell's stderr, so the student reads what the check said, not "Partial credit"."""
    if os.environ.get("NBGRADER_VALIDATING") and result.score < result.max_score:
        print(str(result), file=sys.stderr)
    return Points(result.score, result.max_score)


@dataclass
class Summary:
    """Several checks' results (a grade cell's, or every step's)."""

    results: list

    @property
    def passed(self):
        return all(self.results)

    @property
    def score(self):
        return sum(r.score for r in self.results)

    @property
    def max_score(self):
        return sum(r.max_score for r in self.results)

    @property
    def points(self) -> Points:
        """The total, as nbgrader reads it from a test cell's last line."""
        return _nbgrader_points(self)

    def __bool__(self):
        return self.passed

    def __str__(self):
        head = f"Total: {_num(self.score)}/{_num(self.max_score)} points"
        return "\n".join([head, *(str(r) for r in self.results)])

    __repr__ = __str__

    def _repr_markdown_(self):
        rows = "\n".join(
            f"| {'✔ passed' if r else '✘ not yet'} | {r.title} | "
            f"{_num(r.score)}/{_num(r.max_score)} | "
            f"{r.mistake_title} |"
            for r in self.results)
        return (f"**Total: {_num(self.score)}/{_num(self.max_score)} points**\n\n"
                f"| | step | points | mistake |\n|---|---|---|---|\n{rows}")

    def to_dict(self, values: bool = False):
        return {"passed": self.passed, "score": self.score, "max_score": self.max_score,
                "results": [r.to_dict(values) for r in self.results]}

    @classmethod
    def from_dict(cls, d):
        return cls([CheckResult.from_dict(r) for r in d["results"]])


#: A failing message's first line (the mistake and the next step) and its evidence.
FIRST_LINE_CHARS, EVIDENCE_CHARS = 200, 600


def _mistake_text(m, seen, check="any"):
    """A failing message of check ``check`` for the catalogue entry ``m`` (a spec's
    Mistake): its next step with the example of that check."""
    why = _short(f"Why: {m.cause_for(check)}.", EVIDENCE_CHARS // 2)
    if m.said_first and seen:  # the search's own words of the change it found
        said = str(seen).rstrip(". ")
        return _tidy(f"Mistake: {said}. Next step: {m.next_step_for(check)}.\n{why}")
    seen = _short(f"What we saw: {seen}", EVIDENCE_CHARS - len(why) - 1)
    return _tidy(f"Mistake: {m.title}. Next step: {m.next_step_for(check)}.\n{seen}\n{why}")


def _tidy(message):
    """At most FIRST_LINE_CHARS in the first line (cut at a sentence end when it is longer;
    the rest moves down), and EVIDENCE_CHARS after it."""
    # (an error text that ends a sentence, quoted before our own full stop: one stop)
    message = re.sub(r"(?<!\.)\.\.(?!\.)", ".", str(message))
    head, _, rest = message.partition("\n")
    if len(head) > FIRST_LINE_CHARS:
        cut = head.rfind(". ", 0, FIRST_LINE_CHARS)
        cut = cut + 1 if cut > 0 else head.rfind(" ", 0, FIRST_LINE_CHARS - 1)
        cut = cut if cut > 0 else FIRST_LINE_CHARS - 1
        head, rest = head[:cut].rstrip(), (head[cut:].strip() + "\n" + rest).strip()
        if len(head) > FIRST_LINE_CHARS:
            head = head[:FIRST_LINE_CHARS - 1] + "…"
    if len(rest) > EVIDENCE_CHARS:
        rest = rest[:EVIDENCE_CHARS - 1].rstrip() + "…"
    return head + ("\n" + rest if rest else "")
