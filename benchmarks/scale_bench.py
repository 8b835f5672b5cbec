"""The evaluation service across the GPUs of one host (issue 27): throughput on the demo task with 1
and with N GPUs in one run, then the soak on all N (1,000 requests, every tenth faulty, one GPU's
evaluator killed half-way: one verdict per request, each fault with its reason, nothing lost).

    python benchmarks/scale_bench.py --gpus 1 4 --soak 1000 --summary benchmarks/scale/summary.json
    python benchmarks/scale_bench.py --device cpu --gpus 1 2 --evals-per-gpu 4 --soak 20   # the plumbing

Each N gets a service of its own (`ServiceSettings.gpus`; on the CPU, N evaluators stand in for N
GPUs) and `--evals-per-gpu` x N evaluations of the demo solution submitted at once, its build and
baselines cached first. The figures merge into `--summary` (other steps of issue 27, such as
`bench_wall_s` and `rl_step_s`, keep theirs); `--json` keeps every figure. Both files are written
after each count and again after the soak, so a run cut short keeps what it measured. Prints a
table last.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / "src"))

from service_bench import soak, throughput  # noqa: E402  (the one-device benchmark's measurements)

GOALS = {"evals_per_hour_per_gpu": 2500, "scaling": 0.9}
# summary.json's fields that this script writes: each run replaces them as a whole (a count or a soak
# of an earlier run never stands beside this run's date and device); the other steps' fields stay
OWN_FIELDS = ("device", "date", "gpus", "evals_per_hour", "steady_evals_per_hour", "scaling", "soak", "cut_short",
              "config")


def settings_for(device: str, gpus: int, per_device: int):
    from cuda_agent.service import ServiceSettings

    return ServiceSettings(device=device, gpus=gpus, evaluators_per_device=per_device,
                           cpu_evaluators=gpus * per_device)


def device_name(device: str, gpus: int) -> str:
    if device != "cuda":
        return f"cpu ({gpus} evaluators as GPUs)"
    import torch

    return f"{gpus}x {torch.cuda.get_device_name(0)}"


def measure(device: str, counts: list[int], per_device: int, evals_per_gpu: int, soak_n: int,
            soak_timed: bool = True, save: Callable[[dict], None] = lambda out: None,
            soak_journal: Path | None = None, count_seconds: float | None = None, config: list[str] = ()) -> dict:
    """Throughput per GPU count, then the soak on the largest (`soak_timed=False`: its evaluations check
    correctness only; the faults and the killed evaluator are the same; `soak_journal`: a line per request as it
    ends). `save(out)` after each count and after the soak: a run killed later keeps what it measured.
    `count_seconds`: a count's evaluations not ended that long after their submission are abandoned, its figure
    the ended ones' (flagged `cut_short`; a 2x H200 run cut by its call's limit at 90 of 96 kept nothing, 2026-11-28).
    `config`: `FIELD=VALUE` EvalConfig overrides for the counts' evaluations (an A/B: recorded in the output)."""
    from cuda_agent.harness import EvalConfig
    from cuda_agent.service import EvalService
    from service_bench import demo

    from overrides import eval_config

    out: dict = {"throughput": {}, "config": list(config)}
    for n in counts:
        t0 = time.perf_counter()
        svc = EvalService(settings_for(device, n, per_device)).start()
        row = {"cut_short": True}
        try:
            start_s = time.perf_counter() - t0
            row = throughput(svc, device, evals_per_gpu * n, max_seconds=count_seconds,
                             config=eval_config(device, list(config)))
            row.update(evaluators=svc.evaluators, service_start_s=start_s, alone_share=alone_share(row, n))
            out["throughput"][str(n)] = row
            report(n, row)
            save(out)   # before the service closes: a close cut by the call's limit keeps the figure (2026-11-29)
        finally:  # the evaluations of a cut count (or of one that failed) abandoned, not waited for
            t1 = time.perf_counter()
            svc.close(wait=not row["cut_short"])
            print(f"  the service closed in {time.perf_counter() - t1:.1f} s", flush=True)
    if soak_n:
        n = max(counts)
        task, sol = demo(device)
        t0 = time.perf_counter()
        with EvalService(settings_for(device, n, per_device)) as svc:
            first = svc.evaluate(task, sol, EvalConfig(device=device, profile=soak_timed))  # built, baselines cached
            print(f"soak on {n} GPU(s): service and first evaluation (reward {first.reward}) in "
                  f"{time.perf_counter() - t0:.1f} s", flush=True)
            clean_s = out["throughput"][str(n)]["eval_s"] if soak_timed else None  # no untimed clean run to set beside it
            out["soak"] = soak(svc, device, soak_n, clean_s, profile=soak_timed, journal=soak_journal)
            out["soak"].update(gpus=n, timed=soak_timed)
            print("soak", json.dumps({k: v for k, v in out["soak"].items() if k != "stats"})[:800], flush=True)
            save(out)   # before the service closes, as a count's
    return out


