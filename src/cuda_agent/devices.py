"""The one way to list and name devices: which GPUs this process may use, the device a command
runs on by default and its backend (the device checked, with the GPU's arch), the name a device's
lock file has, the name its figures are cached under, the CPU cores set aside for timing on it,
and the machine its figures were taken on."""

from __future__ import annotations

import functools
import os
import platform
import subprocess
from dataclasses import dataclass
from typing import Literal

from cuda_agent.usage import UsageError

Device = Literal["cuda", "cpu"]
DEVICES = ("cuda", "cpu")
ENV_DEVICE = "CUDA_AGENT_DEVICE"


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def default_device() -> Device:
    """`cuda` where a GPU is present, otherwise `cpu` (overridable with CUDA_AGENT_DEVICE)."""
    env = os.environ.get(ENV_DEVICE)
    if env in ("cuda", "cpu"):
        return env  # type: ignore[return-value]
    return "cuda" if cuda_available() else "cpu"


def check_device(device: str | None = None, *, present: bool = True) -> Device:
    """`device` (default: $CUDA_AGENT_DEVICE, else `default_device()`) checked: `cuda` or `cpu`, and
    with `present` a GPU that torch sees for `cuda`. The one check of a device name (every command's
    --device, the harness's backend, a workspace's); UsageError says what to do."""
    from_env = device is None and bool(os.environ.get(ENV_DEVICE))
    dev = device or os.environ.get(ENV_DEVICE) or default_device()
    given = f"${ENV_DEVICE}={dev}" if from_env else f"--device {dev}"
    if dev not in DEVICES:
        fix = f"set {ENV_DEVICE} to cuda or cpu" if from_env else "use --device cuda or --device cpu"
        raise UsageError(f"{given}: unknown device; {fix}")
    if dev == "cuda" and present and not cuda_available():
        import torch

        why = "this torch is built without CUDA" if torch.version.cuda is None else "torch sees no GPU"
        raise UsageError(f"{given}: {why} (torch {torch.__version__}); use --device cpu to run the same checks "
                         "with C++ extensions on the CPU, or leave --device out (cuda is the default only where "
                         "there is a GPU)")
    return dev  # type: ignore[return-value]



@dataclass(frozen=True)
class Backend:
    """A checked device and what its code is compiled for: `cuda` (nvcc for the GPU's arch) or
    `cpu` (the host's C++ compiler); the two share every code path except the compiler and the timer."""

    device: Device
    arch: str | None = None  # e.g. "sm_90" on cuda; None on cpu

    @property
    def is_cuda(self) -> bool:
        return self.device == "cuda"


def resolve_backend(device: str | None = None) -> Backend:
    """The backend for `device` (default: the machine's, see `check_device`); cuda reads the GPU's own
    arch. UsageError for an unknown device, or cuda without a GPU."""
    dev = check_device(device)
    if dev == "cpu":
        return Backend("cpu")
    import torch

    major, minor = torch.cuda.get_device_capability()
    return Backend("cuda", arch=f"sm_{major}{minor}")

def visible_gpus(limit: int | None = None) -> list[str]:
    """The GPU ids this process may use, as CUDA_VISIBLE_DEVICES names them (its entries, else every
    device torch sees), at most `limit`; an empty list without a GPU."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        ids = [g.strip() for g in env.split(",") if g.strip()]
    else:
        import torch

        ids = [str(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []
    return ids[:limit] if limit else ids


# Inductor's compile pool in each of several processes that compile beside each other on one host (a bench's
# evaluators, synth's workers): its default, one subprocess per core up to 32 in every such process, would thrash
# (16 synth workers on a 32-core host: up to 512 compiling subprocesses). Where TORCHINDUCTOR_COMPILE_THREADS is set,
# that wins.
COMPILE_THREADS_ENV, SHARED_COMPILE_THREADS = "TORCHINDUCTOR_COMPILE_THREADS", "2"


# The cores a process times on, where the machine sets some aside (the evaluation service gives each
# evaluator two, on which nothing starts, builds or compiles), e.g. "4,5"; processes the harness
# starts inherit it.
TIMING_CORES_ENV = "CUDA_AGENT_TIMING_CORES"


def timing_cores() -> set[int] | None:
    """This process's timing cores (TIMING_CORES_ENV), or None where none are set aside."""
    raw = os.environ.get(TIMING_CORES_ENV, "").strip()
    try:
        return {int(c) for c in raw.split(",") if c.strip()} or None
    except ValueError:
        return None


def lock_name(device: str) -> str:
    """The name of the lock of the device this process times on: "cuda0" for the first visible GPU
    (as the machine numbers it), "cpu0" on the CPU."""
    return f"{device}{os.environ.get('CUDA_VISIBLE_DEVICES', '0').split(',')[0]}"


def device_name(device: str) -> str:
    """The device's model, the name under which timings are cached ("NVIDIA H100 80GB HBM3",
    "cpu-x86_64-16cores")."""
    if device == "cuda":
        import torch

        return torch.cuda.get_device_name()
    return f"cpu-{platform.machine()}-{os.cpu_count()}cores"


@functools.cache
def machine(device: str) -> dict[str, str | None]:
    """Where figures are taken on `device`, as GPU MODE's SystemInfo records it: the device's model
    (`device_name`), the NVIDIA driver's version, torch's version and the CUDA version torch was
    built with (driver and CUDA None on the CPU, the driver None where nvidia-smi cannot say)."""
    import torch

    cuda = device == "cuda"
    return {"device": device_name(device), "driver": _nvidia_driver() if cuda else None,
            "torch": torch.__version__, "cuda": torch.version.cuda if cuda else None}


def _nvidia_driver() -> str | None:
    gpu = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip() or "0"
    try:
        out = subprocess.run(["nvidia-smi", "-i", gpu, "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = out.stdout.strip().splitlines()
    return lines[0].strip() if out.returncode == 0 and lines else None
