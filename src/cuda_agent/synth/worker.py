"""The synth worker: the child process where a candidate's code runs (a hang or a crash there only
rejects the candidate). It speaks JSON lines through a sandbox `ChildChannel`
(sandbox/process.py), started by synth/execute.py as a `Process`:

  {"op": "probe", "code", "device"}            -> build and run once (seed checks): output shapes
  {"op": "eager", "code", "device", "plan",     -> memory (the weights, on the host), eager (a run), time eager
   "alone", "beside", "max_weights_bytes"}         (a step of the size search)
  {"op": "weights", "code"}                     -> the weights' bytes, counted on the meta device (a resume's check)
  {"op": "checks", "alone"}                     -> deterministic, stochastic, degenerate: the last eager model,
                                                   at the size the size search settled on
  {"op": "compile", "plan", "atol", "rtol",     -> torch.compile the last eager model, compare, and
   "alone"}                                        time eager and torch.compile as the harness does
                                                   (measure.time_baselines)
  {"op": "quit"}

Every reply carries `seconds` per stage, so the benchmark can say where the time goes (each stage's own
work; the time spent queueing for the device lock behind other workers is `eager_lock_wait` and
`compile_lock_wait`; a model's weights are drawn on the host before the lock is taken), and on a GPU
`peak_mb`, the most memory the request allocated (to measure the size search's estimate against).

Several workers share a GPU. Their runs hold the device lock shared and timing holds it alone
(measure.device_lock); a request with `alone` runs alone as well (the retry after an out-of-memory
error, which another worker's memory may have caused). With `beside` (the run's default on a GPU),
the size search's timing holds the lock shared, beside the other workers' runs: it only chooses a
size, and the window and the set's figures are the baselines' (`compile`), timed alone. A step's run and
its timing then share one hold, and the checks (which build a second model on the host first) run once,
at the size the search settled on. A compile's
own stretches (tracing, code generation: CPU work, seconds) let go of the shared hold
(measure.compile_off_lock), so a timer does not wait for them; the host is then busy beside the
baselines' timing, which the set's plan takes in CUDA graphs (`graphs`), where host load moves
little (a run with --quiet-timing keeps the hold through the compile). Each worker keeps on the GPU only what its
current candidate needs: the previous candidate is dropped before the next is built, and the
allocator's cache is handed back to the device when a section ends, for the others to use.
"""

from __future__ import annotations

import gc
import sys
import time
import traceback
import weakref
from contextlib import contextmanager

from cuda_agent.synth.repeat import compare_runs

MODEL_SEED = 1234
INPUT_SEED = 42


