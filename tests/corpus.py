"""A class-sized corpus of realistic student attempts at cells 4-7.

Each attempt is code as a student writes it, for one or more of the parts
``cell4``, ``cell5``, ``softmax`` (the whole ``def softmax``), ``apply`` (the
line that makes ``attention_weights``) and ``cell7``; the parts it does not
give are the reference's. It runs in-process, cell by cell, in a real IPython
shell (tests/notebook_utils.py); right after each step cell, what its test
cell would see is judged.

``expect`` names, for each check an attempt gets wrong, the mistake the check
must name (None: wrong, and the catalogue has no name for it). Every other
check must give full marks (no cascade), except the ``by_design`` ones: their
input from an earlier cell is missing (the cell raised) or degenerate
(constant), or of a kind their code cannot run on (a NumPy array, a tuple,
float64 next to float32: the check names that slip, ``upstream_slip``), so no
check can credit them. ``by_design`` maps such a check to the mistake it must
name (None: any). ``same_idea_as`` marks another
spelling of an attempt above: it is run and must behave the same, but it is
not counted in the figure. Correct alternatives have no ``expect``.

``python -m tests.corpus`` prints the figure and one line per attempt.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

import verify
from src import replay
from tests.notebook_utils import SOURCE, cells_by_id, run_steps, test_cell_results

REF = cells_by_id(SOURCE)
STEPS = list(verify.POINTS)
GRADE_OF_CELL = {cell: gid for gid, cell in verify.STEP_CELLS.items()}
PART_CELL = {"cell4": "cell4_projections", "cell5": "cell5_scores", "softmax": "cell6_softmax",
             "apply": "cell6_softmax", "cell7": "cell7_values"}
_BLOCK = re.compile(r"^[ \t]*### BEGIN SOLUTION\n.*?^[ \t]*### END SOLUTION\n", re.M | re.S)


@dataclass(frozen=True)
class Attempt:
    """One student's code for some parts, and what the checks must say about it."""

    name: str
    code: dict
    expect: dict = field(default_factory=dict)
    by_design: dict = field(default_factory=dict)  # check -> the mistake it names, or None
    same_idea_as: str = ""
    note: str = ""  # text one result's notes must contain (e.g. that the cell raised)

    @property
    def correct(self):
        return not self.expect


ATTEMPTS: list[Attempt] = []


def attempt(name, expect=None, by_design=(), same_idea_as="", note="", **code):
    by_design = dict(by_design) if isinstance(by_design, dict) else dict.fromkeys(by_design)
    ATTEMPTS.append(Attempt(name, code, dict(expect or {}), by_design, same_idea_as,
                            note))


def projections(make):
    """Cell 4 code that computes the three tensors with ``make`` ("q_proj" etc. -> code)."""
    return "\n".join(f"{name} = {make(layer)}" for name, layer in
                     (("query", "q_proj"), ("key", "k_proj"), ("value", "v_proj")))


DOWNSTREAM_OF_4 = ("attention_scores", "attention_weights", "attended_values")
AFTER_5 = ("attention_weights", "attended_values")
AFTER_6 = ("attended_values",)

# --------------------------------------------------------------------------- correct
attempt("reference")
attempt("F.linear", cell4="import torch.nn.functional as F\n" + projections(
    lambda p: f"F.linear(x, {p}.weight, {p}.bias)"))
attempt("x @ W.T + b", cell4=projections(lambda p: f"x @ {p}.weight.T + {p}.bias"))
attempt("einsum projections", cell4=projections(
    lambda p: f'torch.einsum("btd,ed->bte", x, {p}.weight) + {p}.bias'))
attempt("addmm on the 2-D x", cell4=projections(
    lambda p: f"torch.addmm({p}.bias, x[0], {p}.weight.t()).unsqueeze(0)"))
attempt("a generator over the layers",
        cell4="query, key, value = (layer(x) for layer in (q_proj, k_proj, v_proj))")
attempt("one fused projection", cell4="""\
w = torch.cat([q_proj.weight, k_proj.weight, v_proj.weight])  # [192, 64]
b = torch.cat([q_proj.bias, k_proj.bias, v_proj.bias])
query, key, value = (x @ w.T + b).split(64, dim=-1)""")
attempt("token by token", cell4=projections(
    lambda p: f"torch.stack([{p}(x[0, i]) for i in range(6)]).unsqueeze(0)"))
attempt("squeeze then unsqueeze", cell4=projections(
    lambda p: f"{p}(x.squeeze(0)).unsqueeze(0)"))
attempt("bmm scores", cell5="attention_scores = torch.bmm(query, key.transpose(1, 2)) / "
        "math.sqrt(d_k)")
attempt("einsum scores", cell5='attention_scores = torch.einsum("bqd,bkd->bqk", query, key) '
        "/ d_k ** 0.5")
attempt("mT times d_k ** -0.5", cell5="attention_scores = query @ key.mT * d_k ** -0.5")
attempt("query scaled first", cell5="attention_scores = (query / math.sqrt(d_k)) @ "
        "key.transpose(-2, -1)")
attempt("baddbmm with alpha", cell5="attention_scores = torch.baddbmm(torch.zeros(1, 6, 6), "
        "query, key.transpose(1, 2), beta=0, alpha=1 / math.sqrt(d_k))")
attempt("double loop of dot products", cell5="""\
attention_scores = torch.zeros(1, 6, 6)
for i in range(6):
    for j in range(6):
        attention_scores[0, i, j] = query[0, i] @ key[0, j] / math.sqrt(d_k)""")
attempt("permute and a tensor square root", cell5="attention_scores = torch.matmul(query, "
        "key.permute(0, 2, 1)) / torch.sqrt(torch.tensor(d_k, dtype=torch.float32))")
attempt("the cell raises after a right answer", cell5="""\
attention_scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)
print(attention_scores.shape())""", expect={"attention_scores": "cell_raised"})
attempt("logsumexp softmax with a guard", softmax="""\
def softmax(x, dim=-1):
    lse = torch.logsumexp(x, dim=dim, keepdim=True)
    lse = torch.where(torch.isneginf(lse), torch.zeros_like(lse), lse)
    return torch.exp(x - lse)""")
attempt("max().values and nan_to_num", softmax="""\
def softmax(x, dim=-1):
    shifted = x - x.max(dim=dim, keepdim=True).values
    exps = torch.exp(shifted)
    return torch.nan_to_num(exps / exps.sum(dim=dim, keepdim=True), nan=0.0)""")
attempt("torch.max(...)[0], masked_fill and where", softmax="""\
def softmax(x, dim=-1):
    m = torch.max(x, dim=dim, keepdim=True)[0]
    m = m.masked_fill(torch.isinf(m), 0.0)
    e = torch.exp(x - m)
    s = e.sum(dim=dim, keepdim=True)
    return torch.where(s > 0, e / s, torch.zeros_like(e))""")
attempt("dim moved to the end", softmax="""\
def softmax(x, dim=-1):
    moved = x.movedim(dim, -1)
    m = moved.amax(-1, keepdim=True).nan_to_num(neginf=0.0)
    e = (moved - m).exp()
    s = e.sum(-1, keepdim=True)
    return (e / s.clamp(min=1e-30)).movedim(-1, dim)""")
