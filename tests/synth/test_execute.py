"""The execution filters' handling of a shared GPU's memory and of the run's hard stop, against a
scripted worker child: it stands in for the child and the GPU behind it (the CPU cannot run out of
GPU memory), replying from a script and recording what it was asked."""
from __future__ import annotations

import time
from dataclasses import replace

import pytest

from cuda_agent.synth.compose import ProgramComposer
from cuda_agent.synth.execute import CANCELLED, ExecutionFilters, _footprint

OOM = {"ok": False, "filter": "eager", "reason": "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"}
CUDA_OOM = {"ok": False, "filter": "compile", "reason": "AcceleratorError: CUDA error: out of memory"}


def eager(ms: float) -> dict:
    return {"ok": True, "eager_ms": ms, "shapes": [[8, 8]], "seconds": {"eager_run": 0.1}}


COMPILED = {"ok": True, "eager_ms": 0.6, "compile_ms": 0.5, "seconds": {"compile": 1.0}}
CHECKED = {"ok": True, "repeat_apart": 0.0, "seconds": {"checks": 0.01}}
IN_WINDOW = 0.6   # ms: inside the CPU test window [0.02, 20]
TOO_FAST = 0.001  # ms: below it, so the size search grows the task


class ScriptedChild:
    """The worker child's side of `Executor`: replies from `script`, in order."""

    def __init__(self, script: list[dict], delay_s: float = 0.0):
        self.script, self.delay_s = list(script), delay_s
        self.requests: list[tuple[dict, float]] = []
        self.start_seconds, self.closed, self.alive = 0.0, 0, False

    def request(self, message: dict, timeout_s: float) -> dict:
        self.requests.append((message, timeout_s))
        self.alive = True
        time.sleep(self.delay_s)
        return dict(self.script.pop(0))

    def close(self) -> None:
        self.closed += 1
        self.alive = False

    def sent(self, key: str) -> list:
        return [m.get(key) for m, _ in self.requests]


@pytest.fixture
def candidate(catalog, cpu_config):
    composer = ProgramComposer(catalog.usable())
    return next(c for c in (composer.compose(i) for i in range(40))
                if c.program and c.program.batch >= 8 and c.program.elems_per_sample)


def run(cpu_config, cand, script, stop_at=None, delay_s=0.0):
    child = ScriptedChild(script, delay_s)
    rec: dict = {"seconds": {}}
    outcome = ExecutionFilters(cpu_config, cpu_config.memory_budget_bytes, stop_at).execute(cand, rec, child)
    return outcome, rec, child


def test_out_of_memory_is_retried_alone_at_the_same_size_before_anything_shrinks(cpu_config, candidate):
    """Ten workers share a GPU: the first out-of-memory error is blamed on the others, so the same
    candidate runs again alone on the GPU, in a fresh child, before it is made smaller."""
    outcome, rec, child = run(cpu_config, candidate, [OOM, eager(IN_WINDOW), CHECKED, COMPILED])
    assert outcome.accepted and rec["oom"] == 1 and "oom_shrinks" not in rec
    assert child.sent("alone") == [False, True, True, True]  # checks and compile stay alone: they need more memory
    assert "alone_s" not in rec   # no reply held the device alone
    first, again = child.requests[0][0], child.requests[1][0]
    assert again["code"] == first["code"] and child.closed == 1


def test_the_seconds_each_request_held_the_gpu_alone_add_up_by_request(cpu_config, candidate):
    """Every worker of a GPU waits while one holds it alone: a record says how long each of its requests did."""
    script = [{**eager(IN_WINDOW), "alone_s": 0.1}, {**CHECKED, "alone_s": 0.0}, {**COMPILED, "alone_s": 0.4}]
    outcome, rec, _ = run(cpu_config, candidate, [{**eager(TOO_FAST), "alone_s": 0.2}, *script])
    assert outcome.accepted and rec["alone_s"] == pytest.approx({"eager": 0.3, "compile": 0.4})


def test_out_of_memory_alone_shrinks_the_batch_and_keeps_the_size_search_below_what_failed(cpu_config, candidate):
    failed = _footprint(candidate.program)
    batch = candidate.program.batch
    outcome, rec, child = run(cpu_config, candidate, [OOM, OOM, eager(TOO_FAST), eager(IN_WINDOW), CHECKED,
                                                          COMPILED])
    assert outcome.accepted and rec["oom"] == 2 and rec["oom_shrinks"] == 1
    assert child.sent("alone") == [False, True, False, False, False, False]  # a smaller task shares the GPU again
    assert f"batch_size = {max(1, batch // 4)}\n" in child.requests[2][0]["code"]
    assert _footprint(candidate.program) <= failed // 2  # grown again for the window, but not back into trouble