def _short(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"


class Worker:
    def __init__(self) -> None:
        import torch

        self.torch = torch
        self.state: dict = {}
        self._kept = 0  # device bytes still allocated after the last collection (what no cycle held)
        self._dropped = None  # a weak reference to the last candidate's model: alive after the drop, a cycle holds it

    def _sync(self, device) -> None:
        if device.type == "cuda":
            self.torch.cuda.synchronize(device)

    def _build(self, code: str, device):
        module, model = self._host_build(code)
        return self._on_device(module, model, device)

    def _host_build(self, code: str):
        """The candidate's module and its model on the host: its weights' draw is CPU work (seconds for a
        gigabyte layer), done before the device's lock is taken."""
        from cuda_agent.measure import make_model, module_from_source

        module = module_from_source(code, "candidate", "candidate.py")
        return module, make_model(module.Model, module, MODEL_SEED, self.torch.device("cpu"))

    def _weights_ahead(self, code: str) -> int | None:
        """The bytes of the candidate's weights, counted with its model made on the meta device (shapes, nothing
        drawn): a model over the limit is refused in milliseconds, where drawing it first took 22-43 s of the host
        for an 8-16 GiB nn.Bilinear and crashed four workers at their 32 GiB host limit (H200, 2026-11-29). None
        when the model cannot be made there (an __init__ that reads its tensors' data)."""
        from cuda_agent.measure import module_from_source

        torch = self.torch
        try:
            module = module_from_source(code, "candidate", "candidate.py")
            with torch.device("meta"):
                return _weights_bytes(module.Model(*module.get_init_inputs()))
        except Exception:
            return None

    def weights(self, msg: dict) -> dict:
        """The `weights` request: the bytes of a task's weights, counted on the meta device (None where the model
        cannot be made there); a resumed run's accepted tasks of an older memory filter are checked so."""
        return {"ok": True, "weights_bytes": self._weights_ahead(msg["code"])}

    def _release(self, device) -> None:
        """The previous candidate's memory back to the device. A collection (0.2-0.5 s in a worker that has
        imported torch, transformers and Inductor; it was 0.43 s of every size step on an H200, 2026-11-29) runs only
        when more is allocated than after the last one: tensors that only reference cycles still hold."""
        if device.type != "cuda":
            return
        torch = self.torch
        held = torch.cuda.memory_allocated(device)
        # the byte count alone misses a cycle no larger than what was freed since (compiled graphs' tensors let go by
        # the next compile's torch._dynamo.reset()): the model itself still alive says a cycle holds it
        dropped, self._dropped = self._dropped, None
        if held > self._kept or (dropped is not None and dropped() is not None):
            gc.collect()
            held = torch.cuda.memory_allocated(device)
        self._kept = held
        torch.cuda.empty_cache()

    def _on_device(self, module, model, device):
        """The host-built model on `device`, with its inputs (drawn there): as make_model(..., device) and
        make_inputs would make them."""
        from cuda_agent.measure import make_inputs

        return module, model.to(device), make_inputs(module, INPUT_SEED, device)

    def _run(self, model, inputs) -> list:
        with self.torch.no_grad():
            out = model(*inputs)
        items = list(out) if isinstance(out, (tuple, list)) else [out]
        if not items or any(type(o) is not self.torch.Tensor or not o.is_floating_point() for o in items):
            raise TypeError("forward() must return floating-point torch.Tensor(s)")
        return [o.detach().clone() for o in items]

    def probe(self, msg: dict) -> dict:
        device = self.torch.device(msg["device"])
        try:
            _, model, inputs = self._build(msg["code"], device)
            outs = self._run(model, inputs)
            self._sync(device)
        except Exception as e:
            return {"ok": False, "reason": _short(e)}
        return {"ok": True, "shapes": [list(o.shape) for o in outs], "in_shapes":
                [list(x.shape) for x in inputs if isinstance(x, self.torch.Tensor)],
                "dtypes": [str(o.dtype) for o in outs]}

    def eager(self, msg: dict) -> dict:
        """One step of the size search: the model built on the host (its weights counted first), run on the
        device (its outputs looked at: not degenerate), and timed; the model, inputs and outputs kept for
        `checks` and `compile`. The run and the timing share one hold of the device's lock where they hold it
        alike (beside, or alone)."""
        torch = self.torch
        device = torch.device(msg["device"])
        seconds: dict[str, float] = {}
        lap = _Laps(seconds, "eager_lock_wait")
        self.state = {}  # the previous candidate's model, inputs and outputs leave the GPU first
        self._release(device)
        self._start_peak(device)
        lap("release")
        shared = not msg.get("alone")  # off the GPU while another worker times on it
        timing_shared = bool(msg.get("beside")) and shared  # beside: the module's doc
        from cuda_agent.measure import TimingPlan, time_callable, timing_draw
        from cuda_agent.synth.filters import degenerate_reason, weights_reason

        plan = TimingPlan.from_dict(msg["plan"])
        stage, known, stats = "build", {}, None  # known: what a failed reply says of the model
        try:
            most = msg.get("max_weights_bytes")
            built = None  # (module, model), drawn on the host
            weights = self._weights_ahead(msg["code"]) if most is not None else None
            if weights is None:  # not countable on the meta device: counted after the draw
                built = self._host_build(msg["code"])
                weights = _weights_bytes(built[1])
            known["weights_bytes"] = weights  # again after the run: a lazy module's then
            if most is not None and weights > most:  # before the device: it would not fit beside the others
                lap(stage)
                return self._with_peak({"ok": False, "filter": "memory", "weights_bytes": weights, "seconds": seconds,
                                        "reason": weights_reason(weights, most)}, device)
            module, model = built or self._host_build(msg["code"])
            lap(stage)
            stage = "eager_run"
            with _section(device, shared=shared):
                module, model, inputs = self._on_device(module, model, device)
                first = self._run(model, inputs)
                self._sync(device)
                known["weights_bytes"] = weights = _weights_bytes(model)  # a lazy module's are made by its first call
                if most is not None and weights > most:
                    lap(stage)
                    return self._with_peak({"ok": False, "filter": "memory", "weights_bytes": weights,
                                            "seconds": seconds,
                                            "reason": weights_reason(weights, most, " after its first call")}, device)
                why = degenerate_reason([_stats(o) for o in first])  # at any size: not worth a size search
                lap(stage)
                if why:
                    return self._with_peak({"ok": False, "filter": "degenerate", "reason": why, "seconds": seconds,
                                            **known}, device)
                draw = timing_draw(module, INPUT_SEED, device)
                stage = "eager_timing"
                if timing_shared == shared:
                    stats = time_callable(model, draw, device, plan).stats
            if stats is None:  # quiet timing: the run shared, its timing alone
                with _section(device, shared=timing_shared):
                    stats = time_callable(model, draw, device, plan).stats
            lap(stage)
        except Exception as e:
            lap(stage)
            return self._with_peak({"ok": False, "filter": "eager", "reason": _short(e), "seconds": seconds,
                                    **known}, device)
        self.state = {"code": msg["code"], "model": model, "inputs": inputs, "expected": first, "device": device,
                      "draw": draw}
        self._dropped = weakref.ref(model)
        return self._with_peak({"ok": True, "eager_ms": stats.median_ms, "shapes": [list(o.shape) for o in first],
                                "weights_bytes": weights, "seconds": seconds}, device)

    def checks(self, msg: dict) -> dict:
        """Determinism and RNG use of the last `eager`'s model, at the size the size search settled on: a second
        model and inputs from the same seeds (built on the host, before the lock), then the same model under
        another global RNG state, each compared with the first run (synth/repeat.py, with the run's atol and rtol).
        A failed check drops the candidate, except an out-of-memory error (the parent runs the size again)."""
        st = self.state
        if not st:
            return {"ok": False, "filter": "eager", "reason": "checks asked for with no candidate: send eager first",
                    "seconds": {}}
        device = st["device"]
        self._start_peak(device)
        seconds: dict[str, float] = {}
        lap = _Laps(seconds, "eager_lock_wait")
        stage = "build"
        try:
            again = self._host_build(st["code"])
            lap(stage)
            stage = "checks"
            with _section(device, shared=not msg.get("alone")):
                failed, apart = self._checks(device, st["expected"], again, msg.get("atol", 1e-2),
                                             msg.get("rtol", 1e-2))
            lap(stage)
        except Exception as e:
            lap(stage)
            failed = {"ok": False, "filter": "eager", "reason": _short(e)}
        if failed is None:
            return self._with_peak({"ok": True, "repeat_apart": apart, "seconds": seconds}, device)
        if "out of memory" not in failed["reason"].lower():
            self.state = {}  # a rejection; out of memory has the parent run the size again
        return self._with_peak({**failed, "seconds": seconds}, device)

    def _start_peak(self, device) -> None:
        if device.type == "cuda":
            self.torch.cuda.reset_peak_memory_stats(device)

    def _with_peak(self, reply: dict, device) -> dict:
        if device.type == "cuda":
            reply["peak_mb"] = round(self.torch.cuda.max_memory_allocated(device) / 2**20, 1)
        return reply

    def _checks(self, device, first: list, again: tuple, atol: float, rtol: float) -> tuple[dict | None, float]:
        """(a failed reply, 0.0) or (None, how far repeated runs were apart, relative to the outputs' scale)."""
        torch = self.torch
        # Determinism: a fresh model and fresh inputs from the same seeds give the same outputs, within the
        # tolerance of compare_runs (a GPU's atomic adds, as in transposed convolutions, sum in another order each run).
        _, model2, inputs2 = self._on_device(*again, device)
        second = self._run(model2, inputs2)
        same = compare_runs(first, second, atol, rtol)
        del second  # as `first`: one set of outputs less on the GPU
        if not same.ok:
            return {"ok": False, "filter": "deterministic", "reason": f"two runs from the same seed differ {same.how}"}, 0.0
        # Stochastic ops: the same model and inputs under another global RNG state. A forward that draws from the
        # generator moves it (atomic adds never do); where it moved, any change in the outputs is randomness (a
        # dropout before a large mean moves it by less than any tolerance).
        torch.manual_seed(987654321)
        before = self._rng_states(device)
        third = self._run(model2, inputs2)
        self._sync(device)
        drew = self._rng_states(device) != before
        other = compare_runs(first, third, atol, rtol)
        del third, model2, inputs2
        if not other.ok or (drew and other.apart > 0):
            why = other.how if not other.ok else f"by {other.apart:.3g} of their scale, and the forward drew from it"
            return {"ok": False, "filter": "stochastic", "reason": f"output depends on the global RNG state: {why}"}, 0.0
        return None, max(same.apart, other.apart)

    def _rng_states(self, device) -> list:
        torch = self.torch
        states = [torch.get_rng_state()]
        if device.type == "cuda":
            states.append(torch.cuda.get_rng_state(device))
        return [s.numpy().tobytes() for s in states]

    def compile(self, msg: dict) -> dict:
        """torch.compile the model of the last `eager`, compare and time. The candidate is dropped
        afterwards, except after an out-of-memory error, which the parent may retry `alone`."""
        st = self.state
        self._start_peak(st["device"])
        reply = self._compile(msg, st)
        t = time.perf_counter()
        if "out of memory" not in str(reply.get("reason", "")).lower():
            self.state = {}
        _hand_back(st["device"])  # what the compiled model and its outputs held
        reply["seconds"]["release"] = time.perf_counter() - t
        return self._with_peak(reply, st["device"])

    def _compile(self, msg: dict, st: dict) -> dict:
        torch = self.torch
        seconds: dict[str, float] = {}
        lap = _Laps(seconds, "compile_lock_wait")
        from cuda_agent.devices import lock_name
        from cuda_agent.measure import autotune_alone, compile_off_lock

        key = lock_name(st["device"].type)
        with _section(st["device"], shared=not msg.get("alone")):
            try:
                torch._dynamo.reset()
                compiled = torch.compile(st["model"])
                # its kernels' configurations timed alone; its compile (CPU work) off the device's lock, unless
                # this request runs alone or the run times quietly (then no CPU work beside any timer)
                off = key if msg.get("beside") and not msg.get("alone") else None
                with autotune_alone(key), compile_off_lock(off):
                    got = self._run(compiled, st["inputs"])
                self._sync(st["device"])
            except Exception as e:
                lap("compile")
                return {"ok": False, "filter": "compile", "reason": _short(e), "seconds": seconds}
            lap("compile")
            for i, (e, a) in enumerate(zip(st["expected"], got)):
                if e.shape != a.shape or not torch.allclose(e.float(), a.float(), atol=msg["atol"], rtol=msg["rtol"]):
                    err = (e.float() - a.float()).abs().max().item() if e.shape == a.shape else float("nan")
                    return {"ok": False, "filter": "compile", "seconds": seconds,
                            "reason": f"output {i} differs from eager under torch.compile (max abs error {err:.3g})"}
            del got
        from cuda_agent.measure import TimingPlan, time_baselines

        # time_baselines takes the device's lock alone itself: outside the section above
        eager, compiled_stats = time_baselines(st["model"], st["draw"], st["device"], TimingPlan.from_dict(msg["plan"]),
                                               compiled=compiled)
        lap("baselines_timing")
        return {"ok": True, "eager_ms": eager.median_ms, "compile_ms": compiled_stats.median_ms, "seconds": seconds}


class _Laps:
    """A request's stages, one after another: `lap(name)` puts the time since the last lap in
    `seconds[name]`, less what was spent waiting for the device lock meanwhile, which is added to
    `seconds[wait_key]` (the queue for the GPU shared by several workers, apart from each stage's
    own work; one key a request). The stages and the wait sum to the request's time."""

    def __init__(self, seconds: dict[str, float], wait_key: str = "lock_wait") -> None:
        self.seconds, self.wait_key = seconds, wait_key
        self.t, self.w = time.perf_counter(), _waited()

    def __call__(self, name: str) -> None:
        t, w = time.perf_counter(), _waited()
        wait = w - self.w
        self.seconds[name] = self.seconds.get(name, 0.0) + max(0.0, t - self.t - wait)
        self.seconds[self.wait_key] = self.seconds.get(self.wait_key, 0.0) + wait
        self.t, self.w = t, w


def _weights_bytes(model) -> int:
    """What a model's parameters and buffers take (the part of a task's memory its batch does not change); a lazy
    module's are not made before its first call, and count nothing here. The determinism check holds a second model
    beside the first, so a worker's peak is about twice this: the budget is a share of half the GPU
    (execute.memory_share)."""
    from torch.nn.parameter import is_lazy

    tensors = [t for t in (*model.parameters(), *model.buffers()) if not is_lazy(t)]
    return sum(t.numel() * t.element_size() for t in tensors)


def _waited() -> float:
    from cuda_agent.measure import waited_s

    return waited_s()


@contextmanager
def _section(device, shared: bool = False):
    """A stretch of GPU work under the device's lock, as every user of the device takes it (several workers
    share a GPU for the CPU-bound work: their runs hold it shared, timing and retries alone). On
    the way out, before the lock is released, the memory this worker freed leaves PyTorch's cache
    for the device, where the workers sharing it can allocate it; without that, each worker's cache
    keeps the peak of every candidate it ran, and the others run out of memory."""
    from cuda_agent.devices import lock_name
    from cuda_agent.measure import device_lock

    with device_lock(lock_name(device.type), shared=shared):
        try:
            yield
        finally:
            _hand_back(device)


def _hand_back(device) -> None:
    """The memory this worker freed goes from PyTorch's cache back to the device."""
    if device.type == "cuda":
        import torch

        torch.cuda.empty_cache()


def _stats(t) -> dict:
    import torch

    f = t.detach().float()
    finite = bool(torch.isfinite(f).all())
    return {"finite": finite, "numel": f.numel(), "nonzero": float((f != 0).float().mean()) if f.numel() else 0.0,
            "std": float(f.std()) if finite and f.numel() > 1 else 0.0,
            "absmax": float(f.abs().max()) if finite and f.numel() else 0.0}


def main(fd_in: int, fd_out: int) -> None:
    from cuda_agent.measure import held_alone_s
    from cuda_agent.sandbox import ChildChannel

    channel = ChildChannel(fd_in, fd_out)
    t = time.perf_counter()
    worker = Worker()
    # what the imports made lives as long as the child: later collections need not walk it. Dynamo and Inductor
    # (0.22 M objects, imported by the first compile otherwise) too: frozen after them, a collection after a compile
    # took 0.01 s, not 0.11 s (CPU, torch 2.13); every child compiles, so their import only comes earlier
    import torch._dynamo  # noqa: F401
    import torch._inductor.compile_fx  # noqa: F401
    gc.freeze()
    channel.send({"ready": True, "seconds": {"start": time.perf_counter() - t}})
    while (msg := channel.recv()) is not None:
        op = msg.get("op")
        if op == "quit":
            return
        alone = held_alone_s()
        try:
            reply = getattr(worker, op)(msg)
        except Exception as e:  # the candidate broke something we did not foresee: a rejection
            reply = {"ok": False, "filter": "eager", "reason": _short(e), "trace": traceback.format_exc()[-1500:]}
        reply["alone_s"] = held_alone_s() - alone  # the device held alone (timing, autotuning, retries)
        channel.send(reply)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
