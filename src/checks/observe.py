"""Where student code runs: turns live objects into plain data, never raising.

:func:`observe` reads a step's names from a namespace and records NumPy arrays
of numbers, booleans and strings only: the tensors, facts about them (dtype,
autograd graph, which of the set-up's parameters made them) and, for a function
check, the student's function on the lesson's probes. This code runs where the
student's code runs (the replay's child process); nothing it returns is trusted
beyond being data. What to read comes from the lesson's spec.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Mapping

import numpy as np

from src import lessons
from src.checks.util import INFO_FIELDS, LIMITS, _error_text, _short

_MISSING = object()
#: The course's own code (the shipped src/ and verify.py beside it): a softmax that runs
#: any of it (an import of the lesson's reference softmax, a wrapper around it, one of
#: the set-up's helpers' globals) holds no code of the student's.
COURSE_ROOT = Path(__file__).resolve().parents[2]
_COURSE_CODE = (str(COURSE_ROOT / "src") + "/", str(COURSE_ROOT / "verify.py"))
_SETPROFILE, _GETPROFILE = sys.setprofile, sys.getprofile  # (before any student code)


def in_course_code(filename: str) -> bool:
    """Whether a code object's file is one of the course's own (src/, verify.py)."""
    return isinstance(filename, str) and filename.startswith(_COURSE_CODE)


_CODES: list = []


def course_codes() -> frozenset:
    """Every code object of the course's modules loaded in this process (functions,
    methods, nested ones). Code objects compare equal whatever their file name, so a
    copy relabelled with ``code.replace(co_filename=...)`` is still found."""
    if not _CODES:
        import types

        found, stack = set(), []
        for mod in list(sys.modules.values()):
            if in_course_code(getattr(mod, "__file__", None) or ""):
                for v in list(vars(mod).values()):
                    members = vars(v).values() if isinstance(v, type) else (v,)
                    stack += [getattr(getattr(m, "__func__", m), "__code__", None)
                              for m in members]
        while stack:
            code = stack.pop()
            if isinstance(code, types.CodeType) and code not in found and in_course_code(
                    code.co_filename):
                found.add(code)
                stack += [c for c in code.co_consts if isinstance(c, types.CodeType)]
        _CODES.append(frozenset(found))
    return _CODES[0]


def course_function(code) -> str:
    """'src/replay.py: reference_softmax' for a code object of the course's."""
    rel = Path(code.co_filename).resolve()
    try:
        rel = rel.relative_to(COURSE_ROOT)
    except ValueError:
        pass
    return _short(f"{rel}: {code.co_name}", LIMITS["line"])


class CourseCalls:
    """A profile hook, active in a ``with`` block, that records in ``found`` the functions
    of the course's own code that start running (an import's module body aside).

    ``helpers`` None (a softmax's probe): every one. Else (a whole cell): only those the
    cell's own code calls, but for ``helpers`` (code objects of the set-up's functions,
    which a cell may call: what they call in turn is theirs).
    """

    def __init__(self, found: set, helpers=None):
        self.found, self.helpers, self.old = found, helpers, None

    def _hook(self, frame, event, arg):
        code = frame.f_code
        if event == "c_call" and arg in _UNRECORDED and code not in _OWN and (
                self.helpers is None or not in_course_code(code.co_filename)):
            self.found.add(f"{getattr(arg, '__module__', '')}.{arg.__name__} (what runs "
                           "after it is not recorded)")
            return
        if event != "call" or code.co_name == "<module>" or code in _OWN or not (
                in_course_code(code.co_filename) or code in course_codes()):
            return
        if self.helpers is not None:
            back = frame.f_back
            if code in self.helpers or back is not None and in_course_code(
                    back.f_code.co_filename):
                return
        self.found.add(course_function(code))

    def __enter__(self):
        self.old = _GETPROFILE()
        _SETPROFILE(self._hook)
        return self

    def __exit__(self, *exc):
        if _GETPROFILE() != self._hook:  # (turned off from inside: what ran is unknown)
            self.found.add("sys.setprofile (the record of what it calls was turned off)")
        _SETPROFILE(self.old)
        return False


