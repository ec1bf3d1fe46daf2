"""The catalogue of mistakes, injected two ways.

1. ``CATALOGUE``: a mistake as an edit of the reference's own cells. Each entry:
   (mistake id, {cell id: [(old, new)]}, the check that must name it, other
   checks that fail by design). Used by tests/test_verify.py (in-process) and
   by the graded cohorts (real nbgrader). The wider set of student attempts
   is tests/corpus.py.
2. :func:`inject`: every entry of ``verify.MISTAKES``, reproduced from the
   step's inputs as the entry says (``reproduce``, ``fns``, ``factor``, an
   ``example`` error, or the fact its ``kind`` names) and written into the
   observed data of a right answer. Used by tests/test_verify.py to show that
   every entry is named by its own diagnosis and that none shadows another.
"""

import numpy as np

import verify
from src.lessons import attention as lesson

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
    # Each later cell is replayed on the reference: nothing downstream fails.
    ("elementwise_scores", {"cell5_scores": [(RAW, "raw_scores = query * key")]},
     "attention_scores", ()),
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
    # The scores are overwritten in place when Cell 6 runs, after Cell 5's check.
    ("mutates_input",
     {"cell6_softmax": [(EXPS, "x -= x_max\n    exps = torch.exp(x)")]},
     "softmax", ()),
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
     "attention_scores", ()),
]

# ----------------------------------------------------------- data injection
#: The tensor each step's injection changes (the one a step's mistake is seen in).
TARGET = {"projections": "key", "attention_scores": "attention_scores",
          "attention_weights": "attention_weights", "attended_values": "attended_values"}
TENSOR_STEPS = list(TARGET)
EXAMPLE_ERROR = ("ZeroDivisionError: float division by zero",
                 "attention_scores = raw_scores / (d_k - 64)")


NEEDS_INPUTS = ("upstream_slip", "returned_none")


def steps_of(mistake):
    """The checks an entry is injected into: its own, or every tensor check for "any"."""
    if mistake.kind == "degenerate":  # (the softmax of constant scores is constant: it is
        return ["attention_scores", "attended_values"]  # named constant_output)
    if mistake.kind in ("detached_output", "left_torch", "recomputed"):  # (Cell 4: its own)
        return TENSOR_STEPS[1:]
    if mistake.kind == "variant":  # (Cell 6's softmax is probed on its own inputs)
        return ["projections", "attention_scores", "attended_values"]
    if mistake.kind == "backward":  # (in Cell 6 it is the softmax's own mistake)
        return ["projections", "attention_scores", "softmax", "attended_values"]
    if mistake.kind == "discarded":  # (Cell 6's weights: softmax(...) on its own)
        return ["attention_weights"]
    if mistake.kind == "aliased":  # (Cell 4's three outputs)
        return ["projections"]
    if mistake.kind == "no_default":  # (the function's own)
        return ["softmax"]
    if mistake.kind == "rebound":  # (a name of an earlier cell: the steps after Cell 4)
        return ["attention_scores", "attended_values"]
    if mistake.kind == "mutated_input":  # (in Cell 6 it is the softmax's own mistake)
        return [s for s in TENSOR_STEPS if s != "attention_weights"]
    if mistake.kind in ("swapped", "transposed"):  # (its example's line: Cell 7's product)
        return ["attended_values"]
    if mistake.step == "any":  # these are about a step's inputs: it must have some
        return TENSOR_STEPS[1:] if mistake.kind in NEEDS_INPUTS else TENSOR_STEPS
    if mistake.fns and mistake.in_weights:
        ref = lesson.reference()
        weights = mistake.fns[0](ref["attention_scores"], -1)
        if not np.allclose(weights, ref["attention_weights"], equal_nan=True):
            return [mistake.step, "attention_weights"]
    return [mistake.step]


def _info(data, prefix, **fields):
    info = list(data.get(f"{prefix}.info", [""] * len(verify.INFO_FIELDS)))
    info += [""] * (len(verify.INFO_FIELDS) - len(info))
    for k, v in fields.items():
        info[verify.INFO_FIELDS.index(k)] = v
    data[f"{prefix}.info"] = np.array(info)


def _set_values(data, prefix, arr, dtype=np.float32):
    arr = np.asarray(arr).astype(dtype)
    data[f"{prefix}.values"] = arr
    data.pop(f"{prefix}.shape", None)
    _info(data, prefix, dtype=str(arr.dtype))


