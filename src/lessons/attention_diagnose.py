"""Lesson 1's own readings of a wrong result: what the engine's generic rules cannot say.

The spec (``src/lessons/attention.py``) hands these to the judge as its checks'
``diagnose`` hooks, each at a stage of the judge (``src/checks/judge.py``):

- ``first`` / ``fit`` / ``rows`` / ``mix`` / ``last``: (mistake id, what we saw) of a
  wrong tensor that no catalogue entry reproduces, or None;
- ``right``: [(mistake id, what we saw)] of a tensor with the right values (how it
  was made);
- ``symptom``: what a message says it saw for a recognised entry;
- ``judge``: the whole verdict of a function check (the student's softmax, probed).

Each takes the lesson's spec first (this module does not import it: the spec imports
this one). NumPy only; never raises on data (the judge catches what would).
Shape legend: B = 1 batch, L = S = 6 tokens, d_k = d_model = 64.
"""

from __future__ import annotations

import re
from functools import lru_cache

import numpy as np

from src.checks.util import (
    _close,
    _constant,
    _fmt,
    _listing,
    _num,
    _short,
    _softmax,
    output_gradient,
    tie_group_sums,
)
from src.checks.verdict import _error_entry, _Finding, _result, _strict


def vectors_normalised(lesson, name, rows_a, rows_e):
    """Scores [rows, S] divided by a number per query and per key (cosine similarity)."""
    if np.all(np.abs(rows_e) > 1e-9) and np.all(np.sign(rows_a) == np.sign(rows_e)) and \
            np.all(rows_a != 0):
        ratio = np.log(rows_a / rows_e)  # log(u_i) + log(v_j): additive in rows and columns
        fit = ratio.mean(1, keepdims=True) + ratio.mean(0, keepdims=True) - ratio.mean()
        if np.abs(ratio - fit).max() <= 1e-4 and np.ptp(ratio) > 1e-3:
            return "vectors_normalised", (
                f"`{name}` is the right score divided by a number for each query and a "
                "number for each key: the vectors' lengths were divided out (cosine "
                "similarity).")
    return None


def softmax_axis(lesson, name, arr, ctx):
    """Weights that sum to 1 along another axis than the keys'."""
    for axis in range(arr.ndim - 1):  # the softmax's axis, read off its sums
        if np.allclose(arr.sum(axis), 1, atol=1e-3):
            return "softmax_wrong_axis", (f"`{name}` sums to 1 along axis {axis}, not "
                                          "along the keys (the last axis).")
    return None


def weights_builtin(lesson, r, name, view):
    """[("weights_not_from_your_softmax", what we saw)] when the weights' autograd graph
    holds an operation no hand-written softmax needs, and the student's softmax does not
    (a softmax that calls it is charged there, once)."""
    allowed = lesson.facts["softmax_allowed"]
    builtin = [_node_label(lesson, n) for n in view.graph if n not in allowed]
    own = [c for c in r.strings("softmax.calls")
           if c.split(".")[-1] in lesson.facts["builtin_softmax"]] + _not_allowed(lesson, r)
    if builtin and not own:
        return [("weights_not_from_your_softmax", "the autograd graph of "
                 f"`attention_weights` holds {builtin[0]}.")]
    return []


def weights_symptom(lesson, m, name, arr, expected):
    """What a message says it saw for a recognised softmax or weights entry, or None."""
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
    return None


def _row_sums(arr):
    return _fmt(arr.sum(-1).ravel()) if arr.ndim else _fmt(arr)


def weights_relation(lesson, name, arr, ctx):
    """Weights that are a softmax of the scores, but not the lesson's: softmax(c·scores)
    (a temperature), or some keys masked to 0 and the rest renormalised."""
    expected, scores = ctx.expected(name), ctx.inp["attention_scores"]
    rows_w = arr.reshape(-1, arr.shape[-1])
    rows_e, rows_s = expected.reshape(rows_w.shape), scores.reshape(rows_w.shape)
    if not (np.all(rows_w >= 0) and np.allclose(rows_w.sum(-1), 1, atol=1e-4)):
        return None
    masked = (rows_w <= 1e-12) & (rows_e > 1e-6)
    if masked.any() and not masked.all(-1).any():
        kept = np.where(masked, 0.0, rows_e)
        if _close(rows_w, kept / kept.sum(-1, keepdims=True)):
            return "weights_masked", (f"{int(masked.sum())} of `{name}`'s {masked.size} "
                                      "weights are 0 though their scores are finite; the "
                                      "others are the right ones, renormalised.")
    if np.all(rows_w > 1e-30) and np.ptp(rows_s) > 1e-6:
        logs = np.log(rows_w)  # log w_ij = c·s_ij + r_i for a softmax of c·s
        centred_l = logs - logs.mean(-1, keepdims=True)
        centred_s = rows_s - rows_s.mean(-1, keepdims=True)
        c = float((centred_l * centred_s).sum() / max((centred_s ** 2).sum(), 1e-30))
        if np.abs(centred_l - c * centred_s).max() <= 1e-3 and abs(c - 1) > 1e-3:
            return "weights_temperature", (f"`{name}` = softmax({_num(c)} × attention_scores)"
                                           ": the scores were rescaled before the softmax.")
    return None


