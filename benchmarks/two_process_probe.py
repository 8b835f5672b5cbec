"""Issue 24: do the one-sided per-evaluation modes come from two processes sharing the GPU as the harness's
two do? The modes (a memory-bound side 5-8% slow for a whole evaluation, eager never) were seen only where the
harness runs; one plain process showed none (clock_probe, graph_instance_probe, placement_probe).

Each "evaluation" starts two fresh processes, as the harness starts the solution's child and the reference
worker: S times relu(x * scale + bias) compiled by torch.compile (the stand-in for a solution's fused kernel),
R times the same eagerly and compiled. Each captures graphs of 12 calls on inputs of its own and, when told,
times a window of replays (the L2 emptied before each). The parent drives rounds as paired.py does: S's window
first or last by a coin, R's two windows together; with --stop S is stopped (SIGSTOP) during R's windows, as
the harness stops the solution's processes. By default both time through the harness's own CallServer (the
demo task's model, inputs drawn by seed, graphs of as many calls as R picks, the CallTimer); `--simple`: the
probe's own loop. Printed per evaluation: each side's median us per call.

    python benchmarks/two_process_probe.py --evals 8 [--stop] [--simple] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import signal
import statistics
import time


def worker(conn, sides: list[str], seed: int) -> None:
    import torch

    torch.manual_seed(seed)
    dev = torch.device("cuda")
    scale, bias = torch.randn(2048, device=dev), torch.randn(2048, device=dev)
    fns = {"eager": lambda x: torch.relu(x * scale + bias)}
    if "compile" in sides:
        fns["compile"] = torch.compile(lambda x: torch.relu(x * scale + bias))
    flush = torch.empty(256 * 2**20 // 4, device=dev)
    stream = torch.cuda.Stream()
    graphs, inputs, keep = {}, {}, []
    fresh = torch.randn(4096, 2048, device=dev)
    with torch.no_grad():
        for side in sides:
            xs = [torch.randn(4096, 2048, device=dev) for _ in range(12)]
            with torch.cuda.stream(stream):
                fns[side](xs[0])
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, stream=stream):
                keep.append([fns[side](x) for x in xs])
            inputs[side] = xs
            graphs[side] = g
    conn.send("ready")
    while True:
        msg = conn.recv()
        if msg is None:
            return
        side, k = msg
        out = []
        for _ in range(k):
            for x in inputs[side]:  # loaded before each replay, as the harness loads new input sets
                x.copy_(fresh)
            flush.zero_()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            graphs[side].replay()
            e.record()
            e.synchronize()
            out.append(s.elapsed_time(e) * 1000 / 12)
        conn.send(out)


def harness_worker(conn, sides: list[str], seed: int, device: str = "cuda") -> None:
    """The same, through the harness's own code: the demo task's model, its inputs drawn by seed
    (make_inputs), CallServer's graphs and CallTimer (the L2 reset and flush, the spin, the
    synchronize pairs), as the solution's child and the reference worker time."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
    import torch

    from cuda_agent.harness.workers.calls import CallServer
    from cuda_agent.measure import TimingPlan, call_seed, make_model, module_from_source
    from cuda_agent.tasks import load_task

    dev = torch.device(device)
    task = module_from_source(load_task("scale_bias_relu").code, "reference", "model.py")
    model = make_model(task.Model, task, seed, dev)
    fns = {side: (model if side == "eager" else torch.compile(model)) for side in sides}
    server = CallServer(fns, task, dev, TimingPlan(), as_timing_thread=True)
    with torch.no_grad():
        for side in sides:  # compiled by a first call, as the reference's compile step does
            server.call(seed, side, keep=False)
        calls = conn.recv()  # None: this process picks the calls a graph holds (the reference does); 0: per call
        got = server.capture(seed, calls) if calls != 0 else {}
        per = got["calls"] if got.get("captured") else 0
        conn.send(per)
        n = 0
        while (msg := conn.recv()) is not None:
            side, k = msg
            out = []
            for _ in range(k):
                n += 1
                out.append(server.call(call_seed(seed, n), side, keep=False)["t"][0] * 1000 / max(per, 1))
            conn.send(out)


def evaluation(ctx, stop: bool, rounds: int, warm: int, k: int, rng: random.Random, harness: bool,
               device: str = "cuda") -> dict:
    pipes, procs = {}, {}
    for name, sides in (("S", ["compile"]), ("R", ["eager", "compile"])):
        parent, child = ctx.Pipe()
        args = (child, sides, rng.randrange(1 << 30)) + ((device,) if harness else ())
        p = ctx.Process(target=harness_worker if harness else worker, args=args)
        p.start()
        pipes[name], procs[name] = parent, p
    if harness:  # the reference picks how many calls a graph holds, the solution's child captures as many
        pipes["R"].send(None)
        calls = pipes["R"].recv()
        pipes["S"].send(calls)
        assert pipes["S"].recv() == calls, "the two processes did not capture alike"
    else:
        for c in pipes.values():
            assert c.recv() == "ready"
    figures = {("S", "compile"): [], ("R", "eager"): [], ("R", "compile"): []}

    def window(name: str, side: str, timed: bool) -> None:
        pipes[name].send((side, k))
        got = pipes[name].recv()
        if timed:
            figures[(name, side)].append(statistics.median(got))

    for r in range(warm + rounds):
        timed = r >= warm
        s_first = rng.random() < 0.5
        if s_first:
            window("S", "compile", timed)
        if stop:
            os.kill(procs["S"].pid, signal.SIGSTOP)
        try:
            for side in rng.sample(["eager", "compile"], 2):
                window("R", side, timed)
        finally:
            if stop:
                os.kill(procs["S"].pid, signal.SIGCONT)
        if not s_first:
            window("S", "compile", timed)
    for name, c in pipes.items():
        c.send(None)
        procs[name].join(30)
    return {f"{n}.{s}": round(statistics.median(v), 3) for (n, s), v in figures.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--evals", type=int, default=8)
    ap.add_argument("--stop", action="store_true", help="SIGSTOP the S process during R's windows")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--warm", type=int, default=3)
    ap.add_argument("--window", type=int, default=6)
    ap.add_argument("--simple", action="store_true",
                    help="the probe's own loop (flush, events, replay) instead of the harness's CallServer")
    ap.add_argument("--device", default="cuda", help="cpu: the plumbing only (no graphs; timed per call)")
    ap.add_argument("--json")
    a = ap.parse_args()
    ctx = mp.get_context("spawn")
    rng = random.Random(1)
    rows = []
    print(f"# two_process_probe: {a.evals} evaluations, stop={a.stop}, {'simple loop' if a.simple else 'CallServer'}, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print("| eval | S compile us | R eager us | R compile us |\n|--:|--:|--:|--:|", flush=True)
    for i in range(a.evals):
        row = evaluation(ctx, a.stop, a.rounds, a.warm, a.window, rng, not a.simple, a.device)
        rows.append(row)
        print(f"| {i + 1} | {row['S.compile']} | {row['R.eager']} | {row['R.compile']} |", flush=True)
    spread = {k: round(100 * (max(r[k] for r in rows) / min(r[k] for r in rows) - 1), 2) for k in rows[0]}
    print(f"| spread % | {spread['S.compile']} | {spread['R.eager']} | {spread['R.compile']} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"stop": a.stop, "harness": not a.simple, "rows": rows, "spread_pct": spread}, f, indent=1)


if __name__ == "__main__":
    main()