attempt("unsqueeze instead of keepdim", softmax="""\
def softmax(x, dim=-1):
    m = x.amax(dim=dim).unsqueeze(dim)
    m = torch.where(torch.isneginf(m), 0.0, m)
    e = torch.exp(x - m)
    return torch.div(e, e.sum(dim=dim).unsqueeze(dim).clamp_min(1e-12))""")
attempt("softmax with the default dim", apply="attention_weights = softmax(attention_scores)")
attempt("softmax with dim=2", apply="attention_weights = softmax(attention_scores, dim=2)")
attempt("bmm values", cell7="attended_values = torch.bmm(attention_weights, value)")
attempt("einsum values", cell7='attended_values = torch.einsum("bqk,bkd->bqd", '
        "attention_weights, value)")
attempt("broadcast and sum", cell7="attended_values = (attention_weights.unsqueeze(-1) * "
        "value.unsqueeze(1)).sum(dim=2)")
attempt("a loop over the queries", cell7="""\
rows = []
for i in range(6):
    rows.append((attention_weights[0, i].unsqueeze(-1) * value[0]).sum(dim=0))
attended_values = torch.stack(rows).unsqueeze(0)""")
# Right values, but recomputed from query and key: the weights of Cell 6 are not used.
attempt("torch's scaled_dot_product_attention", cell7="attended_values = "
        "torch.nn.functional.scaled_dot_product_attention(query, key, value)",
        expect={"attended_values": "recomputed_output"})
attempt("renormalised weights", cell7="attended_values = attention_weights @ value / "
        "attention_weights.sum(-1, keepdim=True)")
attempt("float64 fixed back to float32 in Cell 7",
        apply="attention_weights = softmax(attention_scores.double(), dim=-1)",
        cell7="attended_values = attention_weights.float() @ value",
        expect={"attention_weights": "wrong_dtype"})

# ---------------------------------------------------------------------- Cell 4 wrong
attempt("the given layers re-initialised (blind set 8)", expect={"projections": "new_layers"},
        by_design=DOWNSTREAM_OF_4, cell4="""\
for layer in (q_proj, k_proj, v_proj):
    torch.nn.init.xavier_uniform_(layer.weight)
""" + projections(lambda p: f"{p}(x)"))
attempt("a token loop from 1 (blind set 7)", expect={"projections": "range_off_by_one"},
        by_design=DOWNSTREAM_OF_4, cell4=projections(
            lambda p: f"torch.stack([{p}(x[0, i]) for i in range(1, 6)]).unsqueeze(0)"))
attempt("key from q_proj", cell4="query = q_proj(x)\nkey = q_proj(x)\nvalue = v_proj(x)",
        expect={"projections": "swapped_projection"})
attempt("q_proj for all three", cell4=projections(lambda p: "q_proj(x)"),
        expect={"projections": "swapped_projection"}, same_idea_as="key from q_proj")
attempt("value is x", cell4="query = q_proj(x)\nkey = k_proj(x)\nvalue = x",
        expect={"projections": "no_projection"})
attempt("bias dropped", cell4=projections(lambda p: f"x @ {p}.weight.T"),
        expect={"projections": "missing_bias"})
attempt("weight not transposed", cell4=projections(lambda p: f"x @ {p}.weight + {p}.bias"),
        expect={"projections": "weight_not_transposed"})
attempt("weight alone", cell4=projections(lambda p: f"x @ {p}.weight"),
        expect={"projections": "weight_only"})
attempt("bias added twice", cell4=projections(lambda p: f"{p}(x) + {p}.bias"),
        expect={"projections": "bias_added_twice"})
attempt("new layers", cell4=projections(lambda p: "torch.nn.Linear(64, 64)(x)"),
        expect={"projections": "new_layers"})
attempt("detached", cell4=projections(lambda p: f"{p}(x).detach()"),
        expect={"projections": "detached_projection"})
attempt("under torch.no_grad()", cell4="with torch.no_grad():\n    " + projections(
    lambda p: f"{p}(x)").replace("\n", "\n    "), expect={"projections": "detached_projection"})
attempt("rebuilt from a list", cell4=projections(lambda p: f"torch.tensor({p}(x).tolist())"),
        expect={"projections": "detached_projection"}, same_idea_as="detached")
attempt("batch lost in Cell 4", cell4=projections(lambda p: f"{p}(x)[0]"),
        expect={"projections": "lost_batch_dimension"})
attempt("float64 projections", cell4=projections(lambda p: f"{p}(x).double()"),
        expect={"projections": "wrong_dtype"})
attempt("query scaled in Cell 4", cell4="query = q_proj(x) / math.sqrt(d_k)\nkey = k_proj(x)\n"
        "value = v_proj(x)", expect={"projections": "projection_scaled"})
attempt("zeros for the query", cell4="query = torch.zeros(1, 6, 64)\nkey = k_proj(x)\n"
        "value = v_proj(x)", expect={"projections": "constant_output"},
        by_design=DOWNSTREAM_OF_4)
attempt("a typo in the last line", cell4="query = q_proj(x)\nkey = k_proj(x)\n"
        "value = v_proj(X)", expect={"projections": "undefined_name"}, by_design=AFTER_6)
attempt("x transposed for the layer", expect={"projections": "transposed_layer_input"},
        by_design=DOWNSTREAM_OF_4,
        cell4=projections(lambda p: f"{p}(x.transpose(-2, -1))"))
attempt("x.mT for the layer", expect={"projections": "transposed_layer_input"},
        same_idea_as="x transposed for the layer", by_design=DOWNSTREAM_OF_4,
        cell4=projections(lambda p: f"{p}(x.mT)"))
attempt(".T on x", cell4=projections(lambda p: f"{p}(x.T)"),
        expect={"projections": "dot_T_on_3d"}, by_design=DOWNSTREAM_OF_4)
# (blind set 6, b6-009 and b6-015: errors the catalogue now names)
attempt("a layer's weight called", cell4=projections(lambda p: f"{p}.weight(x)"),
        expect={"projections": "parameter_called"}, by_design=DOWNSTREAM_OF_4)
attempt("moved to the GPU", cell4="x = x.to('cuda')\n" + projections(lambda p: f"{p}(x)"),
        expect={"projections": "no_gpu"}, by_design=DOWNSTREAM_OF_4)
attempt("two mistakes: swapped layer and transposed product",
        cell4="query = q_proj(x)\nkey = v_proj(x)\nvalue = v_proj(x)",
        cell5="attention_scores = key @ query.transpose(-2, -1) / math.sqrt(d_k)",
        expect={"projections": "swapped_projection", "attention_scores": "transposed_product"})

# ---------------------------------------------------------------------- Cell 5 wrong
SCORES = "attention_scores = {}"


def scores(expr, **kw):
    return dict(cell5=SCORES.format(expr), **kw)