_OWN = frozenset({CourseCalls.__exit__.__code__})  # (runs while the hook is on)


def _unrecorded():
    """Built-ins after which a hook in this thread no longer sees what runs: turning the
    hook off, or starting a thread (a new thread runs without it)."""
    import _thread
    import threading

    found = [sys.setprofile, sys.settrace, threading.setprofile, threading.settrace,
             _thread.start_new_thread]
    found += [getattr(_thread, n) for n in ("start_joinable_thread",) if hasattr(_thread, n)]
    return frozenset(found)


_UNRECORDED = _unrecorded()


class _Budget:
    """Bytes of array data still allowed in one observation."""

    def __init__(self, total=None):
        self.left = total or LIMITS["total_bytes"]

    def take(self, nbytes):
        if nbytes > LIMITS["array_bytes"] or nbytes > self.left:
            return False
        self.left -= nbytes
        return True


def _text(value, limit=None):
    return np.array(_short(value, limit))


def _str_list(values):
    values = [_short(v, 80) for v in list(values)[: LIMITS["names"]]]
    return np.array(values, dtype=str) if values else np.zeros(0, dtype="<U1")


def _raised(error, line):
    """[error, line] of a raised exception: the error's text long enough to hold what it
    names (torch.return_types.max ...), the line short."""
    return np.array([_short(error, LIMITS["error"]), _short(line, 80)], dtype=str)


def _torch_if_loaded():
    return sys.modules.get("torch")


def _label_leaf(leaf, parameters):
    try:
        arr = leaf.detach().cpu().float().numpy()
    except Exception:  # noqa: BLE001
        return "other"
    for label, want in parameters:
        if arr.shape == want.shape and np.array_equal(arr, want):
            return label
    return f"other {list(arr.shape)}"


def _made_by(t, parameters):
    """Labels of the parameters (leaves that require grad) in ``t``'s autograd graph:
    the set-up's (``parameters``: [(label, float32 array)]) by name, others as "other"."""
    labels = set()
    if t.grad_fn is None:
        if t.requires_grad:
            labels.add(_label_leaf(t, parameters))
        return sorted(labels)
    seen, stack = set(), [t.grad_fn]
    while stack and len(seen) < LIMITS["graph_nodes"]:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        var = getattr(node, "variable", None)
        if var is not None:
            labels.add(_label_leaf(var, parameters))
        for nxt, _ in getattr(node, "next_functions", ()) or ():
            stack.append(nxt)
    return sorted(labels)


def _observe_object(prefix, obj, budget, out, parameters=()):
    """Write facts about ``obj`` (and its values, when allowed) under ``prefix.``."""
    info = dict.fromkeys(INFO_FIELDS, "")
    try:
        info["type"] = type(obj).__name__
        torch = _torch_if_loaded()
        if obj is _MISSING:
            info["kind"] = "missing"
        elif obj is None:
            info["kind"] = "none"
        elif torch is not None and isinstance(obj, torch.Tensor):
            info["kind"] = "tensor"
            _observe_tensor(prefix, obj, torch, budget, out, info, parameters)
        elif isinstance(obj, np.ndarray):
            info.update(kind="ndarray", dtype=str(obj.dtype), layout="strided", device="cpu")
            if obj.dtype.kind in "biufc" and budget.take(obj.nbytes):
                out[f"{prefix}.values"] = np.array(obj, copy=True)
            else:
                out[f"{prefix}.shape"] = np.array(obj.shape, dtype=np.int64)
                info["note"] = (f"its dtype is {obj.dtype}" if obj.dtype.kind not in "biufc"
                                else "too large to record")
        elif callable(obj):
            info["kind"] = "function"
        else:
            info["kind"] = "other"
    except BaseException as exc:  # noqa: BLE001  (nothing a student does may break this)
        if isinstance(exc, KeyboardInterrupt):
            raise
        info.update(kind="other", note=f"could not be inspected ({type(exc).__name__})")
    out[f"{prefix}.info"] = _str_list(info[k] for k in INFO_FIELDS)


