"""A CPU "platform" for verl 0.9.1, so its FSDP engines and its trainer run on a machine with no GPU.

A test aid, not a backend: CPU CI uses it to run verl's real trainer (`main_ppo`, the SFT trainer)
on a tiny model. verl ships platforms for CUDA, ROCm and Ascend only, and falls back to 'nvidia'
when it finds none (`verl/plugin/platform/platform_manager.py`).

`activate()` does four things, in the process that calls it:
- registers a `cpu` platform with verl's `PlatformRegistry` (a `torch.cpu` device module with the
  CUDA-only calls verl makes stubbed out, gloo for collectives, a fake Ray "GPU" resource);
- makes verl's two process-group set-ups use gloo (they default to NCCL for the device);
- sets `VERL_ENGINE_DEVICE=cuda`, because the FSDP engines are registered for cuda and npu only
  (`verl/workers/engine/fsdp/transformer_impl.py`);
- hides an installed trl, whose current releases break verl's model build (notes: rl-verl.md §5).

`cuda_agent.rl.workers.plugin` calls `activate()` in every verl process when `VERL_PLATFORM=cpu`; a
run then needs FSDP2 (`actor_rollout_ref.actor.strategy=fsdp2 critic.strategy=fsdp2`: FSDP1 refuses
CPU modules), `trainer.device=cpu` and, for `main_ppo`, `+ray_kwargs.ray_init.num_gpus=1` so that
the resource pools find their (fake) GPU.
"""

from __future__ import annotations

import os
import types
from contextlib import contextmanager
from datetime import timedelta

PLATFORM_NAME = "cpu"


def is_requested() -> bool:
    """True when this process was asked to run verl on the CPU (`VERL_PLATFORM=cpu`)."""
    return os.environ.get("VERL_PLATFORM", "").strip().lower() == PLATFORM_NAME


def _device_module() -> types.ModuleType:
    """`torch.cpu` plus the `torch.cuda` calls verl makes on its device module, as no-ops."""
    import torch

    module = types.ModuleType("cuda_agent_cpu_device")
    for name in dir(torch.cpu):
        setattr(module, name, getattr(torch.cpu, name))
    stubs = dict(
        set_device=lambda *a, **k: None, empty_cache=lambda: None, manual_seed=torch.manual_seed,
        manual_seed_all=torch.manual_seed, memory_allocated=lambda *a, **k: 0, memory_reserved=lambda *a, **k: 0,
        max_memory_allocated=lambda *a, **k: 0, max_memory_reserved=lambda *a, **k: 0,
        reset_peak_memory_stats=lambda *a, **k: None, mem_get_info=lambda *a, **k: (64 << 30, 64 << 30),
        get_device_name=lambda *a, **k: "cpu", get_rng_state=torch.get_rng_state, set_rng_state=torch.set_rng_state,
        is_available=lambda: True, current_device=lambda: 0, device_count=lambda: 1,
    )
    for name, fn in stubs.items():
        setattr(module, name, fn)
    return module


def _platform_class():
    import torch
    from verl.plugin.platform.platform_base import PlatformBase

    device_module = _device_module()

    class PlatformCPU(PlatformBase):
        """verl's view of a CPU: one device, gloo collectives, a fake Ray GPU for resource pools."""

        device_name = property(lambda self: "cpu")
        vendor_name = property(lambda self: "cpu")
        device_module = property(lambda self: device_module)

        def is_available(self) -> bool:
            return True

        def current_device(self):
            return torch.device("cpu")  # FSDP's device_id

        def device_count(self) -> int:
            return 1

        def set_device(self, device_index) -> None:
            pass

        def synchronize(self, device_index=None) -> None:
            pass

        def manual_seed(self, seed: int) -> None:
            torch.manual_seed(seed)

        def manual_seed_all(self, seed: int) -> None:
            torch.manual_seed(seed)

        def set_allocator_settings(self, settings: str) -> None:
            pass

        def empty_cache(self) -> None:
            pass

        def get_device_capability(self, device_index: int = 0):
            return None, None

        def communication_backend_name(self) -> str:
            return "gloo"

        def visible_devices_envvar(self) -> str:
            return "CUDA_VISIBLE_DEVICES"

        @contextmanager
        def nvtx_range(self, msg: str):
            yield

        def profiler_start(self) -> None:
            pass

        def profiler_stop(self) -> None:
            pass

        def ray_resource_name(self) -> str:
            return "GPU"  # ray.init(num_gpus=1) declares one fake GPU for the trainer's resource pools

        def ray_noset_envvars(self) -> list[str]:
            return ["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"]

        def is_ipc_supported(self) -> bool:
            return False

        def cudart(self):
            return None

    return PlatformCPU


_active = False


def activate() -> None:
    """Register the CPU platform and route verl's process groups to gloo in this process (idempotent)."""
    global _active
    if _active:
        return
    import torch
    import verl.utils.distributed as verl_distributed
    from verl.plugin.platform.platform_manager import PlatformRegistry

    for name in ("initialize_global_process_group", "initialize_global_process_group_ray"):
        if not hasattr(verl_distributed, name):
            raise ImportError(f"cuda_agent.rl.workers.cpu_platform: verl.utils.distributed.{name} is gone in this verl "
                              "version; the CPU platform was written for verl 0.9.1. Pin verl==0.9.1 or update "
                              "cpu_platform.py.")
    PlatformRegistry.register(platform=PLATFORM_NAME)(_platform_class())

    def init_process_group(timeout_second: int = 36000):
        # torchrun path (the SFT trainer); verl would ask for "cpu:gloo,cpu:nccl"
        torch.distributed.init_process_group(backend="gloo", timeout=timedelta(seconds=timeout_second))
        return int(os.environ["LOCAL_RANK"]), int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])

    ray_init_process_group = verl_distributed.initialize_global_process_group_ray

    def init_process_group_ray(timeout_second=None, backend=None):
        return ray_init_process_group(timeout_second=timeout_second, backend="gloo")

    verl_distributed.initialize_global_process_group = init_process_group
    verl_distributed.initialize_global_process_group_ray = init_process_group_ray
    os.environ.setdefault("VERL_ENGINE_DEVICE", "cuda")
    _hide_trl()
    _active = True


def _hide_trl() -> None:
    """verl imports trl's value-head model when trl is importable; trl>=1.10 no longer has it."""
    import verl.models.transformers.monkey_patch as monkey_patch
    import verl.utils.model as verl_model

    monkey_patch.is_trl_available = lambda: False
    verl_model.is_trl_available = lambda: False
