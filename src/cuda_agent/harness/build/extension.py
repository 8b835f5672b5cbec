"""Build a solution (a SourceBundle: sources.py) into a Python extension module with ninja, for the
device's own arch only.

Objects are cached by content, so an unchanged file is never compiled twice and an unchanged
solution loads at once. Layout of the cache (`cache_dir`, default `~/.cache/cuda_agent/build`):

    objects/<key>.o               key: source, every header of the bundle, flags, compilers, torch, arch
    modules/<linkkey>/<name>.so   linkkey: the object keys and the link flags
    pch/<pchkey>/pch.h(.gch)      a precompiled header of torch/pybind11 includes; pchkey: those
                                  includes, the flags, compilers, torch, arch (see pch.py)
    logs/<name>-<linkkey>.log     the full log of the last build of that module
    scratch/<name>@<host>@<pid>@<tmp>/  a staging copy of the bundle while it builds, removed afterwards
                                  (and by the next build, where a killed process left it)

`cuda-agent cache prune` (cache.py) trims it to a size, least recently used first.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType

from cuda_agent import home
from cuda_agent.devices import Backend
from cuda_agent.harness.build.cache import touch
from cuda_agent.harness.build.errors import summarize_errors
from cuda_agent.harness.build.pch import PCH_FAILURE, Pch, finish_pch_builds, pch_headers, start_pch_builds
from cuda_agent.harness.build.sources import SourceBundle
from cuda_agent.harness.result import BuildResult
from cuda_agent.harness.build.toolchain import FlagError, Toolchain, find_ninja, make_toolchain
from cuda_agent.harness.scratch import scratch_folder
from cuda_agent.measure import beside_timing
from cuda_agent.sandbox import kill_group
from cuda_agent.workspace import TEMPLATES

SAFE_PATH = re.compile(r"[A-Za-z0-9_+-]+(\.[A-Za-z0-9_+-]+)*(/[A-Za-z0-9_+-]+(\.[A-Za-z0-9_+-]+)*)*")
KEY_VERSION = "cuda-agent-build-1"  # bump to invalidate every cached object


# --- build --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class BuildPlan:
    """What one build needs: an object key per source, the module's key and where things go."""

    toolchain: Toolchain
    module_name: str
    cache: Path
    object_keys: dict[str, str]          # source path -> object key
    link_key: str
    missing: tuple[str, ...]             # sources whose object is not cached
    pch: dict[str, Pch] = field(default_factory=dict)  # source -> the precompiled header its includes allow
    pch_ready: frozenset[str] = frozenset()            # keys of those the cache holds: these are used

    def object_path(self, source: str) -> Path:
        return self.cache / "objects" / f"{self.object_keys[source]}.o"

    @property
    def module_path(self) -> Path:
        return self.cache / "modules" / self.link_key / f"{self.module_name}.so"

    @property
    def log_path(self) -> Path:
        return self.cache / "logs" / f"{self.module_name}-{self.link_key[:16]}.log"

    @property
    def pch_used(self) -> dict[str, Pch]:
        """Sources to compile now with a cached precompiled header."""
        return {s: p for s, p in self.pch.items() if s in self.missing and p.key in self.pch_ready}

    @property
    def pch_to_build(self) -> list[Pch]:
        """Precompiled headers that sources compiled now could use but the cache lacks."""
        wanted = {p.key: p for s, p in self.pch.items() if s in self.missing and p.key not in self.pch_ready}
        return list(wanted.values())


