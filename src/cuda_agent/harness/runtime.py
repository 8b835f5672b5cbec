"""Runtime checks: what a solution's forward may do at the dispatcher, and how outputs are judged.

The static checks cannot know what a name holds; here every ATen operator that reaches the
dispatcher while `ModelNew.forward` runs — from Python or from the extension's C++ — is seen and
checked against an allowlist of allocation, view, copy and metadata operators.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# Operator base names (aten::<name>, any overload) a strict solution may reach while forward runs.
ALLOWED_OPS = frozenset("""
empty empty_like empty_strided new_empty new_empty_strided zeros zeros_like new_zeros zero_ fill_
ones ones_like new_ones full full_like new_full scalar_tensor lift_fresh lift_fresh_copy
view _unsafe_view reshape _reshape_alias as_strided t transpose permute expand squeeze unsqueeze
select slice narrow split split_with_sizes unbind chunk detach alias flatten unflatten view_as
movedim unfold diagonal expand_as resolve_conj resolve_neg
clone copy_ _to_copy to contiguous _copy_from _copy_from_and_resize
sym_size sym_stride sym_numel sym_storage_offset is_contiguous is_same_size _local_scalar_dense
record_stream set_
""".split())


def op_base_name(func) -> str:
    """`aten.add.Tensor` -> `add`."""
    return func._schema.name.split("::")[-1] if hasattr(func, "_schema") else str(func)


class OperatorGuard(TorchDispatchMode):
    """Records every operator; in strict mode, raises on the first one outside ALLOWED_OPS and
    remembers it, so a solution that swallows the error (in C++) still fails."""

    def __init__(self, strict: bool = True):
        super().__init__()
        self.strict = strict
        self.seen: dict[str, int] = {}
        self.violations: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = op_base_name(func)
        self.seen[name] = self.seen.get(name, 0) + 1
        if self.strict and name not in ALLOWED_OPS:
            if name not in self.violations:
                self.violations.append(name)
            raise RuntimeError(f"cuda-agent: torch operator aten::{name} is not allowed in ModelNew.forward "
                               "(only allocation, views and metadata; compute must be your own kernels)")
        return func(*args, **(kwargs or {}))


@dataclass
class Verdict:
    ok: bool
    reason: str
    max_abs_error: float = 0.0
    details: dict = field(default_factory=dict)


def flatten_outputs(out) -> list[torch.Tensor] | str:
    """The output as a list of plain tensors, or a reason why it is not acceptable."""
    items = list(out) if isinstance(out, (tuple, list)) else [out]
    for i, t in enumerate(items):
        if type(t) is not torch.Tensor:
            kind = type(t).__name__
            return f"output {i} is a {kind}, not a plain torch.Tensor"
    return items


def compare(expected: list[torch.Tensor], actual: list[torch.Tensor], atol: float, rtol: float) -> Verdict:
    """Shapes and dtypes must match; NaN where the reference is finite fails; values within
    atol + rtol * |expected|; a constant output where the reference varies fails."""
    if len(expected) != len(actual):
        return Verdict(False, f"returned {len(actual)} outputs, the reference returns {len(expected)}")
    worst = 0.0
    for i, (e, a) in enumerate(zip(expected, actual)):
        tag = f"output {i}" if len(expected) > 1 else "output"
        if tuple(a.shape) != tuple(e.shape):
            return Verdict(False, f"{tag} has shape {tuple(a.shape)}, expected {tuple(e.shape)}")
        if a.dtype != e.dtype:
            return Verdict(False, f"{tag} has dtype {a.dtype}, expected {e.dtype}")
        a = a.to(e.device)
        if e.numel() == 0:
            continue
        ef, af = _as_wide(e), _as_wide(a)
        if e.is_floating_point():
            nan_e, nan_a = torch.isnan(ef), torch.isnan(af)
            if bool((nan_a & ~nan_e).any()):
                return Verdict(False, f"{tag} has {int((nan_a & ~nan_e).sum())} NaN values where the reference is finite")
            if bool((nan_e & ~nan_a).any()):
                return Verdict(False, f"{tag} has numbers where the reference is NaN")
            inf_e = torch.isinf(ef)
            if bool((inf_e & (af != ef)).any()):
                return Verdict(False, f"{tag} does not match the reference's infinities")
            finite = ~nan_e & ~inf_e
            diff = torch.where(finite, (af - ef).abs(), torch.zeros_like(ef))
            bad = diff > atol + rtol * torch.where(finite, ef.abs(), torch.zeros_like(ef))
            worst = max(worst, float(diff.max()))
            if bool(bad.any()):
                n = int(bad.sum())
                return Verdict(False, f"{tag} differs from the reference at {n} of {e.numel()} elements "
                                      f"(max abs error {worst:.3g}, atol={atol}, rtol={rtol})", worst)
            if _constant_where_reference_varies(ef, af, atol):
                return Verdict(False, f"{tag} is constant where the reference varies", worst)
        elif not torch.equal(e, a):
            return Verdict(False, f"{tag} (integer/bool) differs from the reference")
    return Verdict(True, "matches the reference", worst)


def _as_wide(t: torch.Tensor) -> torch.Tensor:
    """Half-precision values compared in float32; others as they are (no doubling of memory)."""
    return t.float() if t.dtype in (torch.float16, torch.bfloat16) or t.dtype.is_floating_point and t.element_size() < 4 else t


def _constant_where_reference_varies(e: torch.Tensor, a: torch.Tensor, atol: float) -> bool:
    if e.numel() < 2:
        return False
    finite = torch.isfinite(e)
    if not bool(finite.any()):
        return False
    e_span = float(e[finite].max() - e[finite].min())
    a_fin = a[torch.isfinite(a)]
    a_span = float(a_fin.max() - a_fin.min()) if a_fin.numel() else 0.0
    return e_span > 2 * atol and a_span == 0.0


def poison_free_memory(device: torch.device) -> None:
    """Fill memory the caching allocator holds but nobody uses with NaN bytes, so a solution that
    returns uninitialized memory cannot find a left-over result in it."""
    if device.type != "cuda":
        return
    keep = []
    try:
        for seg in torch.cuda.memory_snapshot():
            if seg.get("device", device.index or 0) != (device.index or torch.cuda.current_device()):
                continue
            for block in seg.get("blocks", []):
                if block.get("state") == "inactive" and block.get("size", 0) >= 512:
                    t = torch.empty(block["size"], dtype=torch.uint8, device=device)
                    t.fill_(0xFF)
                    keep.append(t)
    except RuntimeError:
        pass
    del keep
    torch.cuda.synchronize(device)


# Bound when the harness is imported, before any solution code runs in the child, so that a
# solution assigning torch.equal = ... cannot change what the in-place check calls.
_equal, _isnan, _nan_to_num = torch.equal, torch.isnan, torch.nan_to_num


def inputs_unchanged(before: list, after: list) -> str | None:
    """A reason if a tensor input was modified in place (compared bit for bit), else None."""
    for i, (b, a) in enumerate(zip(before, after)):
        if isinstance(b, torch.Tensor):
            same = _equal(b, a) or (b.is_floating_point() and bool(_isnan(b).any())
                                    and _equal(_nan_to_num(b), _nan_to_num(a)))
            if not same:
                return f"input {i} was modified in place by forward (inputs must stay unchanged)"
    return None
