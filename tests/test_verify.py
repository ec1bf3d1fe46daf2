"""verify.py: full marks for the reference, 0 for the stubs, every mistake named,
observe/judge split (data only, never raising), readable messages, the CLI."""

import json
import math
import re
import subprocess
import sys

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import verify
from src import replay
from src.checks.verdict import _error_entry
from tests.catalogue import AGG, CATALOGUE, EXPS, SCALE, inject, steps_of
from tests.corpus import roundtrip
from tests.notebook_utils import (
    LESSON,
    ROOT,
    SOURCE,
    cells_by_id,
    run_steps,
)
from tests.notebook_utils import (
    test_cell_results as check_cell_results,
)

REF = cells_by_id(SOURCE)
GRADE_OF_CELL = {cell: gid for gid, cell in verify.STEP_CELLS.items()}


def run_graded(replace=None, codes=REF):
    """{step: CheckResult} as each test cell saw it (the live check: the code run in its
    step cell, on the road), what ``observe`` reads from the names then, and the final
    namespace."""
    results, data = {}, {}

    def after(cell_id, ns):
        gid = GRADE_OF_CELL.get(cell_id)
        if gid:
            data[gid] = verify.observe(gid, ns)
            for r in check_cell_results(gid, ns):
                results[r.step] = r

    ns = run_steps(codes, replace, after=after)
    return results, data, ns


@pytest.fixture(scope="module")
def reference():
    return run_graded()


# ------------------------------------------------------------------ points
def test_points_live_in_one_place():
    assert verify.POINTS == {s: p for cell in verify.GRADE_CELLS.values()
                             for s, p in cell.items()}
    assert sum(verify.POINTS.values()) == 9.0
    assert set(verify.STEP_CELLS) == set(verify.GRADE_CELLS)


def test_reference_solution_scores_full_marks(reference):
    results, data, ns = reference
    assert all(r.passed and r.score == r.max_score for r in results.values()), results
    assert sum(r.score for r in results.values()) == 9.0
    for gid, d in data.items():
        assert verify.judge(gid, d, strict=True).score == sum(verify.GRADE_CELLS[gid].values())
    summary = verify.check_all(ns)
    assert summary.passed and summary.score == summary.max_score == 9.0


def test_untouched_lesson_scores_zero():
    results, _, ns = run_graded(codes=cells_by_id(LESSON))
    assert not any(r.score for r in results.values())
    assert results["projections"].mistake == "stub_left"
    assert "Your turn" in results["projections"].message
    summary = verify.check_all(ns)
    assert summary.score == 0 and not any(summary.results)
    assert "not been computed yet" in summary.results[1].message


# --------------------------------------------------------------- catalogue
#: Behaviour entries of the tensor steps are read off real code (gradients, value
#: relations): test_behaviour_is_named_from_real_code replays such code instead.
CASES = [(mid, step) for mid, m in verify.MISTAKES.items() for step in steps_of(m)
         if not (m.kind == "behaviour" and m.step != "softmax")]

OWN_SOFTMAX = ("def softmax(x, dim=-1):\n    e = torch.exp(x - x.amax(dim=dim, keepdim=True))\n"
               "    return e / e.sum(dim=dim, keepdim=True)\n\n")
BEHAVIOUR_CODE = {
    "extra_term": {"cell7_values": "attended_values = attention_weights @ value + x"},
    "reduction_changed": {"cell7_values": "attended_values = (attention_weights[..., None] "
                          "* value[:, None]).amax(dim=2)"},
    "distance_for_product": {"cell5_scores": "attention_scores = -torch.cdist(query, key) "
                             "/ 8"},
    "extra_reduction": {"cell7_values": "attended_values = (attention_weights @ value)"
                        ".sum(dim=1, keepdim=True)"},
    "hard_selection": {"cell7_values": "attended_values = value[:, attention_weights[0]"
                       ".argmax(-1)]"},
    "low_precision": {"cell5_scores": "attention_scores = (query.half() @ key.half()"
                      ".transpose(-2, -1)).float() / 8"},
    "wrong_operand": {"cell5_scores": "attention_scores = x @ x.transpose(-2, -1) / 8"},
    "range_off_by_one": {"cell7_values": "attended_values = torch.zeros(1, 6, 64)\n"
                         "for i in range(5):\n"
                         "    attended_values[0, i] = attention_weights[0, i] @ value[0]"},
    "diagonal_only": {"cell5_scores": "attention_scores = (query * key).sum(-1, keepdim=True)"
                      " / 8"},
    "from_wrong_function": {"cell6_softmax": (
        "def softmax(x, dim=-1):\n    out, total = torch.zeros_like(x), 0.0\n"
        "    for b in range(x.shape[0]):\n        for i in range(x.shape[1]):\n"
        "            e = torch.exp(x[b, i] - x[b, i].max())\n"
        "            total = total + e.sum()\n            out[b, i] = e / total\n"
        "    return out\nattention_weights = softmax(attention_scores, dim=-1)\n")},
    "extra_nonlinearity": {"cell4_projections": "query = torch.relu(q_proj(x))\n"
                           "key = k_proj(x)\nvalue = v_proj(x)"},
    "rows_rescaled": {"cell7_values": "out = attention_weights @ value\n"
                      "attended_values = out / out.norm(dim=-1, keepdim=True)"},
    "wrong_inputs": {"cell5_scores": "attention_scores = query @ key.transpose(-2, -1) / 8 "
                     "+ 0.1 * value @ value.transpose(-2, -1)"},
    "same_for_every_query": {"cell7_values": "attended_values = (attention_weights @ value)"
                             ".mean(dim=1, keepdim=True).expand(1, 6, 64)"},
    "bias_misused": {"cell4_projections": "query = x @ q_proj.weight.T - q_proj.bias\n"
                     "key = k_proj(x)\nvalue = v_proj(x)"},
    "mixed_layer_parameters": {"cell4_projections": "query = q_proj(x)\n"
                               "key = x @ k_proj.weight.T + q_proj.bias\nvalue = v_proj(x)"},
    "projection_of_projection": {"cell4_projections": "query = q_proj(x)\nkey = k_proj(query)"
                                 "\nvalue = v_proj(x)"},
    "numbers_rearranged": {"cell7_values": "rows = [attention_weights[0, i] @ value[0] "
                           "for i in range(6)]\nattended_values = torch.stack(rows, dim=1)"
                           ".reshape(1, 6, 64)"},
    "layers_mixed": {"cell4_projections": "qkv = torch.cat([q_proj(x), k_proj(x), v_proj(x)], "
                     "-1)\nquery, key, value = qkv.view(1, 6, 64, 3).unbind(-1)"},
    "layer_input_not_x": {"cell4_projections": "query = q_proj(x - x.mean(-1, keepdim=True))"
                          "\nkey = k_proj(x)\nvalue = v_proj(x)"},
    "after_the_layer": {"cell4_projections": "query = torch.tanh(q_proj(x))\n"
                        "key = k_proj(x)\nvalue = v_proj(x)"},
    "after_the_product": {"cell7_values": "attended_values = v_proj(attention_weights @ value)"},
    "values_not_mixed": {"cell7_values": "attended_values = value * "
                         "attention_weights.sum(dim=1).unsqueeze(-1)"},
    "weights_changed": {"cell7_values": "attended_values = torch.softmax(attention_weights, -1)"
                        " @ value"},
    "cut_from_product": {"cell5_scores": "attention_scores = (query.transpose(-2, -1) @ key)"
                         "[:, :6, :6] / math.sqrt(d_k)"},
    "dropout_applied": {"cell7_values": "attended_values = torch.nn.functional.dropout("
                        "attention_weights @ value, p=0.25)"},
    "rounded": {"cell5_scores": "attention_scores = torch.round(query @ key.transpose(-2, -1)"
                " / 8, decimals=2)"},
    "shifted": {"cell5_scores": "attention_scores = query @ key.mT / 8 - 1.5"},
    "vectors_normalised": {"cell5_scores": "q = query / query.norm(dim=-1, keepdim=True)\n"
                           "k = key / key.norm(dim=-1, keepdim=True)\n"
                           "attention_scores = q @ k.transpose(1, 2)"},
    "weights_masked": {"cell6_softmax": OWN_SOFTMAX + "keep = torch.ones(6, 6).tril().bool()\n"
                       "attention_weights = softmax(attention_scores.masked_fill(~keep, "
                       "float('-inf')))"},
    "weights_temperature": {"cell6_softmax": OWN_SOFTMAX + "attention_weights = "
                            "softmax(attention_scores * 3)"},
}


