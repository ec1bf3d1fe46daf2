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

Every step is checked against *your own* tensors from the step before, so
one early mistake costs points once, not four times, and also against the
reference computed in float64 from the shipped data (``data/``) with
``src/attention.py``. A wrong answer is compared with a catalogue of common
mistakes (:data:`MISTAKES`); the message says what was seen, the likely
cause and the next step. No check ever raises: bad inputs give a failed
result with a clear message.

Command line: ``python verify.py lesson.ipynb [--json]`` runs a notebook
headless and prints a report per step (exit status 1 when a check fails).

Importing this module is cheap (NumPy only): no torch, nbformat or nbclient
on the student's path. Shape legend: B = 1 batch, L = S = 6 tokens,
d_k = d_model = 64.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # src/ is importable wherever verify.py is run from
    sys.path.insert(0, str(HERE))

from src import attention as _A  # noqa: E402
from src.data import load_arrays  # noqa: E402

__all__ = [
    "MISTAKES", "POINTS", "CheckResult", "Points", "Summary", "check_all",
    "check_attended_values", "check_attention_scores", "check_attention_weights",
    "check_projections", "check_softmax",
]

D_K = 64
SHAPES = {"query": (1, 6, 64), "key": (1, 6, 64), "value": (1, 6, 64),
          "attention_scores": (1, 6, 6), "attention_weights": (1, 6, 6),
          "attended_values": (1, 6, 64)}
AXES = {"query": "[batch, token, feature]", "key": "[batch, token, feature]",
        "value": "[batch, token, feature]", "attention_scores": "[batch, query, key]",
        "attention_weights": "[batch, query, key]",
        "attended_values": "[batch, query, feature]"}
#: Points of each check; the nbgrader test cells carry the same numbers.
POINTS = {"projections": 2.0, "attention_scores": 2.0, "softmax": 1.0,
          "attention_weights": 2.0, "attended_values": 2.0}
TITLES = {"projections": "Cell 4 — linear projections",
          "attention_scores": "Cell 5 — scaled dot-product scores",
          "softmax": "Cell 6 — your softmax function",
          "attention_weights": "Cell 6 — attention weights",
          "attended_values": "Cell 7 — value aggregation"}
# float32 results against the float64 reference.
TOL = dict(rtol=1e-4, atol=1e-5)
STRICT_TOL = dict(rtol=1e-5, atol=1e-6)


@dataclass(frozen=True)
class Mistake:
    """A common wrong version of a step, recognised from its output."""

    id: str
    step: str
    title: str
    cause: str
    next_step: str


def _m(id, step, title, cause, next_step):
    return id, Mistake(id, step, title, cause, next_step)


