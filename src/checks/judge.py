"""The trusted judge: results from observed data and a lesson's spec only.

Pure: NumPy, no torch, no student object, and it never raises whatever the data
holds. :func:`judge` judges one check cell's data; :func:`judge_replay` judges the
replay of a step cell (``src/replay.py``): the run on the reference inputs, and
the run on the student's own tensors where that one counts. A wrong result is
named by the lesson's catalogue when an entry reproduces it, else by what the code
was seen to do: the engine's generic readings here (a factor, a rounding, a shift,
a permutation, its inputs read off its gradients) and the lesson's own, which its
spec hands over as hooks by stage (``first``, ``fit``, ``rows``, ``mix``, ``last``,
``right``, ``symptom``; a function check's whole verdict: ``judge``). Nothing here
names a cell, a step or a tensor.
"""

from __future__ import annotations

import itertools
import re
from typing import Mapping

import numpy as np

from src import lessons
from src.checks.results import CheckResult, Summary, _mistake_text
from src.checks.shapes import misfit
from src.checks.util import (
    LIMITS,
    TOL,
    _close,
    _constant,
    _error_text,
    _fmt,
    _listing,
    _num,
    _short,
    _swap,
    masks_agree,
    output_gradient,
)
from src.checks.verdict import (
    _Cell,
    _error_entry,
    _failed,
    _Finding,
    _line_shapes,
    _named_error,
    _Reader,
    _result,
    _seen_arrays,
    _strict,
)


class _Context:
    """A check's inputs (float64 arrays by name), with the outputs they call for."""

    def __init__(self, label, inp, check):
        self.label, self.inp, self.check = label, inp, check
        self._cache = {}

    def expected(self, name):
        key = ("expected", name)
        if key not in self._cache:
            with np.errstate(all="ignore"):
                self._cache[key] = np.asarray(self.check.reference(
                    dict(self.inp, name=name), name), dtype=np.float64)
        return self._cache[key]

    def variants(self, m, name):
        """The arrays mistake ``m`` would give from these inputs."""
        key = (m.id, name)
        if key not in self._cache:
            got = []
            with np.errstate(all="ignore"):
                if m.fns:  # (a wrong function, applied to the check's input)
                    x = self.inp[self.check.upstream[0]]
                    make = [lambda f=f: f(x, -1) for f in m.fns]
                elif m.factor is not None:
                    make = [lambda: self.expected(name) * m.factor]
                else:
                    make = [lambda: m.reproduce(dict(self.inp, name=name))]
                for fn in make:
                    try:
                        out = fn()
                    except (ValueError, IndexError, KeyError, TypeError):
                        continue
                    for g in out if isinstance(out, list) else [out]:
                        got.append(np.asarray(g, dtype=np.float64))
            self._cache[key] = got
        return self._cache[key]


_REFERENCE_CONTEXTS: dict = {}


def _reference_context(lesson, check):
    """The reference inputs of ``check``; its reproductions are computed once per process."""
    key = (id(lesson), check.name)
    if key not in _REFERENCE_CONTEXTS:
        _REFERENCE_CONTEXTS[key] = _Context("the reference", dict(lesson.reference()), check)
    return _REFERENCE_CONTEXTS[key]


def _promoted(dtypes):
    """The dtype torch gives an operation on tensors of these dtypes."""
    floats = [d for d in dtypes if d.startswith(("float", "bfloat"))]
    if not floats:
        return "float32"
    if "float64" in floats:
        return "float64"
    return floats[0] if len(set(floats)) == 1 else "float32"


_DEGENERATE = "your own, degenerate tensors"


def _contexts(lesson, check, views):
    """(contexts, notes): the student's own inputs first when usable, then the reference.

    Degenerate own inputs come last, labelled ``_DEGENERATE``: never credited, only named.
    """
    ref = lesson.reference()
    names = check
    reference = _reference_context(lesson, check)
    if not names.upstream:
        return [reference], []
    own, constant = dict(ref), []
    for name in names.upstream:
        arr = views[name].real
        # A function's input may hold -inf (a masked score), and any input where the
        # reference's does (the lesson's mask); nothing else may be infinite.
        unusable = arr is None or np.isnan(arr).any() or np.isposinf(arr).any() or (
            not check.uses_function and np.isneginf(arr).any()
            and not masks_agree(arr, ref[name]))
        if unusable:
            return [reference], [f"Your `{name}` is missing or not finite, so this step was "
                                 "checked against the reference tensors instead."]
        if arr.size > LIMITS["own_elements"]:  # (the lesson's have at most 384)
            return [reference], [f"Your `{name}` has shape {list(arr.shape)}, far larger than "
                                 f"{list(lesson.shapes[name])}, so this step was checked against "
                                 "the reference tensors instead."]
        own[name] = arr
        if _constant(arr):
            constant.append(name)
    for name in names.extras:
        arr = views[name].real
        if arr is not None and arr.shape == ref[name].shape and np.isfinite(arr).all():
            own[name] = arr
    context = _Context("your own tensors", own, check)
    try:
        expected = context.expected(names.outputs[0])
        if not np.isfinite(expected).all() and not masks_agree(
                expected, reference.expected(names.outputs[0])):
            raise ValueError("not finite")
    except ValueError:
        return [reference], ["Your tensors from the cells before cannot be combined (their "
                             "shapes do not fit), so this step was checked against the "
                             "reference tensors."]
    copy = any(own[n].shape == expected.shape and _close(own[n], expected)
               for n in names.upstream)
    if constant or copy or _constant(expected):
        which = constant or list(names.upstream)
        verb = "is" if len(which) == 1 else "are"
        # the student's own context goes last, tagged: only to say so if the output is
        # right for it (it is never credited)
        context.label = _DEGENERATE
        return [reference, context], [
            f"Your {_listing(which)} {verb} degenerate (constant, or such that every formula "
            "gives the same result), so this step was checked against the reference tensors "
            "instead: fix the cell that made it first."]
    if all(_close(own[n], ref[n], lesson.tolerances["strict"]) for n in names.upstream):
        return [reference], []
    differ = [n for n in names.upstream if not _close(own[n], ref[n])]
    if not differ:  # equal but for rounding: judged on them, without a note
        return [context, reference], []
    verb = "differs" if len(differ) == 1 else "differ"
    return [context, reference], [f"Your {_listing(differ)} {verb} from the reference, so this "
                                  "step is checked against your own tensors: an earlier "
                                  "mistake does not cost points twice."]


def _ratio(arr, expected):
    with np.errstate(all="ignore"):
        denom = float((expected * expected).sum())
        return float((arr * expected).sum() / denom) if denom else float("nan")


def _as_factor(arr, expected):
    """The factor c when arr == c * expected (c not 1 and not 0), else None."""
    if arr.shape != expected.shape or _constant(expected):
        return None
    arr, expected = _unmasked(arr, expected)
    c = _ratio(arr, expected)
    if not np.isfinite(c) or abs(c - 1) < 2 * TOL["rtol"] or abs(c) < 1e-6:
        return None
    return c if _close(arr, c * expected) else None


def _unmasked(arr, expected):
    """``arr`` and ``expected`` with the -inf entries they share (a right mask) set to 0,
    so that the readings of a wrong result judge the entries outside the mask only."""
    if np.isfinite(expected).all() or not masks_agree(arr, expected):
        return arr, expected
    mask = np.isneginf(expected)
    return np.where(mask, 0.0, arr), np.where(mask, 0.0, expected)


def _shows(m, variant=0) -> str:
    """What entry ``m``'s variant ``variant`` computes, in words (``shows`` may name each)."""
    if isinstance(m.shows, tuple):
        return m.shows[min(variant, len(m.shows) - 1)]
    return m.shows


def _symptom(lesson, check, m, name, arr, expected, variant=0):
    """'What we saw' for a recognised value mistake (``expected``: the right output;
    ``variant``: which of the entry's reproductions it equals)."""
    shown = _shows(m, variant)
    with np.errstate(all="ignore"):
        if m.factor is not None:
            return f"your `{name}` is {_fmt(_ratio(arr, expected))} times the expected one."
        if arr.shape != expected.shape:
            shows = f": it equals {shown}" if shown else ""
            return (f"`{name}` has shape {list(arr.shape)} instead of "
                    f"{list(expected.shape)}{shows}.")
        hook = check.diagnose.get("symptom")
        said = hook(lesson, m, name, arr, expected) if hook else None
        if said:
            return said
        if shown:
            return f"your `{name}` equals {shown}."
        return f"your `{name}` matches this mistake exactly: {_fmt(arr)}."