def test_behaviour_is_named_from_real_code():
    """Each behaviour entry of a tensor step, named from code that does it, replayed."""
    from tests.corpus import release_setup

    want = {mid for mid, m in verify.MISTAKES.items()
            if m.kind == "behaviour" and m.step != "softmax"}
    assert want == set(BEHAVIOUR_CODE)
    for mid, code in BEHAVIOUR_CODE.items():
        (step, src), = code.items()
        data = replay.replay_step(verify.LESSON, step, src, release_setup())
        gid = verify.LESSON.by_cell[step].test
        named = [r.mistake for r in verify.judge_replay(gid, data, strict=True).results]
        assert mid in named, (mid, named)


@pytest.mark.parametrize("mistake, step", CASES, ids=[f"{m}-{s}" for m, s in CASES])
def test_every_catalogue_entry_is_named_by_its_own_diagnosis(reference, mistake, step):
    """Injected as the entry reproduces it, each mistake is named by itself: no entry
    shadows another (the checks try them in catalogue order)."""
    _, data, _ = reference
    gid = verify.GRADE_CELL_OF[step]
    m = verify.MISTAKES[mistake]
    injected = roundtrip(inject(mistake, step, data[gid]))
    strict = {r.step: r for r in verify.judge(gid, injected, strict=True).results}[step]
    visible = {r.step: r for r in verify.judge(gid, injected).results}[step]
    assert strict.mistake == mistake, str(strict)
    assert strict.score == pytest.approx(strict.max_score * max(0.0, 1 - m.cost))
    first, _, evidence = strict.message.partition("\n")
    assert len(first) <= verify.FIRST_LINE_CHARS and len(evidence) <= verify.EVIDENCE_CHARS
    if m.said_first:  # the search's own words of what it found are the mistake's
        assert first.startswith("Mistake: ") and "\nWhy:" in strict.message
        assert f"Next step: {m.next_step_for(step)}." in " ".join(strict.message.split("\n")[:2])
        return
    # the mistake, and what next (with this check's own example)
    assert first == f"Mistake: {m.title}. Next step: {m.next_step_for(step)}."
    assert evidence.startswith("What we saw:") and "\nWhy:" in evidence
    if m.strict_only:  # shown beforehand, deducted only in the graded run
        assert visible.passed and visible.pending == [mistake]
        assert any(m.title in n and "graded run" in n for n in visible.notes)
    else:
        assert visible.to_dict() == strict.to_dict()


def test_examples_in_a_message_come_from_its_own_cell():
    """Every entry, shown for every check it can be met in, writes code with only that
    check's own names (its tensors, the set-up's, the function it uses or the check
    using its function): a Cell 4 message never shows a Cell 6 example. Code: a name
    next to @ = ( . [ or in backticks (query, key, value are English words too)."""
    spec = verify.LESSON
    official = set(spec.official) | {n for c in spec.checks.values() for n in c.all}
    names = "|".join(sorted(official, key=len, reverse=True))
    code = re.compile(rf"(?:[@=]\s*|[.(\[`]|def\s+)({names})\b|"
                      rf"\b({names})(?=[.(\[`]|\s*[@=])")
    bad = []
    for m in verify.MISTAKES.values():
        for name, check in spec.checks.items():
            if m.step not in ("any", name) and check.uses_function != m.step:
                continue
            users = [c for c in spec.checks.values() if c.uses_function == name]
            own = set(check.all) | set(spec.setup_names) | {check.uses_function} | {
                n for c in users for n in c.all}
            text = f"{m.next_step_for(name)} {m.cause_for(name)}"
            named = {a or b for a, b in code.findall(text)}
            if named - own:
                bad.append((m.id, name, sorted(named - own)))
    assert bad == []


def test_the_catalogue_text_is_complete():
    for m in verify.MISTAKES.values():
        assert m.step in (*verify.POINTS, "any"), m.id
        assert m.title and m.cause and m.next_step, m.id
        assert 0 < m.cost <= 1
        assert sum(x is not None and x != () for x in (m.reproduce, m.fns or None, m.factor,
                                                       m.error, m.kind)) >= 1, m.id
        if m.error:
            assert m.example and _error_entry(verify.LESSON, *m.example) == m.id, m.id


