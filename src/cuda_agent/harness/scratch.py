"""Scratch folders named for the process that made them (`PREFIX@HOST@PID@random`), so that those a
killed process left behind (a build's staging copy with a half-written precompiled header is hundreds
of megabytes) are found and removed by the next process, instead of piling up under CUDA_AGENT_HOME.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import time
from pathlib import Path

from cuda_agent.home import folder_bytes

# A folder whose maker is on another host, or whose name says nothing of its maker, is removed only
# when it has not changed for this long (no build or evaluation takes a day).
STALE_S = 24 * 3600


def scratch_folder(parent: Path, prefix: str) -> Path:
    """A new private folder in `parent`, named for this process; leftovers of dead processes there
    are removed first. The caller removes its own folder when done."""
    parent.mkdir(parents=True, exist_ok=True)
    sweep(parent)
    return Path(tempfile.mkdtemp(prefix=f"{prefix}@{socket.gethostname()}@{os.getpid()}@", dir=parent))


def sweep(parent: Path, stale_s: float = STALE_S) -> tuple[int, int]:
    """Remove the folders in `parent` that no living process owns; returns (folders, bytes) removed."""
    removed = freed = 0
    if not parent.is_dir():
        return 0, 0
    for p in parent.iterdir():
        if p.is_dir() and _abandoned(p, stale_s):
            size = folder_bytes(p)
            shutil.rmtree(p, ignore_errors=True)
            if not p.exists():
                removed, freed = removed + 1, freed + size
    return removed, freed


def _abandoned(folder: Path, stale_s: float) -> bool:
    parts = folder.name.split("@")
    if len(parts) == 4 and parts[1] == socket.gethostname() and parts[2].isdigit():
        return not _alive(int(parts[2]))
    try:
        return time.time() - folder.stat().st_mtime > stale_s
    except OSError:
        return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:   # another user's living process
        return True
    return True
