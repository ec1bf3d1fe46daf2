"""Lesson 1, scaled dot-product attention on "The cat sat on the mat": the spec.

The one place for this lesson's facts: its set-up cells and the names they bind,
its steps (cell ids, which are also nbgrader grade_ids, names, shapes, points,
titles), the reference (float64 from the shipped ``data/``, and the same chain
in torch for the replay), the second run's inputs, the tolerances, the softmax
probes and the operations a hand-written softmax may use. Its mistakes are in
``attention_mistakes.py`` and its own readings of wrong results in
``attention_diagnose.py``; the engine reads all of it through :data:`LESSON`.

Shape legend: B = 1 batch, L = S = 6 tokens, d_k = d_model = 64; query, key,
value, attended_values [B, L, d_k]; attention_scores, attention_weights [B, L, S].
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from src.checks.util import TOL, Probe, _fmt, _softmax, _swap
from src.data import PROMPT_EXAMPLE, load_arrays, tokenize
from src.lessons import attention_diagnose as diag
from src.lessons.attention_mistakes import D_K, ENTRIES, MISTAKES
from src.spec import Check, Figure, Formula, Lesson, Step

# float32 results against the float64 reference; the graded run is stricter.
STRICT_TOL = dict(rtol=1e-5, atol=1e-6)
#: A gradient rule compares the student's gradient with the formula's within GRAD_TOL.
#: Scores of a row closer than TIE_TOL (relative to the row's largest) count as tied: at an
#: exact tie a correct softmax written with max or abs may split its gradient between the
#: tied entries in any way (whether two floats tie to the last bit depends on the CPU and
#: the code's path), so there only each tied group's sum is compared.
GRAD_TOL = dict(rtol=1e-3, atol=1e-5)
TIE_TOL = 1e-5
#: The second run's results (scores up to about ±36, values up to about ±50) are compared
#: with an absolute tolerance of this much times the tensor's largest entry: float32
#: rounding grows with the operands, and a fixed 1e-5 failed a right Cell 7 for about 4 %
#: of the random draws. A clip or a typed-in result is off by whole units there.
VARIANT_SCALE_TOL = 1e-4
#: Tolerances when a result is in a lower precision (then judged as a dtype slip).
LOW_TOL = {"float16": dict(rtol=1e-2, atol=1e-3), "bfloat16": dict(rtol=5e-2, atol=1e-2)}

#: The operations a hand-written softmax may use, each with the autograd nodes it leaves in
#: its output's graph (torch 2.13; tests/test_verify.py makes every node from the code named
#: here). Any other node between a softmax's output and its input costs the softmax's point:
#: a built-in that holds a softmax (F.scaled_dot_product_attention, nn.MultiheadAttention,
#: sigmoid, logcumsumexp, ...) is not one the student wrote. The one place for this list:
#: the judge, the kernel side and docs/internals.md's rule read it.
SOFTMAX_OPS: dict[str, tuple[str, ...]] = {
    "exp (or e ** x, exp2)": ("ExpBackward0", "PowBackward1", "PowBackward2",
                              "Exp2Backward0"),
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
    # (orderings and running totals normalise nothing: blind set 21's b21-005 took the max
    # as a descending sort's first entry and the sum as cumsum's last, and lost its point)
    "sort, topk, kthvalue, cumsum, cumprod, cummax, cummin, flip, roll, gather": (
        "SortBackward0", "TopkBackward0", "KthvalueBackward0", "CumsumBackward0",
        "CumprodBackward0", "CummaxBackward0", "CumminBackward0", "FlipBackward0",
        "RollBackward0", "GatherBackward0", "IndexSelectBackward0", "TakeBackward0"),
    "views, indexing, stack, cat, clone, .to()": (
        "ViewBackward0", "ReshapeAliasBackward0", "UnsafeViewBackward0", "UnsqueezeBackward0",
        "SqueezeBackward0", "SqueezeBackward1", "SqueezeBackward2", "ExpandBackward0",
        "TransposeBackward0", "TransposeBackward1", "PermuteBackward0", "TBackward0",
        "AliasBackward0", "RepeatBackward0", "SelectBackward0", "SliceBackward0",
        "IndexBackward0", "UnbindBackward0", "SplitBackward0", "SplitWithSizesBackward0",
        "StackBackward0", "CatBackward0", "CloneBackward0", "ToCopyBackward0",
        "CopyBackwards",
        # (a write into a view, m[mask] = 0 on m = x.max(dim).values.unsqueeze(dim): torch
        # records the view's strides under CopySlices; blind set 6's b6-017 lost its point)
        "AsStridedBackward0"),
}
#: Every node :data:`SOFTMAX_OPS` allows, and the leaf a tensor made inside the function
#: ends in (not an operation).
SOFTMAX_ALLOWED = frozenset(n for nodes in SOFTMAX_OPS.values() for n in nodes) | {
    "AccumulateGrad"}
#: Functions whose call is a built-in softmax (torch.softmax, F.softmax, Tensor.softmax,
#: softmin, torch.special.softmax, torch.ops.aten._softmax ...), by their last name.
BUILTIN_SOFTMAX = ("softmax", "log_softmax", "softmin", "_softmax", "_log_softmax")
#: Autograd nodes that only a built-in softmax leaves, and how a message names them.
NODE_LABELS = {"SoftmaxBackward0": "torch.softmax", "LogSoftmaxBackward0": "torch.log_softmax"}


# ---------------------------------------------------------------- reference
@lru_cache(maxsize=1)
def shipped():
    """The shipped data as float32 NumPy arrays: x, w_q, b_q, ..."""
    a = load_arrays()
    return {k: a[k] for k in ("x", "w_q", "b_q", "w_k", "b_k", "w_v", "b_v")}


def chain(x):
    """float64 arrays of every step's inputs and outputs for embeddings ``x`` [1, 6, 64]
    and the shipped layers: x, w_q, b_q, ..., query, ..., attended_values."""
    a = {k: v.astype(np.float64) for k, v in shipped().items()}
    ref = dict(a, x=np.asarray(x, dtype=np.float64))
    for name, n in (("query", "q"), ("key", "k"), ("value", "v")):
        ref[name] = ref["x"] @ a[f"w_{n}"].T + a[f"b_{n}"]
    ref["attention_scores"] = ref["query"] @ _swap(ref["key"]) / math.sqrt(D_K)
    ref["attention_weights"] = _softmax(ref["attention_scores"])
    ref["attended_values"] = ref["attention_weights"] @ ref["value"]
    return ref


@lru_cache(maxsize=1)
def reference():
    """float64 arrays of every step's inputs and outputs, from data/ (read-only)."""
    ref = chain(shipped()["x"])
    for arr in ref.values():
        arr.setflags(write=False)
    return ref


