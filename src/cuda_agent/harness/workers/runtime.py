"""Runtime checks: what a solution's forward may do at the dispatcher, and how outputs are judged.

The static checks cannot know what a name holds; here every ATen operator that reaches the
dispatcher while `ModelNew.forward` runs — from Python or from the extension's C++ — is seen and
checked against an allowlist of allocation, view, copy and metadata operators.
"""

from __future__ import annotations

import math
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


CHUNK = 1 << 26  # elements compared at once: bounds the temporaries for multi-gigabyte outputs


def _chunks(t: torch.Tensor) -> list[tuple[int, int]]:
    n = t.numel()
    return [(i, min(i + CHUNK, n)) for i in range(0, n, CHUNK)]


def compare(expected: list[torch.Tensor], actual: list[torch.Tensor], atol: float, rtol: float) -> Verdict:
    """Shapes and dtypes must match; NaN where the reference is finite fails; values within
    atol + rtol * |expected|; a constant output where the reference varies fails. Compared in
    chunks on the reference's device, so an output of several gigabytes needs little extra memory."""
    if len(expected) != len(actual):
        return Verdict(False, f"returned {len(actual)} outputs, the reference returns {len(expected)}")
    worst = 0.0
    for i, (e, a) in enumerate(zip(expected, actual)):
        tag = f"output {i}" if len(expected) > 1 else "output"
        if tuple(a.shape) != tuple(e.shape):
            return Verdict(False, f"{tag} has shape {tuple(a.shape)}, expected {tuple(e.shape)}")
        if a.dtype != e.dtype:
            return Verdict(False, f"{tag} has dtype {a.dtype}, expected {e.dtype}")
        if e.numel() == 0:
            continue
        ef, af = e.reshape(-1), a.reshape(-1)
        if not e.is_floating_point():
            if not all(torch.equal(ef[lo:hi], af[lo:hi].to(e.device)) for lo, hi in _chunks(ef)):
                return Verdict(False, f"{tag} (integer/bool) differs from the reference")
            continue
        spans = _Spans()
        for lo, hi in _chunks(ef):
            reason, err = _compare_chunk(_as_wide(ef[lo:hi]), _as_wide(af[lo:hi].to(e.device)), atol, rtol, spans)
            worst = max(worst, err)
            if reason:
                return Verdict(False, f"{tag} {reason}" + (f" (max abs error {worst:.3g}, atol={atol}, rtol={rtol})"
                                                           if reason.startswith("differs") else ""), worst)
        if spans.constant_where_reference_varies(atol, e.numel()):
            return Verdict(False, f"{tag} is constant where the reference varies", worst)
    return Verdict(True, "matches the reference", worst)


class _Spans:
    """Running min and max of the finite values of the reference and of the output."""

    def __init__(self) -> None:
        self.e = [math.inf, -math.inf]
        self.a = [math.inf, -math.inf]

    @staticmethod
    def _add(span: list[float], t: torch.Tensor) -> None:
        t = t[torch.isfinite(t)]
        if t.numel():
            span[0], span[1] = min(span[0], float(t.min())), max(span[1], float(t.max()))

    def add(self, e: torch.Tensor, a: torch.Tensor) -> None:
        self._add(self.e, e)
        self._add(self.a, a)

    def constant_where_reference_varies(self, atol: float, numel: int) -> bool:
        if numel < 2 or self.e[0] == math.inf:
            return False
        a_span = self.a[1] - self.a[0] if self.a[0] != math.inf else 0.0
        return self.e[1] - self.e[0] > 2 * atol and a_span == 0.0


def _compare_chunk(ef: torch.Tensor, af: torch.Tensor, atol: float, rtol: float, spans: _Spans) -> tuple[str, float]:
    """Why this chunk of the output fails (or ""), and its largest absolute error."""
    nan_e, nan_a = torch.isnan(ef), torch.isnan(af)
    if bool((nan_a & ~nan_e).any()):
        return f"has {int((nan_a & ~nan_e).sum())} NaN values where the reference is finite", 0.0
    if bool((nan_e & ~nan_a).any()):
        return "has numbers where the reference is NaN", 0.0
    inf_e = torch.isinf(ef)
    if bool((inf_e & (af != ef)).any()):
        return "does not match the reference's infinities", 0.0
    finite = ~nan_e & ~inf_e
    diff = torch.where(finite, (af - ef).abs(), torch.zeros_like(ef))
    worst = float(diff.max())
    bad = diff > atol + rtol * torch.where(finite, ef.abs(), torch.zeros_like(ef))
    if bool(bad.any()):
        where = f"{int(bad.sum())} of {ef.numel()} elements" + (" (first failing chunk)" if ef.numel() == CHUNK else "")
        return f"differs from the reference at {where}", worst
    spans.add(ef, af)
    return "", worst


def _as_wide(t: torch.Tensor) -> torch.Tensor:
    """Half-precision values compared in float32; others as they are (no doubling of memory)."""
    return t.float() if t.dtype in (torch.float16, torch.bfloat16) or t.dtype.is_floating_point and t.element_size() < 4 else t


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
_reshape, _to = torch.Tensor.reshape, torch.Tensor.to


def inputs_unchanged(before: list, after: list) -> str | None:
    """A reason if a tensor input was modified in place (compared bit for bit, chunk by chunk, so a
    copy kept on the host can be checked against a multi-gigabyte input on the GPU), else None."""
    for i, (b, a) in enumerate(zip(before, after)):
        if isinstance(b, torch.Tensor):
            if not isinstance(a, torch.Tensor) or a.shape != b.shape or a.dtype != b.dtype:
                return f"input {i} was replaced or reshaped in place by forward (inputs must stay unchanged)"
            bf, af = _reshape(b, -1), _reshape(a, -1)
            for lo, hi in _chunks(bf):
                x, y = _to(bf[lo:hi], a.device), af[lo:hi]
                same = _equal(x, y) or (x.is_floating_point() and bool(_isnan(x).any())
                                        and _equal(_nan_to_num(x), _nan_to_num(y)))
                if not same:
                    return f"input {i} was modified in place by forward (inputs must stay unchanged)"
    return None
