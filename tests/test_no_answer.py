"""Messages teach without handing out the answer: no code in a message earns its step.

Every catalogue entry, for every check it can be met in, gives a next step and a cause;
the hints give a first tier before the one that walks through the shapes. Every code
fragment in them is put into the step cell — alone; with the other assignments of the
same text; an expression also as the value of each name the step must assign — and
replayed as grading replays it (src/replay.py, judged strictly). None may earn a check.
Cell 6 keeps the reference ``def softmax`` (a pasted apply line must not earn the
weights); a fragment that defines the softmax itself must not earn the function's point.
"""

from __future__ import annotations

import ast
import json
import re

import pytest

import verify
from src import replay
from tests.corpus import REF, release_setup
from tests.notebook_utils import LESSON

pytestmark = pytest.mark.filterwarnings("ignore::SyntaxWarning")  # (pasted fragments)
SPEC = verify.LESSON
_ASSIGN = re.compile(r"[A-Za-z_]\w*\s*=[^=]")
#: Where a sentence's clauses part (outside brackets only): ": ", "; ", ", name = ",
#: " (or ", " then ", " or ", " and ".
_PART = re.compile(r":\s|;\s|,\s(?=[A-Za-z_]\w*\s*=[^=])|\s\((?:or|e\.g\.|for example)\s|"
                   r"\s(?:then|or|and)\s")


def _clauses(text: str) -> list[str]:
    """``text`` cut at the clause boundaries of _PART that lie outside brackets."""
    depth, cuts = [], []
    level = 0
    for i, ch in enumerate(text):
        level += ch in "([{"
        level -= ch in ")]}"
        depth.append(level)
    for m in _PART.finditer(text):
        if depth[m.start()] <= 0:
            cuts.append((m.start(), m.end()))
    out, at = [], 0
    for start, end in cuts:
        out.append(text[at:start])
        at = end
    return out + [text[at:]]


def fragments(text: str) -> list[str]:
    """Python fragments of ``text``: its backticked spans, and in each clause the longest
    run of words that parses and holds an operation (=, @ or a call), from any start."""
    spans = re.findall(r"`([^`]+)`", text)
    out = []
    for part in spans + _clauses(re.sub(r"`[^`]+`", " ", text)):
        words = part.strip().rstrip(".").split()
        best = ""
        for i in range(len(words)):
            for k in range(len(words), i, -1):
                q = " ".join(words[i:k]).rstrip(".,;:")
                if len(q) <= len(best) or not re.search(r"[=@(]", q):
                    continue
                try:
                    ast.parse(q)
                except SyntaxError:
                    continue
                best = q
                break
        if best:
            out.append(best)
    return out


def _nodes(source: str) -> set[str]:
    """ast.dump of every statement and expression in ``source`` (none if it does not
    parse)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    return {ast.dump(n) for n in ast.walk(tree) if isinstance(n, (ast.stmt, ast.expr))}


def _own(fragment: str, own: set[str]) -> bool:
    """Whether ``fragment`` is, token for token, a statement or expression of ``own``."""
    try:
        body = ast.parse(fragment).body
    except SyntaxError:
        return False
    node = body[0].value if len(body) == 1 and isinstance(body[0], ast.Expr) else \
        body[0] if len(body) == 1 else None
    return node is not None and ast.dump(node) in own


def candidates(text: str, outputs, own: str = "") -> set[str]:
    """Step-cell sources a student could paste from ``text``. A fragment that is the
    student's own code (``own``, their step cell), quoted back as evidence, hands out
    nothing they did not write: it is left out."""
    mine = _nodes(own)
    found = [f for f in fragments(text) if not _own(f, mine)]
    out = set(found)
    assigns = [f for f in found if _ASSIGN.match(f)]
    if len(assigns) > 1:
        out.add("\n".join(assigns))
    for f in found:
        if not _ASSIGN.match(f):
            out |= {f"{o} = {f}" for o in outputs}
    return out


def hint_first_tiers() -> dict:
    """{step cell id: the text of its hint before the last tier (the walk through shapes)}."""
    out = {}
    for cell in json.loads(LESSON.read_text(encoding="utf-8"))["cells"]:
        step = next((s for s in SPEC.steps if cell.get("id") == f"cell{s.number}-hint"), None)
        if step is not None:
            text = "".join(cell["source"])
            out[step.cell] = text.split("<details>", 2)[1] if text.count("<details>") > 1 \
                else text
    return out


def texts_of(step) -> list[tuple[str, str]]:
    """[(where, text)] of every message part that can be shown for ``step``'s checks."""
    out = []
    for check in step.checks:
        for m in verify.MISTAKES.values():
            if m.step in ("any", check.name) or check.uses_function == m.step:
                out += [(f"{m.id} (next step)", m.next_step_for(check.name)),
                        (f"{m.id} (cause)", m.cause_for(check.name))]
    hint = hint_first_tiers().get(step.cell)
    if hint:
        out.append(("hint, first tier", hint))
    return out