@lru_cache(maxsize=1)
def parameters():
    """(label, float32 array) of every parameter of the set-up's layers."""
    s = shipped()
    return tuple((f"{n}_proj.{part}", s[f"{'w' if part == 'weight' else 'b'}_{n}"])
                 for n in "qkv" for part in ("weight", "bias"))


def reference_softmax(x, dim: int = -1):
    """A stable softmax written with torch ops (the lesson's reference; all -inf -> 0).

    x: any shape, e.g. [B, L, S]; returns the same shape.
    """
    import torch

    x_max = x.amax(dim=dim, keepdim=True)
    x_max = torch.where(torch.isneginf(x_max), torch.zeros_like(x_max), x_max)
    exps = torch.exp(x - x_max)
    totals = exps.sum(dim=dim, keepdim=True)
    return exps / torch.where(totals == 0, torch.ones_like(totals), totals)


def torch_reference(ns: dict) -> dict:
    """The lesson's tensors, made from ``ns``'s own x and layers as the lesson makes them
    (so they carry the same autograd graph): query, key, value [B, L, d_k] ->
    attention_scores, attention_weights [B, L, S] -> attended_values [B, L, d_k]."""
    query, key, value = ns["q_proj"](ns["x"]), ns["k_proj"](ns["x"]), ns["v_proj"](ns["x"])
    scores = query @ key.transpose(-2, -1) / math.sqrt(ns["d_k"])
    weights = reference_softmax(scores, dim=-1)
    return {"query": query, "key": key, "value": value, "attention_scores": scores,
            "softmax": reference_softmax, "attention_weights": weights,
            "attended_values": weights @ value}


def variant_x(seed: int) -> np.ndarray:
    """The embeddings [1, 6, 64] (float32) of the second run with ``seed``: 6 x N(0, 1),
    so that the scores reach about ±36 where the lesson's stay within ±0.6."""
    rng = np.random.default_rng(seed)
    return (6 * rng.standard_normal((1, 6, 64))).astype(np.float32)