# The lesson's scores lie within ±0.6: a clip to ±1 changes nothing there, but changes
# larger scores (the replay's second run, on other query and key, has some).
attempt("scores clipped for safety", expect={"attention_scores": "right_only_here"},
        cell5="attention_scores = torch.clamp(query @ key.transpose(-2, -1) / math.sqrt(d_k)"
              ", -1.0, 1.0)")
attempt("no scaling", expect={"attention_scores": "no_scaling"},
        **scores("query @ key.transpose(-2, -1)"))
attempt("divided by d_k", expect={"attention_scores": "scaled_by_dk"},
        **scores("query @ key.transpose(-2, -1) / d_k"))
attempt("multiplied by sqrt(d_k)", expect={"attention_scores": "multiplied_by_sqrt_dk"},
        **scores("query @ key.transpose(-2, -1) * math.sqrt(d_k)"))
attempt("d_k ** 1/2", expect={"attention_scores": "sqrt_precedence_128"},
        **scores("query @ key.transpose(-2, -1) / d_k ** 1/2"))
attempt("(d_k ** 1/2)", expect={"attention_scores": "sqrt_precedence"},
        **scores("query @ key.transpose(-2, -1) / (d_k ** 1/2)"))
attempt("d_k from the token axis", expect={"attention_scores": "dk_from_token_axis"},
        **scores("query @ key.transpose(-2, -1) / math.sqrt(query.shape[1])"))
attempt("K Q^T", expect={"attention_scores": "transposed_product"},
        **scores("key @ query.transpose(-2, -1) / math.sqrt(d_k)"))
attempt("query used as key", expect={"attention_scores": "same_tensor_twice"},
        **scores("query @ query.transpose(-2, -1) / math.sqrt(d_k)"))
attempt("value used as key", expect={"attention_scores": "value_in_scores"},
        **scores("query @ value.transpose(-2, -1) / math.sqrt(d_k)"))
attempt("K^T Q", expect={"attention_scores": "feature_product"}, by_design=AFTER_6,
        **scores("key.transpose(-2, -1) @ query / math.sqrt(d_k)"))
attempt("elementwise product", expect={"attention_scores": "elementwise_scores"},
        by_design=AFTER_6, **scores("query * key / math.sqrt(d_k)"))
attempt("softmax already in Cell 5", expect={"attention_scores": "softmax_in_scores"},
        **scores("torch.softmax(query @ key.transpose(-2, -1) / math.sqrt(d_k), dim=-1)"))
attempt(".T on the key", expect={"attention_scores": "dot_T_on_3d"}, by_design=AFTER_5,
        **scores("query @ key.T / math.sqrt(d_k)"))
attempt("transpose(0, 1)", expect={"attention_scores": "matmul_shapes"}, by_design=AFTER_5,
        **scores("query @ key.transpose(0, 1) / math.sqrt(d_k)"))
attempt("scaled twice", expect={"attention_scores": "scaled_by_dk"},
        **scores("(query / math.sqrt(d_k)) @ key.transpose(-2, -1) / math.sqrt(d_k)"))
attempt("torch.sqrt of an int", expect={"attention_scores": "sqrt_of_an_int"},
        by_design=AFTER_5, **scores("query @ key.transpose(-2, -1) / torch.sqrt(d_k)"))
attempt("a typo half-way", cell5="raw_scores = query @ key.transpose(-2, -1)\n"
        "attention_scores = raw_scores / math.sqrt(dk)",
        expect={"attention_scores": "undefined_name"},
        by_design=AFTER_5)
attempt("an unclosed parenthesis", expect={"attention_scores": "cell_raised"},
        by_design=AFTER_5,
        **scores("(query @ key.transpose(-2, -1) / math.sqrt(d_k)"))
attempt("float64 scores through NumPy", cell5="attention_scores = torch.from_numpy("
        "query.detach().numpy() @ key.detach().numpy().transpose(0, 2, 1) / np.sqrt(d_k))",
        cell7="attended_values = attention_weights @ value.double()",
        expect={"attention_scores": "left_torch"})
attempt("a rounded 1/8", expect={"attention_scores": "imprecise"},
        **scores("query @ key.transpose(-2, -1) * 0.12499"))
attempt("zeros for the scores", expect={"attention_scores": "constant_output"},
        by_design=AFTER_5, **scores("torch.zeros(1, 6, 6)"))
attempt("a guessed constant", expect={"attention_scores": "scalar_multiple"},
        **scores("query @ key.transpose(-2, -1) / 10"))
attempt("divided by zero", expect={"attention_scores": "nan_or_inf"}, by_design=AFTER_5,
        cell5="d = key.shape[0] - 1  # meant the feature size\n"
              "attention_scores = query @ key.transpose(-2, -1) / d")
attempt("float64 query only", expect={"projections": "wrong_dtype"},
        by_design={"attention_scores": "upstream_slip", "attention_weights": None,
                   "attended_values": None}, cell4="query = q_proj(x).double()\nkey = k_proj(x)\n"
                                 "value = v_proj(x)")
attempt("batch lost in Cell 5", expect={"attention_scores": "lost_batch_dimension"},
        **scores("query[0] @ key[0].T / math.sqrt(d_k)"))
attempt("float64 scores, Cell 7 as the lesson writes it",
        expect={"attention_scores": "wrong_dtype"}, by_design={"attended_values": "upstream_slip"},
        **scores("(query @ key.transpose(-2, -1) / math.sqrt(d_k)).double()"))
attempt("projections as NumPy arrays", expect={"projections": "not_a_tensor"},
        by_design={"attention_scores": "upstream_slip", "attention_weights": None,
                   "attended_values": None},
        cell4=projections(lambda layer: f"{layer}(x).detach().numpy()"))
attempt("float64 projections, then torch.sqrt of an int",  # its own error, not the slip
        expect={"projections": "wrong_dtype", "attention_scores": "sqrt_of_an_int"},
        by_design=AFTER_5, cell4=projections(lambda layer: f"{layer}(x).double()"),
        **scores("query @ key.transpose(-2, -1) / torch.sqrt(d_k)"))
attempt("a causal mask from a decoder tutorial", expect={"attention_scores": "causal_mask"},
        cell5="attention_scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)\n"
              "mask = torch.triu(torch.ones(6, 6, dtype=torch.bool), diagonal=1)\n"
              "attention_scores = attention_scores.masked_fill(mask, float('-inf'))")
attempt("a causal mask with -1e9", expect={"attention_scores": "causal_mask"},
        same_idea_as="a causal mask from a decoder tutorial",
        cell5="scores = torch.matmul(query, key.transpose(-2, -1)) / d_k ** 0.5\n"
              "mask = torch.tril(torch.ones(6, 6))\n"
              "attention_scores = scores.masked_fill(mask == 0, -1e9)")

# ------------------------------------------------------------- Cell 6: the function
SM = "def softmax(x, dim=-1):\n"
attempt("softmax that forgot its return", expect={"softmax": "returned_none",
                                                  "attention_weights": "returned_none"},
        by_design=AFTER_6, softmax=SM + """\
    exps = torch.exp(x - x.amax(dim=dim, keepdim=True))
    result = exps / exps.sum(dim=dim, keepdim=True)""")