def _observe_tensor(prefix, obj, torch, budget, out, info, parameters):
    with torch._C.DisableTorchFunctionSubclass():
        t = obj.detach() if obj.requires_grad or obj.grad_fn is not None else obj
        info.update(dtype=str(obj.dtype).removeprefix("torch."),
                    layout=str(obj.layout).removeprefix("torch."), device=obj.device.type,
                    requires_grad="True" if obj.requires_grad else "",
                    grad_fn=type(obj.grad_fn).__name__ if obj.grad_fn else "")
        out[f"{prefix}.shape"] = np.array(tuple(obj.shape), dtype=np.int64)
        if obj.requires_grad:  # (absent: no parameters)
            out[f"{prefix}.made_by"] = _str_list(_made_by(obj, parameters))
        if obj.device.type == "meta":
            info["note"] = "a meta tensor holds no values"
            return
        if not budget.take(obj.numel() * obj.element_size()):
            info["note"] = "too large to record"
            return
        if obj.layout != torch.strided:
            t = t.to_dense()
        t = t.cpu().resolve_conj().resolve_neg()
        if t.dtype in (torch.bfloat16,) or (t.is_floating_point() and t.element_size() == 1):
            t = t.float()
        try:
            arr = t.numpy()
        except Exception as exc:  # noqa: BLE001  (quantized and other exotic dtypes)
            info["note"] = f"could not be read as numbers ({_short(exc, 80)})"
            return
        out[f"{prefix}.values"] = np.array(arr, copy=True)
        del out[f"{prefix}.shape"]  # the values carry it


def _func_label(func):
    name = getattr(func, "__name__", "") or ""
    qual = getattr(func, "__qualname__", "") or ""
    module = getattr(func, "__module__", "") or ""
    if module == "torch.nn.functional":
        return f"F.{name}"
    if qual.startswith(("TensorBase.", "Tensor.")):
        return f"Tensor.{name}"
    if name.startswith("special_"):
        return f"torch.special.{name[len('special_'):]}"
    return f"torch.{name}"


def _where_raised(exc, code=None):
    """The student's line that raised ``exc`` (the innermost frame in ``code``'s
    file when given, else the innermost frame outside torch and verify)."""
    import traceback

    try:
        if isinstance(exc, SyntaxError):
            return _short(exc.text or "", LIMITS["line"])
        frames = traceback.extract_tb(exc.__traceback__)
        want = getattr(code, "co_filename", None)
        mine = [f for f in frames if (f.filename == want if want else
                                      "site-packages" not in f.filename
                                      and not f.filename.endswith("verify.py"))]
        return _short((mine[-1].line or "") if mine else "", LIMITS["line"])
    except Exception:  # noqa: BLE001
        return ""


def _observe_function(lesson, key, fn, budget, out):
    """Call the student's function ``key`` on every probe of the lesson; record outputs,
    errors and facts under ``key.``."""
    import torch

    code = getattr(fn, "__code__", None)
    calls, nodes, course = set(), set(), set()
    if in_course_code(getattr(code, "co_filename", None)):  # (an alias of the course's)
        course.add(course_function(code))
    # The probes are tiny: intra-op threads only add their wake-ups, which on a loaded
    # machine made each torch op 100x slower (measured). Restored below.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _probe_all(lesson, key, fn, torch, code, calls, nodes, budget, out, course)
    finally:
        torch.set_num_threads(threads)
    # the built-ins (and the nodes the judge does not allow) first, so that the cap on
    # names never drops them
    builtin, allowed = lesson.facts["builtin_softmax"], lesson.facts["softmax_allowed"]
    out[f"{key}.calls"] = _str_list(sorted(calls, key=lambda c: (
        c.split(".")[-1] not in builtin, c)))
    out[f"{key}.nodes"] = _str_list(sorted(nodes, key=lambda n: (n in allowed, n)))
    if course:
        out[f"{key}.course_code"] = _str_list(sorted(course))


