"""Timing stability and the cache flush: the harness's `time_callable` on element-wise ops of
several sizes, each timed several times in a row with the L2 emptied by reading a buffer (the
default) or by zeroing it (as triton's do_bench does), beside `triton.testing.do_bench` where
triton is installed. The question: how far apart are two timings of the same call, and what does
each flush add to a small call's time?

    python benchmarks/timing_bench.py [--device cuda] [--repeats 5] [--budget 0.5] [--sizes N ...] [--json OUT]

Prints a markdown table: per op and flush, the median of each timing run, their spread
(max / min - 1) and the ratio to do_bench's median.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

SIZES = [1 << 22, 1 << 24, 1 << 26, 1 << 28]  # float32 elements: 16 MB to 1 GB per tensor


def _ops():
    import torch

    return {"relu": torch.relu, "x*s+b relu": lambda x: torch.relu(x * 1.5 + 0.25)}


def bench(device: str, repeats: int, budget: float, sizes: list[int] = SIZES) -> list[dict]:
    import torch

    from cuda_agent.measure import TimingPlan, time_callable

    dev = torch.device(device)
    try:
        from triton.testing import do_bench
    except ImportError:
        do_bench = None
    rows = []
    for size in sizes:
        for name, fn in _ops().items():
            gen = torch.Generator(device=dev)

            def draw(i: int, size=size, gen=gen) -> list:
                gen.manual_seed(i)
                return [torch.randn(size, device=dev, generator=gen)]

            row = {"op": name, "elements": size}
            for flush in ("read", "write"):
                plan = TimingPlan(min_runs=30, max_runs=1000, budget_s=budget, flush=flush)
                row[flush] = [time_callable(fn, draw, dev, plan).stats.median_ms for _ in range(repeats)]
            if do_bench is not None and dev.type == "cuda":
                x = draw(0)[0]
                row["do_bench"] = [do_bench(lambda: fn(x), warmup=25, rep=int(budget * 1000), return_mode="median")
                                   for _ in range(repeats)]
            rows.append(row)
            torch.cuda.empty_cache() if dev.type == "cuda" else None
    return rows


def _spread(values: list[float]) -> float:
    return (max(values) / min(values) - 1) * 100


def table(rows: list[dict]) -> str:
    lines = ["| op | elements | flush | medians (ms) | spread | median / do_bench |",
             "|---|--:|---|---|--:|--:|"]
    for r in rows:
        ref = sorted(r["do_bench"])[len(r["do_bench"]) // 2] if r.get("do_bench") else None
        for flush in ("read", "write", "do_bench"):
            if flush not in r:
                continue
            v = r[flush]
            mid = sorted(v)[len(v) // 2]
            ratio = f"{mid / ref:.2f}" if ref else ""
            lines.append(f"| {r['op']} | {r['elements']:,} | {flush} | {', '.join(f'{x:.4f}' for x in v)} | "
                         f"{_spread(v):.1f}% | {ratio} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--budget", type=float, default=0.5)
    ap.add_argument("--sizes", type=int, nargs="+", default=SIZES, help="float32 elements per tensor")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    rows = bench(args.device, args.repeats, args.budget, args.sizes)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    print(table(rows))


if __name__ == "__main__":
    main()
