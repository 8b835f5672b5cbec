"""When two runs of a synth candidate's model count as the same (the deterministic and stochastic filters,
synth/worker.py): within a small part of each output's scale and of the judge's tolerance, not bit for bit."""

from __future__ import annotations

from dataclasses import dataclass

# When two runs of a candidate's model are the same (`compare_runs`): every element within REPEAT_RTOL of its output's
# largest |value| (or a few units in the last place of a half-precision dtype), and within REPEAT_OF_JUDGE of the
# judge's own tolerance (atol + rtol |b|, the run's: 1e-2). A GPU's atomic adds (transposed convolutions, index_add)
# sum in another order each run: bit for bit, 85 of the 6k run's first 3,276 candidates (14% of those with a
# ConvTranspose; KernelBench has 48 such tasks of 270) were rejected as nondeterministic, 2026-11-29.
REPEAT_RTOL = 1e-4
REPEAT_OF_JUDGE = 0.1
_CHUNK = 1 << 24  # elements compared at a time: the comparison's scratch stays small beside the shared GPU's others


@dataclass(frozen=True)
class Repeat:
    """Two runs compared: `ok`, how far apart relative to the outputs' scale (0.0: bit for bit), and why not."""
    ok: bool
    apart: float
    how: str = ""


def compare_runs(first: list, second: list, atol: float = 1e-2, rtol: float = 1e-2) -> Repeat:
    """Whether two runs' outputs are the same to within REPEAT_RTOL of each output's scale and REPEAT_OF_JUDGE of
    the judge's tolerance; a NaN or an infinity must meet the same in the other run."""
    import torch

    if len(first) != len(second):
        return Repeat(False, float("inf"), f"in their number of outputs ({len(first)} and {len(second)})")
    worst = 0.0
    for n, (a, b) in enumerate(zip(first, second)):
        if a.shape != b.shape or a.dtype != b.dtype:
            return Repeat(False, float("inf"), f"in output {n}'s shape or dtype ({tuple(a.shape)} {a.dtype}, "
                                               f"{tuple(b.shape)} {b.dtype})")
        if torch.equal(a, b):
            continue
        kind = torch.promote_types(a.dtype, torch.float32)
        ulps = 4 * torch.finfo(a.dtype).eps if a.dtype.is_floating_point else 0.0  # a few units in the last place
        tol = max(REPEAT_RTOL, ulps)
        chunks = list(zip(a.reshape(-1).split(_CHUNK), b.reshape(-1).split(_CHUNK)))
        scale = 0.0
        for x, y in chunks:  # the output's scale: its largest finite |value| in either run
            x, y = x.to(kind), y.to(kind)
            both = torch.isfinite(x) & torch.isfinite(y)
            if not bool(((x == y) | (x.isnan() & y.isnan()) | both).all()):
                return Repeat(False, float("inf"), f"in output {n}: a NaN or an infinity in one run only")
            scale = max(scale, float(torch.where(both, torch.maximum(x.abs(), y.abs()), 0).max()))
        for x, y in chunks:
            x, y = x.to(kind), y.to(kind)
            both = torch.isfinite(x) & torch.isfinite(y)
            d = torch.where(both, (x - y).abs(), 0)
            apart = float(d.max()) / scale if scale > 0 else (0.0 if float(d.max()) == 0 else float("inf"))
            judged = float((d / (REPEAT_OF_JUDGE * (atol + rtol * y.abs()) + ulps * y.abs())).nan_to_num(0.0).max())
            worst = max(worst, apart)
            if apart > tol:
                return Repeat(False, apart, f"in output {n} by {apart:.3g} of its scale (at most {tol:g})")
            if judged > 1:
                return Repeat(False, apart, f"in output {n} by {judged * REPEAT_OF_JUDGE:.3g} of the judge's "
                                            f"tolerance (at most {REPEAT_OF_JUDGE:g})")
    return Repeat(True, worst)