@pytest.mark.parametrize("mistake, replace, step, also_fail", CATALOGUE,
                         ids=[c[0] for c in CATALOGUE])
def test_each_code_mistake_is_named_and_does_not_cascade(mistake, replace, step, also_fail):
    results, _, _ = run_graded(replace)
    result = results[step]
    assert not result.passed and result.mistake == mistake, str(result)
    failed = {s for s, r in results.items() if not r.passed}
    assert failed == {step, *also_fail}, {s: r.mistake for s, r in results.items()}


# ----------------------------------------------------------------- rules
def as_given(ns) -> dict:
    """{step: CheckResult} of the names as they are now (check_all: no replay)."""
    return {r.step: r for r in verify.check_all(ns).results}


def test_an_early_mistake_is_not_punished_downstream():
    results, _, ns = run_graded({"cell5_scores": [(SCALE, "attention_scores = raw_scores")]})
    # The live check replays each cell on the reference: the later cells are right.
    assert results["attention_weights"].passed and results["attended_values"].passed
    # Judged on the names as they are, the weights are judged on the student's scores.
    later = as_given(ns)["attention_weights"]
    assert later.passed and "checked against your own tensors" in " ".join(later.notes)


def test_a_dtype_is_charged_once_in_the_cell_that_changed_it():
    double = {"cell4_projections": [(f"{n} = {n[0]}_proj(x)", f"{n} = {n[0]}_proj(x).double()")
                                    for n in ("query", "key", "value")]}
    results, _, _ = run_graded(double)
    assert results["projections"].mistake == "wrong_dtype"
    assert results["projections"].score == 1.0
    assert all(results[s].passed for s in ("attention_scores", "softmax",
                                           "attention_weights", "attended_values"))


def test_degenerate_upstream_is_never_credited_by_the_own_route():
    zeros = {"cell4_projections": [(f"{n} = {n[0]}_proj(x)", f"{n} = torch.zeros(1, 6, 64)")
                                   for n in ("query", "key", "value")]}
    results, _, ns = run_graded(zeros)
    assert results["projections"].mistake == "constant_output"
    # the live check: each later cell replayed on the reference, and right
    assert sum(r.score for r in results.values()) == 7.0
    given = as_given(ns)  # the names as they are: built on the zeros, never credited
    for step in ("attention_scores", "attention_weights", "attended_values"):
        assert given[step].score == 0, step
        assert "degenerate" in " ".join(given[step].notes), step
    assert sum(r.score for r in given.values()) == 1.0  # the softmax function only


def test_a_fully_masked_row_is_a_visible_named_shortfall_with_partial_credit():
    plain = [("    x_max = torch.where(torch.isneginf(x_max), torch.zeros_like(x_max), x_max)"
              "  # all -inf rows\n", ""),
             (RETURN_LINE, "return exps / totals")]
    results, data, _ = run_graded({"cell6_softmax": plain})
    softmax, weights = results["softmax"], results["attention_weights"]
    assert softmax.mistake == "fully_masked_row" and softmax.score == 0.5
    assert "entirely -inf" in softmax.message and "zeros" in softmax.message
    assert weights.passed and weights.score == 2.0  # never the weights' points
    graded = verify.judge("cell6_softmax_test", data["cell6_softmax_test"], strict=True)
    assert graded.score == 2.5


RETURN_LINE = "return exps / torch.where(totals == 0, torch.ones_like(totals), totals)"


def test_the_live_check_deducts_what_the_graded_run_deducts():
    """What the student sees while working is what grading decides: a strict-only item
    is deducted by the live check too. The judge's lenient mode (strict=False) only
    shows it as pending."""
    detached = {"cell4_projections": [(f"{n} = {n[0]}_proj(x)", f"{n} = {n[0]}_proj(x).detach()")
                                      for n in ("query", "key", "value")]}
    results, data, _ = run_graded(detached)
    live = results["projections"]
    assert live.score == 1.0 and live.mistake == "detached_projection" and not live.pending
    lenient = verify.judge("cell4_projections_test", data["cell4_projections_test"],
                           strict=False).results[0]
    assert lenient.passed and lenient.pending == ["detached_projection"]
    assert any("graded run" in n for n in lenient.notes)


def test_the_softmax_probes():
    def named(fn):
        return verify.check_softmax(fn).mistake

    def global_max(x, dim=-1):
        e = torch.exp(x - x.max())
        return e / e.sum(dim=dim, keepdim=True)

    def last_axis_only(x, dim=-1):
        return torch.softmax(x.double(), -1).float() * 1  # not named builtin: see below

    assert named(global_max) == "global_max_subtraction"
    assert named(lambda x, dim=-1: torch.softmax(x, dim)) == "uses_builtin_softmax"
    assert named(lambda x, dim=-1: torch.nn.functional.softmax(x, dim)) == "uses_builtin_softmax"
    assert named(lambda x, dim=-1: x.softmax(dim)) == "uses_builtin_softmax"
    assert named(lambda x, dim=-1: x.log_softmax(dim).exp()) == "uses_builtin_softmax"
    assert named(last_axis_only) == "uses_builtin_softmax"
    res = verify.check_softmax(global_max)
    assert "[[100, 99, 98, 97], [-100, -101, -99, -102]]" in res.message  # the probe shown
    for fn, words in [(lambda x, dim=-1: torch.exp(x).to(torch.complex64), "complex"),
                      (lambda x, dim=-1: torch.exp(x).to_sparse(), "sparse"),
                      (lambda x, dim=-1: (x > 0), "bool"),
                      (lambda x, dim=-1: x.detach().numpy(), "NumPy array")]:
        res = verify.check_softmax(fn)
        assert res.mistake == "bad_output" and words in res.message, res.message
        assert len(res.message) < 700
    # The probes require grad, as the lesson's scores do: .numpy() raises there too.
    assert named(lambda x, dim=-1: x.numpy()) == "numpy_of_grad_tensor"


