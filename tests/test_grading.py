"""Secure grading, piece by piece: the sandbox (a real kernel inside bwrap), reading exports
the kernel wrote (hostile files), submissions and ids that are refused, feedback that runs
no script, failure reasons. The whole pipeline on real submissions: tests/test_course.py
and the hostile cohort (make test-cohort)."""

import base64
import io
import json
import os
import re
import socket
import subprocess
import sys
import zipfile
from pathlib import PurePosixPath

import nbformat
import numpy as np
import pytest
from nbclient import NotebookClient

import verify
from src import grading, replay, sandbox
from src import visualizations as viz
from src.course import ROOT, log_reason

needs_bwrap = pytest.mark.skipif(sandbox.unavailable_reason() is not None,
                                 reason=f"no sandbox here: {sandbox.unavailable_reason()}")


# ------------------------------------------------------------ the sandbox itself
PROBE = r'''
import json, os, resource, socket, subprocess
seen = dict(cwd=os.getcwd(), uid=os.getuid(), pid=os.getpid(), root=sorted(os.listdir("/")),
            here=sorted(os.listdir(".")), course=os.path.exists({course!r}),
            repo_config=os.path.exists({repo!r} + "/nbgrader_config.py"),
            nproc=resource.getrlimit(resource.RLIMIT_NPROC)[0],
            address_space=resource.getrlimit(resource.RLIMIT_AS)[0],
            fsize=resource.getrlimit(resource.RLIMIT_FSIZE)[0],
            caps=open("/proc/self/status").read().split("CapEff:")[1].split()[0])
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=2)
    seen["loopback"] = "reached"
except OSError as exc:
    seen["loopback"] = type(exc).__name__
for path in ("verify.py", {venv!r} + "/zz.pth", "/grading/ok.txt", "scratch.txt"):
    try:
        with open(path, "a") as fh:
            fh.write("x")
        seen["write " + path] = "ok"
    except OSError as exc:
        seen["write " + path] = exc.strerror
subprocess.Popen(["sh", "-c", "(exec -a {linger} sleep 300) &"])
try:
    os.setsid()
    seen["setsid"] = "ok"
except OSError as exc:
    seen["setsid"] = exc.strerror
import ctypes, multiprocessing
libc = ctypes.CDLL(None, use_errno=True)
seen["unshare"] = os.strerror(ctypes.get_errno()) if libc.syscall(272, 0x10000000) else "ok"
seen["add_key"] = libc.syscall(248, b"user", b"k", b"v", 1, -4) >= 0
with multiprocessing.get_context("fork").Pool(2) as pool:  # semaphores in /dev/shm
    seen["pool"] = pool.map(abs, [-1, -2])
print(json.dumps(seen))
'''