def build(bundle: SourceBundle, backend: Backend, module_name: str = "cuda_extension", *,
          timeout_s: float = 300, jobs: int | None = None, cache_dir: Path | None = None,
          quiet: bool = True) -> BuildResult:
    """Compile what the cache lacks and link the module; a full hit returns without starting ninja.
    The compilers run holding the device's lock shared (`quiet=False`: not), so that no timing on
    it runs beside them; the wait for a timer is `waited_s`, outside `seconds` and the time limit.

    A solution's failures (compiler errors, refused flags, timeout) come back as ok=False with short
    `errors`; a missing compiler or ninja raises, since no solution can fix that."""
    start = time.perf_counter()
    if not module_name.isidentifier():
        raise ValueError(f"module name {module_name!r} is not a valid Python identifier")
    result = BuildResult(ok=False, module_name=module_name)
    problem = bundle_problem(bundle, backend)
    if problem:
        return finish(result, start, errors=problem)
    try:
        toolchain = make_toolchain(backend, module_name, bundle.extra_cflags, bundle.extra_cuda_cflags,
                                   bundle.extra_ldflags)
    except FlagError as e:
        return finish(result, start, errors=str(e))
    plan = make_plan(bundle, toolchain, module_name, Path(cache_dir) if cache_dir else home.subdir("build"))
    result = replace(result, cached=len(plan.object_keys) - len(plan.missing))
    if plan.module_path.exists():
        touch(plan.module_path.parent)
        log = plan.log_path if plan.log_path.exists() else None
        return finish(result, start, ok=True, module_path=str(plan.module_path), log_path=str(log) if log else None)
    asked = time.perf_counter()
    with beside_timing(backend.device, quiet):
        waited = time.perf_counter() - asked
        result = replace(result, waited_s=waited)
        return run_build(bundle, plan, result, start + waited, timeout_s, job_count(jobs, len(plan.missing)))


def bundle_problem(bundle: SourceBundle, backend: Backend) -> str:
    """Why this bundle cannot be built on `backend`, or "" when it can be tried."""
    if not bundle.sources:
        return "nothing to build: add kernels/*.cpp (and *.cu on cuda) with your kernels and their bindings"
    unsafe = [p for p in bundle.files if not SAFE_PATH.fullmatch(p)]
    if unsafe:
        return f"{unsafe[0]}: file names may use letters, digits, '_', '-', '+' and '.', inside the workspace only"
    precompiled = [p for p in bundle.files if p.endswith((".gch", ".pch"))]
    if precompiled:  # g++ would read x.h.gch in place of x.h
        return f"{precompiled[0]}: precompiled headers are the harness's own; include the header itself"
    cuda_files = [p for p in bundle.sources if p.endswith(".cu")]
    if cuda_files and not backend.is_cuda:
        cpp = cuda_files[0][:-3] + ".cpp"
        return (f"{cuda_files[0]}: .cu files need the cuda backend, but this build is for cpu; write the kernel "
                f"in C++ ({cpp}) or evaluate with --device cuda")
    return ""


def make_plan(bundle: SourceBundle, toolchain: Toolchain, module_name: str, cache: Path, *,
              use_pch: bool = True) -> BuildPlan:
    """Object keys (any header change recompiles every file: simple and never stale) and the link key.

    A source's key names the precompiled header its includes allow, whether or not the cache holds it
    yet: the object is the same either way, so one compiled without it stays valid."""
    headers = "".join(f"{p}\0{bundle.files[p]}\0" for p in bundle.headers)
    pch = choose_pch(bundle, toolchain, cache.resolve() / "pch")
    keys = {}
    for src in bundle.sources:
        flags = toolchain.cuda_cflags if src.endswith(".cu") else toolchain.cflags
        uses = [f"pch={pch[src].key}"] if src in pch else []
        keys[src] = digest(KEY_VERSION, src, bundle.files[src], headers, *flags, toolchain.identity, *uses)
    link_key = digest(KEY_VERSION, *(f"{s}={k}" for s, k in keys.items()), *toolchain.ldflags, toolchain.identity)
    missing = tuple(s for s in bundle.sources if not (cache / "objects" / f"{keys[s]}.o").exists())
    ready = frozenset(p.key for p in pch.values() if use_pch and p.gch.exists())
    return BuildPlan(toolchain, module_name, cache, keys, link_key, missing, pch if use_pch else {}, ready)


