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
Whether a message names the mistake is a reader's judgement: see README.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import verify
from src import replay, road
from tests.corpus import REF, SECOND_RUN_SEED, release_setup

HERE = Path(__file__).resolve().parent
CELL = {"4": "cell4_projections", "5": "cell5_scores", "6": "cell6_softmax",
        "7": "cell7_values"}


def attempts(path=None) -> list[dict]:
    return json.loads(Path(path or HERE / "attempts.json").read_text(encoding="utf-8"))


def judge_attempt(a: dict) -> dict:
    """{cell number: strict Summary of its grade cell} for one attempt, on the road grading
    takes (src/road.py), the attempt's cells in a notebook after the release's set-up."""
    lesson = verify.LESSON
    sources = {CELL[n]: src for n, src in a["cells"].items()}
    cells = [(c, REF[c]) for c in lesson.setup_cells] + list(sources.items())
    setup = release_setup()
    with replay.pinned_seed(SECOND_RUN_SEED):
        found = road.verdicts(lesson, sources,
                              lambda steps: replay.replay_in_process(lesson, steps, setup),
                              cells=cells)
    return {n: found.summaries[lesson.by_cell[step].test] for n, step in CELL.items()}


def evaluate(items=None):
    rows = []
    for a in items or attempts():
        judged = judge_attempt(a)
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
                         "message": "\n".join(r.message for r in s.results if not r.passed)})
    return rows


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
    rows = evaluate(attempts(files[0]) if files else None)
    if "--messages" in args:
        for r in rows:
            if r["verdict"] != "ok" or not r["label"]["correct"]:
                print(f"{r['verdict']:<15} {r['id']:<28} cell {r['cell']} "
                      f"{r['score']:g}/{r['max']:g} | label: {r['label']['mistake']}\n"
                      f"    says: {r['first']}")
    print(figure(rows))


if __name__ == "__main__":
    main()
