"""Issue 24: do the per-process modes of a memory-bound kernel's time (the demo solution read 25.0 or
26.4 us by process on an H100) come from where its buffers lie in device memory?

2026-11-28 (fresh H100, paired_bench): in 3 of 15 evaluations the demo solution read 26.4 us instead of 24.9 us
(eager's paired ratio fell 6%, eager itself unchanged); a kept reference worker (one process) had a slow
evaluation before, so the mode follows something made per evaluation. `--kernels` times, on every pair, the
demo solution's own kernel (`sbr`: benchmarks/solutions/scale_bias_relu_cuda/kernels/sbr.cu, a grid-stride loop
capped at 16 blocks an SM, built here with load_inline), `eager` relu(x * s + b), `compile` (the same under
torch.compile) and `clamp` (clamp_min, the kernel this probe timed first): modes across pairs for sbr or compile
but not eager say placement and the kernel's access pattern; the same slow pairs across kernels say the memory.

One process allocates `--pairs` input/output pairs (32 MB each, the demo task's size), each after a
spacer of random size so that they land on different physical pages, and times the same kernel
(`clamp_min(x, 0, out=y)`) on each pair: CUDA-graph batches of `--calls` calls, `--reps` replays,
median per pair, the pairs visited in a shuffled order each round. Modes across pairs of one process
say "placement"; one time for every pair says the mode belongs to the process.

`--distinct` times the harness's regime instead: each of a graph's calls on input and output buffers of its own
(`calls` pairs a placement, each after its spacer) and the L2 emptied (a read of twice its size) before every
replay. Without it, a graph's calls reuse one pair: the same 64 MB a call (32 MB in, 32 MB out), much of it still in
the 50 MB L2 from the call before and never emptied, where the harness's calls each read and write memory no call
before touched (2026-11-28: the solution's and torch.compile's modes came together in 9 of 126 paired
evaluations with both figures, about 4 expected by chance, each in its own process; eager moved in 2 of 141).

    python benchmarks/placement_probe.py --pairs 24 [--layout views] [--kernels sbr,eager,compile,clamp] [--distinct] --json placement.json
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path


KERNELS = ("sbr", "eager", "compile", "clamp")
SBR = Path(__file__).resolve().parent / "solutions" / "scale_bias_relu_cuda" / "kernels" / "sbr.cu"
SBR_WRAPPER = """
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
extern "C" void sbr_launch(const float* x, const float* s, const float* b, float* y, long long rows, long long cols,
                           int config, cudaStream_t stream);
