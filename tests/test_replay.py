"""The trusted replay (src/replay.py) in its sandboxed fork server, attacked.

Each notebook goes through ``grading.replay_steps`` exactly as grading
replays a submission (the release's set-up, the step cells found by grade_id,
a bubblewrap sandbox) and is judged by ``verify.judge_replay(strict=True)``.
Nothing outside a step cell may raise its score: the forged stub, added cells,
IPython hooks, patched modules and a prepared set-up all score 0; a softmax
that reaches a built-in softmax by another road loses the softmax's point.
"""

from __future__ import annotations

import copy

import nbformat
import numpy as np
import pytest

import verify
from src import grading, replay, sandbox
from tests.cohort.build import FORGERY  # the right names, made outside the step cells
from tests.notebook_utils import LESSON, SOURCE

pytestmark = pytest.mark.skipif(sandbox.unavailable_reason() is not None,
                                reason=f"no sandbox here: {sandbox.unavailable_reason()}")

SOLVED = nbformat.read(SOURCE, as_version=4)
#: {step cell id: its check cell id}, from the lesson's spec.
STEP_TESTS = {s.cell: s.test for s in verify.LESSON.steps}


def replay_notebook(nb, unsafe=None) -> dict:
    """The grading replay server's answer for a notebook's step cells (src/grading.py)."""
    from src import road

    cells = road.notebook_cells(nb)
    return grading.replay_steps(road.step_sources(verify.LESSON, cells), unsafe=unsafe)
STUB = nbformat.read(LESSON, as_version=4)


@pytest.fixture(scope="module", autouse=True)
def _server():
    yield
    grading.close_replay_servers()


def grades(nb) -> dict:
    """{test cell grade_id: strict score} of a notebook, replayed as grading does."""
    answer = replay_notebook(nb)
    out = {}
    for step, test_id in STEP_TESTS.items():
        data = answer[step]
        out[test_id] = (verify.judge_replay(test_id, data, answer.get(f"own:{step}"),
                                            strict=True).score
                        if isinstance(data, dict) else 0.0)
    return out


def with_cells(nb, sources=None, added=()):
    """A copy of ``nb`` with step cells' sources replaced and cells added after others."""
    nb = copy.deepcopy(nb)
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if sources and gid in sources:
            cell.source = sources[gid]
    for after, code in added:
        at = next(i for i, c in enumerate(nb.cells)
                  if c.metadata.get("nbgrader", {}).get("grade_id") == after)
        nb.cells.insert(at + 1, nbformat.v4.new_code_cell(code))
    return nb


FULL = {"cell4_projections_test": 2.0, "cell5_scores_test": 2.0, "cell6_softmax_test": 3.0,
        "cell7_values_test": 2.0}
ZERO = dict.fromkeys(FULL, 0.0)


def test_the_reference_gets_full_marks_and_the_stubs_nothing():
    assert grades(SOLVED) == FULL
    assert grades(STUB) == ZERO


@pytest.mark.parametrize("name, added", [
    ("a cell that computes everything", [("cell3_data", FORGERY)]),
    ("an IPython hook that fills the names before each check", [("cell3_data", (
        "def _fill(*args):\n" + "".join(f"    {line}\n" for line in FORGERY.splitlines())
        + "    globals().update(locals())\n"
        "get_ipython().events.register('post_run_cell', _fill)\n"))]),
    ("verify patched to pass every check", [("cell3_data", (
        "import verify\n"
        "ok = verify.CheckResult('x', True, 2.0, 2.0, 'all good')\n"
        "verify.judge = verify.judge_replay = lambda *a, **k: verify.Summary([ok])\n"
        "verify.observe = lambda *a, **k: {}\n"))]),
    ("torch patched so that the stubs' names are filled on import", [("cell3_data", (
        "import builtins\n_real = builtins.__import__\n"
        "def _imp(*a, **k):\n    m = _real(*a, **k)\n"
        "    import __main__\n    exec(" + repr(FORGERY) + ", __main__.__dict__)\n"
        "    return m\nbuiltins.__import__ = _imp\n"))]),
])
def test_nothing_outside_a_step_cell_earns_its_points(name, added):
    """The forged stub: cells 4-7 still raise NotImplementedError."""
    assert grades(with_cells(STUB, added=added)) == ZERO, name


def test_a_prepared_set_up_cell_earns_nothing():
    """The replay runs the release's set-up cells, never the student's copy."""
    setup = next(c for c in STUB.cells
                 if c.metadata.get("nbgrader", {}).get("grade_id") == "cell3_data")
    assert grades(with_cells(STUB, {"cell3_data": setup.source + "\n" + FORGERY})) == ZERO


