"""The CUDA contexts on the GPU, as the driver names them: the work that no listing of /proc can see.

A context lives as long as a descriptor of it does, not its process. A process that queues kernels, passes
its /dev/nvidia* descriptors on (SCM_RIGHTS: into a socket's queue, or to the solution's child, which may
hold the GPU) and exits, or closes its own copies and unmaps them, leaves its work running beside the
baselines' windows while no process of the solution holds the GPU in /proc. The driver still names the
context's owner: NVML's compute processes list the pid that made it, after that pid has exited (2026-11-28,
2x H200, `benchmarks/gpu_owner_probe.py`: 20 x 50 ms queued, the daemon exited, a holder kept its 38
descriptors; the work ran on for 1.03 s and NVML listed the dead pid, never the holder's). In the sandbox the
seccomp filter now refuses sendmsg and pidfd_getfd (syscall_filter.py), so no descriptor is parked or taken: this
watch is the backstop behind it (a process of the solution's user that made a context and still lives, a
machine without the filter, a way not yet thought of).

So a `ContextWatch` reads, for the GPU being timed, NVML's pids and what each is here: a live process and its
user (the freezer counts one of the solution's user other than its child as holding the GPU), or gone (no such
process, a zombie, or a pid now a thread of another process). A gone one is looked at again for up to
`SETTLE_S` (an honest exit's context goes about 11 ms after its process) and, if it stays, is an orphan; the
user it was seen running as, in an earlier look, says whose (`owner`).

NVML is read through ctypes from libnvidia-ml.so.1 (no package). Its pids are this PID namespace's only where
the driver translates them, so the watch answers only once NVML has listed a pid it knows to hold a context on
that GPU (the trusted reference worker's); otherwise `usable` is False and it says nothing.
"""

from __future__ import annotations

import ctypes
import errno
import time
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Callable, Iterable

_NVML_SUCCESS, _NVML_NOT_SUPPORTED, _NVML_INSUFFICIENT_SIZE = 0, 3, 7
SETTLE_S = 1.0        # how long a context whose process is gone may take to go with it before it is an orphan
_SETTLE_STEP_S = 0.02


class _ProcessInfo(ctypes.Structure):   # nvmlProcessInfo_t (the v2 and v3 calls take the same 24-byte layout)
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong), ("gpuInstanceId", ctypes.c_uint),
                ("computeInstanceId", ctypes.c_uint)]


class Nvml:
    """NVML's processes (compute, graphics, MPS clients) on one GPU (by UUID) or on all. `Nvml.load()` is None where NVML is not there
    (a machine without NVIDIA's driver) or does not start."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self._lib = lib
        self._query = (getattr(lib, "nvmlDeviceGetComputeRunningProcesses_v3", None)
                       or lib.nvmlDeviceGetComputeRunningProcesses_v2)
        # a graphics context (Vulkan, EGL) and a client of an MPS server share the GPU too; where NVML or the GPU
        # does not know these lists, they are left out
        self._more = [f for f in (getattr(lib, "nvmlDeviceGetGraphicsRunningProcesses_v3", None),
                                  getattr(lib, "nvmlDeviceGetMPSComputeRunningProcesses_v3", None)) if f is not None]
        self._handles: dict[str | None, list[ctypes.c_void_p]] = {}

    _loaded: dict[str, Nvml | None] = {}   # one load a process: nvmlInit is not free

    @classmethod
    def load(cls, name: str = "libnvidia-ml.so.1") -> Nvml | None:
        if name not in cls._loaded:
            nvml = None
            with suppress(OSError, AttributeError):
                lib = ctypes.CDLL(name)
                if lib.nvmlInit_v2() == _NVML_SUCCESS:
                    nvml = cls(lib)
            cls._loaded[name] = nvml
        return cls._loaded[name]

    def _devices(self, uuid: str | None) -> list[ctypes.c_void_p]:
        if uuid not in self._handles:
            lib, handles = self._lib, []
            if uuid is not None:
                handle = ctypes.c_void_p()
                if lib.nvmlDeviceGetHandleByUUID(ctypes.c_char_p(uuid.encode()), ctypes.byref(handle)) != _NVML_SUCCESS:
                    raise OSError(f"NVML knows no GPU {uuid}")
                handles.append(handle)
            else:
                count = ctypes.c_uint()
                if lib.nvmlDeviceGetCount_v2(ctypes.byref(count)) != _NVML_SUCCESS:
                    raise OSError("nvmlDeviceGetCount_v2 failed")
                for i in range(count.value):
                    handle = ctypes.c_void_p()
                    if lib.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(handle)) != _NVML_SUCCESS:
                        raise OSError(f"nvmlDeviceGetHandleByIndex_v2({i}) failed")
                    handles.append(handle)
            self._handles[uuid] = handles
        return self._handles[uuid]

    def compute_pids(self, uuid: str | None = None) -> set[int]:
        """The pids of the contexts on GPU `uuid` ("GPU-..."; None: every GPU), as NVML names them."""
        pids: set[int] = set()
        for handle in self._devices(uuid):
            pids |= _listed(self._query, handle, optional=False)
            for query in self._more:
                pids |= _listed(query, handle, optional=True)
        return pids


def _listed(query, handle, optional: bool) -> set[int]:
    """One of NVML's process lists of a GPU, its buffer grown until it holds them all."""
    size = 64
    while True:
        n = ctypes.c_uint(size)
        infos = (_ProcessInfo * size)()
        rc = query(handle, ctypes.byref(n), infos)
        if rc == _NVML_INSUFFICIENT_SIZE and size < 65536:
            size *= 4
            continue
        if rc == _NVML_NOT_SUPPORTED and optional:
            return set()
        if rc != _NVML_SUCCESS:
            raise OSError(f"{getattr(query, '__name__', 'nvmlDeviceGet*RunningProcesses')} failed ({rc})")
        return {int(infos[k].pid) for k in range(n.value)}