#: The catalogue: every mistake the checks can name, with its diagnosis.
MISTAKES: dict[str, Mistake] = dict([
    _m("swapped_projection", "projections", "a projection layer used for the wrong tensor",
       "one of query/key/value was computed with another tensor's nn.Linear layer "
       "(for example key = q_proj(x))",
       "use q_proj for query, k_proj for key and v_proj for value"),
    _m("no_projection", "projections", "the embeddings were not projected",
       "the tensor equals the input x: the nn.Linear layer was never applied",
       "apply the layer to the embeddings: query = q_proj(x)"),
    _m("missing_bias", "projections", "the bias of the projection is missing",
       "the tensor equals x @ W.T: the layer's weight was used by hand and its bias dropped",
       "call the layer itself, q_proj(x), which adds the bias"),
    _m("weight_not_transposed", "projections", "the projection weight was not transposed",
       "the tensor equals x @ W + b; nn.Linear computes x @ W.T + b",
       "call the layer itself, q_proj(x), instead of multiplying by its weight"),
    _m("transposed_product", "attention_scores", "the product is transposed (K Qᵀ)",
       "the scores are the transpose of Q Kᵀ/√d_k: rows are keys and columns queries",
       "compute query @ key.transpose(-2, -1): queries on the rows, keys on the columns"),
    _m("no_scaling", "attention_scores", "the scores are not scaled by 1/√d_k",
       "the scores equal Q Kᵀ, √d_k = 8 times too large; the softmax will be too peaked",
       "divide by math.sqrt(d_k), with d_k = key.shape[-1] = 64"),
    _m("scaled_by_dk", "attention_scores", "the scores are divided by d_k instead of √d_k",
       "the scores equal Q Kᵀ/64: 8 times too small; the softmax will be too flat",
       "divide by math.sqrt(d_k) = 8, not by d_k = 64"),
    _m("multiplied_by_sqrt_dk", "attention_scores", "the scores are multiplied by √d_k",
       "the scores equal Q Kᵀ·8 instead of Q Kᵀ/8",
       "divide by math.sqrt(d_k) instead of multiplying"),
    _m("softmax_in_scores", "attention_scores",
       "softmax applied in the scores step, scaled after the softmax",
       "the 'scores' are softmax(Q Kᵀ)/√d_k: the scaling came after the softmax, "
       "and the softmax belongs to Cell 6",
       "in Cell 5 compute only query @ key.transpose(-2, -1) / math.sqrt(d_k)"),
    _m("elementwise_scores", "attention_scores",
       "an elementwise product instead of a matrix product",
       "the scores have shape [1, 6, 64] and equal query * key: * multiplies entries, "
       "it does not take dot products between tokens",
       "use the matrix product @ with key transposed: query @ key.transpose(-2, -1)"),
    _m("softmax_wrong_axis", "attention_weights", "softmax over the wrong axis",
       "the weights sum to 1 down each column (or over the batch axis), not along each row: "
       "each query's weights over the keys must sum to 1",
       "normalise over the last axis, dim=-1 (the keys)"),
    _m("exp_without_normalising", "attention_weights", "exp without normalising",
       "the weights equal exp(scores) (maybe shifted by the row max) but rows do not sum to 1",
       "divide each row by its sum: exps / exps.sum(dim=-1, keepdim=True)"),
    _m("normalising_without_exp", "attention_weights", "normalising without exp",
       "the weights equal scores / scores.sum(-1): negative scores give negative 'weights'",
       "exponentiate first (after subtracting the row max), then normalise"),
    _m("scaling_after_softmax", "attention_weights", "scaled after the softmax",
       "the weights equal softmax(scores)/√d_k, so rows sum to 1/8, not 1",
       "scale the scores in Cell 5, before the softmax; the weights themselves are not scaled"),
    _m("softmax_not_applied", "attention_weights", "the softmax was not applied",
       "the weights equal the scores unchanged",
       "apply your softmax: attention_weights = softmax(attention_scores, dim=-1)"),
    _m("no_max_subtraction", "softmax", "softmax without max-subtraction",
       "exp of a large logit overflows to inf and inf/inf gives NaN",
       "subtract each row's maximum before torch.exp: the result is unchanged mathematically "
       "and every exponent is then <= 0"),
    _m("mutates_input", "softmax", "the softmax changes its input in place",
       "after the call the input tensor holds different values (an in-place op such as "
       "x -= ... or x.exp_()), so attention_scores gets overwritten",
       "build new tensors instead: shifted = x - x_max"),
    _m("weights_transposed", "attended_values", "the weights are transposed in the aggregation",
       "the output equals attention_weightsᵀ @ value: each output row mixes values with "
       "a column of weights instead of its own row",
       "compute attention_weights @ value without transposing"),
    _m("scores_instead_of_weights", "attended_values",
       "the scores were used instead of the weights",
       "the output equals attention_scores @ value: the softmax output was skipped",
       "use attention_weights @ value"),
    _m("query_instead_of_value", "attended_values", "the query was used instead of the value",
       "the output equals attention_weights @ query", "use attention_weights @ value"),
    _m("key_instead_of_value", "attended_values", "the key was used instead of the value",
       "the output equals attention_weights @ key", "use attention_weights @ value"),
    _m("values_not_weighted", "attended_values", "the values were not weighted",
       "the output equals value itself: the attention weights were never applied",
       "multiply: attention_weights @ value"),
    _m("lost_batch_dimension", "any", "the batch dimension was lost",
       "the values are right but the leading batch axis of size 1 is gone "
       "(a .squeeze(), [0] or 2-D operation)",
       "keep the shape [1, ...]: use batched ops such as key.transpose(-2, -1), not .T or [0]"),
    _m("wrong_dtype", "any", "the dtype is wrong",
       "the values are right but the tensor is not float32 (for example float64 from "
       "NumPy or torch.tensor(..., dtype=torch.float64))",
       "stay in torch float32: build on the tensors from the cell before, or call .float()"),
    _m("nan_or_inf", "any", "NaN or inf in the result",
       "an overflow (exp of a large number) or a division by zero",
       "look for torch.exp without max-subtraction or a division by a sum that can be 0"),
])


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


