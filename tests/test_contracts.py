"""The architecture's contracts (pyproject.toml, [tool.importlinter]): layers that import only
downward, and the harness reached only through its door. A change that needs to break one is a
change to the map, made on purpose in pyproject.toml, README.md and ../shared/STYLE.md."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def test_the_import_contracts_hold():
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if lint is None:
        pytest.skip("import-linter is not installed (bash scripts/setup.sh --dev installs it)")
    r = subprocess.run([lint, "--no-cache"], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "0 broken" in r.stdout
