"""Checks for lesson.ipynb that name the mistake and say what to do next.

One check per step of the lesson:

- ``check_projections(query, key, value)``                       Cell 4
- ``check_attention_scores(query, key, attention_scores)``       Cell 5
- ``check_softmax(softmax)``  probes your softmax function        Cell 6
- ``check_attention_weights(attention_scores, attention_weights)``  Cell 6
- ``check_attended_values(attention_weights, value, attended_values)``  Cell 7
- ``check_all(globals())``  a summary of every step

Each returns a :class:`CheckResult` (passed, score, max_score, message) that
prints as plain text, renders as Markdown in Jupyter, and is truthy only
when the step passed, so ``assert check_...(...)`` works in a test cell.

Every check is two halves, so that grading can run the first half in a
sandboxed kernel and the second in the instructor's own process:

- :func:`observe` (in the kernel) turns the student's live objects into plain
  data: NumPy arrays of numbers, booleans and strings only (the tensors with
  their dtype, facts about them such as which of ``q_proj``/``k_proj``/
  ``v_proj``'s parameters made them, and the outputs of the student's softmax
  on fixed probe inputs). It never raises. :func:`export` saves it as ``.npz``.
- :func:`judge` (pure, trusted, no torch) computes the results from that data
  only. It never raises, whatever the data holds.

The public ``check_*`` functions are exactly ``judge`` after ``observe`` for
one step, so the notebook and the grader cannot drift apart.

Rules (README, "How the checks judge"): each step is checked against *your
own* tensors from the step before (unless they are degenerate: constant, or
such that every formula gives the same result), and against the reference
computed in float64 from the shipped data (``data/``); a slip is charged in
the cell that made it (a dtype is judged relative to the cell's own inputs);
a wrong answer is compared with the catalogue of common mistakes
(:data:`MISTAKES`), each entry of which carries its step, its text and how to
reproduce it from the step's inputs. ``strict=True`` (the graded run) adds
the items marked ``strict_only`` as partial-credit deductions; the visible
check shows them as notes beforehand.

Command line: ``python verify.py lesson.ipynb [--json] [--strict]`` runs a
notebook headless and reports what each test cell saw when it ran.

Importing this module is cheap (NumPy only): no torch, nbformat or nbclient
on the student's path. Shape legend: B = 1 batch, L = S = 6 tokens,
d_k = d_model = 64.
"""

from __future__ import annotations

import itertools
import math
import os
import re
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Callable, Mapping

import numpy as np

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # src/ is importable wherever verify.py is run from
    sys.path.insert(0, str(HERE))

from src.data import load_arrays  # noqa: E402

__all__ = [
    "GRADE_CELLS", "MISTAKES", "POINTS", "CheckResult", "Mistake", "Points", "Summary",
    "check_all", "check_attended_values", "check_attention_scores", "check_attention_weights",
    "check_projections", "check_softmax", "compare_with_torch_softmax", "export", "judge",
    "observe",
]

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
#: Tolerances when a result is in a lower precision (then judged as a dtype slip).
LOW_TOL = {"float16": dict(rtol=1e-2, atol=1e-3), "bfloat16": dict(rtol=5e-2, atol=1e-2)}
#: Limits of the observed data and of the messages. The arrays' numbers stay under
#: total_bytes so that an export, with its strings and headers, stays under 4 MiB.
LIMITS = dict(total_bytes=int(3.5 * 2**20), array_bytes=1 * 2**20, export_bytes=4 * 2**20,
              text=200, line=120, names=48, graph_nodes=5000, own_elements=2**16)
#: Partial credit: the share of a step's points that a shortfall costs.
HALF = 0.5


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
    a = {k: v.astype(np.float64) for k, v in _shipped().items()}
    ref = dict(a)
    for name, n in (("query", "q"), ("key", "k"), ("value", "v")):
        ref[name] = a["x"] @ a[f"w_{n}"].T + a[f"b_{n}"]
    ref["attention_scores"] = ref["query"] @ _swap(ref["key"]) / math.sqrt(D_K)
    ref["attention_weights"] = _softmax(ref["attention_scores"])
    ref["attended_values"] = ref["attention_weights"] @ ref["value"]
    for arr in ref.values():
        arr.setflags(write=False)
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


# ---------------------------------------------------------------- catalogue
@dataclass(frozen=True)
class Mistake:
    """A common wrong version of a step: its text, and how to reproduce it.

    ``step`` is the check that names it ("any": every check that judges
    tensors). A mistake is recognised by one of:

    - ``reproduce(inp)``: the wrong output(s) computed from the step's inputs
      (``inp`` holds float64 arrays by name; for projections also ``name``);
    - ``fns``: for softmax mistakes, the wrong softmax itself, one function
      ``f(x, dim)`` per variant (float32 NumPy, mirroring the torch code); they
      are probed like the student's and applied to the scores for the weights;
    - ``factor``: the output is this multiple of the right one;
    - ``error`` / ``line``: regular expressions over a raised error and the line
      that raised it (``example`` is a real such error and line);
    - a fact observed about the tensor or the function (``kind`` names the rule
      of the judge that recognises it: "dtype", "lost_batch", "detached",
      "builtin", ...; tests/catalogue.py shows how each is made).

    ``cost`` is the share of the step's points it costs; ``strict_only``
    mistakes are deducted only in the graded (strict) run.
    """

    id: str
    step: str
    title: str
    cause: str
    next_step: str
    shows: str = ""
    reproduce: Callable | None = None
    fns: tuple = ()
    factor: float | None = None
    error: str | None = None
    line: str | None = None
    example: tuple = ()  # (error text, line) of a real case, for error entries
    kind: str | None = None
    cost: float = 1.0
    strict_only: bool = False
    in_weights: bool = True  # softmax mistakes: also looked for in the weights


_ENTRIES: list = []


def _m(id, step, title, cause, next_step, **kw):
    _ENTRIES.append(Mistake(id, step, title, cause, next_step, **kw))


def _fns(*variants):
    """Softmax mistake variants written with NumPy, run like torch in float32."""

    def wrap(fn):
        def run(x, dim):
            with np.errstate(all="ignore"):
                return np.asarray(fn(np.asarray(x), dim))

        return run

    return tuple(wrap(fn) for fn in variants)


def _row_max(x, dim):
    """x.amax(dim, keepdim=True) with an all -inf row's max taken as 0 (the guard)."""
    m = x.max(axis=dim, keepdims=True)
    return np.where(np.isneginf(m), np.zeros_like(m), m)


def _exp_shift(x, dim):
    return np.exp(x - _row_max(x, dim))


def _sum(x, dim):
    return x.sum(axis=dim, keepdims=True)


def _plain(x, dim):
    e = _exp_shift(x, dim)
    return e / _sum(e, dim)


def _unguarded(x, dim):
    """The stable softmax without the all -inf guard: NaN for such a row."""
    e = np.exp(x - x.max(axis=dim, keepdims=True))
    return e / _sum(e, dim)


def _other_axis(x, dim):
    """-1 unless dim already is the last axis, then -2 (for 'another axis')."""
    return -2 if dim in (-1, x.ndim - 1) else -1


def _relu_norm(x, dim):
    r = np.maximum(x, 0)
    return r / _sum(r, dim)


def _sigmoid(x, dim):
    return 1 / (1 + np.exp(-x))


def _sigmoid_norm(x, dim):
    s = _sigmoid(x, dim)
    return s / _sum(s, dim)


def _square_norm(x, dim):
    return x ** 2 / _sum(x ** 2, dim)


def _abs_norm(x, dim):
    return np.abs(x) / _sum(np.abs(x), dim)


# Cell 4 — projections. ``inp["name"]`` is the tensor being judged.
def _proj(inp, n):
    return inp["x"] @ _swap(inp[f"w_{n}"]) + inp[f"b_{n}"]


_m("new_layers", "projections", "new nn.Linear layers instead of the given ones",
   "the tensor was made by an nn.Linear layer of your own (its autograd graph holds "
   "parameters that are not q_proj's, k_proj's or v_proj's): a new layer starts from "
   "random weights",
   "use the layers from Cell 3: query = q_proj(x), key = k_proj(x), value = v_proj(x)",
   kind="new_layers", shows="the output of a layer with other weights")
_m("swapped_projection", "projections", "a projection layer used for the wrong tensor",
   "one of query/key/value was computed with another tensor's layer "
   "(for example key = q_proj(x))",
   "use q_proj for query, k_proj for key and v_proj for value",
   reproduce=lambda inp: [_proj(inp, o) for o in "qkv" if o != inp["name"][0]],
   shows="the output of another tensor's layer")
_m("no_projection", "projections", "the embeddings were not projected",
   "the tensor equals the input x: the nn.Linear layer was never applied",
   "apply the layer to the embeddings: query = q_proj(x)",
   reproduce=lambda inp: inp["x"], shows="x itself")
_m("missing_bias", "projections", "the bias of the projection is missing",
   "the tensor equals x @ W.T: the layer's weight was used by hand and its bias dropped",
   "call the layer itself, q_proj(x), which adds the bias",
   reproduce=lambda inp: inp["x"] @ _swap(inp[f"w_{inp['name'][0]}"]), shows="x @ W.T")
_m("weight_not_transposed", "projections", "the projection weight was not transposed",
   "the tensor equals x @ W + b; nn.Linear computes x @ W.T + b",
   "call the layer itself, q_proj(x), instead of multiplying by its weight",
   reproduce=lambda inp: inp["x"] @ inp[f"w_{inp['name'][0]}"] + inp[f"b_{inp['name'][0]}"],
   shows="x @ W + b")
_m("weight_only", "projections", "the weight used without .T and without the bias",
   "the tensor equals x @ W: nn.Linear computes x @ W.T + b, so both the transpose "
   "and the bias are missing",
   "call the layer itself, q_proj(x): it transposes the weight and adds the bias",
   reproduce=lambda inp: inp["x"] @ inp[f"w_{inp['name'][0]}"], shows="x @ W")
