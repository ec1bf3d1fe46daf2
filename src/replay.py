"""The trusted replay: each step cell's own code, run again on inputs the grader chooses.

A step is judged by what its own cell's code computes, never by what a
namespace holds when its test cell runs. For each step cell (found by its
nbgrader grade_id) the replay:

1. builds a fresh namespace: the set-up names of the release's set-up cells
   (copies, so nothing a run does reaches the next), the *reference* tensors
   of the steps before (``query = q_proj(x)`` ... computed here, with their
   autograd graphs, exactly as the lesson makes them), and ``None`` for the
   names of this step and the later ones (as Cell 2 leaves them);
2. runs the cell's source there (output captured, nothing displayed);
3. reads off, as data only, what the code did: what it assigned (or the
   error it raised, and on which line), the tensors it made, a function's
   outputs on the lesson's probe inputs, whether it changed its inputs in place, and what
   its outputs depend on (the autograd graph and gradients with respect to
   the layers' parameters or to its input), gathered with functions captured
   before any student code ran.

So only the step cell's own code can earn its step (earlier, added or
hidden cells, hooks and patched modules never run in the replay), and an
earlier slip never costs twice (each cell meets correct inputs). The data
goes to :func:`src.checks.judge.judge`, which is pure. What the lesson is (its
set-up, steps, names, reference chain) comes from its spec (``src/lessons/``).

Grading runs the replay in a *fork server* inside the bubblewrap sandbox
(:class:`ReplayServer`): one process imports torch and runs the set-up once,
then forks a child per cell run, killed at its deadline. The student's own
kernel (the live check, ``src/live.py``) runs the same :func:`replay_in_process`
on the source the student last ran in each step cell; ``src/road.py`` is the one
road from those sources to the verdicts.

Shape legend: B = 1 batch, L = S = 6 tokens, d_k = d_model = 64; query, key,
value, attended_values [B, L, d_k]; attention_scores, attention_weights
[B, L, S].
"""

from __future__ import annotations

import ast
import base64
import contextlib
import copy
import difflib
import io
import json
import math
import os
import select
import signal
import struct
import subprocess
import sys
import time
import types
import warnings
import zipfile
from pathlib import Path

import numpy as np

from src.checks.shapes import cropped
from src.checks.util import output_gradient
from src.limits import LIMITS as _LIMITS

ROOT = Path(__file__).resolve().parent.parent
#: Limits of one replay (the one limits object: src/limits.py; c.TrustedScores in
#: nbgrader_config.py overrides the seconds, through the request): seconds per cell
#: run, per student, bytes of a run's data.
RUN_SECONDS = _LIMITS.replay_run_seconds
STUDENT_SECONDS = _LIMITS.replay_student_seconds
DATA_BYTES = _LIMITS.replay_data_mb * 2**20


_PINNED: list = [None]


def draw_seed() -> int:
    """A fresh seed for a second run (from the OS: no state a cell could predict), or
    the one :func:`pinned_seed` set in this process."""
    if _PINNED[0] is not None:
        return _PINNED[0]
    return int.from_bytes(os.urandom(8), "little") >> 1


@contextlib.contextmanager
def pinned_seed(seed: int | None):
    """Replays in this process use ``seed`` for their second run (tests that compare two
    replays' messages). A fork server is a process of its own: it always draws afresh."""
    old, _PINNED[0] = _PINNED[0], seed
    try:
        yield
    finally:
        _PINNED[0] = old


def _variant_run(lesson, step: str, code, setup: dict, seed: int) -> dict:
    """The step cell's code once more, on the lesson's ``variant_x`` and the tensors made
    from it: ``variant.in.x``, ``variant.out.<name>`` (its outputs' values) or
    ``variant.raised``. Never raises."""
    from src.checks import observe

    out = {}
    try:
        out["variant.in.x"] = x = lesson.variant_x(seed)
        ns, _ = fresh_namespace(lesson, setup, step, x=x)
        test_id, names = lesson.by_cell[step].test, lesson.by_cell[step].names
        try:
            with _quiet():
                exec(code, ns)  # noqa: S102  (the student's cell again, its own namespace)
        except BaseException as exc:  # noqa: BLE001  (what it raises is data)
            if isinstance(exc, KeyboardInterrupt):
                raise
            out["variant.raised"] = np.array(f"{type(exc).__name__}: {str(exc)[:160]}")
            return out
        seen = observe.observe(test_id, _Official(lesson, ns))
        for n in names:
            values = seen.get(f"t.{n}.values")
            if isinstance(values, np.ndarray):
                out[f"variant.out.{n}"] = values
    except Exception as exc:  # noqa: BLE001  (a student's object may break any call)
        out["variant.error"] = np.array(f"{type(exc).__name__}: {str(exc)[:120]}")
    return out


def setup_namespace(sources) -> dict:
    """Run the set-up cells' sources (trusted: the release's) in a fresh namespace."""
    ns = {"__name__": "__main__", "__builtins__": __builtins__}
    with _quiet():
        for src in sources:
            exec(compile(src, "<set-up>", "exec"), ns)  # noqa: S102  (the release's own code)
    return ns


def _shared(obj) -> bool:
    """Objects a run may share with the set-up (code, not data)."""
    return isinstance(obj, (types.ModuleType, types.FunctionType, types.BuiltinFunctionType,
                            type, types.MethodType)) or callable(obj) and not hasattr(
        obj, "__dict__") or obj is __builtins__


def _independent(t):
    """A reference tensor as a graph of its own (a non-leaf that requires grad, like the
    lesson's), so that a gradient with respect to it is not one through another input."""
    import torch

    if not torch.is_tensor(t):
        return t
    return t.detach().clone().requires_grad_() / 1.0


def _no_display(*objs, **kwargs):
    """``display`` during a replay: nothing is shown."""


