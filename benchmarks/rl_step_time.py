"""RL's time per step on 1 and on N GPUs (issue 27, item 4), from the runs' own metrics: each PPO stage
folder's `metrics.jsonl` (rl/driver/metrics.py: one line per step, verl's `timing_s/step` among them).

    python benchmarks/rl_step_time.py 1=/tmp/rl/fill_ablation_g1/fill 2=/tmp/rl/fill_ablation_g2/fill \
        --summary benchmarks/scale/summary.json

The figure is the median of the steps after the first (the first pays the rollout engine's and the
kernels' warm-up); every step's time is kept beside it. A figure from fewer than FIRM_STEPS steps after
the first is not firm: one slow step sets a median of two (2x H200, 2026-11-28: one 56 s generation made
1 GPU's 25.2 s step read 49.9 s). `rl_step_s` and `rl_step_firm` merge into `--summary` (the scale
benchmark's other fields stay). Prints a table last.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "benchmarks"))

from scale_bench import merge_summary  # noqa: E402  (summary.json is the scale benchmark's)

STEP_KEY = "timing_s/step"
FIRM_STEPS = 3   # steps after the first: a median that one outlier cannot set
PARTS = ("timing_s/gen", "timing_s/old_log_prob", "timing_s/values", "timing_s/update_critic", "timing_s/update_actor")


def step_times(stage: Path) -> dict:
    """One run's step times: every step's, the median after the first, and the median of each part."""
    from cuda_agent.journal import read_rows

    path = stage / "metrics.jsonl"
    rows = [r for r in read_rows(path) if STEP_KEY in r]
    if not rows:
        raise SystemExit(f"{path}: no step with {STEP_KEY!r}: give a PPO stage folder whose run made at least one step")
    rows.sort(key=lambda r: r.get("step", 0))
    steps = [round(float(r[STEP_KEY]), 3) for r in rows]
    later = rows[1:] or rows  # one step only: that one, said so by `steps`
    parts = {k.split("/", 1)[1]: round(statistics.median(float(r[k]) for r in later), 3)
             for k in PARTS if all(k in r for r in later)}
    return {"stage": str(stage), "steps": steps, "step_s": round(statistics.median(steps[1:] or steps), 3),
            "firm": len(steps) - 1 >= FIRM_STEPS, "parts_s": parts}


def parse_run(text: str) -> tuple[str, Path]:
    gpus, sep, path = text.partition("=")
    if not sep or not gpus.isdigit() or int(gpus) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give GPUS=STAGE_FOLDER, e.g. 2=/tmp/rl/fill_ablation_g2/fill")
    return gpus, Path(path)


def table(runs: dict[str, dict]) -> str:
    lines = ["| GPUs | steps | s a step (median after the first) | firm | vs 1 GPU | every step (s) |",
             "|--:|--:|--:|---|--:|---|"]
    one = runs.get("1", {}).get("step_s")
    for gpus, r in sorted(runs.items(), key=lambda kv: int(kv[0])):
        ratio = f"{one / r['step_s']:.2f}x" if one and r["step_s"] else "n/a"
        firm = "yes" if r["firm"] else f"no (< {FIRM_STEPS} steps after the first)"
        lines.append(f"| {gpus} | {len(r['steps'])} | {r['step_s']} | {firm} | {ratio} | {', '.join(map(str, r['steps']))} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=parse_run, help="GPUS=STAGE_FOLDER, one per run")
    ap.add_argument("--summary", type=Path, default=None, help="summary.json to merge rl_step_s and rl_step_firm into")
    ap.add_argument("--json", type=Path, default=None, help="every run's step times")
    args = ap.parse_args()
    runs = {gpus: step_times(stage) for gpus, stage in args.runs}
    if args.json:
        args.json.write_text(json.dumps(runs, indent=1) + "\n")
    if args.summary:
        merge_summary(args.summary, {"rl_step_s": {gpus: r["step_s"] for gpus, r in runs.items()},
                                     "rl_step_firm": {gpus: r["firm"] for gpus, r in runs.items()}})
    print(table(runs))


if __name__ == "__main__":
    main()
