"""Lesson 1's catalogue of common mistakes, one entry each, read top to bottom.

Each entry (:class:`src.spec.Mistake`) is the one place for a mistake: its check,
its title, its cause, the next step the student is told, what it costs, and how the
judge recognises it (the wrong result reproduced from the check's inputs, a wrong
softmax to probe, a factor, an error pattern, or an observed fact). The lesson's spec
(``src/lessons/attention.py``) carries it to the judge; the tests
(``tests/catalogue.py``) read it too; a course author adds a mistake by adding an
entry here.
"""

from __future__ import annotations

import math

import numpy as np

from src.checks.util import _softmax, _swap
from src.spec import Mistake

#: d_k = d_model of the lesson (its spec reads it from here).
D_K = 64
SQRT_DK = math.sqrt(D_K)
#: Partial credit: the share of a check's points that a shortfall costs.
HALF = 0.5


ENTRIES: list = []


def _m(id, step, title, cause, next_step, **kw):
    ENTRIES.append(Mistake(id, step, title, cause, next_step, **kw))


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


def _guarded(total):
    """A sum with its zeros replaced by 1 (the guard of an all -inf row)."""
    return np.where(total == 0, np.ones_like(total), total)


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


_m("new_layers", "projections", "weights other than the given layers'",
   "the tensor was made with parameters that are not the ones Cell 3 gave q_proj, k_proj "
   "and v_proj (its autograd graph holds others): a layer of your own, or a given layer "
   "whose weights were re-initialised or overwritten, starts from other random weights",
   "use the layers Cell 3 made as they are, one for each tensor: no layers of your own, "
   "no change to their weights",
   kind="new_layers", shows="the output of a layer with other weights")
_m("swapped_projection", "projections", "a projection layer used for the wrong tensor",
   "one of query/key/value was computed with another tensor's layer "
   "(for example key = q_proj(x))",
   "use q_proj for query, k_proj for key and v_proj for value",
   reproduce=lambda inp: [_proj(inp, o) for o in "qkv" if o != inp["name"][0]],
   shows="the output of another tensor's layer")
_m("no_projection", "projections", "the embeddings were not projected",
   "the tensor equals the input x: the nn.Linear layer was never applied",
   "call each layer on the embeddings x, as a function",
   reproduce=lambda inp: inp["x"], shows="x itself")
_m("missing_bias", "projections", "the bias of the projection is missing",
   "the tensor equals x @ W.T: the bias never reached it (the weight used by hand without "
   "the bias, or the bias taken off the layer's output afterwards)",
   "keep the layer's output as calling it on x gives it: with its bias, nothing taken off",
   reproduce=lambda inp: inp["x"] @ _swap(inp[f"w_{inp['name'][0]}"]), shows="x @ W.T")
_m("weight_not_transposed", "projections", "the weight is applied the wrong way round",
   "the tensor equals x @ W + b, where nn.Linear computes x @ W.T + b: the weight was not "
   "transposed, or transposed twice (F.linear transposes it itself)",
   "call the layer itself on x instead of multiplying by its weight",
   reproduce=lambda inp: inp["x"] @ inp[f"w_{inp['name'][0]}"] + inp[f"b_{inp['name'][0]}"],
   shows="x @ W + b")
_m("weight_only", "projections", "the weight used without .T and without the bias",
   "the tensor equals x @ W: nn.Linear computes x @ W.T + b, so both the transpose "
   "and the bias are missing",
   "call the layer itself on x: it transposes the weight and adds the bias",
   reproduce=lambda inp: inp["x"] @ inp[f"w_{inp['name'][0]}"], shows="x @ W")
_m("bias_added_twice", "projections", "the bias was added twice",
   "the tensor equals q_proj(x) + b: calling the layer already adds its bias",
   "drop the extra bias: calling the layer adds it once",
   reproduce=lambda inp: _proj(inp, inp["name"][0]) + inp[f"b_{inp['name'][0]}"],
   shows="x @ W.T + 2b")
_m("projection_scaled", "projections", "the projection was scaled by 1/√d_k",
   "the tensor is 1/8 of q_proj(x): the scaling belongs to the scores in Cell 5, "
   "not to the projections",
   "leave the layer's output unscaled; Cell 5 divides the scores by √d_k",
   factor=1 / math.sqrt(D_K))
_m("copied_layer", "projections", "a copy of the layer, not the layer itself",
   "the values are right, but they come from other parameters with the same numbers (a "
   "deep copy of the layer, or tensors made from its weights), so training the lesson's "
   "layers could never change them",
   "call q_proj, k_proj and v_proj themselves, not copies of them",
   kind="copied", cost=HALF, strict_only=True)
_m("detached_projection", "projections", "a projection detached from its layer",
   "the values are right, but the tensor does not come from the layer's parameters in "
   "the autograd graph (.detach(), torch.no_grad(), .data, or rebuilt from numbers), "
   "so training could never change it",
   "call the layer outside torch.no_grad(), with no .detach(), NumPy or torch.tensor(...) "
   "rebuilding", kind="detached", cost=HALF, strict_only=True)

# Cell 5 — scores.
def _raw(inp):
    return inp["query"] @ _swap(inp["key"])


_m("transposed_product", "attention_scores", "the product is transposed (K Qᵀ)",
   "the scores are the transpose of Q Kᵀ/√d_k: rows are keys and columns queries",
   "queries on the rows, keys on the columns: query on the left of a product, or an einsum's "
   "or loop's output axes in (batch, query, key) order",
   reproduce=lambda inp: _swap(_raw(inp)) / SQRT_DK, shows="(Q Kᵀ/√d_k)ᵀ = K Qᵀ/√d_k")
_m("same_tensor_twice", "attention_scores", "the same tensor on both sides of the product",
   "the scores equal Q Qᵀ/√d_k or K Kᵀ/√d_k: the query was used as the key (or the "
   "other way round)",
   "use query on the left and the transposed key on the right",
   reproduce=lambda inp: [inp["query"] @ _swap(inp["query"]) / SQRT_DK,
                          inp["key"] @ _swap(inp["key"]) / SQRT_DK],
   shows="Q Qᵀ/√d_k (or K Kᵀ/√d_k)")
_m("value_in_scores", "attention_scores", "the value was used in the scores",
   "the scores equal Q Vᵀ/√d_k (or V Kᵀ/√d_k): the value takes no part in the scores",
   "compare the queries with the keys only; the value comes in at Cell 7",
   reproduce=lambda inp: [inp["query"] @ _swap(inp["value"]) / SQRT_DK,
                          inp["value"] @ _swap(inp["key"]) / SQRT_DK],
   shows="Q Vᵀ/√d_k")
_m("feature_product", "attention_scores",
   "a product over tokens instead of features (Qᵀ K or Kᵀ Q)",
   "the scores have shape [1, 64, 64]: the transpose is on the wrong operand, so the "
   "product sums over the tokens instead of the features",
   "put the transpose on the key's last two axes and keep the query as it is: the scores "
   "must come out [1, 6, 6]",
   reproduce=lambda inp: [_swap(inp["key"]) @ inp["query"] / SQRT_DK,
                          _swap(inp["query"]) @ inp["key"] / SQRT_DK,
                          _swap(inp["key"]) @ inp["query"], _swap(inp["query"]) @ inp["key"]],
   shows=("Kᵀ Q/√d_k, shape [1, 64, 64]", "Qᵀ K/√d_k, shape [1, 64, 64]",
          "Kᵀ Q, shape [1, 64, 64]", "Qᵀ K, shape [1, 64, 64]"))


