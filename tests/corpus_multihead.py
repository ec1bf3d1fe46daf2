"""Lesson 2's corpus: right and wrong attempts at its Cells 4-7 (multi-head attention).

Each attempt gives code for some of the parts ``split`` (Cell 4), ``scores`` (Cell 5),
``weights`` (Cell 6) and ``merge`` (Cell 7), in place of the reference's solution block;
the parts it does not give are the reference's. It is graded as grading grades it
(each step cell replayed on its own, ``src/replay.py``, judged by
``verify.judge_replay(strict=True)``) and run cell by cell in a real IPython shell, where
the check cells' own calls (the live check) must say the same.

``expect`` names, for each check an attempt gets wrong, the mistake it must name; every
other check must give full marks (an earlier slip is charged once, in its own cell).
Right attempts have no ``expect``. The same engine as lesson 1 judges them: only the
lesson's spec (``src/lessons/multihead.py``) differs.

``python -m tests.corpus_multihead`` prints one line per attempt and the figure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

import verify
from src import lessons, replay
from tests.notebook_utils import ROOT, cells_by_id, run_steps, test_cell_results

SPEC = lessons.lesson("multihead")
SOURCE = ROOT / f"{SPEC.source}.ipynb"
RELEASE = ROOT / f"{SPEC.notebook}.ipynb"
REF = cells_by_id(SOURCE)
#: Every check of the lesson, in order, and the step cell each part replaces.
CHECKS = list(SPEC.checks)
PART_CELL = {"split": "mh_cell4_split", "scores": "mh_cell5_scores",
             "weights": "mh_cell6_weights", "merge": "mh_cell7_merge"}
CODE_CELLS = [*SPEC.setup_cells, *PART_CELL.values()]
_BLOCK = re.compile(r"^[ \t]*### BEGIN SOLUTION\n.*?^[ \t]*### END SOLUTION\n", re.M | re.S)
#: The second run's seed here (grading draws one afresh for every submission).
SECOND_RUN_SEED = 20261127


@dataclass(frozen=True)
class Attempt:
    name: str
    code: dict
    expect: dict = field(default_factory=dict)  # check -> the mistake it must name

    @property
    def correct(self):
        return not self.expect


ATTEMPTS: list[Attempt] = []


def attempt(name, expect=None, **code):
    ATTEMPTS.append(Attempt(name, code, dict(expect or {})))


def heads(make):
    """Cell 4 code making the three head tensors with ``make`` ("query" -> code)."""
    return "\n".join(f"{n}_heads = {make(t)}" for n, t in
                     (("q", "query"), ("k", "key"), ("v", "value")))


def scores(masking, raw="q_heads @ k_heads.transpose(-2, -1)"):
    """Cell 5 code: the raw product ``raw``, then ``masking`` of ``raw_scores``."""
    return f"raw_scores = {raw}\nhead_scores = {masking}"


SCALED = "raw_scores / math.sqrt(d_k)"

# --------------------------------------------------------------------------- right
attempt("reference")
attempt("reshape and transpose", split=heads(lambda t: f"{t}.reshape(1, 6, 8, 8).transpose(1, 2)"))
attempt("view and permute", split=heads(
    lambda t: f"{t}.view(1, 6, n_heads, d_k).permute(0, 2, 1, 3)"))
attempt("unflatten", split=heads(lambda t: f"{t}.unflatten(-1, (n_heads, d_k)).transpose(1, 2)"))
attempt("split and stack", split=heads(lambda t: f"torch.stack({t}.split(d_k, dim=-1), dim=1)"))
attempt("chunk and cat", split=heads(
    lambda t: f"torch.cat([c.unsqueeze(1) for c in {t}.chunk(n_heads, dim=-1)], dim=1)"))
attempt("a helper function", split="""\
def split_heads(t):
    batch, length, _ = t.shape
    return t.view(batch, length, n_heads, d_k).transpose(1, 2).contiguous()


