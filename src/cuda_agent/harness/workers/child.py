"""The solution child: the only process where a solution's code runs (as an unprivileged user
when the harness is root). It writes outputs and timing samples; it never decides a verdict."""

from __future__ import annotations

import os
import re
import sys
import traceback
from dataclasses import dataclass

# Everything the harness needs is imported and bound before the solution's code runs, so that
# nothing the solution does at import can replace it.
import torch
import torch.utils.cpp_extension

from cuda_agent.harness.workers.runtime import (HOST_ELEMENTS, HostState, OperatorGuard, changed_since,
                                                flatten_outputs, inputs_unchanged, poison_free_memory, snapshot)
from cuda_agent.harness.workers.spares import WARM_ENV
from cuda_agent.harness.workers.calls import CallServer
from cuda_agent.harness.workers.transfer import share_outputs, write_outputs
from cuda_agent.measure import Steps, TimingPlan, make_inputs, make_model, module_from_source, release
from cuda_agent.sandbox import ChildChannel

_load, _full, _equal = torch.load, torch.full, torch.equal


class Failure(Exception):
    def __init__(self, stage: str, reason: str):
        super().__init__(reason)
        self.stage, self.reason = stage, reason


def load_extensions(job: dict) -> dict:
    """The built modules (name -> module), imported before the solution's code runs."""
    import importlib.machinery
    import importlib.util

    exts = {}
    for name, path in job["modules"].items():
        loader = importlib.machinery.ExtensionFileLoader(name, path)
        spec = importlib.util.spec_from_file_location(name, path, loader=loader)
        ext = importlib.util.module_from_spec(spec)
        loader.exec_module(ext)
        sys.modules[name] = ext
        exts[name] = ext
    return exts


def inline_loader(exts: dict, errors: dict):
    """What load_inline does in the child: return the module the harness built for that name, or
    raise the error its build gave, as torch's load_inline would (a relaxed solution may catch it)."""
    only = next(iter(exts.values())) if len(exts) == 1 and not errors else None
    only_error = next(iter(errors.items())) if len(errors) == 1 and not exts else None

    def load_inline(*args, **kwargs):
        if only is not None:   # the one module, whatever name it is asked by (relaxed: it may be computed)
            return only
        if only_error is not None:
            raise RuntimeError(f"Error building extension '{only_error[0]}': {only_error[1]}")
        name = kwargs.get("name", args[0] if args else None)
        if name in exts:
            return exts[name]
        if name in errors:
            raise RuntimeError(f"Error building extension '{name}': {errors[name]}")
        raise RuntimeError(f"load_inline(name={name!r}): the harness built no module of that name (the name must be "
                           "a literal string)")
    return load_inline


def load_solution(job: dict, device: torch.device):
    exts = load_extensions(job)
    if job["kind"] == "inline":
        torch.utils.cpp_extension.load_inline = inline_loader(exts, job.get("module_errors", {}))
    try:
        sol = module_from_source(open(job["solution_path"]).read(), "model_new", "model_new.py")
    except Exception as e:
        raise Failure("run", f"model_new.py failed to import: {type(e).__name__}: {e}") from None
    if not isinstance(getattr(sol, "ModelNew", None), type):
        raise Failure("run", "model_new.py defines no class ModelNew")
    task = module_from_source(open(job["task_path"]).read(), "reference", "model.py")
    try:
        model = make_model(sol.ModelNew, task, job["weights_seed"], device)
    except Exception as e:
        raise Failure("run", f"ModelNew(*get_init_inputs()) failed: {type(e).__name__}: {e}") from None
    return model, task


@dataclass(frozen=True)
class Weights:
    """How ModelNew got its weights: "state_dict" (the reference's, copied in) or "same_seed" (as
    constructed after the reference's seed), and why the state_dict was not used."""

    init: str
    why: str = ""