def test_an_earlier_step_cell_cannot_fix_a_later_one():
    """Cell 4 right, and it makes `@` divide by √d_k: Cell 5 without the scaling still
    loses its points (each step cell runs in a process of its own)."""
    cells = {c.metadata["nbgrader"]["grade_id"]: c.source for c in SOLVED.cells
             if c.metadata.get("nbgrader", {}).get("solution")}
    cell4 = cells["cell4_projections"] + (
        "\n_mm = torch.Tensor.__matmul__\n"
        "torch.Tensor.__matmul__ = lambda a, b: _mm(a, b) / 8\n")
    cell5 = cells["cell5_scores"].replace(
        "attention_scores = raw_scores / math.sqrt(d_k)", "attention_scores = raw_scores")
    got = grades(with_cells(SOLVED, {"cell4_projections": cell4, "cell5_scores": cell5}))
    assert got == FULL | {"cell5_scores_test": 0.0}


def test_a_forked_worker_uses_its_parents_replay_server():
    """make grade forks a worker per student: each must use its slot's server of the
    run, alive and answering the first time, not start its own (that cost 5 s per
    submission while Popen.poll() called it dead, and 1.5 s while the servers were
    started from threads, whose end killed them: bwrap's --die-with-parent)."""
    import os
    import time

    grading.close_replay_servers()
    grading.start_replay_servers("", 2)
    servers = [grading.replay_server(slot=s) for s in (0, 1)]
    assert servers[0] is not servers[1]
    time.sleep(1.5)  # (a server started from a thread was SIGKILLed about 1 s after it ended)
    assert [s.proc.poll() for s in servers] == [None, None]
    for slot, server in enumerate(servers):
        pid = os.fork()
        if pid == 0:  # the worker: its slot's server, alive, answering
            code = 1
            try:
                grading.use_slot(slot)
                same = grading.replay_server() is server and server.alive()
                answer = replay_notebook(SOLVED)
                code = 0 if same and isinstance(answer["cell5_scores"], dict) and \
                    grading.replay_server() is server else 1
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert server.proc.poll() is None  # (the parent's own view: not a zombie)
        assert grading.replay_server(slot=slot) is server


def test_a_result_typed_in_from_the_lesson_earns_nothing():
    """Cell 7's numbers typed in from a run of the lesson, tied to the graph by a zero
    term so that they even require grad: right on the lesson's numbers, wrong on the
    replay's other sentence."""
    typed = verify.LESSON.reference()["attended_values"].round(7).tolist()
    cell7 = (f"typed = torch.tensor({typed})\n"
             "attended_values = typed + 0 * (attention_weights @ value)\n")
    answer = replay_notebook(with_cells(SOLVED, {"cell7_values": cell7}))
    summary = verify.judge_replay("cell7_values_test", answer["cell7_values"], strict=True)
    assert summary.score == 0.0
    assert summary.results[0].mistake == "right_only_here", summary.results[0].message


SOFTMAX = """def softmax(x, dim=-1):
{body}
attention_weights = softmax(attention_scores, dim=-1)
"""


@pytest.mark.parametrize("name, body, mistake", [
    ("another operator namespace", "    return torch.ops.aten._softmax(x, dim, False)",
     "uses_builtin_softmax"),
    ("torch.special", "    return torch.special.softmax(x, dim)", "uses_builtin_softmax"),
    ("softmin of the negation", "    return torch.nn.functional.softmin(-x, dim)",
     "uses_builtin_softmax"),
    # (a built-in softmax written in the function is named as such, run or not)
    ("recording switched off", "    with torch.no_grad():\n        return torch.softmax(x, dim)",
     "uses_builtin_softmax"),
    ("the inference mode", "    with torch.inference_mode():\n"
     "        return torch.softmax(x, dim).clone()", "uses_builtin_softmax"),
    ("recording switched off around your own softmax", "    with torch.no_grad():\n"
     "        e = torch.exp(x - x.amax(dim, keepdim=True))\n"
     "        return e / e.sum(dim, keepdim=True)", "softmax_leaves_autograd"),
    ("the course's own library", "    from src.attention import softmax as lib\n"
     "    return torch.from_numpy(lib(x.detach().numpy(), axis=dim))",
     "softmax_runs_course_code"),  # (it also leaves autograd: the first is named)
    ("np.exp inside", "    e = torch.from_numpy(np.exp((x - x.amax(dim, keepdim=True))"
     ".detach().numpy()))\n    return e / e.sum(dim, keepdim=True)", "softmax_leaves_autograd"),
    ("a built-in result pasted into the graph",
     "    return x - x.detach() + torch.softmax(x.detach(), dim)", None),
    ("a custom autograd Function", (
        "    class F(torch.autograd.Function):\n"
        "        @staticmethod\n        def forward(ctx, a):\n"
        "            return torch.softmax(a, dim)\n"
        "        @staticmethod\n        def backward(ctx, g):\n            return g\n"
        "    return F.apply(x)"), None),
])
def test_softmax_evasions_lose_the_softmax_point(name, body, mistake):
    cells = {c.metadata["nbgrader"]["grade_id"]: c.source for c in SOLVED.cells
             if c.metadata.get("nbgrader", {}).get("solution")}
    nb = with_cells(SOLVED, {"cell6_softmax": SOFTMAX.format(body=body)})
    answer = replay_notebook(nb)
    softmax = verify.judge_replay("cell6_softmax_test", answer["cell6_softmax"],
                                  strict=True).results[0]
    assert softmax.score == 0.0, (name, str(softmax))
    if mistake:
        assert softmax.mistake == mistake, (name, str(softmax))
    assert cells  # (the other cells stay the reference's)


