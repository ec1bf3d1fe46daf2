"""The judge's vocabulary: observed data read defensively, findings, and a result.

:class:`_Reader` and :class:`_View` read what the replay (or the kernel side)
observed, as data only: anything malformed reads as missing. A check's verdict is
built from per-tensor :class:`_Finding` s by :func:`_result`, with the words of the
lesson's mistakes (its spec's catalogue). Lesson-free: every function that needs a
lesson fact takes the spec. NumPy only; nothing here raises on bad data.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from src.checks.results import CheckResult, _mistake_text, _tidy
from src.checks.shapes import product_repair
from src.checks.util import INFO_FIELDS, LIMITS, _listing, _num, _short, finite_or_masked


class _Reader:
    """Defensive access to observed data: anything malformed reads as missing."""

    def __init__(self, data):
        self.data = data if isinstance(data, Mapping) else {}

    def raw(self, key):
        try:
            value = self.data.get(key)
        except Exception:  # noqa: BLE001
            return None
        return value if isinstance(value, np.ndarray) and value.dtype.kind != "O" else None

    def text(self, key, default=""):
        v = self.raw(key)
        if v is None or v.dtype.kind != "U" or v.size != 1:
            return default
        return _short(str(v.reshape(-1)[0]), 400)

    def flag(self, key):
        v = self.raw(key)
        if v is None or v.dtype.kind not in "biuf" or v.size != 1:
            return False
        item = v.reshape(-1)[0]
        return bool(item) and not (v.dtype.kind == "f" and bool(np.isnan(item)))

    def strings(self, key):
        v = self.raw(key)
        if v is None or v.dtype.kind != "U" or v.ndim > 1 or v.size > LIMITS["names"]:
            return []
        return [_short(s, LIMITS["error"]) for s in v.reshape(-1).tolist()]

    def shape(self, key):
        v = self.raw(key)
        if v is None or v.dtype.kind not in "iu" or v.ndim != 1 or v.size > 32:
            return None
        if (v < 0).any() or (v > 2**40).any():
            return None
        return tuple(int(i) for i in v)

    def array(self, key):
        v = self.raw(key)
        if v is None or v.dtype.kind not in "biufc" or v.size > LIMITS["total_bytes"] // 4:
            return None
        return v

    def tensor(self, name, prefix="t."):
        key = f"{prefix}{name}"
        views = self.__dict__.setdefault("_views", {})
        if key not in views:
            views[key] = _View(self, key, name)
        return views[key]


class _View:
    """What was observed about one tensor (or any object)."""

    def __init__(self, reader, key, name):
        self.name, self.reader = name, reader
        info = reader.strings(key + ".info")
        info = dict(zip(INFO_FIELDS, info + [""] * (len(INFO_FIELDS) - len(info))))
        self.kind = info["kind"] or "missing"
        self.type, self.dtype, self.note = info["type"], info["dtype"], info["note"]
        self.layout = info["layout"] or "strided"
        self.requires_grad = info["requires_grad"] == "True"
        self.grad_fn = info["grad_fn"]  # ("": a leaf, such as t.detach().requires_grad_())
        self.made_by = reader.strings(key + ".made_by")
        # From a replay: gradients of sum(out * G) by input name, and its autograd nodes.
        head = f"replay.grad.{name}."
        self.grads = {k[len(head):]: a for k in list(reader.data)[:512]
                      if isinstance(k, str) and k.startswith(head)
                      for a in [reader.array(k)] if a is not None}
        self.graph = reader.strings(f"replay.graph.{name}")
        self.grad_error = " ".join(reader.strings(f"replay.grad_error.{name}"))
        values = reader.array(key + ".values") if self.kind in ("tensor", "ndarray") else None
        self.raw = values
        shape = reader.shape(key + ".shape")
        self.shape = tuple(values.shape) if values is not None else shape
        if not self.dtype and values is not None:
            self.dtype = str(values.dtype)

    @property
    def real(self):
        """float64 values when they are real floating-point numbers, else None."""
        v = self.raw
        if v is None or v.dtype.kind not in "biuf" or self.layout != "strided":
            return None
        if not self.dtype.startswith(("float", "bfloat")):
            return None
        return v.astype(np.float64)

    def describe(self):
        if self.kind == "tensor":
            return f"a tensor of shape {list(self.shape or ())} and dtype {self.dtype}"
        if self.kind == "ndarray":
            return f"a NumPy array of shape {list(self.shape or ())} and dtype {self.dtype}"
        if self.kind == "function":  # (anything callable: a layer is an object, not a def)
            plain = self.type in ("function", "builtin_function_or_method", "method", "")
            return "a function" if plain else f"a callable {self.type} object"
        if self.kind in ("none", "missing"):
            return "None"
        return f"a {self.type or 'value'}"


@dataclass
class _Cell:
    """What the observation says about the student's cell."""

    number: int
    ran: bool
    raised: bool
    error: str
    line: str
    replayed: bool = False  # the data comes from a replay of the cell's own code
    misspelled: tuple = ()  # (the name the cell assigned, the lesson's name)
    mutated: tuple = ()  # inputs the cell changed in place
    own: bool = False  # a second run, on the student's own tensors from the cells before
    elsewhere: tuple = ()  # (a name the replay missed, the other cell that makes it)
    discarded: tuple = ()  # lines that compute a value and assign it to nothing
    rebound: tuple = ()  # names of earlier cells the cell assigned anew
    aliased: tuple = ()  # the cell's own names bound to one and the same tensor
    unassigned: tuple = ()  # the cell's own names that no line of it binds
    reshaped: tuple = ()  # inputs whose shape the cell changed in place (transpose_)
    cropped: tuple = ()  # (name, product, its shape, index): a part cut out of a product

    @classmethod
    def read(cls, r, number):
        error, line = (r.strings("cell.raised") + ["", ""])[:2]
        spelled, made = r.strings("replay.misspelled"), r.strings("replay.made_elsewhere")
        return cls(number, r.flag("cell.ran"), bool(error), error, line,
                   r.flag("cell.replayed"), tuple(spelled) if len(spelled) == 2 else (),
                   tuple(r.strings("replay.mutated")), r.flag("replay.own"),
                   tuple(made) if len(made) == 2 else (),
                   tuple(r.strings("replay.discarded")), tuple(r.strings("replay.rebound")),
                   tuple(r.strings("replay.aliased")), tuple(r.strings("replay.unassigned")),
                   tuple(r.strings("replay.reshaped")),
                   tuple(tuple(r.strings("replay.cropped")[i:i + 4])
                         for i in range(0, len(r.strings("replay.cropped")), 4)))

    def said(self):
        at = f" at `{_short(self.line, LIMITS['line'])}`" if self.line else ""
        if self.elsewhere:  # (true of the replay only: in the kernel the name existed)
            name, where = self.elsewhere
            return (f"when your Cell {self.number} was run again on its own, as grading runs "
                    f"it, it raised {_short(self.error)}{at}: `{name}` is made in {where}")
        return f"your Cell {self.number} raised {_short(self.error)}{at}"