q_heads, k_heads, v_heads = split_heads(query), split_heads(key), split_heads(value)""")
attempt("masked_fill with -math.inf", scores=scores(
    f"({SCALED}).masked_fill(~causal_mask, -math.inf)"))
attempt("torch.where", scores=scores(f"torch.where(causal_mask, {SCALED}, float('-inf'))"))
attempt("an additive mask", scores="""\
mask = torch.zeros(6, 6).masked_fill(~causal_mask, float("-inf"))  # 0 or -inf
head_scores = q_heads @ k_heads.transpose(-2, -1) / math.sqrt(d_k) + mask""")
attempt("masked before the scaling", scores=scores(
    "raw_scores.masked_fill(~causal_mask, float('-inf')) / math.sqrt(d_k)"))
attempt("a triu mask of its own", scores=scores(
    f"({SCALED}).masked_fill(torch.triu(torch.ones(6, 6, dtype=torch.bool), diagonal=1), "
    "float('-inf'))"))
attempt("causal_mask == 0", scores=scores(
    f"({SCALED}).masked_fill(causal_mask == 0, float('-inf'))"))
attempt("einsum and d_k ** -0.5", scores=scores(
    "(raw_scores * d_k ** -0.5).masked_fill(~causal_mask, float('-inf'))",
    raw='torch.einsum("bhqd,bhkd->bhqk", q_heads, k_heads)'))
attempt("the head's own width", scores=scores(
    "(raw_scores / math.sqrt(q_heads.shape[-1])).masked_fill(~causal_mask, float('-inf'))",
    raw="torch.matmul(q_heads, k_heads.mT)"))
attempt("torch.softmax and matmul", weights="""\
head_weights = torch.softmax(head_scores, dim=-1)
head_outputs = torch.matmul(head_weights, v_heads)""")
attempt("F.softmax and einsum", weights="""\
import torch.nn.functional as F

head_weights = F.softmax(head_scores, dim=-1)
head_outputs = torch.einsum("bhqk,bhkd->bhqd", head_weights, v_heads)""")
attempt("the set-up's softmax with its default dim", weights="""\
head_weights = softmax(head_scores)
head_outputs = head_weights @ v_heads""")
attempt("permute and reshape", merge="""\
merged = head_outputs.permute(0, 2, 1, 3).reshape(1, 6, 64)
multihead_output = merged @ W_o""")
attempt("contiguous and view", merge="""\
merged = head_outputs.transpose(1, 2).contiguous().view(1, 6, d_model)
multihead_output = torch.matmul(merged, W_o)""")
attempt("cat of the heads", merge=("multihead_output = torch.cat([head_outputs[:, h] for h in "
                                   "range(n_heads)], dim=-1) @ W_o"))
attempt("flatten and F.linear", merge="""\
import torch.nn.functional as F