attempt("weights as a NumPy array", expect={"attention_weights": "not_a_tensor"},
        by_design={"attended_values": "upstream_slip"},
        apply="attention_weights = softmax(attention_scores, dim=-1).detach().numpy()")
attempt("the function itself as the weights", expect={"attention_weights":
                                                      "function_not_called"},
        apply="attention_weights = softmax")
# Right values, but amax's saved output is changed in place: the backward pass raises.
attempt("row max zeroed in place", expect={"softmax": "backward_fails"}, softmax="""\
def softmax(x, dim=-1):
    m = x.amax(dim=dim, keepdim=True)
    m[torch.isneginf(m)] = 0
    e = torch.exp(x - m)
    return e / e.sum(dim=dim, keepdim=True).clamp_min(1e-12)""")
attempt("dim without its default (blind set 9)", expect={"softmax": "softmax_no_default_dim"},
        softmax="""\
def softmax(x, dim):
    x_max = x.amax(dim=dim, keepdim=True)
    x_max = torch.where(torch.isneginf(x_max), torch.zeros_like(x_max), x_max)
    exps = torch.exp(x - x_max)
    totals = exps.sum(dim=dim, keepdim=True)
    return exps / torch.where(totals == 0, torch.ones_like(totals), totals)""")
attempt("the max's index subtracted (blind set 10)", expect={"softmax": "shift_by_argmax"},
        softmax=SM + """\
    m = x.max(dim=dim, keepdim=True)[1]
    e = torch.exp(x - m)
    s = e.sum(dim=dim, keepdim=True)
    return e / torch.where(s == 0, torch.ones_like(s), s)""")
attempt("an epsilon added to the row sums (blind set 19)",
        expect={"softmax": "epsilon_in_sum", "attention_weights": "epsilon_in_sum"},
        softmax=SM + """\
    m = x.amax(dim=dim, keepdim=True)
    m = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
    e = torch.exp(x - m)
    return e / (e.sum(dim=dim, keepdim=True) + 1e-3)""")
attempt("a softmax computed in float16, cast back (blind set 20)",
        expect={"softmax": "softmax_half_precision", "attention_weights": "from_wrong_function"},
        softmax=SM + """\
    h = x.half()
    m = h.amax(dim=dim, keepdim=True)
    m = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
    e = torch.exp(h - m)
    s = e.sum(dim=dim, keepdim=True)
    return (e / torch.where(s == 0, torch.ones_like(s), s)).float()""")
attempt("a softmax computed in bfloat16, cast back",
        expect={"softmax": "softmax_half_precision", "attention_weights": "from_wrong_function"},
        softmax=SM + """\
    x = x.to(torch.bfloat16)
    m = x.amax(dim=dim, keepdim=True)
    m = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
    e = torch.exp(x - m)
    s = e.sum(dim=dim, keepdim=True)
    return (e / torch.where(s == 0, torch.ones_like(s), s)).to(torch.float32)""")
attempt("dropout on the weights (blind set 15)", expect={"attention_weights": "dropout_applied"},
        apply="attention_weights = torch.nn.functional.dropout(\n"
              "    softmax(attention_scores, dim=-1), p=0.1)")
attempt("an output projection after the product (blind set 21)",
        expect={"attended_values": "after_the_product"},
        cell7="attended_values = v_proj(attention_weights @ value)")
attempt("an epsilon of 1e-4 in the row sums (blind set 22)",
        expect={"attention_weights": "imprecise"},
        softmax=SM + """\
    m = x.amax(dim=dim, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(x - m)
    return e / (e.sum(dim=dim, keepdim=True) + 1e-4)""")
attempt("projections in float16 (blind set 22)", expect={"projections": "wrong_dtype"},
        cell4=projections(lambda layer: f"{layer}(x).half()"))
attempt("a torch.softmax fallback in an except branch (blind set 22)",
        expect={"softmax": "uses_builtin_softmax"},
        softmax=SM + """\
    try:
        m = x.amax(dim=dim, keepdim=True)
        m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        e = torch.exp(x - m)
        s = e.sum(dim=dim, keepdim=True)
        return e / torch.where(s == 0, torch.ones_like(s), s)
    except RuntimeError:
        return torch.softmax(x, dim=dim)""")
attempt("a corner cut out of a [64, 64] product (blind set 23)",
        expect={"attention_scores": "cut_from_product"},
        cell5="attention_scores = (query.transpose(-2, -1) @ key)[:, :6, :6] / math.sqrt(d_k)")
attempt("dropout on the output", expect={"attended_values": "dropout_applied"},
        cell7="attended_values = torch.nn.Dropout(0.2)(attention_weights @ value)")
attempt("value never assigned (blind set 18)", expect={"projections": "never_assigned"},
        cell4="query = q_proj(x)\nkey = k_proj(x)")
attempt("dim's default 0 (blind set 18)", expect={"softmax": "softmax_default_not_last"},
        softmax="def softmax(x, dim=0):\n"
                "    m = x.amax(dim=dim, keepdim=True)\n"
                "    m = torch.where(torch.isneginf(m), torch.zeros_like(m), m)\n"
                "    e = torch.exp(x - m)\n"
                "    s = e.sum(dim=dim, keepdim=True)\n"
                "    return e / torch.where(s == 0, torch.ones_like(s), s)")
attempt("a min shift with a guard (blind set 17)", expect={"softmax": "shift_not_max"},
        softmax=SM + """\
    m = x.amin(dim=dim, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(x - m)
    s = e.sum(dim=dim, keepdim=True)
    return e / torch.where(s == 0, torch.ones_like(s), s)""")
attempt("the bias taken off after the layer (blind set 17)",
        expect={"projections": "missing_bias"},
        cell4="query = q_proj(x)\nkey = k_proj(x)\nvalue = v_proj(x)\nkey -= k_proj.bias")
attempt("the row max clamped at 0 (blind set 16)", expect={"softmax": "max_clamped_at_zero"},
        softmax=SM + """\
    m = x.amax(dim=dim, keepdim=True).clamp(min=0)
    e = torch.exp(x - m)
    s = e.sum(dim=dim, keepdim=True)
    return e / torch.where(s == 0, torch.ones_like(s), s)""")
attempt("zeros for any row with a -inf (blind set 16)", expect={"softmax": "guard_on_any_inf"},
        softmax=SM + """\
    m = torch.where(torch.isinf(x), torch.full_like(x, -1e30), x).amax(dim=dim, keepdim=True)
    e = torch.exp(x - m)
    out = e / e.sum(dim=dim, keepdim=True)
    return torch.where(torch.isinf(x).any(dim=dim, keepdim=True), torch.zeros_like(out), out)""")
attempt("projections detached, then made to require grad (blind set 16)",
        expect={"projections": "detached_projection"},
        cell4="query = q_proj(x).detach().requires_grad_()\n"
              "key = k_proj(x).detach().requires_grad_()\n"
              "value = v_proj(x).detach().requires_grad_()")
attempt("an epsilon added to every exp (blind set 15)", expect={"softmax": "epsilon_in_exps"},
        softmax=SM + """\
    m = x.amax(dim=dim, keepdim=True)
    m = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
    e = torch.exp(x - m) + 1e-6
    return e / e.sum(dim=dim, keepdim=True)""")
