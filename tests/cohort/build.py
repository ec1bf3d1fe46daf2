"""Synthetic submissions for grading tests and the grading benchmark.

A submission starts from the student release (course/release/attention/
lesson.ipynb) and fills each solution cell with the reference's code (markers
removed), then applies a case's edits, as a student would. Expected per-cell
scores come from running the same code in-process, in notebook order, with
verify's checks after each step: an independent path to compare nbgrader's
real results with.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import nbformat

import verify
from src.course import ASSIGNMENT, NOTEBOOK, course_dir
from tests.catalogue import CATALOGUE, SCALE
from tests.notebook_utils import SOURCE, STEP_CELLS, cells_by_id, run_steps

#: grade cell id -> the checks it runs (their points add up to the cell's).
GRADE_CELLS = {
    "cell4_projections_test": ("projections",),
    "cell5_scores_test": ("attention_scores",),
    "cell6_softmax_test": ("softmax", "attention_weights"),
    "cell7_values_test": ("attended_values",),
}
#: After which step cell each grade cell runs.
RUNS_AFTER = {"cell4_projections_test": "cell4_projections",
              "cell5_scores_test": "cell5_scores",
              "cell6_softmax_test": "cell6_softmax",
              "cell7_values_test": "cell7_values"}
_MARKER = re.compile(r"^\s*### (BEGIN|END) SOLUTION\s*\n", re.M)
NO_SCALING = {"cell5_scores": [(SCALE, "attention_scores = raw_scores")]}


def solved_sources() -> dict:
    """Each solution cell as a student who solved it would leave it."""
    return {cid: _MARKER.sub("", src) for cid, src in cells_by_id(SOURCE).items()
            if cid in STEP_CELLS}


def expected_scores(replace=None) -> dict:
    """{grade cell id: points} for the edits ``replace``, checked in notebook order."""
    checks = {
        "projections": lambda ns: verify.check_projections(ns["query"], ns["key"], ns["value"]),
        "attention_scores": lambda ns: verify.check_attention_scores(
            ns["query"], ns["key"], ns["attention_scores"]),
        "softmax": lambda ns: verify.check_softmax(ns["softmax"]),
        "attention_weights": lambda ns: verify.check_attention_weights(
            ns["attention_scores"], ns["attention_weights"]),
        "attended_values": lambda ns: verify.check_attended_values(
            ns["attention_weights"], ns["value"], ns["attended_values"],
            attention_scores=ns["attention_scores"], query=ns["query"], key=ns["key"]),
    }
    codes = solved_sources()
    out = {}
    for grade_id, after in RUNS_AFTER.items():
        upto = STEP_CELLS[: STEP_CELLS.index(after) + 1]
        later = {c: "" for c in STEP_CELLS[len(upto):]}  # not run yet at this point
        edits = {c: pairs for c, pairs in (replace or {}).items() if c in upto}
        ns = run_steps({c: codes[c] for c in upto} | later, edits)
        out[grade_id] = float(sum(checks[name](ns).score for name in GRADE_CELLS[grade_id]))
    return out


def submission_notebook(replace=None, test_cell_edits=None, drop=(), added=(), solved=True):
    """The release with the solutions filled in (unless not ``solved``: the stubs stay),
    ``replace`` edits applied, cells in ``drop`` deleted and ``added`` cells [(after cell
    id, "code"|"markdown", source)] inserted, as a student who adds cells of their own."""
    release_nb = course_dir() / "release" / ASSIGNMENT / f"{NOTEBOOK}.ipynb"
    nb = nbformat.read(release_nb, as_version=4)
    codes = solved_sources() if solved else {}
    for cell in nb.cells:
        cid = cell.get("id")
        if cid in codes and cell.metadata.get("nbgrader", {}).get("solution"):
            src = codes[cid]
            for old, new in (replace or {}).get(cid, []):
                assert old in src, (cid, old)
                src = src.replace(old, new)
            cell.source = src
        if test_cell_edits and cid in test_cell_edits:
            cell.source = test_cell_edits[cid]
    nb.cells = [c for c in nb.cells if c.get("id") not in drop]
    for n, (after, kind, text) in enumerate(added):
        new = (nbformat.v4.new_code_cell if kind == "code" else nbformat.v4.new_markdown_cell)(
            text, id=f"added-{n}")
        at = next(i for i, c in enumerate(nb.cells) if c.get("id") == after)
        nb.cells.insert(at + 1, new)
    return nbformat.writes(nb)


#: Every name of the lesson computed right, by code outside the step cells.
FORGERY = """query, key, value = q_proj(x), k_proj(x), v_proj(x)
attention_scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)
def softmax(x, dim=-1):
    e = torch.exp(x - x.amax(dim=dim, keepdim=True).nan_to_num(neginf=0.0))
    return e / e.sum(dim=dim, keepdim=True).clamp_min(1e-30)