def _through_layer(lesson, right, arr) -> str:
    """"`v_proj`" (how it was applied) when ``arr`` is the right result ``right`` put
    through one of the set-up's layers, whole or without its bias; else ""."""
    params = dict(lesson.facts["parameters"]())
    for label, w in params.items():
        if not label.endswith(".weight"):
            continue
        layer = label[:-len(".weight")]
        w = np.asarray(w, np.float64)
        b = np.asarray(params[f"{layer}.bias"], np.float64)
        if right.shape[-1] != w.shape[1]:
            continue
        for said, got in ((f"`{layer}`", right @ w.T + b),
                          (f"`{layer}`'s weight (x @ W.T, without its bias)", right @ w.T),
                          (f"`{layer}`'s weight untransposed (x @ W + b)", right @ w + b)):
            if got.shape == arr.shape and _close(arr, got):
                return said
    return ""


def mixing(lesson, name, arr, ctx):
    """Cell 7: whether ``arr`` [B, L, d] is a mix of the rows of value (out = M @ value for
    some M) and what M's rows do; None when nothing can be said."""
    value = ctx.inp["value"]
    v, out = value.reshape(-1, value.shape[-1]), arr.reshape(-1, arr.shape[-1])
    own = (out * v).sum(-1) / np.maximum((v * v).sum(-1), 1e-30)  # out[i] = c_i v[i]?
    if _close(out, own[:, None] * v, dict(rtol=1e-3, atol=1e-4)):
        return ("values_not_mixed", "each row of `attended_values` is its own token's row of "
                f"`value`, scaled by {_fmt(own)}.")
    m = np.linalg.lstsq(v.T, out.T, rcond=None)[0].T  # [L, S]: out ≈ m @ v
    if not _close(m @ v, out, dict(rtol=1e-3, atol=1e-4)):
        layer = _through_layer(lesson, ctx.expected(name), arr)
        if layer:
            return ("after_the_product", f"`{name}` is the right result passed through "
                    f"{layer}, a layer this step does not have.")
        return ("after_the_product", "`attended_values` is not a weighted sum of the rows of "
                "`value`: something else was applied to them or to the result.")
    if np.allclose(m.sum(-1), 1, atol=1e-3):
        return ("weights_changed", "`attended_values` mixes the rows of `value` with weights "
                "that sum to 1 but are not `attention_weights` (changed before the product).")
    return ("weights_changed", "`attended_values` mixes the rows of `value` with weights whose "
            f"rows sum to {_fmt(m.sum(-1))}, not 1.")


def layer_use(lesson, name, arr, view):
    """(mistake id, what we saw) of how ``name`` uses the layers, from its gradients with
    respect to their parameters: d/dW = Gᵀ x' (x' the layer's input), d/db = c ΣG."""
    grads, d_k = view.grads, lesson.facts["d_k"]
    if not grads:
        return None
    mine = f"{name[0]}_proj"
    used = [k for k, g in grads.items() if np.any(g)]
    others = sorted({k.split(".")[0] for k in used} - {mine})
    if others:
        parts = sorted(k for k in used if not k.startswith(mine + "."))
        if any(k.startswith(mine + ".") for k in used):  # its own layer, and another's
            if {k.split(".")[1] for k in parts} == {"weight", "bias"}:
                if _layer_of_layer(lesson, name, arr, others):
                    return "projection_of_projection", (
                        f"`{name}` depends on all of {_listing(others)}'s parameters as well "
                        f"as {mine}'s: {mine} was applied to another layer's output.")
                return "layers_mixed", (
                    f"`{name}` depends on all of {_listing(others)}'s parameters as well as "
                    f"{mine}'s, but it is not {mine} applied to another layer's output: its "
                    "numbers mix several layers' outputs.")
            return "mixed_layer_parameters", (
                f"`{name}` uses {_listing(parts)} beside {mine}'s own parameters.")
        return "wrong_inputs", (f"`{name}` depends on {_listing(others)}'s parameters: it was "
                                "computed with another layer, or from another projection.")
    g = output_gradient(arr.shape).astype(np.float64).reshape(-1, d_k) if arr.size == \
        6 * d_k else None
    bias, weight = grads.get(f"{mine}.bias"), grads.get(f"{mine}.weight")
    if g is None or bias is None or weight is None or not np.any(weight):
        return None
    x = lesson.facts["shipped"]()["x"].astype(np.float64).reshape(-1, d_k)  # [B*L, d_model]
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
        return None
    return "after_the_layer", (f"`{name}` is {mine}(x) changed after the layer (its "
                               "gradient does not reach the layer unchanged).")