#: Code that makes each autograd node the lesson's softmax allow-list names (torch 2.13):
#: the list is checked against what torch really records, not guessed.
ALLOWED_NODE_CODE = {
    "ExpBackward0": lambda x: torch.exp(x), "PowBackward2": lambda x: math.e ** x,
    "PowBackward1": lambda x: torch.pow(torch.tensor(math.e), x),
    "Exp2Backward0": lambda x: torch.exp2(x),
    "SortBackward0": lambda x: x.sort(-1).values,
    "TopkBackward0": lambda x: x.topk(2, -1).values,
    "KthvalueBackward0": lambda x: x.kthvalue(1, -1).values,
    "CumsumBackward0": lambda x: x.cumsum(-1), "CumprodBackward0": lambda x: x.cumprod(-1),
    "CummaxBackward0": lambda x: x.cummax(-1).values,
    "CumminBackward0": lambda x: x.cummin(-1).values,
    "FlipBackward0": lambda x: x.flip(-1), "RollBackward0": lambda x: x.roll(1, -1),
    "GatherBackward0": lambda x: x.gather(-1, torch.zeros(*x.shape[:-1], 1, dtype=torch.long)),
    "IndexSelectBackward0": lambda x: x.index_select(-1, torch.tensor([0])),
    "TakeBackward0": lambda x: x.take(torch.tensor([0])),
    "AmaxBackward0": lambda x: x.amax(-1, keepdim=True),
    "MaxBackward0": lambda x: x.max(dim=-1, keepdim=True).values,
    "MaxBackward1": lambda x: x.max(), "MaximumBackward0": lambda x: torch.maximum(x, x * 2),
    "SumBackward0": lambda x: x.sum(), "SumBackward1": lambda x: x.sum(-1, keepdim=True),
    "LogsumexpBackward0": lambda x: torch.logsumexp(x, -1),
    "LogBackward0": lambda x: x.exp().log(),
    "AddBackward0": lambda x: x + 1, "AddBackward1": lambda x: torch.ops.aten.add.Scalar(x, 1),
    "SubBackward0": lambda x: x - 1, "SubBackward1": lambda x: torch.ops.aten.sub.Scalar(x, 1),
    "RsubBackward0": lambda x: torch.ops.aten.rsub.Tensor(x, x), "RsubBackward1": lambda x: 1 - x,
    "NegBackward0": lambda x: -x, "AbsBackward0": lambda x: x.abs(),
    "MulBackward0": lambda x: x * 2, "MulBackward1": lambda x: torch.ops.aten.mul.Scalar(x, 2),
    "DivBackward0": lambda x: x / 2, "DivBackward1": lambda x: torch.ops.aten.div.Scalar(x, 2),
    "DivBackward2": lambda x: torch.div(x, 2, rounding_mode=None),
    "ReciprocalBackward0": lambda x: x.reciprocal(),
    "WhereBackward0": lambda x: torch.where(torch.isneginf(x), 0.0, x),
    "MaskedFillBackward0": lambda x: x.masked_fill(x > 0, 0.0),
    "MaskedFillBackward1": lambda x: x.masked_fill(x > 0, torch.tensor(0.0)),
    "IndexPutBackward0": lambda x: _assigned(x, x > 0), "CopySlices": lambda x: _assigned(x, 0),
    "ClampBackward0": lambda x: x.clamp(min=torch.tensor(-1.0)),
    "ClampBackward1": lambda x: x.clamp(-1, 1), "ClampMinBackward0": lambda x: x.clamp_min(-1),
    "ClampMinBackward1": lambda x: x.clamp_min(torch.tensor(-1.0)),
    "ClampMaxBackward0": lambda x: x.clamp_max(1),
    "ClampMaxBackward1": lambda x: x.clamp_max(torch.tensor(1.0)),
    "NanToNumBackward0": lambda x: torch.nan_to_num(x), "ViewBackward0": lambda x: x.view(-1),
    "ReshapeAliasBackward0": lambda x: x.movedim(-1, 0).reshape(5, -1),
    "UnsafeViewBackward0": lambda x: x.mT.reshape(-1), "UnsqueezeBackward0": lambda x: x[None],
    "SqueezeBackward0": lambda x: x[None].squeeze(),
    "SqueezeBackward1": lambda x: x[None].squeeze(0),
    "SqueezeBackward2": lambda x: x[None].squeeze((0,)),
    "ExpandBackward0": lambda x: x.amax(-1, keepdim=True).expand_as(x),
    "TransposeBackward0": lambda x: x.transpose(0, 1),
    "TransposeBackward1": lambda x: x.clone().transpose_(0, 1),
    "PermuteBackward0": lambda x: x.movedim(-1, 0), "TBackward0": lambda x: x[0].t(),
    "AliasBackward0": lambda x: x[...], "RepeatBackward0": lambda x: x.repeat(1, 1, 2),
    "SelectBackward0": lambda x: x[..., 0], "SliceBackward0": lambda x: x[..., 1:],
    "IndexBackward0": lambda x: x[x > 0], "UnbindBackward0": lambda x: x.unbind(-1)[0],
    "SplitBackward0": lambda x: x.split(2, -1)[0],
    "SplitWithSizesBackward0": lambda x: x.split([2, 3], -1)[0],
    "StackBackward0": lambda x: torch.stack([x, x]), "CatBackward0": lambda x: torch.cat([x, x]),
    "CloneBackward0": lambda x: x.clone(), "ToCopyBackward0": lambda x: x.double(),
    "CopyBackwards": lambda x: torch.empty_like(x).copy_(x),
    "AsStridedBackward0": lambda x: _assigned_in_view(x.amax(-1).unsqueeze(-1)),
}


def _assigned(x, where):
    y = x.clone()
    y[where] = 0.0
    return y


def _assigned_in_view(view):
    view[view > 0] = 0.0  # (into the view itself, not a copy)
    return view


def _nodes(fn):
    """The class names of the autograd nodes ``fn`` adds to a probe-like input."""
    from src.checks import observe

    x = torch.randn(2, 3, 5).requires_grad_() / 1.0
    return observe._graph_calls(fn(x), torch, x.grad_fn)[1]