@needs_bwrap
def test_a_kernel_in_the_sandbox_sees_only_what_it_may(tmp_path):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    linger = f"linger-test-{os.getpid()}"
    code = PROBE.format(course=str(tmp_path), repo=str(ROOT), port=port, linger=linger,
                        venv=sys.prefix)
    box = sandbox.Sandbox({n: ROOT / n for n in ("verify.py", "src", "data")})
    cap = sandbox.LIMITS.message_mb * 2**20
    big = ("from IPython.display import display\n"
           f"display({{'text/plain': 'a' * {cap // 2}}}, raw=True)\n"  # under the cap
           f"display({{'text/plain': 'b' * {cap + 1}}}, raw=True)\n")  # over it
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in (code, big)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}

    class Manager(sandbox.SandboxKernelManager):
        pass

    Manager.sandbox = box
    try:
        # Once the over-size message is refused, no "idle" follows: the second cell ends
        # after nbclient's iopub_timeout (4 s), which also leaves the probe's output time
        # to arrive on a loaded machine.
        NotebookClient(nb, kernel_manager_class=Manager, timeout=60).execute()
        text = "".join(o.get("text", "") for o in nb.cells[0].outputs if o.get("name") == "stdout")
        seen = __import__("json").loads(text)
    finally:
        box.cleanup()
        listener.close()
    assert seen["cwd"] == sandbox.WORKDIR and seen["pid"] == 2  # own PID namespace
    assert int(seen["caps"], 16) == 0  # no capabilities
    assert seen["here"] == ["data", "src", "verify.py"]
    assert not seen["course"] and not seen["repo_config"]
    # The root holds the mounts bwrap made and the parents of bound paths, nothing else.
    # Derived, not listed: the venv (and so its top directory) sits wherever the clone is.
    bound = sandbox._system_paths() + [sandbox.WORKDIR, str(box.run_dir)]
    allowed = {"tmp", "dev", "proc"} | {PurePosixPath(p).parts[1] for p in bound}
    assert set(seen["root"]) <= allowed, sorted(set(seen["root"]) - allowed)
    assert seen["loopback"] == "ConnectionRefusedError"  # no network, loopback included
    refused = ("Read-only file system", "Permission denied")
    assert seen["write verify.py"] in refused
    assert seen[f"write {sys.prefix}/zz.pth"] in refused
    assert seen["write scratch.txt"] == "ok"
    assert seen["write /grading/ok.txt"] != "ok"  # (no export folder any more: nothing there)
    assert seen["nproc"] == sandbox.LIMITS.processes
    assert seen["address_space"] == int(sandbox.LIMITS.memory_gb * 2**30)
    assert seen["fsize"] == sandbox.LIMITS.file_mb * 2**20
    if os.getuid() == 0:
        assert seen["uid"] >= 1 << 20  # a uid of its own, never root
    if sandbox.seccomp_filter() is not None:  # x86_64: the seccomp filter
        assert seen["setsid"] == seen["unshare"] == "Operation not permitted"
        assert seen["add_key"] is False
    assert seen["pool"] == [1, 2]
    # the grader takes a message under the cap and refuses one over it
    sizes = [len(o["data"]["text/plain"]) for o in nb.cells[1].outputs]
    assert sizes == [cap // 2]
    lingering = subprocess.run(["pgrep", "-f", linger], capture_output=True, text=True)
    assert lingering.stdout == ""  # the daemon died with the sandbox


def test_without_bwrap_grading_stops_and_names_the_fix(tmp_path):
    (tmp_path / "gradebook.db").write_bytes(b"")
    env = dict(os.environ, PATH=str(tmp_path), ATTENTION_COURSE_DIR=str(tmp_path))
    env.pop(grading.UNSAFE_ENV, None)
    res = subprocess.run([sys.executable, "-m", "src.course", "grade"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2
    assert "bubblewrap (bwrap) is not installed" in res.stderr
    assert "apt-get install bubblewrap" in res.stderr and "UNSAFE=1" in res.stderr


def test_the_judge_runs_with_a_memory_limit_and_a_deadline():
    data = {"query": np.ones((1, 6, 64), np.float32)}
    summary = grading.judge_isolated("cell4_projections_test", data)
    assert (summary.score, summary.max_score) == (0.0, 2.0) and "Cell 4" in str(summary)

    def greedy(grade_id, data, own, strict):  # a judge that hostile data could make explode
        return np.ones(2**33, np.uint8)

    def slow(grade_id, data, own, strict):
        import time
        time.sleep(30)

    with pytest.raises(grading.GradingError, match="failed"):
        grading.judge_isolated("g", {}, memory=2**30, judge=greedy)
    with pytest.raises(grading.GradingError, match="took over 1 s"):
        grading.judge_isolated("g", {}, seconds=1, judge=slow)


# --------------------------------------------- reading the replay's data as data
def _npz(arrays, compressed=False) -> bytes:
    buf = io.BytesIO()
    (np.savez_compressed if compressed else np.savez)(buf, **arrays)
    return buf.getvalue()


def _members() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for i in range(600):
            zf.writestr(f"a{i}.npy", b"")
    return buf.getvalue()


def test_the_replays_data_is_read_back_as_data():
    from src.replay import unpack

    got = unpack(_npz({"query": np.ones((1, 6, 64), np.float32), "note": np.array("text")}))
    assert got["query"].dtype == np.float32 and str(got["note"]) == "text"


@pytest.mark.parametrize("make, why", [
    (lambda: _npz({"x": np.zeros(50_000_000, np.uint8)}, True), "too many or too large"),
    (lambda: _npz({"x": np.array([{"evil": 1}], dtype=object)}), "not a valid .npz"),
    (lambda: b"PK\x03\x04 not a zip", "not a valid .npz"),
    (_members, "too many or too large"),
    (lambda: _npz({"x": np.zeros(2**20)}), "over the cap"),
], ids=["zip-bomb", "pickle", "junk", "members", "oversize"])
def test_hostile_replay_data_is_refused_without_harm(make, why):
    """What a replay child sends crosses to the grader as .npz bytes: a child's code could
    write any bytes there (src/replay.py, unpack)."""
    from src.replay import DATA_BYTES, unpack

    with pytest.raises(ValueError, match=why):
        unpack(make(), cap=min(DATA_BYTES, 2**20))


# ------------------------------------------------------ submissions and ids
@pytest.mark.parametrize("student, ok", [
    ("alice", True), ("Émile-O'Brien", True), ("[b]ob", False), ("*", False), ("a?c", False),
    ("..", False), ("a/b", False), ("tab\tname", False), ("", False)])
def test_student_ids_are_used_literally_or_refused(student, ok):
    problem = grading.id_problem(student)
    assert (problem is None) == ok, problem
    if student in ("[b]ob", "*"):
        assert "file pattern" in problem and "grade other students" in problem


def test_look_alike_ids_are_grouped():
    assert grading.lookalike_groups(["alice", "ａｌｉｃｅ", "ALICE", "bob"]) == [
        ["ALICE", "alice", "ａｌｉｃｅ"]]


def test_symlinks_and_special_files_anywhere_are_named(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "notes.txt").symlink_to("/etc/hostname")
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "lesson.ipynb").write_text("{}")
    assert sorted(grading.submission_problems(tmp_path)) == [
        "pipe is not a regular file", "sub/notes.txt is a symlink (to /etc/hostname)"]


def test_failure_reasons_are_the_real_ones():
    log = """[ERROR] There was an error processing assignment: x
    Traceback (most recent call last):
      File "a.py", line 1, in f
    KeyError: 'grade_id'
[ERROR] Please see the the above traceback for details on the specific errors.
nbgrader.converters.base.NbGraderException: Please see the the above traceback for details"""
    assert log_reason(log) == "'grade_id' (KeyError)"
    # an exception whose name ends in neither Error nor Exception is still the reason
    pasted = log.replace("KeyError: 'grade_id'", "nbconvert.filters.markdown_mistune."
                         "InvalidNotebook: missing attachment: image.png")
    assert log_reason(pasted) == "missing attachment: image.png (InvalidNotebook)"
    assert log_reason("[ERROR] No notebooks were matched by 'x'") == \
        "[ERROR] No notebooks were matched by 'x'"


# ------------------------------------------------------------------ feedback
#: A real 1x1 PNG, as base64 (what a kernel's figure or a pasted picture holds).
PNG = base64.b64encode(bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d4944415478da63f8cfc0f01f0005000201a5e5e7d30000000049454e44ae426082")
).decode()


def test_feedback_keeps_only_inert_outputs_and_defuses_markdown():
    code = nbformat.v4.new_code_cell("x", outputs=[
        nbformat.v4.new_output("display_data", data={
            "text/html": "<script>alert(1)</script>", "text/plain": "<IPython HTML>",
            "image/svg+xml": "<svg onload=alert(1)/>", "image/png": PNG}),
        nbformat.v4.new_output("display_data", data={"application/javascript": "alert(1)"}),
        # not images: a PNG label on other bytes, a quote that would end the src attribute
        nbformat.v4.new_output("display_data", data={"image/png": "iVBOR"}),
        nbformat.v4.new_output("display_data", data={"image/jpeg": 'x" onerror="alert(1)'}),
        nbformat.v4.new_output("stream", name='stdout" onmouseover="alert(1)', text="hi")])
    md = nbformat.v4.new_markdown_cell(
        "<details><summary>Hint</summary>ok</details> <script>alert(1)</script>"
        "<img src=x onerror=alert(1)> <a href='javascript:alert(1)'>x</a>")
    raw = nbformat.v4.new_raw_cell("<script>alert(1)</script>",
                                   metadata={"raw_mimetype": "text/html"})
    nb = nbformat.v4.new_notebook(cells=[code, md, raw])
    nb, _ = grading.SafeOutputs().preprocess(nb, {})
    outs = nb.cells[0].outputs
    assert [o["data"] for o in outs if "data" in o] == [
        {"text/plain": "<IPython HTML>", "image/png": PNG}]
    assert [o["name"] for o in outs if o["output_type"] == "stream"] == ["stdout"]
    assert "<details><summary>Hint</summary>" in nb.cells[1].source
    for cell in nb.cells[1:]:
        for active in ("<script", "onerror", "javascript:", "<img"):
            assert active not in cell.source
    assert "raw_mimetype" not in nb.cells[2].metadata


#: Markdown as attackers write it, each aimed at one renderer or at the second render.
HOSTILE_MARKDOWN = [
    "[notes](javascript:alert(1))", "[r][1]\n\n[1]: javascript:alert(1)",
    "<javascript:alert(1)>", "<a href='javascript:alert(1)'>x</a>",
    "<a href='jav&#x09;ascript:alert(1)'>x</a>", "<a href=' vbscript:msgbox(1)'>x</a>",
    "<a href='data:text/html,<script>alert(1)</script>'>x</a>",
    "<img src=x onerror=alert(1)>", "<script>alert(1)</script>",
    "<svg><script>alert(1)</script></svg>", "<iframe src='data:text/html,x'></iframe>",
    # escaped HTML and code spans: inert once, live again if rendered twice
    "&lt;a href=\"javascript:alert(1)\"&gt;click&lt;/a&gt;",
    "`[click](javascript:alert(1))` and `<img src=x onerror=alert(1)>`",
    "\\[click\\](javascript:alert(1)) \\<script\\>alert(1)\\</script\\>",
    "```\n[click](javascript:alert(1))\n<script>alert(1)</script>\n```",
    # restyling the page: a Bootstrap backdrop, a fixed banner, an id the page uses
    "<div class='modal-backdrop in' style='position:fixed;z-index:9999'>9 / 9</div>",
    "<span id='notebook-container' class='navbar-fixed-top'>9 / 9</span>",
    # beacons: remote images in every syntax
    "![x](https://tracker.example/x.png)", "<img src='//tracker.example/x.png'>",
    "![x][i]\n\n[i]: http://tracker.example/x.png", "<img srcset='http://t.example/x 1x'>",
    # MathJax's own links and classes
    "$\\href{javascript:alert(1)}{x}$ $\\class{modal-backdrop}{x}$ $\\style{position:fixed}{x}$",
]
_ACTIVE = re.compile(r"\bon\w+\s*=|javascript|vbscript|\bclass\s*=|\bstyle\s*=|\bid\s*=|"
                     r"\bsrcset|https?:|//tracker|\\href|\\class|\\style", re.I)


def _tags(html):
    """(name, attributes) of every tag in ``html``, attributes with entities decoded."""
    import html as htmlmod

    return [(name.lower(), htmlmod.unescape(attributes))
            for name, attributes in re.findall(r"<([a-zA-Z][\w-]*)([^>]*)>", html)]


@pytest.mark.parametrize("markdown", HOSTILE_MARKDOWN)
def test_markdown_is_defused_whatever_the_syntax_and_stays_so_when_rendered_again(markdown):
    import html as htmlmod

    from nbconvert.filters.markdown import markdown2html

    stored = grading.safe_markdown(markdown)
    # the Formgrader renders the stored markdown again, with no sanitiser
    for html in (stored, markdown2html(stored)):
        for name, attributes in _tags(html):
            assert name in grading.SAFE_TAGS, (markdown, html)
            assert not _ACTIVE.search(attributes), (markdown, html)
            assert "data:" not in attributes, (markdown, html)
        text = htmlmod.unescape(re.sub(r"<[^>]+>", "", html))
        assert not re.search(r"\\(href|class|style)", text), (markdown, text)
    # a render leaves the stored form as it is, and storing it again changes nothing
    assert markdown2html(stored).strip() == stored
    assert grading.safe_markdown(stored) == stored


def test_markdown_keeps_its_look_and_safe_pictures():
    stored = grading.safe_markdown(
        "# Title\n\nSome *emphasis*, `code` and [a link](https://pytorch.org/docs).\n\n"
        "![sketch](attachment:sketch.png) ![vector](attachment:v.svg) "
        "![gone](attachment:missing.png) ![inline](data:image/png;base64," + PNG + ")",
        attachments={"sketch.png": {"image/png": PNG},
                     "v.svg": {"image/svg+xml": "PHN2Zz48L3N2Zz4="}})
    tags = _tags(stored)
    assert ("h1", "") in tags and ("em", "") in tags and ("code", "") in tags
    assert ("a", ' href="https://pytorch.org/docs"') in tags
    images = [a for name, a in tags if name == "img"]
    assert len(images) == 2 and all(f"data:image/png;base64,{PNG}" in a for a in images)
    assert "[vector: not shown" in __import__("html").unescape(stored)


def test_deep_nesting_is_flattened():
    from src import safe_html

    stored = grading.safe_markdown("<div>" * 20_000 + "deep" + "</div>" * 20_000)
    assert "deep" in stored and stored.count("<div>") <= safe_html.MAX_DEPTH + 1


def test_invisible_and_bidi_characters_are_shown_and_named():
    # Trojan Source: the comment hides the early return from a reader
    code = nbformat.v4.new_code_cell(
        "access = 'user'\nif access != 'none\u202e \u2066# admin only\u2069 \u2066':\u200b\n"
        "    pass\n")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("plain"), code])
    nb, resources = grading.RevealInvisibles().preprocess(nb, {})
    assert "\u27e6U+202E\u27e7" in nb.cells[1].source and "\u202e" not in nb.cells[1].source
    assert nb.cells[0].source == "plain"
    notes = resources[grading._KEY]["notes"]
    assert len(notes) == 1 and notes[0].startswith("cell #1 (code)")
    for name in ("U+202E RIGHT-TO-LEFT OVERRIDE", "U+2066 LEFT-TO-RIGHT ISOLATE",
                 "U+2069 POP DIRECTIONAL ISOLATE", "U+200B ZERO WIDTH SPACE"):
        assert name in notes[0]


