"""The architecture's contracts (pyproject.toml, [tool.importlinter]): layers that import only
downward, the harness, the sandbox and measure reached only through their doors, synth apart from
the judge, and each external library kept to its rooms. A change that needs to break one is a
change to the map, made on purpose in pyproject.toml, README.md and ../shared/STYLE.md."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _contracts() -> list[dict]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def test_the_import_contracts_hold():
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    # Never a skip: a CI without import-linter would pass with every contract unchecked.
    assert lint is not None, "import-linter is not installed: `bash scripts/setup.sh --dev` installs it"
    r = subprocess.run([lint, "--no-cache"], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "0 broken" in r.stdout


def test_every_library_boundary_names_every_package_outside_its_rooms():
    """A forbidden contract checks only the sources it lists: a package added to the layers and
    left out of a library's contract could import that library unseen."""
    contracts = _contracts()
    layers = next(c for c in contracts if c["type"] == "layers")
    packages = {f"cuda_agent.{name}" for layer in layers["layers"] for name in re.findall(r"[a-z_]+", layer)}
    boundaries = [c for c in contracts if c["type"] == "forbidden" and not c["forbidden_modules"][0].startswith("cuda_agent")]
    assert {c["forbidden_modules"][0] for c in boundaries} >= {"typer", "verl", "ray", "openai"}
    for c in boundaries:
        rooms = packages - set(c["source_modules"])
        assert rooms and all(f"{room.removeprefix('cuda_agent.')}/" in c["name"] for room in rooms), \
            f"{c['name']!r} leaves out {sorted(rooms)}, which its name does not give as the library's rooms"


def test_the_judge_has_a_small_door():
    """The harness is the judge only: its door names what judging a solution needs, and no more."""
    import cuda_agent.harness as harness

    assert len(harness.__all__) <= 25, sorted(harness.__all__)
    assert all(hasattr(harness, name) for name in harness.__all__)


def test_no_module_is_over_450_lines():
    """Small modules named for what they do (../shared/STYLE.md): one that grows past 450 lines holds two ideas."""
    sizes = {p.relative_to(REPO): len(p.read_text().splitlines()) for p in (REPO / "src").rglob("*.py")}
    assert sizes and not {str(p): n for p, n in sizes.items() if n > 450}
