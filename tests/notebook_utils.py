"""Helpers shared by the notebook tests.

The step cells run in-process in a real IPython shell (the one a Jupyter
kernel runs), so a cell that raises behaves as in JupyterLab: the error is
shown, the names keep what they held, the next cell runs, and verify sees
the failed cell through IPython's ``last_execution_result``.
"""

import ast
import contextlib
import io
import json
import os
import types
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "complete_lesson.ipynb"
LESSON = ROOT / "lesson.ipynb"
#: The code cells that hold the lesson's steps, in order.
STEP_CELLS = ["cell2_setup", "cell3_data", "cell4_projections", "cell5_scores",
              "cell6_softmax", "cell7_values"]


def load(path):
    return json.loads(Path(path).read_text(encoding="utf-8"))


def source(cell):
    src = cell["source"]
    return "".join(src) if isinstance(src, list) else src


def cells_by_id(path):
    return {c["id"]: source(c) for c in load(path)["cells"]}


@lru_cache(maxsize=1)
def shell():
    """The process's IPython InteractiveShell (no history file)."""
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    config = Config()
    config.HistoryManager.enabled = False
    sh = InteractiveShell.instance(config=config)
    sh.colors = "nocolor"  # tracebacks without syntax colouring: 10x faster to format
    sh.InteractiveTB.set_mode(mode="Minimal")
    import torch

    from src import live

    live.install(sh)  # (what importing verify does in a kernel: the live check's record)
    # The lesson's tensors are tiny: on a loaded machine torch's intra-op threads made each
    # op 100x slower (0.2 ms -> 21 ms, measured), for nothing.
    torch.set_num_threads(1)
    return sh


def _fresh_namespace():
    sh = shell()
    module = types.ModuleType("__main__")
    sh.init_create_namespaces(user_module=module, user_ns=module.__dict__)
    sh.init_user_ns()
    return sh.user_ns


def _run_cell(code, cell_id=None):
    """Run ``code`` as JupyterLab runs a cell: with its cell id (None: as nbclient)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        shell().run_cell(code, store_history=True, cell_id=cell_id)


#: The set-up and data cells, run once per process when unchanged (they take most of
#: the time): (their code, the names they define, torch's RNG state after them).
_PRELUDE = {}
PRELUDE_CELLS = STEP_CELLS[:2]


def _tensors_of(names):
    """Every tensor the set-up cells made (the layers' parameters included), by name."""
    import torch

    out = {}
    for k, v in names.items():
        if isinstance(v, torch.Tensor):
            out[k] = v
        elif isinstance(v, torch.nn.Module):
            out.update({f"{k}.{p}": t for p, t in v.named_parameters()})
    return out


def _prelude(codes, prelude=tuple(PRELUDE_CELLS)):
    """Run the unchanged set-up cells once; give what they define, unchanged.

    The objects are shared between runs (copying the layers would cost more than
    running the cells); a run that changed one in place drops the cache instead.
    """
    import torch

    key = tuple(codes[c] for c in prelude)
    cached = _PRELUDE.get(key)
    if cached is not None:
        names, rng, saved = cached
        now = _tensors_of(names)
        if now.keys() != saved.keys() or not all(
                torch.equal(now[k].detach(), saved[k]) for k in saved):
            cached = None
    if cached is None:
        ns = _fresh_namespace()
        for cid in prelude:
            _run_cell(codes[cid], cell_id=cid)
        names = {k: v for k, v in ns.items() if not k.startswith("_")
                 and k not in ("In", "Out", "get_ipython", "exit", "quit", "open")}
        saved = {k: t.detach().clone() for k, t in _tensors_of(names).items()}
        _PRELUDE.clear()
        _PRELUDE[key] = cached = (names, torch.get_rng_state(), saved)
    names, rng, _ = cached
    torch.set_rng_state(rng)
    return dict(names)


def run_steps(codes: dict, replace: dict | None = None, after=None, cells=None) -> dict:
    """Execute the step cells' code in-process, as a student running them in order.

    ``replace`` maps cell id -> [(old, new), ...] substitutions (a mistake).
    A cell that raises stops, like a notebook cell, and the next one runs,
    like a student who moves on; an empty cell is not run (as in nbclient).
    ``after(cell_id, namespace)`` is called after each step cell from Cell 4 on,
    when its test cell would run. Returns the namespace (a fresh one for every
    call). The set-up and data cells, unless ``replace`` changes them, run once
    per process: what they define is shared, and a run that changed it in place
    makes the next run execute them again. ``cells``: another lesson's code cells (its
    set-up and data cells first), lesson 1's by default.
    """
    replace = replace or {}
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        cells = list(cells or STEP_CELLS)
        prelude = tuple(cells[:2])
        if not set(replace) & set(prelude):
            names = _prelude(codes, prelude)
            ns = _fresh_namespace()
            ns.update(names)
            cells = cells[len(prelude):]
        else:
            ns = _fresh_namespace()
        for cid in cells:
            code = codes[cid]
            for old, new in replace.get(cid, []):
                assert old in code, f"{old!r} not found in {cid}"
                code = code.replace(old, new)
            if code.strip():  # nbclient does not run an empty cell either
                _run_cell(code, cell_id=cid)
            if after is not None:
                after(cid, ns)
    finally:
        os.chdir(cwd)
    return ns


@lru_cache(maxsize=None)
def check_calls(path=SOURCE) -> dict:
    """{grade cell id: [source of each check_*(...) call its test cell makes]}."""
    out = {}
    for cell in load(path)["cells"]:
        gid = cell["metadata"].get("nbgrader", {}).get("grade_id")
        if not cell["metadata"].get("nbgrader", {}).get("grade"):
            continue
        text = source(cell)
        calls = [ast.get_source_segment(text, node) for node in ast.walk(ast.parse(text))
                 if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                 and node.func.id.startswith("check_")]
        out[gid] = sorted(calls, key=text.index)
    return out


def test_cell_results(grade_id, namespace, path=SOURCE):
    """The results of the check calls ``grade_id``'s test cell makes, on ``namespace``."""
    import verify

    scope = dict(namespace)
    scope.update({name: getattr(verify, name) for name in verify.__all__})
    return [eval(call, scope) for call in check_calls(path)[grade_id]]  # noqa: S307