# ------------------------------------------------------------- metadata (issue 20)
def test_only_the_metadata_grading_needs_is_kept():
    """Widget state and unknown keys go, from the notebook and from cells of every type;
    nbgrader's cell metadata, the kernelspec, language_info and the lesson's tags stay.
    Graded for real, with the kernel's own widgets: tests/cohort/test_course.py."""
    import json

    from src.course import load_config

    html = "<img src=x onerror=alert(1)><script>alert(1)</script>"
    widgets = {"application/vnd.jupyter.widget-state+json": {"state": {"m": {
        "model_name": "HTMLModel", "state": {"value": html}}}}}
    nbgrader = {"grade": True, "solution": False, "locked": True, "points": 2,
                "grade_id": "cell5_scores_test", "schema_version": 3}
    lesson = nbformat.read(ROOT / "lesson.ipynb", as_version=4)
    kernel = {k: lesson.metadata[k] for k in ("kernelspec", "language_info")}
    cells = [nbformat.v4.new_code_cell("x"), nbformat.v4.new_markdown_cell("m"),
             nbformat.v4.new_raw_cell("r")]
    for cell in cells:
        cell.metadata.update(nbgrader=nbgrader, widgets=widgets, jupyter={"x": html},
                             tags=["raises-exception", html], collapsed=True)
    cells.append(nbformat.v4.new_code_cell("y"))
    nb = nbformat.v4.new_notebook(cells=cells, metadata={
        **kernel, "widgets": widgets, "title": html,
        "kernelspec": {**kernel["kernelspec"], "env": {"X": html}}})
    cells[3].metadata["tags"] = html  # not a list: dropped whole
    nb, _ = grading.ClearStudentMetadata().preprocess(nb, {})
    assert html not in json.dumps(nb) and "widget" not in json.dumps(nb)
    assert nb.metadata == kernel
    for cell in cells[:3]:
        assert cell.metadata == {"nbgrader": nbgrader, "tags": ["raises-exception"]}
    assert cells[3].metadata == {}
    nbformat.validate(nb)
    # the lesson's tags are all kept, and both pipelines that write a notebook clear it
    assert {t for c in lesson.cells for t in c.metadata.get("tags", [])} <= grading.KEPT_TAGS
    config = load_config()
    assert grading.ClearStudentMetadata in config.Autograde.autograde_preprocessors
    assert config.GenerateFeedback.preprocessors[0] is grading.ClearStudentMetadata


