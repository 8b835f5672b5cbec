"""GAE over a multi-turn response: the critic's values on tool-observation tokens (mask 0) must not
leak into the advantages of the policy's tokens. verl's `compute_gae_advantage_return` on a
trajectory small enough to check by hand."""

from __future__ import annotations

import pytest

pytest.importorskip("verl", reason="verl is not installed: the rl tests need `pip install -e '.[rl]'` (verl 0.9.1)")

import torch  # noqa: E402
from verl.trainer.ppo.core_algos import compute_gae_advantage_return  # noqa: E402

# reply (2 tokens) | tool observation (2 tokens, mask 0) | reply (1 token, holding the reward 1)
MASK = torch.tensor([[1.0, 1.0, 0.0, 0.0, 1.0]])
REWARDS = torch.tensor([[0.0, 0.0, 0.0, 0.0, 1.0]])
VALUES = torch.tensor([[0.1, 0.3, 7.0, 7.0, 0.6]])   # the critic's 7.0 on the observation must not count
GAMMA = LAM = 0.5


def test_gae_skips_the_values_and_td_errors_of_observation_tokens():
    # By hand, backwards (delta = r + gamma * V(next policy token) - V; A = delta + gamma * lam * A(next)):
    #   t=4: delta = 1 + 0.5 * 0 - 0.6 = 0.4;                  A = 0.4
    #   t=3, t=2 (mask 0): skipped; A and the next value carry over (0.4, V = 0.6)
    #   t=1: delta = 0 + 0.5 * 0.6 - 0.3 = 0.0;                A = 0.0 + 0.25 * 0.4 = 0.1
    #   t=0: delta = 0 + 0.5 * 0.3 - 0.1 = 0.05;               A = 0.05 + 0.25 * 0.1 = 0.075
    # returns = A + V = [0.175, 0.4, 0.4 + 7.0, 0.4 + 7.0, 1.0]
    # advantages are whitened over the mask-1 tokens {0.075, 0.1, 0.4}: mean 0.191667, unbiased
    # variance 0.0654167 / 2 = 0.0327083, std 0.180854 -> (A - mean) / std
    advantages, returns = compute_gae_advantage_return(REWARDS, VALUES, MASK, GAMMA, LAM)
    assert torch.allclose(returns, torch.tensor([[0.175, 0.4, 7.4, 7.4, 1.0]]), atol=1e-6)
    assert torch.allclose(advantages[MASK.bool()], torch.tensor([-0.6451, -0.5069, 1.1519]), atol=1e-4)


def test_values_on_observation_tokens_do_not_change_the_policys_advantages():
    other = VALUES.clone()
    other[MASK == 0] = -123.0
    a, _ = compute_gae_advantage_return(REWARDS, VALUES, MASK, GAMMA, LAM)
    b, _ = compute_gae_advantage_return(REWARDS, other, MASK, GAMMA, LAM)
    assert torch.equal(a[MASK.bool()], b[MASK.bool()])
    unmasked, _ = compute_gae_advantage_return(REWARDS, VALUES, torch.ones_like(MASK), GAMMA, LAM)
    assert not torch.allclose(unmasked[MASK.bool()], a[MASK.bool()])  # the mask is what makes the difference
