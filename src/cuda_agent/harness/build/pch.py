"""Precompiled headers: the torch and pybind11 includes of binding files, compiled once per toolchain.

A binding .cpp spends most of its compile in torch/types.h and pybind11. The includes that the
harness's own templates and load_inline start with (PCH_HEADERS) are precompiled once per toolchain
into the build cache (`pch/<key>/pch.h.gch`, keyed by extension.choose_pch); a .cpp whose first lines are exactly
one of those lists is compiled with `-include` of it, so the compiler sees the same headers in the
same order and the object comes out the same. A header is built beside a build that lacks it, in
its own folder, and moved into the cache atomically under a lock; a build never waits past its own
time limit for one, and never fails because of one (extension.py retries without it).
"""

from __future__ import annotations

import fcntl
import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from cuda_agent.harness.build.toolchain import Toolchain, compiler_include_dirs
from cuda_agent.sandbox import kill_group

# How g++ fails on a precompiled header that passed its checks but cannot be read whole.
PCH_FAILURE = re.compile(r"^(<command-line>|cc1plus): (fatal )?error: .*(PCH|\.gch|precompiled header)"
                         r"|internal compiler error", re.M)
# The includes that the harness precompiles (once per toolchain, into the cache): the binding
# templates' and load_inline's. A .cpp whose first lines include one of these lists, in this order
# and before anything else, is compiled with `-include` of that list's precompiled header; the
# compiler then sees the same headers in the same order, and the object comes out the same.
PCH_HEADERS = (
    ("torch/types.h", "torch/csrc/utils/pybind.h", "c10/cuda/CUDAStream.h"),  # kernels_cuda/*_binding.cpp
    ("torch/types.h", "torch/csrc/utils/pybind.h"),                           # kernels_cpu/*_binding.cpp
    ("torch/extension.h",),                                                    # load_inline's main.cpp
)


@dataclass(frozen=True)
class Pch:
    """A precompiled header: `headers` built with the toolchain's pch_cflags, kept in `folder`."""

    key: str
    headers: tuple[str, ...]
    folder: Path                         # cache/pch/<key>: pch.h (the includes) and pch.h.gch

    @property
    def text(self) -> str:
        return "".join(f"#include <{h}>\n" for h in self.headers)

    @property
    def gch(self) -> Path:
        return self.folder / "pch.h.gch"


_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
_INCLUDE = re.compile(r'#\s*include\s*(<[^<>"]+>|"[^<>"]+")')


def pch_headers(files: dict[str, str], sources: list[str], toolchain: Toolchain) -> dict[str, tuple[str, ...]]:
    """For each .cpp source, the longest PCH_HEADERS list that its leading includes begin with.

    None when the solution adds compiler flags (a header per flag set would fill the disk), when a
    bundle file could stand in for a system header (`-I.` puts the bundle first; the shared header was
    built without it), or with $CUDA_AGENT_PCH=0 (what the build benchmark compares with)."""
    if os.environ.get("CUDA_AGENT_PCH") == "0":
        return {}
    if not toolchain.pch_cflags or shadows_system_header(files, toolchain):
        return {}
    chosen = {}
    for src in (s for s in sources if s.endswith(".cpp")):
        includes = leading_includes(files, src)[0]
        fits = [h for h in PCH_HEADERS if tuple(includes[:len(h)]) == h
                and (toolchain.nvcc or not any(x.startswith("c10/cuda/") for x in h))]
        if fits:
            chosen[src] = max(fits, key=len)
    return chosen


def leading_includes(files: dict[str, str], path: str, depth: int = 0) -> tuple[list[str], bool]:
    """The <...> headers that `path` includes before anything else (comments, blank lines and
    `#pragma once` aside), through its "..." includes of bundle headers; and whether nothing else
    follows them in the file. Stops at the first line of any other kind."""
    headers: list[str] = []
    text = _COMMENT.sub(lambda m: "\n" * m.group().count("\n"), files[path])
    for line in text.lstrip("\ufeff").splitlines():
        line = line.strip()
        m = _INCLUDE.fullmatch(line)
        if not line or re.fullmatch(r"#\s*pragma\s+once", line):
            continue
        if m is None or depth > 8:
            return headers, False
        name = m[1][1:-1]
        if m[1][0] == "<":
            if name in files:  # the bundle's own file, through -I.
                return headers, False
            headers.append(name)
            continue
        found = [p for p in (os.path.normpath(os.path.join(os.path.dirname(path), name)), os.path.normpath(name))
                 if p in files]
        if not found:
            return headers, False
        inner, whole = leading_includes(files, found[0], depth + 1)
        headers += inner
        if not whole:
            return headers, False
    return headers, True


