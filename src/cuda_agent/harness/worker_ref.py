"""The reference worker: a trusted process where no solution ever runs. It builds the reference
model, computes reference outputs (which never leave it), compares the child's outputs, and times
the eager and torch.compile baselines."""

from __future__ import annotations

import sys
import traceback
from dataclasses import asdict


def main(fd_in: int, fd_out: int) -> None:
    from cuda_agent.harness.sandbox import ChildChannel

    channel = ChildChannel(fd_in, fd_out)
    try:
        serve(channel)
    except Exception as e:  # the worker's own failure: reported, never a pass
        channel.send({"error": f"reference worker failed: {type(e).__name__}: {e}",
                      "trace": traceback.format_exc()[-2000:]})


def serve(channel) -> None:
    import torch

    from cuda_agent.harness.modules import (MAX_OUTPUTS, make_inputs, make_model, module_from_source, read_outputs,
                                            release, remove_outputs)
    from cuda_agent.harness.runtime import compare, flatten_outputs
    from cuda_agent.harness.timing import TimingPlan, compile_for_timing, time_baselines

    job = channel.recv()
    device = torch.device(job["device"])
    task = module_from_source(open(job["task_path"]).read(), "reference", "model.py")
    model = make_model(task.Model, task, job["weights_seed"], device)
    torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, job["state_path"])
    channel.send({"ready": True})
    seeds: dict[str, int] = {}  # tag -> input seed; each reference output is computed when it is compared
    compiled = None
    while (msg := channel.recv()) is not None:
        op = msg.get("op")
        if op == "reference":
            seeds[msg["tag"]] = msg["seed"]
            channel.send({"ok": True})
        elif op == "compare":
            actual = read_outputs(msg["prefix"], msg.get("meta"))
            if isinstance(actual, str):
                remove_outputs(msg["prefix"], MAX_OUTPUTS)
                channel.send({"ok": False, "reason": f"its output could not be read ({actual})"})
                continue
            with torch.no_grad():
                expected = flatten_outputs(model(*make_inputs(task, seeds.pop(msg["tag"]), device)))
            v = compare(expected, actual, msg["atol"], msg["rtol"])
            del expected, actual
            remove_outputs(msg["prefix"], MAX_OUTPUTS)
            release(device)
            channel.send({"ok": v.ok, "reason": v.reason, "max_abs_error": v.max_abs_error})
        elif op == "compile":  # CPU work, done before the harness takes the device for timing
            compiled = compile_for_timing(model, make_inputs(task, msg["seed"], device))
            channel.send({"ok": True})
        elif op == "baselines":
            sets = [make_inputs(task, s, device) for s in msg["seeds"]]
            if compiled is None:
                compiled = compile_for_timing(model, sets[0])
            eager, compiled_stats = time_baselines(model, compiled, sets, device, TimingPlan(**msg["plan"]))
            del sets
            release(device)
            channel.send({"eager": asdict(eager), "compile": asdict(compiled_stats),
                          "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"})
        elif op == "quit":
            return


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
