#!/usr/bin/env bash
# Does RL make SmolLM2-135M-Instruct better at writing kernel code? The fill-the-kernel family
# (cuda_agent/rl/data/fill.py) on the lent GPU, one step per argument, each resumable (a warm machine keeps
# /tmp/rl between calls; the GGUF travels in parts made by scripts/carry_smollm2.sh, .cm1/part1 .. .cm3/part3, one
# carry each, copied to /tmp/parts); results into $OUT/learning.tgz, brought into benchmarks/rl/learning/ by hand.
#   prep          install the carried wheels (.whl), join the GGUF parts (.cm1/ .cm2/ ...), convert it, with cuda-agent's
#                 chat template for tool calls (SmolLM2's own shows no tools; plain conversations read the same)
#   eval:NAME     the held-out prompts, greedy + SAMPLED (2) sampled, judged by the harness (NAME: pretrained,
#                 rft, ppo, control, ablation; the model is that stage's actor, or the last checkpoint of a
#                 run cut short). About 150 s for an RFT'd model with SAMPLED=0 (the 2026-11-26 x2 H200).
#   rft           cuda-agent train fill_rft: SFT on correct examples of the training operators
#   ppo           cuda-agent train fill from the RFT actor (critic warm-up 1 step, then PPO); it judges the
#                 held-out prompts itself before its first step and every 2 steps (validation/N.jsonl)
#   table         those in-run held-out figures of every PPO run here, by operator (benchmarks/rl/ops_by_step.py)
#   control       the same from the RFT actor, rewards shuffled across replies
#   ablation      PPO from the pretrained model: no RFT, no critic warm-up
#   arft          cuda-agent train fill_agentic_rft: scripted demonstrations of the multi-turn form (edit the ??? line,
#                 verify; a share wrong first, fixed after the verdict: rl/driver/fill_demos.py) judged by the harness, then
#                 SFT on those that passed, from the pretrained model (ARFT_FROM=rft: from RFT's actor, in arft_rft/ and
#                 measured by turns:arft into turns_arft_rft.json; DEMOS=N demonstrations, default 128)
#   agentic       cuda-agent train fill_agentic: multi-turn PPO from arft's actor on the training tasks, in arft's run
#                 folder (AGENTIC="fill_agentic:trainer.total_training_steps=8 ..." overrides); validation/ as ppo's
#   turns:NAME    the multi-turn form (rl/data/fill_agent.py): NAME's actor (rft, ppo, arft) runs the agent loop on the held-out
#                 tasks (cuda-agent train fill_collect; TURNS="fill_collect:..." overrides, e.g. val_kwargs.n=1), then
#                 pass after turn k vs turn 1 from its runs (fill_eval --runs) into learning/turns_NAME.json
#   speed         no model: what each tier-2 choice (EPT) earns on this GPU, the correct expression of a few operators
#                 judged by the reward route (benchmarks/fill_tier2_speed.py) into learning/tier2_speed.json
# Steps take an optional :SECONDS limit (default 540). JUDGE=cpu|cuda: where the harness judges the
# held-out replies (training judges on the CPU backend of the same machine: 16 cores, fast builds).
# EXTRA="fill:trainer.total_training_steps=10 ...": overrides added to ppo, control and ablation alike.
# Two runs at once on a machine of two GPUs: give each its GPU, its Ray and its OUT, e.g.
#   CUDA_VISIBLE_DEVICES=1 RAY_TMPDIR=/tmp/rb OUT=$OUT/b bash benchmarks/rl_learning.sh ablation &
# (RAY_TMPDIR apart, each run starts its own Ray instead of joining the other's).
# TAG=n8: ppo, control and ablation write to their own folders (fill_n8, fill_control_n8, fill_ablation_n8), ppo and
# control start from the RFT actor of $W/fill, and eval:ppo / eval:control / eval:ablation read them (results
# ppo_n8.cpu.json ...): variants and repeats side by side. RL's step time on 1 and 2 GPUs (issue 27), no RFT needed:
#   GPUS=1 TAG=g1 EXTRA="fill:trainer.total_training_steps=3" bash benchmarks/rl_learning.sh prep ablation:300
#   GPUS=2 TAG=g2 EXTRA="fill:trainer.total_training_steps=3" bash benchmarks/rl_learning.sh ablation:300
#   python3 benchmarks/rl_step_time.py 1=/tmp/rl/fill_ablation_g1/fill 2=/tmp/rl/fill_ablation_g2/fill \
#     --summary benchmarks/scale/summary.json
# await:rft[:SECS] waits until RFT's actor exists (a run launched beside the one that trains it).
# TIER=2: the family's tier 2 (the expression and EPT, every correct reply timed: rewards 2 and 3), its runs
# under $W/tier2 and its results named *.tier2.*; training and evaluation judge on the GPU (DEVICE, JUDGE: cuda).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-device_out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CUDA_AGENT_HOME=${CUDA_AGENT_HOME:-/tmp/cuda_agent_home} \
  RAY_USAGE_STATS_ENABLED=0 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_MODE=disabled