multihead_output = F.linear(head_outputs.transpose(1, 2).flatten(2), W_o.T)""")
attempt("einsum with W_o per head", merge=(
    'multihead_output = torch.einsum("bhtd,hdo->bto", head_outputs, '
    "W_o.view(n_heads, d_k, d_model))"))

# --------------------------------------------------------------------------- wrong
attempt("reshaped straight to the heads", {"split_heads": "split_without_transpose"},
        split=heads(lambda t: f"{t}.view(1, 8, 6, 8)"))
attempt("head axis not moved", {"split_heads": "heads_not_moved"},
        split=heads(lambda t: f"{t}.view(1, 6, 8, 8)"))
attempt("heads of every 8th feature", {"split_heads": "heads_interleaved"},
        split=heads(lambda t: f"{t}.view(1, 6, 8, 8).permute(0, 3, 1, 2)"))
attempt("the query split for the keys", {"split_heads": "wrong_operand"}, split="""\
q_heads = query.view(1, 6, 8, 8).transpose(1, 2)
k_heads = query.view(1, 6, 8, 8).transpose(1, 2)
v_heads = value.view(1, 6, 8, 8).transpose(1, 2)""")
attempt("the stub left in Cell 4", {"split_heads": "stub_left"},
        split='raise NotImplementedError("Your turn")')
attempt("four heads of 16", {"split_heads": None},
        split=heads(lambda t: f"{t}.view(1, 6, 4, 16).transpose(1, 2)"))
attempt("not scaled", {"head_scores": "head_scores_not_scaled"},
        scores=scores("raw_scores.masked_fill(~causal_mask, float('-inf'))"))
attempt("divided by 8", {"head_scores": "head_scores_by_8"},
        scores=scores("(raw_scores / 8).masked_fill(~causal_mask, float('-inf'))"))
attempt("divided by d_k", {"head_scores": "head_scores_by_8"},
        scores=scores("(raw_scores / d_k).masked_fill(~causal_mask, float('-inf'))"))
attempt("divided by the square root of d_model", {"head_scores": "head_scores_by_8"},
        scores=scores("(raw_scores / math.sqrt(query.shape[-1])).masked_fill(~causal_mask, "
                      "float('-inf'))"))
attempt("divided by d_model", {"head_scores": "head_scores_by_d_model"},
        scores=scores("(raw_scores / d_model).masked_fill(~causal_mask, float('-inf'))"))
attempt("multiplied by the square root", {"head_scores": "head_scores_times_sqrt_dk"},
        scores=scores("(raw_scores * math.sqrt(d_k)).masked_fill(~causal_mask, "
                      "float('-inf'))"))
attempt("no mask", {"head_scores": "no_causal_mask"}, scores=scores(SCALED))
attempt("the mask the wrong way round", {"head_scores": "mask_inverted"},
        scores=scores(f"({SCALED}).masked_fill(causal_mask, float('-inf'))"))
attempt("a mask below the diagonal", {"head_scores": "mask_transposed"},
        scores=scores(f"({SCALED}).masked_fill(torch.tril(torch.ones(6, 6, dtype=torch.bool), "
                      "diagonal=-1), float('-inf'))"))
attempt("the diagonal masked too", {"head_scores": "mask_hides_self"},
        scores=scores(f"({SCALED}).masked_fill(torch.triu(torch.ones(6, 6, dtype=torch.bool)),"
                      " float('-inf'))"))
attempt("masked with 0", {"head_scores": "mask_with_zero"},
        scores=scores(f"({SCALED}).masked_fill(~causal_mask, 0)"))
attempt("masked with -1e9", {"head_scores": "mask_finite"},
        scores=scores(f"({SCALED}).masked_fill(~causal_mask, -1e9)"))
attempt("masked with float32's minimum", {"head_scores": "mask_finite"},
        scores=scores(f"({SCALED}).masked_fill(~causal_mask, torch.finfo(torch.float32).min)"))
attempt("keys times queries", {"head_scores": "head_scores_transposed"},
        scores=scores(f"({SCALED}).masked_fill(~causal_mask, float('-inf'))",
                      raw="k_heads @ q_heads.transpose(-2, -1)"))
attempt("the softmax in Cell 5", {"head_scores": "softmax_in_head_scores"},
        scores=scores(f"softmax(({SCALED}).masked_fill(~causal_mask, float('-inf')), dim=-1)"))
attempt("no transpose of the keys", {"head_scores": "matmul_shapes"},
        scores=scores(f"({SCALED}).masked_fill(~causal_mask, float('-inf'))",
                      raw="q_heads @ k_heads"))
attempt("softmax over the queries", {"head_weights": "head_softmax_wrong_axis"}, weights="""\
head_weights = softmax(head_scores, dim=-2)
head_outputs = head_weights @ v_heads""")
# (torch.softmax gives NaN where every head's score is -inf: head_outputs is NaN too)
attempt("softmax over the heads", {"head_weights": "head_softmax_wrong_axis",
                                   "head_outputs": "from_wrong_input"}, weights="""\
head_weights = torch.softmax(head_scores, dim=1)
head_outputs = head_weights @ v_heads""")
attempt("no softmax", {"head_weights": "head_softmax_missing",
                       "head_outputs": "from_wrong_input"},
        weights="""\
