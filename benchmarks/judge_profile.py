"""Where an evaluation's per-call and per-set time goes on the demo task, in one process: drawing
the inputs, a timed call through the worker's CallServer, the input sets made from a drawn one
(near duplicate, shifted) and the reference worker's fingerprints. Compare with the harness's
per-call overhead that `benchmarks/judge_bench.py` reports (watch.overhead_ms).

    python3 benchmarks/judge_profile.py --device cuda
"""

from __future__ import annotations

import argparse
import time

import torch


def ms(fn, n: int = 50) -> float:
    fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    from cuda_agent.measure import NEAR, SHIFTED, TimingPlan, make_inputs, make_model, varied_inputs
    from cuda_agent.harness.workers.calls import CallServer
    from cuda_agent.harness.workers.fingerprints import Fingerprints
    from cuda_agent.harness.workers.runtime import flatten_outputs
    from cuda_agent.tasks import load_task
    from cuda_agent.measure import module_from_source

    dev = torch.device(args.device)
    task = module_from_source(load_task("scale_bias_relu").code, "t", "model.py")
    model = make_model(task.Model, task, 1, dev)
    server = CallServer(model, task, dev, TimingPlan())
    seeds = iter(range(10**6))
    out = flatten_outputs(model(*make_inputs(task, 1, dev)))
    prints = Fingerprints()
    rows = {
        "make_inputs": ms(lambda: make_inputs(task, next(seeds), dev)),
        "CallServer.call (draw + flush + spin + call + syncs)": ms(lambda: server.call(next(seeds))),
        "varied_inputs ordinary": ms(lambda: varied_inputs(task, next(seeds), dev, None), 10),
        "varied_inputs near": ms(lambda: varied_inputs(task, next(seeds), dev, 7, NEAR), 10),
        "varied_inputs shifted": ms(lambda: varied_inputs(task, next(seeds), dev, 7, SHIFTED), 10),
        "Fingerprints.add": ms(lambda: prints.add(str(next(seeds)), out, out), 10),
    }
    for k, v in rows.items():
        print(f"{v:10.3f} ms  {k}")


if __name__ == "__main__":
    main()
