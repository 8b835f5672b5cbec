"""The baselines' timing: eager and torch.compile of a trusted model, taken one way wherever they
are taken: torch.compile compiled first beside timing (its autotuning with the device alone), then
both timed holding the device alone, as a timer."""

from __future__ import annotations

import threading
from contextlib import ExitStack, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import torch

from cuda_agent.devices import lock_name
from cuda_agent.measure.lock import alone_within, beside_timing, device_lock, let_go
from cuda_agent.measure.plan import TimingPlan, TimingStats
from cuda_agent.measure.timing import as_timer, time_callable


def time_baselines(model: torch.nn.Module, draw: Callable[[int], list], device: torch.device, plan: TimingPlan,
                   *, compiled: Callable[..., object] | None = None,
                   lock: bool = True) -> tuple[TimingStats, TimingStats]:
    """Eager and torch.compile timings of trusted `model`, each call on inputs `draw` gives it.
    torch.compile runs first (CPU work, seconds; the device's lock held shared, so that no timer
    runs beside it; its autotuning with the device alone) unless `compiled` is given; then both are
    timed holding the device alone (`lock=False` where the caller holds it already), as a timer
    (timing.as_timer: normal priority, the timing cores)."""
    if compiled is None:
        with beside_timing(device.type, quiet=lock):
            compiled = compile_for_timing(model, draw(0), alone=lock_name(device.type) if lock else None)
    with device_lock(lock_name(device.type)) if lock else nullcontext(), as_timer():
        return time_callable(model, draw, device, plan).stats, time_callable(compiled, draw, device, plan).stats


def compile_for_timing(model: torch.nn.Module, inputs: list, alone: str | None = None,
                       lock_dir: Path | None = None, off_lock: str | None = None) -> Callable[..., object]:
    """`torch.compile(model)`, compiled now by one call (under no_grad, as it will be timed), so
    that the compilation (CPU work, seconds) happens before the device is taken for timing. The
    caller holds the device's lock shared meanwhile (lock.beside_timing), so no timer runs beside it.
    `alone`: that lock's key; Inductor's autotuner then benchmarks its kernels' configurations (on
    the first call) holding the device alone, as a timer does, since timed beside other processes'
    GPU work a slower configuration can win and stay. (It did not cure the one case measured: in a
    6-worker bench on the H100, 30_SwinTransformerV2 compiles to 4.7 or 7.0 ms, alone always 4.7:
    benchmarks/RESULTS.md, 2026-11-26.) `off_lock`: the key of a lock this thread holds shared, which the
    compile's stretches (tracing, code generation) let go of meanwhile (compile_off_lock)."""
    compiled = torch.compile(model)
    with torch.no_grad(), autotune_alone(alone, lock_dir), compile_off_lock(off_lock, lock_dir):
        compiled(*inputs)
    return compiled


_autotune = threading.local()


def _guard_autotuner(cls: type) -> None:
    """Wrap `cls.benchmark_all_configs` (Inductor's CachingAutotuner: it times each candidate
    configuration of a kernel, at the kernel's first launch) so that, inside autotune_alone(), the
    first benchmark takes the device alone and keeps it to the end of the block."""
    original = cls.__dict__.get("benchmark_all_configs")
    if original is None or getattr(original, "_cuda_agent_guard", False):
        return

    alone_in_a_stretch = _held_while_let_go(original, shared=False)

    def benchmark_all_configs(self, *args, **kwargs):
        if _let_go_now() is not None:  # inside a compile stretch that let go of the hold: alone for this benchmark
            return alone_in_a_stretch(self, *args, **kwargs)
        stack = getattr(_autotune, "stack", None)
        if stack is not None and not _autotune.alone:
            held = ExitStack()   # its own, so that a later compile stretch can end it (_end_autotune_hold)
            held.enter_context(alone_within(_autotune.key, _autotune.lock_dir))
            stack.callback(held.close)
            _autotune.held, _autotune.alone = held, True
        return original(self, *args, **kwargs)

    benchmark_all_configs._cuda_agent_guard = True  # type: ignore[attr-defined]
    cls.benchmark_all_configs = benchmark_all_configs