def _layer_of_layer(lesson, name, arr, others) -> bool:
    """Whether ``arr`` is ``name``'s layer applied to one of ``others``' outputs (of x), or
    one of them applied to its layer's output, on the lesson's shipped weights."""
    s = lesson.facts["shipped"]()
    x = s["x"].astype(np.float64)

    def layer(n, t):
        return t @ s[f"w_{n[0]}"].astype(np.float64).T + s[f"b_{n[0]}"].astype(np.float64)

    mine = f"{name[0]}_proj"
    return any(_close(arr, out, dict(rtol=1e-3, atol=1e-4)) for other in others
               for out in (layer(mine, layer(other, x)), layer(other, layer(mine, x)))
               if out.shape == arr.shape)


def provenance(lesson, r, name, view):
    """[("detached_projection", what we saw)] when ``name`` has the right values but does
    not come from its layer as the formula does: its gradients with respect to the
    layers' parameters (the replay's) are not q_proj(x)'s, or (no gradients recorded)
    its autograd graph does not hold the layer's weight."""
    if view.kind != "tensor":
        return []
    layer = f"{name[0]}_proj"
    if view.grads:
        # (a half-precision result's gradients are rounded as its values are)
        wrong = _provenance(lesson, name, view.grads,
                            lesson.tolerances["low"].get(view.dtype, dict(rtol=1e-3, atol=1e-4)))
        if wrong and view.requires_grad and view.grad_fn and not any(
                np.any(g) for g in view.grads.values()) and "copied_layer" in lesson.mistakes:
            # (computed in a graph, but of no layer's: a leaf was cut off, not copied)
            return [("copied_layer", f"`{name}` has the right values and an autograd graph, "
                     f"but no gradient reaches {layer}'s parameters (or any layer's): it was "
                     "made by other parameters with the same numbers.")]
        return [("detached_projection", f"`{name}` has the right values but its gradient "
                 f"with respect to {wrong} is not the one {layer}(x) has: it does not come "
                 "from that layer as the formula does.")] if wrong else []
    if f"{layer}.weight" not in view.made_by:
        how = ("it does not require grad" if not view.requires_grad else
               f"its autograd graph holds {', '.join(view.made_by) or 'no parameters'}")
        return [("detached_projection", f"`{name}` has the right values but {how}: it is "
                 f"not connected to {layer}'s weight.")]
    return []


def _provenance(lesson, name, grads, tol):
    """The first parameter whose gradient (see src/replay.py) differs from q_proj(x)'s, or
    "" when all agree: query = q_proj(x) has d/dW = Gᵀx, d/db = ΣG, and 0 for the rest."""
    d_k = lesson.facts["d_k"]
    x = lesson.facts["shipped"]()["x"].astype(np.float64).reshape(-1, d_k)  # [B*L, d_model]
    g = output_gradient(lesson.shapes[name]).astype(np.float64).reshape(-1, d_k)  # [B*L, d_k]
    for layer in ("q_proj", "k_proj", "v_proj"):
        mine = layer[0] == name[0]
        for part, want in (("weight", g.T @ x), ("bias", g.sum(0))):
            got = grads.get(f"{layer}.{part}")
            want = want if mine else np.zeros_like(want)
            if got is None or got.shape != want.shape or not _close(got, want, tol):
                return f"{layer}.{part}"
    return ""



