"""What the lesson asks, in one place: names, shapes, points, tolerances, limits.

Also the reference every judgement compares with (computed in float64 from the
shipped ``data/``) and the softmax probes (the inputs a student's softmax is run
on). Imported by the kernel side and the judge alike; NumPy only. Shape legend:
B = 1 batch, L = S = 6 tokens, d_k = d_model = 64.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from src.data import load_arrays

D_K = 64
#: grade cell id -> {check (step) name: points}. The one place for points: the
#: notebook's nbgrader "points" equal these sums (a test compares them).
GRADE_CELLS: dict[str, dict[str, float]] = {
    "cell4_projections_test": {"projections": 2.0},
    "cell5_scores_test": {"attention_scores": 2.0},
    "cell6_softmax_test": {"softmax": 1.0, "attention_weights": 2.0},
    "cell7_values_test": {"attended_values": 2.0},
}
#: Points of each check.
POINTS: dict[str, float] = {s: p for steps in GRADE_CELLS.values() for s, p in steps.items()}
#: The grade cell of each check, and the student's cell it looks at.
GRADE_CELL_OF = {s: g for g, steps in GRADE_CELLS.items() for s in steps}
STEP_CELLS = {"cell4_projections_test": "cell4_projections",
              "cell5_scores_test": "cell5_scores",
              "cell6_softmax_test": "cell6_softmax",
              "cell7_values_test": "cell7_values"}
CELL_NUMBER = {"cell4_projections_test": 4, "cell5_scores_test": 5, "cell6_softmax_test": 6,
               "cell7_values_test": 7}
SHAPES = {"query": (1, 6, 64), "key": (1, 6, 64), "value": (1, 6, 64),
          "attention_scores": (1, 6, 6), "attention_weights": (1, 6, 6),
          "attended_values": (1, 6, 64)}
AXES = {"query": "[batch, token, feature]", "key": "[batch, token, feature]",
        "value": "[batch, token, feature]", "attention_scores": "[batch, query, key]",
        "attention_weights": "[batch, query, key]",
        "attended_values": "[batch, query, feature]"}
#: The cell where each tensor is computed.
MADE_IN = {"query": 4, "key": 4, "value": 4, "attention_scores": 5, "softmax": 6,
           "attention_weights": 6, "attended_values": 7}
TITLES = {"projections": "Cell 4 — linear projections",
          "attention_scores": "Cell 5 — scaled dot-product scores",
          "softmax": "Cell 6 — your softmax function",
          "attention_weights": "Cell 6 — attention weights",
          "attended_values": "Cell 7 — value aggregation"}


@dataclass(frozen=True)
class Names:
    """The names a check reads: what the step makes, its inputs, and extras
    (tensors a mistaken step may have used instead of its inputs)."""

    outputs: tuple
    upstream: tuple = ()
    extras: tuple = ()

    @property
    def all(self):
        return self.outputs + self.upstream + self.extras


NAMES = {
    "projections": Names(("query", "key", "value")),
    "attention_scores": Names(("attention_scores",), ("query", "key")),
    "softmax": Names(("softmax",)),
    "attention_weights": Names(("attention_weights",), ("attention_scores",)),
    "attended_values": Names(("attended_values",), ("attention_weights", "value"),
                             ("attention_scores", "query", "key")),
}
# float32 results against the float64 reference; the graded run is stricter.
TOL = dict(rtol=1e-4, atol=1e-5)
STRICT_TOL = dict(rtol=1e-5, atol=1e-6)
#: A gradient rule compares the student's gradient with the formula's within GRAD_TOL.
#: Scores of a row closer than TIE_TOL (relative to the row's largest) count as tied: at an
#: exact tie a correct softmax written with max or abs may split its gradient between the
#: tied entries in any way (whether two floats tie to the last bit depends on the CPU and
#: the code's path), so there only each tied group's sum is compared.
GRAD_TOL = dict(rtol=1e-3, atol=1e-5)
#: The second run's results (scores up to about ±36, values up to about ±50) are compared
#: with an absolute tolerance of this much times the tensor's largest entry: float32
#: rounding grows with the operands, and a fixed 1e-5 failed a right Cell 7 for about 4 %
#: of the random draws. A clip or a typed-in result is off by whole units there.
VARIANT_SCALE_TOL = 1e-4
TIE_TOL = 1e-5
#: Tolerances when a result is in a lower precision (then judged as a dtype slip).
LOW_TOL = {"float16": dict(rtol=1e-2, atol=1e-3), "bfloat16": dict(rtol=5e-2, atol=1e-2)}
#: Limits of the observed data and of the messages. The arrays' numbers stay under
#: total_bytes so that an export, with its strings and headers, stays under 4 MiB.
LIMITS = dict(total_bytes=int(3.5 * 2**20), array_bytes=1 * 2**20, export_bytes=4 * 2**20,
              text=200, line=120, error=160, names=48, graph_nodes=5000, own_elements=2**16)
#: Partial credit: the share of a step's points that a shortfall costs.
HALF = 0.5

#: The operations a hand-written softmax may use, each with the autograd nodes it leaves in
#: its output's graph (torch 2.13; tests/test_verify.py makes every node from the code named
#: here). Any other node between a softmax's output and its input costs the softmax's point:
#: a built-in that holds a softmax (F.scaled_dot_product_attention, nn.MultiheadAttention,
#: sigmoid, logcumsumexp, ...) is not one the student wrote. The one place for this list:
#: the judge, the kernel side and README's rule read it.
SOFTMAX_OPS: dict[str, tuple[str, ...]] = {
    "exp (or e ** x)": ("ExpBackward0", "PowBackward1", "PowBackward2"),
    "max, amax, maximum": ("AmaxBackward0", "MaxBackward0", "MaxBackward1", "MaximumBackward0"),
    "sum": ("SumBackward0", "SumBackward1"),
    "logsumexp, log": ("LogsumexpBackward0", "LogBackward0"),
    "+ - * / abs reciprocal": (
        "AddBackward0", "AddBackward1", "SubBackward0", "SubBackward1", "RsubBackward0",
        "RsubBackward1", "NegBackward0", "AbsBackward0", "MulBackward0", "MulBackward1",
        "DivBackward0", "DivBackward1", "DivBackward2", "ReciprocalBackward0"),
    "where, masked_fill, clamp, nan_to_num": (
        "WhereBackward0", "MaskedFillBackward0", "MaskedFillBackward1", "IndexPutBackward0",
        "CopySlices", "ClampBackward0", "ClampBackward1", "ClampMinBackward0",
        "ClampMinBackward1", "ClampMaxBackward0", "ClampMaxBackward1", "NanToNumBackward0"),
    "views, indexing, stack, cat, clone, .to()": (
        "ViewBackward0", "ReshapeAliasBackward0", "UnsafeViewBackward0", "UnsqueezeBackward0",
        "SqueezeBackward0", "SqueezeBackward1", "SqueezeBackward2", "ExpandBackward0",
        "TransposeBackward0", "TransposeBackward1", "PermuteBackward0", "TBackward0",
        "AliasBackward0", "RepeatBackward0", "SelectBackward0", "SliceBackward0",
        "IndexBackward0", "UnbindBackward0", "SplitBackward0", "SplitWithSizesBackward0",
        "StackBackward0", "CatBackward0", "CloneBackward0", "ToCopyBackward0",
        "CopyBackwards"),
}
#: Every node :data:`SOFTMAX_OPS` allows, and the leaf a tensor made inside the function
#: ends in (not an operation).
SOFTMAX_ALLOWED = frozenset(n for nodes in SOFTMAX_OPS.values() for n in nodes) | {
    "AccumulateGrad"}


# ------------------------------------------------------------------ helpers
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
    """np.allclose for finite arrays of the same shape (NaN and inf: never close)."""
    tol = tol or TOL
    if a is None or b is None or a.shape != b.shape:
        return False
    with np.errstate(all="ignore"):
        return bool((np.abs(a - b) <= tol["atol"] + tol["rtol"] * np.abs(b)).all())


def tie_group_sums(a, scores):
    """``a`` [..., S] with each entry replaced by the sum over its row's tie group: the
    entries whose ``scores`` [..., S] lie within TIE_TOL of one another (chained), so the
    result never depends on whether two scores are bitwise equal."""
    a, s = np.asarray(a, np.float64), np.asarray(scores, np.float64)
    flat_a, flat_s = a.reshape(-1, a.shape[-1]), s.reshape(-1, s.shape[-1])
    out = flat_a.copy()
    for row, (va, vs) in enumerate(zip(flat_a, flat_s)):
        order = np.argsort(vs, kind="stable")
        gap = TIE_TOL * max(float(np.abs(vs[np.isfinite(vs)]).max(initial=0.0)), 1.0)
        # A new group starts where the sorted scores step by more than the gap.
        starts = np.r_[True, ~(np.diff(vs[order]) <= gap)]
        group = np.cumsum(starts) - 1
        sums = np.bincount(group, weights=va[order])
        out[row, order] = sums[group]
    return out.reshape(a.shape)


def _close_masked(a, b, tol=None):
    """Like :func:`_close`, but -inf entries match where both arrays hold -inf."""
    if a is None or b is None or a.shape != b.shape:
        return False
    mask = np.isneginf(a)
    if not np.array_equal(mask, np.isneginf(b)) or not np.isfinite(a[~mask]).all():
        return False
    return _close(a[~mask], b[~mask], tol)


def _constant(a):
    """True when every entry of ``a`` is (nearly) the same number."""
    if a is None or a.size == 0:
        return True
    with np.errstate(all="ignore"):
        first = a.reshape(-1)[0]
        return bool(np.allclose(a, first, rtol=1e-6, atol=1e-9))


# ---------------------------------------------------------------- reference
@lru_cache(maxsize=1)
def _shipped():
    """The shipped data as float32 NumPy arrays: x, w_q, b_q, ..."""
    a = load_arrays()
    return {k: a[k] for k in ("x", "w_q", "b_q", "w_k", "b_k", "w_v", "b_v")}


@lru_cache(maxsize=1)
def _reference():
    """float64 arrays of every step's inputs and outputs, from data/."""
    ref = _chain(_shipped()["x"])
    for arr in ref.values():
        arr.setflags(write=False)
    return ref