def _num(x):
    return f"{x:g}"


@dataclass
class CheckResult:
    """The outcome of one check; truthy when ``passed``."""

    step: str
    passed: bool
    score: float
    max_score: float
    message: str
    mistake: str | None = None
    notes: list = field(default_factory=list)

    def __bool__(self):
        return self.passed

    @property
    def title(self):
        return TITLES.get(self.step, self.step)

    @property
    def points(self) -> Points:
        """The score, as nbgrader reads it from a test cell's last line."""
        return Points(self.score, self.max_score)

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
                "mistake": self.mistake, "message": self.message, "notes": list(self.notes)}


@dataclass
class Summary:
    """Every step's result, as returned by :func:`check_all`."""

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
        return Points(self.score, self.max_score)

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


def _ok(step, message, notes=()):
    return CheckResult(step, True, POINTS[step], POINTS[step], message, None, list(notes))


def _fail(step, message, mistake=None, notes=(), score=0.0):
    if mistake is not None:
        m = MISTAKES[mistake]
        message = (f"Mistake: {m.title}.\nWhat we saw: {message}\nLikely cause: {m.cause}.\n"
                   f"Next step: {m.next_step}.")
    return CheckResult(step, False, score, POINTS[step], message, mistake, list(notes))


# ---------------------------------------------------------------- reference
@lru_cache(maxsize=1)
def _reference():
    """float64 tensors of every step, from the shipped data and src/attention.py."""
    a = load_arrays()
    x = a["x"].astype(np.float64)  # (1, L, d_model)
    proj = {n: x @ a[f"w_{n}"].astype(np.float64).T + a[f"b_{n}"] for n in "qkv"}
    scores = _A.attention_scores(proj["q"], proj["k"])
    weights = _A.softmax(scores)
    values, _ = _A.scaled_dot_product_attention(proj["q"], proj["k"], proj["v"])
    return {"x": x, "w": {n: a[f"w_{n}"].astype(np.float64) for n in "qkv"},
            "b": {n: a[f"b_{n}"].astype(np.float64) for n in "qkv"},
            "query": proj["q"], "key": proj["k"], "value": proj["v"],
            "attention_scores": scores, "attention_weights": weights,
            "attended_values": values}


class _UnusableError(Exception):
    """An input that cannot be checked; its message is for the student."""


def _describe(obj):
    if hasattr(obj, "shape") and hasattr(obj, "dtype"):
        return f"a {type(obj).__name__} of shape {list(obj.shape)} and dtype {obj.dtype}"
    return f"a {type(obj).__name__}"