def test_the_softmax_allow_list_names_the_nodes_torch_records():
    """Every node of lesson.SOFTMAX_OPS is made by the operation it stands for here; the
    allow-list holds nothing else (but the leaf a tensor made inside ends in)."""
    from src.lessons import attention as lesson

    for node, fn in ALLOWED_NODE_CODE.items():
        made = _nodes(fn)
        assert node in made and made <= lesson.SOFTMAX_ALLOWED, (node, made)
    assert set(ALLOWED_NODE_CODE) | {"AccumulateGrad"} == lesson.SOFTMAX_ALLOWED
    from tests.docs import docs_text

    # docs/internals.md states the list as it is
    assert "; ".join(lesson.SOFTMAX_OPS) in docs_text()


RIGHT_SOFTMAXES = {
    "a write into a view (blind set 6)": """
    m = torch.max(x, dim=dim).values.unsqueeze(dim)
    m[torch.isinf(m)] = 0.0
    e = torch.exp(x - m)
    s = torch.sum(e, dim=dim).unsqueeze(dim)
    s[s == 0] = 1.0
    return e / s""",
    "e ** x and clamp": """
    m = x.amax(dim=dim, keepdim=True).clamp(min=-1e30)
    e = math.e ** (x - m)
    return e / e.sum(dim=dim, keepdim=True).clamp_min(1e-30)""",
    "a loop over the slices, stacked": """
    rows = []
    for row in x.movedim(dim, 0).reshape(x.shape[dim], -1).unbind(-1):
        m = row.max()
        m = m if torch.isfinite(m) else torch.zeros_like(m)
        e = (row - m).exp()
        s = e.sum()
        rows.append(e / s if s > 0 else e * 0)
    out = torch.stack(rows, -1)
    return out.reshape(x.movedim(dim, 0).shape).movedim(0, dim)""",
    "float64, max values, masked_fill and nan_to_num": """
    y = x.double()
    m = torch.max(y, dim=dim, keepdim=True).values
    e = torch.exp(y - m.masked_fill(torch.isinf(m), 0))
    return torch.nan_to_num(e / e.sum(dim, keepdim=True)).float()""",
    "in place on a clone, reciprocal": """
    y = x.clone()
    m = y.amax(dim, keepdim=True)
    m[torch.isneginf(m)] = 0
    y.sub_(m).exp_()
    return y * y.sum(dim, keepdim=True).reciprocal().nan_to_num(0, 0, 0)""",
    "logsumexp with a guard": """
    lse = torch.logsumexp(x, dim=dim, keepdim=True)
    lse = torch.where(torch.isneginf(lse), torch.zeros_like(lse), lse)
    return torch.exp(x - lse)""",
}


@pytest.mark.parametrize("name", sorted(RIGHT_SOFTMAXES))
def test_right_softmaxes_use_only_allowed_operations(name):
    scope = {"torch": torch, "math": math}
    exec("def softmax(x, dim=-1):" + RIGHT_SOFTMAXES[name], scope)  # noqa: S102
    res = verify.check_softmax(scope["softmax"])
    assert res.passed and res.score == 1.0, res.message


def test_a_cell_that_raised_half_way_is_reported_with_what_the_name_holds():
    typo = {"cell5_scores": [(SCALE, "attention_scores = raw_scores / math.sqrt(dk)")]}
    results, _, _ = run_graded(typo)
    res = results["attention_scores"]
    assert res.mistake == "undefined_name"
    assert "NameError: name 'dk' is not defined" in res.message
    assert "still holds None" in res.message


def test_softmax_shadowed_by_its_result_is_named():
    results, _, _ = run_graded({"cell6_softmax": [(
        "attention_weights = softmax(attention_scores, dim=-1)",
        "softmax = softmax(attention_scores, dim=-1)\nattention_weights = softmax")]})
    assert results["softmax"].mistake == "softmax_shadowed"
    assert "run Cell 6 first" not in results["softmax"].message
    assert results["attention_weights"].passed


def test_an_in_place_softmax_is_named_and_cell_5_saw_its_scores_intact():
    results, _, ns = run_graded({"cell6_softmax": [(EXPS, "x -= x_max\n    exps = "
                                                          "torch.exp(x)")]})
    assert results["attention_scores"].passed  # checked when Cell 5's test ran
    assert results["softmax"].mistake == "mutates_input"
    assert not verify.check_all(ns).results[1].passed  # what a check after the end sees


# ---------------------------------------------------------------- messages
@pytest.mark.parametrize("bad", [None, [1.0, 2.0], "query", 3, {"a": 1}, np.zeros((1, 6, 6)),
                                 torch.zeros(1, 6, 64, dtype=torch.int64),
                                 torch.full((1, 6, 64), float("nan")), torch.zeros(0),
                                 torch.zeros(1, 6, 64, dtype=torch.complex64),
                                 torch.zeros(1, 6, 64).to_sparse(),
                                 torch.zeros(1, 6, 64, device="meta"),
                                 torch.zeros(1, 6, 64, dtype=torch.bfloat16)])
def test_bad_inputs_give_a_clear_failed_result(reference, bad):
    *_, ns = reference
    for result in (verify.check_projections(bad, ns["key"], ns["value"]),
                   verify.check_attention_scores(ns["query"], ns["key"], bad),
                   verify.check_attention_weights(ns["attention_scores"], bad),
                   verify.check_attended_values(ns["attention_weights"], ns["value"], bad),
                   verify.check_softmax(bad)):
        assert isinstance(result, verify.CheckResult) and not result.passed
        assert result.message and "Traceback" not in result.message


def test_messages_are_short_and_numbers_readable(reference):
    *_, ns = reference

    def boom(x, dim=-1):
        raise ZeroDivisionError("x" * 5000)

    res = verify.check_softmax(boom)
    assert res.mistake == "softmax_raises" and "ZeroDivisionError" in res.message
    what = res.message.split("What we saw: ")[1].split("\n")[0]
    # the probe shown (about 250 characters), then at most 160 of error and 80 of its line
    assert len(what) < 500 and len(what) - len(what.rpartition(" raised ")[0]) < 260
    huge = ns["attention_scores"].detach() * 1e300
    res = verify.check_attention_scores(ns["query"], ns["key"], huge.double())
    assert not re.search(r"\d{20}", str(res)), str(res)
    res = verify.check_attention_scores(ns["query"], ns["key"], ns["attention_scores"] * 1.37)
    assert res.mistake == "scalar_multiple" and "1.37 times" in res.message
    res = verify.check_projections(ns["query"], ns["query"], ns["value"])
    assert "`key`" in res.message
    res = verify.check_attention_weights(ns["attention_scores"],
                                         torch.softmax(ns["attention_scores"], dim=1))
    assert res.mistake == "softmax_wrong_axis" and "columns of" in res.message


