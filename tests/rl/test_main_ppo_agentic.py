"""verl's real PPO trainer (`python -m verl.trainer.main_ppo`, the v1 trainer with TransferQueue, GAE
and a critic) validating and training on trajectories of the cuda_agent agent loop, on the CPU: the
tiny model behind the `hf` rollout writes noise, so every trajectory is one unverified reply worth
-1, but everything between the loop and the optimizer is verl's own (the rows' tasks, the loop's
options from an agent_loops YAML, rm_scores from reward_score, the weights-version tags the v1
replay buffer needs, the validation metrics of reward_extra_info)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("verl", reason="verl is not installed: the rl tests need `pip install -e '.[rl]'` (verl 0.9.1)")

from cuda_agent.agent.trajectory import read_records  # noqa: E402
from cuda_agent.tasks import EXAMPLES_DIR  # noqa: E402
from test_hf_rollout import logged_steps  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.long]


def number(logged: str) -> float:
    """A metric as the console logger prints it: `-1.0` or `np.float64(-1.0)`."""
    return float(re.sub(r"^np\.\w+\((.*)\)$", r"\1", logged))


def agentic_ppo_command(model: Path, data: Path, loops_yaml: Path, out_dir: Path) -> list[str]:
    """`main_ppo` on one fake GPU (the CPU platform): GAE with a critic, the hf rollout, the cuda_agent
    loop for every row, a validation pass, then one training step."""
    overrides = f"""
        algorithm.adv_estimator=gae trainer.critic_warmup=0
        data.train_files={data} data.val_files={data} data.train_batch_size=2 data.dataloader_num_workers=0
        data.max_prompt_length=3072 data.max_response_length=48
        actor_rollout_ref.model.path={model} critic.model.path={model}
        actor_rollout_ref.rollout.name=hf actor_rollout_ref.rollout.tensor_model_parallel_size=1
        actor_rollout_ref.rollout.n=2 actor_rollout_ref.rollout.calculate_log_probs=True
        actor_rollout_ref.rollout.agent.default_agent_loop=cuda_agent
        actor_rollout_ref.rollout.agent.agent_loop_config_path={loops_yaml}
        actor_rollout_ref.rollout.multi_turn.max_assistant_turns=2
        actor_rollout_ref.actor.ppo_mini_batch_size=2 actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2
        critic.ppo_micro_batch_size_per_gpu=2 actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2
        actor_rollout_ref.rollout.dtype=float32
        +actor_rollout_ref.model.override_config.attn_implementation=sdpa
        actor_rollout_ref.model.use_remove_padding=False
        +critic.model.override_config.attn_implementation=sdpa critic.model.use_remove_padding=False
        actor_rollout_ref.model.enable_gradient_checkpointing=False critic.model.enable_gradient_checkpointing=False
        actor_rollout_ref.actor.fsdp_config.use_torch_compile=False actor_rollout_ref.actor.use_torch_compile=False
        critic.fsdp.use_torch_compile=False
        actor_rollout_ref.actor.strategy=fsdp2 critic.strategy=fsdp2 trainer.device=cpu
        trainer.n_gpus_per_node=1 trainer.nnodes=1 trainer.logger=[console] trainer.val_before_train=True
        trainer.total_training_steps=1 trainer.save_freq=-1 trainer.test_freq=-1 trainer.default_local_dir={out_dir}
        transfer_queue.backend.SimpleStorage.num_data_storage_units=1 reward.num_workers=1
        actor_rollout_ref.rollout.agent.num_workers=1 +ray_kwargs.ray_init.num_gpus=1 ray_kwargs.ray_init.num_cpus=8
    """
    return [sys.executable, "-m", "verl.trainer.main_ppo", *overrides.split()]


def test_main_ppo_validates_and_trains_on_cuda_agent_trajectories(tiny_model, agent_toml, tmp_path):
    import pandas as pd

    task = str(EXAMPLES_DIR / "scale_bias_relu.py")
    rows = [{"data_source": "cuda_agent", "prompt": [{"role": "user", "content": "Make scale_bias_relu fast."}],
             "agent_name": "cuda_agent", "reward_model": {"style": "rule", "ground_truth": ""},
             "extra_info": {"index": i, "task_path": task}} for i in range(4)]
    pd.DataFrame(rows).to_parquet(tmp_path / "rl.parquet")
    runs = tmp_path / "runs"
    (tmp_path / "loops.yaml").write_text(f"""- name: cuda_agent
  _target_: cuda_agent.rl.rollout.agent_loop.CudaAgentLoop
  evaluator: service
  device: cpu
  agent_config: {agent_toml}
  runs_dir: {runs}
""")
    env = {**os.environ, "VERL_USE_EXTERNAL_MODULES": "cuda_agent.rl.workers.plugin", "VERL_PLATFORM": "cpu",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "RAY_USAGE_STATS_ENABLED": "0", "WANDB_MODE": "disabled", "TOKENIZERS_PARALLELISM": "false",
           "PYTHONUNBUFFERED": "1"}
    cmd = agentic_ppo_command(tiny_model, tmp_path / "rl.parquet", tmp_path / "loops.yaml", tmp_path / "ckpt")
    t0 = time.perf_counter()
    run = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=480)
    log = run.stdout + run.stderr
    (tmp_path / "main_ppo.log").write_text(log)
    assert run.returncode == 0, f"main_ppo failed after {time.perf_counter() - t0:.0f} s:\n{log[-6000:]}"
    steps = logged_steps(log)
    assert sorted(steps) == [0, 1], f"logged steps {sorted(steps)}"
    assert number(steps[0]["val-core/cuda_agent/reward/mean@1"]) == -1.0  # our reward_score, as the trainer saw it
    assert "val-aux/cuda_agent/correct/mean@1" in steps[0]                # our reward_extra_info, aggregated
    assert number(steps[0]["val-aux/cuda_agent/pass_turn1/mean@1"]) == 0.0   # pass at turn 1 beside it
    trained = steps[1]
    assert number(trained["critic/score/mean"]) == -1.0 and number(trained["actor/grad_norm"]) > 0
    assert number(trained["critic/grad_norm"]) > 0 and number(trained["prompt_length/mean"]) > 1000  # SKILL.md
    # 4 validation and 2 x 2 training trajectories, each in a run folder of its own under the YAML's runs_dir
    folders = sorted(runs.iterdir())
    assert len(folders) == 8
    for folder in folders:
        ends = [r for r in read_records(folder / "trajectory.jsonl") if r["type"] == "end"]
        assert len(ends) == 1 and ends[0]["status"] in ("done", "max_context", "max_turns")
        assert not (folder / "workspace").exists()   # keep_workspace is off