def _as_array(obj, name):
    """(float64 array, dtype name) of a torch tensor or NumPy array, or _UnusableError."""
    cell = {"query": 4, "key": 4, "value": 4, "attention_scores": 5,
            "attention_weights": 6, "attended_values": 7}.get(name)
    run = f"run your Cell {cell} code first" if cell else "run the cell that defines it"
    if obj is None:
        raise _UnusableError(f"`{name}` is None: it has not been computed yet; {run}.")
    if hasattr(obj, "detach") and hasattr(obj, "numpy"):  # torch, also with requires_grad
        try:
            arr = obj.detach().cpu().numpy()
        except Exception as exc:  # noqa: BLE001  (sparse, meta tensors, ...)
            raise _UnusableError(f"`{name}` could not be read as numbers ({exc}).") from None
        dtype = str(obj.dtype).removeprefix("torch.")
    elif isinstance(obj, np.ndarray):
        arr, dtype = obj, str(obj.dtype)
    else:
        raise _UnusableError(
            f"`{name}` should be a torch tensor of shape {list(SHAPES.get(name, ()))}, "
            f"but it is {_describe(obj)}. {run[0].upper() + run[1:]}; keep the result as a "
            "tensor (no .tolist(), no str()).")
    if arr.dtype.kind not in "fiub":
        raise _UnusableError(f"`{name}` should hold real numbers, but its dtype is {arr.dtype}.")
    return arr.astype(np.float64), dtype


def _close(a, b, tol=TOL):
    return a.shape == b.shape and bool(np.allclose(a, b, **tol))


def _check_output(step, name, got, expected, candidates, strict=False, notes=(),
                  also_right=()):
    """Compare ``got`` with ``expected``, else name the matching mistake.

    ``candidates`` is a list of (mistake id, array) for the wrong versions;
    ``also_right`` arrays are accepted too (the reference path).
    """
    tol = STRICT_TOL if strict else TOL
    want = expected.shape  # [1, 6, ...] unless an upstream tensor of yours has another shape
    try:
        arr, dtype = _as_array(got, name)
    except _UnusableError as exc:
        return _fail(step, str(exc))
    notes = list(notes)
    if not np.isfinite(arr).all():
        bad = int((~np.isfinite(arr)).sum())
        return _fail(step, f"`{name}` contains {bad} NaN or inf value(s).", "nan_or_inf")
    rights = [expected, *also_right]
    if arr.shape != want:
        for right in rights:
            if arr.shape == right.shape[1:] and _close(arr, right[0], tol):
                return _fail(step, f"`{name}` has shape {list(arr.shape)} but should be "
                             f"{list(want)} {AXES[name]}.", "lost_batch_dimension",
                             score=POINTS[step] / 2)
        for mistake, cand in candidates:
            if arr.shape == cand.shape and _close(arr, cand):
                return _fail(step, f"`{name}` has shape {list(arr.shape)} instead of "
                             f"{list(want)} {AXES[name]}.", mistake)
        return _fail(step, f"`{name}` should have shape {list(want)} {AXES[name]}, but it "
                     f"has shape {list(arr.shape)}. Check the order of the operands and "
                     "which axis you transpose or reduce.", notes=notes)
    if any(_close(arr, right, tol) for right in rights):
        if dtype != "float32":
            return _fail(step, f"`{name}` has the right values but dtype {dtype}.",
                         "wrong_dtype", score=POINTS[step] / 2)
        return _ok(step, f"`{name}` {list(want)} is correct.", notes)
    for mistake, cand in candidates:
        if _close(arr, cand):
            return _fail(step, _symptom(mistake, arr, expected), mistake, notes)
    err = np.abs(arr - expected)
    i = np.unravel_index(int(err.argmax()), err.shape)
    return _fail(step, f"`{name}` has the right shape but wrong values: the largest "
                 f"difference is {err.max():.3g} at index {list(map(int, i))} (expected "
                 f"{expected[i]:.4f}, got {arr[i]:.4f}). It matches none of the common "
                 "mistakes; compare your code with the formula above and open the hint.",
                 notes=notes)


