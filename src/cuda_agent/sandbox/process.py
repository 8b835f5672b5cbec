"""A sandboxed child process speaking JSON lines (`Process` on the parent's side, `ChildChannel` in
the child), and `Exchange`, the pair of scratch folders it and its parent share. Messages go over
two pipes that are not its stdin/stdout, so nothing it prints can be taken for a message; it gets a
wall-clock limit per request, a host-memory limit and the confinement of isolation.py."""

from __future__ import annotations

import json
import logging
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cuda_agent.devices import COMPILE_THREADS_ENV, TIMING_CORES_ENV
from cuda_agent.home import LOCKS_ENV, locks
from cuda_agent.sandbox import forkserver
from cuda_agent.sandbox.groups import kill_group
from cuda_agent.sandbox.isolation import PACKAGE_ROOT, Confinement, SandboxUser

MAX_MESSAGE = 1 << 20
_log = logging.getLogger(__name__)


class ChildFailed(RuntimeError):
    """The child died, hung, or broke the protocol; `reason` says which, for a person."""


class Exchange:
    """Two scratch folders for one sandboxed run: `public` (the child's, where it writes outputs) and
    `private` (the parent's: logs and anything the child must not see), on tmpfs where available."""

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
    prints can be taken for a message. With `fork_server` (or CUDA_AGENT_FORK_SERVER=1; =0 turns it
    off), it is forked from a process that has imported torch already (forkserver.py) instead of
    starting a fresh interpreter."""

    def __init__(self, module: str, *, cwd: Path, log: Path, user: SandboxUser | None = None,
                 memory_bytes: int | None = None, limit_address_space: bool = False,
                 isolate_network: bool = False, fork_server: bool = False,
                 env: dict[str, str] | None = None):
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()
        child_env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(cwd),
            "PYTHONPATH": PACKAGE_ROOT,
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONUNBUFFERED": "1",
            "TORCH_EXTENSIONS_DIR": str(cwd / "torch_extensions"),
            "TRITON_CACHE_DIR": str(cwd / "triton"),
            "TORCHINDUCTOR_CACHE_DIR": str(cwd / "inductor"),
            # the device locks' folder, resolved here: a worker that takes them (a reference worker's warm compile,
            # a synth worker) must take the harness's, whatever its own environment would make of it
            LOCKS_ENV: str(locks()),
            # glibc's resolver asks for A and AAAA at once with sendmmsg, which the seccomp filter refuses
            "RES_OPTIONS": "single-request",
        }
        for k in ("CUDA_VISIBLE_DEVICES", "CUDA_HOME", "LD_LIBRARY_PATH", "OMP_NUM_THREADS", "CUDA_AGENT_HOME",
                  TIMING_CORES_ENV, COMPILE_THREADS_ENV):  # the last: each compiling process's pool
            if k in os.environ:
                child_env[k] = os.environ[k]
        child_env.update(env or {})
        self.env = child_env  # what the child runs with (a forked child's /proc/PID/environ shows its server's)
        self._log = open(log, "wb")
        self.log_path = log
        confinement = Confinement(user, memory_bytes if limit_address_space else None, network=not isolate_network)
        self.proc: subprocess.Popen | forkserver.ForkedChild | None = None
        try:
            if forkserver.wanted(fork_server):
                try:
                    self.proc = forkserver.spawn(module, cwd=cwd, env=child_env, confinement=confinement,
                                                 channel=(to_child_r, from_child_w), log_fd=self._log.fileno())
                except forkserver.ForkServerFailed as e:  # a fresh interpreter instead, as without one
                    _log.warning("%s; starting %s without it", e, module)
            if self.proc is None:
                self.proc = subprocess.Popen(
                    [sys.executable, "-s", "-m", module, str(to_child_r), str(from_child_w)],
                    cwd=cwd, env=child_env, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                    pass_fds=(to_child_r, from_child_w), preexec_fn=confinement.preexec())
        except BaseException:
            for fd in (to_child_r, self._to_child, self._from_child, from_child_w):
                os.close(fd)
            self._log.close()
            raise
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
            kill_group(self.proc.pid)
            if self.proc.poll() is None:
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
    """The child's end: read commands, write replies (inside the child process)."""

    def __init__(self, fd_in: int, fd_out: int):
        self._in = os.fdopen(fd_in, "rb")
        self._out = fd_out

    def recv(self) -> dict | None:
        line = self._in.readline()
        return json.loads(line) if line else None

    def send(self, message: dict) -> None:
        os.write(self._out, (json.dumps(message) + "\n").encode())
