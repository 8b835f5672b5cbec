"""The evaluation service, measured: throughput and the `start` stage on the demo task (against the
harness called directly with a spare pair, today's path, in the same run), the spread of the demo
kernel's medians idle and with 8 builds beside, 20 new solutions at once against
(slowest build + their evaluations in series), the baseline cache across a restart, and a soak
with faulty candidates and an evaluator killed mid-run.

    python benchmarks/service_bench.py --device cuda --evals 40 --soak 100 --json out.json
Prints a table last; --json keeps every figure. `--loud`: the builders build beside timing
(ServiceSettings.quiet_builds=False), as before 2026-11-25, to measure what waiting for it costs.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import as_completed
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HACKS = REPO / "tests" / "hacks"
GOALS = {"evals_per_hour": 2500, "start_s": 0.2, "spread_pct": 2.0, "burst_ratio": 1.5}


def demo(device: str):
    from cuda_agent.tasks import load_task

    if device == "cuda":
        return load_task("scale_bias_relu"), REPO / "benchmarks" / "solutions" / "scale_bias_relu_cuda"
    return load_task(HACKS / "tasks" / "sbr_small.py"), HACKS / "cpu" / "honest_fused"


def variants(solution: Path, n: int, dest: Path) -> list[Path]:
    """`n` new solutions: the demo's, each source with a comment of its own (a build of its own)."""
    out = []
    dest.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        d = Path(tempfile.mkdtemp(prefix=f"v{i}_", dir=dest))  # a folder of its own each time it is called
        shutil.copytree(solution, d, ignore=shutil.ignore_patterns("expect.json"), dirs_exist_ok=True)
        for src in (d / "kernels").glob("*"):
            if src.suffix in (".cu", ".cpp"):
                src.write_text(src.read_text() + f"\n// variant {i} {time.time_ns()}\n")
        out.append(d)
    return out


def spread(medians: list[float]) -> float:
    return (max(medians) / min(medians) - 1) * 100 if medians and min(medians) > 0 else float("nan")


def direct(device: str, evals: int) -> dict:
    """Today's path without the service: harness.evaluate with the next processes started ahead."""
    from cuda_agent.harness import EvalConfig, evaluate, keep_warm

    task, sol = demo(device)
    evaluate(task, sol, EvalConfig(device=device))  # build and baselines cached
    with keep_warm():
        t0 = time.perf_counter()
        rows = [evaluate(task, sol, EvalConfig(device=device)) for _ in range(evals + 1)][1:]
        per = (time.perf_counter() - t0) / (evals + 1)
    return {"eval_s": per, "evals_per_hour": 3600 / per,
            "start_s": statistics.mean(r.stage_seconds.get("start", 0.0) for r in rows),
            "stage_s": {k: statistics.mean(r.stage_seconds.get(k, 0.0) for r in rows) for k in rows[0].stage_seconds},
            "medians_ms": [r.solution.median_ms for r in rows if r.solution]}


def throughput(svc, device: str, evals: int, max_seconds: float | None = None, config=None) -> dict:
    """`evals` evaluations of the demo solution submitted at once (build and baselines cached). With
    `max_seconds`, those not ended that many seconds after the submission are not waited for: the row is
    the ended ones' (`cut_short`, `done` of `submitted`), its rate theirs over the time waited, so a run
    that its device call's limit would cut keeps its figure (the caller abandons the rest). `config`: the
    evaluations' EvalConfig (default: the judge's for `device`)."""
    from concurrent.futures import TimeoutError as Timeout

    from cuda_agent.harness import EvalConfig

    task, sol = demo(device)
    config = config or EvalConfig(device=device)
    first = svc.evaluate(task, sol, config)
    print(f"  [{time.strftime('%H:%M:%S')}] first evaluation: reward {first.reward} in {first.seconds:.1f} s; "
          f"{evals} submitted", flush=True)
    t0 = time.perf_counter()
    futures = [svc.submit_path(task, sol, config) for _ in range(evals)]
    ends, rows = [], []  # seconds from submission to each evaluation's end, and its result, in the order they ended
    left = None if max_seconds is None else max(0.0, max_seconds - (time.perf_counter() - t0))
    try:
        for k, f in enumerate(as_completed(futures, timeout=left), 1):  # progress as they end: a cut run says how far
            r = f.result()
            ends.append(time.perf_counter() - t0)
            rows.append(r)
            if k <= 8 or k % 10 == 0 or r.reward < 0:
                parts = " ".join(f"{s} {v:.1f}" for s, v in r.stage_seconds.items() if "." not in s)
                print(f"  [{time.perf_counter() - t0:6.1f} s] {k}/{evals} done: reward {r.reward} in {r.seconds:.1f} s "
                      f"(reference worker's job {r.details.get('reference_jobs', '?')}); {parts}", flush=True)
    except Timeout:
        print(f"  [{time.perf_counter() - t0:6.1f} s] cut short: {len(rows)} of {evals} ended within {max_seconds} s",
              flush=True)
    return throughput_row(first, rows, ends, time.perf_counter() - t0, evals)


