#!/usr/bin/env bash
# One device call: any of the CUDA tests, the build benchmark, the harness benchmark, the demo,
# the KernelBench bench, the agreement with KernelBench's own harness and the synth benchmark, each
# under its own time limit. Logs and results go to $OUT/results.tgz (the device tool's output folder,
# which takes few files; ./device_out here), with runs/ (resumable results) inside it.
#   bash benchmarks/device_check.sh stop                  (a detached run: its loop, then the running step's processes)
#   bash benchmarks/device_check.sh collect[:SECONDS]     (a detached run's logs into this call's $OUT once it ends, or
#                                                          after SECONDS: a run longer than one call, e.g. the soak,
#                                                          started by `setsid nohup bash benchmarks/device_check.sh
#                                                          scale:900 >/tmp/dc.log 2>&1 &` in the call before)
#   bash benchmarks/device_check.sh STEP[:SECONDS]...     STEP: tests build harness demo timing kb kbagree cudal1 synth service repeat scale paired probe offstream cluster twoproc overhead seeds placement benchscale freeze owner
# e.g. `TEST_ARGS="-n 6 -v --timeout 180 tests" bash benchmarks/device_check.sh tests:270 demo:60 build:150`
# (TEST_ARGS: pytest's flags and paths, default `tests`; HARNESS_ARGS, KB_ARGS, SYNTH_ARGS: more flags
# for those steps, the last of a repeated flag wins; PAIRED_ARGS: more flags for paired_bench, e.g. "--config
# sanity_speedup=0" (each evaluation timed twice in one solution process); repeat: REPEAT_TAG names its JSON, REPEAT_COMPARE
# an earlier run's JSON to compare with, SCALE_ARGS: more flags for scale_bench, SCALE_GPUS its --gpus (default 1 and
# every GPU), SCALE_TAG a name for a second run's files, SCALE_COUNT_SECONDS each count's wait before it is cut (its figure kept; the limit covers every count's start too), PROBE_PROCS/PROBE_ROUNDS: clock_probe --harness's, REPEAT_ARGS replaces `--level 3 --tasks 10 --workers 6`;
# SNAPSHOT_AT="60 120": at those seconds into each step, its processes, the device locks and every Python process's
# stacks (faulthandler on SIGUSR2, registered by a .pth file and module written into the interpreter's site-packages
# for the call, not where they exist; a device machine only; figures of such a run are disturbed at those
# instants, not for the records) go to $LOGS/STEP.snap and $LOGS/STEP.stacks_SECONDS/). runs/ (resumable results) stays on a warm
# machine and comes back in results.tgz; the kb step starts from $KB_FROM (default
# benchmarks/kernelbench_h100/: its bench/ and baselines_level*.jsonl; `none`: afresh) when there is
# no runs/kb, so commit what comes back there to go on later. kbagree (benchmarks/kb_agreement.py) needs
# .kb/ carried (scripts/carry_kernelbench.sh) and resumes from runs/kb_agree, on a fresh machine from the
# rows committed in benchmarks/kb_agreement_h100/results.jsonl (KBAGREE_LIMIT: CUDA-L1 rows per level,
# default 4; KBAGREE_ARGS: more flags). cudal1 (benchmarks/cuda_l1_verdicts.py: CUDA-L1's 210 H100 kernels through
# `cuda-agent bench --policy relaxed --per-gpu ${CUDAL1_PER_GPU:-3}`) needs .kb/ and .whl/ carried and resumes from
# runs/cuda_l1, on a fresh machine from benchmarks/cuda_l1_h100/results.jsonl (commit runs/cuda_l1/bench/results.jsonl
# there after each call).
# The synth step writes its dataset to $SYNTH_OUT (default runs/synth/ops.parquet; set it, not --out
# in SYNTH_ARGS), stops starting candidates 90 s before its limit (--max-seconds; half of a limit
# under 3 minutes), which leaves the 30 s of --grace-seconds and the report inside it, and brings back
# $OUT/synth.tgz: the dataset, bench.json, summary.md, seeds.json (the catalog), config.json and
# candidates.jsonl.gz (the journal), not the workspaces, at their paths in the checkout. Unpacked there
# (`tar xzf synth.tgz -C .`) and committed, they make the next call resume the run, with its catalog, on a
# fresh machine.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-device_out}
LOGS=${LOGS:-/tmp/device_logs}
mkdir -p "$OUT" "$LOGS"
if [ "${1%%:*}" = collect ]; then  # a detached run's results into this call's $OUT, once it ends (or SECONDS pass)
  wait_s=${1#collect}; wait_s=${wait_s#:}; wait_s=${wait_s:-0}; t0=$SECONDS
  while kill -0 "$(cat "$LOGS/loop.pid" 2>/dev/null)" 2>/dev/null && [ $((SECONDS - t0)) -lt "$wait_s" ]; do sleep 5; done
  kill -0 "$(cat "$LOGS/loop.pid" 2>/dev/null)" 2>/dev/null && echo "collect: still running after ${wait_s}s" \
    || echo "collect: the run has ended"
  cat "$LOGS/steps.txt" 2>/dev/null
  tar czf "$OUT/results.tgz" --exclude="*.synth" --exclude="kb_agree*/kb/*/build" --exclude="kb_agree*/kb_site" \
    -C "$LOGS" . $( [ -d runs ] && echo "-C $PWD runs" ) 2>/dev/null
  exit 0
fi
if [ "${1:-}" = stop ]; then  # a detached run (setsid nohup ... &) ended early: the loop, then its running step
  kill "$(cat "$LOGS/loop.pid" 2>/dev/null)" "$(cat "$LOGS/snap.pid" 2>/dev/null)" 2>/dev/null
  kill -- -"$(cat "$LOGS/step.pid" 2>/dev/null)" 2>/dev/null
  sleep 3; echo "stopped (step group $(cat "$LOGS/step.pid" 2>/dev/null))"; exit 0
fi
echo $$ >"$LOGS/loop.pid"
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CUDA_AGENT_HOME=${CUDA_AGENT_HOME:-/tmp/cuda_agent_home}
export RAY_USAGE_STATS_ENABLED=0
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then  # Ray (and verl) carried as wheels: scripts/carry_wheels.sh
  rm -f /tmp/site/.installed   # set again only once this install has ended well
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && touch /tmp/site/.installed && export PYTHONPATH=/tmp/site:$PWD/src
elif [ -f /tmp/site/.installed ]; then  # installed by an earlier call to this warm machine: the carry (64 MiB) is free
  export PYTHONPATH=/tmp/site:$PWD/src   # for what cannot travel beside the wheels (.kb for benchscale, the model's parts)
fi
KB=${KB:-.devdata}
py=python3
bash scripts/sandbox_access.sh "$py"
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv,noheader
  $py -c "import torch; print('torch', torch.__version__, torch.version.cuda)"; nvcc --version | tail -1
  nproc; free -g | head -2; pwd; id
  # which cores and NUMA node sit beside each GPU (issue 27: do an evaluator's timing cores?)
  nvidia-smi topo -m 2>/dev/null | head -12; lscpu 2>/dev/null | grep -E '^NUMA|^Socket'; } 2>&1 | tee -a "$LOGS/env.txt"

