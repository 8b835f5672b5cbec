"""Where the spread of small-call timings comes from: the harness's timing loop taken apart, with
knobs the harness does not have, each variant timed several times in a row (a new flush buffer
and a new spin calibration each time, as every `time_callable` call does).

    python benchmarks/timing_diag.py [--repeats 5] [--runs 300] [--json OUT]

Prints, per op and variant, each run's median of the harness's sample (max(GPU events, host
issue time)) and of the GPU-event time alone, their spread over the runs, and the SM clock
(NVML) at the end of each run. Variants:
- base: the harness's loop (inputs drawn for each call and freed after it; L2 emptied by reading
  a buffer twice its size, allocated for each run)
- rotate: the last three input sets kept alive, so that calls cycle through four placements
- bigflush: a flush buffer eight times the L2
- write: the flush buffer zeroed instead of read
- keepflush: one flush buffer for the whole process
- pinned: the process pinned to one CPU core while it times
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import deque
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

VARIANTS = {
    "base": {},
    "base again": {},
    "rotate": {"rotate": 3},
    "bigflush": {"flush_factor": 8},
    "write": {"flush_mode": "write"},
    "keepflush": {"keep_flush": True},
    "pinned": {"pin": True},
}
_KEPT_FLUSH = {}


def _clock() -> int:
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml.nvmlDeviceGetClockInfo(pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.NVML_CLOCK_SM)
    except Exception:
        return -1


def run(fn, draw, runs: int, rotate: int = 0, flush_factor: int = 2, flush_mode: str = "read",
        keep_flush: bool = False, pin: bool = False) -> dict:
    import os

    import torch

    cpus = os.sched_getaffinity(0)
    if pin:
        os.sched_setaffinity(0, {max(cpus)})

    from cuda_agent.measure.timing import _spin_cycles

    dev = torch.device("cuda")
    l2 = torch.cuda.get_device_properties(dev).L2_cache_size
    if keep_flush:
        flush = _KEPT_FLUSH.setdefault("buf", torch.empty(2 * l2 // 4, dtype=torch.int32, device=dev))
    else:
        flush = torch.empty(flush_factor * l2 // 4, dtype=torch.int32, device=dev)
    spin = _spin_cycles(dev, 0.2)
    alive: deque = deque(maxlen=max(rotate, 1))
    own, gpu, hosts = [], [], []
    for i in range(runs + 10):
        x = draw(i)
        if flush_mode == "write":
            flush.zero_()
        else:
            torch.sum(flush)
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(spin)
        s.record()
        t0 = time.perf_counter_ns()
        out = fn(*x)
        host = (time.perf_counter_ns() - t0) / 1e6
        e.record()
        e.synchronize()
        del out
        if rotate:
            alive.append(x)
        del x
        if i >= 10:
            g = s.elapsed_time(e)
            gpu.append(g)
            hosts.append(host)
            own.append(max(g, host))
    os.sched_setaffinity(0, cpus)
    floor = sorted(hosts)[len(hosts) // 10]
    return {"own": statistics.median(own), "gpu": statistics.median(gpu), "clock": _clock(),
            "host_p10": floor, "host_p50": statistics.median(hosts),
            "floor": statistics.median([max(g, floor) for g in gpu])}


def _list(values: list[float]) -> str:
    return ", ".join(f"{v:.1f}" for v in values)


def _spread(values: list[float]) -> str:
    return f"{(max(values) / min(values) - 1) * 100:.1f}%"


def main() -> None:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    dev = torch.device("cuda")
    ops = {"relu 4M": (torch.relu, 1 << 22), "sbr 8M": (lambda x: torch.relu(x * 1.5 + 0.25), 1 << 23),
           "relu 16M": (torch.relu, 1 << 24)}
    print("| op | variant | own medians (us) | spread | GPU-event medians (us) | spread | host p10 / p50 (us) | "
          "max(GPU, host p10) (us) | spread |")
    print("|---|---|---|--:|---|--:|---|---|--:|")
    rows = []
    for op, (fn, n) in ops.items():
        for name, knobs in VARIANTS.items():
            res = [run(fn, lambda i, n=n: [torch.randn(n, device=dev)], args.runs, **knobs) for _ in range(args.repeats)]
            rows.append({"op": op, "variant": name, "runs": res})
            us = {k: [r[k] * 1000 for r in res] for k in ("own", "gpu", "host_p10", "host_p50", "floor")}
            hosts = ", ".join(f"{a:.1f}/{b:.1f}" for a, b in zip(us["host_p10"], us["host_p50"]))
            print(f"| {op} | {name} | {_list(us['own'])} | {_spread(us['own'])} | {_list(us['gpu'])} | "
                  f"{_spread(us['gpu'])} | {hosts} | {_list(us['floor'])} | {_spread(us['floor'])} |", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