#: Softmaxes with the right values on every probe, made by a built-in that holds a softmax
#: (or by an operation a softmax written by hand does not need), as students write them.
OTHER_BUILTINS = {
    "scaled_dot_product_attention, the scores as its mask": ("""\
    xt = x.movedim(dim, -1)  # (..., n): softmax over the last axis
    n = xt.shape[-1]
    q, k = torch.zeros(*xt.shape[:-1], 1), torch.zeros(*xt.shape[:-2], n, 1)
    out = F.scaled_dot_product_attention(q, k, torch.eye(n), attn_mask=xt)
    return out.movedim(-1, dim)""", "scaled_dot_product_attention"),
    "scaled_dot_product_attention on identity keys and values": ("""\
    xt = x.movedim(dim, -1)
    n = xt.shape[-1]
    eye = torch.eye(n)
    ok = ~torch.isinf(xt)
    q = torch.where(ok, xt, torch.zeros_like(xt))
    out = F.scaled_dot_product_attention(q, eye, eye, attn_mask=ok, scale=1.0)
    return out.movedim(-1, dim)""", "scaled_dot_product_attention"),
    "a sigmoid against the rest of the slice": ("""\
    m = x.amax(dim, keepdim=True)
    m = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
    e = torch.exp(x - m)
    rest = e.sum(dim, keepdim=True) - e
    return torch.nan_to_num(torch.sigmoid(x - m - torch.log(rest)))""", "torch.sigmoid"),
    "exp minus logcumsumexp's last entry": ("""\
    n = x.shape[dim]
    total = torch.logcumsumexp(x, dim).narrow(dim, n - 1, 1)
    return torch.nan_to_num(torch.exp(x - total))""", "torch.logcumsumexp"),
}


@pytest.mark.parametrize("name", sorted(OTHER_BUILTINS))
def test_a_softmax_made_by_another_builtin_loses_the_softmax_point(name):
    """Issue 20: the allow-list of lesson.SOFTMAX_OPS, not a list of built-ins, decides.
    Each of these has the right values (and gradient), and passed before it."""
    body, named = OTHER_BUILTINS[name]
    cell = "import torch.nn.functional as F\n\n" + SOFTMAX.format(body=body)
    answer = replay_notebook(with_cells(SOLVED, {"cell6_softmax": cell}))
    results = verify.judge_replay("cell6_softmax_test", answer["cell6_softmax"],
                                  strict=True).results
    softmax, weights = results
    assert softmax.score == 0.0 and softmax.mistake == "softmax_not_allowed_op", str(softmax)
    assert named in softmax.message and "exp" in softmax.message, softmax.message
    assert weights.score == weights.max_score, str(weights)  # (charged once, in the function)


#: Right softmaxes written with the allowed operations only: they keep the point.
ALLOWED = {
    "e ** x and clamp": """\
    m = x.amax(dim=dim, keepdim=True).clamp(min=-1e30)
    e = math.e ** (x - m)
    return e / e.sum(dim=dim, keepdim=True).clamp_min(1e-30)""",
    "a loop over the slices": """\
    cols = x.movedim(dim, -1)
    flat = cols.reshape(-1, cols.shape[-1])
    out = []
    for row in flat:
        m = row.max()
        e = torch.exp(row - m) if torch.isfinite(m) else torch.zeros_like(row)
        out.append(e / e.sum() if e.sum() > 0 else e)
    return torch.stack(out).reshape(cols.shape).movedim(-1, dim)""",
    "float64, in place on a clone, masked_fill": """\
    y = x.double().clone()
    m = y.max(dim=dim, keepdim=True)[0]
    y -= m.masked_fill(torch.isneginf(m), 0.0)
    y.exp_()
    return torch.nan_to_num(y / y.sum(dim, keepdim=True)).to(x.dtype)""",
    "the max by a sort, the sum by cumsum (blind set 21)": """\
    top = x.sort(dim=dim, descending=True).values.narrow(dim, 0, 1)
    top = torch.where(top == float('-inf'), 0.0, top)
    e = torch.exp(x - top)
    total = e.cumsum(dim=dim).narrow(dim, e.size(dim) - 1, 1)
    return e / torch.where(total == 0, 1.0, total)""",
}


@pytest.mark.parametrize("name", sorted(ALLOWED))
def test_a_softmax_of_allowed_operations_keeps_its_point(name):
    cell = SOFTMAX.format(body=ALLOWED[name])
    got = grades(with_cells(SOLVED, {"cell6_softmax": cell}))
    assert got["cell6_softmax_test"] == 3.0, name


