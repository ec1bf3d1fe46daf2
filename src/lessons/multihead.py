"""Lesson 2, multi-head and causal attention on "The cat sat on the mat": the spec.

The one place for this lesson's facts, read by the same engine as lesson 1's: its
set-up cells and names, its four steps (cell ids, which are also nbgrader grade_ids,
names, shapes, points, titles, figures), the reference (float64 from the shipped
``data/``, and the same chain in torch for the replay), the second run's inputs, the
tolerances and its decisions. Its mistakes are in ``multihead_mistakes.py``.

The set-up gives lesson 1's projections of the embeddings with sinusoidal positions
added (so the two "the" no longer tie), the causal mask, the output layer W_o and a
correct softmax; the student splits the heads, scores them with the mask, weighs the
values and merges the heads through W_o.

Shape legend: B = 1 batch, H = 8 heads, L = S = 6 tokens, d_k = 8, d_model = 64;
x, query, key, value [B, L, d_model]; q_heads, k_heads, v_heads, head_outputs
[B, H, L, d_k]; head_scores, head_weights [B, H, L, S]; multihead_output
[B, L, d_model]; W_o [d_model, d_model]; causal_mask [L, S] (True: may attend).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from src.checks.util import TOL, _softmax, _swap
from src.data import PROMPT_EXAMPLE, load_arrays, load_output, sinusoidal_positions, tokenize
from src.lessons import attention as lesson1
from src.lessons.multihead_mistakes import (
    CAUSAL,
    D_K,
    D_MODEL,
    ENTRIES,
    LENGTH,
    MISTAKES,
    N_HEADS,
    masked,
    merge,
    split,
)
from src.spec import Check, Figure, Lesson, Rearrangement, Step

#: The softmax the set-up gives (writing one was lesson 1's step): lesson 1's reference,
#: stable, and zeros for a row that is entirely -inf.
softmax = lesson1.reference_softmax
#: How close the closing cell's comparisons with torch's own layers must be (float32).
CLOSING_TOL = dict(rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- reference
@lru_cache(maxsize=1)
def shipped():
    """The shipped data as float32 NumPy arrays: x (embeddings + positions), w_q, b_q, ...,
    W_o."""
    a = load_arrays()
    out = {k: a[k] for k in ("w_q", "b_q", "w_k", "b_k", "w_v", "b_v")}
    out["x"] = (a["x"] + sinusoidal_positions(LENGTH)).astype(np.float32)
    out["W_o"] = load_output()
    return out


def chain(x):
    """float64 arrays of every step's inputs and outputs for embeddings ``x`` [1, 6, 64]
    and the shipped layers: x, W_o, query, ..., q_heads, ..., multihead_output."""
    a = {k: v.astype(np.float64) for k, v in shipped().items()}
    ref = dict(a, x=np.asarray(x, dtype=np.float64))
    for name, n in (("query", "q"), ("key", "k"), ("value", "v")):
        ref[name] = ref["x"] @ a[f"w_{n}"].T + a[f"b_{n}"]
        ref[f"{n}_heads"] = split(ref[name])
    ref["head_scores"] = masked(ref["q_heads"] @ _swap(ref["k_heads"]) / math.sqrt(D_K))
    ref["head_weights"] = _softmax(ref["head_scores"])
    ref["head_outputs"] = ref["head_weights"] @ ref["v_heads"]
    ref["multihead_output"] = merge(ref["head_outputs"]) @ ref["W_o"]
    return ref


@lru_cache(maxsize=1)
def reference():
    """float64 arrays of every step's inputs and outputs, from data/ (read-only)."""
    ref = chain(shipped()["x"])
    for arr in ref.values():
        arr.setflags(write=False)
    return ref


def torch_reference(ns: dict) -> dict:
    """The lesson's tensors made from ``ns``'s own x, layers, mask and W_o as the lesson
    makes them (so they carry the same autograd graph): query, key, value [B, L, d_model]
    -> q_heads, k_heads, v_heads [B, H, L, d_k] -> head_scores, head_weights [B, H, L, S]
    -> head_outputs [B, H, L, d_k] -> multihead_output [B, L, d_model]."""
    def heads(t):  # [B, L, d_model] -> [B, H, L, d_k]
        return t.view(1, LENGTH, N_HEADS, D_K).transpose(1, 2)

    out = {"query": ns["q_proj"](ns["x"]), "key": ns["k_proj"](ns["x"]),
           "value": ns["v_proj"](ns["x"])}
    for n in "qkv":
        out[f"{n}_heads"] = heads(out[{"q": "query", "k": "key", "v": "value"}[n]])
    scores = out["q_heads"] @ out["k_heads"].transpose(-2, -1) / math.sqrt(D_K)
    out["head_scores"] = scores.masked_fill(~ns["causal_mask"], float("-inf"))
    out["head_weights"] = softmax(out["head_scores"], dim=-1)
    out["head_outputs"] = out["head_weights"] @ out["v_heads"]
    merged = out["head_outputs"].transpose(1, 2).reshape(1, LENGTH, D_MODEL)
    out["multihead_output"] = merged @ ns["W_o"]
    return out


