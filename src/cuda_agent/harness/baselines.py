"""The judge's baselines: eager and torch.compile timings of a task's reference model, cached per
task, device, torch version, timing plan and timing method. An evaluation times its baselines
paired with the solution (profiling.py) and records the cached figures beside its own as a drift
check, storing its own where there were none; `task_baselines` (benchmark tables) times them alone
(`measure.time_baselines`) and reads and writes the same cache."""

from __future__ import annotations

import hashlib
import json
import os
import random
from dataclasses import asdict
from pathlib import Path

import torch

from cuda_agent.devices import device_name, lock_name, resolve_backend
from cuda_agent.harness.config import EvalConfig
from cuda_agent.home import subdir
from cuda_agent.measure import (TimingPlan, TimingStats, beside_timing, compile_for_timing, make_model, module_from_source,
                                release, time_baselines, timing_draw)

# Bumped whenever the figures are measured differently (measure/, the session's loop), so that no figure taken the old way is reused:
# 2 = inputs drawn for every call, L2 emptied by reading, side-stream work charged above noise;
# 3 = and that noise bound is 5% of the call as well as 5 us; 4 = the key holds the whole plan;
# 5 = the CPU backend's processes time with one thread; 6 = no compile or build runs on the host
# while baselines are timed (measure.beside_timing); 7 = baselines timed on the timing cores where the
# machine sets some aside (measure.as_timer), and Inductor's autotuning benchmarks with the device alone.
# 8 = the harness drives the loop call by call: inputs drawn after each call is asked for, the count
# planned from the warm-up's median wall time. 9 = timed paired with the solution (measure.paired): windows
# of calls alternating with the solution's, the figure of a side over all its timed windows. 10 = the baselines
# keep their graph replays where the solution cannot be captured (9 timed them per call then: slower figures).
# 11 = on a GPU, another evaluation's torch.compile may trace and generate code (CPU work) beside the timing
# (EvalConfig.compile_off_lock: 6 held for its CPU work until then; its autotuning and runs still wait).
# 12 = work left on other streams is charged by as much as it passes the noise bound (whole once past it until then).
# 13 = each call is charged the work it left on other streams beyond the bound (one run-wide mean added to every
# sample until then: a solution hiding its work in 3 calls of 5 read 1.5x).
TIMING_METHOD = 13
# A cached eager figure is kept only where the paired eager figure of an evaluation is not faster by
# more than this factor: a figure poisoned when it was taken (slowed by a solution's threads, or
# taken on a machine that has since changed) is replaced. (No reward reads the cache any more; the
# benchmark tables of `task_baselines` do.)
CACHE_AGREEMENT = 1.5


def cache_key(task_code: str, device: str, plan: TimingPlan) -> str:
    """The one place a baseline's cache key is made: the task's code, the device's model, torch's
    version, the whole timing plan and the timing method."""
    blob = json.dumps({"code": task_code, "device": device_name(device), "torch": torch.__version__,
                       "plan": plan.to_dict(), "method": TIMING_METHOD}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def _path(key: str) -> Path:
    return subdir("baselines") / f"{key}.json"


def load(key: str) -> tuple[TimingStats, TimingStats] | None:
    try:
        d = json.loads(_path(key).read_text())
        return TimingStats(**d["eager"]), TimingStats(**d["compile"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def store(key: str, eager: TimingStats, compiled: TimingStats, meta: dict) -> None:
    path = _path(key)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"eager": asdict(eager), "compile": asdict(compiled), **meta}))
    os.replace(tmp, path)


def task_baselines(task_code: str, task_name: str, config: EvalConfig) -> tuple[TimingStats, TimingStats]:
    """Eager and torch.compile timings of a task, in this process (the reference is trusted code),
    read from and written to the cache that evaluations read, so they reuse these figures."""
    device = resolve_backend(config.device).device
    key = cache_key(task_code, device, config.timing)
    cached = load(key) if config.use_baseline_cache else None
    if cached is not None:
        return cached
    dev = torch.device(device)
    threads = torch.get_num_threads()
    if device == "cpu":
        torch.set_num_threads(1)  # as an evaluation's processes time on the CPU (spares.py)
    try:
        with beside_timing(device, config.quiet_host):  # built and compiled (CPU work) while no timer runs
            module = module_from_source(task_code, "reference", f"{task_name}.py")
            model = make_model(module.Model, module, random.getrandbits(31), dev)
            draw = timing_draw(module, random.getrandbits(62), dev)
            fn = compile_for_timing(model, draw(0), alone=lock_name(device) if config.quiet_host else None)
        eager, compiled = time_baselines(model, draw, dev, config.timing, compiled=fn)
    finally:  # free this task's memory and compiled graphs before the next one
        torch.set_num_threads(threads)
        torch._dynamo.reset()
        release(dev)
    if config.quiet_host:  # figures taken beside compiles are not for others to reuse
        store(key, eager, compiled, {"task": task_name, "device_name": device_name(device)})
    return eager, compiled