_m("bias_added_twice", "projections", "the bias was added twice",
   "the tensor equals q_proj(x) + b: calling the layer already adds its bias",
   "drop the extra + q_proj.bias: query = q_proj(x)",
   reproduce=lambda inp: _proj(inp, inp["name"][0]) + inp[f"b_{inp['name'][0]}"],
   shows="x @ W.T + 2b")
_m("projection_scaled", "projections", "the projection was scaled by 1/√d_k",
   "the tensor is 1/8 of q_proj(x): the scaling belongs to the scores in Cell 5, "
   "not to the projections",
   "compute query = q_proj(x) unscaled; Cell 5 divides the scores by math.sqrt(d_k)",
   factor=1 / math.sqrt(D_K))
_m("detached_projection", "projections", "a projection detached from its layer",
   "the values are right, but the tensor does not come from the layer's parameters in "
   "the autograd graph (.detach(), torch.no_grad(), .data, or rebuilt from numbers), "
   "so training could never change it",
   "compute it as q_proj(x), outside torch.no_grad() and without .detach()",
   kind="detached", cost=HALF, strict_only=True)

# Cell 5 — scores.
def _raw(inp):
    return inp["query"] @ _swap(inp["key"])


_m("transposed_product", "attention_scores", "the product is transposed (K Qᵀ)",
   "the scores are the transpose of Q Kᵀ/√d_k: rows are keys and columns queries",
   "compute query @ key.transpose(-2, -1): queries on the rows, keys on the columns",
   reproduce=lambda inp: _swap(_raw(inp)) / 8, shows="(Q Kᵀ/√d_k)ᵀ = K Qᵀ/√d_k")
_m("same_tensor_twice", "attention_scores", "the same tensor on both sides of the product",
   "the scores equal Q Qᵀ/√d_k or K Kᵀ/√d_k: the query was used as the key (or the "
   "other way round)",
   "use query on the left and key on the right: query @ key.transpose(-2, -1)",
   reproduce=lambda inp: [inp["query"] @ _swap(inp["query"]) / 8,
                          inp["key"] @ _swap(inp["key"]) / 8],
   shows="Q Qᵀ/√d_k (or K Kᵀ/√d_k)")
_m("value_in_scores", "attention_scores", "the value was used in the scores",
   "the scores equal Q Vᵀ/√d_k (or V Kᵀ/√d_k): the value takes no part in the scores",
   "compute query @ key.transpose(-2, -1); the value comes in at Cell 7",
   reproduce=lambda inp: [inp["query"] @ _swap(inp["value"]) / 8,
                          inp["value"] @ _swap(inp["key"]) / 8],
   shows="Q Vᵀ/√d_k")
_m("feature_product", "attention_scores", "a product over tokens instead of features (Kᵀ Q)",
   "the scores have shape [1, 64, 64] and equal Kᵀ Q/√d_k (or Qᵀ K): the transpose is on "
   "the wrong operand, so the product sums over the tokens",
   "transpose the key, not the query: query @ key.transpose(-2, -1) gives [1, 6, 6]",
   reproduce=lambda inp: [_swap(inp["key"]) @ inp["query"] / 8,
                          _swap(inp["query"]) @ inp["key"] / 8,
                          _swap(inp["key"]) @ inp["query"], _swap(inp["query"]) @ inp["key"]],
   shows="Kᵀ Q/√d_k, shape [1, 64, 64]")


def _causal(inp):
    """Q Kᵀ/√d_k with a decoder's causal mask: each token keeps itself and those before."""
    scores = _raw(inp) / 8
    later = np.triu(np.ones(scores.shape[-2:], dtype=bool), k=1)
    return [np.where(later, fill, scores)
            for fill in (-np.inf, -1e9, float(np.finfo(np.float32).min))]


_m("causal_mask", "attention_scores", "a mask in the scores",
   "the scores of later tokens were set to -inf (or a huge negative number), as a "
   "decoder's causal mask does with masked_fill and torch.triu; the attention of this "
   "lesson lets every token attend to all six, with no mask",
   "remove the mask: attention_scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)",
   reproduce=_causal, shows="Q Kᵀ/√d_k with the entries above the diagonal masked")
_m("no_scaling", "attention_scores", "the scores are not scaled by 1/√d_k",
   "the scores equal Q Kᵀ, √d_k = 8 times too large; the softmax will be too peaked",
   "divide by math.sqrt(d_k), with d_k = key.shape[-1] = 64", factor=math.sqrt(D_K))
_m("scaled_by_dk", "attention_scores", "the scores are divided by d_k instead of √d_k",
   "the scores equal Q Kᵀ/64, 8 times too small: divided by d_k = 64 instead of "
   "√d_k = 8, or by √d_k twice (the query or the product already scaled once)",
   "divide once, by math.sqrt(d_k) = 8", factor=1 / math.sqrt(D_K))
_m("multiplied_by_sqrt_dk", "attention_scores", "the scores are multiplied by √d_k",
   "the scores equal Q Kᵀ·8 instead of Q Kᵀ/8", "divide by math.sqrt(d_k) instead of "
   "multiplying", factor=float(D_K))
_m("sqrt_precedence", "attention_scores", "d_k ** 1/2 is not √d_k",
   "** binds tighter than /, so d_k ** 1/2 is (d_k ** 1) / 2 = 32: the scores were "
   "divided by 32 or by 128 instead of 8",
   "write math.sqrt(d_k) or d_k ** 0.5", factor=1 / 4)
_m("sqrt_precedence_128", "attention_scores", "d_k ** 1/2 is not √d_k",
   "x / d_k ** 1/2 is x / 64 / 2 (** binds tighter than /): the scores were divided by "
   "128 instead of 8",
   "write x / math.sqrt(d_k), or x / d_k ** 0.5", factor=1 / 16)
_m("dk_from_token_axis", "attention_scores", "d_k read from the token axis",
   "the scores were divided by √6 (or 6): d_k was taken from the token axis "
   "(shape[1] or shape[-2]) instead of the feature axis",
   "d_k is the size of each query/key vector: key.shape[-1] = 64 (Cell 3 gives d_k)",
   reproduce=lambda inp: [_raw(inp) / math.sqrt(6), _raw(inp) / 6],
   shows="Q Kᵀ/√6 (or Q Kᵀ/6)")
_m("softmax_in_scores", "attention_scores",
   "softmax applied in the scores step",
   "the 'scores' are already softmax weights (maybe divided by √d_k after the softmax): "
   "the softmax belongs to Cell 6",
   "in Cell 5 compute only query @ key.transpose(-2, -1) / math.sqrt(d_k)",
   reproduce=lambda inp: [_softmax(_raw(inp)) / 8, _softmax(_raw(inp) / 8),
                          _softmax(_raw(inp))],
   shows="softmax(Q Kᵀ)/√d_k or softmax(Q Kᵀ/√d_k)")
_m("elementwise_scores", "attention_scores",
   "an elementwise product instead of a matrix product",
   "* multiplies entries, it does not take dot products between tokens: the result "
   "has the shape of query, [1, 6, 64] (or [1, 6] once summed over the features: token "
   "i with token i only), not [1, 6, 6]",
   "use the matrix product @ with key transposed: query @ key.transpose(-2, -1)",
   reproduce=lambda inp: [inp["query"] * inp["key"] / 8, inp["query"] * inp["key"],
                          (inp["query"] * inp["key"]).sum(-1) / 8],
   shows="query * key (/√d_k), or its sum over the features")

# Cell 6 — the softmax function (probed) and the weights.
_m("uses_builtin_softmax", "softmax", "the softmax calls a built-in softmax",
   "your function calls torch.softmax, F.softmax, Tensor.softmax or log_softmax: the "
   "task is to build it from torch.exp",
   "write it yourself: subtract the row max, torch.exp, divide by the row sums",
   kind="builtin")
_m("weights_not_from_your_softmax", "attention_weights",
   "the weights come from a built-in softmax, not from yours",
   "the line that makes attention_weights calls torch.softmax (or F.softmax) instead of "
   "the softmax you wrote above it",
   "call your own function: attention_weights = softmax(attention_scores, dim=-1)",
   kind="builtin_weights", cost=HALF)
_m("softmax_shadowed", "softmax", "`softmax` was overwritten by a tensor",
   "a line such as softmax = softmax(attention_scores) replaced your function by its "
   "result, so the name softmax no longer refers to a function",
   "name the result attention_weights, then run Cell 6 again (the def first)",
   kind="shadowed")
_m("mutates_input", "softmax", "the softmax changes its input in place",
   "after the call the input tensor holds different values (an in-place op such as "
   "x -= ... or x.exp_()), so attention_scores gets overwritten",
   "build new tensors instead: shifted = x - x_max", kind="mutated")
_m("shift_not_max", "softmax", "a shift by the row's minimum or mean, not its maximum",
   "subtracting each row's minimum (or mean) keeps the result mathematically, but leaves "
   "exponents far above 0: a row with a large spread still overflows to inf (inf/inf = "
   "NaN), and a row holding -inf shifts everything to NaN",
   "subtract each row's maximum instead: x.amax(dim=dim, keepdim=True), so that every "
   "exponent is <= 0",
   fns=_fns(lambda x, d: np.exp(x - x.min(axis=d, keepdims=True))
            / _sum(np.exp(x - x.min(axis=d, keepdims=True)), d),
            lambda x, d: np.exp(x - x.mean(axis=d, keepdims=True))
            / _sum(np.exp(x - x.mean(axis=d, keepdims=True)), d)))
_m("no_max_subtraction", "softmax", "softmax without max-subtraction",
   "exp of a large logit overflows to inf and inf/inf gives NaN",
   "subtract each row's maximum (x.amax(dim=dim, keepdim=True)) before torch.exp: "
   "every exponent is then <= 0",
   fns=_fns(lambda x, d: np.exp(x) / _sum(np.exp(x), d)))
_m("global_max_subtraction", "softmax", "the global maximum subtracted instead of each row's",
   "x - x.max() shifts every row by the largest entry of the whole tensor: a row far below "
   "it underflows to exp(...) = 0 and gives 0/0 = NaN",
   "subtract each row's own maximum: x.amax(dim=dim, keepdim=True)",
   fns=_fns(lambda x, d: np.exp(x - x.max()) / _sum(np.exp(x - x.max()), d)))