def compile_steps(r) -> dict[str, float]:
    """An evaluation's compile stage as its reference worker split it (warm-up, the task's turn, the lock, the compile)."""
    return {k.removeprefix("reference."): v for k, v in (r.details.get("steps_s") or {}).items()
            if k.startswith("reference.compile")}


def throughput_row(first, rows: list, ends: list[float], wall: float, submitted: int) -> dict:
    """The figures of a throughput run from its ended evaluations (`rows`, ending `ends` seconds after the
    submission), `wall` seconds after it: all `submitted`, or fewer where the run was cut short."""
    if not rows:
        raise RuntimeError(f"no evaluation of {submitted} ended within {wall:.0f} s: give the run more time")
    return {"first": {"reward": first.reward, "reason": first.reason, "seconds": first.seconds},
            "wall_s": wall, "eval_s": wall / len(rows), "evals_per_hour": 3600 * len(rows) / wall,
            "steady_evals_per_hour": steady_rate(ends), "submitted": submitted, "done": len(rows),
            "cut_short": len(rows) < submitted,
            "start_s": statistics.mean(r.stage_seconds.get("start", 0.0) for r in rows),
            "stage_s": {k: statistics.mean(r.stage_seconds.get(k, 0.0) for r in rows) for k in rows[0].stage_seconds},
            "rewards": sorted({r.reward for r in rows}), "medians_ms": [r.solution.median_ms for r in rows if r.solution],
            "reward_counts": {str(k): sum(r.reward == k for r in rows) for k in sorted({r.reward for r in rows})},
            "vs_eager": [r.speedup_vs_eager for r in rows if r.speedup_vs_eager],
            "vs_compile": [r.speedup_vs_compile for r in rows if r.speedup_vs_compile],
            "compiled": sum(bool(r.details.get("compile_graphs")) for r in rows),  # compiles in a worker new to the task
            "compile_s_top": sorted((round(r.stage_seconds.get("compile", 0.0), 2) for r in rows), reverse=True)[:6],
            # the longest compiles' parts in their reference workers (warm-up, turn, lock, compile): what a new worker
            # waits on (the worker's steps, details["steps_s"]: reference.compile*)
            "compile_laps_top": [laps for r in sorted(rows, key=lambda r: r.stage_seconds.get("compile", 0.0),
                                                      reverse=True)[:4] if (laps := compile_steps(r))],
            "failures": [f"{r.stage}: {r.reason}"[:300] for r in rows if r.reward < 0][:5]}


def steady_rate(ends: list[float]) -> float | None:
    """Evaluations per hour once running: between the end of the first fifth of the evaluations and the
    last one (the start-up of the evaluators' spares and their first compiles left out); None with fewer
    than 5 or no time between them. Reported beside the whole run's rate, never instead of it."""
    if len(ends) < 5:
        return None
    lo = len(ends) // 5  # `ends` in the order the evaluations ended: rising
    span = ends[-1] - ends[lo - 1]
    return 3600 * (len(ends) - lo) / span if span > 0 else None


def stability(svc, device: str, builds: int, tmp: Path) -> dict:
    """The demo kernel's medians over 5 evaluations in a row, idle and with `builds` builds beside."""
    from cuda_agent.harness import EvalConfig
    from cuda_agent.service import PRIORITY_BENCH, PRIORITY_REWARD

    task, sol = demo(device)
    idle = [svc.evaluate(task, sol, EvalConfig(device=device), priority=PRIORITY_REWARD).solution.median_ms
            for _ in range(5)]
    busy_futures = [svc.submit_path(task, v, EvalConfig(device=device), priority=PRIORITY_BENCH)
                    for v in variants(sol, builds, tmp / "stability")]
    time.sleep(0.5)  # the builders have started
    busy = [svc.evaluate(task, sol, EvalConfig(device=device), priority=PRIORITY_REWARD).solution.median_ms
            for _ in range(5)]
    building_during = sum(not f.done() for f in busy_futures)
    for f in busy_futures:
        f.result()
    return {"idle_ms": idle, "idle_spread_pct": spread(idle), "busy_ms": busy, "busy_spread_pct": spread(busy),
            "builds_beside": builds, "still_building_after": building_during}