def load_weights(model: torch.nn.Module, path: str, strict: bool = True) -> Weights:
    """The reference's weights into ModelNew: "state_dict" where names and shapes match and every
    tensor then holds the reference's values. Where they do not, the strict policy fails; the
    relaxed one keeps ModelNew as constructed after the same seed as the reference (KernelBench's
    convention: the same values where both create the same parameters in the same order) and says
    "same_seed" and why. A copy that raises part way leaves the reference's values in what it
    copied (load_state_dict goes on past a failed tensor); the outputs decide either way."""
    state = _load(path, weights_only=True)
    mine = model.state_dict()
    missing = sorted(set(state) - set(mine))
    extra = sorted(set(mine) - set(state))
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing {', '.join(missing[:5])}")
        if extra:
            parts.append(f"unexpected {', '.join(extra[:5])}")
        if not strict:
            return Weights("same_seed", f"names differ from the reference's state_dict ({'; '.join(parts)})")
        raise Failure("correctness", "ModelNew's parameters do not match the reference's state_dict ("
                      + "; ".join(parts) + "): hold the same submodules/parameters under the same names")
    for k, v in state.items():
        if tuple(mine[k].shape) != tuple(v.shape):
            shapes = f"{k} has shape {tuple(mine[k].shape)}, the reference's is {tuple(v.shape)}"
            if not strict:
                return Weights("same_seed", f"shapes differ from the reference's state_dict ({shapes})")
            raise Failure("correctness", f"parameter {shapes}")
    try:
        model.load_state_dict(state, strict=True)
    except Exception as e:
        why = _load_error(e)
        if _holds(model, state):  # written before it raised (an inference tensor's version check comes after)
            return Weights("state_dict", f"load_state_dict raised ({why}) after copying every tensor")
        if not strict:
            return Weights("same_seed", f"the reference's state_dict could not be copied in ({why})")
        raise Failure("correctness", f"the reference's weights could not be copied into ModelNew ({why}): keep "
                                     "parameters and buffers as ordinary tensors that load_state_dict can write "
                                     "(not expanded views, not several of them over one memory)") from None
    return Weights("state_dict")


def _holds(model: torch.nn.Module, state: dict) -> bool:
    """Whether every tensor of ModelNew's state_dict holds the reference's values."""
    mine = model.state_dict()
    return all(_equal(mine[k].detach(), v.to(mine[k].device, mine[k].dtype)) for k, v in state.items())


def _load_error(e: Exception) -> str:
    """A load_state_dict error in one line: the tensor it stopped at and what was raised."""
    text = " ".join(str(e).split())
    name = re.search(r'named "([^"]+)"', text)
    cause = text.split("an exception occurred : ", 1)[-1].strip("(),' ")
    cause = re.split(r"\.(?=[A-Z\s])", cause, maxsplit=1)[0]  # its first sentence
    return (f"{name.group(1)}: " if name else "") + cause[:200]


def guarded_call(model, inputs: list, strict: bool, device: torch.device, state: HostState):
    guard = OperatorGuard(strict=strict, device_type=device.type, state=state)
    poison_free_memory(device)
    try:
        with torch.no_grad(), guard:
            out = model(*inputs)
    except Exception as e:
        if guard.violations:
            raise Failure("run", f"forward used torch operator aten::{guard.violations[0]} "
                                 "(only allocation, views and metadata are allowed)") from None
        raise Failure("run", f"forward raised {type(e).__name__}: {str(e)[:400]}") from None
    if guard.violations:
        raise Failure("run", f"forward used torch operator aten::{guard.violations[0]} "
                             "(only allocation, views and metadata are allowed)")
    if guard.host_ops:
        raise Failure("run", f"forward worked on the CPU (aten::{guard.host_ops[0]} on a host tensor of more than "
                             f"{HOST_ELEMENTS} elements) in a {device.type} task: compute on the GPU, not on the host "
                             "with a copy to the device (copying the model's own tensors to the device as they were "
                             "constructed is fine)")
    return out


def hand_over(outputs: list[torch.Tensor], prefix: str, route: str, keep: list) -> list[dict]:
    """The outputs to the reference worker by `route` (see transfer.py); returns their metadata."""
    return share_outputs(outputs, keep) if route == "ipc" else write_outputs(outputs, prefix)


