#!/usr/bin/env bash
# The fill family's learning run (benchmarks/rl/learning/), runs side by side on a machine of two (or,
# WIDE=1, four) GPUs, each its own GPU, Ray and log, started detached so that they outlive one call:
#   start        copy the tree to /tmp/fleet/tree (a later call's copy of the repo would change the
#                scripts under the running shells) and launch the four chains below
#   watch SECS   wait up to SECS for them, printing progress each minute, then a table
#   collect      everything small into $OUT (fleet.tgz: logs, metrics, rollouts, verdicts)
#   repeat       PPO (8 replies, fill.yaml's default) twice from one RFT actor, its control, arft + multi-turn PPO;
#   turns        the multi-turn plan instead of start (see the case below: PPO, PPO n=8, arft + turns);
#   one          prep, RFT, PPO and the control one after another on one GPU (a machine of one GPU);
#   pair         prep and RFT, then PPO and the control at once, both on GPU 0 (a machine of one GPU);
#   scale        PPO from one RFT actor on 1 GPU and on 2 (issue 27; a machine of 3+ GPUs); `steps` compares them
#                MORE="fill:trainer.test_freq=4 ..." adds overrides to the PPO runs of every plan
#   stop CHAIN   end one chain by its process group (never `ray stop`: it ends every run's Ray on the machine)
# GPU 0: prep, RFT on 6 operators, PPO (n=4)     GPU 1: the shuffled-reward control
# WIDE=1 adds GPU 2: PPO with 8 replies a prompt (TAG=n8); GPU 3: PPO again, another data order (TAG=s7).
# Each PPO: STEPS (10) steps, lr 1e-5, checkpoint every 2, and judges the 73 held-out prompts (greedy)
# itself before its first step and every 2 steps (fill.yaml), so no evaluation step is needed.
# Run 3 (2026-11-26) ran four at once on 64 cores: load 107, steps 2-3x slower; keep 2 unless the
# machine has cores to spare (each chain: verl + EVALUATORS + BUILDERS processes).
set -uo pipefail
cd "$(dirname "$0")/.."
F=/tmp/fleet
OUT=${OUT:-device_out}
STEPS=${STEPS:-10}
fleet_tree() {  # a copy of the tree for the chains (see `start` above) and what every chain shares
  mkdir -p $F && rm -rf $F/tree && mkdir -p $F/tree
  tar cf - --exclude=.git --exclude=.whl --exclude=.devold . | tar xf - -C $F/tree
  export JUDGE=cpu SAMPLED=0 RFT_OPS="affine clamp leaky_relu abs sigmoid silu" EVALUATORS=10 BUILDERS=4
}
go() {  # chain (its GPU's number, then a letter where a GPU runs two: 0, 0b), tag ("" for none), overrides added to
        # $base, steps...: one chain, detached, with its GPU and its own Ray and log
  local id=$1 gpu=${1%%[a-z]*} tag=$2 more=$3; shift 3
  gpu=${gpu//+/,}   # 1+2: GPUs 1 and 2 for one chain (GPUS=2 in its run file)
  setsid nohup env CUDA_VISIBLE_DEVICES=$gpu GPUS=${GPUS:-1} RAY_TMPDIR=/tmp/ray$id OUT=$F/o$id TAG="$tag" EXTRA="$base $more" \
    ARFT_FROM=rft TURNS=fill_collect:actor_rollout_ref.rollout.val_kwargs.n=1 \
    bash $F/tree/benchmarks/rl_learning.sh "$@" > $F/$id.log 2>&1 < /dev/null &
  echo "chain $id (GPU $gpu): TAG=$tag $more: $*"
}
ppo_overrides() {  # every plan's PPO overrides: STEPS steps, a checkpoint every $1 steps, then the rest, then MORE
  local save=$1; shift
  echo "fill:trainer.total_training_steps=$STEPS fill:trainer.save_freq=$save $* ${MORE:-}"
}
base=$(ppo_overrides 2 fill:actor_rollout_ref.actor.optim.lr=1e-5)
case ${1:-} in
  start)
    fleet_tree
    go 0 "" "" prep rft ppo:1500
    go 1 "" "" await:rft:400 control:1500
    if [ -n "${WIDE:-}" ]; then
      go 2 n8 "fill:actor_rollout_ref.rollout.n=8" await:rft:400 ppo:1500
      go 3 s7 "fill:data.seed=7" await:rft:400 ppo:1500
    fi
    ;;
  turns)  # PLAN B (2026-11-27): GPU 0 prep, RFT, PPO; GPU 1 PPO with 8 replies a prompt (TAG=n8);
          # GPU 2 the multi-turn form: demonstrations + SFT from RFT's actor (arft), pass after turn k for that
          # actor (turns:arft; RFT's own read 0/73), then multi-turn PPO from it (agentic). GPU 3 is left to other work.
    fleet_tree
    go 0 "" "" prep rft ppo:1700
    go 1 n8 "fill:actor_rollout_ref.rollout.n=8" await:rft:400 ppo:1700
    go 2 "" "" await:rft:400 arft:800 turns:arft:500 agentic:900   # turns:rft read 0/73 (2026-11-27)
    ;;
  repeat)  # PLAN C (for the session after run 5): does 8 replies a prompt (fill.yaml's default since run 5) repeat?
           # GPU 0 prep, RFT, PPO; GPU 1 the shuffled-reward control at 8 replies; GPU 2 PPO again, another data order (s7);
           # GPU 3 arft from RFT's actor, then multi-turn PPO from it (agentic; run 5 cut it before its first step).
    fleet_tree
    base=$(ppo_overrides 4)   # lr: fill.yaml's 1e-5
    go 0 "" "" prep rft ppo:1700
    go 1 "" "" await:rft:400 control:1700
    go 2 s7 "fill:data.seed=7" await:rft:400 ppo:1700
    go 3 "" "" await:rft:400 arft:800 agentic:1200
    ;;
  one)     # PLAN D (issue 23's H100 proof on a machine of one GPU, counted at part of its held time): prep, RFT, PPO, then
           # the control, one after another on GPU 0 (~22 min with STEPS=16: run 6's PPO steps took 35-104 s beside
           # three other runs, run 5's 23-61 s beside two); then `watch` and `collect` as for the others.
    fleet_tree
    base=$(ppo_overrides 4)
    go 0 "" "" prep rft ppo:1500 control:1500
    ;;
  pair)    # PLAN E (issue 23's H100 proof where one GPU's held time counts in full): prep and RFT, then PPO and the
           # control at once on GPU 0 (chains 0 and 0b; SmolLM2 with HF rollouts takes a few GiB each), each chain's
           # reward with EVALUATORS=6 BUILDERS=3 so that two fit 16 cores; STEPS=12 ends within one 30-minute hold.
    fleet_tree
    export EVALUATORS=6 BUILDERS=3
    base=$(ppo_overrides 4)
    go 0 "" "" prep rft ppo:${LIMIT:-1300}
    go 0b "" "" await:rft:400 control:${LIMIT:-1300}
    ;;
  scale)   # PLAN F (issue 27 item 4: an RL step on 1 GPU against 2): prep and RFT on GPU 0, then the same PPO from RFT's
           # actor on GPU 0 alone (TAG=g1) and on GPUs 1+2 (TAG=g2, the run file's `gpus: 2`: verl's actor, critic and
           # rollout over both); `steps` then prints each chain's seconds a step. Needs 3 GPUs.
    fleet_tree
    base=$(ppo_overrides 100 fill:trainer.test_freq=100 fill:trainer.val_before_train=false)   # step times only
    go 0 "" "" prep rft
    go 0b g1 "" await:rft:400 ppo:${LIMIT:-1300}
    GPUS=2 go 1+2 g2 "" await:rft:400 ppo:${LIMIT:-1300}
    ;;
  steps)   # each chain's PPO seconds a step (verl's timing_s/step), min / median / max, and its step count
    for m in /tmp/rl/fill*/fill/metrics.jsonl; do
      python3 -c 'import json, statistics, sys
