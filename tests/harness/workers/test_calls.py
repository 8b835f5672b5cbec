"""The worker's side of a driven timing run (workers/calls.py): nothing a solution can read in its
process tells the next call's inputs, and a worker's figures are read strictly."""

import pytest
import torch

from cuda_agent.measure import TimingPlan, make_inputs, module_from_source
from cuda_agent.harness.workers.calls import CallServer, read_times

TASK = '''
import torch
class Model(torch.nn.Module):
    def forward(self, x):
        return x * 2
def get_inputs():
    return [torch.randn(64)]
def get_init_inputs():
    return []
'''


def test_the_global_generator_tells_nothing_of_the_inputs_after_a_call():
    """The inputs are drawn with the seed the harness sent; the generator a solution could read
    afterwards is reseeded from the OS, so what it draws next is not the set's nor the next set's."""
    task = module_from_source(TASK, "t", "t.py")
    dev = torch.device("cpu")
    server = CallServer({"solution": lambda x: x * 2}, task, dev, TimingPlan(min_runs=1, max_runs=1))
    server.call(1234, "solution")
    assert torch.equal(server.last, make_inputs(task, 1234, dev)[0] * 2)
    after_first = torch.randn(64)
    server.call(1234, "solution")
    assert torch.initial_seed() != 1234
    after_second = torch.randn(64)
    drawn = make_inputs(task, 1234, dev)[0]
    assert not torch.equal(after_first, after_second)       # not a function of the seed
    assert not torch.equal(after_first, drawn)
    server.close()


def test_figures_are_read_strictly():
    assert read_times({"t": [0.5, 0.1, -0.002]}) == (0.5, 0.1, -0.002)  # the off-stream difference may be negative
    for bad in ({}, {"t": [1, 2]}, {"t": [-1.0, 0, 0]}, {"t": [1, -0.1, 0]}, {"t": [float("nan"), 0, 0]},
                {"t": [True, 0, 0]}, {"t": "1,2,3"}):
        assert read_times(bad) is None, bad


class _CpuGraph:
    """measure.Graph's interface on the CPU (the device tests time the real one): a replay runs
    each captured call again on its buffers and writes into the output it returned at capture."""

    refuse: set = set()

    def __init__(self, fn, sets, more=()):
        from cuda_agent.measure import NotCapturable

        if fn in self.refuse:
            raise NotCapturable("RuntimeError: operation not permitted when stream is capturing")
        self.fn, self.inputs = fn, [[v.clone() for v in s] for s in sets]
        self.outputs = [fn(*s) for s in self.inputs]

    @property
    def calls(self) -> int:
        return len(self.inputs)

    def load(self, index, values) -> None:
        for b, v in zip(self.inputs[index], values):
            b.copy_(v)

    def replay(self) -> None:
        for buffers, out in zip(self.inputs, self.outputs):
            out.copy_(self.fn(*buffers))


def test_a_captured_call_replays_every_call_on_the_inputs_of_its_seed(monkeypatch):
    """After capture, a call is one replay of a graph of several calls, call j on the inputs of
    call_seed(seed, j); each one's output is the one a check hands over; the figures are the replay's."""
    from cuda_agent.harness.workers import calls
    from cuda_agent.measure import call_seed

    monkeypatch.setattr(calls, "Graph", _CpuGraph)
    monkeypatch.setattr(calls, "graph_unsupported", lambda device: "")
    task = module_from_source(TASK, "t", "t.py")
    dev = torch.device("cpu")
    double, triple = (lambda x: x * 2), (lambda x: x * 3)
    server = CallServer({"eager": double, "compile": triple}, task, dev, TimingPlan(graph_ms=1e6))
    try:
        got = server.capture(5, None)
        assert got["captured"] and got["calls"] == 64   # a second of tiny calls: capped
        assert server.capture(5, 3) == {"ok": True, "captured": True, "calls": 3}
        assert read_times(server.call(77, "compile", keep=True)) is not None
        for j in range(3):
            assert torch.equal(server.output(j), make_inputs(task, call_seed(77, j), dev)[0] * 3)
        _CpuGraph.refuse = {triple}
        refused = server.capture(6, 3)
        assert not refused["captured"] and "stream is capturing" in refused["reason"] and not server.graphs
        server.call(78, "eager")
        assert torch.equal(server.output(None), make_inputs(task, 78, dev)[0] * 2)   # per call again
    finally:
        _CpuGraph.refuse = set()
        server.close()


def test_a_replays_outputs_are_handed_over_in_one_request_and_checked_in_one(monkeypatch, tmp_path):
    """The check of a replay of a graph of several calls (harness/replays.wrong_output): the child hands every call's output
    over in one request, the reference worker compares each with its own on that call's seed in one, and stops at
    the first wrong one (three round trips a call held the GPU alone for 0.15-0.28 s of an evaluation)."""
    from cuda_agent.harness.workers import calls
    from cuda_agent.harness.workers.child import Failure, TimingRun
    from cuda_agent.harness.workers.reference import compare_all
    from cuda_agent import measure
    from cuda_agent.harness.workers.runtime import HostState
    from cuda_agent.measure import call_seed

    monkeypatch.setattr(calls, "Graph", _CpuGraph)
    monkeypatch.setattr(calls, "graph_unsupported", lambda device: "")
    task = module_from_source(TASK, "t", "t.py")
    dev, model = torch.device("cpu"), task.Model()
    run = TimingRun(model, task, {"plan": TimingPlan().to_dict(), "route": "files"}, True, dev, str(tmp_path),
                    HostState())
    assert run.capture({"seed": 5, "calls": 3})["captured"]
    run.call({"seed": 77})
    tags = [f"t9_{j}" for j in range(3)]

    def check(seeds: list[int]) -> list[dict]:
        keep: list = []
        metas = run.check({"op": "check", "tags": tags, "indices": [0, 1, 2]}, keep)["metas"]
        items = [{"tag": t, "prefix": f"{tmp_path}/out_{t}", "meta": m, "seed": s} for t, m, s in zip(tags, metas, seeds)]
        return compare_all({"op": "compare_all", "items": items, "route": "files", "atol": 1e-6, "rtol": 1e-6},
                           model, task, dev)

    right = [call_seed(77, j) for j in range(3)]
    released = []
    monkeypatch.setattr(measure, "release", lambda device: released.append(device))
    assert [v["ok"] for v in check(right)] == [True, True, True]
    assert released == [dev]   # the memory handed back once a request, not once a call (a synchronize each)
    swapped = check([right[0], right[2], right[1]])   # call 2's output is not the reference's on call 2's inputs
    assert [v["ok"] for v in swapped] == [True, False] and swapped[1]["reason"]
    run.server.last[2] = run.server.last[2] + 1.0     # a stale or skipped call
    assert [v["ok"] for v in check(right)] == [True, True, False]
    run.server.last[0] = run.server.last[0] + 1.0     # the first wrong: the later calls' files go too, uncompared
    assert [v["ok"] for v in check(right)] == [False] and not list(tmp_path.glob("out_*"))
    with pytest.raises(Failure, match="2 tags for 3 calls"):
        run.check({"op": "check", "tags": tags[:2], "indices": [0, 1, 2]}, [])
    run.server.close()
