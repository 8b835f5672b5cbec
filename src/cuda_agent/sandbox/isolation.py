"""Isolation, the one module: who a sandboxed process runs as, what it may use, and how everything
it started is ended. Every process that runs code we do not trust (a solution's child, a shell
command of the agent) runs confined by it (the paper's "system-level permission isolation").

- Users: as root, a sandboxed process runs as a user of its own, a slot no other live process holds
  (`cuda-agent-eval-N` for solution children, `cuda-agent-tool-N` for an agent run's commands), so
  one cannot ptrace, signal or write the files of another, and releasing the slot kills whatever
  still runs as that user, wherever it moved to (a new session, a double fork).
- Limits: no core files, an address-space limit where asked, no network (a new, empty network
  namespace; not root, inside a user namespace of our own where the kernel allows one).
- Ending: SIGKILL when the process that started it dies (parent-death signal); where asked, a PID
  namespace of its own whose first process is the command, so that when the command ends or is
  killed the kernel kills everything it started, `setsid` daemons included.
- Killing a user's processes (on release), and stopping them while baselines are timed: kill(-1)
  from a helper that has become that user, so that the kernel signals all of them in one pass; a
  listing of /proc misses a chain of processes that fork and exit faster than it reads.
Not root and without namespaces, a command runs as the calling user in its own process group, and
the harness's checks are what remains.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import gc
import os
import pwd
import resource
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator

import cuda_agent

EVAL_USER = "cuda-agent-eval"   # solution children: cuda-agent-eval-0..63
TOOL_USER = "cuda-agent-tool"   # an agent run's shell commands: cuda-agent-tool-0..63
USER_SLOTS = 64
PACKAGE_ROOT = str(Path(cuda_agent.__file__).resolve().parent.parent)

_CLONE_NEWUSER = 0x10000000
_CLONE_NEWPID = 0x20000000
_CLONE_NEWNET = 0x40000000
_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4
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
    deadline = time.monotonic() + _PATIENCE_S
    passed = _signal_user(uid, signal.SIGKILL)
    while _processes_of(uid) and time.monotonic() < deadline:
        time.sleep(0.01)
        if not passed:
            passed = _signal_user(uid, signal.SIGKILL)


def eval_uids() -> list[int]:
    """The uids of the solution children's users that exist (`cuda-agent-eval-0..63`), held or not:
    whatever a solution left running runs as one of them."""
    names = {f"{EVAL_USER}-{i}" for i in range(USER_SLOTS)}
    return sorted(pw.pw_uid for pw in pwd.getpwall() if pw.pw_name in names and pw.pw_uid != 0)


@contextmanager
def frozen(uids: Iterable[int]) -> Iterator[bool]:
    """One block of `Freezer(uids).frozen()`: every process of each of `uids` stopped (SIGSTOP) for the
    block and continued however it ends. Yields whether every one was seen stopped."""
    with Freezer(uids) as freezer, freezer.frozen() as stopped:
        yield stopped


class Freezer:
    """Stops every process of each of `uids` for a block (`frozen()`), and continues them when it ends,
    however it ends: nothing they left spinning runs beside what the block times. The kernel stops all of a
    uid's processes in one pass (kill(-1) from a helper that has become the uid), so a fork cannot slip
    past. Root only: otherwise it stops nothing (sandboxed processes then run as the caller).

    A paired timing run freezes the solution's user around each of its ~20 rounds' baseline windows. A
    helper forked for every signal cost ~5 ms (the fork of a harness process with torch loaded), two per
    round, all of it GPU time held alone. So each uid's helper is forked once, on first use, and stays
    until `close()`, signalling on request through a pipe. It is the uid's process, so the uid's processes
    may stop or kill it, never read or drive it (it is not dumpable). Whenever it does not answer in
    time, it is killed and that uid falls back to a helper forked per signal; the check that every process
    is stopped is a listing of /proc either way, the helper itself excepted only while its pidfd says it
    is alive (so its pid cannot have been reused)."""

    def __init__(self, uids: Iterable[int]):
        self.uids = [u for u in dict.fromkeys(uids) if u > 0] if os.geteuid() == 0 else []
        self._helpers: dict[int, _Helper | None] = {}   # uid -> its helper; None: failed, fork per signal

    def __enter__(self) -> Freezer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for helper in self._helpers.values():
            if helper is not None:
                helper.close()
        self._helpers.clear()

    @contextmanager
    def frozen(self) -> Iterator[bool]:
        """Every process of the uids stopped for the block; yields whether every one was seen stopped
        (a process inside the kernel may take longer than _PATIENCE_S)."""
        sent: list[int] = []
        try:
            missed = []
            for uid in self.uids:
                sent.append(uid)
                if not self._signal(uid, signal.SIGSTOP):
                    missed.append(uid)
            deadline, pause = time.monotonic() + _PATIENCE_S, 0.0002
            while (running := self._running()) and time.monotonic() < deadline:
                time.sleep(pause)   # a stop takes microseconds where the process is not inside the kernel
                pause = min(2 * pause, 0.005)
                missed = [u for u in missed if not self._signal(u, signal.SIGSTOP)]
            yield not running
        finally:
            for uid in sent:
                self._signal(uid, signal.SIGCONT)

    def _signal(self, uid: int, sig: int) -> bool:
        if uid not in self._helpers:
            self._helpers[uid] = _Helper.start(uid)
        helper = self._helpers[uid]
        if helper is not None:
            if helper.send(sig):
                return True
            helper.close()   # stopped, killed or refused by a process of `uid`: no second chance
            self._helpers[uid] = None
        return _signal_user(uid, sig)

    def _running(self) -> bool:
        for uid in self.uids:
            found = _processes_of(uid, _STOPPED)
            helper = self._helpers.get(uid)
            if helper is not None and helper.pid in found and helper.alive():  # alive after the listing
                del found[helper.pid]
            if found:
                return True
        return False


@dataclass
class _Helper:
    """A forked process that is `uid` and sends kill(-1, SIGSTOP) or kill(-1, SIGCONT) for each byte "S"
    or "C" read from `command`, answering "+" on `reply` when the pass was made."""

    pid: int
    pidfd: int
    command: int
    reply: int

    @staticmethod
    def start(uid: int) -> _Helper | None:
        """The helper of `uid`, ready; None where one cannot be had (the caller forks per signal)."""
        gid = _gid_for_kill(uid)
        try:
            close_range = _pylibc.close_range
        except AttributeError:   # glibc before 2.34: every inherited descriptor could not be closed
            return None
        command_in, command = os.pipe()
        reply, reply_out = os.pipe()
        byte = ctypes.create_string_buffer(1)
        pid = _pylibc.fork()   # not os.fork: no Python fork hooks in a copy of a threaded process
        if pid == 0:
            try:  # only libc calls (no Python signal handler, no collection); never kill(-1) unless every uid is `uid`
                gc.disable()
                for s in range(1, signal.NSIG):
                    _pylibc.signal(s, ctypes.c_void_p(0))   # SIG_DFL: no inherited handler runs here
                if (_pylibc.dup2(command_in, 0) == 0 and _pylibc.dup2(reply_out, 1) == 1
                        and close_range(2, ctypes.c_uint(0xFFFFFFFF), 0) == 0   # no lock or pipe of the harness held
                        and _become(uid, gid)
                        and _pylibc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
                        and _pylibc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
                        and _pylibc.write(1, b"r", 1) == 1):
                    while _pylibc.read(0, byte, 1) == 1:
                        sig = {b"S": signal.SIGSTOP, b"C": signal.SIGCONT}.get(byte.raw, 0)
                        made = sig and (_pylibc.kill(-1, sig) == 0 or ctypes.get_errno() == errno.ESRCH)
                        _pylibc.write(1, b"+" if made else b"-", 1)
            finally:
                os._exit(0)
        os.close(command_in)
        os.close(reply_out)
        if pid < 0:
            os.close(command)
            os.close(reply)
            return None
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:   # a kernel before 5.3: no helper can be told from a process that got its pid
            os.kill(pid, signal.SIGKILL)
            with suppress(ChildProcessError):
                os.waitpid(pid, 0)
            pidfd = -1
        helper = _Helper(pid, pidfd, command, reply)
        if pidfd < 0 or helper._answer() != b"r":
            helper.close()
            return None
        return helper

    def send(self, sig: int) -> bool:
        code = {signal.SIGSTOP: b"S", signal.SIGCONT: b"C"}.get(sig)
        if code is None or self.command < 0:
            return False
        try:
            os.write(self.command, code)
        except OSError:   # it is gone
            return False
        return self._answer() == b"+"

    def _answer(self) -> bytes:
        waiting = select.poll()
        waiting.register(self.reply, select.POLLIN)
        if not waiting.poll(_HELPER_PATIENCE_S * 1000):
            return b""
        try:
            return os.read(self.reply, 1)
        except OSError:
            return b""

    def alive(self) -> bool:
        waiting = select.poll()
        waiting.register(self.pidfd, select.POLLIN)   # readable once it has ended
        return not waiting.poll(0)

    def close(self) -> None:
        for fd in (self.command, self.reply):
            with suppress(OSError):
                os.close(fd)
        self.command = self.reply = -1
        if self.pidfd < 0:
            return
        with suppress(OSError):
            signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)   # never another process that got its pid
        waiting = select.poll()
        waiting.register(self.pidfd, select.POLLIN)
        waiting.poll(_PATIENCE_S * 1000)   # ended: a SIGSTOP or SIGCONT it was sending is sent, or never will be
        with suppress(ChildProcessError):   # reaped already (SIGCHLD ignored)
            os.waitpid(self.pid, os.WNOHANG)
        os.close(self.pidfd)
        self.pidfd = -1


_PATIENCE_S = 1.0    # how long a killed process may take to end, or a stopped one to stop
_HELPER_PATIENCE_S = 0.25   # how long a kept helper may take to answer before it is replaced by forks
_PASSES = 20         # helpers started before signalling falls back to a listing of /proc
_STOPPED = "TtZX"    # thread states that run nothing: stopped, traced, dead
_NOGROUP = 65534
_pylibc = ctypes.PyDLL(None, use_errno=True)  # calls that keep the GIL: the only safe ones around a fork


def _signal_user(uid: int, sig: int) -> bool:
    """Send `sig` to every process of `uid` with kill(-1) from a helper that is `uid`: the kernel
    signals each process the helper may signal (those whose real or saved uid is `uid`, all but the
    helper) in one pass under its task list lock, and a process forking meanwhile passes the
    signal on to its child. True when a pass was made. A process of `uid` may kill or stop the
    helper first; then another helper tries, and each failure signals by pid from a listing."""
    for _ in range(_PASSES):
        if _pass_as(uid, sig):
            return True
        for pid in _processes_of(uid):
            try:
                os.kill(pid, sig)
            except OSError:
                pass
    return False


def _pass_as(uid: int, sig: int) -> bool:
    """One kill(-1, sig) from a forked helper that became `uid`; True when it says it was sent."""
    gid = _gid_for_kill(uid)
    said, says = os.pipe()  # its word, not its exit status: a harness may not be able to wait for it
    pid = _pylibc.fork()  # not os.fork: no Python fork hooks in a copy of a threaded process
    if pid == 0:
        try:  # only libc calls here; never kill(-1) unless every uid is `uid`
            if (_become(uid, gid)
                    and (_pylibc.kill(-1, sig) == 0 or ctypes.get_errno() == errno.ESRCH)):
                os.write(says, b"+")
        finally:
            os._exit(0)
    os.close(says)
    try:
        if pid < 0:
            return False
        waiting = select.poll()
        waiting.register(said, select.POLLIN)
        said_it = bool(waiting.poll(_PATIENCE_S * 1000)) and os.read(said, 1) == b"+"
        try:  # still there: stopped by a process of `uid`, starved, or about to exit
            if os.waitpid(pid, os.WNOHANG)[0] == 0:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
        except ChildProcessError:  # reaped already (SIGCHLD ignored)
            pass
        return said_it
    finally:
        os.close(said)


def _gid_for_kill(uid: int) -> int:
    """The group a helper that becomes `uid` takes; refuses root, for whom kill(-1) signals every process
    of the machine."""
    if uid <= 0:
        raise ValueError(f"uid {uid}: kill(-1) as root would signal every process of the machine")
    try:
        return pwd.getpwuid(uid).pw_gid
    except KeyError:
        return _NOGROUP


def _become(uid: int, gid: int) -> bool:
    """In a forked helper (libc calls only): drop every group and become `uid` for real, effective and
    saved ids; True only when every id is `uid`'s, so that kill(-1) signals no process but its."""
    return (_pylibc.setgroups(0, None) == 0 and _pylibc.setresgid(gid, gid, gid) == 0
            and _pylibc.setresuid(uid, uid, uid) == 0 and _pylibc.getuid() == uid and _pylibc.geteuid() == uid)


def _processes_of(uid: int, ignore: str = "ZX") -> dict[int, set[str]]:
    """The processes whose real, effective or saved uid is `uid` and which have a thread in a
    state not in `ignore`, with those states ("R" running, "S" sleeping, "T" stopped, ...)."""
    found: dict[int, set[str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as f:
                uids = next(line for line in f if line.startswith("Uid:")).split()[1:4]
            if str(uid) not in uids:
                continue
            states = {_state(f"/proc/{entry}/task/{tid}/stat") for tid in os.listdir(f"/proc/{entry}/task")}
        except (OSError, StopIteration):  # it ended meanwhile
            continue
        if live := states - set(ignore) - {""}:
            found[int(entry)] = live
    return found


def _state(stat_path: str) -> str:
    try:
        with open(stat_path) as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


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