# ------------------------------------------------------------- copied files
def test_only_allowed_files_beside_the_notebook_are_copied(tmp_path):
    """nbgrader's own walk (find_all_files, which autograde and feedback use) skips a
    submission whole; CopyAllowedFiles brings only what the instructor listed."""
    from nbgrader.utils import find_all_files

    sub = tmp_path / "submitted" / "mallory" / "attention"
    (sub / "deep" / "er").mkdir(parents=True)
    for name in ("lesson.ipynb", "page.shtml", "page.xht", "x.svgz", ".hidden.html",
                 "deep/er/a.html", "figures.png", "notes.txt"):
        (sub / name).write_text("<script>alert(1)</script>")
    source = tmp_path / "source" / "attention"
    source.mkdir(parents=True)
    (source / "verify.py").write_text("x = 1\n")
    ignore = [".ipynb_checkpoints", "*.pyc", *grading.copy_ignore(tmp_path)]
    assert find_all_files(str(sub), ignore + ["*.ipynb"]) == []
    assert find_all_files(str(source), ignore + ["*.ipynb"]) == [str(source / "verify.py")]
    (tmp_path / "autograded" / "mallory" / "attention").mkdir(parents=True)
    step = grading.CopyAllowedFiles(patterns=["*.png", "deep/*/*.txt"], max_files=5)
    step.preprocess(nbformat.v4.new_notebook(), {"metadata": {"path": str(sub)}})
    copied = sorted(p.relative_to(tmp_path).as_posix()
                    for p in (tmp_path / "autograded").rglob("*") if p.is_file())
    assert copied == ["autograded/mallory/attention/figures.png"]