attention_weights = softmax(attention_scores)
attended_values = attention_weights @ value
"""

FAKE_VERIFY = '''"""A tampered verify.py: every check passes."""
class CheckResult:
    passed = True
    score = max_score = 9.0
    points = 9.0
    def __bool__(self):
        return True
def _ok(*args, **kwargs):
    return CheckResult()
check_projections = check_attention_scores = check_softmax = _ok
check_attention_weights = check_attended_values = check_all = _ok
Summary = lambda results: CheckResult()
'''

REDEFINE = """
import verify  # a student's attempt to pass the check without the right answer

_fake = verify.CheckResult("attention_scores", True, 2.0, 2.0, "all good")
verify.check_attention_scores = lambda *args, **kwargs: _fake


def check_attention_scores(*args, **kwargs):
    return _fake
"""


def hostile_cases() -> list[dict]:
    """Every case: name, files to write, expected outcome.

    ``expected`` is {grade id: points} (None: needs manual grading),
    ``fails`` marks a submission nbgrader cannot grade at all, with the reason
    the report must give.
    """
    full = expected_scores()
    no_scaling = expected_scores(NO_SCALING)
    cases = [
        dict(name="correct", nb=submission_notebook(), expected=full),
        dict(name="untouched", nb=None, expected={g: 0.0 for g in GRADE_CELLS}),
        dict(name="raises", nb=submission_notebook(
            {"cell7_values": [("attended_values = attention_weights @ value",
                               "attended_values = attention_weights @ key.transpose(-2, -1)")]}),
             expected=full | {"cell7_values_test": 0.0}),
        dict(name="infinite-loop", nb=submission_notebook(
            {"cell7_values": [("attended_values = attention_weights @ value",
                               "while True:\n    pass")]}),
             expected=full | {"cell7_values_test": 0.0}),
        dict(name="huge-memory", nb=submission_notebook(
            {"cell6_softmax": [("attention_weights = softmax(",
                                "hog = torch.ones(2**31)  # 8 GiB\n"
                                "attention_weights = softmax(")]}),
             # Cell 6 raises MemoryError (the weights earn nothing, its softmax its point);
             # Cell 7's own code is right, and the replay gives it the right weights.
             expected=full | {"cell6_softmax_test": 1.0}),
        # The forged stub: every step cell still raises NotImplementedError, and the right
        # tensors are made elsewhere (an added cell; an IPython hook before each check).
        dict(name="forged-stub", nb=submission_notebook(
            solved=False, added=[("cell3_data", "code", FORGERY)]),
             expected={g: 0.0 for g in GRADE_CELLS}),
        dict(name="forged-stub-hook", nb=submission_notebook(solved=False, added=[(
            "cell3_data", "code", "def _fill(*args):\n    exec(" + repr(FORGERY)
            + ", globals())\nget_ipython().events.register('pre_run_cell', _fill)\n")]),
             expected={g: 0.0 for g in GRADE_CELLS}),
        dict(name="deleted-graded-cell", nb=submission_notebook(drop=("cell5_scores_test",)),
             expected=full | {"cell5_scores_test": None}),
        dict(name="edited-locked-test", nb=submission_notebook(
            NO_SCALING, test_cell_edits={"cell5_scores_test": "2.0"}), expected=no_scaling),
        dict(name="redefined-verify", nb=submission_notebook(
            {"cell5_scores": [(SCALE, "attention_scores = raw_scores" + REDEFINE)]}),
             expected=no_scaling),
        dict(name="tampered-verify-py", nb=submission_notebook(NO_SCALING),
             extra={"verify.py": FAKE_VERIFY}, expected=no_scaling),
        dict(name="not-json", raw="{ this is not a notebook", fails="is not valid JSON"),
        dict(name="empty-file", raw="", fails="lesson.ipynb is an empty file"),
        # nbgrader refuses a submission folder without the notebook: a named failure.
        dict(name="missing-notebook", raw=None, fails="no lesson.ipynb in the submission"),
    ]
    return cases


def mistake_cases() -> list[dict]:
    """One submission per catalogued mistake."""
    return [dict(name=f"mistake-{m}", nb=submission_notebook(edits),
                 expected=expected_scores(edits)) for m, edits, *_ in CATALOGUE]


def write_submissions(cases, base: Path | None = None) -> list[str]:
    """Write the cases under course/submitted/<name>/attention/; return the names."""
    base = base or course_dir() / "submitted"
    release_nb = course_dir() / "release" / ASSIGNMENT / f"{NOTEBOOK}.ipynb"
    for case in cases:
        folder = base / case["name"] / ASSIGNMENT
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / f"{NOTEBOOK}.ipynb"
        if "raw" in case:
            if case["raw"] is not None:
                target.write_text(case["raw"], encoding="utf-8")
        elif case.get("nb", 0) is None:
            target.write_bytes(release_nb.read_bytes())
        elif case.get("symlink_notebook") == "source":  # graded as the instructor's file
            target.symlink_to(course_dir() / "source" / ASSIGNMENT / f"{NOTEBOOK}.ipynb")
        else:
            target.write_text(case["nb"], encoding="utf-8")
        for name, text in case.get("extra", {}).items():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_text(text, encoding="utf-8")
        for name, link in case.get("symlinks", {}).items():
            (folder / name).symlink_to(link)
    return [c["name"] for c in cases]


def attack_cases(slow_cells: int = 0, cell_seconds: int = 9) -> list[dict]:
    """Hostile submissions for every class of attack on the grader (tests/cohort/attacks.py).

    ``expected`` holds what an honest grader gives the answers the attacker really
    wrote; victims hold correct answers and a canary of their own.
    """
    import sysconfig

    from src.course import ROOT
    from tests.cohort import attacks as a

    fmt = dict(course=str(course_dir()), repo=str(ROOT), success=a.SUCCESS, linger=a.LINGER,
               venv_site=sysconfig.get_paths()["purelib"])
    full, no_scaling = expected_scores(), expected_scores(NO_SCALING)

    def after(cell, code, edits=None, **extra):
        return submission_notebook(edits, added=[(cell, "code", code)], **extra)

    def forged(code, shows_full=False):  # wrong scores (no scaling), a line faking the check
        nb = submission_notebook(NO_SCALING, added=[("cell4_projections_test", "code", code)])
        return _showing_full_marks(nb) if shows_full else nb

    def in_step(code):  # right answers, then the attack inside Cell 4 (the replay runs it)
        guarded = "\ntry:\n" + textwrap.indent(code.strip("\n"), "    ") + (
            "\nexcept BaseException:\n    pass\n")
        answer = "value = v_proj(x)"
        return submission_notebook({"cell4_projections": [(answer, answer + guarded)]})

    cases = [
        dict(name="victim-1", nb=after("cell3_data", f"# {a.VICTIM_SECRET}\n"), expected=full),
        dict(name="victim-2", nb=submission_notebook(), expected=full),
        dict(name="attack-read-secrets", expected=full,
             nb=after("cell4_projections_test", a.READ_SECRETS.format(**fmt))),
        dict(name="attack-tamper-course", expected=no_scaling,
             nb=after("cell4_projections_test", a.TAMPER_COURSE.format(**fmt), NO_SCALING)),
        dict(name="attack-probe-writes", expected=full,
             nb=after("cell4_projections_test", a.PROBE_WRITES.format(**fmt))),
        dict(name="attack-hijack-kernels", expected=full,
             nb=after("cell7_values_test", a.HIJACK_KERNELS.format(**fmt))),
        dict(name="attack-linger", expected=full,
             nb=after("cell4_projections_test", a.LINGER_PROCESSES.format(**fmt))),
        dict(name="attack-derail-grader", expected=full,
             nb=after("cell7_values_test", a.DERAIL_GRADER.format(**fmt))),
        dict(name="attack-network", expected=full,
             nb=after("cell4_projections_test", a.NETWORK.format(**fmt))),
        dict(name="attack-fork-bomb", expected=full,
             nb=after("cell7_values_test", a.FORK_BOMB.format(**fmt))),
        dict(name="attack-big-file", expected=full,
             nb=after("cell5_scores_test", a.BIG_FILE.format(**fmt))),
        dict(name="forge-interactivity", nb=forged(a.FORGE_INTERACTIVITY), expected=no_scaling),
        dict(name="forge-allclose", nb=forged(a.FORGE_ALLCLOSE), expected=no_scaling),
        dict(name="forge-reload", nb=forged(a.FORGE_RELOAD, True), expected=no_scaling,
             shown_differs=True),
        dict(name="forge-repr", nb=forged(a.FORGE_REPR), expected=no_scaling),
        dict(name="forge-formatter", nb=forged(a.FORGE_FORMATTER, True), expected=no_scaling,
             shown_differs=True),
        dict(name="forge-rewrite-verify", nb=forged(a.FORGE_REWRITE_VERIFY),
             expected=no_scaling),
        dict(name="sigint-ignoring-loop", expected=full | {"cell7_values_test": 0.0},
             nb=submission_notebook({"cell7_values": [(
                 "attended_values = attention_weights @ value", a.SIGINT_LOOP)]})),
        dict(name="output-flood", expected=full, nb=_flooded()),
        dict(name="xss-feedback", expected=full, nb=submission_notebook(added=[
            ("cell4_projections_test", "code", a.XSS.format(**fmt)),
            ("cell4_projections_test", "markdown", a.XSS_MARKDOWN.format(**fmt))])),
        dict(name="symlinked-notebook", symlink_notebook="source", fails="is a symlink"),
        dict(name="symlink-inside", nb=submission_notebook(), symlinks={"data": "../../.."},
             fails="data is a symlink"),
        dict(name="[b]ob", nb=submission_notebook(), fails="file pattern"),
        dict(name="*", nb=submission_notebook(), fails="file pattern"),
        dict(name="bob", nb=submission_notebook(NO_SCALING), expected=no_scaling),
        dict(name="alice", nb=submission_notebook(), expected=full, lookalike=True),
        dict(name="\uff41lice", nb=submission_notebook(), expected=full, lookalike=True),
        dict(name="no-grade-id", fails="grade_id", nb=_without_grade_id()),
        dict(name="attack-cpu-hog", expected=full,
             nb=after("cell7_values_test", a.CPU_HOG)),
        dict(name="attack-escape-limits", expected=full,
             nb=after("cell4_projections_test", a.ESCAPE_LIMITS.format(**fmt))),
        # its own answers are right: the forged upstream tensors must not blow the judge up
        dict(name="attack-judge-bomb", expected=full,
             nb=after("cell4_projections_test", a.JUDGE_BOMB.format(**fmt))),
        dict(name="attack-big-message", expected=full,
             nb=after("cell4_projections_test", a.BIG_MESSAGE)),
        dict(name="xss-markdown-link", expected=full, extra={"summary.html": a.EXTRA_HTML},
             nb=submission_notebook(added=[("cell3_data", "markdown", a.MARKDOWN_LINK)])),
    ]
    # The same attacks inside a step cell, after its right answer: the replay runs them in
    # its sandbox; they must change nothing and earn nothing.
    for name, code in (("read-secrets", a.READ_SECRETS), ("tamper-course", a.TAMPER_COURSE),
                       ("probe-writes", a.PROBE_WRITES), ("network", a.NETWORK),
                       ("big-file", a.BIG_FILE), ("escape-limits", a.ESCAPE_LIMITS),
                       ("linger", a.LINGER_PROCESSES), ("fork-bomb", a.FORK_BOMB)):
        cases.append(dict(name=f"in-step-{name}", expected=full,
                          nb=in_step(code.format(**fmt))))
    cases += issue14_cases(fmt) + issue20_cases()
    if slow_cells:
        sleepy = [("cell4_projections_test", "code", a.SLOW_CELL.format(seconds=cell_seconds))
                  ] * slow_cells
        # Cells of its own are never run: the sleeps cost nothing, in time or points.
        cases.append(dict(name="many-slow-cells", nb=submission_notebook(added=sleepy),
                          expected=full))
    for case in cases:
        case.setdefault("fmt", fmt)
    assert len({c["name"] for c in cases}) == len(cases)
    return cases


def _showing_full_marks(text: str) -> str:
    """The notebook as a student who typed full marks into each check cell's output."""
    nb = nbformat.reads(text, as_version=4)
    for cell in nb.cells:
        md = cell.metadata.get("nbgrader", {})
        if md.get("grade"):
            cell.outputs = [nbformat.v4.new_output("execute_result", execution_count=1,
                                                   data={"text/plain": repr(md["points"])})]
    return nbformat.writes(nb)


