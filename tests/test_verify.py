"""verify.py: full marks for the reference, 0 for the stubs, every mistake named."""

import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import verify
from tests.catalogue import AGG, CATALOGUE, SCALE
from tests.notebook_utils import LESSON, ROOT, SOURCE, cells_by_id, run_steps

REF = cells_by_id(SOURCE)
STEP_OF = {"projections": 0, "attention_scores": 1, "softmax": 2, "attention_weights": 3,
           "attended_values": 4}

def test_the_catalogue_is_complete():
    assert len(verify.MISTAKES) >= 12
    assert {m for m, *_ in CATALOGUE} == set(verify.MISTAKES)


def test_reference_solution_scores_full_marks():
    summary = verify.check_all(run_steps(REF))
    assert summary.passed, str(summary)
    assert summary.score == summary.max_score == 9.0


def test_untouched_lesson_scores_zero():
    ns = run_steps(cells_by_id(LESSON))
    summary = verify.check_all(ns)
    assert summary.score == 0 and not any(summary.results)
    assert "not been computed yet" in summary.results[0].message


@pytest.mark.parametrize("mistake, replace, step, also_fail", CATALOGUE,
                         ids=[c[0] for c in CATALOGUE])
def test_each_mistake_is_named_and_does_not_cascade(mistake, replace, step, also_fail):
    summary = verify.check_all(run_steps(REF, replace))
    result = summary.results[STEP_OF[step]]
    assert not result.passed
    assert result.mistake == mistake, str(result)
    m = verify.MISTAKES[mistake]
    for part in (f"Mistake: {m.title}", "What we saw:", "Likely cause:", "Next step:"):
        assert part in result.message
    failed = {r.step for r in summary.results if not r.passed}
    assert failed == {step, *also_fail}, str(summary)


def test_partial_credit_for_shape_and_dtype_slips():
    lost = "attended_values = (attention_weights @ value)[0]"
    ns = run_steps(REF, {"cell7_values": [(AGG, lost)]})
    assert verify.check_all(ns).results[-1].score == 1.0  # half of 2


def test_an_early_mistake_is_not_punished_downstream():
    ns = run_steps(REF, {"cell5_scores": [(SCALE, "attention_scores = raw_scores")]})
    later = verify.check_attention_weights(ns["attention_scores"], ns["attention_weights"])
    assert later.passed and "checked against your own tensors" in " ".join(later.notes)


def test_strict_softmax_requires_zeros_for_a_fully_masked_row():
    def plain(x, dim=-1):
        e = torch.exp(x - x.amax(dim=dim, keepdim=True))
        return e / e.sum(dim=dim, keepdim=True)

    assert verify.check_softmax(plain)
    strict = verify.check_softmax(plain, strict=True)
    assert not strict and "entirely -inf" in strict.message


def test_strict_projections_require_the_learnable_layers():
    ns = run_steps(REF)
    detached = [ns[n].detach() for n in ("query", "key", "value")]
    assert verify.check_projections(*detached)
    assert not verify.check_projections(*detached, strict=True)


@pytest.mark.parametrize("bad", [None, [1.0, 2.0], "query", 3, {"a": 1}, np.zeros((1, 6, 6)),
                                 torch.zeros(1, 6, 64, dtype=torch.int64),
                                 torch.full((1, 6, 64), float("nan")), torch.zeros(0),
                                 torch.zeros(1, 6, 64, dtype=torch.complex64)])
def test_bad_inputs_give_a_clear_failed_result(bad):
    ns = run_steps(REF)
    for result in (verify.check_projections(bad, ns["key"], ns["value"]),
                   verify.check_attention_scores(ns["query"], ns["key"], bad),
                   verify.check_attention_weights(ns["attention_scores"], bad),
                   verify.check_attended_values(ns["attention_weights"], ns["value"], bad),
                   verify.check_softmax(bad)):
        assert isinstance(result, verify.CheckResult) and not result.passed
        assert result.message and "Traceback" not in result.message


def test_requires_grad_and_numpy_and_float64_inputs():
    ns = run_steps(REF)
    assert verify.check_projections(ns["query"], ns["key"], ns["value"])  # requires grad
    s = ns["attention_scores"].detach().numpy()
    assert verify.check_attention_scores(ns["query"], ns["key"], s)  # numpy float32
    res = verify.check_attention_scores(ns["query"], ns["key"], s.astype(np.float64))
    assert not res and res.mistake == "wrong_dtype"