def _symptom(mistake, arr, expected):
    """A short 'what we saw' for a recognised mistake."""
    ratio = float(np.abs(arr).mean() / max(np.abs(expected).mean(), 1e-30))
    rows = arr.sum(-1).ravel()
    sums = ", ".join(f"{s:.3g}" for s in rows[:6])
    return {
        "no_scaling": f"your scores are {ratio:.3g} times the expected ones (√d_k = 8).",
        "scaled_by_dk": f"your scores are {ratio:.3g} times the expected ones (1/8).",
        "multiplied_by_sqrt_dk": f"your scores are {ratio:.3g} times the expected ones (64).",
        "transposed_product": "your scores are the expected matrix transposed.",
        "softmax_in_scores": f"your 'scores' are all positive with rows summing to {sums}.",
        "softmax_wrong_axis": "your weights' rows sum to "
                              f"{sums} instead of 1, while the columns sum to 1.",
        "exp_without_normalising": f"your weights are all positive but rows sum to {sums}.",
        "normalising_without_exp": f"rows sum to 1 but {int((arr < 0).sum())} weights are "
                                   "negative.",
        "scaling_after_softmax": f"your weights' rows sum to {sums}.",
        "softmax_not_applied": f"your weights' rows sum to {sums}, not 1.",
    }.get(mistake, "your result matches this mistake exactly.")


def _own_or_reference(pairs):
    """The student's own upstream tensors as arrays, with notes about them.

    ``pairs`` is a list of (name, student object). Returns (own arrays or
    None, notes); own is None when an input is missing, not numeric or not
    finite, and the caller then checks against the reference inputs. An own
    input of another shape is kept: the step is judged on what it was given.
    """
    ref = _reference()
    own, notes = {}, []
    for name, obj in pairs:
        try:
            arr, _ = _as_array(obj, name)
        except _UnusableError:
            arr = None
        if arr is None or not np.isfinite(arr).all():
            notes.append(f"Your `{name}` is missing or not finite, so this step was checked "
                         "against the reference tensors instead.")
            return None, notes
        own[name] = arr
    differ = [n for n in own if not _close(own[n], ref[n])]
    if differ:
        names = ", ".join(f"`{n}`" for n in differ)
        notes.append(f"Your {names} differ from the reference, so this step is checked "
                     "against your own tensors: an earlier mistake does not cost points "
                     "twice.")
    return own, notes


def _expected(compute, own, notes):
    """compute(inputs) on the student's own inputs, else on the reference's."""
    if own is not None:
        try:
            return compute(own)
        except ValueError:  # shapes that cannot be combined
            notes.append("Your tensors from the cells before cannot be combined (their shapes "
                         "do not fit), so this step was checked against the reference tensors.")
    return compute(_reference())


def _guard(step, fn):
    """Run a check; any unexpected error becomes a failed result, never a traceback."""
    try:
        with np.errstate(all="ignore"):
            return fn()
    except Exception as exc:  # noqa: BLE001  (the student must never see our traceback)
        return _fail(step, f"The check could not run on these inputs ({type(exc).__name__}: "
                     f"{exc}). Make sure every tensor comes from the cells above.")


def _check_step(name, got, upstream, compute, strict):
    """Check the step that produces ``name``: ``got`` against ``compute`` applied to
    the student's own ``upstream`` tensors (else the reference's), naming a mistake
    from the candidates ``compute`` also returns."""
    own, notes = _own_or_reference(upstream)
    expected, candidates = _expected(compute, own, notes)
    return _check_output(name, name, got, expected, candidates, strict, notes,
                         also_right=[_reference()[name]])