class Held:
    """The outputs of the correctness sets, each beside its copy taken when forward returned, held
    to the end of the evaluation (within HELD_BYTES): an output must stay what it was when it was
    returned whatever the solution does in later calls, the timed ones included (a buffer it hands
    out again, or writes into later)."""

    HELD_BYTES = 2 << 30

    def __init__(self) -> None:
        self.outputs: dict[str, tuple[list, list]] = {}
        self.bytes = 0
        self.skipped = 0

    def add(self, tag: str, flat: list, copies: list | None) -> None:
        size = sum(t.numel() * t.element_size() for t in flat) * 2
        if copies is None or self.bytes + size > self.HELD_BYTES:
            self.skipped += 1
            return
        self.outputs[tag] = (flat, copies)
        self.bytes += size

    def recheck(self) -> dict:
        """The tags whose output changed since forward returned it; then nothing is held."""
        changed = [tag for tag, (flat, copies) in self.outputs.items() if changed_since(copies, flat)]
        held, self.outputs, self.bytes = len(self.outputs), {}, 0
        return {"ok": True, "changed": changed, "held": held, "skipped": self.skipped}


def run_pair(model, task, msg: dict, strict: bool, device: torch.device, public: str, keep: list,
             steps: Steps, state: HostState, held: Held | None = None) -> tuple[dict[str, list], list[str]]:
    """Run forward on each input set back to back, then check that the inputs are unchanged (against
    the same inputs drawn again from their seed) and hand every output over; returns each tag's
    output metadata, and the tags whose output changed after its forward returned (work deferred
    to a later call, or one buffer reused by every call)."""
    runs = []
    for tag, seed, *variant in msg["runs"]:
        with steps("inputs"):
            inputs = make_inputs(task, seed, device, *variant)
        with steps("forward"):
            out = guarded_call(model, inputs, strict, device, state)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
        flat = flatten_outputs(out, device)   # the tensors themselves: later calls may still write into them
        del out
        with steps("snapshot"):
            copies = None if isinstance(flat, str) else snapshot(flat, device)
        runs.append((tag, seed, variant, inputs, flat, copies))
    written, changed = {}, []
    while runs:  # one input set at a time, so the inputs drawn again need little memory
        tag, seed, variant, inputs, flat, copies = runs.pop(0)
        with steps("inputs_unchanged"):
            altered = inputs_unchanged(make_inputs(task, seed, device, *variant), inputs)
        if altered:
            raise Failure("correctness", altered)
        del inputs
        if isinstance(flat, str):
            raise Failure("correctness", flat)
        if changed_since(copies, flat):
            changed.append(tag)
        elif held is not None:
            held.add(tag, flat, copies)
        del copies
        with steps("hand_over"):
            written[tag] = hand_over(flat, f"{public}/out_{tag}", msg.get("route", "files"), keep)
        del flat
    with steps("release"):
        release(device)
    return written, changed


class TimingRun:
    """The child's side of a timing run the harness drives call by call (see workers/calls.py):
    `call` times one call on the inputs of the seed the harness sends with it; `check` hands the
    last call's output over for the reference to check, while it is still the one returned."""

    def __init__(self, model, task, msg: dict, strict: bool, device: torch.device, public: str, state: HostState):
        self.model, self.task, self.strict, self.device, self.public = model, task, strict, device, public
        self.state = state
        self.route = msg.get("route", "files")
        # The timed calls run without the operator guard: a Python dispatch mode costs 50-70 us of host
        # time a call (H200, 2026-11-26: the demo kernel read 0.07-0.09 ms against 0.019 ms), which the
        # host floor then charges to the solution; rules on ATen in timed calls are the static scan's.
        self.server = CallServer({"solution": model}, task, device, TimingPlan.from_dict(msg["plan"]))

    def call(self, msg: dict) -> dict:
        return self.server.call(int(msg["seed"]), "solution")

    def capture(self, msg: dict) -> dict:
        """The solution captured in a CUDA graph of the calls the harness names (graphs.py)."""
        return self.server.capture(int(msg["seed"]), int(msg["calls"]))

    def check(self, msg: dict, keep: list) -> dict:
        """The last call's output handed over under `tag`; after a replay, those of its calls `indices` under
        `tags` (one request for a replay's calls: a round trip each cost a GPU held alone 40 requests a check)."""
        if "tags" not in msg:
            index = msg.get("index")
            return {"ok": True, "meta": self._hand_over(msg["tag"], None if index is None else int(index), keep)}
        tags, indices = list(msg["tags"]), [int(i) for i in msg["indices"]]
        if len(tags) != len(indices):
            raise Failure("profile", f"a check names {len(tags)} tags for {len(indices)} calls")
        return {"ok": True, "metas": [self._hand_over(t, i, keep) for t, i in zip(tags, indices)]}

    def _hand_over(self, tag: str, index: int | None, keep: list):
        flat = flatten_outputs(self.server.output(index), device=self.device)
        if isinstance(flat, str):
            raise Failure("profile", flat)
        return hand_over(flat, f"{self.public}/out_{tag}", self.route, keep)

    def end(self) -> dict:
        self.server.close()
        inputs = make_inputs(self.task, int.from_bytes(os.urandom(8), "little") >> 2, self.device)
        for _ in range(2):  # guarded calls after the timed ones: behaviour must not change with call count
            guarded_call(self.model, inputs, self.strict, self.device, self.state)
        del inputs
        release(self.device)
        return {"ok": True}