def variant_x(seed: int) -> np.ndarray:
    """The embeddings [1, 6, 64] (float32) of the second run with ``seed`` (lesson 1's
    draw: 6 x N(0, 1), scores of tens where the lesson's stay within a few units)."""
    return lesson1.variant_x(seed)


def compare_with_torch(x, q_proj, k_proj, v_proj, W_o, multihead_output, tol=CLOSING_TOL):
    """The closing cell: the whole layer as ``torch.nn.MultiheadAttention`` loaded with the
    same weights, and as ``F.scaled_dot_product_attention(..., is_causal=True)`` on the
    same heads, against ``multihead_output``; returns the lines it prints.

    Shape legend: x, multihead_output [1, 6, 64]; W_o [64, 64] (merged @ W_o).
    """
    import torch
    import torch.nn.functional as F

    if not (isinstance(multihead_output, torch.Tensor)
            and tuple(multihead_output.shape) == (1, LENGTH, D_MODEL)):
        return ["multihead_output is not a [1, 6, 64] tensor yet: finish Cell 7, run it, "
                "then run this cell again"]
    with torch.no_grad():
        mha = torch.nn.MultiheadAttention(D_MODEL, N_HEADS, bias=True, batch_first=True)
        mha.in_proj_weight.copy_(torch.cat([q_proj.weight, k_proj.weight, v_proj.weight]))
        mha.in_proj_bias.copy_(torch.cat([q_proj.bias, k_proj.bias, v_proj.bias]))
        mha.out_proj.weight.copy_(W_o.T)  # (nn.Linear computes merged @ weight.T)
        mha.out_proj.bias.zero_()
        # PyTorch's attn_mask: True where a query may NOT attend (the opposite of ours).
        hidden = ~torch.tril(torch.ones(LENGTH, LENGTH, dtype=torch.bool))
        by_module, _ = mha(x, x, x, attn_mask=hidden, need_weights=False)

        def heads(t):  # [1, 6, 64] -> [1, 8, 6, 8]
            return t.view(1, LENGTH, N_HEADS, D_K).transpose(1, 2)

        per_head = F.scaled_dot_product_attention(
            heads(q_proj(x)), heads(k_proj(x)), heads(v_proj(x)), is_causal=True)
        by_sdpa = per_head.transpose(1, 2).reshape(1, LENGTH, D_MODEL) @ W_o
        lines = [f"tolerance: rtol={tol['rtol']:g}, atol={tol['atol']:g} (float32)"]
        for label, other in (("nn.MultiheadAttention", by_module),
                             ("F.scaled_dot_product_attention(is_causal=True)", by_sdpa)):
            # (no difference printed: its last digits depend on the CPU, nbval compares text)
            ok = torch.allclose(multihead_output.detach().to(other.dtype), other, **tol)
            lines.append(f"same as {label}: {ok}")
    return lines


# -------------------------------------------------------------------- steps
def _split_vjp(inp, g, out):
    """Gradients of sum(heads * g) with respect to the tensor the heads came from."""
    from src.lessons.multihead_mistakes import SOURCE_OF

    return {SOURCE_OF[inp["name"]]: merge(g)}


def _scores_vjp(inp, g, out):
    g = np.where(CAUSAL, g, 0.0) / math.sqrt(D_K)  # (a masked score depends on nothing)
    return {"q_heads": g @ inp["k_heads"], "k_heads": _swap(g) @ inp["q_heads"]}


def _weights_vjp(inp, g, out):
    return {"head_scores": out * (g - (out * g).sum(-1, keepdims=True))}


def _outputs_vjp(inp, g, out):
    """Only v_heads: head_weights is made in the same cell, and whether it comes from
    head_scores is its own check's to judge (charged once, there)."""
    return {"v_heads": _swap(inp["head_weights"]) @ g}


def _output_vjp(inp, g, out):
    return {"head_outputs": split(g @ _swap(inp["W_o"]))}


