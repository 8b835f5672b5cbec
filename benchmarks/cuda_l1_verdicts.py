"""Issue 24's CUDA-L1 figure: how many of CUDA-L1's 210 released H100 kernels (optimized_cuda_code/h100.json, the
rows with a kernel; `scripts/carry_kernelbench.sh` puts the file in .kb/) get a runtime verdict from `cuda-agent
bench --policy relaxed`, each on the reference it was written for. The goal is >= 95%.

    python benchmarks/cuda_l1_verdicts.py --cuda-l1 .kb/cuda_l1/h100.json --out runs/cuda_l1 --per-gpu 3 \
        --max-seconds 420 [--summary benchmarks/cuda_l1_h100/summary.json]
    python benchmarks/cuda_l1_verdicts.py --out runs/cuda_l1 --report   # the table of the rows there are

A row's verdict is one of:
- `runtime`: the solution ran, and was judged correct, wrong, or refused for what it did;
- `static`: refused before it ran;
- `build`: it did not compile;
- `no verdict`: the harness or the task's reference failed, not the solution.

The bench resumes: run it again, or on a fresh machine first put the committed
`benchmarks/cuda_l1_h100/results.jsonl` in `OUT/bench/` (device_check.sh's `cudal1` step does). Prints a table last.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "benchmarks"))

GOAL = 0.95


def verdict_of(row: dict) -> str:
    """The kind of verdict one results.jsonl row carries (see the module's docstring)."""
    if row.get("fault") in ("harness", "reference"):
        return "no verdict"
    if row.get("stage") == "static":
        return "static"
    if row.get("stage") == "build":
        return "build"
    return "runtime"


def summarize(rows: list[dict], expected: int) -> dict:
    """Counts by verdict and outcome, and the runtime-verdict rate over `expected` solutions (the rows not yet
    judged count as without one)."""
    kinds = Counter(verdict_of(r) for r in rows)
    runtime = [r for r in rows if verdict_of(r) == "runtime"]
    outcomes = Counter("correct" if r.get("correct") else f"failed at {r.get('stage')}" for r in runtime)
    return {"solutions": expected, "judged": len(rows), "verdicts": dict(kinds), "runtime_outcomes": dict(outcomes),
            "runtime_verdict": kinds.get("runtime", 0),
            "runtime_verdict_rate": round(kinds.get("runtime", 0) / expected, 4) if expected else None,
            "goal": GOAL, "met": bool(expected) and kinds.get("runtime", 0) / expected >= GOAL,
            "rewards": dict(Counter(str(r.get("reward")) for r in rows))}


def table(summary: dict, rows: list[dict]) -> str:
    lines = [f"CUDA-L1 H100 kernels through `cuda-agent bench --policy relaxed`: {summary['judged']} of "
             f"{summary['solutions']} judged", "", "| verdict | rows |", "|---|--:|"]
    lines += [f"| {k} | {v} |" for k, v in sorted(summary["verdicts"].items())]
    lines += ["", "| runtime outcome | rows |", "|---|--:|"]
    lines += [f"| {k} | {v} |" for k, v in sorted(summary["runtime_outcomes"].items())]
    refused = [r for r in rows if verdict_of(r) != "runtime"]
    if refused:
        lines += ["", "| task | verdict | reason |", "|---|---|---|"]
        lines += [f"| {r.get('task')} | {verdict_of(r)} | {' '.join(str(r.get('reason', '')).split())[:160]} |"
                  for r in refused]
    rate = summary["runtime_verdict_rate"]
    lines += ["", f"runtime verdicts: {summary['runtime_verdict']} of {summary['solutions']} "
                  f"({100 * rate:.1f}%; goal {100 * GOAL:.0f}%)" if rate is not None else "no solutions"]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cuda-l1", type=Path, default=REPO / ".kb" / "cuda_l1" / "h100.json")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--per-gpu", type=int, default=3, help="evaluators sharing each GPU (cuda-agent bench --per-gpu)")
    ap.add_argument("--max-seconds", type=float, default=None, help="start no solution after this long (resumes)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--report", action="store_true", help="judge nothing: the table of the rows there are")
    ap.add_argument("--summary", type=Path, default=None, help="write the summary JSON here too")
    args = ap.parse_args()
    from bench_scale import cuda_l1_set

    from cuda_agent.journal import read_rows

    tasks, solutions = cuda_l1_set(args.cuda_l1, 10**6, [1, 2, 3], args.out)
    expected = sum(1 for line in tasks.read_text().splitlines() if line.strip())
    bench_out = args.out / "bench"
    if not args.report:
        cmd = [sys.executable, "-m", "cuda_agent", "bench", "--tasks", str(tasks), "--solutions", str(solutions),
               "--out", str(bench_out), "--device", args.device, "--policy", "relaxed", "--quiet", "--no-roofline"]
        if args.device == "cuda":
            cmd += ["--per-gpu", str(args.per_gpu)]
        if args.max_seconds is not None:
            cmd += ["--max-seconds", str(args.max_seconds)]
        print(" ".join(cmd[2:]), flush=True)
        run = subprocess.run(cmd, cwd=REPO)
        if run.returncode != 0:
            print(f"cuda-agent bench exited {run.returncode}; the rows so far are kept", flush=True)
    results = bench_out / "results.jsonl"
    rows = list({r["task"]: r for r in read_rows(results)}.values()) if results.exists() else []
    summary = summarize(rows, expected)
    text = table(summary, rows)
    (args.out / "verdicts.md").write_text(text + "\n")
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    if args.summary:
        args.summary.parent.mkdir(parents=True, exist_ok=True)
        args.summary.write_text(json.dumps(summary, indent=1) + "\n")
    if summary["judged"] < expected:
        print(f"not finished: {expected - summary['judged']} solutions left (run again to go on)")
    print(text)


if __name__ == "__main__":
    main()
