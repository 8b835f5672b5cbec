"""A fork server: a process that imports torch once and forks the sandboxed children of `Process`
from there, so that a child starts in milliseconds instead of seconds of `import torch` (about 2
CPU-seconds each on a small CPU; every evaluation starts two).

One server per client process and environment, started with a child's environment minus what each
child sets for itself (`AFTER_FORK`, read by nothing torch runs at import), so that what torch reads
while importing is what a fresh child would have read. The server never initialises CUDA (children
do, after the fork), holds no module of ours (a child imports them afresh), and ends when its client
does (end of file on its socket), killing its children first.

A child, right after the fork: its log as stdout and stderr, /dev/null as stdin, no other descriptor
but its two channel pipes, the client's CPU affinity, its folder, its confinement (`Confinement`),
its own environment, then its module run as `python -m` runs one. The client holds a pidfd of each
child (signals go to that process and no other) and learns its exit status from the server.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import importlib
import os
import pickle
import runpy
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Mapping
from pathlib import Path

from cuda_agent.sandbox.isolation import PACKAGE_ROOT, Confinement, SandboxUser

# torch (about 2 CPU-s), the extension loader, and torch.compile's own modules: a reference worker that compiles a
# task's model pays 2.7 s less for its first compile (6.2-6.6 s -> 3.5 s, a cached graph, one CPU thread, 2026-11-27).
# Importing the extension loader initialises CUDA where a GPU is visible (H100, torch 2.11, 2026-11-27), and a child
# forked after that cannot use CUDA ("Cannot re-initialize CUDA in forked subprocess"): there only torch is preloaded.
PRELOAD = ("torch", "torch.utils.cpp_extension", "torch._dynamo", "torch._inductor.compile_fx")
PRELOAD_WITH_GPU = ("torch",)
AFTER_FORK = ("HOME", "TORCH_EXTENSIONS_DIR", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR")
AFTER_FORK_PREFIX = "CUDA_AGENT_"
SWITCH_ENV = "CUDA_AGENT_FORK_SERVER"  # "0": every child is a fresh interpreter; "1": forked wherever asked
MAX_MESSAGE = 1 << 20
START_S = 120.0
SPAWN_S = 30.0
SET_UP_S = 30
MAX_SERVERS = 4  # per client process; the least recently used one without children goes first
# The server runs `python -s -c BOOT FD ROOT`: our package is importable while the server imports this module and
# not after, so a child's `sys.path` is what its own environment makes it (a child's `-m` folder set after the fork).
BOOT = ("import sys; sys.path.insert(1, sys.argv[2]); from cuda_agent.sandbox.forkserver import main; "
        "del sys.path[1]; main()")


def wanted(default: bool) -> bool:
    """Whether a caller that would use the server by `default` does: CUDA_AGENT_FORK_SERVER=0/1 overrides."""
    value = os.environ.get(SWITCH_ENV, "").strip()
    return default if value not in ("0", "1") else value == "1"


def server_env(env: dict[str, str]) -> dict[str, str]:
    """The part of a child's environment its server is started with (and keyed by)."""
    return {k: v for k, v in env.items() if k not in AFTER_FORK and not k.startswith(AFTER_FORK_PREFIX)}


class ForkServerFailed(RuntimeError):
    """The fork server could not start or stopped answering; `Process` then says why the child could not start."""


# ---- the client's side ---------------------------------------------------------------------------

class ForkedChild:
    """A forked child as the client sees it, with what `Process` uses of `subprocess.Popen`."""

    def __init__(self, server: "ForkServer", pid: int, pidfd: int):
        self.server, self.pid, self._pidfd = server, pid, pidfd
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.server.exit_code(self.pid, 0.0)
            if self.returncode is not None:
                self._close_pidfd()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self.server.exit_code(self.pid, timeout)
            if self.returncode is None:
                raise subprocess.TimeoutExpired(f"forked {self.pid}", timeout or 0)
            self._close_pidfd()
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None and self._pidfd >= 0:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self._pidfd, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def _close_pidfd(self) -> None:
        if self._pidfd >= 0:
            os.close(self._pidfd)
            self._pidfd = -1

    def __del__(self):
        with contextlib.suppress(OSError):
            self._close_pidfd()