def test_weights_made_by_scaled_dot_product_attention_beside_your_softmax_lose_half():
    """The apply line's graph is read with the same allow-list: weights from
    F.scaled_dot_product_attention, beside a right softmax, are not from it."""
    cells = {c.metadata["nbgrader"]["grade_id"]: c.source for c in SOLVED.cells
             if c.metadata.get("nbgrader", {}).get("solution")}
    own = cells["cell6_softmax"].split("attention_weights =")[0]
    cell = own + (
        "n = attention_scores.shape[-1]\n"
        "attention_weights = torch.nn.functional.scaled_dot_product_attention(\n"
        "    torch.zeros(1, n, 1), torch.zeros(1, n, 1), torch.eye(n),"
        " attn_mask=attention_scores)\n")
    answer = replay_notebook(with_cells(SOLVED, {"cell6_softmax": cell}))
    softmax, weights = verify.judge_replay("cell6_softmax_test", answer["cell6_softmax"],
                                           strict=True).results
    assert softmax.score == 1.0, str(softmax)
    assert weights.mistake == "weights_not_from_your_softmax", str(weights)
    assert weights.score == 1.0 and "scaled_dot_product_attention" in weights.message


def test_a_cell_that_kills_the_replay_costs_only_its_own_step():
    """A step cell that kills every process it can (the server included) scores 0 for
    that step; the other steps and the next submission are graded."""
    cells = {c.metadata["nbgrader"]["grade_id"]: c.source for c in SOLVED.cells
             if c.metadata.get("nbgrader", {}).get("solution")}
    killer = "import os, signal\nos.kill(-1, signal.SIGKILL)\n" + cells["cell5_scores"]
    got = grades(with_cells(SOLVED, {"cell5_scores": killer}))
    assert got["cell5_scores_test"] == 0.0
    assert grades(SOLVED) == FULL


def test_a_cell_that_never_ends_is_cut_at_its_deadline():
    cells = {c.metadata["nbgrader"]["grade_id"]: c.source for c in SOLVED.cells
             if c.metadata.get("nbgrader", {}).get("solution")}
    got = grades(with_cells(SOLVED, {"cell7_values": "while True:\n    pass\n"
                                     + cells["cell7_values"]}))
    assert got == FULL | {"cell7_values_test": 0.0}


def test_nothing_a_submission_writes_reaches_the_next_one():
    """Student A's Cell 5 leaves the right scores in /tmp; student B's Cell 5 only loads
    them: B earns nothing (the server removes what a submission's runs wrote)."""
    cells = {c.metadata["nbgrader"]["grade_id"]: c.source for c in SOLVED.cells
             if c.metadata.get("nbgrader", {}).get("solution")}
    leave = cells["cell5_scores"] + "\ntorch.save(attention_scores.detach(), '/tmp/scores.pt')\n"
    assert grades(with_cells(SOLVED, {"cell5_scores": leave}))["cell5_scores_test"] == 2.0
    take = "attention_scores = torch.load('/tmp/scores.pt')\n"
    assert grades(with_cells(SOLVED, {"cell5_scores": take}))["cell5_scores_test"] == 0.0


# ----------------------------------------------------- isolation between submissions
#: A step cell that finds the set-up the fork server hands every replay (the ``setup``
#: of the replay's own frames, read off the shipped source; a forked child holds it at
#: the server's addresses) and writes zeros over the server's x and layer weights
#: through /proc/<server>/mem, then does its own work.
OVERWRITE_SERVER = '''
import os as _os, sys as _sys
_f = _sys._getframe()
while _f is not None and "setup" not in _f.f_locals:
    _f = _f.f_back
_d = _f.f_locals["setup"] if _f is not None else {}
for _t in (_d["x"], _d["q_proj"].weight, _d["k_proj"].weight) if "x" in _d else ():
    try:
        with open(f"/proc/{_os.getppid()}/mem", "r+b", buffering=0) as _m:
            _m.seek(_t.data_ptr())
            _m.write(bytes(_t.numel() * _t.element_size()))
    except OSError:
        pass
'''


def _cells():
    return {c.metadata["nbgrader"]["grade_id"]: c.source for c in SOLVED.cells
            if c.metadata.get("nbgrader", {}).get("solution")}


def test_a_cell_cannot_write_the_servers_memory_for_the_next_submission():
    """The attack of the isolation issue: with it, every honest student graded after the
    attacker got 1/9. The server is not dumpable, so /proc/<server>/mem is refused."""
    attack = OVERWRITE_SERVER + _cells()["cell4_projections"]
    grades(with_cells(SOLVED, {"cell4_projections": attack}))
    assert grades(SOLVED) == FULL