def _flooded() -> str:
    """Right answers, and 4 MB of output saved in one cell of the file."""
    nb = nbformat.reads(submission_notebook(), as_version=4)
    cell = next(c for c in nb.cells if c.get("id") == "cell3_data")
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="spam " * 200_000)
                    for _ in range(4)]
    return nbformat.writes(nb)


def _without_grade_id():
    """A student who pasted a test cell's metadata onto a cell of their own, minus its id."""
    nb = nbformat.reads(submission_notebook(), as_version=4)
    for cell in nb.cells:
        if cell.get("id") == "cell5_scores":
            del cell.metadata["nbgrader"]["grade_id"]
    return nbformat.writes(nb)


def issue14_cases(fmt) -> list[dict]:
    """What reaches the instructor's browser, honest notebooks grading once failed on, and
    submissions too big or too busy (issue 14), as attackers and students write them."""
    import base64

    from src import sandbox
    from tests.cohort import attacks as a

    full = expected_scores()
    png = base64.b64encode(bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d4944415478da63f8cfc0f01f0005000201a5e5e7d30000000049454e44ae426082")
    ).decode()
    pasted = nbformat.reads(submission_notebook(), as_version=4)
    picture = nbformat.v4.new_markdown_cell("My sketch of the weights: "
                                            "![image.png](attachment:image.png)")
    picture["attachments"] = {"image.png": {"image/png": png}}
    pasted.cells.insert(3, picture)
    markdown = [("cell3_data", "markdown", md) for md in
                a.HOSTILE_MARKDOWN + [a.OVERLAY, a.BEACON]]
    big = "x" * (sandbox.LIMITS.notebook_mb * 10**6 + 1)
    return [
        dict(name="pasted-picture", nb=nbformat.writes(pasted), expected=full),
        dict(name="xss-second-render", nb=submission_notebook(added=markdown), expected=full),
        dict(name="active-files", nb=submission_notebook(), expected=full,
             extra=a.ACTIVE_FILES | {f"junk/{i}.txt": "x" * 1000 for i in range(2006)}),
        dict(name="trojan-source", expected=full, trojan=True,
             nb=submission_notebook(added=[("cell4_projections_test", "code", a.TROJAN)])),
        dict(name="deep-nesting", expected=full,
             nb=submission_notebook(added=[("cell3_data", "markdown", a.DEEP_NESTING)])),
        dict(name="fill-disk", expected=full,
             nb=submission_notebook(added=[("cell4_projections_test", "code",
                                            a.FILL_DISK.format(**fmt))])),
        dict(name="huge-notebook", fails="over the cap of",
             nb=submission_notebook(added=[("cell3_data", "markdown", big)])),
        dict(name="many-cells", fails="cells, over the cap of",
             nb=submission_notebook(added=[("cell3_data", "markdown", "note")] *
                                    sandbox.LIMITS.max_cells)),
    ]