class ForkServer:
    """The client's end of one server: `spawn` a child, learn when each one ends."""

    def __init__(self, env: dict[str, str]):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # The server's log has no name: nothing is left in /tmp by a client that is killed (a Ray worker, say).
        self._log = tempfile.TemporaryFile(prefix="cuda_agent_forkserver_")
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-s", "-c", BOOT, str(theirs.fileno()), PACKAGE_ROOT],
                cwd="/", env=env, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                pass_fds=(theirs.fileno(),), start_new_session=True)
        finally:
            theirs.close()
        self._sock = ours
        self._lock = threading.Lock()              # one spawn at a time on the socket
        self._done = threading.Condition()
        self._codes: dict[int, int] = {}
        self._replies: list[tuple[dict, list[int]]] = []
        self._running: set[int] = set()
        self._dead = False
        self._stale = False  # a spawn went unanswered: a late reply must never be taken for the next spawn's
        self.used = time.monotonic()
        threading.Thread(target=self._read, name="forkserver-reader", daemon=True).start()
        with self._done:
            ready = self._reply(START_S)
        if ready is None or not ready[0].get("ready"):
            tail = ready[0].get("error") if ready else self.log_tail()
            self.close()
            raise ForkServerFailed(f"the fork server did not start: {tail}")

    def _reply(self, timeout_s: float) -> tuple[dict, list[int]] | None:  # (called holding `_done`)
        """The next reply (not an exit) within `timeout_s`, or None."""
        deadline = time.monotonic() + timeout_s
        while not self._replies and not self._dead and time.monotonic() < deadline:
            self._done.wait(0.5)
        return self._replies.pop(0) if self._replies else None

    def _read(self) -> None:
        while True:
            try:
                data, fds, _, _ = socket.recv_fds(self._sock, MAX_MESSAGE, 1)
            except OSError:
                data, fds = b"", []
            with self._done:
                if not data:  # the server is gone, and with it (parent-death signal) every child of it
                    self._dead = True
                    self._done.notify_all()
                    return
                message = pickle.loads(data)
                if "exit" in message:
                    self._codes[message["exit"]] = message["code"]
                    self._running.discard(message["exit"])
                else:
                    self._replies.append((message, list(fds)))
                self._done.notify_all()

    def alive(self) -> bool:
        return not self._dead and not self._stale and self.proc.poll() is None

    def idle(self) -> bool:
        with self._done:
            return not self._running

    def spawn(self, module: str, *, cwd: Path, env: dict[str, str], confinement: Confinement,
              channel: tuple[int, int], log_fd: int) -> ForkedChild:
        self.used = time.monotonic()
        # Plain data only: unpickling a class of ours would import our package into the server.
        request = {"module": module, "cwd": str(cwd), "env": env, "confinement": dataclasses.asdict(confinement),
                   "affinity": sorted(os.sched_getaffinity(0)),
                   "nice": os.getpriority(os.PRIO_PROCESS, 0)}
        with self._lock:
            try:
                socket.send_fds(self._sock, [pickle.dumps(request)], [*channel, log_fd])
            except OSError as e:
                raise ForkServerFailed(f"the fork server stopped answering ({e})") from None
            with self._done:
                answer = self._reply(SPAWN_S)
                if answer is None:
                    self._stale = True
                    raise ForkServerFailed(f"the fork server did not fork: {self.log_tail()}")
                reply, fds = answer
                if "pid" in reply and reply["pid"] not in self._codes:  # (it may have ended already)
                    self._running.add(reply["pid"])
        if "pid" not in reply:
            for fd in fds:
                os.close(fd)
            if "set_up" in reply:  # as Popen raises when its preexec fails: no fresh interpreter instead
                raise subprocess.SubprocessError(reply["error"])
            raise ForkServerFailed(f"the fork server could not fork: {reply.get('error', '?')}")
        return ForkedChild(self, reply["pid"], fds[0] if fds else -1)

    def exit_code(self, pid: int, timeout: float | None) -> int | None:
        """The child's exit status as Popen gives it (-N for signal N), or None if it still runs."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._done:
            while pid not in self._codes:
                if self._dead:
                    return -signal.SIGKILL  # its parent died: the parent-death signal killed it
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None
                self._done.wait(left if left is not None else 1.0)
            return self._codes.pop(pid)

    def log_tail(self, chars: int = 1500) -> str:
        end = os.fstat(self._log.fileno()).st_size
        said = os.pread(self._log.fileno(), chars, max(0, end - chars)).decode(errors="replace").strip()
        return said or "(no output)"

    def close(self) -> None:
        # End of file for the server (it kills its children and exits) and for our reader thread; shutdown, as a
        with contextlib.suppress(OSError):  # bare close would wait for the reader's recv to end
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


_servers: dict[tuple, ForkServer] = {}
_servers_lock = threading.Lock()


def spawn(module: str, *, cwd: Path, env: dict[str, str], confinement: Confinement,
          channel: tuple[int, int], log_fd: int) -> ForkedChild:
    """A child forked from this process's server for `env` (started now if there is none, or it died)."""
    base = server_env(env)
    key = (os.getpid(), tuple(sorted(base.items())))
    with _servers_lock:
        server = _servers.get(key)
        if server is None or not server.alive():
            if server is not None:
                _retire(_servers.pop(key))
            _close_idle_retired()
            _evict(keep=MAX_SERVERS - 1)
            server = _servers[key] = ForkServer(base)
    return server.spawn(module, cwd=cwd, env=env, confinement=confinement, channel=channel, log_fd=log_fd)