def test_limits_are_stated_in_nbgrader_config():
    from src.course import load_config

    config = load_config()
    lim = sandbox.LIMITS
    for name in ("memory_gb", "processes", "file_mb", "tmp_mb", "replay_run_seconds",
                 "replay_student_seconds", "judge_seconds", "judge_memory_gb"):
        assert config.TrustedScores[name] == getattr(lim, name), name
    assert config.SubmittedOutputs.output_kb == lim.output_kb
    assert config.RefuseUnsafeSubmission.max_notebook_mb == lim.notebook_mb
    assert config.RefuseUnsafeSubmission.max_cells == lim.max_cells
    assert config.Grading.worker_memory_gb == lim.worker_memory_gb
    assert config.Grading.feedback_seconds == lim.feedback_seconds
    # every one of them reaches the replay server's sandbox (one place: TRUSTED_TRAITS)
    assert set(grading.TRUSTED_TRAITS.values()) == {
        n for n in config.TrustedScores if n in grading.TrustedScores.class_traits()}
    # make grade TIMEOUT= BUDGET= override the replay's two times for one run
    over = load_config(timeout=2.5, budget=7)
    assert over.TrustedScores.replay_run_seconds == 2.5
    assert over.TrustedScores.replay_student_seconds == 7.0


def test_autograding_runs_no_kernel_and_keeps_the_submitted_outputs():
    """No step of the autograde pipeline executes the notebook: nbgrader's Execute (and so
    any kernel) is not in it, ClearOutput neither; the outputs a student submitted stay,
    capped, and each check cell's shown score is what the submitted file showed."""
    from nbgrader.preprocessors import ClearOutput, Execute

    from src.course import load_config

    config = load_config()
    steps = [*config.Autograde.sanitize_preprocessors, *config.Autograde.autograde_preprocessors]
    assert not [s for s in steps if issubclass(s, (Execute, ClearOutput))]
    assert grading.SubmittedOutputs in steps
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("print('mine')", outputs=[
            nbformat.v4.new_output("stream", name="stdout", text="mine\n")]),
        nbformat.v4.new_code_cell("x", outputs=[nbformat.v4.new_output(
            "stream", name="stdout", text="z" * 4000) for _ in range(3)]),
        nbformat.v4.new_code_cell("result.points", metadata={"nbgrader": {
            "grade": True, "grade_id": "cell5_scores_test", "points": 2.0}}, outputs=[
            nbformat.v4.new_output("execute_result", data={"text/plain": "2.0"},
                                   execution_count=3)])])
    step = grading.SubmittedOutputs(output_kb=6)
    nb, res = step.preprocess(nb, {"nbgrader": {"assignment": "attention"}})
    assert nb.cells[0].outputs[0]["text"] == "mine\n"
    assert [o["output_type"] for o in nb.cells[1].outputs] == ["stream", "display_data"]
    assert "over 6 KiB" in nb.cells[1].outputs[1]["data"]["text/plain"]
    assert res["attention_grading"]["shown"] == {"cell5_scores_test": 2.0}


