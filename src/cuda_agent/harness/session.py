"""One evaluation's conversation with its two processes, once the solution is built: the
reference worker (where no solution ever runs) and the solution's sandboxed child. Correctness on
input sets drawn here; the timing, paired, in profiling.py (evaluation.py starts both and scores
what they find). Every failure is a `Stop`: a stage and one line a person understands.
"""

from __future__ import annotations

import os
import secrets
import time
from contextlib import ExitStack, contextmanager
from typing import Iterator

from cuda_agent.devices import Backend, lock_name
from cuda_agent.harness.config import EvalConfig
from cuda_agent.harness.result import EvalResult, Fault
from cuda_agent.measure import NEAR, SHIFTED, device_lock
from cuda_agent.sandbox import ChildFailed, Process


class Stop(Exception):
    """Ends an evaluation early with a failed stage and reason; `fault` where the failure is not
    the solution's (result.Fault)."""

    def __init__(self, stage: str, reason: str, fault: Fault | None = None):
        super().__init__(reason)
        self.stage, self.reason, self.fault = stage, reason, fault


def new_seed() -> int:
    """A seed the solution cannot predict (input sets, weights, timed calls)."""
    return secrets.randbits(62)


@contextmanager
def timed(result: EvalResult, step: str):
    """Adds the wall time of the block to result.stage_seconds[step] (also when it fails)."""
    t0 = time.monotonic()
    try:
        yield
    finally:
        result.stage_seconds[step] = round(result.stage_seconds.get(step, 0.0) + time.monotonic() - t0, 3)


def add_steps(result: EvalResult, who: str, steps) -> None:
    """A worker's own seconds per step, summed into result.details["steps_s"] (diagnostics)."""
    if isinstance(steps, dict):
        total = result.details.setdefault("steps_s", {})
        for k, v in steps.items():
            if isinstance(v, (int, float)):
                total[f"{who}.{k}"] = round(total.get(f"{who}.{k}", 0.0) + v, 4)


