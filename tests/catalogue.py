"""The catalogue of mistakes as edits of the reference's own cells.

Each entry: (mistake id, {cell id: [(old, new)]}, the check that must name it,
other checks that fail by design). Used by tests/test_verify.py (in-process)
and by the graded cohorts (real nbgrader).
"""

PROJ = "query = q_proj(x)"
SCALE = "attention_scores = raw_scores / math.sqrt(d_k)"
RAW = "raw_scores = query @ key.transpose(-2, -1)"
EXPS = "exps = torch.exp(x - x_max)"
RETURN = "return exps / torch.where(totals == 0, torch.ones_like(totals), totals)"
APPLY = "attention_weights = softmax(attention_scores, dim=-1)"
AGG = "attended_values = attention_weights @ value"

# (mistake id, {cell: [(old, new)]}, check that names it, other checks that fail by design)
CATALOGUE = [
    ("swapped_projection", {"cell4_projections": [("key = k_proj(x)", "key = q_proj(x)")]},
     "projections", ()),
    ("no_projection", {"cell4_projections": [("value = v_proj(x)", "value = x")]},
     "projections", ()),
    ("missing_bias", {"cell4_projections": [(PROJ, "query = x @ q_proj.weight.T")]},
     "projections", ()),
    ("weight_not_transposed",
     {"cell4_projections": [(PROJ, "query = x @ q_proj.weight + q_proj.bias")]},
     "projections", ()),
    ("transposed_product",
     {"cell5_scores": [(RAW, "raw_scores = key @ query.transpose(-2, -1)")]},
     "attention_scores", ()),
    ("no_scaling", {"cell5_scores": [(SCALE, "attention_scores = raw_scores")]},
     "attention_scores", ()),
    ("scaled_by_dk", {"cell5_scores": [(SCALE, "attention_scores = raw_scores / d_k")]},
     "attention_scores", ()),
    ("multiplied_by_sqrt_dk",
     {"cell5_scores": [(SCALE, "attention_scores = raw_scores * math.sqrt(d_k)")]},
     "attention_scores", ()),
    ("softmax_in_scores",
     {"cell5_scores": [(SCALE, "attention_scores = torch.softmax(raw_scores, -1) / 8")]},
     "attention_scores", ()),
    # Cell 7 cannot even run on [1, 6, 64] weights; Cell 6 is right given its input.
    ("elementwise_scores", {"cell5_scores": [(RAW, "raw_scores = query * key")]},
     "attention_scores", ("attended_values",)),
    ("softmax_wrong_axis", {"cell6_softmax": [(APPLY, APPLY.replace("-1", "1"))]},
     "attention_weights", ()),
    ("exp_without_normalising", {"cell6_softmax": [(RETURN, "return exps")]},
     "attention_weights", ("softmax",)),
    ("normalising_without_exp", {"cell6_softmax": [(EXPS, "exps = x")]},
     "attention_weights", ("softmax",)),
    ("scaling_after_softmax",
     {"cell5_scores": [(SCALE, "attention_scores = raw_scores")],
      "cell6_softmax": [(APPLY, APPLY + " / math.sqrt(d_k)")]},
     "attention_weights", ("attention_scores",)),
    ("softmax_not_applied",
     {"cell6_softmax": [(APPLY, "attention_weights = attention_scores")]},
     "attention_weights", ()),
    ("no_max_subtraction", {"cell6_softmax": [(EXPS, "exps = torch.exp(x)")]},
     "softmax", ()),
    ("mutates_input",
     {"cell6_softmax": [(EXPS, "x -= x_max\n    exps = torch.exp(x)")]},
     "softmax", ("attention_scores",)),  # the scores got overwritten in place
    ("weights_transposed",
     {"cell7_values": [(AGG, "attended_values = attention_weights.transpose(-2, -1) @ value")]},
     "attended_values", ()),
    ("scores_instead_of_weights",
     {"cell7_values": [(AGG, "attended_values = attention_scores @ value")]},
     "attended_values", ()),
    ("query_instead_of_value",
     {"cell7_values": [(AGG, "attended_values = attention_weights @ query")]},
     "attended_values", ()),
    ("key_instead_of_value",
     {"cell7_values": [(AGG, "attended_values = attention_weights @ key")]},
     "attended_values", ()),
    ("values_not_weighted", {"cell7_values": [(AGG, "attended_values = value")]},
     "attended_values", ()),
    ("lost_batch_dimension",
     {"cell7_values": [(AGG, "attended_values = (attention_weights @ value)[0]")]},
     "attended_values", ()),
    ("wrong_dtype",
     {"cell7_values": [(AGG, "attended_values = (attention_weights @ value).double()")]},
     "attended_values", ()),
    ("nan_or_inf",
     {"cell5_scores": [(SCALE, "attention_scores = raw_scores / 0.0")]},
     "attention_scores", ("attention_weights", "attended_values")),
]