W=/tmp/rl; mkdir -p $W/learning
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1 && [ ! -f /tmp/site/.installed ]; then  # once per machine: parallel runs share it
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && touch /tmp/site/.installed
fi
export PYTHONPATH=/tmp/site:$PWD/src
bash scripts/sandbox_access.sh python3 >/dev/null
TIER=${TIER:-1}
R=$W; T=""; [ "$TIER" = 2 ] && { R=$W/tier2; T=.tier2; }   # tier 2's runs and results apart from tier 1's
JUDGE=${JUDGE:-$([ "$TIER" = 2 ] && echo cuda || echo cpu)}
DEVICE=${DEVICE:-$([ "$TIER" = 2 ] && echo cuda || echo cpu)}   # where training's reward judges
# RFT_OPS="affine clamp tanh": RFT shows only these training operators; PPO must learn the others
OPS_YAML=""; [ -n "${RFT_OPS:-}" ] && OPS_YAML="rft_ops: [$(echo $RFT_OPS | sed 's/ /, /g')], "
DEMOS_YAML=""; [ -n "${DEMOS:-}" ] && DEMOS_YAML="demos: $DEMOS, "   # fill_agentic_rft's demonstrations
FILL="fill: {${OPS_YAML}${DEMOS_YAML}tier: $TIER}"
run_file() {  # out-folder, extra yaml lines
  mkdir -p "$(dirname "$1")"
  printf 'out: %s\nmodel: %s\nplatform: gpu\ndevice: %s\ngpus: %s\n%s\n' "$1" "$W/smollm2" "$DEVICE" "${GPUS:-1}" "${2:-}" > "$1.yaml"
  echo "$1.yaml"
}
KW=reward.custom_reward_function.reward_kwargs
REWARD="fill:$KW.evaluators=${EVALUATORS:-6} fill:$KW.build_workers=${BUILDERS:-3}"  # the reward route per run
actor_of() {  # stage folder -> its actor (the run's journal, rl/driver/launch.StageJournal)
  python3 -c 'import sys; from pathlib import Path; from cuda_agent.rl.driver.launch import StageJournal
p = Path(sys.argv[1]); done = StageJournal(p.parent).finished(p.name)
print((done or {}).get("outputs", {}).get("actor", ""))' "$1"
}
latest() {  # a PPO stage folder -> its actor; a run cut before its end: its last checkpoint, merged
  local stage=$1 done c step
  done=$(actor_of "$stage")
  if [ -n "$done" ]; then echo "$done"; return; fi
  c=$stage/checkpoints; step=$(cat "$c/latest_checkpointed_iteration.txt" 2>/dev/null)
  [ -n "$step" ] || { echo "$stage has no checkpoint yet" >&2; return; }
  if [ ! -f "$stage/actor_step$step/config.json" ]; then
    python3 -m verl.model_merger merge --backend fsdp --local_dir "$c/global_step_$step/actor" \
      --target_dir "$stage/actor_step$step" >/dev/null 2>&1 || { echo "merging $c/global_step_$step failed" >&2; return; }
  fi
  echo "$stage did not finish: its step-$step checkpoint is evaluated" >&2
  echo "$stage/actor_step$step"
}
for arg in "$@"; do
  step=${arg%%:*}; limit=${arg#*:}; [ "$limit" = "$arg" ] && limit=540
  t0=$SECONDS
  case $step in
    prep)
      if [ ! -f $W/smollm2/config.json ]; then
        # the parts, copied out of the tree as they came (a later call's copy of the tree drops them)
        mkdir -p /tmp/parts && cp .cm*/* /tmp/parts/ 2>/dev/null
        cat /tmp/parts/part* > $W/smollm2.gguf && ls -la $W/smollm2.gguf && sha256sum $W/smollm2.gguf
        python3 -m pip install -q --no-index --no-deps --target /tmp/site /tmp/parts/gguf-*.whl
        timeout "$limit" python3 -m cuda_agent.rl.tools.pretrained $W/smollm2 --gguf $W/smollm2.gguf --tool-template
      fi
      nvidia-smi --query-gpu=name,driver_version --format=csv,noheader ;;
    eval)
      name=${limit%%:*}; [ "$name" = "$limit" ] && limit=540 || limit=${limit#*:}
      case $name in
        pretrained) model=$W/smollm2 ;;
        rft) model=$(actor_of $R/fill/fill_rft) ;;
        ppo) model=$(latest $R/fill${TAG:+_$TAG}/fill) ;;
        control) model=$(latest $R/fill_control${TAG:+_$TAG}/fill) ;;
        ablation) model=$(latest $R/fill_ablation${TAG:+_$TAG}/fill) ;;
      esac
      timeout -k 30 "$limit" python3 -m cuda_agent.rl.tools.fill_eval --model "$model" --device "$JUDGE" --sampled ${SAMPLED:-2} \
        --tier "$TIER" --build-workers 8 --out $W/learning/$name${TAG:+_$TAG}$T.$JUDGE.json 2>&1 \
        | grep -v "Warning\|WARN\|Loading weights" | tail -3 ;;
    rft)
      timeout -k 60 "$limit" python3 -m cuda_agent train fill_rft --config "$(run_file $R/fill "$FILL")" --quiet 2>&1 | tail -15 ;;
    await)
      l=${limit#*:}; [ "$l" = "$limit" ] && limit=540 || limit=$l
      until [ -n "$(actor_of $R/fill/fill_rft)" ]; do
        [ $((SECONDS - t0)) -ge "$limit" ] && { echo "no RFT actor after ${limit}s"; exit 1; }; sleep 5
      done ;;
    ppo)
      if [ -n "${TAG:-}" ]; then
        timeout -k 60 "$limit" python3 -m cuda_agent train fill --config "$(run_file $R/fill_$TAG "$FILL")" --quiet $REWARD ${EXTRA:-} \
          fill:actor_rollout_ref.model.path=$(actor_of $R/fill/fill_rft) 2>&1 | tail -15
      else
        timeout -k 60 "$limit" python3 -m cuda_agent train fill --config "$(run_file $R/fill "$FILL")" --quiet $REWARD ${EXTRA:-} 2>&1 | tail -15
      fi ;;
    control)
      rft=$(actor_of $R/fill/fill_rft)
      timeout -k 60 "$limit" python3 -m cuda_agent train fill --config "$(run_file $R/fill_control${TAG:+_$TAG} "$FILL")" --quiet $REWARD ${EXTRA:-} \
        fill:actor_rollout_ref.model.path=$rft "fill:+$KW.shuffle=true" 2>&1 | tail -15 ;;
    ablation)
      timeout -k 60 "$limit" python3 -m cuda_agent train fill --config "$(run_file $R/fill_ablation${TAG:+_$TAG} "$FILL")" --quiet $REWARD ${EXTRA:-} \
        fill:actor_rollout_ref.model.path=$W/smollm2 fill:trainer.critic_warmup=0 2>&1 | tail -15 ;;
    arft)
      from=""; [ "${ARFT_FROM:-}" = rft ] && from="fill_agentic_rft:model.path=$(actor_of $R/fill/fill_rft)"
      harness="harness: {cpu_evaluators: ${EVALUATORS:-6}, build_workers: ${BUILDERS:-3}}"  # the demonstrations' service
      timeout -k 60 "$limit" python3 -m cuda_agent train fill_agentic_rft --config "$(run_file $R/arft${ARFT_FROM:+_$ARFT_FROM} "$FILL
$harness")" --quiet $from 2>&1 | tail -15 ;;
    agentic)  # multi-turn PPO (fill_agentic) from arft's actor, in arft's run folder (its journal names the actor)
      harness="harness: {cpu_evaluators: ${EVALUATORS:-6}, build_workers: ${BUILDERS:-3}}"
      timeout -k 60 "$limit" python3 -m cuda_agent train fill_agentic --config "$(run_file $R/arft${ARFT_FROM:+_$ARFT_FROM} "$FILL
$harness")" --quiet ${AGENTIC:-} 2>&1 | tail -15 ;;
    table)
      for v in $R/fill*/fill/validation; do
        [ -d "$v" ] || continue
        echo "== $v"; python3 benchmarks/rl/ops_by_step.py "$v" ${RFT_OPS:+--rft-ops $RFT_OPS}
      done ;;
    turns)
      name=${limit%%:*}; [ "$name" = "$limit" ] && limit=540 || limit=${limit#*:}
      case $name in rft) model=$(actor_of $R/fill/fill_rft) ;; ppo) model=$(latest $R/fill${TAG:+_$TAG}/fill) ;;
        arft) model=$(actor_of $R/arft${ARFT_FROM:+_$ARFT_FROM}/fill_agentic_rft); name=arft${ARFT_FROM:+_$ARFT_FROM} ;; esac
      harness="harness: {cpu_evaluators: ${EVALUATORS:-6}, build_workers: ${BUILDERS:-3}}"  # the agent loop's service
      timeout -k 60 "$limit" python3 -m cuda_agent train fill_collect --config "$(run_file $R/turns_$name "$FILL
$harness")" --quiet ${TURNS:-} fill_collect:actor_rollout_ref.model.path=$model 2>&1 | tail -15
      python3 -m cuda_agent.rl.tools.fill_eval --runs $R/turns_$name/fill_collect/runs \
        --out $W/learning/turns_$name${TAG:+_$TAG}$T.json | tail -1 ;;
    speed)
      timeout -k 30 "$limit" python3 benchmarks/fill_tier2_speed.py --build-workers 8 ${SPEED:-} \
        --json $W/learning/tier2_speed.json 2>&1 | grep -v "Warning\|WARN" ;;
    *) echo "unknown step $step (prep eval:NAME rft await:rft ppo control ablation arft agentic turns:NAME speed table)"; exit 2 ;;
  esac
  echo "== $arg: exit ${PIPESTATUS[0]} after $((SECONDS - t0))s"
done
tar czf "$OUT/learning.tgz" --exclude='*.safetensors' --exclude='*.pt' --exclude='*.bin' --exclude='*.gguf' \
  --exclude='checkpoints' --exclude='global_step_*' --exclude='smollm2' --exclude='actor' --exclude='actor_step*' --exclude='critic' \
  -C $W . 2>/dev/null
ls -la "$OUT"