_m("ignores_dim", "softmax", "the softmax ignores its dim argument",
   "it normalises over a fixed axis whatever dim it is given",
   "use dim in every reduction: x.amax(dim=dim, keepdim=True), exps.sum(dim=dim, "
   "keepdim=True)",
   fns=_fns(*(lambda x, d, a=a: _softmax(x, a) for a in (-1, -2, 0))), in_weights=False)
_m("keepdim_missing", "softmax", "keepdim=True missing in a reduction",
   "without keepdim the row maxima or sums lose their axis and broadcast against the "
   "wrong one: on a square matrix such as [1, 6, 6] that silently subtracts or divides "
   "by the columns' values",
   "pass keepdim=True to amax/max and to sum, so the shapes line up row by row",
   fns=_fns(lambda x, d: np.exp(x - x.max(axis=d)) / _sum(np.exp(x - x.max(axis=d)), d),
            lambda x, d: np.exp(x - x.max(axis=d)) / np.exp(x - x.max(axis=d)).sum(axis=d),
            lambda x, d: _exp_shift(x, d) / _exp_shift(x, d).sum(axis=d),
            lambda x, d: _exp_shift(x, d) / np.where(_exp_shift(x, d).sum(axis=d) == 0, 1,
                                                     _exp_shift(x, d).sum(axis=d))))


def _max_sum(x, a, b):
    e = np.exp(x - _row_max(x, a))
    return e / _sum(e, b)


_m("max_and_sum_axes_differ", "softmax", "max over one axis and sum over another",
   "the maximum and the sum are taken over different axes (one of them fixed, not dim)",
   "take both over the same axis, dim: x.amax(dim=dim, keepdim=True) and "
   "exps.sum(dim=dim, keepdim=True)",
   fns=_fns(lambda x, d: _max_sum(x, _other_axis(x, d), d),
            lambda x, d: _max_sum(x, d, _other_axis(x, d)),
            lambda x, d: _max_sum(x, -1, d), lambda x, d: _max_sum(x, d, -1)))
_m("whole_tensor_softmax", "softmax", "normalised over the whole tensor",
   "the sum runs over every entry, not along dim: all the weights together sum to 1, "
   "each row far less",
   "sum along dim only: exps.sum(dim=dim, keepdim=True)",
   fns=_fns(lambda x, d: np.exp(x - x.max()) / np.exp(x - x.max()).sum(),
            lambda x, d: _exp_shift(x, d) / _exp_shift(x, d).sum()))
_m("exp_without_normalising", "softmax", "exp without normalising",
   "the weights equal exp(scores) (maybe shifted by the row max) but rows do not sum to 1",
   "divide each row by its sum: exps / exps.sum(dim=dim, keepdim=True)",
   fns=_fns(lambda x, d: np.exp(x), _exp_shift))
_m("normalising_without_exp", "softmax", "normalising without exp",
   "the weights equal scores / scores.sum(): negative scores give negative 'weights'",
   "exponentiate first (after subtracting the row max), then normalise",
   fns=_fns(lambda x, d: x / _sum(x, d),
            lambda x, d: (x - _row_max(x, d)) / _sum(x - _row_max(x, d), d)))
_m("log_softmax", "softmax", "a log-softmax instead of the softmax",
   "the weights are the logarithms of the right ones (all <= 0): x - max - log(sum exp)",
   "return the exponentials divided by their sum, not their logarithm",
   fns=_fns(lambda x, d: x - _row_max(x, d) - np.log(_sum(_exp_shift(x, d), d))))
_m("non_exp_map", "softmax", "another map instead of exp",
   "the weights come from ReLU, a sigmoid, a square or an absolute value instead of "
   "exp: they are not the softmax, and some keys get weight 0 or the wrong order",
   "use torch.exp on the shifted scores, then divide by the row sums",
   fns=_fns(_relu_norm, _sigmoid, _sigmoid_norm, _square_norm, _abs_norm))
_m("negated_scores", "softmax", "the scores were negated",
   "the weights equal softmax(-x): the largest score gets the smallest weight",
   "exponentiate x - max, not max - x or -x",
   fns=_fns(lambda x, d: _plain(-x, d)))
_m("softmax_twice", "softmax", "softmax applied twice",
   "the weights equal softmax(softmax(x)): far too flat, every weight close to uniform",
   "apply the softmax once",
   fns=_fns(lambda x, d: _softmax(_softmax(x, d), d)))
_m("fully_masked_row", "softmax", "a row that is entirely -inf does not give zeros",
   "for a query whose keys are all masked, the max is -inf and -inf - (-inf) is NaN: "
   "such a query attends to nothing and its weights must be zeros",
   "where the row max is -inf subtract 0 instead (torch.where), and divide by 1 where a "
   "row sums to 0",
   fns=_fns(_unguarded), cost=HALF)
_m("finite_mask_value", "softmax", "a finite stand-in for -inf",
   "-inf was replaced by a large finite number such as -1e9, so a row that is entirely "
   "masked gets uniform weights instead of zeros",
   "keep -inf as it is; handle an all -inf row with torch.where (max -> 0, sum 0 -> 1)",
   fns=_fns(lambda x, d: _plain(np.where(np.isinf(x), np.float32(-1e9), x), d)), cost=HALF)
_m("softmax_wrong_axis", "attention_weights", "softmax over the wrong axis",
   "the softmax ran over the queries (dim=1/-2) or the batch axis (dim=0) instead of "
   "the keys: each query's weights over the keys must sum to 1",
   "normalise over the last axis, dim=-1 (the keys)",
   reproduce=lambda inp: [_softmax(inp["attention_scores"], -2),
                          _softmax(inp["attention_scores"], 0)])
_m("weights_transposed_in_cell6", "attention_weights", "the weights are transposed",
   "the weights equal softmax(scores) transposed: rows are keys, columns queries",
   "keep softmax(attention_scores, dim=-1) as it is, without .transpose or .T",
   reproduce=lambda inp: _swap(_softmax(inp["attention_scores"])),
   shows="softmax(scores)ᵀ")
_m("scaling_after_softmax", "attention_weights", "scaled after the softmax",
   "the weights equal softmax(scores)/√d_k, so rows sum to 1/8, not 1",
   "scale the scores in Cell 5, before the softmax; the weights themselves are not scaled",
   reproduce=lambda inp: _softmax(inp["attention_scores"]) / 8)
_m("scores_scaled_again", "attention_weights", "the scores scaled again in Cell 6",
   "the weights equal softmax(scores/√d_k): the scores from Cell 5 are already scaled, "
   "dividing again makes the weights too flat",
   "apply the softmax to attention_scores as they are",
   reproduce=lambda inp: _softmax(inp["attention_scores"] / 8),
   shows="softmax(attention_scores / 8)")
_m("unscaled_scores_used", "attention_weights", "the unscaled product used in Cell 6",
   "the weights equal softmax(Q Kᵀ): the product was recomputed without the 1/√d_k "
   "from Cell 5",
   "apply the softmax to attention_scores from Cell 5",
   reproduce=lambda inp: _softmax(inp["attention_scores"] * 8),
   shows="softmax(Q Kᵀ), without 1/√d_k")
_m("softmax_not_applied", "attention_weights", "the softmax was not applied",
   "the weights equal the scores unchanged",
   "apply your softmax: attention_weights = softmax(attention_scores, dim=-1)",
   reproduce=lambda inp: inp["attention_scores"], shows="attention_scores unchanged")

# Cell 7 — values.
_m("weights_transposed", "attended_values", "the weights are transposed in the aggregation",
   "the output equals attention_weightsᵀ @ value: each output row mixes values with "
   "a column of weights instead of its own row",
   "compute attention_weights @ value without transposing",
   reproduce=lambda inp: _swap(inp["attention_weights"]) @ inp["value"],
   shows="attention_weightsᵀ @ value")
_m("scores_instead_of_weights", "attended_values",
   "the scores were used instead of the weights",
   "the output equals attention_scores @ value: the softmax output was skipped",
   "use attention_weights @ value",
   reproduce=lambda inp: inp["attention_scores"] @ inp["value"],
   shows="attention_scores @ value")
_m("query_instead_of_value", "attended_values", "the query was used instead of the value",
   "the output equals attention_weights @ query", "use attention_weights @ value",
   reproduce=lambda inp: inp["attention_weights"] @ inp["query"],
   shows="attention_weights @ query")
_m("key_instead_of_value", "attended_values", "the key was used instead of the value",
   "the output equals attention_weights @ key", "use attention_weights @ value",
   reproduce=lambda inp: inp["attention_weights"] @ inp["key"],
   shows="attention_weights @ key")
_m("embeddings_instead_of_value", "attended_values", "the embeddings x used as the values",
   "the output equals attention_weights @ x: the values are v_proj(x), not x",
   "use value from Cell 4: attention_weights @ value",
   reproduce=lambda inp: inp["attention_weights"] @ inp["x"],
   shows="attention_weights @ x")
_m("values_not_weighted", "attended_values", "the values were not weighted",
   "the output equals value itself: the attention weights were never applied",
   "multiply: attention_weights @ value", reproduce=lambda inp: inp["value"],
   shows="value itself")
_m("output_scaled", "attended_values", "the output was scaled by 1/√d_k",
   "the output is 1/8 of attention_weights @ value: the scaling belongs to the scores "
   "(Cell 5) only",
   "drop the division: attended_values = attention_weights @ value",
   factor=1 / math.sqrt(D_K))
_m("mean_instead_of_sum", "attended_values", "a mean over the keys instead of a sum",
   "the output is 1/6 of attention_weights @ value: the weighted values were averaged "
   "(.mean) over the 6 keys; the weights already sum to 1, so add them up",
   "use .sum over the key axis, or simply attention_weights @ value",
   factor=1 / 6)
_m("values_first", "attended_values", "the values on the left of the product",
   "the output has shape [1, 64, 6]: value was transposed and put first (Vᵀ Wᵀ or Vᵀ W)",
   "put the weights first: attention_weights @ value gives [1, 6, 64]",
   reproduce=lambda inp: [_swap(inp["value"]) @ _swap(inp["attention_weights"]),
                          _swap(inp["value"]) @ inp["attention_weights"]],
   shows="valueᵀ @ attention_weightsᵀ, shape [1, 64, 6]")

