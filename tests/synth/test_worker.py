"""The synth worker (the child's side), run in this process on the CPU: what it keeps between
candidates, and how it shares the device with the workers beside it."""
from __future__ import annotations

import threading
import time
import weakref

import pytest

from cuda_agent.devices import lock_name
from cuda_agent.home import locks
from cuda_agent.measure import device_lock
from cuda_agent.synth.worker import Worker
from measure.lockprobe import timer_would_wait, would_wait

from .conftest import FAST_TIMING
from .test_filters import task

ZEROS = task("return self.linear(x) * 0.0")  # fails the degenerate filter (the checks)


@pytest.fixture
def worker(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_AGENT_HOME", str(tmp_path))  # locks of its own: no other test's timing in the way
    return Worker()


def eager(worker: Worker, code: str, alone: bool = False, beside: bool = False) -> dict:
    return worker.eager({"op": "eager", "code": code, "device": "cpu", "plan": FAST_TIMING, "alone": alone,
                         "beside": beside})


def screened(worker: Worker, code: str, alone: bool = False) -> dict:
    """A step of the size search and the checks after it, as for a size in the window: the step's failed reply, or
    the checks' reply."""
    reply = eager(worker, code, alone, beside=True)  # the GPU run's default: its timing beside the others' runs
    return reply if not reply["ok"] else worker.checks({"op": "checks", "alone": alone})


def in_thread(fn) -> tuple[threading.Thread, dict]:
    """`fn()` started in a thread of its own (a holder of the device lock apart from this one); its reply
    lands in the dict under "reply"."""
    done: dict = {}
    t = threading.Thread(target=lambda: done.__setitem__("reply", fn()), daemon=True)
    t.start()
    return t, done


def test_a_worker_lets_go_of_the_previous_candidate_before_building_the_next(worker):
    """On a GPU shared by ten workers, the last candidate's model, inputs and outputs kept while
    the next one runs are memory the others lack."""
    assert eager(worker, task("return torch.tanh(self.linear(x))"))["ok"]
    previous = weakref.ref(worker.state["model"])
    failed = eager(worker, task("return self.linear(x[:, :3])"))  # fails in its first run
    assert not failed["ok"] and failed["filter"] == "eager"
    assert previous() is None and worker.state == {}


def test_a_retry_alone_waits_for_the_workers_running_beside_it(worker):
    """The retry after an out-of-memory error holds the device lock alone: no other worker runs
    on the GPU meanwhile. A plain run shares it (and is not held up by a run beside it)."""
    done: dict[str, dict] = {}

    def go(alone: bool) -> threading.Thread:
        t = threading.Thread(target=lambda: done.__setitem__(alone, screened(worker, ZEROS, alone)), daemon=True)
        t.start()
        return t

    with device_lock(lock_name("cpu"), shared=True):  # another worker's run on the device
        go(alone=False).join(30)
        assert done[False]["filter"] == "degenerate"
        retry = go(alone=True)
        retry.join(1.0)
        assert retry.is_alive(), "the retry alone ran while another worker held the device"
    retry.join(30)
    assert done[True]["filter"] == "degenerate"


@pytest.mark.slow  # the first torch.compile of the process imports dynamo (5 s)
def test_compile_drops_the_candidate_unless_out_of_memory_may_bring_a_retry(worker):
    assert eager(worker, task("return torch.relu(self.linear(x))"))["ok"]
    worker.state["model"] = None  # makes torch.compile fail, as an error other than out of memory
    reply = worker.compile({"op": "compile", "plan": FAST_TIMING, "atol": 1e-2, "rtol": 1e-2})
    assert not reply["ok"] and worker.state == {}


def test_the_size_searchs_timing_runs_beside_other_workers_runs_unless_the_run_times_quietly(worker, monkeypatch):
    """On a GPU the size search's timing (it only picks a size: the window and the set's figures are the
    baselines', timed alone) holds the lock shared, beside the other workers' runs; quiet, it waits for them."""
    import cuda_agent.measure as measure

    timing, real = threading.Event(), measure.time_callable

    def time_callable(*args, **kwargs):  # reached once the timing's hold of the lock is taken
        timing.set()
        return real(*args, **kwargs)

    monkeypatch.setattr(measure, "time_callable", time_callable)
    good = task("return torch.tanh(self.linear(x))")
    with device_lock(lock_name("cpu"), shared=True):  # another worker's run on the device
        beside, got = in_thread(lambda: eager(worker, good, beside=True))
        beside.join(60)
        assert not beside.is_alive() and got["reply"]["ok"] and timing.is_set(), got
        timing.clear()
        quiet, waited = in_thread(lambda: eager(Worker(), good))
        deadline = time.monotonic() + 60  # until its timer queues at the turnstile (it holds it, waiting)
        while not would_wait(locks() / f"{lock_name('cpu')}.turnstile", shared=True):
            assert time.monotonic() < deadline and quiet.is_alive(), "the quiet run's timing never waited"
            time.sleep(0.01)
        assert quiet.is_alive() and not timing.is_set(), "the quiet run timed while another worker ran"
    quiet.join(60)
    assert waited["reply"]["ok"] and timing.is_set(), waited


def test_the_time_spent_queueing_for_the_device_is_reported_apart_from_each_stages_own_work(worker, monkeypatch):
    """Several workers share a GPU: a stage's time as the journal reads it is its own work, and the queue
    for the device lock (behind another worker's timing) is `eager_lock_wait`; together they are the request's."""
    import cuda_agent.measure.lock as lock

    queued, real = threading.Event(), lock._take_flock

    def take_flock(*args, **kwargs):  # the worker has started to wait for the lock
        queued.set()
        return real(*args, **kwargs)

    good = task("return torch.tanh(self.linear(x))")
    start = time.perf_counter()
    with device_lock(lock_name("cpu"), shared=False):  # another worker timing on the device
        monkeypatch.setattr(lock, "_take_flock", take_flock)  # the worker's takes from here on
        thread, got = in_thread(lambda: eager(worker, good))
        assert queued.wait(60)
        t_queued = time.perf_counter()
        time.sleep(0.3)
        t_released = time.perf_counter()
    thread.join(60)
    elapsed = time.perf_counter() - start
    reply = got["reply"]
    assert reply["ok"], reply
    seconds = reply["seconds"]
    assert {"build", "eager_run", "eager_timing", "eager_lock_wait"} <= set(seconds)
    assert seconds["eager_lock_wait"] >= t_released - t_queued  # the whole queue behind the timer, at least
    assert sum(seconds.values()) <= elapsed  # the wait is not in the stages' own time as well


def test_a_candidates_weights_are_drawn_before_the_device_lock_is_taken(worker, monkeypatch):
    """A gigabyte layer's weights take the host seconds to draw (a 17 GB Bilinear: 35 s, 2026-11-28): built
    while another worker times, they do not hold the device meanwhile, nor the workers queued behind its timer."""
    built, real = threading.Event(), Worker._host_build

    def host_build(self, code):
        out = real(self, code)
        built.set()
        return out

    monkeypatch.setattr(Worker, "_host_build", host_build)
    with device_lock(lock_name("cpu"), shared=False):  # another worker timing on the device
        thread, got = in_thread(lambda: eager(worker, task("return torch.tanh(self.linear(x))")))
        assert built.wait(60), "the model was not built while the device was held by a timer"
        assert thread.is_alive()  # ... and its run waits for the timer
    thread.join(60)
    assert got["reply"]["ok"], got


@pytest.mark.slow  # a real torch.compile (Inductor, on the CPU)
@pytest.mark.parametrize("beside", [True, False])
def test_a_workers_compile_lets_go_of_the_device_unless_the_run_times_quietly(worker, beside):
    """With timing beside other workers (the GPU run's default), the compile's own stretch holds no lock: a
    timer could take the device. A run that times quietly keeps the hold through the compile."""
    import torch
    from torch._dynamo.callback import callback_handler

    assert eager(worker, task("return torch.relu(self.linear(x))"))["ok"]
    seen: list[bool] = []
    real_reset = torch._dynamo.reset

    def reset():  # the worker resets TorchDynamo before compiling: this end callback goes in first, so it
        real_reset()  # runs before compile_off_lock's own takes the hold back
        callback_handler.register_end_callback(lambda args=None: seen.append(timer_would_wait("cpu")))

    torch._dynamo.reset = reset
    try:
        reply = worker.compile({"op": "compile", "plan": FAST_TIMING, "atol": 1e-2, "rtol": 1e-2, "beside": beside})
    finally:
        torch._dynamo.reset = real_reset
        real_reset()
    assert reply["ok"], reply
    assert seen and seen[0] is (not beside)  # at the compile's end: no hold (beside), or the hold (quiet)


def test_a_model_whose_weights_exceed_the_memory_budget_is_rejected_before_it_reaches_the_device(worker, monkeypatch):
    """A 17 GB nn.Bilinear (two tasks of the H200 set, 32.8 GB peak against an 8 GB budget) passed a size search
    that counted only activations. The weights are counted on the host, before the model is moved; a model that
    fits says what its weights take."""
    weights = (32 * 32 + 32) * 4  # the task's Linear, fp32
    code = task("return torch.tanh(self.linear(x))")
    ok = worker.eager({"op": "eager", "code": code, "device": "cpu", "plan": FAST_TIMING, "max_weights_bytes": weights})
    assert ok["ok"] and ok["weights_bytes"] == weights
    moved = []
    monkeypatch.setattr(Worker, "_on_device", lambda self, *a: moved.append(a) or pytest.fail("moved to the device"))
    refused = worker.eager({"op": "eager", "code": code, "device": "cpu", "plan": FAST_TIMING,
                            "max_weights_bytes": weights - 1})
    assert not refused["ok"] and refused["filter"] == "memory" and refused["weights_bytes"] == weights
    assert "more than the run's limit" in refused["reason"] and not moved


def test_weights_over_the_limit_are_counted_on_the_meta_device_and_never_drawn(worker, monkeypatch):
    """Drawing a 16 GiB nn.Bilinear on the host took 42 s before its refusal (H200, 2026-11-29); made on the meta
    device, its weights are counted with nothing drawn. This one would take 256 GiB."""
    code = task("return self.linear(x)").replace("nn.Linear(features, features)", "nn.Linear(1 << 16, 1 << 20)")
    monkeypatch.setattr(Worker, "_host_build", lambda self, c: pytest.fail("drawn on the host"))
    refused = worker.eager({"op": "eager", "code": code, "device": "cpu", "plan": FAST_TIMING,
                            "max_weights_bytes": 2 << 30})
    assert not refused["ok"] and refused["filter"] == "memory"
    assert refused["weights_bytes"] == ((1 << 36) + (1 << 20)) * 4 and "262,148 MiB" in refused["reason"]


def test_a_model_that_cannot_be_made_on_the_meta_device_is_counted_after_its_draw(worker):
    """An __init__ that reads a tensor's data (.item()) fails on the meta device: the weights are counted on the host
    model instead, and a model within the limit runs."""
    weights = (32 * 32 + 32) * 4
    code = task("return self.linear(x) * self.gain").replace(
        "self.linear = nn.Linear(features, features)",
        "self.linear = nn.Linear(features, features)\n        self.gain = float(torch.ones(1).sum().item())")
    assert Worker()._weights_ahead(code) is None
    refused = worker.eager({"op": "eager", "code": code, "device": "cpu", "plan": FAST_TIMING,
                            "max_weights_bytes": weights - 1})
    assert not refused["ok"] and refused["filter"] == "memory" and refused["weights_bytes"] == weights
    ok = worker.eager({"op": "eager", "code": code, "device": "cpu", "plan": FAST_TIMING, "max_weights_bytes": weights})
    assert ok["ok"] and ok["weights_bytes"] == weights


def test_the_previous_candidate_is_collected_only_when_device_memory_is_still_held(worker, monkeypatch):
    """A full collection took 0.43 s of every size step on an H200 (2026-11-29). It runs when more device memory is
    allocated than after the last collection (tensors only cycles hold), not otherwise; the cache is emptied each
    time."""
    import gc

    import torch

    allocated = iter([0, 5 << 20, 1 << 20, 1 << 20, 3 << 20, 1 << 20])  # before (and after) each collection
    collected, emptied = [], []
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: next(allocated))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(1))
    monkeypatch.setattr(gc, "collect", lambda *a: collected.append(1) or 0)
    cuda = torch.device("cuda")
    worker._release(cuda)       # nothing held
    worker._release(cuda)       # 5 MiB held: collected, 1 MiB stays (not a cycle)
    worker._release(cuda)       # the same 1 MiB: no collection
    worker._release(cuda)       # 3 MiB: collected again
    assert collected == [1, 1] and len(emptied) == 4
    worker._release(torch.device("cpu"))
    assert len(emptied) == 4


