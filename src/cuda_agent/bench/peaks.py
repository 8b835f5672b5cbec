"""A device's measured peak rates, measured once per device and torch version and cached.

- `matmul_fp32`: FLOP/s of a large float32 matmul with TF32 off (how eager runs float32 matmuls).
- `matrix_unit`: FLOP/s of the same matmul with TF32 on (tensor cores; within a 1e-2 tolerance).
- `matmul_bf16`: FLOP/s of a bfloat16 matmul (recorded, not used for float32 tasks).
- `fma_fp32`: plain FP32 FLOP/s from an element-wise kernel doing long chains of FMAs in registers
  (a jiterator kernel on CUDA; on CPU, in-cache multiply-adds).
- `bandwidth`: bytes/s of a large device-to-device copy (bytes read + bytes written).

Measured rates, not datasheet ones: SOL fractions are against what this device reaches.
"""

from __future__ import annotations

import json
import os
import platform
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import torch

from cuda_agent.devices import check_device
from cuda_agent.home import subdir

_FMA_ITERS = 2048
_FMA_CODE = f"""
template <typename T> T fma_chains(T x, T y) {{
  T a = x, b = y, c = x + y, d = x - y;
  #pragma unroll 16
  for (int i = 0; i < {_FMA_ITERS}; ++i) {{
    a = a * x + y; b = b * x + y; c = c * x + y; d = d * x + y;
  }}
  return a + b + c + d;
}}
"""
_FMA_FLOPS_PER_ELEMENT = 4 * 2 * _FMA_ITERS


@dataclass
class Peaks:
    device: str
    torch: str
    matmul_fp32: float
    matrix_unit: float
    matmul_bf16: float
    fma_fp32: float
    bandwidth: float
    measured_at: str = ""
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (f"{self.device}: matmul fp32 {self.matmul_fp32 / 1e12:.1f} TFLOP/s, TF32 "
                f"{self.matrix_unit / 1e12:.1f}, bf16 {self.matmul_bf16 / 1e12:.1f}, FP32 FMA "
                f"{self.fma_fp32 / 1e12:.1f} TFLOP/s, copy {self.bandwidth / 1e9:.0f} GB/s")


def device_name(device: str) -> str:
    """The GPU's name, or the CPU's model and core count."""
    if device == "cuda":
        return torch.cuda.get_device_name()
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model} ({os.cpu_count()} cores)"


def _best_seconds(fn: Callable[[], object], device: str, reps: int, rounds: int = 3) -> float:
    """The fastest per-call time over `rounds` rounds of `reps` calls, after a warm-up."""
    fn()
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    sync()
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        sync()
        best = min(best, (time.perf_counter() - t0) / reps)
    return best


def _matmul_rate(n: int, dtype: torch.dtype, device: str, tf32: bool, reps: int) -> float:
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    try:
        return 2 * n**3 / _best_seconds(lambda: a @ b, device, reps)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old


def _copy_rate(nbytes: int, device: str, reps: int) -> float:
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device).fill_(1.0)
    dst = torch.empty_like(src)
    return 2 * nbytes / _best_seconds(lambda: dst.copy_(src), device, reps)


def _cuda_fma_rate(notes: list[str], fallback: float) -> float:
    try:
        kernel = torch.cuda.jiterator._create_jit_fn(_FMA_CODE)
        x = torch.full((1 << 24,), 0.999, device="cuda")
        y = torch.full((1 << 24,), 1e-3, device="cuda")
        return x.numel() * _FMA_FLOPS_PER_ELEMENT / _best_seconds(lambda: kernel(x, y), "cuda", 5)
    except Exception as e:  # no NVRTC: price plain FP32 work at the FP32 matmul rate
        notes.append(f"fma_fp32 = matmul_fp32 (jiterator FMA kernel failed: {type(e).__name__}: {e})")
        return fallback


def _cpu_fma_rate() -> float:
    a = torch.full((1 << 16,), 0.999)
    b = torch.full((1 << 16,), 1e-3)
    c = torch.zeros(1 << 16)
    return 2 * c.numel() / _best_seconds(lambda: torch.addcmul(c, a, b, out=c), "cpu", 50)


def measure(device: str) -> Peaks:
    """Measure the peaks of `device` ("cuda": the current GPU, a few seconds; "cpu": about a second)."""
    device = check_device(device)
    notes: list[str] = []
    if device == "cuda":
        fp32 = _matmul_rate(8192, torch.float32, "cuda", tf32=False, reps=5)
        tf32 = _matmul_rate(8192, torch.float32, "cuda", tf32=True, reps=10)
        bf16 = _matmul_rate(8192, torch.bfloat16, "cuda", tf32=False, reps=20)
        fma = _cuda_fma_rate(notes, fp32)
        bandwidth = _copy_rate(1 << 30, "cuda", 10)
        torch.cuda.empty_cache()
    else:
        fp32 = tf32 = _matmul_rate(512, torch.float32, "cpu", tf32=False, reps=3)
        bf16 = _matmul_rate(256, torch.bfloat16, "cpu", tf32=False, reps=3)
        fma = _cpu_fma_rate()
        bandwidth = _copy_rate(64 << 20, "cpu", 3)
        notes.append("cpu: the matrix unit is the FP32 matmul rate (no TF32)")
    return Peaks(device=device_name(device), torch=torch.__version__, matmul_fp32=fp32, matrix_unit=max(tf32, fp32),
                 matmul_bf16=bf16, fma_fp32=fma, bandwidth=bandwidth,
                 measured_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"), notes=notes)


def cache_path(device: str) -> Path:
    slug = re.sub(r"[^A-Za-z0-9.]+", "-", f"{device_name(device)}-torch{torch.__version__}").strip("-")
    return subdir("peaks") / f"{slug}.json"


def device_peaks(device: str, remeasure: bool = False) -> Peaks:
    """The cached peaks of this `device` (measured and cached on first use)."""
    device = check_device(device)
    path = cache_path(device)
    if path.is_file() and not remeasure:
        try:
            return Peaks(**json.loads(path.read_text()))
        except (ValueError, TypeError):
            pass  # an older or damaged file: measure again
    peaks = measure(device)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(asdict(peaks), indent=1))
    os.replace(tmp, path)
    return peaks