def _match_value(lesson, check, name, arr, contexts, view):
    """(mistake id, what we saw) of the first catalogue entry that explains ``arr``."""
    for m in lesson.value_entries(check.name):
        if m.kind == "new_layers":
            if any(label.startswith("other") for label in view.made_by):
                return m.id, (f"`{name}` was computed from parameters that are not "
                              f"{check.layers.get(name, 'its layer')}'s "
                              f"({', '.join(view.made_by)}).")
            continue
        for ctx in contexts:
            expected = ctx.expected(name)
            for k, variant in enumerate(ctx.variants(m, name)):
                if _close(variant, expected):  # the mistake makes no difference here
                    continue
                if m.fns and _constant(variant):  # (a function's mistake that gives a
                    continue  # constant here is no more certain than "constant_output")
                lost = variant.shape[:1] == (1,) and arr.shape == variant.shape[1:]
                if _close(arr, variant) or (lost and _close(arr, variant[0])):
                    return m.id, _symptom(lesson, check, m, name, arr,
                                          expected[0] if lost else expected, k)
    for ctx in contexts:
        expected = ctx.expected(name)
        for right in (expected, expected[0] if expected.shape[:1] == (1,) else None):
            c = None if right is None else _as_factor(arr, right)
            if c is not None:
                mean = _mean_words(check, name, c)
                if mean:
                    return "reduction_changed", f"`{name}` is the formula with {mean}."
                words = _factor_words(lesson, c)
                if words and "constant_factor" in lesson.mistakes:  # (said as the mistake)
                    return "constant_factor", (f"`{name}` is {_fmt(c)} times the "
                                               f"formula's result{words}.")
                return "scalar_multiple", (f"your `{name}` is {_fmt(c)} times the expected "
                                           f"one{words or _plain_factor(c)}.")
    if _constant(arr):
        value = _fmt(arr.ravel()[0]) if arr.size else "nothing (it is empty)"
        return "constant_output", f"every entry of `{name}` is {value}."
    for ctx in contexts:
        expected = ctx.expected(name)
        if arr.ndim == expected.ndim and arr.ndim <= 4 and sorted(arr.shape) == sorted(
                expected.shape):
            for perm in itertools.permutations(range(arr.ndim)):
                moved = np.transpose(expected, perm)
                if perm != tuple(range(arr.ndim)) and _close(arr, moved):
                    return "axes_permuted", (f"`{name}` has shape {list(arr.shape)}: the "
                                             f"right values with the axes in the order "
                                             f"{list(perm)} instead of "
                                             f"{list(range(arr.ndim))}.")
    return _behaviour(lesson, check, name, arr, contexts[0], view)


def _plain_factor(c: float) -> str:
    """", as if divided by 2 once more" when ``c`` or its inverse is a number of at most
    two decimals (a temperature, a constant the formula lacks); else ""."""
    for value, how in ((1 / c, "divided"), (c, "multiplied")) if c else ():
        if value > 1.001 and np.isclose(value, round(value, 2), rtol=1e-5, atol=0):
            return f", as if {how} by {_fmt(round(value, 2))} once more"
    return ""


#: Powers of a lesson's constants a factor is read as, and how a message says them.
_POWERS = ((0.25, "the fourth root of {c}"), (0.5, "√{c}"), (1.0, "{c}"), (1.5, "{c}·√{c}"),
           (2.0, "{c}²"))


def _factor_words(lesson, c: float) -> str:
    """", which is the fourth root of d_k (64)", when the factor ``c`` is a power of one of
    the spec's constants (``facts["constants"]``), or of its inverse, or the ratio of such
    a power to itself rounded to a few digits (2.83 for √8); else ""."""
    for const, value in lesson.facts.get("constants", {}).items():
        for power, words in _POWERS:
            exact = value ** power
            for k in range(1, 4):
                typed = round(exact, k)
                if typed != exact and typed and np.isclose(c, exact / typed, rtol=1e-6,
                                                           atol=0) and abs(c - 1) > 1e-9:
                    said = words.format(c=const)
                    return (f": {said} rounded to {_fmt(typed)} (it is {exact:.6g}...), "
                            f"a factor of {exact:.6g} / {_fmt(typed)}")
    consts = lesson.facts.get("constants", {})
    for (a, va), (b, vb) in itertools.permutations(consts.items(), 2):
        for power, words in _POWERS[1:3]:  # (√ and the constant itself)
            if np.isclose(c, (va / vb) ** power, rtol=1e-4):
                ours, theirs = words.format(c=b), words.format(c=a)
                return (f": divided by {ours} ({b} = {_fmt(vb)}) where the formula divides "
                        f"by {theirs} ({a} = {_fmt(va)})")
    for const, value in lesson.facts.get("constants", {}).items():
        for power, words in _POWERS:
            for sign, how in ((1, ""), (-1, "1 / ")):
                if np.isclose(c, value ** (sign * power), rtol=1e-3):
                    said = how + words.format(c=const)
                    return f", which is {said} ({const} = {_fmt(value)})"
    return ""


def _substitution(lesson, check, name, arr, ctx, view=None, close=_close):
    """("wrong_operand", what we saw) when ``arr`` is the check's formula (its spec's
    reference) with one of its inputs, or two, replaced by another tensor of the lesson made
    before this step (or by one transposed): the search over the formula's small changes
    of this kind, depth 2. A change must also give the second run's result where there is
    one (the replay's run on other embeddings). None when no change reproduces it."""
    step = lesson.step_of_check[check.name]
    places = check.upstream or tuple(n for n in step.inputs if n in ctx.inp)
    scope = [n for n, a in ctx.inp.items() if isinstance(a, np.ndarray) and a.ndim >= 2
             and lesson.made_in.get(n, 0) < step.number and n in lesson.shapes]
    # (another tensor; one transposed; the place's own tensor with its last slice along an
    # axis left out: a loop over it that stops one short; or with only its last slice
    # kept: a running total overwritten on each pass instead of added to)
    # ... or, where the formula transposes it, reshaped to the transposed shape instead
    # (a view or reshape in a transpose's place: the numbers scrambled, not swapped)
    options = {p: [(n, None) for n in scope if n != p] + [(n, "T") for n in scope] + [
        (p, "view")] + [(p, axis) for axis in range(1, ctx.inp[p].ndim)] + [
        (p, ("last", axis)) for axis in range(1, ctx.inp[p].ndim)] + [
        (p, ("skip", axis)) for axis in range(1, ctx.inp[p].ndim)] + [
        (p, ("first", axis)) for axis in range(1, ctx.inp[p].ndim - 2)] if p in ctx.inp else []
        for p in places}
    changes = [[(p, o)] for p in places for o in options[p]]
    if len(places) == 2:
        changes += [[(places[0], a), (places[1], b)] for a in options[places[0]]
                    for b in options[places[1]]]
    second = _second_run(lesson, name, view)

    def changed(a, op):
        if op == "T":
            return _swap(a)
        if op == "view":  # transposed by the formula, this gives a.reshape(swapped shape)
            if a.ndim < 2 or a.shape[-1] == a.shape[-2]:
                raise ValueError("a square view is the tensor itself")
            return _swap(a.reshape(a.shape[:-2] + (a.shape[-1], a.shape[-2])))
        if isinstance(op, int):
            a = a.copy()
            a[(slice(None),) * op + (-1,)] = 0
        if isinstance(op, tuple) and op[0] == "skip":  # the first slice left out
            a = a.copy()
            a[(slice(None),) * op[1] + (0,)] = 0
            return a
        if isinstance(op, tuple) and op[0] == "first":  # the first slice for every slice
            return np.broadcast_to(np.take(a, [0], axis=op[1]), a.shape)
        if isinstance(op, tuple):  # only the last slice along the axis
            a = a.copy()
            a[(slice(None),) * op[1] + (slice(0, -1),)] = 0
        return a

    def apply(inp, change):
        new = dict(inp, **{p: changed(inp[n], op) for p, (n, op) in change})
        return np.asarray(check.reference(dict(new, name=name), name), np.float64)

    def words(p, n, op):
        if isinstance(op, int):
            where = _axis_words(lesson, p, op, ctx.inp[p].ndim)
            return f"the last slice along {where} of `{p}` left out (a range one short)"
        if isinstance(op, tuple) and op[0] == "skip":
            where = _axis_words(lesson, p, op[1], ctx.inp[p].ndim)
            return f"the first slice along {where} of `{p}` left out (a range that starts at 1)"
        if isinstance(op, tuple) and op[0] == "first":
            where = _axis_words(lesson, p, op[1], ctx.inp[p].ndim)
            return (f"`{p}`'s first slice along {where} used for every one (an index 0 "
                    "where the loop's own index belongs)")
        if isinstance(op, tuple):
            where = _axis_words(lesson, p, op[1], ctx.inp[p].ndim)
            return (f"only the last slice along {where} of `{p}` (a running total "
                    "overwritten on each pass instead of added to)")
        if op == "T":
            return f"`{n}` transposed" if n == p else f"`{n}` transposed in place of `{p}`"
        if op == "view":
            return (f"`{p}` reshaped (a view or reshape) to the transposed shape instead of "
                    "transposed: its numbers scrambled, not its axes swapped")
        return f"`{n}` in place of `{p}`"

    expected = ctx.expected(name)
    with np.errstate(all="ignore"):
        for change in changes:
            try:
                got = apply(ctx.inp, change)
                if not (got.shape == arr.shape and close(arr, got)) or close(got, expected):
                    continue
                if second is not None and not close(second[1], apply(second[0], change),
                                                    second[2]):
                    continue  # (a coincidence of the lesson's numbers)
            except (ValueError, IndexError, KeyError, TypeError):
                continue
            said = " and ".join(words(p, n, op) for p, (n, op) in change)
            loop = any(isinstance(op, (int, tuple)) for _, (_, op) in change)  # (an index)
            return ("range_off_by_one" if loop else "wrong_operand",
                    f"`{name}` is the formula with {said}.")
    return None


def _formula_parts(f):
    """(input subscripts, output subscripts, every index in order, the summed ones) of a
    Formula's einsum."""
    ins, out = f.einsum.split("->")
    every = "".join(dict.fromkeys(ins.replace(",", "")))
    return ins, out, every, [i for i in every if i not in out]