# each model built moves its outputs by STEP of their scale more than the one before
TICKING = task("y = self.linear(x)\n        return y + self.tick * STEP * y.abs().max()").replace(
    "self.linear = nn.Linear(features, features)",
    "self.linear = nn.Linear(features, features)\n"
    "        self.tick = torch._synth_tick = getattr(torch, '_synth_tick', 0) + 1")


def test_runs_that_differ_by_less_than_the_repeat_tolerance_pass_and_say_how_far_apart(worker):
    """A GPU's atomic adds (transposed convolutions) sum in another order each run: bitwise, 14% of the candidates with
    a ConvTranspose were rejected. Two runs within REPEAT_RTOL of their scale are the same; further apart, they are
    not."""
    from cuda_agent.synth.repeat import REPEAT_RTOL

    assert screened(worker, task("return torch.tanh(self.linear(x))"))["repeat_apart"] == 0.0
    close = screened(worker, TICKING.replace("STEP", f"{REPEAT_RTOL / 10:g}"))
    assert close["ok"] and 0.0 < close["repeat_apart"] <= REPEAT_RTOL, close
    far = screened(worker, TICKING.replace("STEP", f"{REPEAT_RTOL * 10:g}"))
    assert not far["ok"] and far["filter"] == "deterministic" and "of its scale (at most 0.0001)" in far["reason"]