def report(n: int, row: dict) -> None:
    """One count's figures, printed as it ends (before its service closes)."""
    stages = " ".join(f"{k} {v:.2f}" for k, v in row["stage_s"].items() if "." not in k)
    steady = row.get("steady_evals_per_hour")
    cut = f" (cut short: {row['done']} of {row['submitted']} ended)" if row["cut_short"] else ""
    print(f"{n} GPU(s){cut}: {row['evals_per_hour']:.0f} evaluations/h over {row['evaluators']} evaluators "
          f"({f'{steady:.0f}/h' if steady else 'n/a'} after the first fifth), "
          f"rewards {row['reward_counts']}; mean s a stage: {stages}", flush=True)
    print(f"  the device held alone for timing: {100 * row['alone_share']:.0f}% of each GPU's time once running "
          "(near 100%: the timing bounds the rate; well below: the waits between timings do)", flush=True)
    parts = " ".join(f"{k.split('.', 1)[1]} {v:.2f}" for k, v in row["stage_s"].items() if k.startswith("timing."))
    if parts:  # where the device's time alone goes: what bounds a GPU's evaluations per hour
        print(f"  timing's parts, mean s: {parts}", flush=True)
    for side in ("vs_eager", "vs_compile"):  # one task, one solution: every verdict should read the same
        if row[side]:
            print(f"  {side}: {min(row[side]):.3f}-{max(row[side]):.3f}x "
                  f"(max/min - 1 = {100 * (max(row[side]) / min(row[side]) - 1):.2f}%)", flush=True)
    print(f"  reference compiles in a worker new to the task: {row['compiled']} of {len(row['medians_ms'])}; "
          f"the longest compile stages (s): {row['compile_s_top']}", flush=True)
    if row.get("compile_laps_top"):
        print(f"  their laps in the reference worker (s): {row['compile_laps_top']}", flush=True)
    for failure in row["failures"]:
        print(f"  failed: {failure}", flush=True)


def alone_share(row: dict, gpus: int) -> float:
    """The share of each GPU's time that evaluations held it alone to time, once running: the mean timing stage
    times the rate after the first fifth (else the whole run's), per GPU. Near 1, the timing bounds the rate (only a
    shorter timing raises it); well below, the waits between timings do (more evaluators a GPU, fewer lock takes)."""
    rate = row.get("steady_evals_per_hour") or row["evals_per_hour"]
    return round(row["stage_s"].get("timing", 0.0) * rate / 3600 / gpus, 3)


def summarize(out: dict, device: str, old: dict | None = None) -> dict:
    """summary.json's fields from a run, so far (merged into `old`: the other steps' figures stay; this
    script's own, `OWN_FIELDS`, are this run's alone: no soak before this run's soak has ended)."""
    counts = sorted(int(n) for n in out["throughput"])
    per_hour = {str(n): round(out["throughput"][str(n)]["evals_per_hour"]) for n in counts}
    summary = {k: v for k, v in (old or {}).items() if k not in OWN_FIELDS}
    steady = {str(n): round(v) for n in counts if (v := out["throughput"][str(n)].get("steady_evals_per_hour"))}
    summary.update(device=device_name(device, max(counts)), date=time.strftime("%Y-%m-%d"), gpus=max(counts),
                   evals_per_hour=per_hour, steady_evals_per_hour=steady)
    cut = {str(n): f"{r['done']} of {r['submitted']}" for n in counts if (r := out["throughput"][str(n)]).get("cut_short")}
    if cut:   # a count whose run was cut: its figure is the ended evaluations' over the time waited
        summary["cut_short"] = cut
    if out.get("config"):   # not the judge's own settings: the figures are an A/B's, and say so
        summary["config"] = out["config"]
    if 1 in counts and len(counts) > 1:
        n = max(counts)
        summary["scaling"] = {"gpus": n, "ratio": round(per_hour[str(n)] / (n * per_hour["1"]), 3),
                              "goal": GOALS["scaling"]}
        if {"1", str(n)} & set(summary.get("cut_short", {})):
            summary["scaling"]["cut_short"] = True   # a rate of ended evaluations only: the work in flight not counted
    if "soak" in out:
        k = out["soak"]
        summary["soak"] = {"requests": k["requests"], "verdicts": k["verdicts"], "lost": k["requests"] - k["verdicts"],
                           "wrong": len(k["wrong"]), "killed_evaluator": k["killed_evaluator"], "gpus": k["gpus"],
                           "retried": k["retried"], "harness_errors": k["harness_errors"],
                           "timed": k.get("timed", True), "evals_per_hour": round(k["evals_per_hour"]) if "evals_per_hour" in k else None}
    return summary


