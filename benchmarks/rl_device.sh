#!/usr/bin/env bash
# The RL wing on the lent GPU, in one call per step (logs, metrics and plots into $OUT/rl_<step>.tgz):
#   bash benchmarks/rl_device.sh sanity[:SECONDS]   the learning sanity run (PPO with a critic, tiny policy,
#                                                    the real harness on the GPU through the evaluation service)
#   bash benchmarks/rl_device.sh all[:SECONDS]      `cuda-agent train all`: the four stages with the tiny model
#   bash benchmarks/rl_device.sh stability[:SECONDS] the service's spread of 5 medians, idle and with builds beside
# Needs the carried wheels (.whl: scripts/carry_wheels.sh) and .devdata/ (KernelBench, for the all step).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-device_out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CUDA_AGENT_HOME=${CUDA_AGENT_HOME:-/tmp/cuda_agent_home} \
  RAY_USAGE_STATS_ENABLED=0 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_MODE=disabled
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD/src
bash scripts/sandbox_access.sh python3 >/dev/null
W=/tmp/rl; mkdir -p $W
[ -d $W/tiny ] || python3 -m cuda_agent.rl.tools.tiny_model $W/tiny >/dev/null
printf '[run]\nisolation = false\n\n[limits]\nbash_timeout_s = 60\n' > $W/agent.toml
REPO=$PWD
for arg in "$@"; do
  step=${arg%%:*}; limit=${arg#*:}; [ "$limit" = "$arg" ] && limit=540
  t0=$SECONDS
  case $step in
    sanity)
      cat > $W/sanity.yaml <<YAML
out: $W/sanity
model: $W/tiny
platform: gpu
device: cuda
gpus: 1
sanity: {train_tasks: 6, val_tasks: 2, shuffle: false}
YAML
      timeout -k 60 "$limit" python3 -m cuda_agent train sanity --config $W/sanity.yaml --quiet \
        data.max_response_length=2 data.train_batch_size=2 actor_rollout_ref.rollout.n=8 \
        actor_rollout_ref.actor.ppo_mini_batch_size=2 actor_rollout_ref.actor.optim.lr=1e-2 \
        trainer.total_training_steps=${SANITY_STEPS:-30} trainer.test_freq=5 trainer.save_freq=-1 2>&1 | tail -25 ;;
    all)
      cat > $W/all.yaml <<YAML
out: $W/all
model: $W/tiny
platform: gpu
device: cuda
gpus: 1
tasks: [$REPO/src/cuda_agent/examples/scale_bias_relu.py, $REPO/tests/hacks/tasks]
val_fraction: 0
trajectories: [$REPO/tests/rl/fixtures/scale_bias_relu.cpu.trajectory.jsonl]
agent_config: $W/agent.toml
stages:
  warmup: {trainer.total_training_steps: 2, trainer.save_freq: 2, data.train_batch_size: 4, actor_rollout_ref.actor.ppo_mini_batch_size: 4, actor_rollout_ref.rollout.n: 2, data.max_prompt_length: 3072, data.max_response_length: ${WARMUP_RESPONSE:-384}, trainer.val_before_train: false, trainer.test_freq: -1, actor_rollout_ref.model.enable_gradient_checkpointing: false, critic.model.enable_gradient_checkpointing: false}
  rft: {trainer.total_training_steps: 2, data.max_length: 8192, model.enable_gradient_checkpointing: false}
  value: {trainer.total_training_steps: 2, trainer.save_freq: 2, data.train_batch_size: 1, actor_rollout_ref.actor.ppo_mini_batch_size: 1, actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu: 1, critic.forward_micro_batch_size_per_gpu: 1, critic.ppo_micro_batch_size_per_gpu: 1, data.max_prompt_length: 4096, data.max_response_length: 8192}
  agentic: {trainer.total_training_steps: 2, trainer.save_freq: 2, data.train_batch_size: 4, actor_rollout_ref.actor.ppo_mini_batch_size: 4, actor_rollout_ref.rollout.n: 2, data.max_prompt_length: 4096, data.max_response_length: ${AGENTIC_RESPONSE:-1024}, actor_rollout_ref.rollout.multi_turn.max_assistant_turns: 3, trainer.val_before_train: false, trainer.test_freq: -1}
YAML
      timeout -k 60 "$limit" python3 -m cuda_agent train all --config $W/all.yaml --quiet 2>&1 | tail -25 ;;
    stability)
      timeout -k 20 "$limit" python3 benchmarks/service_bench.py --device cuda --stability-only \
        --json $W/stability.json 2>&1 | grep -v "logging.cc\|^    @\|^PC:\|authentication_token" | tail -8 ;;
    *) echo "unknown step $step (sanity all stability)"; exit 2 ;;
  esac
  echo "== $step: exit ${PIPESTATUS[0]} after $((SECONDS - t0))s"
  tar czf "$OUT/rl_$step.tgz" --exclude='*.safetensors' --exclude='*.pt' --exclude='*.bin' \
    --exclude='checkpoints' --exclude='global_step_*' -C $W . 2>/dev/null
done
ls -la "$OUT"