def _causal(inp):
    """Q Kᵀ/√d_k with a decoder's causal mask: each token keeps itself and those before."""
    scores = _raw(inp) / SQRT_DK
    later = np.triu(np.ones(scores.shape[-2:], dtype=bool), k=1)
    return [np.where(later, fill, scores)
            for fill in (-np.inf, -1e9, float(np.finfo(np.float32).min))]


_m("causal_mask", "attention_scores", "a mask in the scores",
   "the scores of later tokens were set to -inf (or a huge negative number), as a "
   "decoder's causal mask does with masked_fill and torch.triu; the attention of this "
   "lesson lets every token attend to all six, with no mask",
   "remove the mask: in this lesson every token attends to all six, so no score is set to -inf",
   reproduce=_causal, shows="Q Kᵀ/√d_k with the entries above the diagonal masked")
_m("no_scaling", "attention_scores", "the scores are not scaled by 1/√d_k",
   "the scores equal Q Kᵀ, √d_k = 8 times too large (no division, or a division by 1: "
   "len() and shape[0] of a [1, 6, 64] tensor give its batch size, 1, and d_k ** (1 // 2) "
   "is d_k ** 0, since // rounds 1/2 down to 0); the softmax will be too peaked",
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
   "s / d_k ** 1/2 is s / 64 / 2 (** binds tighter than /): the scores were divided by "
   "128 instead of 8",
   "divide by math.sqrt(d_k), or by d_k ** 0.5: after ** the 1/2 is not read as a half",
   factor=1 / 16)
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
   "leave the softmax to Cell 6: Cell 5's scores are the scaled products of the queries "
   "and the keys, before any softmax",
   reproduce=lambda inp: [_softmax(_raw(inp)) / SQRT_DK, _softmax(_raw(inp) / SQRT_DK),
                          _softmax(_raw(inp))],
   shows="softmax(Q Kᵀ)/√d_k or softmax(Q Kᵀ/√d_k)")
_m("elementwise_scores", "attention_scores",
   "an elementwise product instead of a matrix product",
   "* multiplies entries, it does not take dot products between tokens: the result "
   "has the shape of query, [1, 6, 64] (or [1, 6] once summed over the features: token "
   "i with token i only), not [1, 6, 6]",
   "use the matrix product @, with key's last two axes swapped",
   reproduce=lambda inp: [inp["query"] * inp["key"] / SQRT_DK, inp["query"] * inp["key"],
                          (inp["query"] * inp["key"]).sum(-1) / SQRT_DK],
   shows="query * key (/√d_k), or its sum over the features")

# Cell 6 — the softmax function (probed) and the weights.
_m("uses_builtin_softmax", "softmax", "the softmax calls a built-in softmax",
   "your function calls torch.softmax, F.softmax, Tensor.softmax or log_softmax: the "
   "task is to build it from torch.exp",
   "write it yourself: subtract the row max, torch.exp, divide by the row sums",
   kind="builtin")
_m("softmax_not_allowed_op", "softmax", "the softmax uses an operation it may not",
   "its output's autograd graph holds an operation a softmax written by hand does not need: "
   "a built-in that normalises for you (scaled_dot_product_attention, MultiheadAttention, "
   "sigmoid, ...) is not your own softmax",
   "build it only from the operations listed below: shift by the max, exp, sum, divide",
   kind="not_allowed")
_m("softmax_runs_course_code", "softmax", "the softmax runs the course's own code",
   "the function runs code that ships with the course (its reference softmax, its library): "
   "then none of it is yours, whatever its operations",
   "write the function's body yourself in this cell, from tensor operations",
   kind="course_code")
_m("weights_not_from_your_softmax", "attention_weights",
   "the weights come from a built-in softmax, not from yours",
   "the line that makes attention_weights calls a built-in (torch.softmax, F.softmax, "
   "F.scaled_dot_product_attention, ...) instead of the softmax you wrote above it",
   "call the softmax you wrote above on the scores, not a built-in",
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
   "subtract each row's maximum along dim instead (its dimension kept), so that every "
   "exponent is <= 0",
   fns=_fns(lambda x, d: np.exp(x - x.min(axis=d, keepdims=True))
            / _sum(np.exp(x - x.min(axis=d, keepdims=True)), d),
            lambda x, d: np.exp(x - x.mean(axis=d, keepdims=True))
            / _sum(np.exp(x - x.mean(axis=d, keepdims=True)), d),
            *(lambda x, d, r=r: (lambda m: (lambda e: e / _guarded(_sum(e, d)))(
                np.exp(x - np.where(np.isfinite(m), m, 0))))(r(x, d))
              for r in (lambda x, d: x.min(axis=d, keepdims=True),
                        lambda x, d: x.mean(axis=d, keepdims=True)))))
_m("shift_by_argmax", "softmax", "the index of the maximum subtracted, not its value",
   "x.max(dim, keepdim=True)[1] (or .indices, or argmax) is where each row's maximum is, "
   "not the maximum: subtracting that position leaves large exponents that overflow",
   "subtract the maximum's value: the first of the pair max(dim) returns (.values), or amax",
   fns=_fns(lambda x, d: (lambda e: e / _sum(e, d))(
       np.exp(x - np.expand_dims(np.argmax(x, axis=d), d).astype(x.dtype))),
            lambda x, d: (lambda e: e / _guarded(_sum(e, d)))(
       np.exp(x - np.expand_dims(np.argmax(x, axis=d), d).astype(x.dtype)))))
_m("no_max_subtraction", "softmax", "softmax without max-subtraction",
   "exp of a large logit overflows to inf and inf/inf gives NaN",
   "subtract each row's maximum along dim (its dimension kept) before torch.exp: "
   "every exponent is then <= 0",
   fns=_fns(lambda x, d: np.exp(x) / _sum(np.exp(x), d),
            lambda x, d: np.exp(x) / _guarded(_sum(np.exp(x), d))))
_m("global_max_subtraction", "softmax", "the global maximum subtracted instead of each row's",
   "x - x.max() shifts every row by the largest entry of the whole tensor: a row far below "
   "it underflows to exp(...) = 0 and gives 0/0 = NaN (or zeros, where the sum is guarded)",
   "subtract each row's own maximum, taken along dim, not the whole tensor's",
   fns=_fns(lambda x, d: np.exp(x - x.max()) / _sum(np.exp(x - x.max()), d),
            lambda x, d: np.exp(x - x.max()) / _guarded(_sum(np.exp(x - x.max()), d))))
_m("max_of_replaced_inf", "softmax", "the row maximum taken with -inf replaced by 0",
   "-inf was replaced by 0 (or another number) before the maximum, so a row whose finite "
   "scores all lie far below 0 is shifted by that number instead of its own maximum: every "
   "exp(...) underflows to 0",
   "take each row's maximum of x as it is (only an all -inf row needs 0 instead), then "
   "subtract it",
   fns=_fns(lambda x, d: (lambda e: e / _guarded(_sum(e, d)))(
       np.exp(x - np.where(np.isinf(x), 0, x).max(axis=d, keepdims=True)))))
_m("max_clamped_at_zero", "softmax", "the row maximum clamped at 0",
   "clamp(min=0) (or max(m, 0)) on the row maximum does turn an all -inf row's -inf into "
   "0, but it also shifts every row whose maximum is below 0 by 0 instead of its maximum: "
   "a row of very negative scores underflows",
   "replace only a maximum of -inf by 0 (torch.where on isneginf), and subtract every "
   "other row's own maximum",
   fns=_fns(*(lambda x, d, g=g: (lambda e: e / g(_sum(e, d)))(
       np.exp(x - np.maximum(x.max(axis=d, keepdims=True), 0)))
       for g in (_guarded, lambda t: t))))