def _drop(data, prefix):
    for key in [k for k in data if k.startswith(prefix + ".")]:
        del data[key]


def _reference_inputs(name):
    return dict(lesson.reference(), name=name)


def _inject_softmax(m, data):
    for i, probe in enumerate(lesson.probes()):
        prefix = f"softmax.p{i}.out"
        try:
            out = m.fns[0](probe.x.copy(), probe.dim)
        except (ValueError, IndexError, TypeError) as exc:
            _drop(data, prefix)
            data[f"softmax.p{i}.raised"] = np.array([f"ValueError: {exc}", ""])
            continue
        data.pop(f"softmax.p{i}.raised", None)
        _info(data, prefix, kind="tensor", type="Tensor", layout="strided", device="cpu")
        _set_values(data, prefix, out)


def _behaviour_outputs(mistake_id, i, probe):
    want = probe.expected
    if mistake_id == "ignores_its_input":
        return lesson.reference()["attention_weights"]
    if mistake_id == "softmax_mishandles_inf" and np.isneginf(probe.x).any():
        return np.where(np.isneginf(probe.x), np.nan, want)
    if mistake_id == "softmax_masks_too_much" and np.isneginf(probe.x).any():
        return np.zeros_like(want)
    if mistake_id == "softmax_overflows" and i in (1, 2):
        return np.full_like(want, np.nan)
    if mistake_id == "softmax_last_axis_only" and probe.dim not in (-1, probe.x.ndim - 1):
        return want * 0.5
    if mistake_id == "softmax_fixed_layout" and not (
            probe.x.ndim == 3 and probe.dim in (-1, 2)):
        return want * 0.5
    if mistake_id == "softmax_half_precision":
        return np.asarray(want, np.float16).astype(np.float64)
    if i == 0 and mistake_id == "softmax_negative":
        return want - 0.5
    if i == 0 and mistake_id == "softmax_not_normalised":
        return want * 0.9
    if i == 0 and mistake_id == "softmax_not_exp":
        return want ** 2 / (want ** 2).sum(axis=probe.dim, keepdims=True)
    return want


def _inject_behaviour(mistake_id, data):
    for i, probe in enumerate(lesson.probes()):
        prefix = f"softmax.p{i}.out"
        data.pop(f"softmax.p{i}.raised", None)
        _info(data, prefix, kind="tensor", type="Tensor", layout="strided", device="cpu")
        _set_values(data, prefix, _behaviour_outputs(mistake_id, i, probe))


