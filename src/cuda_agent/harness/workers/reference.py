"""The reference worker: a trusted process where no solution ever runs. It builds the reference
model, computes reference outputs (which never leave it), compares the child's outputs, and times
the eager and torch.compile baselines."""

from __future__ import annotations

import sys
import traceback
from contextlib import ExitStack
from pathlib import Path


def main(fd_in: int, fd_out: int) -> None:
    from cuda_agent.sandbox import ChildChannel

    channel = ChildChannel(fd_in, fd_out)
    try:
        serve(channel)
    except Exception as e:  # the worker's own failure: reported, never a pass
        channel.send({"error": f"reference worker failed: {type(e).__name__}: {e}",
                      "trace": traceback.format_exc()[-2000:]})


def serve(channel) -> None:
    """Jobs one after another: a kept worker (spares.finish) serves the next evaluation of its task
    with the task's module it loaded for the first, so that torch.compile of a new model of the same
    classes hits torch's cache."""
    import gc
    import os

    import torch

    from cuda_agent.harness.workers.spares import WARM_COMPILE_ENV, WARM_ENV, WARM_OFF_LOCK_ENV, task_digest
    from cuda_agent.measure import module_from_source, release

    warm = os.environ.get(WARM_ENV, "")
    if warm.startswith("cuda"):  # a spare (see spares.py): the CUDA context while it waits for a job
        torch.empty(1, device=warm)
    if WARM_COMPILE_ENV in os.environ:  # a spare: torch.compile's first-use costs paid while it waits
        _warm_compile(warm if warm.startswith("cuda") else "cpu", os.environ[WARM_COMPILE_ENV],
                      off_lock=os.environ.get(WARM_OFF_LOCK_ENV) == "1")
    source, task = None, None  # the last job's task: its source and the module made of it
    compiled = False           # whether an earlier job of that task compiled its model
    while (job := channel.recv()) is not None and job.get("op") != "quit":
        text = open(job["task_path"]).read()
        if text != source:
            source, task, compiled = text, module_from_source(text, "reference", "model.py"), False
        graphs = _graphs()
        # A first compile of the task in this worker takes its turn host-wide (measure.compile_turn); a kept
        # worker's next compile is a hit in its own process's cache (milliseconds) and waits for nobody.
        job["compile_turn"] = "" if compiled else f"{task_digest(text)}:{torch.device(job['device']).type}"
        ended = serve_job(channel, job, task)
        if ended is None:  # the harness closed the channel or said quit
            return
        answer = _answer(job["device"], _graphs() - graphs, compiled)
        compiled = compiled or _graphs() > graphs
        channel.send({"nonce": ended.get("nonce"), **answer})
        gc.collect()  # after the answer, while the harness goes on: the job's objects and their memory
        release(torch.device(job["device"]))


def _graphs() -> int:
    """The graphs torch.compile has made for tasks in this process so far (none where it never compiled:
    importing it takes a second that a worker which only checks correctness need not spend). A warm-up's
    graphs (_warm_compile) are no task's: torch._dynamo.reset() leaves them in torch's counter."""
    if "torch._dynamo" not in sys.modules:
        return 0
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"]) - _warm_made


def _answer(device: str, made: int, compiled: bool) -> dict:
    """After a job, whether this worker may serve another job of the task (`keep`): not where the
    device reports an error the job left (its synchronize raises), nor where the job's compile made
    `made` new graphs although an earlier job had compiled the task (torch's cache no longer holds:
    each new model would compile again, up to torch's recompile limit)."""
    import torch

    try:
        if device.startswith("cuda"):
            torch.cuda.synchronize(device)
    except Exception as e:
        return {"keep": False, "why": f"the device after the job: {type(e).__name__}: {e}"}
    if made and compiled:
        return {"keep": False, "why": f"torch.compile made {made} new graph(s) for a task it had compiled"}
    return {"keep": True}


