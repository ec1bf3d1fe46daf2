"""A bubblewrap sandbox for each grading kernel.

nbgrader runs a student's notebook with the instructor's rights, in the
instructor's tree. Here each grading kernel runs inside ``bwrap`` (Debian's
``bubblewrap``; no images, no daemon) and sees only:

- the Python environment, the system libraries and every directory on the
  grader's ``sys.path`` (but the repository and the course), read-only;
- a private, size-capped working directory (its cwd) holding the
  instructor's shipped ``verify.py``, ``src/`` and ``data/`` read-only;
- the directory of its own IPC sockets (short, fixed, never under $TMPDIR;
  sealed once the kernel has started), and a private ``/tmp``.

Nothing else of the course or the repository exists inside (no ``source/``,
gradebook, other students, ``nbgrader_config.py``, home directory). It has no
network, loopback included (the kernel talks over IPC sockets), its own PID
namespace (everything it starts dies with it), no capabilities and, when
grading as root, a uid of its own. Limits are set inside, before the kernel
starts: address space, process count, file size; ``/tmp`` and the working
directory are size-capped tmpfs.

Shape legend: not applicable (no tensors here).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
from functools import lru_cache
from pathlib import Path, PurePosixPath

from jupyter_client.manager import AsyncKernelManager

from src.limits import LIMITS, Limits  # noqa: F401  (read through sandbox too: sb.LIMITS)

#: Where the kernel sees things inside the sandbox.
WORKDIR = "/home/student/attention"



# First uid of the per-sandbox uids used when grading as root (far above any account).
_UID_BASE = 1 << 20
_UID_SLOTS = 4096
# One fixed place for the uid locks, whatever $TMPDIR is: two grading runs with different
# TMPDIRs must never share a uid (and so one process budget). Used as root only.
_LOCK_DIR = Path("/run/attention-sandbox-uids")
# The kernels' IPC sockets: a Unix socket path holds at most 107 bytes, so they live in a
# short fixed place, never under $TMPDIR (/tmp/attention-ipc-<uid>/<sandbox>/kernel-<port>).
_IPC_BASE = Path("/tmp") / f"attention-ipc-{os.getuid()}"
#: Tail of a kernel's stderr kept for the reason it could not start (bytes).
STDERR_TAIL = 1500


def private_dir(path: Path) -> Path:
    """``path`` as a directory of this user's alone (created 0700), refusing a symlink or a
    directory someone else made (a shared /tmp). Raises SandboxUnavailableError."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.lstat(path)
    except OSError as exc:
        raise SandboxUnavailableError(f"cannot create {path}: {exc.strerror}") from None
    if os.path.islink(path) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise SandboxUnavailableError(f"{path} is not a private directory of uid "
                                      f"{os.getuid()} (owner {st.st_uid}, mode "
                                      f"{oct(st.st_mode & 0o777)}); remove it")
    return path


def ipc_dir_for(root: Path) -> Path:
    """The short directory holding the IPC sockets of the sandbox at ``root``."""
    return _IPC_BASE / root.name


def remove_ipc_dirs(scratch) -> None:
    """Remove the IPC directories of every sandbox under ``scratch`` (a worker that died)."""
    for root in Path(scratch).glob("attention-grading-*"):
        shutil.rmtree(ipc_dir_for(root), ignore_errors=True)

# Runs inside the sandbox before the kernel: drop to the sandbox's uid (root only),
# set the limits, then exec the kernel. RLIMIT_NPROC counts per user namespace (or per
# uid), so it bounds this sandbox alone.
_LAUNCHER = """\
import os, resource, sys
uid, mem, nproc, fsize = (int(a) for a in sys.argv[1:5])
if uid >= 0 and os.getuid() == 0:
    os.setgroups([]); os.setgid(uid); os.setuid(uid)
for lim, val in ((resource.RLIMIT_AS, mem), (resource.RLIMIT_NPROC, nproc),
                 (resource.RLIMIT_FSIZE, fsize), (resource.RLIMIT_CORE, 0)):
    if val >= 0:
        resource.setrlimit(lim, (val, val))
os.execv(sys.argv[5], sys.argv[5:])
"""


# ------------------------------------------------------------------ seccomp
# A classic-BPF seccomp filter (x86_64) that bwrap loads before the kernel starts. Denied:
# setsid (each new session is a scheduler autogroup of its own: a kernel with many would
# starve the others), new namespaces (unshare, setns, clone with CLONE_NEW*, clone3; a user
# namespace would let it mount a tmpfs past the limits), the kernel keyrings (not
# namespaced: data would outlive the sandbox), mounts, ptrace, bpf, perf, io_uring.
_DENIED = {"setsid": 112, "unshare": 272, "setns": 308, "add_key": 248, "request_key": 249,
           "keyctl": 250, "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161,
           "ptrace": 101, "perf_event_open": 298, "bpf": 321, "userfaultfd": 323,
           "io_uring_setup": 425, "fsopen": 430, "open_tree": 428, "move_mount": 429}