def test_compare_reads_nonfinite_outputs_strictly_and_counts_outputs_shapes_and_dtypes():
    import torch

    from cuda_agent.synth.repeat import Repeat, compare_runs

    x = torch.tensor([1.0, 2.0, float("nan"), float("inf")])
    assert compare_runs([x], [x.clone()]) == Repeat(True, 0.0)
    assert not compare_runs([x], [torch.tensor([1.0, 2.0, float("nan"), float("-inf")])]).ok
    assert "NaN or an infinity in one run only" in compare_runs([x], [torch.tensor([1.0, 2.0, 3.0, float("inf")])]).how
    close = compare_runs([x], [torch.tensor([1.0, 2.0001, float("nan"), float("inf")])])
    assert close.ok and close.apart == pytest.approx(5e-5, rel=1e-2)
    assert "shape or dtype" in compare_runs([x], [x[:3]]).how and "shape or dtype" in compare_runs([x], [x.double()]).how
    assert "number of outputs" in compare_runs([x], [x, x]).how
    assert not compare_runs([torch.zeros(3)], [torch.tensor([0.0, 1e-30, 0.0])]).ok   # all of its scale


def test_compare_holds_small_values_to_the_judges_tolerance_and_half_precision_to_its_own_ulps():
    """An output spanning many magnitudes: a small element changing completely is far below 1e-4 of the largest, but
    the judge (atol + rtol |b| = 1e-2 + 1e-2 |b|) would fail it, so the two runs are not the same. In half precision
    one unit in the last place is above 1e-4: a few of them pass."""
    import torch

    from cuda_agent.synth.repeat import compare_runs

    a = torch.tensor([3e4, 1.0, 0.5])
    assert compare_runs([a], [torch.tensor([3e4, 1.0 + 2e-4, 0.5])]).ok   # 2e-4 against the judge's 2e-2
    moved = compare_runs([a], [torch.tensor([3e4, 1.5, 0.5])])
    assert not moved.ok and "of the judge's tolerance" in moved.how and moved.apart < 1e-4
    h = torch.linspace(1, 2, 1000, dtype=torch.float16)
    one_ulp = h.clone()
    one_ulp[-1] = 2.001953125   # the next half above 2.0
    assert h[-1] != one_ulp[-1] and compare_runs([h], [one_ulp]).ok
    assert not compare_runs([h], [h * 1.1]).ok
    bf = torch.linspace(1, 2, 1000, dtype=torch.bfloat16)
    bumped = bf.clone()
    bumped[500] = 1.5078125   # one bf16 ulp above 1.5 (the judge's tenth is 2.5e-3 there; the ulp 7.8e-3)
    assert bf[500] == 1.5 and compare_runs([bf], [bumped]).ok