_retired: list[ForkServer] = []  # replaced while children of theirs still ran: closed once idle, or at exit


def _retire(server: ForkServer) -> None:
    _retired.append(server)
    _close_idle_retired()


def _close_idle_retired() -> None:
    for old in [s for s in _retired if s.idle() or s.proc.poll() is not None]:
        _retired.remove(old)
        old.close()


def _evict(keep: int) -> None:
    """Close this process's least recently used servers that have no child running, down to `keep`."""
    mine = sorted((s.used, k) for k, s in _servers.items() if k[0] == os.getpid())
    for _, key in mine[:max(0, len(mine) - keep)]:
        if _servers[key].idle():
            _servers.pop(key).close()


@atexit.register
def close_all() -> None:
    """Stop this process's servers (each kills the children it still has)."""
    with _servers_lock:
        mine = [k for k in _servers if k[0] == os.getpid()]
        servers = [_servers.pop(k) for k in mine] + _retired[:]
        _retired.clear()
    for server in servers:
        server.close()


# ---- the server's side ---------------------------------------------------------------------------

def _send(sock: socket.socket, message: dict, fds: list[int] = ()) -> None:
    socket.send_fds(sock, [pickle.dumps(message)], list(fds))


def _read_ready(ready_r: int, pidfd: int) -> bytes:
    """What the child says once set up (its confinement in place), until end of file; a child that says
    nothing within SET_UP_S is killed."""
    said = b""
    deadline = time.monotonic() + SET_UP_S
    try:
        while (left := deadline - time.monotonic()) > 0:
            if not select.select([ready_r], [], [], left)[0]:
                continue
            chunk = os.read(ready_r, 4096)
            if not chunk:
                return said
            said += chunk
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        return said or b"not set up within %d s" % SET_UP_S
    finally:
        os.close(ready_r)


def gpu_visible(env: Mapping[str, str]) -> bool:
    """Whether a child of this environment could see a GPU (then nothing may initialise CUDA before the fork)."""
    hidden = env.get("CUDA_VISIBLE_DEVICES", "x").strip() in ("", "-1")
    return not hidden and any(Path(p).exists() for p in ("/dev/nvidiactl", "/dev/kfd"))