_m("guard_on_any_inf", "softmax", "rows with a single -inf set to zeros",
   "the guard for an all -inf row tests whether a row has any -inf (.any(), or isinf on "
   "one entry), so every row with one masked key gets zeros instead of its softmax",
   "give zeros only to a row whose entries are all -inf (.all() along dim), and the "
   "softmax to every other row",
   fns=_fns(lambda x, d: np.where(np.isneginf(x).any(axis=d, keepdims=True), 0.0,
                                   _plain(x, d))))
_m("epsilon_in_sum", "softmax", "a small number added to the row sums",
   "dividing by sum + epsilon instead of the sum leaves every row summing to a little less "
   "than 1; the division it was meant to protect needs a guard only where a row's sum is 0",
   "divide by the plain sum along dim, and replace only a sum of 0 (an all -inf row) by 1",
   fns=_fns(*(lambda x, d, eps=eps: (lambda e: e / (_sum(e, d) + eps))(_exp_shift(x, d))
              for eps in (1e-2, 1e-3, 1e-4))))
_m("ignores_dim", "softmax", "the softmax ignores its dim argument",
   "it normalises over a fixed axis whatever dim it is given",
   "pass the function's dim to every reduction (the maximum and the sum), not a fixed "
   "axis",
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
   "take the maximum and the sum over the same axis: the function's dim",
   fns=_fns(lambda x, d: _max_sum(x, _other_axis(x, d), d),
            lambda x, d: _max_sum(x, d, _other_axis(x, d)),
            lambda x, d: _max_sum(x, -1, d), lambda x, d: _max_sum(x, d, -1),
            lambda x, d: _max_sum(x, 0, d)))
_m("whole_tensor_softmax", "softmax", "normalised over the whole tensor",
   "the sum runs over every entry, not along dim: all the weights together sum to 1, "
   "each row far less",
   "sum along dim only, keeping that dimension, not over the whole tensor",
   fns=_fns(lambda x, d: np.exp(x - x.max()) / np.exp(x - x.max()).sum(),
            lambda x, d: _exp_shift(x, d) / _exp_shift(x, d).sum()))
_m("exp_without_normalising", "softmax", "exp without normalising",
   "the weights equal exp(scores) (maybe shifted by the row max) but rows do not sum to 1",
   "divide each row of exponentials by that row's own sum along dim",
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
   "for a query whose keys are all masked, every exp is 0: -inf - (-inf), 0 / 0, -inf × 0 "
   "and log(0) give NaN or inf there (so multiplying -inf by 0 does not clear it). Such a "
   "query attends to nothing: its weights are zeros",
   "guard where such a row breaks: a maximum of -inf (use 0) and a sum of 0 (use 1), or "
   "what plays their part in your code",
   fns=_fns(_unguarded), cost=HALF)
_m("finite_mask_value", "softmax", "an all -inf row gets equal weights instead of zeros",
   "a row that is entirely -inf (every key masked) gets the uniform weights 1/n: -inf was "
   "replaced by a finite number such as -1e9, or that row's NaN by equal weights (the two "
   "give the same numbers)",
   "give such a row zeros: keep -inf as it is, and take 0 as that row's max and 1 as its "
   "sum (torch.where)",
   fns=_fns(lambda x, d: _plain(np.where(np.isinf(x), np.float32(-1e9), x), d)), cost=HALF)
_m("epsilon_in_exps", "softmax", "a small number added to every exponential",
   "adding a small epsilon to each exp(...) gives every masked key (-inf) that epsilon as "
   "its weight, and an all -inf row equal weights 1/n instead of zeros; the division it "
   "was meant to protect needs a guard only where a whole row is masked",
   "add nothing to the exponentials: guard only the sum, with 1 where a row's sum is 0",
   fns=_fns(*(lambda x, d, eps=eps: (lambda e: e / _sum(e, d))(
       np.exp(x - np.where(np.isneginf(x.max(axis=d, keepdims=True)), 0,
                           x.max(axis=d, keepdims=True))) + eps)
       for eps in (1e-5, 1e-6, 1e-7, 1e-8, 1e-9, 1e-10, 1e-12))),
   cost=HALF)  # (only the all -inf row is off: that half of the function's point)
_m("softmax_wrong_axis", "attention_weights", "softmax over the wrong axis",
   "the softmax ran over the queries (dim=1/-2) or the batch axis (dim=0) instead of "
   "the keys: each query's weights over the keys must sum to 1",
   "normalise over the last axis (the keys): check the dim you pass, and the axis each "
   "reduction inside your softmax uses",
   reproduce=lambda inp: [_softmax(inp["attention_scores"], -2),
                          _softmax(inp["attention_scores"], 0)])
_m("weights_transposed_in_cell6", "attention_weights", "the weights are transposed",
   "the weights equal softmax(scores) transposed: rows are keys, columns queries",
   "keep your softmax's result as it is, without .transpose or .T: rows are queries",
   reproduce=lambda inp: _swap(_softmax(inp["attention_scores"])),
   shows="softmax(scores)ᵀ")
_m("scaling_after_softmax", "attention_weights", "scaled after the softmax",
   "the weights equal softmax(scores)/√d_k, so rows sum to 1/8, not 1",
   "scale the scores in Cell 5, before the softmax; the weights themselves are not scaled",
   reproduce=lambda inp: _softmax(inp["attention_scores"]) / SQRT_DK)
_m("scores_scaled_again", "attention_weights", "the scores scaled again in Cell 6",
   "the weights equal softmax(scores/√d_k): the scores from Cell 5 are already scaled, "
   "dividing again makes the weights too flat",
   "apply the softmax to attention_scores as they are",
   reproduce=lambda inp: _softmax(inp["attention_scores"] / SQRT_DK),
   shows="softmax(attention_scores / 8)")
_m("unscaled_scores_used", "attention_weights", "the unscaled product used in Cell 6",
   "the weights equal softmax(Q Kᵀ): the product was recomputed without the 1/√d_k "
   "from Cell 5",
   "apply the softmax to attention_scores from Cell 5",
   reproduce=lambda inp: _softmax(inp["attention_scores"] * SQRT_DK),
   shows="softmax(Q Kᵀ), without 1/√d_k")
_m("softmax_not_applied", "attention_weights", "the softmax was not applied",
   "the weights equal the scores unchanged",
   "apply your softmax to the scores, along the keys (the last axis)",
   reproduce=lambda inp: inp["attention_scores"], shows="attention_scores unchanged")

# Cell 7 — values.
_m("weights_transposed", "attended_values", "the weights are transposed in the aggregation",
   "the output equals attention_weightsᵀ @ value: each output row mixes values with "
   "a column of weights instead of its own row",
   "make output row i mix the values with row i of the weights: check each transpose, and "
   "which index your einsum or loop sums over",
   reproduce=lambda inp: _swap(inp["attention_weights"]) @ inp["value"],
   shows="attention_weightsᵀ @ value")
_m("scores_instead_of_weights", "attended_values",
   "the scores were used instead of the weights",
   "the output equals attention_scores @ value: the softmax output was skipped",
   "use attention_weights, the softmax output of Cell 6, as the left operand of the product",
   reproduce=lambda inp: inp["attention_scores"] @ inp["value"],
   shows="attention_scores @ value")