# Any step: facts, shapes, dtypes and errors.
_m("lost_batch_dimension", "any", "the batch dimension was lost",
   "the values are right but the leading batch axis of size 1 is gone "
   "(a .squeeze(), [0] or 2-D operation)",
   "keep the shape [1, ...]: use batched ops such as key.transpose(-2, -1), not .T or [0]",
   kind="lost_batch", cost=HALF)
_m("wrong_dtype", "any", "the dtype was changed in this cell",
   "the values are right but this cell changed the dtype of its inputs (for example "
   ".double(), NumPy float64, or torch.tensor(..., dtype=torch.float64))",
   "keep the dtype of the tensors you start from (float32 here): drop the conversion, or "
   "call .float()", kind="dtype", cost=HALF)
_m("not_a_tensor", "any", "a NumPy array instead of a torch tensor",
   "the values are right but the result is a NumPy array: the lesson works in torch "
   "(and autograd cannot follow a NumPy array)",
   "stay in torch: no .numpy(); use torch operations (torch.exp, @, .transpose)",
   kind="not_a_tensor", cost=HALF)
_m("imprecise", "any", "close, but not to float32 precision",
   "the values agree to about 4 digits but not to float32 precision: a rounded constant "
   "(such as 7.99 for √64) or a lower-precision step",
   "use math.sqrt(d_k) and keep the tensors in float32", kind="imprecise", cost=HALF,
   strict_only=True)
_m("nan_or_inf", "any", "NaN or inf in the result",
   "an overflow (exp of a large number) or a division by zero",
   "look for torch.exp without max-subtraction or a division by a sum that can be 0",
   kind="nan")
_m("constant_output", "any", "every entry is the same number",
   "the tensor is constant (for example all zeros or torch.ones): it does not depend on "
   "the inputs, and a constant gives the same result for every formula",
   "compute it from the tensors of the cells before, following the formula above",
   kind="constant")
_m("bad_type", "any", "not a tensor of real numbers",
   "the result is not a dense torch tensor of real floating-point numbers (a list, a "
   "string, a complex, sparse or integer tensor, ...)",
   "keep the result of the torch operations as it is: a float tensor (no .tolist(), str(), "
   ".to_sparse() or complex numbers)", kind="bad_type")
_m("bad_output", "softmax", "the softmax returns the wrong kind of result",
   "for a float tensor x it must return a real, dense float tensor of x's shape",
   "return exps / sums: a torch tensor shaped like x (keepdim=True in the reductions)",
   kind="bad_output")
_m("axes_permuted", "any", "the axes are in the wrong order",
   "the values are right but the axes are permuted: `.T` on a 3-D tensor reverses every "
   "axis ([1, 6, 64] becomes [64, 6, 1]), and a permute or transpose of the wrong axes "
   "reorders them",
   "keep the result's axes as the formula gives them; to swap the last two axes only, "
   "use .transpose(-2, -1)", kind="permuted")
_m("scalar_multiple", "any", "a constant factor off",
   "the result is a constant multiple of the right one: a scaling that should not be "
   "there, or a wrong constant",
   "find where the result is multiplied or divided by a number and compare with the "
   "formula above", kind="factor")
# Errors, recognised from the exception and the line that raised it.
# What torch says when the shapes of a matrix product (or of nn.Linear's input) do not fit.
_MATMUL_ERROR = (r"cannot be multiplied|size for first two dimensions|mat1 and mat2|"
                 r"matmul: Input operand|Expected size for first")
_FIX_EARLIER = "fix the earlier cell as its check says, run it again, then run this cell"
_m("transposed_layer_input", "projections", "the layer's input was transposed",
   "nn.Linear acts on the last axis, which must be the 64 features: x is already "
   "[1, 6, 64] (batch, tokens, features), and x transposed to [1, 64, 6] puts the 6 "
   "tokens there",
   "pass x as it is: query = q_proj(x) (the transpose belongs to the key, in Cell 5)",
   error=_MATMUL_ERROR,
   line=r"_proj\(\s*x\s*\.\s*(transpose\(|mT\b|permute\(|swapaxes\()",
   example=("RuntimeError: mat1 and mat2 shapes cannot be multiplied (64x6 and 64x64)",
            "query = q_proj(x.transpose(-2, -1))"))
_m("dot_T_on_3d", "any", ".T on a 3-D tensor",
   "`.T` reverses every axis, so a [1, 6, 64] tensor becomes [64, 6, 1] and the product "
   "fails or mixes tokens with features",
   "swap only the last two axes: key.transpose(-2, -1) (or key.mT)",
   error=r".", line=r"\.T\b",
   example=("RuntimeError: mat1 and mat2 shapes cannot be multiplied (384x1 and 64x64)",
            "query = q_proj(x.T)"))
_m("mixed_dtypes", "any", "float64 mixed with float32",
   "a product of a float64 tensor with a float32 one raises 'expected ... same dtype'",
   "keep every tensor in float32: drop .double() and torch.float64, or call .float()",
   error=r"same dtype|expected scalar type|dtype.*(Double|Float)|(Double|Float).*dtype",
   example=("RuntimeError: expected m1 and m2 to have the same dtype, but got: double != "
            "float", "attention_scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)"))
_m("values_before_weights", "attended_values", "the product is the wrong way round",
   "value @ attention_weights multiplies [1, 6, 64] by [1, 6, 6]: the shapes do not fit, "
   "because the weights come first (each row of weights mixes the rows of value)",
   "swap the operands: attended_values = attention_weights @ value",
   error=_MATMUL_ERROR,
   line=r"\bvalue(\.\w+\(\))?\s*@\s*attention_weights\b|"
        r"(matmul|bmm)\(\s*value\s*,\s*attention_weights\b",
   example=("RuntimeError: Expected size for first two dimensions of batch2 tensor to be: "
            "[1, 64] but got: [1, 6].", "attended_values = value @ attention_weights"))
_m("matmul_shapes", "any", "the shapes of a matrix product do not fit",
   "in A @ B the last axis of A must equal the second-to-last of B ([1, 6, 64] @ "
   "[1, 64, 6] works; [1, 6, 64] @ [1, 6, 64] does not)",
   "print the shapes of both operands and transpose the one that is lying down",
   error=_MATMUL_ERROR,
   example=("RuntimeError: Expected size for first two dimensions of batch2 tensor to be: "
            "[6, 64] but got: [6, 1].", "attention_scores = query @ key.transpose(0, 1)"))
_m("max_returns_tuple", "any", "torch.max(dim=...) returns values and indices",
   "x.max(dim=...) returns a (values, indices) pair, not a tensor",
   "use x.amax(dim=dim, keepdim=True), or x.max(dim=dim, keepdim=True).values",
   error=r"return_types\.max|return_types",
   example=("TypeError: unsupported operand type(s) for -: 'Tensor' and "
            "'torch.return_types.max'", "exps = torch.exp(x - x_max)"))
_m("dim_not_accepted", "any", "the softmax does not take dim",
   "softmax(x, dim=...) raised: the function has no dim parameter (or names it "
   "differently)",
   "define it as def softmax(x, dim=-1): and use dim in its reductions",
   error=r"unexpected keyword argument 'dim'|takes 1 positional argument",
   example=("TypeError: softmax() got an unexpected keyword argument 'dim'",
            "attention_weights = softmax(attention_scores, dim=-1)"))
_m("sqrt_of_an_int", "any", "torch.sqrt of a Python number",
   "torch.sqrt needs a tensor; d_k is a Python int",
   "use math.sqrt(d_k) (or d_k ** 0.5)", error=r"sqrt\(\): argument",
   example=("TypeError: sqrt(): argument 'input' (position 1) must be Tensor, not int",
            "attention_scores = raw_scores / torch.sqrt(d_k)"))
_m("numpy_of_grad_tensor", "any", ".numpy() on a tensor that requires grad",
   "a tensor in the autograd graph cannot become a NumPy array",
   "stay in torch (torch.exp, @, .sum); no .numpy() is needed", error=r"numpy\(\)",
   example=("RuntimeError: Can't call numpy() on Tensor that requires grad. Use "
            "tensor.detach().numpy() instead.", "return (exps / totals).numpy()"))
_m("used_before_computed", "any", "a tensor from an earlier cell is None",
   "an operation got None: a cell before this one has not produced its tensor yet",
   "run the cells above in order and fix the first one whose check fails",
   error=r"NoneType",
   example=("TypeError: unsupported operand type(s) for @: 'NoneType' and 'Tensor'",
            "attended_values = attention_weights @ value"))
_m("degenerate_upstream", "any", "built on degenerate tensors from an earlier cell",
   "your code follows the formula, but a tensor it uses is degenerate (constant, such as "
   "weights that are all 1 from a softmax over dim=0): every formula gives the same "
   "result on it, so this step cannot earn its points on it",
   _FIX_EARLIER,
   kind="degenerate")
_m("upstream_slip", "any", "a slip in an earlier cell stopped this one",
   "this cell's code raised on a tensor from an earlier cell that is of the wrong kind or "
   "dtype (a NumPy array, a tuple, float64); the slip was charged in the cell that made "
   "it, but this cell cannot be judged until it runs",
   _FIX_EARLIER,
   kind="upstream_slip")
_m("returned_none", "any", "a function returned None",
   "every input of this cell is there, yet an operation got None: a function you call "
   "returns None (a def without `return`), or a name was set to None",
   "end your function with `return` and the result (for example return exps / sums), "
   "then run this cell again", kind="returned_none")
_m("detached_output", "any", "the result does not come from this cell's inputs",
   "the values are right, but autograd shows the tensor does not depend on an input the "
   "task names (.detach(), torch.no_grad(), .data, NumPy, rebuilt from numbers, or "
   "recomputed from other tensors): no gradient could flow back through it",
   "compute it from this cell's inputs with tensor operations, outside torch.no_grad() "
   "and without .detach()", kind="detached_output", cost=HALF, strict_only=True)
