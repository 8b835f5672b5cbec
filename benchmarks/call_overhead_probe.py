"""Issue 27: where a timed request's seconds go on the worker's side. A paired run of the demo task on
an H100 made about 180 replay requests in 1.4 s (about 7.7 ms each) where the GPU work is about 1 ms
a request. Here, in one process, the reference worker's CallServer (the code every timed request
runs) times the demo task's eager model by graph replays as the harness does, `--calls` requests,
with the wall time of each part: drawing the 12 calls' inputs, loading them into the graph, and the
CallTimer's call (flush, synchronizes, spin, replay); then cProfile's top entries over the same.

    python benchmarks/call_overhead_probe.py [--device cuda] [--calls 60]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--calls", type=int, default=60)
    a = ap.parse_args()
    import torch

    from cuda_agent.harness.workers.calls import CallServer
    from cuda_agent.measure import TimingPlan, call_seed, make_inputs, make_model, module_from_source
    from cuda_agent.tasks import load_task

    dev = torch.device(a.device)
    task = module_from_source(load_task("scale_bias_relu").code, "reference", "model.py")
    model = make_model(task.Model, task, 1, dev)
    server = CallServer({"eager": model}, task, dev, TimingPlan(), as_timing_thread=True)
    with torch.no_grad():
        print("capture:", server.capture(7, None))
        graph = server.graphs.get("eager")
        parts: dict[str, list[float]] = {"request": [], "draw": [], "load": [], "timer": []}
        for i in range(a.calls):
            t0 = time.perf_counter()
            server.call(1000 + i, "eager", keep=False)
            parts["request"].append(time.perf_counter() - t0)
            if graph is not None:  # the same steps, taken apart
                t0 = time.perf_counter()
                sets = [make_inputs(task, call_seed(2000 + i, j), dev) for j in range(graph.calls)]
                t1 = time.perf_counter()
                for j, s in enumerate(sets):
                    graph.load(j, s)
                if dev.type == "cuda":
                    torch.cuda.synchronize()
                t2 = time.perf_counter()
                server.timer(graph.replay, [])
                t3 = time.perf_counter()
                parts["draw"].append(t1 - t0)
                parts["load"].append(t2 - t1)
                parts["timer"].append(t3 - t2)
        prof = cProfile.Profile()
        prof.enable()
        for i in range(a.calls):
            server.call(5000 + i, "eager", keep=False)
        prof.disable()
    print(f"# call_overhead_probe: {torch.cuda.get_device_name() if dev.type == 'cuda' else 'cpu'}, "
          f"graph of {graph.calls if graph else 0} calls, {a.calls} requests")
    print("| part | median ms | mean ms |\n|---|--:|--:|")
    for k, v in parts.items():
        if v:
            print(f"| {k} | {1000 * statistics.median(v):.3f} | {1000 * statistics.mean(v):.3f} |")
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(18)
    print(out.getvalue()[-5000:])


if __name__ == "__main__":
    main()
