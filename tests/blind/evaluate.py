"""The blind set: attempts written by a helper from the student material alone.

165 students' four step cells (tests/blind/attempts.json), each cell labelled
right or wrong in plain words and checked numerically by that helper, who
never saw the checks, their catalogue or tests/corpus.py. Every cell is
judged as grading judges it (src/replay.py, strict), and compared with its
label:

- a right cell must get full marks (else: a false negative, or a cascade when
  the attempt has a wrong cell elsewhere);
- a wrong cell must lose points (else: a false positive).

``python -m tests.blind.evaluate`` prints the figure and, with ``--messages``,
one line per wrong cell: its label, and the first line the student reads.
Whether a message names the mistake is a reader's judgement: see docs/internals.md.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import verify
from src import lessons, replay, road
from tests.corpus import SECOND_RUN_SEED
from tests.notebook_utils import ROOT, cells_by_id

HERE = Path(__file__).resolve().parent
#: Which lesson a blind set is of, by its file name (lesson 1's by default).
LESSON_OF = {"multihead1.json": "multihead", "multihead2.json": "multihead",
             "multihead3.json": "multihead", "multihead4.json": "multihead",
             "multihead5.json": "multihead", "multihead6.json": "multihead",
             "multihead7.json": "multihead"}


def _cells(spec) -> dict:
    """{cell number as a blind writer gives it: step cell id} of a lesson."""
    return {str(s.number): s.cell for s in spec.steps}


CELL = _cells(verify.LESSON)


def attempts(path=None) -> list[dict]:
    return json.loads(Path(path or HERE / "attempts.json").read_text(encoding="utf-8"))


def _setup(spec):
    """The lesson's reference set-up cells {id: source} and the set-up namespace the
    grader's replay has (made once per lesson)."""
    if spec.name not in _SETUPS:
        ref = cells_by_id(ROOT / f"{spec.source}.ipynb")
        sources = {c: ref[c] for c in spec.setup_cells}
        _SETUPS[spec.name] = sources, replay.setup_namespace(list(sources.values()))
    return _SETUPS[spec.name]


_SETUPS: dict = {}


def judge_attempt(a: dict, spec=None) -> dict:
    """{cell number: strict Summary of its grade cell} for one attempt at lesson ``spec``
    (lesson 1 by default), on the road grading takes (src/road.py), the attempt's cells in
    a notebook after the release's set-up."""
    lesson = spec or verify.LESSON
    numbers = _cells(lesson)
    sources = {numbers[n]: src for n, src in a["cells"].items()}
    setup_cells, setup = _setup(lesson)
    cells = list(setup_cells.items()) + list(sources.items())
    with replay.pinned_seed(SECOND_RUN_SEED):
        found = road.verdicts(lesson, sources,
                              lambda steps: replay.replay_in_process(lesson, steps, setup),
                              cells=cells)
    return {n: found.summaries[lesson.by_cell[step].test] for n, step in numbers.items()}


def evaluate(items=None, spec=None):
    rows = []
    for a in items or attempts():
        judged = judge_attempt(a, spec)
        any_wrong = any(not lab["correct"] for lab in a["labels"].values())
        for n, lab in a["labels"].items():
            s = judged[n]
            full = s.score == s.max_score
            first = next((r.message.partition("\n")[0] for r in s.results if not r.passed), "")
            verdict = ("ok" if full == lab["correct"] else
                       "false positive" if full else
                       "cascade" if any_wrong else "false negative")
            rows.append({"id": a["id"], "cell": n, "label": lab, "verdict": verdict,
                         "score": s.score, "max": s.max_score, "first": first,
                         "mistakes": [r.mistake for r in s.results if r.mistake],
                         "source": a["cells"][n],
                         "message": "\n".join(r.message for r in s.results if not r.passed)})
    return rows


def pasted(rows, spec=None) -> list:
    """[(id, cell, fragment, check)] for every code fragment of every failing message in
    ``rows`` (as tests/test_no_answer.py cuts them: backticked spans, the longest code in
    each clause, an expression as the value of each name the step assigns) that earns a
    check when pasted alone into its step cell and replayed as grading replays it. The
    student's own lines, quoted back as evidence, are not fragments of ours."""
    from tests.test_no_answer import candidates

    lesson = spec or verify.LESSON
    setup = _setup(lesson)[1]
    step_of = {str(s.number): s for s in lesson.steps}
    earned, seen = [], set()
    for r in rows:
        if not r["message"]:
            continue
        step = step_of[r["cell"]]
        for src in sorted(candidates(r["message"], step.names, r.get("source", ""))):
            if (step.cell, src) in seen:
                continue
            seen.add((step.cell, src))
            data = replay.replay_step(lesson, step.cell, src + "\n", setup, None, 3)
            for res in verify.judge_replay(step.test, data, strict=True).results:
                if res.score == res.max_score:
                    earned.append((r["id"], r["cell"], src, res.step))
    pasted.tried = len(seen)
    return earned


def figure(rows) -> str:
    wrong = [r for r in rows if not r["label"]["correct"]]
    right = [r for r in rows if r["label"]["correct"]]
    count = {v: sum(r["verdict"] == v for r in rows)
             for v in ("false negative", "false positive", "cascade")}
    longest = max((len(r["first"]) for r in wrong), default=0)
    return (f"blind set: {len(rows) // 4} attempts, {len(right)} right cells, {len(wrong)} "
            f"wrong | {count['false negative']} false negatives, {count['false positive']} "
            f"false positives, {count['cascade']} cascades | longest first line "
            f"{longest} characters")


def main(argv=None):
    args = sys.argv[1:] if argv is None else argv
    files = [a for a in args if not a.startswith("--")]
    spec = lessons.lesson(LESSON_OF.get(Path(files[0]).name, lessons.lesson().name)) \
        if files else None
    rows = evaluate(attempts(files[0]) if files else None, spec)
    if "--messages" in args:
        for r in rows:
            if r["verdict"] != "ok" or not r["label"]["correct"]:
                print(f"{r['verdict']:<15} {r['id']:<28} cell {r['cell']} "
                      f"{r['score']:g}/{r['max']:g} | label: {r['label']['mistake']}\n"
                      f"    says: {r['first']}")
    print(figure(rows))
    if "--pasted" in args:  # (a replay per fragment: about a minute a set)
        earned = pasted(rows, spec)
        for e in earned:
            print("earns when pasted:", *e)
        print(f"pasted: {pasted.tried} distinct message fragments tried, {len(earned)} earn "
              "a check")


if __name__ == "__main__":
    main()
