"""The worker's side of a timing run that the harness drives call by call (timing.drive,
paired.drive_paired): the harness sends each call's input seed only when it asks for the call,
stamps the call with its own clock, and decides how many calls to make and which outputs to
check; a worker only draws the inputs, makes the call, reports its own figures and keeps the last
output until the next call. Where the harness asks for CUDA graphs (graphs.py), a call is one
replay of a graph of several calls, each on inputs of its own drawn from the call's seed."""

from __future__ import annotations

import math
import os
import time
from contextlib import ExitStack
from typing import Callable

import torch

from cuda_agent.measure import (CallTimer, Graph, NotCapturable, TimingPlan, as_timer, call_seed, graph_calls,
                                graph_unsupported, make_inputs, release, seed_generators)

# Bound at import, before a solution's code runs in the child.
_urandom, _no_grad = os.urandom, torch.no_grad


def _reseed(device: torch.device) -> None:
    """The global generators reseeded from the OS: nothing read from them tells the next inputs."""
    seed_generators(int.from_bytes(_urandom(8), "little") >> 2, device)


def _bytes(value) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (list, tuple)):
        return sum(_bytes(v) for v in value)
    return 0


class CallServer:
    """One driven timing run of named callables (`fns`: the solution's child has one, the reference
    worker eager and torch.compile) on the task's inputs: `call(seed, which)` draws the inputs of
    that seed, times the call with a CallTimer and keeps its output in `last` (where `keep`; none
    of the baselines' is checked). The global random generator is reseeded from the OS after each
    draw (the harness's next seed is drawn in the harness, not derived from this one). After
    `capture`, a call of a captured callable is a replay of its graph."""

    def __init__(self, fns: dict[str, Callable[..., object]], task, device: torch.device, plan: TimingPlan,
                 as_timing_thread: bool = False):
        self.fns, self.task, self.device, self.plan = fns, task, device, plan
        self._stack = ExitStack()
        if as_timing_thread:
            self._stack.enter_context(as_timer())
        self.timer = CallTimer(device, plan)
        self.graphs: dict[str, Graph] = {}
        self.last: object = None   # the last call's output; after a replay, the outputs of its calls in order

    def call(self, seed: int, which: str, keep: bool = True) -> dict:
        self.last = None  # the previous output's memory is free before the next inputs are drawn
        graph = self.graphs.get(which)
        t0 = time.perf_counter()
        if graph is None:
            inputs = make_inputs(self.task, int(seed), self.device)
            prep_ms = (time.perf_counter() - t0) * 1e3
            _reseed(self.device)
            with _no_grad():
                times, out = self.timer(self.fns[which], inputs)
        else:
            for j in range(graph.calls):  # one set at a time: a graph holds its own copies
                graph.load(j, make_inputs(self.task, call_seed(int(seed), j), self.device))
            prep_ms = (time.perf_counter() - t0) * 1e3
            _reseed(self.device)
            times, _ = self.timer(graph.replay, [])
            out = graph.outputs
        self.last = out if keep else None
        # prep_ms: drawing and loading the request's input sets, before the timed call (trusted only from a trusted
        # worker: the harness takes a baseline's from it where the solution draws fewer sets, profiling._paired_run)
        return {"ok": True, "t": [times.device_ms, times.host_ms, times.left_ms], "prep_ms": round(prep_ms, 4)}

    def output(self, index: int | None) -> object:
        """The last call's output; after a replay, that of its call `index`."""
        if isinstance(self.last, list) and self.graphs:
            return self.last[index or 0]
        return self.last

    def capture(self, seed: int, calls: int | None) -> dict:
        """Every callable captured in a CUDA graph of `calls` calls, on the input sets of
        `call_seed(seed, j)` (None: as many calls as about `plan.graph_ms` of the first callable's
        take, timed here per call). The reply says whether, how many calls, or why not."""
        if why := graph_unsupported(self.device):
            return {"ok": True, "captured": False, "reason": why}
        try:
            if calls is None:
                first = next(iter(self.fns))
                ms = [self.call(call_seed(int(seed), 1000 + i), first)["t"][0] for i in range(3)]
                size = _bytes(self.last) + _bytes(make_inputs(self.task, int(seed), self.device))
                # the least of three: the capture runs beside other evaluations' GPU work, which only slows a call
                calls = graph_calls(min(ms), size, self.plan.graph_ms)
            self.last = None
            sets = [make_inputs(self.task, call_seed(int(seed), j), self.device) for j in range(int(calls) + 1)]
            _reseed(self.device)
            for which, fn in self.fns.items():
                self.graphs[which] = Graph(fn, sets[:-1], sets[-1:])
            del sets
        except Exception as e:  # NotCapturable, or no memory for the graphs' input sets: timed per call
            self.drop_graphs()
            why = str(e) if isinstance(e, NotCapturable) else f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
            return {"ok": True, "captured": False, "reason": why}
        return {"ok": True, "captured": True, "calls": int(calls)}

    def drop_graphs(self) -> None:
        self.graphs.clear()
        self.last = None
        release(self.device)

    def close(self) -> None:
        self.last = None
        self.graphs.clear()
        self._stack.close()
        release(self.device)


def _number(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def read_times(reply: dict) -> tuple[float, float, float] | None:
    """A worker's figures for one call, or None where they are not three finite numbers with the
    first two non-negative (the third, the difference of two synchronizes, may fall below zero)."""
    t = reply.get("t")
    if not isinstance(t, list) or len(t) != 3:
        return None
    if not all(_number(x) for x in t):
        return None
    if t[0] < 0 or t[1] < 0:
        return None
    return float(t[0]), float(t[1]), float(t[2])


def read_prep(reply: dict) -> float | None:
    """A worker's time to draw and load one request's input sets (`prep_ms`), or None where it is not a finite
    non-negative number."""
    prep = reply.get("prep_ms")
    return float(prep) if _number(prep) and prep >= 0 else None
