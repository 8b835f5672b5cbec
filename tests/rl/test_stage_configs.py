"""The stage configs: each composes as verl composes it, passes verl's validate_config (the PPO
stages), and carries the one-GPU settings that ran on the H100, or the CPU platform's."""

from __future__ import annotations

import pytest
import yaml

pytest.importorskip("verl", reason="verl is not installed: the rl tests need `pip install -e '.[rl]'` (verl 0.9.1)")

from verl.trainer.ppo.utils import need_critic, need_reference_policy  # noqa: E402
from verl.utils.config import validate_config  # noqa: E402

from cuda_agent.rl.driver.launch import compose  # noqa: E402
from cuda_agent.rl.driver.stages import SPECS  # noqa: E402

PPO = list(dict.fromkeys(spec.config for spec in SPECS.values() if spec.trainer == "ppo"))   # config names
MODELS = ["actor_rollout_ref.model.path=/models/actor", "critic.model.path=/models/critic"]


def ppo(name: str, cpu: bool, model=None):
    models = [f"actor_rollout_ref.model.path={model}", f"critic.model.path={model}"] if model else MODELS
    return compose(name, (["+cpu=ppo"] if cpu else []) + models)


@pytest.mark.parametrize("cpu", [False, True], ids=["one-gpu", "cpu-platform"])
@pytest.mark.parametrize("name", PPO)
def test_ppo_stage_composes_and_passes_verls_validation(name, cpu, tiny_model):
    cfg = ppo(name, cpu, tiny_model)   # validate_config reads the model's config
    validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    assert need_critic(cfg) == (name != "collect") and not need_reference_policy(cfg)   # collecting trains nothing
    assert cfg.algorithm.adv_estimator == "gae"
    a, c = cfg.actor_rollout_ref, cfg.critic
    # what ran on one H100 without flash-attn (rl-verl notes, sections 5 and 14)
    assert a.model.override_config.attn_implementation == c.model.override_config.attn_implementation == "sdpa"
    assert a.model.use_remove_padding is False and c.model.use_remove_padding is False
    assert a.actor.use_torch_compile is False and a.actor.fsdp_config.use_torch_compile is False
    assert c.fsdp.use_torch_compile is False
    assert a.rollout.tensor_model_parallel_size == 1 and cfg.trainer.n_gpus_per_node == 1
    assert a.rollout.agent.num_workers <= 2 and cfg.reward.num_workers <= 2
    assert cfg.transfer_queue.backend.SimpleStorage.num_data_storage_units <= 2
    assert cfg.reward.custom_reward_function.path == "pkg://cuda_agent.rl.workers.reward"
    if cpu:
        assert cfg.trainer.device == "cpu" and a.actor.strategy == c.strategy == "fsdp2"
        assert cfg.ray_kwargs.ray_init.num_gpus == 1 and a.rollout.dtype == "float32"
        assert cfg.reward.custom_reward_function.reward_kwargs.device == "cpu"


def test_warmup_is_single_turn_with_the_harness_reward():
    cfg = ppo("warmup", cpu=False)
    assert cfg.actor_rollout_ref.rollout.agent.default_agent_loop == "single_turn_agent"
    assert cfg.actor_rollout_ref.rollout.name == "hf" and cfg.trainer.critic_warmup == 0


def test_value_pretraining_trains_the_critic_alone_on_replays():
    cfg = ppo("value", cpu=False)
    assert cfg.trainer.critic_warmup > cfg.trainer.total_training_steps
    assert cfg.actor_rollout_ref.rollout.name == "null"   # the string, not YAML's None
    assert cfg.actor_rollout_ref.rollout.agent.default_agent_loop == "cuda_agent_replay"


@pytest.mark.parametrize("cpu", [False, True], ids=["one-gpu", "cpu-platform"])
def test_collecting_runs_the_frozen_actor_in_the_cuda_agent_loop_sampling(cpu):
    from cuda_agent.rl.driver.stages import COLLECTS, STAGES

    assert all(SPECS[s].config == "collect" for s in COLLECTS)
    assert STAGES.index("warmup") < STAGES.index("collect") < STAGES.index("rft") < STAGES.index("collect_rft") \
        < STAGES.index("value")
    cfg = ppo("collect", cpu)
    a = cfg.actor_rollout_ref.rollout
    assert a.agent.default_agent_loop == "cuda_agent" and a.multi_turn.max_assistant_turns > 1
    assert a.val_kwargs.do_sample and a.val_kwargs.temperature == 1.0 and a.val_kwargs.n >= 1
    assert cfg.trainer.val_only and not need_critic(cfg)   # train.py also forces val_only and val_before_train