# ------------------------------------------------- honest environments and reasons
LONG_TMPDIR_CHARS = 100  # the figure: 35 characters already broke every kernel
PTH_PROBE = r'''
import os, sys, tempfile
sys.path.insert(0, {root!r})
import nbformat
from nbclient import NotebookClient
from src import sandbox
assert len(tempfile.gettempdir()) >= {chars}, tempfile.gettempdir()
box = sandbox.Sandbox({{n: os.path.join({root!r}, n) for n in ("verify.py", "src", "data")}})
class Manager(sandbox.SandboxKernelManager):
    sandbox = box
nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
    "import numpy, sys\nprint('numpy from', numpy.__file__)")])
nb.metadata["kernelspec"] = {{"name": "python3", "display_name": "Python 3"}}
try:
    NotebookClient(nb, kernel_manager_class=Manager, timeout=60).execute()
finally:
    box.cleanup()
print(nb.cells[0].outputs[0]["text"], end="")
'''


@needs_bwrap
def test_a_kernel_imports_from_pth_added_directories_whatever_tmpdir_is(tmp_path):
    """An environment whose packages all come through a .pth file (they lie outside its
    prefix), graded with a 100-character TMPDIR: the kernel starts and imports them."""
    import sysconfig
    import venv

    env = tmp_path / "env"
    venv.EnvBuilder(with_pip=False).create(env)
    site = next(env.glob("lib/python3*/site-packages"))
    (site / "course-packages.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    tmpdir = tmp_path / ("t" * (LONG_TMPDIR_CHARS - len(str(tmp_path)) - 1))
    tmpdir.mkdir()
    assert len(str(tmpdir)) == LONG_TMPDIR_CHARS
    code = PTH_PROBE.format(root=str(ROOT), chars=LONG_TMPDIR_CHARS)
    res = subprocess.run([str(env / "bin" / "python"), "-c", code], capture_output=True,
                         text=True, timeout=180, env=dict(os.environ, TMPDIR=str(tmpdir)))
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.startswith("numpy from " + sysconfig.get_paths()["purelib"]), res.stdout
    assert list(tmpdir.iterdir()) == []  # the sandbox's files were removed


# --------------------------------------------------------- one process, one student
def _greedy(student, worker_memory_gb):
    return student, True, f"allocated {len(bytearray(8 * 2**30))}", 0.0


def _sleepy(student, worker_memory_gb):
    import time

    time.sleep(60)


def test_each_worker_has_a_memory_limit_and_a_deadline(tmp_path, monkeypatch):
    """Through the pool `make grade` and `make feedback` use: a process past its memory
    limit or its deadline fails its own student, with the limit named."""
    from src import course

    monkeypatch.setenv("ATTENTION_COURSE_DIR", str(tmp_path))
    outcomes = {}

    def done(student, ok, error, seconds):
        outcomes[student] = (ok, error)

    course._run_workers(["greedy"], 1, (None, None, 1.0), 120, done, task=_greedy)
    course._run_workers(["sleepy"], 1, (None, None, 1.0), 2, done, task=_sleepy,
                        what="feedback")
    assert outcomes == {
        "greedy": (False, "the grading process ran out of its 1 GiB (c.Grading.worker_memory_gb)"),
        "sleepy": (False, "feedback did not finish within 2 s (process stopped)")}


@pytest.mark.skipif(os.getuid() != 0, reason="uid slots are used when grading as root")
def test_uid_slots_are_locked_in_one_place_whatever_tmpdir_is(tmp_path):
    slot = sandbox._UidSlot()
    try:
        code = ("import tempfile; from src import sandbox; s = sandbox._UidSlot(); "
                "print(tempfile.gettempdir(), sandbox._LOCK_DIR, s.uid)")
        res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                             text=True, timeout=60, env=dict(os.environ, TMPDIR=str(tmp_path)))
        tmp, lock_dir, uid = res.stdout.split()
    finally:
        slot.release()
    assert tmp == str(tmp_path) and lock_dir == str(sandbox._LOCK_DIR)
    assert not sandbox._LOCK_DIR.is_relative_to(tmp_path)
    assert int(uid) != slot.uid  # another grading run, another TMPDIR: another uid