def compare_with_torch_softmax(attention_scores, attention_weights) -> str:
    """Cell 6's quick look: do the rows sum to 1, and is it torch.softmax of the scores?

    Works for any inputs (compared in float64); never raises.
    Shape legend: both [1, 6, 6] (batch, query, key).
    """
    def real(t):
        try:
            if hasattr(t, "detach"):
                t = t.detach().cpu().resolve_conj().numpy() if not t.is_complex() else None
            arr = np.asarray(t)
            return arr.astype(np.float64) if arr.ndim and arr.dtype.kind in "biuf" else None
        except Exception:  # noqa: BLE001  (anything a student passes)
            return None

    w, s = real(attention_weights), real(attention_scores)
    if w is None:
        return "rows sum to 1: (attention_weights is not a tensor of real numbers yet)"
    with np.errstate(all="ignore"):
        lines = [f"rows sum to 1: {bool(np.allclose(w.sum(-1), 1.0, atol=1e-5))}"]
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


# ------------------------------------------------------------ softmax probes
@lru_cache(maxsize=1)
def probes() -> tuple:
    """The inputs the student's softmax is called on, generated with NumPy (the kernel
    side and the judge agree)."""
    rng = np.random.default_rng(2024)
    f32 = np.float32
    inf = np.inf

    def rand(*shape, scale=1.0):
        return (rng.standard_normal(shape) * scale).round(2).astype(f32)

    def probe(label, x, dim, shown):
        x = np.asarray(x, f32)
        x.setflags(write=False)
        return Probe(label, x, dim, shown, _softmax(x.astype(np.float64), dim))

    ordinary = rand(2, 3, 5)
    dim0, dim1 = rand(3, 4, scale=2.0), rand(2, 3, 4)
    square, dim_m2 = rand(1, 4, 4, scale=2.0), rand(2, 4, 3)
    return (
        probe("ordinary input", ordinary, -1, f"x = {_fmt(ordinary)} (shape [2, 3, 5]), dim=-1"),
        probe("rows whose maxima are far apart",
              [[100, 99, 98, 97], [-100, -101, -99, -102]], -1,
              "x = [[100, 99, 98, 97], [-100, -101, -99, -102]], dim=-1"),
        probe("large logits (±1e4)", [[1e4, 0, -1e4], [1e4, 1e4, 1e4]], -1,
              "x = [[1e4, 0, -1e4], [1e4, 1e4, 1e4]], dim=-1"),
        # (the third row: masked keys beside very negative logits, whose maximum is far
        # below 0: a shift that is not the row's own maximum underflows there)
        probe("-inf entries (masked keys)",
              [[0, -inf, math.log(3)], [-inf, 1, 1], [-inf, -200, -199]], -1,
              "x = [[0, -inf, log(3)], [-inf, 1, 1], [-inf, -200, -199]], dim=-1"),
        probe("a row that is entirely -inf (every key masked)",
              [[-inf, -inf, -inf, -inf], [1, 2, 3, 4]], -1,
              "x = [[-inf, -inf, -inf, -inf], [1, 2, 3, 4]], dim=-1"),
        probe("dim=0", dim0, 0, f"x = {_fmt(dim0)}, dim=0"),
        probe("dim=1 of a 3-D input", dim1, 1, f"x = {_fmt(dim1)} (shape [2, 3, 4]), dim=1"),
        probe("a square matrix", square, -1, f"x = {_fmt(square)} (shape [1, 4, 4]), dim=-1"),
        probe("dim=-2", dim_m2, -2, f"x = {_fmt(dim_m2)} (shape [2, 4, 3]), dim=-2"),
    )


MASKED_PROBE = 4  # the index of the probe with a fully masked row


# -------------------------------------------------------------------- steps
def _projection(inp, name):
    n = name[0]
    return inp["x"] @ _swap(inp[f"w_{n}"]) + inp[f"b_{n}"]


def _scores_vjp(inp, g, out):
    scale = 1 / math.sqrt(D_K)
    return {"query": g @ inp["key"] * scale, "key": _swap(g) @ inp["query"] * scale}


def _weights_vjp(inp, g, out):
    return {"attention_scores": out * (g - (out * g).sum(-1, keepdims=True))}


