"""Outputs from the solution child to the reference worker, by one of two routes.

- files: each output's raw bytes in a file of the exchange folder (tmpfs). Works everywhere, but
  a multi-gigabyte output costs a device-to-host copy into freshly allocated pages and a
  host-to-device copy back: seconds per output set on a 4 GB KernelBench level-1 task.
- CUDA IPC: the child exports the memory its outputs live in (cuIpcGetMemHandle) and the
  reference worker maps it (cuIpcOpenMemHandle) and compares on the GPU, with no copy at all.
  Whether the driver allows it between the two processes (different users, for one) is probed
  once per evaluation; where it does not, the files route is used.

Only dtypes, shapes, handles and offsets travel from the untrusted child, never a pickle, and the
reference worker checks each against what it can see for itself (file sizes, allocation ranges).
"""

from __future__ import annotations

import ctypes
import math
import os

import torch

MAX_OUTPUTS = 64
DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16,
    torch.int8, torch.uint8, torch.bool, torch.complex64, torch.complex128)}

# Bound at import, before a solution's code runs in the child (which could replace them).
_from_file, _reshape, _contiguous = torch.from_file, torch.Tensor.reshape, torch.Tensor.contiguous
_clone = torch.Tensor.clone
ALIGN = 256  # bytes: where a shared output must start (torch's allocations are aligned to 512)


def _meta(t: torch.Tensor) -> dict:
    return {"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape)}


def _checked(meta, i: int) -> tuple[torch.dtype, list[int], int] | str:
    """An output's dtype, shape and byte count from the child's metadata, or why it is invalid."""
    m = meta[i]
    dtype = DTYPES.get(m.get("dtype")) if isinstance(m, dict) else None
    shape = m.get("shape") if isinstance(m, dict) else None
    if dtype is None or not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
        return f"output {i} has no valid dtype and shape"
    return dtype, shape, math.prod(shape) * torch.empty((), dtype=dtype).element_size()


def _valid_list(meta) -> bool:
    return isinstance(meta, list) and len(meta) <= MAX_OUTPUTS


# ---------------------------------------------------------------- files

def write_outputs(outputs: list[torch.Tensor], prefix: str) -> list[dict]:
    """Each output's bytes to `prefix`.N; returns their dtypes and shapes (the only metadata)."""
    meta = []
    for i, t in enumerate(outputs):
        t = t.detach()
        t = t if t.is_contiguous() else _contiguous(t)
        nbytes = t.numel() * t.element_size()
        if nbytes:
            dst = _from_file(f"{prefix}.{i}", shared=True, size=nbytes, dtype=torch.uint8)
            dst.copy_(_reshape(t, -1).view(torch.uint8))
            del dst
        else:  # an empty mapping creates no file
            os.close(os.open(f"{prefix}.{i}", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644))
        meta.append(_meta(t))
    return meta


def read_outputs(prefix: str, meta) -> list[torch.Tensor] | str:
    """The outputs that write_outputs left at `prefix` (host memory, mapped from the files), or why
    they cannot be read; `meta` comes from the untrusted child and is checked against the files."""
    if not _valid_list(meta):
        return "no readable list of outputs"
    out = []
    for i in range(len(meta)):
        checked = _checked(meta, i)
        if isinstance(checked, str):
            return checked
        dtype, shape, nbytes = checked
        path = f"{prefix}.{i}"
        try:
            size = os.path.getsize(path)
        except OSError:
            return f"output {i} is missing"
        if size != nbytes:
            return f"output {i} has {size} bytes, its shape and dtype need {nbytes}"
        raw = torch.from_file(path, shared=False, size=nbytes, dtype=torch.uint8) if nbytes else \
            torch.empty(0, dtype=torch.uint8)
        out.append(raw.view(dtype).reshape(shape))
    return out


def remove_outputs(prefix: str, count: int) -> None:
    for i in range(count):
        try:
            os.unlink(f"{prefix}.{i}")
        except OSError:
            pass


# ---------------------------------------------------------------- CUDA IPC

class _Handle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_ubyte * 64)]  # bytes, not c_char (which stops at the first NUL)


_driver: ctypes.CDLL | None = None


def _cuda_driver() -> ctypes.CDLL:
    global _driver
    if _driver is None:
        _driver = ctypes.CDLL("libcuda.so.1")
    return _driver