attempt("value detached under its own name (blind set 15)",
        expect={"attended_values": "rebinds_input"},
        cell7="value = value.detach()\nattended_values = attention_weights @ value")
attempt("the max of x with -inf made 0 (blind set 15)", expect={"softmax": "max_of_replaced_inf"},
        softmax=SM + """\
    finite = torch.where(torch.isinf(x), torch.zeros_like(x), x)
    m = finite.amax(dim=dim, keepdim=True)
    e = torch.exp(x - m)
    s = e.sum(dim=dim, keepdim=True)
    return e / torch.where(s == 0, torch.ones_like(s), s)""")
attempt("no max-subtraction", expect={"softmax": "no_max_subtraction"}, softmax=SM + """\
    exps = torch.exp(x)
    return exps / exps.sum(dim=dim, keepdim=True)""")
attempt("minimum subtracted", expect={"softmax": "shift_not_max"}, softmax=SM + """\
    shifted = x - x.amin(dim=dim, keepdim=True)  # every exponent >= 0, no underflow
    exps = torch.exp(shifted)
    return exps / exps.sum(dim=dim, keepdim=True)""")
attempt("mean subtracted", expect={"softmax": "shift_not_max"},
        same_idea_as="minimum subtracted", softmax=SM + """\
    exps = torch.exp(x - x.mean(dim=dim, keepdim=True))
    return exps / exps.sum(dim=dim, keepdim=True)""")
attempt("global max", expect={"softmax": "global_max_subtraction"}, softmax=SM + """\
    exps = torch.exp(x - x.max())
    return exps / exps.sum(dim=dim, keepdim=True)""")
attempt("dim ignored", expect={"softmax": "ignores_dim"}, softmax=SM + """\
    x_max = x.amax(dim=-1, keepdim=True)
    x_max = torch.where(torch.isneginf(x_max), torch.zeros_like(x_max), x_max)
    exps = torch.exp(x - x_max)
    totals = exps.sum(dim=-1, keepdim=True)
    return exps / torch.where(totals == 0, torch.ones_like(totals), totals)""")
attempt("torch.softmax inside", expect={"softmax": "uses_builtin_softmax"},
        softmax=SM + "    return torch.softmax(x, dim=dim)")
attempt("F.softmax inside", expect={"softmax": "uses_builtin_softmax"},
        same_idea_as="torch.softmax inside",
        softmax=SM + "    return torch.nn.functional.softmax(x, dim=dim)")
attempt("Tensor.softmax inside", expect={"softmax": "uses_builtin_softmax"},
        same_idea_as="torch.softmax inside", softmax=SM + "    return x.softmax(dim)")
attempt("exp of log_softmax", expect={"softmax": "uses_builtin_softmax"},
        same_idea_as="torch.softmax inside",
        softmax=SM + "    return torch.log_softmax(x, dim=dim).exp()")
attempt("nn.Softmax module", expect={"softmax": "uses_builtin_softmax"},
        same_idea_as="torch.softmax inside", softmax=SM + "    return torch.nn.Softmax(dim)(x)")
attempt("scaled_dot_product_attention with the scores as its mask",
        expect={"softmax": "softmax_not_allowed_op"}, same_idea_as="torch.softmax inside",
        softmax=SM + """\
    xt = x.movedim(dim, -1)  # (..., n): every slice along dim becomes a row
    n = xt.shape[-1]
    q, k = torch.zeros(*xt.shape[:-1], 1), torch.zeros(*xt.shape[:-2], n, 1)
    out = torch.nn.functional.scaled_dot_product_attention(q, k, torch.eye(n), attn_mask=xt)
    return out.movedim(-1, dim)""")
attempt("complex exponentials", expect={"softmax": "bad_output",
                                        "attention_weights": "bad_type"},
        by_design=AFTER_6, softmax=SM + """\
    z = torch.complex(x - x.amax(dim=dim, keepdim=True), torch.zeros_like(x))
    e = torch.exp(z)
    return e / e.sum(dim=dim, keepdim=True)""")
attempt("keepdim missing in the max", expect={"softmax": "keepdim_missing",
                                              "attention_weights": "keepdim_missing"},
        softmax=SM + """\
    x_max = x.amax(dim=dim)
    exps = torch.exp(x - x_max)
    return exps / exps.sum(dim=dim, keepdim=True)""")
attempt("keepdim missing in the sum", expect={"softmax": "keepdim_missing",
                                              "attention_weights": "keepdim_missing"},
        softmax=SM + """\
    exps = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return exps / exps.sum(dim=dim)""")
attempt("max over the last axis, sum over dim", expect={"softmax": "max_and_sum_axes_differ"},
        softmax=SM + """\
    x_max = x.amax(dim=-1, keepdim=True)
    x_max = torch.where(torch.isneginf(x_max), torch.zeros_like(x_max), x_max)
    exps = torch.exp(x - x_max)
    totals = exps.sum(dim=dim, keepdim=True)
    return exps / torch.where(totals == 0, torch.ones_like(totals), totals)""")
attempt("max over the queries", expect={"softmax": "max_and_sum_axes_differ",
                                        "attention_weights": "max_and_sum_axes_differ"},
        softmax=SM + """\
    exps = torch.exp(x - x.amax(dim=-2, keepdim=True))
    return exps / exps.sum(dim=dim, keepdim=True)""")
# (on the lesson's [1, 6, 6] scores a max over axis 0 is each score itself: uniform weights,
# told as made with the wrong function)
attempt("max over axis 0 (blind set 7)", expect={"softmax": "max_and_sum_axes_differ",
                                                 "attention_weights": "from_wrong_function"},
        softmax=SM + """\
    exps = torch.exp(x - x.amax(dim=0, keepdim=True))
    return exps / exps.sum(dim=dim, keepdim=True)""")
attempt("sum over everything", expect={"softmax": "whole_tensor_softmax",
                                       "attention_weights": "whole_tensor_softmax"},
        softmax=SM + """\
    exps = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return exps / exps.sum()""")
attempt("exp only", expect={"softmax": "exp_without_normalising",
                            "attention_weights": "exp_without_normalising"},
        softmax=SM + "    return torch.exp(x - x.amax(dim=dim, keepdim=True))")
attempt("no exp", expect={"softmax": "normalising_without_exp",
                          "attention_weights": "normalising_without_exp"}, softmax=SM + """\
    shifted = x - x.amax(dim=dim, keepdim=True)
    return shifted / shifted.sum(dim=dim, keepdim=True)""")
attempt("log-softmax", expect={"softmax": "log_softmax", "attention_weights": "log_softmax"},
        softmax=SM + """\
    shifted = x - x.amax(dim=dim, keepdim=True)
    return shifted - torch.log(torch.exp(shifted).sum(dim=dim, keepdim=True))""")
attempt("ReLU instead of exp", expect={"softmax": "non_exp_map",
                                       "attention_weights": "non_exp_map"}, softmax=SM + """\
    r = torch.relu(x)
    return r / r.sum(dim=dim, keepdim=True)""")
