"""Issue 24's proof file, made from the raw results committed beside it (never typed by hand):
`benchmarks/reward_fidelity/summary.json`. What has not been measured yet is null and listed
under `missing`, so the file says how far the proof is.

    python benchmarks/reward_fidelity.py [--out benchmarks/reward_fidelity/summary.json]

Sources: the demo's spreads from `paired_bench.py --json` runs (`PAIRED`: idle and with 8 busy CPU
processes, per machine; the figure is the worst run of each kind, as the issue asks), the
KernelBench agreement rows (`benchmarks/kb_agreement_h100/results.jsonl`).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
PAIRED = [HERE / "device_2026-11-27" / f for f in ("h100_paired_idle.json", "h200_paired_idle.json",
                                                    "h200_paired_busy8.json")]
AGREEMENT = HERE / "kb_agreement_h100" / "results.jsonl"


def spread(values: list[float]) -> float:
    return round((max(values) / min(values) - 1) * 100, 2)


def demo(paths: list[Path]) -> dict:
    """Per run: the spread over its evaluations of the paired speed-ups (max / min - 1, %)."""
    runs = []
    for p in paths:
        d = json.loads(p.read_text())
        rows = d["rows"]
        runs.append({"file": p.name, "device": d["machine"]["device"], "busy": d["busy"], "evaluations": len(rows),
                     "vs_eager_spread_pct": spread([r["vs_eager"] for r in rows]),
                     "vs_compile_spread_pct": spread([r["vs_compile"] for r in rows]),
                     "rewards": sorted({r["reward"] for r in rows})})
    worst = lambda busy: max((r["vs_eager_spread_pct"] for r in runs if (r["busy"] > 0) == busy), default=None)  # noqa: E731
    return {"idle_spread_pct": worst(False), "busy_spread_pct": worst(True), "cross_machine_pct": None,
            "evals_per_hour": None, "runs": runs}


def agreement(path: Path) -> dict:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    return {"rows": len(rows), "agree": None, "hack_caught": None, "disagree_explained": None,
            "disagree_unexplained": None, "speedup_rows": None, "speedup_within_10pct": None}


def summary() -> dict:
    s = {"device": "NVIDIA H100 80GB HBM3 (and NVIDIA H200 where a run names it)", "date": "2026-11-27",
         "demo": demo([p for p in PAIRED if p.exists()]),
         "level3": {"tasks": None, "within_3pct": None},
         "kb_agreement": agreement(AGREEMENT),
         "cuda_l1": {"solutions": 210, "runtime_verdict": None, "false_rejections": None}}
    s["missing"] = [f"{k}.{f}" for k, v in s.items() if isinstance(v, dict)
                    for f, x in v.items() if x is None]
    s["goals"] = {"demo spread <= 1% idle and busy": bool(s["demo"]["idle_spread_pct"] is not None
                                                          and s["demo"]["idle_spread_pct"] <= 1
                                                          and (s["demo"]["busy_spread_pct"] or 99) <= 1)}
    return s


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=HERE / "reward_fidelity" / "summary.json")
    a = ap.parse_args()
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(summary(), indent=1) + "\n")
    print(a.out.read_text())


if __name__ == "__main__":
    main()