@contextmanager
def autotune_alone(key: str | None, lock_dir: Path | None = None) -> Iterator[None]:
    """Inside the block (a compiled model's first call), Inductor's autotuning benchmarks hold lock
    `key` alone: from the first one to the end of the block, since the kernels of a compiled graph
    are benchmarked one after the other as it runs, and taking the device alone for each would wait
    for every other compile each time (None: as Inductor does them). Inside compile_off_lock, a later
    compile stretch (a graph break's next graph: CPU work, seconds) ends that hold first, and the next
    graph's first benchmark takes it again; before, the stretch found the hold alone, could not let it
    go, and kept every other user of the device waiting through the compile. Where Inductor has no such
    autotuner (another torch), nothing changes."""
    if key is None:
        yield
        return
    try:
        from torch._inductor.runtime.triton_heuristics import CachingAutotuner
    except ImportError:
        CachingAutotuner = None
    if CachingAutotuner is not None:
        _guard_autotuner(CachingAutotuner)
    names = ("key", "lock_dir", "stack", "alone", "held")
    before = tuple(getattr(_autotune, k, None) for k in names)
    with ExitStack() as stack:
        _autotune.key, _autotune.lock_dir, _autotune.stack, _autotune.alone, _autotune.held = \
            key, lock_dir, stack, False, None
        try:
            yield
        finally:
            for name, value in zip(names, before):
                setattr(_autotune, name, value)


def _end_autotune_hold() -> None:
    """The device alone that an earlier graph's autotuning took (autotune_alone) handed back, the shared hold
    taken again (through the turnstile: behind a timer that waits), before a compile stretch lets it go."""
    held = getattr(_autotune, "held", None)
    if held is not None and getattr(_autotune, "alone", False):
        _autotune.held, _autotune.alone = None, False
        held.close()


@dataclass
class _Off:
    key: str
    lock_dir: Path | None
    stack: ExitStack | None = None        # the let-go in force (a compile stretch), or None
    error: BaseException | None = None    # what taking the hold back raised (a callback must not raise)


_off = threading.local()
_hooked = threading.Event()     # the guards of GPU work inside a stretch, installed once a process
_owner = threading.Lock()       # held by the thread whose compile_off_lock is active (one a process)


def _let_go_now() -> _Off | None:
    """compile_off_lock's state in this thread while a compile stretch has let go of the hold."""
    state = getattr(_off, "state", None)
    return state if state is not None and state.stack is not None else None


@contextmanager
def compile_off_lock(key: str | None, lock_dir: Path | None = None) -> Iterator[bool]:
    """Inside the block (a compiled model's first call, lock `key` held shared by this thread),
    torch.compile's compile stretches let go of the hold (lock.let_go) and take it back before the
    compiled code runs on the device. A stretch runs from TorchDynamo's start of a compilation to its
    end (tracing, Inductor's code generation, Triton's compiles: CPU work, seconds), so a timer
    waiting for the device waits for the compiled model's runs, not its compile.

    - The device's queued work is finished before a stretch lets go (a graph break's compile comes
      after the first graph's kernels were launched).
    - GPU work inside a stretch holds the lock for itself: Inductor's autotuner alone, its padding
      decision (which draws and pads matrices on the device, then benchmarks) shared, as under the
      compile's hold.
    - The cost: the compile's CPU work runs beside any timer of the device, this process's or
      another's. Synth takes it (its baselines are timed in CUDA graphs) unless asked to time quietly.
    - One thread a process: TorchDynamo's callbacks count compilations process-wide, so a second
      thread's block keeps its hold throughout. Only TorchDynamo's own compilations let go (not
      CUDA-graph recordings).

    Yields whether the stretches let go (False: this torch has no callbacks, `key` is None, or another
    thread's block is active; the hold is kept throughout). What taking the hold back raised is raised
    here, at the block's end, not inside TorchDynamo."""
    if key is None or not _owner.acquire(blocking=False):
        yield False
        return
    try:
        if not _hook():
            yield False
            return
        before = getattr(_off, "state", None)
        _off.state = state = _Off(key, lock_dir)
        try:
            yield True
        finally:
            _off.state = before
            if state.stack is not None:  # a compilation that raised before its end callback
                state.stack.close()
            if state.error is not None:
                raise state.error
    finally:
        _owner.release()


