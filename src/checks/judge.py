"""The trusted judge: results from observed data only.

Pure: NumPy, no torch, no student object, and it never raises whatever the data
holds. :func:`judge` judges one test cell's data; :func:`judge_replay` judges the
replay of a step cell (``src/replay.py``): the run on the reference inputs, and
the run on the student's own tensors where that one counts. A wrong result is
named by the catalogue (``src/checks/catalogue.py``) when an entry reproduces it,
else by what the code was seen to do (its scale, axis, inputs, gradients).
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Mapping

import numpy as np

from src.checks.catalogue import _ENTRIES, _ERROR_ENTRIES, MISTAKES, _value_entries
from src.checks.lesson import (
    AXES,
    CELL_NUMBER,
    D_K,
    GRAD_TOL,
    GRADE_CELLS,
    LIMITS,
    LOW_TOL,
    MADE_IN,
    MASKED_PROBE,
    NAMES,
    POINTS,
    SHAPES,
    SOFTMAX_ALLOWED,
    SOFTMAX_OPS,
    STRICT_TOL,
    TOL,
    VARIANT_SCALE_TOL,
    _chain,
    _close,
    _close_masked,
    _compute,
    _constant,
    _fmt,
    _listing,
    _num,
    _probes,
    _reference,
    _shipped,
    _short,
    _softmax,
    _swap,
    tie_group_sums,
)
from src.checks.observe import _NODE_LABELS, BUILTIN_SOFTMAX, INFO_FIELDS, _error_text
from src.checks.results import CheckResult, Summary, _mistake_text, _tidy


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
        self.name = name
        info = reader.strings(key + ".info")
        info = dict(zip(INFO_FIELDS, info + [""] * (len(INFO_FIELDS) - len(info))))
        self.kind = info["kind"] or "missing"
        self.type, self.dtype, self.note = info["type"], info["dtype"], info["note"]
        self.layout = info["layout"] or "strided"
        self.requires_grad = info["requires_grad"] == "True"
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
        if self.kind == "function":
            return f"a function ({self.type})"
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

    @classmethod
    def read(cls, r, grade_id):
        error, line = (r.strings("cell.raised") + ["", ""])[:2]
        spelled = r.strings("replay.misspelled")
        return cls(CELL_NUMBER.get(grade_id, 0), r.flag("cell.ran"), bool(error), error, line,
                   r.flag("cell.replayed"), tuple(spelled) if len(spelled) == 2 else (),
                   tuple(r.strings("replay.mutated")), r.flag("replay.own"))

    def said(self):
        at = f" at `{_short(self.line, LIMITS['line'])}`" if self.line else ""
        return f"your Cell {self.number} raised {_short(self.error)}{at}"


def _error_entry(error, line):
    """The catalogue entry for a raised error, or None."""
    for m in _ERROR_ENTRIES:
        if re.search(m.error, error or "") and (m.line is None or re.search(m.line, line or "")):
            return m.id
    return None


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


class _Context:
    """A step's inputs (float64 arrays by name), with the outputs they call for."""

    def __init__(self, label, inp, step):
        self.label, self.inp, self.step = label, inp, step
        self._cache = {}

    def expected(self, name):
        key = ("expected", name)
        if key not in self._cache:
            with np.errstate(all="ignore"):
                self._cache[key] = _compute(self.step, dict(self.inp, name=name), name)
        return self._cache[key]

    def variants(self, m, name):
        """The arrays mistake ``m`` would give from these inputs."""
        key = (m.id, name)
        if key not in self._cache:
            got = []
            with np.errstate(all="ignore"):
                if m.fns:
                    fns = m.fns
                    make = [lambda f=f: f(self.inp["attention_scores"], -1) for f in fns]
                elif m.factor is not None:
                    make = [lambda: self.expected(name) * m.factor]
                else:
                    make = [lambda: m.reproduce(dict(self.inp, name=name))]
                for fn in make:
                    try:
                        out = fn()
                    except (ValueError, IndexError, KeyError, TypeError):
                        continue
                    for g in out if isinstance(out, list) else [out]:
                        got.append(np.asarray(g, dtype=np.float64))
            self._cache[key] = got
        return self._cache[key]


@lru_cache(maxsize=None)
def _reference_context(step):
    """The reference inputs of ``step``; its reproductions are computed once per process."""
    return _Context("the reference", dict(_reference()), step)


def _promoted(dtypes):
    """The dtype torch gives an operation on tensors of these dtypes."""
    floats = [d for d in dtypes if d.startswith(("float", "bfloat"))]
    if not floats:
        return "float32"
    if "float64" in floats:
        return "float64"
    return floats[0] if len(set(floats)) == 1 else "float32"


_DEGENERATE = "your own, degenerate tensors"


def _contexts(step, views):
    """(contexts, notes): the student's own inputs first when usable, then the reference.

    Degenerate own inputs come last, labelled ``_DEGENERATE``: never credited, only named.
    """
    ref = _reference()
    names = NAMES[step]
    reference = _reference_context(step)
    if not names.upstream:
        return [reference], []
    own, constant = dict(ref), []
    for name in names.upstream:
        arr = views[name].real
        # A masked score is -inf, which the softmax must take; nothing else may be infinite.
        unusable = arr is None or np.isnan(arr).any() or np.isposinf(arr).any() or (
            name != "attention_scores" and np.isneginf(arr).any())
        if unusable:
            return [reference], [f"Your `{name}` is missing or not finite, so this step was "
                                 "checked against the reference tensors instead."]
        if arr.size > LIMITS["own_elements"]:  # (the lesson's have at most 384)
            return [reference], [f"Your `{name}` has shape {list(arr.shape)}, far larger than "
                                 f"{list(SHAPES[name])}, so this step was checked against "
                                 "the reference tensors instead."]
        own[name] = arr
        if _constant(arr):
            constant.append(name)
    for name in names.extras:
        arr = views[name].real
        if arr is not None and arr.shape == ref[name].shape and np.isfinite(arr).all():
            own[name] = arr
    context = _Context("your own tensors", own, step)
    try:
        expected = context.expected(names.outputs[0])
        if not np.isfinite(expected).all():
            raise ValueError("not finite")
    except ValueError:
        return [reference], ["Your tensors from the cells before cannot be combined (their "
                             "shapes do not fit), so this step was checked against the "
                             "reference tensors."]
    copy = any(own[n].shape == expected.shape and _close(own[n], expected)
               for n in names.upstream)
    if constant or copy or _constant(expected):
        which = constant or list(names.upstream)
        verb = "is" if len(which) == 1 else "are"
        # the student's own context goes last, tagged: only to say so if the output is
        # right for it (it is never credited)
        context.label = _DEGENERATE
        return [reference, context], [
            f"Your {_listing(which)} {verb} degenerate (constant, or such that every formula "
            "gives the same result), so this step was checked against the reference tensors "
            "instead: fix the cell that made it first."]
    if all(_close(own[n], ref[n], STRICT_TOL) for n in names.upstream):
        return [reference], []
    differ = [n for n in names.upstream if not _close(own[n], ref[n])]
    if not differ:  # equal but for rounding: judged on them, without a note
        return [context, reference], []
    verb = "differs" if len(differ) == 1 else "differ"
    return [context, reference], [f"Your {_listing(differ)} {verb} from the reference, so this "
                                  "step is checked against your own tensors: an earlier "
                                  "mistake does not cost points twice."]


def _ratio(arr, expected):
    with np.errstate(all="ignore"):
        denom = float((expected * expected).sum())
        return float((arr * expected).sum() / denom) if denom else float("nan")


def _as_factor(arr, expected):
    """The factor c when arr == c * expected (c not 1 and not 0), else None."""
    if arr.shape != expected.shape or _constant(expected):
        return None
    c = _ratio(arr, expected)
    if not np.isfinite(c) or abs(c - 1) < 1e-3 or abs(c) < 1e-6:
        return None
    return c if _close(arr, c * expected) else None