def fresh_namespace(lesson, setup: dict, step: str, upstream: dict | None = None,
                    x: np.ndarray | None = None) -> tuple[dict, dict]:
    """(namespace for ``step``'s run, {input name: the object injected}).

    Set-up data (tensors, layers, the example) is deep-copied with aliasing kept
    (``example.x is x``); modules and functions are shared. Earlier steps' names
    hold the reference, or ``upstream``'s values (the student's own, as data:
    see :func:`own_upstream`); this step's and later ones hold None. ``x``: other
    embeddings, written into the copy's x (so into example.x too) before the
    reference is made from it.
    """
    import torch

    memo = {id(v): v for v in setup.values() if _shared(v) and not isinstance(
        v, torch.nn.Module)}
    # (the given tensors are made again below: non-leaf tensors cannot be deep-copied)
    data = {k: v for k, v in setup.items() if k != "__builtins__" and k not in lesson.given}
    ns = copy.deepcopy(data, memo)
    ns["__builtins__"] = setup.get("__builtins__", __builtins__)
    ns["display"] = _no_display  # in a live kernel, a replay shows nothing
    if x is not None:
        with torch.no_grad():
            ns["x"].copy_(torch.from_numpy(np.array(x, dtype=np.float32)))
    ref = lesson.torch_reference(ns)
    for n in lesson.given:  # (made from this namespace's x, as the steps' tensors are)
        ns[n] = _independent(ref[n])
    later = False
    for st in lesson.steps:
        later = later or st.cell == step
        for n in st.names:
            ns[n] = None if later else _independent(ref[n])
            if not later and upstream and n in upstream:
                ns[n] = _as_lesson_object(upstream[n])
    # Every earlier tensor is an input: what the code depends on is read off its gradients
    # with respect to each (they are independent of one another, so each one counts alone).
    inputs = {n: ns[n] for n in lesson.given}
    inputs.update({n: ns[n] for st in lesson.steps if st.cell != step for n in st.names
                   if not lesson.later_than(st.cell, step) and torch.is_tensor(ns[n])})
    for check in lesson.by_cell[step].checks:  # a step made by the set-up's layers
        for layer in check.layers.values():
            for part in ("weight", "bias"):
                inputs[f"{layer}.{part}"] = getattr(ns[layer], part)
    return ns, inputs


def _as_lesson_object(value):
    """A value recorded by :func:`own_upstream`, made again as the lesson would hold it:
    a tensor that required grad comes back as a non-leaf that requires grad."""
    import torch

    kind, arr, grad = value
    if kind == "ndarray":
        return np.array(arr)
    t = torch.from_numpy(np.array(arr))
    return t.requires_grad_() / 1 if grad and t.is_floating_point() else t


def own_upstream(lesson, ns) -> dict:
    """The lesson's names a student's own run left in ``ns``, as data only:
    {name: (kind, array, requires grad)} for tensors and NumPy arrays of numbers."""
    import torch

    out = {}
    for n in lesson.official:
        v = ns.get(n)
        if type(v) is torch.Tensor and v.layout == torch.strided and v.numel() <= 2**16:
            with contextlib.suppress(Exception):
                out[n] = ("tensor", v.detach().cpu().numpy().copy(), bool(v.requires_grad))
        elif type(v) is np.ndarray and v.dtype.kind in "biuf" and v.size <= 2**16:
            out[n] = ("ndarray", v.copy(), False)
    return out


def same_as_reference(lesson, upstream: dict, setup: dict, step: str) -> bool:
    """Whether the student's own inputs of ``step`` equal the reference ones (then the
    run on them would only repeat the reference run)."""
    ref = lesson.torch_reference(fresh_namespace(lesson, setup, lesson.steps[0].cell)[0])
    st = lesson.by_cell[step]
    upstream_names = {n for c in st.checks for n in c.upstream}
    for n in [n for n in st.inputs if n in ref] + sorted(upstream_names - set(st.inputs)):
        got = upstream.get(n)
        want = ref[n].detach().numpy()
        if got is None or got[0] != "tensor" or got[1].shape != want.shape or \
                got[1].dtype != want.dtype or not np.array_equal(got[1], want):
            return False
    return True


def run_chain(lesson, sources: dict, setup: dict) -> dict:
    """The student's step cells run in order in one namespace, as the notebook runs them:
    {step: own_upstream after it}. Only ever used as data for a later step's second run."""
    ns, _ = fresh_namespace(lesson, setup, lesson.steps[0].cell)
    out = {}
    for step in lesson.by_cell:
        src = sources.get(step)
        if isinstance(src, str):
            with contextlib.suppress(BaseException), _quiet():
                exec(_compile(src, f"<{step}>"), ns)  # noqa: S102
            _Captured().clean()
        out[step] = own_upstream(lesson, ns)
    return out


# ------------------------------------------------------------------ running
@contextlib.contextmanager
def _quiet(sink=None):
    sink = sink if sink is not None else io.StringIO()
    with warnings.catch_warnings(), contextlib.redirect_stdout(sink), \
            contextlib.redirect_stderr(sink):
        warnings.simplefilter("ignore")
        yield sink


def _compile(source: str, filename: str):
    try:
        return compile(source, filename, "exec")
    except SyntaxError:
        try:  # IPython syntax (%magics, !shell) becomes get_ipython() calls
            from IPython.core.inputtransformer2 import TransformerManager

            return compile(TransformerManager().transform_cell(source), filename, "exec")
        except Exception:  # noqa: BLE001  (report the original error)
            pass
        raise


def _line_of(exc, filename, source):
    """(line number, text) of the cell's line that raised ``exc``."""
    import traceback

    if isinstance(exc, SyntaxError):
        return exc.lineno or 0, (exc.text or "").strip()
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == filename]
    if not frames:
        return 0, ""
    lineno = frames[-1].lineno or 0
    lines = source.splitlines()
    return lineno, (lines[lineno - 1].strip() if 0 < lineno <= len(lines) else "")


class _Captured:
    """torch and Python functions captured before a student's code runs: the code may
    rebind module attributes, but not these references."""

    def __init__(self):
        import torch

        self.torch = torch
        self.tensor_type = torch.Tensor
        self.is_tensor = torch.is_tensor
        self.engine = torch.autograd.Variable._execution_engine
        self.run_backward = type(self.engine).run_backward
        self.python_node = torch.autograd.function.BackwardCFunction
        self.equal = torch.equal
        self.from_numpy = torch.from_numpy
        self.zeros_like = torch.zeros_like
        self.isinstance, self.type, self.len = isinstance, type, len
        self.settrace, self.setprofile = sys.settrace, sys.setprofile

    def clean(self):
        """Undo what code could have left active: torch function modes, trace hooks."""
        torch = self.torch
        self.settrace(None)
        self.setprofile(None)
        with contextlib.suppress(Exception):
            while torch._C._len_torch_function_stack() > 0:
                torch._C._pop_torch_function_stack()
        with contextlib.suppress(Exception):
            while torch._C._len_torch_dispatch_stack() > 0:
                torch._C._pop_torch_dispatch_stack()

    def plain(self, t) -> bool:
        return self.type(t) is self.tensor_type

    def graph(self, t, limit=512):
        """(node class names, has a custom Python Function node) of ``t``'s graph."""
        names, python, seen, stack = set(), False, set(), [t.grad_fn]
        while stack and len(seen) < limit:
            node = stack.pop()
            if node is None or id(node) in seen:
                continue
            seen.add(id(node))
            names.add(self.type(node).__name__)
            python = python or self.isinstance(node, self.python_node)
            stack.extend(n for n, _ in (node.next_functions or ()))
        return sorted(names), python

    def vjp(self, out, inputs):
        """Gradients of sum(out * G) with respect to ``inputs`` (float32 arrays; zeros
        where out does not depend on one), G = :func:`output_gradient`."""
        grad = self.from_numpy(output_gradient(tuple(out.shape)))
        got = self.run_backward(self.engine, (out,), (grad.to(out.dtype),), True, False,
                                tuple(inputs), True, False)
        return [np.zeros(tuple(i.shape), np.float32) if g is None
                else g.detach().float().numpy().copy() for g, i in zip(got, inputs)]


