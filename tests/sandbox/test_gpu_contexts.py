"""The CUDA contexts that outlive their process (sandbox/gpu_contexts.py), and the freezer's use of them."""

from __future__ import annotations

import ctypes
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from cuda_agent.sandbox import ContextWatch, Freezer
from cuda_agent.sandbox import gpu_contexts
from cuda_agent.sandbox.gpu_contexts import GONE, Nvml, user


def _reaped_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_a_live_process_has_its_user_a_reaped_or_zombie_one_or_a_thread_id_is_gone():
    assert user(os.getpid()) == os.getuid()
    assert user(_reaped_pid()) == GONE
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        deadline = time.monotonic() + 30
        while user(zombie.pid) != GONE and time.monotonic() < deadline:   # exited, not waited for: a zombie
            time.sleep(0.01)
        assert Path(f"/proc/{zombie.pid}").exists() and user(zombie.pid) == GONE
    finally:
        zombie.wait()
    ready, stop = threading.Event(), threading.Event()
    thread = threading.Thread(target=lambda: (ready.set(), stop.wait(30)))
    thread.start()
    ready.wait()
    try:   # a dead process's pid given to a thread of another: /proc/TID answers, but it is no process
        assert Path(f"/proc/{thread.native_id}/status").exists() and user(thread.native_id) == GONE
    finally:
        stop.set()
        thread.join()


def _watch(listing, known=None) -> ContextWatch:
    return ContextWatch([os.getpid()] if known is None else known, listing=listing)


def test_a_context_whose_process_is_gone_is_an_orphan_and_its_user_is_remembered(monkeypatch):
    monkeypatch.setattr(gpu_contexts, "SETTLE_S", 0.1)
    daemon = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        watch = _watch(lambda uuid: {os.getpid(), daemon.pid, 0})   # 0: a pid NVML could not name here
        first = watch.look()
        assert first.live == {os.getpid(): os.getuid(), daemon.pid: os.getuid()} and first.orphans == ()
    finally:
        daemon.kill()
        daemon.wait()
    t0 = time.monotonic()
    later = watch.look()
    assert later.orphans == (daemon.pid,) and later.live == {os.getpid(): os.getuid()}
    assert watch.owner(daemon.pid) == os.getuid() and time.monotonic() - t0 >= 0.1   # looked at again first
    never = _reaped_pid()
    assert _watch(lambda uuid: {os.getpid(), never}).look().orphans == (never,)


def test_a_context_torn_down_while_it_settles_is_not_an_orphan():
    """An honest exit's context goes a moment after its process: a later look no longer lists it."""
    dead, looks = _reaped_pid(), []

    def listing(uuid) -> set[int]:
        looks.append(uuid)
        return {os.getpid(), dead} if len(looks) < 3 else {os.getpid()}

    watch = _watch(listing)
    watch.on("GPU-1234")
    assert watch.look().orphans == () and len(looks) == 3 and set(looks) == {"GPU-1234"}


def test_the_watch_answers_only_where_nvml_names_the_trusted_pid():
    """Pids of another PID namespace would all look gone: unless the trusted process is listed under its pid
    here, the watch says nothing (the harness flags gpu_contexts_unchecked) rather than accuse."""
    watch = _watch(lambda uuid: {_reaped_pid()})
    assert watch.look().orphans == () and watch.usable is False
    assert watch.look().orphans == ()   # decided once

    def broken(uuid) -> set[int]:
        raise OSError("nvmlDeviceGetComputeRunningProcesses failed (999)")

    watch = _watch(broken)
    assert watch.look() == gpu_contexts.Look() and watch.usable is False


def test_nvml_failing_after_it_worked_is_said_not_swallowed():
    calls = []

    def flaky(uuid) -> set[int]:
        calls.append(1)
        if len(calls) > 1:
            raise OSError("nvmlDeviceGetComputeRunningProcesses failed (15)")
        return {os.getpid()}

    watch = _watch(flaky)
    assert watch.look().error == "" and watch.usable
    assert "failed (15)" in watch.look().error


def test_without_nvml_there_is_no_watch(monkeypatch):
    assert Nvml.load("libnvidia-ml-not-here.so.1") is None
    monkeypatch.setattr(gpu_contexts.Nvml, "load", classmethod(lambda cls, name="": None))
    watch = ContextWatch([os.getpid()])
    assert watch.usable is False and watch.look() == gpu_contexts.Look()