def _mean_words(check, name, c: float) -> str:
    """"a mean over the key axis where the formula sums", when the factor ``c`` is 1 / the
    size of an index the output's Formula sums over (in the lesson's shapes), else ""."""
    f = check.formulas.get(name)
    if f is None:
        return ""
    from src import lessons  # (the sizes: the shapes of the spec that holds the check)

    spec, _ = lessons.by_check(check.name)
    if spec is None:
        return ""
    ins, _, _, summed = _formula_parts(f)
    for i in summed:
        for sub, op in zip(ins.split(","), f.operands):
            shape = spec.shapes.get(op) or spec.reference()[op].shape
            if i in sub and len(shape) == len(sub) and np.isclose(
                    c, 1 / shape[sub.index(i)], rtol=1e-4):
                return (f"a mean over the {f.indices.get(i, i)} axis where it sums "
                        f"(1/{shape[sub.index(i)]} of the sum)")
    return ""


def _bfloat16(a):
    """``a`` rounded to bfloat16 (8 bits of mantissa), as float64."""
    bits = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32).astype(np.float64)


_PRECISIONS = {"float16": lambda a: np.asarray(a, np.float16).astype(np.float64),
               "bfloat16": _bfloat16}
_REDUCERS = {"a mean": np.mean, "a max": np.max, "a min": np.min}


def _contraction(lesson, check, name, arr, ctx, view):
    """("reduction_changed" | "hard_selection" | "low_precision", what we saw) when ``arr``
    is the output's Formula (the check's ``formulas``) with one change of its contraction:
    a mean, max or min where it sums; the sum over another index of the same size; an
    operand replaced by a hard choice (1 at its largest entry along the summed index, 0
    elsewhere: an argmax); or its operands rounded to float16 or bfloat16. A change must
    also give the second run's result where there is one. When several changes give the
    result, the message says each (which one the code made, the numbers cannot tell).
    None when none does."""
    f = check.formulas.get(name)
    if f is None or any(o not in ctx.inp for o in f.operands):
        return None
    ins, out, every, summed = _formula_parts(f)
    subs = ins.split(",")
    words = f.indices
    changes = [("reduce", k) for k in _REDUCERS]
    changes += [("axis", (i, c)) for c in summed for i in out if i != c]
    changes += [("hard", j) for j, sub in enumerate(subs) if any(c in sub for c in summed)]
    changes += [("precision", p) for p in _PRECISIONS]
    # (one operand indexed by another output index of the same size: key[i] for key[j] in
    # a loop over i and j; each row then holds one value, repeated)
    changes += [("tied", (j, i, k)) for k, sub in enumerate(subs) for j in sub if j in out
                for i in out if i != j and i not in sub]
    if len(subs) == 2 and summed:  # (a distance between the rows where it takes products)
        changes += [("distance", (power, sign)) for power in (2, 1) for sign in (1, -1)]

    def compute(inp, change):
        kind, arg = change
        ops = [np.asarray(inp[o], np.float64) for o in f.operands]
        if kind == "precision":
            ops = [_PRECISIONS[arg](o) for o in ops]
        if kind == "hard":
            axis = next(subs[arg].index(c) for c in summed if c in subs[arg])
            hot = np.zeros_like(ops[arg])
            np.put_along_axis(hot, np.expand_dims(np.argmax(ops[arg], axis=axis), axis), 1.0,
                              axis=axis)
            ops[arg] = hot
        if kind == "tied":
            j, i, k = arg
            tied = list(subs)
            tied[k] = tied[k].replace(j, i)
            res = np.einsum(f"{','.join(tied)}->{out.replace(j, '')}", *ops)
            res = np.broadcast_to(np.expand_dims(res, out.index(j)), ctx.expected(name).shape)
            return res * f.scale + (np.asarray(inp[f.bias], np.float64) if f.bias else 0.0)
        if kind == "distance":
            power, sign = arg
            a, b = (_spread(o, sub, every) for o, sub in zip(ops, subs))
            total = ((a - b) ** 2).sum(axis=tuple(every.index(c) for c in summed))
            kept = "".join(i for i in every if i not in summed)
            res = sign * np.einsum(f"{kept}->{out}", total if power == 2 else np.sqrt(total))
        elif kind == "reduce":
            full = np.einsum(f"{ins}->{every}", *ops)
            kept = "".join(i for i in every if i not in summed)
            res = np.einsum(f"{kept}->{out}", _REDUCERS[arg](
                full, axis=tuple(every.index(i) for i in summed)))
        elif kind == "axis":
            i, c = arg
            res = np.einsum(f"{ins}->{out.replace(i, c)}", *ops)
        else:
            res = np.einsum(f.einsum, *ops)
        res = res * f.scale + (np.asarray(inp[f.bias], np.float64) if f.bias else 0.0)
        return _PRECISIONS[arg](res) if kind == "precision" else res

    def said(change):
        kind, arg = change
        if kind == "reduce":
            axes = " and ".join(f"the {words.get(c, c)} axis" for c in summed)
            return f"{arg} over {axes} where it sums"
        if kind == "axis":
            i, c = arg
            return (f"the sum over the {words.get(i, i)} axis instead of the "
                    f"{words.get(c, c)} axis")
        if kind == "hard":
            return (f"`{f.operands[arg]}` replaced by a hard choice (1 at each largest entry, "
                    "0 elsewhere: an argmax)")
        if kind == "tied":
            j, i, k = arg
            return (f"`{f.operands[k]}` taken at the {words.get(i, i)} position where the "
                    f"formula takes it at the {words.get(j, j)} position (one index for "
                    "another: every entry of a row is the same)")
        if kind == "distance":
            power, sign = arg
            what = "squared distance" if power == 2 else "distance"
            return (f"the {'negative ' if sign < 0 else ''}{what} between the rows of "
                    f"`{f.operands[0]}` and `{f.operands[1]}` where it takes their dot "
                    "products")
        return f"its operands in {arg} (rounded to {arg}'s few digits)"

    second = _second_run(lesson, name, view)
    expected = ctx.expected(name)
    found = []
    with np.errstate(all="ignore"):
        for change in changes:
            tol = lesson.tolerances["low"].get(change[1]) if change[0] == "precision" else None
            try:
                got = compute(ctx.inp, change)
                if got.shape != arr.shape or not _close(arr, got, tol) or _close(got, expected):
                    continue
                if second is not None:
                    again = compute(second[0], change)
                    if not _close(second[1], again, tol or second[2]):
                        continue  # (a coincidence of the lesson's numbers)
            except (ValueError, IndexError, KeyError, TypeError):
                continue
            if change[0] == "precision" and any(c[0] == "precision" for c in found):
                continue  # (bfloat16's tolerance admits float16's results: the finer one)
            found.append(change)
    if not found:
        return None
    kind = {"reduce": "reduction_changed", "axis": "reduction_changed",
            "hard": "hard_selection", "precision": "low_precision",
            "tied": "index_for_another", "distance": "distance_for_product"}[found[0][0]]
    if kind not in lesson.mistakes:  # (a lesson without words for this kind of change)
        kind = "wrong_operand"
    if len(found) == 1:
        # (a change the lesson has words of its own for: its entry, with what was found)
        own = f.named.get(_change_key(found[0]))
        if own:
            return own, f"`{name}` is the formula with {said(found[0])}."
        return kind, f"`{name}` is the formula with {said(found[0])}."
    return kind, (f"`{name}` is the formula with {said(found[0])}, or with "
                  f"{' or with '.join(said(c) for c in found[1:3])}: these give the same "
                  "numbers here, so either may be what your code does.")


def _change_key(change) -> str:
    """How a Formula's ``named`` calls a change of the contraction search: "mean", "max",
    "min", "sum over <index>", "hard", "float16", "bfloat16", "tied", "distance"."""
    kind, arg = change
    if kind == "reduce":
        return arg.split()[-1]
    if kind == "axis":
        return f"sum over {arg[0]}"
    return arg if kind == "precision" else kind


def _spread(a, sub: str, every: str):
    """``a`` (indexed by ``sub``) with its axes in the order of ``every`` and size 1 for
    the indices it lacks: ready to broadcast against the other operands."""
    order = [i for i in every if i in sub]
    a = np.einsum(f"{sub}->{''.join(order)}", a)
    return a.reshape([a.shape[order.index(i)] if i in sub else 1 for i in every])


def _second_run(lesson, name, view):
    """(the second run's inputs, its result for ``name``, tolerance), or None."""
    r = getattr(view, "reader", None)
    x = r.array("variant.in.x") if r is not None else None
    got = r.array(f"variant.out.{name}") if r is not None else None
    if x is None or got is None or got.dtype.kind != "f":
        return None
    with np.errstate(all="ignore"):
        inp = lesson.chain(x)
    tol = lesson.tolerances
    scale = tol["variant_scale"] * float(np.nanmax(np.abs(got), initial=0.0))
    return inp, got.astype(np.float64), dict(rtol=tol["tol"]["rtol"],
                                             atol=max(tol["tol"]["atol"], scale))


