"""`cuda-agent cache prune` on the build cache (harness/build/cache.py): leftovers of killed builds
first, then whole entries least recently used first until the cache fits, never an entry in use."""

from __future__ import annotations

import os
import time
from pathlib import Path

from cuda_agent.harness.build.cache import prune, touch, usage

from ..test_scratch import leave_a_folder

MB = 1 << 20


def entry(path: Path, size: int, age_s: float) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\0" * size)
    when = time.time() - age_s
    os.utime(path, (when, when))
    if path.parent.parent.name in ("modules", "pch"):
        os.utime(path.parent, (when, when))
    return path


def make_cache(root: Path) -> dict[str, Path]:
    return {
        "old_pch": entry(root / "pch" / "aaa" / "pch.h.gch", 4 * MB, 3 * 86400),
        "old_object": entry(root / "objects" / "k1.o", MB, 2 * 86400),
        "module": entry(root / "modules" / "link1" / "cuda_extension.so", MB, 86400),
        "new_pch": entry(root / "pch" / "bbb" / "pch.h.gch", 4 * MB, 3600),
        "in_use": entry(root / "objects" / "k2.o", MB, 10),
    }


def test_prune_removes_least_recently_used_entries_until_the_cache_fits(tmp_path):
    files = make_cache(tmp_path)
    (tmp_path / "pch" / "aaa.lock").write_text("")
    assert usage(tmp_path).total == 11 * MB and usage(tmp_path).parts["pch"] == 8 * MB
    pruned = prune(tmp_path, max_bytes=6 * MB)
    assert (pruned.before, pruned.after, pruned.removed) == (11 * MB, 6 * MB, 2)
    assert not files["old_pch"].parent.exists() and not (tmp_path / "pch" / "aaa.lock").exists()
    assert not files["old_object"].exists()
    assert all(files[k].exists() for k in ("module", "new_pch", "in_use"))


def test_prune_keeps_what_a_build_used_recently_even_to_empty_the_cache(tmp_path):
    files = make_cache(tmp_path)
    touch(files["old_pch"].parent)                     # a build beside the prune uses it now
    pruned = prune(tmp_path, max_bytes=0, keep_recent_s=600)
    assert files["old_pch"].exists() and files["in_use"].exists()
    assert not files["module"].exists() and not files["new_pch"].exists()
    assert pruned.after == 5 * MB
    assert prune(tmp_path, max_bytes=0, keep_recent_s=0).after == 0


def test_prune_removes_the_scratch_a_killed_build_left(tmp_path):
    leave_a_folder(tmp_path / "scratch", "pch", 2 * MB)
    assert usage(tmp_path).parts["scratch"] == 2 * MB
    pruned = prune(tmp_path, max_bytes=1 << 40)
    assert (pruned.removed, pruned.leftovers, pruned.after) == (1, 1, 0)