#: Tensor methods that return a new tensor and have an in-place twin (name_): called on a
#: line of their own, their result is lost.
_OUT_OF_PLACE = {"masked_fill", "add", "sub", "mul", "div", "clamp", "exp", "log", "abs",
                 "transpose", "permute", "reshape", "view", "softmax", "float", "double",
                 "contiguous", "squeeze", "unsqueeze", "tril", "triu",
                 "nan_to_num", "where", "matmul", "bmm", "mm", "einsum", "stack", "cat",
                 "sqrt", "sum", "mean", "amax"}


def _drops(call, outputs) -> bool:
    """Whether ``call`` (a line of its own) makes a new value: an out-of-place method or
    function, with no ``out=`` or with ``out=`` one of the step's own names, which hold
    None when the cell starts (``torch.matmul(a, b, out=attended_values)``)."""
    if not (isinstance(call.func, ast.Attribute) and call.func.attr in _OUT_OF_PLACE):
        return False
    out = [k.value for k in call.keywords if k.arg == "out"]
    return not out or (isinstance(out[0], ast.Name) and out[0].id in outputs)


def _discarded(source: str, functions=(), outputs=()) -> list[str]:
    """Lines of a cell that compute a value and keep nothing of it (``scores / 8`` on a
    line of its own, or a call of ``functions`` or of one the cell defines, such as
    ``softmax(attention_scores)``; ``out=`` one of the step's ``outputs``, which hold
    None): said beside a wrong result, which they often explain."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    functions = set(functions) | {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    found = [ast.unparse(n.value) for n in tree.body
             if isinstance(n, ast.Expr) and (isinstance(n.value, (ast.BinOp, ast.UnaryOp)) or (
                 isinstance(n.value, ast.Call) and _drops(n.value, outputs)) or (
                 isinstance(n.value, ast.Call) and isinstance(n.value.func, ast.Name)
                 and n.value.func.id in functions))]
    return [f if len(f) <= 80 else f[:79] + "…" for f in found[:2]]


def _builtins_in_defs(source: str, functions, builtins) -> list[str]:
    """Calls of a built-in (``builtins``: last names, e.g. softmax, log_softmax) written
    in the body of a def of ``functions`` in ``source``, run or not: `torch.softmax(...)`
    in an except branch that our inputs never reach is still in the function. A bare name
    counts only when the cell defines no function of that name (its own helper), and the
    function's own name never (a recursion)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    own = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    wanted = set(builtins) | {b[0].upper() + b[1:].replace("_s", "S").replace("_", "")
                              for b in builtins}  # (nn.Softmax, nn.LogSoftmax, nn.Softmin)
    found = []
    for fn in (n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in functions):
        # (a comparison with the built-in, in an assert, a print or an allclose, answers
        # nothing for the function)
        checks = [n for n in ast.walk(fn) if isinstance(n, ast.Assert) or (
            isinstance(n, ast.Call) and getattr(n.func, "attr", getattr(n.func, "id", ""))
            in ("print", "allclose", "isclose", "assert_close", "equal"))]
        aside = {id(m) for c in checks for m in ast.walk(c)}
        for call in (n for n in ast.walk(fn) if isinstance(n, ast.Call) and id(n) not in aside):
            f = call.func
            name = f.attr if isinstance(f, ast.Attribute) else \
                f.id if isinstance(f, ast.Name) and f.id not in own | {fn.name} else ""
            if name in wanted:
                found.append(f"{ast.unparse(f)}(...)")
    return list(dict.fromkeys(found))


def _assigned_names(source: str) -> list[str]:
    """Top-level names a cell's code binds (for spotting a misspelled name)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.append(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
    return list(dict.fromkeys(names))


def replay_step(lesson, step: str, source: str, setup: dict, upstream: dict | None = None,
                seed: int | None = None) -> dict:
    """Run step cell ``step``'s source on the reference inputs; return the judge's data.

    The data is :func:`src.checks.observe.observe`'s for the step's check cell, plus
    ``cell.*``
    (the cell ran; what it raised, on which line) and ``replay.*`` facts:
    ``replay.mutated`` (inputs changed in place), ``replay.misspelled``
    ([assigned name, expected name]), ``replay.grad.<out>.<input>`` (gradients
    of the output with respect to each input, see :func:`output_gradient`),
    ``replay.graph.<out>`` (autograd node names) and ``replay.python_node``.
    ``seed``: the second run's (:func:`draw_seed` when None). Never raises for anything
    the cell does.
    """
    import torch

    from src.checks import observe

    cap = _Captured()
    test_id = lesson.by_cell[step].test
    filename = f"<{step}>"
    ns, inputs = fresh_namespace(lesson, setup, step, upstream)
    own = {"replay.own": np.array(True)} if upstream else {}
    # Inputs changed in place: the earlier tensors, the layers' parameters, and the set-up's
    # x (which every later cell reads).
    watched = {**inputs, **{n: ns[n] for n in lesson.watched_setup
                            if cap.is_tensor(ns.get(n))}}
    before = {n: t.detach().clone() for n, t in watched.items() if cap.is_tensor(t)}
    error, sink = None, io.StringIO()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: threads only add wake-ups
    course = set()
    try:
        code = _compile(source, filename)
        with _quiet(sink), observe.CourseCalls(course, _helper_codes(setup)):
            exec(code, ns)  # noqa: S102  (the student's cell, in its own namespace)
    except BaseException as exc:  # noqa: BLE001  (everything the cell raises is data)
        if isinstance(exc, KeyboardInterrupt):
            raise
        error = exc
    finally:
        cap.clean()
        torch.set_num_threads(threads)
    # What the cell did is this run's, never a kernel's last cell (observe's cell.*).
    data = {k: v for k, v in observe.observe(test_id, _Official(lesson, ns)).items()
            if not k.startswith("cell.")}
    data.update({"cell.ran": np.array(True), "cell.replayed": np.array(True)})
    if error is not None:
        lineno, line = _line_of(error, filename, source)
        data["cell.raised"] = observe._raised(observe._error_text(error), line)
        data["cell.lineno"] = np.array(lineno)
    data.update(_facts(lesson, cap, step, ns, inputs, watched, before, source,
                       raised="" if error is None else f"{type(error).__name__}: {error}"))
    # (a set-up constant bound anew, d_k = math.sqrt(d_k): the later cells see it changed)
    consts = [n for n in _assigned_names(source) if n in lesson.setup_names and n in setup
              and isinstance(setup[n], (int, float)) and ns.get(n) is not setup[n]]
    if consts:
        data["replay.rebound"] = np.array(
            [*data.get("replay.rebound", np.array([], dtype=str)).tolist(), *consts], dtype=str)
    # The inputs as the cell was given them, not as it left the names: rebinding `query`
    # (or changing it in place) is this cell's doing, never an earlier cell's slip.
    given = {n for c in lesson.by_cell[step].checks for n in (*c.upstream, *c.extras)}
    given = {n: before[n] for n in given if n in before}
    if given:
        for key in [k for k in data if k.startswith(tuple(f"t.{n}." for n in given))]:
            del data[key]
        data.update(observe.observe_objects(given))
    if course:
        data["replay.course_code"] = np.array(sorted(course)[:8], dtype=str)
    data.update(own)
    if upstream is None and error is None and lesson.by_cell[step].variant:
        data.update(_variant_run(lesson, step, code, setup,
                                 draw_seed() if seed is None else seed))
    return data


def _helper_codes(setup: dict) -> frozenset:
    """Code objects of the set-up's functions and of its classes' methods: the helpers a
    step cell may call (show_attention, compare_with_torch_softmax ...)."""
    codes = set()
    for v in setup.values():
        members = vars(v).values() if isinstance(v, type) else (v,)
        for m in members:
            m = getattr(m, "__func__", m)  # (static and class methods)
            if isinstance(m, types.FunctionType):
                codes.add(m.__code__)
    return frozenset(codes)


class _Official(dict):
    """The namespace as the observer may see it: the lesson's names only."""

    def __init__(self, lesson, ns):
        super().__init__({n: ns.get(n) for n in lesson.official})


