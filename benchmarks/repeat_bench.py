"""Run-to-run repeatability of baseline timings (issue 15, part 5): the eager and torch.compile
medians of N KernelBench tasks, timed with W processes sharing the device as bench_kernelbench's
baseline tables time them (the evaluation service's evaluators, each compiling its next task
while another times), the baseline cache off; `--compare` puts two runs side by side.

    python benchmarks/repeat_bench.py --level 3 --tasks 10 --workers 6 --json a.json
    python benchmarks/repeat_bench.py --level 3 --tasks 10 --workers 6 --json b.json --compare a.json
    python benchmarks/repeat_bench.py --compare a.json b.json         # only the table, no timing

Level 3's tasks are taken in the order of how far their eager medians moved between two H100
runs of 2026-11-24 (host-bound models: MobileNet, ViT, Swin, RNNs), other levels by problem id;
`--names` picks tasks by name. Each run compiles from an empty inductor cache of its own (unless
`--keep-inductor-cache`), so both runs of a pair compile as much beside their timing. `--loud`
times the old way, with compiles and builds running beside timing (EvalConfig.quiet_host=False).
Within 5%: max(run 1, run 2) / min(run 1, run 2) <= 1.05.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))
KERNELBENCH = [REPO / ".devdata" / "kernelbench.jsonl", REPO.parent / "shared" / "kernelbench" / "kernelbench.jsonl"]
WITHIN = 0.05
# Level-3 tasks by how far their eager median moved between the H100 runs of 2026-11-24 (timing
# methods 2 and 3, an hour apart; benchmarks/RESULTS.md, "Level 3 moves between runs"), most first.
MOVED_MOST = ["20_MobileNetV2", "29_SwinMLP", "28_VisionTransformer", "24_EfficientNetB2",
              "32_ConvolutionalVisionTransformer", "30_SwinTransformerV2", "34_VanillaRNNHidden",
              "22_EfficientNetB0", "16_DenseNet201", "38_LSTMBidirectional", "50_ReLUSelfAttention",
              "31_VisionAttention", "10_ResNet101", "7_GoogleNetInceptionV1"]


def pick(tasks: list, level: int, count: int, names: list[str] | None = None) -> list:
    """The tasks of `level` to time: `names` if given, else the first `count` (level 3: MOVED_MOST first)."""
    at_level = sorted((t for t in tasks if t.level == level), key=lambda t: (t.problem_id or 0, t.name))
    if names:
        by_name = {t.name: t for t in tasks}
        missing = [n for n in names if n not in by_name]
        if missing:
            raise SystemExit(f"--names: no task {', '.join(missing)} in the KernelBench file")
        return [by_name[n] for n in names]
    order = {name: i for i, name in enumerate(MOVED_MOST)} if level == 3 else {}
    at_level.sort(key=lambda t: order.get(t.name, len(order)))
    if not at_level:
        raise SystemExit(f"no task of level {level} in the KernelBench file")
    return at_level[:count]


def time_run(tasks: list, device: str, workers: int, plan, quiet: bool, max_seconds: float | None = None) -> list[dict]:
    """One run: eager and compile timings of `tasks` by `workers` processes sharing `device` (no
    task started after `max_seconds`)."""
    from cuda_agent.bench.baselines import baselines
    from cuda_agent.harness import EvalConfig
    from cuda_agent.journal import read_rows

    config = EvalConfig(device=device, timing=plan, use_baseline_cache=False, quiet_host=quiet)
    with tempfile.TemporaryDirectory(prefix="repeat_bench_") as tmp:
        out = Path(tmp) / "rows.jsonl"
        baselines(tasks, device, out, config=config, roofline=False, workers=workers, max_seconds=max_seconds,
                  on_row=lambda r: print(f"{r['task']}: {r.get('error') or 'ok'} {r.get('seconds', 0):.0f}s",
                                         flush=True))
        return list(read_rows(out))


def meta(args: argparse.Namespace, device: str, plan, wall_s: float) -> dict:
    import torch

    from cuda_agent.devices import device_name

    return {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "device": device, "device_name": device_name(device),
            "torch": torch.__version__, "cores": len(os.sched_getaffinity(0)), "workers": args.workers,
            "plan": plan.to_dict(), "level": args.level, "quiet_host": not args.loud,
            "fresh_inductor_cache": not args.keep_inductor_cache, "wall_s": round(wall_s, 1)}


# ---- comparing two runs -------------------------------------------------------------------------

Medians = tuple[float | None, float | None]  # (run 1, run 2), None where a run has no figure


@dataclass
class Pair:
    task: str
    eager: Medians
    compile: Medians


def ratio(m: Medians) -> float | None:
    return m[1] / m[0] if m[0] and m[1] else None


def within(m: Medians, share: float = WITHIN) -> bool | None:
    """Whether the two medians are within `share` of each other (None: not timed in both runs)."""
    return max(m) / min(m) <= 1 + share if m[0] and m[1] else None  # type: ignore[type-var, operator]


def _median(row: dict | None, which: str) -> float | None:
    stats = (row or {}).get(which)
    return stats["median_ms"] if stats else None


def pairs(first: dict, second: dict) -> list[Pair]:
    """The tasks of either run, in the first run's order, with their medians in each."""
    a = {r["task"]: r for r in first["rows"]}
    b = {r["task"]: r for r in second["rows"]}
    names = list(a) + [n for n in b if n not in a]
    return [Pair(n, (_median(a.get(n), "eager"), _median(b.get(n), "eager")),
                 (_median(a.get(n), "compile"), _median(b.get(n), "compile"))) for n in names]