@lru_cache(maxsize=None)
def _fn_outputs(lesson, mistake_id, probe_index):
    """What each variant of softmax mistake ``mistake_id`` returns on a probe (None: raises)."""
    probe = lesson.probes()[probe_index]
    outs = []
    for fn in lesson.mistakes[mistake_id].fns:
        try:
            out = np.asarray(fn(probe.x.copy(), probe.dim), dtype=np.float64)
            outs.append(out if out.shape == probe.x.shape else out)
        except (ValueError, IndexError, TypeError):
            outs.append(None)
    return tuple(outs)


#: Softmax mistakes about the all -inf row; the others are compared without that row,
#: so that they are recognised whether or not the student's softmax guards it.
MASK_MISTAKES = ("fully_masked_row", "finite_mask_value", "epsilon_in_exps", "epsilon_in_sum")


@lru_cache(maxsize=None)
def _probe_table(lesson, i):
    """Every softmax mistake variant's output on probe ``i``, stacked once per process:
    (owners [(mistake id, variant)], outputs [n, *shape], raises [n], comparable [n])."""
    shape = lesson.probes()[i].x.shape
    owners, rows, raises, usable = [], [], [], []
    for m in lesson.function_entries("softmax"):
        for v, out in enumerate(_fn_outputs(lesson, m.id, i)):
            owners.append((m.id, v))
            ok = out is not None and out.shape == shape
            rows.append(out if ok else np.full(shape, np.nan))
            raises.append(out is None)
            usable.append(ok)
    return owners, np.stack(rows), np.array(raises), np.array(usable)


def _probe_matches(lesson, i, out):
    """{(mistake id, variant): whether it gives ``out`` on probe ``i``} (None: it raised)."""
    owners, table, raises, usable = _probe_table(lesson, i)
    if out is None:
        return dict(zip(owners, raises))
    if out.shape != table.shape[1:]:
        return dict.fromkeys(owners, False)
    a = out[None]
    with np.errstate(all="ignore"):
        close = np.abs(a - table) <= 1e-5 + 1e-3 * np.abs(table)
        same = (a == table) | (np.isnan(a) & np.isnan(table))
        ok = np.where(np.isfinite(table), close, same) & usable.reshape((-1,) + (1,) * out.ndim)
        # exp(-inf) is exactly 0: a variant with exact zeros at -inf inputs is not one
        # whose weight there is small but not 0 (an epsilon added to every exp)
        masked = np.isneginf(lesson.probes()[i].x)[None]
        ok &= ~(masked & (table == 0) & (a != 0))
        whole = ok.reshape(len(owners), -1).all(1)
        rest = ok[:, 1:].reshape(len(owners), -1).all(1) if i == lesson.facts["masked_probe"] \
            else whole
    return {o: bool(whole[k] if o[0] in MASK_MISTAKES else rest[k])
            for k, o in enumerate(owners)}


def _explanations(lesson, outs):
    """For each softmax mistake: the probes where one of its variants gives the output,
    and whether a single variant gives every output."""
    table = [_probe_matches(lesson, i, out) for i, out in enumerate(outs)]
    result = {}
    for m in lesson.function_entries("softmax"):
        variants = range(len(m.fns))
        every = any(all(t[(m.id, v)] for t in table) for v in variants)
        probes = {i for i, t in enumerate(table) if any(t[(m.id, v)] for v in variants)}
        result[m.id] = (every, probes)
    return result


def _returned(out, expected) -> str:
    """"returned A instead of B", whole when short; else only the first row (along the
    last axis) that differs, so that every number said is whole and can be retyped."""
    whole = f"returned {_fmt(out)} instead of {_fmt(expected)}"
    if len(whole) <= 160 or np.shape(out) != np.shape(expected) or np.ndim(out) < 2:
        return whole
    rows_o, rows_e = np.reshape(out, (-1, out.shape[-1])), np.reshape(expected,
                                                                      (-1, out.shape[-1]))
    for k, (o, e) in enumerate(zip(rows_o, rows_e)):
        if not _close(o, e):
            where = [int(v) for v in np.unravel_index(k, out.shape[:-1])]
            return (f"returned in its row {where} {_fmt(o)} instead of {_fmt(e)} "
                    f"(shape {list(out.shape)})")
    return whole


def _probe_seen(probe, out, error, line):
    if error:
        at = f" at `{line}`" if line else ""
        return f"on {probe.label} ({probe.shown}) your softmax raised {error}{at}."
    return f"on {probe.label} ({probe.shown}) your softmax {_returned(out, probe.expected)}."