_CLONE, _CLONE3 = 56, 435
_CLONE_NEW = 0x7E020000  # CLONE_NEWNS|CGROUP|UTS|IPC|USER|PID|NET
_EPERM, _ENOSYS = 1, 38


def seccomp_filter() -> bytes | None:
    """The BPF program (struct sock_filter[]) for bwrap --seccomp; None off x86_64."""
    import platform
    import struct

    if platform.machine() not in ("x86_64", "AMD64"):
        return None
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    allow, errno = 0x7FFF0000, 0x00050000
    prog = [(ld, 0, 0, 4),  # arch
            (jeq, 1, 0, 0xC000003E),  # AUDIT_ARCH_X86_64
            (ret, 0, 0, errno | _EPERM),
            (ld, 0, 0, 0),  # syscall number
            (jge, 0, 1, 0x40000000),  # the x32 ABI: refused
            (ret, 0, 0, errno | _ENOSYS)]
    for nr in sorted(_DENIED.values()):
        prog += [(jeq, 0, 1, nr), (ret, 0, 0, errno | _EPERM)]
    prog += [(jeq, 0, 1, _CLONE3), (ret, 0, 0, errno | _ENOSYS),  # glibc falls back to clone
             (jeq, 0, 3, _CLONE), (ld, 0, 0, 16),  # clone's flags (low 32 bits of args[0])
             (jset, 0, 1, _CLONE_NEW), (ret, 0, 0, errno | _EPERM),
             (ret, 0, 0, allow)]
    return b"".join(struct.pack("<HBBI", *ins) for ins in prog)


class SandboxUnavailableError(RuntimeError):
    """bwrap is missing or cannot create namespaces here; the message names the fix."""