attempt("sigmoid", expect={"softmax": "non_exp_map", "attention_weights": "non_exp_map"},
        softmax=SM + "    return torch.sigmoid(x)")
attempt("squares", expect={"softmax": "non_exp_map", "attention_weights": "non_exp_map"},
        same_idea_as="ReLU instead of exp",
        softmax=SM + "    return x ** 2 / (x ** 2).sum(dim=dim, keepdim=True)")
attempt("exp(max - x)", expect={"softmax": "negated_scores",
                                "attention_weights": "negated_scores"}, softmax=SM + """\
    exps = torch.exp(x.amax(dim=dim, keepdim=True) - x)
    return exps / exps.sum(dim=dim, keepdim=True)""")
attempt("plain stable softmax, no guard", expect={"softmax": "fully_masked_row"},
        softmax=SM + """\
    exps = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return exps / exps.sum(dim=dim, keepdim=True)""")
attempt("logsumexp without a guard", expect={"softmax": "fully_masked_row"},
        softmax=SM + "    return torch.exp(x - torch.logsumexp(x, dim=dim, keepdim=True))")
attempt("-1e9 for -inf", expect={"softmax": "finite_mask_value"}, softmax=SM + """\
    x = torch.where(torch.isinf(x), torch.full_like(x, -1e9), x)
    exps = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return exps / exps.sum(dim=dim, keepdim=True)""")
attempt("in-place subtraction", expect={"softmax": "mutates_input"}, softmax=SM + """\
    x -= x.amax(dim=dim, keepdim=True).nan_to_num(neginf=0.0)
    exps = torch.exp(x)
    return exps / exps.sum(dim=dim, keepdim=True).clamp_min(1e-30)""")
attempt("in-place exp_", expect={"softmax": "mutates_input"},
        same_idea_as="in-place subtraction", softmax=SM + """\
    m = x.amax(dim=dim, keepdim=True).nan_to_num(neginf=0.0)
    e = x.sub_(m).exp_()
    return e / e.sum(dim=dim, keepdim=True).clamp_min(1e-30)""")
attempt("moved to the last axis and not back", expect={"softmax": "softmax_axes_moved"},
        softmax=SM + """\
    z = x.transpose(dim, -1)
    m = z.amax(dim=-1, keepdim=True)
    m = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
    e = torch.exp(z - m)
    s = e.sum(dim=-1, keepdim=True)
    return e / torch.where(s == 0, torch.ones_like(s), s)""")
attempt("no dim parameter", expect={"softmax": "dim_not_accepted"},
        softmax="""\
def softmax(x):
    x_max = x.amax(dim=-1, keepdim=True)
    x_max = torch.where(torch.isneginf(x_max), torch.zeros_like(x_max), x_max)
    exps = torch.exp(x - x_max)
    totals = exps.sum(dim=-1, keepdim=True)
    return exps / torch.where(totals == 0, torch.ones_like(totals), totals)""",
        apply="attention_weights = softmax(attention_scores)")
attempt("math.exp on a tensor", expect={"softmax": "softmax_raises",
                                       "attention_weights": "cell_raised"},
        by_design=AFTER_6, softmax=SM + """\
    exps = math.exp(x - x.amax(dim=dim, keepdim=True))
    return exps / exps.sum(dim=dim, keepdim=True)""")
attempt("torch.max without .values", expect={"softmax": "max_returns_tuple",
                                             "attention_weights": "max_returns_tuple"},
        by_design=AFTER_6, softmax=SM + """\
    x_max = torch.max(x, dim=dim, keepdim=True)
    exps = torch.exp(x - x_max)
    return exps / exps.sum(dim=dim, keepdim=True)""")
attempt("returns NumPy", expect={"softmax": "numpy_of_grad_tensor",
                                 "attention_weights": "numpy_of_grad_tensor"},
        by_design=AFTER_6, softmax=SM + """\
    exps = torch.exp(x - x.amax(dim=dim, keepdim=True).nan_to_num(neginf=0.0))
    return (exps / exps.sum(dim=dim, keepdim=True).clamp_min(1e-30)).numpy()""")
attempt("returns the sums too", expect={"softmax": "bad_output",
                                        "attention_weights": "bad_type"},
        by_design=AFTER_6, softmax=SM + """\
    exps = torch.exp(x - x.amax(dim=dim, keepdim=True).nan_to_num(neginf=0.0))
    totals = exps.sum(dim=dim, keepdim=True).clamp_min(1e-30)
    return exps / totals, totals""")

# ---------------------------------------------------------- Cell 6: the application
attempt("softmax over dim=1", expect={"attention_weights": "softmax_wrong_axis"},
        apply="attention_weights = softmax(attention_scores, dim=1)")
attempt("softmax over the batch axis", expect={"attention_weights": "softmax_wrong_axis"},
        by_design={"attended_values": "degenerate_upstream"},
        apply="attention_weights = softmax(attention_scores, dim=0)")
attempt("softmax not applied", expect={"attention_weights": "softmax_not_applied"},
        apply="attention_weights = attention_scores")
attempt("scaled after the softmax", expect={"attention_scores": "no_scaling",
                                            "attention_weights": "scaling_after_softmax"},
        cell5="attention_scores = query @ key.transpose(-2, -1)",
        apply="attention_weights = softmax(attention_scores, dim=-1) / math.sqrt(d_k)")
attempt("scores scaled again", expect={"attention_weights": "scores_scaled_again"},
        apply="attention_weights = softmax(attention_scores / math.sqrt(d_k), dim=-1)")
attempt("the unscaled product", expect={"attention_weights": "unscaled_scores_used"},
        apply="attention_weights = softmax(query @ key.transpose(-2, -1), dim=-1)")
attempt("softmax twice", expect={"attention_weights": "softmax_twice"},
        apply="attention_weights = softmax(softmax(attention_scores, dim=-1), dim=-1)")
attempt("weights transposed in Cell 6", expect={"attention_weights":
                                                "weights_transposed_in_cell6"},
        apply="attention_weights = softmax(attention_scores, dim=-1).transpose(-2, -1)")
attempt("batch lost in Cell 6", expect={"attention_weights": "lost_batch_dimension"},
        apply="attention_weights = softmax(attention_scores, dim=-1)[0]")
attempt("float64 weights", expect={"attention_weights": "wrong_dtype"},
        apply="attention_weights = softmax(attention_scores.double(), dim=-1)",
        cell7="attended_values = attention_weights @ value.double()")
attempt("softmax = softmax(...)", expect={"softmax": "softmax_shadowed"},
        apply="softmax = softmax(attention_scores, dim=-1)\nattention_weights = softmax")
attempt("a typo in the application", expect={"attention_weights": "undefined_name"},
        by_design=AFTER_6, apply="attention_weights = softmax(attention_score, dim=-1)")
attempt("uniform weights", expect={"attention_weights": "constant_output"},
        by_design=AFTER_6, apply="attention_weights = torch.full((1, 6, 6), 1 / 6)")

# ---------------------------------------------------------------------- Cell 7 wrong
VALUES = "attended_values = {}"


def values(expr, **kw):
    return dict(cell7=VALUES.format(expr), **kw)


attempt("weights transposed", expect={"attended_values": "weights_transposed"},
        **values("attention_weights.transpose(-2, -1) @ value"))
attempt("scores instead of weights", expect={"attended_values": "scores_instead_of_weights"},
        **values("attention_scores @ value"))
attempt("query instead of value", expect={"attended_values": "query_instead_of_value"},
        **values("attention_weights @ query"))
attempt("key instead of value", expect={"attended_values": "key_instead_of_value"},
        **values("attention_weights @ key"))
attempt("x instead of value", expect={"attended_values": "embeddings_instead_of_value"},
        **values("attention_weights @ x"))
attempt("value alone", expect={"attended_values": "values_not_weighted"}, **values("value"))
attempt("scaled in Cell 7", expect={"attended_values": "output_scaled"},
        **values("attention_weights @ value / math.sqrt(d_k)"))
attempt("mean over the keys", expect={"attended_values": "mean_instead_of_sum"},
        **values("(attention_weights.unsqueeze(-1) * value.unsqueeze(1)).mean(dim=2)"))
attempt("batch lost in Cell 7", expect={"attended_values": "lost_batch_dimension"},
        **values("(attention_weights @ value)[0]"))
attempt("float64 values", expect={"attended_values": "wrong_dtype"},
        **values("(attention_weights @ value).double()"))
attempt("weights cast to float64 for precision", expect={"attended_values": "mixed_dtypes"},
        **values("attention_weights.double() @ value"))
attempt("NumPy values", expect={"attended_values": "not_a_tensor"},
        **values("(attention_weights @ value).detach().numpy()"))
attempt("value @ weights", expect={"attended_values": "values_before_weights"},
        **values("value @ attention_weights"))
attempt("torch.matmul(value, weights)", expect={"attended_values": "values_before_weights"},
        same_idea_as="value @ weights", **values("torch.matmul(value, attention_weights)"))
attempt("one sentence's value times its weights", expect={"attended_values": "operands_swapped"},
        **values("(value[0] @ attention_weights[0]).unsqueeze(0)"))
attempt("one row object appended for every query (blind set 7)",
        expect={"attended_values": "range_off_by_one"}, cell7="""\
rows = []
acc = torch.zeros(value.shape[-1])
for i in range(6):
    acc.zero_()
    for j in range(6):
        acc += attention_weights[0, i, j] * value[0, j]
    rows.append(acc)
attended_values = torch.stack(rows).unsqueeze(0)""")
attempt("the weights recomputed from query and key (blind set 7)",
        expect={"attention_weights": "recomputed_output"},
        apply="attention_weights = softmax(query @ key.transpose(-2, -1) / math.sqrt(d_k))")
attempt("an axis added to right weights (blind set 14)",
        expect={"attention_weights": "extra_axis"},
        apply="attention_weights = softmax(attention_scores).unsqueeze(0)")
attempt("rows stacked along the features, then reshaped (blind set 14)",
        expect={"attended_values": "numbers_rearranged"},
        cell7="rows = [attention_weights[0, i] @ value[0] for i in range(6)]\n"
              "attended_values = torch.stack(rows, dim=1).reshape(1, 6, 64)")
attempt("TensorFlow's transpose_b (blind set 14)",
        expect={"attention_scores": "unexpected_keyword"},
        cell5="attention_scores = torch.matmul(query, key, transpose_b=True) / math.sqrt(d_k)")
attempt(".t() on the batched keys (blind set 14)",
        expect={"attention_scores": "dot_t_on_3d"},
        cell5="attention_scores = torch.mm(query, key.t()) / math.sqrt(d_k)")
attempt("deep copies of the layers (blind set 14)",
        expect={"projections": "copied_layer"},
        cell4="import copy\n"
              "q_layer, k_layer, v_layer = (copy.deepcopy(layer) for layer in "
              "(q_proj, k_proj, v_proj))\n"
              "query, key, value = q_layer(x), k_layer(x), v_layer(x)")
attempt("a fused projection split feature by feature (blind set 14)",
        expect={"projections": "layers_mixed"},
        cell4="w_qkv = torch.cat([q_proj.weight, k_proj.weight, v_proj.weight])\n"
              "b_qkv = torch.cat([q_proj.bias, k_proj.bias, v_proj.bias])\n"
              "query, key, value = (x @ w_qkv.T + b_qkv).view(1, 6, 64, 3).unbind(-1)")
attempt("matmul with out= a name that holds None (blind set 14)",
        expect={"attended_values": "result_not_assigned"},
        cell7="torch.matmul(attention_weights, value, out=attended_values)")
attempt("only the keys scaled, by the fourth root of d_k (blind set 13)",
        expect={"attention_scores": "constant_factor"},
        cell5="attention_scores = query @ (key / d_k ** 0.25).transpose(-2, -1)")
attempt("the value transposed in the aggregation (blind set 13)",
        expect={"attended_values": "operand_transposed"},
        cell7="attended_values = torch.bmm(attention_weights, value.transpose(1, 2))")
attempt("the key transposed under its own name (blind set 9)",
        expect={"attention_scores": "rebinds_input"},
        cell5="key = key.transpose(-2, -1)\nattention_scores = query @ key / math.sqrt(d_k)")
attempt("torch.mm on the batch (blind set 9)", expect={"attended_values": "mm_on_batches"},
        **values("torch.mm(attention_weights, value)"))
attempt("one zero buffer for the three projections", expect={"projections": "outputs_aliased"},
        by_design=DOWNSTREAM_OF_4, cell4="""\
query = key = value = torch.zeros(1, 6, 64)
query[:] = q_proj(x)
key[:] = k_proj(x)
value[:] = v_proj(x)""")
attempt("a loop over len() of the batch (blind set 10)",
        expect={"attended_values": "range_off_by_one"}, cell7="""\
attended_values = torch.zeros(1, 6, 64)
for i in range(len(attention_weights)):
    attended_values[0, i] = attention_weights[0, i] @ value[0]""")
attempt("d_k made its own square root (blind set 10)",
        expect={"attention_scores": "rebinds_input"}, cell5="""\
d_k = math.sqrt(d_k)
attention_scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)""")
attempt("the softmax called, its result dropped (blind set 11)",
        expect={"attention_weights": "result_not_assigned"},
        apply="softmax(attention_scores, dim=-1)")
attempt("a key loop from 1 (blind set 12)", expect={"attended_values": "range_off_by_one"},
        cell7="""\
attended_values = torch.zeros(1, 6, 64)
for j in range(1, 6):
    attended_values += attention_weights[:, :, j:j + 1] * value[:, j:j + 1, :]""")
attempt("one layer for all three, chained (blind set 12)",
        expect={"projections": "outputs_aliased"}, by_design=DOWNSTREAM_OF_4,
        cell4="query = key = value = q_proj(x)")
attempt("values first", expect={"attended_values": "values_first"},
        **values("value.transpose(-2, -1) @ attention_weights.transpose(-2, -1)"))
attempt("value.T", expect={"attended_values": "axes_permuted"},
        **values("attention_weights @ value.T"))