# Behaviour read off a tensor no entry above reproduces (values and the replay's
# gradients), tried in this order.
_m("extra_term", "any", "a tensor was added to the result",
   "the result is the right one plus another tensor (a residual connection, or a leftover "
   "term): this step computes the formula alone",
   "remove the extra term and compute exactly the formula of this cell", kind="behaviour")
_m("extra_nonlinearity", "any", "a nonlinearity was applied",
   "the result has no negative entries while the right one has: a ReLU, abs or clamp was "
   "applied, which the formula of this cell does not have",
   "drop the nonlinearity: this cell is a plain linear formula", kind="behaviour")
_m("rows_rescaled", "any", "the rows were normalised",
   "every row was rescaled (to length 1, sum 1, or mean 0 and spread 1): this cell's "
   "formula does not normalise its result",
   "remove the normalisation: only Cell 6's softmax normalises, and only the weights",
   kind="behaviour")
_m("same_for_every_query", "any", "every query gets the same result",
   "the result does not change along the query axis: it was summed, averaged or "
   "broadcast over the queries (or the tokens)",
   "keep one row per query (per token): no .sum or .mean over that axis",
   kind="behaviour")
_m("wrong_inputs", "any", "the result is computed from the wrong tensors",
   "autograd shows which tensors the result depends on: it should depend on exactly the "
   "inputs the task names, and on nothing else",
   "compute it from the tensors the task names, with the formula above", kind="behaviour")
_m("after_the_product", "attended_values", "something was applied besides the product",
   "the result is not a weighted sum of the rows of value: another operation (a layer, a "
   "nonlinearity, a scaling per feature) changed it",
   "compute attended_values = attention_weights @ value and nothing more",
   kind="behaviour")
_m("values_not_mixed", "attended_values", "each token keeps its own value: nothing is mixed",
   "every output row is that token's own value row times a number: the sum ran over the "
   "queries instead of the keys, or the weights were reduced to one number per token",
   "mix all value rows with each query's weights: attention_weights @ value sums over the "
   "keys", kind="behaviour")
_m("weights_changed", "attended_values", "the weights were changed before the product",
   "the result mixes the rows of value, but not with attention_weights as Cell 6 made them "
   "(a second softmax, a recomputation, a transpose or a rescaling)",
   "use attention_weights exactly as they are: attention_weights @ value",
   kind="behaviour")
_m("bias_misused", "projections", "the bias is not added exactly once",
   "the gradient with respect to the layer's bias shows it added with another factor "
   "(subtracted, scaled or repeated)",
   "call the layer itself: query = q_proj(x) adds its bias once", kind="behaviour")
_m("layer_input_not_x", "projections", "the layer was applied to a changed x",
   "the gradient with respect to the layer's weight shows its input was not x itself (x "
   "normalised, with positions added, or otherwise changed first)",
   "pass the embeddings as they are: query = q_proj(x)", kind="behaviour")
_m("after_the_layer", "projections", "the projection was changed after the layer",
   "the layer got x and its bias once, but its output was then changed (a nonlinearity, "
   "a normalisation, another operation)",
   "keep the layer's output as it is: query = q_proj(x)", kind="behaviour")
_m("misspelled_name", "any", "the result is stored under another name",
   "the check reads the lesson's name; a name spelled otherwise is a new variable, so "
   "the lesson's name still holds None",
   "assign the result to the lesson's name exactly", kind="misspelled")
_m("undefined_name", "any", "the cell uses a name it does not define",
   "each step cell is judged on its own: it sees the set-up (Cells 2-3) and the tensors "
   "of the steps before it, not names made in other cells (or the name has a typo)",
   "define that name in this cell, or use the set-up's x, q_proj, k_proj, v_proj, d_k",
   error=r"NameError: name '\w+' is not defined",
   example=("NameError: name 'scale' is not defined",
            "attention_scores = query @ key.transpose(-2, -1) * scale"))
_m("changes_input", "any", "the cell changes an input in place",
   "an in-place operation (x /= ..., .mul_(), .data = ...) overwrote a tensor this cell "
   "was given, so every later use of it sees other numbers",
   "compute new tensors instead: scaled = raw / math.sqrt(d_k)", kind="mutated_input",
   cost=HALF)
_m("softmax_leaves_autograd", "softmax", "the softmax's output leaves autograd",
   "the weights no longer depend on the scores in autograd (NumPy inside, torch.no_grad(), "
   ".detach() or .data), so no gradient reaches the projections: a model could not learn",
   "keep it in torch: torch.exp(x - x_max) / sums, without NumPy, no_grad or detach",
   kind="left_autograd")
_m("softmax_wrong_gradient", "softmax", "the weights' gradient is not the softmax's",
   "the values are right, but autograd sees another function: part of the computation "
   "is detached or pasted in from elsewhere",
   "compute the weights from x with tensor operations only (amax, exp, sum, divide)",
   kind="gradient")
_m("custom_autograd", "softmax", "the softmax is a custom autograd Function",
   "its forward can call anything, including a built-in softmax, and its backward is "
   "written by hand: the task is to build the softmax from tensor operations",
   "write it with torch.exp, amax and sum on x, as a plain function", kind="custom_function")
# Behaviour the probes show, named when no entry above reproduces the softmax on every
# probe (what the function does, read off its outputs; tried in this order).
_m("ignores_its_input", "softmax", "the softmax ignores its parameter x",
   "it returns the same result whatever it is given: it computes from something else, "
   "such as the global attention_scores, instead of its parameter x",
   "use the parameter inside the function: every line should work on x", kind="behaviour")
_m("softmax_mishandles_inf", "softmax", "-inf scores do not get weight 0",
   "on an input holding -inf (a masked key) it gives NaN or another weight than 0: "
   "exp(-inf) is 0 by itself, but replacing -inf or subtracting -inf breaks that",
   "leave -inf alone: shift by the row max (0 for an all -inf row, with torch.where), "
   "then exp", kind="behaviour")
_m("softmax_masks_too_much", "softmax", "-inf in one row changes the other rows",
   "on an input holding -inf, even the slices without any -inf come out wrong: the -inf "
   "handling reaches beyond its own row (a test over the whole tensor, such as "
   "torch.isinf(x).any())",
   "handle -inf slice by slice: torch.where on each row's max (keepdim=True), nothing "
   "over the whole tensor", kind="behaviour")
_m("softmax_overflows", "softmax", "the softmax is wrong on large scores",
   "right on ordinary numbers, but on large scores it gives NaN, inf or other values: "
   "exp of a large number overflows float32, and clipping or replacing values changes "
   "the result; shifting each row by its own maximum keeps it exact",
   "subtract each row's maximum along dim (x.amax(dim=dim, keepdim=True)) before "
   "torch.exp", kind="behaviour")
_m("softmax_negative", "softmax", "the softmax gives negative weights",
   "a weight below 0 cannot come from exp(...) / sum, which is always >= 0",
   "exponentiate first (torch.exp of the shifted x), then divide by the sums",
   kind="behaviour")
_m("softmax_not_normalised", "softmax", "the weights along dim do not sum to 1",
   "after the division each slice along dim must sum to exactly 1: something was added "
   "to the sums, the division uses another quantity, or the result is rescaled",
   "divide exp(x - x_max) by its own sum along dim (keepdim=True), and nothing else",
   kind="behaviour")
_m("softmax_not_exp", "softmax", "the weights are not the normalised exp(x)",
   "the slices sum to 1, but the weights are not exp(x) / sum: another function of x was "
   "normalised (or x was changed first)",
   "compute exps = torch.exp(x - x_max), then exps / exps.sum(dim=dim, keepdim=True)",
   kind="behaviour")
_m("softmax_raises", "softmax", "the softmax raised an error",
   "calling your softmax on the input shown raised an exception",
   "call softmax on that input yourself and fix the line the error points to",
   kind="probe_error")
_m("stub_left", "any", "the cell still holds its stub",
   "the line raise NotImplementedError(...) is still in the cell, so it stops there",
   "replace that line with your code, then run the cell", error=r"NotImplementedError",
   example=("NotImplementedError: Your turn: replace this line with your code",
            "raise NotImplementedError(\"Your turn: replace this line with your code\")"))
_m("elementwise_product", "any", "* multiplies entry by entry, not as matrices",
   "the shapes do not broadcast because * pairs entries one by one; the formula is a "
   "matrix product, which sums over the shared axis",
   "use the matrix product @ (torch.matmul) as the formula says",
   error=r"must match the size of tensor", line=r"[^*]\*[^*=]",
   example=("RuntimeError: The size of tensor a (6) must match the size of tensor b (64) "
            "at non-singleton dimension 2", "attended_values = attention_weights * value"))
_m("cell_raised", "any", "the cell raised an error",
   "the cell stopped with an exception, so the tensor was not (re)computed",
   "fix the line the error points to and run the cell again", kind="cell_error")
_m("not_computed", "any", "not computed yet",
   "the name still holds None from the set-up cell (or is not defined)",
   "write your code in the cell above and run it", kind="missing")

#: The catalogue: every mistake the checks can name, in the order they are tried.
MISTAKES: dict[str, Mistake] = {m.id: m for m in _ENTRIES}
assert len(MISTAKES) == len(_ENTRIES), "duplicate mistake ids"
_ERROR_ENTRIES = [m for m in _ENTRIES if m.error]


@lru_cache(maxsize=None)
def _value_entries(step):
    """Entries recognised from values, for the tensor ``step``, in catalogue order."""
    out = [m for m in _ENTRIES if m.step == step and (m.reproduce or m.factor or m.kind
                                                       == "new_layers")]
    if step == "attention_weights":
        out += [m for m in _ENTRIES if m.step == "softmax" and m.fns and m.in_weights]
    return tuple(out)