def _error_entry(lesson, error, line, check=None):
    """The id of the lesson's catalogue entry for an error raised in ``check``'s cell (a
    spec's Check; None: any), or None. An entry of one check is never met in another."""
    mine = {"any"} | ({check.name, check.uses_function} if check is not None else set())
    for m in lesson.error_entries:
        if check is not None and m.step not in mine:
            continue
        if re.search(m.error, error or "") and (m.line is None or re.search(m.line, line or "")):
            return m.id
    return None


def _line_shapes(lesson, cell, arrived=None) -> dict:
    """{name: shape} for reading a raised line's operands: the lesson's shapes of the
    tensors made up to this cell (the replay keeps none of a cell that raised), then the
    shapes the cell's inputs arrived with."""
    return {n: tuple(s) for n, s in lesson.shapes.items()
            if lesson.made_in.get(n, 0) <= cell.number} | dict(arrived or {})


def _named_error(lesson, cell, check, arrived=None):
    """The catalogue entry of the error ``cell`` raised in ``check``'s code: the lesson's
    entry by the error and line; for a product whose shapes do not fit, the lesson's entry
    of the one change that makes it give its result's shape (its operands swapped, a
    transpose dropped: src/checks/shapes.py); None when no entry matches."""
    found = _error_entry(lesson, cell.error, cell.line, check)
    if found == "matmul_shapes":
        repair = product_repair(cell.line, _line_shapes(lesson, cell, arrived),
                                lesson.shapes)
        by_kind = {m.kind: m.id for m in lesson.mistakes.values()}
        if repair and repair[0] in by_kind:
            return by_kind[repair[0]]
    return found