def _axis_words(lesson, name, axis, ndim):
    """How a message names axis ``axis`` of ``name`` ("the query axis"), from the spec's
    axes ("[batch, query, key]"), else by number."""
    words = [w.strip() for w in lesson.axes.get(name, "").strip("[]").split(",")]
    return f"the {words[axis]} axis" if len(words) == ndim else f"axis {axis}"


def _structural(lesson, check, name, arr, expected):
    """("wrong_operand", what we saw) when ``arr`` is the formula's result with one slice
    along an axis left at 0 (a range one short), shifted by one along an axis (an index
    off by one), or only its diagonal (each query met only its own key): the search's
    changes of a loop or an index. None when none reproduces it."""
    with np.errstate(all="ignore"):
        for axis in range(1, expected.ndim):
            n = expected.shape[axis]
            where = _axis_words(lesson, name, axis, expected.ndim)
            for k, which in ((n - 1, "last"), (0, "first")):
                left = expected.copy()
                left[(slice(None),) * axis + (k,)] = 0
                if arr.shape == left.shape and _close(arr, left) and not _close(left, expected):
                    return "range_off_by_one", (f"`{name}` is the formula's result with its "
                                                f"{which} slice along {where} left at 0.")
            for k in range(1, n - 1):  # (a loop that stops after k: len() of another axis)
                left = expected.copy()
                left[(slice(None),) * axis + (slice(k, None),)] = 0
                if arr.shape == left.shape and _close(arr, left) and not _close(left, expected):
                    return "range_off_by_one", (
                        f"`{name}` is the formula's result in its first "
                        f"{f'{k} slices' if k > 1 else 'slice'} along {where} only, the other "
                        f"{n - k} left at 0: a "
                        "loop that stopped early (its range from the size of another axis?).")
            for shift in (1, -1):
                rolled = np.roll(expected, shift, axis=axis)
                if arr.shape == rolled.shape and _close(arr, rolled) and \
                        not _close(rolled, expected):
                    return "range_off_by_one", (f"`{name}` is the formula's result shifted by "
                                                f"one along {where}.")
            for how, reduce in (("added up", np.sum), ("averaged", np.mean)):
                once = reduce(expected, axis=axis, keepdims=True)
                for got in (once, np.squeeze(once, axis)):
                    if arr.shape == got.shape and _close(arr, got):
                        return "extra_reduction", (
                            f"`{name}` is the formula's result {how} over {where}: one "
                            f"{'entry' if got.ndim < expected.ndim else 'slice'} where the "
                            f"formula keeps every position along {where}.")
            # (one tensor object appended or written on each pass of a loop: every slice is
            # that object's final state, the last slice or, added to, the sum of them all)
            if n > 1 and not _close(expected, np.take(expected, [-1], axis=axis)):
                for got, how in ((np.take(expected, [-1], axis=axis),
                                  "the formula's last slice"),
                                 (expected.sum(axis=axis, keepdims=True),
                                  "the sum of all the formula's slices")):
                    got = np.broadcast_to(got, expected.shape)
                    if arr.shape == got.shape and _close(arr, got):
                        return "range_off_by_one", (
                            f"every slice of `{name}` along {where} is {how}: one object "
                            "kept and changed on every pass of a loop (each entry shows its "
                            "final state).")
            total = np.cumsum(expected, axis=axis)
            if arr.shape == total.shape and _close(arr, total) and not _close(total, expected):
                return "range_off_by_one", (f"each slice of `{name}` along {where} adds up the "
                                            "ones before it: an accumulator not reset.")
        if expected.ndim >= 3:  # a double loop whose two ranges both start late or stop short
            for (k1, w1), (k2, w2) in itertools.product(((-1, "last"), (0, "first")),
                                                        repeat=2):
                left = expected.copy()
                left[..., k1, :] = 0
                left[..., :, k2] = 0
                if arr.shape == left.shape and _close(arr, left):
                    return "range_off_by_one", (
                        f"`{name}` is the formula's result with its {w1} slice along "
                        f"{_axis_words(lesson, name, expected.ndim - 2, expected.ndim)} and "
                        f"its {w2} along "
                        f"{_axis_words(lesson, name, expected.ndim - 1, expected.ndim)} left "
                        "at 0 (a double loop whose ranges are one short).")
        if expected.ndim >= 2 and expected.shape[-1] == expected.shape[-2]:
            diag = np.diagonal(expected, axis1=-2, axis2=-1)
            for got in (diag, diag[..., None]):
                if arr.shape == got.shape and _close(arr, got):
                    return "diagonal_only", (f"`{name}` has shape {list(arr.shape)}: it holds "
                                             "only the diagonal of the formula's result.")
    return None


def _located(arr, source, tol=1e-4):
    """The flat index in ``source`` of each entry of ``arr`` (the nearest of the source's
    numbers, within ``tol`` of the largest), or None when some entry is none of them."""
    flat = np.asarray(source, np.float64).reshape(-1)
    if not np.isfinite(flat).all() or not np.isfinite(arr).all():
        return None
    order = np.argsort(flat)
    sorted_ = flat[order]
    pos = np.clip(np.searchsorted(sorted_, arr.reshape(-1)), 1, flat.size - 1)
    left, right = sorted_[pos - 1], sorted_[pos]
    pick = np.where(np.abs(arr.reshape(-1) - left) <= np.abs(arr.reshape(-1) - right),
                    pos - 1, pos)
    if np.abs(sorted_[pick] - arr.reshape(-1)).max() > tol * max(np.abs(flat).max(), 1e-12):
        return None
    return order[pick].reshape(arr.shape)


def _places(lesson, source, idx) -> str:
    """Where the entries ``idx`` (flat indices into ``source``'s shape, one output row)
    come from, axis by axis in the source's words: "token 0, features 8–15", "tokens
    0–5, feature 0", "token 0, every 8th feature from 1 (1, 9, 17, …)"."""
    shape = lesson.shapes[source]
    words = [w.strip() for w in lesson.axes.get(source, "").strip("[]").split(",")]
    if len(words) != len(shape):
        words = [f"axis {i}" for i in range(len(shape))]
    at = np.unravel_index(idx, shape)
    parts = []

    def many(w):
        return w[:-1] + "ies" if w.endswith("y") else w + "s"

    for a, size in enumerate(shape):
        if size == 1:
            continue
        v = sorted({int(i) for i in at[a]})
        step = np.diff(v)
        if len(v) == 1:
            parts.append(f"{words[a]} {v[0]}")
        elif (step == 1).all():
            parts.append(f"{many(words[a])} {v[0]}–{v[-1]}")
        elif (step == step[0]).all():
            parts.append(f"every {int(step[0])}th {words[a]} from {v[0]} "
                         f"({', '.join(map(str, v[:3]))}, …)")
        else:
            parts.append(f"{many(words[a])} {', '.join(map(str, v[:4]))}"
                         f"{', …' if len(v) > 4 else ''}")
    return ", ".join(parts)


def _rearranged(lesson, check, name, arr, ctx):
    """(the Rearrangement's mistake, what we saw) when ``arr`` is made of its source's
    numbers in other places than the formula's (after taking its ``undo`` off): one
    output row that differs, where its numbers come from and where the formula takes
    them. None otherwise."""
    r = check.rearranged.get(name)
    if r is None or r.source not in ctx.inp or r.mistake not in lesson.mistakes:
        return None
    source = np.asarray(ctx.inp[r.source], np.float64)
    expected = ctx.expected(name)
    if arr.shape != expected.shape:
        return None
    with np.errstate(all="ignore"):
        got = r.undo(arr, ctx.inp) if r.undo else arr
    where = _located(got, source, tol=1e-3 if r.undo else 1e-5)
    if where is None:
        return None
    want = r.arrange(np.arange(source.size).reshape(source.shape))
    if want.shape != where.shape or (where == want).all():
        return None
    rows_w, rows_g = want.reshape(-1, want.shape[-1]), where.reshape(-1, want.shape[-1])
    k = int(np.argmax((rows_w != rows_g).any(axis=1)))
    at = np.unravel_index(k, want.shape[:-1])
    words = [w.strip() for w in lesson.axes.get(name, "").strip("[]").split(",")]
    if len(words) != want.ndim:
        words = [f"axis {i}" for i in range(want.ndim)]
    row = ", ".join(f"{words[a]} {int(i)}" for a, i in enumerate(at) if want.shape[a] > 1)
    said = "merged row" if r.undo else "row"
    missing = np.setdiff1d(want, where)
    if missing.size:  # (numbers written over others, read twice, or a part left out)
        return r.mistake, (f"{_places(lesson, r.source, missing)} of `{r.source}` appear "
                           f"nowhere in your {'merged ' if r.undo else ''}`{name}`: a part "
                           "left out or written over (a loop's range, or an index)")
    mine, theirs = _places(lesson, r.source, rows_g[k]), _places(lesson, r.source, rows_w[k])
    if mine == theirs:  # (the same places, in another order within the row)
        j = int(np.argmax(rows_g[k] != rows_w[k]))
        mine = _places(lesson, r.source, rows_g[k][j:j + 1])
        theirs = _places(lesson, r.source, rows_w[k][j:j + 1])
        row += f", entry {j}"
    return r.mistake, (f"your {said} of `{name}` at {row} holds `{r.source}`'s {mine}; the "
                       f"formula puts {theirs} there.")


