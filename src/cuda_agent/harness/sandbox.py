"""Child processes: the untrusted solution child and the trusted reference worker.

The solution's code runs in a child that cannot forge the verdict: it only ever writes output
tensors and progress notes; the reference worker (a process where no solution runs) computes the
reference, compares and times the baselines, and the parent decides. The child gets a wall-clock
timeout, a memory limit, no network where the OS allows, and, when the harness runs as root, a user
of its own who can write neither the harness, the reference, its build cache nor the manifest.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import pwd
import resource
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import cuda_agent

EVAL_USER = "cuda-agent-eval"
MAX_MESSAGE = 1 << 20
_CLONE_NEWNET = 0x40000000
_PR_SET_PDEATHSIG = 1
_PACKAGE_ROOT = str(Path(cuda_agent.__file__).resolve().parent.parent)


class ChildFailed(RuntimeError):
    """The child died, hung, or broke the protocol; `reason` says which, for a person."""


@dataclass(frozen=True)
class SandboxUser:
    uid: int
    gid: int
    name: str


def ensure_user(name: str = EVAL_USER) -> SandboxUser | None:
    """The unprivileged user a child runs as when we are root (created if missing; `nobody` as a
    fallback); None when not root, where the child keeps our user."""
    if os.geteuid() != 0:
        return None
    try:
        pw = pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
                       capture_output=True)
        try:
            pw = pwd.getpwnam(name)
        except KeyError:
            pw = pwd.getpwnam("nobody")
    return SandboxUser(pw.pw_uid, pw.pw_gid, pw.pw_name)


EVAL_USER_SLOTS = 64  # users cuda-agent-eval-0..63: one per live solution child


@dataclass
class UserSlot:
    """A sandbox user held by one solution child while it lives (a lock file), so that no two live
    children share a uid: a child cannot ptrace, signal or write the files of another (a spare
    waiting for the next evaluation, or one running beside it)."""

    user: SandboxUser
    fd: int

    def release(self) -> None:
        """Kill whatever still runs as this user (a child that escaped its session), then free it."""
        kill_user_processes(self.user.uid)
        os.close(self.fd)


def slot_dir() -> Path | None:
    """Where the slots' lock files live: one folder for the whole machine (users are machine-wide,
    whatever CUDA_AGENT_HOME each harness uses), writable by root only."""
    for base in ("/run", "/var/lib", tempfile.gettempdir()):
        folder = Path(base) / "cuda-agent-eval-users"
        try:
            folder.mkdir(mode=0o700, exist_ok=True)
            st = os.lstat(folder)
        except OSError:
            continue
        if st.st_uid == 0 and not st.st_mode & 0o022 and Path(folder).is_dir() and not folder.is_symlink():
            return folder
    return None


def claim_user(lock_dir: Path | None = None) -> UserSlot | None:
    """A sandbox user no other live child holds (created if missing); None when not root or when
    every slot is taken (the caller then falls back to the shared user and says so)."""
    if os.geteuid() != 0:
        return None
    lock_dir = lock_dir or slot_dir()
    if lock_dir is None:
        return None
    lock_dir.mkdir(parents=True, exist_ok=True)
    for i in range(EVAL_USER_SLOTS):
        fd = os.open(lock_dir / f"eval-user-{i}.lock", os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        user = ensure_user(f"{EVAL_USER}-{i}")
        if user is None or user.name == "nobody":  # useradd refused: no user of its own
            os.close(fd)
            return None
        kill_user_processes(user.uid)  # left over from a harness that died without releasing
        return UserSlot(user, fd)
    return None


def kill_user_processes(uid: int) -> None:
    """SIGKILL every process running as `uid` (root only; a sandbox user runs nothing else)."""
    if os.geteuid() != 0 or uid == 0:
        return
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    os.kill(int(entry), signal.SIGKILL)
            except OSError:
                pass


def reachable_by_others(path: str | Path) -> bool:
    """Whether a user who is neither owner nor group can reach (and read) `path`."""
    p = Path(path).resolve()
    for d in [*reversed(p.parents)]:
        if not os.stat(d).st_mode & 0o001:
            return False
    return bool(os.stat(p).st_mode & 0o004)


def sandbox_user() -> tuple[SandboxUser | None, str]:
    """The user a solution child runs as, and a note when isolation is weaker than intended."""
    if os.geteuid() != 0:
        return None, "not root: the solution child runs as the calling user"
    needed = [os.path.realpath(sys.executable), _PACKAGE_ROOT]
    blocked = [p for p in needed if not reachable_by_others(p)]
    if blocked:
        return None, (f"{blocked[0]} is not readable by other users, so the solution child runs as root; "
                      "run `bash scripts/setup.sh` (it makes the interpreter reachable) for full isolation")
    return ensure_user(), ""


def _drop_network() -> None:
    """A new, empty network namespace: no network at all (needs root; ignored where refused)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.unshare(_CLONE_NEWNET)
    except OSError:
        pass