def _row_sums(arr):
    return _fmt(arr.sum(-1).ravel()) if arr.ndim else _fmt(arr)


def _symptom(m, name, arr, expected):
    """'What we saw' for a recognised value mistake (``expected``: the right output)."""
    with np.errstate(all="ignore"):
        if m.factor is not None:
            return f"your `{name}` is {_fmt(_ratio(arr, expected))} times the expected one."
        if arr.shape != expected.shape:
            shows = f": it equals {m.shows}" if m.shows else ""
            return (f"`{name}` has shape {list(arr.shape)} instead of "
                    f"{list(expected.shape)}{shows}.")
        if m.id == "softmax_wrong_axis":
            if _constant(arr):
                return (f"every entry of `{name}` is {_fmt(arr.ravel()[0])}: the softmax ran "
                        "over an axis of size 1 (the batch axis, dim=0).")
            return (f"the columns of `{name}` sum to 1 ({_fmt(arr.sum(-2).ravel())}) while "
                    f"its rows sum to {_row_sums(arr)}.")
        if m.step in ("softmax", "attention_weights") and not m.shows:
            neg = int((arr < 0).sum())
            extra = f", and {neg} weights are negative" if neg else ""
            if np.allclose(arr.sum(-1), 1, atol=1e-4) and not neg:
                err = float(np.abs(arr - expected).max())
                return (f"the rows of `{name}` sum to 1, but the weights differ from the "
                        f"softmax of your scores along each row by up to {_fmt(err)}.")
            return f"the rows of `{name}` sum to {_row_sums(arr)}{extra}."
        if m.shows:
            return f"your `{name}` equals {m.shows}."
        return f"your `{name}` matches this mistake exactly: {_fmt(arr)}."


def _match_value(step, name, arr, contexts, view):
    """(mistake id, what we saw) of the first catalogue entry that explains ``arr``."""
    for m in _value_entries(step):
        if m.kind == "new_layers":
            if any(label.startswith("other") for label in view.made_by):
                return m.id, (f"`{name}` was computed from parameters that are not "
                              f"{name[0]}_proj's ({', '.join(view.made_by)}).")
            continue
        for ctx in contexts:
            expected = ctx.expected(name)
            for variant in ctx.variants(m, name):
                if _close(variant, expected):  # the mistake makes no difference here
                    continue
                lost = variant.shape[:1] == (1,) and arr.shape == variant.shape[1:]
                if _close(arr, variant) or (lost and _close(arr, variant[0])):
                    return m.id, _symptom(m, name, arr, expected[0] if lost else expected)
    for ctx in contexts:
        expected = ctx.expected(name)
        for right in (expected, expected[0] if expected.shape[:1] == (1,) else None):
            c = None if right is None else _as_factor(arr, right)
            if c is not None:
                return "scalar_multiple", f"your `{name}` is {_fmt(c)} times the expected one."
    if _constant(arr):
        value = _fmt(arr.ravel()[0]) if arr.size else "nothing (it is empty)"
        return "constant_output", f"every entry of `{name}` is {value}."
    for ctx in contexts:
        expected = ctx.expected(name)
        if arr.ndim == expected.ndim and arr.ndim <= 4 and sorted(arr.shape) == sorted(
                expected.shape):
            for perm in itertools.permutations(range(arr.ndim)):
                moved = np.transpose(expected, perm)
                if perm != tuple(range(arr.ndim)) and _close(arr, moved):
                    return "axes_permuted", (f"`{name}` has shape {list(arr.shape)}: the "
                                             f"right values with the axes in the order "
                                             f"{list(perm)} instead of "
                                             f"{list(range(arr.ndim))}.")
    return _behaviour(step, name, arr, contexts[0], view)


#: What each step's output must depend on (autograd, in a replay).
DEPENDS = {"attention_scores": ("query", "key"), "attention_weights": ("attention_scores",),
           "attended_values": ("attention_weights", "value")}


def _behaviour(step, name, arr, ctx, view):
    """(mistake id, what we saw) read off what the code did, when no entry reproduces it:
    what was added to the right result, a nonlinearity, normalised rows, which tensors it
    depends on (the replay's gradients) and, in Cell 4, how it uses its layer."""
    expected = ctx.expected(name)
    if arr.shape == expected.shape and np.isfinite(arr).all() and np.isfinite(expected).all():
        found = _rounded(name, arr, expected) or (
            _weights_relation(name, arr, expected, ctx.inp["attention_scores"])
            if step == "attention_weights" else None)
        if found:
            return found
    if arr.shape == expected.shape:
        extra = arr - expected
        for other, t in ctx.inp.items():
            if other != name and isinstance(t, np.ndarray) and np.shape(t) == arr.shape \
                    and np.abs(t).max() > 1e-6 and _close(extra, t):
                return "extra_term", f"`{name}` equals the right result plus `{other}`."
        if (expected < -1e-3).any() and (arr >= 0).all():
            how = ("max(·, 0) of the right result (a ReLU)" if _close(arr, np.maximum(
                expected, 0)) else "never negative, although the right result is")
            return "extra_nonlinearity", f"`{name}` is {how}."
        norms = np.linalg.norm(arr, axis=-1)
        if np.allclose(norms, 1, atol=1e-3) and not np.allclose(
                np.linalg.norm(expected, axis=-1), 1, atol=1e-3):
            return "rows_rescaled", f"every row of `{name}` has length 1."
        sums, mean = arr.sum(-1), arr.mean(-1)
        if (np.allclose(sums, 1, atol=1e-3) or (np.allclose(mean, 0, atol=1e-3) and np.allclose(
                arr.std(-1), 1, atol=1e-2))) and not np.allclose(expected.sum(-1), 1, atol=1e-3):
            return "rows_rescaled", (f"every row of `{name}` sums to 1 (a softmax or a division "
                                     "by the row sums)" if np.allclose(sums, 1, atol=1e-3) else
                                     f"every row of `{name}` has mean 0 and spread 1") + "."
        found = _fitted(step, name, arr, expected)
        if found:
            return found
    if step == "attention_weights" and arr.shape == expected.shape:
        for axis in range(arr.ndim - 1):  # the softmax's axis, read off its sums
            if np.allclose(arr.sum(axis), 1, atol=1e-3):
                return "softmax_wrong_axis", (f"`{name}` sums to 1 along axis {axis}, not "
                                              "along the keys (the last axis).")
    if arr.ndim >= 2 and arr.shape == expected.shape and np.allclose(arr, arr[..., :1, :]) \
            and not np.allclose(expected, expected[..., :1, :]):
        return "same_for_every_query", (f"every row of `{name}` is the same: "
                                        f"{_fmt(arr[..., 0, :])}.")
    if step == "attended_values" and arr.shape == expected.shape:
        mixed = _mixing(arr, ctx.inp["value"])
        if mixed is not None:
            return mixed
    if step in DEPENDS and view.grads:
        used = {n for n, g in view.grads.items() if np.any(g)}
        missing = [n for n in DEPENDS[step] if n not in used]
        extra = sorted(used - set(DEPENDS[step]))
        if missing or extra:
            said = [f"does not use {_listing(missing)}" if missing else "",
                    f"uses {_listing(extra)}" if extra else ""]
            return "wrong_inputs", f"`{name}` {' and '.join(p for p in said if p)}."
    if step == "projections" and view.grads:
        return _layer_use(name, view.grads, arr)
    return None, ""


