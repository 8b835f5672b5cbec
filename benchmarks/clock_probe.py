"""Do the SM clocks explain why a speed-up moves between processes? (issue 24: the demo solution's
paired speed-up read 3.02-3.26x eager and 0.895-1.046x torch.compile over five evaluations on an H100,
each run's standard error 0.02-0.24% and eager's median within 0.1-0.16%: the solution's and compile's
own times move from one process to the next, eager's do not.)

    python benchmarks/clock_probe.py [--procs 8] [--rounds 40] [--json OUT]
    python benchmarks/clock_probe.py --placements 8 --procs 6 --rounds 10   # modes: placement or process?
    python benchmarks/clock_probe.py --harness --procs 10 --rounds 20      # modes with the harness's own timing code?

The demo solution's kernel (benchmarks/solutions/scale_bias_relu_cuda/kernels/sbr.cu) is built once,
then each of --procs fresh processes loads it and times three sides on the demo task's shape (4096 x 2048
float32): the kernel, eager (three kernels) and torch.compile (compiled afresh in every process), each
as a CUDA graph of calls on distinct inputs (about 1 ms a replay), in rounds of shuffled order. Beside
the timing, `nvidia-smi -lms` samples the GPU's SM and memory clocks, power, temperature and the active
clock-event reasons; each sample is matched to the side being timed when it arrived. Printed: per
process, each side's median us/call and the mean SM clock seen while it ran; then the spread of each
side over processes and the correlation of the kernel's time with the SM clock. A spread that follows
the clock says the GPU's boost state, not the timer or the placement (`--placements`, which replaced
placement_probe.py: the same buffers re-made at other addresses within a process), moves the figure.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
KERNEL = REPO / "benchmarks" / "solutions" / "scale_bias_relu_cuda" / "kernels" / "sbr.cu"
ROWS, COLS = 4096, 2048
FIELDS = "clocks.sm,clocks.mem,power.draw,temperature.gpu"
REASONS = ("clocks_event_reasons.active", "clocks_throttle_reasons.active")  # newer drivers, older ones
WRAPPER = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
extern "C" void sbr_launch(const float* x, const float* s, const float* b, float* y, long long rows, long long cols,
                           int config, cudaStream_t stream);
torch::Tensor sbr_forward(torch::Tensor x, torch::Tensor s, torch::Tensor b) {
  auto y = torch::empty_like(x);
  sbr_launch(x.data_ptr<float>(), s.data_ptr<float>(), b.data_ptr<float>(), y.data_ptr<float>(), x.size(0), x.size(1),
             0, c10::cuda::getCurrentCUDAStream().stream());
  return y;
}
"""


def build(build_dir: Path):
    from torch.utils.cpp_extension import load_inline

    build_dir.mkdir(parents=True, exist_ok=True)
    return load_inline("clock_probe_sbr", cpp_sources=[WRAPPER], cuda_sources=[KERNEL.read_text()],
                       functions=["sbr_forward"], build_directory=str(build_dir), verbose=False)