if [ -n "${SNAPSHOT_AT:-}" ]; then  # every Python process of the harness's user started from now dumps its stacks on SIGUSR2
  # A .pth file's import line, not a sitecustomize.py: Debian's Python has its own sitecustomize in the standard
  # library's folder, earlier on sys.path, and a venv made from it finds that one first (no stacks came back, 2026-11-28).
  site_dir="$($py -c 'import site; print(site.getsitepackages()[0])')"
  pth_file="$site_dir/zz_cuda_agent_stacks.pth"; hook_file="$site_dir/_cuda_agent_stacks.py"
  if [ -e "$pth_file" ] || [ -e "$hook_file" ]; then echo "SNAPSHOT_AT: $hook_file exists; not replaced, no stacks"; SNAPSHOT_AT=""; fi
fi
if [ -n "${SNAPSHOT_AT:-}" ]; then
  rm -rf /tmp/stacks; mkdir -m 0755 /tmp/stacks  # the harness's user's alone: no other user chooses what is signalled
  cat >"$hook_file" <<'EOF_SITE'
import faulthandler, os, signal  # written by benchmarks/device_check.sh (SNAPSHOT_AT), removed when it ends
try:
    faulthandler.register(signal.SIGUSR2, file=open(f"/tmp/stacks/{os.getpid()}.txt", "w"), all_threads=True)
except Exception:
    pass
EOF_SITE
  echo "import _cuda_agent_stacks" >"$pth_file"
  trap 'rm -f "$pth_file" "$hook_file"' EXIT
fi

