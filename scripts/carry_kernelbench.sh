#!/usr/bin/env bash
# What the GPU machine needs to run benchmarks/kb_agreement.py, gathered into .kb/ (git-ignored):
#   .kb/KernelBench/src/kernelbench/   KernelBench's package at the pinned commit (from ./corpora, fetched
#                                      by scripts/fetch_corpora.sh; never committed), 0.3 MB
#   .kb/KernelBench/KB_COMMIT          that commit (the copy has no .git)
#   .kb/cuda_l1/h100.json              CUDA-L1's released H100 kernels (optimized_cuda_code/h100.json), 3.2 MB
#   .kb/kernelbench.jsonl              the KernelBench problems (../shared/kernelbench, the same commit), 0.5 MB
#   .kb/wheels/                        pydantic and what it needs, typing-extensions >= 4.16 included (the
#                                      image's may be older); cp312 manylinux wheels, 2.8 MB
# KernelBench's evaluation imports torch, numpy, requests and pydantic (KernelExecResult); the image has
# all but pydantic. Its package __init__ also imports python-dotenv, openai and litellm for its LLM
# helpers, which the evaluation never calls: benchmarks/kb_driver.py stands in for them; they do not travel.
#
#   bash scripts/carry_kernelbench.sh      # in the repository root; then carry [".kb"]:
#   run(carry=[".kb"], command="bash benchmarks/device_check.sh kbagree:540")
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/fetch_corpora.sh
rm -rf .kb && mkdir -p .kb/KernelBench/src .kb/wheels
cp -r corpora/KernelBench/src/kernelbench .kb/KernelBench/src/
find .kb -name __pycache__ -prune -exec rm -rf {} +
git -C corpora/KernelBench rev-parse HEAD > .kb/KernelBench/KB_COMMIT
mkdir -p .kb/cuda_l1 && cp corpora/CUDA-L1/optimized_cuda_code/h100.json .kb/cuda_l1/h100.json
cp "${KERNELBENCH_JSONL:-../shared/kernelbench/kernelbench.jsonl}" .kb/kernelbench.jsonl
platforms=""
for tag in manylinux_2_28_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64; do platforms="$platforms --platform $tag"; done
# shellcheck disable=SC2086  # the platform list is meant to split
"${PYTHON:-python3}" -m pip --disable-pip-version-check -q download --no-deps --only-binary=:all: \
  --python-version 3.12 --implementation cp $platforms -d .kb/wheels \
  pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 typing-extensions==4.16.0
du -sh .kb | cut -f1 | xargs printf ".kb: %s (KernelBench $(cut -c1-12 .kb/KernelBench/KB_COMMIT))\n"