def _variant_verdict(step, name, r):
    """("right_only_here", what we saw) when the replay's second run (src/replay.py,
    VARIANT_STEPS), on other embeddings x and every earlier tensor made from them, does not
    give the formula's result; None when it does (or there was none)."""
    x = r.array("variant.in.x")
    if x is None or x.shape != SHAPES["query"]:
        return None
    where = "with other embeddings x (chosen by the grader, every earlier tensor made from them)"
    raised = r.strings("variant.raised")
    if raised:
        return "right_only_here", f"{where} your cell raised {raised[0]}."
    got = r.array(f"variant.out.{name}")
    with np.errstate(all="ignore"):
        want = _chain(x)[name]
    scale = VARIANT_SCALE_TOL * float(np.nanmax(np.abs(want), initial=0.0))
    if got is not None and got.shape == want.shape and got.dtype.kind == "f" and _close(
            got.astype(np.float64), want, dict(rtol=TOL["rtol"], atol=max(TOL["atol"], scale))):
        return None
    how = ("it is not a float tensor of the right shape" if got is None or got.shape !=
           want.shape or got.dtype.kind != "f" else f"`{name}` differs from the formula by up "
           f"to {_fmt(float(np.nanmax(np.abs(got.astype(np.float64) - want))))}")
    return "right_only_here", f"right on the lesson's numbers, but {where} {how}."


def _rounded(name, arr, expected):
    """The right result rounded (round to k decimals, floor, //): ``arr`` lies on a grid of
    10^-k and within one step of it of the right result."""
    if np.ptp(arr) == 0:  # a constant says nothing about rounding
        return None
    for k in range(5):
        q = 10.0 ** -k
        for how, grid in (("", np.round(expected / q)), (" (down: floor or //)",
                                                         np.floor(expected / q))):
            # float32 rounding of an entry that lies on a half step may go either way
            if np.mean(np.abs(arr - grid * q) <= 1e-3 * q + 1e-6) >= 0.9:
                digits = "whole numbers" if k == 0 else f"{k} decimal{'s' * (k > 1)}"
                return "rounded", f"`{name}` is the right result rounded to {digits}{how}."
    return None


def _lstsq(design, target):
    """(coefficients, largest residual relative to the target's spread) of a least-squares
    fit."""
    coef, *_ = np.linalg.lstsq(design, target, rcond=None)
    scale = max(np.abs(target).max(), 1e-12)
    return coef, np.abs(design @ coef - target).max() / scale


def _fitted(step, name, arr, expected):
    """Simple forms of the right result E that ``arr`` [.., L, S] fits: a·E + b (one
    constant added), a_i·E_i + b_i per row (each row normalised on its own), or
    E_ij·u_i·v_j (each score divided by a number per query and per key: the vectors were
    normalised). Checked on exact fits only (relative residual <= 1e-4)."""
    e, a = expected.reshape(-1), arr.reshape(-1)
    if e.size < 4 or np.ptp(e) < 1e-9:
        return None
    (gain, shift), res = _lstsq(np.stack([e, np.ones_like(e)], 1), a)
    if res <= 1e-4 and abs(shift) > 1e-4 * max(np.abs(a).max(), 1e-12):
        return "shifted", (f"`{name}` = {_num(gain)} × the right result + {_num(shift)}: "
                           "the same constant is added to every entry.")
    if arr.ndim < 2:
        return None
    rows_e, rows_a = expected.reshape(-1, arr.shape[-1]), arr.reshape(-1, arr.shape[-1])
    fits = [_lstsq(np.stack([r, np.ones_like(r)], 1), s) for r, s in zip(rows_e, rows_a)
            if np.ptp(r) > 1e-9]
    if fits and all(res <= 1e-4 for _, res in fits):
        gains = [c[0] for c, _ in fits]
        return "rows_rescaled", (f"each row of `{name}` is the right row times its own number "
                                 f"plus its own constant (row 1: {_num(gains[0])} × right + "
                                 f"{_num(fits[0][0][1])}; row 2: {_num(gains[1 % len(gains)])}"
                                 " × right + ...): each row was normalised on its own.")
    if step == "attention_scores" and np.all(np.abs(rows_e) > 1e-9) and np.all(
            np.sign(rows_a) == np.sign(rows_e)) and np.all(rows_a != 0):
        ratio = np.log(rows_a / rows_e)  # log(u_i) + log(v_j): additive in rows and columns
        fit = ratio.mean(1, keepdims=True) + ratio.mean(0, keepdims=True) - ratio.mean()
        if np.abs(ratio - fit).max() <= 1e-4 and np.ptp(ratio) > 1e-3:
            return "vectors_normalised", (
                f"`{name}` is the right score divided by a number for each query and a "
                "number for each key: the vectors' lengths were divided out (cosine "
                "similarity).")
    return None


def _weights_relation(name, arr, expected, scores):
    """Weights that are a softmax of the scores, but not the lesson's: softmax(c·scores)
    (a temperature), some keys masked to 0 and the rest renormalised, or mixed with the
    uniform weights."""
    rows_w = arr.reshape(-1, arr.shape[-1])
    rows_e, rows_s = expected.reshape(rows_w.shape), scores.reshape(rows_w.shape)
    if not (np.all(rows_w >= 0) and np.allclose(rows_w.sum(-1), 1, atol=1e-4)):
        return None
    masked = (rows_w <= 1e-12) & (rows_e > 1e-6)
    if masked.any() and not masked.all(-1).any():
        kept = np.where(masked, 0.0, rows_e)
        if _close(rows_w, kept / kept.sum(-1, keepdims=True)):
            return "weights_masked", (f"{int(masked.sum())} of `{name}`'s {masked.size} "
                                      "weights are 0 though their scores are finite; the "
                                      "others are the right ones, renormalised.")
    if np.all(rows_w > 1e-30) and np.ptp(rows_s) > 1e-6:
        logs = np.log(rows_w)  # log w_ij = c·s_ij + r_i for a softmax of c·s
        centred_l = logs - logs.mean(-1, keepdims=True)
        centred_s = rows_s - rows_s.mean(-1, keepdims=True)
        c = float((centred_l * centred_s).sum() / max((centred_s ** 2).sum(), 1e-30))
        if np.abs(centred_l - c * centred_s).max() <= 1e-3 and abs(c - 1) > 1e-3:
            return "weights_temperature", (f"`{name}` = softmax({_num(c)} × attention_scores)"
                                           ": the scores were rescaled before the softmax.")
    return None


def _mixing(arr, value):
    """Cell 7: whether ``arr`` [B, L, d] is a mix of the rows of value (out = M @ value for
    some M) and what M's rows do; None when nothing can be said."""
    v, out = value.reshape(-1, value.shape[-1]), arr.reshape(-1, arr.shape[-1])
    own = (out * v).sum(-1) / np.maximum((v * v).sum(-1), 1e-30)  # out[i] = c_i v[i]?
    if _close(out, own[:, None] * v, dict(rtol=1e-3, atol=1e-4)):
        return ("values_not_mixed", "each row of `attended_values` is its own token's row of "
                f"`value`, scaled by {_fmt(own)}.")
    m = np.linalg.lstsq(v.T, out.T, rcond=None)[0].T  # [L, S]: out ≈ m @ v
    if not _close(m @ v, out, dict(rtol=1e-3, atol=1e-4)):
        return ("after_the_product", "`attended_values` is not a weighted sum of the rows of "
                "`value`: something else was applied to them or to the result.")
    if np.allclose(m.sum(-1), 1, atol=1e-3):
        return ("weights_changed", "`attended_values` mixes the rows of `value` with weights "
                "that sum to 1 but are not `attention_weights` (changed before the product).")
    return ("weights_changed", "`attended_values` mixes the rows of `value` with weights whose "
            f"rows sum to {_fmt(m.sum(-1))}, not 1.")


