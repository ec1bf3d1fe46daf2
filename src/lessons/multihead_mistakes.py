"""Lesson 2's catalogue of common mistakes (multi-head and causal attention).

Its own entries, one per mistake of its steps, then the engine's general ones
("any": a lost batch axis, a dtype, an error ...) taken from lesson 1's catalogue,
where they are written once; the few whose words name lesson 1's cells or numbers
are said again here in this lesson's. Read by ``src/lessons/multihead.py``.

Shape legend: B = 1 batch, H = 8 heads, L = S = 6 tokens, d_k = 8, d_model = 64;
query, key, value [B, L, d_model]; q_heads, k_heads, v_heads, head_outputs
[B, H, L, d_k]; head_scores, head_weights [B, H, L, S]; attention_output
[B, L, d_model]; W_o [d_model, d_model].
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from src.checks.util import _softmax, _swap
from src.lessons.attention_mistakes import ENTRIES as _LESSON1_ENTRIES
from src.spec import Mistake

#: The lesson's sizes: each head's width d_k (its √d_k scales the scores).
N_HEADS, D_K, D_MODEL, LENGTH = 8, 8, 64, 6
SQRT_DK = math.sqrt(D_K)
#: The causal mask, PyTorch's convention: True where a query may attend (on and below the
#: diagonal). [L, S]
CAUSAL = np.tril(np.ones((LENGTH, LENGTH), dtype=bool))
HALF = 0.5

ENTRIES: list = []


def _m(id, step, title, cause, next_step, **kw):
    ENTRIES.append(Mistake(id, step, title, cause, next_step, **kw))


def split(t):
    """[B, L, d_model] -> [B, H, L, d_k]: head h takes features h*d_k ... h*d_k + d_k - 1."""
    return np.swapaxes(t.reshape(t.shape[0], LENGTH, N_HEADS, D_K), 1, 2)


def merge(h):
    """[B, H, L, d_k] -> [B, L, d_model], the inverse of :func:`split`."""
    return np.swapaxes(h, 1, 2).reshape(h.shape[0], LENGTH, D_MODEL)


def masked(s, keep=CAUSAL, fill=-np.inf):
    """Scores [..., L, S] with ``fill`` where ``keep`` is False."""
    return np.where(keep, s, fill)


#: The tensor each head tensor is split from.
SOURCE_OF = {"q_heads": "query", "k_heads": "key", "v_heads": "value"}


def _torch_softmax(x, axis):
    """torch.softmax's result: NaN for a slice that is all -inf (the set-up's gives 0)."""
    with np.errstate(all="ignore"):
        e = np.exp(x - x.max(axis=axis, keepdims=True))
        return e / e.sum(axis=axis, keepdims=True)


def _raw(inp):
    return inp["q_heads"] @ _swap(inp["k_heads"])


# Cell 4: split into heads.
_m("split_without_transpose", "split_heads", "the heads were cut off with a reshape alone",
   "a reshape or view to [1, 8, 6, 8] keeps the memory order, in which the 64 features "
   "of one token come together: each 'head' then holds pieces of several tokens",
   "split the features into (head, d_k) while the tokens keep their place, then move the "
   "head axis in front of the token axis",
   reproduce=lambda inp: inp[SOURCE_OF[inp["name"]]].reshape(1, N_HEADS, LENGTH, D_K),
   shows="the tensor reshaped to [1, 8, 6, 8] without moving the head axis")
_m("heads_not_moved", "split_heads", "the head axis was not moved before the tokens",
   "the features were split into 8 heads of 8, but the result is [1, 6, 8, 8] (batch, "
   "token, head, d_k): the head axis must come before the token axis, so that each head's "
   "[6, 8] matrix is one attention problem",
   "after splitting, swap the token and head axes, so the shape becomes [1, 8, 6, 8]",
   reproduce=lambda inp: inp[SOURCE_OF[inp["name"]]].reshape(1, LENGTH, N_HEADS, D_K),
   shows="[1, 6, 8, 8] (batch, token, head, d_k)")
_m("heads_interleaved", "split_heads", "each head takes every 8th feature",
   "head h got features h, h+8, h+16, ... instead of the block h*8 ... h*8+7: the 64 "
   "features viewed as [8, 8] in the other order (d_k first, then heads), or sliced with a "
   "step of 8",
   "make head h hold features 8h to 8h+7: view the features as (heads, d_k), then move "
   "only the heads' axis in front of the tokens, not the d_k one",
   reproduce=lambda inp: np.transpose(inp[SOURCE_OF[inp["name"]]].reshape(
       1, LENGTH, D_K, N_HEADS), (0, 3, 1, 2)),
   shows="heads made of every 8th feature")
_m("heads_rearranged", "split_heads", "the heads hold the right numbers in the wrong places",
   "every number of the heads comes from the tensor they split, but the reshapes and "
   "transposes put them elsewhere than the formula: head h must hold features 8h to "
   "8h+7 of every token, each token in its own row",
   "make each head's row hold one token's block of 8 features: check how your code picks "
   "them (its slices, or the order of its reshape and transpose steps)",
   kind="behaviour", said_first=True)

# Cell 5: per-head scaled scores with the causal mask.
_m("head_scores_not_scaled", "head_scores", "the scores are not scaled by 1/√d_k",
   "the product of each head's queries and keys was masked but not divided by √d_k",
   "divide by math.sqrt(d_k), where d_k = 8 is each head's width",
   reproduce=lambda inp: masked(_raw(inp)), shows="the masked product, not scaled")
_m("head_scores_by_8", "head_scores", "divided by 8, not by √8",
   "8 is d_k itself here (and √64, the square root of d_model; and q and k each divided "
   "by √d_k divide their product by d_k): each head's vectors have d_k = 8 entries, so "
   "the product is scaled once, by 1/√8 ≈ 0.354",
   "divide the product once by math.sqrt(d_k) with d_k = 8 (or math.sqrt(q_heads.shape[-1])), "
   "not by 8, math.sqrt(64) or math.sqrt(query.shape[-1])",
   reproduce=lambda inp: masked(_raw(inp) / D_K), shows="the masked product divided by 8")
_m("head_scores_by_d_model", "head_scores", "divided by d_model, 64",
   "64 is d_model, the width of the whole embedding; each head's scores are scaled by the "
   "head's own width: √d_k = √8",
   "divide by math.sqrt(d_k) with d_k = 8",
   reproduce=lambda inp: masked(_raw(inp) / D_MODEL), shows="the masked product divided by 64")
_m("head_scores_sqrt_precedence", "head_scores", "d_k ** 1/2 is not √d_k",
   "** binds tighter than /, so d_k ** 1/2 is (d_k ** 1) / 2 = 4, and s / d_k ** 1/2 is "
   "s / 8 / 2: the scores were divided by 4 or by 16, not by √8 ≈ 2.83",
   "write the square root so that the power is taken first: a power of one half needs "
   "its own parentheses (or use math.sqrt)",
   reproduce=lambda inp: [masked(_raw(inp) / (D_K / 2)), masked(_raw(inp) / D_K / 2)],
   shows=("the masked product divided by d_k ** 1 / 2 = 4",
          "the masked product divided by 8, then by 2"))
_m("mask_by_arithmetic", "head_scores", "-inf put in by arithmetic",
   "the mask was applied by multiplying with -inf (or adding a product with -inf): "
   "0 × -inf is NaN, not 0, so every score the mask keeps became NaN",
   "place -inf only where causal_mask is False, with a fill or a choice between two "
   "tensors, instead of multiplying the mask by -inf",
   reproduce=lambda inp: [_raw(inp) / SQRT_DK + np.where(CAUSAL, np.nan, -np.inf),
                          np.where(CAUSAL, np.nan, -np.inf) + 0 * _raw(inp)],
   shows=("NaN where the mask keeps a score and -inf where it hides one",
          "NaN where the mask keeps a score and -inf where it hides one"))
_m("head_scores_times_sqrt_dk", "head_scores", "multiplied by √d_k instead of divided",
   "the product was multiplied by √d_k, which widens the scores instead of bringing their "
   "spread back to about 1",
   "divide by math.sqrt(d_k)",
   reproduce=lambda inp: masked(_raw(inp) * SQRT_DK), shows="the masked product times √8")
_m("no_causal_mask", "head_scores", "the causal mask is missing",
   "every token may look at every other one, the later ones included: a decoder that "
   "predicts the next token must not see it",
   "after scaling, put -inf in the scores wherever causal_mask is False (and keep the "
   "result: a method without a trailing _ returns a new tensor)",
   reproduce=lambda inp: _raw(inp) / SQRT_DK, shows="the scaled scores, nothing masked")
_m("mask_inverted", "head_scores", "the mask is the wrong way round",
   "-inf was put where causal_mask is True (a token and the ones before it) and the later "
   "tokens kept: causal_mask says where a query MAY look (PyTorch's convention)",
   "put -inf where causal_mask is False, not where it is True: the mask names the "
   "positions a query may see",
   reproduce=lambda inp: masked(_raw(inp) / SQRT_DK, ~CAUSAL),
   shows="-inf on and below the diagonal, the later tokens kept")
_m("mask_transposed", "head_scores", "each token sees the later tokens, not the earlier",
   "-inf was put below the diagonal instead of above it (a triu where a tril belongs, or "
   "the mask transposed): token i must see tokens 0 ... i",
   "use causal_mask as it is (True on and below the diagonal) and put -inf where it is "
   "False",
   reproduce=lambda inp: masked(_raw(inp) / SQRT_DK, CAUSAL.T),
   shows="-inf below the diagonal")
_m("mask_hides_self", "head_scores", "each token is hidden from itself",
   "-inf was put on the diagonal too, so a token may not attend to itself and the first "
   "token has nothing to attend to (its whole row is -inf)",
   "mask only the later tokens, above the diagonal: causal_mask is True on the diagonal",
   reproduce=lambda inp: masked(_raw(inp) / SQRT_DK, np.tril(CAUSAL, -1)),
   shows="-inf on and above the diagonal")
_m("mask_with_zero", "head_scores", "the masked scores were set to 0, not -inf",
   "a score of 0 still gets weight e⁰ = 1 in the softmax, as much as any other: only "
   "-inf gives a later token weight 0",
   "fill the hidden positions with minus infinity instead of 0",
   reproduce=lambda inp: masked(_raw(inp) / SQRT_DK, fill=0.0),
   shows="0 where the mask hides a score")
_m("mask_positive_inf", "head_scores", "+inf where the mask hides a score",
   "the hidden scores were set to +inf (float('inf'), the minus sign missing): e^+inf "
   "makes those later tokens take all the weight, and the softmax gives NaN",
   "put minus infinity where the mask hides a score",
   reproduce=lambda inp: masked(_raw(inp) / SQRT_DK, fill=np.inf),
   shows="+inf where the mask hides a score")
_m("mask_finite", "head_scores", "a large finite number instead of -inf",
   "a number such as -1e9 stands in for -inf: the weights come out nearly the same, but "
   "the scores are not what the mask means, and a row whose keys are all hidden would "
   "spread its weight evenly instead of giving zeros",
   "fill with float('-inf') itself (the lesson's mask convention)",
   # (set in the mask's place, or added to the hidden scores)
   reproduce=lambda inp: [masked(_raw(inp) / SQRT_DK, fill=f) for f in (
       -1e9, -1e4, -1e10, -1e20, -1e30, float(np.finfo(np.float32).min), -1e38)] + [
       _raw(inp) / SQRT_DK + np.where(CAUSAL, 0.0, f) for f in (-1e4, -1e9)],
   shows="a large negative number where the mask hides a score")
_m("mask_differs", "head_scores", "-inf in other places than the causal mask",
   "the scores are right where they are kept, but the -inf stand elsewhere than where "
   "causal_mask is False: a mask of its own whose triangle or diagonal is off, or a loop "
   "whose bounds are",
   "compare your -inf, row by row, with causal_mask: exactly the keys after each query, "
   "none on the diagonal",
   kind="behaviour")
_m("mask_added_as_numbers", "head_scores", "the mask added as 0s and 1s",
   "causal_mask holds True/False: added to the scores it adds 1 or 0 and hides nothing; "
   "only -inf where it is False gives a later token weight 0",
   "turn the mask into -inf where it is False before it reaches the scores (or fill the "
   "scores there)",
   reproduce=lambda inp: [_raw(inp) / SQRT_DK + m for m in (CAUSAL, ~CAUSAL)],
   shows=("the scaled scores plus causal_mask as 1 and 0",
          "the scaled scores plus the inverted mask as 1 and 0"))
_m("head_scores_transposed", "head_scores", "the product is transposed (K Qᵀ)",
   "each head's scores were computed as keys times queries, so row i holds key i's "
   "scores: the mask then hides the wrong pairs",
   "put the queries on the left of the product and the transposed keys on the right",
   reproduce=lambda inp: masked(_swap(_raw(inp)) / SQRT_DK), shows="(K Qᵀ) / √8, masked")
_m("softmax_in_head_scores", "head_scores", "the softmax was applied already",
   "the scores are already the weights: the softmax belongs to Cell 6",
   "stop at the masked, scaled scores here",
   reproduce=lambda inp: _softmax(masked(_raw(inp) / SQRT_DK)),
   shows="the softmax of the masked scores")

# Cell 6: weights, and each head's weighted values.
_m("head_softmax_wrong_axis", "head_weights", "the softmax runs over the wrong axis",
   "each query's weights over the keys must sum to 1: the softmax runs over the last "
   "axis (the keys)",
   # (in words: a message never writes out the call with its axis, which is the answer)
   "apply the softmax along the last axis, the keys', so that each query's weights sum "
   "to 1 in every head",
   reproduce=lambda inp: [f(inp["head_scores"], a) for a in (-2, 1, 0)
                          for f in (_softmax, _torch_softmax)],
   shows=tuple(s for s in ("the softmax over the queries (dim=-2)",
                           "the softmax over the heads (dim=1)",
                           "the softmax over the batch (dim=0)") for _ in (0, 1)))
_m("head_softmax_missing", "head_weights", "the softmax was not applied",
   "head_weights holds the scores themselves, -inf included",
   "apply the set-up's softmax to head_scores along the keys (dim=-1)",
   reproduce=lambda inp: inp["head_scores"], shows="head_scores unchanged")
_m("head_weights_whole_sum", "head_weights", "normalised over more than each row",
   "the exponentials were divided by a sum over the whole tensor (or over a head's whole "
   "matrix), not by each query's own row sum: the rows no longer sum to 1",
   "divide each row of exponentials by that row's own sum, over the keys",
   reproduce=lambda inp: [(lambda e: e / e.sum(axis=a, keepdims=True))(np.exp(
       inp["head_scores"] - shift)) for shift in (
       inp["head_scores"].max(-1, keepdims=True), 0.0) for a in (None, (-2, -1))],
   shows=("the exponentials divided by the sum of the whole tensor",
          "the exponentials divided by the sum of each head's matrix") * 2)
_m("head_keepdim_missing", "head_weights", "keepdim=True missing in a row reduction",
   "without keepdim a row's sum (or maximum) loses its axis and broadcasts along the other "
   "one: on a square [6, 6] matrix, column j is divided by (or shifted by) row j's",
   "keep the reduced axis (keepdim=True), so each row is divided and shifted by its own",
   reproduce=lambda inp: [(lambda e: e / np.swapaxes(e.sum(-1, keepdims=True), -1, -2))(
       np.exp(inp["head_scores"] - shift)) for shift in (
       inp["head_scores"].max(-1, keepdims=True), 0.0)] + [
       (lambda e: e / e.sum(-1, keepdims=True))(np.exp(inp["head_scores"] - np.swapaxes(
           inp["head_scores"].max(-1, keepdims=True), -1, -2)))],
   shows=("each column divided by the sum of the row of its number",) * 2 + (
       "each column shifted by the maximum of the row of its number",))
_m("head_log_softmax", "head_weights", "a log-softmax, not the softmax",
   "the weights are the logarithms of the softmax (log_softmax, or a log of it): they are "
   "negative, -inf where the mask hides a key, and a row does not sum to 1",
   "take the softmax itself, whose weights lie between 0 and 1",
   reproduce=lambda inp: np.log(_softmax(inp["head_scores"])),
   shows="the logarithm of the softmax of head_scores")
_m("head_scores_rescaled", "head_weights", "the scores were scaled again",
   "Cell 5 already divided by √d_k; dividing again flattens every row",
   "apply the softmax to head_scores as they are",
   reproduce=lambda inp: [_softmax(inp["head_scores"] / f) for f in (SQRT_DK, D_K)],
   shows=("the softmax of head_scores / √8", "the softmax of head_scores / 8"))
_m("mask_after_softmax", "head_weights", "the mask was applied after the softmax",
   "the weights of the later tokens were zeroed after a softmax over all tokens, so a "
   "row no longer sums to 1",
   "use head_scores, already masked with -inf, and apply the softmax to them: e^-inf = 0",
   reproduce=lambda inp: _softmax(_raw(inp) / SQRT_DK) * CAUSAL,
   shows="the unmasked softmax, then zeros above the diagonal")
_m("head_softmax_twice", "head_weights", "the softmax was applied twice",
   "a second softmax on the weights treats them as scores: the hidden tokens' weights of "
   "0 become e⁰ = 1 before normalising, so every row flattens and the later tokens get "
   "weight",
   "apply the softmax once, to head_scores",
   reproduce=lambda inp: _softmax(_softmax(inp["head_scores"])),
   shows="the softmax of the softmax of head_scores")
_m("masked_scores_as_zero", "head_weights", "the hidden scores counted as 0",
   "the -inf of the mask were replaced by 0 (or by a number) before the softmax: a score "
   "of 0 gets weight e⁰ like any other, so each query attends to the later tokens",
   "give the softmax head_scores with their -inf: the softmax itself turns -inf into a "
   "weight of 0",
   reproduce=lambda inp: _softmax(np.where(np.isneginf(inp["head_scores"]), 0.0,
                                           inp["head_scores"])),
   shows="the softmax of head_scores with 0 in place of -inf")
_m("head_outputs_weights_transposed", "head_outputs", "the weights are transposed",
   "each head's weights were transposed before the product, so output i mixes the values "
   "with key i's column of weights",
   "use the weights as Cell 6's first line made them, with no transpose: each row of a "
   "query's weights mixes the value rows",
   reproduce=lambda inp: _swap(inp["head_weights"]) @ inp["v_heads"],
   shows="head_weightsᵀ @ v_heads")
_m("head_outputs_weights_softmaxed", "head_outputs", "the weights softmaxed again",
   "the product uses softmax(head_weights): the weights already are a softmax, and a second "
   "one flattens every row and gives the hidden tokens weight",
   "multiply the values by head_weights as they are",
   reproduce=lambda inp: _softmax(inp["head_weights"]) @ inp["v_heads"],
   shows="softmax(head_weights) @ v_heads")
_m("head_outputs_not_weighted", "head_outputs", "the values were not weighted",
   "head_outputs is v_heads itself (or a copy): nothing mixes the tokens' values",
   "mix the value rows with each query's weights: a matrix product of the two",
   reproduce=lambda inp: inp["v_heads"], shows="v_heads unchanged")

_m("from_wrong_input", "head_outputs", "made from weights that are wrong",
   "head_outputs comes from head_weights, made in the same cell, and those are wrong (their "
   "check, just above, names the mistake): the product cannot be right on them",
   "fix head_weights first, then run the cell again", kind="behaviour")

# Cell 7: merge the heads and apply W_o.
_m("merge_without_transpose", "multihead_output", "the heads were merged without moving them back",
   "a reshape of [1, 8, 6, 8] straight to [1, 6, 64] keeps the memory order (head, "
   "token, feature), so each output row holds pieces of several tokens",
   "move the head axis back behind the token axis first, then join each token's heads "
   "into 64 features, then apply W_o",
   reproduce=lambda inp: inp["head_outputs"].reshape(1, LENGTH, D_MODEL) @ inp["W_o"],
   shows="head_outputs reshaped to [1, 6, 64] as stored, then @ W_o")
_m("merge_interleaved", "multihead_output", "the heads' features were interleaved",
   "the features were merged in the order (d_k, head), so feature j of head h lands at "
   "h + 8j instead of 8h + j: W_o then mixes the wrong features",
   "put feature j of head h at place 8h + j of its token's merged row: the heads side by "
   "side, each head's 8 features together",
   reproduce=lambda inp: np.transpose(inp["head_outputs"], (0, 2, 3, 1)).reshape(
       1, LENGTH, D_MODEL) @ inp["W_o"],
   shows="the merge in (feature, head) order, then @ W_o")
_m("merge_rearranged", "multihead_output", "the heads were joined in the wrong order",
   "before W_o, your merged heads hold the right numbers in other places: token t's row "
   "must hold head 0's 8 features of token t, then head 1's, and so on to head 7's",
   "make each token's merged row hold its 8 heads side by side, every head once: check "
   "how your code places them (its loop, or its transpose and reshape steps)",
   kind="behaviour", said_first=True)
_m("merge_dot_T", "multihead_output", ".T on the 4-D heads",
   "`.T` reverses all four axes of head_outputs ([1, 8, 6, 8] becomes [8, 6, 8, 1]), so "
   "the reshape that follows mixes heads, tokens and features",
   "swap only the head and token axes before joining the heads",
   reproduce=lambda inp: np.transpose(inp["head_outputs"]).reshape(1, LENGTH, D_MODEL)
   @ inp["W_o"], shows="head_outputs.T reshaped to [1, 6, 64], then @ W_o")
_m("merge_wrong_axes", "multihead_output", "the wrong two axes swapped before the merge",
   "the transpose before the reshape swapped the token and feature axes (2 and 3) where "
   "the head and token axes (1 and 2) belong, so each merged row mixes tokens",
   "swap the head axis and the token axis before joining the heads",
   reproduce=lambda inp: [np.swapaxes(inp["head_outputs"], a, b).reshape(1, LENGTH, D_MODEL)
                          @ inp["W_o"] for a, b in ((2, 3), (1, 3))],
   shows=("head_outputs with axes 2 and 3 swapped, reshaped, then @ W_o",
          "head_outputs with axes 1 and 3 swapped, reshaped, then @ W_o"))
_m("heads_averaged", "multihead_output", "the heads were averaged, not joined",
   "the result is 1/8 of the right one: joining the 8 heads side by side and then "
   "applying W_o adds up each head's share (a head's 8 features meet its own 8 rows of "
   "W_o); a mean over the heads (or a division by n_heads) divides that sum by 8",
   "join the heads' features into 64 per token, with no mean and no division, then "
   "apply W_o",
   reproduce=lambda inp: merge(inp["head_outputs"]) @ inp["W_o"] / N_HEADS,
   shows="the right result divided by 8 (the heads averaged)")
_m("w_o_transposed", "multihead_output", "W_o was applied transposed",
   "W_o is stored as the formula writes it, [H·d_k, d_model], on the right of the "
   "product; its transpose is nn.Linear's convention for its weight, not this one",
   "use W_o as it is stored, with no transpose",
   reproduce=lambda inp: merge(inp["head_outputs"]) @ _swap(inp["W_o"]),
   shows="merged @ W_oᵀ")
_m("w_o_missing", "multihead_output", "W_o was not applied",
   "the heads were merged but not mixed: the output layer W_o lets each output feature "
   "draw on every head",
   "after the merge, mix the heads with the output layer W_o, as the formula's last "
   "product says",
   reproduce=lambda inp: merge(inp["head_outputs"]), shows="the merged heads, without W_o")


# The engine's general entries, written once in lesson 1's catalogue; those whose words
# name lesson 1's cells or numbers are said here in this lesson's.
_SAID_HERE = {
    "imprecise": dict(
        cause="the values agree to about 4 digits but not to float32 precision: a rounded "
              "constant (such as 2.83 for √8) or a lower-precision step",
        next_step="use math.sqrt(d_k) and keep the tensors in float32"),
    "undefined_name": dict(
        cause="each step cell is judged on its own: it sees the set-up (Cells 2-3) and the "
              "tensors of the steps before it, not names made in other cells (or the name "
              "has a typo)",
        next_step="define that name in this cell, or use the set-up's query, key, value, "
                  "causal_mask, softmax, W_o, n_heads, d_k, d_model"),
    "lost_batch_dimension": dict(
        next_step="keep the batch axis in front, [1, ...]: no [0], .squeeze() or .T, which "
                  "drop it or move it", examples={}),
    "axes_permuted": dict(
        cause="the values are right but the axes are in another order: a transpose or "
              "permute of the wrong axes (or .T, which reverses every axis)",
        next_step="keep the axes in the order the task gives them: (batch, head, token, "
                  "d_k) for the heads, (batch, token, feature) for the output",
        examples={}),
}
ENTRIES += [dataclasses.replace(m, **_SAID_HERE.get(m.id, {}))
            for m in _LESSON1_ENTRIES if m.step == "any"]

#: The catalogue: every mistake the checks can name, in the order they are tried.
MISTAKES: dict[str, Mistake] = {m.id: m for m in ENTRIES}
assert len(MISTAKES) == len(ENTRIES), "duplicate mistake ids"