def _facts(lesson, cap, step, ns, inputs, watched, before, source, raised="") -> dict:
    out = {}
    try:
        mutated = [n for n, old in before.items()
                   if not (tuple(watched[n].shape) == tuple(old.shape)
                           and bool(cap.equal(watched[n].detach(), old)))]
        if mutated:
            out["replay.mutated"] = np.array(mutated, dtype=str)
        reshaped = [n for n in mutated if tuple(watched[n].shape) != tuple(before[n].shape)]
        if reshaped:  # (transpose_, squeeze_: the same numbers, another shape)
            out["replay.reshaped"] = np.array(reshaped, dtype=str)
        # (a name an earlier cell made, bound anew: later cells, and this one run twice,
        # see another tensor under it)
        rebound = [n for n in before if n in ns and ns[n] is not watched[n]
                   and n not in mutated]
        if rebound:
            out["replay.rebound"] = np.array(rebound, dtype=str)
        # (several of the cell's own names bound to one tensor: a = b = torch.zeros(...))
        own = [n for n in lesson.by_cell[step].names
               if ns.get(n) is not None and hasattr(ns[n], "shape")]  # (tensors only)
        aliased = [n for n in own if any(ns[m] is ns[n] for m in own if m != n)]
        if aliased:
            out["replay.aliased"] = np.array(aliased, dtype=str)
        discarded = _discarded(source, [n for n in lesson.official
                                        if callable(ns.get(n)) and not isinstance(ns[n], type)],
                               lesson.by_cell[step].names)
        if discarded:
            out["replay.discarded"] = np.array(discarded, dtype=str)
        seen_shapes = {n: tuple(v.shape) for n, v in ns.items()
                       if n in lesson.official and cap.is_tensor(v)}
        cut = cropped(source, seen_shapes, {n: lesson.shapes[n]
                                            for n in lesson.by_cell[step].names
                                            if n in lesson.shapes})
        if cut:  # [name, product, its shape, index] of each
            out["replay.cropped"] = np.array([str(p) for c in cut for p in c], dtype=str)
        written = _builtins_in_defs(source, lesson.official,
                                    lesson.facts.get("builtin_softmax", ()))
        if written:
            out["replay.builtin_written"] = np.array(written, dtype=str)
        names = lesson.by_cell[step].names
        missing = [n for n in names if ns.get(n) is None]
        try:  # (a cell that does not parse binds nothing we can read)
            ast.parse(source)
        except (SyntaxError, ValueError):
            unbound = []
        else:  # (no line of the cell binds it: not a slip of an earlier cell)
            unbound = [n for n in missing if n not in _assigned_names(source)]
        if unbound:
            out["replay.unassigned"] = np.array(unbound, dtype=str)
        # (only names the run bound: a line that raised before its assignment misspelled
        # nothing)
        bound = [a for a in _assigned_names(source) if a not in lesson.official and a in ns]
        for n in missing:
            close = difflib.get_close_matches(n, bound, n=1, cutoff=0.8)  # (raw_scores: 0.76)
            # (or another name for it, in a cell that ran to its end or stopped at an
            # assert about this name: the one new name holding a tensor of its shape,
            # weights = softmax(...) for attention_weights)
            shaped = [] if raised and n not in raised else [
                a for a in dict.fromkeys(bound) if a not in lesson.setup_names
                and a not in lesson.shapes and cap.is_tensor(ns.get(a))
                and tuple(ns[a].shape) == tuple(lesson.shapes.get(n, ()))]
            if close or len(shaped) == 1:
                out["replay.misspelled"] = np.array([(close or shaped)[0], n], dtype=str)
                break
        roots = [(n, t) for n, t in inputs.items() if cap.is_tensor(t) and t.requires_grad]
        for n in names:
            t = ns.get(n)
            if not (cap.plain(t) and t.requires_grad and t.is_floating_point()
                    and t.numel() <= 2**16):
                continue
            nodes, python = cap.graph(t)
            out[f"replay.graph.{n}"] = np.array(nodes[:64], dtype=str)
            if python:
                out["replay.python_node"] = np.array(True)
            try:
                grads = cap.vjp(t, [r for _, r in roots])
            except Exception as exc:  # noqa: BLE001  (autograd cannot go back: data)
                out[f"replay.grad_error.{n}"] = np.array(f"{type(exc).__name__}: "
                                                         f"{str(exc)[:160]}")
                continue
            for (rn, _), g in zip(roots, grads):
                out[f"replay.grad.{n}.{rn}"] = g
    except Exception as exc:  # noqa: BLE001  (a student's object may break any call)
        out["replay.error"] = np.array(f"{type(exc).__name__}: {str(exc)[:120]}")
    return out


# --------------------------------------------------------------- data wire
def pack(data: dict) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **data)
    return buf.getvalue()


def unpack(raw: bytes, cap: int = DATA_BYTES, what: str = "the replay's data",
           max_arrays: int = 512) -> dict:
    """Arrays from .npz bytes (``pack``'s), as data only: no
    pickle, at most ``cap`` bytes (also uncompressed) and ``max_arrays`` arrays. Raises
    ValueError with the reason, naming ``what``."""
    if len(raw) > cap:
        raise ValueError(f"{what} is {len(raw)} bytes, over the cap of {cap}")
    try:
        with zipfile.ZipFile(io.BytesIO(raw)) as zf:
            infos = zf.infolist()
        too_big = len(infos) > max_arrays or sum(i.file_size for i in infos) > cap
        if not too_big:
            with np.load(io.BytesIO(raw), allow_pickle=False) as npz:
                return {k: npz[k] for k in npz.files}
    except Exception as exc:  # noqa: BLE001  (anything malformed, pickled objects included)
        raise ValueError(f"{what} is not a valid .npz ({type(exc).__name__})") from None
    raise ValueError(f"{what} holds too many or too large arrays")