def test_compare_in_chunks_reads_as_at_once(monkeypatch):
    import torch

    from cuda_agent.synth import repeat as module

    g = torch.Generator().manual_seed(0)
    a = torch.randn(1000, generator=g) * torch.logspace(-3, 3, 1000)
    b = a + torch.randn(1000, generator=g) * 1e-6
    at_once = module.compare_runs([a], [b])
    monkeypatch.setattr(module, "_CHUNK", 7)
    assert module.compare_runs([a], [b]) == at_once and at_once.ok


def test_a_forward_that_draws_from_the_generator_is_stochastic_however_little_its_outputs_move(worker):
    """A dropout before a large mean moves the result by less than any tolerance (a transformers block's config kept
    a 0.1 dropout: 8.4e-5 of the scale over 33.6M elements). The forward moved the generator: its outputs must then
    be the same bit for bit. A dropout of zero draws nothing and passes."""
    # the mean moves by about 1e-4 of the linear's outputs, 1e-7 of the output's scale: inside every tolerance
    averaged = task("return torch.nn.functional.dropout(self.linear(x), 0.05).mean(dim=0, keepdim=True) + 1000.0")
    averaged = averaged.replace("batch_size = 8", "batch_size = 4096")
    drew = screened(worker, averaged)
    assert not drew["ok"] and drew["filter"] == "stochastic" and "the forward drew from it" in drew["reason"], drew
    assert screened(worker, task("return torch.nn.functional.dropout(self.linear(x), 0.0)"))["ok"]