s = [r["timing_s/step"] for r in map(json.loads, open(sys.argv[1])) if "timing_s/step" in r]
print(f"{sys.argv[1]}: {len(s)} steps, s/step min {min(s):.1f} median {statistics.median(s):.1f} max {max(s):.1f}" if s
      else f"{sys.argv[1]}: no step yet")' "$m"
    done ;;
  watch)
    t0=$SECONDS; limit=${2:-540}
    while [ $((SECONDS - t0)) -lt "$limit" ]; do
      running=$(pgrep -f "$F/tree/benchmarks/rl_learning.sh" | wc -l)
      echo "-- $((SECONDS - t0))s: $running shells running; $(grep -h '^== ' $F/?.log 2>/dev/null | tr '\n' ' ')"
      [ "$running" -eq 0 ] && break
      sleep 60
    done
    for log in $F/*.log; do [ -f "$log" ] && { echo "== chain $(basename "$log" .log)"; grep -a "^== " "$log" | tail -4; }; done
    RFT_OPS="affine clamp leaky_relu abs sigmoid silu" bash $F/tree/benchmarks/rl_learning.sh table 2>/dev/null | grep -v "^ls\|^total\|^-rw\|^drw" ;;
  stop)
    pid=$(pgrep -f "^bash $F/tree/benchmarks/rl_learning.sh" | while read p; do
      grep -qz "RAY_TMPDIR=/tmp/ray${2:?which chain}$" /proc/$p/environ 2>/dev/null && echo $p; done | head -1)
    [ -n "$pid" ] && kill -- -"$(ps -o pgid= "$pid" | tr -d ' ')" && echo "stopped chain $2"
    pkill -f "[/]tmp/ray$2/" && echo "stopped its Ray (/tmp/ray$2)" ;;  # its Ray's processes name their session folder
  collect)
    mkdir -p "$OUT"
    tar czf "$OUT/fleet.tgz" --exclude='*.safetensors' --exclude='*.pt' --exclude='*.bin' --exclude='*.gguf' \
      --exclude='checkpoints' --exclude='global_step_*' --exclude='smollm2' --exclude='actor' --exclude='actor_step*' \
      --exclude='critic' -C / tmp/rl $(cd / && ls tmp/fleet/*.log) 2>/dev/null
    ls -la "$OUT" ;;
  *) echo "usage: $0 start | turns | repeat | one | pair | scale | steps | watch SECS | stop CHAIN | collect"; exit 2 ;;
esac