def _call(name: str, *args) -> None:
    lib = _cuda_driver()
    fn = getattr(lib, f"{name}_v2", None) or getattr(lib, name)
    rc = fn(*args)
    if rc != 0:
        raise OSError(f"{name} returned CUDA driver error {rc}")


def _address_range(ptr: int) -> tuple[int, int]:
    base, size = ctypes.c_uint64(), ctypes.c_size_t()
    _call("cuMemGetAddressRange", ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(ptr))
    return base.value, size.value


def share_outputs(outputs: list[torch.Tensor], keep: list) -> list[dict]:
    """IPC handles to the device memory of each output; the tensors shared are appended to `keep`,
    which the caller holds until the reference worker has compared them. An output that is not
    contiguous or not aligned is shared as a copy (the copy is what was checked, and it is kept)."""
    meta = []
    for t in outputs:
        t = t.detach()
        if not t.is_contiguous() or t.data_ptr() % ALIGN:
            t = _clone(t, memory_format=torch.contiguous_format)
        m = _meta(t)
        keep.append(t)
        if t.numel():
            base, size = _address_range(t.data_ptr())
            handle = _Handle()
            _call("cuIpcGetMemHandle", ctypes.byref(handle), ctypes.c_uint64(base))
            m["ipc"] = {"handle": bytes(handle).hex(), "offset": t.data_ptr() - base}
        meta.append(m)
    return meta


class _Bytes:
    """A device pointer and length seen through __cuda_array_interface__, for torch.as_tensor."""

    def __init__(self, ptr: int, nbytes: int):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (ptr, False),
                                         "version": 3, "strides": None}


class OpenedOutputs:
    """The child's outputs mapped into this process; close() unmaps them (after a synchronize)."""

    def __init__(self) -> None:
        self.tensors: list[torch.Tensor] = []
        self._bases: list[int] = []

    def close(self) -> None:
        self.tensors.clear()
        if self._bases:
            torch.cuda.synchronize()
        for base in self._bases:
            try:
                _call("cuIpcCloseMemHandle", ctypes.c_uint64(base))
            except OSError:
                pass
        self._bases.clear()


def open_outputs(meta, device: torch.device) -> OpenedOutputs | str:
    """The outputs the child shared with share_outputs, as tensors on `device` that alias its
    memory, or why they cannot be opened. Each range is checked against the size of the allocation
    the driver reports, so wrong offsets or sizes cannot read outside what the child exported."""
    if not _valid_list(meta):
        return "no readable list of outputs"
    opened = OpenedOutputs()
    mapped: dict[str, tuple[int, int]] = {}  # handle -> (base, size)
    try:
        torch.zeros(1, device=device)  # the driver calls below need this thread's CUDA context current
        for i in range(len(meta)):
            checked = _checked(meta, i)
            if isinstance(checked, str):
                return checked
            dtype, shape, nbytes = checked
            if nbytes == 0:
                opened.tensors.append(torch.empty(shape, dtype=dtype, device=device))
                continue
            ipc = meta[i].get("ipc")
            if not (isinstance(ipc, dict) and isinstance(ipc.get("handle"), str) and len(ipc["handle"]) == 128
                    and type(ipc.get("offset")) is int and ipc["offset"] >= 0):
                return f"output {i} has no valid IPC handle"
            if ipc["handle"] not in mapped:  # a handle opens once per process: outputs can share an allocation
                handle = _Handle.from_buffer_copy(bytes.fromhex(ipc["handle"]))
                base = ctypes.c_uint64()
                _call("cuIpcOpenMemHandle", ctypes.byref(base), handle, ctypes.c_uint(1))  # lazy peer access
                opened._bases.append(base.value)
                mapped[ipc["handle"]] = base.value, _address_range(base.value)[1]
            base, size = mapped[ipc["handle"]]
            if ipc["offset"] + nbytes > size or ipc["offset"] % ALIGN:
                return f"output {i}: {nbytes} bytes at offset {ipc['offset']} do not lie in its {size}-byte allocation"
            raw = torch.as_tensor(_Bytes(base + ipc["offset"], nbytes), device=device)
            opened.tensors.append(raw.view(dtype).reshape(shape))
        return opened
    except (OSError, ValueError, RuntimeError, TypeError) as e:
        return f"its outputs could not be mapped ({e})"
    finally:
        if len(opened.tensors) != len(meta):  # failed part-way: unmap what was mapped
            opened.close()
