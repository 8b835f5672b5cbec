"""`cuda-agent bench` over KernelBench levels 1-3 on 1 and on N GPUs (issue 27, item 3): the same tasks and
solutions, one bench run per GPU count (each its own --out, from scratch), the wall time against one GPU
and the verdicts side by side.

    python benchmarks/bench_scale.py --cuda-l1 .kb/cuda_l1/h100.json --per-level 8 --gpus 1 2 \
        --out runs/bench_scale --summary benchmarks/scale/summary.json
    python benchmarks/bench_scale.py --tasks T.jsonl --solutions DIR --device cpu --gpus 1 2 --out /tmp/bs

With --cuda-l1 (CUDA-L1's released kernels, `scripts/carry_kernelbench.sh` puts them in .kb/), the first
--per-level rows with a kernel of each level are the set, each on the reference it was written for: their
tasks go to OUT/tasks.jsonl and their solutions to OUT/solutions/. A GPU count whose run ended is not run
again (OUT/gN/wall.json); one cut short starts over, so every wall time is one whole run, and each starts
from an empty cuda-agent home of its own (no build, baseline or compile cache that an earlier count filled:
on the CPU the first of two runs took 100 s and the second 27 s on one shared home). A verdict that
differs between counts is listed with both speed-ups: timing can move a reward across a milestone (5%
over eager or torch.compile), a correctness verdict should never move. Prints a table last.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "benchmarks"))

from scale_bench import merge_summary  # noqa: E402  (summary.json is the scale benchmark's)


def cuda_l1_set(path: Path, per_level: int, levels: list[int], out: Path) -> tuple[Path, Path]:
    """OUT/tasks.jsonl and OUT/solutions/NAME.py from CUDA-L1's rows: the first `per_level` with a kernel of
    each level, in the file's order."""
    tasks, solutions = out / "tasks.jsonl", out / "solutions"
    solutions.mkdir(parents=True, exist_ok=True)
    rows, taken = [], {}
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        r = json.loads(line)
        level, pid = int(r["level_id"]), int(r["task_id"])
        if r.get("custom_code") in (None, "", "None") or level not in levels or taken.get(level, 0) >= per_level:
            continue
        taken[level] = taken.get(level, 0) + 1
        name = f"L{level}_{pid}"
        rows.append({"name": name, "code": r["ref_code"], "level": level, "problem_id": pid})
        (solutions / f"{name}.py").write_text(r["custom_code"])
    if not rows:
        raise SystemExit(f"{path}: no row with a kernel at levels {levels}")
    tasks.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tasks, solutions


def bench(tasks: Path, solutions: Path, gpus: int, out: Path, device: str, policy: str) -> dict:
    """One whole `cuda-agent bench` run with at most `gpus` GPUs: its wall time and its rows by task."""
    done = out / "wall.json"
    if not done.exists():
        cmd = [sys.executable, "-m", "cuda_agent", "bench", "--tasks", str(tasks), "--solutions", str(solutions),
               "--out", str(out), "--gpus", str(gpus), "--device", device, "--policy", policy, "--quiet", "--restart"]
        home = Path(tempfile.gettempdir()) / f"cuda_agent_bench_scale_g{gpus}"  # where sandbox users reach it
        shutil.rmtree(home, ignore_errors=True)
        home.mkdir(parents=True)
        print(f"bench on {gpus} GPU(s), home {home}: {' '.join(cmd[2:])}", flush=True)
        t0 = time.perf_counter()
        run = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env={**os.environ, "CUDA_AGENT_HOME": str(home)})
        wall = time.perf_counter() - t0
        (out / "bench.log").write_text(run.stdout + run.stderr)
        if run.returncode != 0:
            raise SystemExit(f"bench on {gpus} GPU(s) failed ({run.returncode}); {out / 'bench.log'}:\n"
                             + "\n".join((run.stdout + run.stderr).splitlines()[-15:]))
        done.write_text(json.dumps({"gpus": gpus, "wall_s": round(wall, 1)}) + "\n")
    wall = json.loads(done.read_text())["wall_s"]
    from cuda_agent.journal import read_rows

    rows = {r["task"]: r for r in read_rows(out / "results.jsonl")}
    print(f"bench on {gpus} GPU(s): {len(rows)} tasks in {wall:.1f} s", flush=True)
    return {"wall_s": wall, "rows": rows}