def test_a_softmax_that_raises_or_returns_junk_is_reported():
    def boom(x, dim=-1):
        raise ZeroDivisionError("oops")

    res = verify.check_softmax(boom)
    assert not res and "ZeroDivisionError: oops" in res.message
    res = verify.check_softmax(lambda x, dim=-1: x.tolist())
    assert not res and "returned a list" in res.message
    res = verify.check_softmax(lambda x, dim=-1: x.sum(dim))
    assert not res and "keep the shape" in res.message


anything = st.one_of(
    st.none(), st.integers(), st.floats(), st.text(max_size=5), st.lists(st.floats(), max_size=4),
    st.builds(lambda shape, fill: torch.full(shape, fill),
              st.lists(st.integers(0, 7), max_size=4).map(tuple),
              st.floats(allow_nan=True, allow_infinity=True, width=32)),
    st.builds(lambda shape: np.zeros(shape), st.lists(st.integers(0, 7), max_size=4).map(tuple)),
)


@settings(max_examples=150, deadline=None)
@given(anything, anything, anything)
def test_fuzzed_inputs_never_raise(a, b, c):
    for result in (verify.check_projections(a, b, c), verify.check_attention_scores(a, b, c),
                   verify.check_attention_weights(a, b), verify.check_attended_values(a, b, c),
                   verify.check_softmax(a), verify.check_all({"query": a, "key": b})):
        str(result)
        result._repr_markdown_()


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([lambda x, dim=-1: x, lambda x, dim=-1: x * 0, lambda x: x.exp(),
                        lambda x, dim=-1: torch.exp(x) / 0, lambda *a, **k: None,
                        lambda x, dim=-1: x.unsqueeze(0), lambda x, dim=-1: x.numpy()]))
def test_fuzzed_softmax_functions_never_raise(fn):
    assert not verify.check_softmax(fn)
    assert not verify.check_softmax(fn, strict=True)


def test_results_read_well_as_text_markdown_and_for_nbgrader():
    from nbgrader.utils import get_partial_grade

    ns = run_steps(REF, {"cell5_scores": [(SCALE, "attention_scores = raw_scores")]})
    res = verify.check_attention_scores(ns["query"], ns["key"], ns["attention_scores"])
    assert str(res).startswith("[FAIL] Cell 5 — scaled dot-product scores: 0/2 points")
    assert res._repr_markdown_().startswith("✘ **Cell 5 — scaled dot-product scores: 0/2 "
                                            "points** (not yet)")
    assert not res and res.points == 0.0
    # what nbgrader reads from the test cell's last line
    out = {"output_type": "execute_result", "data": {"text/plain": repr(res.points)}}
    assert get_partial_grade(out, 2.0) == 0.0
    full = verify.check_projections(ns["query"], ns["key"], ns["value"]).points
    assert get_partial_grade({"data": {"text/plain": repr(full)}}, 2.0) == 2.0
    assert full._repr_markdown_() == "**2 / 2 points**"
    summary = verify.check_all(ns)
    assert json.loads(json.dumps(summary.to_dict()))["score"] == 7.0


def test_importing_verify_is_cheap():
    code = ("import sys, verify; heavy = {'torch', 'nbformat', 'nbclient', 'matplotlib'}; "
            "print(sorted(heavy & set(sys.modules)))")
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert res.stdout.strip() == "[]", res.stdout + res.stderr


@pytest.mark.slow
def test_cli_reports_a_mistake_in_a_real_kernel(tmp_path):
    import nbformat

    nb = nbformat.read(SOURCE, as_version=4)
    for cell in nb.cells:
        if cell.get("id") == "cell5_scores":
            cell.source = cell.source.replace(SCALE, "attention_scores = raw_scores")
    path = tmp_path / "submission.ipynb"
    nbformat.write(nb, path)
    res = subprocess.run([sys.executable, str(ROOT / "verify.py"), str(path)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "submission.ipynb: 7/9 points" in res.stdout
    assert "[FAIL] Cell 5 — scaled dot-product scores: 0/2" in res.stdout
    assert "Mistake: the scores are not scaled by 1/√d_k." in res.stdout
    assert "[PASS] Cell 6 — attention weights: 2/2" in res.stdout


@pytest.mark.slow
def test_cli_json_on_the_untouched_lesson(tmp_path):
    res = subprocess.run([sys.executable, str(ROOT / "verify.py"), str(LESSON), "--json"],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 1
    report = json.loads(res.stdout)
    assert report["score"] == 0 and report["max_score"] == 9
    assert report["cell_errors"][0] == {
        "cell": "cell4_projections", "error": "NotImplementedError",
        "message": "Your turn: replace this line with your code. The hint below helps if you "
                   "are stuck."}


def test_cli_rejects_a_missing_file(tmp_path):
    res = subprocess.run([sys.executable, str(ROOT / "verify.py"), str(tmp_path / "nope.ipynb")],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "not found" in res.stderr