def table(summary: dict) -> str:
    per_hour = summary["evals_per_hour"]
    steady = summary.get("steady_evals_per_hour") or {}
    lines = ["| GPUs | evaluations/h | per GPU | after the first fifth, per GPU | goal per GPU |", "|--:|--:|--:|--:|--:|"]
    for n, v in sorted(per_hour.items(), key=lambda kv: int(kv[0])):
        after = f"{steady[n] / int(n):.0f}" if n in steady else "n/a"
        cut = f" (cut short: {summary['cut_short'][n]})" if n in summary.get("cut_short", {}) else ""
        lines.append(f"| {n} | {v}{cut} | {v / int(n):.0f} | {after} | {GOALS['evals_per_hour_per_gpu']} |")
    if summary.get("config"):
        lines.append(f"\nEvalConfig overrides (an A/B, not the judge's own settings): {', '.join(summary['config'])}")
    if "scaling" in summary:
        s = summary["scaling"]
        cut = " (from a count cut short: the evaluations in flight at the cut not counted)" if s.get("cut_short") else ""
        lines.append(f"\n{s['gpus']} GPUs / (N x 1 GPU): **{s['ratio']:.2f}** (goal >= {s['goal']}){cut}")
    if "soak" in summary:
        k = summary["soak"]
        lines.append(f"soak on {k['gpus']}: {k['requests']} requests, {k['verdicts']} verdicts, {k['lost']} lost, "
                     f"{k['wrong']} wrong, evaluator killed {k['killed_evaluator']}, {k['retried']} retried"
                     f"{'' if k.get('timed', True) else ' (correctness only, not timed)'}")
    return "\n".join(lines)


def write_json(path: Path, data: dict) -> None:
    """`path` replaced whole (a run killed while writing leaves the previous file, never half of one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str) + "\n")
    tmp.replace(path)


def merge_summary(path: Path, fields: dict) -> None:
    """`fields` merged into the summary at `path` (issue 27's other figures: bench_scale.py's bench_wall_s,
    rl_step_time.py's rl_step_s), the rest of it kept, written whole."""
    write_json(path, {**(json.loads(path.read_text()) if path.exists() else {}), **fields})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None)
    ap.add_argument("--gpus", type=int, nargs="+", default=[1, 2], help="GPU counts to measure, each its own service")
    ap.add_argument("--per-device", type=int, default=1, help="evaluators sharing a GPU")
    ap.add_argument("--evals-per-gpu", type=int, default=60)
    ap.add_argument("--soak", type=int, default=0, help="soak requests on the largest count (0: no soak)")
    ap.add_argument("--soak-untimed", action="store_true", help="the soak's evaluations check correctness only")
    ap.add_argument("--summary", type=Path, default=None, help="summary.json to merge the figures into")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--config", action="append", default=[], metavar="FIELD=VALUE",
                    help="an EvalConfig field for the counts' evaluations, e.g. --config quiet_host=false (compiles "
                         "and builds beside timing); recorded in the summary")
    ap.add_argument("--count-seconds", type=float, default=None,
                    help="each count's wait after its submission: evaluations not ended by then are abandoned and its "
                         "figure is the ended ones' (cut_short). Per count: a run's limit must cover, for every count, "
                         "the service's start and first evaluation (about a minute on a fresh GPU) and these seconds, "
                         "then the soak")
    args = ap.parse_args()
    from cuda_agent.devices import default_device

    device = args.device or default_device()
    old = json.loads(args.summary.read_text()) if args.summary and args.summary.exists() else None

    def save(out: dict) -> None:  # every save merges into the summary as it was before this run
        if args.json:
            write_json(args.json, out)
        if args.summary:
            write_json(args.summary, summarize(out, device, old))

    out = measure(device, sorted(set(args.gpus)), args.per_device, args.evals_per_gpu, args.soak,
                  soak_timed=not args.soak_untimed, save=save,
                  soak_journal=args.json.with_suffix(".soak.jsonl") if args.json else None,
                  count_seconds=args.count_seconds, config=args.config)
    print(table(summarize(out, device, old)))


if __name__ == "__main__":
    main()