# ------------------------------------------------------------------ results
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

    ``mistake`` is the main diagnosis (a :data:`MISTAKES` id) or None;
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

    def __bool__(self):
        return self.passed

    @property
    def title(self):
        return TITLES.get(self.step, str(self.step))

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
        """The float64 array of ``name`` this check read, if real and finite; else None.

        For drawing: ``show_attention(result.values_of("attention_scores"), tokens)``.
        """
        return self.seen.get(name)

    def __str__(self):
        mark = "PASS" if self.passed else "FAIL"
        lines = [f"[{mark}] {self.title}: {_num(self.score)}/{_num(self.max_score)} points",
                 *("  " + line for line in self.message.splitlines())]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_markdown_(self):
        # ✔/✘ are in DejaVu Sans, the usual fallback font; emoji need an emoji font. The
        # words carry the status too, for screen readers and without colour.
        mark = "✔" if self.passed else "✘"
        state = "passed" if self.passed else "not yet"
        body = self.message.replace("\n", "  \n")
        notes = "".join(f"\n\n> Note: {n}" for n in self.notes)
        return (f"{mark} **{self.title}: {_num(self.score)}/{_num(self.max_score)} "
                f"points** ({state})\n\n{body}{notes}")

    def to_dict(self):
        return {"step": self.step, "title": self.title, "passed": self.passed,
                "score": self.score, "max_score": self.max_score,
                "mistake": self.mistake, "shortfalls": list(self.shortfalls),
                "pending": list(self.pending), "message": self.message,
                "notes": list(self.notes)}



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
            f"{(MISTAKES[r.mistake].title if r.mistake in MISTAKES else '')} |"
            for r in self.results)
        return (f"**Total: {_num(self.score)}/{_num(self.max_score)} points**\n\n"
                f"| | step | points | mistake |\n|---|---|---|---|\n{rows}")

    def to_dict(self):
        return {"passed": self.passed, "score": self.score, "max_score": self.max_score,
                "results": [r.to_dict() for r in self.results]}


#: A failing message's first line (the mistake and the next step) and its evidence.
FIRST_LINE_CHARS, EVIDENCE_CHARS = 200, 600