snapshots() {  # snapshots NAME T0: at each of SNAPSHOT_AT's seconds into the step, its processes, locks and stacks
  local at p f
  for at in $SNAPSHOT_AT; do
    while [ $((SECONDS - $2)) -lt "$at" ]; do sleep 1; done
    { echo "=== ${at}s into $1"; ps -eo pid,ppid,user,etimes,pcpu,rss,stat,wchan:22,args --sort=pid \
        | grep -E "python|ray::|raylet|gcs_server" | grep -v " grep " | cut -c1-250
      echo "--- flocks (pid inode)"; awk '$2 == "FLOCK" {print $5, $6}' /proc/locks
      echo "--- lock files (inode name)"; ls -i "${CUDA_AGENT_LOCKS:-/run/cuda-agent-locks-$(id -u)}" 2>/dev/null | head -40
      nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader; } >>"$LOGS/$1.snap" 2>&1
    touch /tmp/stacks/.mark
    for f in /tmp/stacks/*.txt; do  # only a live process that holds its file open and catches SIGUSR2
      p=$(basename "$f" .txt)
      if [ -d "/proc/$p" ] && [ "$(readlink "/proc/$p/fd/"* 2>/dev/null | grep -cx "$f")" -gt 0 ] \
         && (( 0x$(awk '/^SigCgt/ {print $2}' "/proc/$p/status" 2>/dev/null || echo 0) & 0x800 )); then
        kill -USR2 "$p" 2>/dev/null
      elif [ ! -d "/proc/$p" ]; then rm -f "$f"; fi
    done
    sleep 2; mkdir -p "$LOGS/$1.stacks_$at"; find /tmp/stacks -name "*.txt" -newer /tmp/stacks/.mark \
      -exec cp {} "$LOGS/$1.stacks_$at/" \;
  done
}

pack_synth() {  # pack_synth OUT STATE: the dataset and its state, at their paths in the checkout, in $OUT/synth.tgz
  # (one file: the device tool brings back only a few; `tar xzf synth.tgz -C CHECKOUT` puts them where a resume reads)
  local pack=$LOGS/synth_pack f
  rm -rf "$pack"; mkdir -p "$pack/$2"
  for f in bench.json summary.md seeds.json config.json; do cp "$2/$f" "$pack/$2/" 2>/dev/null; done
  cp "$1" "$pack/$1" 2>/dev/null
  [ -f "$2/candidates.jsonl" ] && gzip -c "$2/candidates.jsonl" >"$pack/$2/candidates.jsonl.gz"
  tar czf "$OUT/synth.tgz" -C "$pack" . && rm -rf "$pack"
}

step() {  # step NAME SECONDS COMMAND...: run with a limit, log to $OUT/NAME.log, print its tail
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS snap=""
  echo "== $name (limit ${limit}s)"
  timeout -k 10 "$limit" "$@" >"$LOGS/$name.log" 2>&1 &
  local pid=$!
  echo $pid >"$LOGS/step.pid"  # timeout leads a process group of its own: what `stop` kills
  if [ -n "${SNAPSHOT_AT:-}" ]; then snapshots "$name" "$t0" & snap=$!; echo $snap >"$LOGS/snap.pid"; fi
  wait $pid
  local rc=$?
  [ -n "$snap" ] && kill "$snap" 2>/dev/null
  tail -${TAIL:-25} "$LOGS/$name.log"
  echo "== $name: exit $rc after $((SECONDS - t0))s" | tee -a "$LOGS/steps.txt"
}

for arg in "$@"; do
  name=${arg%%:*}; limit=${arg#*:}; [ "$limit" = "$arg" ] && limit=300
  case $name in
    tests) step tests "$limit" $py -m pytest -v -m cuda -rfEsx -p no:cacheprovider --durations=15 ${TEST_ARGS:-tests} ;;
    build) step build "$limit" $py benchmarks/build_bench.py --device cuda --json "$LOGS/build_bench.json" ;;
    harness) step harness "$limit" $py benchmarks/harness_bench.py --device cuda --evals 5 --fidelity ${FIDELITY:-20} \
               --kernelbench "$KB/kernelbench.jsonl" --published "$KB/h100_modal_eager.json" --json "$LOGS/harness_bench.json" ${HARNESS_ARGS:-} ;;
    demo) step demo "$limit" $py -m cuda_agent demo ;;
    scale) tag=scale${SCALE_TAG:+_$SCALE_TAG}  # SCALE_TAG names a second run's files (an A/B in one call)
           step "$tag" "$limit" $py benchmarks/scale_bench.py --device cuda --gpus ${SCALE_GPUS:-1 $(nvidia-smi -L | wc -l)} \
             --soak ${SCALE_SOAK:-1000} --summary "$LOGS/${tag}_summary.json" --json "$LOGS/$tag.json" \
             ${SCALE_COUNT_SECONDS:+--count-seconds $SCALE_COUNT_SECONDS} ${SCALE_ARGS:-} ;;  # issue 27
    probe) step probe "$limit" $py benchmarks/clock_probe.py --harness --procs ${PROBE_PROCS:-8} --rounds ${PROBE_ROUNDS:-15} \
             --json "$LOGS/clock_harness.json" ;;  # issue 24: the per-process modes with the harness's own timing code?
    cluster) step cluster "$limit" $py benchmarks/cluster_bench.py --device cuda --evals ${CLUSTER_EVALS:-16} \
               --json "$LOGS/cluster.json" ;;  # issue 27 item 5: two Ray nodes, the second lost half-way
    offstream) step offstream "$limit" $py benchmarks/offstream_probe.py --json "$LOGS/offstream.json" ;;  # issue 24: honest calls charged?
    twoproc) step twoproc "$limit" $py benchmarks/two_process_probe.py --evals ${TWOPROC_EVALS:-8} ${TWOPROC_ARGS:---stop} \
               --json "$LOGS/twoproc.json" ;;  # issue 24: the modes with two processes alternating, as the harness's?
    placement) step placement "$limit" bash -c "for i in \$(seq ${PLACEMENT_PROCS:-3}); do $py benchmarks/placement_probe.py \
                 --pairs ${PLACEMENT_PAIRS:-16} --kernels ${PLACEMENT_KERNELS:-sbr,eager,compile} --seed \$i \
                 ${PLACEMENT_ARGS:-} --json $LOGS/placement_\$i.json || exit 1; done" ;;  # issue 24 (PLACEMENT_ARGS=--distinct: the harness's regime)
    overhead) step overhead "$limit" $py benchmarks/call_overhead_probe.py --calls 60 ;;  # issue 27: a timed request's parts
    owner) step owner "$limit" $py benchmarks/gpu_owner_probe.py --json "$LOGS/gpu_owner.json" ;;  # the freezer's F2: GPU work past a stop or exit
    freeze) step freeze "$limit" $py benchmarks/freeze_cost.py --blocks 200 \
              --json "$LOGS/freeze_cost.json" ;;  # issue 27: the stop around each round's baselines, GPU time held alone
    benchscale) step benchscale "$limit" $py benchmarks/bench_scale.py --cuda-l1 .kb/cuda_l1/h100.json \
                  --per-level ${BENCHSCALE_PER_LEVEL:-6} --gpus 1 $(nvidia-smi -L | wc -l) --out runs/bench_scale \
                  --summary "$LOGS/bench_scale_summary.json" ;;  # issue 27 item 3 (carry .kb: scripts/carry_kernelbench.sh)
    seeds) step seeds "$limit" $py benchmarks/seed_probe.py --seeds ${SEED_PROBE_SEEDS:-12} ${SEED_PROBE_ARGS:-} \
             --json "$LOGS/seeds.json" ;;  # issue 24: do the per-evaluation modes follow the evaluation's seeds?
    paired) step "paired_busy${PAIRED_BUSY:-0}" "$limit" $py benchmarks/paired_bench.py --device cuda --evals ${PAIRED_EVALS:-5} \
              --busy ${PAIRED_BUSY:-0} --json "$LOGS/paired_busy${PAIRED_BUSY:-0}.json" ${PAIRED_ARGS:-} ;;  # issue 24: do paired speed-ups repeat?
    service) step service "$limit" $py benchmarks/service_bench.py --device cuda --direct ${DIRECT:-8} --evals ${SERVICE_EVALS:-30} \
               --soak ${SOAK:-40} --json "$LOGS/service_bench.json" ${SERVICE_ARGS:-} ;;
    timing) step timing "$limit" $py benchmarks/timing_bench.py --device cuda --json "$LOGS/timing_bench.json" ${TIMING_ARGS:-} ;;
    kb) from=${KB_FROM:-benchmarks/kernelbench_h100}  # KB_FROM=none starts afresh
        [ -d runs/kb ] || { mkdir -p runs/kb; [ "$from" = none ] || { cp -r "$from/bench" runs/kb/ 2>/dev/null
                            cp "$from"/baselines_level*.jsonl runs/kb/ 2>/dev/null; }; }  # go on from the last run
        step kb "$limit" $py benchmarks/bench_kernelbench.py --out runs/kb --kernelbench "$KB/kernelbench.jsonl" \
          --published "$KB/h100_modal_eager.json" --max-seconds $((limit - 60)) ${KB_ARGS:-} ;;
    kbagree) [ -d runs/kb_agree ] || { mkdir -p runs/kb_agree  # go on from the rows committed last time
               cp benchmarks/kb_agreement_h100/results.jsonl runs/kb_agree/ 2>/dev/null; }
             kbargs="--kernelbench .kb/KernelBench --wheels .kb/wheels --tasks .kb/kernelbench.jsonl --kb-adversarial \
               --hand-written --cuda-l1 .kb/cuda_l1/h100.json --limit ${KBAGREE_LIMIT:-4} ${KBAGREE_ARGS:-}"
             n=${KBAGREE_SHARDS:-1}
             if [ "$n" -le 1 ]; then
               step kbagree "$limit" $py benchmarks/kb_agreement.py $kbargs --out runs/kb_agree --max-seconds $((limit - 120))
             else  # one run a GPU, each from a copy of the rows so far, then their rows collected and the table written
               for i in $(seq 0 $((n - 1))); do
                 mkdir -p runs/kb_agree_s$i; cp runs/kb_agree/results.jsonl runs/kb_agree_s$i/ 2>/dev/null
                 CUDA_VISIBLE_DEVICES=$i step kbagree_s$i "$limit" $py benchmarks/kb_agreement.py $kbargs \
                   --out runs/kb_agree_s$i --shard $i/$n --max-seconds $((limit - 120)) &
               done
               wait
               step kbagree "$limit" $py benchmarks/kb_agreement.py $kbargs --out runs/kb_agree --report \
                 --collect $(for i in $(seq 0 $((n - 1))); do echo runs/kb_agree_s$i; done)
               rm -rf runs/kb_agree_s*/kb_site
             fi ;;
    cudal1) [ -d runs/cuda_l1/bench ] || { mkdir -p runs/cuda_l1/bench  # go on from the rows committed last time
              cp benchmarks/cuda_l1_h100/results.jsonl runs/cuda_l1/bench/ 2>/dev/null; }
            step cudal1 "$limit" $py benchmarks/cuda_l1_verdicts.py --cuda-l1 .kb/cuda_l1/h100.json --out runs/cuda_l1 \
              --per-gpu ${CUDAL1_PER_GPU:-3} --max-seconds $((limit - 120)) ;;  # issue 24: carry .kb and .whl
    repeat) step "repeat_${REPEAT_TAG:-run}" "$limit" $py benchmarks/repeat_bench.py --kernelbench "$KB/kernelbench.jsonl" \
              --max-seconds $((limit - 120)) --json "$LOGS/repeat_${REPEAT_TAG:-run}.json" \
              ${REPEAT_COMPARE:+--compare "$REPEAT_COMPARE"} ${REPEAT_ARGS:---level 3 --tasks 10 --workers 6} ;;
    synth) out=${SYNTH_OUT:-runs/synth/ops.parquet}; state=${out%.*}.synth
           if [ -f "$state/candidates.jsonl.gz" ] && [ ! -f "$state/candidates.jsonl" ]; then
             gunzip -k "$state/candidates.jsonl.gz"; fi  # a journal brought back and committed: resume it
           step synth "$limit" $py benchmarks/synth_bench.py --count ${SYNTH_COUNT:-300} --out "$out" \
             --kernelbench "$KB/kernelbench.jsonl" --max-seconds $((limit > 180 ? limit - 90 : limit / 2)) ${SYNTH_ARGS:-}
           pack_synth "$out" "$state"; cp "$state/crawl.log" "$LOGS/synth_crawl.log" 2>/dev/null ;;
    *) echo "unknown step $name (tests build harness demo timing kb kbagree synth service repeat scale paired probe offstream cluster twoproc overhead seeds placement benchscale freeze)"; exit 2 ;;
  esac
done
cat "$LOGS/steps.txt"
tar czf "$OUT/results.tgz" --exclude="*.synth" --exclude="kb_agree*/kb/*/build" --exclude="kb_agree*/kb_site" \
  -C "$LOGS" . $( [ -d runs ] && echo "-C $PWD runs" ) 2>/dev/null
ls -la "$OUT"