def counts(ps: list[Pair]) -> dict[str, tuple[int, int]]:
    """(within 5%, timed in both runs) for eager, compile and both."""
    judged = {"eager": [within(p.eager) for p in ps], "compile": [within(p.compile) for p in ps]}
    out = {k: (sum(j is True for j in v), sum(j is not None for j in v)) for k, v in judged.items()}
    both = list(zip(judged["eager"], judged["compile"]))
    out["both"] = (sum(e is True and c is True for e, c in both), sum(e is not None and c is not None for e, c in both))
    return out


def _ms(v: float | None) -> str:
    return "–" if v is None else f"{v:.3f}"


def _ratio_cell(m: Medians) -> str:
    r = ratio(m)
    return "–" if r is None else f"{r:.3f}" if within(m) else f"**{r:.3f}**"


def compare_markdown(first: dict, second: dict) -> str:
    """Both runs side by side: medians, ratios (run 2 / run 1) and how many are within 5%."""
    ps = pairs(first, second)
    m1, m2 = first.get("meta", {}), second.get("meta", {})
    lines = [f"Run 1: {m1.get('date', '?')}, run 2: {m2.get('date', '?')}; {m2.get('device_name', '?')}, "
             f"torch {m2.get('torch', '?')}, {m2.get('workers', '?')} workers, quiet host "
             f"{m1.get('quiet_host', '?')} / {m2.get('quiet_host', '?')}. Ratio: run 2 / run 1; within 5%: "
             "max / min <= 1.05 (beyond it in bold).", "",
             "| task | eager ms run 1 | run 2 | ratio | compile ms run 1 | run 2 | ratio |",
             "|---|--:|--:|--:|--:|--:|--:|"]
    for p in ps:
        lines.append(f"| {p.task} | {_ms(p.eager[0])} | {_ms(p.eager[1])} | {_ratio_cell(p.eager)} | "
                     f"{_ms(p.compile[0])} | {_ms(p.compile[1])} | {_ratio_cell(p.compile)} |")
    n = counts(ps)
    lines += ["", f"Within 5%: eager {n['eager'][0]}/{n['eager'][1]}, compile {n['compile'][0]}/{n['compile'][1]}, "
                  f"both {n['both'][0]}/{n['both'][1]}."]
    return "\n".join(lines) + "\n"