def _send(fd, obj):
    payload = json.dumps(obj).encode()
    payload = struct.pack("<I", len(payload)) + payload
    while payload:
        payload = payload[os.write(fd, payload):]


def _recv(fd, deadline=None, cap=64 * 2**20):
    """One length-prefixed JSON message from ``fd``; None at EOF or past ``deadline``."""
    def read(n):
        buf = b""
        while len(buf) < n:
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([fd], [], [], left)[0]:
                    return None
            chunk = os.read(fd, n - len(buf))
            if not chunk:
                return None
            buf += chunk
        return buf

    head = read(4)
    if head is None:
        return None
    (size,) = struct.unpack("<I", head)
    if size > cap:
        return None
    body = read(size)
    try:
        return None if body is None else json.loads(body)
    except ValueError:  # (a child that wrote its own bytes into the pipe: no answer)
        return None


def decode_answer(lesson, msg: dict, steps) -> dict:
    """{step: data or why none, "own:"+step: data (when there was a second run)}."""
    out = {}
    for key in [*steps, *("own:" + s for s in steps)]:
        got = msg.get(key)
        if isinstance(got, dict) and isinstance(got.get("data"), str):
            try:
                out[key] = unpack(base64.b64decode(got["data"]))
            except (ValueError, TypeError) as exc:
                out[key] = str(exc)
            seed = got.get("seed")
            if isinstance(out[key], dict) and isinstance(seed, int) and \
                    "variant.in.x" in out[key]:
                # The second run's inputs as the server chose them, not as the child says.
                out[key]["variant.in.x"] = lesson.variant_x(seed)
                out[key]["variant.seed"] = np.array(str(seed))
        elif key in steps:
            err = got.get("error") if isinstance(got, dict) else None
            out[key] = f"the replay of this cell failed: {err or 'no answer'}"
    return out


def replay_in_process(lesson, sources: dict, setup: dict, only=None) -> dict:
    """The fork server's answer, computed in this process (the live check in a student's
    own kernel, tests, the corpus): for code that can harm no one but its own process.
    ``only``: the step cells to answer for (default: every one in ``sources``); the
    others are still run as the chain that makes their own tensors."""
    steps = {k: v for k, v in sources.items() if k in lesson.by_cell and isinstance(v, str)}
    wanted = [s for s in steps if only is None or s in only]
    out = {step: replay_step(lesson, step, steps[step], setup) for step in wanted}
    order = list(lesson.by_cell)
    if any(order.index(s) for s in wanted):
        own = run_chain(lesson, steps, setup)
        for step in wanted:
            before = own.get(order[order.index(step) - 1]) if order.index(step) else None
            if before and not same_as_reference(lesson, before, setup, step):
                out["own:" + step] = replay_step(lesson, step, steps[step], setup, before)
    return out


# -------------------------------------------------------------- fork server
def _pack_upstream(chain: dict) -> dict:
    out = {}
    for step, names in chain.items():
        for n, (kind, arr, grad) in names.items():
            out[f"{step}.{n}.values"] = arr
            out[f"{step}.{n}.kind"] = np.array(kind)
            out[f"{step}.{n}.grad"] = np.array(grad)
    return out


def _unpack_upstream(lesson, data: dict) -> dict:
    out = {}
    for key, arr in data.items():
        step, n, field = key.rsplit(".", 2) if key.count(".") >= 2 else ("", "", "")
        if field == "values" and step in lesson.by_cell and n in lesson.official:
            kind = str(data.get(f"{step}.{n}.kind", "tensor"))
            if kind in ("tensor", "ndarray") and arr.dtype.kind in "biuf":
                out.setdefault(step, {})[n] = (kind, arr, bool(data.get(f"{step}.{n}.grad")))
    return out


_KILLS = (62, 200, 234, 129, 297)  # kill, tkill, tgkill, rt_sigqueueinfo, rt_tgsigqueueinfo
_PIDFD_SEND_SIGNAL = 424
#: Refused to a replay child: another process's memory (ptrace, process_vm_readv/writev:
#: the server's, or a sibling's) and new processes (fork, vfork; clone without
#: CLONE_THREAD): a child is one process, so its limits (address space, CPU) are the
#: submission's, and nothing it starts outlives it.
_CHILD_DENIED = {"ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311,
                 "fork": 57, "vfork": 58, "pidfd_send_signal": _PIDFD_SEND_SIGNAL,
                 "pidfd_open": 434, "pidfd_getfd": 438, "kcmp": 312,
                 "process_madvise": 440, "process_mrelease": 448,
                 # another process's priority (PRIO_USER: every process of the uid)
                 "setpriority": 141, "ioprio_set": 251,
                 # System V IPC and POSIX message queues: the sandbox's IPC namespace
                 # outlives a submission, and segments count against no cap
                 "shmget": 29, "shmat": 30, "shmctl": 31, "semget": 64, "semop": 65,
                 "semctl": 66, "msgget": 68, "msgsnd": 69, "msgrcv": 70, "msgctl": 71,
                 "semtimedop": 220, "mq_open": 240, "mq_unlink": 241,
                 "mq_timedsend": 242, "mq_timedreceive": 243, "mq_notify": 244,
                 "mq_getsetattr": 245}
#: Allowed on the child itself only (first argument 0 or its own pid): another process's
#: limits, scheduling, CPUs or memory placement (the server's would carry over to every
#: later submission: a lower RLIMIT_AS set on it cost later students their points).
_SELF_ONLY = {"prlimit64": 302, "sched_setaffinity": 203, "sched_setscheduler": 144,
              "sched_setparam": 142, "sched_setattr": 314, "setpgid": 109,
              "migrate_pages": 256, "move_pages": 279}
#: fcntl and ioctl commands that make the kernel signal another process (SIGIO, or a
#: chosen signal, to the owner of an fd the child shares with the server: its stderr).
_FCNTL, _IOCTL = 72, 16
_SIGNAL_OWNER = {_FCNTL: (8, 10, 15),  # F_SETOWN, F_SETSIG, F_SETOWN_EX
                 _IOCTL: (0x8901, 0x8902)}  # FIOSETOWN, SIOCSPGRP
_CLONE, _CLONE3, _CLONE_THREAD = 56, 435, 0x00010000
_PR_SET_DUMPABLE, _PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP = 4, 38, 22


