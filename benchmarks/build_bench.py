"""Build benchmark: our cached ninja build against torch.utils.cpp_extension.load into an empty
build folder (what the reference layout's utils/compile.py does on every compile).

    python benchmarks/build_bench.py [--device cuda|cpu] [--repeat N] [--json OUT]

Scenarios on the workspace example kernel (kernels_cuda on cuda, kernels_cpu on cpu):
- cold build: an empty cache, the first build ever; it also builds the precompiled torch header of
  the binding file (beside the compiles, which do not wait for it) and waits for it to finish;
- cold build, PCH cached: a cache that holds only that precompiled header (warm_pch), as for a new
  solution; every object is compiled;
- edit the binding file, edit one kernel: a rebuild after changing kernels/relu_binding.cpp, or the
  kernel file (relu.cu / relu.cpp);
- unchanged (cache hit).
Each build runs in a fresh interpreter (as each compile of the reference layout does), timed from
sources to an imported module, after `import torch`; ours with precompiled headers, ours without
them (CUDA_AGENT_PCH=0, caches of its own) and torch's load, all in the same run.
Prints a markdown table with seconds and ratios, and what building the precompiled header cost.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

SCENARIOS = ("cold build", "cold build, PCH cached", "edit the binding file", "edit one kernel",
             "unchanged (cache hit)")


def make_workspace(dest: Path, device: str) -> Path:
    """The build-relevant files of a fresh workspace: binding files and the example kernel."""
    from cuda_agent.workspace import TEMPLATES

    (dest / "kernels").mkdir(parents=True)
    for name in ("binding.cpp", "binding_registry.h"):
        shutil.copyfile(TEMPLATES / name, dest / name)
    for f in sorted((TEMPLATES / f"kernels_{device}").iterdir()):
        shutil.copyfile(f, dest / "kernels" / f.name)
    return dest


def edit(ws: Path, name: str) -> None:
    path = ws / "kernels" / name
    path.write_text(path.read_text() + f"\n// edited {time.time_ns()}\n")


OURS = """
import json, sys, time
from pathlib import Path
import torch
from cuda_agent.devices import Backend
from cuda_agent.harness.build.extension import build, load_module
from cuda_agent.harness.build.sources import workspace_sources
ws, device, arch, cache = sys.argv[1:5]
backend = Backend(device, arch=arch or None)
t0 = time.perf_counter()
result = build(workspace_sources(Path(ws), backend), backend, cache_dir=Path(cache))
if result.ok:
    load_module(result)
print(json.dumps({"seconds": time.perf_counter() - t0, "ok": result.ok, "errors": result.errors,
                  "compiled": result.compiled, "cached": result.cached}))
"""

WARM = """
import json, sys, time
from pathlib import Path
import torch
from cuda_agent.devices import Backend
from cuda_agent.harness.build.extension import warm_pch
device, arch, cache = sys.argv[1:4]
t0 = time.perf_counter()
notes = warm_pch(Backend(device, arch=arch or None), Path(cache))
print(json.dumps({"seconds": time.perf_counter() - t0, "notes": notes}))
"""

TORCH = """
import json, sys, time
import torch
from torch.utils.cpp_extension import load
build_dir, *sources = sys.argv[1:]
t0 = time.perf_counter()
load(name="cuda_extension", sources=sources, build_directory=build_dir, verbose=False,
     extra_cflags=["-O3", "-std=c++17"], extra_cuda_cflags=["-O3", "--use_fast_math"])
print(json.dumps({"seconds": time.perf_counter() - t0}))
"""


def in_child(script: str, *args: str, env: dict | None = None) -> dict:
    """Run `script` in a fresh interpreter, as each compile of the reference layout does, and return
    what it prints; the timing inside excludes interpreter start and `import torch` on both sides."""
    out = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True,
                         env={**os.environ, **(env or {})})
    if out.returncode != 0:
        raise SystemExit(f"benchmark child failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def time_ours(ws: Path, backend, cache: Path, pch: bool = True) -> tuple[float, dict]:
    report = in_child(OURS, str(ws), backend.device, backend.arch or "", str(cache),
                      env=None if pch else {"CUDA_AGENT_PCH": "0"})
    if not report["ok"]:
        raise SystemExit(f"our build failed:\n{report['errors']}")
    return report["seconds"], {"compiled": report["compiled"], "cached": report["cached"]}


def time_torch(ws: Path, scratch: Path) -> float:
    """torch's load() of every .cu/.cpp in the root and kernels/, into an empty build folder."""
    patterns = ("*.cu", "*.cpp", "kernels/*.cu", "kernels/*.cpp")
    sources = sorted(str(p) for pattern in patterns for p in ws.glob(pattern))
    build_dir = tempfile.mkdtemp(dir=scratch, prefix="torch-")
    return in_child(TORCH, build_dir, *sources)["seconds"]


def warm_cache(backend, cache: Path) -> dict:
    """A new cache holding only the precompiled header(s) of the example's binding file; its cost."""
    report = in_child(WARM, backend.device, backend.arch or "", str(cache))
    sizes = [f.stat().st_size for f in (cache / "pch").glob("*/pch.h.gch")]
    if not sizes:
        raise SystemExit(f"warm_pch built nothing:\n{report['notes']}")
    return {"pch_s": report["seconds"], "pch_mb": sum(sizes) / 1e6}


