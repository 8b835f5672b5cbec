"""Issue 24: is a memory-bound kernel's per-evaluation mode (the demo's solution or its torch.compile
read 5-8% slow for a whole evaluation, at a 0.03% standard error inside it, H100 2026-11-27) a property
of one captured CUDA graph?

One process captures `--graphs` graphs of the same `--calls` calls (each call on input buffers of
its own, its output allocated in the graph's pool, as the harness's graphs.py does), for
relu(x * scale + bias) compiled by torch.compile and run eagerly, and times every graph by replays
(the L2 emptied before each), the graphs visited in a shuffled order each round. Modes across the
graphs of one process say "per graph": timing several graphs per side would spread them.

    python benchmarks/graph_instance_probe.py --graphs 16 --json graphs.json
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
    ap.add_argument("--graphs", type=int, default=16)
    ap.add_argument("--calls", type=int, default=12)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json")
    a = ap.parse_args()
    dev = torch.device("cuda")
    rng = random.Random(0)
    scale, bias = torch.randn(2048, device=dev), torch.randn(2048, device=dev)
    fns = {"compile": torch.compile(lambda x: torch.relu(x * scale + bias)),
           "eager": lambda x: torch.relu(x * scale + bias)}
    flush = torch.empty(256 * 2**20 // 4, device=dev)
    graphs: dict[str, list] = {name: [] for name in fns}
    keep = []
    stream = torch.cuda.Stream()
    with torch.no_grad():
        for name, fn in fns.items():
            for _ in range(a.graphs):
                xs = [torch.randn(4096, 2048, device=dev) for _ in range(a.calls)]
                with torch.cuda.stream(stream):
                    for x in xs[:2]:
                        fn(x)
                torch.cuda.synchronize()
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g, stream=stream):
                    outs = [fn(x) for x in xs]
                keep.append((xs, outs))
                graphs[name].append(g)
    times = {(n, i): [] for n in fns for i in range(a.graphs)}
    for _ in range(a.rounds):
        order = list(times)
        rng.shuffle(order)
        for n, i in order:
            for _ in range(a.reps):
                flush.zero_()
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                graphs[n][i].replay()
                e.record()
                e.synchronize()
                times[(n, i)].append(s.elapsed_time(e) * 1000 / a.calls)
    print(f"# graph_instance_probe: {torch.cuda.get_device_name()}, {a.graphs} graphs of {a.calls} calls a side, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    rows = {n: [round(statistics.median(times[(n, i)]), 3) for i in range(a.graphs)] for n in fns}
    print("| graph | " + " | ".join(f"{n} us" for n in fns) + " |\n|--:|" + "--:|" * len(fns))
    for i in range(a.graphs):
        print(f"| {i} | " + " | ".join(str(rows[n][i]) for n in fns) + " |")
    print("| spread | " + " | ".join(f"{100 * (max(v) / min(v) - 1):.2f}%" for v in rows.values()) + " |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "median_us": rows}, f, indent=1)


if __name__ == "__main__":
    main()