def _values_vjp(inp, g, out):
    return {"attention_weights": g @ _swap(inp["value"]),
            "value": _swap(inp["attention_weights"]) @ g}


#: The contractions the search changes (src/spec.py, Formula), in the axes' words.
_WORDS = {"b": "batch", "t": "token", "d": "feature", "o": "output feature", "q": "query",
          "k": "key"}
_PROJECTIONS = {name: Formula("btd,od->bto", ("x", f"w_{name[0]}"), _WORDS, bias=f"b_{name[0]}")
                for name in ("query", "key", "value")}
_SCORES = {"attention_scores": Formula("bqd,bkd->bqk", ("query", "key"), _WORDS,
                                       scale=1 / math.sqrt(D_K),
                                       named={"tied": "diagonal_only"})}
_VALUES = {"attended_values": Formula("bqk,bkd->bqd", ("attention_weights", "value"), _WORDS,
                                      named={"sum over q": "values_not_mixed"})}

STEPS = (
    Step("cell4_projections", "cell4_projections_test", 4, inputs=("x",), variant=True,
         call="check_projections(query, key, value)",
         checks=(Check("projections", 2.0, "Cell 4 — linear projections",
                       ("query", "key", "value"), reference=_projection,
                       doc="Cell 4: query, key, value == q_proj(x), k_proj(x), v_proj(x), "
                           "each [1, 6, 64].",
                       layers={"query": "q_proj", "key": "k_proj", "value": "v_proj"},
                       formulas=_PROJECTIONS,
                       diagnose={"last": diag.layer_use, "right": diag.provenance}),)),
    Step("cell5_scores", "cell5_scores_test", 5, inputs=("query", "key"), variant=True,
         call="check_attention_scores(query, key, attention_scores)",
         figures=(Figure("attention_scores", "attention_scores",
                         "Your attention_scores (Cell 5)", value_label="score",
                         not_right=", not right yet"),),
         checks=(Check("attention_scores", 2.0, "Cell 5 — scaled dot-product scores",
                       ("attention_scores",), ("query", "key"),
                       doc="Cell 5: attention_scores == query @ keyᵀ / √d_k: [1, 6, 64] x2 "
                           "-> [1, 6, 6].",
                       reference=lambda inp, name: inp["query"] @ _swap(inp["key"])
                       / math.sqrt(D_K),
                       vjp=_scores_vjp, diagnose={"fit": diag.vectors_normalised},
                       formulas=_SCORES),)),
    Step("cell6_softmax", "cell6_softmax_test", 6, inputs=("attention_scores",),
         call="check_softmax(softmax), check_attention_weights(attention_scores, "
              "attention_weights)",
         figures=(Figure("attention_weights", "attention_weights",
                         "Your attention weights (Cell 6)"),),
         checks=(Check("softmax", 1.0, "Cell 6 — your softmax function", ("softmax",),
                       kind="function", diagnose={"judge": diag.judge_softmax},
                       doc="Cell 6: probe your softmax function itself, softmax(x, dim=...)"
                           ", on fixed inputs: ordinary rows, rows whose maxima are far "
                           "apart, logits of ±1e4, -inf entries, a row that is entirely -inf "
                           "(it must give zeros), dims 0, 1, -1 and -2. It must be built from "
                           "torch.exp (a built-in softmax is named), return a real dense "
                           "float tensor of x's shape and leave x unchanged. Shape legend: x "
                           "of any shape."),
                 Check("attention_weights", 2.0, "Cell 6 — attention weights",
                       ("attention_weights",), ("attention_scores",),
                       doc="Cell 6: attention_weights == softmax(attention_scores, dim=-1): "
                           "[1, 6, 6] -> [1, 6, 6].",
                       reference=lambda inp, name: _softmax(inp["attention_scores"]),
                       vjp=_weights_vjp, uses_function="softmax",
                       diagnose={"first": diag.weights_relation, "rows": diag.softmax_axis,
                                 "right": diag.weights_builtin,
                                 "symptom": diag.weights_symptom}))),
    Step("cell7_values", "cell7_values_test", 7, inputs=("attention_weights", "value"),
         variant=True,
         call="check_attended_values(attention_weights, value, attended_values)",
         # (the pattern behind the values, once they score)
         figures=(Figure("attention_weights", "attended_values",
                         "The pattern behind attended_values (Cell 7)", when="scored"),),
         checks=(Check("attended_values", 2.0, "Cell 7 — value aggregation",
                       ("attended_values",), ("attention_weights", "value"),
                       ("attention_scores", "query", "key"),
                       reference=lambda inp, name: inp["attention_weights"] @ inp["value"],
                       doc="Cell 7: attended_values == attention_weights @ value: [1, 6, 6] "
                           "@ [1, 6, 64] -> [1, 6, 64]. Passing attention_scores, query and "
                           "key as well lets the check recognise them used in place of the "
                           "weights or the values.",
                       vjp=_values_vjp, diagnose={"mix": diag.mixing},
                       formulas=_VALUES),)),
)

