"""How fast the lesson runs and how fast verify answers (``make bench``).

1. complete_lesson.ipynb executed top to bottom headless, divided by a
   notebook that only does the lesson's imports (taken from its set-up
   cell), each in a fresh kernel of the same kind, interleaved by rounds.
   Target: 1.2x or less.
2. Each verify check on the reference solution's tensors: median per call.
   Target: 20 ms or less.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "complete_lesson.ipynb"


def run_notebook(nb) -> float:
    from nbclient import NotebookClient

    t0 = time.perf_counter()
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(ROOT)}}).execute()
    return time.perf_counter() - t0


def imports_only(nb):
    """A copy of ``nb`` reduced to the import statements of its set-up cell."""
    import ast

    import nbformat

    setup = next(c for c in nb.cells if c.get("id") == "cell2_setup")
    tree = ast.parse(setup.source)
    lines = [ast.get_source_segment(setup.source, node) for node in tree.body
             if isinstance(node, (ast.Import, ast.ImportFrom))]
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("\n".join(lines))],
                                    metadata=nb.metadata)


def bench_notebook(rounds):
    import nbformat

    nb = nbformat.read(SOURCE, as_version=4)
    base = imports_only(nb)
    times = {"lesson": [], "imports": []}
    run_notebook(nbformat.from_dict(base))  # warm the disk cache
    for _ in range(rounds):
        times["imports"].append(run_notebook(nbformat.from_dict(base)))
        times["lesson"].append(run_notebook(nbformat.from_dict(nb)))
    return {k: statistics.median(v) for k, v in times.items()}, base.cells[0].source


def bench_checks(repeats=200):
    import verify
    from tests.notebook_utils import SOURCE as SRC
    from tests.notebook_utils import cells_by_id, run_steps

    ns = run_steps(cells_by_id(SRC))
    q, k, v = ns["query"], ns["key"], ns["value"]
    s, w, o = ns["attention_scores"], ns["attention_weights"], ns["attended_values"]
    wrong = s * 8  # a failing answer walks the whole catalogue
    calls = {
        "check_projections": lambda: verify.check_projections(q, k, v),
        "check_attention_scores": lambda: verify.check_attention_scores(q, k, s),
        "check_attention_scores (wrong)": lambda: verify.check_attention_scores(q, k, wrong),
        "check_softmax": lambda: verify.check_softmax(ns["softmax"]),
        "check_softmax (strict)": lambda: verify.check_softmax(ns["softmax"], strict=True),
        "check_attention_weights": lambda: verify.check_attention_weights(s, w),
        "check_attended_values": lambda: verify.check_attended_values(
            w, v, o, attention_scores=s, query=q, key=k),
        "check_all": lambda: verify.check_all(ns),
    }
    out = {}
    for name, fn in calls.items():
        fn()
        ts = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        out[name] = statistics.median(ts)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)

    t, imports = bench_notebook(args.rounds)
    ratio = t["lesson"] / t["imports"]
    print(f"complete_lesson.ipynb headless, fresh kernel, median of {args.rounds} rounds:")
    print(f"  whole lesson     {t['lesson']:6.2f} s")
    print(f"  imports only     {t['imports']:6.2f} s   ({len(imports.splitlines())} lines of "
          "the set-up cell's imports)")
    print(f"  ratio            {ratio:6.2f}   (target <= 1.2: "
          f"{'met' if ratio <= 1.2 else 'MISSED'})\n")
    print("verify checks on the reference tensors, median per call:")
    for name, sec in bench_checks().items():
        verdict = "met" if sec <= 0.020 else "MISSED"
        print(f"  {name:<32} {sec * 1e3:7.3f} ms   (target <= 20 ms: {verdict})")


if __name__ == "__main__":
    main()