#: Readable names of autograd nodes a student meets (others: the node's own name).
_READABLE_NODES = {
    "SafeSoftmaxBackward0": "torch._safe_softmax (what F.scaled_dot_product_attention runs)",
    "MmBackward0": "a matrix product (@, mm)", "BmmBackward0": "a matrix product (@, bmm)",
}


def _node_label(lesson, node):
    """How a message names the operation that left autograd node ``node``."""
    if node in lesson.facts["node_labels"]:
        return lesson.facts["node_labels"][node]
    if node in _READABLE_NODES:
        return _READABLE_NODES[node]
    if node.startswith("ScaledDotProduct"):
        return f"F.scaled_dot_product_attention ({node})"
    plain = re.fullmatch(r"([A-Z][A-Za-z0-9]*?)Backwards?\d*", node)  # SigmoidBackward0
    if not plain:
        return node
    return "torch." + re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", plain.group(1)).lower()


def _not_allowed(lesson, r):
    """The nodes in the graphs of the softmax's outputs on the probes that no operation of
    the lesson's ``softmax_ops`` makes."""
    allowed = lesson.facts["softmax_allowed"]
    other = [n for n in r.strings("softmax.nodes") if n not in allowed]
    # the one that computes a softmax first: the message names it
    return sorted(other, key=lambda n: not re.search("Softmax|ScaledDotProduct", n))


_SOFTMAX_OK = ("Your softmax matches torch.softmax on every probe: ordinary rows, rows far "
               "apart, logits of ±1e4, masked (-inf) keys, a fully masked row (zeros) and "
               "every dim, without changing its input.")


def judge_softmax(lesson, check, r, strict, cell):
    """The result of the softmax check from the replay's data (its probes and the
    weights it made)."""
    f = _Finding()
    verdict = _softmax_verdict(lesson, r, strict, cell)
    if isinstance(verdict, _Finding):
        f = verdict
    elif lesson.mistakes[verdict[0]].strict_only:  # a shortfall of a working softmax
        _strict(f, strict, *verdict)
    else:
        f.mistake, f.seen = verdict
    return _result(lesson, check, [("softmax", f)], _SOFTMAX_OK, [], cell, {})


