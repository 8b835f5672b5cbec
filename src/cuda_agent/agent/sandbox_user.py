"""Permission isolation for the agent's commands (the paper's "system-level permission isolation").

Started as root, the agent runs every shell command as an unprivileged user (`cuda-agent-tool`,
created when missing, else `nobody`), in its own process group, without network where the kernel
allows a new network namespace, with a clean environment (no API keys) and HOME set to the
workspace. The workspace is writable by that user except the protected files, which stay root's;
the harness home (signing key, seeds) is root's alone. Not started as root, commands run as the
current user (still without network where possible), and the harness's checks are what remains.
"""

from __future__ import annotations

import ctypes
import os
import pwd
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from cuda_agent.harness.sandbox import SandboxUser, ensure_user, reachable_by_others
from cuda_agent.home import home

TOOL_USER = "cuda-agent-tool"
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNET = 0x40000000
_SECRET_ENV = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL", re.I)
_user_lock = threading.Lock()


@dataclass
class CommandResult:
    head: str            # stdout and stderr together; when long, its head and its tail
    tail: str
    omitted: int         # bytes left out between head and tail
    exit_code: int | None
    timed_out: bool
    seconds: float

    def text(self, marker: str = "\n[... {omitted} bytes omitted ...]\n") -> str:
        return self.head + (marker.format(omitted=self.omitted) if self.omitted else "") + self.tail


def tool_user() -> SandboxUser | None:
    """The unprivileged user for commands when running as root (created if missing); None otherwise."""
    with _user_lock:  # parallel runs must not race to create it
        return ensure_user(TOOL_USER)


def prepare_workspace(workspace: Path, user: SandboxUser, protected: set[str]) -> None:
    """Hand the workspace to `user`, except the protected files and the harness's folders, which
    stay root's and read-only. The root folder is sticky, so the user can add files but cannot
    rename or delete root's. The harness home becomes root-only."""
    os.chmod(home(), 0o700)
    for dirpath, dirnames, filenames in os.walk(workspace):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = path.relative_to(workspace)
            root_owned = rel.as_posix() in protected or rel.parts[0] in ("utils", ".cuda_agent")
            os.lchown(path, 0 if root_owned else user.uid, 0 if root_owned else user.gid)
            if root_owned and not path.is_symlink():
                os.chmod(path, 0o755 if path.is_dir() or os.access(path, os.X_OK) else 0o644)
    os.chown(workspace, 0, user.gid)
    os.chmod(workspace, 0o1775)


def shared_workspace_dir(name: str) -> Path:
    """A folder every user can enter, for workspaces whose own place the tool user cannot reach."""
    base = Path(tempfile.gettempdir()) / "cuda-agent-workspaces"
    base.mkdir(mode=0o711, exist_ok=True)
    os.chmod(base, 0o711)  # enterable, not listable
    return Path(tempfile.mkdtemp(prefix=f"{name}-", dir=base))


class CommandRunner:
    """Runs shell commands in the workspace as the tool user (or the current user), killing the
    whole process group at the end, so nothing a command starts outlives it."""

    def __init__(self, workspace: Path, user: SandboxUser | None, network: bool = False):
        self.workspace = Path(workspace)
        self.user = user
        self.network = network
        self._libc = ctypes.CDLL(None, use_errno=True)
        self.env = {k: v for k, v in os.environ.items() if not _SECRET_ENV.search(k) and k != "CUDA_AGENT_HOME"}
        self.env.update(HOME=str(self.workspace), PWD=str(self.workspace))
        if user is not None:
            self.env.update(USER=user.name, LOGNAME=user.name)

    def describe(self) -> str:
        """How commands are isolated, found by running one."""
        who = f"user {self.user.name}" if self.user else f"the current user ({pwd.getpwuid(os.geteuid()).pw_name})"
        probe = self.run("readlink /proc/self/ns/net", timeout=30, max_chars=200)
        try:
            own = os.readlink("/proc/self/ns/net")
        except OSError:
            own = ""
        isolated = probe.exit_code == 0 and own and probe.text().strip() not in ("", own)
        note = "" if self.user is None or reachable_by_others(os.path.realpath(sys.executable)) else \
            " (this Python is out of its reach: run scripts/setup.sh so that commands can use it)"
        return f"{who}, {'no network' if isolated else 'with network'}{note}"

    def run(self, command: str, timeout: float, max_chars: int = 12_000) -> CommandResult:
        start = time.monotonic()
        read_end, write_end = os.pipe()
        try:
            proc = subprocess.Popen(["bash", "-c", command], cwd=self.workspace, env=self.env,
                                    stdin=subprocess.DEVNULL, stdout=write_end, stderr=write_end,
                                    start_new_session=True, preexec_fn=self._drop_privileges)
        finally:
            os.close(write_end)
        reader = _BoundedReader(read_end, max_chars)
        timed_out = False
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            _kill_group(proc.pid)
            proc.wait()
        head, tail, omitted = reader.result()
        return CommandResult(head, tail, omitted, None if timed_out else proc.returncode, timed_out,
                             time.monotonic() - start)

    def adopt(self, path: Path) -> None:
        """Give a file the agent's own tools wrote (as root) to the tool user, with its new parent folders."""
        if self.user is None:
            return
        path = Path(path)
        while path != self.workspace and self.workspace in path.parents:
            if path.stat().st_uid == 0:
                os.lchown(path, self.user.uid, self.user.gid)
            path = path.parent

    def _drop_privileges(self) -> None:
        # Runs in the child between fork and exec: the network namespace first (it needs the
        # privileges), then the user. A kernel that refuses namespaces leaves the network on.
        if not self.network and self._libc.unshare(_CLONE_NEWNET) != 0 and self.user is None:
            self._own_user_namespace()
        if self.user is not None:
            os.setgroups([])
            os.setgid(self.user.gid)
            os.setuid(self.user.uid)

    def _own_user_namespace(self) -> None:
        """Not root: a user namespace of our own (mapping only ourselves) may hold a network namespace."""
        uid, gid = os.getuid(), os.getgid()
        if self._libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNET) != 0:
            return
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
            fd = os.open(f"/proc/self/{name}", os.O_WRONLY)
            try:
                os.write(fd, text.encode())
            finally:
                os.close(fd)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class _BoundedReader:
    """Reads a pipe to its end in a thread, keeping the first and the last `max_chars / 2` bytes."""

    def __init__(self, fd: int, max_chars: int):
        self.fd, self.half = fd, max(max_chars // 2, 1)
        self.head, self.tail, self.total = b"", b"", 0
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            while chunk := os.read(self.fd, 65536):
                with self.lock:
                    self.total += len(chunk)
                    room = self.half - len(self.head)
                    if room > 0:
                        self.head += chunk[:room]
                        chunk = chunk[room:]
                    self.tail = (self.tail + chunk)[-self.half:]
        finally:
            os.close(self.fd)

    def result(self) -> tuple[str, str, int]:
        # A process that left the group (setsid) may hold the pipe open: stop waiting for it.
        self.thread.join(timeout=5)
        with self.lock:
            omitted = self.total - len(self.head) - len(self.tail)
            return self.head.decode(errors="replace"), self.tail.decode(errors="replace"), omitted
