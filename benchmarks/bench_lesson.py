"""How fast the lesson runs and how fast verify answers (``make bench``).

1. complete_lesson.ipynb executed top to bottom headless, divided by a
   notebook that only does the lesson's imports (taken from its set-up
   cell), each in a fresh kernel of the same kind, interleaved by rounds.
   Target: 1.2x or less.
2. Each verify check (right answers, and wrong ones that walk the whole
   catalogue), and the observe/judge halves: median per call. Target: 20 ms
   or less per check (check_all runs all five).
3. The live checks as a student meets them: in a real kernel that ran the
   reference, each test cell's check called from a new cell, so that it replays
   the step cell found in the kernel's history (src/replay.py), as the test
   cells do. Median per call; the same 20 ms target.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "complete_lesson.ipynb"


def run_notebook(nb) -> float:
    import tempfile

    from nbclient import NotebookClient
    from traitlets.config import Config

    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        config = Config()  # IPC, as verify.py's CLI: no TCP port, no TCP warning
        config.KernelManager.transport = "ipc"
        config.KernelManager.ip = str(Path(tmp) / "kernel")
        t0 = time.perf_counter()
        NotebookClient(nb, timeout=300, kernel_name="python3", config=config,
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


def bench_checks(repeats=100):
    """Median seconds per call of each check, right and wrong answers, and of the halves."""
    import torch

    import verify
    from tests.notebook_utils import SOURCE as SRC
    from tests.notebook_utils import cells_by_id, run_steps

    ns = run_steps(cells_by_id(SRC))
    q, k, v = ns["query"], ns["key"], ns["value"]
    s, w, o = ns["attention_scores"], ns["attention_weights"], ns["attended_values"]
    noise = torch.randn(s.shape, generator=torch.Generator().manual_seed(0))
    unnamed = s + noise  # matches no entry: the check walks the whole catalogue
    odd_softmax = lambda x, dim=-1: torch.exp(x).clamp(max=3)  # noqa: E731  (unnamed)
    data = {gid: verify.observe(gid, ns) for gid in verify.GRADE_CELLS}
    calls = {
        "check_projections": lambda: verify.check_projections(q, k, v),
        "check_attention_scores": lambda: verify.check_attention_scores(q, k, s),
        "check_attention_scores (x8)": lambda: verify.check_attention_scores(q, k, s * 8),
        "check_attention_scores (unnamed)": lambda: verify.check_attention_scores(q, k, unnamed),
        "check_softmax": lambda: verify.check_softmax(ns["softmax"]),
        "check_softmax (unnamed)": lambda: verify.check_softmax(odd_softmax),
        "check_attention_weights": lambda: verify.check_attention_weights(s, w),
        "check_attention_weights (unnamed)": lambda: verify.check_attention_weights(s, s + 1),
        "check_attended_values": lambda: verify.check_attended_values(
            w, v, o, attention_scores=s, query=q, key=k),
        "check_attended_values (unnamed)": lambda: verify.check_attended_values(
            w, v, o + noise[..., :1], attention_scores=s, query=q, key=k),
        "observe (cell 6)": lambda: verify.observe("cell6_softmax_test", ns),
        "observe (cell 7)": lambda: verify.observe("cell7_values_test", ns),
        "judge (cell 6, strict)": lambda: verify.judge("cell6_softmax_test",
                                                       data["cell6_softmax_test"], strict=True),
        "judge (cell 7, strict)": lambda: verify.judge("cell7_values_test",
                                                       data["cell7_values_test"], strict=True),
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


#: The check of each test cell, called as the test cell calls it.
LIVE_CALLS = {
    "cell4_projections_test": "check_projections(query, key, value)",
    "cell5_scores_test": "check_attention_scores(query, key, attention_scores)",
    "cell6_softmax_test": "check_softmax(softmax), "
                          "check_attention_weights(attention_scores, attention_weights)",
    "cell7_values_test": "check_attended_values(attention_weights, value, attended_values)",
}


def bench_live(repeats=15) -> dict:
    """Median seconds of each test cell's checks in a real kernel (the live replay)."""
    import json

    import nbformat
    from nbformat.v4 import new_code_cell

    nb = nbformat.read(SOURCE, as_version=4)
    last = max(i for i, c in enumerate(nb.cells) if c.get("id") == "cell7_values_test")
    cells = [c for c in nb.cells[:last + 1] if c.cell_type == "code"]
    cells.append(new_code_cell("import time as _time, json as _json\n"
                               "from verify import *\n_times = {}"))
    for _ in range(repeats):  # each call from a new cell: a new history entry, no cache
        for gid, call in LIVE_CALLS.items():
            cells.append(new_code_cell(
                f"_t0 = _time.perf_counter(); _r = ({call},)\n"
                f"assert all(_r), _r\n"
                f"_times.setdefault({gid!r}, []).append(_time.perf_counter() - _t0)"))
    cells.append(new_code_cell("print(_json.dumps(_times))"))
    nb.cells = cells
    run_notebook(nb)
    times = json.loads(nb.cells[-1].outputs[0]["text"])
    return {gid: statistics.median(ts[1:]) for gid, ts in times.items()}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--checks-only", action="store_true",
                        help="only the verify timings (skip the notebook runs)")
    args = parser.parse_args(argv)
    if args.checks_only:
        for name, sec in bench_checks().items():
            print(f"  {name:<36} {sec * 1e3:7.3f} ms")
        _print_live()
        return

    t, imports = bench_notebook(args.rounds)
    ratio = t["lesson"] / t["imports"]
    print(f"complete_lesson.ipynb headless, fresh kernel, median of {args.rounds} rounds:")
    print(f"  whole lesson     {t['lesson']:6.2f} s")
    print(f"  imports only     {t['imports']:6.2f} s   ({len(imports.splitlines())} lines of "
          "the set-up cell's imports)")
    print(f"  ratio            {ratio:6.2f}   (target <= 1.2: "
          f"{'met' if ratio <= 1.2 else 'MISSED'})\n")
    print("verify checks, median per call:")
    for name, sec in bench_checks().items():
        verdict = "" if name == "check_all" else (
            f"   (target <= 20 ms: {'met' if sec <= 0.020 else 'MISSED'})")
        print(f"  {name:<36} {sec * 1e3:7.3f} ms{verdict}")
    _print_live()


def _print_live():
    print("\nlive checks in a kernel (the step cell replayed from its history), median per "
          "test cell:")
    for gid, sec in bench_live().items():
        checks = LIVE_CALLS[gid].count("check_")  # Cell 6's two checks share one replay
        met = "met" if sec <= 0.020 * checks else "MISSED"
        print(f"  {gid:<24} {sec * 1e3:7.1f} ms for {checks} check(s)   "
              f"(target <= 20 ms per check: {met})")


if __name__ == "__main__":
    main()