_m("query_instead_of_value", "attended_values", "the query was used instead of the value",
   "the output equals attention_weights @ query",
   "mix the value vectors (Cell 4's v_proj output) as the right operand, not the query",
   reproduce=lambda inp: inp["attention_weights"] @ inp["query"],
   shows="attention_weights @ query")
_m("key_instead_of_value", "attended_values", "the key was used instead of the value",
   "the output equals attention_weights @ key",
   "mix the value vectors (Cell 4's v_proj output) as the right operand, not the key",
   reproduce=lambda inp: inp["attention_weights"] @ inp["key"],
   shows="attention_weights @ key")
_m("embeddings_instead_of_value", "attended_values", "the embeddings x used as the values",
   "the output equals attention_weights @ x: the values are v_proj(x), not x",
   "mix the value vectors Cell 4 made with v_proj, not the embeddings x",
   reproduce=lambda inp: inp["attention_weights"] @ inp["x"],
   shows="attention_weights @ x")
_m("values_not_weighted", "attended_values", "each output is its own row of value",
   "the output equals value itself: the weights were never applied, or each query's "
   "weights multiply the query's own value row where the key's belongs (a weights row "
   "sums to 1, so that gives the row back)",
   "make output i mix every row of value, row j weighted by query i's weight for key j",
   reproduce=lambda inp: inp["value"],
   shows="value itself")
_m("output_scaled", "attended_values", "the output was scaled by 1/√d_k",
   "the output is 1/8 of the weighted sum of the values: the scaling belongs to the "
   "scores (Cell 5) only",
   "drop the division: the output is the weighted sum of the values and nothing more",
   factor=1 / math.sqrt(D_K))
_m("mean_instead_of_sum", "attended_values", "a mean over the keys instead of a sum",
   "the output is 1/6 of the weighted sum of the values: they were averaged (.mean) over "
   "the 6 keys; the weights already sum to 1, so add them up",
   "add the weighted values up over the keys: a sum, not a mean",
   factor=1 / 6)
_m("values_first", "attended_values", "the values on the left of the product",
   "the output has shape [1, 64, 6]: value was transposed and put first (Vᵀ Wᵀ or Vᵀ W)",
   "put the weights first and keep value as it is: [1, 6, 6] times [1, 6, 64] gives [1, 6, 64]",
   reproduce=lambda inp: [_swap(inp["value"]) @ _swap(inp["attention_weights"]),
                          _swap(inp["value"]) @ inp["attention_weights"]],
   shows="valueᵀ @ attention_weightsᵀ, shape [1, 64, 6]")

# Any step: facts, shapes, dtypes and errors.
_m("runs_course_code", "any", "the cell runs the course's own code for its result",
   "the cell calls a function that ships with the course (its reference, its library), "
   "other than the helpers the set-up gives you: the result is not your code's",
   "compute it in this cell with tensor operations; the course's code is only for checking",
   kind="course_code")
_m("extra_axis", "any", "an axis of size 1 too many",
   "the numbers are right, but the result has an extra axis of size 1 (an unsqueeze, a "
   "None index or a view that adds one, perhaps to make up for an earlier cell)",
   "drop the operation that adds the axis: give the result the shape the task states",
   kind="extra_axis")
_m("numbers_rearranged", "any", "the right numbers in the wrong places",
   "the result holds exactly the formula's numbers, but in other places: a stack, cat, "
   "view or reshape put them in another order (a split into parts and back that does not "
   "undo itself, for example)",
   "compute it in the formula's layout: drop each reshape, view, transpose or stack that "
   "reorders it, or check the axis it works on",
   kind="behaviour")
_m("lost_batch_dimension", "any", "the batch dimension was lost",
   "the values are right but the leading batch axis of size 1 is gone "
   "(a .squeeze(), [0] or 2-D operation)",
   "keep the shape [1, ...]: {example}",
   examples={"attention_scores": "use key.transpose(-2, -1), not .T or [0]",
             "any": "use batched operations (@, .transpose(-2, -1), dim=-1), not .T, [0] "
                    "or .squeeze()"},
   kind="lost_batch", cost=HALF)
_m("wrong_dtype", "any", "the dtype was changed in this cell",
   "the values are right but this cell changed the dtype of its inputs (for example "
   ".double(), NumPy float64, or torch.tensor(..., dtype=torch.float64))",
   "keep the dtype of the tensors you start from (float32 here): drop the conversion",
   kind="dtype", cost=HALF)
_m("left_torch", "any", "the result was computed outside torch",
   "the values are right, but the tensor came back from outside torch (NumPy, or numbers "
   "rebuilt into a new tensor): its dtype changed, and autograd cannot follow it back to "
   "this cell's inputs",
   "compute it with torch operations on this cell's input tensors, with no .numpy() or "
   ".detach() round trip", kind="left_torch", cost=1.0)
_m("not_a_tensor", "any", "a NumPy array instead of a torch tensor",
   "the values are right but the result is a NumPy array: the lesson works in torch "
   "(and autograd cannot follow a NumPy array)",
   "stay in torch: no .numpy(); use torch operations (torch.exp, @, .transpose)",
   kind="not_a_tensor", cost=HALF)
_m("imprecise", "any", "close, but not to float32 precision",
   "the values agree to about 4 digits but not to float32 precision: {example}",
   "{example}", kind="imprecise", cost=HALF, strict_only=True,
   examples={"any": "find the step that changes the last digits (a rounded constant, a "
                    "lower precision) and keep every step in float32",
             "attention_scores": "use math.sqrt(d_k), not a rounded √d_k, and keep the "
                                 "tensors in float32",
             "attention_weights": "find what in your softmax changes the last digits (a "
                                  "small number added to the sums or the exponentials, a "
                                  "lower precision) and leave it out"},
   causes={"any": "a rounded constant or a lower-precision step",
           "attention_scores": "a rounded constant (such as 7.99 for √64) or a "
                               "lower-precision step",
           "attention_weights": "a small number added in the softmax (to the row sums or the "
                                "exponentials), or a lower-precision step"})
_m("nan_or_inf", "any", "NaN or inf in the result",
   "an overflow (exp of a large number) or a division by zero",
   "{example}",
   examples={"softmax": "look for torch.exp without max-subtraction or a division by a sum "
                        "that can be 0",
             "attention_weights": "look for torch.exp without max-subtraction or a division "
                                  "by a sum that can be 0",
             "any": "look for a division by zero (or by a number that is 0 here) and for an "
                    "exp of a large number"},
   kind="nan")
_m("constant_output", "any", "every entry is the same number",
   "the tensor is constant (for example all zeros or torch.ones): it does not depend on "
   "the inputs, and a constant gives the same result for every formula",
   "compute it from the tensors of the cells before, following the formula above",
   kind="constant")
_m("function_not_called", "any", "the name holds a function, not its result",
   "a function was assigned without calling it (no parentheses), so the name holds the "
   "function itself",
   "call it with its inputs: {example}",
   examples={"projections": "a layer is called like a function, on the tensor it "
                            "transforms",
             "attention_weights": "your function is called on the scores, with the axis "
                                  "to normalise",
             "any": "add the parentheses and the inputs after the function's name"},
   kind="function")
_m("bad_type", "any", "not a tensor of real numbers",
   "the result is not a dense torch tensor of real floating-point numbers (a list, a "
   "string, a complex, sparse or integer tensor, ...)",
   "keep the result of the torch operations as it is: a float tensor (no .tolist(), str(), "
   ".to_sparse() or complex numbers)", kind="bad_type")
