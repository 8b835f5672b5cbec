#!/usr/bin/env bash
# The judge's throughput through the evaluation service, before and after a change, on one machine:
# benchmarks/service_bench.py --burst-only with an older tree's src (OLD, default .devold/src, e.g.
# `mkdir -p .devold && git archive 00eff3c src | tar x -C .devold`) and this tree's, interleaved
# ROUNDS times (default 2: each run takes about 140 s on an H200, so 3 rounds overrun a 600-s call), so the machine's drift lands on both. Ray comes from the carried
# wheels (.whl, scripts/carry_wheels.sh). Logs and JSON under $OUT/compare/; a table last.
#   bash benchmarks/judge_compare.sh [ROUNDS]     env: OLD, EVALS (30), BURST (4), DEVICE (cuda)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-device_out}; D=$OUT/compare; mkdir -p "$D"
OLD=${OLD:-.devold/src}; ROUNDS=${1:-2}
export PYTHONUNBUFFERED=1 RAY_USAGE_STATS_ENABLED=0
SITE=""
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && SITE=/tmp/site:
fi
[ -d "$OLD" ] || { echo "no older tree at $OLD: git archive REV src | tar x -C .devold"; exit 2; }
bash scripts/sandbox_access.sh python3 >/dev/null
for r in $(seq 1 "$ROUNDS"); do
  for code in old new; do
    src=$PWD/src; [ $code = old ] && src=$PWD/$OLD
    t0=$SECONDS
    CUDA_AGENT_HOME=/tmp/cah_$code PYTHONPATH=$SITE$src timeout -k 10 300 python3 benchmarks/service_bench.py \
      --device "${DEVICE:-cuda}" --burst-only --evals "${EVALS:-30}" --burst "${BURST:-4}" --json "$D/${code}_$r.json" \
      > "$D/${code}_$r.log" 2>&1
    echo "round $r $code: exit $? after $((SECONDS - t0))s"
  done
done
python3 - "$D" <<'PY'
import json, sys, glob, os
rows = []
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*_*.json"))):
    code, r = os.path.basename(f)[:-5].split("_")
    t = json.load(open(f)).get("throughput", {})
    st = t.get("stage_s", {})
    rows.append((int(r), code, t.get("evals_per_hour", 0), t.get("start_s", 0), st.get("correctness", 0), st.get("timing", 0)))
print("| round | code | evals/h | start s | correctness s | timing s |\n|---|---|---:|---:|---:|---:|")
for r in sorted(rows):
    print("| %d | %s | %.0f | %.2f | %.2f | %.2f |" % r)
for code in ("old", "new"):
    v = [x[2] for x in rows if x[1] == code]
    if v:
        print(f"{code}: worst {min(v):.0f} best {max(v):.0f} evals/h")
PY
