"""The worker's side of a timing run that the harness drives call by call (timing.drive): the
harness sends each call's input seed only when it asks for the call, stamps the call with its own
clock, and decides how many calls to make and which outputs to check; a worker only draws the
inputs, makes the call, reports its own figures and keeps the last output until the next call."""

from __future__ import annotations

import math
import os
from contextlib import ExitStack
from typing import Callable

import torch

from cuda_agent.measure import CallTimer, TimingPlan, as_timer, make_inputs, release

# Bound at import, before a solution's code runs in the child.
_manual_seed, _urandom, _no_grad = torch.manual_seed, os.urandom, torch.no_grad


class CallServer:
    """One driven timing run of `fn` on the task's inputs: `call(seed)` draws the inputs of that
    seed, times the call with a CallTimer and keeps its output in `last`; the global random
    generator is reseeded from the OS after each draw, so nothing read from it tells the next
    inputs (the harness's next seed is drawn in the harness, not derived from this one). A trusted
    worker timing several callables in one paired run (eager and torch.compile) passes each call
    its own `fn` and keeps no output (none of theirs is checked)."""

    def __init__(self, fn: Callable[..., object], task, device: torch.device, plan: TimingPlan,
                 as_timing_thread: bool = False):
        self.fn, self.task, self.device = fn, task, device
        self._stack = ExitStack()
        if as_timing_thread:
            self._stack.enter_context(as_timer())
        self.timer = CallTimer(device, plan)
        self.last: object = None

    def call(self, seed: int, fn: Callable[..., object] | None = None, keep: bool = True) -> dict:
        self.last = None  # the previous output's memory is free before the next inputs are drawn
        inputs = make_inputs(self.task, int(seed), self.device)
        _manual_seed(int.from_bytes(_urandom(8), "little") >> 2)
        with _no_grad():
            times, out = self.timer(self.fn if fn is None else fn, inputs)
        self.last = out if keep else None
        return {"ok": True, "t": [times.device_ms, times.host_ms, times.left_ms]}

    def close(self) -> None:
        self.last = None
        self._stack.close()
        release(self.device)


def read_times(reply: dict) -> tuple[float, float, float] | None:
    """A worker's figures for one call, or None where they are not three finite numbers with the
    first two non-negative (the third, the difference of two synchronizes, may fall below zero)."""
    t = reply.get("t")
    if not isinstance(t, list) or len(t) != 3:
        return None
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in t):
        return None
    if t[0] < 0 or t[1] < 0:
        return None
    return float(t[0]), float(t[1]), float(t[2])
