"""What the driver says about who holds the GPU, for the freezer's open hole (2026-11-28 review, finding F2):
can GPU work outlive a stop, or its process, where no listing of /proc sees a descriptor of /dev/nvidia*?

Four questions, each answered by timing a probe on the GPU from this process (a short spin kernel, its wall
time from launch to synchronize: idle, it takes its own length; beside another context's work, the GPU is
time-sliced and it takes longer) and by NVML's list of compute processes (the pid that owns each context):

1. `baseline`: the probe alone.
2. `stopped`: a daemon (its own process and CUDA context) queues spin kernels, then is SIGSTOPped: does its
   queued work run on beside the probe? (the freezer's premise: a stop holds threads, not kernels)
3. `exited`: the daemon queues work and exits: does its work die with it, and does NVML still list its pid?
4. `parked`: the daemon queues work, sends its /dev/nvidia* descriptors over a Unix socket to a holder process
   (SCM_RIGHTS, as the review's inflight.py did), unmaps nothing (CUDA keeps its own mappings), and exits:
   does the work outlive the daemon while the holder keeps the descriptors, and whose pid does NVML list?
Also: whether NVML's pids are this PID namespace's (this process's own context must be listed under its pid).

    python benchmarks/gpu_owner_probe.py [--spin-ms 50] [--count 20] [--json gpu_owner.json]

Needs a GPU and torch; NVML as sandbox/gpu_contexts.py reads it (libnvidia-ml.so.1 through ctypes). Prints a table last.
"""

from __future__ import annotations

import argparse
import array
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from cuda_agent.sandbox.gpu_contexts import Nvml  # noqa: E402  (NVML's process lists, as the freezer reads them)

# The daemon: a context of its own, `count` spin kernels of `ms` each queued on its stream, then what `mode`
# says. It reports its pid, then "queued" once the work is launched.
DAEMON = r"""
import array, os, signal, socket, sys, time, torch
mode, ms, count, path = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
torch.cuda.init()
torch.cuda._sleep(1000)   # the context made, the kernel loaded
torch.cuda.synchronize()
t0 = time.perf_counter()
torch.cuda._sleep(10 ** 8)
torch.cuda.synchronize()
cycles = int(ms * 1e8 / ((time.perf_counter() - t0) * 1e3))   # the spin kernel's cycles a millisecond, measured
for _ in range(count):
    torch.cuda._sleep(cycles)
print(os.getpid(), flush=True)
print("queued", flush=True)
if mode == "stopped":
    os.kill(os.getpid(), signal.SIGSTOP)
    time.sleep(600)
if mode == "parked":
    fds = []
    for fd in os.listdir("/proc/self/fd"):   # the listing's own descriptor is gone by the time it is read
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith("/dev/nvidia"):
                fds.append(int(fd))
        except FileNotFoundError:
            pass
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    s.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
    s.recv(1)   # the holder has them
os._exit(0)
"""


