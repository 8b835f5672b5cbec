"""A spin that holds every SM: what a timer can queue before each timed call (timing.CallTimer, with
`TimingPlan.spin_fills_gpu`) so that the call's launch latency is hidden without leaving room beside it.

torch.cuda._sleep, the spin timed calls are queued behind, runs one thread. While it runs, a kernel that the timed
call launches on a stream that never waits for the caller's can use the other SMs. It can then be done before the
timer's start event, so it appears neither in the events' time nor in the synchronize after the call: up to the spin's
0.2 ms of hidden work a call (the hack corpus's relaxed_stream_during_spin, the relaxed policy's side streams; a
review's finding of 2026-11-29).

This kernel's blocks take every thread slot of every SM for the spin's length: two blocks of 1,024 threads an SM
where an SM holds 2,048 threads (sm_80, sm_90), two of 768 where it holds 1,536 (sm_86, sm_89, sm_120: one block of
1,024 would leave 512 slots that a side kernel's blocks fit in). No block of another kernel is scheduled until they
end, and what the call put on other streams runs after the start event, where the synchronize after the call sees it
(timing.samples_of charges it). The kernel is PTX, loaded by the CUDA driver into the current context (cuModuleLoadData: no compiler) and
launched on the current stream (cuLaunchKernel). The driver's functions are bound at import, before a solution's code
runs in the child.
"""

from __future__ import annotations

import ctypes

import torch

from cuda_agent.measure.driver import driver_function

# Every thread reads the GPU's nanosecond clock until its block has spun `ns`.
PTX = b"""
.version 7.0
.target sm_70
.address_size 64

.visible .entry cuda_agent_fill_spin(.param .u64 ns)
{
    .reg .pred %p;
    .reg .b64 %limit, %t0, %t1, %d;

    ld.param.u64 %limit, [ns];
    mov.u64 %t0, %globaltimer;
SPIN:
    mov.u64 %t1, %globaltimer;
    sub.s64 %d, %t1, %t0;
    setp.lt.u64 %p, %d, %limit;
    @%p bra SPIN;
    ret;
}
"""
KERNEL = b"cuda_agent_fill_spin"
THREADS = 1024   # the most threads a block may have
# the kernel loaded once per device (its primary context) in this process: a module loaded per timer was never unloaded
_FUNCTIONS: dict[int, ctypes.c_void_p] = {}


class FillUnavailable(RuntimeError):
    """Why the fill spin cannot run here (one line a person understands)."""


# cuModuleLoadData(CUmodule*, const void*), cuModuleGetFunction(CUfunction*, CUmodule, const char*), cuLaunchKernel(
# CUfunction, grid x y z, block x y z, shared bytes, CUstream, void** params, void** extra)
_module_load_data = driver_function("cuModuleLoadData", [ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p])
_module_get_function = driver_function("cuModuleGetFunction",
                                       [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_char_p])
_launch_kernel = driver_function("cuLaunchKernel", [ctypes.c_void_p] + [ctypes.c_uint] * 7
                                 + [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p])


def grid_for(sms: int, threads_per_sm: int) -> tuple[int, int]:
    """(blocks, threads a block) that take every thread slot of `sms` SMs of `threads_per_sm` threads each: as few
    blocks an SM as THREADS allows, of equal size (2,048: 2 of 1,024; 1,536: 2 of 768; 1,024: 1 of 1,024)."""
    per_sm = max(1, -(-threads_per_sm // THREADS))
    return sms * per_sm, max(32, threads_per_sm // per_sm // 32 * 32)


class FillSpin:
    """The kernel loaded into the current context of `device`; `spin(ns)` queues it on the current stream. Raises
    FillUnavailable where the driver cannot load or find it."""

    def __init__(self, device: torch.device):
        if None in (_module_load_data, _module_get_function, _launch_kernel):
            raise FillUnavailable("no CUDA driver (libcuda.so.1) in this process: the fill spin needs one")
        torch.cuda.init()
        self.device = device
        index = device.index if device.index is not None else torch.cuda.current_device()
        function = _FUNCTIONS.get(index)
        if function is None:
            module, function = ctypes.c_void_p(), ctypes.c_void_p()
            with torch.cuda.device(index):
                # a runtime call that needs the context makes the device's primary context this thread's current
                # one (torch.cuda.current_stream makes none but the first in a process: in another thread, none)
                torch.cuda.synchronize(index)
                rc = _module_load_data(ctypes.byref(module), PTX)
                if rc == 0:
                    rc = _module_get_function(ctypes.byref(function), module, KERNEL)
            if rc != 0:
                raise FillUnavailable(f"the CUDA driver could not load the fill spin's PTX (CUresult {rc})")
            _FUNCTIONS[index] = function
        props = torch.cuda.get_device_properties(index)
        self.function = function
        self.blocks, self.threads = grid_for(props.multi_processor_count,
                                             getattr(props, "max_threads_per_multi_processor", 2048))

    def spin(self, ns: int) -> None:
        """Every SM held for `ns` nanoseconds, queued on the current stream of the device."""
        arg = ctypes.c_uint64(ns)
        params = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.byref(arg), ctypes.c_void_p))
        stream = ctypes.c_void_p(torch.cuda.current_stream(self.device).cuda_stream)
        rc = _launch_kernel(self.function, self.blocks, 1, 1, self.threads, 1, 1, 0, stream, params, None)
        if rc != 0:
            raise FillUnavailable(f"the fill spin's launch failed (CUresult {rc})")
