"""Input sets made from a drawn one, the same way in every process that makes them from the same
(seed, variant): the near duplicate, where a result replayed for inputs that look like ones seen
before is wrong, and the shifted set, where an output that does not follow its inputs is wrong.

Both must stay inputs the task could have drawn: an honest kernel may exploit the structure of its
inputs (the zeros of a triangle, band or mask; symmetry; sorted or probability rows), and a set
without that structure would fail it for being honest.
"""

from __future__ import annotations

import torch

# Bound at import, before a solution's code runs in the child (which could replace them).
_Generator, _randint, _rand, _nonzero = torch.Generator, torch.randint, torch.rand, torch.nonzero
_equal, _where, _unique = torch.equal, torch.where, torch.unique
_clone = torch.Tensor.clone

MOVED = 8          # values (or rows) of each floating-point input that a near duplicate takes from another draw
CANDIDATES = 4096  # places tried at random before all the places where the two draws differ are listed
SAMPLED = 1024     # values read to tell a continuous input from a discrete one (+-1 labels, 0/1 masks, integers)
ROW_SUM_TOL = 1e-2  # rows that sum to one within this (and are >= 0) are probabilities


def near_duplicate(inputs: list, twin: list, variant: int) -> tuple[list, int]:
    """`inputs` with the values at a few places of each floating-point tensor taken from the same
    places of `twin`, a second draw of the task's inputs: where the two differ, so the output
    changes, and at the same places, so every pattern tied to places (zeros of a triangle, a band,
    a mask) is kept. A symmetric matrix changes at (i, j) and (j, i) together; a tensor whose rows
    are sorted or are probabilities takes whole rows. Integer and bool tensors stay as they are.
    Returns the set and the number of places changed (0: the near duplicate is the set itself)."""
    gen = _Generator().manual_seed(variant)
    out, changed = [], 0
    for i, v in enumerate(inputs):
        w = twin[i] if i < len(twin) else None
        if _floating(v) and isinstance(w, torch.Tensor) and w.dtype == v.dtype and w.dim() == v.dim():
            v = _clone(v)
            changed += _take_from(v, w, gen)
        out.append(v)
    return out, changed


def shifted(inputs: list, variant: int) -> tuple[list, int]:
    """`inputs` with each continuous floating-point tensor moved by x -> a*x + b (a and b drawn from
    `variant`: a within 0.5..0.75 or 1.25..1.5, |b| within 0.25..0.5), its exact zeros kept (a
    triangle, band or mask stays one); discrete tensors (labels, masks, integers) and rows that are
    sorted or probabilities stay as they are. The expectation of a loss moves with a and b, so a
    constant near it fails here. Returns the set and the number of tensors moved."""
    gen = _Generator().manual_seed(variant)
    out, moved = [], 0
    for v in inputs:
        r = _rand(4, generator=gen, dtype=torch.float64).tolist()
        a = 1.0 + (1 if r[0] < 0.5 else -1) * (0.25 + 0.25 * r[1])
        b = (1 if r[2] < 0.5 else -1) * (0.25 + 0.25 * r[3])
        if _floating(v) and _continuous(v) and not _rows_kept_whole(v):
            v = _where(v == 0, v, v * a + b)
            moved += 1
        out.append(v)
    return out, moved


def _floating(v) -> bool:
    return isinstance(v, torch.Tensor) and v.is_floating_point() and v.is_contiguous() and v.numel() > 1


def _take_from(v: torch.Tensor, w: torch.Tensor, gen: torch.Generator) -> int:
    """Copies a few places of `w` into `v` (in place); returns how many. Where a shape is drawn
    with the inputs, only places inside both tensors are taken."""
    box = tuple(slice(0, min(n, m)) for n, m in zip(v.shape, w.shape))
    vb, wb = v[box], w[box]  # views: writes into vb land in v
    if vb.numel() == 0:
        return 0
    rows = _rows_kept_whole(v) and v.shape[-1] == w.shape[-1]
    if rows and vb.dim() == 1:  # one row: the whole tensor is the place
        vb, wb = vb.unsqueeze(0), wb.unsqueeze(0)
    units = vb.shape[:-1] if rows else vb.shape  # a place is a whole row, or one value
    symmetric = not rows and vb.dim() >= 2 and vb.shape[-1] == vb.shape[-2] and _symmetric(v)
    where = _differing(vb, wb, units, symmetric, gen)
    if where is None:
        return 0
    vb[where] = wb[where]
    if symmetric:
        vb[where[:-2] + (where[-1], where[-2])] = wb[where]
    return int(where[0].numel())


