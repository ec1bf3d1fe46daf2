"""Secure grading, piece by piece: the sandbox (a real kernel inside bwrap), reading exports
the kernel wrote (hostile files), submissions and ids that are refused, feedback that runs
no script, failure reasons. The whole pipeline on real submissions: tests/test_course.py
and the hostile cohort (make test-cohort)."""

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

from src import grading, sandbox
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
        exported = (box.export_dir / "ok.txt").read_text()
    finally:
        box.cleanup()
        listener.close()
    assert seen["cwd"] == sandbox.WORKDIR and seen["pid"] == 2  # own PID namespace
    assert int(seen["caps"], 16) == 0  # no capabilities
    assert seen["here"] == ["data", "src", "verify.py"]
    assert not seen["course"] and not seen["repo_config"]
    # The root holds the mounts bwrap made and the parents of bound paths, nothing else.
    # Derived, not listed: the venv (and so its top directory) sits wherever the clone is.
    bound = sandbox._system_paths() + [sandbox.WORKDIR, sandbox.EXPORT_DIR, str(box.run_dir)]
    allowed = {"tmp", "dev", "proc"} | {PurePosixPath(p).parts[1] for p in bound}
    assert set(seen["root"]) <= allowed, sorted(set(seen["root"]) - allowed)
    assert seen["loopback"] == "ConnectionRefusedError"  # no network, loopback included
    refused = ("Read-only file system", "Permission denied")
    assert seen["write verify.py"] in refused
    assert seen[f"write {sys.prefix}/zz.pth"] in refused
    assert seen["write scratch.txt"] == "ok" and exported == "x"
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
    import verify

    data = {"query": np.ones((1, 6, 64), np.float32)}
    score, top, text, _ = grading.judge_isolated(verify, "cell4_projections_test", data)
    assert (score, top) == (0.0, 2.0) and "Cell 4" in text

    class Greedy:  # a judge that hostile data could make explode
        @staticmethod
        def judge_replay(grade_id, data, own, strict):
            return np.ones(2**33, np.uint8)

    class Slow:
        @staticmethod
        def judge_replay(grade_id, data, own, strict):
            import time
            time.sleep(30)

    with pytest.raises(grading.GradingError, match="failed"):
        grading.judge_isolated(Greedy, "g", {}, memory=2**30)
    with pytest.raises(grading.GradingError, match="took over 1 s"):
        grading.judge_isolated(Slow, "g", {}, seconds=1)


# ------------------------------------------------------------- reading exports
def _write(tmp_path, name, arrays, compressed=False):
    (np.savez_compressed if compressed else np.savez)(tmp_path / name, **arrays)
    return name


def test_an_export_is_read_back_as_data(tmp_path):
    arrays = {"query": np.ones((1, 6, 64), np.float32), "note": np.array("text")}
    got = grading.read_export(tmp_path, _write(tmp_path, "a.npz", arrays), 2**20)
    assert got["query"].dtype == np.float32 and str(got["note"]) == "text"


def _bomb(tmp_path):
    _write(tmp_path, "bomb.npz", {"x": np.zeros(50_000_000, np.uint8)}, compressed=True)
    return "bomb.npz"


def _pickled(tmp_path):
    np.savez(tmp_path / "obj.npz", x=np.array([{"evil": 1}], dtype=object))
    return "obj.npz"


def _fifo(tmp_path):
    os.mkfifo(tmp_path / "fifo.npz")
    return "fifo.npz"


def _link(tmp_path):
    (tmp_path / "link.npz").symlink_to(ROOT / "data" / "embeddings.npy")
    return "link.npz"


def _junk(tmp_path):
    (tmp_path / "junk.npz").write_bytes(b"PK\x03\x04 not a zip")
    return "junk.npz"


def _members(tmp_path):
    with zipfile.ZipFile(tmp_path / "many.npz", "w") as zf:
        for i in range(300):
            zf.writestr(f"a{i}.npy", b"")
    return "many.npz"


@pytest.mark.parametrize("make, why", [
    (_bomb, "too many or too large"), (_pickled, "not a valid .npz"),
    (_fifo, "not a regular file"), (_link, "unreadable"), (_junk, "not a valid .npz"),
    (_members, "too many or too large"), (lambda p: "missing.npz", "no data was exported"),
    (lambda p: _write(p, "big.npz", {"x": np.zeros(2**19)}), "over the cap"),
], ids=["zip-bomb", "pickle", "fifo", "symlink", "junk", "members", "missing", "oversize"])
def test_hostile_export_files_are_refused_without_harm(tmp_path, make, why):
    name = make(tmp_path)
    with pytest.raises(grading.GradingError, match=why):
        grading.read_export(tmp_path, name, 2**20)


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
    assert log_reason("[ERROR] No notebooks were matched by 'x'") == \
        "[ERROR] No notebooks were matched by 'x'"


# ------------------------------------------------------------------ feedback
def test_feedback_keeps_only_inert_outputs_and_defuses_markdown():
    code = nbformat.v4.new_code_cell("x", outputs=[
        nbformat.v4.new_output("display_data", data={
            "text/html": "<script>alert(1)</script>", "text/plain": "<IPython HTML>",
            "image/svg+xml": "<svg onload=alert(1)/>", "image/png": "iVBOR"}),
        nbformat.v4.new_output("display_data", data={"application/javascript": "alert(1)"})])
    md = nbformat.v4.new_markdown_cell(
        "<details><summary>Hint</summary>ok</details> <script>alert(1)</script>"
        "<img src=x onerror=alert(1)> <a href='javascript:alert(1)'>x</a>")
    raw = nbformat.v4.new_raw_cell("<script>alert(1)</script>",
                                   metadata={"raw_mimetype": "text/html"})
    nb = nbformat.v4.new_notebook(cells=[code, md, raw])
    nb, _ = grading.SafeOutputs().preprocess(nb, {})
    assert [o["data"] for o in nb.cells[0].outputs] == [
        {"text/plain": "<IPython HTML>", "image/png": "iVBOR"}]
    assert "<details><summary>Hint</summary>" in nb.cells[1].source
    for active in ("<script>", "onerror", "javascript:"):
        assert active not in nb.cells[1].source
    assert "raw_mimetype" not in nb.cells[2].metadata


@pytest.mark.parametrize("markdown", [
    "[notes](javascript:alert(1))", "[r][1]\n\n[1]: javascript:alert(1)",
    "<javascript:alert(1)>", "<a href='javascript:alert(1)'>x</a>",
    "<img src=x onerror=alert(1)>", "<script>alert(1)</script>",
    "<svg><script>alert(1)</script></svg>", "<iframe src='data:text/html,x'></iframe>"])
def test_markdown_is_defused_whatever_the_syntax(markdown):
    html = grading.safe_markdown(markdown)
    for name, attributes in re.findall(r"<([a-zA-Z][\w-]*)([^>]*)>", html):
        assert name in grading.SAFE_TAGS, (markdown, html)
        assert not re.search(r"\bon\w+\s*=|javascript:|data:", attributes), (markdown, html)


def test_limits_are_stated_in_nbgrader_config():
    from src.course import load_config

    config = load_config()
    lim = sandbox.LIMITS
    assert config.Execute.timeout == lim.cell_timeout
    for name in ("memory_gb", "processes", "file_mb", "tmp_mb", "notebook_seconds",
                 "output_kb", "export_kb"):
        assert config.SandboxedExecute[name] == getattr(lim, name), name
