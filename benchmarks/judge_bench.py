"""The judge's cost and steadiness on the demo task, called directly (no service): evaluations in a
row of the bundled demo solution with cached baselines (the next evaluation's processes started
ahead, as in the service; --cold: not), each one's wall time, speed-up over eager,
and what the harness's own clock saw (timing.watch). Run it against two checkouts in one call to
compare them on the same machine:

    PYTHONPATH=old/src python3 benchmarks/judge_bench.py --device cuda --evals 8 --json old.json
    PYTHONPATH=src     python3 benchmarks/judge_bench.py --device cuda --evals 8 --json new.json
Prints a table last; --json keeps every figure.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HACKS = REPO / "tests" / "hacks"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--evals", type=int, default=8)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--cold", action="store_true", help="no spare processes started ahead (each evaluation starts its own)")
    args = ap.parse_args()

    import cuda_agent
    from cuda_agent.harness import EvalConfig, evaluate
    from cuda_agent.tasks import load_task

    if args.device == "cuda":
        task, solution = load_task("scale_bias_relu"), REPO / "benchmarks" / "solutions" / "scale_bias_relu_cuda"
    else:
        task, solution = load_task(HACKS / "tasks" / "sbr_small.py"), HACKS / "cpu" / "honest_fused"
    from contextlib import nullcontext

    from cuda_agent.harness.workers.spares import keep_warm

    config = EvalConfig(device=args.device)
    rows = []
    warm = nullcontext() if args.cold else keep_warm(1)  # as the service does: the next pair starts ahead
    warm.__enter__()
    first = evaluate(task, solution, config)  # baselines timed and cached, the build cached
    rows.append({"i": 0, **_row(first, None)})
    for i in range(1, args.evals + 1):
        t0 = time.monotonic()
        r = evaluate(task, solution, config)
        rows.append({"i": i, **_row(r, time.monotonic() - t0)})
    warm.__exit__(None, None, None)
    timed = [r for r in rows[1:] if r["speedup_vs_eager"]]
    walls = [r["wall_s"] for r in rows[1:]]
    sp = [r["speedup_vs_eager"] for r in timed]
    summary = {"code": str(Path(cuda_agent.__file__).parent), "evals": args.evals,
               "evals_per_hour": round(3600 / statistics.mean(walls), 1),
               "wall_s_median": round(statistics.median(walls), 3),
               "speedup_vs_eager_spread_pct": round(100 * (max(sp) - min(sp)) / statistics.median(sp), 2) if sp else None,
               "rewards": [r["reward"] for r in rows]}
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "rows": rows}, indent=1))
    print(f"{'i':>3} {'reward':>6} {'wall s':>7} {'sol ms':>8} {'x eager':>8} {'x comp':>7} {'seen ms':>8} {'tol ms':>7} flags")
    for r in rows:
        w = r.get("watch") or {}
        print(f"{r['i']:>3} {r['reward']:>6} {r['wall_s'] or 0:>7.3f} {r['solution_ms'] or 0:>8.4f} "
              f"{r['speedup_vs_eager'] or 0:>8.3f} {r['speedup_vs_compile'] or 0:>7.3f} "
              f"{w.get('seen_ms', float('nan')):>8.4f} {w.get('tolerance_ms', float('nan')):>7.4f} {','.join(r['flags'])}")
    print(json.dumps(summary))


def _row(r, wall: float | None) -> dict:
    return {"reward": r.reward, "stage": r.stage, "reason": r.reason[:300], "wall_s": wall,
            "solution_ms": r.solution.median_ms if r.solution else None,
            "speedup_vs_eager": r.speedup_vs_eager, "speedup_vs_compile": r.speedup_vs_compile,
            "watch": r.details.get("watch"), "flags": r.flags, "stage_seconds": r.stage_seconds,
            "steps_s": r.details.get("steps_s")}


if __name__ == "__main__":
    main()
