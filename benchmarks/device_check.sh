#!/usr/bin/env bash
# One device call: the CUDA tests, the build benchmark, the harness benchmark and the demo, with
# logs under $OUT (the device tool's output folder; defaults to ./device_out here).
#   bash benchmarks/device_check.sh [tests|build|harness|demo|all]...
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-device_out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CUDA_AGENT_HOME=${CUDA_AGENT_HOME:-/tmp/cuda_agent_home}
KB=${KB:-.devdata}
steps=${*:-all}
has() { [[ " $steps " == *" $1 "* || " $steps " == *" all "* ]]; }
py=python3
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; $py -c "import torch; print('torch', torch.__version__, torch.version.cuda)"; nvcc --version | tail -1; } 2>&1 | tee "$OUT/env.txt"
if has tests; then
  $py -m pytest -q -m cuda -p no:cacheprovider tests 2>&1 | tee "$OUT/tests_cuda.log" | tail -30
fi
if has build; then
  $py benchmarks/build_bench.py --device cuda --json "$OUT/build_bench.json" 2>&1 | tee "$OUT/build_bench.log" | tail -20
fi
if has harness; then
  $py benchmarks/harness_bench.py --device cuda --evals 5 --fidelity 20 --kernelbench "$KB/kernelbench.jsonl" \
      --published "$KB/h100_modal_eager.json" --json "$OUT/harness_bench.json" 2>&1 | tee "$OUT/harness_bench.log" | tail -45
fi
if has demo; then
  $py -m cuda_agent demo 2>&1 | tee "$OUT/demo.log" | tail -20
fi
