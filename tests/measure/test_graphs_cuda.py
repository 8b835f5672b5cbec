"""CUDA graphs for timing (measure/graphs.py), on the device: a graph replays its captured calls on
whatever input sets were loaded into its buffers before the replay; what cannot be replayed as
captured (inputs whose shapes change between draws, host synchronisation in the call) is refused
with a reason, and leaves the process able to go on. Run on the GPU machine:
`pytest -m cuda tests/measure/test_graphs_cuda.py`."""

from __future__ import annotations

import pytest
import torch

from cuda_agent.devices import lock_name
from cuda_agent.measure import CallTimer, Graph, NotCapturable, TimingPlan, device_lock

pytestmark = pytest.mark.cuda


@pytest.fixture
def gpu_alone():
    with device_lock(lock_name("cuda")):
        yield torch.device("cuda")


def _sets(n: int, device, size: int = 1 << 16) -> list[list]:
    return [[torch.randn(size, device=device)] for _ in range(n)]


def _affine(x):
    return torch.relu(x * 1.5 + 0.25)


def test_a_replay_computes_every_call_on_the_sets_loaded_before_it(gpu_alone):
    g = Graph(_affine, _sets(4, gpu_alone))
    assert g.calls == 4
    fresh = _sets(4, gpu_alone)
    for j, values in enumerate(fresh):
        g.load(j, values)
    g.replay()
    torch.cuda.synchronize()
    for (x,), out in zip(fresh, g.outputs):
        assert torch.equal(out, _affine(x))


def test_inputs_whose_shape_changes_between_draws_are_refused(gpu_alone):
    with pytest.raises(NotCapturable, match="change shape"):
        Graph(_affine, _sets(2, gpu_alone), more=[[torch.randn(100, device=gpu_alone)]])


def test_a_call_that_synchronises_with_the_host_is_refused_and_the_process_goes_on(gpu_alone):
    def syncs(x):
        return x * float(x.sum().item())

    with pytest.raises(NotCapturable):
        Graph(syncs, _sets(2, gpu_alone))
    assert torch.equal(_affine(torch.ones(4, device=gpu_alone)), torch.full((4,), 1.75, device=gpu_alone))
    torch.cuda._sleep(10)   # a launch check after the failed capture raises nothing stale
    torch.cuda.synchronize()
    torch.randn(4, device=gpu_alone)   # nor a random draw ("Offset increment outside graph capture", unrepaired)


def test_a_capture_that_fails_leaves_the_random_generator_usable_and_its_seed_kept(gpu_alone):
    def syncs(x):
        return x * float(x.sum().item())

    torch.cuda.manual_seed(1234)
    expected = torch.randn(8, device=gpu_alone)
    torch.cuda.manual_seed(1234)
    with pytest.raises(NotCapturable):
        Graph(syncs, [[torch.ones(4, device=gpu_alone)] for _ in range(2)])
    assert torch.equal(torch.randn(8, device=gpu_alone), expected)


def test_a_launch_on_the_legacy_stream_is_refused_or_left_out_of_the_graph_and_the_process_goes_on(gpu_alone):
    """Either the capture fails, or the launch ran at once and the graph's replays leave its outputs
    stale: the harness checks one replay on new inputs before it times by graphs (harness/replays.capture)."""
    legacy = torch.cuda.default_stream()

    def on_legacy(x):
        with torch.cuda.stream(legacy):
            return x + 1

    try:
        g = Graph(on_legacy, _sets(2, gpu_alone))
    except NotCapturable:
        pass
    else:  # non-blocking capture streams let the legacy stream's launch run at once: it is not in the graph
        fresh = _sets(2, gpu_alone)
        for j, values in enumerate(fresh):
            g.load(j, values)
        g.replay()
        torch.cuda.synchronize()
        assert not all(torch.equal(out, x + 1) for (x,), out in zip(fresh, g.outputs))
    torch.cuda._sleep(10)
    torch.cuda.synchronize()
    torch.randn(4, device=gpu_alone)


def test_a_replay_timed_by_the_call_timer_is_the_device_time_of_its_calls(gpu_alone):
    """A one-element add is a few microseconds of GPU work and more of host dispatch: timed alone,
    the host's issue time is its floor; a replay of 64 of them costs the GPU's time alone."""
    x = torch.ones(1, device=gpu_alone)
    timer = CallTimer(gpu_alone, TimingPlan())
    alone = sorted(timer(lambda t: t + 1, [x])[0].claimed_ms for _ in range(50))[25]
    g = Graph(lambda t: t + 1, [[x.clone()] for _ in range(64)])
    replays = sorted(timer(g.replay, [])[0].claimed_ms / 64 for _ in range(50))[25]
    assert 0 < replays < alone, (replays, alone)

