"""cuda-agent's plug-in for verl 0.9.1, imported by every verl process when `import verl` runs.

Two ways to load it, both at `import verl` (`verl/__init__.py`):
- `VERL_USE_EXTERNAL_MODULES=cuda_agent.rl.workers.plugin` (Ray workers inherit the variable from the
  driver); an error here stops the process, which is what we want;
- the `verl.plugins` entry point in cuda-agent's pyproject.toml, loaded whenever cuda-agent is
  installed. verl only logs a failing entry point at DEBUG level, so this module also records
  that it loaded (`LOADED`), and `require_loaded()` lets a launcher check.

What it does:
- registers the rollouts `hf` (`cuda_agent.rl.rollout.hf`) and `null` (`cuda_agent.rl.rollout.null`)
  with verl's replica registry and its server-adapter table;
- makes verl's critic loader honour `critic.model.override_config.attn_implementation` (verl 0.9.1
  hard-codes flash_attention_2 there, then falls back to trl and fails: verl-project/verl#5210);
- under `VERL_PLATFORM=cpu`, activates the CPU platform (`cuda_agent.rl.workers.cpu_platform`).

It patches verl's internals, so it checks them first and raises ImportError, naming what moved, if
they are not where verl 0.9.1 has them.
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

VERL_VERSION = "0.9.1"
ROLLOUTS = {
    "hf": ("cuda_agent.rl.rollout.hf", "HFReplica", "HFServerAdapter"),
    "null": ("cuda_agent.rl.rollout.null", "NullReplica", "NullServerAdapter"),
}
LOADED = False


class VerlMovedError(ImportError):
    """verl's internals are not where verl 0.9.1 has them: this plug-in would patch the wrong thing."""

    def __init__(self, what: str):
        super().__init__(f"cuda_agent.rl.workers.plugin: {what}. It was written for verl=={VERL_VERSION}; "
                         f"install that version (pip install verl=={VERL_VERSION}) or update the plug-in.")


def _verl_file(relative: str) -> Path:
    # verl may still be importing (we run inside its __init__), so read its sources, don't import them
    verl = sys.modules.get("verl")
    if verl is None or not getattr(verl, "__file__", None):
        raise VerlMovedError("verl is not being imported; import verl with VERL_USE_EXTERNAL_MODULES set instead")
    return Path(verl.__file__).resolve().parent / relative


def register_rollouts() -> None:
    """Add our rollouts to verl's two registries (the replica class is imported lazily, as verl's own are)."""
    from verl.workers.rollout import base, replica

    table = getattr(base, "_ROLLOUT_REGISTRY", None)
    registry = getattr(replica, "RolloutReplicaRegistry", None)
    if not isinstance(table, dict) or ("vllm", "async") not in table:
        raise VerlMovedError("verl.workers.rollout.base._ROLLOUT_REGISTRY is gone or no longer keyed (name, mode)")
    if registry is None or not callable(getattr(registry, "register", None)):
        raise VerlMovedError("verl.workers.rollout.replica.RolloutReplicaRegistry.register is gone")
    for name, (module, replica_cls, adapter_cls) in ROLLOUTS.items():
        registry.register(name, lambda module=module, cls=replica_cls: getattr(__import__(module, fromlist=[cls]), cls))
        table[(name, "async")] = f"{module}.{adapter_cls}"


def load_value_model(local_path, torch_dtype, model_config, trust_remote_code):
    """verl's critic loader (`verl.utils.model.load_valuehead_model`), honouring the attention
    implementation the critic's config was built with (`critic.model.override_config`)."""
    from transformers import AutoModelForTokenClassification

    attn = getattr(model_config, "_attn_implementation", None) or "sdpa"
    try:
        return AutoModelForTokenClassification.from_pretrained(
            pretrained_model_name_or_path=local_path, torch_dtype=torch_dtype, config=model_config,
            attn_implementation=attn, trust_remote_code=trust_remote_code)
    except ImportError as e:
        raise ImportError(f"critic {local_path}: attention {attn!r} is not available ({e}); set "
                          "+critic.model.override_config.attn_implementation=sdpa") from e


def patch_critic_loader() -> None:
    """Replace verl 0.9.1's critic loader, after checking that the FSDP engine still looks it up at call time."""
    import verl.utils.model as verl_model

    original = getattr(verl_model, "load_valuehead_model", None)
    if original is None:
        raise VerlMovedError("verl.utils.model.load_valuehead_model is gone")
    if list(inspect.signature(original).parameters) != ["local_path", "torch_dtype", "model_config",
                                                        "trust_remote_code"]:
        raise VerlMovedError(f"verl.utils.model.load_valuehead_model{inspect.signature(original)} changed signature")
    engine = _verl_file("workers/engine/fsdp/transformer_impl.py")
    if "from verl.utils.model import load_valuehead_model" not in engine.read_text():
        raise VerlMovedError(f"{engine} no longer imports load_valuehead_model at call time, so patching "
                             "verl.utils.model would not reach the critic")
    verl_model.load_valuehead_model = load_value_model


def require_loaded() -> None:
    """Raise if this plug-in did not load in this process (verl hides entry-point failures)."""
    if not LOADED:
        raise RuntimeError("cuda_agent.rl.workers.plugin is not loaded: set "
                           "VERL_USE_EXTERNAL_MODULES=cuda_agent.rl.workers.plugin before importing verl")


def _load() -> None:
    global LOADED
    from cuda_agent.rl.workers import cpu_platform

    if cpu_platform.is_requested():
        cpu_platform.activate()
    register_rollouts()
    patch_critic_loader()
    LOADED = True


_load()
