"""The verl plug-in: registers our rollouts, fixes the critic loader, and refuses a verl whose internals moved."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("verl", reason="verl is not installed: the rl tests need `pip install -e '.[rl]'` (verl 0.9.1)")

import verl.utils.model as verl_model  # noqa: E402
from verl.workers.rollout import base, replica  # noqa: E402

from cuda_agent.rl.workers import plugin  # noqa: E402


def test_hf_and_null_rollouts_resolve_through_verls_registries():
    from cuda_agent.rl.rollout.hf import HFReplica, HFServerAdapter
    from cuda_agent.rl.rollout.null import NullReplica, NullServerAdapter

    assert replica.get_rollout_replica_class("hf") is HFReplica
    assert base.get_rollout_class("hf", "async") is HFServerAdapter
    assert replica.get_rollout_replica_class("null") is NullReplica
    assert base.get_rollout_class("null", "async") is NullServerAdapter


def test_critic_loader_is_replaced():
    assert verl_model.load_valuehead_model is plugin.load_value_model


def test_critic_loads_with_the_attention_its_config_asks_for(tiny_model):
    import importlib.util

    from transformers import AutoConfig

    if importlib.util.find_spec("flash_attn") is not None:
        pytest.skip("flash-attn is installed: the flash_attention_2 case would load")

    config = AutoConfig.from_pretrained(tiny_model, attn_implementation="sdpa")
    config.num_labels = 1
    critic = verl_model.load_valuehead_model(str(tiny_model), None, config, False)
    assert type(critic).__name__ == "Qwen2ForTokenClassification" and critic.config._attn_implementation == "sdpa"
    config = AutoConfig.from_pretrained(tiny_model, attn_implementation="flash_attention_2")
    with pytest.raises(ImportError, match="attn_implementation=sdpa"):  # flash-attn is not installed here
        verl_model.load_valuehead_model(str(tiny_model), None, config, False)


def test_a_moved_critic_loader_fails_loudly(monkeypatch):
    monkeypatch.delattr(verl_model, "load_valuehead_model")
    with pytest.raises(plugin.VerlMovedError, match="load_valuehead_model is gone"):
        plugin.patch_critic_loader()


def test_a_changed_critic_loader_signature_fails_loudly(monkeypatch):
    monkeypatch.setattr(verl_model, "load_valuehead_model", lambda path, dtype, config: None)
    with pytest.raises(plugin.VerlMovedError, match="changed signature"):
        plugin.patch_critic_loader()


def test_a_moved_rollout_table_fails_loudly(monkeypatch):
    monkeypatch.setattr(base, "_ROLLOUT_REGISTRY", {"vllm": "somewhere"})
    with pytest.raises(plugin.VerlMovedError, match="_ROLLOUT_REGISTRY"):
        plugin.register_rollouts()


@pytest.mark.slow
@pytest.mark.parametrize("modules, plugins, platform, expected", [
    ("cuda_agent.rl.workers.plugin", "none", "", "True False False"),   # the environment variable alone
    ("", "auto", "", "True False False"),                            # the verl.plugins entry point alone
    ("cuda_agent.rl.workers.plugin", "none", "cpu", "True True True"),  # the CPU platform only on request
])
def test_it_loads_when_verl_is_imported(modules, plugins, platform, expected):
    code = ("import verl, sys; p = sys.modules.get('cuda_agent.rl.workers.plugin'); "
            "c = sys.modules.get('cuda_agent.rl.workers.cpu_platform'); "
            "from verl.plugin.platform.platform_manager import PlatformRegistry; "
            "print(bool(p and p.LOADED), bool(c and c._active), 'cpu' in PlatformRegistry.registered_names())")
    env = {**os.environ, "VERL_USE_EXTERNAL_MODULES": modules, "VERL_USE_EXTERNAL_PLUGINS": plugins,
           "VERL_PLATFORM": platform}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == expected, out.stdout