def serve_job(channel, job: dict, task) -> dict | None:
    """One evaluation's requests; returns the `next` request that ended it (None: the channel
    closed or the harness said quit)."""
    import torch

    from cuda_agent.measure import NEAR, SHIFTED, TimingPlan, gpu_probe, make_inputs, make_model, wait_alone
    from cuda_agent.harness.workers.calls import CallServer
    from cuda_agent.harness.workers.fingerprints import Fingerprints
    from cuda_agent.harness.workers.transfer import open_outputs

    device = torch.device(job["device"])
    model = make_model(task.Model, task, job["weights_seed"], device)
    torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, job["state_path"])
    channel.send({"ready": True})
    # tag -> input seed, variant and kind; each reference output is computed when it is compared
    seeds: dict[str, tuple] = {}
    prints = Fingerprints()
    compiled = None
    timing, probe = None, None
    fns: dict = {}
    sides: list[str] = []
    try:
        while (msg := channel.recv()) is not None:
            op = msg.get("op")
            if op == "reference":
                seeds[msg["tag"]] = (msg["seed"], msg.get("variant"), msg.get("kind", NEAR))
                reply: dict = {"ok": True}
                if msg.get("kind") == SHIFTED:
                    reply["shifted"] = shifted_usable(model, task, seeds[msg["tag"]], device)
                    if reply["shifted"] != "used":  # an ordinary set of that seed instead
                        seeds[msg["tag"]] = (msg["seed"], None, NEAR)
                channel.send(reply)
            elif op == "compare":
                channel.send(compare_outputs(msg, model, task, seeds.pop(msg["tag"]), device, prints))
            elif op == "compare_all":   # a replay's calls checked in one request
                channel.send({"ok": True, "verdicts": compare_all(msg, model, task, device, prints)})
            elif op == "follows":  # do the solution's outputs move with the inputs where the reference's do?
                f = prints.judge(msg["tags"], msg["ordinary"], msg["atol"], msg["rtol"])
                channel.send({"ok": True, "reason": f.reason, "barely": f.barely})
            elif op == "probe":  # can this process map the child's memory (CUDA IPC)?
                opened = open_outputs(msg.get("meta"), device)
                ok = not isinstance(opened, str) and len(opened.tensors) == 1 and \
                    bool((opened.tensors[0] == float(msg["value"])).all())
                if not isinstance(opened, str):
                    opened.close()
                channel.send({"ok": ok, "reason": opened if isinstance(opened, str) else ""})
            elif op == "compile":  # CPU work, done before the harness takes the device for timing
                from cuda_agent.measure import Steps

                steps = Steps()   # where the stage's seconds went (a worker new to a task: 13-21 s)
                if not _warmed:  # a fresh H100 (2026-11-28): six new workers' first compiles, 10-12 s each of
                    # imports and Inductor's set-up, ran one after the other in the turn (the last ended 60 s in),
                    # where a warmed spare's compile took well under a second once its turn came
                    with steps("compile_warm"):
                        _warm_compile(str(device), *_lock_of(msg), off_lock=bool(msg.get("off_lock")))
                before = _graphs()
                compiled = _compile(model, make_inputs(task, msg["seed"], device), msg, job.get("compile_turn", ""),
                                    steps)
                channel.send({"ok": True, "graphs": _graphs() - before, "steps": steps.seconds})
            elif op == "time_start":  # the baselines timed call by call, as the harness drives them (workers/calls.py)
                fns = {"eager": model, "compile": compiled}
                sides = list(msg.get("sides") or ["eager"])
                if any(fns.get(side) is None for side in sides):
                    channel.send({"error": f"baselines {sides} asked for, but only eager and (once compiled) "
                                           "compile are timed here"})
                    continue
                timing = CallServer({side: fns[side] for side in sides}, task, device,
                                    TimingPlan.from_dict(msg["plan"]), as_timing_thread=True)
                channel.send({"ok": True,
                              "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                              "device_uuid": _uuid(device)})
            elif op == "call" and timing is not None:
                which = msg.get("which", "eager")
                if which not in sides:
                    channel.send({"error": f"a call of {which!r}, not one of the baselines started ({sides})"})
                    continue
                channel.send(timing.call(msg["seed"], which, keep=False))
            elif op == "graph" and timing is not None:  # the baselines captured in CUDA graphs (measure/graphs.py)
                channel.send(timing.capture(msg["seed"], msg.get("calls")))
            elif op == "gpu_alone":  # before a block's baseline windows: no other context's work left (measure/alone.py)
                probe = probe or gpu_probe(device)
                channel.send({"ok": True, **(wait_alone(probe).to_dict() if probe else {"alone": True})})
            elif op == "time_end" and timing is not None:
                timing.close()
                timing = None
                channel.send({"ok": True})
            elif op == "next":  # the evaluation is over: the next job of this task may come (spares.finish)
                return msg
            elif op == "quit":
                return None
        return None
    finally:
        if timing is not None:
            timing.close()


_warmed = False  # whether this process has paid torch.compile's first-use costs (_warm_compile)
_warm_made = 0   # the graphs those warm-ups made


def _uuid(device) -> str | None:
    """The GPU's UUID as NVML names it ("GPU-..."), None off the GPU or where torch does not tell."""
    if device.type != "cuda":
        return None
    import torch

    uuid = getattr(torch.cuda.get_device_properties(device), "uuid", None)
    return f"GPU-{uuid}" if uuid is not None else None


def _warm_compile(device: str, lock: str, lock_dir: Path | None = None, off_lock: bool = False) -> None:
    """torch.compile of a tiny function, then forgotten: the imports and Inductor's set-up that a
    worker's first compile pays (seconds) are paid here instead, holding the device lock `lock`
    shared as a compile does ("": none; `off_lock`: its stretches let go of it, as the task's compile's).
    A failure here is the real compile's to report."""
    from contextlib import nullcontext

    import torch

    from cuda_agent.measure import compile_for_timing, device_lock

    global _warmed, _warm_made
    before = _graphs()
    try:
        with device_lock(lock, shared=True, lock_dir=lock_dir) if lock else nullcontext():
            compile_for_timing(torch.nn.ReLU(), [torch.randn(64, 64, device=device)], lock_dir=lock_dir,
                               off_lock=lock if lock and off_lock else None)
        torch._dynamo.reset()
    except Exception as e:  # in the worker's log; the task's own compile says what matters
        print(f"torch.compile's warm-up failed: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
    _warm_made += _graphs() - before
    _warmed = True


def _lock_of(msg: dict) -> tuple[str, Path | None]:
    """The device lock a compile holds shared (`msg["lock"]` where the harness keeps the host quiet for
    timing, else "": none) and the folder of its lock files."""
    return (msg.get("lock") or "") if msg.get("quiet") else "", Path(msg["lock_dir"]) if msg.get("lock_dir") else None


def _compile(model, inputs: list, msg: dict, task_key: str = "", steps=None):
    """torch.compile of the reference, holding the device lock `msg["lock"]` shared (in
    `msg["lock_dir"]`) where the harness keeps the host quiet for timing (`msg["quiet"]`): held
    here, not by the harness, so that Inductor's autotuning can hold it alone for its benchmarks
    (timing.compile_for_timing) without waiting for the harness's shared hold. With `task_key`, in
    its task's turn in the harness's home (measure.compile_turn, in `msg["turn_dir"]`), waited for before the device lock (a process's
    first-use costs are paid before, by _warm_compile: the turn holds only the task's compile)."""
    from contextlib import nullcontext

    from cuda_agent.measure import Steps, compile_for_timing, compile_turn, device_lock

    key, lock_dir = _lock_of(msg)
    turn_dir = Path(msg["turn_dir"]) if msg.get("turn_dir") else None   # the home's (its Inductor cache's)
    steps = Steps() if steps is None else steps   # (measure.Steps: the seconds of each named part)
    with ExitStack() as held:
        with steps("compile_turn"):   # waiting for the task's turn (another worker compiling it), then the lock shared
            held.enter_context(compile_turn(task_key, turn_dir) if task_key else nullcontext())
        with steps("compile_lock"):
            held.enter_context(device_lock(key, shared=True, lock_dir=lock_dir) if key else nullcontext())
        with steps("compile"):   # tracing, code generation or the cache, autotuning (and its waits for the GPU)
            return compile_for_timing(model, inputs, alone=key or None, lock_dir=lock_dir,
                                      off_lock=key if key and msg.get("off_lock") else None)


def shifted_usable(model, task, seed: tuple[int, int, str], device) -> str:
    """"used" where the reference's output on the shifted set of `seed` is finite (the shift kept
    the inputs in the task's domain), else why not (then an ordinary set takes its place)."""
    import torch

    from cuda_agent.measure import release, varied_inputs
    from cuda_agent.harness.workers.runtime import flatten_outputs

    inputs, moved = varied_inputs(task, seed[0], device, seed[1], seed[2])
    if not moved:
        return "no continuous floating-point input to shift"
    out = None
    try:
        with torch.no_grad():
            out = flatten_outputs(model(*inputs))
        finite = not isinstance(out, str) and all(bool(torch.isfinite(t).all()) for t in out if t.is_floating_point())
    except Exception as e:
        return f"the reference raised {type(e).__name__} on shifted inputs"
    finally:
        del inputs, out  # before the release: the child may need the memory
        release(device)
    return "used" if finite else "the reference's output on shifted inputs is not finite"


def compare_all(msg: dict, model, task, device, prints=None) -> list[dict]:
    """`compare_outputs` for each of `msg["items"]` (its tag, prefix, the child's meta and the seed of its ordinary
    input set; route and tolerances shared), in order, up to and with the first wrong one."""
    from cuda_agent.measure import NEAR, release

    from cuda_agent.harness.workers.transfer import MAX_OUTPUTS, remove_outputs

    shared = {k: v for k, v in msg.items() if k != "items"}
    verdicts: list[dict] = []
    items = list(msg["items"])
    try:
        for item in items:   # the memory handed back to the device once, after the last (a synchronize each)
            verdicts.append(compare_outputs({**shared, **item}, model, task, (int(item["seed"]), None, NEAR), device,
                                            prints, hand_back=False))
            if not verdicts[-1]["ok"]:
                break
    finally:
        release(device)
        if msg.get("route") != "ipc":   # the files of the calls not compared: gone too (each compared removes its own)
            for item in items[len(verdicts):]:
                remove_outputs(item["prefix"], MAX_OUTPUTS)
    return verdicts


def compare_outputs(msg: dict, model, task, seed: tuple[int, int | None, str], device, prints=None,
                    hand_back: bool = True) -> dict:
    """The verdict on the child's outputs for one input set: the reference output is computed
    here, now, from the seed (it never leaves this process), and compared with what the child
    handed over (mapped from its GPU memory, or read from the files it wrote). `prints` keeps both
    outputs' fingerprints for the judgement across sets (fingerprints.py); `changed` in the reply
    is how many places or tensors a near-duplicate or shifted set changed."""
    import torch

    from cuda_agent.measure import Steps, release, varied_inputs
    from cuda_agent.harness.workers.runtime import compare, flatten_outputs
    from cuda_agent.harness.workers.transfer import MAX_OUTPUTS, open_outputs, read_outputs, remove_outputs

    ipc = msg.get("route") == "ipc"
    steps = Steps()
    with steps("open"):
        opened = open_outputs(msg.get("meta"), device) if ipc else read_outputs(msg["prefix"], msg.get("meta"))
    try:
        if isinstance(opened, str):
            return {"ok": False, "reason": f"its output could not be read ({opened})"}
        with steps("reference"), torch.no_grad():
            inputs, changed = varied_inputs(task, seed[0], device, *seed[1:])
            expected = flatten_outputs(model(*inputs))
            del inputs
        actual = opened.tensors if ipc else opened
        with steps("compare"):
            if prints is not None and not isinstance(expected, str):
                prints.add(msg["tag"], expected, actual)
            v = compare(expected, actual, msg["atol"], msg["rtol"])
        del expected, actual
        return {"ok": v.ok, "reason": v.reason, "max_abs_error": v.max_abs_error, "steps": steps.seconds,
                "scale": v.details.get("scale", ""), "changed": changed}
    finally:
        with steps("close"):
            if ipc and not isinstance(opened, str):
                opened.close()
            del opened
            if not ipc:
                remove_outputs(msg["prefix"], MAX_OUTPUTS)
            if hand_back:
                release(device)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