def _behaviour(lesson, check, name, arr, ctx, view):
    """(mistake id, what we saw) read off what the code did, when no entry reproduces it:
    what was added to the right result, a nonlinearity, normalised rows, which tensors it
    depends on (the replay's gradients), and the lesson's own readings (its spec's
    ``diagnose`` hooks, by stage)."""
    hooks = check.diagnose
    expected = ctx.expected(name)
    found = (_substitution(lesson, check, name, arr, ctx, view)
             or _structural(lesson, check, name, arr, expected)
             or _rearranged(lesson, check, name, arr, ctx)) if check.reference else None
    if found:
        return found
    if "numbers_rearranged" in lesson.mistakes and arr.shape == expected.shape and \
            arr.size > 1 and _close(np.sort(arr, axis=None), np.sort(expected, axis=None)):
        moved = int((~np.isclose(arr, expected, rtol=1e-4, atol=1e-5)).sum())
        return "numbers_rearranged", (f"`{name}` holds exactly the formula's numbers, but "
                                      f"{moved} of its {arr.size} entries are in other "
                                      "places.")
    arr, expected = _unmasked(arr, expected)
    same = arr.shape == expected.shape
    if same and np.isfinite(arr).all() and np.isfinite(expected).all():
        found = _rounded(name, arr, expected) or _dropped(lesson, name, arr, expected) or (
            hooks["first"](lesson, name, arr, ctx) if "first" in hooks else None)
        if found:
            return found
    # (after a rounding, which a low precision's loose tolerance would also admit)
    found = _contraction(lesson, check, name, arr, ctx, view) if check.reference else None
    if found:
        return found
    if arr.shape == expected.shape:
        extra = arr - expected
        terms = [(f"`{other}`", t) for other, t in ctx.inp.items() if other != name]
        # (a rearrangement's source as the formula rearranges it: a residual of the merge)
        terms += [(f"`{r.source}` rearranged as the formula rearranges it (before what "
                   "follows)", r.arrange(np.asarray(ctx.inp[r.source], np.float64)))
                  for r in check.rearranged.values() if r.source in ctx.inp]
        for other, t in terms:
            if isinstance(t, np.ndarray) and np.shape(t) == arr.shape \
                    and np.abs(t).max() > 1e-6 and _close(extra, t):
                return "extra_term", f"`{name}` equals the right result plus {other}."
        if (expected < -1e-3).any() and (arr >= 0).all():
            how = ("max(·, 0) of the right result (a ReLU)" if _close(arr, np.maximum(
                expected, 0)) else "never negative, although the right result is")
            return "extra_nonlinearity", f"`{name}` is {how}."
        norms = np.linalg.norm(arr, axis=-1)
        if np.allclose(norms, 1, atol=1e-3) and not np.allclose(
                np.linalg.norm(expected, axis=-1), 1, atol=1e-3):
            return "rows_rescaled", f"every row of `{name}` has length 1."
        sums, mean = arr.sum(-1), arr.mean(-1)
        if (np.allclose(sums, 1, atol=1e-3) or (np.allclose(mean, 0, atol=1e-3) and np.allclose(
                arr.std(-1), 1, atol=1e-2))) and not np.allclose(expected.sum(-1), 1, atol=1e-3):
            return "rows_rescaled", (f"every row of `{name}` sums to 1 (a softmax or a division "
                                     "by the row sums)" if np.allclose(sums, 1, atol=1e-3) else
                                     f"every row of `{name}` has mean 0 and spread 1") + "."
        found = _fitted(lesson, check, name, arr, expected)
        if found:
            return found
    found = hooks["rows"](lesson, name, arr, ctx) if same and "rows" in hooks else None
    if found:
        return found
    if arr.ndim >= 2 and arr.shape == expected.shape and np.allclose(arr, arr[..., :1, :]) \
            and not np.allclose(expected, expected[..., :1, :]):
        return "same_for_every_query", (f"every row of `{name}` is the same: "
                                        f"{_fmt(arr[..., 0, :])}.")
    found = hooks["mix"](lesson, name, arr, ctx) if same and "mix" in hooks else None
    if found:
        return found
    if check.upstream and view.grads:  # what it must depend on: its inputs, and only those
        used = {n for n, g in view.grads.items() if np.any(g)}
        need = check.uses.get(name, check.upstream)
        cell_no = lesson.step_of_check[check.name].number
        missing = [n for n in need if n not in used and lesson.made_in.get(n) != cell_no]
        # (what a tensor made in this cell is made from is used through it, rightly)
        via = {u for c in lesson.checks.values() for o in c.outputs if o in need
               and lesson.made_in.get(o) == cell_no for u in c.upstream}
        extra = sorted(used - set(need) - via)
        if missing or extra:
            said = [f"does not use {_listing(missing)}" if missing else "",
                    f"uses {_listing(extra)}" if extra else ""]
            return "wrong_inputs", f"`{name}` {' and '.join(p for p in said if p)}."
    found = hooks["last"](lesson, name, arr, view) if "last" in hooks else None
    return found or (None, "")


def _variant_verdict(lesson, name, r):
    """("right_only_here", what we saw) when the replay's second run (src/replay.py; the
    spec's steps with ``variant``), on other embeddings x and every earlier tensor made
    from them, does not give the formula's result; None when it does (or there was none)."""
    x = r.array("variant.in.x")
    if x is None or x.shape != lesson.shapes[lesson.variant_input]:
        return None
    tol = lesson.tolerances
    where = "with other embeddings x (chosen by the grader, every earlier tensor made from them)"
    raised = r.strings("variant.raised")
    if raised:
        return "right_only_here", f"{where} your cell raised {raised[0]}."
    got = r.array(f"variant.out.{name}")
    with np.errstate(all="ignore"):
        want = lesson.chain(x)[name]
    if got is not None and want.shape[:1] == (1,) and got.shape == want.shape[1:]:
        want = want[0]  # (a lost batch axis is charged on its own, not as this)
    scale = tol["variant_scale"] * float(np.abs(want[np.isfinite(want)]).max(initial=0.0))
    # (a result in a lower precision is compared as the first run compared it, with that
    # precision's tolerance: its dtype is charged on its own, not as "right only here")
    base = tol["low"].get(str(got.dtype), tol["tol"]) if got is not None else tol["tol"]
    if got is not None and got.shape == want.shape and got.dtype.kind == "f" and _close(
            got.astype(np.float64), want, dict(rtol=base["rtol"],
                                               atol=max(base["atol"], scale))):
        return None
    how = ("it is not a float tensor of the right shape" if got is None or got.shape !=
           want.shape or got.dtype.kind != "f" else f"`{name}` differs from the formula by up "
           f"to {_fmt(float(np.nanmax(np.abs(got.astype(np.float64) - want))))}")
    return "right_only_here", f"right on the lesson's numbers, but {where} {how}."


def _rounded(name, arr, expected):
    """The right result rounded (round to k decimals, floor, //): ``arr`` lies on a grid of
    10^-k and within one step of it of the right result."""
    if np.ptp(arr) == 0:  # a constant says nothing about rounding
        return None
    for k in range(5):
        q = 10.0 ** -k
        for how, grid in (("", np.round(expected / q)), (" (down: floor or //)",
                                                         np.floor(expected / q))):
            # float32 rounding of an entry that lies on a half step may go either way
            if np.mean(np.abs(arr - grid * q) <= 1e-3 * q + 1e-6) >= 0.9:
                digits = "whole numbers" if k == 0 else f"{k} decimal{'s' * (k > 1)}"
                return "rounded", f"`{name}` is the right result rounded to {digits}{how}."
    return None


def _dropped(lesson, name, arr, expected):
    """The right result with some entries set to 0 and every other one multiplied by one
    factor c > 1: what dropout does (each entry zeroed with probability p, the others
    scaled by c = 1/(1 - p))."""
    if "dropout_applied" not in lesson.mistakes:
        return None
    zero = (arr == 0) & (np.abs(expected) > 1e-6)
    keep = (arr != 0) & (np.abs(expected) > 1e-6)
    if not zero.any() or keep.sum() < 2:
        return None
    ratio = arr[keep] / expected[keep]
    c = float(np.median(ratio))
    if c <= 1.001 or not np.allclose(ratio, c, rtol=1e-4, atol=0):
        return None
    # (how many were zeroed is left unsaid: it changes from run to run)
    return "dropout_applied", (f"some entries of `{name}` are 0 and every other one is "
                               f"{c:.4g} times the right one: what dropout with p = "
                               f"{1 - 1 / c:.2g} does.")


def _lstsq(design, target):
    """(coefficients, largest residual relative to the target's spread) of a least-squares
    fit (no fit: an infinite residual)."""
    if not (np.isfinite(design).all() and np.isfinite(target).all()):
        return np.zeros(design.shape[1]), np.inf  # (a mask's -inf: nothing to fit)
    try:
        coef, *_ = np.linalg.lstsq(design, target, rcond=None)
    except np.linalg.LinAlgError:
        return np.zeros(design.shape[1]), np.inf
    scale = max(np.abs(target).max(), 1e-12)
    return coef, np.abs(design @ coef - target).max() / scale