def shadows_system_header(files: dict[str, str], toolchain: Toolchain) -> bool:
    """Whether a bundle file has the path of a header in a system include folder (the compiler's own
    and the -isystem ones), so that `#include <that path>` would find the bundle's file instead.
    True also when the compiler does not say where it looks."""
    flags = toolchain.pch_cflags
    try:
        dirs = [*compiler_include_dirs(toolchain.cxx), *(flags[i + 1] for i, f in enumerate(flags[:-1])
                                                         if f == "-isystem")]
    except (RuntimeError, OSError, subprocess.SubprocessError):
        return True
    return any((Path(d) / p).exists() for d in dirs for p in files)


@dataclass
class PchBuild:
    """A precompiled header being built beside the ninja build, in a scratch folder."""

    pch: Pch
    folder: Path
    proc: subprocess.Popen
    lock: int                            # a file descriptor holding the header's build lock
    started: float


def start_pch_builds(pchs: list[Pch], toolchain: Toolchain, scratch: Path) -> list[PchBuild]:
    """Start building `pchs`, except those that another process is building now (its lock is held).
    A header that cannot be started is left out: the build never depends on one."""
    builds = []
    for pch in pchs:
        lock = -1
        try:
            pch.folder.parent.mkdir(parents=True, exist_ok=True)
            lock = os.open(pch.folder.parent / f"{pch.key}.lock", os.O_CREAT | os.O_RDWR, 0o600)
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if pch.gch.exists():  # finished by another process since the plan was made
                raise FileExistsError(pch.gch)
            folder = scratch / "pch" / pch.key  # alone in its folder, so that -I. finds none of the bundle
            folder.mkdir(parents=True)
            (folder / "pch.h").write_text(pch.text)
            command = [toolchain.cxx, *toolchain.pch_cflags, "-x", "c++-header", "pch.h", "-o", "pch.h.gch"]
            with open(folder / "pch.log", "wb") as log:
                proc = subprocess.Popen(command, cwd=folder, stdout=log, stderr=subprocess.STDOUT,
                                        env={**os.environ, "LC_ALL": "C"}, start_new_session=True)
            builds.append(PchBuild(pch, folder, proc, lock, time.perf_counter()))
        except OSError:  # BlockingIOError: another process holds the lock
            if lock >= 0:
                os.close(lock)
    return builds


def finish_pch_builds(builds: list[PchBuild], deadline: float) -> list[str]:
    """Wait for `builds` until `deadline` (perf_counter time), move each finished header into the
    cache (atomically: other builds may be reading it), and say what happened, for the log."""
    notes = []
    for b in builds:
        name = f"# precompiled header {b.pch.key[:16]}"
        try:
            b.proc.wait(timeout=max(deadline - time.perf_counter(), 0))
            if b.proc.returncode == 0:
                install_pch(b.pch, b.folder)
                notes.append(f"{name}: built in {time.perf_counter() - b.started:.1f}s")
            else:
                notes.append(f"{name}: failed, not kept:\n{(b.folder / 'pch.log').read_text(errors='replace')[-2000:]}")
        except subprocess.TimeoutExpired:
            notes.append(f"{name}: stopped at the build's time limit")
        except OSError as e:
            notes.append(f"{name}: not kept ({e})")
        finally:
            if b.proc.poll() is None:
                kill_group(b.proc.pid)
                b.proc.wait()
            os.close(b.lock)
    return notes


def install_pch(pch: Pch, staged: Path) -> None:
    """pch.h first, then pch.h.gch: a plan takes the header as cached once the .gch is there."""
    pch.folder.mkdir(parents=True, exist_ok=True)
    tmp = pch.folder / f"pch.h.{os.getpid()}.tmp"
    tmp.write_text(pch.text)
    os.replace(tmp, pch.folder / "pch.h")
    os.replace(staged / "pch.h.gch", pch.gch)