def test_a_notebook_over_the_size_or_cell_cap_is_refused_with_the_reason(tmp_path):
    step = grading.RefuseUnsafeSubmission(max_notebook_mb=1, max_cells=3)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("x" * 10**6)
                                         for _ in range(4)])
    nbformat.write(nb, tmp_path / "lesson.ipynb")
    resources = {"nbgrader": {"student": "bob"},
                 "metadata": {"path": str(tmp_path), "name": "lesson"}}
    with pytest.raises(grading.GradingError) as info:
        step.preprocess(nb, resources)
    size = (tmp_path / "lesson.ipynb").stat().st_size
    assert f"lesson.ipynb is {size:,} bytes, over the cap of 1 MB" in str(info.value)
    assert "the notebook has 4 cells, over the cap of 3" in str(info.value)


def test_a_result_carries_the_values_it_read_to_the_feedback():
    """The judge runs in a child; the figures are drawn from the values its results read,
    so they travel with them (to_dict(values=True)), even for a cell that changed an input
    in place (its message once replaced those values by a sentence, and grading failed)."""
    from src.checks.results import Summary
    from tests.corpus import release_setup

    source = "key /= math.sqrt(d_k)\nattention_scores = query @ key.transpose(-2, -1)\n"
    data = replay.replay_step(verify.LESSON, "cell5_scores", source, release_setup())
    summary = verify.judge_replay("cell5_scores_test", data, strict=True)
    back = Summary.from_dict(json.loads(json.dumps(summary.to_dict(values=True))))
    assert back.results[0].mistake == "changes_input"
    assert back.results[0].values_of("attention_scores").shape == (1, 6, 6)
    figures = viz.check_figures(verify.LESSON, back.results)
    assert [f["title"] for f in figures] == ["Your attention_scores (Cell 5), not right yet"]
    assert figures[0]["table"].splitlines()[0].endswith("key with the largest score")
    assert "Rows are query tokens" in figures[0]["alt"]


def test_tex_groups_are_stored_no_deeper_than_the_cap():
    """200 nested fractions (they crashed JupyterLab's MathJax on the autograded notebook)
    are stored with no group nested past MAX_TEX_DEPTH; the lesson's formulas keep theirs."""
    import html as htmllib

    from src import safe_html

    formula = r"$\frac{QK^\top}{\sqrt{d_k}}$"
    stored = grading.safe_markdown("$" + r"\frac{1}{" * 200 + "x" + "}" * 200 + "$ " + formula)
    text, depth, deepest = htmllib.unescape(stored), 0, 0
    for ch in text:
        depth += (ch == "{") - (ch == "}")
        deepest = max(deepest, depth)
    assert deepest == safe_html.MAX_TEX_DEPTH and formula in text
