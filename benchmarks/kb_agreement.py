"""Agreement with KernelBench's own harness (issue 15, part 4): the same solutions judged by our
relaxed harness and by KernelBench's evaluation function, on the same machine, in the same run,
each solution by both back to back. KernelBench runs as an external program: benchmarks/kb_driver.py
(ours) imports `kernelbench.eval` from a checkout at a pinned commit (scripts/fetch_corpora.sh;
never vendored) in a process of its own per solution, so its crashes and time-outs are rows.

    python benchmarks/kb_agreement.py --kernelbench CHECKOUT --out DIR
        [--hand-written] [--solutions DIR] [--cuda-l1 FILE.json --limit N] [--kb-adversarial]
        [--tasks kernelbench.jsonl] [--levels 1 2 3] [--wheels DIR] [--device cuda]
        [--budget 1.0] [--kb-perf-trials 100] [--kb-timeout 300] [--build-workers 8]
        [--batch 8] [--max-seconds S]

Solutions (any mix): --hand-written, bench_kernelbench.py's device set (element-wise kernels, three
GEMMs with a fused epilogue, a slow softmax, three hacks; workspace layout); --solutions, a
folder in `cuda-agent bench`'s layouts; --cuda-l1, CUDA-L1's released kernels
(optimized_cuda_code/<gpu>.json), each judged against the row's own ref_code, the first --limit
of each level; --kb-adversarial, KernelBench's own adversarial test kernels read from the
checkout (src/kernelbench/unit_tests/test_kernels/) on level 1 task 1. A workspace solution
(model_new.py + kernels/) is given to KernelBench as one load_inline file (as_inline below: the
same sources and our build's flags); single-file solutions go to both as they are.

Ours: `evaluate` with the relaxed policy and the baselines timed afresh (no cache), speed-up =
eager median / solution median. KernelBench's: eval_kernel_against_ref with its scripts' settings
(5 correctness trials, 100 timed trials, cuda_event timing, fp32), speed-up = its ref_runtime /
runtime, both timed by the same function in the same call. Builds go ahead in batches (--batch
rows, --build-workers at once: our prebuild and KernelBench's build_compile_cache), then the batch
is judged one row at a time with nothing else running.

Writes DIR/results.jsonl (one row per solution; resumable: a row with two verdicts is not redone,
one with a side that gave none is), DIR/agreement.md (the table and summary, printed at the end),
DIR/kb/<row>/ (KernelBench's requests, logs, builds). Classes and causes:
cuda_agent/bench/agreement.py.

On the device: here, `bash scripts/carry_kernelbench.sh` (fills the git-ignored .kb/: KernelBench's
src/kernelbench at the pinned commit, CUDA-L1's h100.json, kernelbench.jsonl, pydantic wheels;
6.8 MB), then one call, repeated until it prints no "not finished" (each resumes from runs/kb_agree
on a warm machine; carry runs/kb_agree back to a fresh one):
    run(carry=[".kb"], command="bash benchmarks/device_check.sh kbagree:540", timeout_s=600)
which runs, with the device's python3 and PYTHONPATH=src,
    python3 benchmarks/kb_agreement.py --kernelbench .kb/KernelBench --wheels .kb/wheels
        --tasks .kb/kernelbench.jsonl --out runs/kb_agree --kb-adversarial --hand-written
        --cuda-l1 .kb/cuda_l1/h100.json --limit 4 --max-seconds 420
30 rows (3 + 15 + 12), about 25 minutes (three to four calls; an estimate); what to expect in the
table: benchmarks/RESULTS.md, "2026-11-25 (evening), CPU: KernelBench agreement, ready for the device".

On a machine of several GPUs, N runs side by side, one a GPU (a row is judged with nothing else on
its GPU, KernelBench's timing knowing no lock of ours): `--shard K/N` with CUDA_VISIBLE_DEVICES=K and
an --out of its own, begun from a copy of the rows so far; then `--collect SHARD_OUT... --report` on the
main --out puts their rows in and writes the table over every solution. device_check.sh's kbagree
step does this with KBAGREE_SHARDS=N.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parent.parent
PINNED = "423217d9fda91e0c2d67e4a43bf62f96f6d104f1"  # KernelBench main, 2026-03-05: as scripts/fetch_corpora.sh
RESULTS = "results.jsonl"
TASKS = (REPO / ".devdata" / "kernelbench.jsonl", REPO.parent / "shared" / "kernelbench" / "kernelbench.jsonl")
HEADER_SUFFIXES = (".h", ".hpp", ".cuh", ".hh", ".inl")


@dataclass
class Item:
    """One (task, solution): `solution` is what our harness judges, `kb_solution` the one file
    KernelBench judges (None: it cannot take this one, `note` says why)."""

    key: str
    task: Any                      # cuda_agent.tasks.Task
    solution: Path
    kb_solution: Path | None
    note: str = ""                 # an attack's description, or why KernelBench cannot take it


class ConversionError(ValueError):
    """A workspace that has no one-file load_inline form."""


# ---- solutions ---------------------------------------------------------------------------------

def as_inline(folder: Path, module: str) -> str:
    """A workspace solution as one load_inline file: kernels/*.cu as the CUDA source, the
    *_binding.cpp files (with the harness's binding registry and a module definition that applies
    it) as the C++ source, our build's optimisation flags; the module put in sys.modules as
    cuda_extension, then model_new.py unchanged. cuBLAS is not linked: its symbols resolve from the
    libraries torch has loaded, as in KernelBench's own cuBLAS kernel (non_default_stream_kernel.py),
    where a -lcublas that the toolkit's lib folder lacks (a pip-wheel cuBLAS) would fail the link."""
    from cuda_agent.workspace import TEMPLATES

    sources = sorted(p for d in (folder / "kernels", folder) if d.is_dir() for p in d.iterdir() if p.is_file())
    headers = [p.name for p in sources if p.suffix in HEADER_SUFFIXES and p.name != "binding_registry.h"]
    if headers:
        raise ConversionError(f"local headers ({', '.join(headers)}): load_inline takes one C++ and one CUDA source")
    cu = [p.read_text() for p in sources if p.suffix == ".cu"]
    cpp = [p.read_text() for p in sources if p.suffix in (".cpp", ".cc", ".cxx") and p.name != "binding.cpp"]
    registry = (TEMPLATES / "binding_registry.h").read_text().replace("#pragma once", "")
    cpp = [registry, *(t.replace('#include "../binding_registry.h"', "").replace('#include "binding_registry.h"', "")
                       for t in cpp),
           "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { cuda_agent::BindingRegistry::instance().apply(m); }\n"]
    return ("# KernelBench's form of a workspace solution (benchmarks/kb_agreement.py, as_inline): the same\n"
            "# sources, built by load_inline with our build's flags, registered as cuda_extension.\n"
            "import sys as _sys\n\nfrom torch.utils.cpp_extension import load_inline as _load_inline\n\n"
            f"_sys.modules['cuda_extension'] = _load_inline(\n    name={module!r},\n    cpp_sources={cpp!r},\n"
            f"    cuda_sources={cu!r},\n    extra_cflags=['-O3'],\n    extra_cuda_cflags=['-O3', '--use_fast_math'],\n"
            ")\n\n" + (folder / "model_new.py").read_text())


def _item(key: str, task: Any, solution: Path, dest: Path, note: str = "") -> Item:
    """The item, with KernelBench's file written to dest/<key>.py where the solution is a workspace."""
    import tempfile

    from cuda_agent.harness import snapshot

    entry = solution / "model_new.py" if solution.is_dir() else solution
    with tempfile.TemporaryDirectory() as tmp:
        kind = snapshot(solution, Path(tmp)).kind
    if kind == "inline" or not (solution / "kernels").is_dir():
        return Item(key, task, solution, entry, note)
    kb_file = dest / f"{safe(key)}.py"
    try:
        kb_file.parent.mkdir(parents=True, exist_ok=True)
        kb_file.write_text(as_inline(solution, "kb_" + re.sub(r"\W", "_", key)))  # the module: an identifier
    except ConversionError as e:
        return Item(key, task, solution, None, f"{note}; no KernelBench form: {e}".lstrip("; "))
    return Item(key, task, solution, kb_file, note)


def safe(key: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in key)


def _sibling(name: str):
    """A script beside this one, imported by path (benchmarks/ is not a package)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parent / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # before running it: dataclasses look their module up there
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


kbd = _sibling("kb_driver")  # KernelBench's side: the driver process and its verdicts


def hand_written(tasks, out: Path) -> list[Item]:
    """bench_kernelbench.py's device set, written to out/hand_written."""
    bk = _sibling("bench_kernelbench")
    dest = out / "hand_written"
    names = bk.write_solutions(dest, cuda=True, ops=bk.DEVICE_OPS)
    return [_item(f"hand-written/{n}", tasks.find(n), dest / n, out / "kb_inline",
                  (dest / n / "ATTACK.txt").read_text().strip() if (dest / n / "ATTACK.txt").is_file() else "")
            for n in names]


def solutions_dir(folder: Path, tasks: list, out: Path) -> list[Item]:
    """Every task of `tasks` with a solution in `folder` (`cuda-agent bench`'s layouts)."""
    from cuda_agent.bench.solutions import SolutionsDir

    sd = SolutionsDir(folder)
    return [_item(f"solutions/{t.name}", t, path, out / "kb_inline") for t in tasks if (path := sd.find(t)) is not None]


def cuda_l1(path: Path, tasks, levels: list[int], limit: int | None, out: Path) -> list[Item]:
    """CUDA-L1's rows with a kernel, the first `limit` of each level, each on its own ref_code."""
    from cuda_agent.tasks import Task

    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    items, per_level = [], {}
    for r in rows:
        level, pid = int(r["level_id"]), int(r["task_id"])
        if r.get("custom_code") in (None, "", "None") or level not in levels:
            continue
        if limit is not None and per_level.get(level, 0) >= limit:
            continue
        per_level[level] = per_level.get(level, 0) + 1
        known = tasks.select(level=level, ids=[pid]).tasks
        task = Task(name=known[0].name if known else f"L{level}_{pid}", code=r["ref_code"],
                    origin=f"cuda-l1:{path.name}", level=level, problem_id=pid)
        file = out / "cuda_l1" / path.stem / f"L{level}_{pid}.py"
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(r["custom_code"])
        items.append(Item(f"cuda-l1/{path.stem}/L{level}_{pid}", task, file, file))
    return items


def kb_adversarial(checkout: Path, tasks) -> list[Item]:
    """KernelBench's adversarial test kernels (its unit tests run them on level 1 task 1)."""
    folder = checkout / "src" / "kernelbench" / "unit_tests" / "test_kernels"
    task = tasks.find("L1/1")
    return [Item(f"kb-adversarial/{p.stem}", task, p, p, "KernelBench's own adversarial test kernel")
            for p in sorted(folder.glob("*.py"))]


# ---- our side ----------------------------------------------------------------------------------

def our_verdict(item: Item, config) -> dict:
    from cuda_agent.bench.agreement import our_side
    from cuda_agent.harness import evaluate

    try:
        return our_side(evaluate(item.task, item.solution, config))
    except Exception as e:  # the harness's own failure: no verdict, redone on resume
        return {"status": "error", "reason": f"harness error: {type(e).__name__}: {e}"[:500]}


def our_prebuild(item: Item, config) -> dict | None:
    """Our verdict where the static checks or the build fail (then no GPU is needed), else None."""
    from cuda_agent.bench.agreement import our_side
    from cuda_agent.harness import prebuild

    try:
        r = prebuild(item.task, item.solution, config)
    except Exception:
        return None  # evaluate meets it again and says why
    return None if r is None else our_side(r)


# ---- the loop ----------------------------------------------------------------------------------

def finished(path: Path) -> set[str]:
    """Rows with a verdict from both sides (a side with none is redone)."""
    from cuda_agent.journal import latest_by, read_rows

    return {k for k, r in latest_by(read_rows(path), "key").items()
            if r["ours"].get("status") in ("pass", "fail") and r["kb"].get("status") in ("pass", "fail")}


def kb_call(kb: kbd.KernelBench, mode: str, item: Item) -> dict:
    """KernelBench's driver on `item`, its files in out/kb/<row>/."""
    return kb.call(mode, kb.out / "kb" / safe(item.key), item.task.code, Path(item.kb_solution))


def build_ahead(items: list[Item], kb: kbd.KernelBench, prebuild: Callable[[Item], dict | None] | None,
                workers: int) -> dict[str, dict]:
    """Both sides' builds of `items`, `workers` at a time: key -> {"ours": verdict or None, "kb": verdict or None}."""
    jobs: dict[tuple[str, str], Any] = {}
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        for item in items:
            if item.kb_solution is not None:
                jobs[(item.key, "kb")] = pool.submit(lambda it=item: kbd.kb_build_verdict(kb_call(kb, "build", it)))
            if prebuild is not None:
                jobs[(item.key, "ours")] = pool.submit(prebuild, item)
    out: dict[str, dict] = {}
    for (key, side), job in jobs.items():
        out.setdefault(key, {})[side] = job.result()
    return out


def judge(item: Item, ours: Callable[[Item], dict], kb: kbd.KernelBench, built: dict) -> dict:
    """One row: our verdict, then KernelBench's, back to back."""
    t0 = time.time()
    mine = built.get("ours") or ours(item)
    if item.kb_solution is None:
        theirs = {"status": "error", "reason": item.note or "KernelBench cannot take this solution"}
    else:
        theirs = built.get("kb") or kbd.kb_side(kb_call(kb, "eval", item))
    return {"key": item.key, "task": item.task.name, "level": item.task.level, "problem_id": item.task.problem_id,
            "solution": str(item.solution), "kb_solution": str(item.kb_solution) if item.kb_solution else None,
            "note": item.note, "ours": mine, "kb": theirs,
            "started": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t0)),
            "seconds": round(time.time() - t0, 3)}


def run_rows(items: list[Item], ours: Callable[[Item], dict], kb: kbd.KernelBench, out: Path, *,
             prebuild: Callable[[Item], dict | None] | None = None, build_workers: int = 0, batch: int = 8,
             max_seconds: float | None = None, on_row: Callable[[dict], None] | None = None) -> bool:
    """Judge every item without a finished row in out/results.jsonl; returns whether all were."""
    from cuda_agent.journal import Journal

    done = finished(out / RESULTS)
    pending = [i for i in items if i.key not in done]
    deadline = time.monotonic() + max_seconds if max_seconds else None
    with Journal(out / RESULTS) as journal:
        while pending:
            chunk, pending = pending[:max(1, batch)], pending[max(1, batch):]
            if deadline and time.monotonic() > deadline:
                return False
            built = build_ahead(chunk, kb, prebuild, build_workers) if build_workers else {}
            for item in chunk:
                if deadline and time.monotonic() > deadline:
                    return False
                row = judge(item, ours, kb, built.get(item.key, {}))
                journal.append(row)
                if on_row:
                    on_row(row)
    return True


def rows_of(out: Path, items: list[Item]) -> list[dict]:
    """The latest row of each item, in the items' order."""
    from cuda_agent.journal import latest_by, read_rows

    latest = latest_by(read_rows(out / RESULTS), "key")
    return [latest[i.key] for i in items if i.key in latest]


# ---- the command -------------------------------------------------------------------------------

def kernelbench_commit(checkout: Path) -> str:
    """The checkout's commit: its KB_COMMIT file (a carried copy) or git."""
    if (checkout / "KB_COMMIT").is_file():
        return (checkout / "KB_COMMIT").read_text().strip()
    r = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else "unknown"


def install_wheels(wheels: Path, site: Path) -> Path | None:
    """The carried wheels unpacked into `site` once (for the driver's PYTHONPATH only); None where
    pip fails (the driver then stands in for pydantic, and each row lists it under "stubs")."""
    if not (site / ".installed").is_file():
        files = sorted(str(p) for p in wheels.glob("*.whl"))
        if files:
            r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                                "--upgrade", "--target", str(site), *files], capture_output=True, text=True)
            if r.returncode != 0:
                print(f"warning: the wheels in {wheels} did not install: {r.stderr.strip()[-500:]}", file=sys.stderr)
                return None
        site.mkdir(parents=True, exist_ok=True)
        (site / ".installed").write_text("\n".join(files) + "\n")
    return site


def describe(args: argparse.Namespace, commit: str) -> dict[str, str]:
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    pinned = "the pinned commit" if commit == PINNED else f"NOT the pinned {PINNED[:12]}"
    return {"date (UTC)": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
            "machine": f"{gpu}, torch {torch.__version__}",
            "KernelBench": f"{commit} ({pinned}), eval_kernel_against_ref: {args.kb_correct_trials} correctness "
                           f"trials, {args.kb_perf_trials} timed trials, cuda_event, fp32; "
                           "speed-up ref_runtime / runtime (means)",
            "ours": f"relaxed policy, {args.device}, timing budget {args.budget} s, baselines timed afresh; "
                    "speed-up eager median / solution median",
            "command": " ".join(sys.argv)}


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description="Our relaxed harness and KernelBench's evaluation on the same "
                                             "solutions, side by side.")
    ap.add_argument("--kernelbench", type=Path, required=True, help="KernelBench checkout (with src/kernelbench)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--hand-written", action="store_true", help="bench_kernelbench.py's device set")
    ap.add_argument("--solutions", type=Path, help="a solutions folder (cuda-agent bench's layouts)")
    ap.add_argument("--cuda-l1", type=Path, help="CUDA-L1's optimized_cuda_code/<gpu>.json")
    ap.add_argument("--limit", type=int, default=None, help="CUDA-L1 rows per level")
    ap.add_argument("--kb-adversarial", action="store_true", help="KernelBench's own adversarial test kernels")
    ap.add_argument("--tasks", type=Path, default=next((p for p in TASKS if p.is_file()), TASKS[-1]))
    ap.add_argument("--levels", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--wheels", type=Path, help="wheels the driver needs (pydantic), unpacked into OUT/kb_site")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--budget", type=float, default=1.0, help="our timing budget per model, seconds")
    ap.add_argument("--our-timeout", type=float, default=300.0)
    ap.add_argument("--kb-correct-trials", type=int, default=5)
    ap.add_argument("--kb-perf-trials", type=int, default=100)
    ap.add_argument("--kb-timeout", type=float, default=300.0, help="seconds for one KernelBench evaluation")
    ap.add_argument("--build-workers", type=int, default=8, help="builds at once ahead of each batch (0: none)")
    ap.add_argument("--batch", type=int, default=8, help="rows built ahead, then judged")
    ap.add_argument("--max-seconds", type=float, default=None, help="start no row after this long")
    ap.add_argument("--shard", default=None, help="K/N: judge only every N-th solution from the K-th (0-based), "
                                                  "for N runs side by side, one a GPU, each with its own --out")
    ap.add_argument("--collect", type=Path, nargs="+", default=[], help="shards' --out folders whose rows go "
                                                                        "into this --out's results first")
    ap.add_argument("--report", action="store_true", help="judge nothing: the table of the rows there are")
    args = ap.parse_args(argv)
    if args.shard is not None:
        m = re.fullmatch(r"(\d+)/(\d+)", args.shard)
        if not m or not int(m[1]) < int(m[2]):
            ap.error(f"--shard {args.shard}: give K/N with 0 <= K < N, such as 0/4")
        args.shard = (int(m[1]), int(m[2]))
    return args


def collect(out: Path, shards: list[Path]) -> int:
    """The shards' latest rows appended to out/results.jsonl where out's latest row of that solution differs
    (a shard's run began from a copy of out's rows); returns how many were added."""
    from cuda_agent.journal import Journal, latest_by, read_rows

    mine = latest_by(read_rows(out / RESULTS), "key")
    added = 0
    with Journal(out / RESULTS) as journal:
        for shard in shards:
            if not (shard / RESULTS).exists():
                print(f"warning: {shard / RESULTS}: no rows (the shard did not run?)", file=sys.stderr)
                continue
            for key, row in latest_by(read_rows(shard / RESULTS), "key").items():
                if mine.get(key) != row:
                    journal.append(row)
                    mine[key] = row
                    added += 1
    return added


def main(argv: list[str] | None = None) -> int:
    from cuda_agent.bench.agreement import classify, markdown, summary_line
    from cuda_agent.harness import EvalConfig, TimingPlan
    from cuda_agent.tasks import load_tasks

    args = parse(argv)
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    tasks = load_tasks(str(args.tasks))
    items: list[Item] = []  # in this order: the cheap rows first, should the run be cut short
    if args.kb_adversarial:
        items += kb_adversarial(args.kernelbench, tasks)
    if args.hand_written:
        items += hand_written(tasks, out)
    if args.solutions:
        items += solutions_dir(args.solutions, [t for t in tasks.tasks if t.level in args.levels], out)
    if args.cuda_l1:
        items += cuda_l1(args.cuda_l1, tasks, args.levels, args.limit, out)
    if not items:
        print("no solutions: give --hand-written, --solutions, --cuda-l1 or --kb-adversarial", file=sys.stderr)
        return 2
    if args.collect:
        print(f"{collect(out, args.collect)} rows collected from {len(args.collect)} shards", flush=True)
    every = items
    if args.shard is not None:
        k, n = args.shard
        items = items[k::n]
    commit = kernelbench_commit(args.kernelbench)
    if commit != PINNED:
        print(f"warning: KernelBench at {commit}, not the pinned {PINNED}", file=sys.stderr)
    meta = describe(args, commit)
    (out / "meta.json").write_text(json.dumps(meta, indent=1))
    config = EvalConfig(device=args.device, policy="relaxed", timing=TimingPlan(budget_s=args.budget),
                        use_baseline_cache=False, timeout_s=args.our_timeout)
    kb = kbd.KernelBench(args.kernelbench, out, timeout_s=args.kb_timeout,
                     settings={"seed": 42, "num_correct_trials": args.kb_correct_trials,
                               "num_perf_trials": args.kb_perf_trials, "timing_method": "cuda_event",
                               "precision": "fp32", "backend": "cuda"},
                     site=install_wheels(args.wheels, out / "kb_site") if args.wheels else None)
    total = len(items)

    def show(row: dict) -> None:
        cls, note = classify(row)
        print(f"{row['key']}: ours {row['ours']['status']}, KernelBench {row['kb']['status']} -> {cls}"
              f"{' (' + note + ')' if note else ''} [{row['seconds']:.0f} s]", flush=True)

    print(f"{total} solutions{f' (shard {args.shard[0]} of {args.shard[1]})' if args.shard else ''}; "
          f"KernelBench {commit[:12]} at {args.kernelbench}", flush=True)
    if args.report:  # the table over every solution, from the rows there are
        items, total = every, len(every)
        complete = {i.key for i in items} <= finished(out / RESULTS)
    else:
        complete = run_rows(items, lambda it: our_verdict(it, config), kb, out,
                            prebuild=lambda it: our_prebuild(it, config), build_workers=args.build_workers,
                            batch=args.batch, max_seconds=args.max_seconds, on_row=show)
    rows = rows_of(out, items)
    (out / "agreement.md").write_text(markdown(rows, meta))
    print((out / "agreement.md").read_text())
    print(summary_line(rows))
    print(f"{len(rows)} of {total} rows" + ("" if complete else "; not finished: run again to go on"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