class _FakeLib:
    """libnvidia-ml's three calls the watch makes, over a list of pids larger than the first buffer."""

    def __init__(self, pids: list[int]) -> None:
        self.pids, self.sizes = pids, []

    def nvmlDeviceGetHandleByUUID(self, uuid, handle):
        return 0 if uuid.value == b"GPU-1" else 13

    def nvmlDeviceGetComputeRunningProcesses_v3(self, handle, n, infos):
        count = n._obj
        self.sizes.append(count.value)
        if count.value < len(self.pids):
            count.value = len(self.pids)
            return 7   # NVML_ERROR_INSUFFICIENT_SIZE
        for k, pid in enumerate(self.pids):
            infos[k].pid, infos[k].usedGpuMemory = pid, 1 << 20
        count.value = len(self.pids)
        return 0


def test_nvml_answers_are_read_with_their_own_layout_and_a_buffer_that_grows():
    lib = _FakeLib(list(range(1000, 1100)))
    nvml = Nvml(lib)
    assert nvml.compute_pids("GPU-1") == set(range(1000, 1100)) and lib.sizes == [64, 256]
    lib.nvmlDeviceGetGraphicsRunningProcesses_v3 = lambda handle, n, infos: 3     # NOT_SUPPORTED: left out
    graphics = _FakeLib([7, 8])
    lib.nvmlDeviceGetMPSComputeRunningProcesses_v3 = graphics.nvmlDeviceGetComputeRunningProcesses_v3
    assert Nvml(lib).compute_pids("GPU-1") == set(range(1000, 1100)) | {7, 8}
    lib.nvmlDeviceGetGraphicsRunningProcesses_v3 = lambda handle, n, infos: 999   # an error is one
    with pytest.raises(OSError, match="failed"):
        Nvml(lib).compute_pids("GPU-1")
    assert ctypes.sizeof(gpu_contexts._ProcessInfo) == 24
    with pytest.raises(OSError, match="knows no GPU"):
        nvml.compute_pids("GPU-2")


def test_the_freezer_blames_the_solution_only_for_what_it_saw_as_the_solutions(monkeypatch):
    """At a block's end: a live process of the user other than the child with a context holds the GPU; an orphan
    seen before as the user's is the solution's; one never seen as anyone's is a harness fault, not a verdict."""
    monkeypatch.setattr(gpu_contexts, "SETTLE_S", 0.05)
    helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    dead = _reaped_pid()
    me = os.getuid()
    try:
        state = {"pids": {os.getpid(), helper.pid, dead}}
        watch = _watch(lambda uuid: state["pids"])
        freezer = Freezer([], gpu_allowed=[os.getpid()], gpu_contexts=watch)
        freezer.uids = [me]   # the listing's users, without stopping anyone (stopping needs root and a sandbox user)
        monkeypatch.setattr(freezer, "_listing", lambda only=None: {})
        monkeypatch.setattr(freezer, "_signal", lambda uid, sig: True)
        with freezer.frozen() as block:
            pass
        assert block.gpu_holders == (helper.pid,) and block.gpu_foreign == (dead,) and block.gpu_orphans == ()
        assert not block.quiet and block.fault is None   # a holder is the solution's doing
        helper.kill()
        helper.wait()
        state["pids"] = {os.getpid(), helper.pid}
        with freezer.frozen() as block:
            pass
        assert block.gpu_orphans == (helper.pid,) and block.gpu_holders == () and block.fault is None
        assert "a process of the solution that has exited (pid %d)" % helper.pid in block.why_not_quiet()
        state["pids"] = {os.getpid(), dead}
        with freezer.frozen() as block:
            pass
        assert block.gpu_foreign == (dead,) and block.fault == "harness" and "harness fault" in block.why_not_quiet()
        state["pids"] = {os.getpid()}
        with freezer.frozen() as block:
            pass
        assert block.quiet and block.fault is None
        shared = Freezer([], gpu_allowed=[os.getpid()], gpu_files=(), gpu_contexts=watch)
        shared.uids = [me]   # a user shared with other children: no one of them is blamed
        monkeypatch.setattr(shared, "_listing", lambda only=None: {})
        monkeypatch.setattr(shared, "_signal", lambda uid, sig: True)
        state["pids"] = {os.getpid(), helper.pid}
        with shared.frozen() as block:
            pass
        assert block.gpu_orphans == () and block.gpu_foreign == (helper.pid,) and block.fault == "harness"
    finally:
        if helper.poll() is None:
            helper.kill()
            helper.wait()


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
        watch.on(f"GPU-{torch.cuda.get_device_properties(0).uuid}")
        look = watch.look()
        assert look.orphans == (daemon.pid,) and os.getpid() in look.live and watch.usable, look
        conn.close()   # the queue and its descriptors go: the context with them
        deadline = time.monotonic() + 30
        while watch.look().orphans and time.monotonic() < deadline:
            time.sleep(0.1)
        assert watch.look().orphans == ()
    finally:
        if daemon.poll() is None:
            daemon.kill()
        srv.close()
        path.unlink(missing_ok=True)
        path.parent.rmdir()
