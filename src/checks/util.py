"""The engine's small tools: comparing, formatting and limits. Lesson-free; NumPy only.

Every lesson's spec (``src/lessons/``) and every part of the engine (observe, judge,
replay, road) uses these; nothing here knows a cell, a step or a tensor's name.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Limits of the observed data and of the messages: a run's arrays stay under
#: total_bytes (one array under array_bytes); message parts are cut at text, line and
#: error characters; at most names strings per list and graph_nodes nodes per graph; a
#: student's own tensor larger than own_elements is not used as a step's input.
LIMITS = dict(total_bytes=int(3.5 * 2**20), array_bytes=1 * 2**20, text=200, line=120,
              error=160, names=48, graph_nodes=5000, own_elements=2**16)
#: What the kernel side records about every object (``t.<name>.info``), in this order.
INFO_FIELDS = ("kind", "type", "dtype", "layout", "device", "requires_grad", "grad_fn",
               "note")
#: The comparison of a float32 result with a float64 reference, unless a lesson's spec
#: says otherwise.
TOL = dict(rtol=1e-4, atol=1e-5)
#: Fixed output gradients for the dependence checks (the replay backpropagates them, the
#: judge recomputes them).
GRAD_SEED = 20261123


def output_gradient(shape) -> np.ndarray:
    """The fixed upstream gradient G (float32) the replay backpropagates for ``shape``."""
    return np.random.default_rng(GRAD_SEED).standard_normal(shape).astype(np.float32)


def _error_text(exc):
    """An exception as one short line: its type and message."""
    if isinstance(exc, SyntaxError):  # without the cell's temporary file name
        return _short(f"{type(exc).__name__}: {exc.msg} (line {exc.lineno})")
    return _short(f"{type(exc).__name__}: {exc}")


def _swap(a):
    return np.swapaxes(a, -1, -2)


def _softmax(x, axis=-1):
    """Stable softmax in the dtype of x; rows that are all -inf give zeros."""
    with np.errstate(all="ignore"):
        m = np.max(x, axis=axis, keepdims=True)
        m = np.where(np.isneginf(m), 0, m)
        e = np.exp(x - m)
        s = e.sum(axis=axis, keepdims=True)
        return e / np.where(s == 0, 1, s)


def _num(x):
    return f"{x:g}"


def _fmt(x):
    """A number or array as a short readable string (never 300 digits)."""
    try:
        arr = np.asarray(x)
        if arr.ndim == 0:
            v = arr.item()
            return f"{v:.4g}" if isinstance(v, (float, int, complex)) else str(v)[:40]
        text = np.array2string(arr, precision=3, separator=", ", suppress_small=True,
                               threshold=12, edgeitems=2, max_line_width=200,
                               formatter={"float_kind": lambda v: f"{v:.4g}",
                                          "complex_kind": lambda v: f"{v:.3g}"})
        return _short(text)
    except Exception:  # noqa: BLE001
        return "(unprintable)"


def _short(text, limit=None):
    limit = limit or LIMITS["text"]
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _listing(names):
    """`a`, `a` and `b`, `a`, `b` and `c`."""
    quoted = [f"`{n}`" for n in names]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " and " + quoted[-1]


def _close(a, b, tol=None):
    """np.allclose for arrays of the same shape. NaN is never close; an infinity is close
    only to the same infinity at the same place (a reference may hold -inf: a mask)."""
    tol = tol or TOL
    if a is None or b is None or a.shape != b.shape:
        return False
    with np.errstate(all="ignore"):
        # (finite b only: rtol * |inf| would call any number close to an infinity)
        near = (np.abs(a - b) <= tol["atol"] + tol["rtol"] * np.abs(b)) & np.isfinite(b)
        return bool((near | (np.isinf(a) & (a == b))).all())


def masks_agree(a, b) -> bool:
    """Whether ``a``'s entries that are not finite are exactly ``b``'s -inf entries (the
    same mask; no NaN, no +inf). True for two finite arrays of the same shape."""
    if a is None or b is None or a.shape != b.shape:
        return False
    return bool(np.array_equal(~np.isfinite(a), np.isneginf(b)) and
                np.array_equal(np.isneginf(a), np.isneginf(b)))


def finite_or_masked(a) -> bool:
    """No NaN and no +inf: finite, or -inf where a mask put it."""
    return a is not None and not (np.isnan(a).any() or np.isposinf(a).any())


def tie_group_sums(a, scores, tie_tol):
    """``a`` [..., S] with each entry replaced by the sum over its row's tie group: the
    entries whose ``scores`` [..., S] lie within ``tie_tol`` (relative to the row's
    largest) of one another (chained), so the result never depends on whether two
    scores are bitwise equal."""
    a, s = np.asarray(a, np.float64), np.asarray(scores, np.float64)
    flat_a, flat_s = a.reshape(-1, a.shape[-1]), s.reshape(-1, s.shape[-1])
    out = flat_a.copy()
    for row, (va, vs) in enumerate(zip(flat_a, flat_s)):
        order = np.argsort(vs, kind="stable")
        gap = tie_tol * max(float(np.abs(vs[np.isfinite(vs)]).max(initial=0.0)), 1.0)
        # A new group starts where the sorted scores step by more than the gap.
        starts = np.r_[True, ~(np.diff(vs[order]) <= gap)]
        group = np.cumsum(starts) - 1
        sums = np.bincount(group, weights=va[order])
        out[row, order] = sums[group]
    return out.reshape(a.shape)


def _close_masked(a, b, tol=None):
    """Like :func:`_close`, but -inf entries match where both arrays hold -inf, and NaN
    where both hold NaN (what torch's softmax gives a slice that is all -inf)."""
    if a is None or b is None or a.shape != b.shape:
        return False
    mask = np.isneginf(a) | np.isnan(a)
    if not (np.array_equal(np.isneginf(a), np.isneginf(b))
            and np.array_equal(np.isnan(a), np.isnan(b))) or not np.isfinite(a[~mask]).all():
        return False
    return _close(a[~mask], b[~mask], tol)


def _constant(a):
    """True when every entry of ``a`` is (nearly) the same number."""
    if a is None or a.size == 0:
        return True
    with np.errstate(all="ignore"):
        first = a.reshape(-1)[0]
        return bool(np.allclose(a, first, rtol=1e-6, atol=1e-9))


@dataclass(frozen=True)
class Probe:
    """A fixed input a student's function is called on, ``fn(x, dim=dim)``, and the
    right output."""

    label: str
    x: np.ndarray  # float32
    dim: int
    shown: str  # how the message shows the input
    expected: np.ndarray  # the right output (float64), from the lesson's reference
