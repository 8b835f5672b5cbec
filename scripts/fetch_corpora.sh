#!/usr/bin/env bash
# Public corpora of released kernels, for benchmarks only (no test needs them): cloned into
# ./corpora (ignored by git), or the folder given as $1.
#   scripts/fetch_corpora.sh [folder]
set -euo pipefail
dest="${1:-$(git rev-parse --show-toplevel)/corpora}"
mkdir -p "$dest"
clone() {  # repository, folder name
  if [ -d "$dest/$2/.git" ]; then git -C "$dest/$2" pull --ff-only -q; else git clone -q --depth 1 "$1" "$dest/$2"; fi
  echo "$2: $(git -C "$dest/$2" rev-parse HEAD)"
}
clone https://github.com/deepreinforce-ai/CUDA-L1 CUDA-L1