def test_a_degenerate_output_is_rejected_at_the_size_step_before_any_timing(worker, monkeypatch):
    import cuda_agent.measure as measure

    monkeypatch.setattr(measure, "time_callable", lambda *a, **k: pytest.fail("timed a degenerate candidate"))
    reply = eager(worker, ZEROS, beside=True)
    assert not reply["ok"] and reply["filter"] == "degenerate" and worker.state == {}


def test_checks_without_a_candidate_say_so():
    from cuda_agent.synth.worker import Worker

    reply = Worker().checks({"op": "checks"})
    assert not reply["ok"] and "send eager first" in reply["reason"]


def test_a_lazy_modules_weights_count_nothing_until_its_first_call(worker):
    """nn.LazyLinear has no weights before its first forward: counting them must not fail the task."""
    code = task("return self.lazy(x)").replace("self.linear = nn.Linear(features, features)",
                                               "self.lazy = nn.LazyLinear(features)")
    reply = worker.eager({"op": "eager", "code": code, "device": "cpu", "plan": FAST_TIMING, "max_weights_bytes": 1 << 20})
    assert reply["ok"], reply
    assert reply["weights_bytes"] == (32 * 32 + 32) * 4   # made by the first call, counted after it


def test_a_failed_run_still_says_what_the_models_weights_take(worker):
    failed = eager(worker, task("return self.linear(x[:, :3])"))
    assert not failed["ok"] and failed["filter"] == "eager" and failed["weights_bytes"] == (32 * 32 + 32) * 4


def test_a_size_step_runs_and_times_in_one_hold_and_keeps_the_candidate_for_its_checks(worker, monkeypatch):
    """A step of the size search takes the device's lock once where its run and its timing hold it alike (beside, or
    alone); the checks build their second model on the host and take it once more. A failed check drops the
    candidate."""
    import cuda_agent.measure as measure

    takes: list[bool] = []
    real = measure.device_lock

    def device_lock(key, shared=False, **kw):
        takes.append(shared)
        return real(key, shared=shared, **kw)

    monkeypatch.setattr(measure, "device_lock", device_lock)
    good = task("return torch.tanh(self.linear(x))")
    assert eager(worker, good, beside=True)["ok"] and takes == [True]
    assert worker.checks({"op": "checks"})["ok"] and takes == [True, True] and worker.state
    takes.clear()
    assert eager(worker, good, alone=True)["ok"] and takes == [False]
    takes.clear()
    assert eager(worker, good)["ok"] and takes == [True, False]  # quiet: the run shared, its timing alone
    far = TICKING.replace("STEP", "0.01")
    assert eager(worker, far)["ok"]
    failed = worker.checks({"op": "checks"})
    assert failed["filter"] == "deterministic" and worker.state == {}


def test_a_lazy_modules_weights_are_held_to_the_limit_once_its_first_call_made_them(worker):
    """nn.LazyLinear's weights count nothing on the meta device or on the host before its first call: the limit is
    checked again after the run, where they exist."""
    code = task("return self.linear(x)").replace("nn.Linear(features, features)", "nn.LazyLinear(1024)")
    refused = worker.eager({"op": "eager", "code": code, "device": "cpu", "plan": FAST_TIMING,
                            "max_weights_bytes": 1 << 10})
    assert not refused["ok"] and refused["filter"] == "memory" and refused["weights_bytes"] > 1 << 10


def test_a_model_a_cycle_still_holds_is_collected_even_when_less_memory_is_allocated_than_after_the_last_collection(
        worker, monkeypatch):
    """What a collection kept (a compiled graph's tensors) may be freed later, by the next compile: a cycle holding
    the dropped model can then be no larger than it and the byte count alone would leave it on the device."""
    import gc

    import torch

    class Model(torch.nn.Module):
        pass

    model = Model()
    model.me = [model]   # a cycle
    worker._kept, worker._dropped = 5 << 20, __import__("weakref").ref(model)
    del model
    collected = []
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 2 << 20)   # below what was kept
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    real = gc.collect
    monkeypatch.setattr(gc, "collect", lambda *a: collected.append(1) or real(*a))
    worker._release(torch.device("cuda"))
    assert collected == [1] and worker._dropped is None