def _bpf(prog) -> bytes:
    """Classic BPF from [(code, jt, jf, k)] where jt/jf may be labels (str): an entry
    ("label", name) marks the next instruction."""
    at, out = {}, []
    for ins in prog:
        if ins[0] == "label":
            at[ins[1]] = len(out)
        else:
            out.append(ins)
    raw = []
    for i, (code, jt, jf, k) in enumerate(out):
        jt = at[jt] - i - 1 if isinstance(jt, str) else jt
        jf = at[jf] - i - 1 if isinstance(jf, str) else jf
        raw.append(struct.pack("<HBBI", code, jt, jf, k))
    return b"".join(raw)


def child_filter_program(pid: int) -> bytes:
    """The seccomp program (x86_64) of a replay child whose pid is ``pid``: signals,
    limits and scheduling for itself only, no other process's memory, no new process,
    no fd that signals its owner (see _CHILD_DENIED, _SELF_ONLY, _SIGNAL_OWNER)."""
    ld, jeq, jset, ret = 0x20, 0x15, 0x45, 0x06
    allow, deny, nosys = 0x7FFF0000, 0x00050000 | 1, 0x00050000 | 38  # ERRNO EPERM/ENOSYS
    prog = [(ld, 0, 0, 4), (jeq, 1, 0, 0xC000003E), (ret, 0, 0, allow), (ld, 0, 0, 0)]
    for nr in sorted(_CHILD_DENIED.values()):
        prog += [(jeq, 0, 1, nr), (ret, 0, 0, deny)]
    prog += [(jeq, 0, 1, _CLONE3), (ret, 0, 0, nosys)]  # (glibc then uses clone)
    prog += [(jeq, "clone", 0, _CLONE)]
    prog += [(jeq, "signal", 0, nr) for nr in _KILLS]
    prog += [(jeq, "self", 0, nr) for nr in sorted(_SELF_ONLY.values())]
    prog += [(jeq, f"owner{nr}", 0, nr) for nr in sorted(_SIGNAL_OWNER)]
    prog += [(ret, 0, 0, allow)]
    for nr, cmds in sorted(_SIGNAL_OWNER.items()):  # (their second argument, low 32 bits)
        prog += [("label", f"owner{nr}"), (ld, 0, 0, 24)]
        prog += [(jeq, "deny", 0, cmd) for cmd in cmds]
        prog += [(ret, 0, 0, allow)]
    prog += [("label", "deny"), (ret, 0, 0, deny),
             ("label", "clone"), (ld, 0, 0, 16), (jset, "allow", 0, _CLONE_THREAD),
             (ret, 0, 0, deny),
             ("label", "signal"), (ld, 0, 0, 16), (jeq, "allow", 0, pid), (ret, 0, 0, deny),
             ("label", "self"), (ld, 0, 0, 16), (jeq, "allow", 0, 0), (jeq, "allow", 0, pid),
             (ret, 0, 0, deny),
             ("label", "allow"), (ret, 0, 0, allow)]
    return _bpf(prog)


def _libc():
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def not_dumpable() -> bool:
    """Make this process non-dumpable (inherited across fork): a process of the same uid
    without CAP_SYS_PTRACE can then neither open its /proc/<pid>/mem nor ptrace it. The
    fork server calls it before its first child, so no child reaches its memory."""
    return _libc().prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) == 0