def test_a_tampered_server_stops_and_names_the_submission_not_the_next(monkeypatch):
    """Were the server's memory writable (here: a plain server made dumpable for this
    test), its digest of the set-up catches the change after the attacker's runs: that
    submission is not graded, with the reason; the next one meets a fresh server."""
    monkeypatch.setenv("ATTENTION_TEST_DUMPABLE_SERVER", "1")
    attack = OVERWRITE_SERVER + _cells()["cell4_projections"]
    try:
        with pytest.raises(grading.GradingError, match="tampered with the replay server"):
            replay_notebook(with_cells(SOLVED, {"cell4_projections": attack}),
                                    unsafe=True)
        monkeypatch.delenv("ATTENTION_TEST_DUMPABLE_SERVER")
        answer = replay_notebook(SOLVED, unsafe=True)
        assert all(verify.judge_replay(t, answer[s], strict=True).score == FULL[t]
                   for s, t in STEP_TESTS.items())
    finally:
        grading.close_replay_servers()


def test_nothing_left_in_a_locked_folder_reaches_the_next_submission():
    """Student A leaves working code in a folder it then sets to mode 000; student B's
    Cell 5 opens the folder up again and runs that code (right on any inputs, so the
    second run cannot tell): B earns nothing, the folder is gone."""
    leave = _cells()["cell5_scores"] + (
        "\nimport os\nfor _d in ('/tmp/.k', '/dev/shm/.k', './.k'):\n"
        "    try:\n        os.makedirs(_d, exist_ok=True)\n"
        "        with open(_d + '/f.py', 'w') as _f:\n"
        "            _f.write('s = query @ key.transpose(-2, -1) / 8')\n"
        "        os.chmod(_d, 0)\n    except Exception:\n        pass\n")
    assert grades(with_cells(SOLVED, {"cell5_scores": leave}))["cell5_scores_test"] == 2.0
    take = ("import os\nattention_scores = None\nfor _d in ('/tmp/.k', '/dev/shm/.k', './.k'):\n"
            "    try:\n        os.chmod(_d, 0o700)\n"
            "        exec(open(_d + '/f.py').read())\n        attention_scores = s\n"
            "    except Exception:\n        pass\n")
    assert grades(with_cells(SOLVED, {"cell5_scores": take}))["cell5_scores_test"] == 0.0


#: Earns Cell 5's points only if the cell can start another process, whatever the way.
FORKS = '''
import os, subprocess, multiprocessing
_ways = []
for _way in ("fork", "subprocess", "multiprocessing"):
    try:
        if _way == "fork":
            _pid = os.fork()
            if _pid == 0:
                os._exit(0)
            os.waitpid(_pid, 0)
        elif _way == "subprocess":
            subprocess.run(["true"], check=True, timeout=2)
        else:
            _p = multiprocessing.get_context("fork").Process(target=int)
            _p.start()
            _p.join(2)
        _ways.append(_way)
    except Exception:
        pass
attention_scores = query @ key.transpose(-2, -1) / math.sqrt(d_k) if _ways else None
'''


def test_a_replayed_cell_cannot_start_a_process():
    """Children may not fork: a run is one process, so its memory cap (address space) is
    the whole submission's, not one of several processes' (three children of 1.5 GiB
    took 5.1 GiB before)."""
    assert grades(with_cells(SOLVED, {"cell5_scores": FORKS}))["cell5_scores_test"] == 0.0


#: Earns Cell 5's points only if it finds a writable directory outside the capped tmpfs.
WRITABLE_HOST = '''
import os
_found = []
_skip = ("/proc", "/sys", "/dev", "/tmp", os.getcwd())
for _root, _dirs, _files in os.walk("/"):
    if _root.startswith(_skip):
        _dirs[:] = []
        continue
    if os.access(_root, os.W_OK):
        try:
            open(os.path.join(_root, ".w"), "w").close()
            _found.append(_root)
        except OSError:
            pass
    _dirs[:] = [d for d in _dirs if not os.path.islink(os.path.join(_root, d))]
attention_scores = query @ key.transpose(-2, -1) / math.sqrt(d_k) if _found else None
'''


def test_a_replayed_cell_finds_no_writable_host_directory():
    """The replay binds no writable host folder (the IPC folder was one, with no cap):
    only its size-capped tmpfs are writable."""
    assert grades(with_cells(SOLVED, {"cell5_scores": WRITABLE_HOST}))[
        "cell5_scores_test"] == 0.0


def test_the_second_runs_inputs_are_drawn_afresh_and_reported():
    """Nothing in the release predicts the other sentence: two replays of the same cell
    get different second-run inputs, and the server's seed rebuilds them."""
    a, b = replay_notebook(SOLVED), replay_notebook(SOLVED)
    xa, xb = a["cell5_scores"]["variant.in.x"], b["cell5_scores"]["variant.in.x"]
    assert not np.array_equal(xa, xb)
    seed = int(str(a["cell5_scores"]["variant.seed"]))
    assert np.array_equal(verify.LESSON.variant_x(seed), xa)


