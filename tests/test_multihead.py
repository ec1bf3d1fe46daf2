"""Lesson 2 (multi-head and causal attention) through the same engine as lesson 1.

Its corpus (tests/corpus_multihead.py) graded as grading grades it and run in a real
IPython shell, where the check cells' own calls (the live check) must say the same;
the second run on fresh random inputs; the sandboxed replay; ``python verify.py``;
the notebooks generated from one source; its own decisions in its own spec; the
per-head figures; the closing comparison with PyTorch's own layers.
"""

from __future__ import annotations

import ast
import json
import math
import re
import subprocess
import sys

import numpy as np
import pytest

import verify
from src import lessons, release, replay, sandbox
from src import visualizations as viz
from tests import corpus_multihead as corpus
from tests.notebook_utils import ROOT, load, source

pytestmark = pytest.mark.filterwarnings("ignore")  # students' code may warn
SPEC = corpus.SPEC


@pytest.fixture(scope="module")
def records():
    return {a.name: corpus.run_attempt(a) for a in corpus.ATTEMPTS}


def test_the_corpus_figure(records, record_property):
    recs = list(records.values())
    figure = corpus.figure(recs)
    record_property("lesson 2 corpus figure", figure)
    right = [r for r in recs if r.attempt.correct]
    wrong = [r for r in recs if not r.attempt.correct]
    assert len(right) >= 20 and len(wrong) >= 35, figure
    assert all(not r.problems() for r in recs), figure
    assert sum(r.named for r in wrong) >= 0.9 * len(wrong), figure
    # every mistake of the lesson's own catalogue is met by an attempt
    own = {m.id for m in SPEC.entries if m.step != "any"}
    met = {w for a in corpus.ATTEMPTS for w in a.expect.values()}
    assert own <= met, own - met


@pytest.mark.parametrize("name", [a.name for a in corpus.ATTEMPTS])
def test_each_attempt_gets_the_verdict_it_deserves(records, name):
    """Right: full marks on every check. Wrong: points lost on the expected check only,
    with a message that names the mistake (an earlier slip charged once)."""
    assert records[name].problems() == []


def test_the_live_check_equals_grading(records):
    """The check cells' own calls in the kernel (the live check on the code last run in
    each step cell) give what grading's replay gives, message for message."""
    def verdict(results):  # (what the live check adds about the kernel is not a verdict)
        return [{k: v for k, v in r.items() if k != "kernel_notes"} for r in results]

    for name, rec in records.items():
        for step in SPEC.steps:
            assert verdict(rec.explicit[step.test]) == verdict(rec.observed[step.test]), (
                name, step.test)


SEEDS = [int(s) >> 1 for s in np.random.SeedSequence(20261127).generate_state(6, np.uint64)]


@pytest.mark.parametrize("step", [s.cell for s in SPEC.steps if s.variant])
def test_a_right_cell_keeps_its_points_whatever_the_second_run_draws(step):
    gid = SPEC.by_cell[step].test
    codes = {corpus.sources(a)[step] for a in corpus.ATTEMPTS if a.correct}
    assert len(codes) >= 4
    lost = []
    for code in sorted(codes):
        for seed in SEEDS:
            data = replay.replay_step(SPEC, step, code, corpus.release_setup(), None, seed)
            assert "variant.in.x" in data
            s = verify.judge_replay(gid, data, strict=True)
            if s.score != s.max_score:
                lost.append((seed, code[-100:], s.results[0].message[:160]))
    assert lost == []


def test_a_result_typed_in_from_the_lesson_is_caught_by_the_second_run():
    ref = SPEC.reference()["q_heads"].astype(np.float32).tolist()
    code = (f"q_heads = torch.tensor({ref}) + 0 * query.view(1, 6, 8, 8).transpose(1, 2)\n"
            "k_heads = key.view(1, 6, 8, 8).transpose(1, 2)\n"
            "v_heads = value.view(1, 6, 8, 8).transpose(1, 2)\n")
    data = replay.replay_step(SPEC, "mh_cell4_split", code, corpus.release_setup(), None, 7)
    result = verify.judge_replay("mh_cell4_split_test", data, strict=True).results[0]
    assert result.score == 0 and result.mistake == "right_only_here", result.message