def burst(svc, device: str, n: int, eval_s: float, tmp: Path) -> dict:
    """`n` new solutions at once: wall time against (slowest build + n evaluations in series)."""
    from cuda_agent.harness import EvalConfig, compile_solution

    task, sol = demo(device)
    t0 = time.perf_counter()
    one = compile_solution(variants(sol, 1, tmp / "one")[0], EvalConfig(device=device))
    build_s = time.perf_counter() - t0
    news = variants(sol, n, tmp / "burst")
    t0 = time.perf_counter()
    rows = [f.result() for f in [svc.submit_path(task, v, EvalConfig(device=device)) for v in news]]
    wall = time.perf_counter() - t0
    serial = build_s + n * eval_s
    return {"solutions": n, "wall_s": wall, "one_build_s": build_s, "build_ok": one.ok, "eval_s": eval_s,
            "serial_s": serial, "ratio": wall / serial, "rewards": sorted({r.reward for r in rows}),
            "build_s_mean": statistics.mean(r.stage_seconds.get("build", 0.0) for r in rows)}


def restart(settings, device: str) -> dict:
    """A new service: the first evaluation finds its baselines cached on disk."""
    from cuda_agent.harness import EvalConfig
    from cuda_agent.service import EvalService

    task, sol = demo(device)
    t0 = time.perf_counter()
    with EvalService(settings) as svc:
        up = time.perf_counter() - t0
        r = svc.evaluate(task, sol, EvalConfig(device=device))
    return {"start_s": up, "baseline_cached": "baseline_cached" in r.flags, "reward": r.reward}


def says_any(says: tuple[str, ...], reason: str) -> bool:
    """Whether `reason` says what a faulty request's verdict must: one of `says` (none: anything)."""
    return not says or any(s in reason for s in says)


def right(honest: bool, says: tuple[str, ...], v) -> bool:
    """Whether a soak request's verdict is the one it must get: correct where honest, else -1 saying one of `says`."""
    return v.correct if honest else v.reward == -1 and says_any(says, v.reason)


def faults(device: str) -> list[tuple[str, str, dict, tuple[str, ...]]]:
    """(solution folder, task, EvalConfig overrides, what its reason must say: one of these) for each fault kind."""
    if device == "cuda":
        # where the wild address lands decides the CUDA error (an H200's soak read either, 11 and 9 times in 20)
        wild = json.loads((HACKS / "cuda" / "illegal_address" / "expect.json").read_text())["reason_contains"]
        wild = tuple(wild) if isinstance(wild, list) else (wild,)
        return [(str(HACKS / "cuda" / "illegal_address"), "scale_bias_relu", {}, wild),
                (str(HACKS / "cuda" / "oom_cuda"), "scale_bias_relu", {}, ("out of memory",)),
                (str(HACKS / "cuda" / "infinite_loop_kernel"), "scale_bias_relu", {"timeout_s": 20}, ("timed out",)),
                (str(HACKS / "cpu" / "os_exit"), str(HACKS / "tasks" / "sbr_small.py"), {}, ("importing os",)),
                (str(HACKS / "cuda" / "aten_relu_cuda"), "scale_bias_relu", {}, ())]
    small = str(HACKS / "tasks" / "sbr_small.py")
    return [(str(HACKS / "cpu" / "segfault"), small, {}, ("SIGSEGV",)),
            (str(HACKS / "cpu" / "infinite_loop"), small, {"timeout_s": 10}, ("timed out",)),
            (str(HACKS / "cpu" / "oom_kernel"), small, {"memory_limit_gb": 4}, ()),
            (str(HACKS / "cpu" / "os_exit"), small, {}, ("importing os",)),
            (str(HACKS / "cpu" / "torch_relu_fallback"), small, {}, ("torch.relu",))]