def _mistake_text(mistake_id, seen):
    m = MISTAKES[mistake_id]
    why = _short(f"Why: {m.cause}.", EVIDENCE_CHARS // 2)
    seen = _short(f"What we saw: {seen}", EVIDENCE_CHARS - len(why) - 1)
    return _tidy(f"Mistake: {m.title}. Next step: {m.next_step}.\n{seen}\n{why}")


def _tidy(message):
    """At most FIRST_LINE_CHARS in the first line (cut at a sentence end when it is longer;
    the rest moves down), and EVIDENCE_CHARS after it."""
    head, _, rest = str(message).partition("\n")
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


# ================================================================== observe
# Everything below until "judge" runs in the student's kernel. It turns live
# objects into plain data and never raises.
_MISSING = object()


class _Budget:
    """Bytes of array data still allowed in one observation."""

    def __init__(self, total=None):
        self.left = total or LIMITS["total_bytes"]

    def take(self, nbytes):
        if nbytes > LIMITS["array_bytes"] or nbytes > self.left:
            return False
        self.left -= nbytes
        return True


def _text(value, limit=None):
    return np.array(_short(value, limit))


def _str_list(values):
    values = [_short(v, 80) for v in list(values)[: LIMITS["names"]]]
    return np.array(values, dtype=str) if values else np.zeros(0, dtype="<U1")


def _torch_if_loaded():
    return sys.modules.get("torch")


def _shipped_labels():
    """(label, float32 array) of every parameter of q_proj, k_proj, v_proj."""
    s = _shipped()
    return [(f"{n}_proj.{part}", s[f"{'w' if part == 'weight' else 'b'}_{n}"])
            for n in "qkv" for part in ("weight", "bias")]


def _label_leaf(leaf):
    try:
        arr = leaf.detach().cpu().float().numpy()
    except Exception:  # noqa: BLE001
        return "other"
    for label, want in _shipped_labels():
        if arr.shape == want.shape and np.array_equal(arr, want):
            return label
    return f"other {list(arr.shape)}"


def _made_by(t):
    """Labels of the parameters (leaves that require grad) in ``t``'s autograd graph."""
    labels = set()
    if t.grad_fn is None:
        if t.requires_grad:
            labels.add(_label_leaf(t))
        return sorted(labels)
    seen, stack = set(), [t.grad_fn]
    while stack and len(seen) < LIMITS["graph_nodes"]:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        var = getattr(node, "variable", None)
        if var is not None:
            labels.add(_label_leaf(var))
        for nxt, _ in getattr(node, "next_functions", ()) or ():
            stack.append(nxt)
    return sorted(labels)


#: The string facts of an observed object, in the order of its ``.info`` array.
INFO_FIELDS = ("kind", "type", "dtype", "layout", "device", "requires_grad", "grad_fn",
               "note")


def _observe_object(prefix, obj, budget, out):
    """Write facts about ``obj`` (and its values, when allowed) under ``prefix.``."""
    info = dict.fromkeys(INFO_FIELDS, "")
    try:
        info["type"] = type(obj).__name__
        torch = _torch_if_loaded()
        if obj is _MISSING:
            info["kind"] = "missing"
        elif obj is None:
            info["kind"] = "none"
        elif torch is not None and isinstance(obj, torch.Tensor):
            info["kind"] = "tensor"
            _observe_tensor(prefix, obj, torch, budget, out, info)
        elif isinstance(obj, np.ndarray):
            info.update(kind="ndarray", dtype=str(obj.dtype), layout="strided", device="cpu")
            if obj.dtype.kind in "biufc" and budget.take(obj.nbytes):
                out[f"{prefix}.values"] = np.array(obj, copy=True)
            else:
                out[f"{prefix}.shape"] = np.array(obj.shape, dtype=np.int64)
                info["note"] = (f"its dtype is {obj.dtype}" if obj.dtype.kind not in "biufc"
                                else "too large to record")
        elif callable(obj):
            info["kind"] = "function"
        else:
            info["kind"] = "other"
    except BaseException as exc:  # noqa: BLE001  (nothing a student does may break this)
        if isinstance(exc, KeyboardInterrupt):
            raise
        info.update(kind="other", note=f"could not be inspected ({type(exc).__name__})")
    out[f"{prefix}.info"] = _str_list(info[k] for k in INFO_FIELDS)


def _observe_tensor(prefix, obj, torch, budget, out, info):
    with torch._C.DisableTorchFunctionSubclass():
        t = obj.detach() if obj.requires_grad or obj.grad_fn is not None else obj
        info.update(dtype=str(obj.dtype).removeprefix("torch."),
                    layout=str(obj.layout).removeprefix("torch."), device=obj.device.type,
                    requires_grad="True" if obj.requires_grad else "",
                    grad_fn=type(obj.grad_fn).__name__ if obj.grad_fn else "")
        out[f"{prefix}.shape"] = np.array(tuple(obj.shape), dtype=np.int64)
        if obj.requires_grad:  # (absent: no parameters)
            out[f"{prefix}.made_by"] = _str_list(_made_by(obj))
        if obj.device.type == "meta":
            info["note"] = "a meta tensor holds no values"
            return
        if not budget.take(obj.numel() * obj.element_size()):
            info["note"] = "too large to record"
            return
        if obj.layout != torch.strided:
            t = t.to_dense()
        t = t.cpu().resolve_conj().resolve_neg()
        if t.dtype in (torch.bfloat16,) or (t.is_floating_point() and t.element_size() == 1):
            t = t.float()
        try:
            arr = t.numpy()
        except Exception as exc:  # noqa: BLE001  (quantized and other exotic dtypes)
            info["note"] = f"could not be read as numbers ({_short(exc, 80)})"
            return
        out[f"{prefix}.values"] = np.array(arr, copy=True)
        del out[f"{prefix}.shape"]  # the values carry it


def _func_label(func):
    name = getattr(func, "__name__", "") or ""
    qual = getattr(func, "__qualname__", "") or ""
    module = getattr(func, "__module__", "") or ""
    if module == "torch.nn.functional":
        return f"F.{name}"
    if qual.startswith(("TensorBase.", "Tensor.")):
        return f"Tensor.{name}"
    if name.startswith("special_"):
        return f"torch.special.{name[len('special_'):]}"
    return f"torch.{name}"


#: Torch functions a student's softmax may not call (recognised by their name).
BUILTIN_SOFTMAX = ("softmax", "log_softmax", "softmin", "_softmax", "_log_softmax")


def _where_raised(exc, code=None):
    """The student's line that raised ``exc`` (the innermost frame in ``code``'s
    file when given, else the innermost frame outside torch and verify)."""
    import traceback

    try:
        if isinstance(exc, SyntaxError):
            return _short(exc.text or "", LIMITS["line"])
        frames = traceback.extract_tb(exc.__traceback__)
        want = getattr(code, "co_filename", None)
        mine = [f for f in frames if (f.filename == want if want else
                                      "site-packages" not in f.filename
                                      and not f.filename.endswith("verify.py"))]
        return _short((mine[-1].line or "") if mine else "", LIMITS["line"])
    except Exception:  # noqa: BLE001
        return ""


def _error_text(exc):
    if isinstance(exc, SyntaxError):  # without the cell's temporary file name
        return _short(f"{type(exc).__name__}: {exc.msg} (line {exc.lineno})")
    return _short(f"{type(exc).__name__}: {exc}")


def _observe_softmax(fn, budget, out):
    """Call the student's softmax on every probe; record outputs, errors and facts."""
    import torch

    code = getattr(fn, "__code__", None)
    calls = set()
    # The probes are tiny: intra-op threads only add their wake-ups, which on a loaded
    # machine made each torch op 100x slower (measured). Restored below.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _probe_all(fn, torch, code, calls, budget, out)
    finally:
        torch.set_num_threads(threads)
    # the built-in softmaxes first, so that the cap on names never drops them
    out["softmax.calls"] = _str_list(sorted(calls, key=lambda c: (
        c.split(".")[-1] not in BUILTIN_SOFTMAX, c)))


def _probe_all(fn, torch, code, calls, budget, out):
    """softmax(x, dim=...) on each probe: its output or error, whether x changed, its calls."""
    import contextlib
    import io
    import warnings

    for i, probe in enumerate(_probes()):
        key = f"softmax.p{i}."
        # Like the lesson's scores: float32, requiring grad, made by a division. Nothing is
        # recorded while it runs: what it called is read off its output's graph afterwards.
        x = torch.from_numpy(probe.x.copy()).requires_grad_() / 1.0
        before = x.detach().clone()
        result, error, line = _MISSING, "", ""
        sink = io.StringIO()
        try:
            with warnings.catch_warnings(), contextlib.redirect_stdout(sink), \
                    contextlib.redirect_stderr(sink):
                warnings.simplefilter("ignore")
                result = fn(x, dim=probe.dim)
        except BaseException as exc:  # noqa: BLE001
            if isinstance(exc, KeyboardInterrupt):
                raise
            error, line = _error_text(exc), _where_raised(exc, code)
        try:
            mutated = not (x.shape == before.shape and x.dtype == before.dtype
                           and bool(torch.equal(x.detach(), before)))
        except Exception:  # noqa: BLE001
            mutated = True
        if error:  # (absent: it returned; a missing "mutated" is False)
            out[key + "raised"] = _str_list([error, line])
        if mutated:
            out[key + "mutated"] = np.array(True)
        if type(result) is torch.Tensor and not result.requires_grad:  # left autograd
            out[key + "detached"] = np.array(True)
        calls.update(_graph_calls(result, torch))
        if not error:
            _observe_object(key + "out", result, budget, out)


def _graph_calls(result, torch, limit=256):
    """Labels of the built-in softmaxes in ``result``'s autograd graph."""
    found = set()
    try:
        if type(result) is not torch.Tensor or result.grad_fn is None:
            return found
        seen, stack = set(), [result.grad_fn]
        while stack and len(seen) < limit:
            node = stack.pop()
            if node is None or id(node) in seen:
                continue
            seen.add(id(node))
            label = _NODE_LABELS.get(type(node).__name__)
            if label:
                found.add(label)
            stack.extend(n for n, _ in (node.next_functions or ()))
    except Exception:  # noqa: BLE001  (a student's object)
        pass
    return found


def _observe_cell(grade_id, out):
    """Did the student's cell of ``grade_id`` raise when it last ran? (IPython only.)"""
    try:
        ipython = sys.modules.get("IPython")
        shell = ipython.get_ipython() if ipython is not None else None
        res = getattr(shell, "last_execution_result", None)
        info = getattr(res, "info", None)
        source = getattr(info, "raw_cell", "") or ""
        if not _is_step_cell(grade_id, source):
            return
        out["cell.ran"] = np.array(True)  # (absent: another cell ran last)
        exc = getattr(res, "error_in_exec", None) or getattr(res, "error_before_exec", None)
        if exc is not None:  # (absent: it did not raise)
            out["cell.raised"] = _str_list([_error_text(exc), _where_raised(exc)])
    except Exception:  # noqa: BLE001
        return


def _is_step_cell(grade_id, source):
    """Whether ``source`` is the student's cell that ``grade_id`` checks."""
    number = CELL_NUMBER.get(grade_id)
    if number is None or not isinstance(source, str):
        return False
    if re.search(rf"^#\s*Cell\s+{number}\b", source, re.M):
        return True
    names = [n for s in GRADE_CELLS[grade_id] for n in NAMES[s].outputs]
    pattern = r"^\s*(def\s+(%s)\b|(%s)\s*(,[^=]*)?=[^=])" % ("|".join(names), "|".join(names))
    return re.search(pattern, source, re.M) is not None


def _observe_names(step, objects, budget, out):
    for name in NAMES[step].all:
        if f"t.{name}.info" in out or (step == "softmax" and name == "softmax"):
            continue
        _observe_object(f"t.{name}", objects.get(name, _MISSING), budget, out)
    if step == "softmax":
        fn = objects.get("softmax", _MISSING)
        _observe_object("softmax", fn, budget, out)
        if out["softmax.info"][0] == "function":
            try:
                _observe_softmax(fn, budget, out)
            except BaseException as exc:  # noqa: BLE001
                if isinstance(exc, KeyboardInterrupt):
                    raise
                out["softmax.error"] = _text(f"could not be probed ({_short(exc, 80)})")


def _observe_steps(grade_id, steps, objects):
    out = {"format": np.array(1), "grade_id": _text(grade_id, 80)}
    budget = _Budget()
    for step in steps:
        _observe_names(step, objects, budget, out)
    _observe_cell(grade_id, out)
    return out


class _Lookup:
    """A safe view of a namespace: .get never raises."""

    def __init__(self, namespace):
        self.namespace = namespace

    def get(self, name, default=None):
        try:
            return self.namespace[name]
        except BaseException as exc:  # noqa: BLE001
            if isinstance(exc, KeyboardInterrupt):
                raise
            return default


def observe(grade_id: str, namespace: Mapping) -> dict:
    """In the kernel: everything the judge of ``grade_id`` needs, as data only.

    Every value is a NumPy array of a numeric, bool or unicode-string dtype,
    so ``np.savez`` + ``np.load(..., allow_pickle=False)`` round-trips it.
    Keys (``N`` a tensor name such as ``query``):

    - ``format`` (1), ``grade_id``;
    - ``t.N.info``: strings in the order of :data:`INFO_FIELDS` -- kind
      ("missing", "none", "tensor", "ndarray", "function", "other"), type
      name, dtype name, layout, device, requires_grad ("True" or ""),
      grad_fn name, and a note (why the values are missing);
      ``t.N.values`` (its numbers, in its own dtype), else ``t.N.shape``
      (int64); ``t.N.made_by`` (labels such as "q_proj.weight" of the
      parameters in its autograd graph; only when it requires grad);
    - Cell 6: ``softmax.info`` (and the tensor keys if it is one),
      ``softmax.calls`` (the torch functions called inside it, on any probe),
      and per probe ``i`` (see ``_probes``): ``softmax.p{i}.out.*`` (what it
      returned, as above), ``softmax.p{i}.raised`` ([error text, line]; only
      when it raised) and ``softmax.p{i}.mutated`` (only when True);
    - ``cell.ran`` (True when the cell the test checks was the last one run;
      else absent) and ``cell.raised`` ([error text, line]; only when it
      raised).

    Shape legend: tensors keep their own shapes (normally [1, 6, 64] or
    [1, 6, 6]). Never raises; an array over 1 MiB is recorded by its facts
    only, and all of it saved with :func:`export` stays under 4 MiB
    (``LIMITS``), in well under 256 arrays.
    """
    try:
        steps = list(GRADE_CELLS.get(grade_id, ()))
    except TypeError:  # an unhashable grade_id
        steps = []
    try:
        return _observe_steps(str(grade_id), steps, _Lookup(namespace))
    except BaseException as exc:  # noqa: BLE001
        if isinstance(exc, KeyboardInterrupt):
            raise
        return {"format": np.array(1), "grade_id": _text(grade_id, 80),
                "error": _text(f"observe failed: {_error_text(exc)}")}


_SAFE_ID = re.compile(r"[A-Za-z0-9_-]+")


def export(grade_id: str, namespace: Mapping, directory) -> Path:
    """Save :func:`observe` of ``grade_id`` as ``directory/<grade_id>.npz``; return the path.

    ``grade_id`` must be a plain name (letters, digits, ``_``, ``-``): a ValueError
    otherwise. Shape legend: see :func:`observe`.
    """
    if not isinstance(grade_id, str) or not _SAFE_ID.fullmatch(grade_id):
        raise ValueError(f"grade_id: expected letters, digits, _ or -, got {grade_id!r}")
    path = Path(directory) / f"{grade_id}.npz"
    np.savez(path, **observe(grade_id, namespace))
    return path


# ==================================================================== judge
# Pure: results from data only. No torch, no student object; never raises.
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
        return [_short(s, 80) for s in v.reshape(-1).tolist()]

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
    if step != "projections" and view.kind == "tensor" and cell.replayed and not lost \
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
    if cell.replayed and cell.mutated and step not in ("softmax", "attention_weights") \
            and not failures:  # (Cell 6: the softmax's own mistake, charged there)
        changed = _listing(cell.mutated)
        charged.setdefault("changes_input", f"after your Cell {cell.number} ran, {changed} "
                           "held other numbers than before.")
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
    if raised:
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
    builtin = [_NODE_LABELS[n] for n in views[names.outputs[0]].graph if n in _NODE_LABELS]
    own_builtin = [c for c in r.strings("softmax.calls") if c.split(".")[-1] in BUILTIN_SOFTMAX]
    if step == "attention_weights" and builtin and not own_builtin and \
            not findings[0][1].failed:  # (a softmax that calls it is charged there, once)
        findings[0][1].costs.append(("weights_not_from_your_softmax", "the autograd graph "
                                     f"of `attention_weights` holds {builtin[0]}."))
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


_SOFTMAX_OK = ("Your softmax matches torch.softmax on every probe: ordinary rows, rows far "
               "apart, logits of ±1e4, masked (-inf) keys, a fully masked row (zeros) and "
               "every dim, without changing its input.")


def _judge_softmax(r, strict, cell):
    f = _Finding()
    result = lambda: _result("softmax", [("softmax", f)], _SOFTMAX_OK, [], cell, {})  # noqa: E731
    verdict = _softmax_verdict(r, strict, cell)
    if isinstance(verdict, _Finding):
        f = verdict
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
_NODE_LABELS = {"SoftmaxBackward0": "torch.softmax", "LogSoftmaxBackward0": "torch.log_softmax"}


def _gradient_verdict(weights):
    """("softmax_wrong_gradient", seen) when the replay's weights are right but their
    gradient with respect to the scores is not the softmax's; else None."""
    from src.replay import output_gradient

    got = weights.grads.get("attention_scores")
    w = _reference()["attention_weights"]
    if got is None or weights.real is None or not _close(weights.real, w):
        return None
    g = output_gradient(w.shape).astype(np.float64)
    want = w * (g - (w * g).sum(-1, keepdims=True))  # the softmax's vector-Jacobian product
    if got.shape == want.shape and _close(got, want, dict(rtol=1e-3, atol=1e-5)):
        return None
    return ("softmax_wrong_gradient", "on the lesson's scores the weights are right, but "
            "their gradient with respect to the scores is not the softmax's.")


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


# ------------------------------------------------------------ public checks
def _check(step, objects, strict):
    grade_id = GRADE_CELL_OF[step]
    live = _live_replay(grade_id, objects)
    if live is None:  # no kernel history (a script, a test): the tensors as given
        data = _observe_steps(grade_id, [step], _Lookup(objects))
        return _judge_step(step, data, grade_id, strict)
    summary = judge_replay(grade_id, *live, strict=strict)
    return summary.results[list(GRADE_CELLS[grade_id]).index(step)]


_LAST_REPLAY: dict = {}  # the last live replay: Cell 6's two checks share one


def _live_replay(grade_id, objects):
    """In a Jupyter kernel, when the check is given the names the notebook holds (as the
    test cells do): the replay (src/replay.py) of the step cell's code, found in the
    kernel's input history, exactly as grading runs it. None outside IPython, before the
    set-up cells ran, or for tensors the notebook's names do not hold."""
    try:
        ipython = sys.modules.get("IPython")
        shell = ipython.get_ipython() if ipython is not None else None
        if shell is None or any(obj is not None and shell.user_ns.get(name) is not obj
                                for name, obj in objects.items()):
            return None
        from src import replay

        step = STEP_CELLS[grade_id]
        setup = replay.live_setup(shell.user_ns)
        source = replay.source_in_history(step, shell.user_ns.get("In") or [])
        if setup is None or source is None:
            return None
        key = (grade_id, source, len(shell.user_ns.get("In") or []))
        if _LAST_REPLAY.get("key") != key:
            own = replay.own_upstream(shell.user_ns)
            data = replay.replay_step(step, source, setup)
            again = None if step == "cell4_projections" or replay.same_as_reference(
                own, setup, step) else replay.replay_step(step, source, setup, own)
            _LAST_REPLAY.update(key=key, data=(data, again))
        return _LAST_REPLAY["data"]
    except Exception:  # noqa: BLE001  (fall back to the tensors as given)
        return None


def check_projections(query, key, value, *, strict=False) -> CheckResult:
    """Cell 4: query, key, value == q_proj(x), k_proj(x), v_proj(x), each [1, 6, 64]."""
    return _check("projections", {"query": query, "key": key, "value": value}, strict)


def check_attention_scores(query, key, attention_scores, *, strict=False) -> CheckResult:
    """Cell 5: attention_scores == query @ keyᵀ / √d_k: [1, 6, 64] x2 -> [1, 6, 6]."""
    return _check("attention_scores", {"query": query, "key": key,
                                       "attention_scores": attention_scores}, strict)


def check_attention_weights(attention_scores, attention_weights, *, strict=False) -> CheckResult:
    """Cell 6: attention_weights == softmax(attention_scores, dim=-1): [1, 6, 6] -> [1, 6, 6]."""
    return _check("attention_weights", {"attention_scores": attention_scores,
                                        "attention_weights": attention_weights}, strict)


def check_attended_values(attention_weights, value, attended_values, *, attention_scores=None,
                          query=None, key=None, strict=False) -> CheckResult:
    """Cell 7: attended_values == attention_weights @ value: [1, 6, 6] @ [1, 6, 64] -> [1, 6, 64].

    Passing ``attention_scores``, ``query`` and ``key`` as well lets the
    check recognise them used in place of the weights or the values.
    """
    return _check("attended_values", {
        "attention_weights": attention_weights, "value": value,
        "attended_values": attended_values, "attention_scores": attention_scores,
        "query": query, "key": key}, strict)


def check_softmax(softmax, *, strict=False) -> CheckResult:
    """Cell 6: probe your softmax function itself, ``softmax(x, dim=...)``.

    It is called on fixed inputs (:func:`_probes`): ordinary rows, rows whose
    maxima are far apart, logits of ±1e4, -inf entries, a row that is
    entirely -inf (it must give zeros: a shortfall of half the point
    otherwise), and dims 0, 1, -1 and -2. It must be built from torch.exp
    (calling a built-in softmax is named), return a real dense float tensor
    of x's shape and leave x unchanged. Shape legend: x of any shape.
    """
    return _check("softmax", {"softmax": softmax}, strict)


def check_all(namespace=None, **tensors) -> Summary:
    """Every step's check, from a namespace such as ``globals()`` or keywords.

    It sees the names as they are now; ``python verify.py NOTEBOOK`` instead
    reports what each test cell saw when it ran. Shape legend: query, key, value
    [1, 6, 64]; attention_scores, attention_weights [1, 6, 6]; attended_values
    [1, 6, 64].
    """
    ns = dict(namespace or {})
    ns.update(tensors)
    results = []
    for grade_id, steps in GRADE_CELLS.items():
        results += judge(grade_id, observe(grade_id, ns)).results
    return Summary(results)


def compare_with_torch_softmax(attention_scores, attention_weights) -> str:
    """Cell 6's quick look: do the rows sum to 1, and is it torch.softmax of the scores?

    Works for any inputs (compared in float64); never raises.
    Shape legend: both [1, 6, 6] (batch, query, key).
    """
    data = _observe_steps("cell6_softmax_test", ["attention_weights"],
                          _Lookup({"attention_scores": attention_scores,
                                   "attention_weights": attention_weights}))
    r = _Reader(data)
    w, s = r.tensor("attention_weights").real, r.tensor("attention_scores").real
    if w is None or w.ndim == 0:
        return "rows sum to 1: (attention_weights is not a tensor of real numbers yet)"
    with np.errstate(all="ignore"):
        rows = bool(np.allclose(w.sum(-1), 1.0, atol=1e-5))
        lines = [f"rows sum to 1: {rows}"]
        if s is None or s.shape != w.shape:
            lines.append("same as torch.softmax: (needs attention_scores of the same shape)")
        else:
            try:
                import torch

                ref = torch.softmax(torch.from_numpy(s), dim=-1).numpy()
            except Exception:  # noqa: BLE001
                ref = _softmax(s)
            lines.append(f"same as torch.softmax: {bool(np.allclose(w, ref, atol=1e-6))}")
    return "\n".join(lines)


# --------------------------------------------------------------------- CLI
# Runs first: this verify.py's src/, data/ and verify come before anything beside the
# notebook (a copy of verify.py in a submission folder is never the one used).
def run_notebook(path, timeout=60, strict=False):
    """Replay a notebook's step cells as grading does; return (report dict, cell errors).

    Each step cell (Cells 4-7, found by their nbgrader grade_id) is run on its own by
    the replay of src/replay.py: in a fork server (inside a bubblewrap sandbox when
    bwrap works here), on the notebook's set-up cells and the reference tensors of the
    steps before it, and judged here. ``timeout`` bounds the whole replay (seconds).
    """
    import nbformat

    from src import replay, sandbox

    nb = nbformat.read(Path(path), as_version=4)
    cells = {c.get("metadata", {}).get("nbgrader", {}).get("grade_id"): c.source
             for c in nb.cells if c.cell_type == "code"}
    missing = [g for g in replay.SETUP_CELLS if g not in cells]
    if missing:
        raise ValueError(f"expected the set-up cells {', '.join(replay.SETUP_CELLS)}, "
                         f"missing {', '.join(missing)}")
    steps = {s: cells[s] for s in replay.STEPS if s in cells}
    server = replay.ReplayServer([cells[g] for g in replay.SETUP_CELLS],
                                 {n: HERE / n for n in ("verify.py", "src", "data")},
                                 sandboxed=sandbox.unavailable_reason() is None)
    try:
        answer = server.replay(steps, seconds=float(timeout))
    finally:
        server.close()
    results, per_cell, errors = [], {}, []
    for step, (gid, _) in replay.STEPS.items():
        data = answer.get(step, f"the notebook has no cell with grade_id {step}")
        if isinstance(data, dict):
            summary = judge_replay(gid, data, answer.get(f"own:{step}"), strict=strict)
            raised = _Reader(data).strings("cell.raised")
            if raised:
                name, _, message = raised[0].partition(": ")
                errors.append({"cell": step, "error": name, "message": message})
        else:
            summary = Summary([_failed(s, f"Not judged: {data}.") for s in GRADE_CELLS[gid]])
        per_cell[gid] = summary.to_dict() | {"test_cell_present": gid in cells}
        results += summary.results
    report = Summary(results).to_dict() | {"cells": per_cell, "strict": strict}
    return report, errors


def ipc_config(directory):
    """nbclient config for a kernel on Unix sockets in ``directory``: no TCP port is
    opened, so nothing else on the machine can connect, and ipykernel prints no
    "running over TCP without encryption" warning."""
    from traitlets.config import Config

    config = Config()
    config.KernelManager.transport = "ipc"
    config.KernelManager.ip = str(Path(directory) / "kernel")
    return config


def main(argv=None) -> int:
    """``python verify.py NOTEBOOK [--json] [--strict]``; exit 1 when a check fails."""
    import argparse
    import json

    parser = argparse.ArgumentParser(
        description="Replay a lesson notebook's step cells as grading does, and check each.")
    parser.add_argument("notebook", type=Path)
    parser.add_argument("--json", action="store_true", help="print a JSON report")
    parser.add_argument("--strict", action="store_true",
                        help="judge as the graded run does (strict-only items deducted)")
    parser.add_argument("--timeout", type=int, default=60,
                        help="seconds for the whole replay")
    args = parser.parse_args(argv)
    if not args.notebook.is_file():
        print(f"verify: expected a notebook file, got {args.notebook} (not found)",
              file=sys.stderr)
        return 2
    try:
        report, errors = run_notebook(args.notebook, args.timeout, args.strict)
    except Exception as exc:  # noqa: BLE001
        print(f"verify: could not run {args.notebook}: {_error_text(exc)}", file=sys.stderr)
        return 2
    report["cell_errors"] = errors
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"{args.notebook}: {_num(report['score'])}/{_num(report['max_score'])} points"
              f"{' (graded run)' if args.strict else ''}")
        for r in report["results"]:
            mark = "PASS" if r["passed"] else "FAIL"
            print(f"[{mark}] {r['title']}: {_num(r['score'])}/{_num(r['max_score'])}")
            if not r["passed"]:
                print("\n".join("    " + line for line in r["message"].splitlines()))
            for note in r["notes"]:
                print(f"    note: {note}")
        if errors:
            print("Cells that raised an error:")
            for e in errors:
                print(f"    {e['cell']}: {e['error']}: {e['message']}")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
