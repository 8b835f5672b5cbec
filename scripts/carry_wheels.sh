#!/usr/bin/env bash
# The wheels the lent GPU machine needs to run cuda_agent.rl on verl 0.9.1, downloaded here into .whl/.
#
# That machine has Python 3.12, torch 2.11+cu130, transformers 5.17, tokenizers 0.23.2, pyarrow, pandas,
# typer, rich and ninja, but no network, no Ray and no verl; a call carries at most 64 MiB of files. This
# script fetches verl 0.9.1 and what it imports that the image lacks (cp312 manylinux wheels, versions as
# tested on CPU), builds the one sdist-only dependency (antlr4, for hydra-core 1.3), and repacks ray
# 2.60.0 without the parts verl never imports (its Java jar, dashboard UI, rllib, serve, tune, train, llm,
# data): 75.7 MiB -> about 38 MiB. It prints the total, and fails if it is over the carry limit.
#
#   bash scripts/carry_wheels.sh                     # run in the repository root; .whl/ is git-ignored
#   WITH_TRANSFORMERS=1 bash scripts/carry_wheels.sh # also transformers 5.10.4 + tokenizers 0.22.2 (verl's pins)
#
# cuda_agent itself needs nothing the image lacks: it travels as the working tree. On the GPU machine:
#   python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
#   export PYTHONPATH=/tmp/site:$PWD/src VERL_USE_EXTERNAL_MODULES=cuda_agent.rl.workers.plugin
# (Ray workers inherit both variables from the driver.) Do not carry transformers with the default set:
# --no-deps skips verl's transformers<5.11 pin, and the image's 5.17 ran verl's trainers (rl-verl notes §14).
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
dest=.whl
limit_mib=64
rm -rf "$dest" && mkdir -p "$dest"  # from scratch: a stale wheel would travel too
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

platforms=""
for tag in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_26_x86_64 manylinux_2_24_x86_64 \
           manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux_2_5_x86_64 manylinux1_x86_64; do
  platforms="$platforms --platform $tag"
done
packages="verl==0.9.1 ray==2.60.0 tensordict==0.10.0 pyvers==0.1.0 orjson==3.13.0 importlib_metadata==10.2.0
  lazy-importer==0.1.0 hydra-core==1.3.8 omegaconf==2.3.1 codetiming==1.4.0 torchdata==0.11.0 datasets==5.2.0
  dill==0.4.1 multiprocess==0.70.19 pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0
  typing-inspection==0.4.5 cachetools==8.0.2 fastapi==0.165.0 starlette==1.10.0 uvicorn==0.54.0
  opentelemetry-api==1.45.2 jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0
  rpds-py==2026.9.1 pylatexenc==2.11 TransferQueue==0.1.11 pyzmq==27.3.0 msgspec==0.22.0"
[ "${WITH_TRANSFORMERS:-0}" = 1 ] && packages="$packages transformers==5.10.4 tokenizers==0.22.2"

pip=("$python" -m pip --disable-pip-version-check -q)
# shellcheck disable=SC2086  # word splitting of the lists is intended
"${pip[@]}" download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $platforms \
  -d "$dest" $packages
# hydra-core 1.3 needs antlr4-python3-runtime 4.9.3, published as an sdist only: build its pure-Python wheel
# (an --only-binary resolve would otherwise fall back to hydra-core 0.11.3 without a word)
"${pip[@]}" wheel --no-deps -w "$dest" antlr4-python3-runtime==4.9.3

# repack ray without what verl does not import (the `wheel` tool, in a throwaway folder)
ray_whl=$(ls "$dest"/ray-2.60.0-cp312-*.whl)
"${pip[@]}" install --root-user-action=ignore --target "$tmp/tool" wheel
PYTHONPATH="$tmp/tool" "$python" -m wheel unpack -d "$tmp/ray" "$ray_whl" >/dev/null
(cd "$tmp"/ray/ray-2.60.0/ray && rm -rf jars dashboard/client/build rllib serve tune train llm data)
rm "$ray_whl"
PYTHONPATH="$tmp/tool" "$python" -m wheel pack -d "$dest" "$tmp"/ray/ray-2.60.0 >/dev/null

total=$(du -cb "$dest"/*.whl | tail -1 | cut -f1)
ls "$dest"/*.whl | wc -l | xargs printf "%s wheels in $dest/, "
awk -v b="$total" -v l="$limit_mib" 'BEGIN { printf "%.1f MiB (carry limit %d MiB, the repository comes on top)\n", b / 1048576, l }'
if [ "$total" -gt $((limit_mib * 1048576)) ]; then
  echo "carry_wheels: over the ${limit_mib} MiB a call carries; drop WITH_TRANSFORMERS" >&2
  exit 1
fi