# ------------------------------------------------------------------- checks
def check_projections(query, key, value, *, strict=False) -> CheckResult:
    """Cell 4: query, key, value == x @ W.T + b with the shipped layers, [1, 6, 64]."""

    def run():
        ref = _reference()
        x, w, b = ref["x"], ref["w"], ref["b"]
        for name, got, n in (("query", query, "q"), ("key", key, "k"), ("value", value, "v")):
            others = [("swapped_projection", ref[o]) for o in ("query", "key", "value")
                      if o != name]
            candidates = [*others, ("no_projection", x), ("missing_bias", x @ w[n].T),
                          ("weight_not_transposed", x @ w[n] + b[n])]
            res = _check_output("projections", name, got, ref[name], candidates, strict)
            if not res:
                return res
            if strict and hasattr(got, "requires_grad") and not got.requires_grad:
                return _fail("projections", f"`{name}` does not require grad: it was not "
                             "computed by the learnable nn.Linear layer (or was detached). "
                             "Compute it as q_proj(x) so gradients can flow.")
        return _ok("projections", "`query`, `key` and `value` [1, 6, 64] are correct.")

    return _guard("projections", run)


def check_attention_scores(query, key, attention_scores, *, strict=False) -> CheckResult:
    """Cell 5: attention_scores == query @ keyᵀ / √d_k, shape [1, 6, 6]."""

    def compute(src):
        q, k = src["query"], src["key"]
        raw = q @ np.swapaxes(k, -1, -2)
        expected = raw / math.sqrt(D_K)
        return expected, [("transposed_product", np.swapaxes(expected, -1, -2)),
                          ("no_scaling", raw), ("scaled_by_dk", raw / D_K),
                          ("multiplied_by_sqrt_dk", raw * math.sqrt(D_K)),
                          ("softmax_in_scores", _A.softmax(raw) / math.sqrt(D_K)),
                          ("elementwise_scores", q * k / math.sqrt(D_K)),
                          ("elementwise_scores", q * k)]

    return _guard("attention_scores", lambda: _check_step(
        "attention_scores", attention_scores, [("query", query), ("key", key)], compute,
        strict))


def check_attention_weights(attention_scores, attention_weights, *, strict=False) -> CheckResult:
    """Cell 6: attention_weights == softmax(attention_scores, dim=-1), rows sum to 1."""

    def compute(src):
        s = src["attention_scores"]
        e = np.exp(s - s.max(-1, keepdims=True))
        return _A.softmax(s), [
            ("softmax_wrong_axis", _A.softmax(s, axis=-2)),
            ("softmax_wrong_axis", _A.softmax(s, axis=0)),
            ("exp_without_normalising", np.exp(s)),
            ("exp_without_normalising", e),
            ("normalising_without_exp", s / s.sum(-1, keepdims=True)),
            ("scaling_after_softmax", _A.softmax(s) / math.sqrt(D_K)),
            ("softmax_not_applied", s)]

    return _guard("attention_weights", lambda: _check_step(
        "attention_weights", attention_weights, [("attention_scores", attention_scores)],
        compute, strict))


def check_attended_values(attention_weights, value, attended_values, *, attention_scores=None,
                          query=None, key=None, strict=False) -> CheckResult:
    """Cell 7: attended_values == attention_weights @ value, shape [1, 6, 64].

    Passing ``attention_scores``, ``query`` and ``key`` as well lets the
    check recognise them used in place of the weights or the values.
    """

    def run():
        # The tensors a mistaken aggregation may use in place of the weights or values.
        ref, extra = _reference(), {}
        for name, obj in (("attention_scores", attention_scores), ("query", query),
                          ("key", key)):
            try:
                arr, _ = _as_array(obj, name)
            except _UnusableError:
                arr = ref[name]
            extra[name] = arr if arr.shape == SHAPES[name] else ref[name]

        def compute(src):
            w, v = src["attention_weights"], src["value"]
            return w @ v, [("weights_transposed", np.swapaxes(w, -1, -2) @ v),
                           ("scores_instead_of_weights", extra["attention_scores"] @ v),
                           ("query_instead_of_value", w @ extra["query"]),
                           ("key_instead_of_value", w @ extra["key"]),
                           ("values_not_weighted", v)]

        return _check_step("attended_values", attended_values,
                           [("attention_weights", attention_weights), ("value", value)],
                           compute, strict)

    return _guard("attended_values", run)