class Clocks:
    """`nvidia-smi -lms` in the background; each sample tagged with the side being timed when it came."""

    def __init__(self, uuid: str, every_ms: int = 20):
        self.side = "idle"
        self.samples: list[tuple[str, list[str]]] = []
        query = FIELDS
        for field in REASONS:  # the first name this driver knows
            try:
                ok = subprocess.run(["nvidia-smi", "-i", uuid, f"--query-gpu={FIELDS},{field}", "--format=csv"],
                                    capture_output=True, timeout=30).returncode == 0
            except (FileNotFoundError, subprocess.TimeoutExpired):
                ok = False
            if ok:
                query = f"{FIELDS},{field}"
                break
        try:
            self.proc = subprocess.Popen(["nvidia-smi", "-i", uuid, f"--query-gpu={query}",
                                          "--format=csv,noheader,nounits", f"-lms={every_ms}"],
                                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except FileNotFoundError:
            self.proc = None
            return
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.samples.append((self.side, [f.strip() for f in line.split(",")]))

    def stop(self) -> None:
        if self.proc:
            self.proc.terminate()
            self.proc.wait()

    def summary(self, side: str) -> dict:
        rows = [f for s, f in self.samples if s == side]
        def num(i):
            vals = []
            for f in rows:
                try:
                    vals.append(float(f[i]))
                except (ValueError, IndexError):
                    pass
            return vals
        sm, mem, power, temp = num(0), num(1), num(2), num(3)
        reasons = sorted({f[4] for f in rows if len(f) > 4})
        mean = lambda v: round(statistics.fmean(v), 1) if v else None
        return {"samples": len(rows), "sm_mhz": mean(sm), "sm_min": min(sm, default=None),
                "sm_max": max(sm, default=None), "mem_mhz": mean(mem), "power_w": mean(power),
                "temp_c": mean(temp), "event_reasons": reasons}


def replay_us(replay, calls: int, flush=None) -> float:
    """Microseconds a call of one graph replay (`calls` calls), between two events; the L2 read through first
    where `flush` (a buffer) is given."""
    import torch

    if flush is not None:
        flush.sum()
    a, z = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    replay()
    z.record()
    z.synchronize()
    return a.elapsed_time(z) * 1000 / calls


def capture(fn, xs: list, warm: int = 1):
    """A CUDA graph of `fn` over every input of `xs` (after `warm` calls on a side stream), and its outputs."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for x in xs[:warm]:
            fn(x)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        outs = [fn(x) for x in xs]
    return g, outs


def run_child(i: int, a, *extra: str) -> dict | None:
    """One fresh process of the probe (`--child i`), its JSON line; None (and a table row) when it failed."""
    p = subprocess.run([sys.executable, __file__, "--child", str(i), "--rounds", str(a.rounds),
                        "--build-dir", str(a.build_dir), *extra], capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        print(f"| {i} | failed: {p.stderr.strip().splitlines()[-1:]} |")
        return None
    return json.loads(p.stdout.strip().splitlines()[-1])


def child(build_dir: Path, rounds: int, seed: int) -> dict:
    import torch

    ext = build(build_dir)
    torch.manual_seed(0)
    calls = 8
    xs = [torch.randn(ROWS, COLS, device="cuda") for _ in range(calls)]
    s, b = torch.randn(COLS, device="cuda"), torch.randn(COLS, device="cuda")
    eager = lambda x: torch.relu(x * s + b)
    t0 = time.perf_counter()
    compiled = torch.compile(eager)
    compiled(xs[0])
    compile_s = time.perf_counter() - t0
    sides = {"kernel": lambda x: ext.sbr_forward(x, s, b), "eager": eager, "compile": compiled}
    ref = eager(xs[1])
    for name, fn in sides.items():
        assert torch.allclose(fn(xs[1]), ref, atol=1e-5), f"{name} disagrees with eager"
    graphs = {name: capture(fn, xs, warm=3) for name, fn in sides.items()}
    props = torch.cuda.get_device_properties(0)
    clocks = Clocks(f"GPU-{props.uuid}" if not str(props.uuid).startswith("GPU-") else str(props.uuid))
    time.sleep(0.2)
    times = {name: [] for name in sides}
    order = list(sides)
    rng = random.Random(seed)
    for name in order:  # warm-up: a few replays each
        for _ in range(20):
            graphs[name][0].replay()
    torch.cuda.synchronize()
    for _ in range(rounds):
        rng.shuffle(order)
        for name in order:
            clocks.side = name
            g = graphs[name][0]
            times[name].append(statistics.median(replay_us(g.replay, calls) for _ in range(10)))
        clocks.side = "idle"
    time.sleep(0.1)
    clocks.stop()
    out = {"pid": os.getpid(), "compile_s": round(compile_s, 2), "sides": {}}
    for name, ts in times.items():
        ts.sort()
        q = lambda p: ts[min(len(ts) - 1, int(p * len(ts)))]
        out["sides"][name] = {"median_us": round(statistics.median(ts), 3),
                              "iqr_rel": round((q(0.75) - q(0.25)) / statistics.median(ts), 5),
                              "clocks": clocks.summary(name)}
    return out


def placements_child(build_dir: Path, placements: int, rounds: int, seed: int) -> dict:
    """The kernel and eager, graphs of 12 calls as the harness makes them, re-made `placements` times in one
    process, each time after a spacer of another size (inputs, scale and bias land elsewhere), the L2 read
    through before each replay: does the kernel's time move between placements within a process as much as
    between processes? (issue 24: the solution's median took one of two values per evaluation on an H100,
    24.65 or 26.0-26.1 us.)"""
    import torch

    ext = build(build_dir)
    rng = random.Random(seed)
    flush = torch.empty(2 * torch.cuda.get_device_properties(0).L2_cache_size, dtype=torch.int8, device="cuda")
    out = []
    for _ in range(placements):
        spacer = torch.empty(rng.randrange(0, 512) << 18, device="cuda")   # 0-511 MB of floats
        xs = [torch.randn(ROWS, COLS, device="cuda") for _ in range(12)]
        sc, bi = torch.randn(COLS, device="cuda"), torch.randn(COLS, device="cuda")
        sides = {"kernel": lambda x: ext.sbr_forward(x, sc, bi), "eager": lambda x: torch.relu(x * sc + bi)}
        graphs = {name: capture(fn, xs) for name, fn in sides.items()}
        times: dict[str, list[float]] = {name: [] for name in sides}
        for _ in range(rounds):
            for name in rng.sample(list(sides), len(sides)):
                for _ in range(5):
                    times[name].append(replay_us(graphs[name][0].replay, 12, flush))
        out.append({name: round(statistics.median(t), 3) for name, t in times.items()})
        del graphs, xs, spacer
        torch.cuda.empty_cache()
    return {"pid": os.getpid(), "placements": out}


def placements_main(a) -> None:
    import torch

    build(a.build_dir)
    print(f"# clock_probe --placements {a.placements}: {torch.cuda.get_device_name()}, {a.procs} processes")
    print("| proc | kernel us by placement | min-max | eager us min-max |")
    print("|--:|---|--:|--:|")
    runs = []
    for i in range(a.procs):
        r = run_child(i, a, "--placements", str(a.placements))
        if r is None:
            continue
        runs.append(r)
        k = [x["kernel"] for x in r["placements"]]
        e = [x["eager"] for x in r["placements"]]
        print(f"| {i} | {' '.join(f'{v:.2f}' for v in k)} | {min(k):.2f}-{max(k):.2f} ({max(k) / min(k) - 1:.1%}) | "
              f"{min(e):.2f}-{max(e):.2f} ({max(e) / min(e) - 1:.1%}) |")
    within = [max(x["kernel"] for x in r["placements"]) / min(x["kernel"] for x in r["placements"]) - 1 for r in runs]
    medians = [statistics.median(x["kernel"] for x in r["placements"]) for r in runs]
    summary = {"device": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d"), "procs": a.procs,
               "placements": a.placements, "runs": runs,
               "kernel_within_process_spread_max": round(max(within), 4) if within else None,
               "kernel_between_process_spread_of_medians": round(max(medians) / min(medians) - 1, 4) if medians else None}
    print(f"\nkernel: spread within a process (worst) {summary['kernel_within_process_spread_max']}, "
          f"between processes' medians {summary['kernel_between_process_spread_of_medians']}")
    if a.json:
        a.json.write_text(json.dumps(summary, indent=1))


VARIANTS = ("harness", "static", "nospin")


def harness_child(build_dir: Path, rounds: int, seed: int) -> dict:
    """The kernel, eager and torch.compile timed in this process by the harness's own code (measure.graphs.Graph
    of 12 calls, measure.timing.CallTimer: L2 read through, synchronize, a 0.2 ms spin, events around a replay)
    three ways, interleaved in shuffled rounds: `harness` (every call's inputs drawn afresh and loaded before each
    replay, as the solution's child does), `static` (the same without the loading) and `nospin` (loading, the L2
    read through and events, no synchronize or spin: the probe's own way). Issue 24: the harness read the demo
    solution at 24.66 or ~26.0 us per process, torch.compile at 23.7 or ~25.0, eager steady; the probe's own
    timing found no such modes. Which of the harness's steps, outside its sandbox, brings them?"""
    import torch

    sys.path.insert(0, str(REPO / "src"))
    from cuda_agent.measure import CallTimer, Graph, TimingPlan

    ext = build(build_dir)
    device = torch.device("cuda")
    gen = torch.Generator(device="cuda").manual_seed(seed)
    draw = lambda: [torch.randn(ROWS, COLS, device="cuda", generator=gen)]  # noqa: E731
    s, b = torch.randn(COLS, device="cuda", generator=gen), torch.randn(COLS, device="cuda", generator=gen)
    eager = lambda x: torch.relu(x * s + b)  # noqa: E731
    compiled = torch.compile(eager)
    compiled(draw()[0])
    sides = {"kernel": lambda x: ext.sbr_forward(x, s, b), "eager": eager, "compile": compiled}
    graphs = {name: Graph(fn, [draw() for _ in range(12)]) for name, fn in sides.items()}
    timer = CallTimer(device, TimingPlan())
    rng = random.Random(seed)
    times: dict[str, list[float]] = {f"{n}/{v}": [] for n in sides for v in VARIANTS}

    def once(name: str, variant: str) -> float:
        graph = graphs[name]
        if variant != "static":
            for j in range(graph.calls):
                graph.load(j, draw())
        if variant == "nospin":
            return replay_us(graph.replay, graph.calls, timer.flush)
        return timer(graph.replay, [])[0].device_ms * 1000 / graph.calls

    for name in sides:  # warm-up
        for variant in VARIANTS:
            once(name, variant)
    for _ in range(rounds):
        for key in rng.sample(list(times), len(times)):
            name, variant = key.split("/")
            times[key] += [once(name, variant) for _ in range(3)]
    return {"pid": os.getpid(), "median_us": {k: round(statistics.median(v), 3) for k, v in times.items()}}


def harness_main(a) -> None:
    import torch

    build(a.build_dir)
    print(f"# clock_probe --harness: {torch.cuda.get_device_name()}, {a.procs} processes x {a.rounds} rounds")
    keys = [f"{n}/{v}" for n in ("kernel", "compile", "eager") for v in VARIANTS]
    print("| proc | " + " | ".join(keys) + " |")
    print("|--:|" + "--:|" * len(keys))
    runs = []
    for i in range(a.procs):
        r = run_child(i, a, "--harness")
        if r is None:
            continue
        runs.append(r)
        print(f"| {i} | " + " | ".join(f"{r['median_us'][k]:.2f}" for k in keys) + " |")
    spread = {k: round(max(r["median_us"][k] for r in runs) / min(r["median_us"][k] for r in runs) - 1, 4)
              for k in keys} if runs else {}
    print("| spread | " + " | ".join(f"{spread[k]:.2%}" for k in keys) + " |" if runs else "no process finished")
    if a.json:
        a.json.write_text(json.dumps({"device": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d"),
                                      "procs": a.procs, "rounds": a.rounds, "runs": runs, "spread": spread}, indent=1))


def pearson(xs: list[float], ys: list[float]) -> float | None:
    if len(xs) < 3 or len(set(xs)) < 2 or len(set(ys)) < 2:
        return None
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    cov = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    return round(cov / (sum((x - mx) ** 2 for x in xs) * sum((y - my) ** 2 for y in ys)) ** 0.5, 3)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--procs", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--build-dir", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "clock_probe_build")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--placements", type=int, default=0,
                    help="instead: the kernel and eager re-made N times per process at other addresses (no clocks)")
    ap.add_argument("--harness", action="store_true",
                    help="instead: the three sides timed by the harness's own Graph and CallTimer, three ways")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child is not None:
        r = (placements_child(a.build_dir, a.placements, a.rounds, a.child) if a.placements
             else harness_child(a.build_dir, a.rounds, a.child) if a.harness
             else child(a.build_dir, a.rounds, a.child))
        print(json.dumps(r))
        return
    if a.placements:
        placements_main(a)
        return
    if a.harness:
        harness_main(a)
        return
    import torch

    build(a.build_dir)  # once, so that no child builds
    device = torch.cuda.get_device_name()
    print(f"# clock_probe: {device}, torch {torch.__version__}, {a.procs} processes x {a.rounds} rounds")
    print("| proc | kernel us | SM MHz | eager us | SM MHz | compile us | SM MHz | power W | temp C | reasons |")
    print("|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|")
    runs = []
    for i in range(a.procs):
        r = run_child(i, a)
        if r is None:
            continue
        runs.append(r)
        k, e, c = (r["sides"][n] for n in ("kernel", "eager", "compile"))
        reasons = ",".join(sorted(set(k["clocks"]["event_reasons"] + c["clocks"]["event_reasons"])))
        print(f"| {i} | {k['median_us']:.2f} | {k['clocks']['sm_mhz']} | {e['median_us']:.2f} | "
              f"{e['clocks']['sm_mhz']} | {c['median_us']:.2f} | {c['clocks']['sm_mhz']} | "
              f"{k['clocks']['power_w']} | {k['clocks']['temp_c']} | {reasons} |")
    summary = {"device": device, "date": time.strftime("%Y-%m-%d"), "procs": a.procs, "rounds": a.rounds,
               "runs": runs, "spread": {}, "corr_time_vs_sm_clock": {}}
    for n in ("kernel", "eager", "compile"):
        med = [r["sides"][n]["median_us"] for r in runs]
        clk = [r["sides"][n]["clocks"]["sm_mhz"] for r in runs]
        if med:
            summary["spread"][n] = round(max(med) / min(med) - 1, 4)
            summary["corr_time_vs_sm_clock"][n] = pearson(med, [c for c in clk if c is not None]) \
                if all(c is not None for c in clk) else None
    ratio = [r["sides"]["eager"]["median_us"] / r["sides"]["kernel"]["median_us"] for r in runs]
    ratio_c = [r["sides"]["compile"]["median_us"] / r["sides"]["kernel"]["median_us"] for r in runs]
    if ratio:
        summary["spread"]["speedup_vs_eager"] = round(max(ratio) / min(ratio) - 1, 4)
        summary["spread"]["speedup_vs_compile"] = round(max(ratio_c) / min(ratio_c) - 1, 4)
    print("\nspread over processes (max/min - 1): " +
          ", ".join(f"{k} {v:.2%}" for k, v in summary["spread"].items()))
    print(f"correlation of median time with mean SM clock: {summary['corr_time_vs_sm_clock']}")
    if a.json:
        a.json.write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