def soak(svc, device: str, n: int, clean_eval_s: float | None, profile: bool = True,
         journal: Path | None = None) -> dict:
    """`n` evaluations, every tenth a faulty candidate, one evaluator killed half-way: each request
    must get exactly one verdict with the right reason, and throughput stay within 20% of clean
    (`clean_eval_s`, the same evaluation without faults; `profile=False`: correctness only).
    `journal`: one JSON line per request as it ends (a soak cut short still says what ended and how)."""
    import ray

    from cuda_agent.harness import EvalConfig
    from cuda_agent.tasks import load_task

    task, sol = demo(device)
    kinds = faults(device)
    plan = []
    for i in range(n):
        if i % 10 == 9:
            folder, task_src, extra, says = kinds[(i // 10) % len(kinds)]
            plan.append((Path(folder), load_task(task_src), EvalConfig(device=device, profile=profile, **extra),
                         says, False))
        else:
            plan.append((sol, task, EvalConfig(device=device, profile=profile), (), True))
    used = [Path(folder).name for folder, *_ in kinds[:min(len(kinds), n // 10)]]
    print(f"soak: {n} requests, every tenth faulty (kinds: {', '.join(used) or 'none'})", flush=True)
    t0 = time.perf_counter()
    futures = [svc.submit_path(t, folder, config) for folder, t, config, _, _ in plan]
    faulty = [f for f, (*_, honest) in zip(futures, plan) if not honest]
    killed = threading.Event()
    written: set[int] = set()
    if journal is not None:
        journal.write_text("")

    def record() -> None:
        """The requests that ended since the last call, one line each, in the order they are seen to end."""
        if journal is None:
            return
        with journal.open("a") as f:
            for i, fut in enumerate(futures):
                if i in written or not fut.done():
                    continue
                written.add(i)
                folder, _, _, says, honest = plan[i]
                row = {"i": i, "s": round(time.perf_counter() - t0, 2), "solution": folder.name, "honest": honest,
                       "must_say": says}
                try:
                    v = fut.result()
                    row.update(reward=v.reward, stage=v.stage, fault=v.fault, reason=v.reason[:200],
                               right=right(honest, says, v))
                except Exception as e:   # a request that ended without a verdict: the soak's failure
                    row.update(error=f"{type(e).__name__}: {str(e)[:200]}", right=False)
                f.write(json.dumps(row) + "\n")

    def watch() -> None:
        """Kills one evaluator half-way; prints progress every tenth of the requests and at least every
        30 s (a soak cut short says whether it was slow or stuck)."""
        step, next_at, last = max(1, n // 10), 0, time.perf_counter()
        while True:
            record()
            done = sum(f.done() for f in futures)
            if not killed.is_set() and done >= n // 2:
                ray.kill(svc.fleet.slots[0].handle)
                killed.set()
                print(f"  [{time.perf_counter() - t0:6.1f} s] soak: evaluator 0 killed at {done}/{n} done", flush=True)
            now = time.perf_counter()
            if done >= next_at or now - last >= 30 or done == n:
                print(f"  [{now - t0:6.1f} s] soak {done}/{n} done (faulty {sum(f.done() for f in faulty)} done, "
                      f"evaluator killed: {'yes' if killed.is_set() else 'no'})", flush=True)
                next_at, last = (done // step + 1) * step, now
            if done == n:
                record()
                return
            time.sleep(0.2)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    verdicts = [f.result() for f in futures]
    wall = time.perf_counter() - t0
    watcher.join(timeout=5)  # its last line printed
    wrong = []
    for (folder, _, _, says, honest), v in zip(plan, verdicts):
        if not right(honest, says, v):
            wrong.append(f"{folder.name}: honest but {v.stage}: {v.reason[:120]}" if honest
                         else f"{folder.name}: reward {v.reward} ({v.reason[:120]})")
    honest_s = [v.seconds for (_, _, _, _, h), v in zip(plan, verdicts) if h]
    return {"requests": n, "verdicts": len(verdicts), "killed_evaluator": killed.is_set(), "wall_s": wall,
            "wrong": wrong, "harness_errors": sum(v.harness_error for v in verdicts),
            "retried": sum("retried" in v.flags for v in verdicts),
            "evals_per_hour": 3600 * n / wall, "honest_eval_s_mean": statistics.mean(honest_s),
            "clean_eval_s": clean_eval_s, "stats": dict(svc.stats)}


def soak_only(settings, device: str, n: int, out: dict) -> None:
    """A clean run of `n` correctness-only evaluations, then the soak of `n` on a fresh service."""
    from cuda_agent.harness import EvalConfig
    from cuda_agent.service import EvalService

    task, sol = demo(device)
    with EvalService(settings) as svc:
        svc.evaluate(task, sol, EvalConfig(device=device, profile=False))  # built
        t0 = time.perf_counter()
        m = min(n, 100)  # the clean rate, from enough evaluations to average over
        clean = [f.result() for f in [svc.submit_path(task, sol, EvalConfig(device=device, profile=False))
                                      for _ in range(m)]]
        clean_s = (time.perf_counter() - t0) / m
    with EvalService(settings) as svc:
        out["soak"] = soak(svc, device, n, clean_s, profile=False)
    k = out["soak"]
    k["clean_correct"] = sum(r.correct for r in clean)
    k["throughput_ratio"] = (3600 / clean_s) and k["evals_per_hour"] / (3600 / clean_s)
    print(json.dumps({key: v for key, v in k.items() if key != "stats"}))
    print(f"\n| soak ({device}) | value |\n|---|---|\n| requests / verdicts | {k['requests']} / {k['verdicts']} |\n"
          f"| wrong verdicts | {len(k['wrong'])} |\n| harness errors | {k['harness_errors']} |\n"
          f"| evaluator killed, retried | {k['killed_evaluator']}, {k['retried']} |\n"
          f"| throughput vs clean | {k['throughput_ratio']:.2f} ({k['evals_per_hour']:.0f}/h vs {3600 / clean_s:.0f}/h) |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None)
    ap.add_argument("--evals", type=int, default=20)
    ap.add_argument("--builds", type=int, default=8)
    ap.add_argument("--burst", type=int, default=20)
    ap.add_argument("--soak", type=int, default=0, help="soak requests (0: no soak)")
    ap.add_argument("--stability-only", action="store_true", help="only the spread of the 5 medians, idle and "
                    "with builds beside")
    ap.add_argument("--soak-only", action="store_true", help="only the soak, correctness only (no timing), "
                    "against a clean run of the same size")
    ap.add_argument("--direct", type=int, default=0, help="also time today's path without the service (N evaluations)")
    ap.add_argument("--per-device", type=int, default=1, help="evaluators sharing the device (cpu: evaluators)")
    ap.add_argument("--spares", type=int, default=None, help="processes started ahead per evaluator")
    ap.add_argument("--unpinned", action="store_true", help="also measure the spread without CPU pinning")
    ap.add_argument("--burst-only", action="store_true", help="only the throughput (--evals) and the burst")
    ap.add_argument("--loud", action="store_true", help="builders build beside timing (quiet_builds=False)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    sys.path.insert(0, str(REPO / "src"))
    from cuda_agent.devices import default_device
    from cuda_agent.service import EvalService, ServiceSettings

    device = args.device or default_device()
    settings = ServiceSettings(device=device, evaluators_per_device=args.per_device, cpu_evaluators=args.per_device,
                               spares=args.spares, quiet_builds=not args.loud)
    out: dict = {"device": device, "date": time.strftime("%Y-%m-%d %H:%M"), "goals": GOALS,
                 "quiet_builds": settings.quiet_builds}
    tmp = Path(tempfile.mkdtemp(prefix="service_bench_"))
    if args.direct:
        out["direct"] = direct(device, args.direct)
        print("direct", json.dumps({k: v for k, v in out["direct"].items() if k != "medians_ms"}), flush=True)
    if args.soak_only:
        soak_only(settings, device, args.soak, out)
        return
    if args.burst_only:
        with EvalService(settings) as svc:
            out["throughput"] = throughput(svc, device, args.evals)
            out["burst"] = burst(svc, device, args.burst, out["throughput"]["eval_s"], tmp)
        t, b = out["throughput"], out["burst"]
        print(json.dumps({"throughput": {k: v for k, v in t.items() if k != "medians_ms"}, "burst": b}))
        print(f"\n| service ({device}, quiet builds {settings.quiet_builds}) | value |\n|---|---|\n"
              f"| evaluations per hour, builds cached | {t['evals_per_hour']:.0f} |\n"
              f"| {b['solutions']} new solutions at once, wall / serial | {b['ratio']:.2f}x ({b['wall_s']:.1f} s vs "
              f"{b['serial_s']:.1f} s) |")
        if args.json:
            args.json.write_text(json.dumps(out, indent=1, default=str))
        return
    if args.stability_only:
        from cuda_agent.harness import EvalConfig

        with EvalService(settings) as svc:
            task, sol = demo(device)
            svc.evaluate(task, sol, EvalConfig(device=device))  # build and baselines cached
            out["stability"] = stability(svc, device, args.builds, tmp)
        s = out["stability"]
        print(json.dumps(s))
        print(f"\n| spread of 5 medians ({device}) | value | goal |\n|---|---|---|\n"
              f"| idle | {s['idle_spread_pct']:.1f}% | <= {GOALS['spread_pct']}% |\n"
              f"| {s['builds_beside']} builds beside | {s['busy_spread_pct']:.1f}% | <= {GOALS['spread_pct']}% |")
        if args.json:
            args.json.write_text(json.dumps(out, indent=1, default=str))
        return
    t0 = time.perf_counter()
    with EvalService(settings) as svc:
        out["service_start_s"] = time.perf_counter() - t0
        out["evaluators"], out["builders"] = svc.evaluators, len(svc.fleet.builders)
        out["throughput"] = throughput(svc, device, args.evals)
        print("throughput", json.dumps({k: v for k, v in out["throughput"].items() if k != "medians_ms"}), flush=True)
        out["stability"] = stability(svc, device, args.builds, tmp)
        print("stability", json.dumps(out["stability"]), flush=True)
        out["burst"] = burst(svc, device, args.burst, out["throughput"]["eval_s"], tmp)
        print("burst", json.dumps(out["burst"]), flush=True)
        if args.soak:
            out["soak"] = soak(svc, device, args.soak, out["throughput"]["eval_s"])
            print("soak", json.dumps(out["soak"])[:600], flush=True)
    out["restart"] = restart(settings, device)
    if args.unpinned:
        from dataclasses import replace

        with EvalService(replace(settings, pin_cores=False)) as svc:
            out["stability_unpinned"] = stability(svc, device, args.builds, tmp)
        print("stability_unpinned", json.dumps(out["stability_unpinned"]), flush=True)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, default=str))
    print_table(out)


def print_table(out: dict) -> None:
    device = out["device"]
    t, s, b = out["throughput"], out["stability"], out["burst"]
    rows = [("evaluations per hour (one device)", f"{t['evals_per_hour']:.0f}", f">= {GOALS['evals_per_hour']}",
             f"{out['direct']['evals_per_hour']:.0f} direct" if "direct" in out else ""),
            ("start stage, s", f"{t['start_s']:.3f}", f"<= {GOALS['start_s']}",
             f"{out['direct']['start_s']:.3f} direct" if "direct" in out else ""),
            ("median spread over 5, idle", f"{s['idle_spread_pct']:.1f}%", f"<= {GOALS['spread_pct']}%", ""),
            (f"median spread over 5, {s['builds_beside']} builds beside", f"{s['busy_spread_pct']:.1f}%",
             f"<= {GOALS['spread_pct']}%", f"{s['still_building_after']} still building after"),
            (f"{b['solutions']} new solutions at once, wall / serial", f"{b['ratio']:.2f}x",
             f"<= {GOALS['burst_ratio']}x", f"{b['wall_s']:.1f} s vs {b['serial_s']:.1f} s"),
            ("baseline cache after a restart", str(out["restart"]["baseline_cached"]), "True", "")]
    if "stability_unpinned" in out:
        u = out["stability_unpinned"]
        rows.append(("spread idle / with builds, no pinning", f"{u['idle_spread_pct']:.1f}% / {u['busy_spread_pct']:.1f}%",
                     f"<= {GOALS['spread_pct']}%", ""))
    if "soak" in out:
        k = out["soak"]
        rows.append((f"soak: {k['requests']} requests, evaluator killed", f"{len(k['wrong'])} wrong",
                     "0 wrong", f"{k['evals_per_hour']:.0f}/h, {k['harness_errors']} harness errors, "
                                f"{k['retried']} retried"))
    print(f"\n## Evaluation service ({device}, {out['evaluators']} evaluator(s), {out['builders']} builders)\n")
    print("| measure | value | goal | beside |\n|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")


if __name__ == "__main__":
    main()