GONE = -1   # `user()`'s answer for a pid that is no live process here


def user(pid: int) -> int | None:
    """The real uid of live process `pid`; GONE where there is none (no such pid, a zombie, or a pid that is a
    thread of another process now); None where /proc does not say (not ours to read)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            head = f.read(1024)
    except OSError as e:
        return GONE if e.errno in (errno.ENOENT, errno.ESRCH) else None
    fields = dict(line.split(b":", 1) for line in head.splitlines() if b":" in line)
    state = fields.get(b"State", b"").split()[:1]
    if state and state[0] in (b"Z", b"X"):
        return GONE
    if fields.get(b"Tgid", b"").strip() != str(pid).encode():
        return GONE
    uid = fields.get(b"Uid", b"").split()[:1]
    return int(uid[0]) if uid else None


@dataclass
class Look:
    """One look at the GPU's contexts: the live processes that own one (pid -> uid, None: unreadable), the
    orphans (pids gone while their context stayed), and `error` where NVML could not be read after it had been."""

    live: dict[int, int | None] = field(default_factory=dict)
    orphans: tuple[int, ...] = ()
    error: str = ""


class ContextWatch:
    """The contexts on one GPU (`on(uuid)`; all GPUs until then) and what their pids are here (`look()`), once
    NVML is known to name this PID namespace's pids: `known` (a trusted process's pid) must hold a context on
    that GPU by the first look. `listing(uuid)` is NVML's list (tests pass their own)."""

    def __init__(self, known: Iterable[int], listing: Callable[[str | None], set[int]] | None = None) -> None:
        self._known = frozenset(known)
        if listing is None:
            nvml = Nvml.load()
            listing = nvml.compute_pids if nvml is not None else None
        self._listing = listing
        self._uuid: str | None = None
        self.usable: bool | None = None if listing is not None else False   # None: not yet known
        self._owners: dict[int, int] = {}   # pid -> the uid it was last seen running as

    def on(self, uuid: str | None) -> None:
        self._uuid = uuid

    def owner(self, pid: int) -> int | None:
        """The uid `pid` was seen running as while it owned a context, None where it never was."""
        return self._owners.get(pid)

    def look(self) -> Look:
        if self._listing is None or self.usable is False:
            return Look()
        try:
            pids = {p for p in self._listing(self._uuid) if p > 0}   # 0: a pid NVML could not name here
        except OSError as e:
            if self.usable is None:   # never worked here: nothing to say, ever
                self.usable = False
                return Look()
            return Look(error=str(e))
        if self.usable is None:
            self.usable = bool(self._known & pids)
            if not self.usable:
                return Look()
        live = {pid: user(pid) for pid in pids}
        gone = {pid for pid, uid in live.items() if uid == GONE}
        deadline = time.monotonic() + SETTLE_S
        while gone and time.monotonic() < deadline:   # paid only where one seems gone
            time.sleep(_SETTLE_STEP_S)
            try:
                again = self._listing(self._uuid)
            except OSError as e:
                return Look(error=str(e))
            gone = {pid for pid in gone & again if user(pid) == GONE}
        live = {pid: uid for pid, uid in live.items() if uid != GONE}
        self._owners.update((pid, uid) for pid, uid in live.items() if uid is not None)
        return Look(live=live, orphans=tuple(sorted(gone)))