def _chain(x):
    """float64 arrays of every step's inputs and outputs for embeddings ``x`` [1, 6, 64]
    and the shipped layers: x, w_q, b_q, ..., query, ..., attended_values."""
    a = {k: v.astype(np.float64) for k, v in _shipped().items()}
    ref = dict(a, x=np.asarray(x, dtype=np.float64))
    for name, n in (("query", "q"), ("key", "k"), ("value", "v")):
        ref[name] = ref["x"] @ a[f"w_{n}"].T + a[f"b_{n}"]
    ref["attention_scores"] = ref["query"] @ _swap(ref["key"]) / math.sqrt(D_K)
    ref["attention_weights"] = _softmax(ref["attention_scores"])
    ref["attended_values"] = ref["attention_weights"] @ ref["value"]
    return ref


def _compute(step, inp, name):
    """The right output ``name`` of ``step`` for the inputs ``inp`` (float64)."""
    if step == "projections":
        n = name[0]
        return inp["x"] @ _swap(inp[f"w_{n}"]) + inp[f"b_{n}"]
    if step == "attention_scores":
        return inp["query"] @ _swap(inp["key"]) / math.sqrt(D_K)
    if step == "attention_weights":
        return _softmax(inp["attention_scores"])
    if step == "attended_values":
        return inp["attention_weights"] @ inp["value"]
    raise KeyError(step)


