"""Does where a buffer lies move a memory-bound kernel's time? (issue 24: the demo solution's
graph replays read 24.7-26.5 us on an H100 and 18.7-20.7 us on an H200 from one evaluation to the
next, while eager, timed beside it, held within 0.2%.) One process, one fused elementwise kernel
(y = relu(x * s + b), 8M floats, as the demo task), captured as a graph of 12 calls; each trial
allocates its buffers after a spacer of a different size, so they land at other addresses, and
times 200 replays (--fused: one kernel a call, relu alone, as a fused solution) with CUDA events (L2 flushed before each). Prints each trial's median and the
spread over trials: a spread far above the within-trial one says placement, not the timer.

    python benchmarks/placement_probe.py [--trials 12] [--elements 8388608]
"""

from __future__ import annotations

import argparse
import statistics

import torch


def trial(elements: int, spacer_mb: int, replays: int, fused: bool, calls: int = 12) -> tuple[float, float, int]:
    spacer = torch.empty(spacer_mb << 18, device="cuda") if spacer_mb else None  # floats: MB * 2**18
    xs = [torch.randn(elements, device="cuda") for _ in range(calls)]
    s, b = torch.randn(1, device="cuda"), torch.randn(1, device="cuda")
    flush = torch.empty(64 << 20, dtype=torch.int8, device="cuda")
    op = (lambda x: torch.relu(x)) if fused else (lambda x: torch.relu(x * s + b))  # one kernel, or eager's three
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for x in xs[:2]:
            op(x)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        outs = [op(x) for x in xs]
    times = []
    for _ in range(replays):
        flush.zero_()
        a, z = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        z.record()
        z.synchronize()
        times.append(a.elapsed_time(z) * 1000 / calls)
    times.sort()
    med = statistics.median(times)
    iqr = (times[3 * len(times) // 4] - times[len(times) // 4]) / med
    addr = xs[0].data_ptr()
    del outs, g, xs, spacer
    torch.cuda.empty_cache()
    return med, iqr, addr


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=12)
    ap.add_argument("--elements", type=int, default=1 << 23)
    ap.add_argument("--replays", type=int, default=200)
    ap.add_argument("--fused", action="store_true", help="one kernel a call (relu alone), as the fused solution")
    a = ap.parse_args()
    print(f"# placement_probe: {torch.cuda.get_device_name()}, torch {torch.__version__}, {a.elements} floats")
    print("| trial | spacer MB | first input at | median us/call | IQR/median |")
    print("|--:|--:|--:|--:|--:|")
    meds = []
    for i in range(a.trials):
        spacer = [0, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144][i % 12] + 233 * (i // 12)
        med, iqr, addr = trial(a.elements, spacer, a.replays, a.fused)
        meds.append(med)
        print(f"| {i} | {spacer} | {addr % (1 << 30):#x} | {med:.3f} | {iqr:.2%} |")
    print(f"\nspread of the trials' medians (max/min - 1): {max(meds) / min(meds) - 1:.2%}")


if __name__ == "__main__":
    main()
