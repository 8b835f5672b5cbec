"""Issue 24: do the per-process modes of a memory-bound kernel's time (the demo solution read 25.0 or
26.4 us by process on an H100) come from where its buffers lie in device memory?

One process allocates `--pairs` input/output pairs (32 MB each, the demo task's size), each after a
spacer of random size so that they land on different physical pages, and times the same kernel
(`clamp_min(x, 0, out=y)`) on each pair: CUDA-graph batches of `--calls` calls, `--reps` replays,
median per pair, the pairs visited in a shuffled order each round. Modes across pairs of one process
say "placement"; one time for every pair says the mode belongs to the process.

    python benchmarks/placement_probe.py --pairs 24 [--layout views] --json placement.json
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time


def main() -> None:
    import torch

    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=24)
    ap.add_argument("--numel", type=int, default=4096 * 2048)
    ap.add_argument("--calls", type=int, default=12)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--layout", choices=["apart", "views"], default="apart",
                    help="apart: x and y allocated one after the other (always 32 MB apart); views: x and y views "
                         "of one buffer, y a random distance (4 KB steps) after x")
    ap.add_argument("--json")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    dev = torch.device("cuda")
    keep, pairs = [], []
    for _ in range(a.pairs):
        if a.layout == "views":
            gap = rng.randrange(0, 16384) * 1024  # floats: 0-64 MB in 4 KB steps
            whole = torch.empty(2 * a.numel + gap, device=dev)
            keep.append(whole)
            x, y = whole[:a.numel], whole[a.numel + gap:2 * a.numel + gap]
            x.normal_()
            pairs.append((x, y))
            continue
        keep.append(torch.empty(rng.randrange(1, 64) * 2**20 // 4 + rng.randrange(0, 4096), device=dev))
        x = torch.randn(a.numel, device=dev)
        pairs.append((x, torch.empty_like(x)))
    graphs = []
    stream = torch.cuda.Stream()
    for x, y in pairs:
        with torch.cuda.stream(stream):
            for _ in range(3):
                torch.clamp_min(x, 0, out=y)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=stream):
            for _ in range(a.calls):
                torch.clamp_min(x, 0, out=y)
        graphs.append(g)
    times: dict[int, list[float]] = {i: [] for i in range(a.pairs)}
    for _ in range(a.rounds):
        order = list(range(a.pairs))
        rng.shuffle(order)
        for i in order:
            for _ in range(a.reps):
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                graphs[i].replay()
                e.record()
                e.synchronize()
                times[i].append(s.elapsed_time(e) * 1000 / a.calls)
    rows = []
    for i in range(a.pairs):
        x, y = pairs[i]
        rows.append({"pair": i, "median_us": round(statistics.median(times[i]), 3),
                     "gap_mb": round((y.data_ptr() - x.data_ptr()) / 2**20 - x.numel() * 4 / 2**20, 3),
                     "min_us": round(min(times[i]), 3), "x": hex(x.data_ptr()), "y": hex(y.data_ptr())})
    med = [r["median_us"] for r in rows]
    print(f"# placement_probe: {torch.cuda.get_device_name()}, {a.numel} floats, {a.pairs} pairs, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print("| pair | median us | min us | x | y | y - (x + size) MB |\n|--:|--:|--:|---|---|--:|")
    for r in sorted(rows, key=lambda r: r["median_us"]):
        print(f"| {r['pair']} | {r['median_us']} | {r['min_us']} | {r['x']} | {r['y']} | {r['gap_mb']} |")
    print(f"\nspread across pairs (max/min - 1): {100 * (max(med) / min(med) - 1):.2f}%")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