def check_softmax(softmax, *, strict=False) -> CheckResult:
    """Cell 6: probe your softmax function itself on stress inputs.

    Visible checks: it matches torch.softmax along dim=-1 on ordinary input,
    stays finite for logits of +-1e4, gives -inf entries weight 0, and does
    not change its input. ``strict`` (the hidden test) also asks that a row
    whose entries are all -inf (every key masked) gives zeros, not NaN.
    """
    step = "softmax"

    def run():
        if not callable(softmax):
            return _fail(step, f"`softmax` should be the function you defined in Cell 6, "
                         f"but it is {_describe(softmax)}. Run your Cell 6 code first.")
        import torch

        gen = torch.Generator().manual_seed(0)
        ordinary = torch.randn(2, 3, 5, generator=gen)
        probes = [
            ("ordinary input", ordinary, torch.softmax(ordinary, dim=-1)),
            ("large logits (1e4)", torch.tensor([[1e4, 0.0, -1e4], [1e4, 1e4, 1e4]]),
             torch.tensor([[1.0, 0.0, 0.0], [1 / 3, 1 / 3, 1 / 3]])),
            ("-inf entries (masked keys)", torch.tensor([[0.0, float("-inf"), math.log(3)]]),
             torch.tensor([[0.25, 0.0, 0.75]])),
        ]
        if strict:
            probes.append(("a row that is entirely -inf (every key masked)",
                           torch.full((1, 4), float("-inf")), torch.zeros(1, 4)))
        notes = []
        for label, x, want in probes:
            before = x.clone()
            try:
                got = softmax(x.clone() if label != "ordinary input" else x, dim=-1)
            except TypeError:
                try:
                    got = softmax(x)
                except Exception as exc:  # noqa: BLE001
                    return _fail(step, f"Your softmax raised {type(exc).__name__}: {exc} on "
                                 f"{label}. It should take a tensor and dim=-1.")
            except Exception as exc:  # noqa: BLE001
                return _fail(step, f"Your softmax raised {type(exc).__name__}: {exc} on "
                             f"{label}.")
            if label == "ordinary input" and not torch.equal(x, before):
                return _fail(step, "calling softmax(x) changed x.", "mutates_input")
            if not isinstance(got, torch.Tensor):
                return _fail(step, f"Your softmax returned {_describe(got)} on {label}; it "
                             "should return a torch tensor of the same shape as its input.")
            if got.shape != want.shape:
                return _fail(step, f"On {label} your softmax returned shape "
                             f"{list(got.shape)} for an input of shape {list(x.shape)}; "
                             "keep the shape (keepdim=True in max and sum).")
            g = got.detach().double()
            if label == "ordinary input":
                wrong_axis = any(torch.allclose(g, torch.softmax(x, dim=d).double(), 1e-4,
                                                1e-5) for d in (0, 1))
                if wrong_axis:
                    return _fail(step, "on an input of shape [2, 3, 5] your softmax "
                                 "normalised over another axis than the last.",
                                 "softmax_wrong_axis")
            if not torch.isfinite(g).all():
                if label.startswith("large"):
                    return _fail(step, f"on {label} your softmax returned "
                                 f"{_fmt(g)} instead of {_fmt(want)}.", "no_max_subtraction")
                if label.startswith("a row"):
                    return _fail(step, f"on {label} your softmax returned {_fmt(g)}. Such a "
                                 "query attends to nothing: return zeros there (when the row "
                                 "max is -inf, subtract 0 instead, and divide by 1 where the "
                                 "sum is 0).")
                return _fail(step, f"on {label} your softmax returned {_fmt(g)} instead of "
                             f"{_fmt(want)}.", "nan_or_inf")
            if not torch.allclose(g, want.double(), rtol=1e-4, atol=1e-5):
                return _fail(step, f"on {label} your softmax returned {_fmt(g)} instead of "
                             f"{_fmt(want)}. Exponentiate the shifted input, then divide by "
                             "the row sums.")
        return _ok(step, "Your softmax matches torch.softmax, stays finite for logits of "
                   "±1e4 and gives masked (-inf) keys weight 0.", notes)

    return _guard(step, run)


