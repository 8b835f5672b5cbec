"""Issue 24 on the CPU: is the torch.compile side's mode a compile's, or the process's memory? One fresh
process compiles the demo's reference as the reference worker does (measure.compile_for_timing), times
eager and compiled paired with the judge's own driver (measure.time_paired), and prints one JSON line: each
side's median, each side's minor page faults and mean ms a call in a plain loop, and what touching a fresh
32 MB mapping costs here.

    OMP_NUM_THREADS=1 TORCHINDUCTOR_CACHE_DIR=/tmp/ind_1 python benchmarks/device_2026-11-28f/cpu/fault_probe.py

Run it in several fresh processes (a new cache folder: a fresh compile; the same: a load from the cache),
and again with glibc's `MALLOC_MMAP_THRESHOLD_=268435456 MALLOC_TRIM_THRESHOLD_=4294967295` (freed memory
kept and reused: no faults). RESULTS.md, 2026-11-28 (twenty-eighth session), has the figures.
"""

import json
import mmap
import resource
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "src"))

from cuda_agent.measure import (TimingPlan, compile_for_timing, make_inputs, make_model,  # noqa: E402
                                module_from_source, side_stats, time_paired)

PAGE, MAPPING = 4096, 32 << 20


def loop(fn, task, device, n: int = 20) -> tuple[float, float]:
    """Minor page faults and ms a call over `n` calls of `fn` on one input set, after one call."""
    x = make_inputs(task, 2, device)
    with torch.no_grad():
        fn(*x)
        faults, t0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.perf_counter()
        for _ in range(n):
            fn(*x)
        ms = (time.perf_counter() - t0) / n * 1e3
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) / n, ms


def touch_ms(n: int = 10) -> float:
    """The median ms to touch every page of a fresh anonymous 32 MB mapping."""
    times = []
    for _ in range(n):
        m = mmap.mmap(-1, MAPPING)
        t0 = time.perf_counter()
        for offset in range(0, MAPPING, PAGE):
            m[offset] = 1
        times.append((time.perf_counter() - t0) * 1e3)
        m.close()
    return sorted(times)[n // 2]


def main() -> None:
    torch.set_num_threads(1)
    source = ROOT / "src" / "cuda_agent" / "examples" / "scale_bias_relu.py"
    task = module_from_source(source.read_text(), "task_demo", "model.py")
    device = torch.device("cpu")
    model = make_model(task.Model, task, 0, device).eval()
    t0 = time.perf_counter()
    with torch.no_grad():
        compiled = compile_for_timing(model, make_inputs(task, 1, device))
    compile_s = time.perf_counter() - t0
    plain = {name: loop(fn, task, device) for name, fn in (("eager", model), ("compile", compiled))}
    run = time_paired(model, {"eager": model, "compile": compiled}, lambda s: make_inputs(task, s, device), device,
                      TimingPlan())
    medians = {side: side_stats(run, side, False).median_ms for side in ("solution", "eager", "compile")}
    print(json.dumps({"compile_s": round(compile_s, 2), "median_ms": {k: round(v, 3) for k, v in medians.items()},
                      "loop_faults_and_ms": {k: [round(f, 1), round(ms, 3)] for k, (f, ms) in plain.items()},
                      "touch_32MB_ms": round(touch_ms(), 2)}), flush=True)


if __name__ == "__main__":
    main()
