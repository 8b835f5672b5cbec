"""Functions of the CUDA driver (libcuda) called with ctypes where torch has no binding: the persisting-L2 reset
(timing.py) and the fill spin's module load and launch (fill.py). Bound where a module imports them, before a
solution's code runs in the child."""

from __future__ import annotations

import ctypes
from typing import Callable, Sequence


def driver_function(name: str, argtypes: Sequence = ()) -> Callable[..., int] | None:
    """`name` of libcuda.so.1 taking `argtypes` and returning a CUresult (0: CUDA_SUCCESS), or None where there is no
    GPU driver or it has no such function."""
    try:
        fn = getattr(ctypes.CDLL("libcuda.so.1"), name)
    except (OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = list(argtypes), ctypes.c_int
    return fn
