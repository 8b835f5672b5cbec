"""Isolation, the one module: who a sandboxed process runs as, what it may use, and how everything
it started is ended. Every process that runs code we do not trust (a solution's child, a shell
command of the agent) runs confined by it (the paper's "system-level permission isolation").

- Users: as root, a sandboxed process runs as a user of its own, a slot no other live process holds
  (`cuda-agent-eval-N` for solution children, `cuda-agent-tool-N` for an agent run's commands), so
  one cannot ptrace, signal or write the files of another, and releasing the slot kills whatever
  still runs as that user, wherever it moved to (a new session, a double fork).
- Limits: no core files, an address-space limit where asked, no network (a new, empty network
  namespace; not root, inside a user namespace of our own where the kernel allows one), and a
  seccomp filter (syscall_filter): no namespaces of its own, no io_uring, no bpf, no descriptor handed on.
- Ending: SIGKILL when the process that started it dies (parent-death signal); where asked, a PID
  namespace of its own whose first process is the command, so that when the command ends or is
  killed the kernel kills everything it started, `setsid` daemons included.
- Killing a user's processes (on release): kill(-1) from a helper that has become that user
  (user_signals), so that the kernel signals all of them in one pass; a listing of /proc misses a
  chain of processes that fork and exit faster than it reads. Stopping them while baselines are
  timed: freezer.
Not root and without namespaces, a command runs as the calling user in its own process group, and
the harness's checks are what remains.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import pwd
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import cuda_agent
from cuda_agent.sandbox.syscall_filter import install as install_filter
from cuda_agent.sandbox.syscall_filter import works as filter_works
from cuda_agent.sandbox.user_signals import PATIENCE_S, processes_of, signal_user

EVAL_USER = "cuda-agent-eval"   # solution children: cuda-agent-eval-0..63
TOOL_USER = "cuda-agent-tool"   # an agent run's shell commands: cuda-agent-tool-0..63
USER_SLOTS = 64
PACKAGE_ROOT = str(Path(cuda_agent.__file__).resolve().parent.parent)

_CLONE_NEWUSER = 0x10000000
_CLONE_NEWPID = 0x20000000
_CLONE_NEWNET = 0x40000000
_PR_SET_PDEATHSIG = 1
_user_lock = threading.Lock()


@dataclass(frozen=True)
class SandboxUser:
    uid: int
    gid: int
    name: str


def ensure_user(name: str = EVAL_USER) -> SandboxUser | None:
    """The unprivileged user `name` (created if missing; `nobody` as a fallback) when we are root;
    None when not root, where sandboxed processes keep our user."""
    if os.geteuid() != 0:
        return None
    with _user_lock:  # parallel runs must not race to create it
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


@dataclass
class UserSlot:
    """A sandbox user held (a lock file) by one live sandboxed process or agent run."""

    user: SandboxUser
    fd: int

    def kill_processes(self) -> None:
        """SIGKILL whatever runs as this user now (it runs nothing but what we started)."""
        kill_user_processes(self.user.uid)

    def release(self) -> None:
        """Kill whatever still runs as this user (a process that escaped its session), then free it."""
        self.kill_processes()
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
        if st.st_uid == 0 and not st.st_mode & 0o022 and folder.is_dir() and not folder.is_symlink():
            return folder
    return None


def claim_user(lock_dir: Path | None = None, prefix: str = EVAL_USER) -> UserSlot | None:
    """A sandbox user `prefix-N` that no other live process holds (created if missing); None when
    not root or when every slot is taken (the caller then says that isolation is weaker)."""
    if os.geteuid() != 0:
        return None
    lock_dir = lock_dir or slot_dir()
    if lock_dir is None:
        return None
    lock_dir.mkdir(parents=True, exist_ok=True)
    stem = "eval-user" if prefix == EVAL_USER else prefix.removeprefix("cuda-agent-") + "-user"
    for i in range(USER_SLOTS):
        fd = os.open(lock_dir / f"{stem}-{i}.lock", os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        user = ensure_user(f"{prefix}-{i}")
        if user is None or user.name == "nobody":  # useradd refused: no user of its own
            os.close(fd)
            return None
        kill_user_processes(user.uid)  # left over from a harness that died without releasing
        return UserSlot(user, fd)
    return None


def kill_user_processes(uid: int) -> None:
    """SIGKILL every process of `uid` at once, and wait (a second at most) until none runs (root
    only; a sandbox user runs nothing else). A chain of processes that fork and exit faster than a
    listing of /proc cannot slip past: the kernel signals all of them in one pass."""
    if os.geteuid() != 0 or uid <= 0:
        return
    deadline = time.monotonic() + PATIENCE_S
    passed = signal_user(uid, signal.SIGKILL)
    while processes_of(uid) and time.monotonic() < deadline:
        time.sleep(0.01)
        if not passed:
            passed = signal_user(uid, signal.SIGKILL)


def eval_uids(prefixes: tuple[str, ...] = (EVAL_USER,)) -> list[int]:
    """The uids of the solution children's users that exist (`cuda-agent-eval-0..63`), held or not:
    whatever a solution left running runs as one of them; with TOOL_USER among `prefixes`, agents' shells'
    users too (`cuda-agent-tool-0..63`)."""
    names = {f"{prefix}-{i}" for prefix in prefixes for i in range(USER_SLOTS)}
    return sorted(pw.pw_uid for pw in pwd.getpwall() if pw.pw_name in names and pw.pw_uid != 0)


def reachable_by_others(path: str | Path) -> bool:
    """Whether a user who is neither owner nor group can reach (and read) `path`."""
    p = Path(path).resolve()
    for d in [*reversed(p.parents)]:
        if not os.stat(d).st_mode & 0o001:
            return False
    return bool(os.stat(p).st_mode & 0o004)


def sandbox_user() -> tuple[SandboxUser | None, str]:
    """The user solution children run as, and a note when isolation is weaker than intended."""
    if os.geteuid() != 0:
        return None, "not root: the solution child runs as the calling user"
    needed = [os.path.realpath(sys.executable), PACKAGE_ROOT]
    blocked = [p for p in needed if not reachable_by_others(p)]
    if blocked:
        return None, (f"{blocked[0]} is not readable by other users, so the solution child runs as root; "
                      "run `bash scripts/setup.sh` (it makes the interpreter reachable) for full isolation")
    if not filter_works():
        return ensure_user(), ("this machine takes no seccomp filter (sandbox/syscall_filter.py): the solution's "
                               "processes may make namespaces of their own")
    return ensure_user(), ""


@dataclass(frozen=True)
class Confinement:
    """What a sandboxed process gets, applied between fork and exec (`preexec()`)."""

    user: SandboxUser | None = None      # run as this user (we are root)
    address_space: int | None = None     # RLIMIT_AS in bytes
    network: bool = False                # False: a new, empty network namespace
    own_pids: bool = False               # a PID namespace whose first process is the command
    user_namespace: bool = False         # not root: namespaces inside a user namespace of our own
    new_session: bool = True
    nice: int | None = 0                 # scheduling priority (0: normal, whatever the parent's; None: inherited)
    # no namespaces of its own, no io_uring, no bpf, no descriptor handed on (syscall_filter.py): where the machine takes it
    syscall_filter: bool = field(default_factory=filter_works)

    def preexec(self) -> Callable[[], None]:
        return lambda: _confine(self)


_libc = ctypes.CDLL(None, use_errno=True)


def _confine(c: Confinement) -> None:
    # Runs in the child between fork and exec: namespaces first (they need the privileges), then
    # the user; the parent-death signal last, since changing the user clears it.
    if c.new_session:
        os.setsid()
    if c.nice is not None:
        # A harness started by a niced parent (Ray runs its workers at nice 15) must not time at
        # that priority: its host issue times would grow with whatever else the machine runs.
        try:
            os.setpriority(os.PRIO_PROCESS, 0, c.nice)
        except OSError:  # lowering it needs root: the parent's stays
            pass
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if c.address_space:
        resource.setrlimit(resource.RLIMIT_AS, (c.address_space, c.address_space))
    flags = (0 if c.network else _CLONE_NEWNET) | (_CLONE_NEWPID if c.own_pids else 0)
    pid_namespace = False
    if flags:
        if os.geteuid() == 0:
            pid_namespace = _libc.unshare(flags) == 0 and c.own_pids
            if not pid_namespace and c.own_pids and not c.network:  # keep at least the network off
                _libc.unshare(_CLONE_NEWNET)
        elif c.user is None and c.user_namespace:
            pid_namespace = _own_user_namespace(flags) and c.own_pids
    if pid_namespace:
        _enter_pid_namespace()
    _die_with_parent()
    if c.user is not None:
        os.setgroups([])
        os.setgid(c.user.gid)
        os.setuid(c.user.uid)
        _die_with_parent()
    if c.syscall_filter and not install_filter():  # last: the namespaces above are made before it refuses them
        raise OSError("the seccomp filter (sandbox/syscall_filter.py) could not be installed, though this machine "
                      "took it before: the process is not started without it")


def _own_user_namespace(flags: int) -> bool:
    """Not root: a user namespace of our own (mapping only ourselves) may hold the other namespaces."""
    uid, gid = os.getuid(), os.getgid()
    if _libc.unshare(_CLONE_NEWUSER | flags) != 0:
        return False
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        fd = os.open(f"/proc/self/{name}", os.O_WRONLY)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)
    return True


def _enter_pid_namespace() -> None:
    """Fork once more: the new child is the first process (PID 1) of the new PID namespace and goes
    on to exec the command; this process stays behind as a waiter holding nothing of the caller's
    (its end of subprocess's error pipe included), and exits with the command's status. When PID 1
    ends, the kernel kills every process left in its namespace."""
    pid = _libc.fork()  # not os.fork: no Python fork hooks or warnings in a half-made child
    if pid == 0:
        return
    if pid < 0:
        return  # no namespace after all: the command runs here, in our process group
    _die_with_parent()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.closerange(3, 1 << 16)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
        except ChildProcessError:
            os._exit(1)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))


def _die_with_parent() -> None:
    """SIGKILL this process when the process that started it dies: a child in its own session
    would otherwise outlive a killed harness (a spinning kernel holding the GPU for the next run)."""
    try:
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass
