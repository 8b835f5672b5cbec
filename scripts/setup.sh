#!/usr/bin/env bash
# Set up cuda-agent in .venv at the repository root.
#   bash scripts/setup.sh         the package and its command, `.venv/bin/cuda-agent`
#   bash scripts/setup.sh --dev   also what the tests need, verl (the `rl` extra) included
# A torch that is already installed (a GPU user's CUDA build) is used as it is; only where no
# torch can be imported is the CPU build installed (torch==2.13.0).
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
extras=""
[ "${1:-}" = "--dev" ] && extras="[dev,rl]"

if [ ! -x .venv/bin/python ]; then
  "$python" -m venv --system-site-packages .venv
fi
pip=(.venv/bin/python -m pip -q --disable-pip-version-check)
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  echo "setup: no torch found; installing the CPU build (torch==2.13.0)"
  "${pip[@]}" install torch==2.13.0
fi
"${pip[@]}" install -e ".${extras}" 2>&1 | grep -v "^WARNING: Location" || true
.venv/bin/python -c "import cuda_agent, torch" || { echo "setup: cuda_agent failed to import" >&2; exit 1; }

# The harness runs solutions as an unprivileged user when it runs as root; that user must be able
# to reach the Python interpreter and this checkout.
bash scripts/sandbox_access.sh .venv/bin/python
echo "setup: ready (.venv/bin/cuda-agent)"
