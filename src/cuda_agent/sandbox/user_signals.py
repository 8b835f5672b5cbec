"""Signalling every process of a sandbox user at once, and listing them.

kill(-1, sig) from a process that is the user signals, in one pass under the kernel's task list lock,
every process that process may signal (those whose real or saved uid is the user's) but itself, and a
process forking meanwhile passes the signal on to its child: a listing of /proc misses a chain of
processes that fork and exit faster than it reads. So a `Helper` that has become the user sends it.

The helper is a new interpreter (fork and exec from C, `subprocess`), never a fork of the harness that
runs Python: such a child deadlocked on the GIL about once in 200-750 forks (2026-11-28 review), still
root and holding every descriptor of the harness, its device lock included. It drops root itself, keeps
root as its saved uid and is not dumpable (the user's processes may signal it, never ptrace or read it),
ignores every signal it can, dumps no core, and dies with the harness.
"""

from __future__ import annotations

import os
import pwd
import select
import signal
import subprocess
import sys
from contextlib import suppress
from dataclasses import dataclass
from typing import Iterable

PATIENCE_S = 1.0            # how long a killed process may take to end, or a stopped one to stop
HELPER_PATIENCE_S = 0.25    # how long a helper may take to answer before it is killed
_START_PATIENCE_S = 5.0     # how long a new helper (a new interpreter) may take to say it is ready
STOPPED = "TtZX"            # thread states that run nothing: stopped, traced, dead
_PASSES = 20                # helpers started before signalling falls back to a listing of /proc
_NOGROUP = 65534
_CODES = {signal.SIGSTOP: b"S", signal.SIGCONT: b"C", signal.SIGKILL: b"K"}

# argv: uid gid parent-pid. Answers b"r" once it is the user, then b"+" or b"-" for each code read.
_HELPER = r"""
import ctypes, os, resource, signal, sys
uid, gid, parent = (int(a) for a in sys.argv[1:4])
libc = ctypes.CDLL(None, use_errno=True)
for s in signal.valid_signals():
    if s not in (signal.SIGKILL, signal.SIGSTOP):
        try:
            signal.signal(s, signal.SIG_IGN)
        except (OSError, ValueError):
            pass
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
if libc.prctl(1, signal.SIGKILL, 0, 0, 0) != 0 or os.getppid() != parent:   # PR_SET_PDEATHSIG
    sys.exit(1)
os.setgroups([])
os.setresgid(gid, gid, gid)
os.setresuid(uid, uid, 0)   # saved uid root: no process of the user may ptrace it, whatever suid_dumpable says
if (libc.prctl(4, 0, 0, 0, 0) != 0 or libc.prctl(1, signal.SIGKILL, 0, 0, 0) != 0   # not dumpable; the death
        or os.getppid() != parent or os.getuid() != uid or os.geteuid() != uid      # signal again (cleared)
        or os.getgroups() or os.getgid() != gid or os.getegid() != gid):
    sys.exit(1)
codes = {b"S": signal.SIGSTOP, b"C": signal.SIGCONT, b"K": signal.SIGKILL}
os.write(1, b"r")
while (code := os.read(0, 1)) in codes:
    try:
        os.kill(-1, codes[code])
        made = True
    except ProcessLookupError:   # none to signal
        made = True
    except OSError:
        made = False
    os.write(1, b"+" if made else b"-")
"""


@dataclass
class Helper:
    """A process that is the user `uid` and sends kill(-1, sig) for each signal asked of it (`send`):
    SIGSTOP, SIGCONT or SIGKILL. `pidfd` names it however its pid is reused."""

    uid: int
    proc: subprocess.Popen
    pidfd: int

    @staticmethod
    def start(uid: int) -> Helper | None:
        """The helper of `uid`, ready; None where none answered in time (the caller signals another way)."""
        if uid <= 0:
            raise ValueError(f"uid {uid}: kill(-1) as root would signal every process of the machine")
        try:
            gid = pwd.getpwuid(uid).pw_gid
        except KeyError:
            gid = _NOGROUP
        try:
            proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", _HELPER, str(uid), str(gid), str(os.getpid())],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                    close_fds=True, cwd="/", env={}, bufsize=0)
        except OSError:
            return None
        try:
            pidfd = os.pidfd_open(proc.pid)
        except OSError:   # a kernel before 5.3: its pid is ours until we reap it
            pidfd = -1
        helper = Helper(uid, proc, pidfd)
        if helper._answer(_START_PATIENCE_S) != b"r":
            helper.close()
            return None
        return helper

    def send(self, sig: int) -> bool:
        """True when it says that its pass was made."""
        try:
            self.proc.stdin.write(_CODES[sig])
        except (OSError, ValueError):   # it is gone, or closed
            return False
        return self._answer(HELPER_PATIENCE_S) == b"+"

    def _answer(self, patience_s: float) -> bytes:
        waiting = select.poll()
        waiting.register(self.proc.stdout, select.POLLIN)
        if not waiting.poll(patience_s * 1000):
            return b""
        try:
            return os.read(self.proc.stdout.fileno(), 1)
        except (OSError, ValueError):
            return b""

    def alive(self) -> bool:
        """Whether it has not ended (its pid is then its own, not another process's)."""
        if self.pidfd < 0:
            return self.proc.poll() is None
        waiting = select.poll()
        waiting.register(self.pidfd, select.POLLIN)   # readable once it has ended
        return not waiting.poll(0)

    def close(self) -> None:
        """Kill it and wait until it has ended: a signal it was sending is sent, or never will be."""
        for pipe in (self.proc.stdin, self.proc.stdout):
            with suppress(OSError):
                pipe.close()
        if self.pidfd >= 0:
            with suppress(OSError):
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
            os.close(self.pidfd)
            self.pidfd = -1
        else:
            with suppress(OSError):
                self.proc.kill()
        with suppress(subprocess.TimeoutExpired, ChildProcessError):
            self.proc.wait(PATIENCE_S)