def _softmax_verdict(lesson, r, strict, cell):
    """(mistake id, what we saw), or a _Finding (unnamed failure or a pass)."""
    kind = r.tensor("softmax", "").kind
    if kind in ("missing", "none"):
        if cell.raised:
            return (_error_entry(lesson, cell.error, cell.line, _check(lesson)) or
                    "cell_raised",
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
    probes = lesson.probes()
    n = len(probes)
    raised = [(r.strings(f"softmax.p{i}.raised") + ["", ""])[:2] for i in range(n)]
    errors, lines = [e for e, _ in raised], [line for _, line in raised]
    # What ran, read off the autograd graphs of its outputs (the probes', and the weights'
    # in the replay): a node of a built-in softmax, or a Function written by hand.
    calls = r.strings("softmax.calls")  # (the weights' own graph: see _judge_tensors)
    builtin = list(dict.fromkeys(c for c in calls
                                 if c.split(".")[-1] in lesson.facts["builtin_softmax"]))
    if builtin:
        return "uses_builtin_softmax", f"your softmax calls {', '.join(builtin)}."
    written = r.strings("replay.builtin_written")
    if written:  # (in a branch our inputs never reach: still in the function)
        return "uses_builtin_softmax", (f"your softmax's code calls `{written[0]}`, a "
                                        "built-in softmax (whether or not its result "
                                        "reached our inputs' outputs).")
    course = r.strings("softmax.course_code")
    if course:
        return ("softmax_runs_course_code", f"calling your softmax runs {course[0]}, "
                "which ships with the course.")
    if r.flag("replay.python_node"):
        return ("custom_autograd", "the weights' autograd graph holds a Function of your "
                "own (a class with forward and backward).")
    mutated = sorted((i for i in range(n) if r.flag(f"softmax.p{i}.mutated")),
                     key=lambda i: _evidence_rank(probes[i]))  # (one printed in full first)
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
        if view.kind == "none" and "returned_none" in lesson.mistakes:
            return ("returned_none", f"called on a tensor of shape {list(p.x.shape)}, your "
                    "softmax returned None: no `return` with its result was reached.")
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
            moved = _axes_moved(arr, p)
            if moved:
                return ("softmax_axes_moved", f"on {p.shown} your softmax returned shape "
                        f"{list(arr.shape)} for an input of shape {list(p.x.shape)}: the "
                        f"right values with axes {moved[0]} and {moved[1]} swapped.")
            keep = (" (keepdim=True in max and sum, and return exps / sums)"
                    if arr.ndim < p.x.ndim or 1 in arr.shape else "")
            return ("bad_output", f"on {p.shown} your softmax returned shape "
                    f"{list(arr.shape)} for an input of shape {list(p.x.shape)}; keep the "
                    f"shape{keep}.")
        outs.append(arr)
    wrong = [i for i, (p, out) in enumerate(zip(probes, outs))
             if out is None or not _close(out, p.expected)]
    # Right values that left autograd (a built-in under no_grad, NumPy inside ...): a probe
    # whose values are wrong is named by those instead.
    left = sorted((i for i in detached if i not in wrong),
                  key=lambda i: _evidence_rank(probes[i]))  # (one printed in full first)
    if left:
        return ("softmax_leaves_autograd", f"on {probes[left[0]].shown}, an input that "
                "requires grad like the lesson's scores, it returned a tensor that does not.")
    if not wrong:  # (no precision item: float32 rounds logits of 1e4 to 1e-3)
        # Right values from an operation a softmax written by hand does not need: a
        # built-in that holds a softmax (wrong values are named by what they are instead).
        other = _not_allowed(lesson, r)
        if other:
            return ("softmax_not_allowed_op", f"your softmax's autograd graph holds "
                    f"{_listing([_node_label(lesson, n) for n in other[:2]])}. A "
                    "softmax written by hand needs only: "
                    f"{'; '.join(lesson.facts['softmax_ops'])}.")
        if weights.grad_error and weights.real is not None and _close(
                weights.real, lesson.reference()["attention_weights"]):
            return ("backward_fails", "the weights your softmax made are right, but their "
                    f"gradient raised {_short(weights.grad_error, 160)}")
        no_default = r.strings("softmax.nodefault.raised")
        if no_default:  # (right on every probe, which all pass dim: called as the task
            # writes the signature, softmax(x), it raised)
            return ("softmax_no_default_dim", f"called as softmax(x) on {probes[0].shown} "
                    f"without dim, your softmax raised {_short(no_default[0], 120)}.")
        plain = r.tensor("softmax.nodefault.out", "")
        if plain.real is not None and "softmax_default_not_last" in lesson.mistakes and not (
                plain.real.shape == probes[0].expected.shape
                and _close(plain.real, probes[0].expected)):
            return ("softmax_default_not_last", "called as softmax(x), without dim, on a "
                    f"tensor of shape {list(probes[0].x.shape)}, your softmax did not give "
                    "the softmax along its last axis.")
        return _gradient_verdict(lesson, weights) or _Finding()
    rounded = _rounded_softmax(probes, outs, wrong)
    if rounded and "softmax_half_precision" in lesson.mistakes:
        return "softmax_half_precision", rounded
    explained = _explanations(lesson, outs)
    i = wrong[0]
    for mid, (every, where) in explained.items():
        if every:
            # the evidence: an ordinary input this mistake gets wrong, where there is one (a
            # -inf or huge input may be wrong for another reason as well)
            shown = [j for j in wrong if j in where] or [i]
            j = min(shown, key=lambda j: _evidence_rank(probes[j]))
            return mid, _probe_seen(probes[j], outs[j], errors[j], lines[j])
    k = lesson.facts["masked_probe"]
    if wrong == [k] and outs[k] is not None and _close(outs[k][1:], probes[k].expected[1:]):
        return "fully_masked_row", _probe_seen(probes[k], outs[k], "", "")
    last = [j for j, p in enumerate(probes) if p.dim in (-1, p.x.ndim - 1)]
    if last and not set(last) & set(wrong):  # right along the last axis, and only there
        j = wrong[0]
        return "softmax_last_axis_only", _probe_seen(probes[j], outs[j], errors[j], lines[j])
    # right on inputs laid out as the lesson's scores (3-D, along the last axis) and on no
    # other: written for that layout (loops over x.shape[0] and x.shape[1], x[b, i])
    like = [j for j, p in enumerate(probes)
            if p.x.ndim == len(lesson.shapes["attention_scores"]) and p.dim in (-1, p.x.ndim - 1)]
    other = [j for j in wrong if j not in like and _tame(probes[j])]  # (ordinary numbers)
    if like and other and not set(like) & set(wrong):
        j = min(other, key=lambda j: _evidence_rank(probes[j]))
        return "softmax_fixed_layout", _probe_seen(probes[j], outs[j], errors[j], lines[j])
    failed = sorted((j for j in wrong if errors[j]),
                    key=lambda j: _evidence_rank(probes[j]))  # (one printed in full first)
    for j in failed:
        mid = _error_entry(lesson, errors[j], lines[j], _check(lesson))
        if mid:
            return mid, _probe_seen(probes[j], None, errors[j], lines[j])
    if failed:
        j = failed[0]
        return "softmax_raises", _probe_seen(probes[j], None, errors[j], lines[j])
    # No entry gives its output on every probe: say what it does instead (a partial match
    # named one mistake for another).
    tame = sorted((j for j in wrong if _tame(probes[j]) and outs[j] is not None),
                  key=lambda j: _evidence_rank(probes[j]))  # (one printed in full first)
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


def _axes_moved(arr, probe):
    """(a, b) when ``arr`` is the probe's right softmax with its axes a and b swapped (a
    transpose to work on the last axis, never undone), else None."""
    for a in range(probe.x.ndim):
        for b in range(a + 1, probe.x.ndim):
            swapped = np.swapaxes(probe.expected, a, b)
            if arr.shape == swapped.shape and _close(arr, swapped):
                return a, b
    return None


def _same_for_every_input(r, probes):
    """What we saw, when the softmax gave one and the same output for different probes."""
    outs = [r.tensor(f"softmax.p{i}.out", "").real for i in range(len(probes))]
    got = [(i, o) for i, o in enumerate(outs) if o is not None]
    shapes = {probes[i].x.shape for i, _ in got}
    if len(got) < 3 or any(o.shape != got[0][1].shape for _, o in got) or (
            len(shapes) < 2 and any(not np.array_equal(o, got[0][1]) for _, o in got)):
        return ""  # (one output shape for inputs of several shapes: not computed from x)
    a, b = sorted((i for i, _ in got), key=lambda i: (  # (two printed in full first)
        "..." in probes[i].shown or "…" in probes[i].shown, probes[i].x.size))[:2]
    said = _fmt(got[0][1])
    if len(said) > 160:  # (its first row, whole: every number said can be retyped)
        said = f"whose first row is {_fmt(np.reshape(got[0][1], (-1, got[0][1].shape[-1]))[0])}"
    return (f"on {probes[a].shown} and on {probes[b].shown} it returned the same "
            f"{list(got[0][1].shape)} result, {said}.")


def _evidence_rank(probe):
    """Which probe to show first: an ordinary one (a -inf or huge input may be wrong for
    another reason as well), then one printed in full, which a student can retype."""
    return (not _tame(probe), "…" in probe.shown or "..." in probe.shown, probe.x.size)


def _tame(probe):
    """An input of ordinary numbers (no -inf, nothing large enough to overflow exp)."""
    return bool(np.isfinite(probe.x).all() and np.abs(probe.x).max() < 50)


def _bfloat16(a):
    """``a`` rounded to bfloat16 (8 bits of mantissa), as float64."""
    bits = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32).astype(np.float64)


_ROUNDINGS = (("bfloat16", _bfloat16),
              ("float16", lambda a: np.asarray(a, np.float16).astype(np.float64)))


def _rounded_softmax(probes, outs, wrong):
    """What we saw when every number the softmax returned on the probes is a float16 (or
    bfloat16) number, cast back to float32: a softmax computed in half precision. None
    when one is not, or when fewer than 4 of them lie strictly between 0 and 1 (0, 1 and
    0.5 are half-precision numbers too)."""
    values = [np.asarray(o, np.float64)[np.isfinite(o)] for o in outs if o is not None]
    if not values or not wrong:
        return None
    every = np.concatenate(values)
    if np.count_nonzero((every > 0) & (every < 1) & (every != 0.5)) < 4:
        return None
    for name, rnd in _ROUNDINGS:
        with np.errstate(all="ignore"):
            if np.array_equal(rnd(every), every):
                break
    else:
        return None
    i = min((j for j in wrong if outs[j] is not None), default=None,
            key=lambda j: _evidence_rank(probes[j]))
    if i is None:
        return None
    got, want = np.asarray(outs[i], np.float64), np.asarray(probes[i].expected, np.float64)
    with np.errstate(all="ignore"):
        off = np.where(np.isfinite(want), np.abs(got - want), 0.0)
    k = np.unravel_index(int(np.argmax(off)), off.shape)
    return (f"every number your softmax returned is a {name} number; on {probes[i].label} "
            f"({probes[i].shown}) it returned {got[k]:.7g} at index {[int(v) for v in k]} "
            f"where the softmax is {want[k]:.7g}.")


