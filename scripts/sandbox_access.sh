#!/usr/bin/env bash
# When run as root: let other users traverse (o+x, not list) every folder above the Python
# interpreter and this checkout's src/, so the harness's unprivileged sandbox users can run the
# solution and tool processes. Says what it changes; does nothing when not root.
#   bash scripts/sandbox_access.sh [PYTHON]    (default: python3 on the PATH)
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || exit 0
python=${1:-python3}
for target in "$("$python" -c 'import os,sys; print(os.path.realpath(sys.executable))')" "$PWD/src/cuda_agent"; do
  d=$(dirname "$target")
  while [ "$d" != "/" ]; do
    if [ -d "$d" ] && [ $(( $(stat -c '%a' "$d" | sed 's/^.*\(.\)$/\1/') & 1 )) -eq 0 ]; then
      echo "sandbox access: allowing other users to traverse $d (so the harness's sandbox user can run Python)"
      chmod o+x "$d"
    fi
    d=$(dirname "$d")
  done
done