def signal_user(uid: int, sig: int) -> bool:
    """Send `sig` (SIGSTOP, SIGCONT or SIGKILL) to every process of `uid` from a helper that is `uid`.
    True when a pass was made. A process of `uid` may kill or stop the helper first; then another helper
    tries, and each failure signals by pid from a listing."""
    for _ in range(_PASSES):
        helper = Helper.start(uid)
        if helper is not None:
            try:
                if helper.send(sig):
                    return True
            finally:
                helper.close()
        for pid in processes_of(uid):
            with suppress(OSError):
                os.kill(pid, sig)
    return False


@dataclass(frozen=True)
class Thread:
    """A thread as a listing saw it: its state ("R" running, "S" sleeping, "T" stopped, ...; "" where it
    ended while read), and from its schedstat the nanoseconds it has run and the times it was scheduled in
    (both 0 on a kernel that keeps no schedstat, -1 where it ended while read)."""

    state: str
    run_ns: int
    runs: int


@dataclass(frozen=True)
class Seen:
    """A process as a listing saw it: its threads by thread id."""

    threads: dict[int, Thread]

    @property
    def states(self) -> frozenset[str]:
        return frozenset(t.state for t in self.threads.values()) - {""}


def listing(uid: int, only: Iterable[int] | None = None) -> dict[int, Seen]:
    """Every process whose real, effective or saved uid is `uid`, dead ones (zombies) included; of the
    pids `only` where given (a /proc read of every process of the machine, ~11 us each, is what a freezer's
    block costs)."""
    found: dict[int, Seen] = {}
    mine = str(uid).encode()
    for entry in os.listdir("/proc") if only is None else map(str, only):
        if not entry.isdigit():
            continue
        try:
            if mine not in _uids(entry):
                continue
            tids = os.listdir(f"/proc/{entry}/task")
        except OSError:  # it ended meanwhile
            continue
        found[int(entry)] = Seen({int(t): _thread(f"/proc/{entry}/task/{t}") for t in tids})
    return found


def _uids(pid: str) -> list[bytes]:
    """The real, effective and saved uids of `pid`, from the start of its status (one read
    of 1 KB, not the whole file line by line: 6 us a process instead of 15-27 on a 2-core CPU; the name
    before them is at most 64 bytes, its newlines escaped by the kernel)."""
    fd = os.open(f"/proc/{pid}/status", os.O_RDONLY)
    try:
        data = os.read(fd, 1024)
    finally:
        os.close(fd)
    at = data.find(b"\nUid:")
    if at < 0:
        raise OSError(f"no Uid line in the first 1 KB of /proc/{pid}/status")
    return data[at + 5:data.find(b"\n", at + 5)].split()[:3]


def processes_of(uid: int, ignore: str = "ZX") -> dict[int, set[str]]:
    """The processes of `uid` with a thread in a state not in `ignore`, with those states."""
    return {pid: live for pid, seen in listing(uid).items() if (live := set(seen.states) - set(ignore))}


_SCHEDSTAT = os.path.exists("/proc/self/schedstat")   # CONFIG_SCHED_INFO


def _thread(path: str) -> Thread:
    try:
        with open(f"{path}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        state = ""
    if not _SCHEDSTAT:
        return Thread(state, 0, 0)
    try:
        with open(f"{path}/schedstat") as f:
            run_ns, _, runs = (int(x) for x in f.read().split()[:3])
    except (OSError, ValueError):   # it ended
        run_ns, runs = -1, -1
    return Thread(state, run_ns, runs)