def run_markdown(run: dict) -> str:
    m = run["meta"]
    lines = [f"{m['date']}: {m['device_name']}, torch {m['torch']}, {m['workers']} workers, quiet host "
             f"{m['quiet_host']}, {m['wall_s']} s", "", "| task | eager ms | ± iqr | compile ms | ± iqr | s | error |",
             "|---|--:|--:|--:|--:|--:|---|"]
    for r in run["rows"]:
        e, c = r.get("eager") or {}, r.get("compile") or {}
        lines.append(f"| {r['task']} | {_ms(e.get('median_ms'))} | {_ms(e.get('iqr_ms'))} | {_ms(c.get('median_ms'))} | "
                     f"{_ms(c.get('iqr_ms'))} | {r.get('seconds', 0):.0f} | {(r.get('error') or '')[:80]} |")
    return "\n".join(lines) + "\n"


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise SystemExit(f"{path}: cannot read a run ({e}); give a file this script wrote with --json") from None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--level", type=int, default=3)
    ap.add_argument("--tasks", type=int, default=10)
    ap.add_argument("--names", nargs="+", default=None, help="tasks by name (instead of --level/--tasks)")
    ap.add_argument("--workers", type=int, default=6, help="processes sharing the device, as in the baseline tables")
    ap.add_argument("--device", default=None, help="cuda | cpu (default: cuda where present)")
    ap.add_argument("--budget", type=float, default=0.5, help="timing budget per model, seconds")
    ap.add_argument("--min-runs", type=int, default=None, help="timed calls at least (default: TimingPlan's)")
    ap.add_argument("--max-runs", type=int, default=None, help="timed calls at most (default: TimingPlan's)")
    ap.add_argument("--kernelbench", type=Path, default=next((p for p in KERNELBENCH if p.is_file()), KERNELBENCH[-1]))
    ap.add_argument("--max-seconds", type=float, default=None, help="start no task after this many seconds")
    ap.add_argument("--loud", action="store_true", help="compiles and builds beside timing (the old way)")
    ap.add_argument("--keep-inductor-cache", action="store_true", help="reuse torch.compile's on-disk cache")
    ap.add_argument("--json", type=Path, default=None, help="write this run here")
    ap.add_argument("--compare", type=Path, nargs="+", default=None, metavar="RUN.json",
                    help="one file: compare this run with it; two: compare them and time nothing")
    args = ap.parse_args(argv)
    if args.compare and len(args.compare) > 2:
        ap.error("--compare takes one earlier run (to compare this one with) or two (to compare them)")
    if args.compare and len(args.compare) == 2:
        print(compare_markdown(_read(args.compare[0]), _read(args.compare[1])))
        return 0
    earlier = _read(args.compare[0]) if args.compare else None
    from cuda_agent.devices import default_device
    from cuda_agent.harness import TimingPlan
    from cuda_agent.tasks import load_tasks

    device = args.device or default_device()
    runs = {k: v for k, v in (("min_runs", args.min_runs), ("max_runs", args.max_runs)) if v is not None}
    plan = TimingPlan(budget_s=args.budget, **runs)
    tasks = pick(load_tasks(args.kernelbench).tasks, args.level, args.tasks, args.names)
    inductor = None if args.keep_inductor_cache else tempfile.mkdtemp(prefix="repeat_bench_inductor_")
    if inductor:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = inductor  # the service's workers inherit it
    t0 = time.perf_counter()
    try:
        rows = time_run(tasks, device, args.workers, plan, quiet=not args.loud, max_seconds=args.max_seconds)
    finally:
        if inductor:
            shutil.rmtree(inductor, ignore_errors=True)
    run = {"meta": meta(args, device, plan, time.perf_counter() - t0), "rows": rows}
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(run, indent=1))
    print(run_markdown(run))
    if earlier is not None:
        print(compare_markdown(earlier, run))
    untimed = len(tasks) - len(rows)
    if untimed:
        print(f"{untimed} task(s) not started before --max-seconds: give it more time, or fewer --tasks")
    return 1 if untimed or any(r.get("error") for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