# ------------------------------------------------- the course's own code is not yours
#: The lesson's spec module, where its reference softmax and chain live.
_R = "sys.modules['src.lessons.attention']"
_REF_SOFTMAX = f"import sys\nreference_softmax = {_R}.reference_softmax\n"
COURSE_CODE = {
    "the reference softmax imported as yours": (
        "cell6_softmax", f"import sys\nsoftmax = {_R}.reference_softmax\n"
        "attention_weights = softmax(attention_scores, dim=-1)\n"),
    "a wrapper around it": (
        "cell6_softmax", _REF_SOFTMAX + "def softmax(x, dim=-1):\n"
        "    return reference_softmax(x, dim)\n"
        "attention_weights = softmax(attention_scores, dim=-1)\n"),
    "found through a set-up helper's globals, the profiler turned off": (
        "cell6_softmax", "import sys\n_m = compare_with_torch_softmax.__globals__\n"
        "def softmax(x, dim=-1):\n    sys.setprofile(None)\n"
        f"    return {_R}.reference_softmax(x, dim)\n"
        "attention_weights = softmax(attention_scores, dim=-1)\n"),
    "the reference softmax relabelled as the cell's own code": (
        "cell6_softmax", f"import sys, types\n_c = {_R}.reference_softmax.__code__\n"
        "softmax = types.FunctionType(_c.replace(co_filename='<cell6_softmax>'),\n"
        "                             {'__builtins__': __builtins__, 'torch': torch})\n"
        "attention_weights = softmax(attention_scores, dim=-1)\n"),
    "the profile hook turned off and back on around the call": (
        "cell6_softmax", _REF_SOFTMAX + "def softmax(x, dim=-1):\n"
        "    _h = sys.getprofile()\n    sys.setprofile(None)\n"
        "    try:\n        return reference_softmax(x, dim)\n"
        "    finally:\n        sys.setprofile(_h)\n"
        "attention_weights = softmax(attention_scores, dim=-1)\n"),
    "called from another thread": (
        "cell6_softmax", _REF_SOFTMAX + "import threading\n"
        "def softmax(x, dim=-1):\n    _out = []\n"
        "    _t = threading.Thread(target=lambda: _out.append(reference_softmax(x, dim)))\n"
        "    _t.start()\n    _t.join()\n    return _out[0]\n"
        "attention_weights = softmax(attention_scores, dim=-1)\n"),
    "Cell 7 from the course's reference chain": (
        "cell7_values", f"import sys\nattended_values = {_R}"
        ".torch_reference(globals())['attended_values']\n"),
}


@pytest.mark.parametrize("name", sorted(COURSE_CODE))
def test_the_courses_own_code_earns_nothing(name):
    """Right on any inputs, with every node allowed, but not the student's code: the
    course's reference softmax, or its reference chain, run from a step cell."""
    step, code = COURSE_CODE[name]
    test_id = STEP_TESTS[step]
    got = grades(with_cells(SOLVED, {step: code}))
    assert got[test_id] < FULL[test_id] and got[test_id] <= FULL[test_id] - 1.0
    assert {k: v for k, v in got.items() if k != test_id} == {
        k: v for k, v in FULL.items() if k != test_id}


def test_a_file_the_set_up_left_is_restored_before_the_next_submission():
    """The set-up leaves files in the replay's scratch places (matplotlib's cache): student
    A appends working code to each it can write; student B's Cell 5 runs whatever code it
    finds there, and earns nothing (they are restored after every submission)."""
    mark = "#LEFT:"
    find = ("import os\n_files = [os.path.join(w, f) for top in ('/tmp', '/dev/shm', '.')\n"
            "          for w, _, fs in os.walk(top) for f in fs]\n")
    leave = _cells()["cell5_scores"] + "\n" + find + (
        "for _p in _files:\n    try:\n        with open(_p, 'a') as _f:\n"
        f"            _f.write('\\n{mark}s = query @ key.transpose(-2, -1) / 8\\n')\n"
        "    except Exception:\n        pass\n")
    grades(with_cells(SOLVED, {"cell5_scores": leave}))
    take = find + ("attention_scores = None\nfor _p in _files:\n    try:\n"
                   "        for _line in open(_p, errors='replace'):\n"
                   f"            if _line.startswith('{mark}'):\n"
                   f"                exec(_line[{len(mark)}:])\n"
                   "                attention_scores = s\n    except Exception:\n"
                   "        pass\n")
    assert grades(with_cells(SOLVED, {"cell5_scores": take}))["cell5_scores_test"] == 0.0


#: From a step cell: the server's limits, CPUs, priority and scheduling, which every later
#: child inherits (a lower RLIMIT_AS on the server cost three later students 4 points each).
SERVER_STATE = '''
import os, resource
_p = os.getppid()
for _try in (
        lambda: resource.prlimit(_p, resource.RLIMIT_AS, (2**30, 2**30)),
        lambda: resource.prlimit(_p, resource.RLIMIT_CPU, (1, 1)),
        lambda: os.sched_setaffinity(_p, {0}),
        lambda: os.setpriority(os.PRIO_PROCESS, _p, 19),
        lambda: os.setpriority(os.PRIO_USER, os.getuid(), 19),
        lambda: os.sched_setscheduler(_p, os.SCHED_IDLE, os.sched_param(0))):
    try:
        _try()
    except OSError:
        pass
'''