def _layer_use(name, grads, arr):
    """(mistake id, what we saw) of how ``name`` uses the layers, from its gradients with
    respect to their parameters: d/dW = Gᵀ x' (x' the layer's input), d/db = c ΣG."""
    from src.replay import output_gradient

    mine = f"{name[0]}_proj"
    used = [k for k, g in grads.items() if np.any(g)]
    others = sorted({k.split(".")[0] for k in used} - {mine})
    if others:
        return "wrong_inputs", (f"`{name}` depends on {_listing(others)}'s parameters: it was "
                                "computed with another layer, or from another projection.")
    g = output_gradient(arr.shape).astype(np.float64).reshape(-1, D_K) if arr.size == \
        6 * D_K else None
    bias, weight = grads.get(f"{mine}.bias"), grads.get(f"{mine}.weight")
    if g is None or bias is None or weight is None or not np.any(weight):
        return None, ""
    x = _shipped()["x"].astype(np.float64).reshape(-1, D_K)  # [B*L, d_model]
    weight = weight.astype(np.float64)  # [d_k, d_model] = G'ᵀ (the layer's input)
    coef = np.linalg.lstsq(x.T, weight.T, rcond=None)[0]  # weight rows in x's row span?
    if not _close(x.T @ coef, weight.T, dict(rtol=1e-3, atol=1e-4)):
        return "layer_input_not_x", (f"the layer behind `{name}` was applied to a tensor "
                                     "that is not x (x was changed first).")
    if _close(weight, g.T @ x, dict(rtol=1e-3, atol=1e-4)):  # G reaches the layer unchanged
        total = g.sum(0)
        c = float(bias @ total / (total @ total))
        if not _close(bias, total):
            return "bias_misused", f"the bias enters `{name}` {_fmt(c)} times instead of once."
        return None, ""
    return "after_the_layer", (f"`{name}` is {mine}(x) changed after the layer (its "
                               "gradient does not reach the layer unchanged).")


def _upstream_slip(cell, inputs):
    """What is wrong with an input that a cell's error points to (a NumPy array, a tuple,
    a dtype other than float32), or "" when its inputs are fine or the error is its own."""
    if not re.match(r"(TypeError|RuntimeError|ValueError|AttributeError)\b", cell.error):
        return ""
    for v in inputs:
        made = f"`{v.name}` (made in Cell {MADE_IN.get(v.name, '?')})"
        if v.kind == "ndarray":
            return f"{made} is a NumPy array, not a torch tensor"
        if v.kind == "tensor" and v.dtype not in ("float32", ""):
            return f"{made} is {v.dtype}, while the lesson's tensors are float32"
        if v.kind not in ("tensor", "none", "missing"):
            return f"{made} is {v.describe()}, not a tensor"
    return ""


def _match_masked(step, name, arr, contexts):
    """(mistake id, what we saw) of an entry whose output holds -inf (a mask), or None."""
    for m in _value_entries(step):
        if m.reproduce is None:
            continue
        for ctx in contexts:
            for variant in ctx.variants(m, name):
                if _close_masked(arr, variant):
                    masked = int(np.isneginf(arr).sum())
                    return m.id, (f"`{name}` holds -inf at {masked} of its {arr.size} "
                                  f"entries; it equals {m.shows}.")
    return None, ""


def _judge_output(step, name, view, contexts, strict, inputs, cell):
    """The verdict on one output tensor ``name`` of ``step``; ``inputs``: upstream views."""
    f = _Finding()
    if view.kind in ("missing", "none"):
        holds = "is not defined" if view.kind == "missing" else "still holds None"
        if cell.misspelled and cell.misspelled[1] == name:  # (then its own asserts raise)
            f.mistake = "misspelled_name"
            f.seen = (f"your Cell {cell.number} assigns `{cell.misspelled[0]}`, so `{name}` "
                      f"{holds}.")
        elif cell.raised:
            f.mistake = _error_entry(cell.error, cell.line) or "cell_raised"
            f.seen = f"{cell.said()}, so `{name}` {holds}."
            # An error named as the cell's own mistake (torch.sqrt of an int, .T on 3-D ...)
            # stays its own; a generic or dtype/shape error is put down to a slipped input.
            slip = _upstream_slip(cell, inputs) if f.mistake in (
                "cell_raised", "mixed_dtypes", "matmul_shapes") else ""
            if slip:
                f.mistake, f.seen = "upstream_slip", f"{cell.said()}: {slip}."
            elif f.mistake == "used_before_computed" and inputs and all(
                    v.kind in ("tensor", "ndarray") for v in inputs):
                f.mistake = "returned_none"
        else:
            f.mistake = "not_computed"
            f.seen = (f"`{name}` {holds}: it has not been computed yet; run your Cell "
                      f"{MADE_IN[name]} code first." if not cell.replayed else
                      f"your Cell {cell.number} runs without error but never assigns `{name}`.")
        return f
    if view.kind == "function":
        f.mistake = "function_not_called"
        f.seen = f"`{name}` is {view.describe()}, not a tensor."
        return f
    if view.kind not in ("tensor", "ndarray"):
        f.mistake = "bad_type"
        f.seen = (f"`{name}` should be a torch tensor of shape {list(SHAPES[name])}, but it "
                  f"is {view.describe()}. Keep the result as a tensor (no .tolist(), no str()).")
        return f
    arr = view.real
    if arr is None:
        if view.layout != "strided":
            reason = f"it is a {view.layout} tensor (use a dense one)"
        elif view.note:
            reason = view.note
        else:
            reason = f"its dtype is {view.dtype or 'unknown'}"
        f.mistake = "bad_type"
        f.seen = (f"`{name}` should hold real floating-point numbers in a dense tensor, but "
                  f"{reason}.")
        return f
    if not np.isfinite(arr).all():
        f.mistake, f.seen = _match_masked(step, name, arr, contexts)
        if f.mistake is None:
            f.mistake = "nan_or_inf"
            f.seen = (f"`{name}` contains {int((~np.isfinite(arr)).sum())} NaN or inf "
                      "value(s).")
        return f
    tol = LOW_TOL.get(view.dtype, TOL)
    for ctx in contexts:
        expected = ctx.expected(name)
        lost = (arr.shape == expected.shape[1:] and expected.shape[:1] == (1,)
                and _close(arr, expected[0], tol))
        if lost or _close(arr, expected, tol):
            _right(f, step, name, view, arr, expected[0] if lost else expected, lost, tol,
                   inputs, strict, cell, ctx.inp)
            return f
    f.mistake, f.seen = _match_value(step, name, arr, contexts, view)
    if f.mistake is None and cell.raised and not cell.error.startswith("AssertionError"):
        f.mistake = _error_entry(cell.error, cell.line) or "cell_raised"
        f.seen = f"{cell.said()}; `{name}` holds a value that is not right (maybe from before)."
    if f.mistake is not None:
        return f
    expected = contexts[0].expected(name)
    if arr.shape != expected.shape:
        f.message = (f"`{name}` has shape {list(arr.shape)}, not {list(expected.shape)} "
                     f"{AXES[name]}. Next step: check the order of the operands and which axis "
                     "you transpose or reduce.")
        return f
    err = np.abs(arr - expected)
    i = np.unravel_index(int(err.argmax()), err.shape)
    f.message = (f"`{name}` has the right shape but wrong values. Next step: compare your "
                 "code with the formula above, line by line, and open the hint.\n"
                 f"What we saw: the largest difference is {_fmt(err.max())} at index "
                 f"{list(map(int, i))} (expected {_fmt(expected[i])}, got {_fmt(arr[i])}); "
                 "it matches none of the common mistakes.")
    return f


