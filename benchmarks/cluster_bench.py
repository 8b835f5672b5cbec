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
stop every Ray on the host); they die with this process too (killed, or timed out: `ray start` gets the
parent-death signal, and a SIGTERM kills both nodes at once).

A progress line for each phase, with the seconds since the start: the head up, the second node joined (with
the resources Ray sees), the service started (its evaluators and where they run), the first verdict (the
build and the baselines: the slow one, ~25-60 s on a fresh GPU machine), every tenth of the evaluations, the
node killed, the end. On 2 H100s a run of 40 takes some minutes, not a 110 s limit. Every wait is bounded
(--stall-s for a verdict) and names what it waited for.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, wait
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / "src"))

T0 = time.monotonic()
# Each node's object store: the bench moves solutions and verdicts only (Ray's default: 30% of the RAM, a node).
OBJECT_STORE_BYTES = 1 << 30


def say(msg: str) -> None:
    """A progress line, the seconds since the start first (flushed: a log read mid-run, or after a kill, has it)."""
    print(f"[{time.monotonic() - T0:6.1f} s] {msg}", flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_libc = ctypes.CDLL(None, use_errno=True)  # loaded here: the forked child only calls it


def _die_with_parent() -> None:
    """In the forked `ray start`: SIGTERM when this driver dies, however it dies (a SIGKILL included), so a
    killed bench leaves no node behind: the nodes are in sessions of their own, which a `timeout` or a step's
    group kill does not reach. On SIGTERM `ray start --block` drains and stops its node's processes, the
    raylet's workers ending with the raylet. (Not SIGKILL: its gcs and raylet die with it, but the dashboard
    and runtime-env agents of the head were left running.)"""
    _libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG


def ray_node(args: list[str], gpus: list[str] | None, cpus: int, log: Path) -> subprocess.Popen:
    """`ray start ... --block` in a process group of its own (killing the group stops that node alone)."""
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "token"}
    if gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
    cmd = [sys.executable, "-m", "ray.scripts.scripts", "start", *args, "--block", f"--num-cpus={cpus}",
           f"--num-gpus={len(gpus) if gpus else 0}", f"--object-store-memory={OBJECT_STORE_BYTES}",
           "--disable-usage-stats"]
    return subprocess.Popen(cmd, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True,
                            preexec_fn=_die_with_parent)


def stop(node: subprocess.Popen, lost: bool = False) -> None:
    """The node's processes ended: drained (SIGTERM to `ray start` alone, which drains the node through the
    GCS for up to 30 s and stops its processes), or all killed at once as a lost node is. Not SIGTERM to the
    whole group: the GCS would die with it and `ray start` wait its 30 s on a drain nobody answers."""
    try:
        if lost:
            os.killpg(node.pid, signal.SIGKILL)
        else:
            node.terminate()
        node.wait(40)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass
    try:
        os.killpg(node.pid, signal.SIGKILL)  # what is left of the group
    except ProcessLookupError:
        pass


def log_tail(log: Path, lines: int = 15) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def wait_head(node: subprocess.Popen, host: str, port: int, log: Path, timeout_s: float = 90) -> None:
    """Until the head's GCS takes connections on `port` (what the second node and the driver join)."""
    deadline = time.monotonic() + timeout_s
    while True:
        if node.poll() is not None:
            raise SystemExit(f"`ray start --head` exited ({node.returncode}) before its GCS served on {host}:{port}; "
                             f"{log}:\n{log_tail(log)}")
        try:
            with socket.create_connection((host, port), timeout=1):
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit(f"the head's GCS did not take connections on {host}:{port} in {timeout_s:.0f} s; "
                             f"{log}:\n{log_tail(log)}")
        time.sleep(0.5)


def wait_nodes(n: int, nodes: dict[str, tuple[subprocess.Popen, Path]], timeout_s: float = 90) -> None:
    """Until Ray counts `n` live nodes; a `ray start` that exits, or the deadline, ends the bench with its log."""
    import ray

    deadline = time.monotonic() + timeout_s
    while (alive := sum(node["Alive"] for node in ray.nodes())) < n:
        for name, (proc, log) in nodes.items():
            if proc.poll() is not None:
                raise SystemExit(f"the {name} node's `ray start` exited ({proc.returncode}) with {alive} of {n} "
                                 f"Ray nodes up; {log}:\n{log_tail(log)}")
        if time.monotonic() > deadline:
            logs = "\n".join(f"{log}:\n{log_tail(log)}" for _, log in nodes.values())
            raise SystemExit(f"waited {timeout_s:.0f} s for {n} Ray nodes, {alive} came up\n{logs}")
        time.sleep(0.5)