def earns(step, source: str) -> list[str]:
    """The checks of ``step`` that ``source``, as its step cell, earns in full."""
    src = source + "\n"
    function = next((c for c in step.checks if c.kind == "function"), None)
    if function is not None and f"def {function.name}" not in src:
        # keep the reference function: only the pasted lines are the student's
        src = REF[step.cell].split("\n# attention_scores")[0] + "\n" + src
    answer = replay.replay_in_process(SPEC, {step.cell: src}, release_setup())
    summary = verify.judge_replay(step.test, answer[step.cell], strict=True)
    return [r.step for r in summary.results if r.score == r.max_score
            and (r.step != getattr(function, "name", None) or f"def {r.step}" in source)]


@pytest.mark.parametrize("cell", [s.cell for s in SPEC.steps])
def test_no_code_in_a_message_or_a_first_hint_earns_its_step(cell):
    step = SPEC.by_cell[cell]
    leaks, tried = [], 0
    with replay.pinned_seed(20261125):
        for where, text in texts_of(step):
            for source in sorted(candidates(text, step.names)):
                tried += 1
                won = earns(step, source)
                if won:
                    leaks.append((where, source, won))
    assert tried > 0
    assert leaks == []


def test_the_search_finds_a_planted_answer():
    """A message that held the line would be caught (the test is not vacuous)."""
    step = SPEC.steps[-1]
    planted = "swap the operands: attended_values = attention_weights @ value"
    with replay.pinned_seed(20261125):
        won = [s for s in candidates(planted, step.names) if earns(step, s)]
    assert won
    step4 = SPEC.steps[0]
    planted = "use the layers: query = q_proj(x), key = k_proj(x), value = v_proj(x)"
    with replay.pinned_seed(20261125):
        assert any(earns(step4, s) for s in candidates(planted, step4.names))


def reference_pieces(step) -> set[str]:
    """The reference solution's lines of ``step`` a message must not hold either, even
    where one alone earns nothing: each assignment of a lesson tensor whole, and each
    operation of its value between two of the lesson's tensors (``query @
    key.transpose(-2, -1)``; not ``x - x_max``, a move the hint names), spaces removed."""
    names = set(SPEC.shapes)

    def tensors(node):
        return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} & names

    def statements(body):  # (the lines of a function the cell defines are its moves)
        for node in body:
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield node
                yield from statements(getattr(node, "body", []))

    pieces = set()
    for node in statements(ast.parse(REF[step.cell]).body):
        if isinstance(node, ast.Assign) and tensors(node):
            pieces.add(ast.unparse(node))
            pieces |= {ast.unparse(n) for n in ast.walk(node.value)
                       if isinstance(n, ast.BinOp) and len(tensors(n)) >= 2}
    return {p.replace(" ", "") for p in pieces}


@pytest.mark.parametrize("cell", [s.cell for s in SPEC.steps])
def test_no_message_holds_a_line_of_the_reference_solution(cell):
    """A blind reader counted ``query = q_proj(x)`` and ``query @ key.transpose(-2, -1)``
    in a "Next step" as handing out the answer, though pasting either alone earns nothing:
    no next step, cause or first hint tier holds a reference assignment, or an operation of
    one, whatever its spacing."""
    step = SPEC.by_cell[cell]
    pieces = reference_pieces(step)
    assert pieces
    found = [(where, p) for where, text in texts_of(step) for p in pieces
             if p in text.replace(" ", "").replace("`", "")]
    assert found == []


#: A reduction written out with its axis (``x.amax(dim=dim, keepdim=True)``,
#: ``exps.sum(dim=-1)``): set 5's reader counted such next steps of the softmax as answers
#: (``x.max(dim=...)``, naming the student's own call, is not one).
_REDUCTION = re.compile(r"\.(amax|max|sum|logsumexp|softmax)\(\s*(dim\s*=\s*(?!\.\.\.)|-?\d)")


@pytest.mark.parametrize("cell", [s.cell for s in SPEC.steps])
def test_no_message_writes_out_a_reduction_call(cell):
    """The moves are named in words ("each row's maximum along dim, its dimension kept"),
    never as the call that makes them, in a next step, a cause or a first hint tier."""
    step = SPEC.by_cell[cell]
    found = [(where, m.group(0)) for where, text in texts_of(step) if not where.startswith(
        "hint") for m in [_REDUCTION.search(text)] if m]
    assert found == []


def test_the_students_own_line_quoted_back_is_not_a_fragment_of_ours():
    text = ("What we saw: your Cell 7 computes `torch.matmul(attention_weights, value)` on a "
            "line of its own. Next step: use `attention_weights @ value`.")
    own = "torch.matmul(attention_weights, value)\nprint(attended_values)\n"
    found = candidates(text, ["attended_values"], own)
    assert "attended_values = torch.matmul(attention_weights, value)" not in found
    assert "attended_values = attention_weights @ value" in found  # (not the student's)
    assert "attended_values = torch.matmul(attention_weights, value)" in candidates(
        text, ["attended_values"], "attended_values = query\n")
