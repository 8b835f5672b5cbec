"""Why host-bound (KernelBench level-3) baselines move between runs: each cause timed apart.

    python benchmarks/level3_diag.py [--tasks A,B,C] [--repeats 3] [--runs 60] [--modes quiet,quiet,loaded] [--json OUT]

Runs fresh processes one after the other (`--modes`: by default three), nothing else on the machine (no service, no
other workers), each with an inductor cache of its own:
- `quiet 1`, `quiet 2`: per task, eager timed `--repeats` times in a row, once more with Python's
  garbage collector off, then torch.compile (its first call, where Inductor benchmarks the configs
  of its Triton kernels) and the compiled model timed `--repeats` times;
- `loaded`: the same, while a second process keeps the GPU busy with small kernels during each
  compile only (as other workers' compiles and first calls do beside it in a bench), stopped
  before anything is timed.
Within a process the repeats say how far the same model moves in time; quiet 1 vs quiet 2 how far
a new process and a new compile move it; loaded vs quiet whether Inductor's autotuning beside
other GPU work picks slower kernels. Each timing is benchmarks/timing_diag.py's loop (the
harness's: inputs drawn per call, L2 read, spin, max(GPU events, host p10)); the table gives its
median, the GPU-event median and the host's p10/p50 issue time, in ms.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "benchmarks"))
KERNELBENCH = [REPO / ".devdata" / "kernelbench.jsonl", REPO.parent / "shared" / "kernelbench" / "kernelbench.jsonl"]
TASKS = "30_SwinTransformerV2,16_DenseNet201,34_VanillaRNNHidden"


def _busy_gpu(stop: Path) -> None:
    """The load: small kernels back to back on the GPU until `stop` exists."""
    import torch

    x = torch.randn(1 << 20, device="cuda")
    while not stop.exists():
        for _ in range(200):
            x = torch.relu(x * 1.0001)
        torch.cuda.synchronize()


def one_process(tasks: list[str], repeats: int, runs: int, loaded: bool) -> list[dict]:
    import random

    import torch

    from cuda_agent.measure import compile_for_timing, make_model, module_from_source, timing_draw
    from cuda_agent.tasks import load_tasks
    from timing_diag import run

    source = next(p for p in KERNELBENCH if p.exists())
    by_name = {t.name: t for t in load_tasks(str(source)).tasks}
    dev = torch.device("cuda")
    rows = []
    for name in tasks:
        task = by_name[name]
        module = module_from_source(task.code, "reference", f"{name}.py")
        model = make_model(module.Model, module, random.getrandbits(31), dev)
        draw = timing_draw(module, random.getrandbits(62), dev)
        row: dict = {"task": name, "eager": [], "compile": []}
        with torch.no_grad():
            for _ in range(repeats):
                row["eager"].append(run(model, draw, runs))
            gc.collect()
            gc.disable()
            row["eager_gc_off"] = run(model, draw, runs)
            gc.enable()
            load = None
            if loaded:
                stop = Path(tempfile.mkdtemp()) / "stop"
                load = subprocess.Popen([sys.executable, __file__, "--busy", str(stop)])
                time.sleep(5)  # its CUDA context is up and it is launching
            t0 = time.perf_counter()
            compiled = compile_for_timing(model, draw(0))
            row["compile_s"] = round(time.perf_counter() - t0, 1)
            if load is not None:
                stop.touch()
                load.wait()
            for _ in range(repeats):
                row["compile"].append(run(compiled, draw, runs))
        rows.append(row)
        print(json.dumps({"task": name, "compile_s": row["compile_s"]}), file=sys.stderr, flush=True)
        del model, compiled
        torch._dynamo.reset()
        torch.cuda.empty_cache()
    return rows


def _cell(runs: list[dict], key: str) -> str:
    return ", ".join(f"{r[key]:.3f}" for r in runs)


def _spread(values: list[float]) -> str:
    return f"{(max(values) / min(values) - 1) * 100:.1f}%"


def table(results: dict[str, list[dict]]) -> str:
    lines = ["| process | task | which | medians (ms) | spread | GPU-event medians | host p10 / p50 | compile s |",
             "|---|---|---|---|--:|---|---|--:|"]
    for proc, rows in results.items():
        for row in rows:
            for which in ("eager", "eager_gc_off", "compile"):
                runs = row[which] if isinstance(row[which], list) else [row[which]]
                hosts = ", ".join(f"{r['host_p10']:.2f}/{r['host_p50']:.2f}" for r in runs)
                lines.append(f"| {proc} | {row['task']} | {which} | {_cell(runs, 'own')} | "
                             f"{_spread([r['own'] for r in runs])} | {_cell(runs, 'gpu')} | {hosts} | "
                             f"{row['compile_s'] if which == 'compile' else ''} |")
    # across processes: the first repeat of each
    lines += ["", "| task | which | " + " | ".join(results) + " | spread |", "|---|---|" + "--:|" * (len(results) + 1)]
    names = [r["task"] for r in next(iter(results.values()))]
    for i, name in enumerate(names):
        for which in ("eager", "compile"):
            vals = [rows[i][which][0]["own"] for rows in results.values()]
            lines.append(f"| {name} | {which} | " + " | ".join(f"{v:.3f}" for v in vals) + f" | {_spread(vals)} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", default=TASKS)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--runs", type=int, default=60)
    ap.add_argument("--modes", default="quiet,quiet,loaded",
                    help="the processes to run, in order: quiet (alone) or loaded (a GPU load beside each compile)")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--busy", type=Path, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--child", choices=["quiet", "loaded"], default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.busy:
        return _busy_gpu(args.busy)
    tasks = args.tasks.split(",")
    if args.child:
        rows = one_process(tasks, args.repeats, args.runs, args.child == "loaded")
        print("ROWS " + json.dumps(rows))
        return None
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or any(m not in ("quiet", "loaded") for m in modes):
        raise SystemExit(f"--modes {args.modes!r}: give quiet and/or loaded, comma-separated")
    results: dict[str, list[dict]] = {}
    for n, mode in enumerate(modes, 1):
        proc = f"{mode} {n}"
        with tempfile.TemporaryDirectory(prefix="inductor_") as cache:
            env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache, "PYTHONUNBUFFERED": "1"}
            out = subprocess.run([sys.executable, __file__, "--child", mode, "--tasks", args.tasks,
                                  "--repeats", str(args.repeats), "--runs", str(args.runs)],
                                 env=env, stdout=subprocess.PIPE, text=True)
        line = next((ln for ln in out.stdout.splitlines() if ln.startswith("ROWS ")), None)
        if line is None:
            print(f"{proc}: no result (exit {out.returncode})", flush=True)
            continue
        results[proc] = json.loads(line[5:])
        print(f"{proc}: done", flush=True)
        if args.json:
            args.json.write_text(json.dumps(results, indent=1))
    if results:
        print(table(results))


if __name__ == "__main__":
    main()