def test_numpy_and_float64_inputs(reference):
    *_, ns = reference
    s = ns["attention_scores"].detach().numpy()
    res = verify.check_attention_scores(ns["query"], ns["key"], s)
    assert res.mistake == "not_a_tensor" and res.score == 1.0
    res = verify.check_attention_scores(ns["query"], ns["key"], torch.from_numpy(s).double())
    assert res.mistake == "wrong_dtype" and res.score == 1.0


def test_a_softmax_that_raises_or_returns_junk_is_reported():
    def boom(x, dim=-1):
        raise ZeroDivisionError("oops")

    res = verify.check_softmax(boom)
    assert not res and "ZeroDivisionError: oops" in res.message
    res = verify.check_softmax(lambda x, dim=-1: x.tolist())
    assert not res and "returned a list" in res.message
    res = verify.check_softmax(lambda x, dim=-1: x.sum(dim))
    assert not res and "shape" in res.message


def test_results_read_well_as_text_markdown_and_for_nbgrader():
    from nbgrader.utils import get_partial_grade

    results, _, _ = run_graded({"cell5_scores": [(SCALE, "attention_scores = raw_scores")]})
    res = results["attention_scores"]
    assert str(res).startswith("[FAIL] Cell 5 — scaled dot-product scores: 0/2 points")
    assert res._repr_markdown_().startswith("✘ **Cell 5 — scaled dot-product scores: 0/2 "
                                            "points** (not yet)")
    assert not res and res.points == 0.0
    out = {"output_type": "execute_result", "data": {"text/plain": repr(res.points)}}
    assert get_partial_grade(out, 2.0) == 0.0  # what nbgrader reads from the last line
    full = results["projections"].points
    assert get_partial_grade({"data": {"text/plain": repr(full)}}, 2.0) == 2.0
    assert full._repr_markdown_() == "**2 / 2 points**"
    summary = verify.Summary(list(results.values()))
    assert json.loads(json.dumps(summary.to_dict()))["score"] == 7.0


def test_compare_with_torch_softmax_works_for_anything(reference):
    *_, ns = reference
    s, w = ns["attention_scores"], ns["attention_weights"]
    assert verify.compare_with_torch_softmax(s, w) == ("rows sum to 1: True\n"
                                                       "same as torch.softmax: True")
    assert "False" in verify.compare_with_torch_softmax(s, torch.softmax(s, dim=1))
    assert "False" not in verify.compare_with_torch_softmax(s.double(), w.double())
    for junk in (None, "x", torch.zeros(1, 6, 6, dtype=torch.complex64), w.to_sparse(),
                 torch.zeros(1, 6, 6, device="meta"), w[0], object()):
        assert verify.compare_with_torch_softmax(junk, junk)
        assert verify.compare_with_torch_softmax(s, junk)


# ------------------------------------------------------ observe and judge
def test_observe_gives_plain_data_that_round_trips(reference):
    _, data, _ = reference
    for gid, d in data.items():
        assert int(d["format"]) == 1, gid
        for key, value in d.items():
            assert isinstance(value, np.ndarray) and value.dtype.kind in "biufcU", key
        back = roundtrip(d)
        assert back.keys() == d.keys()
        assert all(back[k].dtype == d[k].dtype and np.array_equal(back[k], d[k]) for k in d)
    values = data["cell4_projections_test"]["t.query.values"]
    assert values.dtype == np.float32 and values.shape == (1, 6, 64)
    assert list(data["cell4_projections_test"]["t.query.made_by"]) == ["q_proj.bias",
                                                                      "q_proj.weight"]
    assert data["cell6_softmax_test"]["softmax.p0.out.values"].shape == (2, 3, 5)


def test_observe_caps_its_size(tmp_path):
    huge = torch.zeros(1, 6, 2**19)  # 12 MiB: recorded by its facts only
    data = verify.observe("cell7_values_test", {n: huge for n in verify.NAMES[
        "attended_values"].all})
    assert "t.attended_values.values" not in data
    assert list(data["t.attended_values.shape"]) == [1, 6, 2**19]
    res = verify.judge("cell7_values_test", data).results[0]
    assert not res.passed and "too large" in res.message
    # the worst case: every name just under the per-array cap, a softmax returning as much
    big = torch.rand(1, 2**18 - 1)  # just under 1 MiB
    for gid in verify.GRADE_CELLS:
        ns = {n: big.clone() for s in verify.GRADE_CELLS[gid] for n in verify.NAMES[s].all}
        ns["softmax"] = lambda x, dim=-1: big.clone()
        raw = replay.pack(verify.observe(gid, ns))  # what crosses the replay's pipe
        assert len(raw) <= replay.DATA_BYTES, gid
        assert len(replay.unpack(raw)) < 256, gid


class Hostile:
    """An object that fights back."""

    shape = property(lambda self: 1 / 0)

    def __getattr__(self, name):
        raise RuntimeError("no")

    def __array__(self, *a, **k):
        raise RuntimeError("no")

    def __bool__(self):
        raise RuntimeError("no")


class HostileMapping(dict):
    def __getitem__(self, key):
        raise RuntimeError("no")

    def get(self, key, default=None):
        raise RuntimeError("no")