def issue20_cases() -> list[dict]:
    """Metadata a renderer could revive (issue 20): widget state with active HTML in the
    notebook's metadata and in every cell's, a widget the kernel makes while it is graded,
    unknown keys, a tag and an attachment carrying the same payload; the answers are right."""
    import base64

    from tests.cohort import attacks as a

    nb = nbformat.reads(submission_notebook(added=[
        ("cell4_projections_test", "code", a.KERNEL_WIDGET),
        ("cell3_data", "markdown", "My sketch: ![sketch](attachment:sketch.svg)")]),
        as_version=4)
    state, payload = a.widget_state(a.METADATA_PAYLOAD), a.METADATA_PAYLOAD
    nb.metadata.update(widgets=state, title=payload, notes={"html": payload})
    svg = f'<svg xmlns="http://www.w3.org/2000/svg"><script>{payload}</script></svg>'
    for cell in nb.cells:
        cell.metadata.update(widgets=state, jupyter={"source_hidden": payload},
                             notes={"html": payload})
        cell.metadata["tags"] = [*cell.metadata.get("tags", []), payload]
        if cell.cell_type == "markdown" and "attachment:" in cell.source:
            cell["attachments"] = {"sketch.svg": {
                "image/svg+xml": base64.b64encode(svg.encode()).decode(),
                "text/html": payload}}
    return [dict(name="widget-state", nb=nbformat.writes(nb), expected=expected_scores())]