def _probe_all(lesson, name, fn, torch, code, calls, nodes, budget, out, course):
    """fn(x, dim=...) on each probe: its output or error, whether x changed, its calls
    and the autograd nodes between its output and x."""
    import contextlib
    import io
    import warnings

    labels = lesson.facts["node_labels"]
    for i, probe in enumerate(lesson.probes()):
        key = f"{name}.p{i}."
        # Like the lesson's scores: float32, requiring grad, made by a division. Nothing is
        # recorded while it runs: what it called is read off its output's graph afterwards.
        x = torch.from_numpy(probe.x.copy()).requires_grad_() / 1.0
        before = x.detach().clone()
        result, error, line = _MISSING, "", ""
        sink = io.StringIO()
        try:
            with warnings.catch_warnings(), contextlib.redirect_stdout(sink), \
                    contextlib.redirect_stderr(sink):
                warnings.simplefilter("ignore")
                with CourseCalls(course):
                    result = fn(x, dim=probe.dim)
        except BaseException as exc:  # noqa: BLE001
            if isinstance(exc, KeyboardInterrupt):
                raise
            error, line = _error_text(exc), _where_raised(exc, code)
        try:
            mutated = not (x.shape == before.shape and x.dtype == before.dtype
                           and bool(torch.equal(x.detach(), before)))
        except Exception:  # noqa: BLE001
            mutated = True
        if error:  # (absent: it returned; a missing "mutated" is False)
            out[key + "raised"] = _raised(error, line)
        if mutated:
            out[key + "mutated"] = np.array(True)
        if type(result) is torch.Tensor and not result.requires_grad:  # left autograd
            out[key + "detached"] = np.array(True)
        found, names = _graph_calls(result, torch, labels, x.grad_fn)
        calls.update(found)
        nodes.update(names)
        if not error:
            _observe_object(key + "out", result, budget, out)
    # Called as the task writes its signature, softmax(x, dim=-1): without dim at all.
    x = torch.from_numpy(lesson.probes()[0].x.copy())
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            with CourseCalls(course):
                result = fn(x)
    except BaseException as exc:  # noqa: BLE001
        if isinstance(exc, KeyboardInterrupt):
            raise
        if isinstance(exc, TypeError):  # (a missing argument: no default for dim)
            out[f"{name}.nodefault.raised"] = _raised(_error_text(exc), "")
    else:  # (what it gives without dim: the last axis's softmax, or another's)
        _observe_object(f"{name}.nodefault.out", result, budget, out)


def _graph_calls(result, torch, labels, stop=None, limit=None):
    """(``labels`` of the nodes found, class names of all nodes) in ``result``'s autograd
    graph, read back to ``stop`` (the input's own node, not the function's)."""
    found, names = set(), set()
    try:
        if type(result) is not torch.Tensor or result.grad_fn is None:
            return found, names
        seen, stack = set(), [result.grad_fn]
        # (a hand-written loop makes many nodes: read them all, up to the graph limit)
        while stack and len(seen) < (limit or LIMITS["graph_nodes"]):
            node = stack.pop()
            if node is None or node is stop or id(node) in seen:
                continue
            seen.add(id(node))
            name = type(node).__name__
            names.add(name)
            label = labels.get(name)
            if label:
                found.add(label)
            stack.extend(n for n, _ in (node.next_functions or ()))
    except Exception:  # noqa: BLE001  (a student's object)
        pass
    return found, names