def _right(f, step, name, view, arr, exact, lost, tol, inputs, strict, cell, inp):
    """The values are right: charge the slips this cell made (shape, dtype, type)."""
    if lost:
        f.costs.append(("lost_batch_dimension", f"`{name}` has shape {list(arr.shape)} but "
                        f"should be {list(SHAPES[name])} {AXES[name]}."))
    in_dtypes = [v.dtype for v in inputs if v.kind in ("tensor", "ndarray")]
    want = _promoted(in_dtypes)
    if view.dtype not in (want, "float32"):  # float32, the lesson's dtype, is always fine
        f.costs.append(("wrong_dtype", f"`{name}` has the right values but dtype "
                        f"{view.dtype}, while this cell's inputs were {want}."))
    if view.kind == "ndarray" and (not inputs or any(v.kind == "tensor" for v in inputs)):
        f.costs.append(("not_a_tensor", f"`{name}` is a NumPy array, while this cell's "
                        "inputs were torch tensors."))
    if tol is TOL and not _close(arr, exact, STRICT_TOL):
        err = float(np.abs(arr - exact).max())
        _strict(f, strict, "imprecise", f"`{name}` differs from the exact result by up to "
                f"{_fmt(err)}.")
    if step != "attention_weights" and view.grad_error:  # (Cell 6: the softmax's own)
        _strict(f, strict, "backward_fails", f"`{name}` has the right values, but its "
                f"gradient raised {_short(view.grad_error, 160)}")
    elif step != "projections" and view.kind == "tensor" and cell.replayed and not lost \
            and not cell.mutated and not cell.own:  # (own inputs may not require grad)
        wrong = _input_gradients(step, name, view, inp, arr)
        if wrong:
            _strict(f, strict, "detached_output", f"`{name}` has the right values, but {wrong}.")
    if step == "projections" and view.kind == "tensor" and view.grads:
        wrong = _provenance(name, view.grads)
        if wrong:
            _strict(f, strict, "detached_projection", f"`{name}` has the right values but "
                    f"its gradient with respect to {wrong} is not the one "
                    f"{name[0]}_proj(x) has: it does not come from that layer as the formula "
                    "does.")
    elif step == "projections" and view.kind == "tensor":
        layer = f"{name[0]}_proj.weight"
        if layer not in view.made_by:
            how = ("it does not require grad" if not view.requires_grad else
                   f"its autograd graph holds {', '.join(view.made_by) or 'no parameters'}")
            _strict(f, strict, "detached_projection", f"`{name}` has the right values but "
                    f"{how}: it is not connected to {name[0]}_proj's weight.")


def _provenance(name, grads):
    """The first parameter whose gradient (see src/replay.py) differs from q_proj(x)'s, or
    "" when all agree: query = q_proj(x) has d/dW = Gᵀx, d/db = ΣG, and 0 for the rest."""
    from src.replay import output_gradient

    x = _shipped()["x"].astype(np.float64).reshape(-1, D_K)  # [B*L, d_model]
    g = output_gradient(SHAPES[name]).astype(np.float64).reshape(-1, D_K)  # [B*L, d_k]
    for layer in ("q_proj", "k_proj", "v_proj"):
        mine = layer[0] == name[0]
        for part, want in (("weight", g.T @ x), ("bias", g.sum(0))):
            got = grads.get(f"{layer}.{part}")
            want = want if mine else np.zeros_like(want)
            if got is None or got.shape != want.shape or not _close(got, want, dict(
                    rtol=1e-3, atol=1e-4)):
                return f"{layer}.{part}"
    return ""


def _input_gradients(step, name, view, inp, out):
    """Why ``view`` (a replay's output ``out`` on inputs ``inp``, which require grad) does
    not depend on them as the formula does, or "": its gradient of sum(out * G) with
    respect to each input must be the formula's (src/replay.py, output_gradient)."""
    from src.replay import output_gradient

    if not view.requires_grad:
        return "it does not require grad: it was cut off from the autograd graph"
    if not view.grads:  # (backward itself failed, e.g. after an in-place op: not judged)
        return ""
    swap = _swap
    g = output_gradient(out.shape).astype(np.float64)
    if step == "attention_scores":
        scale = 1 / math.sqrt(D_K)
        want = {"query": g @ inp["key"] * scale, "key": swap(g) @ inp["query"] * scale}
    elif step == "attended_values":
        want = {"attention_weights": g @ swap(inp["value"]),
                "value": swap(inp["attention_weights"]) @ g}
    else:
        want = {"attention_scores": out * (g - (out * g).sum(-1, keepdims=True))}
    for n, expected in want.items():
        got = view.grads.get(n)
        # Only no dependence is charged: an equivalent formula (weights renormalised, the
        # max kept in the graph) may have another gradient, and is right.
        if got is None or got.shape != expected.shape or not np.any(got):
            return f"it does not depend on `{n}`: it was computed from other tensors"
    return ""


def _strict(f, strict, mistake_id, seen):
    """A strict-only shortfall: deducted when strict, else shown as pending."""
    (f.costs if strict else f.pending).append((mistake_id, seen))


def _points(x):
    return f"{_num(x)} point" + ("" if x == 1 else "s")


def _cost(mistake_id):
    return MISTAKES[mistake_id].cost if mistake_id in MISTAKES else 1.0


def _result(step, findings, ok_message, notes, cell, seen):
    """One CheckResult from per-tensor findings [(name, _Finding)]."""
    points, notes = POINTS[step], list(notes)
    failures = [(n, f) for n, f in findings if f.failed]
    charged, pending = _merged(findings, "costs"), _merged(findings, "pending")
    whole = False  # the in-place change also made the result wrong: it costs the step
    if cell.replayed and cell.mutated and step not in ("softmax", "attention_weights"):
        # (Cell 6: the softmax's own mistake, charged there)
        changed = _listing(cell.mutated)
        seen = f"after your Cell {cell.number} ran, {changed} held other numbers than before."
        if not failures:
            charged.setdefault("changes_input", seen)
        elif failures[0][1].mistake is None or MISTAKES[failures[0][1].mistake].kind in (
                "behaviour", "factor"):
            # A wrong result read off as a behaviour is what the changed input made: the
            # change is the mistake to fix first.
            failures = [("", _Finding("changes_input", seen + " The result was computed "
                                      "from the changed values.")), *failures]
            whole = True
    # Only code that runs to the end earns its points (the softmax function, probed on its
    # own, is judged whatever happens after its def).
    raised = cell.replayed and cell.raised and step != "softmax"
    if raised and not failures and not charged:  # (else what made its asserts fail leads)
        failures = [("", _Finding(
            _error_entry(cell.error, cell.line) or "cell_raised",
            f"{cell.said()}. The names it had assigned by then are right, but a step earns "
            "its points only when its cell runs to the end."))]
    if failures:
        main = failures[0][1]
        same = [name for name, f in failures[1:] if f.mistake and f.mistake == main.mistake]
        if same:  # one mistake of several tensors: said once
            notes.append(f"The same holds for {_listing(same)}.")
        for name, f in failures[1:]:
            if name not in same:
                notes.append(f"Also `{name}`: {MISTAKES[f.mistake].title} — {f.seen}"
                             if f.mistake else f"Also: {f.message}")
        mistake = main.mistake
        message = _mistake_text(mistake, main.seen) if mistake else main.message
        cost = _cost(mistake) if mistake else 1.0
        for mid, what in charged.items():
            if mid != mistake:
                notes.append(f"Also: {MISTAKES[mid].title} — {what}")
                cost += _cost(mid)
        shortfalls = [mid for mid in [mistake, *charged] if mid and _cost(mid) < 1]
        mentioned = main.seen
    elif charged:
        mistake, shortfalls = next(iter(charged)), list(charged)
        message = "\n\n".join(_mistake_text(mid, what) for mid, what in charged.items())
        cost, mentioned = sum(_cost(mid) for mid in charged), message
    else:
        mistake, shortfalls, message, cost, mentioned = None, [], ok_message, 0.0, ""
    shortfalls = list(dict.fromkeys(shortfalls))
    for mid, what in pending.items():
        m = MISTAKES[mid]
        notes.append(f"The graded run also checks this and takes {_points(points * m.cost)} "
                     f"off: {m.title} — {what} Next step: {m.next_step}.")
    if cell.raised and cell.error not in mentioned:
        notes.append(f"Note that {cell.said()} when it last ran; this check used what the "
                     "names hold now.")
    if raised or whole:
        cost = 1.0
    score = round(points * max(0.0, 1.0 - cost), 6)
    passed = not failures and not charged
    return CheckResult(step, passed, score, points, _tidy(message), mistake, notes,
                       shortfalls, list(pending), seen)


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
        if arr is not None and arr.size and np.isfinite(arr).all():
            out[name] = arr
    return out


