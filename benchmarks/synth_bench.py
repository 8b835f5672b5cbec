"""Synth throughput: accepted tasks per device-hour with the program composer, where the time goes
(composition, child start, eager run, eager timing, compile, compile timing), and the projection for
the paper's 6,000 tasks.

    python benchmarks/synth_bench.py --count 300 --out benchmarks/synth_h100/ops.parquet   # on the H100
    python benchmarks/synth_bench.py --count 1000 --workers 10 --out benchmarks/synth_mix_h100/ops.parquet
    python benchmarks/synth_bench.py --device cpu --count 4 --hf-families llama,bert        # a smoke run

The run is an ordinary `synth` run (resumable); this script adds the table and writes the summary
(markdown + plots) beside the dataset, with date, device and versions.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

from cuda_agent.synth.filters import Window
from cuda_agent.synth.mix import Mix
from cuda_agent.synth.pipeline import synthesize
from cuda_agent.synth.report import time_breakdown, write_report
from cuda_agent.synth.run import SynthConfig

PAPER_TASKS = 6000
KERNELBENCH = Path(__file__).resolve().parents[2] / "shared" / "kernelbench" / "kernelbench.jsonl"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("benchmarks/synth_run/ops.parquet"))
    ap.add_argument("--count", type=int, default=300)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--window", default=None, help="LOW,HIGH ms (default: 1,100 cuda; 0.05,50 cpu)")
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--kernelbench", type=Path, default=KERNELBENCH)
    ap.add_argument("--mix", default="kernelbench", help="kernelbench, free, or CLASS=SHARE,...")
    ap.add_argument("--hf-families", default=None, help="transformers model types (comma-separated; default all)")
    args = ap.parse_args()

    import torch

    config = SynthConfig(out=args.out, count=args.count, device=args.device,
                         window=Window.parse(args.window) if args.window else None,
                         kernelbench=args.kernelbench if args.kernelbench.exists() else None,
                         workers=args.workers, mix=Mix.parse(args.mix),
                         hf_families=tuple(args.hf_families.split(",")) if args.hf_families else None)
    start = time.time()
    rows, files, run = synthesize(config, on_record=lambda r: print(
        f"{r['index']:6d} {r['filter']:13s} {r.get('eager_ms') or 0:8.2f} ms  {r.get('reason', '')[:70]}", flush=True))
    wall = time.time() - start
    records = sorted(run.journal.records.values(), key=lambda r: r["index"])
    this_run = [r for r in records if "seconds" in r]
    workers = len({r.get("worker") for r in this_run}) or 1
    gpus = (torch.cuda.device_count() or 1) if args.device == "cuda" else 1
    busy = sum(r["seconds"].get("total", 0.0) for r in this_run)  # worker-seconds, summed over workers
    accepted_now = sum(r["filter"] == "accepted" for r in this_run)
    per_hour = accepted_now / (wall / 3600) / gpus if wall else float("nan")  # per device, all its workers
    device = torch.cuda.get_device_name(0) if args.device == "cuda" else platform.processor() or "cpu"
    title = f"synth benchmark: {len(rows)} tasks, program composer, {device}"
    report = write_report(records, rows, config.state_dir / "summary.md", title=title, wall_s=wall,
                          kernelbench=config.kernelbench, target=config.mix.normalized if config.mix else None,
                          device=device)
    tb = time_breakdown(this_run)
    total = sum(tb.values()) or 1.0
    lines = ["", f"date {time.strftime('%Y-%m-%d')}, device {device} x{gpus}, {workers} workers, "
                 f"torch {torch.__version__}, python {platform.python_version()}",
             f"accepted {accepted_now} in this run ({len(rows)} in the dataset) of {len(records)} candidates; "
             f"wall {wall:.0f} s; busy {busy:.0f} worker-s", "",
             "| measure | value |", "|---|---:|",
             f"| accepted per device-hour ({workers} workers sharing {gpus} device(s)) | {per_hour:.0f} |",
             f"| device-hours for {PAPER_TASKS} tasks | {PAPER_TASKS / per_hour:.2f} |",
             f"| wall hours for {PAPER_TASKS} tasks on {gpus} device(s) | {PAPER_TASKS / per_hour / gpus:.2f} |", "",
             "| stage | share of worker time |", "|---|---:|"]
    lines += [f"| {k} | {100 * v / total:.0f}% |" for k, v in tb.items()]
    text = "\n".join(lines) + "\n"
    print(text)
    with report.open("a") as f:
        f.write("\n## Benchmark\n" + text)
    (config.state_dir / "bench.json").write_text(json.dumps(
        {"device": device, "gpus": gpus, "workers": workers, "accepted": len(rows), "accepted_this_run": accepted_now,
         "candidates": len(records), "wall_s": wall, "busy_s": busy,
         "accepted_per_device_hour": per_hour, "stages_s": tb, "torch": torch.__version__}, indent=1))
    print(f"dataset {', '.join(map(str, files))}; summary {report}")


if __name__ == "__main__":
    main()