def _fitted(lesson, check, name, arr, expected):
    """Simple forms of the right result E that ``arr`` [.., L, S] fits: a·E + b (one
    constant added), a_i·E_i + b_i per row (each row normalised on its own), or
    E_ij·u_i·v_j (each score divided by a number per query and per key: the vectors were
    normalised). Checked on exact fits only (relative residual <= 1e-4)."""
    e, a = expected.reshape(-1), arr.reshape(-1)
    if e.size < 4 or np.ptp(e) < 1e-9:
        return None
    (gain, shift), res = _lstsq(np.stack([e, np.ones_like(e)], 1), a)
    if res <= 1e-4 and abs(shift) > 1e-4 * max(np.abs(a).max(), 1e-12):
        return "shifted", (f"`{name}` = {_num(gain)} × the right result + {_num(shift)}: "
                           "the same constant is added to every entry.")
    if arr.ndim < 2:
        return None
    rows_e, rows_a = expected.reshape(-1, arr.shape[-1]), arr.reshape(-1, arr.shape[-1])
    if np.allclose(rows_e.sum(-1), 1, atol=1e-6):  # (the formula normalises each row: a
        return None  # wrong normalisation is not "a normalisation the formula lacks")
    fits = [_lstsq(np.stack([r, np.ones_like(r)], 1), s) for r, s in zip(rows_e, rows_a)
            if np.ptp(r) > 1e-9]
    spread = max(float(np.abs(rows_e).max()), 1e-12)
    if fits and all(res <= 1e-4 for _, res in fits) and all(
            abs(c[0]) * np.ptp(r) > 1e-3 * spread for (c, _), r in zip(fits, rows_e)):
        gains = [c[0] for c, _ in fits]
        return "rows_rescaled", (f"each row of `{name}` is the right row times its own number "
                                 f"plus its own constant (row 1: {_num(gains[0])} × right + "
                                 f"{_num(fits[0][0][1])}; row 2: {_num(gains[1 % len(gains)])}"
                                 " × right + ...): each row was normalised on its own.")
    hook = check.diagnose.get("fit")
    return hook(lesson, name, rows_a, rows_e) if hook else None


def _upstream_slip(lesson, cell, inputs):
    """What is wrong with an input that a cell's error points to (a NumPy array, a tuple,
    a dtype other than float32), or "" when its inputs are fine or the error is its own."""
    if not re.match(r"(TypeError|RuntimeError|ValueError|AttributeError)\b", cell.error):
        return ""
    for v in inputs:
        made = f"`{v.name}` (made in Cell {lesson.made_in.get(v.name, '?')})"
        if v.kind == "ndarray":
            return f"{made} is a NumPy array, not a torch tensor"
        if v.kind == "tensor" and v.dtype not in ("float32", ""):
            return f"{made} is {v.dtype}, while the lesson's tensors are float32"
        if v.kind not in ("tensor", "none", "missing"):
            return f"{made} is {v.describe()}, not a tensor"
    return ""


def _close_nonfinite(a, b, tol=None):
    """Like :func:`_close`, where both arrays hold NaN, +inf and -inf in the same places
    (a formula applied to -inf scores: what a changed formula gives on a mask)."""
    if a is None or b is None or a.shape != b.shape:
        return False
    same = all(np.array_equal(f(a), f(b)) for f in (np.isnan, np.isposinf, np.isneginf))
    fin = np.isfinite(a)
    return same and _close(a[fin], b[fin], tol)


def _fewer(lesson, name, arr, expected):
    """("range_off_by_one", what we saw) when ``arr`` is the right result with one slice
    fewer along one axis (its first or its last: a loop that starts at 1 or stops one
    short, its results stacked); None otherwise."""
    if arr.ndim != expected.ndim:
        return None
    differ = [a for a in range(arr.ndim) if arr.shape[a] != expected.shape[a]]
    if len(differ) != 1 or arr.shape[differ[0]] != expected.shape[differ[0]] - 1:
        return None
    axis = differ[0]
    where = _axis_words(lesson, name, axis, expected.ndim)
    n = expected.shape[axis]
    for kept, left in ((slice(1, None), "first"), (slice(0, n - 1), "last")):
        part = expected[(slice(None),) * axis + (kept,)]
        if _close(arr, part):
            return "range_off_by_one", (f"`{name}` has shape {list(arr.shape)}: the formula's "
                                        f"result without its {left} slice along {where} (a "
                                        "loop whose range is one short).")
    return None


def _mask_moved(lesson, name, arr, expected):
    """("mask_differs", what we saw) when ``arr``'s only non-finite entries are -inf, it
    agrees with ``expected`` wherever both are finite, and its -inf stand elsewhere than
    ``expected``'s (a mask of the wrong shape); None otherwise. Said in the last two axes'
    words, for the first [query, key] block that differs."""
    if "mask_differs" not in lesson.mistakes or arr.shape != expected.shape or arr.ndim < 2 \
            or np.isnan(arr).any() or np.isposinf(arr).any() or not np.isneginf(expected).any():
        return None
    both = np.isfinite(arr) & np.isfinite(expected)
    if not _close(arr[both], expected[both]):
        return None
    hid, want = np.isneginf(arr), np.isneginf(expected)
    if (hid == want).all():
        return None
    blocks = (hid != want).reshape(-1, *arr.shape[-2:]).any(axis=(1, 2))
    k = int(np.argmax(blocks))
    h, w = hid.reshape(-1, *arr.shape[-2:])[k], want.reshape(-1, *arr.shape[-2:])[k]
    words = [x.strip() for x in lesson.axes.get(name, "").strip("[]").split(",")]
    row, col = (words[-2], words[-1]) if len(words) == arr.ndim else ("row", "column")

    def pairs(m):
        at = [f"({row} {i}, {col} {j})" for i, j in zip(*np.nonzero(m))]
        return ", ".join(at[:4]) + (f" and {len(at) - 4} more" if len(at) > 4 else "")

    said = [f"hides {pairs(h & ~w)}, which the mask keeps" if (h & ~w).any() else "",
            f"keeps {pairs(w & ~h)}, which the mask hides" if (w & ~h).any() else ""]
    hid_b = hid.reshape(-1, *arr.shape[-2:])
    same = blocks.all() and all((hid_b == h).all(axis=(1, 2)))
    where = "in every block" if same else "in its first block that differs"
    seen = (f"`{name}` puts -inf in other places than the causal mask: {where} it "
            f"{' and '.join(x for x in said if x)}.")
    bare = ~hid_b.any(axis=(1, 2))
    if (~blocks).any() and (bare | ~blocks).all():  # (some blocks right, the rest bare)
        seen = (f"`{name}` is masked right in {int((~blocks).sum())} of its {len(blocks)} "
                f"[{row}, {col}] blocks and not at all in the other {int(bare.sum())}: the "
                "mask reached only some of them (a masking line outside the loop over them, "
                "or an index that stays fixed).")
    return "mask_differs", seen


def _match_masked(lesson, check, name, arr, contexts):
    """(mistake id, what we saw) of an entry whose output holds -inf (a mask), or None."""
    for m in lesson.value_entries(check.name):
        if m.reproduce is None:
            continue
        for ctx in contexts:
            for i, variant in enumerate(ctx.variants(m, name)):
                if _close_nonfinite(arr, variant):
                    holds = " and ".join(f"{what} at {n}" for what, n in (
                        ("-inf", int(np.isneginf(arr).sum())), ("+inf", int(np.isposinf(
                            arr).sum())), ("NaN", int(np.isnan(arr).sum()))) if n)
                    return m.id, (f"`{name}` holds {holds} of its {arr.size} "
                                  f"entries; it equals {_shows(m, i)}.")
    return None, ""