def _differing(vb: torch.Tensor, wb: torch.Tensor, units: torch.Size, symmetric: bool,
               gen: torch.Generator) -> tuple | None:
    """Up to MOVED distinct places (an index tuple over `units`) where vb and wb differ, chosen from
    `gen`; below the diagonal where the matrix is symmetric, so (i, j) and (j, i) are one place."""
    count = 1
    for n in units:
        count *= n
    tried = _canonical(_unravel(_randint(count, (CANDIDATES,), generator=gen), units), symmetric)
    hits = _keep_differing(vb, wb, tried)
    if len(hits) < MOVED:  # few places differ (a band, a sparse mask): list them all
        everywhere = vb != wb
        if len(units) < vb.dim():  # whole rows
            everywhere = everywhere.any(-1)
        if symmetric:
            everywhere = everywhere.tril()
        listed = _nonzero(everywhere).cpu()
        if listed.shape[0] == 0:
            return None
        pick = listed[_randint(listed.shape[0], (MOVED,), generator=gen)]
        hits = list(dict.fromkeys(tuple(row) for row in pick.tolist()))
    chosen = torch.tensor(hits[:MOVED], dtype=torch.long).reshape(-1, len(units))
    return tuple(chosen[:, d].to(vb.device) for d in range(len(units)))


def _unravel(flat: torch.Tensor, shape: torch.Size) -> tuple:
    """Flat indices as one index tensor per dimension (torch.unravel_index imports sympy on its
    first call: 0.3 s of every fresh worker's first near duplicate)."""
    out = []
    for n in reversed(shape):
        out.append(flat % n)
        flat = flat // n
    return tuple(reversed(out))


def _canonical(index: tuple, symmetric: bool) -> tuple:
    """The places as given, or each (i, j) of a symmetric matrix as (max, min): below the diagonal."""
    if not symmetric:
        return index
    i, j = index[-2], index[-1]
    return index[:-2] + (torch.maximum(i, j), torch.minimum(i, j))


def _keep_differing(vb: torch.Tensor, wb: torch.Tensor, index: tuple) -> list[tuple]:
    """The distinct places of `index` (in the order drawn) where vb and wb differ."""
    on = tuple(t.to(vb.device) for t in index)
    diff = vb[on] != wb[on]
    if diff.dim() > 1:  # whole rows
        diff = diff.reshape(diff.shape[0], -1).any(-1)
    keep = diff.cpu()
    places = torch.stack(index, dim=1)[keep][:8 * MOVED].tolist()  # enough to find MOVED distinct ones
    return list(dict.fromkeys(tuple(p) for p in places))


def _symmetric(v: torch.Tensor) -> bool:
    """Equal to its transpose in the last two dimensions (a corner is tried first: most are not)."""
    corner = v[..., :16, :16]
    return _equal(corner, corner.transpose(-1, -2)) and _equal(v, v.transpose(-1, -2))


def _rows_kept_whole(v: torch.Tensor) -> bool:
    """Rows (along the last dimension) that are sorted, or that are probabilities (>= 0, summing to
    one): changing one value would leave an input the task cannot draw. The first rows are tried
    first, so most tensors are told apart without a temporary of their size."""
    if v.dim() < 1 or v.shape[-1] < 2:
        return False
    rows = v.reshape(-1, v.shape[-1])
    return _sorted_rows(rows[:64]) and _sorted_rows(rows) or _probability_rows(rows[:64]) and _probability_rows(rows)


def _sorted_rows(rows: torch.Tensor) -> bool:
    step = rows[:, 1:] - rows[:, :-1]
    return bool((step >= 0).all()) or bool((step <= 0).all())


def _probability_rows(rows: torch.Tensor) -> bool:
    return bool((rows >= 0).all()) and bool(((rows.sum(-1, dtype=torch.float64) - 1).abs() <= ROW_SUM_TOL).all())


def _continuous(v: torch.Tensor) -> bool:
    """Whether a sample of the tensor's nonzero values takes many values, not all whole numbers:
    randn-like data, not labels (+-1), masks (0/1), one-hots or integers stored as floats."""
    flat = v.reshape(-1)
    sample = flat[::max(1, flat.numel() // SAMPLED)][:SAMPLED].double().cpu()
    sample = sample[torch.isfinite(sample) & (sample != 0)]
    return _unique(sample).numel() >= 16 and not bool((sample == sample.round()).all())