class WeirdTensor(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        raise RuntimeError("no")


def _hostile_softmax(x, dim=-1):
    import sys as _sys

    _sys.stdout.write("printed")
    return Hostile()


def _csr():
    import warnings

    with warnings.catch_warnings():  # "sparse CSR support is in beta"
        warnings.simplefilter("ignore")
        return torch.zeros(1, 6, 6).to_sparse_csr()


HOSTILE = [Hostile(), WeirdTensor(), torch.zeros(3).as_subclass(WeirdTensor), _hostile_softmax,
           lambda *a, **k: (_ for _ in ()).throw(SystemExit(1)), torch.zeros(1, 6, 6).expand(
               1, 6, 6), torch.zeros(2, 3).t(), np.array([object()]), np.array(["a"]),
           torch.zeros(1, 6, 6, dtype=torch.bool), _csr()]


@pytest.mark.parametrize("obj", HOSTILE, ids=range(len(HOSTILE)))
def test_observe_never_raises_whatever_the_namespace_holds(obj):
    for gid, steps in verify.GRADE_CELLS.items():
        names = {n for s in steps for n in verify.NAMES[s].all}
        for ns in ({n: obj for n in names}, HostileMapping(), {}):
            data = verify.observe(gid, ns)
            assert all(isinstance(v, np.ndarray) and v.dtype.kind != "O"
                       for v in data.values())
            roundtrip(data)
            assert not verify.judge(gid, data).passed


KEYS = sorted({k for d in (verify.observe(g, {}) for g in verify.GRADE_CELLS) for k in d} | {
    f"t.{n}.{f}" for n in verify.SHAPES for f in ("info", "values", "shape", "made_by")} | {
    f"softmax.p{i}.{f}" for i in range(9) for f in ("raised", "mutated", "out.values",
                                                    "out.info", "out.shape")} |
    {"softmax.info", "softmax.calls", "softmax.nodes", "softmax.error", "error", "cell.raised",
     "cell.ran"})
ARRAYS = st.one_of(
    st.builds(np.array, st.one_of(st.integers(-10, 10), st.floats(allow_nan=True),
                                  st.text(max_size=8), st.booleans())),
    st.builds(lambda shape, fill: np.full(shape, fill), st.lists(st.integers(0, 7),
                                                                 max_size=4).map(tuple),
              st.floats(allow_nan=True, allow_infinity=True, width=32)),
    st.builds(lambda n, s: np.array([s] * n), st.integers(0, 9),
              st.sampled_from(["tensor", "ndarray", "float32", "none", "function", "", "x",
                               "q_proj.weight", "other [64]", "AssertionError: boom"])),
    st.builds(lambda shape: np.arange(int(np.prod(shape))).reshape(shape).astype(np.float32),
              st.lists(st.integers(1, 7), min_size=1, max_size=3).map(tuple)),
    st.builds(lambda: np.array([1e308, -1e308])), st.builds(lambda: np.zeros((1, 6, 6), "c8")),
    st.none(), st.integers(), st.text(max_size=4))


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(list(verify.GRADE_CELLS) + ["nope", ""]),
       st.dictionaries(st.sampled_from(KEYS), ARRAYS, max_size=30), st.booleans())
def test_judge_never_raises_on_hostile_data(gid, data, strict):
    summary = verify.judge(gid, data, strict=strict)
    str(summary)
    summary._repr_markdown_()
    json.dumps(summary.to_dict())


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(list(verify.GRADE_CELLS)), st.sampled_from(KEYS), ARRAYS)
def test_judge_never_raises_on_a_corrupted_right_answer(reference, gid, key, value):
    _, data, _ = reference
    verify.judge(gid, dict(data[gid], **{key: value}), strict=True)


anything = st.one_of(
    st.none(), st.integers(), st.floats(), st.text(max_size=5), st.lists(st.floats(), max_size=4),
    st.builds(lambda shape, fill: torch.full(shape, fill),
              st.lists(st.integers(0, 7), max_size=4).map(tuple),
              st.floats(allow_nan=True, allow_infinity=True, width=32)),
    st.builds(lambda shape: np.zeros(shape), st.lists(st.integers(0, 7), max_size=4).map(tuple)),
)


@settings(max_examples=100, deadline=None)
@given(anything, anything, anything)
def test_fuzzed_inputs_never_raise(a, b, c):
    for result in (verify.check_projections(a, b, c), verify.check_attention_scores(a, b, c),
                   verify.check_attention_weights(a, b), verify.check_attended_values(a, b, c),
                   verify.check_softmax(a), verify.check_all({"query": a, "key": b})):
        str(result)
        result._repr_markdown_()


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([lambda x, dim=-1: x, lambda x, dim=-1: x * 0, lambda x: x.exp(),
                        lambda x, dim=-1: torch.exp(x) / 0, lambda *a, **k: None,
                        lambda x, dim=-1: x.unsqueeze(0), lambda x, dim=-1: x.numpy()]))
def test_fuzzed_softmax_functions_never_raise(fn):
    assert not verify.check_softmax(fn)
    assert not verify.check_softmax(fn, strict=True)


def test_the_judge_reads_the_replays_data_without_torch(reference, tmp_path):
    *_, ns = reference
    for gid in verify.GRADE_CELLS:
        (tmp_path / f"{gid}.npz").write_bytes(replay.pack(verify.observe(gid, ns)))
    code = ("import sys; sys.modules['torch'] = None\n"  # any import of torch now fails
            "import numpy as np, verify\n"
            "for gid in verify.GRADE_CELLS:\n"
            f"    with np.load({str(tmp_path)!r} + '/' + gid + '.npz', allow_pickle=False) as f:\n"
            "        print(gid, verify.judge(gid, dict(f), strict=True).score)\n")
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["cell4_projections_test", "2.0", "cell5_scores_test", "2.0",
                                  "cell6_softmax_test", "3.0", "cell7_values_test", "2.0"]


def test_importing_verify_is_cheap():
    code = ("import sys, verify; heavy = {'torch', 'nbformat', 'nbclient', 'matplotlib'}; "
            "print(sorted(heavy & set(sys.modules)))")
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert res.stdout.strip() == "[]", res.stdout + res.stderr


# --------------------------------------------------------------------- CLI
def _write(tmp_path, edits):
    import nbformat

    nb = nbformat.read(SOURCE, as_version=4)
    for cell in nb.cells:
        for old, new in edits.get(cell.get("id"), []):
            assert old in cell.source
            cell.source = cell.source.replace(old, new)
    path = tmp_path / "submission.ipynb"
    nbformat.write(nb, path)
    return path


