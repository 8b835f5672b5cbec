"""The worker's side of a driven timing run (workers/calls.py): nothing a solution can read in its
process tells the next call's inputs, and a worker's figures are read strictly."""

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