def _die_with_parent() -> None:
    """SIGKILL this process when the harness that started it dies: a child in its own session
    would otherwise outlive a killed harness (a spinning kernel holding the GPU for the next run)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def _preexec(user: SandboxUser | None, address_space: int | None, isolate_network: bool):
    def run() -> None:
        os.setsid()
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if address_space:
            resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
        if isolate_network and os.geteuid() == 0:
            _drop_network()
        if user is not None:
            os.setgroups([])
            os.setgid(user.gid)
            os.setuid(user.uid)
        _die_with_parent()  # after setuid, which clears the setting
    return run


class Exchange:
    """Two scratch folders for one evaluation: `public` (the child's, where it writes outputs) and
    `private` (the harness's: logs and anything the child must not see), on tmpfs where available."""

    def __init__(self, user: SandboxUser | None):
        base = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
        self.root = Path(tempfile.mkdtemp(prefix="cuda_agent_eval_", dir=base))
        os.chmod(self.root, 0o711)
        self.private = self.root / "private"
        self.public = self.root / "public"
        self.private.mkdir(mode=0o700)
        self.public.mkdir(mode=0o700)
        if user is not None:
            os.chown(self.public, user.uid, user.gid)

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> "Exchange":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Process:
    """A child speaking JSON lines over two pipes that are not its stdin/stdout, so nothing it
    prints can be taken for a message."""

    def __init__(self, module: str, *, cwd: Path, log: Path, user: SandboxUser | None = None,
                 memory_bytes: int | None = None, limit_address_space: bool = False,
                 isolate_network: bool = False,
                 env: dict[str, str] | None = None):
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()
        child_env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(cwd),
            "PYTHONPATH": _PACKAGE_ROOT,
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONUNBUFFERED": "1",
            "TORCH_EXTENSIONS_DIR": str(cwd / "torch_extensions"),
            "TRITON_CACHE_DIR": str(cwd / "triton"),
            "TORCHINDUCTOR_CACHE_DIR": str(cwd / "inductor"),
        }
        for k in ("CUDA_VISIBLE_DEVICES", "CUDA_HOME", "LD_LIBRARY_PATH", "OMP_NUM_THREADS", "CUDA_AGENT_HOME"):
            if k in os.environ:
                child_env[k] = os.environ[k]
        child_env.update(env or {})
        self._log = open(log, "wb")
        self.log_path = log
        self.proc = subprocess.Popen(
            [sys.executable, "-s", "-m", module, str(to_child_r), str(from_child_w)],
            cwd=cwd, env=child_env, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            pass_fds=(to_child_r, from_child_w), preexec_fn=_preexec(user, memory_bytes if limit_address_space else None, isolate_network))
        os.close(to_child_r)
        os.close(from_child_w)
        self._buffer = b""
        self.memory_bytes = memory_bytes

    def send(self, message: dict) -> None:
        try:
            os.write(self._to_child, (json.dumps(message) + "\n").encode())
        except BrokenPipeError:
            raise ChildFailed(self._death_reason()) from None

    def recv(self, timeout_s: float) -> dict:
        """The next message; raises ChildFailed if the child dies, hangs past `timeout_s`, or garbles."""
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise ChildFailed(f"timed out after {timeout_s:.0f}s (infinite loop or far too slow?)")
            ready, _, _ = select.select([self._from_child], [], [], min(left, 0.25))
            if not ready:
                self._check_memory()
                continue
            chunk = os.read(self._from_child, 65536)
            if not chunk:
                raise ChildFailed(self._death_reason())
            self._buffer += chunk
            if len(self._buffer) > MAX_MESSAGE:
                self.kill()
                raise ChildFailed("sent an oversized message on the harness channel")
        line, self._buffer = self._buffer.split(b"\n", 1)
        try:
            msg = json.loads(line)
        except ValueError:
            self.kill()
            raise ChildFailed("broke the harness protocol (unreadable message)") from None
        if not isinstance(msg, dict):
            raise ChildFailed("broke the harness protocol (message is not an object)")
        return msg

    def request(self, message: dict, timeout_s: float) -> dict:
        self.send(message)
        return self.recv(timeout_s)

    def _check_memory(self) -> None:
        if not self.memory_bytes or self.proc.poll() is not None:
            return
        try:
            status = Path(f"/proc/{self.proc.pid}/status").read_text()
        except OSError:
            return
        for line in status.splitlines():
            if line.startswith("VmRSS:") and int(line.split()[1]) * 1024 > self.memory_bytes:
                self.kill()
                raise ChildFailed(f"used more than {self.memory_bytes / 2**30:.1f} GiB of host memory (limit)")

    def _death_reason(self) -> str:
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill()
            return "stopped answering the harness"
        if code < 0:
            name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else str(-code)
            return f"crashed with {name}" + (" (segmentation fault: out-of-bounds access?)" if name == "SIGSEGV" else "")
        tail = self.log_tail(600)
        hint = f"; last output: {tail}" if tail else ""
        return f"exited early with code {code} before finishing{hint}"

    def log_tail(self, chars: int = 1500) -> str:
        self._log.flush()
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return text[-chars:].strip()

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def close(self) -> None:
        self.kill()
        for fd in (self._to_child, self._from_child):
            try:
                os.close(fd)
            except OSError:
                pass
        self._log.close()


class ChildChannel:
    """The child's end: read commands, write replies (used inside worker processes)."""

    def __init__(self, fd_in: int, fd_out: int):
        self._in = os.fdopen(fd_in, "rb")
        self._out = fd_out

    def recv(self) -> dict | None:
        line = self._in.readline()
        return json.loads(line) if line else None

    def send(self, message: dict) -> None:
        os.write(self._out, (json.dumps(message) + "\n").encode())