_m("bad_output", "softmax", "the softmax returns the wrong kind of result",
   "for a float tensor x it must return a real, dense float tensor of x's shape",
   "return a torch tensor shaped like x (keep the reduced dimension in the maximum and "
   "the sum)",
   kind="bad_output")
_m("softmax_axes_moved", "softmax", "the softmax returns its axes in another order",
   "the function moved `dim` to another place to work there (a transpose or movedim) and "
   "returned the result without moving it back",
   "undo the move before you return, so the result has x's shape and axis order",
   kind="axes_moved")
_m("axes_permuted", "any", "the axes are in the wrong order",
   "the values are right but the axes are permuted: `.T` on a 3-D tensor reverses every "
   "axis ([1, 6, 64] becomes [64, 6, 1]), and a permute or transpose of the wrong axes "
   "reorders them",
   "{example}",
   examples={"projections": "give each tensor the shape [1, 6, 64] (batch, token, "
                            "feature): look at the axis you stack, join, transpose or permute "
                            "along",
             "attention_scores": "keep the result's axes as the formula gives them; to swap "
                                 "the last two axes of the key only, use .transpose(-2, -1)",
             "any": "keep the result's axes as the formula gives them: remove the transpose "
                    "or permute of the result"},
   kind="permuted")
_m("constant_factor", "any", "a factor that is a power of a constant of the lesson",
   "the result is the formula's times a power of one of the lesson's constants: a scaling "
   "by the wrong power, or one applied where the formula has none (to an operand, or twice)",
   "compare each factor in your code, an operand's too, with the formula's",
   kind="constant_factor", said_first=True)
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
   "pass x to the layer as it is (the transpose belongs to the key, in Cell 5)",
   error=_MATMUL_ERROR,
   line=r"_proj\(\s*x\s*\.\s*(transpose\(|mT\b|permute\(|swapaxes\()",
   example=("RuntimeError: mat1 and mat2 shapes cannot be multiplied (64x6 and 64x64)",
            "query = q_proj(x.transpose(-2, -1))"))
_m("dot_T_on_3d", "any", ".T on a tensor of more than two axes",
   "`.T` reverses every axis, so the batch axis moves last ([1, 6, 64] becomes [64, 6, 1]; "
   "a 4-D tensor's order is reversed too) and the product fails or mixes the wrong axes",
   "{example}",
   examples={"attention_scores": "swap only the last two axes: key.transpose(-2, -1) (or "
                                 "key.mT)",
             "attended_values": "the formula multiplies the weights as they are; where a "
                                "transpose is needed, swap only the last two axes",
             "any": "swap only the last two axes: t.transpose(-2, -1) (or t.mT) for a tensor "
                    "t"},
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
   "swap the two operands of the product: the weights go first, as the formula writes them",
   error=_MATMUL_ERROR,
   line=r"\bvalue(\.\w+\(\))?\s*@\s*attention_weights\b|"
        r"(matmul|bmm)\(\s*value\s*,\s*attention_weights\b",
   example=("RuntimeError: Expected size for first two dimensions of batch2 tensor to be: "
            "[1, 64] but got: [1, 6].", "attended_values = value @ attention_weights"))
_m("operands_swapped", "any", "the product's two operands are the wrong way round",
   "in A @ B the last axis of A must equal the second-to-last of B; here the shapes fit "
   "only the other way round: a matrix product is not commutative, and the formula says "
   "which factor comes first",
   "read the formula's product from left to right and put its two factors in that order",
   kind="swapped",  # (found from the line's operand shapes: src/checks/shapes.py)
   example=("RuntimeError: Expected size for first two dimensions of batch2 tensor to be: "
            "[1, 64] but got: [1, 6].",
            "attended_values = torch.matmul(value.clone(), attention_weights)"))
_m("cut_from_product", "any", "a part cut out of a product of another shape",
   "the line's product does not have the result's shape, and indexing cut a part of it to "
   "fit: a wrong operand order or transpose gives a bigger (or smaller) product, and no "
   "part of it holds the formula's numbers",
   "make the product itself have the result's shape, with no slicing: check which operand "
   "is transposed and the operands' order", kind="behaviour")
_m("operand_transposed", "any", "an operand of the product is transposed",
   "the line transposes a tensor that the formula uses as it is, so the product's inner "
   "sizes no longer match; without that transpose the product fits and has the result's "
   "shape",
   "use that operand as the formula writes it, without the transpose (the formula "
   "transposes only the keys, in the scores)",
   kind="transposed",  # (found from the line's operand shapes: src/checks/shapes.py)
   example=("RuntimeError: Expected size for first two dimensions of batch2 tensor to be: "
            "[1, 6] but got: [1, 64].",
            "attended_values = attention_weights @ value.transpose(-2, -1)"))
_m("matmul_shapes", "any", "the shapes of a matrix product do not fit",
   "in A @ B the last axis of A must equal the second-to-last of B ({example})",
   "{example}",
   causes={"attention_scores": "[1, 6, 64] @ [1, 64, 6] works; [1, 6, 64] @ [1, 6, 64] "
                               "does not",
           "attended_values": "[1, 6, 6] @ [1, 6, 64] works; [1, 6, 6] @ [1, 64, 6] does not",
           "any": "[1, 6, 64] @ [1, 64, 6] works; [1, 6, 64] @ [1, 6, 64] does not"},
   examples={"attention_scores": "print the shapes of both operands: the key's last two "
                                 "axes (token, feature) are the ones to swap, never the batch "
                                 "axis",
             "any": "print the shapes of both operands: the inner sizes must match; check "
                    "which axes the formula swaps (a transpose) and where it has none"},
   error=_MATMUL_ERROR,
   example=("RuntimeError: Expected size for first two dimensions of batch2 tensor to be: "
            "[6, 64] but got: [6, 1].", "attention_scores = query @ key.transpose(0, 1)"))
_m("max_returns_tuple", "any", "torch.max(dim=...) returns values and indices",
   "x.max(dim=...) returns a (values, indices) pair, not a tensor",
   "use the values of the pair (.values), or amax, which returns the maxima alone",
   error=r"return_types\.max|return_types",
   example=("TypeError: unsupported operand type(s) for -: 'Tensor' and "
            "'torch.return_types.max'", "exps = torch.exp(x - x_max)"))
_m("dot_t_on_3d", "any", ".t() on a tensor of more than two axes",
   "`.t()` (like torch.mm) takes 2-D matrices only; the lesson's tensors carry a batch axis "
   "in front, so it raises on them",
   "{example}",
   examples={"attention_scores": "swap only the last two axes: key.transpose(-2, -1) (or "
                                 "key.mT), and multiply batches with @ or torch.matmul",
             "any": "swap only the last two axes: t.transpose(-2, -1) (or t.mT) for a tensor "
                    "t, and multiply batches with @ or torch.matmul"},
   error=r"t\(\) expects a tensor with <= 2 dimensions",
   example=("RuntimeError: t() expects a tensor with <= 2 dimensions, but self is 3D",
            "attention_scores = torch.mm(query, key.t()) / math.sqrt(d_k)"))
_m("unexpected_keyword", "any", "an argument torch does not take",
   "the call passes a keyword argument that this torch function does not have: "
   "`transpose_b`, `axis` or `keepdims` are other libraries' names",
   "pass only the arguments the torch function takes (help() on it lists them); where an "
   "operand must be transposed, transpose it yourself",
   error=r"got an unexpected keyword argument '(?!dim')",
   example=("TypeError: matmul() got an unexpected keyword argument 'transpose_b'",
            "attention_scores = torch.matmul(query, key, transpose_b=True) / math.sqrt(d_k)"))