def serve(sock: socket.socket) -> None:
    for name in PRELOAD_WITH_GPU if gpu_visible(os.environ) else PRELOAD:
        importlib.import_module(name)
    if sys.modules["torch"].cuda.is_initialized():  # a child could not use CUDA: the client starts fresh ones
        _send(sock, {"ready": False, "error": "CUDA was initialised while preloading"})
        return
    for name in [m for m in sys.modules if m == "cuda_agent" or m.startswith("cuda_agent.")]:
        del sys.modules[name]  # a child imports ours afresh, under its own environment
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    children: set[int] = set()
    _send(sock, {"ready": True})
    while True:
        readable, _, _ = select.select([sock, wake_r], [], [])
        if wake_r in readable:
            with contextlib.suppress(BlockingIOError):
                while os.read(wake_r, 512):
                    pass
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            children.discard(pid)
            _send(sock, {"exit": pid, "code": os.waitstatus_to_exitcode(status)})
        if sock not in readable:
            continue
        data, fds, _, _ = socket.recv_fds(sock, MAX_MESSAGE, 3)
        if not data:
            break
        request = pickle.loads(data)
        ready_r, ready_w = os.pipe()
        try:
            pid = os.fork()
        except OSError as e:
            for fd in (*fds, ready_r, ready_w):
                os.close(fd)
            _send(sock, {"error": f"fork failed: {e}"})
            continue
        if pid == 0:
            _child(request, list(fds), ready_w)  # never returns
        for fd in (*fds, ready_w):
            os.close(fd)
        children.add(pid)
        pidfd = os.pidfd_open(pid)
        said = _read_ready(ready_r, pidfd)
        if said == b"ok":
            _send(sock, {"pid": pid}, [pidfd])
        else:
            _send(sock, {"error": f"the child could not be set up: {said.decode(errors='replace') or 'it died'}",
                         "set_up": False})
        os.close(pidfd)
    for pid in children:  # the client is gone: so are its children
        for kill in (os.killpg, os.kill):
            with contextlib.suppress(OSError):
                kill(pid, signal.SIGKILL)


def _child(request: dict, fds: list[int], ready: int) -> None:
    """In the forked child: become what `python -s -m MODULE IN OUT` started by Popen would be. The
    server hears "ok" on `ready` once the confinement holds (as Popen returns once its preexec ran),
    or why it could not be set up."""
    try:
        to_child_r, from_child_w = _set_up(request, fds, ready)
    except BaseException as e:  # noqa: BLE001 - told to the server, which tells the client
        try:
            os.write(ready, f"{type(e).__name__}: {e}".encode()[:4000])
        finally:
            os._exit(126)
    os.write(ready, b"ok")
    os.close(ready)
    code = 0
    try:
        sys.argv = [request["module"], str(to_child_r), str(from_child_w)]
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
    except SystemExit as e:  # as the interpreter ends on one: None is 0, a message is printed and 1
        code = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
        if not isinstance(e.code, int | None):
            print(e.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
        code = 1
    try:  # what the interpreter does on its way out: non-daemon threads, atexit, buffered output
        threading._shutdown()
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code & 0xFF)


def _set_up(request: dict, fds: list[int], ready: int) -> tuple[int, int]:
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    to_child_r, from_child_w, log_fd = fds
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    keep = {0, 1, 2, to_child_r, from_child_w, ready}
    for name in os.listdir("/proc/self/fd"):  # the server's socket and pipes, the other children's descriptors
        if int(name) not in keep:
            with contextlib.suppress(OSError):
                os.close(int(name))
    os.sched_setaffinity(0, request["affinity"])
    fields = dict(request["confinement"])
    user = fields.pop("user")
    confinement = Confinement(user=SandboxUser(**user) if user else None, **fields)
    if confinement.nice is None:
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, 0, request["nice"])
    os.chdir(request["cwd"])
    confinement.preexec()()
    os.environ.clear()
    os.environ.update(request["env"])
    sys.path[0] = request["cwd"]  # where `python -m` puts the working folder
    return to_child_r, from_child_w


def main() -> None:
    serve(socket.socket(fileno=int(sys.argv[1])))