def _fmt(t):
    return np.array2string(t.numpy(), precision=3, suppress_small=True, separator=", ")


def check_all(namespace=None, **tensors) -> Summary:
    """Every step's check, from a namespace such as ``globals()`` or keywords."""
    ns = dict(namespace or {})
    ns.update(tensors)
    get = ns.get
    return Summary([
        check_projections(get("query"), get("key"), get("value")),
        check_attention_scores(get("query"), get("key"), get("attention_scores")),
        check_softmax(get("softmax")),
        check_attention_weights(get("attention_scores"), get("attention_weights")),
        check_attended_values(get("attention_weights"), get("value"), get("attended_values"),
                              attention_scores=get("attention_scores"), query=get("query"),
                              key=get("key")),
    ])


# --------------------------------------------------------------------- CLI
# Runs first: this verify.py's src/, data/ and verify come before anything beside the
# notebook (a copy of verify.py in a submission folder is never the one used).
_PATH_CELL = """\
import sys as _sys
_sys.path.insert(0, {root!r})
"""
_REPORT_CELL = """\
import json as _json
import verify as _verify
print("@@VERIFY@@" + _json.dumps(_verify.check_all(globals()).to_dict()))
"""


def run_notebook(path, timeout=60):
    """Execute a notebook headless and return (report dict, cell errors).

    Cells run in order with errors allowed (an unfinished cell does not stop
    the others); a final cell then runs :func:`check_all` in the kernel.
    """
    import nbformat
    from nbclient import NotebookClient

    path = Path(path)
    nb = nbformat.read(path, as_version=4)
    nb.cells.insert(0, nbformat.v4.new_code_cell(_PATH_CELL.format(root=str(HERE))))
    nb.cells.append(nbformat.v4.new_code_cell(_REPORT_CELL))
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    errors = []
    for index, cell in enumerate(nb.cells[1:-1]):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                gid = cell.metadata.get("nbgrader", {}).get("grade_id", f"cell {index}")
                errors.append({"cell": gid, "error": out["ename"], "message": out["evalue"]})
    report = None
    for out in nb.cells[-1].get("outputs", []):
        for line in out.get("text", "").splitlines():
            if line.startswith("@@VERIFY@@"):
                import json

                report = json.loads(line[len("@@VERIFY@@"):])
    if report is None:
        raise RuntimeError("the notebook's kernel did not produce a report")
    return report, errors


def main(argv=None) -> int:
    import argparse
    import json

    parser = argparse.ArgumentParser(description="Run a lesson notebook and check each step.")
    parser.add_argument("notebook", type=Path)
    parser.add_argument("--json", action="store_true", help="print a JSON report")
    parser.add_argument("--timeout", type=int, default=60, help="seconds per cell")
    args = parser.parse_args(argv)
    if not args.notebook.is_file():
        print(f"verify: expected a notebook file, got {args.notebook} (not found)",
              file=sys.stderr)
        return 2
    try:
        report, errors = run_notebook(args.notebook, args.timeout)
    except Exception as exc:  # noqa: BLE001
        print(f"verify: could not run {args.notebook}: {type(exc).__name__}: {exc}",
              file=sys.stderr)
        return 2
    report["cell_errors"] = errors
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"{args.notebook}: {_num(report['score'])}/{_num(report['max_score'])} points")
        for r in report["results"]:
            mark = "PASS" if r["passed"] else "FAIL"
            print(f"[{mark}] {r['title']}: {_num(r['score'])}/{_num(r['max_score'])}")
            if not r["passed"]:
                print("\n".join("    " + line for line in r["message"].splitlines()))
        if errors:
            print("Cells that raised an error:")
            for e in errors:
                print(f"    {e['cell']}: {e['error']}: {e['message']}")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