_m("dim_not_accepted", "any", "the function does not take dim",
   "a function was called with dim=... but has no dim parameter (or names it "
   "differently)",
   "{example}",
   examples={"softmax": "define it as def softmax(x, dim=-1): and use dim in its reductions",
             "attention_weights": "define it as def softmax(x, dim=-1): and use dim in its "
                                  "reductions",
             "any": "give dim=... only to a function that has a dim parameter, or add one "
                    "to the function you wrote"},
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
_m("result_not_assigned", "any", "the result was computed but never assigned",
   "a line computes the result on its own and keeps nothing of it: the name the task asks "
   "for stays None",
   "assign the result of that line to the name the task gives",
   kind="discarded")
_m("returned_none", "any", "a function returned None",
   "{example}",
   "end your function with `return` and the result{example}, then run this cell again",
   examples={"softmax": " (the weights it computed, divided by their sums)",
             "attention_weights": " (the weights it computed, divided by their sums)",
             "any": ""},
   causes={"softmax": "a def whose end is reached without `return` gives None: the "
                      "function computed its result, then dropped it",
           "any": "every input of this cell is there, yet an operation got None: a "
                  "function you call returns None (a def without `return`), or a name "
                  "was set to None"},
   kind="returned_none")
_m("detached_output", "any", "the result is cut off from the autograd graph",
   "the values are right, but the tensor no longer depends on this cell's inputs "
   "(.detach(), torch.no_grad(), .data, .item() or float(), NumPy, or rebuilt from "
   "numbers): no gradient could flow back through it",
   "compute it from this cell's inputs with tensor operations alone: no torch.tensor(...), "
   "NumPy, .item(), .detach() or no_grad",
   kind="detached_output", cost=HALF, strict_only=True)
_m("recomputed_output", "any", "the result is recomputed from other tensors",
   "the values are right, but autograd shows the tensor does not depend on an input the "
   "task names: it was computed again from earlier tensors (or a built-in that redoes "
   "the earlier steps) instead of from this cell's inputs",
   "compute it from the inputs this cell's task names{example}, not from tensors further "
   "back",
   examples={"attention_scores": " (query and key)",
             "attention_weights": " (attention_scores, through your softmax)",
             "attended_values": " (attention_weights and value)", "any": ""},
   kind="recomputed", cost=HALF, strict_only=True)
_m("backward_fails", "any", "autograd cannot go back through the result",
   "computing its gradient raised an error: an in-place operation (exp_(), /=, "
   "masked_fill_) overwrote a tensor autograd had saved for the backward pass, so a model "
   "could not learn through it",
   "use operations that make new tensors: {example}",
   examples={"softmax": "e = torch.exp(x - x_max), then e / e.sum(...)",
             "attention_weights": "e = torch.exp(x - x_max), then e / e.sum(...)",
             "any": "y = x / n, not x /= n"},
   kind="backward", cost=HALF, strict_only=True)
_m("right_only_here", "any", "right on the lesson's numbers only",
   "the step is run a second time on other inputs of the same shapes, and there the code "
   "does not give the formula's result: something in it fits this example only (a clip "
   "or threshold, a number or tensor typed in from it)",
   "compute the result from the cell's inputs with the formula alone, with no constant "
   "taken from this example", kind="variant")
# Behaviour read off a tensor no entry above reproduces (values and the replay's
# gradients), tried in this order.
_m("rounded", "any", "the result was rounded",
   "every entry is the right one rounded (round, floor, // or a cast to int): the digits "
   "that were cut off are part of the answer",
   "drop the rounding: use / (not //) and keep every digit of the result", kind="behaviour")
_m("weights_masked", "attention_weights", "some weights were masked to 0",
   "keys whose scores are finite got weight 0 and the rest were renormalised: a causal or "
   "padding mask, which this lesson's sentence does not use",
   "apply the softmax to attention_scores as they are, without a mask", kind="behaviour")
_m("weights_temperature", "attention_weights", "the scores were rescaled before the softmax",
   "the weights are the softmax of the scores times a number: a temperature, or a second "
   "scaling (Cell 5 already divided by √d_k)",
   "apply your softmax to attention_scores as they are, with no factor inside or outside",
   kind="behaviour")
_m("wrong_operand", "any", "another tensor in a place of the formula",
   "the result is exactly this cell's formula with another tensor of the lesson (or the "
   "same one transposed) in one or two of its places",
   "check the tensor in each place of the formula against the task: the names it gives, "
   "in its order, as they are",
   kind="behaviour", said_first=True)
_m("reduction_changed", "any", "another reduction in the formula",
   "the formula multiplies its operands and adds the products up over one axis; this "
   "result reduces them another way (a mean, a max or a min) or over another axis",
   "find the axis your code adds up over and how it combines the products: the shapes in "
   "the theory above say which axis disappears, and a sum is what removes it",
   kind="behaviour", said_first=True)
_m("extra_reduction", "any", "an axis the formula keeps was reduced",
   "the result was added up (or averaged) over an axis the formula keeps: one entry "
   "where it has one per position",
   "keep one result per position along that axis: remove the sum or mean that runs over it",
   kind="behaviour", said_first=True)
_m("distance_for_product", "any", "a distance where the formula takes dot products",
   "the result compares the rows by their distance (cdist, or a norm of their difference) "
   "where the formula multiplies them entry by entry and adds the products up",
   "take the dot product of the two rows, as the formula writes it: a distance measures "
   "something else", kind="behaviour", said_first=True)
_m("hard_selection", "any", "a hard choice in place of the weights",
   "one operand was replaced by a hard choice (an argmax: 1 at its largest entry, 0 "
   "elsewhere), so each result takes a single row where the formula blends them all",
   "use the operand's numbers as they are: each one weighs its row, however small",
   kind="behaviour", said_first=True)
_m("dropout_applied", "any", "dropout applied to the result",
   "dropout (F.dropout, nn.Dropout; F.dropout is on unless training=False) sets entries to "
   "0 at random and multiplies the others by 1/(1 - p); the formula has no dropout",
   "remove the dropout: this step is the formula alone, the same numbers on every run",
   kind="behaviour")
_m("low_precision", "any", "computed in a lower precision",
   "the operands were rounded to float16 or bfloat16, which keep about 3 digits, so the "
   "result is off in its fourth digit, more on larger numbers",
   "compute in the dtype the tensors arrive in (float32 here): no conversion to a half "
   "precision",
   kind="behaviour", said_first=True)
_m("from_wrong_function", "any", "made with your function, which is wrong",
   "this result is what your function gives, and the function's own check (above) finds "
   "it wrong: the mistake is in the function, not in the line that applies it",
   "fix the function first (its check names the mistake), then run this cell again",
   kind="behaviour")
_m("range_off_by_one", "any", "a loop or an index one off",
   "the result is the formula's with a slice left at 0 (a range one short), shifted by "
   "one (an index one off), adding up the rows before it (an accumulator not reset), or "
   "only a sum's last term (a total overwritten)",
   "check the bounds of your loops, the indices you use, and where each running total "
   "starts and how it grows: every position computed, each from its own row",
   kind="behaviour", said_first=True)
_m("integer_result", "any", "a tensor of integers",
   "the result's dtype is an integer one (a tensor made with dtype=int or from whole "
   "numbers, then filled in): it cannot hold the fractions of the result",
   "make every tensor you fill in a float one, like the tensors you start from",
   kind="integer")
_m("diagonal_only", "any", "only the diagonal of the result",
   "each query was paired only with its own key (an element-wise product summed, or one "
   "index where two are needed): the formula pairs every query with every key",
   "pair every query with every key: the result has one entry for each pair of a query and "
   "a key",
   kind="behaviour")
_m("extra_term", "any", "a tensor was added to the result",
   "the result is the right one plus another tensor (a residual connection, or a leftover "
   "term): this step computes the formula alone",
   "remove the extra term and compute exactly the formula of this cell", kind="behaviour")
_m("extra_nonlinearity", "any", "a nonlinearity was applied",
   "the result has no negative entries while the right one has: a ReLU, abs or clamp was "
   "applied, which the formula of this cell does not have",
   "drop the nonlinearity: this cell is a plain linear formula", kind="behaviour")
_m("rows_rescaled", "any", "the rows were normalised",
   "every row was rescaled on its own (to length 1, sum 1, or mean 0 and spread 1): this "
   "cell's formula does not normalise its result",
   "remove the normalisation: only Cell 6's softmax normalises, and only the weights",
   kind="behaviour")
_m("shifted", "any", "a constant was added to the result",
   "every entry is the right one times a number plus one constant (label smoothing, an "
   "offset or a bias): this cell's formula adds nothing",
   "remove the constant and compute exactly the formula of this cell", kind="behaviour")
_m("vectors_normalised", "attention_scores", "the query and key vectors were normalised",
   "each score is the right one divided by a number per query and a number per key: the "
   "vectors were rescaled (to length 1 for a cosine similarity) before the product",
   "use query and key as Cell 4 made them, without rescaling either before the product",
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
   "keep only the product of the weights and the values: remove what you applied to them or to "
   "the result",
   kind="behaviour")
_m("values_not_mixed", "attended_values", "each token keeps its own value: nothing is mixed",
   "every output row is that token's own value row times a number: the sum ran over the "
   "queries instead of the keys, or the weights were reduced to one number per token",
   "mix all value rows with each query's weights: a matrix product of the weights and the "
   "values sums over the keys", kind="behaviour")
_m("weights_changed", "attended_values", "the weights were changed before the product",
   "the result mixes the rows of value, but not with attention_weights as Cell 6 made them "
   "(a second softmax, a recomputation, a transpose or a rescaling)",
   "use attention_weights exactly as Cell 6 made them, with no second softmax, transpose or "
   "rescaling",
   kind="behaviour")
_m("bias_misused", "projections", "the bias is not added exactly once",
   "the gradient with respect to the layer's bias shows it added with another factor "
   "(subtracted, scaled or repeated)",
   "call the layer itself: it adds its bias once", kind="behaviour")
_m("mixed_layer_parameters", "projections", "parameters of two layers mixed",
   "the tensor uses another layer's bias or weight beside its own layer's: written out "
   "by hand, one parameter came from the wrong layer",
   "take every parameter from the tensor's own layer, or better, call that layer on x",
   kind="behaviour")
_m("projection_of_projection", "projections", "a layer applied to another projection",
   "the tensor goes through two layers: its layer was applied to another projection (for "
   "example to the query) instead of to the embeddings x",
   "apply each of the three layers to the embeddings x themselves", kind="behaviour")
_m("layers_mixed", "projections", "several layers' outputs mixed in one tensor",
   "the tensor depends on the weights and biases of other layers beside its own, yet it is "
   "not one layer applied to another's output: a fused result split the wrong way (every "
   "third feature instead of blocks), or outputs added or stacked together",
   "make each tensor from its own layer's output alone (a fused result splits into "
   "consecutive blocks, one per layer)",
   kind="behaviour")
_m("layer_input_not_x", "projections", "the layer was applied to a changed x",
   "the gradient with respect to the layer's weight shows its input was not x itself (x "
   "normalised, with positions added, or otherwise changed first)",
   "pass the embeddings to the layer as they are", kind="behaviour")
_m("after_the_layer", "projections", "the projection was changed after the layer",
   "the layer got x and its bias once, but its output was then changed (a nonlinearity, "
   "a normalisation, another operation)",
   "keep the layer's output as it is", kind="behaviour")
_m("misspelled_name", "any", "the result is stored under another name",
   "the check reads the lesson's name; a name spelled otherwise is a new variable, so "
   "the lesson's name still holds None",
   "assign the result to the lesson's name exactly", kind="misspelled")
_m("undefined_name", "any", "the cell uses a name it does not define",
   "each step cell is judged on its own: it sees the set-up (Cells 2-3) and the tensors "
   "of the steps before it, not names made in other cells (or the name has a typo)",
   "{example}",
   examples={"projections": "read only the set-up's names (x, the three layers, d_k), or "
                            "define the name in this cell",
             "attention_scores": "read the earlier steps' tensors by the names the task gives "
                                 "them (query, key), or define the name in this cell",
             "attention_weights": "read attention_scores by that name, and define in this "
                                  "cell any other name it uses",
             "softmax": "define every name the function uses inside it or in this cell",
             "attended_values": "read the earlier steps' tensors by the names the task gives "
                                "them (attention_weights, value), or define the name in this "
                                "cell",
             "any": "define that name in this cell, or use the names the task gives"},
   error=r"NameError: name '\w+' is not defined",
   example=("NameError: name 'scale' is not defined",
            "attention_scores = query @ key.transpose(-2, -1) * scale"))
_m("changes_input", "any", "the cell changes an input in place",
   "an in-place operation (x /= ..., .mul_(), .transpose_(), .data = ...) overwrote a "
   "tensor this cell was given, so every later use of it sees other numbers or shapes",
   "leave this cell's inputs as they are: drop changes the formula lacks; for a changed "
   "copy, make a new tensor (y = x / n, not x /= n)",
   kind="mutated_input",
   cost=HALF)
_m("rebinds_input", "any", "a name from an earlier cell assigned anew",
   "the cell assigns a new tensor to a name an earlier cell made (t = t.transpose(...) for "
   "an input t): "
   "the cells after it see another tensor under that name (and the cell itself may give "
   "another result when it is run again)",
   "keep the names of earlier cells as they are: give what you make from them a name of "
   "its own",
   kind="rebound", cost=HALF)
_m("softmax_no_default_dim", "softmax", "dim has no default",
   "the task writes the signature softmax(x, dim=-1): called as softmax(x), a function "
   "whose dim has no default raises a TypeError",
   "give dim its default in the def line, as the task writes it",
   kind="no_default", cost=HALF)
_m("softmax_default_not_last", "softmax", "dim's default is not the last axis",
   "the task writes the signature softmax(x, dim=-1): called as softmax(x), your function "
   "normalises over another axis, so code that relies on the default gets other weights",
   "give dim the default the task writes in the def line",
   kind="wrong_default", cost=HALF)
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
_m("ignores_its_input", "softmax", "the softmax ignores its own parameter",
   "it returns the same result whatever it is given: it computes from something else, "
   "such as the global attention_scores, instead of its parameter x",
   "use the function's own parameter (the name in its def line) in every line, not a "
   "name from outside the function", kind="behaviour")
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
   "subtract each row's maximum along dim (its dimension kept) before torch.exp, and "
   "clip or replace nothing", kind="behaviour")
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
   "exponentiate the shifted scores with torch.exp, then divide by their own sum along "
   "dim: nothing else",
   kind="behaviour")