def digest(*parts: str) -> str:
    """sha256 of the parts, each terminated so that ("ab", "c") and ("a", "bc") differ."""
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def job_count(jobs: int | None, to_compile: int) -> int:
    """`jobs`, else $CUDA_AGENT_BUILD_JOBS, else the cores this process may use; never more than
    there are objects to compile."""
    env = os.environ.get("CUDA_AGENT_BUILD_JOBS", "")
    if env and not env.isdigit():
        raise ValueError(f"CUDA_AGENT_BUILD_JOBS={env!r}: set it to a number of parallel compile jobs")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(jobs or int(env or 0) or cores, to_compile or 1))


def run_build(bundle: SourceBundle, plan: BuildPlan, result: BuildResult, start: float, timeout_s: float,
              jobs: int) -> BuildResult:
    """Stage the bundle in a scratch folder, run ninja there (and beside it, build the precompiled
    headers that the cache lacks, for later builds), keep what it compiled."""
    for sub in ("objects", "modules", "logs"):
        (plan.cache / sub).mkdir(parents=True, exist_ok=True)
    scratch = scratch_folder(plan.cache / "scratch", plan.module_name)
    touch(*(plan.object_path(s) for s in plan.object_keys if s not in plan.missing),
          *(p.folder for p in plan.pch_used.values()))
    try:
        stage(bundle, plan, scratch)
        pch_builds = start_pch_builds(plan.pch_to_build, plan.toolchain, scratch)
        returncode, output = run_ninja(scratch, jobs, timeout_s)
        notes = [*pch_notes(plan), *finish_pch_builds(pch_builds, start + timeout_s), *drop_damaged_pch(plan, output)]
        plan.log_path.write_text(f"# {plan.module_name}: ninja -j {jobs} in {scratch}\n"
                                 + "".join(f"{n}\n" for n in notes) + output)
        result = replace(result, log_path=str(plan.log_path))
        if returncode is None:
            return finish(result, start, errors=f"build timed out after {timeout_s:g}s ({len(plan.missing)} "
                                                f"file(s) to compile, {jobs} at a time); simplify heavy templates "
                                                "or includes")
        result = replace(result, compiled=keep_objects(plan, scratch))
        if returncode != 0 and plan.pch_used and PCH_FAILURE.search(output):
            return retry_without_pch(bundle, plan, result, start, timeout_s, jobs)
        if returncode != 0:
            return finish(result, start, errors=summarize_errors(
                output, bundle.files, str(plan.log_path), renames=error_renames(plan, scratch)))
        plan.module_path.parent.mkdir(parents=True, exist_ok=True)
        os.replace(scratch / "out" / f"{plan.module_name}.so", plan.module_path)
        return finish(result, start, ok=True, module_path=str(plan.module_path))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def retry_without_pch(bundle: SourceBundle, plan: BuildPlan, result: BuildResult, start: float, timeout_s: float,
                      jobs: int) -> BuildResult:
    """The compiler could not read a cached precompiled header (truncated, or damaged): drop it from
    the cache (the next build makes it again) and build the rest without any."""
    for pch in plan.pch_used.values():
        pch.gch.unlink(missing_ok=True)  # pch.h stays: a compile reading it now falls back to it
    retry = make_plan(bundle, plan.toolchain, plan.module_name, plan.cache, use_pch=False)
    left = max(timeout_s - (time.perf_counter() - start), 1)
    again = run_build(bundle, retry, replace(result, compiled=0), start, left, jobs)
    with open(retry.log_path, "a") as log:
        log.write(f"# built again without precompiled headers: the compiler could not read "
                  f"{', '.join(sorted(p.key[:16] for p in plan.pch_used.values()))}, now dropped\n")
    return replace(again, compiled=result.compiled + again.compiled)


