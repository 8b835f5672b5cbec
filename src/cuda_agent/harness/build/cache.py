"""The build cache's size, and pruning it (`cuda-agent cache prune`).

The cache (extension.py's layout) only grows: every new solution adds objects and a module, every
new toolchain or torch a precompiled header of about 0.5 GB. Pruning removes what a killed build
left in scratch/, then whole entries, least recently used first, until the cache fits a size: a
module folder, an object, a precompiled header's folder with its lock, a log. A build touches what
it uses, and entries used in the last `keep_recent_s` are kept, so that a build running beside the
prune keeps what it planned with; a pruned entry is simply built again.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path

from cuda_agent.harness.scratch import sweep
from cuda_agent.home import folder_bytes, subdir

ENTRY_FOLDERS = ("modules", "objects", "pch", "logs")


@dataclass(frozen=True)
class CacheUsage:
    """Bytes per part of the build cache."""

    path: Path
    parts: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.parts.values())


@dataclass(frozen=True)
class Pruned:
    """What one prune did."""

    before: int            # bytes
    after: int
    removed: int           # entries (and leftover scratch folders) removed
    leftovers: int         # of which scratch folders of killed builds and evaluations


def build_cache_usage() -> CacheUsage:
    """The bytes of the build cache under CUDA_AGENT_HOME, per folder."""
    return usage(subdir("build"))


def prune_build_cache(max_bytes: int, keep_recent_s: float = 600) -> Pruned:
    """`prune` of the build cache under CUDA_AGENT_HOME, and the snapshot folders that killed
    evaluations left in its tmp/."""
    pruned = prune(subdir("build"), max_bytes, keep_recent_s)
    snapshots, _ = sweep(subdir("tmp"))
    return replace(pruned, removed=pruned.removed + snapshots, leftovers=pruned.leftovers + snapshots)


def usage(cache: Path) -> CacheUsage:
    """The cache's bytes per folder (modules, objects, pch, logs, scratch)."""
    return CacheUsage(cache, {name: folder_bytes(cache / name) for name in (*ENTRY_FOLDERS, "scratch")})


def touch(*paths: Path) -> None:
    """Mark cache entries as used now (pruning removes the least recently used first)."""
    for p in paths:
        try:
            os.utime(p)
        except OSError:
            pass   # gone meanwhile, or a read-only cache: nothing to keep fresh


def prune(cache: Path, max_bytes: int, keep_recent_s: float = 600) -> Pruned:
    """Remove killed builds' scratch folders, then entries least recently used first until the cache
    holds at most `max_bytes`, keeping those used in the last `keep_recent_s` seconds."""
    before = usage(cache).total
    leftovers, _ = sweep(cache / "scratch")
    entries = sorted(_entries(cache), key=lambda e: e[0])
    total = usage(cache).total
    removed = 0
    recent = time.time() - keep_recent_s
    for used, size, paths in entries:
        if total <= max_bytes or used > recent:
            break
        for p in paths:
            if p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
        total -= size
        removed += 1
    return Pruned(before=before, after=usage(cache).total, removed=removed + leftovers, leftovers=leftovers)


def _entries(cache: Path) -> list[tuple[float, int, list[Path]]]:
    """(last use, bytes, paths) of every entry: what is removed together."""
    out = []
    for name in ENTRY_FOLDERS:
        folder = cache / name
        if not folder.is_dir():
            continue
        for p in folder.iterdir():
            if name == "pch" and p.suffix == ".lock":
                continue   # goes with its header's folder
            paths = [p, p.with_name(p.name + ".lock")] if name == "pch" else [p]
            out.append((_last_use(p), folder_bytes(p) if p.is_dir() else _size(p), paths))
    return out


def _last_use(path: Path) -> float:
    """The newest modification under `path` (a build touches what it uses)."""
    try:
        times = [path.stat().st_mtime]
        if path.is_dir():
            times += [q.stat().st_mtime for q in path.iterdir()]
        return max(times)
    except OSError:
        return time.time()


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