def probe(msg: dict, device: torch.device, keep: list) -> dict:
    """A small tensor shared by CUDA IPC, for the reference worker to check it can map our memory."""
    try:
        return {"ok": True, "meta": share_outputs([_full((4096,), float(msg["value"]), device=device)], keep)}
    except OSError as e:
        return {"ok": True, "meta": None, "reason": str(e)}


def warm_up() -> None:
    """One-time costs paid before the job comes (hidden entirely in a spare, see spares.py): the
    first entry of a dispatch mode imports for about 1.7 s, and a spare creates its CUDA context
    and takes its first memory snapshot."""
    device = os.environ.get(WARM_ENV, "cpu")
    dev = torch.device(device if device.startswith("cuda") else "cpu")
    with torch.no_grad(), OperatorGuard(strict=True):
        torch.empty(1, device=dev)
    poison_free_memory(dev)


def main(fd_in: int, fd_out: int) -> None:
    channel = ChildChannel(fd_in, fd_out)
    warm_up()
    job = channel.recv()
    if job is None:  # a spare that was never used
        return
    device = torch.device(job["device"])
    strict = job["policy"] == "strict"
    try:
        model, task = load_solution(job, device)
        channel.send({"loaded": True})
        keep: list = []  # outputs shared with the reference worker, held until the next request
        timing: TimingRun | None = None
        held = Held()
        state = HostState()  # the model's host tensors as they were before any input (GPU tasks)
        while (msg := channel.recv()) is not None:
            op = msg.get("op")
            keep.clear()
            if op == "weights":
                weights = load_weights(model, job["state_path"], strict)
                state = HostState(model) if device.type != "cpu" else HostState()
                channel.send({"ok": True, "init": weights.init, "why": weights.why})
            elif op == "run":
                steps = Steps()
                written, changed = run_pair(model, task, msg, strict, device, job["public"], keep, steps, state, held)
                channel.send({"ok": True, "outputs": written, "changed": changed, "steps": steps.seconds})
            elif op == "recheck":
                channel.send(held.recheck())
            elif op == "time_start":
                timing = TimingRun(model, task, msg, strict, device, job["public"], state)
                channel.send({"ok": True})
            elif op == "call" and timing is not None:
                channel.send(timing.call(msg))
            elif op == "graph" and timing is not None:
                channel.send(timing.capture(msg))
            elif op == "graph_end" and timing is not None:  # its replays were wrong: per call after all
                timing.server.drop_graphs()
                channel.send({"ok": True})
            elif op == "check" and timing is not None:
                channel.send(timing.check(msg, keep))
            elif op == "time_end" and timing is not None:
                channel.send(timing.end())
                timing = None
            elif op == "probe":
                channel.send(probe(msg, device, keep))
            elif op == "quit":
                return
    except Failure as f:
        channel.send({"ok": False, "stage": f.stage, "reason": f.reason})
    except Exception as e:
        channel.send({"ok": False, "stage": "run", "reason": f"{type(e).__name__}: {str(e)[:400]}",
                      "trace": traceback.format_exc()[-1500:]})


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