def compare(runs: dict[int, dict]) -> dict:
    """The verdicts of every GPU count side by side: the same (reward and correctness), or how they differ."""
    counts = sorted(runs)
    tasks = sorted(set().union(*(runs[n]["rows"] for n in counts)))
    differ = []
    for task in tasks:
        got = {n: runs[n]["rows"].get(task) for n in counts}
        seen = {(r["reward"], r["correct"]) if r else None for r in got.values()}
        if len(seen) > 1:
            differ.append({"task": task, **{str(n): ({"reward": r["reward"], "correct": r["correct"], "stage": r["stage"],
                                                       "vs_eager": r.get("speedup_vs_eager"),
                                                       "vs_compile": r.get("speedup_vs_compile")} if r else None)
                                            for n, r in got.items()},
                           "correctness_moved": len({r["correct"] if r else None for r in got.values()}) > 1})
    return {"tasks": len(tasks), "same": len(tasks) - len(differ), "differ": differ}


def table(runs: dict[int, dict], verdicts: dict) -> str:
    one = runs[min(runs)]["wall_s"]
    lines = ["| GPUs | tasks | wall s | vs the fewest GPUs | rewards |", "|--:|--:|--:|--:|---|"]
    for n in sorted(runs):
        rewards: dict[float, int] = {}
        for r in runs[n]["rows"].values():
            rewards[r["reward"]] = rewards.get(r["reward"], 0) + 1
        lines.append(f"| {n} | {len(runs[n]['rows'])} | {runs[n]['wall_s']} | {one / runs[n]['wall_s']:.2f}x | "
                     + ", ".join(f"{k:g}: {v}" for k, v in sorted(rewards.items())) + " |")
    lines.append(f"\nverdicts the same on every count: {verdicts['same']} of {verdicts['tasks']}")
    for d in verdicts["differ"]:
        lines.append(f"- {d['task']}: " + "; ".join(f"{n} GPU(s) {v}" for n, v in d.items()
                                                  if n not in ("task", "correctness_moved"))
                     + (" (correctness moved)" if d["correctness_moved"] else ""))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--cuda-l1", type=Path, help="CUDA-L1's released kernels (optimized_cuda_code/h100.json)")
    src.add_argument("--tasks", type=Path, help="a task source `cuda-agent bench --tasks` reads (with --solutions)")
    ap.add_argument("--solutions", type=Path, default=None, help="with --tasks: their solutions")
    ap.add_argument("--per-level", type=int, default=8, help="with --cuda-l1: rows of each level")
    ap.add_argument("--levels", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--gpus", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--policy", default="relaxed", help="strict or relaxed (KernelBench's rules: CUDA-L1's kernels)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--summary", type=Path, default=None, help="summary.json to merge bench_wall_s into")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.cuda_l1:
        tasks, solutions = cuda_l1_set(args.cuda_l1, args.per_level, args.levels, args.out)
    elif args.solutions is None:
        raise SystemExit("--tasks needs --solutions DIR (one solution per task, as `cuda-agent bench` reads them)")
    else:
        tasks, solutions = args.tasks.resolve(), args.solutions.resolve()
    runs = {n: bench(tasks, solutions, n, (args.out / f"g{n}").resolve(), args.device, args.policy)
            for n in sorted(set(args.gpus))}
    verdicts = compare(runs)
    result = {"bench_wall_s": {str(n): r["wall_s"] for n, r in runs.items()},
              "bench_verdicts": {"tasks": verdicts["tasks"], "same": verdicts["same"],
                                 "correctness_moved": sum(d["correctness_moved"] for d in verdicts["differ"])}}
    (args.out / "compare.json").write_text(json.dumps({**result, "differ": verdicts["differ"]}, indent=1) + "\n")
    if args.summary:
        merge_summary(args.summary, result)
    print(table(runs, verdicts))
    return result


if __name__ == "__main__":
    main()
