"""How fast the lesson runs and how fast verify answers (``make bench``).

1. complete_lesson.ipynb executed top to bottom headless, divided by a
   notebook that only does the lesson's imports (taken from its set-up
   cell), each in a fresh kernel of the same kind, interleaved by rounds.
   Target: 1.2x or less.
2. Each verify check on tensors as given (right answers, and wrong ones that
   walk the whole catalogue), and the observe/judge halves: median per call.
   Target: 20 ms or less per check (check_all runs all five).
3. The live checks as a student meets them: in a real kernel that ran the
   reference, each check cell's calls made again from a new cell, the live
   check's last verdict forgotten each time, so that it replays the code last
   run in the step cell (src/live.py, on the road of src/road.py), as the check
   cells do. Median per call; the same 20 ms target.

Cell ids, names and calls come from the lesson's spec (src/lessons/).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from src.layout import SOURCE_NOTEBOOK

ROOT = Path(__file__).resolve().parent.parent
SOURCE = SOURCE_NOTEBOOK


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

    from src import lessons

    first = lessons.lesson().setup_cells[0]
    setup = next(c for c in nb.cells if c.get("id") == first)
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
    spec = verify.LESSON
    calls = {}
    def given(v):  # a copy: not the notebook's own object, so judged as given, no replay
        return v.clone() if torch.is_tensor(v) else (lambda x, dim=-1: v(x, dim))

    for check in spec.checks.values():  # each check on the tensors as given, right ...
        fn = getattr(verify, f"check_{check.name}")
        positional, extras = check.arguments
        args = [given(ns[n]) for n in positional]
        kwargs = {n: given(ns[n]) for n in extras}
        calls[f"check_{check.name}"] = lambda fn=fn, a=args, k=kwargs: fn(*a, **k)
        out = check.outputs[-1]
        if check.kind == "function":  # ... and wrong in a way no entry names
            odd = lambda x, dim=-1: torch.exp(x).clamp(max=3)  # noqa: E731
            wrong = [odd if n == out else ns[n] for n in positional]
        else:
            noise = torch.randn(ns[out].shape, generator=torch.Generator().manual_seed(0))
            wrong = [ns[n] + noise if n == out else ns[n] for n in positional]
        calls[f"check_{check.name} (unnamed)"] = (
            lambda fn=fn, a=wrong, k=kwargs: fn(*a, **k))
    data = {gid: verify.observe(gid, ns) for gid in verify.GRADE_CELLS}
    for step in spec.steps[-2:]:
        calls[f"observe (cell {step.number})"] = lambda g=step.test: verify.observe(g, ns)
        calls[f"judge (cell {step.number}, strict)"] = (
            lambda g=step.test: verify.judge(g, data[g], strict=True))
    calls["check_all"] = lambda: verify.check_all(ns)
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


def live_calls() -> dict:
    """{check cell id: its calls, as the check cell makes them} (the spec's ``call``)."""
    from src import lessons

    return {s.test: s.call for s in lessons.lesson().steps}


def bench_live(repeats=15) -> dict:
    """Median seconds of each check cell's checks in a real kernel (the live check)."""
    import json

    import nbformat
    from nbformat.v4 import new_code_cell

    nb = nbformat.read(SOURCE, as_version=4)
    calls = live_calls()
    last = max(i for i, c in enumerate(nb.cells) if c.get("id") in calls)
    cells = [c for c in nb.cells[:last + 1] if c.cell_type == "code"]
    cells.append(new_code_cell("import time as _time, json as _json\n"
                               "from verify import *\nfrom src import live as _live\n"
                               "_times = {}"))
    for _ in range(repeats):  # each call with the last verdict forgotten: no cache
        for gid, call in calls.items():
            cells.append(new_code_cell(
                f"_live._CACHE.pop('last', None)\n"
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
    print(f"{SOURCE.name} headless, fresh kernel, median of {args.rounds} rounds:")
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
    print("\nlive checks in a kernel (the code last run in the step cell, replayed on the "
          "road), median per check cell:")
    calls = live_calls()
    for gid, sec in bench_live().items():
        checks = calls[gid].count("check_")  # Cell 6's two checks share one replay
        met = "met" if sec <= 0.020 * checks else "MISSED"
        print(f"  {gid:<24} {sec * 1e3:7.1f} ms for {checks} check(s)   "
              f"(target <= 20 ms per check: {met})")


if __name__ == "__main__":
    main()
