"""What a lesson spec is: the engine reads a lesson only through these classes.

A lesson (``src/lessons/<name>.py``) builds one :class:`Lesson`: its set-up, its
steps (:class:`Step`: a step cell the student writes and the check cell after it),
each step's graded checks (:class:`Check`), the reference, tolerances, and the
words of its mistakes (:class:`Mistake`). The replay, the judge, the road, the
live check, ``verify.py``, release, grading, the hub and the benchmarks ask the
spec; none of them names a cell, a step or a tensor. NumPy only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable


@dataclass(frozen=True)
class Mistake:
    """A common wrong version of a check: its text, and how to reproduce it.

    ``step`` is the check that names it ("any": every check that judges
    tensors). A mistake is recognised by one of:

    - ``reproduce(inp)``: the wrong output(s) computed from the check's inputs
      (``inp`` holds float64 arrays by name, and ``name``: the output judged);
    - ``fns``: for a function check, the wrong function itself, one ``f(x, dim)``
      per variant (float32 NumPy); they are probed like the student's and applied
      to the inputs of the check that uses the function (``in_weights``);
    - ``factor``: the output is this multiple of the right one;
    - ``error`` / ``line``: regular expressions over a raised error and the line
      that raised it (``example`` is a real such error and line);
    - a fact observed about the tensor or the function (``kind`` names the rule
      of the judge that recognises it: "dtype", "lost_batch", "detached",
      "builtin", ...; tests/catalogue.py shows how each is made).

    ``cost`` is the share of the check's points it costs; ``strict_only``
    mistakes are deducted only in the graded (strict) run.
    """

    id: str
    step: str
    title: str
    cause: str
    next_step: str
    shows: str | tuple = ""  # what it computes, in words (one per variant when a tuple)
    reproduce: Callable | None = None
    fns: tuple = ()
    factor: float | None = None
    error: str | None = None
    line: str | None = None
    example: tuple = ()  # (error text, line) of a real case, for error entries
    kind: str | None = None
    cost: float = 1.0
    strict_only: bool = False
    in_weights: bool = True  # function mistakes: also looked for in the check using it
    #: {check name, or "any": the text of ``{example}`` in ``next_step``}: an entry met in
    #: several checks shows each an example from its own cell.
    examples: dict = field(default_factory=dict)
    #: The same for ``{example}`` in ``cause``.
    causes: dict = field(default_factory=dict)
    #: Found by the search over the formula's changes: the message opens with the change
    #: found, in the spec's words ("`attention_weights` is the formula with
    #: `attention_scores` transposed"), the title only naming its kind.
    said_first: bool = False

    def next_step_for(self, check: str = "any") -> str:
        """``next_step`` with the example of ``check`` (else the "any" one)."""
        if not self.examples:
            return self.next_step
        return self.next_step.format(example=self.examples.get(check, self.examples["any"]))

    def cause_for(self, check: str = "any") -> str:
        """``cause`` with the example of ``check`` (else the "any" one)."""
        if not self.causes:
            return self.cause
        return self.cause.format(example=self.causes.get(check, self.causes["any"]))


@dataclass(frozen=True)
class Formula:
    """An output of a check as a contraction of the check's inputs, for the search over the
    formula's small changes (``src/checks/judge.py``): ``einsum`` (NumPy's notation) over
    ``operands`` (names of the check's inputs: tensors, a layer's weight ...), times
    ``scale``, plus ``bias`` (a name, or ""). ``indices`` names each index of ``einsum`` in
    the words a message uses ("key", "feature").

    The search tries, each alone: a mean, max or min where the formula sums over an index;
    the sum over another index of the same size; an operand replaced by a hard choice (1
    at its largest entry along the summed index, 0 elsewhere); the operands rounded to a
    lower precision (float16, bfloat16).
    """

    einsum: str
    operands: tuple
    indices: dict
    scale: float = 1.0
    bias: str = ""
    #: {change: mistake id}: changes the lesson has an entry of its own for (its words, with
    #: what the search found as the evidence): "mean", "max", "min", "sum over <index>",
    #: "hard", "float16", "bfloat16", "tied", "distance".
    named: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Rearrangement:
    """An output that is a rearrangement of one input (``source``): ``arrange(source)``
    puts its numbers in the formula's places (a reshape and a transpose), ``undo(arr,
    inp)`` takes what follows the rearrangement off an output (a product with an
    invertible matrix), or None. A wrong output made of the source's numbers in other
    places is read back to where each of its numbers comes from (``src/checks/judge.py``)
    and named ``mistake``, its message saying one place of the output in ``words``."""

    source: str
    arrange: Callable
    mistake: str
    undo: Callable | None = None


@dataclass(frozen=True)
class Check:
    """One graded part of a step: what it must make, from what, and how it is judged.

    ``kind`` "tensor": the outputs are tensors compared with ``reference``;
    "function": the output is a function the student defines, probed on the
    lesson's probes. ``upstream``: the inputs the outputs must depend on (and
    that an earlier slip may have changed); ``extras``: tensors a mistaken step may
    have used instead. ``reference(inp, name)``: the right output ``name`` (float64)
    from the inputs ``inp``; ``vjp(inp, g, out)``: the right gradients of sum(out * g)
    with respect to each upstream input. ``diagnose``: the lesson's own readings of a
    wrong result, by stage of the judge (see ``src/checks/judge.py``).
    """

    name: str
    points: float
    title: str
    outputs: tuple
    upstream: tuple = ()
    extras: tuple = ()
    kind: str = "tensor"
    reference: Callable | None = None
    vjp: Callable | None = None
    diagnose: dict = field(default_factory=dict)
    #: (name: layer) when the outputs are made by the set-up's layers (their gradients
    #: with respect to the layers' parameters are judged instead of the inputs').
    layers: dict = field(default_factory=dict)
    #: The function check whose mistakes may show in this check's output.
    uses_function: str = ""
    #: What the check's public function (verify.check_<name>) says it checks.
    doc: str = ""
    #: {output name: :class:`Formula`}: the outputs the search over a contraction's changes
    #: knows the form of.
    formulas: dict = field(default_factory=dict)
    #: {output name: :class:`Rearrangement`}: outputs that are one input's numbers moved.
    rearranged: dict = field(default_factory=dict)
    #: {output name: the inputs it alone depends on}, where that is fewer than ``upstream``
    #: (a check of several outputs, each made from one input).
    uses: dict = field(default_factory=dict)

    @property
    def all(self):
        return self.outputs + self.upstream + self.extras

    @property
    def arguments(self):
        """The public check function's parameters: the inputs and outputs, then the extras
        (keyword-only)."""
        return (self.upstream + self.outputs, self.extras)


@dataclass(frozen=True)
class Figure:
    """A heatmap a check cell draws of a value its check read, with a text table of it.

    ``value``: the name drawn (the check's ``values_of(value)``: real, finite numbers
    of the lesson's shape, else nothing is drawn); ``check``: the check that read it;
    ``when`` "drawable": whenever it can be drawn, "scored": only once the check scored;
    ``not_right``: added to the title while the check has not passed. The same entry
    draws it in the student's kernel and in the feedback of a graded notebook.
    """

    value: str
    check: str
    title: str
    value_label: str = "weight"
    when: str = "drawable"
    not_right: str = ""

    def title_for(self, result) -> str:
        return self.title + ("" if result.passed else self.not_right)

    def wanted(self, result) -> bool:
        return self.when == "drawable" or (self.when == "scored" and result.score > 0)


@dataclass(frozen=True)
class Step:
    """A step cell the student writes (its cell id is also its nbgrader grade_id) and
    the check cell after it, with the graded checks that cell runs."""

    cell: str
    test: str
    number: int
    checks: tuple
    #: What the cell reads: watched for in-place changes, the roots of its gradients.
    inputs: tuple
    #: Whether a second run on other inputs (Lesson.variant_x) tells right code apart
    #: from code right on the lesson's numbers only.
    variant: bool = False
    #: The call the check cell makes (for messages and the benchmarks).
    call: str = ""
    #: The heatmaps its check cell draws (:class:`Figure`).
    figures: tuple = ()

    @property
    def names(self):
        """Every name the step must assign, in order."""
        return tuple(n for c in self.checks for n in c.outputs)

    @property
    def title(self):
        return f"Cell {self.number}"


@dataclass(frozen=True, eq=False)  # (compared and hashed by identity)
class Lesson:
    """Everything the engine knows about one lesson (see the module's docstring)."""

    name: str
    #: The student's notebook (without .ipynb), and the reference it is made from.
    notebook: str
    source: str
    setup_cells: tuple
    setup_names: tuple
    steps: tuple
    shapes: dict
    axes: dict
    #: float64 arrays of every tensor of the lesson, from the shipped data.
    reference: Callable
    #: float64 arrays of every tensor of the lesson for other embeddings x.
    chain: Callable
    #: In the replay (torch): the lesson's tensors made from a namespace's set-up.
    torch_reference: Callable
    #: The second run's input (float32) for a seed, and the name it replaces.
    variant_x: Callable
    variant_input: str
    #: Set-up tensors no step cell may change in place.
    watched_setup: tuple
    mistakes: dict
    entries: tuple
    tolerances: dict
    probes: Callable = tuple
    facts: dict = field(default_factory=dict)
    #: What this lesson decided counts as right where a careful reader could differ:
    #: {id: the rule in words} (docs/internals.md lists them; a blind set's figures count them
    #: apart).
    decisions: dict = field(default_factory=dict)
    #: The labels of its heatmaps' rows and columns (the sentence's tokens).
    labels: tuple = ()
    #: Set-up tensors the first steps read that ``torch_reference`` makes (lesson 2's query,
    #: key, value): the replay injects them as it injects earlier steps' tensors (so the
    #: second run's x reaches them, and gradients are read with respect to them).
    given: tuple = ()

    # ------------------------------------------------------------- derived
    @cached_property
    def checks(self) -> dict:
        """check name -> Check, in lesson order."""
        return {c.name: c for s in self.steps for c in s.checks}

    @cached_property
    def step_of_check(self) -> dict:
        return {c.name: s for s in self.steps for c in s.checks}

    @cached_property
    def by_cell(self) -> dict:
        """step cell id -> Step."""
        return {s.cell: s for s in self.steps}

    @cached_property
    def by_test(self) -> dict:
        """check cell id -> Step."""
        return {s.test: s for s in self.steps}

    @cached_property
    def grade_cells(self) -> dict:
        """check cell id -> {check name: points}: the one source of the notebook's points."""
        return {s.test: {c.name: c.points for c in s.checks} for s in self.steps}

    @cached_property
    def points(self) -> dict:
        return {c.name: c.points for c in self.checks.values()}

    @cached_property
    def official(self) -> tuple:
        """Every name a step makes, in lesson order."""
        return tuple(n for s in self.steps for n in s.names)

    @cached_property
    def made_in(self) -> dict:
        """name -> the number of the cell that makes it."""
        return {n: s.number for s in self.steps for n in s.names}

    @cached_property
    def max_score(self) -> float:
        return float(sum(self.points.values()))

    def later_than(self, a: str, b: str) -> bool:
        """Whether step cell ``a`` comes after ``b``."""
        order = list(self.by_cell)
        return order.index(a) > order.index(b)

    @cached_property
    def error_entries(self) -> tuple:
        return tuple(m for m in self.entries if m.error)

    @cached_property
    def _value_entries(self) -> dict:
        out = {}
        for name, check in self.checks.items():
            found = [m for m in self.entries if m.step == name and (
                m.reproduce or m.factor or m.kind == "new_layers")]
            if check.uses_function:
                found += [m for m in self.entries
                          if m.step == check.uses_function and m.fns and m.in_weights]
            out[name] = tuple(found)
        return out

    def value_entries(self, check: str) -> tuple:
        """Entries recognised from values for the check ``check``, in catalogue order."""
        return self._value_entries.get(check, ())

    def function_entries(self, check: str) -> tuple:
        """The wrong functions of the function check ``check``, in catalogue order."""
        return tuple(m for m in self.entries if m.step == check and m.fns)