def confine_child() -> bool:
    """Load :func:`child_filter_program` in this (forked child) process. False if not
    loaded (not x86_64, or the kernel refused)."""
    import ctypes
    import platform

    if platform.machine() not in ("x86_64", "AMD64"):
        return False
    raw = child_filter_program(os.getpid())
    buf = ctypes.create_string_buffer(raw)

    class Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    libc = _libc()
    fprog = Prog(len(raw) // 8, ctypes.addressof(buf))
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return False
    return libc.prctl(_PR_SET_SECCOMP, 2, ctypes.byref(fprog), 0, 0) == 0  # FILTER


def _run_child(lesson, job, setup, write_fd, seconds):
    """In a forked child: limits, then the job (("step", step, source, upstream) or
    ("chain", sources)); its data goes to ``write_fd``."""
    import resource

    code = 0
    try:
        devnull = os.open(os.devnull, os.O_RDWR)  # (fd 2 was the server's stderr pipe:
        os.dup2(devnull, 2)  # one nobody reads, and a child could fill or re-own it)
        cpu = max(1, int(math.ceil(seconds)))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        confine_child()
        if job[0] == "chain":
            data = _pack_upstream(run_chain(lesson, job[1], setup))
        else:
            data = replay_step(lesson, job[1], job[2], setup, job[3], job[4])
        payload = base64.b64encode(pack(data)).decode()
        _send(write_fd, {"data": payload})
    except BaseException as exc:  # noqa: BLE001
        code = 1
        with contextlib.suppress(Exception):
            _send(write_fd, {"error": f"{type(exc).__name__}: {str(exc)[:200]}"})
    finally:
        os._exit(code)


def _run_forked(lesson, job, setup, seconds, protect=()):
    """One job in a forked child, killed at ``seconds``: {"data": ...} or {"error"}."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        for fd in protect:  # the server's own channel is not the student's to write
            with contextlib.suppress(OSError):
                os.close(fd)
        _run_child(lesson, job, setup, write, seconds)
    os.close(write)
    try:
        msg = _recv(read, time.monotonic() + seconds, cap=2 * DATA_BYTES)
    finally:
        os.close(read)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    if not isinstance(msg, dict):
        return {"error": f"it did not finish within {seconds:g} s (or its process died)"}
    return msg


def _reap_strays():
    """Kill every process of this sandbox but the server and bwrap (pid 1)."""
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) not in (1, me):
            with contextlib.suppress(OSError):
                os.kill(int(entry), signal.SIGKILL)


_SCRATCH = ("/tmp", "/dev/shm")  # the sandbox's writable places (and its working dir)


def _snapshot(roots) -> dict:
    """What the set-up left in the scratch places (matplotlib's cache ...): {path: (mode,
    bytes, or None for a folder)}, and for each root {root: (mode, None, times)}."""
    out = {}
    for root in roots:
        try:
            st = os.stat(root)
        except OSError:
            continue
        out[root] = (st.st_mode & 0o7777, None, (st.st_atime_ns, st.st_mtime_ns))
        dev = st.st_dev
        for where, dirs, files in os.walk(root):
            # What is on another file system stays out, as _remove_all leaves it: the
            # read-only paths bound in (a venv under /tmp, bound at its own path: reading it
            # held 1.5 GiB in every server whose Python lives under /tmp).
            dirs[:] = [d for d in dirs if _same_device(os.path.join(where, d), dev)]
            for name in dirs + files:
                p = os.path.join(where, name)
                with contextlib.suppress(OSError):
                    st = os.lstat(p)
                    if os.path.islink(p) or st.st_dev != dev:
                        continue
                    if os.path.isdir(p):
                        out[p] = (st.st_mode & 0o7777, None)
                    elif os.path.isfile(p) and st.st_size <= 16 * 2**20:
                        out[p] = (st.st_mode & 0o7777, Path(p).read_bytes())
    return out


def _same_device(path: str, dev: int) -> bool:
    try:
        return os.lstat(path).st_dev == dev
    except OSError:
        return False


def _remove_all(root: str):
    """Remove everything under ``root``, whatever its modes, depth or path lengths, with
    calls relative to folder fds and no recursion: each sub-folder met is first moved up
    to ``root`` (so no path ever grows), then emptied and removed. What is on another
    file system (the read-only shipped files bound in) stays."""
    try:
        top = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return
    try:
        dev = os.fstat(top).st_dev
        with contextlib.suppress(OSError):
            os.fchmod(top, os.fstat(top).st_mode | 0o700)
        todo, n = [], 0
        for entry in os.scandir(top):
            todo.append(entry.name)
        while todo:
            name = todo.pop()
            try:
                st = os.stat(name, dir_fd=top, follow_symlinks=False)
            except OSError:
                continue
            if st.st_dev != dev:
                continue
            if not (st.st_mode & 0o170000 == 0o040000):  # (not a folder: a file, a link ...)
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=top)
                continue
            with contextlib.suppress(OSError):
                os.chmod(name, 0o700, dir_fd=top, follow_symlinks=False)
            try:
                fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=top)
            except OSError:
                continue
            try:
                for entry in list(os.scandir(fd)):
                    if entry.is_dir(follow_symlinks=False):
                        n += 1
                        up = f".attention-wipe-{n}"
                        with contextlib.suppress(OSError):
                            os.chmod(entry.name, 0o700, dir_fd=fd, follow_symlinks=False)
                            os.rename(entry.name, up, src_dir_fd=fd, dst_dir_fd=top)
                            todo.append(up)
                    else:
                        with contextlib.suppress(OSError):
                            os.unlink(entry.name, dir_fd=fd)
            finally:
                os.close(fd)
            with contextlib.suppress(OSError):
                os.rmdir(name, dir_fd=top)
    except OSError:
        pass
    finally:
        os.close(top)


def _reset_scratch(roots, snapshot: dict):
    """The scratch places exactly as the set-up left them, made afresh: everything a
    submission's runs wrote, changed, renamed or linked there is removed, then the
    set-up's files are written again as new files (no timestamp, extended attribute or
    link survives to carry anything to the next submission), and each root gets its
    mode, times and no extended attributes back."""
    for root in roots:
        _remove_all(root)
    for p, entry in sorted(snapshot.items()):
        if p in roots:
            continue
        mode, content = entry[:2]
        with contextlib.suppress(OSError):
            if content is None:
                os.mkdir(p, 0o700)
            elif not os.path.lexists(p):  # (a read-only shipped file is still there)
                fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
                with os.fdopen(fd, "wb") as f:
                    f.write(content)
            os.chmod(p, mode, follow_symlinks=False)
    for root in roots:
        mode, _, times = snapshot.get(root, (None, None, None))
        with contextlib.suppress(OSError):
            for attr in os.listxattr(root):
                with contextlib.suppress(OSError):
                    os.removexattr(root, attr)
        with contextlib.suppress(OSError, TypeError):
            os.chmod(root, mode)
            os.utime(root, ns=times)


def setup_digest(setup: dict) -> str:
    """A digest of every tensor and array the set-up holds (x, the layers' parameters,
    the example's): what each replay receives. The server compares it after every
    submission; a change means the set-up was tampered with."""
    import hashlib

    import torch

    h = hashlib.sha256()
    seen = set()

    def add(name, v):
        if id(v) in seen:
            return
        seen.add(id(v))
        if torch.is_tensor(v):
            h.update(name.encode() + v.detach().cpu().contiguous().numpy().tobytes())
        elif isinstance(v, np.ndarray):
            h.update(name.encode() + np.ascontiguousarray(v).tobytes())
        elif isinstance(v, torch.nn.Module):
            for n, t in v.state_dict(keep_vars=True).items():
                add(f"{name}.{n}", t)

    for name, v in sorted(setup.items()):
        add(name, v)
        for attr, w in sorted(getattr(v, "__dict__", {}).items()) if not isinstance(
                v, (types.ModuleType, type, torch.nn.Module)) else ():
            add(f"{name}.{attr}", w)
    return h.hexdigest()


def server_state() -> tuple:
    """What a child could change in the server that every later child inherits, besides
    its memory: its resource limits, CPUs, priority and scheduling policy."""
    import resource

    limits = tuple((n, resource.getrlimit(getattr(resource, n))) for n in sorted(
        dir(resource)) if n.startswith("RLIMIT_"))
    with contextlib.suppress(OSError):
        return limits + (tuple(sorted(os.sched_getaffinity(0))),
                         os.getpriority(os.PRIO_PROCESS, 0), os.sched_getscheduler(0))
    return limits


def serve(setup_path: str, sandboxed: bool):
    """The fork server's loop for the lesson and set-up in ``setup_path`` (JSON:
    {"lesson": name, "setup": [source, ...]}): read {"steps": {step: source}} requests on
    stdin, answer
    {step: {"data": base64 npz} | {"error": text}} on stdout. If the set-up it hands to
    every replay changed during a submission's runs, it answers {"tampered": text} and
    stops: no later submission is replayed on tampered inputs."""
    import torch

    rfd, wfd = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):
        os.dup2(devnull, fd)
    torch.set_num_threads(1)
    if os.environ.get("ATTENTION_TEST_DUMPABLE_SERVER") != "1":  # (tests of the digest)
        not_dumpable()
    from src import lessons

    spec = json.loads(Path(setup_path).read_text())
    lesson = lessons.lesson(spec["lesson"])
    setup = setup_namespace(spec["setup"])
    lesson.torch_reference(setup)  # warm the ops once, before any fork
    from src.checks import observe

    observe.course_codes()  # (once, before any fork: what a relabelled copy is compared with)
    digest, state = setup_digest(setup), server_state()
    scratch = [*_SCRATCH, os.getcwd()] if sandboxed else []
    kept = _snapshot(scratch)
    _send(wfd, {"ready": True})
    while True:
        req = _recv(rfd)
        if req is None:
            return
        answer = _answer(lesson, req, setup, sandboxed, (rfd, wfd))
        answer["id"] = req.get("id")  # which request this answers
        _reset_scratch(scratch, kept)  # nothing one submission's runs left reaches the next
        changed = [what for what, same in (
            ("the set-up tensors it hands to every replay", setup_digest(setup) == digest),
            ("its limits, CPUs or scheduling", server_state() == state)) if not same]
        if changed:
            _send(wfd, {"id": req.get("id"), "tampered": f"{' and '.join(changed)} changed "
                        "during this submission's runs"})
            return
        _send(wfd, answer)


def _answer(lesson, req, setup, sandboxed, protect):
    """{step: {"data"|"error"}, "own:"+step: ...} for one submission's request."""
    deadline = time.monotonic() + float(req.get("seconds", STUDENT_SECONDS))
    run_seconds = float(req.get("run_seconds", RUN_SECONDS))  # (the grader's, configured)
    steps = {k: v for k, v in req.get("steps", {}).items()
             if k in lesson.by_cell and isinstance(v, str)}

    def run(job):
        left = deadline - time.monotonic()
        if left <= 0:
            return {"error": "not run: this submission used up its replay time"}
        try:
            answer = _run_forked(lesson, job, setup, min(run_seconds, left), protect)
            if job[0] == "step" and job[3] is None:
                answer["seed"] = job[4]
            return answer
        finally:
            if sandboxed:
                _reap_strays()

    out = {step: run(("step", step, source, None, draw_seed()))
           for step, source in steps.items()}
    chain = run(("chain", steps))
    if "data" in chain:
        try:
            own = _unpack_upstream(lesson, unpack(base64.b64decode(chain["data"])))
        except (ValueError, TypeError):
            own = {}
        order = list(lesson.by_cell)
        for step in steps:  # a second run on the student's own inputs, where they differ
            before = own.get(order[order.index(step) - 1]) if order.index(step) else None
            if before and not same_as_reference(lesson, before, setup, step):
                out["own:" + step] = run(("step", step, steps[step], before, None))
    return out


