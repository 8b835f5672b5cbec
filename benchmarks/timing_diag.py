"""Where the spread of small-call timings comes from: the harness's timing loop taken apart, each
sample's parts recorded (GPU events, host issue time, the synchronize after the call, an idle
synchronize right after it), for several variants of the loop, each run several times.

    python benchmarks/timing_diag.py [--repeats 4] [--budget 0.3] [--json OUT]

Prints, per op and variant, each run's median of: the harness's sample, the GPU-event time, the
host issue time, the first synchronize after the call, and a second (idle) synchronize.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))


def _idle_sync_ms(samples: int = 21) -> float:
    """What the harness subtracted until 2026-11-24: the median of idle synchronizes, taken once."""
    import torch

    torch.cuda.synchronize()
    times = []
    for _ in range(samples):
        t0 = time.perf_counter_ns()
        torch.cuda.synchronize()
        times.append((time.perf_counter_ns() - t0) / 1e6)
    return statistics.median(times)


def run(fn, draw, dev, runs: int, spin_ms: float, flush_mode: str, busy_gap: bool) -> dict:
    import torch

    from cuda_agent.harness.timing import _flush_buffer, _spin_cycles

    flush = _flush_buffer(dev)
    idle = _idle_sync_ms()
    spin = _spin_cycles(dev, spin_ms)
    parts = {k: [] for k in ("gpu", "host", "sync1", "sync2")}
    for i in range(runs + 10):
        x = draw(i)
        if flush_mode == "write":
            flush.zero_()
        else:
            torch.sum(flush)
        if not busy_gap:
            torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(spin)
        s.record()
        t0 = time.perf_counter_ns()
        out = fn(*x)
        host = (time.perf_counter_ns() - t0) / 1e6
        e.record()
        e.synchronize()
        t0 = time.perf_counter_ns()
        torch.cuda.synchronize()
        t1 = (time.perf_counter_ns() - t0) / 1e6
        t0 = time.perf_counter_ns()
        torch.cuda.synchronize()
        t2 = (time.perf_counter_ns() - t0) / 1e6
        del out
        if i >= 10:
            for k, v in zip(parts, (s.elapsed_time(e), host, t1, t2)):
                parts[k].append(v)
    med = {k: statistics.median(v) for k, v in parts.items()}
    harness = [max(g, h) + max(a - idle, 0.0) for g, h, a in zip(parts["gpu"], parts["host"], parts["sync1"])]
    paired = [max(g, h) + (a - b) for g, h, a, b in zip(parts["gpu"], parts["host"], parts["sync1"], parts["sync2"])]
    return {**med, "idle": idle, "harness": statistics.median(harness), "paired": statistics.median(paired)}


def main() -> None:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    dev = torch.device("cuda")
    ops = {"relu 4M": (torch.relu, 1 << 22), "sbr 4M": (lambda x: torch.relu(x * 1.5 + 0.25), 1 << 22),
           "relu 16M": (torch.relu, 1 << 24)}
    variants = {"fresh read": dict(fresh=True, spin_ms=0.2, flush_mode="read", busy_gap=False),
                "fresh write": dict(fresh=True, spin_ms=0.2, flush_mode="write", busy_gap=False),
                "fixed read": dict(fresh=False, spin_ms=0.2, flush_mode="read", busy_gap=False),
                "fresh read spin1ms": dict(fresh=True, spin_ms=1.0, flush_mode="read", busy_gap=False),
                "fresh read nosync": dict(fresh=True, spin_ms=0.2, flush_mode="read", busy_gap=True)}
    rows = []
    for op, (fn, n) in ops.items():
        fixed = [torch.randn(n, device=dev)]
        for name, v in variants.items():
            draw = (lambda i, n=n: [torch.randn(n, device=dev)]) if v["fresh"] else (lambda i: fixed)
            for r in range(args.repeats):
                res = run(fn, draw, dev, args.runs, v["spin_ms"], v["flush_mode"], v["busy_gap"])
                rows.append({"op": op, "variant": name, "repeat": r, **res})
                print(f"| {op} | {name} | {r} | " + " | ".join(f"{res[k] * 1000:.1f}" for k in
                      ("harness", "paired", "gpu", "host", "sync1", "sync2", "idle")) + " |", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    print("| op | variant | run | harness us | paired us | gpu us | host us | sync1 us | sync2 us | idle us |")
    print("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|")
    main()