_m("softmax_last_axis_only", "softmax", "the softmax works only along the last axis",
   "it is right whenever dim is the last axis, and raises or goes wrong for any other dim: "
   "a reduction lost its axis and it was put back at the end (unsqueeze(-1)), or the last "
   "axis is written into the code",
   "keep each reduction's own axis: take the maximum and the sum along dim with the "
   "dimension kept, never put back at the end", kind="behaviour")
_m("softmax_fixed_layout", "softmax", "the softmax works only on the lesson's layout",
   "it is right on 3-D inputs along their last axis, like the lesson's scores, and wrong "
   "on other shapes or other dims: its loops or indexing fix the axes (x.shape[0], "
   "x.shape[1], x[b, i]) instead of following dim",
   "make every step follow dim, on any number of axes: reduce with dim=dim and "
   "keepdim=True instead of looping over fixed axes", kind="behaviour")
_m("softmax_half_precision", "softmax", "the softmax computes in half precision",
   "the function rounds its work to float16 or bfloat16 (about 3 digits) and casts the "
   "result back, so every number it returns is a half-precision number, off in its "
   "fourth digit",
   "compute in the dtype x arrives in (float32 here): no .half() or conversion to a "
   "16-bit float", kind="behaviour")
_m("softmax_raises", "softmax", "the softmax raised an error",
   "calling your softmax on the input shown raised an exception",
   "call softmax on that input yourself and fix the line the error points to",
   kind="probe_error")
