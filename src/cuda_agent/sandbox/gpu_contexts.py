"""CUDA contexts that outlive their process: the GPU work that no listing of /proc can see.

A context lives as long as a descriptor of it does, not its process. A process that queues kernels, passes
its /dev/nvidia* descriptors on (SCM_RIGHTS: into a socket's queue, or to the solution's child, which may
hold the GPU) and exits leaves its work running beside the baselines' windows, and no process of the
solution holds the GPU in /proc. The driver still names the context's owner: NVML's compute processes list
the pid that made it, after that pid has exited (2026-11-28, 2x H200, `benchmarks/gpu_owner_probe.py`: 20 x 50 ms
queued, the daemon exited, a holder kept its 38 descriptors; the work ran on for 1.03 s and NVML listed the
dead pid, never the holder's). So a pid NVML lists that is no live process here is such a context.

NVML is read through ctypes from libnvidia-ml.so.1 (no package). Its pids are this PID namespace's only where
the driver translates them, so a `ContextWatch` answers only once NVML has listed a pid it knows to hold a
context (the solution's child, which has run on the GPU by then); otherwise it says it cannot tell.
"""

from __future__ import annotations

import ctypes
import time
from contextlib import suppress
from typing import Callable, Iterable

_NVML_SUCCESS, _NVML_INSUFFICIENT_SIZE = 0, 7
_RECHECK_S = 0.02   # an exit's context teardown lags its process a moment: an orphan must be seen twice


class _ProcessInfo(ctypes.Structure):   # nvmlProcessInfo_t (the v2 and v3 layouts are the same)
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong), ("gpuInstanceId", ctypes.c_uint),
                ("computeInstanceId", ctypes.c_uint)]


class Nvml:
    """NVML's compute processes on every GPU of the machine. `Nvml.load()` is None where NVML is not there
    (a machine without NVIDIA's driver) or does not start."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self._lib = lib
        count = ctypes.c_uint()
        if lib.nvmlDeviceGetCount_v2(ctypes.byref(count)) != _NVML_SUCCESS:
            raise OSError("nvmlDeviceGetCount_v2 failed")
        self._handles = []
        for i in range(count.value):
            handle = ctypes.c_void_p()
            if lib.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(handle)) != _NVML_SUCCESS:
                raise OSError(f"nvmlDeviceGetHandleByIndex_v2({i}) failed")
            self._handles.append(handle)
        self._query = (getattr(lib, "nvmlDeviceGetComputeRunningProcesses_v3", None)
                       or lib.nvmlDeviceGetComputeRunningProcesses_v2)

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

    def compute_pids(self) -> set[int]:
        """The pids of every context on every GPU, as NVML names them."""
        pids: set[int] = set()
        for handle in self._handles:
            size = 64
            while True:
                n = ctypes.c_uint(size)
                infos = (_ProcessInfo * size)()
                rc = self._query(handle, ctypes.byref(n), infos)
                if rc == _NVML_INSUFFICIENT_SIZE and size < 65536:
                    size *= 4
                    continue
                if rc != _NVML_SUCCESS:
                    raise OSError(f"nvmlDeviceGetComputeRunningProcesses failed ({rc})")
                pids.update(int(infos[k].pid) for k in range(n.value))
                break
        return pids


def gone(pid: int) -> bool:
    """Whether `pid` is no live process here: it does not exist, or only as a zombie (its files closed)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read(512)
    except OSError:
        return True
    state = stat[stat.rfind(b")") + 2:stat.rfind(b")") + 3]
    return state in (b"Z", b"X")


class ContextWatch:
    """Which contexts on the GPUs have no live process (`orphans()`), once NVML is known to name this PID
    namespace's pids: `known` holds a context by the time `orphans()` is first asked (the solution's child).
    `listing` is NVML's list (tests pass their own)."""

    def __init__(self, known: Iterable[int], listing: Callable[[], set[int]] | None = None) -> None:
        self._known = frozenset(known)
        if listing is None:
            nvml = Nvml.load()
            listing = nvml.compute_pids if nvml is not None else None
        self._listing = listing
        self.usable: bool | None = None if listing is not None else False   # None: not yet known

    def orphans(self) -> tuple[int, ...]:
        """The pids NVML lists whose process is gone, seen twice `_RECHECK_S` apart; () where the watch cannot
        tell (`usable` False: no NVML, or its pids are not this namespace's)."""
        if self._listing is None or self.usable is False:
            return ()
        try:
            pids = self._listing()
        except OSError:
            self.usable = False
            return ()
        if self.usable is None:
            self.usable = bool(self._known & pids)
            if not self.usable:
                return ()
        lost = {pid for pid in pids if pid > 0 and gone(pid)}   # 0: a pid NVML could not name here
        if not lost:
            return ()
        time.sleep(_RECHECK_S)
        try:
            again = self._listing()
        except OSError:
            return ()
        return tuple(sorted(pid for pid in lost & again if gone(pid)))