head_weights = head_scores
head_outputs = head_weights @ v_heads""")
attempt("scaled again", {"head_weights": "head_scores_rescaled"}, weights="""\
head_weights = softmax(head_scores / math.sqrt(d_k), dim=-1)
head_outputs = head_weights @ v_heads""")
attempt("the mask after the softmax", {"head_weights": "mask_after_softmax"}, weights="""\
unmasked = q_heads @ k_heads.transpose(-2, -1) / math.sqrt(d_k)
head_weights = softmax(unmasked, dim=-1) * causal_mask
head_outputs = head_weights @ v_heads""")
attempt("weights transposed in the product", {"head_outputs": "head_outputs_weights_transposed"},
        weights="""\
head_weights = softmax(head_scores, dim=-1)
head_outputs = head_weights.transpose(-2, -1) @ v_heads""")
attempt("the values unweighted", {"head_outputs": "head_outputs_not_weighted"}, weights="""\
head_weights = softmax(head_scores, dim=-1)
head_outputs = v_heads.clone()""")
attempt("the queries as values", {"head_outputs": "wrong_operand"}, weights="""\
head_weights = softmax(head_scores, dim=-1)
head_outputs = head_weights @ q_heads""")
attempt("merged without moving the heads", {"multihead_output": "merge_without_transpose"},
        merge="multihead_output = head_outputs.reshape(1, 6, 64) @ W_o")
attempt("merged in feature-head order", {"multihead_output": "merge_interleaved"},
        merge="multihead_output = head_outputs.permute(0, 2, 3, 1).reshape(1, 6, 64) @ W_o")
attempt("W_o transposed", {"multihead_output": "w_o_transposed"},
        merge="multihead_output = head_outputs.transpose(1, 2).reshape(1, 6, 64) @ W_o.T")
attempt("nn.Linear's convention", {"multihead_output": "w_o_transposed"}, merge="""\
import torch.nn.functional as F

multihead_output = F.linear(head_outputs.transpose(1, 2).reshape(1, 6, 64), W_o)""")
attempt("no W_o", {"multihead_output": "w_o_missing"},
        merge="multihead_output = head_outputs.transpose(1, 2).reshape(1, 6, 64)")
attempt("W_o on the left", {"multihead_output": "operands_swapped"},
        merge="multihead_output = W_o @ head_outputs.transpose(1, 2).reshape(1, 6, 64)")
attempt("overlapping slices of 8", {"split_heads": "heads_rearranged"}, split=heads(
    lambda t: f"torch.stack([{t}[..., h:h + 8] for h in range(n_heads)], dim=1)"))
attempt("features first, then cut into heads (right)",
        split=heads(lambda t: f"{t}.transpose(1, 2).reshape(1, 8, 8, 6).transpose(2, 3)"))
attempt("view on the moved heads", {"multihead_output": "view_not_contiguous"},
        merge="multihead_output = head_outputs.transpose(1, 2).view(1, 6, 64) @ W_o")
attempt("the token axis unflattened", {"split_heads": "sizes_do_not_multiply"},
        split=heads(lambda t: f"{t}.unflatten(1, (n_heads, d_k))"))
attempt("d_k ** 1/2", {"head_scores": "head_scores_sqrt_precedence"},
        scores=scores("(raw_scores / d_k ** 1/2).masked_fill(~causal_mask, float('-inf'))"))
attempt("the mask times -inf", {"head_scores": "mask_by_arithmetic"},
        scores=scores(f"{SCALED} + (~causal_mask).float() * float('-inf')"))
attempt("the keys transposed on the head axis", {"head_scores": "shapes_do_not_broadcast"},
        scores=scores(f"({SCALED}).masked_fill(~causal_mask, float('-inf'))",
                      raw="q_heads @ k_heads.transpose(1, 2)"))
attempt("softmax twice", {"head_weights": "head_softmax_twice"}, weights="""\
head_weights = softmax(softmax(head_scores, dim=-1), dim=-1)
head_outputs = head_weights @ v_heads""")
attempt("the hidden scores as zeros", {"head_weights": "masked_scores_as_zero"}, weights="""\
finite = torch.nan_to_num(head_scores, neginf=0.0)
head_weights = softmax(finite, dim=-1)
head_outputs = head_weights @ v_heads""")
attempt("values before the weights", {"head_weights": "operands_swapped",
                                     "head_outputs": "operands_swapped"}, weights="""\