void sbr_out(torch::Tensor x, torch::Tensor s, torch::Tensor b, torch::Tensor y, int64_t cols) {
  sbr_launch(x.data_ptr<float>(), s.data_ptr<float>(), b.data_ptr<float>(), y.data_ptr<float>(), x.numel() / cols,
             cols, 0, c10::cuda::getCurrentCUDAStream().stream());
}
"""


def make_kernels(kernels: list[str], scale, bias, cols: int) -> dict:
    """Each kernel as f(x, y): y written where the kernel lets the caller choose (sbr, clamp), else returned."""
    import torch

    fns = {"eager": lambda x, y: torch.relu(x.view(-1, cols) * scale + bias),
           "clamp": lambda x, y: torch.clamp_min(x, 0, out=y)}
    if "compile" in kernels:
        compiled = torch.compile(lambda x: torch.relu(x.view(-1, cols) * scale + bias))
        fns["compile"] = lambda x, y: compiled(x)
    if "sbr" in kernels:
        from torch.utils.cpp_extension import load_inline

        ext = load_inline("placement_probe_sbr", cpp_sources=SBR_WRAPPER, cuda_sources=SBR.read_text(),
                          functions=["sbr_out"], extra_cuda_cflags=["-O3"], verbose=False)
        fns["sbr"] = lambda x, y: ext.sbr_out(x, scale, bias, y, cols)
    return fns


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
    ap.add_argument("--kernels", default="clamp", help="comma-separated: sbr eager compile clamp")
    ap.add_argument("--distinct", action="store_true", help="each call of a graph on buffers of its own, the L2 "
                    "emptied before every replay (the harness's regime); default: one pair a graph, L2-hot")
    ap.add_argument("--json")
    a = ap.parse_args()
    kernels = [k for k in a.kernels.split(",") if k]
    unknown = set(kernels) - set(KERNELS)
    if unknown:
        ap.error(f"unknown kernels {sorted(unknown)}; choose from {KERNELS}")
    rng = random.Random(a.seed)
    dev = torch.device("cuda")
    keep, pairs = [], []
    for _ in range(a.pairs * (a.calls if a.distinct else 1)):
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
    cols = 2048  # the demo task's features: x is (numel / cols, cols)
    scale, bias = torch.randn(cols, device=dev), torch.randn(cols, device=dev)
    fns = make_kernels(kernels, scale, bias, cols)
    graphs: dict[tuple[str, int], torch.cuda.CUDAGraph] = {}
    stream = torch.cuda.Stream()
    per = a.calls if a.distinct else 1   # pairs a placement: one per call of its graph, or one for all
    for i in range(a.pairs):
        mine = pairs[i * per:(i + 1) * per]
        for k in kernels:
            with torch.cuda.stream(stream):
                for _ in range(3):
                    for x, y in mine:
                        fns[k](x, y)
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, stream=stream):
                for j in range(a.calls):
                    fns[k](*mine[j % per])
            graphs[(k, i)] = g
    flush = flushed = None
    if a.distinct:   # as the harness's "read" flush: twice the L2, read, before every replay
        flush = torch.ones(2 * torch.cuda.get_device_properties(dev).L2_cache_size // 4, device=dev)
        flushed = torch.empty((), device=dev)
    times: dict[tuple[str, int], list[float]] = {key: [] for key in graphs}
    for _ in range(a.rounds):
        order = list(graphs)
        rng.shuffle(order)
        for key in order:
            for _ in range(a.reps):
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                if flush is not None:
                    torch.sum(flush, dim=0, out=flushed)
                s.record()
                graphs[key].replay()
                e.record()
                e.synchronize()
                times[key].append(s.elapsed_time(e) * 1000 / a.calls)
    rows = []
    for i in range(a.pairs):
        x, y = pairs[i * per]
        row = {"pair": i, "gap_mb": round((y.data_ptr() - x.data_ptr()) / 2**20 - x.numel() * 4 / 2**20, 3),
               "x": hex(x.data_ptr()), "y": hex(y.data_ptr())}
        for k in kernels:
            row[f"{k}_us"] = round(statistics.median(times[(k, i)]), 3)
            row[f"{k}_min_us"] = round(min(times[(k, i)]), 3)
        rows.append(row)
    regime = "distinct buffers a call, L2 emptied a replay" if a.distinct else "one pair a graph, L2-hot"
    print(f"# placement_probe: {torch.cuda.get_device_name()}, {a.numel} floats, {a.pairs} placements of {per} "
          f"pair(s) ({regime}), kernels {kernels}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print("| pair | " + " | ".join(f"{k} median us" for k in kernels) + " | x | y | y - (x + size) MB |")
    print("|--:|" + "--:|" * len(kernels) + "---|---|--:|")
    for r in sorted(rows, key=lambda r: r[f"{kernels[0]}_us"]):
        print(f"| {r['pair']} | " + " | ".join(str(r[f'{k}_us']) for k in kernels) + f" | {r['x']} | {r['y']} | {r['gap_mb']} |")
    print()
    spreads = {}
    for k in kernels:
        med = [r[f"{k}_us"] for r in rows]
        spreads[k] = round(100 * (max(med) / min(med) - 1), 2)
        slow = sorted(r["pair"] for r in rows if r[f"{k}_us"] > 1.02 * min(med))
        print(f"{k}: spread across pairs (max/min - 1) {spreads[k]:.2f}%; pairs over 2% above the fastest: {slow}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "kernels": kernels, "distinct": a.distinct,
                       "spread_pct": spreads, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