def _judge_output(lesson, check, name, view, contexts, strict, inputs, cell):
    """The verdict on one output tensor ``name`` of ``check``; ``inputs``: upstream views."""
    f = _Finding()
    if view.kind in ("missing", "none"):
        holds = "is not defined" if view.kind == "missing" else "still holds None"
        if cell.misspelled and cell.misspelled[1] == name:  # (then its own asserts raise)
            f.mistake = "misspelled_name"
            f.seen = (f"your Cell {cell.number} assigns `{cell.misspelled[0]}`, so `{name}` "
                      f"{holds}.")
        elif cell.raised and cell.error.startswith("AssertionError") and \
                name in cell.unassigned and not cell.discarded and \
                "never_assigned" in lesson.mistakes:  # (its own assert read the missing name)
            f.mistake = "never_assigned"
            f.seen = (f"no line of your Cell {cell.number} assigns `{name}`, so it {holds} "
                      f"({cell.said()}).")
        elif cell.raised:
            f.mistake = _error_entry(lesson, cell.error, cell.line, check) or "cell_raised"
            f.seen = f"{cell.said()}, so `{name}` {holds}."
            # An error named as the cell's own mistake (torch.sqrt of an int, .T on 3-D ...)
            # stays its own; a generic or dtype/shape error is put down to a slipped input.
            slip = _upstream_slip(lesson, cell, inputs) if f.mistake in (
                "cell_raised", "mixed_dtypes", "matmul_shapes") else ""
            if slip:
                f.mistake, f.seen = "upstream_slip", f"{cell.said()}: {slip}."
            elif f.mistake == "matmul_shapes":  # which operands, and their shapes
                arrived = {n: v.shape for n, v in zip(check.upstream, inputs)
                           if v.kind in ("tensor", "ndarray") and v.shape}
                said = misfit(cell.line, _line_shapes(lesson, cell, arrived))
                f.mistake = _named_error(lesson, cell, check, arrived)
                if said:
                    f.seen = (f"{cell.said()}. With the shapes its tensors have (those it "
                              f"makes at the lesson's shapes), {said}.")
            elif f.mistake == "used_before_computed" and inputs and all(
                    v.kind in ("tensor", "ndarray") for v in inputs):
                f.mistake = "returned_none"
            calls = [d for d in cell.discarded if d.endswith(")")]
            if calls and f.mistake in ("returned_none", "used_before_computed", "cell_raised") \
                    and "result_not_assigned" in lesson.mistakes:
                f.mistake = "result_not_assigned"
                f.seen = (f"your Cell {cell.number} computes `{calls[0]}` on a line of its own, "
                          f"so `{name}` {holds}.")
        elif cell.replayed and [d for d in cell.discarded if d.endswith(")")] and \
                "result_not_assigned" in lesson.mistakes:
            f.mistake = "result_not_assigned"
            calls = [d for d in cell.discarded if d.endswith(")")]
            f.seen = f"your Cell {cell.number} computes `{calls[0]}` but never assigns `{name}`."
        else:
            f.mistake = "not_computed"
            f.seen = (f"`{name}` {holds}: it has not been computed yet; run your Cell "
                      f"{lesson.made_in[name]} code first." if not cell.replayed else
                      f"your Cell {cell.number} runs without error but never assigns `{name}`.")
        return f
    if view.kind == "function":
        f.mistake = "function_not_called"
        f.seen = f"`{name}` is {view.describe()}, not a tensor."
        return f
    if view.kind not in ("tensor", "ndarray"):
        f.mistake = "bad_type"
        f.seen = (f"`{name}` should be a torch tensor of shape {list(lesson.shapes[name])}, "
                  "but it "
                  f"is {view.describe()}. Keep the result as a tensor (no .tolist(), no str()).")
        return f
    arr = view.real
    if arr is None:
        if view.layout != "strided":
            reason = f"it is a {view.layout} tensor (use a dense one)"
        elif view.note:
            reason = view.note
        else:
            reason = f"its dtype is {view.dtype or 'unknown'}"
        f.mistake = "bad_type"
        if view.layout == "strided" and view.dtype.startswith(("int", "uint", "bool")):
            f.mistake = "integer_result"
        f.seen = (f"`{name}` should hold real floating-point numbers in a dense tensor, but "
                  f"{reason}.")
        return f
    if not np.isfinite(arr).all() and not any(masks_agree(arr, c.expected(name))
                                              for c in contexts):
        f.mistake, f.seen = _match_masked(lesson, check, name, arr, contexts)
        if f.mistake is None and check.reference:  # (a mask moved; a tensor for another)
            found = _mask_moved(lesson, name, arr, contexts[0].expected(name)) or \
                _substitution(lesson, check, name, arr, contexts[0], view, _close_nonfinite) \
                or _structural(lesson, check, name, arr, contexts[0].expected(name))
            if found:
                f.mistake, f.seen = found
        if f.mistake is None:
            f.mistake = "nan_or_inf"
            f.seen = (f"`{name}` contains {int((~np.isfinite(arr)).sum())} NaN or inf "
                      "value(s).")
        return f
    tols = lesson.tolerances
    tol = tols["low"].get(view.dtype, tols["tol"])
    for ctx in contexts:
        expected = ctx.expected(name)
        lost = (arr.shape == expected.shape[1:] and expected.shape[:1] == (1,)
                and _close(arr, expected[0], tol))
        if lost or _close(arr, expected, tol):
            _right(lesson, check, f, name, view, arr, expected[0] if lost else expected, lost,
                   tol, inputs, strict, cell, ctx.inp)
            return f
    f.mistake, f.seen = _match_value(lesson, check, name, arr, contexts, view)
    if f.mistake is None and cell.raised and not cell.error.startswith("AssertionError"):
        f.mistake = _error_entry(lesson, cell.error, cell.line, check) or "cell_raised"
        f.seen = f"{cell.said()}; `{name}` holds a value that is not right (maybe from before)."
    if f.mistake is not None:
        return f
    cut = next((c for c in cell.cropped if c[0] == name), None)
    if cut and "cut_from_product" in lesson.mistakes:  # (read from the line, not guessed)
        f.mistake = "cut_from_product"
        f.seen = (f"`{name}` is `({cut[1]})[{cut[3]}]`: a part of a product of shape "
                  f"{cut[2]}, where the formula's product has the shape "
                  f"{list(lesson.shapes[name])} by itself.")
        return f
    expected = contexts[0].expected(name)
    found = _fewer(lesson, name, arr, expected) if arr.shape != expected.shape else None
    if found:
        f.mistake, f.seen = found
        return f
    extra = arr.reshape([n for i, n in enumerate(arr.shape) if n != 1 or i >= arr.ndim - 2]
                        ) if arr.ndim > expected.ndim else None
    if extra is not None and "extra_axis" in lesson.mistakes and (
            extra.shape == expected.shape and _close(extra, expected) or (
            extra.shape == expected.shape[1:] and _close(extra, expected[0]))):
        f.mistake = "extra_axis"
        f.seen = (f"`{name}` has shape {list(arr.shape)} but should be "
                  f"{list(expected.shape)} {lesson.axes.get(name, '')}; its numbers are the "
                  "right ones.")
        return f
    if arr.shape != expected.shape:
        f.message = (f"`{name}` has shape {list(arr.shape)}, not {list(expected.shape)} "
                     f"{lesson.axes.get(name, '')}. Next step: check the order of the operands "
                     "and which axis "
                     "you transpose or reduce.")
        return f
    arr, expected = _unmasked(arr, expected)
    with np.errstate(all="ignore"):
        err = np.nan_to_num(np.abs(arr - expected), nan=np.inf)
    i = np.unravel_index(int(err.argmax()), err.shape)
    f.message = (f"`{name}` has the right shape but wrong values. Next step: compare your "
                 "code with the formula above, line by line, and open the hint.\n"
                 f"What we saw: the largest difference is {_fmt(err.max())} at index "
                 f"{list(map(int, i))} (expected {_fmt(expected[i])}, got {_fmt(arr[i])}); "
                 "it matches none of the common mistakes.")
    return f


def _imprecise_as(lesson, check, name, arr, inp) -> str:
    """", what <an entry> gives" when a value entry of ``check`` reproduces ``arr`` to
    float32 precision where the right result does not (an epsilon of 1e-4 in the row
    sums: within the loose tolerance, so only the graded run sees it)."""
    ctx, strict = _Context("", inp, check), lesson.tolerances["strict"]
    exact = ctx.expected(name)
    for m in lesson.value_entries(check.name):
        for v in ctx.variants(m, name):
            if v.shape == arr.shape and _close(arr, v, strict) and not _close(v, exact, strict):
                return f": it is what {m.title[0].lower()}{m.title[1:]} gives"
    return ""


def _right(lesson, check, f, name, view, arr, exact, lost, tol, inputs, strict, cell, inp):
    """The values are right: charge the slips this cell made (shape, dtype, type, and how
    the result depends on its inputs)."""
    if lost:
        f.costs.append(("lost_batch_dimension", f"`{name}` has shape {list(arr.shape)} but "
                        f"should be {list(lesson.shapes[name])} {lesson.axes.get(name, '')}."))
    in_dtypes = [v.dtype for v in inputs if v.kind in ("tensor", "ndarray")]
    want = _promoted(in_dtypes)
    # (float32, the lesson's dtype, is always fine; a NumPy result's dtype comes with it)
    dtype_slip = None
    if view.dtype not in (want, "float32") and view.kind != "ndarray":
        dtype_slip = ("wrong_dtype", f"`{name}` has the right values but dtype "
                      f"{view.dtype}, while this cell's inputs were {want}.")
        f.costs.append(dtype_slip)
    if view.kind == "ndarray" and (not inputs or any(v.kind == "tensor" for v in inputs)):
        f.costs.append(("not_a_tensor", f"`{name}` is a NumPy array, while this cell's "
                        "inputs were torch tensors."))
    if tol is lesson.tolerances["tol"] and not _close(arr, exact, lesson.tolerances["strict"]):
        err = float(np.abs(arr - exact).max())
        _strict(f, strict, "imprecise", f"`{name}` differs from the exact result by up to "
                f"{_fmt(err)}{_imprecise_as(lesson, check, name, arr, inp)}.")
    if not check.uses_function and view.grad_error:  # (else the function's own)
        _strict(f, strict, "backward_fails", f"`{name}` has the right values, but its "
                f"gradient raised {_short(view.grad_error, 160)}")
    elif check.vjp is not None and view.kind == "tensor" and cell.replayed and not lost \
            and not cell.mutated and not cell.own:  # (own inputs may not require grad)
        # (with the output's name: a check of several outputs has a gradient for each)
        wrong = _input_gradients(check, view, dict(inp, name=name), arr)
        if wrong and dtype_slip and not view.requires_grad:
            # both at once: one cause, numbers computed outside torch and brought back
            f.costs.remove(dtype_slip)
            f.costs.append(("left_torch", f"`{name}` has the right values, but dtype "
                            f"{view.dtype} (this cell's inputs were {want}) and no autograd "
                            "graph: it was rebuilt from numbers computed outside torch."))
        elif wrong and any(f"`{n}`" in wrong for n in cell.rebound):
            pass  # (an input assigned anew in the cell: that is charged, and explains this)
        elif wrong:
            # (still in the graph, yet not through an input: recomputed from others)
            kind = ("recomputed_output" if view.requires_grad and
                    "recomputed_output" in lesson.mistakes else "detached_output")
            _strict(f, strict, kind, f"`{name}` has the right values, but {wrong}.")