head_weights = softmax(head_scores, dim=-1)
head_outputs = v_heads @ head_weights""")
attempt("the row sums without keepdim", {"head_weights": "shapes_do_not_broadcast",
                                          "head_outputs": "shapes_do_not_broadcast"},
        weights="""\
exps = torch.exp(head_scores - head_scores.amax(dim=-1, keepdim=True))
head_weights = exps / exps.sum(dim=-1)
head_outputs = head_weights @ v_heads""")
attempt("the heads averaged", {"multihead_output": "heads_averaged"}, merge="""\
blocks = W_o.view(n_heads, d_k, d_model)
parts = [head_outputs[:, h] @ blocks[h] for h in range(n_heads)]
multihead_output = torch.stack(parts).mean(0)""")
attempt("tokens and features swapped in the merge", {"multihead_output": "merge_wrong_axes"},
        merge="multihead_output = head_outputs.transpose(2, 3).reshape(1, 6, 64) @ W_o")
attempt("a mask loop from i + 2", {"head_scores": "mask_differs"}, scores="""\
head_scores = q_heads @ k_heads.transpose(-2, -1) / math.sqrt(d_k)
for i in range(6):
    for j in range(i + 2, 6):
        head_scores[:, :, i, j] = float("-inf")""")
attempt("masked_fill's result dropped", {"head_scores": "no_causal_mask"}, scores="""\
head_scores = q_heads @ k_heads.transpose(-2, -1) / math.sqrt(d_k)
head_scores.masked_fill(~causal_mask, float("-inf"))""")
attempt("√8 typed as 2.83", {"head_scores": "constant_factor"},
        scores=scores("(raw_scores / 2.83).masked_fill(~causal_mask, float('-inf'))"))
attempt("every head against head 0's keys", {"head_scores": "range_off_by_one"}, scores="""\
rows = [q_heads[:, h] @ k_heads[:, 0].transpose(-2, -1) for h in range(n_heads)]
raw_scores = torch.stack(rows, dim=1) / math.sqrt(d_k)
head_scores = raw_scores.masked_fill(~causal_mask, float("-inf"))""")
attempt("log_softmax", {"head_weights": "head_log_softmax",
                        "head_outputs": "from_wrong_input"}, weights="""\
head_weights = torch.log_softmax(head_scores, dim=-1)
head_outputs = head_weights @ v_heads""")
attempt("the scores as weights for the values", {"head_outputs": "wrong_operand"},
        weights="""\
head_weights = softmax(head_scores, dim=-1)
head_outputs = head_scores @ v_heads""")
attempt("one accumulator for every head", {"head_outputs": "range_off_by_one"}, weights="""\
head_weights = softmax(head_scores, dim=-1)
acc = torch.zeros(6, d_k)
outs = []
for h in range(n_heads):
    acc += head_weights[0, h] @ v_heads[0, h]
    outs.append(acc)
head_outputs = torch.stack(outs).unsqueeze(0)""")
attempt("a residual of the merged heads", {"multihead_output": "extra_term"}, merge="""\
merged = head_outputs.transpose(1, 2).reshape(1, 6, 64)
multihead_output = merged @ W_o + merged""")
attempt("+inf for the hidden scores", {"head_scores": "mask_positive_inf"},
        scores=scores(f"({SCALED}).masked_fill(~causal_mask, float('inf'))"))
attempt("the mask set outside the head loop", {"head_scores": "mask_differs"}, scores="""\
head_scores = torch.empty(1, n_heads, 6, 6)
for h in range(n_heads):
    head_scores[0, h] = q_heads[0, h] @ k_heads[0, h].T / math.sqrt(d_k)