def _softmax_behaviour(probes, outs, wrong):
    """(behaviour entry, what we saw) for a softmax no entry reproduces, or None: what
    it does to ordinary inputs first, then to large or -inf ones."""
    def seen(i, what):
        return f"on {probes[i].label} ({probes[i].shown}) {what}."

    last = [i for i, p in enumerate(probes) if p.dim == -1]
    shown = sorted((i for i in wrong if outs[i] is not None),
                   key=lambda i: _evidence_rank(probes[i]))  # (one printed in full first)
    if all(i not in wrong for i in last) and shown:
        i = shown[0]
        return "ignores_dim", seen(i, f"it {_returned(outs[i], probes[i].expected)}")
    tame = sorted((i for i in wrong if _tame(probes[i]) and outs[i] is not None),
                  key=lambda i: _evidence_rank(probes[i]))  # (one printed in full first)
    for i in tame:  # wrong on ordinary numbers: the formula itself
        out, p = outs[i], probes[i]
        if np.isfinite(out).all() and (out < -1e-6).any():
            return "softmax_negative", seen(i, f"it returned {_fmt(out)}")
        sums = out.sum(axis=p.dim)
        if not np.isfinite(out).all() or not np.allclose(sums, 1.0, atol=1e-4):
            return "softmax_not_normalised", seen(
                i, f"the sums along dim={p.dim} are {_fmt(sums)}, not 1")
        return "softmax_not_exp", seen(i, f"it {_returned(out, p.expected)}")
    for i in wrong:  # wrong where no -inf is, on an input holding -inf elsewhere
        p = probes[i]
        clean = ~np.isneginf(p.x).any(axis=p.dim, keepdims=True)  # slices without -inf
        if outs[i] is not None and np.isneginf(p.x).any() and clean.any() and not _close(
                *(np.where(clean, a, 0) for a in (outs[i], p.expected))):
            return "softmax_masks_too_much", seen(i, f"it {_returned(outs[i], p.expected)}")
    for i in wrong:  # right on ordinary numbers, wrong on large or -inf ones
        if outs[i] is None:
            continue
        p = probes[i]
        inf = np.isneginf(p.x).any()
        return ("softmax_mishandles_inf" if inf else "softmax_overflows",
                seen(i, f"it {_returned(outs[i], probes[i].expected)}"))
    return None


def _check(lesson):
    return lesson.checks["softmax"]


def _gradient_verdict(lesson, weights):
    """("softmax_wrong_gradient", seen) when the replay's weights are right but their
    gradient with respect to the scores is not the softmax's; else None."""
    got = weights.grads.get("attention_scores")
    ref = lesson.reference()
    if got is None or weights.real is None or not _close(weights.real,
                                                         ref["attention_weights"]):
        return None
    if not np.any(got) and any(np.any(g) for n, g in weights.grads.items()
                               if n != "attention_scores"):
        return None  # (made from other tensors: the weights' own mistake, not the softmax's)
    if softmax_gradient_is_right(ref["attention_scores"], got, lesson.tolerances):
        return None
    return ("softmax_wrong_gradient", "on the lesson's scores the weights are right, but "
            "their gradient with respect to the scores is not the softmax's.")


def softmax_gradient_is_right(scores, got, tolerances) -> bool:
    """Whether ``got`` [..., S], the gradient of sum(softmax(scores) * G) with respect to
    ``scores`` [..., S] (G = src.checks.util.output_gradient), is the softmax's, compared per
    group of tied scores (see :func:`tie_group_sums`): the verdict is the same whether
    two scores tie to the last bit or differ by one ulp."""
    scores = np.asarray(scores, np.float64)
    w = _softmax(scores)
    g = output_gradient(w.shape).astype(np.float64)
    want = w * (g - (w * g).sum(-1, keepdims=True))  # the softmax's vector-Jacobian product
    got = np.asarray(got)
    tie = tolerances["tie"]
    return got.shape == want.shape and _close(tie_group_sums(got, scores, tie),
                                              tie_group_sums(want, scores, tie),
                                              tolerances["grad"])
