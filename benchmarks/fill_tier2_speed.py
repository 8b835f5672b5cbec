"""Does tier 2's choice change the reward? For a few held-out tasks of the fill family's tier 2
(cuda_agent/rl/data/fill.py: y = f(x * scale + bias) at TIER2_SIZES), the correct expression with every
EPT, and tier 1's kernel on the same task, judged by the reward route that trains on them
(rl/workers/reward.py, `profile: true`, RL's timing plan unless `--budget`): the harness's speed-ups vs
eager and torch.compile, the milestone, and each kernel's time against EPT=1's (the eager baseline
is the same for all, timed once per task: time ratio = EPT=1's speed-up / this one's).

    python benchmarks/fill_tier2_speed.py                      # on the GPU: 4 operators x (4 EPTs + tier 1)
    python benchmarks/fill_tier2_speed.py --ops elu softplus --budget 2 --json out.json
    python benchmarks/fill_tier2_speed.py --device cpu --ops elu   # the plumbing, on the CPU backend

The choice matters for the reward where the milestone differs between EPTs (2 vs 3: torch.compile
beaten by 5% or not); a time ratio far from 1 with the same milestone matters only as a margin.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

DEFAULT_OPS = ("affine", "sigmoid", "softplus", "elu")


def cases(ops: list[str], device: str) -> list[tuple[Any, str, dict, str]]:
    """(item, label, row, reply): every EPT of each operator's first held-out task, and tier 1's kernel."""
    from cuda_agent.rl.data import fill

    out = []
    for name in ops:
        item = next((it for it in fill.items("val", device, tier=2) if it.op.name == name), None)
        if item is None:
            raise SystemExit(f"--ops: no operator {name!r}; the family has {', '.join(op.name for op in fill.OPS)}")
        row = fill.fill_row(item, 0, device)
        for ept in fill.EPT_CHOICES:
            out.append((item, f"ept={ept}", row, f"{item.answer}\nept={ept}"))
        tier1 = {**row, "extra_info": {**row["extra_info"], "tier": 1}}   # the same task, tier 1's kernel
        out.append((item, "tier 1", tier1, item.answer))
    return out


async def judge_all(jobs: list[tuple[Any, str, dict, str]], kwargs: dict[str, Any]) -> list[dict[str, Any]]:
    from cuda_agent.rl.data.rows import FILL
    from cuda_agent.rl.workers.reward import compute_score

    return list(await asyncio.gather(*[
        compute_score(FILL, reply, row["reward_model"]["ground_truth"], row["extra_info"], **kwargs)
        for _, _, row, reply in jobs]))


def table(jobs: list[tuple[Any, str, dict, str]], verdicts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows, base = [], {}
    for (item, label, _, _), v in zip(jobs, verdicts):
        if label == "ept=1":
            base[item.op.name] = v["speedup_vs_eager"]
        b, s = base.get(item.op.name), v["speedup_vs_eager"]
        rows.append({"op": item.op.name, "size": "x".join(map(str, item.size)), "kernel": label,
                     "correct": bool(v["correct"]), "milestone": v["milestone"], "reward": v["true_score"],
                     "vs_eager": round(s, 3), "vs_compile": round(v["speedup_vs_compile"], 3),
                     "time_vs_ept1": round(b / s, 3) if b and s else None, "reason": v["reason"][:120]})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", nargs="+", default=list(DEFAULT_OPS), help="operators (their first held-out task)")
    ap.add_argument("--device", default="cuda", help="cuda (what this measures) | cpu (the plumbing)")
    ap.add_argument("--budget", type=float, default=None, help="timing seconds a solution (default: RL's plan)")
    ap.add_argument("--build-workers", type=int, default=4)
    ap.add_argument("--json", default=None, help="also write the rows and the machine here")
    args = ap.parse_args(argv)
    from cuda_agent.devices import machine
    from cuda_agent.rl.rollout.evaluation import close_shared_services

    kwargs: dict[str, Any] = {"device": args.device, "profile": True, "build_workers": args.build_workers,
                              "timeout_s": 1800}
    if args.budget is not None:
        kwargs["timing_budget_s"] = args.budget
    jobs = cases(args.ops, args.device)
    t0 = time.monotonic()
    try:
        verdicts = asyncio.run(judge_all(jobs, kwargs))
    finally:
        close_shared_services()
    rows = table(jobs, verdicts)
    print(f"{'op':<10} {'size':<10} {'kernel':<7} {'ok':<3} {'vs eager':>8} {'vs compile':>10} "
          f"{'time/ept=1':>10} {'reward':>6}  milestone")
    for r in rows:
        ratio = f"{r['time_vs_ept1']:.3f}" if r["time_vs_ept1"] else "-"
        print(f"{r['op']:<10} {r['size']:<10} {r['kernel']:<7} {'y' if r['correct'] else 'n':<3} {r['vs_eager']:>8.2f} "
              f"{r['vs_compile']:>10.2f} {ratio:>10} {r['reward']:>6g}  {r['milestone']}"
              + ("" if r["correct"] else f"  ({r['reason']})"))
    info = {"date": time.strftime("%Y-%m-%d"), **machine(args.device), "seconds": round(time.monotonic() - t0, 1),
            "budget_s": args.budget}
    print(json.dumps(info))
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": info, "rows": rows}, indent=1) + "\n")
    return 0 if all(r["correct"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