def _judge_tensors(step, r, strict, cell):
    names = NAMES[step]
    views = {n: r.tensor(n) for n in names.all}
    contexts, notes = _contexts(step, views)
    if r.flag("replay.own"):  # a second run, on the student's own inputs: judged on them
        # (equal to the lesson's but for their dtype, they are judged as the lesson's)
        contexts = [c for c in contexts if c.label == "your own tensors" or not notes]
        if not contexts:
            return _failed(step, "Not judged on your own tensors (they equal the lesson's, "
                           "or are degenerate).")
    own = contexts.pop() if contexts[-1].label == _DEGENERATE else None
    inputs = [views[n] for n in names.upstream]
    findings = [(n, _judge_output(step, n, views[n], contexts, strict, inputs, cell))
                for n in names.outputs]
    # (the replay's scores are a DivBackward0 of a leaf: allowed, like every node of a
    # softmax written by hand)
    builtin = [_node_label(n) for n in views[names.outputs[0]].graph
               if n not in SOFTMAX_ALLOWED]
    own_builtin = [c for c in r.strings("softmax.calls") if c.split(".")[-1] in BUILTIN_SOFTMAX]
    own_builtin += _not_allowed(r)
    if step == "attention_weights" and builtin and not own_builtin and \
            not findings[0][1].failed:  # (a softmax that calls it is charged there, once)
        findings[0][1].costs.append(("weights_not_from_your_softmax", "the autograd graph "
                                     f"of `attention_weights` holds {builtin[0]}."))
    if not r.flag("replay.own"):  # right here: right on other inputs too?
        for n, f in findings:
            if not f.failed:
                f.mistake, f.seen = _variant_verdict(step, n, r) or (None, "")
    course = r.strings("replay.course_code")
    if course and not findings[0][1].failed and not (
            step == "attention_weights" and r.strings("softmax.course_code")):
        # (a softmax that runs it is charged there, once)
        findings[0][1].mistake = "runs_course_code"
        findings[0][1].seen = (f"your Cell {cell.number} calls {course[0]}, which ships with "
                               "the course.")
    for n, f in findings:  # unnamed, but the formula applied to degenerate inputs
        arr = views[n].real
        named = f.message or (f.mistake in MISTAKES and MISTAKES[f.mistake].kind == "behaviour")
        if own is not None and named and arr is not None and _close(arr, own.expected(n)):
            f.message, f.mistake = "", "degenerate_upstream"
            f.seen = (f"`{n}` is what the formula gives on your tensors from the cells before, "
                      "but they are degenerate (see the note), so it cannot be told apart "
                      "from a wrong formula.")
    out, shape = names.outputs, list(SHAPES[names.outputs[0]])
    seen = list(views[out[0]].shape or shape)  # say the shape it has, not the lesson's
    if seen != shape and len(seen) != len(shape) - 1:  # (a lost batch axis is charged)
        ok = (f"{_listing(out)} {seen} {'is' if len(out) == 1 else 'are'} right for your own "
              f"tensors from the cells before (the lesson's shape is {shape}).")
    else:
        ok = (f"`{out[0]}` {shape} is correct." if len(out) == 1 else
              f"{_listing(out)} {shape} are correct.")
    return _result(step, findings, ok, notes, cell, _seen_arrays(views))


# ----------------------------------------------------------- judge: softmax
@lru_cache(maxsize=None)
def _fn_outputs(mistake_id, probe_index):
    """What each variant of softmax mistake ``mistake_id`` returns on a probe (None: raises)."""
    probe = _probes()[probe_index]
    outs = []
    for fn in MISTAKES[mistake_id].fns:
        try:
            out = np.asarray(fn(probe.x.copy(), probe.dim), dtype=np.float64)
            outs.append(out if out.shape == probe.x.shape else out)
        except (ValueError, IndexError, TypeError):
            outs.append(None)
    return tuple(outs)


#: Softmax mistakes about the all -inf row; the others are compared without that row,
#: so that they are recognised whether or not the student's softmax guards it.
MASK_MISTAKES = ("fully_masked_row", "finite_mask_value")


@lru_cache(maxsize=None)
def _probe_table(i):
    """Every softmax mistake variant's output on probe ``i``, stacked once per process:
    (owners [(mistake id, variant)], outputs [n, *shape], raises [n], comparable [n])."""
    shape = _probes()[i].x.shape
    owners, rows, raises, usable = [], [], [], []
    for m in _ENTRIES:
        if m.step != "softmax" or not m.fns:
            continue
        for v, out in enumerate(_fn_outputs(m.id, i)):
            owners.append((m.id, v))
            ok = out is not None and out.shape == shape
            rows.append(out if ok else np.full(shape, np.nan))
            raises.append(out is None)
            usable.append(ok)
    return owners, np.stack(rows), np.array(raises), np.array(usable)


def _probe_matches(i, out):
    """{(mistake id, variant): whether it gives ``out`` on probe ``i``} (None: it raised)."""
    owners, table, raises, usable = _probe_table(i)
    if out is None:
        return dict(zip(owners, raises))
    if out.shape != table.shape[1:]:
        return dict.fromkeys(owners, False)
    a = out[None]
    with np.errstate(all="ignore"):
        close = np.abs(a - table) <= 1e-5 + 1e-3 * np.abs(table)
        same = (a == table) | (np.isnan(a) & np.isnan(table))
        ok = np.where(np.isfinite(table), close, same) & usable.reshape((-1,) + (1,) * out.ndim)
        whole = ok.reshape(len(owners), -1).all(1)
        rest = ok[:, 1:].reshape(len(owners), -1).all(1) if i == MASKED_PROBE else whole
    return {o: bool(whole[k] if o[0] in MASK_MISTAKES else rest[k])
            for k, o in enumerate(owners)}


def _explanations(outs):
    """For each softmax mistake: the probes where one of its variants gives the output,
    and whether a single variant gives every output."""
    table = [_probe_matches(i, out) for i, out in enumerate(outs)]
    result = {}
    for m in _ENTRIES:
        if m.step != "softmax" or not m.fns:
            continue
        variants = range(len(m.fns))
        every = any(all(t[(m.id, v)] for t in table) for v in variants)
        probes = {i for i, t in enumerate(table) if any(t[(m.id, v)] for v in variants)}
        result[m.id] = (every, probes)
    return result


def _probe_seen(probe, out, error, line):
    if error:
        at = f" at `{line}`" if line else ""
        return f"on {probe.label} ({probe.shown}) your softmax raised {error}{at}."
    return (f"on {probe.label} ({probe.shown}) your softmax returned {_fmt(out)} instead "
            f"of {_fmt(probe.expected)}.")


#: Readable names of autograd nodes a student meets (others: the node's own name).
_READABLE_NODES = {
    "SafeSoftmaxBackward0": "torch._safe_softmax (what F.scaled_dot_product_attention runs)",
    "MmBackward0": "a matrix product (@, mm)", "BmmBackward0": "a matrix product (@, bmm)",
}


def _node_label(node):
    """How a message names the operation that left autograd node ``node``."""
    if node in _NODE_LABELS:
        return _NODE_LABELS[node]
    if node in _READABLE_NODES:
        return _READABLE_NODES[node]
    if node.startswith("ScaledDotProduct"):
        return f"F.scaled_dot_product_attention ({node})"
    plain = re.fullmatch(r"([A-Z][A-Za-z0-9]*?)Backwards?\d*", node)  # SigmoidBackward0
    if not plain:
        return node
    return "torch." + re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", plain.group(1)).lower()


