"""A solution as the harness sees it: a private snapshot of its files, checked and built from
that snapshot only, so nothing edited afterwards can change what was checked."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from cuda_agent.devices import Backend
from cuda_agent.harness.build.sources import HEADER_SUFFIXES, SOURCE_SUFFIXES
from cuda_agent.harness.result import BuildResult, Finding

MAX_FILE_BYTES = 2 << 20


class SolutionError(ValueError):
    """The solution path cannot be evaluated at all (missing, wrong shape)."""


@dataclass
class Solution:
    kind: Literal["workspace", "inline"]
    root: Path                 # the private snapshot
    origin: Path               # where it came from
    files: dict[str, str]      # relative path -> text: model_new.py and every C/C++/CUDA source

    @property
    def model_new(self) -> str:
        return self.files["model_new.py"]


def snapshot(path: str | Path, dest: Path) -> Solution:
    """Copy the solution's files into `dest` and read them; `path` is a workspace folder (with
    model_new.py and kernels/) or a single model_new.py that uses load_inline."""
    from cuda_agent.harness.static import is_inline_solution

    src = Path(path)
    if src.is_dir():
        entry = src / "model_new.py"
        wanted = [entry] + [p for p in sorted(src.glob("*")) if p.suffix in SOURCE_SUFFIXES + HEADER_SUFFIXES
                            and p.name not in ("binding.cpp", "binding_registry.h")]
        if (src / "kernels").is_dir():
            wanted += [p for p in sorted((src / "kernels").rglob("*")) if p.suffix in SOURCE_SUFFIXES + HEADER_SUFFIXES]
    elif src.is_file():
        entry, wanted = src, [src]
    else:
        raise SolutionError(f"{src}: no such file or folder")
    if not entry.is_file():
        raise SolutionError(f"{src}: no model_new.py (a solution is a workspace folder or a model_new.py)")
    dest.mkdir(parents=True, exist_ok=True)
    files: dict[str, str] = {}
    for p in wanted:
        rel = "model_new.py" if p == entry else str(p.relative_to(src))
        if p.is_symlink():
            raise SolutionError(f"{rel} is a symbolic link; solution files must be regular files")
        if p.stat().st_size > MAX_FILE_BYTES:
            raise SolutionError(f"{rel} is larger than {MAX_FILE_BYTES >> 20} MiB")
        text = p.read_text(encoding="utf-8", errors="replace")
        files[rel] = text
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_text(text)
    kind = "inline" if is_inline_solution(files["model_new.py"]) else "workspace"
    return Solution(kind=kind, root=dest, origin=src, files=files)


def build_solution(sol: Solution, backend: Backend, timeout_s: float, policy: str = "strict",
                   quiet: bool = True) -> tuple[BuildResult, Finding | None]:
    """Build the snapshot: a workspace's kernels/ into `cuda_extension`, or each load_inline
    module into the module it names. Relaxed (KernelBench's rules): a module that does not build
    fails only where the solution calls load_inline for it, as torch's load_inline would raise
    there (a solution may catch that and fall back): the result is ok, with `module_errors`.
    `quiet`: the compilers wait while the device times, and a timer waits for them (build.build)."""
    from cuda_agent.harness.build.extension import build
    from cuda_agent.harness.build.sources import inline_sources, workspace_sources
    from cuda_agent.harness.static import extract_inlines

    if sol.kind == "workspace":
        return build(workspace_sources(sol.root, backend), backend, "cuda_extension", timeout_s=timeout_s,
                     quiet=quiet), None
    specs = extract_inlines(sol.model_new, policy)
    if isinstance(specs, Finding) or not specs:
        finding = specs if isinstance(specs, Finding) else None
        return BuildResult(ok=False, errors=str(finding or "model_new.py calls load_inline nowhere")), finding
    results = [build(inline_sources(spec.name, spec.cpp_sources, spec.cuda_sources, spec.functions,
                                    extra_cflags=tuple(spec.extra_cflags),
                                    extra_cuda_cflags=tuple(spec.extra_cuda_cflags),
                                    extra_ldflags=tuple(spec.extra_ldflags)),
                     backend, spec.name, timeout_s=timeout_s, quiet=quiet) for spec in specs]
    if policy == "strict":
        return results[0], None
    built = [r for r in results if r.ok]
    main = built[0] if built else replace(results[0], module_path=None)
    return replace(main, ok=True, compiled=sum(r.compiled for r in results), cached=sum(r.cached for r in results),
                   seconds=sum(r.seconds for r in results), waited_s=sum(r.waited_s for r in results),
                   modules={r.module_name: r.module_path for r in built if r.module_path},
                   module_errors={r.module_name: r.errors.strip().splitlines()[0] if r.errors.strip() else "see the log"
                                  for r in results if not r.ok}), None


def clear(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