def test_out_of_memory_after_the_window_search_used_its_rescales_is_still_retried(cpu_config, candidate):
    """The 2026-11-25 H100 run lost 20 of 159 candidates this way: grown twice for the window, the
    task ran out of memory and was rejected at once, its retry budget spent by the window."""
    script = [eager(TOO_FAST), eager(TOO_FAST), OOM, eager(IN_WINDOW), CHECKED, COMPILED]
    outcome, rec, child = run(cpu_config, candidate, script)
    assert rec["rescales"] == cpu_config.max_rescales and outcome.accepted and rec["oom"] == 1


def test_a_task_that_does_not_fit_even_alone_is_rejected_after_its_shrinks(cpu_config, candidate):
    outcome, rec, child = run(cpu_config, candidate, [OOM] * 6)
    assert outcome.filter == "eager" and outcome.reason.startswith("out of memory alone on the GPU: OutOfMemoryError")
    assert rec["oom"] == 6 and rec["oom_shrinks"] == cpu_config.max_rescales and not child.script


def test_compile_out_of_memory_is_retried_alone_in_the_same_child(cpu_config, candidate):
    outcome, rec, child = run(cpu_config, candidate, [eager(IN_WINDOW), CHECKED, CUDA_OOM, COMPILED])
    assert outcome.accepted and rec["oom"] == 1 and child.closed == 0  # the child keeps the candidate
    assert child.sent("op") == ["eager", "checks", "compile", "compile"]
    assert child.sent("alone") == [False, False, False, True]


def test_other_failures_are_rejections_without_retry(cpu_config, candidate):
    crash = {"ok": False, "filter": "eager", "reason": "RuntimeError: shape mismatch"}
    outcome, rec, child = run(cpu_config, candidate, [crash])
    assert outcome.filter == "eager" and "oom" not in rec and len(child.requests) == 1


def test_a_candidate_at_the_hard_stop_is_cancelled_not_judged(cpu_config, candidate):
    outcome, rec, child = run(cpu_config, candidate, [], stop_at=time.time() - 1)
    assert outcome == CANCELLED and not child.requests
    # In flight when the stop comes: the child gets only the time left (it is killed then), and
    # what comes back is no verdict.
    killed = {"ok": False, "reason": "worker timed out after 0s (infinite loop or far too slow?)", "crashed": True}
    outcome, rec, child = run(cpu_config, candidate, [killed], stop_at=time.time() + 0.2, delay_s=0.3)
    assert outcome == CANCELLED and child.requests[0][1] <= 0.2