def _not_allowed(r):
    """The nodes in the graphs of the softmax's outputs on the probes that no operation of
    :data:`SOFTMAX_OPS` makes."""
    other = [n for n in r.strings("softmax.nodes") if n not in SOFTMAX_ALLOWED]
    # the one that computes a softmax first: the message names it
    return sorted(other, key=lambda n: not re.search("Softmax|ScaledDotProduct", n))


_SOFTMAX_OK = ("Your softmax matches torch.softmax on every probe: ordinary rows, rows far "
               "apart, logits of ±1e4, masked (-inf) keys, a fully masked row (zeros) and "
               "every dim, without changing its input.")


def _judge_softmax(r, strict, cell):
    f = _Finding()
    result = lambda: _result("softmax", [("softmax", f)], _SOFTMAX_OK, [], cell, {})  # noqa: E731
    verdict = _softmax_verdict(r, strict, cell)
    if isinstance(verdict, _Finding):
        f = verdict
    elif MISTAKES[verdict[0]].strict_only:  # a shortfall of a working softmax
        _strict(f, strict, *verdict)
    else:
        f.mistake, f.seen = verdict
    return result()


def _softmax_verdict(r, strict, cell):
    """(mistake id, what we saw), or a _Finding (unnamed failure or a pass)."""
    kind = r.tensor("softmax", "").kind
    if kind in ("missing", "none"):
        if cell.raised:
            return (_error_entry(cell.error, cell.line) or "cell_raised",
                    f"{cell.said()}, so `softmax` is not defined yet.")
        return ("not_computed", "`softmax` is not defined yet: run your Cell 6 code (the "
                "def softmax(...) block) first.")
    if kind in ("tensor", "ndarray"):
        return "softmax_shadowed", f"`softmax` is now {r.tensor('softmax', '').describe()}."
    if kind != "function":
        return ("bad_type", "`softmax` should be the function you define in Cell 6, but it is "
                f"{r.tensor('softmax', '').describe()}.")
    if r.text("softmax.error"):
        return "softmax_raises", f"your softmax {r.text('softmax.error')}."
    probes = _probes()
    n = len(probes)
    raised = [(r.strings(f"softmax.p{i}.raised") + ["", ""])[:2] for i in range(n)]
    errors, lines = [e for e, _ in raised], [line for _, line in raised]
    # What ran, read off the autograd graphs of its outputs (the probes', and the weights'
    # in the replay): a node of a built-in softmax, or a Function written by hand.
    calls = r.strings("softmax.calls")  # (the weights' own graph: see _judge_tensors)
    builtin = list(dict.fromkeys(c for c in calls if c.split(".")[-1] in BUILTIN_SOFTMAX))
    if builtin:
        return "uses_builtin_softmax", f"your softmax calls {', '.join(builtin)}."
    course = r.strings("softmax.course_code")
    if course:
        return ("softmax_runs_course_code", f"calling your softmax runs {course[0]}, "
                "which ships with the course.")
    if r.flag("replay.python_node"):
        return ("custom_autograd", "the weights' autograd graph holds a Function of your "
                "own (a class with forward and backward).")
    mutated = [i for i in range(n) if r.flag(f"softmax.p{i}.mutated")]
    if mutated:
        return "mutates_input", f"calling softmax on {probes[mutated[0]].shown} changed that x."
    if "attention_scores" in cell.mutated:
        return "mutates_input", "after your Cell 6 ran, `attention_scores` held other numbers."
    weights = r.tensor("attention_weights")
    detached = [i for i in range(n) if r.flag(f"softmax.p{i}.detached")]
    same = _same_for_every_input(r, probes)
    if same:
        return "ignores_its_input", same
    outs = []
    for i, p in enumerate(probes):
        if errors[i]:
            outs.append(None)
            continue
        view = r.tensor(f"softmax.p{i}.out", "")
        arr = view.real
        if view.kind != "tensor" or arr is None:
            what = view.describe()
            if view.kind == "tensor" and view.layout != "strided":
                what = f"a {view.layout} tensor"
            elif view.kind == "tensor" and view.dtype.startswith("complex"):
                what = f"a complex tensor ({view.dtype}): the softmax of real numbers is real"
            elif view.note:
                what += f" ({view.note})"
            return ("bad_output", f"on {p.shown} your softmax returned {what}. It should "
                    "return a real, dense float tensor shaped like x.")
        if arr.shape != p.x.shape:
            return ("bad_output", f"on {p.shown} your softmax returned shape "
                    f"{list(arr.shape)} for an input of shape {list(p.x.shape)}; keep the "
                    "shape (keepdim=True in max and sum, and return exps / sums).")
        outs.append(arr)
    wrong = [i for i, (p, out) in enumerate(zip(probes, outs))
             if out is None or not _close(out, p.expected)]
    # Right values that left autograd (a built-in under no_grad, NumPy inside ...): a probe
    # whose values are wrong is named by those instead.
    left = [i for i in detached if i not in wrong]
    if left:
        return ("softmax_leaves_autograd", f"on {probes[left[0]].shown}, an input that "
                "requires grad like the lesson's scores, it returned a tensor that does not.")
    if not wrong:  # (no precision item: float32 rounds logits of 1e4 to 1e-3)
        # Right values from an operation a softmax written by hand does not need: a
        # built-in that holds a softmax (wrong values are named by what they are instead).
        other = _not_allowed(r)
        if other:
            return ("softmax_not_allowed_op", f"your softmax's autograd graph holds "
                    f"{_listing([_node_label(n) for n in other[:2]])}. A "
                    "softmax written by hand needs only: "
                    f"{'; '.join(SOFTMAX_OPS)}.")
        if weights.grad_error and weights.real is not None and _close(
                weights.real, _reference()["attention_weights"]):
            return ("backward_fails", "the weights your softmax made are right, but their "
                    f"gradient raised {_short(weights.grad_error, 160)}")
        return _gradient_verdict(weights) or _Finding()
    explained = _explanations(outs)
    i = wrong[0]
    for mid, (every, _) in explained.items():
        if every:
            return mid, _probe_seen(probes[i], outs[i], errors[i], lines[i])
    masked = probes[MASKED_PROBE]
    if wrong == [MASKED_PROBE] and outs[MASKED_PROBE] is not None and \
            _close(outs[MASKED_PROBE][1:], masked.expected[1:]):
        return "fully_masked_row", _probe_seen(masked, outs[MASKED_PROBE], "", "")
    last = [j for j, p in enumerate(probes) if p.dim in (-1, p.x.ndim - 1)]
    if last and not set(last) & set(wrong):  # right along the last axis, and only there
        j = wrong[0]
        return "softmax_last_axis_only", _probe_seen(probes[j], outs[j], errors[j], lines[j])
    failed = [j for j in wrong if errors[j]]
    for j in failed:
        mid = _error_entry(errors[j], lines[j])
        if mid:
            return mid, _probe_seen(probes[j], None, errors[j], lines[j])
    if failed:
        j = failed[0]
        return "softmax_raises", _probe_seen(probes[j], None, errors[j], lines[j])
    # No entry gives its output on every probe: say what it does instead (a partial match
    # named one mistake for another).
    tame = [j for j in wrong if _tame(probes[j]) and outs[j] is not None]
    for mid, (_, where) in explained.items():  # wrong on ordinary numbers as an entry is
        if tame and set(tame) <= where:
            return mid, _probe_seen(probes[tame[0]], outs[tame[0]], "", "")
    behaviour = _softmax_behaviour(probes, outs, wrong)
    if behaviour:
        return behaviour
    found = _Finding()
    found.message = (f"Your softmax is wrong on {probes[i].label}. Next step: exponentiate "
                     "x minus its max along dim, then divide by the sums along dim.\n"
                     f"What we saw: on {probes[i].shown} it returned {_fmt(outs[i])} instead "
                     f"of {_fmt(probes[i].expected)}; it matches none of the common mistakes.")
    return found