class Session:
    """One evaluation's conversation with the reference worker and the solution child."""

    def __init__(self, ref: Process, child: Process, config: EvalConfig, job: dict, deadline: float):
        self.ref, self.child, self.config, self.job, self.deadline = ref, child, config, job, deadline
        self.tags = 0
        self.route = "files"  # how outputs reach the reference worker (see transfer.py)

    def _left(self) -> float:
        return max(1.0, self.deadline - time.monotonic())

    @contextmanager
    def off_clock(self) -> Iterator[None]:
        """A block whose time is not the solution's (a wait for the device's lock behind other evaluations, the
        reference's compile) added to its deadline: under -n 8 on one H200 (2026-11-28) an honest solution's
        evaluation spent its whole timeout in such waits and its last check was given 1 s, then refused."""
        start = time.monotonic()
        try:
            yield
        finally:
            self.deadline += time.monotonic() - start

    def hold_device(self, stack: ExitStack, result: EvalResult, device: str, shared: bool = True) -> None:
        """The device's lock taken into `stack`, shared (beside other evaluations' runs) or alone (to time), the
        wait for it timed as the stage `wait` or `wait_alone` and kept off the solution's clock."""
        with timed(result, "wait" if shared else "wait_alone"), self.off_clock():
            stack.enter_context(device_lock(lock_name(device), shared=shared))

    def ask_reference(self, message: dict, timeout_s: float = 900) -> dict:
        reply = self.ref.request(message, timeout_s)
        if "error" in reply:
            raise Stop("run", f"the reference itself failed ({reply['error']}); the task is broken, not the solution",
                       fault="reference")
        return reply

    def ask_child(self, message: dict | None, stage: str) -> dict:
        try:
            reply = self.child.request(message, self._left()) if message else self.child.recv(self._left())
        except ChildFailed as e:
            raise Stop(stage, f"the solution {e}") from None
        if not reply.get("ok", reply.get("loaded", False)):
            raise Stop(reply.get("stage", stage), str(reply.get("reason", "the solution failed")))
        return reply

    def start(self, result: EvalResult) -> None:
        """The job to both processes; the reference's weights to the solution (each step's wall
        time in result.stage_seconds as start.*, diagnostics only)."""
        self.ref.send({**self.job, "task_path": self.job["reference_task_path"]})
        self.child.send({k: v for k, v in self.job.items() if k != "reference_task_path"})
        with timed(result, "start.reference"):
            try:
                ready = self.ref.recv(900)
            except ChildFailed as e:
                raise Stop("run", f"the reference worker {e}", fault="reference") from None
        if "error" in ready:
            raise Stop("run", f"the reference itself failed ({ready['error']}); the task is broken, not the solution",
                       fault="reference")
        os.chmod(self.job["state_path"], 0o644, follow_symlinks=False)
        with timed(result, "start.child"):
            self.ask_child(None, "run")
        with timed(result, "start.weights"):
            weights = self.ask_child({"op": "weights"}, "correctness")
            result.init = weights.get("init", "state_dict")
            if weights.get("why"):  # why the reference's state_dict was not copied in, or not cleanly
                result.details["weights"] = str(weights["why"])

    def choose_route(self, backend: Backend, result: EvalResult) -> None:
        """CUDA IPC for the outputs when the reference worker can map a probe the child shares
        (the driver may refuse between users); files otherwise."""
        if backend.is_cuda and self.config.transfer == "auto":
            value = float(secrets.randbelow(1 << 20))
            shared = self.ask_child({"op": "probe", "value": value}, "run")
            if shared.get("meta"):
                v = self.ask_reference({"op": "probe", "value": value, "meta": shared["meta"]})
                self.route = "ipc" if v.get("ok") else "files"
                if not v.get("ok"):
                    result.details["ipc_refused"] = v.get("reason", "")
        result.details["transfer"] = self.route

    def check_output(self, tag: str, meta) -> dict:
        """The reference worker's verdict on the output of `tag`, mapped from the child's memory or
        read from where the child must write it (never a path the child names itself); `meta` is
        the child's dtypes and shapes (and IPC handles)."""
        return self.ask_reference({"op": "compare", "tag": tag, "prefix": f"{self.job['public']}/out_{tag}", "meta": meta,
                          "route": self.route, "atol": self.config.atol, "rtol": self.config.rtol})

    def check_outputs(self, items: list[dict]) -> list[dict]:
        """`check_output` for several outputs in one request, each item its `tag`, the child's `meta` and the input
        `seed` (an ordinary set): the verdicts in order, up to and with the first wrong one. Fewer verdicts than
        items without a wrong one is the reference worker's fault."""
        items = [{**item, "prefix": f"{self.job['public']}/out_{item['tag']}"} for item in items]
        verdicts = self.ask_reference({"op": "compare_all", "items": items, "route": self.route,
                                       "atol": self.config.atol, "rtol": self.config.rtol}).get("verdicts")
        # in order, up to and with the first wrong one: every verdict a dict, all right but the last, which is wrong
        # where fewer than the items came back
        sound = isinstance(verdicts, list) and 0 < len(verdicts) <= len(items) and \
            all(isinstance(v, dict) for v in verdicts) and all(v.get("ok") for v in verdicts[:-1]) and \
            (len(verdicts) == len(items) or not verdicts[-1].get("ok"))
        if not sound:
            raise Stop("profile", f"the reference worker's verdicts on {len(items)} outputs are not in order "
                                  f"({str(verdicts)[:200]})", fault="harness")
        return verdicts

    def next_tag(self) -> str:
        self.tags += 1
        return f"t{self.tags}"

    def _new_tags(self, n: int) -> list[tuple]:
        out = []
        for _ in range(n):
            tag, seed = self.next_tag(), new_seed()
            self.ask_reference({"op": "reference", "tag": tag, "seed": seed})
            out.append((tag, seed))
        return out

    def _near_duplicate(self, origin: tuple) -> tuple:
        """A tag for the input set `origin` (a drawn set or a near duplicate: a run's tuple) with a few
        values taken from another draw (variants.near_duplicate)."""
        chain = origin[2] if self.kinds.get(origin[0]) == NEAR else []
        tag, variant = self.next_tag(), [*chain, new_seed()]
        self.ask_reference({"op": "reference", "tag": tag, "seed": origin[1], "variant": variant, "kind": NEAR})
        self.kinds[tag], self.origins[tag] = NEAR, int(origin[0][1:])
        return tag, origin[1], variant

    def _shifted(self, result: EvalResult) -> tuple:
        """A tag for an input set whose continuous inputs are moved by x -> a*x + b
        (variants.shifted), or for an ordinary set where the reference's output on the shifted one
        is not finite (the shift left the task's domain) or nothing could be shifted."""
        tag, seed, variant = self.next_tag(), new_seed(), new_seed()
        reply = self.ask_reference({"op": "reference", "tag": tag, "seed": seed, "variant": variant, "kind": SHIFTED})
        result.details["shifted_set"] = str(reply.get("shifted", ""))
        if reply.get("shifted") != "used":
            return tag, seed
        self.kinds[tag] = SHIFTED
        return tag, seed, variant, SHIFTED

    def _follows(self, tags: list[str]) -> dict:
        """The reference worker's judgement across the sets `tags`: `reason` where the solution's
        outputs stand still while the reference's move, `barely` where the reference's barely move
        on the sets get_inputs drew (workers/fingerprints.py)."""
        ordinary = [t for t in tags if self.kinds.get(t) != SHIFTED]
        return self.ask_reference({"op": "follows", "tags": tags, "ordinary": ordinary, "atol": self.config.atol,
                          "rtol": self.config.rtol})

    def correctness(self, result: EvalResult) -> None:
        """`correctness_trials` input sets of their own, the last of them shifted away from get_inputs'
        distribution where the task allows; among them, three near duplicates in a chain (each a few values
        from another draw away from the one before): two right after their origin, one a set later. Run two
        at a time back to back; last, whether the outputs moved with the inputs across the sets as the
        reference's did."""
        result.stage = "correctness"
        self.kinds: dict[str, str] = {}  # tag -> NEAR or SHIFTED: the input sets made from a drawn one
        self.origins: dict[str, int] = {}  # tag of a near duplicate -> the number of the set it was made from
        worst, trials = 0.0, max(2, self.config.correctness_trials)
        runs = self._new_tags(trials - 1)
        # A cache keyed on a sample of the input's contents escapes one near duplicate where a moved value
        # lies in its sample (8 values moved, a 64-value sample of 262,144: 0.2% of evaluations, seen in the
        # corpus), so two follow in a chain; and a cache that never replays the call just before it would
        # escape every near duplicate that follows its origin, so the third comes a set later.
        runs.append(self._near_duplicate(runs[-1]))
        runs.append(self._near_duplicate(runs[-1]))
        runs.append(self._shifted(result))
        runs.append(self._near_duplicate(runs[-2]))
        total, seen = len(runs), []
        for i in range(0, total, 2):
            pair = runs[i:i + 2]
            reply = self.ask_child({"op": "run", "runs": pair, "route": self.route}, "correctness")
            add_steps(result, "child", reply.get("steps"))
            written, changed = reply.get("outputs"), reply.get("changed") or []
            for tag, *_ in pair:
                v = self.check_output(tag, written.get(tag) if isinstance(written, dict) else None)
                add_steps(result, "reference", v.get("steps"))
                seen.append(tag)
                if not v["ok"] or tag in changed:
                    why = self._wrong(int(tag[1:]), total, v, tag in changed, result.init, self.kinds.get(tag),
                                      result.details.get("weights", ""), self.origins.get(tag, 0))
                    still = self._follows(seen)["reason"] if not v["ok"] else ""
                    raise Stop("correctness", f"{still}; {why}" if still else why)
                if v.get("scale") and f"{v['scale']}_outputs" not in result.flags:
                    result.flags.append(f"{v['scale']}_outputs")  # tiny: judged by relative error; degenerate
                if self.kinds.get(tag) == NEAR and not v.get("changed"):
                    result.flags.append("near_duplicate_unchanged")  # no floating input to change: no replay check
                worst = max(worst, v.get("max_abs_error", 0.0))
        follows = self._follows(seen)
        if follows["reason"]:
            raise Stop("correctness", follows["reason"])
        if follows["barely"]:
            result.flags.append("outputs_barely_depend_on_inputs")  # the task is weak: its outputs hardly vary
        shifted = "one set shifted by x -> a*x + b; " if SHIFTED in self.kinds.values() else ""
        result.correct, result.max_abs_error = True, worst
        result.reason = (f"correct on {trials} input sets and three near duplicates "
                         f"({shifted}max abs error {worst:.2g})")

    @staticmethod
    def _wrong(n: int, total: int, v: dict, changed: bool, init: str | None, kind: str | None = None,
               weights: str = "", origin: int = 0) -> str:
        """Why input set n failed, naming the hack its shape suggests (`kind`: how the set was made;
        `weights`: why the reference's state_dict was not copied in, where it was not; `origin`: the set a
        near duplicate was made from)."""
        if v["ok"]:  # right in the end, but not when forward returned
            return (f"the output of input set {n} of {total} changed after forward returned, while later calls ran: "
                    "work deferred to a later call (every output must be complete when forward returns)")
        reason = f"wrong output on input set {n} of {total}: {v['reason']}"
        if changed:
            reason += ("; it changed after forward returned, while later calls ran (work deferred to a later call, "
                       "or one output buffer reused by every call?)")
        elif kind == NEAR:
            reason += (f" (this set repeats set {origin} with a few values of each floating-point input taken from "
                       "another draw of the task's inputs: results replayed for inputs that look like ones seen "
                       "before, such as a cache keyed on a sample of their contents?)")
        elif kind == SHIFTED:
            reason += (" (this set's continuous inputs were moved by x -> a*x + b, away from get_inputs' "
                       "distribution, exact zeros kept: an output that does not follow its inputs, or a kernel "
                       "that assumes their range?)")
        if init == "same_seed":
            reason += (" (ModelNew holds its own weights, not the reference's: "
                       f"{weights or 'names or shapes differ from the reference state_dict'}; both models were "
                       "constructed after the same seed, as KernelBench does: create the same parameters in the "
                       "same order, or hold the reference's names and shapes as ordinary tensors to get its "
                       "weights copied in)")
        return reason

    def recheck(self, result: EvalResult) -> None:
        """Last: every correctness output the child could hold is still what forward returned,
        after every later call (the other sets' and the timed ones)."""
        reply = self.ask_child({"op": "recheck"}, "correctness")
        result.details["outputs_rechecked"] = reply.get("held", 0)
        changed = reply.get("changed") or []
        if changed:
            result.correct = False
            raise Stop("correctness", f"the output of input set {str(changed[0]).lstrip('t')} changed after forward "
                                      "returned, while later calls ran: an output must stay what it was when "
                                      "returned (a buffer handed out again, or written into by a later call?)")
