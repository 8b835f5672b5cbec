"""Synth throughput: accepted tasks per device-hour with the program composer, where the time goes
(the seed catalog, the service's start, the candidates; per stage of a candidate: composition,
child start, eager run, eager timing, compile, compile timing), what each filter rejected, the
out-of-memory retries, and the projection for the paper's 6,000 tasks.

    python benchmarks/synth_bench.py --count 1000 --workers 10 --max-seconds 440 \\
        --out benchmarks/synth_mix_h100/ops.parquet                                          # on the H100
    python benchmarks/synth_bench.py --device cpu --count 4 --hf-families llama,bert        # a smoke run

The run is an ordinary `synth` run (resumable: the same command goes on where it stopped). For a
device call with a time limit, `--max-seconds S` (counted from this script's start, the catalog
included) starts no candidate after S; those in flight get `--grace-seconds` to finish and are then
cancelled (no verdict, so a resume redoes them); the dataset, the summary and bench.json are
written all the same. `--seeds FILE` starts a new run from a saved catalog (a run's seeds.json)
when it was made with this device, torch, transformers and families; otherwise the catalog is
crawled again (about two minutes on the H100 machine) and saved as the run's seeds.json.

What it writes, in the run's state folder `<OUT stem>.synth/` beside the dataset: bench.json (the
figures below, compact), summary.md (+ plots), seeds.json (the catalog, to carry to the next
machine), candidates.jsonl (the journal a resume reads), config.json, crawl.log (the crawled
libraries' warnings). benchmarks/device_check.sh's synth step brings back these, not the workspaces.
"""

from __future__ import annotations

import time

T0 = time.time()  # before the heavy imports: a device call's limit counts them too

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
from collections import Counter  # noqa: E402
from pathlib import Path  # noqa: E402

from cuda_agent.synth.filters import Window  # noqa: E402
from cuda_agent.synth.mix import Mix  # noqa: E402
from cuda_agent.synth.pipeline import synthesize  # noqa: E402
from cuda_agent.synth.report import time_breakdown, write_report  # noqa: E402
from cuda_agent.synth.run import SynthConfig  # noqa: E402

PAPER_TASKS = 6000
KERNELBENCH = Path(__file__).resolve().parents[2] / "shared" / "kernelbench" / "kernelbench.jsonl"