_HEAD_AXES = "[batch, head, token, feature]"
#: Cell 4's heads are their source's numbers moved; Cell 7's are, once W_o is taken off.
_SPLIT = {name: Rearrangement(source, split, "heads_rearranged")
          for name, source in (("q_heads", "query"), ("k_heads", "key"), ("v_heads", "value"))}
_MERGE = {"multihead_output": Rearrangement(
    "head_outputs", merge, "merge_rearranged",
    undo=lambda arr, inp: np.linalg.solve(np.asarray(inp["W_o"], np.float64).T,
                                          np.swapaxes(arr, -1, -2)).swapaxes(-1, -2))}
STEPS = (
    Step("mh_cell4_split", "mh_cell4_split_test", 4, inputs=("query", "key", "value"),
         variant=True, call="check_split_heads(query, key, value, q_heads, k_heads, v_heads)",
         figures=(Figure("q_heads", "split_heads", "Your q_heads, one [6, 8] block per head "
                         "(Cell 4)", value_label="value", not_right=", not right yet"),),
         checks=(Check("split_heads", 2.0, "Cell 4 — split into heads",
                       ("q_heads", "k_heads", "v_heads"), ("query", "key", "value"),
                       reference=lambda inp, name: split(inp[
                           {"q_heads": "query", "k_heads": "key", "v_heads": "value"}[name]]),
                       uses={"q_heads": ("query",), "k_heads": ("key",),
                             "v_heads": ("value",)},
                       vjp=_split_vjp, rearranged=_SPLIT,
                       doc="Cell 4: q_heads, k_heads, v_heads == query, key, value split into "
                           "8 heads of d_k = 8: [1, 6, 64] -> [1, 8, 6, 8] (batch, head, "
                           "token, d_k)."),)),
    Step("mh_cell5_scores", "mh_cell5_scores_test", 5, inputs=("q_heads", "k_heads"),
         variant=True, call="check_head_scores(q_heads, k_heads, head_scores)",
         figures=(Figure("head_scores", "head_scores", "Your head_scores (Cell 5)",
                         value_label="score", not_right=", not right yet"),),
         checks=(Check("head_scores", 2.0, "Cell 5 — masked scaled scores per head",
                       ("head_scores",), ("q_heads", "k_heads"),
                       reference=lambda inp, name: masked(
                           inp["q_heads"] @ _swap(inp["k_heads"]) / math.sqrt(D_K)),
                       vjp=_scores_vjp,
                       doc="Cell 5: head_scores == q_heads @ k_headsᵀ / √d_k (d_k = 8), -inf "
                           "where causal_mask is False: [1, 8, 6, 8] x2 -> [1, 8, 6, 6]."),)),
    # (no second run, as lesson 1's Cell 6: head_outputs is made from this cell's own
    # weights, and the second run compares with the formula on the lesson's)
    Step("mh_cell6_weights", "mh_cell6_weights_test", 6, inputs=("head_scores", "v_heads"),
         call="check_head_weights(head_scores, head_weights), "
              "check_head_outputs(head_weights, v_heads, head_outputs)",
         figures=(Figure("head_weights", "head_weights", "Your head_weights (Cell 6)",
                         not_right=", not right yet"),),
         checks=(Check("head_weights", 1.0, "Cell 6 — attention weights per head",
                       ("head_weights",), ("head_scores",), ("q_heads", "k_heads"),
                       reference=lambda inp, name: _softmax(inp["head_scores"]),
                       vjp=_weights_vjp,
                       doc="Cell 6: head_weights == softmax(head_scores, dim=-1): "
                           "[1, 8, 6, 6] -> [1, 8, 6, 6]."),
                 Check("head_outputs", 1.0, "Cell 6 — weighted values per head",
                       ("head_outputs",), ("head_weights", "v_heads"),
                       ("head_scores", "q_heads", "k_heads"),
                       reference=lambda inp, name: inp["head_weights"] @ inp["v_heads"],
                       vjp=_outputs_vjp,
                       doc="Cell 6: head_outputs == head_weights @ v_heads: [1, 8, 6, 6] @ "
                           "[1, 8, 6, 8] -> [1, 8, 6, 8]."))),
    Step("mh_cell7_merge", "mh_cell7_merge_test", 7, inputs=("head_outputs",), variant=True,
         call="check_multihead_output(head_outputs, multihead_output)",
         figures=(Figure("head_weights", "multihead_output",
                         "The pattern behind multihead_output (Cell 7)", when="scored"),),
         checks=(Check("multihead_output", 2.0, "Cell 7 — merge the heads and apply W_o",
                       ("multihead_output",), ("head_outputs",), ("head_weights", "v_heads"),
                       reference=lambda inp, name: merge(inp["head_outputs"]) @ inp["W_o"],
                       vjp=_output_vjp, rearranged=_MERGE,
                       doc="Cell 7: multihead_output == the heads merged back to [1, 6, 64] "
                           "(batch, token, head·d_k), then @ W_o: [1, 8, 6, 8] -> "
                           "[1, 6, 64]."),)),
)