@pytest.mark.skipif(sandbox.unavailable_reason() is not None,
                    reason=f"no sandbox here: {sandbox.unavailable_reason()}")
def test_the_sandboxed_replay_grades_as_the_in_process_one():
    """grading.replay_steps (the fork server in bubblewrap, as `make grade` runs it) on
    lesson 2's assignment: the same scores as the in-process replay."""
    from src import grading

    names = ["reference", "divided by 8", "W_o transposed", "an earlier slip, then right code"]
    try:
        for name in names:
            a = next(x for x in corpus.ATTEMPTS if x.name == name)
            codes = corpus.sources(a)
            steps = {s.cell: codes[s.cell] for s in SPEC.steps}
            with replay.pinned_seed(corpus.SECOND_RUN_SEED):
                answer = grading.replay_steps(steps, assignment=SPEC.name)
                local = replay.replay_in_process(SPEC, codes, corpus.release_setup())
            for s in SPEC.steps:
                got = verify.judge_replay(s.test, answer[s.cell], answer.get(f"own:{s.cell}"),
                                          strict=True)
                want = verify.judge_replay(s.test, local[s.cell],
                                           local.get(f"own:{s.cell}"), strict=True)
                assert [r.to_dict() for r in got.results] == \
                    [r.to_dict() for r in want.results], (name, s.cell)
    finally:
        grading.close_replay_servers()


def test_verify_cli_on_both_notebooks_of_lesson_2():
    """`python verify.py` finds the lesson from the notebook's cells: the reference earns
    8/8, the released notebook 0/8 with each step's stub named."""
    def run(path):
        res = subprocess.run([sys.executable, str(ROOT / "verify.py"), str(path), "--json"],
                             capture_output=True, text=True, timeout=240, cwd=ROOT)
        return res.returncode, json.loads(res.stdout)

    code, report = run(corpus.SOURCE)
    assert (code, report["lesson"], report["score"], report["max_score"]) == (
        0, "multihead", 8.0, 8.0), report
    code, report = run(corpus.RELEASE)
    assert (code, report["score"], report["max_score"]) == (1, 0.0, 8.0)
    assert {r["mistake"] for r in report["results"]} == {"stub_left"}


# ------------------------------------------------------------------ its notebooks
def test_the_student_notebook_is_generated_from_the_reference_byte_identically():
    text = release.dumps(release.generate(release.read(corpus.SOURCE), corpus.SOURCE.name))
    assert corpus.RELEASE.read_text(encoding="utf-8") == text
    assert release.is_pristine(corpus.RELEASE)
    assert load(corpus.RELEASE)["metadata"][release.STAMP_KEY]["generated_from"] == \
        corpus.SOURCE.name


def test_the_notebook_holds_the_spec_steps_points_and_set_up():
    cells = {c["id"]: c for c in load(corpus.SOURCE)["cells"]}
    for step in SPEC.steps:
        test = cells[step.test]["metadata"]["nbgrader"]
        assert test["points"] == sum(c.points for c in step.checks) == 2.0
        assert cells[step.cell]["metadata"]["nbgrader"]["solution"]
        assert step.call.split("(")[0] in source(cells[step.test])
    assert SPEC.max_score == 8.0
    setup = "\n".join(source(cells[c]) for c in SPEC.setup_cells)
    bound = set()
    for node in ast.walk(ast.parse(setup)):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {a.asname or a.name.split(".")[0] for a in node.names}
    assert set(SPEC.setup_names) <= bound, set(SPEC.setup_names) - bound
    assert set(SPEC.official) <= bound  # (the step names start as None)