def test_a_cell_cannot_change_the_servers_limits_or_scheduling():
    before = grading.replay_server()
    attack = _cells()["cell7_values"] + SERVER_STATE
    assert grades(with_cells(SOLVED, {"cell7_values": attack}))["cell7_values_test"] == 2.0
    assert grading.replay_server() is before  # (not stopped: nothing was changed)
    assert grades(SOLVED) == FULL


def test_the_server_notices_a_change_of_its_own_state():
    """Were a change to get through, the server compares its limits, CPUs, priority and
    scheduling after every submission, as it does the set-up tensors."""
    import resource

    state = replay.server_state()
    assert replay.server_state() == state
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft - 1, hard))
    try:
        assert replay.server_state() != state
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert replay.server_state() == state


#: From a step cell: every fd the child holds (its answer pipe among them) set to signal
#: the server (F_SETOWN, FIOSETOWN) when it becomes ready: SIGIO kills the server as it
#: reads the answer.
SIGNAL_OWNER = '''
import fcntl, os, struct
for _fd in map(int, os.listdir("/proc/self/fd")):
    try:
        fcntl.fcntl(_fd, fcntl.F_SETFL, fcntl.fcntl(_fd, fcntl.F_GETFL) | os.O_ASYNC)
        fcntl.fcntl(_fd, fcntl.F_SETOWN, os.getppid())
    except OSError:
        pass
    try:
        fcntl.ioctl(_fd, 0x8901, struct.pack("i", os.getppid()))
    except OSError:
        pass
'''


def test_a_cell_cannot_make_an_fd_signal_the_server():
    before = grading.replay_server()
    attack = _cells()["cell7_values"] + SIGNAL_OWNER
    grades(with_cells(SOLVED, {"cell7_values": attack}))
    assert grading.replay_server() is before and before.proc.poll() is None
    assert grades(SOLVED) == FULL


def test_no_trace_of_a_submission_carries_a_message_to_the_next():
    """Student A leaves working code as a message in what the scratch places keep from
    the set-up: as a symlink that replaces a kept folder (in its target's name), in the
    timestamps of the kept files (7 bytes each, in path order), as an extended attribute
    of a kept file or of /tmp itself. Student B's Cell 5 reads every such channel and runs
    what it finds: B earns nothing."""
    msg = "s = query @ key.transpose(-2, -1) / 8"
    walk = ("[os.path.join(w, f) for top in ('/tmp', '/dev/shm') for w, _, fs in "
            "sorted(os.walk(top)) for f in sorted(fs)]")
    leave = _cells()["cell5_scores"] + f'''
import os, shutil
_files = {walk}
_chunks = [{msg!r}.encode()[i:i + 7] for i in range(0, len({msg!r}), 7)]
for _p, _c in zip(_files, _chunks):
    try:
        _t = int.from_bytes(_c.ljust(7, b' '), 'big')
        os.utime(_p, ns=(_t, _t))
    except Exception:
        pass
for _p in _files + ['/tmp', '/dev/shm', '.']:
    try:
        os.setxattr(_p, 'user.m', {msg!r}.encode())
    except Exception:
        pass
for _d in [os.path.join(w, d) for w, ds, _ in os.walk('/tmp') for d in ds][:1]:
    try:
        shutil.rmtree(_d)
        os.symlink('/x/' + {msg!r}.replace('/', '|'), _d)
    except Exception:
        pass
'''
    grades(with_cells(SOLVED, {"cell5_scores": leave}))
    take = f'''
import os
attention_scores, _found = None, []
_files = {walk}
try:
    _found.append(b''.join(int(os.stat(_p).st_mtime_ns).to_bytes(7, 'big')
                           for _p in _files[:6]).decode().strip())
except Exception:
    pass
for _top in ('/tmp', '/dev/shm', '.'):
    for _w, _ds, _fs in os.walk(_top):
        for _p in [_w] + [os.path.join(_w, n) for n in _ds + _fs]:
            try:
                if os.path.islink(_p):
                    _found.append(os.readlink(_p)[3:].replace('|', '/'))
                _found += [os.getxattr(_p, a).decode() for a in os.listxattr(_p)]
            except Exception:
                pass
for _m in _found:
    try:
        exec(_m)
        attention_scores = s
    except Exception:
        pass
'''
    assert grades(with_cells(SOLVED, {"cell5_scores": take}))["cell5_scores_test"] == 0.0