def say(text: str) -> None:
    """A line of the log, stamped with the seconds since the script started."""
    print(f"[{time.time() - T0:6.0f} s] {text}", flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("benchmarks/synth_run/ops.parquet"))
    ap.add_argument("--count", type=int, default=300)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--window", default=None, help="LOW,HIGH ms (default: 1,100 cuda; 0.05,50 cpu)")
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--kernelbench", type=Path, default=KERNELBENCH)
    ap.add_argument("--mix", default="kernelbench", help="kernelbench, free, or CLASS=SHARE,...")
    ap.add_argument("--hf-families", default=None, help="transformers model types (comma-separated; default all)")
    ap.add_argument("--max-candidates", type=int, default=None)
    ap.add_argument("--seeds", type=Path, default=None, help="a saved catalog (a run's seeds.json) to start from")
    ap.add_argument("--max-seconds", type=float, default=None,
                    help="start no candidate this long after the script started (the catalog counted)")
    ap.add_argument("--grace-seconds", type=float, default=30.0,
                    help="then, how long candidates in flight may run on before they are cancelled")
    ap.add_argument("--quiet-timing", action="store_true",
                    help="on a GPU, the size search's timing waits for the other workers' runs")
    ap.add_argument("--retime", action="store_true",
                    help="a resume times its new candidates with this version's timing plan, not the run's own")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    import torch

    config = SynthConfig(out=args.out, count=args.count, device=args.device,
                         window=Window.parse(args.window) if args.window else None,
                         kernelbench=args.kernelbench if args.kernelbench.exists() else None,
                         workers=args.workers, mix=Mix.parse(args.mix), max_candidates=args.max_candidates,
                         hf_families=tuple(args.hf_families.split(",")) if args.hf_families else None,
                         seeds=args.seeds, grace_s=args.grace_seconds, quiet_timing=args.quiet_timing,
                         retime=args.retime,
                         max_seconds=args.max_seconds - (time.time() - T0) if args.max_seconds is not None else None)
    this_run: list[dict] = []  # the candidates this call decided (the journal has earlier runs' too)

    def on_record(r: dict) -> None:
        this_run.append(r)
        say(f"{r['index']:6d} {r['filter']:13s} {r.get('eager_ms') or 0:8.2f} ms  {r.get('reason', '')[:70]}")

    started = time.time()
    say(f"synth: {args.count} tasks on {args.device}, {args.workers or 1} workers per device")
    rows, files, run = synthesize(config, on_record=on_record, note=say)
    t = time.time()
    records = sorted(run.journal.records.values(), key=lambda r: r["index"])
    gpus = (torch.cuda.device_count() or 1) if args.device == "cuda" else 1
    device = torch.cuda.get_device_name(0) if args.device == "cuda" else platform.processor() or "cpu"
    report = write_report(records, rows, config.state_dir / "summary.md",
                          title=f"synth benchmark: {len(rows)} tasks, program composer, {device}",
                          kernelbench=config.kernelbench, target=config.mix.normalized if config.mix else None,
                          device=device, timing_plans=run.config.timing_plans())
    ph = run.phases
    phases = {"imports": started - T0, "catalog": ph.catalog_s, "service_start": ph.service_s,
              "candidates": ph.candidates_s, "service_close": ph.close_s, "dataset": ph.write_s,
              "report": time.time() - t}
    accepted_now = sum(r["filter"] == "accepted" for r in this_run)
    wall = time.time() - T0
    bench = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "device": device, "gpus": gpus,
             "workers_per_device": args.workers or 1, "quiet_timing": args.quiet_timing,
             "torch": torch.__version__, "transformers": _transformers(),
             "python": platform.python_version(), "count": args.count, "dataset_tasks": len(rows),
             "accepted_this_run": accepted_now, "candidates_this_run": len(this_run),
             "candidates_in_journal": len(records),
             "cancelled": len(run.cancelled), "stopped_at_limit": run.stopped_at_limit,
             "max_seconds": args.max_seconds, "wall_s": round(wall, 1),
             "phases_s": {k: round(v, 1) for k, v in phases.items()}, "catalog_from": ph.catalog_from,
             "first_candidate_s": round(ph.first_candidate_s + started - T0, 1) if ph.first_candidate_s else None,
             "accepted_per_device_hour": _per_hour(accepted_now, ph.candidates_s, gpus),
             "accepted_per_device_hour_whole_call": _per_hour(accepted_now, wall, gpus),
             "filters_this_run": dict(Counter(r["filter"] for r in this_run).most_common()),
             "worker_s": {k: round(v, 1) for k, v in time_breakdown(this_run).items()},
             # the GPUs held alone (timing, autotuning, retries), by request, and as a share of the candidates' wall
             "alone_s": _alone(this_run, ph.candidates_s, gpus),
             "out_of_memory": _oom(this_run), "gpu_memory": _memory(this_run)}
    text = markdown(bench)
    print(text, flush=True)
    with report.open("a") as f:
        f.write("\n## Benchmark\n" + text)
    (config.state_dir / "bench.json").write_text(json.dumps(bench, indent=1) + "\n")
    say(f"dataset {', '.join(map(str, files))}; summary {report}; bench {config.state_dir / 'bench.json'}")
    return bench


def _per_hour(n: int, seconds: float, gpus: int) -> float | None:
    return round(n / (seconds / 3600) / gpus, 1) if seconds > 0 else None


def _transformers() -> str | None:
    try:
        import transformers

        return transformers.__version__
    except ImportError:
        return None


def _oom(records: list[dict]) -> dict:
    """Out-of-memory errors: candidates that met one, retried alone, shrunk, and how they ended."""
    hit = [r for r in records if r.get("oom")]
    return {"candidates": len(hit), "retries": sum(r["oom"] for r in hit),
            "shrinks": sum(r.get("oom_shrinks", 0) for r in hit),
            "then_accepted": sum(r["filter"] == "accepted" for r in hit),
            "rejected_for_it": sum("out of memory" in r.get("reason", "").lower() for r in records)}


