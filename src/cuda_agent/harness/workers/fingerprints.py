"""Whether a solution's outputs follow its inputs, judged across input sets in the reference worker.

Each set's comparison stands alone: an output that never reads its inputs passes every one where
the reference's output barely moves with them (a loss within atol of its expectation). Here the
reference worker keeps, for every set it compared, the reference's and the solution's values at the
same sampled places, and compares the sets with each other: the solution's output staying put where
the reference's moves beyond the tolerance fails; the reference's staying within it flags the task.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

import torch

SAMPLED = 1024   # values of each output kept per set (all of them where an output has fewer)
STILL = 0.1      # a solution's output that moves less than this fraction of the reference's stands still


@dataclass
class Follows:
    reason: str = ""     # why the solution's outputs do not follow the inputs, or ""
    barely: bool = False  # the reference's outputs on get_inputs' own sets stay within the tolerance


class Fingerprints:
    """Per input set (tag), the reference's and the solution's values at places drawn from a key of
    this worker's own (the same places for outputs of one size, unknown to the solution)."""

    def __init__(self) -> None:
        self.key = secrets.randbits(62)
        self.sets: dict[str, list[tuple[tuple, torch.Tensor, torch.Tensor] | None]] = {}

    def add(self, tag: str, expected: list[torch.Tensor], actual: list[torch.Tensor]) -> None:
        prints = []
        for e, a in zip(expected, actual):
            if e.is_floating_point() and a.dtype == e.dtype and a.shape == e.shape and e.numel() > 0:
                places = self._places(e)
                prints.append((tuple(e.shape), _sample(e, places), _sample(a, places)))
            else:
                prints.append(None)
        self.sets[tag] = prints

    def _places(self, t: torch.Tensor) -> torch.Tensor:
        n = t.numel()
        if n <= SAMPLED:
            return torch.arange(n)
        return torch.randint(n, (SAMPLED,), generator=torch.Generator().manual_seed(self.key ^ n))

    def judge(self, tags: list[str], ordinary: list[str], atol: float, rtol: float) -> Follows:
        """Over the sets `tags` (in order): the first output the solution holds still while the
        reference's moves; `barely` where the reference's outputs on the `ordinary` sets (those
        get_inputs drew) all stay within atol + rtol * |mean| of their mean over the sets."""
        sets = [self.sets[t] for t in tags if t in self.sets]
        plain = [self.sets[t] for t in ordinary if t in self.sets]
        outputs = len(sets[0]) if sets else 0
        reason, moved, judged = "", False, False
        for i in range(outputs):
            name = f"output {i}" if outputs > 1 else "output"
            m = _moves([s[i] for s in sets if i < len(s)], atol, rtol)
            if m is not None and m.tolerances > 1 and m.solution <= STILL * m.reference and not reason:
                reason = (f"the {name} does not change with the inputs where the reference's does: across "
                          f"{len(sets)} input sets the reference's strays from its mean by up to {m.reference:.3g} "
                          f"({m.tolerances:.2g} times atol + rtol * |mean|), the solution's by {m.solution:.3g} "
                          "(computed without reading the inputs, such as a constant near the expected value of a "
                          "loss?)")
            p = _moves([s[i] for s in plain if i < len(s)], atol, rtol)
            if p is not None and p.largest > atol:  # outputs all below atol are judged by their relative error
                judged, moved = True, moved or p.tolerances > 1
        return Follows(reason, judged and not moved)


def _sample(t: torch.Tensor, places: torch.Tensor) -> torch.Tensor:
    return t.reshape(-1)[places.to(t.device)].double().cpu()


@dataclass
class _Moves:
    tolerances: float  # the reference's largest move from its mean over the sets, in atol + rtol * |mean|
    solution: float    # the solution's largest move from its mean
    reference: float   # the reference's largest move from its mean
    largest: float     # the largest reference value


def _moves(prints: list, atol: float, rtol: float) -> _Moves | None:
    """How far the values of the sets whose output has the first one's shape stray from their mean
    over those sets (finite places only); None with fewer than two such sets."""
    prints = [p for p in prints if p is not None]
    prints = [p for p in prints if prints and p[0] == prints[0][0]]
    if len(prints) < 2:
        return None
    ref, sol = torch.stack([p[1] for p in prints]), torch.stack([p[2] for p in prints])
    finite = torch.isfinite(ref).all(0) & torch.isfinite(sol).all(0)
    ref, sol = ref[:, finite], sol[:, finite]
    if ref.numel() == 0:
        return None
    center = ref.mean(0)
    ref_move = (ref - center).abs()
    return _Moves(float((ref_move / (atol + rtol * center.abs())).max()), float((sol - sol.mean(0)).abs().max()),
                  float(ref_move.max()), float(ref.abs().max()))
