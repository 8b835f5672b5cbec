#!/usr/bin/env bash
# Public corpora of released kernels, and KernelBench itself, for benchmarks only (no test needs
# them): cloned into ./corpora (ignored by git), or the folder given as $1.
#   scripts/fetch_corpora.sh [folder]
# KernelBench is checked out at a pinned commit: benchmarks/kb_agreement.py runs its evaluation as
# an external program, and its verdicts must not move with its main branch. Where GitHub cannot be
# reached, point the URLs at mirrors: KERNELBENCH_URL=/path/to/KernelBench.git CUDA_L1_URL=... LEADERBOARD_URL=...
set -euo pipefail
dest="${1:-$(git rev-parse --show-toplevel)/corpora}"
KERNELBENCH_SHA=423217d9fda91e0c2d67e4a43bf62f96f6d104f1  # main on 2026-03-05 ("update all legacy python commands to UV")
mkdir -p "$dest"
clone() {  # repository, folder name: the newest commit
  if [ -d "$dest/$2/.git" ]; then git -C "$dest/$2" pull --ff-only -q; else git clone -q --depth 1 "$1" "$dest/$2"; fi
  echo "$2: $(git -C "$dest/$2" rev-parse HEAD)"
}
clone_at() {  # repository, folder name, commit: exactly that commit
  if [ ! -d "$dest/$2/.git" ]; then
    git init -q "$dest/$2"
    git -C "$dest/$2" remote add origin "$1"
  fi
  if [ "$(git -C "$dest/$2" rev-parse -q --verify HEAD 2>/dev/null)" != "$3" ]; then
    git -C "$dest/$2" fetch -q --depth 1 origin "$3"
    git -C "$dest/$2" checkout -q --detach "$3"
  fi
  echo "$2: $(git -C "$dest/$2" rev-parse HEAD) (pinned)"
}
clone "${CUDA_L1_URL:-https://github.com/deepreinforce-ai/CUDA-L1}" CUDA-L1
clone "${LEADERBOARD_URL:-https://github.com/anneouyang/KernelBenchLeaderboard}" KernelBenchLeaderboard
clone_at "${KERNELBENCH_URL:-https://github.com/ScalingIntelligence/KernelBench}" KernelBench "$KERNELBENCH_SHA"