# ------------------------------------------------------------ softmax probes
@dataclass(frozen=True)
class Probe:
    """A fixed input the student's softmax is called on: ``softmax(x, dim=dim)``."""

    label: str
    x: np.ndarray  # float32
    dim: int
    shown: str  # how the message shows the input

    @property
    def expected(self):
        return _softmax(self.x.astype(np.float64), self.dim)


@lru_cache(maxsize=1)
def _probes() -> tuple:
    """The probe inputs, generated with NumPy (the kernel and the judge agree)."""
    rng = np.random.default_rng(2024)
    f32 = np.float32
    inf = np.inf

    def rand(*shape, scale=1.0):
        return (rng.standard_normal(shape) * scale).round(2).astype(f32)

    ordinary = rand(2, 3, 5)
    dim0, dim1 = rand(3, 4, scale=2.0), rand(2, 3, 4)
    square, dim_m2 = rand(1, 4, 4, scale=2.0), rand(2, 4, 3)
    probes = [
        Probe("ordinary input", ordinary, -1, f"x = {_fmt(ordinary)} (shape [2, 3, 5]), dim=-1"),
        Probe("rows whose maxima are far apart",
              np.array([[100, 99, 98, 97], [-100, -101, -99, -102]], f32), -1,
              "x = [[100, 99, 98, 97], [-100, -101, -99, -102]], dim=-1"),
        Probe("large logits (±1e4)",
              np.array([[1e4, 0, -1e4], [1e4, 1e4, 1e4]], f32), -1,
              "x = [[1e4, 0, -1e4], [1e4, 1e4, 1e4]], dim=-1"),
        Probe("-inf entries (masked keys)",
              np.array([[0, -inf, math.log(3)], [-inf, 1, 1]], f32), -1,
              "x = [[0, -inf, log(3)], [-inf, 1, 1]], dim=-1"),
        Probe("a row that is entirely -inf (every key masked)",
              np.array([[-inf, -inf, -inf, -inf], [1, 2, 3, 4]], f32), -1,
              "x = [[-inf, -inf, -inf, -inf], [1, 2, 3, 4]], dim=-1"),
        Probe("dim=0", dim0, 0, f"x = {_fmt(dim0)}, dim=0"),
        Probe("dim=1 of a 3-D input", dim1, 1, f"x = {_fmt(dim1)} (shape [2, 3, 4]), dim=1"),
        Probe("a square matrix", square, -1, f"x = {_fmt(square)} (shape [1, 4, 4]), dim=-1"),
        Probe("dim=-2", dim_m2, -2, f"x = {_fmt(dim_m2)} (shape [2, 4, 3]), dim=-2"),
    ]
    for p in probes:
        p.x.setflags(write=False)
    return tuple(probes)


MASKED_PROBE = 4  # the index of the probe with a fully masked row