def test_each_step_has_theory_with_latex_before_and_a_tiered_hint_after():
    """Theory with LaTeX before each step cell; after it, a hint whose tiers open one by
    one, and no line of the answer before the last tier."""
    nb = load(corpus.SOURCE)["cells"]
    ids = [c["id"] for c in nb]
    answers = {s.cell: [ln.strip() for ln in re.search(
        r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", source(nb[ids.index(s.cell)]),
        re.S).group(1).splitlines() if ln.strip()] for s in SPEC.steps}
    for step in SPEC.steps:
        i = ids.index(step.cell)
        theory = source(nb[i - 1])
        assert nb[i - 1]["cell_type"] == "markdown" and "$$" in theory, step.cell
        hint = source(nb[i + 1])
        tiers = hint.split("<details>")
        assert len(tiers) >= 3 and "<summary>" in hint, step.cell
        before_last = "".join(tiers[:-1])
        for line in answers[step.cell]:
            code = line.split("#")[0].strip()
            assert code not in before_last, (step.cell, code)
        assert nb[i + 2]["id"] == step.test


def test_the_closing_cell_agrees_with_pytorch_within_its_tolerance():
    import torch

    from src.data import load_example, load_output, sinusoidal_positions
    from src.lessons import multihead

    ex = load_example()
    x = ex.x + torch.from_numpy(sinusoidal_positions(6))
    out = torch.from_numpy(SPEC.reference()["multihead_output"].astype(np.float32))
    w_o = torch.from_numpy(load_output())
    lines = multihead.compare_with_torch(x, ex.q_proj, ex.k_proj, ex.v_proj, w_o, out)
    assert lines[1:] == ["same as nn.MultiheadAttention: True",
                         "same as F.scaled_dot_product_attention(is_causal=True): True"]
    wrong = multihead.compare_with_torch(x, ex.q_proj, ex.k_proj, ex.v_proj, w_o.T, out)
    assert wrong[1:] == ["same as nn.MultiheadAttention: False",
                         "same as F.scaled_dot_product_attention(is_causal=True): False"]
    assert "finish Cell 7" in multihead.compare_with_torch(
        x, ex.q_proj, ex.k_proj, ex.v_proj, w_o, None)[0]


# ------------------------------------------------------------- its own decisions
def test_each_lesson_holds_its_own_decisions_about_the_scaling():
    """`/ 8` is right in lesson 1 (d_k = 64) and wrong here (d_k = 8): the same engine
    reads each spec's own constants and catalogue."""
    l1 = lessons.lesson("attention")
    setup1 = replay.setup_namespace([
        source(c) for c in load(ROOT / f"{l1.source}.ipynb")["cells"]
        if c["id"] in l1.setup_cells])
    data = replay.replay_step(l1, "cell5_scores",
                              "attention_scores = query @ key.transpose(-2, -1) / 8",
                              setup1, None, 1)
    assert verify.judge_replay("cell5_scores_test", data, strict=True).score == 2.0
    data = replay.replay_step(
        SPEC, "mh_cell5_scores", "head_scores = (q_heads @ k_heads.transpose(-2, -1) / 8)"
        ".masked_fill(~causal_mask, float('-inf'))", corpus.release_setup(), None, 1)
    result = verify.judge_replay("mh_cell5_scores_test", data, strict=True).results[0]
    assert result.score == 0 and result.mistake == "head_scores_by_8"
    assert SPEC.facts["d_k"] == 8 and l1.facts["d_k"] == 64
    assert "scale_is_sqrt8" in SPEC.decisions and "constant_sqrt_dk" in l1.decisions
    assert math.isclose(SPEC.reference()["head_scores"][0, 0, 1, 0] * math.sqrt(8),
                        float(SPEC.reference()["q_heads"][0, 0, 1] @
                              SPEC.reference()["k_heads"][0, 0, 0]))