@dataclass
class _Finding:
    """The verdict on one output tensor: a mistake (or an unnamed failure), and the
    partial-credit shortfalls charged (``costs``) or, in a visible run, pending."""

    mistake: str | None = None
    seen: str = ""
    message: str = ""  # an unnamed failure
    costs: list = field(default_factory=list)  # [(id, what we saw)]
    pending: list = field(default_factory=list)

    @property
    def failed(self):
        return bool(self.mistake or self.message)



def _strict(f, strict, mistake_id, seen):
    """A strict-only shortfall: deducted when strict, else shown as pending."""
    (f.costs if strict else f.pending).append((mistake_id, seen))


def _points(x):
    return f"{_num(x)} point" + ("" if x == 1 else "s")


def _result(lesson, check, findings, ok_message, notes, cell, seen):
    """One CheckResult of ``check`` (a spec's Check) from per-tensor findings
    [(name, _Finding)]."""
    mistakes = lesson.mistakes

    def _cost(mistake_id):
        return mistakes[mistake_id].cost if mistake_id in mistakes else 1.0

    points, notes = check.points, list(notes)
    failures = [(n, f) for n, f in findings if f.failed]
    charged, pending = _merged(findings, "costs"), _merged(findings, "pending")
    whole = False  # the in-place change also made the result wrong: it costs the step
    if cell.replayed and cell.mutated and check.kind != "function" and \
            not check.uses_function:  # (then the function's own mistake, charged there)
        changed = _listing(cell.mutated)
        what = "had another shape" if set(cell.mutated) <= set(cell.reshaped) else \
            "held other numbers"
        said = f"after your Cell {cell.number} ran, {changed} {what} than before."
        if not failures:
            charged.setdefault("changes_input", said)
        elif failures[0][1].mistake is None or mistakes[failures[0][1].mistake].kind in (
                "behaviour", "factor", "constant", "constant_factor"):
            # A wrong result read off as a behaviour is what the changed input made: the
            # change is the mistake to fix first.
            failures = [("", _Finding("changes_input", said + " The result was computed "
                                      "from the changed values.")), *failures]
            whole = True
    # Several of the cell's own names bound to one tensor: what is wrong with them is that
    # (the values read off as another tensor in a place are its consequence).
    tensors = [n for c in lesson.step_of_check[check.name].checks if c.kind == "tensor"
               for n in c.outputs if n in cell.aliased]
    same = [n for n in check.outputs if n in tensors] if len(tensors) > 1 else []
    if cell.replayed and same and failures and "outputs_aliased" in mistakes:
        shows = failures[0][1].seen  # (what the one tensor shows, read off as before)
        failures = [("", _Finding("outputs_aliased", (
            f"after your Cell {cell.number}, {_listing(list(cell.aliased))} are one and the "
            f"same tensor object. {shows[:1].upper()}{shows[1:]}".strip())))]
    # A name an earlier cell made, assigned anew (`key = key.transpose(-2, -1)`): charged
    # once, in the step's first check that takes it, when nothing else is wrong there.
    # A set-up constant (d_k) is charged in the step's first check.
    steps_checks = lesson.step_of_check[check.name].checks
    takes = [c for c in steps_checks if set(c.upstream) & set(cell.rebound)] or (
        [steps_checks[0]] if set(cell.rebound) & set(lesson.setup_names) else [])
    if cell.replayed and cell.rebound and takes and takes[0] is check and \
            "rebinds_input" in mistakes:
        names = [n for n in cell.rebound if n in check.upstream or n in lesson.setup_names]
        where = (f"Cell {lesson.made_in[names[0]]}" if names[0] in lesson.made_in
                 else "the set-up")
        said = f"your Cell {cell.number} assigns {_listing(names)} anew, a name {where} made."
        if not failures:
            charged.setdefault("rebinds_input", said)
        elif mistakes.get(failures[0][1].mistake) is None or mistakes[
                failures[0][1].mistake].kind in ("behaviour", "factor", "constant",
                                                  "constant_factor"):
            # (a result read off as a factor is what the changed constant made)
            failures = [("", _Finding("rebinds_input", said + " The result was computed "
                                      "with the changed value.")), *failures]
    # Only code that runs to the end earns its points (a function, probed on its own, is
    # judged whatever happens after its def).
    raised = cell.replayed and cell.raised and check.kind != "function"
    if raised and not failures and not charged:  # (else what made its asserts fail leads)
        failures = [("", _Finding(
            _named_error(lesson, cell, check) or "cell_raised",
            f"{cell.said()}. The names it had assigned by then are right, but a step earns "
            "its points only when its cell runs to the end."))]
    if failures:
        main = failures[0][1]
        if cell.discarded and check.kind != "function" and not any(
                d in main.seen for d in cell.discarded):  # (said once)
            lines = " and ".join(f"`{d}`" for d in cell.discarded)
            main.seen = (f"your Cell {cell.number} computes {lines} on a line of its own and "
                         f"assigns the result to nothing, so that line changes nothing. "
                         f"{main.seen[:1].upper()}{main.seen[1:]}")
        same = [name for name, f in failures[1:] if f.mistake and f.mistake == main.mistake]
        if same:  # one mistake of several tensors: said once
            notes.append(f"The same holds for {_listing(same)}.")
        for name, f in failures[1:]:
            if name not in same:
                notes.append(f"Also `{name}`: {mistakes[f.mistake].title} — {f.seen}"
                             if f.mistake else f"Also: {f.message}")
        mistake = main.mistake
        message = (_mistake_text(mistakes[mistake], main.seen, check.name) if mistake
                   else main.message)
        cost = _cost(mistake) if mistake else 1.0
        for mid, what in charged.items():
            if mid != mistake:
                notes.append(f"Also: {mistakes[mid].title} — {what}")
                cost += _cost(mid)
        shortfalls = [mid for mid in [mistake, *charged] if mid and _cost(mid) < 1]
        mentioned = main.seen
    elif charged:
        mistake, shortfalls = next(iter(charged)), list(charged)
        message = "\n\n".join(_mistake_text(mistakes[mid], what, check.name)
                                for mid, what in charged.items())
        cost, mentioned = sum(_cost(mid) for mid in charged), message
    else:
        mistake, shortfalls, message, cost, mentioned = None, [], ok_message, 0.0, ""
    shortfalls = list(dict.fromkeys(shortfalls))
    for mid, what in pending.items():
        m = mistakes[mid]
        notes.append(f"The graded run also checks this and takes {_points(points * m.cost)} "
                     f"off: {m.title} — {what} Next step: {m.next_step_for(check.name)}.")
    if cell.raised and cell.error not in mentioned and check.kind != "function":
        notes.append(f"Also, {cell.said()}.")  # (a function is judged whatever follows it)
    if raised or whole:
        cost = 1.0
    score = round(points * max(0.0, 1.0 - cost), 6)
    passed = not failures and not charged
    return CheckResult(check.name, passed, score, points, _tidy(message), mistake, notes,
                       shortfalls, list(pending), seen, title=check.title,
                       mistake_title=mistakes[mistake].title if mistake in mistakes else "")


def _merged(findings, attr):
    """{mistake id: what we saw} over every tensor; a slip of several tensors is one
    item (charged once) that names them all."""
    out, names = {}, {}
    for name, f in findings:
        for mid, what in getattr(f, attr):
            out.setdefault(mid, what)
            names.setdefault(mid, []).append(name)
    for mid, found in names.items():
        if len(found) > 1:
            out[mid] = out[mid] + f" The same holds for {_listing(found[1:])}."
    return out


def _seen_arrays(views):
    out = {}
    for name, view in views.items():
        arr = view.real
        if arr is not None and arr.size and finite_or_masked(arr):  # (-inf: a mask)
            out[name] = arr
    return out



def _failed(check, message):
    """A failed result of ``check`` (a spec's Check) that only says ``message``."""
    return CheckResult(check.name, False, 0.0, check.points, _tidy(_short(message, 400)),
                       title=check.title)