class ReplayTamperedError(RuntimeError):
    """A submission's runs changed what the replay server hands to every replay."""


class ReplayServer:
    """A fork server in its own sandbox (or, unsandboxed, a plain child process).

    ``lesson``: the lesson's spec. ``setup_sources``: the release's set-up cells.
    ``shipped``: verify.py, src/, data/ as released. ``limits``: the sandbox's
    (src/limits.py; memory, processes, file and tmpfs sizes). :meth:`replay` answers one
    submission.
    """

    def __init__(self, lesson, setup_sources, shipped: dict, sandboxed: bool = True,
                 start_seconds: float = 120.0, wait: bool = True,
                 run_seconds: float = RUN_SECONDS, student_seconds: float = STUDENT_SECONDS,
                 limits=None):
        from src import sandbox as sb

        self.lesson, self.sandboxed, self.owner = lesson, sandboxed, os.getpid()
        self.run_seconds, self.student_seconds = float(run_seconds), float(student_seconds)
        self.box = sb.Sandbox(shipped, limits or sb.LIMITS, enabled=sandboxed, ipc=False)
        setup_file = self.box.root / "setup.json"
        setup_file.write_text(json.dumps({"lesson": lesson.name,
                                          "setup": list(setup_sources)}))
        if self.box.uid >= 0:
            os.chown(setup_file, self.box.uid, self.box.uid)
        inside = f"{sb.WORKDIR}/setup.json" if sandboxed else str(setup_file)
        cmd = [sys.executable, "-m", "src.replay", "serve", inside,
               "--sandboxed" if sandboxed else "--plain"]
        fd = self.box.seccomp_fd()
        argv = self.box.command(cmd, fd, host_dirs=False)
        if sandboxed:  # the set-up file, read-only beside the shipped files
            at = argv.index("--chdir")
            argv[at:at] = ["--ro-bind", str(setup_file), f"{sb.WORKDIR}/setup.json"]
        env = None if sandboxed else {**os.environ, "PYTHONPATH": str(self.box.home)}
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            cwd=str(self.box.root if sandboxed else self.box.home), env=env,
            pass_fds=(fd,) if fd is not None else ())
        self.start_seconds = start_seconds
        if wait:
            self.wait_ready()

    def wait_ready(self):
        """Wait for the server's first message (it has imported torch and run the set-up).
        Call it from the thread that started it: bwrap dies with that thread
        (--die-with-parent is the thread's PR_SET_PDEATHSIG)."""
        msg = _recv(self.proc.stdout.fileno(), time.monotonic() + self.start_seconds)
        if not (isinstance(msg, dict) and msg.get("ready")):
            err = self._stderr_tail()
            self.close()
            raise RuntimeError(f"the replay server did not start: {err or 'no message'}")

    def _stderr_tail(self):
        with contextlib.suppress(Exception):
            self.proc.kill()
            return self.proc.stderr.read()[-600:].decode(errors="replace").strip()
        return ""

    def alive(self) -> bool:
        """Whether the server still runs. A forked grading worker holds its parent's
        server, which is not its own child: there Popen.poll() reports it dead (waitpid
        fails with ECHILD), and every worker would start a server of its own (5 s each).
        So the worker asks the pid instead; a server that died but was not reaped yet
        fails the request, and replay_notebook then starts a fresh one."""
        if self.owner == os.getpid():
            return self.proc.poll() is None
        try:
            os.kill(self.proc.pid, 0)
        except OSError:
            return False
        return True

    def replay(self, steps: dict, seconds: float | None = None) -> dict:
        """{step: data dict or an error text} for {step cell grade_id: source}, within
        ``seconds`` for all its runs (default: the server's ``student_seconds``)."""
        seconds = self.student_seconds if seconds is None else float(seconds)
        ident = os.urandom(8).hex()
        try:
            _send(self.proc.stdin.fileno(), {"steps": steps, "seconds": seconds, "id": ident,
                                             "run_seconds": self.run_seconds})
            msg = _recv(self.proc.stdout.fileno(),
                        time.monotonic() + seconds + self.run_seconds * len(steps) + 10)
        except OSError:
            msg = None
        if not isinstance(msg, dict) or msg.get("id") != ident:
            # (an answer to another request: a worker was killed while it waited)
            err = self._stderr_tail()
            raise RuntimeError("the replay server stopped answering" + (
                f": {err[-300:]}" if err else ""))
        if "tampered" in msg:
            self.proc.kill()
            raise ReplayTamperedError(str(msg["tampered"])[:200])
        return decode_answer(self.lesson, msg, steps)

    def close(self):
        """Stop the server at once: it keeps nothing worth a clean exit, and torch's own
        shutdown cost a cold ``verify.py`` run 0.5 s. (Sandboxed, bwrap's --die-with-parent
        takes the server and any child down with it.)"""
        with contextlib.suppress(Exception):
            self.proc.kill()
            self.proc.wait(timeout=5)
        with contextlib.suppress(Exception):
            self.proc.stdin.close()
        self.box.cleanup()


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "serve":
        if str(Path.cwd()) not in sys.path:
            sys.path.insert(0, str(Path.cwd()))
        serve(sys.argv[2], sandboxed="--sandboxed" in sys.argv[3:])
    else:
        print("usage: python -m src.replay serve SETUP_JSON [--sandboxed|--plain]",
              file=sys.stderr)
        sys.exit(2)
