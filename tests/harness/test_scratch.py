"""Scratch folders of killed processes are removed by the next process (issue 26: a build cache with
a leaked 725 MB scratch folder), those of living ones never."""

from __future__ import annotations

import os
import time
from pathlib import Path

from cuda_agent.harness.scratch import STALE_S, scratch_folder, sweep


def leave_a_folder(parent: Path, prefix: str, size: int) -> Path:
    """A folder made by a process that ends without cleaning up, as a killed build does."""
    pid = os.fork()
    if pid == 0:
        try:
            (scratch_folder(parent, prefix) / "pch.h.gch").write_bytes(bytes(size))
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    (left,) = [p for p in parent.iterdir() if f"@{pid}@" in p.name]
    return left


def test_the_folder_a_killed_process_left_is_removed_by_the_next_one(tmp_path):
    left = leave_a_folder(tmp_path, "cuda_extension", 4096)
    assert left.is_dir()
    mine = scratch_folder(tmp_path, "cuda_extension")
    assert not left.exists() and [p.name for p in tmp_path.iterdir()] == [mine.name]


def test_a_living_process_keeps_its_folder_and_old_unnamed_ones_go(tmp_path):
    mine = scratch_folder(tmp_path, "snap")
    other = tmp_path / "older-version-tmpabc"
    other.mkdir()
    fresh = tmp_path / "fresh-unnamed"
    fresh.mkdir()
    old = time.time() - STALE_S - 60
    os.utime(other, (old, old))
    assert sweep(tmp_path) == (1, 0)
    assert mine.exists() and fresh.exists() and not other.exists()