def run(device: str, repeat: int = 1) -> dict:
    """Each scenario `repeat` times (a fresh cache for each cold build, a new edit for each rebuild);
    the table shows medians."""
    from rich.console import Console

    from cuda_agent.devices import Backend, resolve_backend

    backend = resolve_backend("cuda") if device == "cuda" else Backend("cpu")
    console = Console(stderr=True)
    rows, pch = [], []
    kernel = "relu.cu" if device == "cuda" else "relu.cpp"
    with tempfile.TemporaryDirectory(prefix="build_bench-") as tmp:
        scratch = Path(tmp)
        ws = make_workspace(scratch / "ws", device)
        for scenario in SCENARIOS:
            ours_s, plain_s, torch_s = [], [], []
            for i in range(repeat):
                if scenario == "cold build":
                    cache, plain_cache = scratch / f"cache{i}", scratch / f"no_pch_cache{i}"
                if scenario == "cold build, PCH cached":
                    cache, plain_cache = scratch / f"pch_only{i}", scratch / f"no_pch_empty{i}"
                    with console.status(f"{scenario} ({i + 1}/{repeat}): precompiling the binding's headers"):
                        pch.append(warm_cache(backend, cache))
                if scenario.startswith("edit"):
                    edit(ws, "relu_binding.cpp" if "binding" in scenario else kernel)
                with console.status(f"{scenario} ({i + 1}/{repeat}): ours"):
                    seconds, counts = time_ours(ws, backend, cache)
                    ours_s.append(seconds)
                with console.status(f"{scenario} ({i + 1}/{repeat}): ours without precompiled headers"):
                    plain_s.append(time_ours(ws, backend, plain_cache, pch=False)[0])
                with console.status(f"{scenario} ({i + 1}/{repeat}): torch load (empty build folder)"):
                    torch_s.append(time_torch(ws, scratch))
                console.log(f"{scenario}: ours {ours_s[-1]:.3f}s ({counts['compiled']} compiled), "
                            f"without PCH {plain_s[-1]:.3f}s, torch {torch_s[-1]:.1f}s")
            ours, plain, theirs = (statistics.median(x) for x in (ours_s, plain_s, torch_s))
            rows.append({"scenario": scenario, "ours_s": ours, "no_pch_s": plain, "torch_s": theirs,
                         "pch_speedup": plain / ours, "ours_over_torch": ours / theirs, "speedup": theirs / ours,
                         "ours_runs_s": ours_s, "no_pch_runs_s": plain_s, "torch_runs_s": torch_s, **counts})
    return {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "device": device_name(device),
            "backend": {"device": backend.device, "arch": backend.arch}, "versions": versions(device),
            "repeat": repeat, "rows": rows, "pch": {"seconds": statistics.median(p["pch_s"] for p in pch),
                                                    "mb": pch[0]["pch_mb"]}}


def device_name(device: str) -> str:
    if device == "cuda":
        import torch

        return torch.cuda.get_device_name()
    import os

    return f"{platform.processor() or platform.machine()}, {len(os.sched_getaffinity(0))} cores"


def versions(device: str) -> dict:
    import torch

    from cuda_agent.harness.build.toolchain import compiler_version, find_cxx, find_ninja, find_nvcc

    found = {"torch": torch.__version__, "python": platform.python_version(),
             "cxx": compiler_version(find_cxx()).splitlines()[0],
             "ninja": subprocess.run([find_ninja(), "--version"], capture_output=True, text=True).stdout.strip()}
    if device == "cuda":
        found["nvcc"] = next(line for line in compiler_version(find_nvcc()).splitlines() if "release" in line)
    return found


def table(report: dict) -> str:
    lines = [f"Build benchmark, {report['date']}, {report['device']}, torch {report['versions']['torch']}, "
             f"median of {report['repeat']}", "",
             "| scenario | ours (s) | compiled | ours without PCH (s) | PCH speed-up | torch load (s) | ours / torch "
             "| speed-up |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in report["rows"]:
        lines.append(f"| {r['scenario']} | {r['ours_s']:.3f} | {r['compiled']} | {r['no_pch_s']:.3f} | "
                     f"{r['pch_speedup']:.2f}x | {r['torch_s']:.2f} | {r['ours_over_torch']:.3f} | "
                     f"{r['speedup']:.1f}x |")
    lines += ["", f"The binding file's precompiled header, built alone (warm_pch): {report['pch']['seconds']:.1f} s, "
                  f"{report['pch']['mb']:.0f} MB in the cache; the cold build makes it beside its compiles."]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=("cuda", "cpu"), default=None, help="default: cuda where a GPU is present")
    ap.add_argument("--repeat", type=int, default=1, help="runs per scenario; the table shows medians")
    ap.add_argument("--json", type=Path, default=None, help="also write the numbers here")
    args = ap.parse_args()
    from cuda_agent.devices import default_device

    report = run(args.device or default_device(), args.repeat)
    print(table(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
