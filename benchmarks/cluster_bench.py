"""The cluster path for real (issue 27, item 5): two Ray nodes on one host, the evaluation service on both
through `--address`, and the second node lost half-way: every request must end in a verdict (retried where
its evaluator was on the lost node), none lost.

    python benchmarks/cluster_bench.py [--device cuda] [--evals 40] [--json OUT]
    python benchmarks/cluster_bench.py --device cpu --evals 8       # the plumbing, on a CPU machine

The head node (`ray start --head`) takes the first half of the GPUs, the second node (`ray start
--address HEAD`) the rest (each its own CUDA_VISIBLE_DEVICES; on the CPU each node gets --cpus). The
service connects with `ServiceSettings(address=...)`, one evaluator per GPU (on the CPU, --cpu-evaluators),
and `--evals` evaluations of the demo solution go in at once; when half have their verdicts the second
node's raylet is killed. Printed: where the evaluators ran, then verdicts, retries, harness errors and
evaluations/h. Both nodes are stopped at the end by their own processes (never `ray stop`, which would
stop every Ray on the host).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / "src"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ray_node(args: list[str], gpus: list[int] | None, cpus: int, log: Path) -> subprocess.Popen:
    """`ray start ... --block` in a process group of its own (killing the group stops that node alone)."""
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "token"}
    if gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, gpus))
    cmd = [sys.executable, "-m", "ray.scripts.scripts", "start", *args, "--block", f"--num-cpus={cpus}",
           f"--num-gpus={len(gpus) if gpus else 0}", "--disable-usage-stats"]
    return subprocess.Popen(cmd, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)


def stop(node: subprocess.Popen, lost: bool = False) -> None:
    """The node's processes ended: drained (SIGTERM, up to 30 s), or all killed at once as a lost node is."""
    try:
        os.killpg(node.pid, signal.SIGKILL if lost else signal.SIGTERM)
        node.wait(40)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(node.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def wait_nodes(n: int, timeout_s: float = 120) -> None:
    import ray

    deadline = time.monotonic() + timeout_s
    while sum(node["Alive"] for node in ray.nodes()) < n:
        if time.monotonic() > deadline:
            raise SystemExit(f"only {sum(node['Alive'] for node in ray.nodes())} of {n} Ray nodes came up")
        time.sleep(0.5)


def run(device: str, evals: int, cpus: int, cpu_evaluators: int, logs: Path) -> dict:
    import ray

    from cuda_agent.harness import EvalConfig
    from cuda_agent.service import EvalService, ServiceSettings
    from service_bench import demo

    gpus = None
    if device == "cuda":
        import torch

        count = torch.cuda.device_count()
        if count < 2:
            raise SystemExit(f"the cluster path on CUDA needs 2+ GPUs (one per node); this host has {count}")
        gpus = list(range(count))
    from ray._private.services import get_node_ip_address

    port = free_port()
    address = f"{get_node_ip_address()}:{port}"  # where `ray start --head` serves (this host's address)
    half = len(gpus) // 2 if gpus else 0
    head = ray_node(["--head", f"--port={port}", "--include-dashboard=false"], gpus[:half] if gpus else None, cpus,
                    logs / "head.log")
    second = None
    try:
        time.sleep(3)
        second = ray_node([f"--address={address}"], gpus[half:] if gpus else None, cpus, logs / "second.log")
        ray.init(address=address, include_dashboard=False, logging_level="warning", log_to_driver=False)
        wait_nodes(2)
        head_id = ray.get_runtime_context().get_node_id()  # the driver's node
        task, sol = demo(device)
        settings = ServiceSettings(address=address, device=device, cpu_evaluators=cpu_evaluators)
        with EvalService(settings) as svc:
            placed = ray.get([slot.handle.describe.remote() for slot in svc.fleet.slots])
            on_second = sum(p["node_id"] != head_id for p in placed)
            svc.evaluate(task, sol, EvalConfig(device=device))  # built, baselines cached
            t0 = time.perf_counter()
            futures = [svc.submit_path(task, sol, EvalConfig(device=device)) for _ in range(evals)]
            lost = threading.Event()

            def lose_second_node() -> None:
                while sum(f.done() for f in futures) < evals // 2:
                    time.sleep(0.2)
                stop(second, lost=True)
                lost.set()

            threading.Thread(target=lose_second_node, daemon=True).start()
            verdicts = [f.result() for f in futures]
            wall = time.perf_counter() - t0
            return {"device": device, "nodes": 2, "evaluators": len(placed), "evaluators_on_second_node": on_second,
                    "gpus": [p.get("gpu") for p in placed],
                    "requests": evals, "verdicts": len(verdicts), "lost": evals - len(verdicts),
                    "node_lost": lost.is_set(), "correct": sum(v.correct for v in verdicts),
                    "retried": sum("retried" in v.flags for v in verdicts),
                    "harness_errors": sum(v.harness_error for v in verdicts),
                    "failures": [f"{v.stage}: {v.reason}"[:200] for v in verdicts if not v.correct][:5],
                    "evals_per_hour": round(3600 * evals / wall), "stats": dict(svc.stats)}
    finally:
        ray.shutdown()
        for node in (second, head):
            if node is not None:
                stop(node)
        forget_cluster(port)


def forget_cluster(port: int) -> None:
    """The host's "latest cluster" file no longer names the head just stopped (as `ray stop` leaves it): a
    bare ray.init() here would otherwise wait on a cluster that is gone."""
    from ray._common.utils import get_ray_address_file

    latest = Path(get_ray_address_file(None))
    try:
        if latest.read_text().strip().endswith(f":{port}"):
            latest.unlink()
    except OSError:
        pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None)
    ap.add_argument("--evals", type=int, default=40)
    ap.add_argument("--cpus", type=int, default=4, help="CPUs each Ray node offers")
    ap.add_argument("--cpu-evaluators", type=int, default=2, help="the CPU backend's evaluators")
    ap.add_argument("--logs", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "cluster_bench")
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args()
    # Ray 2.60 turns token authentication on for a cluster `ray start --head` makes (the token in
    # ~/.ray/auth_token); a node joining it, or a driver naming its address, must be in token mode to send
    # it, else "Failed to connect to Ray cluster" / InvalidAuthToken. Read by Ray at import: set first.
    os.environ["RAY_AUTH_MODE"] = "token"
    from cuda_agent.devices import default_device

    a.logs.mkdir(parents=True, exist_ok=True)
    out = run(a.device or default_device(), a.evals, a.cpus, a.cpu_evaluators, a.logs)
    if a.json:
        a.json.write_text(json.dumps(out, indent=1))
    print("| nodes | evaluators (on the second) | requests | verdicts | lost | correct | retried | harness errors "
          "| node lost | evaluations/h |")
    print("|--:|--:|--:|--:|--:|--:|--:|--:|---|--:|")
    print(f"| {out['nodes']} | {out['evaluators']} ({out['evaluators_on_second_node']}) | {out['requests']} "
          f"| {out['verdicts']} | {out['lost']} | {out['correct']} | {out['retried']} | {out['harness_errors']} "
          f"| {out['node_lost']} | {out['evals_per_hour']} |")
    for f in out["failures"]:
        print("failed:", f)


if __name__ == "__main__":
    main()
