"""The judgement across input sets (workers/fingerprints.py): an output that ignores its inputs
passes each set's comparison where the reference's output barely moves; across the sets it fails."""

from __future__ import annotations

import torch

from cuda_agent.harness.workers.fingerprints import Fingerprints

ATOL = RTOL = 1e-2


def judged(reference: list[torch.Tensor], solution: list[torch.Tensor], ordinary: int | None = None):
    prints = Fingerprints()
    tags = [f"t{i}" for i in range(len(reference))]
    for tag, e, a in zip(tags, reference, solution):
        prints.add(tag, [e], [a])
    return prints.judge(tags, tags[:ordinary], ATOL, RTOL)


def test_a_constant_where_the_reference_moves_beyond_the_tolerance_fails():
    reference = [torch.tensor(v) for v in (1.08, 1.09, 1.07, 1.15, 1.08)]   # the fourth set is shifted
    f = judged(reference, [torch.tensor(1.0833)] * 5, ordinary=3)
    assert "does not change with the inputs where the reference's does" in f.reason
    assert f.barely  # on get_inputs' own sets the reference stays within the tolerance


def test_an_almost_constant_output_fails_too():
    base = torch.randn(64)
    reference = [base + v for v in (0.0, 0.03, -0.03, 0.05)]
    wobble = [base + 1e-4 * i for i in range(4)]
    assert "does not change" in judged(reference, wobble).reason


def test_an_honest_output_with_errors_near_the_tolerance_follows():
    torch.manual_seed(0)
    reference = [torch.tensor(v) for v in (1.08, 1.09, 1.07, 1.15, 1.08)]
    solution = [r + 0.015 * torch.randn(()) for r in reference]
    assert judged(reference, solution).reason == ""


def test_outputs_that_move_with_their_inputs_are_neither_failed_nor_flagged():
    reference = [torch.randn(4096) for _ in range(5)]
    f = judged(reference, [r + 1e-6 for r in reference])
    assert (f.reason, f.barely) == ("", False)


def test_outputs_all_below_atol_are_not_flagged_as_barely_moving():
    """Tiny outputs are judged by their relative error (runtime.compare), not against atol."""
    reference = [1e-4 * torch.randn(512) for _ in range(4)]
    assert judged(reference, reference).barely is False


def test_outputs_of_another_dtype_or_shape_are_left_to_the_comparison():
    prints = Fingerprints()
    prints.add("t1", [torch.tensor(1.0)], [torch.tensor(1, dtype=torch.int32)])
    prints.add("t2", [torch.tensor(2.0)], [torch.tensor([1.0, 2.0])])
    assert prints.judge(["t1", "t2"], ["t1", "t2"], ATOL, RTOL).reason == ""
