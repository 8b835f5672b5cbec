"""The CUDA contexts that outlive their process (sandbox/gpu_contexts.py), and the freezer's use of them."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from cuda_agent.sandbox import ContextWatch, Freezer
from cuda_agent.sandbox import gpu_contexts
from cuda_agent.sandbox.freezer import FrozenBlock
from cuda_agent.sandbox.gpu_contexts import Nvml, gone


def _reaped_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_a_live_process_is_not_gone_but_a_reaped_or_zombie_one_is():
    assert not gone(os.getpid())
    assert gone(_reaped_pid())
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        deadline = time.monotonic() + 30
        while not gone(zombie.pid) and time.monotonic() < deadline:   # exited, not waited for: a zombie
            time.sleep(0.01)
        assert Path(f"/proc/{zombie.pid}").exists() and gone(zombie.pid)
    finally:
        zombie.wait()


def test_a_context_whose_process_is_gone_is_named_once_seen_twice():
    dead = _reaped_pid()
    watch = ContextWatch([os.getpid()], listing=lambda: {os.getpid(), dead, 0})   # 0: a pid NVML could not name
    assert watch.orphans() == (dead,) and watch.usable


def test_a_context_torn_down_between_the_two_looks_is_not_an_orphan():
    """An honest exit's context goes a moment after its process: the second look no longer lists it."""
    dead, looks = _reaped_pid(), []

    def listing() -> set[int]:
        looks.append(1)
        return {os.getpid(), dead} if len(looks) == 1 else {os.getpid()}

    watch = ContextWatch([os.getpid()], listing=listing)
    assert watch.orphans() == () and len(looks) == 2


def test_the_watch_answers_only_where_nvml_names_a_pid_it_knows():
    """Pids of another PID namespace would all look gone: unless the child is listed under its pid here, the
    watch says it cannot tell (the harness flags gpu_contexts_unchecked) rather than accuse."""
    watch = ContextWatch([os.getpid()], listing=lambda: {_reaped_pid()})
    assert watch.orphans() == () and watch.usable is False
    assert watch.orphans() == ()   # decided once

    def broken() -> set[int]:
        raise OSError("nvmlDeviceGetComputeRunningProcesses failed (999)")

    watch = ContextWatch([os.getpid()], listing=broken)
    assert watch.orphans() == () and watch.usable is False


def test_without_nvml_there_is_no_watch(monkeypatch):
    assert Nvml.load("libnvidia-ml-not-here.so.1") is None
    monkeypatch.setattr(gpu_contexts.Nvml, "load", classmethod(lambda cls, name="": None))
    watch = ContextWatch([os.getpid()])
    assert watch.usable is False and watch.orphans() == ()


def test_a_block_at_whose_end_an_orphan_context_is_listed_is_not_quiet():
    asked = []

    def orphans() -> tuple[int, ...]:
        asked.append(1)
        return (4242,)

    with Freezer([], gpu_orphans=orphans) as freezer:
        with freezer.frozen() as block:
            pass
    assert asked and block.gpu_orphans == (4242,) and not block.quiet
    assert "a process that has exited (pid 4242)" in block.why_not_quiet()
    with Freezer([], gpu_orphans=lambda: ()) as freezer:
        with freezer.frozen() as block:
            pass
    assert block.quiet and FrozenBlock(stopped=True).quiet


DAEMON = r"""
import array, os, socket, sys, torch
torch.cuda._sleep(1000)
torch.cuda.synchronize()
for _ in range(40):
    torch.cuda._sleep(50_000_000)   # tens of milliseconds each: the work outlives the process
fds = []
for fd in os.listdir("/proc/self/fd"):
    try:
        if os.readlink(f"/proc/self/fd/{fd}").startswith("/dev/nvidia"):
            fds.append(int(fd))
    except FileNotFoundError:
        pass
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
s.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
s.recv(1)
os._exit(0)
"""


@pytest.mark.cuda
def test_on_the_device_a_context_parked_in_another_process_is_named_by_its_dead_pid():
    """The review's F2, measured 2026-11-28 (gpu_owner_probe): a process queues work, passes its /dev/nvidia*
    descriptors to another (here this test's own socket, holding them unread in its queue) and exits; the
    driver keeps the context and NVML lists the dead pid."""
    import torch

    torch.ones(1, device="cuda").sum().item()   # this process's own context: NVML's pids known to be this namespace's
    path = Path(tempfile.mkdtemp(prefix="cuda_agent_park_")) / "s"
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(path))
    srv.listen(1)
    daemon = subprocess.Popen([sys.executable, "-c", DAEMON, str(path)])
    try:
        conn, _ = srv.accept()
        conn.settimeout(60)
        assert conn.recv(1, socket.MSG_PEEK) == b"x"   # sent; the descriptors wait in the queue, never received
        conn.send(b"k")
        assert daemon.wait(30) == 0
        watch = ContextWatch([os.getpid()])
        assert watch.orphans() == (daemon.pid,) and watch.usable
        conn.close()   # the queue and its descriptors go: the context with them
        deadline = time.monotonic() + 30
        while watch.orphans() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert watch.orphans() == ()
    finally:
        if daemon.poll() is None:
            daemon.kill()
        srv.close()
        path.unlink(missing_ok=True)
        path.parent.rmdir()