def test_agentic_runs_the_cuda_agent_loop():
    cfg = ppo("agentic", cpu=False)
    assert cfg.actor_rollout_ref.rollout.agent.default_agent_loop == "cuda_agent"
    assert cfg.actor_rollout_ref.rollout.multi_turn.max_assistant_turns > 1


@pytest.mark.parametrize("platform, gpus, shared", [("gpu", 1, "0"), ("gpu", 2, "0"), ("cpu", 1, None)])
def test_the_stages_agent_loops_carry_the_runs_options(tmp_path, platform, gpus, shared, monkeypatch):
    from cuda_agent.rl.driver.launch import write_agent_loops
    from cuda_agent.rl.driver.stages import RunConfig
    from cuda_agent.rl.rollout.agent_loop import LoopSettings

    monkeypatch.setattr("cuda_agent.devices.visible_gpus", lambda limit=None: [str(i) for i in range(gpus + 2)])
    run = RunConfig(path=tmp_path / "run.yaml", out=tmp_path, model="m", platform=platform, gpus=gpus,
                    agent_config=tmp_path / "agent.toml")   # harness.gpus 0 by default: shared
    loops = {e.pop("name"): e for e in yaml.safe_load(write_agent_loops(run, tmp_path).read_text())}
    assert {n: e.pop("_target_") for n, e in loops.items()} == {
        "cuda_agent": "cuda_agent.rl.rollout.agent_loop.CudaAgentLoop",
        "cuda_agent_replay": "cuda_agent.rl.rollout.agent_loop.ReplayAgentLoop"}
    agentic = LoopSettings.from_options(loops["cuda_agent"])   # the loop accepts every option written
    LoopSettings.from_options(loops["cuda_agent_replay"])
    assert agentic.device == run.harness_device and agentic.runs_dir == str(tmp_path / "runs")
    assert agentic.agent_config == str(tmp_path / "agent.toml")
    assert (agentic.service or {}).get("shared_gpu") == shared


@pytest.mark.parametrize("cpu", [False, True], ids=["one-gpu", "cpu-platform"])
def test_rft_is_verls_sft_trainer_on_our_parquet(cpu):
    cfg = compose("rft", (["+cpu=sft"] if cpu else []) + ["model.path=/models/actor", "data.train_files=/d.parquet"])
    assert cfg.data.custom_cls.path == "pkg://cuda_agent.rl.workers.sft_dataset"
    assert cfg.data.messages_key == "messages" and cfg.data.tools_key == "tools"
    assert cfg.model.override_config.attn_implementation == "sdpa" and cfg.model.use_remove_padding is False
    assert cfg.engine.use_torch_compile is False and "hf_model" in cfg.checkpoint.save_contents
    if cpu:
        assert cfg.engine.strategy == "fsdp2" and cfg.trainer.device == "cpu"


def test_any_key_can_be_overridden_and_a_wrong_one_is_named():
    from cuda_agent.rl.driver.stages import TrainError

    cfg = compose("warmup", [*MODELS, "data.train_batch_size=16", "actor_rollout_ref.rollout.n=8"])
    assert cfg.data.train_batch_size == 16 and cfg.actor_rollout_ref.rollout.n == 8
    with pytest.raises(TrainError, match="data.train_batch_sise"):
        compose("warmup", [*MODELS, "data.train_batch_sise=16"])


@pytest.mark.parametrize("cpu", [False, True], ids=["one-gpu", "cpu-platform"])
@pytest.mark.parametrize("name", ["warmup", "agentic", "sanity"])
def test_ppo_updates_the_actor_in_several_mini_batches_so_clipping_acts(name, cpu):
    """A mini-batch as large as the batch in one epoch trains on the policy that sampled: the
    importance ratio stays 1 and the clip fraction 0 (PPO reduced to a policy gradient)."""
    cfg = ppo(name, cpu)
    actor = cfg.actor_rollout_ref.actor
    updates = cfg.data.train_batch_size // actor.ppo_mini_batch_size * actor.ppo_epochs
    assert updates >= 2, f"{name}: {updates} actor update(s) a batch"
    assert cfg.data.train_batch_size % actor.ppo_mini_batch_size == 0