def node_resources(head_id: str) -> str:
    """Each live node's resources, as Ray counts them: "head CPU 2 GPU 1, second CPU 2 GPU 1"."""
    import ray

    keep = ("CPU", "GPU")
    return ", ".join(f"{'head' if n['NodeID'] == head_id else 'second'} "
                     + " ".join(f"{k} {n['Resources'][k]:g}" for k in keep if k in n["Resources"])
                     for n in ray.nodes() if n["Alive"])


def result_within(future: Future, stall_s: float, what: str, svc) -> object:
    """`future.result()`, or the bench ends naming `what` it waited for after `stall_s` seconds."""
    import ray

    try:
        return future.result(timeout=stall_s)
    except TimeoutError:
        raise SystemExit(f"no {what} in {stall_s:.0f} s (service stats {dict(svc.stats)}; Ray's free resources "
                         f"{ray.available_resources()})") from None


def run(device: str, evals: int, cpus: int, cpu_evaluators: int, logs: Path, stall_s: float) -> dict:
    import ray

    from cuda_agent.devices import visible_gpus
    from cuda_agent.harness import EvalConfig
    from cuda_agent.service import EvalService, ServiceSettings
    from service_bench import demo

    gpus = None
    if device == "cuda":
        gpus = visible_gpus()  # as CUDA_VISIBLE_DEVICES names them, where the caller set it
        if len(gpus) < 2:
            raise SystemExit(f"the cluster path on CUDA needs 2+ GPUs (one per node); this host has {len(gpus)}")
    from ray._private.services import get_node_ip_address

    port = free_port()
    host = get_node_ip_address()
    address = f"{host}:{port}"  # where `ray start --head` serves (this host's address)
    half = len(gpus) // 2 if gpus else 0
    head_gpus, second_gpus = (gpus[:half], gpus[half:]) if gpus else (None, None)
    say(f"device {device}: head node GPUs {head_gpus}, second node GPUs {second_gpus}, {cpus} CPUs each; "
        f"node logs in {logs}")
    head = ray_node(["--head", f"--port={port}", "--include-dashboard=false"], head_gpus, cpus, logs / "head.log")
    second = None

    def killed(signum: int, frame: object) -> None:
        """A SIGTERM (a timeout): both nodes killed at once and out, no drain (a `timeout -k` kills 10 s later)."""
        say(f"signal {signum}: killing both Ray nodes and leaving (the line above says what was running)")
        for node in (second, head):
            if node is not None:
                stop(node, lost=True)
        forget_cluster(port)
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, killed)
    try:
        wait_head(head, host, port, logs / "head.log")
        say(f"head node up at {address} (ray start --head)")
        second = ray_node([f"--address={address}"], second_gpus, cpus, logs / "second.log")
        ray.init(address=address, include_dashboard=False, logging_level="warning", log_to_driver=False)
        signal.signal(signal.SIGTERM, killed)  # ray.init put its own in (sys.exit: a slow drain)
        wait_nodes(2, {"head": (head, logs / "head.log"), "second": (second, logs / "second.log")})
        head_id = ray.get_runtime_context().get_node_id()  # the driver's node (Ray prefers the head on one host)
        say(f"second node joined: 2 nodes alive; {node_resources(head_id)}; cluster {ray.cluster_resources()}")
        task, sol = demo(device)
        settings = ServiceSettings(address=address, device=device, cpu_evaluators=cpu_evaluators)
        t = time.monotonic()
        with EvalService(settings) as svc:
            placed = ray.get([slot.handle.describe.remote() for slot in svc.fleet.slots], timeout=120)
            on_second = sum(p["node_id"] != head_id for p in placed)
            where = ", ".join(f"{'head' if p['node_id'] == head_id else 'second'}"
                              + (f" gpu {p['gpu']}" if p.get("gpu") is not None else "") for p in placed)
            say(f"service started in {time.monotonic() - t:.1f} s: {len(placed)} evaluator(s) ({where}), "
                f"{len(svc.fleet.builders)} builder(s)")
            t = time.monotonic()
            first = result_within(svc.submit_path(task, sol, EvalConfig(device=device)), stall_s,
                                  "first verdict (its build and baselines)", svc)
            stages = " ".join(f"{k} {v:.1f}" for k, v in first.stage_seconds.items())
            say(f"first verdict in {time.monotonic() - t:.1f} s: correct {first.correct} ({first.stage}); "
                f"stages (s): {stages}")
            t0 = time.perf_counter()
            futures = [svc.submit_path(task, sol, EvalConfig(device=device)) for _ in range(evals)]
            say(f"{evals} evaluations submitted; the second node is killed after {evals // 2} verdicts")
            lost, finished = threading.Event(), threading.Event()

            def lose_second_node() -> None:
                while sum(f.done() for f in futures) < evals // 2:
                    time.sleep(0.2)
                done = sum(f.done() for f in futures)
                stop(second, lost=True)
                lost.set()
                say(f"second node killed (SIGKILL to its process group) after {done} verdicts")
                t = time.monotonic()
                while time.monotonic() - t < 60 and not finished.is_set():  # no Ray call once it shuts down
                    if sum(n["Alive"] for n in ray.nodes()) < 2:
                        say(f"Ray saw the second node dead {time.monotonic() - t:.1f} s after the kill")
                        return
                    time.sleep(0.5)
                say(f"Ray still counted the second node alive {time.monotonic() - t:.0f} s after the kill")

            loser = threading.Thread(target=lose_second_node, daemon=True)
            loser.start()
            step, pending, came = max(1, evals // 10), set(futures), 0
            while pending:
                done, pending = wait(pending, timeout=stall_s, return_when=FIRST_COMPLETED)
                if not done:
                    raise SystemExit(f"no verdict for {stall_s:.0f} s with {came} of {evals} in (service stats "
                                     f"{dict(svc.stats)}; Ray's free resources {ray.available_resources()})")
                for _ in done:
                    came += 1
                    if came == 1 or came % step == 0 or came == evals:
                        so_far = [f.result() for f in futures if f.done()]
                        say(f"{came}/{evals} verdicts: correct {sum(v.correct for v in so_far)}, retried "
                            f"{sum('retried' in v.flags for v in so_far)}, harness errors "
                            f"{sum(v.harness_error for v in so_far)}")
            finished.set()
            loser.join(timeout=10)
            verdicts = [f.result() for f in futures]
            wall = time.perf_counter() - t0
            say(f"all {evals} verdicts in {wall:.1f} s; closing the service")
            out = {"device": device, "nodes": 2, "evaluators": len(placed), "evaluators_on_second_node": on_second,
                   "gpus": [p.get("gpu") for p in placed],
                   "requests": evals, "verdicts": len(verdicts), "lost": evals - len(verdicts),
                   "node_lost": lost.is_set(), "correct": sum(v.correct for v in verdicts),
                   "retried": sum("retried" in v.flags for v in verdicts),
                   "harness_errors": sum(v.harness_error for v in verdicts),
                   "failures": [f"{v.stage}: {v.reason}"[:200] for v in verdicts if not v.correct][:5],
                   "evals_per_hour": round(3600 * evals / wall), "first_verdict_s": first.stage_seconds,
                   "stats": dict(svc.stats)}
            t = time.monotonic()
        say(f"service closed in {time.monotonic() - t:.1f} s")
        return out
    finally:
        t = time.monotonic()
        ray.shutdown()
        for node in (second, head):
            if node is not None:
                stop(node)
        forget_cluster(port)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        say(f"Ray shut down and both nodes stopped in {time.monotonic() - t:.1f} s")


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
    ap.add_argument("--stall-s", type=float, default=900,
                    help="the bench ends when no verdict comes for this long (the first one included)")
    ap.add_argument("--logs", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "cluster_bench")
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args()
    # Ray 2.60 turns token authentication on for a cluster `ray start --head` makes (the token in
    # ~/.ray/auth_token); a node joining it, or a driver naming its address, must be in token mode to send
    # it, else "Failed to connect to Ray cluster" / InvalidAuthToken. Read by Ray at import: set first.
    os.environ["RAY_AUTH_MODE"] = "token"
    from cuda_agent.devices import default_device
    from cuda_agent.home import private_ray_tmp

    # the nodes' sessions in a folder only we can enter, not /tmp/ray (0777, no sticky bit: a sandbox user
    # could replace the sockets of Ray's root workers); the nodes and the driver read it from the environment
    private = None if os.environ.get("RAY_TMPDIR") else private_ray_tmp()
    if private is not None:
        os.environ["RAY_TMPDIR"] = str(private)
    a.logs.mkdir(parents=True, exist_ok=True)
    try:
        out = run(a.device or default_device(), a.evals, a.cpus, a.cpu_evaluators, a.logs, a.stall_s)
    finally:
        if private is not None:
            shutil.rmtree(private, ignore_errors=True)
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