#: Student A leaves a message where the removal between submissions once failed: past
#: the path-length limit (18 folders of 250 characters), 1,200 folders deep (the removal
#: recursed), and in System V shared memory (the sandbox's IPC namespace outlives a
#: submission). The message is working code for Cell 5.
DEEP_AND_SHARED = '''
import os, ctypes
_msg = b"s = query @ key.transpose(-2, -1) / 8"
_here = os.getcwd()
try:
    os.chdir("/tmp")
    for _i in range(18):
        os.makedirs("D" * 250, exist_ok=True)
        os.chdir("D" * 250)
    open("msg", "wb").write(_msg)
    os.chdir("/tmp")
    for _i in range(1200):
        os.mkdir("a")
        os.chdir("a")
except Exception:
    pass
os.chdir(_here)
try:
    _l = ctypes.CDLL(None)
    _l.shmat.restype = ctypes.c_void_p
    _l.shmget.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_int]
    _id = _l.shmget(0x5eed0, 4096, 0o1000 | 0o666)
    if _id >= 0:
        _p = _l.shmat(_id, None, 0)
        ctypes.memmove(_p, _msg + b"\\0", len(_msg) + 1)
except Exception:
    pass
'''
READ_DEEP_AND_SHARED = '''
import os, ctypes
attention_scores, _found = None, []
_here = os.getcwd()
try:
    os.chdir("/tmp")
    for _i in range(18):
        os.chdir("D" * 250)
    _found.append(open("msg").read())
except Exception:
    pass
os.chdir(_here)
try:
    _l = ctypes.CDLL(None)
    _l.shmat.restype = ctypes.c_void_p
    _l.shmget.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_int]
    _id = _l.shmget(0x5eed0, 0, 0)
    if _id >= 0:
        _found.append(ctypes.string_at(_l.shmat(_id, None, 0)).decode())
except Exception:
    pass
for _m in _found:
    try:
        exec(_m)
        attention_scores = s
    except Exception:
        pass
'''


def test_nothing_deep_long_or_shared_carries_a_message_to_the_next():
    before = grading.replay_server()
    attack = _cells()["cell4_projections"] + DEEP_AND_SHARED
    grades(with_cells(SOLVED, {"cell4_projections": attack}))
    assert grading.replay_server() is before and before.proc.poll() is None
    got = grades(with_cells(SOLVED, {"cell5_scores": READ_DEEP_AND_SHARED}))
    assert got["cell5_scores_test"] == 0.0


#: Cell 7 writes its own bytes into every pipe it holds (its answer pipe among them): a
#: length-prefixed message that is not JSON, which once killed the server.
BAD_ANSWER = '''
import os, stat, struct
for _fd in map(int, os.listdir("/proc/self/fd")):
    try:
        if stat.S_ISFIFO(os.fstat(_fd).st_mode):
            os.write(_fd, struct.pack("<I", 5) + b"{bad}")
    except OSError:
        pass
os._exit(0)
'''


def test_a_malformed_answer_costs_only_its_own_step():
    before = grading.replay_server()
    got = grades(with_cells(SOLVED, {"cell7_values": BAD_ANSWER}))
    assert got == FULL | {"cell7_values_test": 0.0}
    assert grading.replay_server() is before and grades(SOLVED) == FULL


def test_the_replays_limits_are_the_configured_ones():
    """c.TrustedScores.replay_run_seconds reaches the fork server (grading.configure)."""
    from src import sandbox as sb

    grading.close_replay_servers()
    grading.configure(run_seconds=0.5)
    try:
        answer = replay_notebook(with_cells(SOLVED, {"cell5_scores": "while True:\n    pass\n"}))
        assert "within 0.5 s" in answer["cell5_scores"]
    finally:
        grading.configure(run_seconds=sb.LIMITS.replay_run_seconds)
        grading.close_replay_servers()
    with pytest.raises(ValueError, match="unknown limits"):
        grading.configure(run_second=1)


def test_the_scratch_snapshot_leaves_out_what_is_bound_in_from_another_file_system(tmp_path):
    """The replay server snapshots its scratch places (/tmp ...) to restore them after each
    submission. A path bound read-only into the sandbox's /tmp (the Python environment of
    a course under /tmp, bound at its own path) is not scratch: read into the snapshot, a
    venv under /tmp held 1.2-1.9 GiB in every server (make test-hub, a clone in /tmp)."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    bound = tmp_path / "venv"
    bound.mkdir()
    (bound / "big.so").write_bytes(b"\0" * 2**20)
    probe = ("import sys; sys.path.insert(0, sys.argv[1]); from src import replay; "
             "open('/tmp/mine', 'w').write('set-up'); "
             "print('\\n'.join(sorted(replay._snapshot(['/tmp']))))")
    root = str(Path(__file__).resolve().parent.parent)
    # (the course and its Python are bound back in too: a clone under /tmp is the case)
    binds = [a for p in dict.fromkeys((str(bound), root, sys.prefix))
             for a in ("--ro-bind", p, p)]
    out = subprocess.run(
        [shutil.which("bwrap"), "--dev-bind", "/", "/", "--tmpfs", "/tmp", *binds,
         sys.executable, "-c", probe, root],
        capture_output=True, text=True, timeout=60, check=True).stdout.split()
    assert "/tmp/mine" in out  # what the set-up writes there is kept ...
    assert str(bound / "big.so") not in out and str(bound) not in out  # ... not the bind
