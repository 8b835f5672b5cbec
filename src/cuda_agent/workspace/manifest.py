"""The workspace manifest: the task and the content hashes of every protected file, signed with a
key only the harness's user can read, so that tampering is detected and a forged manifest is too."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from dataclasses import asdict, dataclass, field
from pathlib import Path

from cuda_agent.home import home

MANIFEST = Path(".cuda_agent") / "manifest.json"
KEY_FILE = "workspace.key"


class ManifestError(RuntimeError):
    """The manifest is missing, unreadable, or its signature does not match."""


@dataclass
class Manifest:
    task_name: str
    task_code: str
    device: str
    protected: dict[str, str]          # relative path -> sha256 of the content the harness wrote
    task_origin: str = ""
    level: int | None = None
    problem_id: int | None = None
    version: int = 1
    signature: str = ""
    extra: dict = field(default_factory=dict)

    def payload(self) -> bytes:
        d = asdict(self)
        d.pop("signature")
        return json.dumps(d, sort_keys=True, separators=(",", ":")).encode()


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _key(create: bool) -> bytes | None:
    path = home() / KEY_FILE
    if create and not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
    try:
        return path.read_text().strip().encode()
    except OSError:
        return None


def sign(manifest: Manifest) -> None:
    key = _key(create=True)
    assert key is not None
    manifest.signature = hmac.new(key, manifest.payload(), hashlib.sha256).hexdigest()


def write_manifest(workspace: Path, manifest: Manifest) -> Path:
    sign(manifest)
    path = workspace / MANIFEST
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(asdict(manifest), indent=1, sort_keys=True))
    return path


def read_manifest(workspace: Path) -> tuple[Manifest, bool]:
    """The workspace's manifest and whether its signature was checked (False when this user cannot
    read the harness's key: the result is then advisory). Raises ManifestError on a bad signature."""
    path = Path(workspace) / MANIFEST
    try:
        data = json.loads(path.read_text())
        manifest = Manifest(**data)
    except (OSError, ValueError, TypeError) as e:
        raise ManifestError(f"{path}: missing or unreadable workspace manifest ({e}); "
                            "create the workspace with `cuda-agent workspace TASK DIR`") from None
    key = _key(create=False)
    if key is None:
        return manifest, False
    expected = hmac.new(key, manifest.payload(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, manifest.signature):
        raise ManifestError(f"{path}: the manifest was modified (signature mismatch); protected files "
                            "and the task record must not be edited")
    return manifest, True


def tampered_files(workspace: Path, manifest: Manifest) -> list[str]:
    """Protected files whose content differs from what the harness wrote (or that are missing)."""
    bad = []
    for rel, digest in sorted(manifest.protected.items()):
        p = Path(workspace) / rel
        if not p.is_file() or p.is_symlink() or sha256_file(p) != digest:
            bad.append(rel)
    return bad
