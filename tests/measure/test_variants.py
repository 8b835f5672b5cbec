"""The input sets made from a drawn one (variants.py): each must differ where the output changes and
stay an input the task could have drawn, so an honest kernel that exploits the structure of its
inputs is never failed for it."""

from __future__ import annotations

import types

import pytest
import torch

from cuda_agent.measure import SHIFTED, make_inputs, varied_inputs
from cuda_agent.measure.variants import MOVED

CPU = torch.device("cpu")


def task(get_inputs) -> types.SimpleNamespace:
    return types.SimpleNamespace(get_inputs=get_inputs)


def near(t, seed: int = 7, variant: int = 11) -> tuple[list, list, int]:
    base = make_inputs(t, seed, CPU)
    moved, changed = varied_inputs(t, seed, CPU, variant)
    return base, moved, changed


def test_near_duplicate_is_the_same_in_every_process_and_differs_per_variant():
    t = task(lambda: [torch.randn(64, 64), torch.randint(0, 9, (10,)), 3])
    base, a, changed = near(t)
    b = make_inputs(t, 7, CPU, 11)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], base[1]) and a[2] == 3
    assert 0 < int((a[0] != base[0]).sum()) <= MOVED == changed
    assert not torch.equal(make_inputs(t, 7, CPU, 12)[0], a[0])


def test_a_chain_of_near_duplicates_moves_a_few_places_more_at_each_link():
    """The harness's second near duplicate is made from its first ([v1, v2]): a cache keyed on a
    sample of the input that the first link moved (and so recomputed) replays on the second."""
    t = task(lambda: [torch.randn(256, 256), 3])
    first, _ = varied_inputs(t, 7, CPU, 11)
    second, changed = varied_inputs(t, 7, CPU, [11, 12])
    assert torch.equal(varied_inputs(t, 7, CPU, [11])[0][0], first[0])  # a chain of one is the near duplicate
    assert torch.equal(make_inputs(t, 7, CPU, [11, 12])[0], second[0])  # the same in every process
    assert 0 < int((second[0] != first[0]).sum()) <= MOVED == changed
    assert int((second[0] != make_inputs(t, 7, CPU)[0]).sum()) > MOVED  # both links' places differ from the draw
    with pytest.raises(ValueError, match="one variant"):
        varied_inputs(t, 7, CPU, [11, 12], kind=SHIFTED)


def test_near_duplicate_of_lower_triangular_inputs_stays_lower_triangular():
    """KernelBench L1-15: rotating values among random places put some above the diagonal, and an
    honest kernel that reads only the lower triangles was accused of replaying results."""
    t = task(lambda: [torch.tril(torch.randn(128, 128)), torch.tril(torch.randn(128, 128))])
    base, moved, _ = near(t)
    for b, m in zip(base, moved):
        assert torch.equal(m, m.tril()) and 0 < int((m != b).sum()) <= MOVED


def test_near_duplicate_of_a_band_changes_values_inside_the_band():
    t = task(lambda: [torch.randn(256, 256).triu(-1).tril(1)])
    base, moved, _ = near(t)
    assert torch.equal(moved[0], moved[0].triu(-1).tril(1)) and int((moved[0] != base[0]).sum()) > 0


def test_near_duplicate_of_a_symmetric_matrix_stays_symmetric():
    t = task(lambda: [(lambda a: a + a.T)(torch.randn(64, 64))])
    base, moved, _ = near(t)
    assert torch.equal(moved[0], moved[0].T) and int((moved[0] != base[0]).sum()) > 0


def test_near_duplicate_replaces_whole_sorted_and_probability_rows():
    t = task(lambda: [torch.randn(32, 50).sort(-1).values, torch.randn(16, 10).softmax(-1),
                      torch.randn(20).sort().values])
    base, moved, _ = near(t)
    assert bool((moved[0][:, 1:] >= moved[0][:, :-1]).all()) and not torch.equal(moved[0], base[0])
    assert float((moved[1].sum(-1) - 1).abs().max()) < 1e-5 and not torch.equal(moved[1], base[1])
    assert bool((moved[2][1:] >= moved[2][:-1]).all()) and not torch.equal(moved[2], base[2])


def test_near_duplicate_of_inputs_whose_shape_is_drawn_changes_places_inside_both_draws():
    t = task(lambda: [torch.randn(int(torch.randint(96, 161, ()).item()), 512)])
    base, moved, _ = near(t, seed=3, variant=5)
    assert moved[0].shape == base[0].shape and int((moved[0] != base[0]).sum()) > 0


def test_near_duplicate_without_floating_inputs_says_it_changed_nothing():
    t = task(lambda: [torch.randint(0, 9, (10,)), torch.rand(5) > 0.5, 3])
    base, moved, changed = near(t)
    assert changed == 0 and all(torch.equal(b, m) for b, m in zip(base[:2], moved[:2]))


def test_shifted_set_moves_continuous_inputs_and_keeps_labels_and_zeros():
    """A loss whose value over get_inputs' draws stays within atol of its expectation: a constant
    passes every drawn set, and fails the shifted one, where the expectation moves."""
    t = task(lambda: [torch.tril(torch.randn(64, 64)), torch.randint(0, 2, (64, 64)).float() * 2 - 1,
                      torch.randn(8, 10).softmax(-1)])
    base = make_inputs(t, 3, CPU)
    moved, count = varied_inputs(t, 3, CPU, 5, SHIFTED)
    assert count == 1 and torch.equal(moved[0], moved[0].tril()) and not torch.equal(moved[0], base[0])
    ratio = (moved[0] - base[0])[base[0] != 0].std()
    assert float(ratio) > 0.1  # a*x + b with a at least 0.25 away from 1
    assert torch.equal(moved[1], base[1]) and torch.equal(moved[2], base[2])
    assert all(torch.equal(x, y) for x, y in zip(moved, make_inputs(t, 3, CPU, 5, SHIFTED)))


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_seed_generators_draws_what_torch_manual_seed_draws(device):
    """make_inputs seeds the generators itself (torch.manual_seed queued a seed for backends never
    started, formatting the stack each time: 0.66 ms a draw on an H100's host); the draws are the
    same as after torch.manual_seed, on the CPU and on the GPU."""
    from cuda_agent.measure import seed_generators

    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    dev = torch.device(device)
    torch.manual_seed(1234)
    want = (torch.randn(64, device=dev), torch.rand(8))
    seed_generators(1234, dev)
    got = (torch.randn(64, device=dev), torch.rand(8))
    assert all(torch.equal(a, b) for a, b in zip(want, got))