def inject(mistake_id, step, data):
    """A copy of ``data`` (the observation of a right answer) with the mistake made."""
    m = verify.MISTAKES[mistake_id]
    data = dict(data)
    name = TARGET.get(step, "softmax")
    prefix = f"t.{name}"
    values = data.get(f"{prefix}.values")
    if m.kind == "builtin":
        data["softmax.calls"] = np.array(["torch.softmax", "Tensor.exp"])
    elif m.kind == "course_code" and step == "softmax":
        data["softmax.course_code"] = np.array(["src/replay.py: reference_softmax"])
    elif m.kind == "course_code":
        data["replay.course_code"] = np.array(["src/replay.py: reference_softmax"])
    elif m.kind == "not_allowed":  # the nodes F.scaled_dot_product_attention leaves
        data["softmax.nodes"] = np.array(["SafeSoftmaxBackward0", "MmBackward0", "AddBackward0"])
    elif m.kind == "shadowed":
        _drop(data, "softmax")
        _info(data, "softmax", kind="tensor", type="Tensor", dtype="float32", layout="strided",
              device="cpu")
        _set_values(data, "softmax", lesson.reference()["attention_weights"])
    elif m.kind == "mutated":
        data["softmax.p1.mutated"] = np.array(True)
    elif m.kind == "behaviour":  # outputs that show the behaviour, on the probes
        _inject_behaviour(mistake_id, data)
    elif m.kind == "builtin_weights":
        data["replay.graph.attention_weights"] = np.array(["SoftmaxBackward0"])
    elif m.kind == "left_autograd":
        data["softmax.p0.detached"] = np.array(True)
    elif m.kind == "custom_function":
        data["replay.python_node"] = np.array(True)
    elif m.kind == "gradient":  # right weights whose gradient is zero (detached)
        data["replay.grad.attention_weights.attention_scores"] = np.zeros((1, 6, 6), np.float32)
    elif m.kind == "misspelled":
        _drop(data, prefix)
        _info(data, prefix, kind="none", type="NoneType")
        data["cell.replayed"] = np.array(True)
        data["replay.misspelled"] = np.array([name[:-2] + name[-1] + name[-2], name])
    elif m.kind == "detached_output":
        data["cell.replayed"] = np.array(True)
        _info(data, prefix, requires_grad="", grad_fn="")
    elif m.kind == "recomputed":  # in the graph, with no gradient reaching an input
        data["cell.replayed"] = np.array(True)
        _info(data, prefix, requires_grad="True", grad_fn="MmBackward0")
        for upstream in verify.NAMES[step].upstream:
            data[f"replay.grad.{name}.{upstream}"] = np.zeros_like(
                lesson.reference()[upstream], dtype=np.float64)
    elif m.kind == "variant":  # the second run, on other embeddings, raised
        data["variant.in.x"] = lesson.shipped()["x"] * 6
        data["variant.raised"] = np.array("RuntimeError: the values were typed in for 6 tokens")
    elif m.kind == "backward":
        data["cell.replayed"] = np.array(True)
        data[f"replay.grad_error.{'attention_weights' if step == 'softmax' else name}"] = (
            np.array("RuntimeError: one of the variables needed for gradient computation has "
                     "been modified by an inplace operation"))
    elif m.kind == "aliased":  # the step's outputs one object: all equal the last written
        data["cell.replayed"] = np.array(True)
        data["replay.aliased"] = np.array(["query", "key", "value"])
        for n in ("query", "key"):  # (every name shows the one tensor's last write)
            _set_values(data, f"t.{n}", lesson.reference()["value"])
    elif m.kind == "discarded":  # the result computed on a line of its own, never assigned
        _drop(data, prefix)
        _info(data, prefix, kind="none", type="NoneType")
        data["cell.replayed"] = np.array(True)
        data["replay.discarded"] = np.array(["softmax(attention_scores, dim=-1)"])
    elif m.kind == "no_default":  # right on every probe, but softmax(x) raises
        data["softmax.nodefault.raised"] = np.array(
            ["TypeError: softmax() missing 1 required positional argument: 'dim'", ""])
    elif m.kind == "rebound":
        data["cell.replayed"] = np.array(True)
        data["replay.rebound"] = np.array([verify.NAMES[step].upstream[0]])
    elif m.kind == "mutated_input":
        data["cell.replayed"] = np.array(True)
        data["replay.mutated"] = np.array(["x" if step == "projections"
                                           else verify.NAMES[step].upstream[0]])
    elif m.kind == "axes_moved":  # the probe of dim=0 returned with its axes swapped
        i = next(k for k, p in enumerate(lesson.probes()) if p.dim == 0)
        _set_values(data, f"softmax.p{i}.out", lesson.probes()[i].expected.T)
    elif m.kind == "bad_output":
        _info(data, "softmax.p0.out", kind="ndarray", type="ndarray")
    elif m.kind == "probe_error":
        data["softmax.p0.raised"] = np.array(["ZeroDivisionError: division by zero",
                                              "return exps / 0"])
        _drop(data, "softmax.p0.out")
    elif step == "softmax" and m.fns:
        _inject_softmax(m, data)
    elif m.fns:  # a softmax mistake, seen in the weights
        _set_values(data, prefix, m.fns[0](lesson.reference()["attention_scores"], -1))
    elif m.reproduce is not None or m.factor is not None:
        ref = _reference_inputs(name)
        right = lesson.LESSON.checks[step].reference(ref, name)
        got = right * m.factor if m.factor is not None else m.reproduce(ref)
        _set_values(data, prefix, got[0] if isinstance(got, list) else got)
    elif m.kind == "upstream_slip":
        _drop(data, prefix)
        _info(data, prefix, kind="none", type="NoneType")
        data["cell.raised"] = np.array(["TypeError: unsupported operand type(s) for @: "
                                        "'numpy.ndarray' and 'Tensor'", "x @ y"])
        upstream = verify.NAMES[step].upstream[0]
        _info(data, f"t.{upstream}", kind="ndarray", type="ndarray")
    elif m.kind == "degenerate":  # a constant input, and the formula applied to it
        upstream = verify.NAMES[step].upstream[0]
        inputs = dict(lesson.reference(), name=name)
        inputs[upstream] = np.ones_like(inputs[upstream])
        _set_values(data, f"t.{upstream}", inputs[upstream])
        _set_values(data, prefix, lesson.LESSON.checks[step].reference(inputs, name))
    elif m.kind == "returned_none":
        _drop(data, prefix)
        _info(data, prefix, kind="none", type="NoneType")
        data["cell.raised"] = np.array(["AttributeError: 'NoneType' object has no attribute "
                                        "'sum'", "print(attention_weights.sum(-1))"])
    elif m.example or m.kind in ("cell_error", "missing"):
        _drop(data, prefix)
        _info(data, prefix, kind="none", type="NoneType")
        if m.kind != "missing":
            data["cell.raised"] = np.array(list(m.example or EXAMPLE_ERROR))
        upstream = verify.NAMES[step].upstream if step in verify.NAMES else ()
        if mistake_id == "used_before_computed" and upstream:  # an earlier tensor is None
            _drop(data, f"t.{upstream[0]}")
            _info(data, f"t.{upstream[0]}", kind="none", type="NoneType")
    elif m.kind == "new_layers":
        rng = np.random.default_rng(0)
        ref = _reference_inputs(name)
        _set_values(data, prefix, ref["x"] @ rng.standard_normal((64, 64)).T / 8)
        data[f"{prefix}.made_by"] = np.array(["other [64, 64]", "other [64]"])
    elif m.kind == "detached":
        data.pop(f"{prefix}.made_by", None)
        _info(data, prefix, requires_grad="", grad_fn="")
    elif m.kind == "copied":  # in a graph of other parameters: no layer's gradient
        data["cell.replayed"] = np.array(True)
        _info(data, prefix, requires_grad="True", grad_fn="AddBackward0")
        for layer in ("q_proj", "k_proj", "v_proj"):
            for part, shape in (("weight", (64, 64)), ("bias", (64,))):
                data[f"replay.grad.{name}.{layer}.{part}"] = np.zeros(shape)
    elif m.kind == "unassigned":  # the cell's own assert reads a name no line binds
        _drop(data, prefix)
        _info(data, prefix, kind="none", type="NoneType")
        data["cell.replayed"] = np.array(True)
        data["replay.unassigned"] = np.array([name])
        data["cell.raised"] = np.array([f"AssertionError: {name} should be a torch tensor, "
                                        "got NoneType", "assert isinstance(tensor, torch.Tensor)"])
    elif m.kind == "wrong_default":  # softmax(x) normalised over the first axis
        probe = lesson.probes()[0]
        arr = np.exp(probe.x) / np.exp(probe.x).sum(axis=0, keepdims=True)
        data["softmax.nodefault.out.info"] = data["softmax.p0.out.info"]
        data["softmax.nodefault.out.values"] = arr.astype(np.float32)
    elif m.kind == "extra_axis":
        _set_values(data, prefix, values[None])
    elif m.kind == "lost_batch":
        _set_values(data, prefix, values[0])
    elif m.kind == "dtype":
        _set_values(data, prefix, values, np.float64)
    elif m.kind == "left_torch":  # float64 numbers rebuilt into a tensor: no graph
        _set_values(data, prefix, values, np.float64)
        data["cell.replayed"] = np.array(True)
        _info(data, prefix, requires_grad="", grad_fn="")
    elif m.kind == "not_a_tensor":
        _info(data, prefix, kind="ndarray", type="ndarray")
    elif m.kind == "imprecise":
        _set_values(data, prefix, values.astype(np.float64) * (1 + 3e-5))
    elif m.kind == "nan":
        bad = values.copy()
        bad.reshape(-1)[0] = np.nan
        _set_values(data, prefix, bad)
    elif m.kind == "constant":
        _set_values(data, prefix, np.zeros_like(values))
    elif m.kind == "function":
        _drop(data, prefix)
        _info(data, prefix, kind="function", type="function")
    elif m.kind == "bad_type":
        _drop(data, prefix)
        _info(data, prefix, kind="other", type="list")
    elif m.kind == "integer":  # the right numbers, truncated into an integer tensor
        _set_values(data, prefix, values.astype(np.int64), dtype=np.int64)
        _info(data, prefix, dtype="int64")
    elif m.kind == "factor":
        _set_values(data, prefix, values.astype(np.float64) * 3.0)
    elif m.kind == "constant_factor":  # the fourth root of d_k: no entry of its own
        _set_values(data, prefix, values.astype(np.float64) * 64 ** 0.25)
    elif m.kind == "permuted":
        _set_values(data, prefix, np.transpose(values))
    else:
        raise AssertionError(f"no way to inject {mistake_id} (kind {m.kind})")
    return data