def probe_ms(torch, cycles: int, n: int = 5) -> float:
    """The median wall time of a spin kernel of `cycles`, launch to synchronize."""
    times = []
    for _ in range(n):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        torch.cuda._sleep(cycles)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return sorted(times)[len(times) // 2]


def holder(path: str) -> subprocess.Popen:
    """A process that takes descriptors from the Unix socket at `path` and keeps them (and nothing else)."""
    code = (f"import array, socket, sys, time\nsrv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
            f"srv.bind({path!r}); srv.listen(1); print('ready', flush=True)\nc, _ = srv.accept()\n"
            "msg, anc, _, _ = c.recvmsg(1, socket.CMSG_SPACE(64 * 4))\nfds = array.array('i')\n"
            "for level, kind, data in anc:\n    fds.frombytes(data[:len(data) - len(data) % 4])\n"
            "print('holding', len(fds), flush=True); c.send(b'k'); time.sleep(600)\n")
    p = subprocess.Popen([sys.executable, "-S", "-c", code], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    return p


def scenario(torch, nvml: Nvml, mode: str, a, cycles: int) -> dict:
    path = f"/tmp/gpu_owner_probe_{os.getpid()}.sock"
    Path(path).unlink(missing_ok=True)
    keep = holder(path) if mode == "parked" else None
    d = subprocess.Popen([sys.executable, "-c", DAEMON, mode, str(a.spin_ms), str(a.count), path],
                         stdout=subprocess.PIPE, text=True)
    try:
        pid = int(d.stdout.readline())
        assert d.stdout.readline().strip() == "queued"
        held = []
        if mode == "exited" or mode == "parked":
            d.wait(30)
            held = keep.stdout.readline().split() if keep else []
            if keep and (held[:1] != ["holding"] or int(held[1]) == 0):
                raise RuntimeError(f"the holder took no descriptor of /dev/nvidia* (it said {held}; "
                                   f"daemon rc {d.returncode})")
        else:
            time.sleep(0.05)   # its stop taken
        t0 = time.monotonic()
        owners = nvml.compute_pids()
        slow = probe_ms(torch, cycles)
        later = []
        deadline = t0 + a.spin_ms * a.count / 1e3 + 2
        while time.monotonic() < deadline:   # when does the GPU come back to the probe's own length?
            later.append((round(time.monotonic() - t0, 3), round(probe_ms(torch, cycles, 3), 3)))
            time.sleep(0.1)
        return {"mode": mode, "daemon_pid": pid, "daemon_alive": d.poll() is None,
                "nvml_lists_daemon": pid in owners, "nvml_pids": sorted(owners),
                "holder_pid": keep.pid if keep else None, "holder_fds": int(held[1]) if keep else 0,
                "nvml_lists_holder": bool(keep) and keep.pid in owners,
                "probe_ms_right_after": round(slow, 3), "probe_ms_over_time": later}
    finally:
        for p in (d, keep):
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGKILL)
                p.wait()
        Path(path).unlink(missing_ok=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--spin-ms", type=float, default=50.0, help="each of the daemon's kernels")
    ap.add_argument("--count", type=int, default=20, help="the daemon's kernels queued")
    ap.add_argument("--probe-ms", type=float, default=2.0)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    import torch

    torch.cuda.init()
    torch.cuda._sleep(1000)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    torch.cuda._sleep(10 ** 8)
    torch.cuda.synchronize()
    cycles = int(a.probe_ms * 1e8 / ((time.perf_counter() - t0) * 1e3))   # the spin kernel's cycles a ms
    nvml = Nvml.load()
    if nvml is None:
        sys.exit("gpu_owner_probe: NVML (libnvidia-ml.so.1) is not there or does not start")
    own = nvml.compute_pids()
    out = {"device": torch.cuda.get_device_name(), "this_pid": os.getpid(),
           "nvml_pid_namespace_matches": os.getpid() in own, "nvml_pids_at_start": sorted(own),
           "probe_ms_idle": round(probe_ms(torch, cycles, 9), 3), "scenarios": []}
    for mode in ("stopped", "exited", "parked"):
        try:
            out["scenarios"].append(scenario(torch, nvml, mode, a, cycles))
        except Exception as e:   # one scenario's failure is a result too
            out["scenarios"].append({"mode": mode, "error": f"{type(e).__name__}: {e}"})
    if a.json:
        a.json.write_text(json.dumps(out, indent=1))
    print(f"# gpu_owner_probe: {out['device']}; NVML's pids are this namespace's: {out['nvml_pid_namespace_matches']}; "
          f"probe {a.probe_ms} ms idle reads {out['probe_ms_idle']} ms; daemon: {a.count} x {a.spin_ms} ms queued")
    print("| scenario | daemon alive | NVML lists daemon | NVML lists holder | probe right after (ms) | back to idle after (s) |")
    print("|---|---|---|---|--:|--:|")
    for s in out["scenarios"]:
        if "error" in s:
            print(f"| {s['mode']} | error: {s['error']} | | | | |")
            continue
        back = next((t for t, ms in s["probe_ms_over_time"] if ms < 1.5 * out["probe_ms_idle"]), None)
        print(f"| {s['mode']} | {s['daemon_alive']} | {s['nvml_lists_daemon']} | {s['nvml_lists_holder']} "
              f"| {s['probe_ms_right_after']} | {back} |")


if __name__ == "__main__":
    main()