@lru_cache(maxsize=1)
def unavailable_reason() -> str | None:
    """None when sandboxed grading works on this machine, else what to do about it."""
    if not sys.platform.startswith("linux"):
        return (f"sandboxed grading needs Linux namespaces; this is {sys.platform}. Grade on a "
                "Linux machine, or run `make grade UNSAFE=1` to grade WITHOUT a sandbox")
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return ("bubblewrap (bwrap) is not installed: run `sudo apt-get install bubblewrap` "
                "(Debian/Ubuntu) or `sudo dnf install bubblewrap`, or run `make grade "
                "UNSAFE=1` to grade WITHOUT a sandbox")
    probe = [bwrap, "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/",
             "--proc", "/proc", "--dev", "/dev", "true"]
    try:
        res = subprocess.run(probe, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap could not run ({exc})"
    if res.returncode != 0:
        err = res.stderr.strip().splitlines()[-1:] or ["no message"]
        return (f"bwrap cannot create a sandbox here ({err[0]}); unprivileged user namespaces "
                "may be off: `sudo sysctl -w kernel.unprivileged_userns_clone=1` (Debian) or "
                "`kernel.apparmor_restrict_unprivileged_userns=0` (Ubuntu 24.04), or run "
                "`make grade UNSAFE=1` to grade WITHOUT a sandbox")
    return None


def _hidden_roots() -> list[Path]:
    """What a directory bound into the sandbox must never contain or lie in: the
    repository (solutions, nbgrader_config.py) and the course (gradebook, submissions)."""
    from src.layout import ROOT, course_dir

    return [ROOT.resolve(), course_dir()]


def _import_paths() -> list[str]:
    """Every directory on the grader's ``sys.path`` (site-packages, directories a ``.pth``
    adds, the user site, editable installs) but those that would show the repository or
    the course: the kernel must import what the grader's Python imports."""
    hidden, out = _hidden_roots(), []
    for entry in sys.path:
        if not entry or not os.path.exists(entry):
            continue
        p = Path(entry).resolve()
        if any(h == p or h.is_relative_to(p) for h in hidden) or p.is_relative_to(hidden[1]):
            continue
        out.append(str(p))
    return out


def _system_paths() -> list[str]:
    """What the kernel needs to run Python: interpreter, environment, libraries, and every
    directory the grader's Python imports from."""
    paths = ["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
             "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives",
             "/etc/fonts", "/etc/localtime", sys.base_prefix, sys.prefix,
             str(Path(sys.executable).resolve().parent.parent), *_import_paths()]
    paths.sort(key=lambda p: len(PurePosixPath(p).parts))  # parents first: one bind each
    out = []
    for p in paths:
        if os.path.exists(p) and p not in out and not any(
                PurePosixPath(p).is_relative_to(q) for q in out):
            out.append(p)
    return out


class _UidSlot:
    """A uid of its own for one sandbox when grading as root, held by a lock file."""

    def __init__(self):
        self.uid, self._fd = -1, None
        if os.getuid() != 0:
            return  # bwrap maps the caller's uid in a user namespace of its own
        private_dir(_LOCK_DIR)
        for i in range(_UID_SLOTS):
            fd = os.open(_LOCK_DIR / str(i), os.O_CREAT | os.O_RDWR, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            self.uid, self._fd = _UID_BASE + i, fd
            return
        raise SandboxUnavailableError("no free sandbox uid (4096 kernels at once?)")

    def release(self):
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class Sandbox:
    """The private world of one grading kernel (a temporary directory of the instructor).

    ``shipped``: {name inside the working directory: host path}, bound read-only.
    ``run_dir`` holds the IPC sockets (``ipc=False``, the replay server, which talks over
    pipes: none is made).
    """

    def __init__(self, shipped: dict, limits: Limits = LIMITS, enabled: bool = True,
                 ipc: bool = True):
        self.limits, self.enabled = limits, enabled
        self.shipped = {name: Path(p).resolve() for name, p in shipped.items()}
        self.root = Path(tempfile.mkdtemp(prefix="attention-grading-"))  # mode 0700
        self.run_dir = ipc_dir_for(self.root)
        self.home = self.root / "home"  # the unsandboxed kernel's cwd (UNSAFE)
        self.stderr_path = self.root / "kernel-stderr.log"
        if ipc:
            private_dir(_IPC_BASE)
            self.run_dir.mkdir()
        self.home.mkdir()
        self._slot = _UidSlot() if enabled else None
        uid = self._slot.uid if self._slot else -1
        if uid >= 0:
            for d in (self.root, self.run_dir)[:2 if ipc else 1]:
                os.chown(d, uid, uid)
        if not enabled:  # UNSAFE: the kernel runs in a plain copy
            for name, p in self.shipped.items():
                (shutil.copytree if p.is_dir() else shutil.copyfile)(p, self.home / name)

    @property
    def uid(self) -> int:
        return self._slot.uid if self._slot else -1

    def seccomp_fd(self) -> int | None:
        """A file descriptor holding the seccomp program (inherited by bwrap), or None."""
        prog = seccomp_filter()
        if prog is None or not self.enabled:
            return None
        path = self.root / "seccomp.bpf"
        path.write_bytes(prog)
        self._seccomp = os.open(path, os.O_RDONLY)
        return self._seccomp

    def command(self, kernel_cmd: list[str], seccomp_fd: int | None = None,
                host_dirs: bool = True) -> list[str]:
        """``kernel_cmd`` wrapped in bwrap and the launcher that sets the limits.
        ``host_dirs=False`` (the replay server, which talks over pipes): no writable host
        directory at all (not even the IPC folder), only the capped tmpfs."""
        lim = self.limits
        launcher = [sys.executable, "-c", _LAUNCHER, str(self.uid),
                    str(int(lim.memory_gb * 2**30) if lim.memory_gb else -1),
                    # Unsandboxed, RLIMIT_NPROC would count all the instructor's processes.
                    str(lim.processes if self.enabled else -1), str(lim.file_mb * 2**20)]
        if not self.enabled:
            return launcher + kernel_cmd
        args = ["bwrap", "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts",
                "--unshare-cgroup-try", "--die-with-parent", "--new-session", "--clearenv"]
        if os.getuid() == 0:  # no user namespace: drop to the sandbox uid in the launcher
            args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        else:
            args += ["--unshare-user"]
        args += ["--proc", "/proc", "--dev", "/dev"]
        tmpfs = str(lim.tmp_mb * 2**20)
        args += ["--perms", "1777", "--size", tmpfs, "--tmpfs", "/tmp"]
        # multiprocessing's semaphores live in /dev/shm (DataLoader workers, Pool)
        args += ["--perms", "1777", "--size", tmpfs, "--tmpfs", "/dev/shm"]
        for p in _system_paths():
            args += _mkdirs(p) + ["--ro-bind", p, p]
        args += _mkdirs(WORKDIR) + ["--perms", "1777", "--size", tmpfs, "--tmpfs", WORKDIR]
        for name, p in self.shipped.items():
            args += ["--ro-bind", str(p), f"{WORKDIR}/{name}"]
        if host_dirs:
            args += _mkdirs(str(self.run_dir)) + ["--bind", str(self.run_dir),
                                                  str(self.run_dir)]
        env = {"HOME": "/tmp", "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
               "LANG": "C.UTF-8", "MPLCONFIGDIR": "/tmp/matplotlib",
               "IPYTHONDIR": "/tmp/ipython", "PYTHONDONTWRITEBYTECODE": "1",
               # ipykernel's parent poller would see pid 1 (bwrap) and exit: turn it off;
               # --die-with-parent does that job.
               "JPY_PARENT_PID": "1",
               # Two kernels grade at once on small machines: one BLAS thread each.
               "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        for k, v in env.items():
            args += ["--setenv", k, v]
        if seccomp_fd is not None:
            args += ["--seccomp", str(seccomp_fd)]
        return args + ["--chdir", WORKDIR, "--"] + launcher + kernel_cmd

    def seal_run_dir(self) -> None:
        """Once the kernel has bound its sockets: no new file in its IPC directory (it is
        host disk, outside the tmpfs quotas). Strict when grading as root (the kernel's uid
        no longer owns it); otherwise the kernel, owner of the directory, could undo it."""
        for path in (self.run_dir / "kernel.json", self.run_dir):
            try:
                if self.uid >= 0:
                    os.chown(path, os.getuid(), os.getgid(), follow_symlinks=False)
                os.chmod(path, 0o755 if path.is_dir() else 0o644, follow_symlinks=False)
            except (OSError, NotImplementedError):
                pass

    def stderr_tail(self, limit: int = STDERR_TAIL) -> str:
        """The last ``limit`` bytes of what the kernel wrote to its stderr, one line."""
        try:
            with open(self.stderr_path, "rb") as fh:
                fh.seek(max(0, os.fstat(fh.fileno()).st_size - limit))
                text = fh.read(limit).decode("utf-8", "replace")
        except OSError:
            return ""
        return " | ".join(ln.strip() for ln in text.splitlines() if ln.strip())

    def cleanup(self):
        if getattr(self, "_stderr", None) is not None:
            self._stderr.close()
            self._stderr = None
        if getattr(self, "_seccomp", None) is not None:
            os.close(self._seccomp)
            self._seccomp = None
        shutil.rmtree(self.root, ignore_errors=True)
        shutil.rmtree(self.run_dir, ignore_errors=True)
        if self._slot:
            self._slot.release()


def _mkdirs(path: str) -> list[str]:
    """bwrap arguments creating the parents of ``path`` world-readable (bwrap's are 0700)."""
    out = []
    for parent in reversed(PurePosixPath(path).parents):
        if str(parent) != "/":
            out += ["--perms", "0755", "--dir", str(parent)]
    return out


class SandboxKernelManager(AsyncKernelManager):
    """An ipykernel started inside a :class:`Sandbox`, talking over IPC sockets.

    Set ``sandbox`` before starting. Interrupts go over the control channel
    (the kernel's pid is not the process the manager started).
    """

    sandbox: Sandbox | None = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.transport = "ipc"

    async def _async_pre_start_kernel(self, **kw):
        box = self.sandbox
        if box is None:
            raise SandboxUnavailableError("SandboxKernelManager.sandbox is not set")
        self.ip = str(box.run_dir / "kernel")  # sockets: kernel-<port>
        self.connection_file = str(box.run_dir / "kernel.json")
        self.kernel_spec.interrupt_mode = "message"
        # bwrap starts in the sandbox's own directory; --chdir moves the kernel to WORKDIR.
        kw["cwd"] = str(box.root if box.enabled else box.home)
        # The kernel's own stdout/stderr never reach the grader's terminal or pipe; its
        # stderr goes to a file (capped by the sandbox's file-size limit) whose tail names
        # why a kernel could not start.
        kw["stdout"] = subprocess.DEVNULL
        if getattr(box, "_stderr", None) is None:
            box._stderr = open(box.stderr_path, "ab")
        kw["stderr"] = box._stderr
        kw["stdin"] = subprocess.DEVNULL
        cmd, kw = await super()._async_pre_start_kernel(**kw)
        if box.uid >= 0:
            os.chown(self.connection_file, box.uid, box.uid)
        if not box.enabled:
            kw.pop("env", None)
            kw["env"] = {**os.environ, "JPY_PARENT_PID": str(os.getpid())}
        fd = box.seccomp_fd()
        if fd is not None:
            kw["pass_fds"] = (fd,)
        return box.command(cmd, fd), kw

    def client(self, **kwargs):
        """A client whose sockets refuse messages over ``message_mb`` (a kernel could
        otherwise make the grader hold gigabytes)."""
        import zmq
        import zmq.asyncio

        if "context" not in kwargs:
            ctx = zmq.asyncio.Context()
            limit = (self.sandbox.limits if self.sandbox else LIMITS).message_mb
            ctx.setsockopt(zmq.MAXMSGSIZE, limit * 2**20)
            kwargs["context"] = ctx
            client = super().client(**kwargs)
            client._created_context = True  # so stop_channels() destroys it
            return client
        return super().client(**kwargs)

    _async_pre_start_kernel.__doc__ = AsyncKernelManager._async_pre_start_kernel.__doc__
