#!/usr/bin/env bash
# Run 3 of the fill family's learning run (benchmarks/rl/learning/run3_*): four runs side by side on a
# machine of four GPUs, each its own GPU, Ray and log, started detached so that they outlive one call:
#   start        copy the tree to /tmp/fleet/tree (a later call's copy of the repo would change the
#                scripts under the running shells) and launch the four chains below
#   watch SECS   wait up to SECS for them, printing progress each minute, then a table
#   collect      everything small into $OUT (fleet.tgz: logs, metrics, rollouts, verdicts)
# GPU 0: prep, RFT on 6 operators, PPO (n=4)     GPU 1: eval of RFT, the shuffled-reward control
# GPU 2: PPO with 8 replies a prompt (TAG=n8)    GPU 3: PPO again, another data order (TAG=s7)
# Each PPO: 10 steps, lr 1e-5, checkpoint every 2; evaluation greedy on the 73 held-out prompts.
set -uo pipefail
cd "$(dirname "$0")/.."
F=/tmp/fleet
OUT=${OUT:-device_out}
STEPS=${STEPS:-10}
case ${1:-} in
  start)
    mkdir -p $F && rm -rf $F/tree && mkdir -p $F/tree
    tar cf - --exclude=.git --exclude=.whl --exclude=.devold . | tar xf - -C $F/tree
    export JUDGE=cpu SAMPLED=0 RFT_OPS="affine clamp leaky_relu abs sigmoid silu" EVALUATORS=10 BUILDERS=4
    base="fill:trainer.total_training_steps=$STEPS fill:trainer.save_freq=2 fill:actor_rollout_ref.actor.optim.lr=1e-5"
    S=$F/tree/benchmarks/rl_learning.sh
    launch() {  # gpu, tag ("" for none), overrides added to the base, steps...
      local gpu=$1 tag=$2 more=$3; shift 3
      setsid nohup env CUDA_VISIBLE_DEVICES=$gpu RAY_TMPDIR=/tmp/ray$gpu OUT=$F/o$gpu TAG="$tag" EXTRA="$base $more" \
        bash $S "$@" > $F/$gpu.log 2>&1 < /dev/null &
      echo "GPU $gpu: TAG=$tag $more: $*"
    }
    launch 0 "" "" prep rft ppo:1100 eval:ppo:300
    launch 1 "" "" await:rft:400 eval:rft:300 control:1100 eval:control:300
    launch 2 n8 "fill:actor_rollout_ref.rollout.n=8" await:rft:400 ppo:1200 eval:ppo:300
    launch 3 s7 "fill:data.seed=7" await:rft:400 ppo:1100 eval:ppo:300
    ;;
  watch)
    t0=$SECONDS; limit=${2:-540}
    while [ $((SECONDS - t0)) -lt "$limit" ]; do
      running=$(pgrep -f "$F/tree/benchmarks/rl_learning.sh" | wc -l)
      echo "-- $((SECONDS - t0))s: $running shells running; $(grep -h '^== ' $F/?.log 2>/dev/null | tr '\n' ' ')"
      [ "$running" -eq 0 ] && break
      sleep 60
    done
    for g in 0 1 2 3; do echo "== GPU $g"; grep -a "^== \|pass\|step:" $F/$g.log 2>/dev/null | tail -6; done
    ls /tmp/rl/learning/ 2>/dev/null ;;
  collect)
    mkdir -p "$OUT"
    tar czf "$OUT/fleet.tgz" --exclude='*.safetensors' --exclude='*.pt' --exclude='*.bin' --exclude='*.gguf' \
      --exclude='checkpoints' --exclude='global_step_*' --exclude='smollm2' --exclude='actor' --exclude='actor_step*' \
      --exclude='critic' -C / tmp/rl tmp/fleet/0.log tmp/fleet/1.log tmp/fleet/2.log tmp/fleet/3.log 2>/dev/null
    ls -la "$OUT" ;;
  *) echo "usage: $0 start | watch SECS | collect"; exit 2 ;;
esac