_m("stub_left", "any", "the cell still holds its stub",
   "the line raise NotImplementedError(...) is still in the cell, so it stops there",
   "delete the line raise NotImplementedError(...) and write your code in its place, then "
   "run the cell", error=r"NotImplementedError",
   example=("NotImplementedError: Your turn: replace this line with your code",
            "raise NotImplementedError(\"Your turn: replace this line with your code\")"))
_m("elementwise_product", "any", "* multiplies entry by entry, not as matrices",
   "the shapes do not broadcast because * pairs entries one by one; the formula is a "
   "matrix product, which sums over the shared axis",
   "use the matrix product @ (torch.matmul) as the formula says",
   error=r"must match the size of tensor", line=r"[^*]\*[^*=]",
   example=("RuntimeError: The size of tensor a (6) must match the size of tensor b (64) "
            "at non-singleton dimension 2", "attended_values = attention_weights * value"))
_m("no_gpu", "any", "the lesson runs on the CPU",
   "the course's machines (and the grader's) have no GPU: moving a tensor or a layer to "
   "'cuda' raises",
   "leave every tensor and layer on the device the set-up made it on: no .cuda() and no "
   ".to('cuda')",
   error=r"not compiled with CUDA|CUDA driver|no CUDA GPUs|CUDA is not available",
   example=("AssertionError: Torch not compiled with CUDA enabled", "x = x.to('cuda')"))
_m("parameter_called", "any", "a layer's weight called like a function",
   "a layer's weight (or bias) is a tensor, a Parameter, not a function: calling it raises; "
   "the layer itself is what can be called",
   "call the layer, or use its weight in a product as the formula above writes it",
   error=r"'Parameter' object is not callable",
   example=("TypeError: 'Parameter' object is not callable", "query = q_proj.weight(x)"))
_m("shapes_do_not_broadcast", "any", "two shapes that do not line up",
   "an elementwise operation (+, -, /, a comparison) or the batch axes of a product "
   "paired two tensors whose sizes differ on some axis: shapes are lined up from the last "
   "axis, and each pair of sizes must be equal or 1 (a sum without keepdim=True loses the "
   "axis it sums)",
   "print the shapes of the tensors this line combines and find the axis the error names",
   error=r"must match the size of tensor",
   example=("RuntimeError: The size of tensor a (6) must match the size of tensor b (8) at "
            "non-singleton dimension 2", "attention_weights = exps / exps.sum(dim=-1)"))
_m("view_not_contiguous", "any", "view after a transpose",
   "`.view` regroups the numbers in the order they are stored; after a transpose or "
   "permute they are no longer stored in the tensor's order, so view cannot regroup them",
   "regroup with the call torch's error message suggests, which copies the numbers when "
   "it must, or make the tensor contiguous first",
   error=r"view size is not compatible with input tensor's size and stride",
   example=("RuntimeError: view size is not compatible with input tensor's size and stride "
            "(at least one dimension spans across two contiguous subspaces). Use "
            ".reshape(...) instead.", "merged = attended_values.transpose(1, 2).view(1, 6, 64)"))
_m("sizes_do_not_multiply", "any", "a reshape whose sizes do not fit",
   "the sizes asked for do not multiply up to the axis (or the tensor) they regroup: "
   "every reshape keeps the number of entries",
   "print the tensor's shape and check which axis the new sizes split: their product "
   "must equal that axis's size",
   error=r"is invalid for input of size|don't multiply up to the size",
   example=("RuntimeError: shape '[1, 6, 8, 8]' is invalid for input of size 2304",
            "q = query.view(1, 6, 8, 8, 6)"))
_m("mm_on_batches", "any", "torch.mm on tensors with a batch axis",
   "torch.mm multiplies two 2-D matrices only; the lesson's tensors have a batch axis (and "
   "lesson 2's a head axis too), so it raises",
   "use a product that keeps the leading axes: @ (torch.matmul) works on the last two axes "
   "of each",
   error=r"self must be a matrix|must be a matrix",
   example=("RuntimeError: self must be a matrix",
            "attended_values = torch.mm(attention_weights, value)"))
_m("outputs_aliased", "any", "one tensor under several names",
   "a = b = ... binds one and the same tensor to every name: filling one fills them all, "
   "and all of them hold what was made or written last",
   "give each name a tensor of its own, made by its own formula (its own layer or its own "
   "buffer)",
   kind="aliased")
_m("tensor_called", "any", "a tensor called like a function",
   "a tensor holds numbers: calling it with parentheses raises; a layer can be called, the "
   "matrix of numbers it holds cannot",
   "multiply by the tensor with @ where the formula has a product",
   error=r"'Tensor' object is not callable",
   example=("TypeError: 'Tensor' object is not callable", "attended_values = value(x)"))
_m("mask_not_bool", "any", "masked_fill given a mask of numbers",
   "masked_fill takes a mask of True/False (a bool tensor): a mask of 0s and 1s raises",
   "give masked_fill a bool mask: the comparison or the bool tensor itself, not its float "
   "copy",
   error=r"only supports boolean masks|expected.*mask.*Bool|mask.*dtype torch.bool",
   example=("RuntimeError: masked_fill_ only supports boolean masks, but got mask with "
            "dtype float", "scores = scores.masked_fill(mask.float(), float('-inf'))"))
_m("cell_raised", "any", "the cell raised an error",
   "the cell stopped with an exception, so the tensor was not (re)computed",
   "fix the line the error points to and run the cell again", kind="cell_error")
_m("never_assigned", "any", "a name this step makes is never assigned",
   "no line of the cell binds that name, so it still holds None from the set-up, and the "
   "cell's own check of it fails",
   "assign every name the task lists for this cell, each from its own formula",
   kind="unassigned")
_m("not_computed", "any", "not computed yet",
   "the name still holds None from the set-up cell (or is not defined)",
   "write your code in the cell above and run it", kind="missing")

#: The catalogue: every mistake the checks can name, in the order they are tried.
MISTAKES: dict[str, Mistake] = {m.id: m for m in ENTRIES}
assert len(MISTAKES) == len(ENTRIES), "duplicate mistake ids"
