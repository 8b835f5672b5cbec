"""Issue 24: do the per-evaluation modes follow the evaluation's seeds? On 2026-11-27 (H100, paired_bench with 8
busy processes) one evaluation of five read the solution 7% slow and torch.compile 8.5% slow together, eager
unchanged: two processes moving together in one evaluation share its seeds (the weights, drawn once per
evaluation, and the input sets, drawn per window from the evaluation's timing seed), not their memory.

One process, the demo task, the harness's own timing code (CallServer: inputs drawn by seed, graphs of as
many calls as the first side's ~1 ms, the CallTimer). Each evaluation seed is measured twice, the passes in a
shuffled order: the model built from the seed's weights, torch.compile of it (torch's cache after the first),
graphs captured on the seed's input sets, then windows of eager and compile alternating. If the modes follow
the seeds, a seed's two passes agree and the seeds differ; if they follow time, they do not.

    python benchmarks/seed_probe.py --seeds 12 [--json OUT]      (--device cpu: the plumbing, per call)
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))


def measure(task, seed: int, device, warm: int, windows: int) -> dict:
    import torch

    from cuda_agent.harness.workers.calls import CallServer
    from cuda_agent.measure import TimingPlan, call_seed, make_model

    model = make_model(task.Model, task, seed, device)
    fns = {"eager": model, "compile": torch.compile(model)}
    server = CallServer(fns, task, device, TimingPlan(), as_timing_thread=True)
    out: dict = {"eager": [], "compile": []}
    with torch.no_grad():
        for side in fns:
            server.call(seed, side, keep=False)
        got = server.capture(seed, None)
        per = got["calls"] if got.get("captured") else 1
        n = 0
        for w in range(warm + windows):
            for side in random.Random(seed + w).sample(list(fns), 2):
                n += 1
                t = [server.call(call_seed(seed, n * 100 + k), side, keep=False)["t"][0] * 1000 / per for k in range(6)]
                if w >= warm:
                    out[side].append(statistics.median(t))
    server.close()
    return {"seed": seed, "calls": per, **{side: round(statistics.median(v), 3) for side, v in out.items()}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=12)
    ap.add_argument("--warm", type=int, default=2)
    ap.add_argument("--windows", type=int, default=5)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--json")
    a = ap.parse_args()
    import torch

    from cuda_agent.measure import module_from_source
    from cuda_agent.tasks import load_task

    device = torch.device(a.device)
    task = module_from_source(load_task("scale_bias_relu").code, "reference", "model.py")
    rng = random.Random(7)
    seeds = [rng.randrange(1 << 62) for _ in range(a.seeds)]
    order = seeds * 2
    rng.shuffle(order)
    print(f"# seed_probe: {a.seeds} evaluation seeds, each twice in a shuffled order, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print("| step | seed | pass | eager us | compile us | compile / eager |\n|--:|--:|--:|--:|--:|--:|", flush=True)
    rows, passes = [], {}
    for step, seed in enumerate(order, 1):
        passes[seed] = passes.get(seed, 0) + 1
        row = measure(task, seed, device, a.warm, a.windows) | {"pass": passes[seed], "step": step}
        rows.append(row)
        print(f"| {step} | {seed % 10**6:06d} | {row['pass']} | {row['eager']} | {row['compile']} | "
              f"{row['compile'] / row['eager']:.4f} |", flush=True)

    def pct(x: float, y: float) -> float:
        return round(100 * (max(x, y) / min(x, y) - 1), 2)

    summary = {}
    for side in ("eager", "compile"):
        by = {s: [r[side] for r in rows if r["seed"] == s] for s in seeds}
        within = [pct(*v) for v in by.values()]
        means = [statistics.mean(v) for v in by.values()]
        summary[side] = {"between_seeds_pct": pct(max(means), min(means)), "within_seed_max_pct": max(within),
                         "within_seed_median_pct": statistics.median(within)}
        print(f"{side}: the seeds' means spread {summary[side]['between_seeds_pct']}%; a seed's two passes differ by "
              f"{summary[side]['within_seed_median_pct']}% (median), {summary[side]['within_seed_max_pct']}% at most")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": rows, "summary": summary}, f, indent=1)


if __name__ == "__main__":
    main()