head_scores[0, h] = head_scores[0, h].masked_fill(~causal_mask, float("-inf"))""")
attempt("√ of the token count", {"head_scores": "constant_factor"},
        scores=scores("(raw_scores / k_heads.size(-2) ** 0.5).masked_fill(~causal_mask, "
                      "float('-inf'))"))
attempt("divided by the sum of everything", {"head_weights": "head_weights_whole_sum"},
        weights="""\
e = torch.exp(head_scores - head_scores.amax(dim=-1, keepdim=True))
head_weights = e / e.sum()
head_outputs = head_weights @ v_heads""")
attempt("per-head sums without keepdim", {"head_weights": "head_keepdim_missing"},
        weights="""\
head_weights = torch.empty_like(head_scores)
for h in range(n_heads):
    e = head_scores[0, h].exp()
    head_weights[0, h] = e / e.sum(-1)
head_outputs = head_weights @ v_heads""")
attempt("the weights softmaxed in the product", {"head_outputs":
                                                 "head_outputs_weights_softmaxed"},
        weights="""\
head_weights = softmax(head_scores, dim=-1)
head_outputs = softmax(head_weights, dim=-1) @ v_heads""")
attempt("heads written at h:h+8", {"multihead_output": "merge_rearranged"}, merge="""\
merged = torch.zeros(1, 6, d_model)
for h in range(n_heads):
    merged[:, :, h:h + 8] = head_outputs[:, h]
multihead_output = merged @ W_o""")
attempt("the mask added to the scores", {"head_scores": "mask_added_as_numbers"},
        scores=scores(f"{SCALED} + causal_mask"))
attempt("a float mask for masked_fill", {"head_scores": "mask_not_bool"},
        scores=scores(f"({SCALED}).masked_fill((~causal_mask).float(), float('-inf'))"))
attempt("a head loop one short", {"head_scores": "range_off_by_one"}, scores="""\
head_scores = torch.zeros(1, n_heads, 6, 6)
for h in range(n_heads - 1):
    s = q_heads[0, h] @ k_heads[0, h].transpose(0, 1) / math.sqrt(d_k)
    head_scores[0, h] = s.masked_fill(~causal_mask, float("-inf"))""")
attempt("W_o called like a layer", {"multihead_output": "tensor_called"}, merge="""\
merged = head_outputs.transpose(1, 2).reshape(1, 6, 64)
multihead_output = W_o(merged)""")
attempt(".T on the heads before the merge", {"multihead_output": "merge_dot_T"},
        merge="multihead_output = head_outputs.T.reshape(1, 6, 64) @ W_o")
attempt("a merge loop from head 1", {"multihead_output": "range_off_by_one"}, merge="""\
merged = torch.zeros(1, 6, d_model)
for h in range(1, n_heads):
    merged[:, :, 8 * h:8 * h + 8] = head_outputs[:, h]
multihead_output = merged @ W_o""")
attempt("the row max without keepdim", {"head_weights": "head_keepdim_missing"}, weights="""\
head_weights = torch.empty_like(head_scores)
for h in range(n_heads):
    s = head_scores[0, h]
    e = torch.exp(s - s.amax(dim=-1))
    head_weights[0, h] = e / e.sum(dim=-1, keepdim=True)
head_outputs = head_weights @ v_heads""")
attempt("the output detached", {"multihead_output": "detached_output"}, merge="""\
merged = head_outputs.transpose(1, 2).reshape(1, 6, 64)
multihead_output = (merged @ W_o).detach()""")
attempt("an earlier slip, then right code", {"head_scores": "no_causal_mask"},
        scores=scores(SCALED), weights="""\
head_weights = softmax(head_scores.masked_fill(~causal_mask, float("-inf")), dim=-1)
head_outputs = head_weights @ v_heads""")


# ---------------------------------------------------------------------- running
def sources(a: Attempt) -> dict:
    """The code cells' sources for attempt ``a`` (the reference where it gives none)."""
    codes = dict(REF)
    for part, cid in PART_CELL.items():
        if part in a.code:
            text = codes[cid]
            block = _BLOCK.search(text)
            codes[cid] = text[:block.start()] + a.code[part].rstrip("\n") + "\n" + \
                text[block.end():]
    return codes


