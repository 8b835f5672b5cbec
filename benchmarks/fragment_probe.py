"""Issue 24: do the per-evaluation modes (a memory-bound side 5-8% slow for a whole evaluation in the
harness, never in one fresh process) come from fragmented GPU memory? Many processes come and go on an
evaluation host; a new allocation may then be backed by small pages, and a streaming kernel pays TLB misses.

`--holes`: before anything is timed, this process takes nearly all free GPU memory in chunks of
`--chunk-kb` through the driver (cuMemAlloc) and frees every other one, so only holes are left; then it
times, as graph_instance_probe.py does, relu(x * scale + bias) compiled and eager by replays of CUDA graphs
of 12 calls (inputs and outputs allocated after the holes were made). Run it with and without --holes, and
with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (PyTorch then maps 2 MB physical chunks itself).

    python benchmarks/fragment_probe.py [--holes] [--json OUT]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import time


def make_holes(chunk: int, keep_free: int) -> tuple[list, int]:
    import torch

    cuda = ctypes.CDLL("libcuda.so.1")
    free, _ = torch.cuda.mem_get_info()
    ptrs = []
    taken = 0
    while taken + chunk < free - keep_free:
        p = ctypes.c_uint64()
        if cuda.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(chunk)) != 0:
            break
        ptrs.append(p.value)
        taken += chunk
    kept = []
    for i, p in enumerate(ptrs):
        if i % 2:
            cuda.cuMemFree_v2(ctypes.c_uint64(p))
        else:
            kept.append(p)
    return kept, taken


def main() -> None:
    import torch

    ap = argparse.ArgumentParser()
    ap.add_argument("--holes", action="store_true")
    ap.add_argument("--chunk-kb", type=int, default=1088)
    ap.add_argument("--graphs", type=int, default=4)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--json")
    a = ap.parse_args()
    dev = torch.device("cuda")
    torch.zeros(1, device=dev)
    kept, taken = make_holes(a.chunk_kb * 1024, 3 << 30) if a.holes else ([], 0)
    scale, bias = torch.randn(2048, device=dev), torch.randn(2048, device=dev)
    fns = {"compile": torch.compile(lambda x: torch.relu(x * scale + bias)),
           "eager": lambda x: torch.relu(x * scale + bias)}
    flush = torch.empty(256 * 2**20 // 4, device=dev)
    stream = torch.cuda.Stream()
    graphs, keep = {n: [] for n in fns}, []
    with torch.no_grad():
        for name, fn in fns.items():
            for _ in range(a.graphs):
                xs = [torch.randn(4096, 2048, device=dev) for _ in range(12)]
                with torch.cuda.stream(stream):
                    fn(xs[0])
                torch.cuda.synchronize()
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g, stream=stream):
                    keep.append([fn(x) for x in xs])
                keep.append(xs)
                graphs[name].append(g)
    med = {}
    for name, gs in graphs.items():
        per = []
        for g in gs:
            ts = []
            for _ in range(a.reps):
                flush.zero_()
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                g.replay()
                e.record()
                e.synchronize()
                ts.append(s.elapsed_time(e) * 1000 / 12)
            per.append(round(statistics.median(ts), 3))
        med[name] = per
    conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
    print(f"| {'holes' if a.holes else 'none'} | {taken / 2**30:.1f} GiB taken, {len(kept)} kept | {conf or '-'} | "
          + " | ".join(f"{n}: {min(v)}-{max(v)}" for n, v in med.items()) + " |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "holes": a.holes, "alloc_conf": conf,
                       "taken_gib": taken / 2**30, "median_us": med,
                       "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}, f, indent=1)


if __name__ == "__main__":
    main()
