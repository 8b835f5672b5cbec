"""What stopping a solution's processes around the baselines' windows costs (sandbox/freezer.py), a block at a
time: with the helper kept for the whole paired run (as profiling.py does) against a new freezer, and so a
new helper, for every block; and the parts of a block (a word to the helper each way, one listing of /proc).
Root only (sandbox users). On the GPU host every block is GPU time held alone.

    sudo python benchmarks/freeze_cost.py [--blocks 200] [--idle 8] [--json freeze_cost.json]

The user runs one spinning process and `--idle` sleeping ones, as a solution's child and what it left behind:
each block checks the left-behind ones for the GPU (a row without the check beside). Where NVML answers (a GPU
host), also a look at the GPU's contexts (sandbox/gpu_contexts.py), which profiling.py adds to every block there.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from cuda_agent.sandbox.freezer import GPU_FILES, Freezer, holds  # noqa: E402
from cuda_agent.sandbox.gpu_contexts import ContextWatch, Nvml  # noqa: E402
from cuda_agent.sandbox.isolation import claim_user, kill_user_processes  # noqa: E402
from cuda_agent.sandbox.user_signals import listing  # noqa: E402


def timed_ms(fn, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--blocks", type=int, default=200)
    ap.add_argument("--idle", type=int, default=8, help="sleeping processes of the user beside the spinner")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("freeze_cost: run as root (the sandbox users are root's to make)")
    slot = claim_user()
    if slot is None:
        sys.exit("freeze_cost: no sandbox user slot free")
    uid = slot.user.uid
    code = "import time, sys\nif sys.argv[1] == 'spin':\n    while True: pass\nwhile True: time.sleep(1)"
    procs = [subprocess.Popen(["/usr/bin/python3", "-S", "-c", code, kind], user=uid, group=slot.user.gid,
                              extra_groups=[], cwd="/") for kind in ["spin"] + ["idle"] * a.idle]
    time.sleep(0.5)
    rows: dict[str, list[float]] = {}
    try:
        # the spinner stands for the solution's child, which may hold the GPU; the idle processes are what it
        # left behind, each checked for the GPU (/dev/nvidia* open or mapped) in every block
        child = [procs[0].pid]
        with Freezer([uid], gpu_allowed=child) as kept, Freezer([uid], gpu_allowed=child, gpu_files=()) as unchecked:
            def block(freezer: Freezer = kept) -> None:
                with freezer.frozen() as b:
                    assert b.stopped
                assert b.quiet, b
            block()   # its helper started
            block(unchecked)
            rows["block, helper kept"] = timed_ms(block, a.blocks)
            rows["block, helper kept, no GPU check"] = timed_ms(lambda: block(unchecked), a.blocks)
            helper = kept._helpers[uid]
            rows["word to the helper, stop and continue"] = timed_ms(
                lambda: (helper.send(signal.SIGSTOP), helper.send(signal.SIGCONT)), a.blocks)
            rows["GPU check of one process left behind"] = timed_ms(lambda: holds(procs[1].pid, GPU_FILES), a.blocks)

        def fresh() -> None:
            with Freezer([uid]) as f, f.frozen() as b:
                assert b.stopped
        rows["block, new helper"] = timed_ms(fresh, max(10, a.blocks // 10))
        rows["one listing of /proc"] = timed_ms(lambda: listing(uid), a.blocks)
        import torch

        if Nvml.load() is not None and torch.cuda.is_available():   # the look every block makes on a GPU host
            torch.ones(1, device="cuda").sum().item()   # a context of this process: the watch's known pid
            watch = ContextWatch([os.getpid()])
            watch.look()
            if watch.usable:
                rows["look at the GPUs' contexts (NVML)"] = timed_ms(watch.look, a.blocks)
            else:
                print("# NVML does not list this process under its pid (another PID namespace?): no look timed")
    finally:
        kill_user_processes(uid)
        for p in procs:
            p.wait()
        slot.release()
    base = statistics.median(rows["block, helper kept"])
    print(f"# freeze_cost: {len(os.listdir('/proc'))} /proc entries, the user: 1 spinning + {a.idle} idle processes")
    print("| what | median ms | p90 ms | max ms | / kept block |")
    print("|---|--:|--:|--:|--:|")
    summary = {}
    for name, xs in rows.items():
        xs = sorted(xs)
        med, p90 = statistics.median(xs), xs[int(0.9 * (len(xs) - 1))]
        summary[name] = {"median_ms": med, "p90_ms": p90, "max_ms": xs[-1], "n": len(xs)}
        print(f"| {name} | {med:.2f} | {p90:.2f} | {xs[-1]:.2f} | {med / base:.2f} |")
    if a.json:
        a.json.write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