def drop_damaged_pch(plan: BuildPlan, output: str) -> list[str]:
    """Remove the precompiled headers that g++ found to be no such thing (it compiled without them),
    so that the next build makes them again; notes for the log."""
    notes = []
    for pch in set(plan.pch_used.values()):
        if re.search(rf"^cc1plus: warning: {re.escape(str(pch.gch))}: not a PCH file", output, re.M):
            pch.gch.unlink(missing_ok=True)
            notes.append(f"# precompiled header {pch.key[:16]}: damaged, dropped from the cache")
    return notes


def stage(bundle: SourceBundle, plan: BuildPlan, scratch: Path) -> None:
    """A copy of the bundle (so its relative includes work) and the ninja file, in `scratch`."""
    for rel, text in bundle.files.items():
        (scratch / rel).parent.mkdir(parents=True, exist_ok=True)
        (scratch / rel).write_text(text)
    (scratch / "build.ninja").write_text(ninja_file(plan))


def ninja_file(plan: BuildPlan) -> str:
    """Compile edges for the sources the cache lacks, and one link edge over every object."""
    tc = plan.toolchain
    lines = ["ninja_required_version = 1.3", f"cxx = {ninja_value(shlex.quote(tc.cxx))}",
             f"cflags = {ninja_value(shlex.join(tc.cflags))}", f"ldflags = {ninja_value(shlex.join(tc.ldflags))}",
             "rule compile", "  command = $cxx $cflags -c $in -o $out",
             "rule compile_pch", "  command = $cxx $cflags -Winvalid-pch -include $pch -c $in -o $out",
             "rule link", "  command = $cxx -shared $in $ldflags -o $out"]
    if tc.nvcc:
        lines += [f"nvcc = {ninja_value(shlex.quote(tc.nvcc))}",
                  f"cuda_cflags = {ninja_value(shlex.join(tc.cuda_cflags))}",
                  "rule cuda_compile", "  command = $nvcc $cuda_cflags -c $in -o $out"]
    objects = []
    for src in plan.object_keys:
        if src in plan.missing:
            obj = f"obj/{plan.object_keys[src]}.o"
            pch = plan.pch_used.get(src)
            rule = "cuda_compile" if src.endswith(".cu") else "compile_pch" if pch else "compile"
            lines.append(f"build {obj}: {rule} {ninja_path(src)}")
            if pch:
                lines.append(f"  pch = {ninja_value(shlex.quote(str(pch.folder / 'pch.h')))}")
            objects.append(obj)
        else:
            objects.append(ninja_path(str(plan.object_path(src))))
    lines += [f"build out/{plan.module_name}.so: link {' '.join(objects)}", f"default out/{plan.module_name}.so"]
    return "\n".join(lines) + "\n"


def ninja_value(text: str) -> str:
    return text.replace("$", "$$")


def ninja_path(path: str) -> str:
    return path.replace("$", "$$").replace(" ", "$ ").replace(":", "$:")


