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
from torch.utils._pytree import tree_leaves as _tree_leaves

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


# A tensor on the host larger than this, touched by an operator while forward runs on a GPU task,
# means work done on the CPU (an input copied to the host, computed there, copied back). Small
# host tensors (shapes, scalars, a few constants) are honest.
HOST_ELEMENTS = 4096


# Operators that copy a tensor as it is, or view it. One where every large host tensor it reads or
# returns is the model's own state, unchanged since it was constructed, moves that state to the
# device or takes a view of it (KernelBench's LSTMs keep h0 as a plain attribute, which
# model.to(device) leaves on the host, and do `self.h0 = self.h0.to(x.device)` in forward): not
# work done on the host. A copy that stays on the host returns a new tensor, which is not state.
STATE_MOVES = frozenset("""
_to_copy copy_ _copy_from _copy_from_and_resize
view _unsafe_view _reshape_alias as_strided t transpose permute expand expand_as squeeze unsqueeze select
slice narrow split split_with_sizes unbind chunk detach alias flatten unflatten view_as movedim unfold diagonal
""".split())


class HostState:
    """The bytes of the model's own host tensors larger than HOST_ELEMENTS (parameters, buffers and
    plain tensor attributes, in lists and dicts too), taken before forward ever saw an input:
    what a copy of state to the device must still read. Kept by storage, up to KEPT_BYTES in
    all (a copy of state beyond them counts as host work)."""

    KEPT_BYTES = 1 << 30

    def __init__(self, model: torch.nn.Module | None = None):
        self.kept: dict[int, torch.Tensor] = {}
        size = 0
        for m in model.modules() if model is not None else ():
            for t in _tree_leaves(list(vars(m).values())):
                if not (isinstance(t, torch.Tensor) and t.device.type == "cpu" and t.numel() > HOST_ELEMENTS):
                    continue
                st = _untyped_storage(t)
                if _storage_ptr(st) in self.kept or size + _storage_nbytes(st) > self.KEPT_BYTES:
                    continue
                self.kept[_storage_ptr(st)] = _clone(_bytes_of(st))
                size += _storage_nbytes(st)

    def unchanged(self, t: torch.Tensor) -> bool:
        """Whether `t` lies in one of the kept storages, whose bytes are all as they were taken
        (state written on the host after construction, by any means, is not the model's state)."""
        st = _untyped_storage(t)
        kept = self.kept.get(_storage_ptr(st))
        return kept is not None and kept.numel() == _storage_nbytes(st) and _equal(kept, _bytes_of(st))


def _bytes_of(storage) -> torch.Tensor:
    """A uint8 tensor over all the bytes of `storage` (no copy)."""
    return _set(_empty(0, dtype=torch.uint8), storage, 0, (_storage_nbytes(storage),))


class OperatorGuard(TorchDispatchMode):
    """Records every operator; in strict mode, raises on the first one outside ALLOWED_OPS and
    remembers it, so a solution that swallows the error (in C++) still fails. On a GPU task
    (`device_type` "cuda") it also records operators that read or make large host tensors, except
    copies of the model's own host `state` to the device and views of it (HostState, STATE_MOVES)."""

    def __init__(self, strict: bool = True, device_type: str = "cpu", state: HostState | None = None):
        super().__init__()
        self.strict = strict
        self.device_type = device_type
        self.state = state or HostState()
        self.seen: dict[str, int] = {}
        self.violations: list[str] = []
        self.host_ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = op_base_name(func)
        self.seen[name] = self.seen.get(name, 0) + 1
        if self.strict and name not in ALLOWED_OPS:
            if name not in self.violations:
                self.violations.append(name)
            raise RuntimeError(f"cuda-agent: torch operator aten::{name} is not allowed in ModelNew.forward "
                               "(only allocation, views and metadata; compute must be your own kernels)")
        out = func(*args, **(kwargs or {}))
        if self.device_type != "cpu" and name not in self.host_ops and self._host_work(name, (args, kwargs, out)):
            self.host_ops.append(name)
        return out

    def _host_work(self, name: str, values) -> bool:
        """Large host tensors among `values`, unless the operator only moves or views the model's state."""
        host = [t for t in _tree_leaves(values)
                if isinstance(t, torch.Tensor) and t.device.type == "cpu" and t.numel() > HOST_ELEMENTS]
        return bool(host) and not (name in STATE_MOVES and all(self.state.unchanged(t) for t in host))


@dataclass
class Verdict:
    ok: bool
    reason: str
    max_abs_error: float = 0.0
    details: dict = field(default_factory=dict)


def flatten_outputs(out, device: torch.device | None = None) -> list[torch.Tensor] | str:
    """The output as a list of plain tensors (on `device`'s type, where given), or a reason why it
    is not acceptable: a tensor subclass can defer its work (a lazy output computed when it is
    read) or answer comparisons itself."""
    items = list(out) if isinstance(out, (tuple, list)) else [out]
    for i, t in enumerate(items):
        if type(t) is not torch.Tensor:
            kind = type(t).__name__
            return f"output {i} is a {kind}, not a plain torch.Tensor (a tensor subclass or lazy output)"
        if device is not None and t.device.type != device.type:
            return (f"output {i} is on {t.device.type}, the task runs on {device.type}: compute the output on the "
                    "task's device")
    return items


