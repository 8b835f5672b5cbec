"""Baseline timings (eager and torch.compile) cached per task, device and torch version."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict
from pathlib import Path

import torch

from cuda_agent.harness.result import TimingStats
from cuda_agent.home import subdir

# Bumped whenever timing.py measures differently, so that no figure taken the old way is reused:
# 2 = inputs drawn for every call, L2 emptied by reading, side-stream work charged above noise;
# 3 = and that noise bound is 5% of the call as well as 5 us.
TIMING_METHOD = 3


def device_name(device: str) -> str:
    if device == "cuda":
        return torch.cuda.get_device_name()
    import platform

    return f"cpu-{platform.machine()}-{os.cpu_count()}cores"


def cache_key(task_code: str, device: str, plan: dict) -> str:
    blob = json.dumps({"code": task_code, "device": device_name(device), "torch": torch.__version__,
                       "plan": plan, "method": TIMING_METHOD}, sort_keys=True)
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
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"eager": asdict(eager), "compile": asdict(compiled), **meta}))
    os.replace(tmp, path)