def run_ninja(folder: Path, jobs: int, timeout_s: float) -> tuple[int | None, str]:
    """(return code, output) of ninja in `folder`; return code None when it ran out of time, after
    its whole process group (the compilers too) was killed."""
    env = {**os.environ, "LC_ALL": "C"}  # plain quotes in compiler messages
    proc = subprocess.Popen([find_ninja(), "-v", "-j", str(jobs)], cwd=folder, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
        return proc.returncode, out.decode(errors="replace")
    except subprocess.TimeoutExpired:
        kill_group(proc.pid)
        out, _ = proc.communicate()
        return None, out.decode(errors="replace")
    finally:
        if proc.poll() is None:
            kill_group(proc.pid)
            proc.wait()


def keep_objects(plan: BuildPlan, scratch: Path) -> int:
    """Move every object ninja finished into the cache (atomic, so concurrent builds are safe), even
    when another file failed: fixing one file then recompiles only that one. Returns how many."""
    kept = 0
    for src in plan.missing:
        staged = scratch / "obj" / f"{plan.object_keys[src]}.o"
        if staged.exists():
            os.replace(staged, plan.object_path(src))
            kept += 1
    return kept


def error_renames(plan: BuildPlan, scratch: Path) -> dict[str, str]:
    """Scratch paths and object names as the reader knows them: `kernels/relu.cpp`, `relu.cpp.o`."""
    import torch

    renames = {f"{scratch}/": "", f"{Path(torch.__file__).parent}/": "torch/"}
    for src, key in plan.object_keys.items():
        renames[str(plan.object_path(src))] = f"{src}.o"
        renames[f"obj/{key}.o"] = f"{src}.o"
    for pch in plan.pch_used.values():
        renames[str(pch.folder / "pch.h")] = f"<precompiled {' '.join(pch.headers)}>"
    return renames


def finish(result: BuildResult, start: float, **changes) -> BuildResult:
    """`result` with `changes` and the wall time since `start`."""
    return replace(result, seconds=time.perf_counter() - start, **changes)


# --- precompiled headers (pch.py builds them; the keys and the log are the build's) ---------------

def choose_pch(bundle: SourceBundle, toolchain: Toolchain, folder: Path) -> dict[str, Pch]:
    """The precompiled header each .cpp source's leading includes allow (see pch.pch_headers), keyed
    by those includes, the flags and the toolchain, kept in `folder`/<key>."""
    chosen = {}
    for src, headers in pch_headers(bundle.files, list(bundle.sources), toolchain).items():
        key = digest(KEY_VERSION, "pch", *headers, *toolchain.pch_cflags, toolchain.identity)
        chosen[src] = Pch(key, headers, folder / key)
    return chosen


def pch_notes(plan: BuildPlan) -> list[str]:
    """For the log: which source uses which precompiled header, and which compile without one."""
    notes = []
    for src, pch in plan.pch.items():
        if src in plan.missing:
            how = "used" if pch.key in plan.pch_ready else "not cached yet, compiled without it"
            notes.append(f"# precompiled header {pch.key[:16]} ({' '.join(pch.headers)}): {how} for {src}")
    return notes


def warm_pch(backend: Backend, cache_dir: Path | None = None, timeout_s: float = 600) -> list[str]:
    """Build the precompiled headers that the workspace example's binding files use, where the cache
    lacks them (for a harness's setup: a build otherwise makes them itself, beside its first compile),
    holding the device's lock shared as a build does. Returns what was done, one line per header."""
    files = {f"kernels/{f.name}": f.read_text() for f in (TEMPLATES / f"kernels_{backend.device}").iterdir()}
    bundle = SourceBundle({**files, "binding_registry.h": (TEMPLATES / "binding_registry.h").read_text()})
    toolchain = make_toolchain(backend, "cuda_extension")
    cache = Path(cache_dir) if cache_dir else home.subdir("build")
    pchs = list({p.key: p for p in choose_pch(bundle, toolchain, cache.resolve() / "pch").values()}.values())
    scratch = scratch_folder(cache / "scratch", "pch")
    try:
        missing = [p for p in pchs if not p.gch.exists()]
        with beside_timing(backend.device, quiet=bool(missing)):
            notes = finish_pch_builds(start_pch_builds(missing, toolchain, scratch), time.perf_counter() + timeout_s)
        return notes + [f"# precompiled header {p.key[:16]}: cached" for p in pchs if p not in missing]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def load_module(result: BuildResult) -> ModuleType:
    """Import the built module as `result.module_name` (also into sys.modules, so that
    `import cuda_extension` in model_new.py finds it)."""
    if not result.ok or not result.module_path:
        raise RuntimeError(f"cannot load a module that did not build: {result.reason}")
    import torch  # noqa: F401  (loads libc10/libtorch, which the module links against)

    loader = importlib.machinery.ExtensionFileLoader(result.module_name, result.module_path)
    spec = importlib.util.spec_from_file_location(result.module_name, result.module_path, loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    sys.modules[result.module_name] = module
    return module