def observe_objects(objects: Mapping) -> dict:
    """``t.<name>.*`` facts of each object of ``objects`` {name: object}, as :func:`observe`
    records them (the replay: the inputs a cell was given, before it ran)."""
    out, budget = {}, _Budget()
    for name, obj in objects.items():
        _observe_object(f"t.{name}", obj, budget, out)
    return out


def _observe_checks(lesson, checks, objects):
    """Everything the judge of ``checks`` (a step's Check objects) needs, as data."""
    out = {"format": np.array(1)}
    budget = _Budget()
    parameters = lesson.facts.get("parameters", tuple)()
    for check in checks:
        for name in check.all:
            if f"t.{name}.info" in out or check.kind == "function" and name == check.name:
                continue
            _observe_object(f"t.{name}", objects.get(name, _MISSING), budget, out, parameters)
        if check.kind == "function":
            fn = objects.get(check.name, _MISSING)
            _observe_object(check.name, fn, budget, out)
            if out[f"{check.name}.info"][0] == "function":
                try:
                    _observe_function(lesson, check.name, fn, budget, out)
                except BaseException as exc:  # noqa: BLE001
                    if isinstance(exc, KeyboardInterrupt):
                        raise
                    out[f"{check.name}.error"] = _text(f"could not be probed "
                                                       f"({_short(exc, 80)})")
    return out


class _Lookup:
    """A safe view of a namespace: .get never raises."""

    def __init__(self, namespace):
        self.namespace = namespace

    def get(self, name, default=None):
        try:
            return self.namespace[name]
        except BaseException as exc:  # noqa: BLE001
            if isinstance(exc, KeyboardInterrupt):
                raise
            return default


def observe(grade_id: str, namespace: Mapping) -> dict:
    """Everything the judge of check cell ``grade_id`` needs from ``namespace``, as data.

    Every value is a NumPy array of a numeric, bool or unicode-string dtype
    (it crosses the replay's pipe as ``.npz`` without pickle). Keys (``N`` a
    tensor name of the step's checks, such as ``query``):

    - ``format`` (1);
    - ``t.N.info``: strings in the order of :data:`INFO_FIELDS` -- kind
      ("missing", "none", "tensor", "ndarray", "function", "other"), type
      name, dtype name, layout, device, requires_grad ("True" or ""),
      grad_fn name, and a note (why the values are missing);
      ``t.N.values`` (its numbers, in its own dtype), else ``t.N.shape``
      (int64); ``t.N.made_by`` (labels such as "q_proj.weight" of the
      set-up's parameters in its autograd graph; only when it requires grad);
    - a function check ``F`` (lesson 1: ``softmax``): ``F.info`` (and the
      tensor keys if it is one), ``F.calls`` (the lesson's built-ins in its
      outputs' autograd graphs, on any probe), ``F.nodes`` (the class names of
      every node in those graphs back to the input, those the lesson does not
      allow first), and per probe ``i``: ``F.p{i}.out.*`` (what it returned,
      as above), ``F.p{i}.raised`` ([error text, line]; only when it raised)
      and ``F.p{i}.mutated`` (only when True).

    Shape legend: tensors keep their own shapes (lesson 1: [1, 6, 64] or
    [1, 6, 6]). Never raises; an array over ``LIMITS["array_bytes"]`` is
    recorded by its facts only, and all of it stays under
    ``LIMITS["total_bytes"]``, in well under 256 arrays. An unknown
    ``grade_id`` gives ``{"format", "error"}``.
    """
    lesson, step = lessons.by_cell(grade_id) if isinstance(grade_id, str) else (None, None)
    if step is None:
        return {"format": np.array(1),
                "error": _text(f"no lesson has a check cell {_short(repr(grade_id), 80)}")}
    try:
        return _observe_checks(lesson, step.checks, _Lookup(namespace))
    except BaseException as exc:  # noqa: BLE001
        if isinstance(exc, KeyboardInterrupt):
            raise
        return {"format": np.array(1), "error": _text(f"observe failed: {_error_text(exc)}")}
