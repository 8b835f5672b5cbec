"""Per-step, per-operator pass of a fill PPO run (cuda_agent/rl/data/fill.py), read from what verl wrote:

    python3 benchmarks/rl/ops_by_step.py RUN/fill/validation --rft-ops affine clamp leaky_relu abs sigmoid silu
    python3 benchmarks/rl/ops_by_step.py RUN/fill/rollouts   --rft-ops ...
    python3 benchmarks/rl/ops_by_step.py RUN/fill/rewards.jsonl --per-step 64 --last 6 --rft-ops ...
    python3 benchmarks/rl/ops_by_step.py RUN/fill/validation --rft-ops ... --json steps.json

A folder holds verl's per-step files (N.jsonl: `validation/` the held-out prompts, greedy, step 0 being the
starting actor; `rollouts/` the training replies). Each row is judged by `true_score` where the reward
function recorded it (the harness's verdict, also when the run shuffles rewards) and by `score` else, so
use rollouts/ only for runs that do not shuffle. `rewards.jsonl` has one row per reply and no step: it is
cut into steps of `--per-step` rows (`--last N` keeps the last N steps, for a run resumed after a cut).
Files may be gzipped (N.jsonl.gz, as committed). `--json` also writes, per step, the figures of
summary.json: pass, compile (share whose reply parsed and built), reward_mean (of the true verdicts) and the
pass of RFT's operators, the held-back ones and the unseen ones."""
from __future__ import annotations

import argparse
import collections
import gzip
import json
from pathlib import Path


def op_names() -> dict[str, tuple[str, bool]]:
    """The user prompt's reference part -> (operator, whether the operator is trained on at all)."""
    from cuda_agent.rl.data import fill
    names = {}
    for split in ("train", "val"):
        for device in ("cpu", "cuda"):
            for item in fill.items(split, device):
                names[item.messages()[-1]["content"].split("CUDA kernel")[0].strip()] = (item.op.name, item.op.seen)
    return names


def folder_steps(folder: Path) -> list[tuple[int, list[dict]]]:
    """(step, rows) per N.jsonl (or N.jsonl.gz), each row {op, seen, passed, built, reward}."""
    names = op_names()
    steps = []
    paths = [*folder.glob("*.jsonl"), *folder.glob("*.jsonl.gz")]
    for path in sorted(paths, key=lambda p: int(p.name.split(".")[0])):
        rows = []
        with (gzip.open(path, "rt") if path.suffix == ".gz" else open(path)) as lines:
            for line in lines:
                row = json.loads(line)
                op, seen = names[row["input"].split("user\n", 1)[1].split("CUDA kernel")[0].strip()]
                reward = row.get("true_score", row["score"])
                rows.append({"op": op, "seen": seen, "passed": reward > 0, "reward": reward,
                             "built": row.get("stage") not in ("parse", "build")})
        steps.append((int(path.name.split(".")[0]), rows))
    return steps


def reward_steps(path: Path, per_step: int, last: int) -> list[tuple[int, list[dict]]]:
    rows = []
    for line in open(path):
        row = json.loads(line)
        rows.append({"op": row["task"].removeprefix("fill_").rsplit("_", 1)[0], "seen": True,
                     "passed": row.get("true_score", row["score"]) > 0})
    if last:
        rows = rows[-last * per_step:]
    return [(n + 1, rows[i:i + per_step]) for n, i in enumerate(range(0, len(rows) - per_step + 1, per_step))]


def groups(rows: list[dict], rft_ops: set[str]) -> tuple[list[dict], list[dict], list[dict]]:
    """RFT's operators (or, without --rft-ops, every trained one), the trained ones RFT held back, the unseen."""
    shown = [r for r in rows if r["op"] in rft_ops] if rft_ops else [r for r in rows if r["seen"]]
    held = [r for r in rows if r["seen"] and rft_ops and r["op"] not in rft_ops]
    return shown, held, [r for r in rows if not r["seen"]]


def figures(rows: list[dict], rft_ops: set[str]) -> dict:
    """One step's held-out figures, as summary.json names them (validation folders only: they carry verdicts)."""
    def rate(group: list[dict]) -> float | None:
        return round(sum(r["passed"] for r in group) / len(group), 4) if group else None
    shown, held, unseen = groups(rows, rft_ops)
    return {"prompts": len(rows), "pass": rate(rows), "compile": round(sum(r["built"] for r in rows) / len(rows), 4),
            "reward_mean": round(sum(r["reward"] for r in rows) / len(rows), 4),
            "rft_ops_pass": rate(shown), "held_back_ops_pass": rate(held), "unseen_ops_pass": rate(unseen)}


def line(step: int, rows: list[dict], rft_ops: set[str]) -> str:
    def share(group: list[dict]) -> str:
        return f"{sum(r['passed'] for r in group)}/{len(group)}"
    count: dict[str, list[dict]] = collections.defaultdict(list)
    for row in rows:
        count[row["op"]].append(row)
    shown, held, unseen = groups(rows, rft_ops)
    ops = " ".join(f"{op} {share(g)}" for op, g in sorted(count.items()) if op not in rft_ops)
    return (f"| {step} | {sum(r['passed'] for r in rows) / max(len(rows), 1):.3f} | {share(shown)} | "
            f"{share(held)} | {share(unseen)} | {ops} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("source", help="RUN/fill/validation, RUN/fill/rollouts or RUN/fill/rewards.jsonl")
    parser.add_argument("--per-step", type=int, default=64, help="rewards.jsonl: replies a step (batch x rollout.n)")
    parser.add_argument("--last", type=int, default=0, help="rewards.jsonl: keep only the last N steps' rows")
    parser.add_argument("--rft-ops", nargs="*", default=[], help="the operators RFT showed (fill.rft_ops)")
    parser.add_argument("--json", type=Path, help="a validation folder: write each step's figures here")
    args = parser.parse_args()
    source = Path(args.source)
    steps = folder_steps(source) if source.is_dir() else reward_steps(source, args.per_step, args.last)
    print("| step | pass | RFT's operators | held back from RFT | unseen operators | by operator |")
    print("|--:|--:|--:|--:|--:|---|")
    for step, rows in steps:
        print(line(step, rows, set(args.rft_ops)))
    if args.json:
        if not source.is_dir() or source.name != "validation":
            parser.error("--json reads a validation folder (its rows carry the verdicts summary.json reports)")
        args.json.write_text(json.dumps({str(step): figures(rows, set(args.rft_ops)) for step, rows in steps}, indent=1) + "\n")


if __name__ == "__main__":
    main()