def _memory(records: list[dict]) -> dict:
    """The GPU memory a candidate's requests peaked at against the size search's estimate."""
    pairs = [(r["gpu_peak_mb"], r["memory_estimate_mb"]) for r in records
             if r.get("gpu_peak_mb") and r.get("memory_estimate_mb")]
    if not pairs:
        return {}
    ratios = sorted(p / e for p, e in pairs)
    peaks = sorted(p for p, _ in pairs)
    return {"candidates": len(pairs), "peak_mb_median": round(statistics.median(peaks), 1), "peak_mb_max": peaks[-1],
            "peak_over_estimate_median": round(statistics.median(ratios), 2),
            "peak_over_estimate_p90": round(ratios[int(0.9 * (len(ratios) - 1))], 2)}


def markdown(b: dict) -> str:
    rate = b["accepted_per_device_hour"]
    lines = ["", f"{b['date']}, {b['device']} x{b['gpus']}, {b['workers_per_device']} workers per device, "
                 f"torch {b['torch']}, transformers {b['transformers']}, python {b['python']}",
             f"accepted {b['accepted_this_run']} of {b['candidates_this_run']} candidates in this run "
             f"({b['dataset_tasks']} of {b['count']} tasks in the dataset, {b['candidates_in_journal']} candidates "
             f"in the journal); wall {b['wall_s']:.0f} s"
             + (f"; stopped at --max-seconds {b['max_seconds']:g}, {b['cancelled']} candidates cut short "
                "(the same command resumes)" if b["stopped_at_limit"] else ""), "",
             "| phase | wall s |", "|---|---:|"]
    lines += [f"| {k} | {v:.1f} |" for k, v in b["phases_s"].items()]
    lines += [f"| whole call (first candidate at {b['first_candidate_s']} s) | {b['wall_s']:.1f} |", "",
              "| measure | value |", "|---|---:|",
              f"| accepted per device-hour, candidates phase | {rate if rate is not None else '-'} |",
              f"| accepted per device-hour, whole call | {b['accepted_per_device_hour_whole_call']} |"]
    if rate:
        lines.append(f"| device-hours for {PAPER_TASKS} tasks at the candidates phase's rate | "
                     f"{PAPER_TASKS / rate:.2f} |")
    oom, mem = b["out_of_memory"], b["gpu_memory"]
    keys = ("candidates", "retries", "shrinks", "then_accepted", "rejected_for_it")
    lines += ["| out-of-memory: candidates / retries / shrinks / then accepted / rejected for it | "
              + " / ".join(str(oom[k]) for k in keys) + " |"]
    if mem:
        lines.append(f"| GPU peak / size-search estimate, median / p90 ({mem['candidates']} candidates) | "
                     f"{mem['peak_over_estimate_median']} / {mem['peak_over_estimate_p90']} |")
    lines += ["", "| filter (this run) | candidates |", "|---|---:|"]
    lines += [f"| {k} | {v} |" for k, v in b["filters_this_run"].items()]
    total = sum(b["worker_s"].values()) or 1.0
    lines += ["", "| stage | worker-s | share |", "|---|---:|---:|"]
    lines += [f"| {k} | {v:.0f} | {100 * v / total:.0f}% |" for k, v in b["worker_s"].items()]
    alone = b.get("alone_s") or {}
    if alone.get("by_request"):
        held = ", ".join(f"{k} {v:.0f} s" for k, v in alone["by_request"].items())
        lines += ["", f"GPU held alone: {held}; {alone['share_of_wall']:.0%} of the candidates' wall per GPU."]
    return "\n".join(lines) + "\n"


def _alone(records: list[dict], candidates_s: float, gpus: int) -> dict:
    """The seconds the workers held their GPU alone, by request (eager, checks, compile), and their sum over the
    candidates' wall time on each GPU: the part of it when no other worker could use the device."""
    by: Counter = Counter()
    for r in records:
        by.update(r.get("alone_s") or {})
    total = sum(by.values())
    wall = candidates_s * max(1, gpus)
    return {"by_request": {k: round(v, 1) for k, v in by.most_common()},
            "share_of_wall": round(total / wall, 3) if wall else 0.0}


if __name__ == "__main__":
    main()