# ------------------------------------------------------------------ its figures
def test_a_check_cell_draws_one_heatmap_per_head_with_a_text_alternative():
    data = replay.replay_step(SPEC, "mh_cell5_scores", corpus.sources(
        corpus.ATTEMPTS[0])["mh_cell5_scores"], corpus.release_setup(), None, 1)
    results = verify.judge_replay("mh_cell5_scores_test", data, strict=True).results
    (fig,) = viz.check_figures(SPEC, results)
    assert fig["matrix"].shape == (8, 6, 6)
    assert np.isneginf(fig["matrix"][:, 0, 1:]).all()  # (masked: drawn blank)
    assert fig["alt"].startswith("8 heatmaps, one per head")
    assert fig["table"].count("\nhead ") == 8 and "The->The" in fig["table"]
    png = viz.figure_png(fig)
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
    # the feedback draws the same figure from its JSON form (-inf kept)
    again = json.loads(json.dumps({k: (v.tolist() if k == "matrix" else v)
                                   for k, v in fig.items()}))
    assert viz.drawable(again["matrix"], again["labels"]).shape == (8, 6, 6)


# ------------------------------------------------------------- no answer handed out
def test_no_message_or_first_hint_tier_of_lesson_2_earns_a_step_when_pasted():
    """Every next step and cause of lesson 2's catalogue (its own entries and the engine's
    general ones, in this lesson's words) and each hint's tiers before the last: every
    code fragment in them, put into the step cell as tests/test_no_answer.py puts lesson
    1's, earns no check."""
    from tests.test_no_answer import candidates

    cells = {c["id"]: source(c) for c in load(corpus.SOURCE)["cells"]}
    earned = []
    for step in SPEC.steps:
        texts = []
        for check in step.checks:
            texts += [(m.id, t) for m in SPEC.entries if m.step in ("any", check.name)
                      for t in (m.next_step_for(check.name), m.cause_for(check.name))]
        hint = cells[f"mh{step.number}-hint"]
        texts.append(("hint", "<details>".join(hint.split("<details>")[:-1])))
        for where, text in texts:
            for src in sorted(candidates(text, step.names)):
                data = replay.replay_step(SPEC, step.cell, src + "\n", corpus.release_setup(),
                                          None, 3)
                for r in verify.judge_replay(step.test, data, strict=True).results:
                    if r.score == r.max_score:
                        earned.append((where, src, r.step))
    assert earned == []


def test_the_docs_state_each_of_lesson_2s_decisions():
    from tests.docs import docs_text

    readme = docs_text()
    for text in SPEC.decisions.values():
        assert text in readme, text


def test_recomputing_from_x_and_the_layers_costs_half_the_step_as_decided():
    code = ("q_heads = q_proj(x).view(1, 6, 8, 8).transpose(1, 2)\n"
            "k_heads = key.view(1, 6, 8, 8).transpose(1, 2)\n"
            "v_heads = value.view(1, 6, 8, 8).transpose(1, 2)\n")
    data = replay.replay_step(SPEC, "mh_cell4_split", code, corpus.release_setup(), None, 5)
    result = verify.judge_replay("mh_cell4_split_test", data, strict=True).results[0]
    assert (result.score, result.mistake) == (1.0, "recomputed_output"), result.message
    assert "from_its_inputs" in SPEC.decisions


@pytest.mark.skipif(sandbox.unavailable_reason() is not None,
                    reason=f"no sandbox here: {sandbox.unavailable_reason()}")
def test_in_a_real_kernel_the_live_check_says_what_grading_says(tmp_path):
    """A real kernel driven as JupyterLab drives it (cell ids sent), the saved
    multihead.ipynb graded as autograding grades it: the same points and first lines,
    for the reference and two wrong attempts (every attempt: make test-road)."""
    from src import grading
    from tests.lab_kernel import LabKernel
    from tests.road.test_multihead_road import both_roads, notebook

    kernel = LabKernel(tmp_path, f"{SPEC.notebook}.ipynb")
    try:
        for name in ("reference", "divided by 8", "merged without moving the heads"):
            a = next(x for x in corpus.ATTEMPTS if x.name == name)
            live, graded = both_roads(kernel, notebook(corpus.sources(a)))
            assert live == graded, name
            total = sum(p for rows in graded.values() for p, _ in rows)
            assert total == (8.0 if a.correct else 6.0), (name, graded)
    finally:
        kernel.close()
        grading.close_replay_servers()