attempt("elementwise weights times values", expect={"attended_values": "elementwise_product"},
        **values("attention_weights * value"))
attempt("an integer result (blind set 6)", expect={"attended_values": "integer_result"},
        **values("(attention_weights @ value).long()"))
attempt("summed over the queries", expect={"attended_values": "extra_reduction"},
        **values("(attention_weights @ value).sum(dim=1, keepdim=True)"))
attempt("softmax again in Cell 7", expect={"attended_values": None},
        **values("torch.softmax(attention_weights, dim=-1) @ value"))
attempt("zeros everywhere",
        cell4="query = torch.zeros(1, 6, 64)\nkey = torch.zeros(1, 6, 64)\n"
              "value = torch.zeros(1, 6, 64)",
        expect={"projections": "constant_output"}, by_design=DOWNSTREAM_OF_4)


# ---------------------------------------------------------------------- running
def sources(a: Attempt) -> dict:
    """The step cells' code for attempt ``a`` (the reference where it gives none)."""
    codes = dict(REF)
    for part in ("cell4", "cell5", "softmax", "apply", "cell7"):
        if part not in a.code:
            continue
        cid, code = PART_CELL[part], a.code[part].rstrip("\n") + "\n"
        text = codes[cid]
        blocks = list(_BLOCK.finditer(text))
        if part == "softmax":
            start = text.index("def softmax(")
            codes[cid] = text[:start] + code + text[blocks[0].end():]
        else:
            block = blocks[-1]
            codes[cid] = text[:block.start()] + code + text[block.end():]
    return codes


def roundtrip(data):
    """``data`` after np.savez and np.load(allow_pickle=False)."""
    buf = io.BytesIO()
    np.savez(buf, **data)
    buf.seek(0)
    with np.load(buf, allow_pickle=False) as npz:
        return {k: npz[k] for k in npz.files}


@dataclass
class Record:
    """An attempt and what each grade cell's checks said, as the test cell ran."""

    attempt: Attempt
    visible: dict = field(default_factory=dict)  # step -> CheckResult (strict=False)
    strict: dict = field(default_factory=dict)  # step -> CheckResult (strict=True)
    explicit: dict = field(default_factory=dict)  # grade id -> [dict] of the cell's calls
    observed: dict = field(default_factory=dict)  # grade id -> the replay's, judged strictly
    reloaded: dict = field(default_factory=dict)  # grade id -> after savez/load

    def problems(self) -> list:
        """What is wrong with the checks' verdicts on this attempt (empty: all good)."""
        a, out = self.attempt, []
        for step in STEPS:
            strict, visible = self.strict[step], self.visible[step]
            full = strict.score == strict.max_score
            if step in a.expect:
                want = a.expect[step]
                if full:
                    out.append(f"false positive: {step} got full marks")
                if want is not None and want not in strict.diagnoses:
                    out.append(f"{step}: expected {want}, named {strict.diagnoses or 'nothing'}")
                if want is not None and want not in visible.diagnoses:
                    out.append(f"{step}: the visible check does not show {want}")
            elif not full:  # (each cell is replayed on correct inputs: no exclusions)
                out.append(f"{'cascade' if a.expect else 'correct lost points'}: {step} "
                           f"{strict.score}/{strict.max_score} ({strict.mistake})")
        if a.note and not any(a.note in n for r in self.strict.values() for n in r.notes):
            out.append(f"no note containing {a.note!r}")
        return out

    @property
    def named(self):
        return all(want is not None and want in self.strict[step].diagnoses
                   for step, want in self.attempt.expect.items())


#: The second run's seed in the corpus and the blind sets (grading draws one afresh for
#: every submission; tests/test_replay.py shows a right cell stays right for any draw).
SECOND_RUN_SEED = 20261124


@lru_cache(maxsize=1)
def release_setup() -> dict:
    """The set-up namespace of the reference's set-up cells, as the grader's replay has it."""
    return replay.setup_namespace([REF[c] for c in verify.LESSON.setup_cells])


def run_attempt(a: Attempt) -> Record:
    """Each step cell replayed on its own (src/replay.py), as grading judges it; then the
    cells run in order in an IPython shell, where the test cells' own calls (the live
    check) give ``explicit``."""
    with replay.pinned_seed(SECOND_RUN_SEED):  # (the live check's replay must match)
        return _run_attempt(a)


def _run_attempt(a: Attempt) -> Record:
    rec, codes = Record(a), sources(a)
    answer = replay.replay_in_process(verify.LESSON, codes, release_setup())
    for cid in verify.LESSON.by_cell:
        gid = GRADE_OF_CELL[cid]
        data, own = answer[cid], answer.get(f"own:{cid}")
        visible = verify.judge_replay(gid, data, own).results
        for step, v, s in zip(verify.GRADE_CELLS[gid], visible,
                              verify.judge_replay(gid, data, own, strict=True).results):
            rec.visible[step], rec.strict[step] = v, s
        rec.observed[gid] = [r.to_dict() for r in rec_strict(rec, gid)]
        rec.reloaded[gid] = [r.to_dict() for r in verify.judge_replay(
            gid, roundtrip(data), own and roundtrip(own), strict=True).results]

    def after(cell_id, ns):
        gid = GRADE_OF_CELL.get(cell_id)
        if gid is not None:
            rec.explicit[gid] = [r.to_dict() for r in test_cell_results(gid, ns)]

    run_steps(codes, after=after)
    return rec


def rec_strict(rec, gid):
    """The graded (strict) results of check cell ``gid`` in ``rec``, in order."""
    return [rec.strict[step] for step in verify.GRADE_CELLS[gid]]


def run_corpus(attempts=None) -> list[Record]:
    return [run_attempt(a) for a in (attempts or ATTEMPTS)]


def figure(records) -> str:
    """The corpus in one line: correct ones with full marks; wrong ones never rewarded,
    never charged twice, and named."""
    counted = [r for r in records if not r.attempt.same_idea_as]
    correct = [r for r in counted if r.attempt.correct]
    wrong = [r for r in counted if not r.attempt.correct]
    full = sum(not r.problems() for r in correct)
    false_pos = sum(any(p.startswith("false positive") for p in r.problems()) for r in wrong)
    cascades = sum(any(p.startswith("cascade") for p in r.problems()) for r in wrong)
    named = sum(r.named for r in wrong)
    spellings = len(records) - len(counted)
    return (f"corpus: {len(counted)} attempts ({spellings} more spellings not counted) | "
            f"{len(correct)} correct alternatives: {full} with full marks | {len(wrong)} "
            f"wrong: {false_pos} false positives, {cascades} cascades, {named} named "
            f"({100 * named / max(1, len(wrong)):.0f} %)")


def main():
    records = run_corpus()
    for r in records:
        a = r.attempt
        mark = "ok " if not r.problems() else "BAD"
        says = ", ".join(f"{s}={r.strict[s].mistake}" for s in STEPS if r.strict[s].mistake)
        print(f"{mark} {a.name:<46} {says or 'full marks'}")
        for p in r.problems():
            print(f"      {p}")
    print(figure(records))


if __name__ == "__main__":
    main()