def test_each_worker_child_compiles_with_a_small_pool_unless_told_otherwise(monkeypatch, tmp_path):
    """Synth's workers compile beside each other: each child gets Inductor's pool of 2 (devices.SHARED_COMPILE_THREADS),
    not one subprocess per core; a TORCHINDUCTOR_COMPILE_THREADS the run was given wins."""
    from cuda_agent.synth.execute import Executor

    monkeypatch.delenv("TORCHINDUCTOR_COMPILE_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    assert Executor(tmp_path / "w")._env()["TORCHINDUCTOR_COMPILE_THREADS"] == "2"
    monkeypatch.setenv("TORCHINDUCTOR_COMPILE_THREADS", "6")
    assert Executor(tmp_path / "w", gpu="1")._env() == {"TORCHINDUCTOR_COMPILE_THREADS": "6", "CUDA_VISIBLE_DEVICES": "1",
                                                        "HF_HUB_OFFLINE": "1"}   # no hub: blocks were crawled offline
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")   # a run told otherwise
    assert Executor(tmp_path / "w")._env()["HF_HUB_OFFLINE"] == "0"


def test_a_gpu_runs_children_draw_and_trace_with_two_threads_each_unless_told_otherwise(monkeypatch, cpu_config):
    """Six children beside each other on 16 cores, each with one OpenMP thread a core, took twice the build time of
    two threads each (H200, 2026-11-29). A GPU run's children get GPU_CHILD_THREADS, the CPU backend's torch's
    default (its timings are the host's), and an OMP_NUM_THREADS the run was given wins."""
    from cuda_agent.synth.execute import GPU_CHILD_THREADS
    from cuda_agent.synth.run import execute_job

    class Ctx:
        state: dict = {}

        def on_close(self, fn):
            pass

    seen = []
    monkeypatch.setattr(ExecutionFilters, "execute", lambda self, cand, rec, executor: seen.append(executor) or CANCELLED)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    for device in ("cuda", "cpu"):
        Ctx.state = {}
        execute_job(Ctx(), replace(cpu_config, device=device), 1, None)
    gpu, cpu = seen
    assert gpu._env()["OMP_NUM_THREADS"] == str(GPU_CHILD_THREADS) == "2" and "OMP_NUM_THREADS" not in cpu._env()
    monkeypatch.setenv("OMP_NUM_THREADS", "5")
    assert gpu._env()["OMP_NUM_THREADS"] == "5" == cpu._env()["OMP_NUM_THREADS"]


def test_a_task_without_spatial_sizes_grows_its_batch_past_65536_rows_within_the_memory_budget(cpu_config, catalog):
    """An NF task (a Linear's rows of features) has only its batch to grow: at 1 << 16 rows a GEMM read 0.14 ms on an
    H200 and was rejected after both rescales while its estimate was 0.26 GB of 8 (2026-11-28). It grows on, as far
    as the memory budget lets it."""
    from dataclasses import replace

    from cuda_agent.synth.execute import MAX_BATCH

    composer = ProgramComposer(catalog.usable())
    cand = next(c for c in (composer.compose(i) for i in range(200))
                if c.program and c.program.layout == "NF" and c.program.elems_per_sample)
    cand.program = cand.program.with_batch(1 << 16)
    filters = ExecutionFilters(cpu_config, 8 << 30)
    filters.window = replace(filters.window, low_ms=1.0, high_ms=100.0)
    grown = filters._resized(cand, 0.14)
    assert grown is not None and grown.batch > 1 << 16
    assert grown.batch <= min(MAX_BATCH, (8 << 30) // (cand.program.elems_per_sample * 4))
    filters = ExecutionFilters(cpu_config, cand.program.elems_per_sample * 4 * (1 << 16))   # a budget that is full
    filters.window = replace(filters.window, low_ms=1.0, high_ms=100.0)
    assert filters._resized(cand, 0.14) is None


def test_the_size_search_times_with_a_few_calls_and_the_set_with_the_runs_plan(cpu_config, candidate):
    """The size search's timing only picks a size (SIZE_SEARCH_PLAN, a few calls); the set's figures are the
    baselines', timed in `compile` with the run's own plan. Every size tried is in the record with its time."""
    from cuda_agent.synth.execute import SIZE_SEARCH_PLAN

    outcome, rec, child = run(cpu_config, candidate, [eager(TOO_FAST), eager(IN_WINDOW), CHECKED, COMPILED])
    assert outcome.accepted
    plans = child.sent("plan")
    assert plans[:2] == [SIZE_SEARCH_PLAN.to_dict()] * 2 and plans[3] == cpu_config.timing.to_dict()
    assert SIZE_SEARCH_PLAN.budget_s < cpu_config.timing.budget_s
    first, second = rec["sizes"]
    assert first[-1] == TOO_FAST and second[-1] == IN_WINDOW and second[0] > first[0]   # the batch grew


def test_a_synth_service_sets_no_cores_aside(cpu_config):
    """Synth's candidates run in its own child, on the cores the evaluator has: none are set aside for a solution's
    timing (on 2x H200, twelve evaluators' pairs left every candidate's runs and compiles eight of 32 cores)."""
    from cuda_agent.synth.run import _settings

    s = _settings(cpu_config)
    assert not s.pin_cores and s.build_workers == 0 and s.spares == 0


def test_weights_count_in_the_memory_budget_and_a_task_they_fill_is_rejected(cpu_config, candidate):
    """The size search's budget is the task's whole memory: its batch grows into what the weights leave, the
    estimate counts them, and the worker is asked to refuse weights beyond the budget on the host."""
    per_sample = candidate.program.elems_per_sample * 4
    budget = per_sample * candidate.program.batch * 64
    filters = ExecutionFilters(cpu_config, budget)
    room = budget // per_sample
    assert filters._resized(candidate, TOO_FAST).batch <= room
    filters.weights = budget - per_sample * 3   # what the weights leave: room for 3 samples
    grown = filters._resized(candidate, TOO_FAST)
    assert grown is not None and grown.batch <= 3
    assert _footprint(candidate.program, 1000) == _footprint(candidate.program) + 1000

    heavy = {"ok": False, "filter": "memory", "weights_bytes": 17 << 30, "seconds": {"build": 2.0},
             "reason": "its weights take 17.00 GiB, more than the run's memory budget of 8.00 GiB for a task"}
    outcome, rec, child = run(cpu_config, candidate, [heavy])
    assert outcome.filter == "memory" and "17.00 GiB" in outcome.reason
    assert rec["weights_mb"] == 17 << 10 and child.sent("max_weights_bytes") == [cpu_config.max_weights_bytes]
    assert cpu_config.max_weights_bytes < cpu_config.memory_budget_bytes
    small = ExecutionFilters(replace(cpu_config, memory_budget_bytes=1 << 30), 1 << 30)
    assert small.max_weights == 1 << 30   # the weights' limit, or the budget where it is lower
    light = {**eager(IN_WINDOW), "weights_bytes": 1 << 20}
    outcome, rec, child = run(cpu_config, candidate, [light, CHECKED, COMPILED])
    assert outcome.accepted and rec["weights_mb"] == 1.0
    assert rec["memory_estimate_mb"] == round(_footprint(candidate.program, 1 << 20) / 2**20, 1)


def test_after_an_out_of_memory_shrink_the_batch_may_still_grow_into_half_of_what_failed(cpu_config, candidate):
    """Weights do not shrink with the batch: the budget after an out-of-memory error alone is the weights and half the
    batch's share of what failed, so a too-fast task grows again toward it (it was capped at 2 rows when the
    weights were halved too)."""
    batch = candidate.program.batch
    act = _footprint(candidate.program)
    weights = 3 * act
    oom = {**OOM, "weights_bytes": weights}
    outcome, rec, child = run(cpu_config, candidate,
                              [oom, oom, {**eager(TOO_FAST), "weights_bytes": weights}, eager(IN_WINDOW), CHECKED,
                               COMPILED])
    assert outcome.accepted and rec["oom_shrinks"] == 1 and rec["weights_mb"] == round(weights / 2**20, 1)
    assert f"batch_size = {max(1, batch // 4)}\n" in child.requests[2][0]["code"]
    grown = candidate.program.batch
    assert batch // 4 < grown <= batch // 2, (batch, grown)


def test_the_checks_run_once_at_the_size_the_search_settled_on(cpu_config, candidate):
    """Determinism, RNG use and degenerate outputs are checked where the task ships, not at every size tried (each
    check builds a second model: two sizes of three were checked in vain, 2026-11-29)."""
    outcome, rec, child = run(cpu_config, candidate, [eager(TOO_FAST), eager(TOO_FAST), eager(IN_WINDOW),
                                                      {**CHECKED, "repeat_apart": 3e-6}, COMPILED])
    assert outcome.accepted and child.sent("op") == ["eager", "eager", "eager", "checks", "compile"]
    assert rec["repeat_apart"] == 3e-6 and rec["seconds"]["checks"] == 0.01
    failed = {"ok": False, "filter": "deterministic", "reason": "two runs from the same seed differ by 0.3",
              "seconds": {"checks": 0.02}}
    outcome, rec, child = run(cpu_config, candidate, [eager(IN_WINDOW), failed])
    assert outcome.filter == "deterministic" and "0.3" in outcome.reason and not child.script


def test_out_of_memory_in_the_checks_runs_the_size_again_alone(cpu_config, candidate):
    """The checks hold a second model beside the first: out of memory there is blamed on the other workers first, as
    in a run, and the size runs again alone (the child that held it was closed), checks included."""
    outcome, rec, child = run(cpu_config, candidate, [eager(IN_WINDOW), OOM, eager(IN_WINDOW), CHECKED, COMPILED])
    assert outcome.accepted and rec["oom"] == 1 and child.closed == 1
    assert child.sent("op") == ["eager", "checks", "eager", "checks", "compile"]
    assert child.sent("alone") == [False, False, True, True, True]


def test_a_child_whose_device_broke_is_closed_and_the_next_candidate_gets_a_fresh_one(cpu_config, candidate):
    """A device-side assert or an illegal address is sticky for the process: kept, the child would fail every later
    candidate as "eager". Out of memory is not sticky (a compile's is retried in the same child)."""
    from cuda_agent.synth.execute import _device_broken

    broken = {"ok": False, "filter": "eager", "reason": "AcceleratorError: CUDA error: an illegal memory access was "
                                                        "encountered"}
    outcome, rec, child = run(cpu_config, candidate, [broken])
    assert outcome.filter == "eager" and child.closed == 1
    assert _device_broken({"ok": False, "reason": "RuntimeError: CUDA error: device-side assert triggered"})
    assert not _device_broken(CUDA_OOM) and not _device_broken(OOM)
    assert not _device_broken({"ok": False, "reason": "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when "
                                                      "calling `cublasCreate(handle)`"})   # out of memory: retried
    assert not _device_broken({"ok": False, "reason": "RuntimeError: mat1 and mat2 shapes cannot be multiplied"})