@lru_cache(maxsize=1)
def release_setup() -> dict:
    """The set-up namespace of the lesson's set-up cells, as the grader's replay has it."""
    return replay.setup_namespace([REF[c] for c in SPEC.setup_cells])


@dataclass
class Record:
    attempt: Attempt
    strict: dict = field(default_factory=dict)  # check -> CheckResult (graded run)
    explicit: dict = field(default_factory=dict)  # check cell -> [dict], the live check
    observed: dict = field(default_factory=dict)  # check cell -> [dict], the replay's

    def problems(self) -> list:
        out = []
        for name in CHECKS:
            r = self.strict[name]
            full = r.score == r.max_score
            if name in self.attempt.expect:
                want = self.attempt.expect[name]
                if full:
                    out.append(f"false positive: {name} got full marks")
                elif want is not None and want not in r.diagnoses:
                    out.append(f"{name}: expected {want}, named {r.diagnoses or 'nothing'}")
                elif want is not None and not SPEC.mistakes[want].said_first and \
                        SPEC.mistakes[want].title not in r.message:
                    out.append(f"{name}: the message does not say {want}'s title")
            elif not full:
                out.append(f"{'cascade' if self.attempt.expect else 'correct lost points'}: "
                           f"{name} {r.score}/{r.max_score} ({r.mistake}: {r.message[:120]})")
        return out

    @property
    def named(self):
        return all(w is not None and w in self.strict[c].diagnoses
                   for c, w in self.attempt.expect.items())


def run_attempt(a: Attempt, live: bool = True) -> Record:
    """Each step cell replayed on its own and judged as grading judges it; with ``live``,
    then the cells run in order in an IPython shell, whose check calls give ``explicit``."""
    with replay.pinned_seed(SECOND_RUN_SEED):  # (the live check's replay must match)
        rec, codes = Record(a), sources(a)
        answer = replay.replay_in_process(SPEC, codes, release_setup())
        for step in SPEC.steps:
            summary = verify.judge_replay(step.test, answer[step.cell],
                                          answer.get(f"own:{step.cell}"), strict=True)
            rec.observed[step.test] = [r.to_dict() for r in summary.results]
            for check, result in zip(step.checks, summary.results):
                rec.strict[check.name] = result
        if live:
            by_cell = {s.cell: s.test for s in SPEC.steps}

            def after(cell_id, ns):
                if cell_id in by_cell:
                    rec.explicit[by_cell[cell_id]] = [
                        r.to_dict() for r in test_cell_results(by_cell[cell_id], ns, SOURCE)]

            run_steps(codes, after=after, cells=CODE_CELLS)
    return rec


def figure(records) -> str:
    right = [r for r in records if r.attempt.correct]
    wrong = [r for r in records if not r.attempt.correct]
    full = sum(not r.problems() for r in right)
    false_pos = sum(any(p.startswith("false positive") for p in r.problems()) for r in wrong)
    cascades = sum(any(p.startswith("cascade") for p in r.problems()) for r in wrong)
    named = sum(r.named for r in wrong)
    return (f"lesson 2 corpus: {len(records)} attempts | {len(right)} right: {full} with full "
            f"marks | {len(wrong)} wrong: {false_pos} false positives, {cascades} cascades, "
            f"{named} named ({100 * named / max(1, len(wrong)):.0f} %)")


def main():
    records = [run_attempt(a, live=False) for a in ATTEMPTS]
    for r in records:
        says = ", ".join(f"{c}={r.strict[c].mistake}" for c in CHECKS if r.strict[c].mistake)
        print(f"{'ok ' if not r.problems() else 'BAD'} {r.attempt.name:<44} "
              f"{says or 'full marks'}")
        for p in r.problems():
            print(f"      {p}")
    print(figure(records))


if __name__ == "__main__":
    main()