def _hook() -> bool:
    """TorchDynamo's compile callbacks (again after each torch._dynamo.reset(), which clears them) and
    the guards of GPU work inside a stretch (once a process)."""
    try:
        from torch._dynamo.callback import callback_handler
    except ImportError:
        return False
    if _compile_started not in callback_handler.start_callbacks:
        callback_handler.register_start_callback(_compile_started)
    if _compile_ended not in callback_handler.end_callbacks:
        callback_handler.register_end_callback(_compile_ended)
    if _hooked.is_set():
        return True
    _guard_benchmarker()
    _guard_padding()
    try:
        from torch._inductor.runtime.triton_heuristics import CachingAutotuner
    except ImportError:
        CachingAutotuner = None
    if CachingAutotuner is not None:
        _guard_autotuner(CachingAutotuner)
    _hooked.set()
    return True


def _dynamo_trigger(args) -> bool:
    """Whether a callback is for TorchDynamo's own compilation (not a CUDA-graph recording, which runs
    on the device)."""
    trigger = getattr(args, "callback_trigger", None)
    return trigger is None or getattr(trigger, "name", "") == "DYNAMO"


def _compile_started(args=None) -> None:
    """TorchDynamo's start callback: never raises (an exception here would leave TorchDynamo's
    count of compilations in flight wrong for the process)."""
    state = getattr(_off, "state", None)
    if state is None or state.stack is not None or state.error is not None or not _dynamo_trigger(args):
        return
    try:
        if torch.cuda.is_initialized():
            torch.cuda.synchronize()  # kernels already queued (a graph break's first graph) finish held
        _end_autotune_hold()
        stack = ExitStack()
        if stack.enter_context(let_go(state.key, state.lock_dir)):
            state.stack = stack
        else:
            stack.close()
    except BaseException as e:  # the hold is kept: nothing was let go, or let_go failed before
        state.error = e


def _compile_ended(args=None) -> None:
    """TorchDynamo's end callback: the hold taken back; never raises (see _compile_started). Where taking
    it back through the turnstile fails, the lock is taken shared directly, and the error is raised by
    compile_off_lock at the block's end."""
    state = getattr(_off, "state", None)
    if state is None or state.stack is None:
        return
    stack, state.stack = state.stack, None
    try:
        stack.close()
    except BaseException as e:
        state.error = e


def _guard_benchmarker() -> None:
    """Inductor's benchmarker's GPU timings, when one runs inside a compile stretch that let go of the
    hold, take the device's lock shared for themselves, as they ran under the compile's hold before
    (alone each, they queued behind every other worker's runs)."""
    try:
        from torch._inductor.runtime.benchmarking import benchmarker
    except ImportError:
        return
    cls = type(benchmarker)
    for name in ("benchmark_gpu", "benchmark_gpu_with_cuda_graph"):
        original = getattr(cls, name, None)
        if original is None or getattr(original, "_cuda_agent_guard", False):
            continue
        setattr(cls, name, _held_while_let_go(original, shared=True))


def _guard_padding() -> None:
    """Inductor's padding decision for a matrix product (`pad_mm._should_pad`: it draws the matrices on the
    device, pads them and benchmarks both), inside a stretch, holds the lock shared for itself."""
    try:
        from torch._inductor.fx_passes import pad_mm
    except ImportError:
        return
    original = getattr(pad_mm, "_should_pad", None)
    if original is not None and not getattr(original, "_cuda_agent_guard", False):
        pad_mm._should_pad = _held_while_let_go(original, shared=True)


def _held_while_let_go(original: Callable, shared: bool) -> Callable:
    """`original`, holding the device's lock (`shared` or alone) for itself when called inside a
    compile stretch that let go of the hold; as it is elsewhere."""
    def guarded(*args, **kwargs):
        off = _let_go_now()
        if off is None:
            return original(*args, **kwargs)
        with device_lock(off.key, shared=shared, lock_dir=off.lock_dir):
            return original(*args, **kwargs)

    guarded._cuda_agent_guard = True  # type: ignore[attr-defined]
    return guarded