@pytest.mark.parametrize("warmup, refused", [(3, True), (4, False)])
def test_value_pretraining_refuses_a_warm_up_that_lets_the_last_step_train_the_actor(warmup, refused, tiny_model):
    # verl counts steps from 1 and trains the actor at every step s >= critic_warmup
    from cuda_agent.rl.driver.launch import check_ppo
    from cuda_agent.rl.driver.stages import TrainError

    cfg = compose("value", [f"actor_rollout_ref.model.path={tiny_model}", f"critic.model.path={tiny_model}",
                            "trainer.total_training_steps=3", f"trainer.critic_warmup={warmup}"])
    if refused:
        with pytest.raises(TrainError, match=r"critic_warmup \(3\) must be > trainer.total_training_steps.*critic_warmup=4"):
            check_ppo("value", cfg, 64, "cpu")
    else:
        check_ppo("value", cfg, 64, "cpu")


def test_the_fill_stage_on_two_gpus_passes_verls_validation_and_the_micro_batch_check(tiny_model):
    """Issue 27's RL step on 2 GPUs (rl_learning_fleet.sh scale: the run file's `gpus: 2`): fill.yaml's batches split
    evenly over two ranks, as verl asserts only after minutes of start-up."""
    from cuda_agent.rl.driver.launch import check_micro_batches

    cfg = compose("fill", [f"actor_rollout_ref.model.path={tiny_model}", f"critic.model.path={tiny_model}",
                           "trainer.n_gpus_per_node=2"])
    validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    check_micro_batches("fill", cfg)
    assert cfg.trainer.n_gpus_per_node == 2


@pytest.mark.parametrize("node, trainer, asked, own", [(2, 1, None, 1), (4, 2, None, 2), (1, 1, None, 0),
                                                       (4, 1, 2, 2), (2, 1, 0, 0), (0, 1, 1, 1)])
def test_the_evaluation_service_gets_the_gpus_beside_the_trainers(tmp_path, monkeypatch, node, trainer, asked, own):
    """harness.gpus: GPUs of the service's own (its evaluators ask Ray for them: the reward's and the agent
    loop's alike); null: the node's beyond the trainer's; 0 (the default), or none left over: the trainer's
    first, shared."""
    from cuda_agent.rl.driver.inputs import _ppo_logs
    from cuda_agent.rl.driver.launch import evaluation_gpus
    from cuda_agent.rl.driver.stages import HarnessSettings, RunConfig
    from cuda_agent.rl.rollout.agent_loop import LoopSettings
    from cuda_agent.rl.workers.reward import RewardSettings

    monkeypatch.setattr("cuda_agent.devices.visible_gpus", lambda limit=None: [str(i) for i in range(node)])
    run = RunConfig(path=tmp_path / "run.yaml", out=tmp_path, model="m", platform="gpu", gpus=trainer,
                    harness=HarnessSettings(gpus=asked))
    assert evaluation_gpus(run) == own
    overrides = _ppo_logs(run, tmp_path / "stage")
    kwargs = {o.split("=")[0].rsplit(".", 1)[1]: o.split("=", 1)[1] for o in overrides if "reward_kwargs" in o}
    loop = next(e for e in yaml.safe_load((tmp_path / "stage" / "agent_loops.yaml").read_text())
                if e["name"] == "cuda_agent")
    service = LoopSettings.from_options({k: v for k, v in loop.items() if k not in ("name", "_target_")}).service
    if own:
        assert kwargs["shared_gpu"] == "null" and kwargs["gpus"] == str(own)
        assert service.get("gpus") == own and "shared_gpu" not in service
        settings = RewardSettings.from_kwargs({"shared_gpu": None, "gpus": own}).service_settings("cuda")
        assert settings.shared_gpu is None and settings.gpus == own
    else:
        assert "shared_gpu" not in kwargs and "gpus" not in kwargs   # the stage config's shared_gpu "0" stays
        assert service.get("shared_gpu") == "0" and "gpus" not in service


def test_a_harness_gpu_count_that_cannot_fit_beside_the_trainers_is_refused(tmp_path, monkeypatch):
    from cuda_agent.rl.driver.launch import evaluation_gpus
    from cuda_agent.rl.driver.stages import HarnessSettings, RunConfig, TrainError

    monkeypatch.setattr("cuda_agent.devices.visible_gpus", lambda limit=None: ["0", "1"])
    run = RunConfig(path=tmp_path / "run.yaml", out=tmp_path, model="m", platform="gpu", gpus=2,
                    harness=HarnessSettings(gpus=1))
    with pytest.raises(TrainError, match="do not fit the 2 this node has"):
        evaluation_gpus(run)
