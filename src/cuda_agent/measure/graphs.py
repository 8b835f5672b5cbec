"""CUDA graphs for timing: `calls` calls of a callable captured in one graph, each on input buffers
of its own, and timed by replaying the graph on input sets drawn afresh for every replay.

Why: a call of a few microseconds timed alone carries its launch, its host's jitter and the
events' resolution (H100: per-call timing of a 16 MB clamp moved 3.5-5.8% idle and 11-19% beside 8
busy CPU processes), while about a millisecond of the same calls replayed as one graph moved
0.5-1.3%. What a replay costs is the device's work for those calls: the host's time to issue them
(Python, dispatch) is in neither side's figure, the solution's nor its baselines'.

Before each replay the buffers are loaded with new input sets (a result worked out once at capture
is stale at the next replay, and every output checked after a replay is that of new inputs), and
the CallTimer empties the L2 before the replay as before any timed call. The graph API is bound at
import, before a solution's code runs in the child.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch

_CUDAGraph, _graph_capture, _Stream = torch.cuda.CUDAGraph, torch.cuda.graph, torch.cuda.Stream
_replay = torch.cuda.CUDAGraph.replay
_synchronize, _current_stream, _stream = torch.cuda.synchronize, torch.cuda.current_stream, torch.cuda.stream
_sleep = torch.cuda._sleep

MAX_GRAPH_CALLS = 64          # calls in one graph, at most
GRAPH_BYTES = 2 << 30         # their input sets and outputs together, at most


class NotCapturable(Exception):
    """Why a callable cannot be timed by graph replays (one line a person understands)."""


def graph_unsupported(device: torch.device) -> str:
    """Why calls on `device` cannot be captured at all ("" where they may be)."""
    return "" if device.type == "cuda" else "CUDA graphs need a CUDA device"


def graph_calls(call_ms: float, set_bytes: int, graph_ms: float) -> int:
    """How many calls one graph holds: about `graph_ms` of calls of `call_ms` each, 1 to
    MAX_GRAPH_CALLS, their inputs and outputs (`set_bytes` a call) within GRAPH_BYTES."""
    by_time = round(graph_ms / max(call_ms, 1e-4))
    by_memory = GRAPH_BYTES // max(set_bytes, 1)
    return int(max(1, min(MAX_GRAPH_CALLS, by_time, by_memory)))


def _signature(values: Sequence) -> list:
    return [(tuple(v.shape), v.dtype, v.device) if isinstance(v, torch.Tensor) else ("value", repr(v)) for v in values]


def _clear_launch_error() -> None:
    """A launch refused during a failed capture (on the legacy stream, say) leaves its error as the
    thread's last CUDA error, which the next launch check would raise: a launch that checks reads
    and clears it here."""
    for _ in range(2):
        try:
            _sleep(1)
            _synchronize()
            return
        except Exception:
            continue


def _repair_generator() -> None:
    """A capture that fails leaves the device's default random generator marked as capturing (the
    capture's end raised before the generator's epilogue ran: torch 2.11 on an H200, 2026-11-27), and
    every later random draw on the device raises "Offset increment outside graph capture encountered
    unexpectedly". Its state is replaced by a copy of itself: the seed and offset kept, the marks of
    the dead capture dropped."""
    try:
        generator = torch.cuda.default_generators[torch.cuda.current_device()]
        generator.graphsafe_set_state(generator.clone_state())
    except Exception:  # an older torch without graph-safe states: nothing to repair this way
        pass


class Graph:
    """`fn` captured once per input set of `sets` into one CUDA graph (after two calls on a side
    stream, as capture asks). Raises NotCapturable where capture fails, or where the sets differ in
    shape, type or in a value that is not a tensor (a graph replays what it captured)."""

    def __init__(self, fn: Callable[..., object], sets: Sequence[Sequence], more: Sequence[Sequence] = ()):
        first = _signature(sets[0])
        if any(_signature(s) != first for s in [*sets, *more]):
            raise NotCapturable("the task's inputs change shape, type or a non-tensor value from one draw to the "
                                "next, and a graph replays the shapes it captured")
        self.inputs = [[v.clone() if isinstance(v, torch.Tensor) else v for v in s] for s in sets]
        try:
            with torch.no_grad():
                side = _Stream()
                side.wait_stream(_current_stream())
                with _stream(side):
                    for s in self.inputs[:2]:
                        fn(*s)
                _current_stream().wait_stream(side)
                _synchronize()
                self.graph = _CUDAGraph()
                with _graph_capture(self.graph):
                    self.outputs = [fn(*s) for s in self.inputs]
            _synchronize()
        except Exception as e:
            self.inputs, self.outputs = [], []
            _clear_launch_error()
            _repair_generator()
            raise NotCapturable(f"{type(e).__name__}: {' '.join(str(e).split())[:300]}") from None

    @property
    def calls(self) -> int:
        return len(self.inputs)

    def load(self, index: int, values: Sequence) -> None:
        """A new input set into the buffers of captured call `index` (same shapes and types)."""
        buffers = self.inputs[index]
        if _signature(values) != _signature(buffers):
            raise NotCapturable("an input set drawn for a replay differs in shape or type from the captured ones")
        for b, v in zip(buffers, values):
            if isinstance(b, torch.Tensor):
                b.copy_(v)

    def replay(self) -> None:
        _replay(self.graph)