def _input_gradients(check, view, inp, out):
    """Why ``view`` (a replay's output ``out`` on inputs ``inp``, which require grad) does
    not depend on them as the formula does, or "": its gradient of sum(out * G) with
    respect to each input must be the formula's (the spec's ``vjp``; G: output_gradient)."""
    if not view.requires_grad:
        return "it does not require grad: it was cut off from the autograd graph"
    if not view.grads:  # (backward itself failed, e.g. after an in-place op: not judged)
        return ""
    g = output_gradient(out.shape).astype(np.float64)
    for n, expected in check.vjp(inp, g, out).items():
        got = view.grads.get(n)
        # Only no dependence is charged: an equivalent formula (weights renormalised, the
        # max kept in the graph) may have another gradient, and is right.
        if got is None or got.shape != expected.shape or not np.any(got):
            return f"it does not depend on `{n}`: it was computed from other tensors"
    return ""


def _judge_tensors(lesson, check, r, strict, cell):
    views = {n: r.tensor(n) for n in check.all}
    contexts, notes = _contexts(lesson, check, views)
    if r.flag("replay.own"):  # a second run, on the student's own inputs: judged on them
        # (equal to the lesson's but for their dtype, they are judged as the lesson's)
        contexts = [c for c in contexts if c.label == "your own tensors" or not notes]
        if not contexts:
            return _failed(check, "Not judged on your own tensors (they equal the lesson's, "
                           "or are degenerate).")
    own = contexts.pop() if contexts[-1].label == _DEGENERATE else None
    inputs = [views[n] for n in check.upstream]
    findings = [(n, _judge_output(lesson, check, n, views[n], contexts, strict, inputs, cell))
                for n in check.outputs]
    right = check.diagnose.get("right")
    for n, f in findings if right else ():  # how a right result was made (the lesson's)
        if not f.failed:
            for mid, seen in right(lesson, r, n, views[n]):
                if lesson.mistakes[mid].strict_only:
                    _strict(f, strict, mid, seen)
                else:
                    f.costs.append((mid, seen))
    if not r.flag("replay.own"):  # right here: right on other inputs too?
        for n, f in findings:
            if not f.failed:
                f.mistake, f.seen = _variant_verdict(lesson, n, r) or (None, "")
    course = r.strings("replay.course_code")
    if course and not findings[0][1].failed and not (
            check.uses_function and r.strings(f"{check.uses_function}.course_code")):
        # (a function that runs it is charged there, once)
        findings[0][1].mistake = "runs_course_code"
        findings[0][1].seen = (f"your Cell {cell.number} calls {course[0]}, which ships with "
                               "the course.")
    mistakes = lesson.mistakes
    for n, f in findings:  # unnamed, but the formula applied to degenerate inputs
        arr = views[n].real
        named = f.message or (f.mistake in mistakes and mistakes[f.mistake].kind == "behaviour")
        if own is not None and named and arr is not None and _close(arr, own.expected(n)):
            f.message, f.mistake = "", "degenerate_upstream"
            f.seen = (f"`{n}` is what the formula gives on your tensors from the cells before, "
                      "but they are degenerate (see the note), so it cannot be told apart "
                      "from a wrong formula.")
    out, shape = check.outputs, list(lesson.shapes[check.outputs[0]])
    seen = list(views[out[0]].shape or shape)  # say the shape it has, not the lesson's
    if seen != shape and len(seen) != len(shape) - 1:  # (a lost batch axis is charged)
        ok = (f"{_listing(out)} {seen} {'is' if len(out) == 1 else 'are'} right for your own "
              f"tensors from the cells before (the lesson's shape is {shape}).")
    else:
        ok = (f"`{out[0]}` {shape} is correct." if len(out) == 1 else
              f"{_listing(out)} {shape} are correct.")
    return _result(lesson, check, findings, ok, notes, cell, _seen_arrays(views))


# ------------------------------------------------------------- judge: entry
def _judge_check(lesson, step, check, data, strict=False):
    """One check's result from observed data; never raises."""
    try:
        with np.errstate(all="ignore"):
            r = _Reader(data)
            cell = _Cell.read(r, step.number)
            if r.text("error"):
                return _failed(check, f"The observation failed: {r.text('error')}")
            if check.kind == "function":
                return check.diagnose["judge"](lesson, check, r, strict, cell)
            return _judge_tensors(lesson, check, r, strict, cell)
    except Exception as exc:  # noqa: BLE001  (the student must never see our traceback)
        return _failed(check, f"The check could not read these results ({_error_text(exc)}). "
                       "Make sure every tensor comes from the cells above.")


def judge(grade_id: str, data: Mapping, *, strict: bool = False,
          checks: tuple | None = None) -> Summary:
    """The results of check cell ``grade_id``'s checks (or of its ``checks`` named),
    computed from observed data only (the replay's, or :func:`observe`'s).

    Pure and trusted: no student object is called and torch is not needed.
    Never raises, whatever ``data`` holds (missing keys, wrong dtypes or
    shapes, NaN, strings for numbers): such data gives failed results with a
    message. ``strict=True`` (the graded run) also deducts the
    ``strict_only`` catalogue items (float32 precision, projections made by
    the given layers) as partial credit; nothing else changes.

    Shape legend: see :func:`src.checks.observe.observe`.
    """
    lesson, step = lessons.by_cell(grade_id)
    if step is None:
        known = [s.test for spec in lessons.LESSONS.values() for s in spec.steps]
        return Summary([CheckResult(_short(grade_id, 80), False, 0.0, 0.0,
                                    f"Unknown grade cell {_short(repr(grade_id), 80)}; "
                                    f"expected one of {', '.join(known)}.")])
    results = {c.name: _judge_check(lesson, step, c, data, bool(strict)) for c in step.checks
               if checks is None or c.name in checks}
    for check in step.checks:  # a wrong function makes wrong results of the checks using it
        fn, user = results.get(check.uses_function), results.get(check.name)
        # (a function short only of a partial point, such as the all -inf row, is right on
        # the lesson's own inputs: it cannot have made them wrong)
        if fn is None or user is None or fn.score > 0 or user.passed:
            continue
        m = lesson.mistakes.get(user.mistake)
        # (read off the result, a behaviour or a constant: the function's doing)
        if m is None or m.kind == "behaviour" or m.id == "constant_output":
            m = lesson.mistakes["from_wrong_function"]
            user.mistake, user.mistake_title = m.id, m.title
            user.message = _mistake_text(m, f"your `{check.uses_function}` function is wrong "
                                            f"({fn.mistake_title or 'see its check'}), and "
                                            f"`{check.outputs[0]}` comes from it.", check.name)
        else:
            user.notes.insert(0, f"Your `{check.uses_function}` function is wrong too (its "
                              f"check above): `{check.outputs[0]}` comes from it, so fix the "
                              "function first, then run this cell again.")
    _from_wrong_input(lesson, step, results)
    return Summary(list(results.values()))


def _from_wrong_input(lesson, step, results):
    """A result made in its cell from another output of the same cell that is wrong: said
    so, when the lesson has words for it (``from_wrong_input``) and the result is wrong in
    a way the other explains (NaN, or a behaviour read off its values); the other output
    is charged in its own check."""
    m = lesson.mistakes.get("from_wrong_input")
    for check in step.checks if m is not None else ():
        user = results.get(check.name)
        if user is None or user.passed:
            continue
        wrong = [(n, results[c.name]) for c in step.checks if c is not check
                 and c.name in results and results[c.name].score == 0
                 for n in c.outputs if n in check.upstream]
        own = lesson.mistakes.get(user.mistake)
        if wrong and (own is None or own.kind in ("behaviour", "nan")):
            n, other = wrong[0]
            user.mistake, user.mistake_title = m.id, m.title
            user.message = _mistake_text(m, f"`{check.outputs[0]}` is made in this cell from "
                                            f"your `{n}`, which is wrong ("
                                            f"{other.mistake_title or 'see its check'}).",
                                         check.name)


def judge_replay(grade_id: str, data: Mapping, own: Mapping | None = None, *,
                 strict: bool = False) -> Summary:
    """``grade_id``'s results from a replay of its step cell (src/replay.py).

    ``data``: the cell's own code on the reference inputs; that is what counts.
    ``own``: the same code on the student's own tensors from the cells before,
    when they differ from the reference (an earlier slip). When the code raised
    on the lesson's inputs but is fully right on its own (code adapted to that
    slip, such as ``weights @ value.double()`` after float64 weights), that
    result counts instead, so an earlier slip is never charged twice.
    """
    ref = judge(grade_id, data, strict=strict)
    if not isinstance(own, Mapping) or not _Reader(data).strings("cell.raised"):
        return ref  # (code that runs on the lesson's inputs is judged on them alone)
    mine = judge(grade_id, own, strict=strict)
    results = []
    for r, o in zip(ref.results, mine.results):
        if o.score == o.max_score > r.score:  # right, gradients included, for its inputs
            o.notes.append("Judged on your own tensors from the cells before, which differ "
                           "from the lesson's: on the lesson's, " + _short(
                               r.message.partition("\n")[0], 160))
            r = o
        results.append(r)
    return Summary(results)