LESSON = Lesson(
    name="attention",
    notebook="lesson",
    labels=tuple(tokenize(PROMPT_EXAMPLE)),
    source="complete_lesson",
    setup_cells=("cell2_setup", "cell3_data"),
    #: The names the set-up cells bind (a test compares them with the notebook).
    setup_names=(
        "math", "matplotlib", "np", "torch", "PROMPT_EXAMPLE", "load_example",
        "AttentionExplorer", "attention_table", "plot_scaling_effect", "show_figure", "Summary",
        "compare_with_torch_softmax", "example", "tokens", "x", "q_proj", "k_proj", "v_proj",
        "d_k"),
    steps=STEPS,
    shapes={"x": (1, 6, 64), "query": (1, 6, 64), "key": (1, 6, 64), "value": (1, 6, 64),
            "attention_scores": (1, 6, 6), "attention_weights": (1, 6, 6),
            "attended_values": (1, 6, 64)},
    axes={"query": "[batch, token, feature]", "key": "[batch, token, feature]",
          "value": "[batch, token, feature]", "attention_scores": "[batch, query, key]",
          "attention_weights": "[batch, query, key]",
          "attended_values": "[batch, query, feature]"},
    reference=reference,
    chain=chain,
    torch_reference=torch_reference,
    variant_x=variant_x,
    variant_input="x",
    watched_setup=("x",),
    mistakes=MISTAKES,
    entries=tuple(ENTRIES),
    tolerances=dict(tol=TOL, strict=STRICT_TOL, grad=GRAD_TOL, tie=TIE_TOL,
                    variant_scale=VARIANT_SCALE_TOL, low=LOW_TOL),
    probes=probes,
    facts=dict(d_k=D_K, constants={"d_k": D_K, "n_tokens": 6}, softmax_ops=SOFTMAX_OPS,
               softmax_allowed=SOFTMAX_ALLOWED, builtin_softmax=BUILTIN_SOFTMAX,
               node_labels=NODE_LABELS, masked_probe=MASKED_PROBE, shipped=shipped,
               parameters=parameters),
    decisions={
        "constant_sqrt_dk": "`/ 8` for `/ √d_k` is right: the shapes stay the lesson's, "
                            "where d_k is 64",
        "width_for_dk": "`x.shape[-1]` for d_k is right: d_model and d_k are both 64 here",
        "logsumexp_softmax": "a logsumexp softmax is right: it is off by about 3e-4 only at "
                             "logits of 10⁴ whose spread is tiny, which no probe holds",
        "from_its_inputs": "a step's result must come from the inputs its task names: "
                           "scores recomputed from x and the layers, not from query and key, "
                           "cost half the step in the graded run",
        "softmax_float32": "a softmax that computes in float32 (x.float() first) is right: "
                           "the lesson's tensors are float32, and the softmax's docstring "
                           "asks for x's shape, not its dtype",
        "rebinding_costs_half": "a step cell that binds a set-up name or an earlier "
                                "cell's name to another tensor or value (x = x.squeeze(0)) "
                                "costs half its points, even where its own results are "
                                "right: the cells after it see another tensor (the "
                                "notebook's opening says so); the same value again "
                                "(d_k = key.shape[-1]) costs nothing",
        "adapted_to_own_inputs": "code adapted to an earlier slip (weights @ value.double() "
                                 "after float64 weights) that raises on the lesson's inputs "
                                 "but is fully right on the student's own tensors gets its "
                                 "points, with a note: an earlier slip never costs twice",
        "own_softmax_for_weights": "attention_weights made by a built-in softmax beside a "
                                   "right function of your own cost half the weights' "
                                   "points: the task is to call your softmax (Cell 6's "
                                   "text says so)",
    },
)