def snapshot(outputs: list[torch.Tensor], device: torch.device) -> list[torch.Tensor] | None:
    """Copies of the outputs as forward returned them (after the device finished the call's work),
    or None where a GPU has no room for them."""
    if device.type == "cuda":
        need = sum(t.numel() * t.element_size() for t in outputs)
        if need + (1 << 30) > _mem_get_info(device)[0]:
            return None
    return [_clone(t) for t in outputs]


def changed_since(copies: list[torch.Tensor] | None, outputs: list[torch.Tensor]) -> bool:
    """Whether an output differs from its copy taken when forward returned (NaNs equal to NaNs)."""
    if copies is None:
        return False
    return any(not (_equal(c, t) or (c.is_floating_point() and _equal(_nan_to_num(c), _nan_to_num(t))))
               for c, t in zip(copies, outputs))


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
    worst, details = 0.0, {}
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
        scale = spans.scale(atol)
        if scale:
            details["scale"] = scale
        if scale == "tiny" and spans.relative_error() > TINY_RELATIVE_ERROR:
            return Verdict(False, f"{tag} differs from the reference by {spans.relative_error():.2g} of its size "
                           f"(relative RMS error; at most {TINY_RELATIVE_ERROR} is allowed where, as here, every "
                           f"reference value is below atol={atol}, so that zeros would pass the elementwise "
                           "check)", worst, details)
    return Verdict(True, "matches the reference", worst, details)


# Where every reference value is within atol of zero, the elementwise check passes zeros (or any
# small output): such outputs are judged by their relative RMS error too. A wrong scale, zeros or
# noise are off by 0.3 to 1; honest bf16 arithmetic by about 0.005. Below TINY_NOISE (RMS) the
# reference is rounding noise and nothing can be judged: the task is flagged degenerate.
TINY_RELATIVE_ERROR = 0.05
TINY_NOISE = 1e-6


class _Spans:
    """Running min and max of the finite values of the reference and of the output."""

    def __init__(self) -> None:
        self.e = [math.inf, -math.inf]
        self.a = [math.inf, -math.inf]
        self.sq_e = self.sq_diff = 0.0   # sums of squares of the finite reference values and errors
        self.count = 0

    @staticmethod
    def _add(span: list[float], t: torch.Tensor, all_finite: bool) -> None:
        t = t if all_finite else t[torch.isfinite(t)]   # the mask's copy only where some value is not finite
        if t.numel():
            lo, hi = torch.aminmax(t)
            span[0], span[1] = min(span[0], float(lo)), max(span[1], float(hi))

    def add(self, e: torch.Tensor, a: torch.Tensor, diff: torch.Tensor, finite: torch.Tensor | None) -> None:
        """A chunk: the reference's and the output's values, |a - e| (0 where e is not finite); `finite` None
        where every value of both is finite."""
        self._add(self.e, e, finite is None)
        self._add(self.a, a, finite is None)
        kept = e if finite is None else torch.where(finite, e, 0.0)
        self.sq_e += float(torch.linalg.vector_norm(kept, dtype=torch.float64)) ** 2
        self.sq_diff += float(torch.linalg.vector_norm(diff, dtype=torch.float64)) ** 2
        self.count += e.numel() if finite is None else int(finite.sum())

    def scale(self, atol: float) -> str:
        """"tiny" where every finite reference value is within atol of zero, "degenerate" where
        they are rounding noise as well, else ""."""
        if self.e[0] == math.inf or max(abs(self.e[0]), abs(self.e[1])) > atol:
            return ""
        return "tiny" if math.sqrt(self.sq_e / max(self.count, 1)) > TINY_NOISE else "degenerate"

    def relative_error(self) -> float:
        return math.sqrt(self.sq_diff / self.sq_e) if self.sq_e > 0 else 0.0

    def constant_where_reference_varies(self, atol: float, numel: int) -> bool:
        if numel < 2 or self.e[0] == math.inf:
            return False
        a_span = self.a[1] - self.a[0] if self.a[0] != math.inf else 0.0
        return self.e[1] - self.e[0] > 2 * atol and a_span == 0.0


def _compare_chunk(ef: torch.Tensor, af: torch.Tensor, atol: float, rtol: float, spans: _Spans) -> tuple[str, float]:
    """Why this chunk of the output fails (or ""), and its largest absolute error. Where every value of both is
    finite (the common case) no NaN or infinity mask is made: a third of the time (8M floats, one CPU thread)."""
    finite: torch.Tensor | None = None
    if bool(torch.isfinite(ef).all()) and bool(torch.isfinite(af).all()):
        diff, size = (af - ef).abs(), ef.abs()
    else:
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
        size = torch.where(finite, ef.abs(), torch.zeros_like(ef))
    worst = float(diff.max())
    bad = diff > atol + rtol * size
    if bool(bad.any()):
        where = f"{int(bad.sum())} of {ef.numel()} elements" + (" (first failing chunk)" if ef.numel() == CHUNK else "")
        return f"differs from the reference at {where}", worst
    spans.add(ef, af, diff, finite)
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
_reshape, _to, _clone = torch.Tensor.reshape, torch.Tensor.to, torch.Tensor.clone
_empty, _set, _untyped_storage = torch.empty, torch.Tensor.set_, torch.Tensor.untyped_storage
_storage_ptr, _storage_nbytes = torch.UntypedStorage.data_ptr, torch.UntypedStorage.nbytes
_mem_get_info = torch.cuda.mem_get_info


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