def _same_for_every_input(r, probes):
    """What we saw, when the softmax gave one and the same output for different probes."""
    outs = [r.tensor(f"softmax.p{i}.out", "").real for i in range(len(probes))]
    got = [(i, o) for i, o in enumerate(outs) if o is not None]
    shapes = {probes[i].x.shape for i, _ in got}
    if len(got) < 3 or any(o.shape != got[0][1].shape for _, o in got) or (
            len(shapes) < 2 and any(not np.array_equal(o, got[0][1]) for _, o in got)):
        return ""  # (one output shape for inputs of several shapes: not computed from x)
    return (f"on {probes[got[0][0]].shown} and on {probes[got[1][0]].shown} it returned the "
            f"same {list(got[0][1].shape)} result, {_fmt(got[0][1])}.")


def _tame(probe):
    """An input of ordinary numbers (no -inf, nothing large enough to overflow exp)."""
    return bool(np.isfinite(probe.x).all() and np.abs(probe.x).max() < 50)


def _softmax_behaviour(probes, outs, wrong):
    """(behaviour entry, what we saw) for a softmax no entry reproduces, or None: what
    it does to ordinary inputs first, then to large or -inf ones."""
    def seen(i, what):
        return f"on {probes[i].label} ({probes[i].shown}) {what}."

    last = [i for i, p in enumerate(probes) if p.dim == -1]
    if all(i not in wrong for i in last) and outs[wrong[0]] is not None:
        i = wrong[0]
        return "ignores_dim", seen(i, f"it returned {_fmt(outs[i])} instead of "
                                      f"{_fmt(probes[i].expected)}")
    tame = [i for i in wrong if _tame(probes[i]) and outs[i] is not None]
    for i in tame:  # wrong on ordinary numbers: the formula itself
        out, p = outs[i], probes[i]
        if np.isfinite(out).all() and (out < -1e-6).any():
            return "softmax_negative", seen(i, f"it returned {_fmt(out)}")
        sums = out.sum(axis=p.dim)
        if not np.isfinite(out).all() or not np.allclose(sums, 1.0, atol=1e-4):
            return "softmax_not_normalised", seen(
                i, f"the sums along dim={p.dim} are {_fmt(sums)}, not 1")
        return "softmax_not_exp", seen(i, f"it returned {_fmt(out)} instead of "
                                          f"{_fmt(p.expected)}")
    for i in wrong:  # wrong where no -inf is, on an input holding -inf elsewhere
        p = probes[i]
        clean = ~np.isneginf(p.x).any(axis=p.dim, keepdims=True)  # slices without -inf
        if outs[i] is not None and np.isneginf(p.x).any() and clean.any() and not _close(
                *(np.where(clean, a, 0) for a in (outs[i], p.expected))):
            return "softmax_masks_too_much", seen(i, f"it returned {_fmt(outs[i])}, "
                                                     f"instead of {_fmt(p.expected)}")
    for i in wrong:  # right on ordinary numbers, wrong on large or -inf ones
        if outs[i] is None:
            continue
        p = probes[i]
        inf = np.isneginf(p.x).any()
        return ("softmax_mishandles_inf" if inf else "softmax_overflows",
                seen(i, f"it returned {_fmt(outs[i])} instead of {_fmt(probes[i].expected)}"))
    return None


#: Autograd nodes that only a built-in softmax leaves (torch.softmax, F.softmax,
#: Tensor.softmax, softmin, torch.special.softmax, torch.ops.aten._softmax ...).


def _gradient_verdict(weights):
    """("softmax_wrong_gradient", seen) when the replay's weights are right but their
    gradient with respect to the scores is not the softmax's; else None."""
    got = weights.grads.get("attention_scores")
    ref = _reference()
    if got is None or weights.real is None or not _close(weights.real,
                                                         ref["attention_weights"]):
        return None
    if softmax_gradient_is_right(ref["attention_scores"], got):
        return None
    return ("softmax_wrong_gradient", "on the lesson's scores the weights are right, but "
            "their gradient with respect to the scores is not the softmax's.")


def softmax_gradient_is_right(scores, got) -> bool:
    """Whether ``got`` [..., S], the gradient of sum(softmax(scores) * G) with respect to
    ``scores`` [..., S] (G = src.replay.output_gradient), is the softmax's, compared per
    group of tied scores (see :func:`tie_group_sums`): the verdict is the same whether
    two scores tie to the last bit or differ by one ulp."""
    from src.replay import output_gradient

    scores = np.asarray(scores, np.float64)
    w = _softmax(scores)
    g = output_gradient(w.shape).astype(np.float64)
    want = w * (g - (w * g).sum(-1, keepdims=True))  # the softmax's vector-Jacobian product
    got = np.asarray(got)
    return got.shape == want.shape and _close(tie_group_sums(got, scores),
                                              tie_group_sums(want, scores), GRAD_TOL)


# ------------------------------------------------------------- judge: entry
def _judge_step(step, data, grade_id, strict=False):
    """One check's result from observed data; never raises."""
    try:
        with np.errstate(all="ignore"):
            r = _Reader(data)
            cell = _Cell.read(r, grade_id)
            if r.text("error"):
                return _failed(step, f"The observation failed: {r.text('error')}")
            if step == "softmax":
                return _judge_softmax(r, strict, cell)
            return _judge_tensors(step, r, strict, cell)
    except Exception as exc:  # noqa: BLE001  (the student must never see our traceback)
        return _failed(step, f"The check could not read these results ({_error_text(exc)}). "
                       "Make sure every tensor comes from the cells above.")


def _failed(step, message):
    return CheckResult(step, False, 0.0, POINTS.get(step, 0.0), _tidy(_short(message, 400)))


def judge(grade_id: str, data: Mapping, *, strict: bool = False) -> Summary:
    """The results of ``grade_id``'s checks, computed from :func:`observe`'s data only.

    Pure and trusted: no student object is called and torch is not needed.
    Never raises, whatever ``data`` holds (missing keys, wrong dtypes or
    shapes, NaN, strings for numbers): such data gives failed results with a
    message. ``strict=True`` (the graded run) also deducts the
    ``strict_only`` catalogue items (float32 precision, projections made by
    the given layers) as partial credit; nothing else changes.

    Shape legend: see :func:`observe`.
    """
    try:
        steps = list(GRADE_CELLS[grade_id])
    except (KeyError, TypeError):
        return Summary([CheckResult(_short(grade_id, 80), False, 0.0, 0.0,
                                    f"Unknown grade cell {_short(repr(grade_id), 80)}; "
                                    f"expected one of {', '.join(GRADE_CELLS)}.")])
    return Summary([_judge_step(step, data, grade_id, bool(strict)) for step in steps])


def judge_replay(grade_id: str, data: Mapping, own: Mapping | None = None, *,
                 strict: bool = False) -> Summary:
    """``grade_id``'s results from a replay of its step cell (src/replay.py).

    ``data``: the cell's own code on the reference inputs; that is what counts.
    ``own``: the same code on the student's own tensors from the cells before,
    when they differ from the reference (an earlier slip). When the code raised
    on the lesson's inputs but is fully right on its own (code adapted to that
    slip, such as ``weights @ value.double()`` after float64 weights), that
    result counts instead, so an earlier slip is never charged twice.
    """
    ref = judge(grade_id, data, strict=strict)
    if not isinstance(own, Mapping) or not _Reader(data).strings("cell.raised"):
        return ref  # (code that runs on the lesson's inputs is judged on them alone)
    mine = judge(grade_id, own, strict=strict)
    results = []
    for r, o in zip(ref.results, mine.results):
        if o.score == o.max_score > r.score:  # right, gradients included, for its inputs
            o.notes.append("Judged on your own tensors from the cells before, which differ "
                           "from the lesson's: on the lesson's, " + _short(
                               r.message.partition("\n")[0], 160))
            r = o
        results.append(r)
    return Summary(results)