@pytest.mark.slow
def test_cli_reports_what_each_test_cell_saw_in_a_real_kernel(tmp_path):
    # An in-place softmax overwrites attention_scores in Cell 6: Cell 5's test, which ran
    # before, saw them intact (a check after the last cell would not). A typo in Cell 7
    # shows what the cell raised.
    path = _write(tmp_path, {"cell6_softmax": [(EXPS, "x -= x_max\n    exps = torch.exp(x)")],
                             "cell7_values": [(AGG, AGG.replace("value", "values"))]})
    res = subprocess.run([sys.executable, str(ROOT / "verify.py"), str(path)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "submission.ipynb: 6/9 points" in res.stdout, res.stdout
    assert "[PASS] Cell 5 — scaled dot-product scores: 2/2" in res.stdout
    assert "Mistake: the softmax changes its input in place." in res.stdout
    assert "[PASS] Cell 6 — attention weights: 2/2" in res.stdout
    assert "your Cell 7 raised NameError: name 'values' is not defined" in res.stdout
    assert "Kernel is running over TCP" not in res.stdout + res.stderr
    assert res.stderr.strip() == "", res.stderr


@pytest.mark.slow
def test_cli_json_on_the_untouched_lesson():
    res = subprocess.run([sys.executable, str(ROOT / "verify.py"), str(LESSON), "--json",
                          "--strict"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 1
    report = json.loads(res.stdout)
    assert report["score"] == 0 and report["max_score"] == 9 and report["strict"]
    assert report["cells"]["cell4_projections_test"]["results"][0]["mistake"] == "stub_left"
    first = report["cell_errors"][0]
    assert (first["cell"], first["error"]) == ("cell4_projections", "NotImplementedError")
    assert first["message"].startswith("Your turn: replace this line with your code.")
    assert "Kernel is running over TCP" not in res.stderr


def test_cli_rejects_a_missing_file(tmp_path):
    res = subprocess.run([sys.executable, str(ROOT / "verify.py"), str(tmp_path / "nope.ipynb")],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "not found" in res.stderr


def test_weights_from_a_wrong_function_point_to_the_function():
    """One bug in the softmax fails the function and the weights: the weights' check says
    the function is the place to fix (the apply line may well be right)."""
    results, _, _ = run_graded({"cell6_softmax": [(RETURN_LINE, "return exps")]})
    assert not results["softmax"].passed and not results["attention_weights"].passed
    assert "function is wrong too" in " ".join(results["attention_weights"].notes)
    right, _, _ = run_graded({"cell6_softmax": [(
        "attention_weights = softmax(attention_scores, dim=-1)",
        "attention_weights = softmax(attention_scores, dim=0)")]})
    assert right["softmax"].passed  # a right function: nothing said about it
    assert "function is wrong" not in " ".join(right["attention_weights"].notes)


def test_verify_py_replays_a_notebook_and_names_what_is_not_one(tmp_path, capsys):
    """``python verify.py NOTEBOOK``: the reference earns every point; a file that is not
    a notebook of nbformat 4 gets exit status 2 and says what was expected and seen."""
    from tests.notebook_utils import ROOT

    assert verify.main([str(ROOT / "complete_lesson.ipynb")]) == 0
    assert "complete_lesson.ipynb: 9/9 points" in capsys.readouterr().out
    bad = tmp_path / "notes.ipynb"
    for text, said in (("{ not json", "notes.ipynb is not a notebook: not valid JSON"),
                       ('{"nbformat": 3, "worksheets": []}',
                        "expected a Jupyter notebook of nbformat 4 with a list of cells, "
                        "got nbformat 3")):
        bad.write_text(text)
        assert verify.main([str(bad)]) == 2
        assert said in capsys.readouterr().err


@pytest.mark.parametrize("line, said", [
    ("attention_scores = torch.matmul(query, key.transpose(0, 1)) / math.sqrt(d_k)",
     "`query` is [1, 6, 64] and `key.transpose(0, 1)` is [6, 1, 64]"),
    ("attention_scores = query @ key / 8", "`query` is [1, 6, 64] and `key` is [1, 6, 64]"),
    ("attended_values = value.bmm(attention_weights.permute(0, 2, 1))",
     "`value` is [1, 6, 64] and `attention_weights.permute(0, 2, 1)` is [1, 6, 6]"),
    ("s = query[0] @ key[0].view(6, 64)", "`query[0]` is [6, 64] and `key[0].view(6, 64)` "
     "is [6, 64]"),
    ("attention_scores = query @ key.mT / 8", ""),  # it fits: nothing said
    ("attention_scores = query @ mystery(key)", ""),  # unread: nothing guessed
])
def test_a_product_that_does_not_fit_is_told_with_its_operands_shapes(line, said):
    from src.checks.shapes import misfit

    assert misfit(line, verify.LESSON.shapes).startswith(said)
    if said and line.startswith("attention_scores"):  # and Cell 5's check says it, from
        from tests.corpus import release_setup  # a real replay of the line

        data = replay.replay_step(verify.LESSON, "cell5_scores", line, release_setup())
        result = verify.judge_replay("cell5_scores_test", data, strict=True).results[0]
        assert result.mistake == "matmul_shapes" and said in result.message


def test_a_result_computed_and_kept_nowhere_is_said_beside_the_mistake():
    """``scores / math.sqrt(d_k)`` on a line of its own changes nothing: a blind reader
    found "divide by √d_k" unhelpful to a student who believes they did; the line is named."""
    from tests.corpus import release_setup

    source = ("scores = query @ key.transpose(-2, -1)\nscores / math.sqrt(d_k)\n"
              "attention_scores = scores\n")
    data = replay.replay_step(verify.LESSON, "cell5_scores", source, release_setup())
    result = verify.judge_replay("cell5_scores_test", data, strict=True).results[0]
    assert result.mistake == "no_scaling"
    assert ("computes `scores / math.sqrt(d_k)` on a line of its own and assigns the result "
            "to nothing") in result.message
    right = replay.replay_step(verify.LESSON, "cell5_scores", source.replace(
        "attention_scores = scores", "attention_scores = scores / 8"), release_setup())
    assert verify.judge_replay("cell5_scores_test", right, strict=True).passed  # (no noise)


def test_an_input_reshaped_in_place_is_told_as_another_shape():
    """key.transpose_ in Cell 5: the same numbers in another shape, not "other numbers"."""
    from tests.corpus import release_setup

    src = "key.transpose_(-2, -1)\nattention_scores = query @ key / math.sqrt(d_k)\n"
    data = replay.replay_step(verify.LESSON, "cell5_scores", src, release_setup())
    (result,) = verify.judge_replay("cell5_scores_test", data, strict=True).results
    assert result.mistake == "changes_input", str(result)
    assert "`key` had another shape than before" in result.message, result.message