LESSON = Lesson(
    name="multihead",
    notebook="multihead",
    source="complete_multihead",
    labels=tuple(tokenize(PROMPT_EXAMPLE)),
    setup_cells=("mh_cell2_setup", "mh_cell3_data"),
    setup_names=(
        "math", "matplotlib", "np", "torch", "PROMPT_EXAMPLE", "load_example", "load_output",
        "sinusoidal_positions", "show_figure", "plot_heads", "Summary", "softmax",
        "compare_with_torch", "example", "tokens", "x", "q_proj", "k_proj", "v_proj",
        "query", "key", "value", "causal_mask", "W_o", "n_heads", "d_k", "d_model"),
    steps=STEPS,
    shapes={"x": (1, 6, 64), "query": (1, 6, 64), "key": (1, 6, 64), "value": (1, 6, 64),
            "q_heads": (1, 8, 6, 8), "k_heads": (1, 8, 6, 8), "v_heads": (1, 8, 6, 8),
            "head_scores": (1, 8, 6, 6), "head_weights": (1, 8, 6, 6),
            "head_outputs": (1, 8, 6, 8), "multihead_output": (1, 6, 64), "W_o": (64, 64)},
    axes={"query": "[batch, token, feature]", "key": "[batch, token, feature]",
          "value": "[batch, token, feature]", "q_heads": _HEAD_AXES, "k_heads": _HEAD_AXES,
          "v_heads": _HEAD_AXES, "head_scores": "[batch, head, query, key]",
          "head_weights": "[batch, head, query, key]",
          "head_outputs": "[batch, head, query, feature]",
          "multihead_output": "[batch, token, feature]", "W_o": "[feature in, feature out]"},
    reference=reference,
    chain=chain,
    torch_reference=torch_reference,
    variant_x=variant_x,
    variant_input="x",
    watched_setup=("x", "W_o", "causal_mask"),
    given=("query", "key", "value"),
    mistakes=MISTAKES,
    entries=tuple(ENTRIES),
    tolerances=dict(tol=TOL, strict=lesson1.STRICT_TOL, grad=lesson1.GRAD_TOL,
                    tie=lesson1.TIE_TOL, variant_scale=lesson1.VARIANT_SCALE_TOL,
                    low=lesson1.LOW_TOL),
    facts=dict(d_k=D_K, constants={"d_k": D_K, "n_tokens": LENGTH},
               shipped=shipped, closing_tol=CLOSING_TOL),
    decisions={
        "scale_is_sqrt8": "here d_k is each head's width, 8: `/ math.sqrt(d_k)` and "
                          "`/ math.sqrt(q_heads.shape[-1])` are right; `/ 8`, "
                          "`/ math.sqrt(64)` and `/ math.sqrt(query.shape[-1])` (d_model) "
                          "are wrong (they divide by 8, not √8)",
        "builtin_softmax_here": "`torch.softmax` or `F.softmax` for the weights is right: the "
                                "set-up gives a softmax, writing one was lesson 1's step",
        "any_mask_spelling": "any way of putting -inf where causal_mask is False is right "
                             "(masked_fill, torch.where, adding a matrix of 0 and -inf, a "
                             "tril of its own), and masking before the scaling is right "
                             "(-inf / √8 is -inf); a finite stand-in such as -1e9 is not",
        "any_split_spelling": "view or reshape or unflatten, then transpose or permute, or "
                              "split and stack: every spelling that gives the heads is right",
        "judged_on_right_inputs": "each step cell is graded on the lesson's right inputs "
                                  "(an earlier slip is charged once, in its own cell): code "
                                  "that is right on them is right, even where it also covers "
                                  "for an earlier cell's slip (Cell 6 zeroing the later "
                                  "weights after the softmax when Cell 5 left them unmasked)",
        "from_its_inputs": "a step's result must come from the inputs its task names (as in "
                           "lesson 1): cut off from them in autograd (recomputed from x and "
                           "the layers, or detached) costs half the step in the graded run",
    },
)
