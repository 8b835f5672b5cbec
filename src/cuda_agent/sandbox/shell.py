"""The agent's shell: `Environment`, the protocol the agent's tools run commands through, and
`CommandRunner`, its implementation, which runs each command confined (isolation.py): as the run's
own tool user when the agent is root, without network, with a clean environment (no API keys) and
HOME set to the workspace, in a PID namespace of its own where the kernel allows one. Everything a
command starts is gone when it returns: the namespace dies with its first process, and as root
every process of the run's tool user is killed besides, so a `setsid` daemon cannot outlive the
command and change the workspace after the harness has taken its snapshot.
"""

from __future__ import annotations

import os
import pwd
import re
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from cuda_agent.home import home
from cuda_agent.sandbox.groups import kill_group
from cuda_agent.sandbox.isolation import (TOOL_USER, Confinement, SandboxUser, UserSlot, claim_user,
                                          reachable_by_others)

_SECRET_ENV = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL", re.I)
TOOL_NICE = 10  # a model's commands yield the CPU to the harness's timing


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


class Environment(Protocol):
    """Where a run's shell commands run: each one in the workspace, ended with everything it started."""

    def run(self, command: str, timeout: float, max_chars: int = 12_000) -> CommandResult:
        """Run `command` (bash -c) for at most `timeout` seconds; its output kept to `max_chars`."""
        ...

    def adopt(self, path: Path) -> None:
        """Make a file written for the run (by the agent's own tools) the commands' own."""
        ...

    def describe(self) -> str:
        """How commands are isolated, for the run's record."""
        ...

    def close(self) -> None:
        """End the environment (and whatever still runs in it)."""
        ...


def claim_tool_user() -> UserSlot | None:
    """A tool user of the run's own (`cuda-agent-tool-N`, held until `release`) when we are root;
    None otherwise, or when every slot is taken."""
    return claim_user(prefix=TOOL_USER)


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
    """An `Environment`: runs shell commands in the workspace, confined, and ends everything each one started.
    `slot`: the run's tool user (root), released by `close()`."""

    def __init__(self, workspace: Path, slot: UserSlot | None, network: bool = False):
        self.workspace = Path(workspace)
        self.slot = slot
        self.user = slot.user if slot is not None else None
        self.network = network
        self.confinement = Confinement(self.user, network=network, own_pids=True, user_namespace=True,
                                       nice=TOOL_NICE)
        self.env = {k: v for k, v in os.environ.items() if not _SECRET_ENV.search(k) and k != "CUDA_AGENT_HOME"}
        self.env.update(HOME=str(self.workspace), PWD=str(self.workspace))
        if self.user is not None:
            self.env.update(USER=self.user.name, LOGNAME=self.user.name)

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

    def own_pid_namespace(self) -> bool:
        """Whether commands run in a PID namespace of their own (the shell is its process 1)."""
        return self.run("echo $$", timeout=30, max_chars=100).text().strip() == "1"

    def run(self, command: str, timeout: float, max_chars: int = 12_000) -> CommandResult:
        start = time.monotonic()
        read_end, write_end = os.pipe()
        try:
            proc = subprocess.Popen(["bash", "-c", command], cwd=self.workspace, env=self.env,
                                    stdin=subprocess.DEVNULL, stdout=write_end, stderr=write_end,
                                    preexec_fn=self.confinement.preexec())
        finally:
            os.close(write_end)
        reader = _BoundedReader(read_end, max_chars)
        timed_out = False
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            self._end(proc)
        head, tail, omitted = reader.result()
        return CommandResult(head, tail, omitted, None if timed_out else proc.returncode, timed_out,
                             time.monotonic() - start)

    def _end(self, proc: subprocess.Popen) -> None:
        """Kill everything the command started: its process group (the namespace's first process
        with it, and so the namespace), and every process of the run's tool user."""
        kill_group(proc.pid)
        proc.wait()
        if self.slot is not None:
            self.slot.kill_processes()

    def adopt(self, path: Path) -> None:
        """Give a file the agent's own tools wrote (as root) to the tool user, with its new parent folders."""
        if self.user is None:
            return
        path = Path(path)
        while path != self.workspace and self.workspace in path.parents:
            if path.stat().st_uid == 0:
                os.lchown(path, self.user.uid, self.user.gid)
            path = path.parent

    def close(self) -> None:
        """Free the run's tool user (killing whatever still runs as it)."""
        if self.slot is not None:
            self.slot.release()
            self.slot = None


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
        # Where no namespace was had, a process that left the group (setsid) may hold the pipe
        # open: stop waiting for it.
        self.thread.join(timeout=5)
        with self.lock:
            omitted = self.total - len(self.head) - len(self.tail)
            return self.head.decode(errors="replace"), self.tail.decode(errors="replace"), omitted
