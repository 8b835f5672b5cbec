"""Compilers and flags for building a solution, as torch.utils.cpp_extension's load() would use them,
for the device's own architecture only, and the policy on which extra flags a solution may add.

Paths come from torch's cpp_extension helpers; a CPU-only torch (no CUDA_HOME) still gets a CUDA
toolchain from $CUDA_HOME or nvcc's location, so .cu files can be compiled on a machine without GPU.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from cuda_agent.devices import Backend

BASE_CFLAGS = ("-O3", "-std=c++17", "-fPIC")            # the reference layout's extra_cflags, plus -fPIC
BASE_CUDA_CFLAGS = ("-O3", "--use_fast_math", "-std=c++17")
ALLOWED_LIBRARIES = ("-lcublas", "-lcublasLt", "-lcudnn")


@dataclass(frozen=True)
class Toolchain:
    """Everything that decides what an object file contains, except the sources."""

    cxx: str                        # host compiler, absolute path
    nvcc: str | None                # None on the cpu backend
    cflags: tuple[str, ...]         # for .cpp files, extra_cflags included
    cuda_cflags: tuple[str, ...]    # for .cu files, extra_cuda_cflags included; () on cpu
    ldflags: tuple[str, ...]        # after the objects on the link line
    identity: str                   # compiler versions, torch and CUDA versions, arch
    pch_cflags: tuple[str, ...] = ()  # for a precompiled header: cflags without the module's name; ()
                                      # when the solution adds flags of its own (then it compiles without)


class FlagError(ValueError):
    """A solution's extra flag that the harness does not accept; the message says which and why."""


def make_toolchain(backend: Backend, module_name: str, extra_cflags: tuple[str, ...] = (),
                   extra_cuda_cflags: tuple[str, ...] = (), extra_ldflags: tuple[str, ...] = ()) -> Toolchain:
    """The toolchain for `backend`; raises FlagError for an extra flag outside the policy and
    RuntimeError when a compiler is missing (with what to install)."""
    extra_cflags, extra_cuda_cflags, extra_ldflags = (split_flags(f) for f in (extra_cflags, extra_cuda_cflags,
                                                                              extra_ldflags))
    check_cflags(extra_cflags, "extra_cflags")
    check_cuda_cflags(extra_cuda_cflags, backend)
    check_ldflags(extra_ldflags, backend)
    cxx = find_cxx()
    nvcc = find_nvcc() if backend.is_cuda else None
    common = common_flags(backend, module_name)
    cflags = (*BASE_CFLAGS, *common, *extra_cflags)
    cuda_cflags: tuple[str, ...] = ()
    if nvcc:
        cuda_cflags = (*nvcc_base_flags(), *BASE_CUDA_CFLAGS, "-Xcompiler", "-fPIC", "-ccbin", cxx,
                       *arch_flags(backend, extra_cuda_cflags), *common, *extra_cuda_cflags)
    ldflags = link_flags(backend, extra_ldflags)
    identity = "\n".join([compiler_version(cxx), compiler_version(nvcc) if nvcc else "no nvcc",
                          torch_identity(), f"arch={backend.arch or 'cpu'}"])
    # The module's name is left out so that every module shares one header: no torch or pybind11
    # header uses TORCH_EXTENSION_NAME, and g++ accepts a header built without a macro the file defines.
    pch_cflags = () if extra_cflags else tuple(f for f in cflags if not f.startswith("-DTORCH_EXTENSION_NAME="))
    return Toolchain(cxx, nvcc, cflags, cuda_cflags, ldflags, identity, pch_cflags)


# --- where things are ---------------------------------------------------------------------------

def find_cxx() -> str:
    """$CXX or c++, as torch's cpp_extension picks it."""
    name = os.environ.get("CXX", "c++")
    path = shutil.which(name)
    if path is None:
        raise RuntimeError(f"C++ compiler {name!r} not found: install g++ (apt-get install g++) or set $CXX")
    return path


def find_nvcc() -> str:
    path = Path(cuda_home()) / "bin" / "nvcc"
    if not path.exists():
        raise RuntimeError(f"nvcc not found at {path}: install the CUDA toolkit or set $CUDA_HOME")
    return str(path)


def find_ninja() -> str:
    """The ninja of the `ninja` Python package (beside this interpreter) or the one on $PATH."""
    beside = Path(sys.executable).parent / "ninja"
    path = str(beside) if beside.exists() else shutil.which("ninja")
    if path is None:
        raise RuntimeError("ninja not found: pip install ninja")
    return path


@functools.lru_cache(maxsize=None)
def compiler_include_dirs(cxx: str) -> tuple[str, ...]:
    """The folders `cxx` searches for <...> includes of its own (the standard library's, /usr/include),
    as `cxx -v` lists them."""
    out = subprocess.run([cxx, "-x", "c++", "-E", "-v", "-"], input="", capture_output=True, text=True,
                         timeout=30)
    lines = [line.strip() for line in out.stderr.splitlines()]
    if "#include <...> search starts here:" not in lines or "End of search list." not in lines:
        raise RuntimeError(f"{cxx} -v did not list its include folders:\n{out.stderr[-2000:]}")
    return tuple(lines[lines.index("#include <...> search starts here:") + 1:lines.index("End of search list.")])


@functools.lru_cache(maxsize=1)
def cuda_home() -> str:
    """torch's CUDA_HOME; for a CPU-only torch, $CUDA_HOME, /usr/local/cuda, or nvcc's install."""
    from torch.utils import cpp_extension

    candidates = [cpp_extension.CUDA_HOME, os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"),
                  "/usr/local/cuda"]
    nvcc = shutil.which("nvcc")
    if nvcc:
        candidates.append(str(Path(nvcc).resolve().parent.parent))
    for home in candidates:
        if home and (Path(home) / "bin" / "nvcc").exists() and (Path(home) / "include" / "cuda_runtime.h").exists():
            return home
    raise RuntimeError("no CUDA toolkit found (nvcc and cuda_runtime.h): install it or set $CUDA_HOME")


def include_dirs(backend: Backend) -> list[str]:
    """torch's include paths, Python.h's, and on cuda the toolkit's, $CUDNN_HOME's and those of the
    pip-installed cuDNN/cuBLAS (what include_paths("cuda") gives, without needing a CUDA torch)."""
    from torch.utils import cpp_extension

    dirs = list(cpp_extension.include_paths("cpu"))
    if backend.is_cuda:
        dirs.append(str(Path(cuda_home()) / "include"))
        dirs += [os.path.join(home, "include") for home in [cpp_extension.CUDNN_HOME] if home]
        dirs += [str(d / "include") for d in nvidia_wheel_dirs() if (d / "include").is_dir()]
    dirs.append(sysconfig.get_path("include", scheme="posix_prefix"))
    return dirs


def cuda_lib_dir() -> str:
    home = Path(cuda_home())
    return str(home / "lib64") if (home / "lib64").is_dir() else str(home / "lib")


def nvidia_wheel_dirs() -> list[Path]:
    """cuDNN and cuBLAS from the nvidia-* pip wheels that a CUDA torch depends on, where present."""
    spec = importlib.util.find_spec("nvidia")
    if spec is None or not spec.submodule_search_locations:
        return []
    roots = [Path(p) for p in spec.submodule_search_locations]
    return [root / name for root in roots for name in ("cudnn", "cublas") if (root / name).is_dir()]


# --- flags --------------------------------------------------------------------------------------

def common_flags(backend: Backend, module_name: str) -> list[str]:
    """Defines and include paths shared by the host compiler and nvcc."""
    import torch

    flags = [f"-DTORCH_EXTENSION_NAME={module_name}", "-DTORCH_API_INCLUDE_EXTENSION_H",
             f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"]
    # Older torch builds record pybind11's ABI tags; an extension must use the same ones.
    for name in ("COMPILER_TYPE", "STDLIB", "BUILD_ABI"):
        value = getattr(torch._C, f"_PYBIND11_{name}", None)
        if value is not None:
            flags.append(f'-DPYBIND11_{name}="{value}"')
    flags.append("-I.")  # the bundle's root, so kernels may include "binding_registry.h" directly
    for d in include_dirs(backend):
        flags += ["-isystem", d]
    return flags


def nvcc_base_flags() -> list[str]:
    from torch.utils import cpp_extension

    return list(cpp_extension.COMMON_NVCC_FLAGS)


def arch_flags(backend: Backend, extra_cuda_cflags: tuple[str, ...]) -> list[str]:
    """One -gencode for the device's own arch, unless the solution named it itself (e.g. sm_90a)."""
    if backend.arch is None:
        raise ValueError("the cuda backend needs its arch, e.g. Backend('cuda', arch='sm_90')")
    if any(f.startswith(("-arch", "--gpu-architecture", "-gencode", "--generate-code")) for f in extra_cuda_cflags):
        return []
    number = backend.arch.removeprefix("sm_")
    return [f"-gencode=arch=compute_{number},code=sm_{number}"]


def link_flags(backend: Backend, extra_ldflags: tuple[str, ...]) -> tuple[str, ...]:
    from torch.utils import cpp_extension

    flags = [f"-L{d}" for d in cpp_extension.library_paths("cpu")]
    flags += ["-lc10", "-ltorch", "-ltorch_cpu", "-ltorch_python"]
    if backend.is_cuda:
        flags += ["-lc10_cuda", "-ltorch_cuda", f"-L{cuda_lib_dir()}", "-lcudart"]
        flags += [f"-L{os.path.join(home, 'lib64')}" for home in [cpp_extension.CUDNN_HOME] if home]
        for lib in extra_ldflags:
            flags += library_flags(lib)
    return tuple(flags)


def library_flags(lib: str) -> list[str]:
    """-lNAME when the toolkit has libNAME.so; else the versioned file of the pip wheel, with an rpath."""
    name = f"lib{lib.removeprefix('-l')}.so"
    if (Path(cuda_lib_dir()) / name).exists():
        return [lib]
    for d in nvidia_wheel_dirs():
        found = sorted((d / "lib").glob(f"{name}*"))
        if found:
            return [str(found[0]), f"-Wl,-rpath,{d / 'lib'}"]
    return [lib]  # the linker will say it cannot find it


@functools.lru_cache(maxsize=None)
def compiler_version(path: str) -> str:
    """`path --version`, once per process: part of every cache key."""
    out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    return f"{path}: {out.stdout.strip()}"


def torch_identity() -> str:
    import torch

    return f"torch {torch.__version__} cuda {torch.version.cuda} python {sysconfig.get_config_var('EXT_SUFFIX')}"


# --- what a solution may add --------------------------------------------------------------------
# An allowlist, because a compiler flag can run programs (-wrapper, -fplugin=, -B, -ccbin) or read
# files (-I, -include, @file) on the harness's side of the sandbox; macros take numbers only, so that
# none renames what the static checks read (-Dempty_like=matmul).

_DEFINE = r"-D[A-Za-z_]\w*(=-?[\d.]+[fFuUlL]*)?|-U[A-Za-z_]\w*"
_CXX_FLAG = re.compile(
    rf"-O[0-3s]|-Ofast|-std=(c|gnu)\+\+(14|17|20|23)|{_DEFINE}|-W(no-)?[a-z][a-z0-9-]*(=\d+)?|-w|-g[0-3]?|-pthread"
    r"|-m(?!plugin)[a-z0-9-]+(=[\w.-]+)?|-f(?!plugin|dump|profile)[a-z0-9-]+(=[\w.-]+)?")
_NVCC_FLAG = re.compile(
    rf"-O[0-3]|--?use_fast_math|-lineinfo|--expt-relaxed-constexpr|--expt-extended-lambda|--extended-lambda|{_DEFINE}"
    r"|-std=c\+\+(14|17|20)|--?(maxrregcount|threads|t)=\d+|-res-usage|--resource-usage|--restrict|-m64|-w|-G"
    r"|--?(ftz|prec-div|prec-sqrt|fmad)=(true|false)|-Wno-deprecated-gpu-targets|--diag-suppress=[\d,]+"
    r"|--disable-warnings")
_PTXAS_VALUE = re.compile(r"-v|--verbose|-O[0-3]|--warn-on-spills|--warn-on-local-memory-usage|--maxrregcount=\d+"
                          r"|-dlcm=c[ag]")
_NVCC_PAIRED = ("-Xptxas", "--ptxas-options", "-Xcompiler", "--compiler-options", "-maxrregcount", "--maxrregcount",
                "-arch", "--gpu-architecture", "-gencode", "--generate-code")


def split_flags(flags: tuple[str, ...]) -> tuple[str, ...]:
    """Flags as torch's ninja file passes them: "-O3 --use_fast_math" is two flags, "" none."""
    return tuple(piece for flag in flags for piece in flag.split())


def check_cflags(flags: tuple[str, ...], what: str) -> None:
    for flag in flags:
        if not _CXX_FLAG.fullmatch(flag):
            raise FlagError(f"{what}: {flag!r} is not accepted; the harness takes optimisation (-O*, -f*), -m*, "
                            "warning (-W*), numeric defines (-DN=4, -U) and -std flags; include files from kernels/ "
                            "instead of passing -I/-include")


def check_cuda_cflags(flags: tuple[str, ...], backend: Backend) -> None:
    if not backend.is_cuda:
        return  # nvcc does not run on cpu, and a .cu file is refused on its own
    i = 0
    while i < len(flags):
        flag, value = flags[i], None
        name = flag.split("=", 1)[0]
        if name in _NVCC_PAIRED:
            if "=" in flag:
                value = flag.split("=", 1)[1]
            elif i + 1 < len(flags):
                i, value = i + 1, flags[i + 1]
            check_nvcc_paired(name, value, backend)
        elif not _NVCC_FLAG.fullmatch(flag):
            raise FlagError(f"extra_cuda_cflags: {flag!r} is not accepted; the harness takes -O*, --use_fast_math, "
                            "-lineinfo, --expt-* , -D/-U, -std, -Xptxas options and -Xcompiler with host flags")
        i += 1


def check_nvcc_paired(name: str, value: str | None, backend: Backend) -> None:
    """-Xptxas VALUE, -Xcompiler VALUE (host flags), -maxrregcount N, and arch flags."""
    if value is None:
        raise FlagError(f"extra_cuda_cflags: {name} needs a value")
    items = value.split(",")
    own = (backend.arch or "").removeprefix("sm_")
    if name in ("-Xptxas", "--ptxas-options"):
        bad, hint = [v for v in items if not _PTXAS_VALUE.fullmatch(v)], "ptxas takes -v, -O*, --warn-on-* and -dlcm"
    elif name in ("-Xcompiler", "--compiler-options"):
        bad, hint = [v for v in items if not _CXX_FLAG.fullmatch(v)], "host flags follow the extra_cflags policy"
    elif name in ("-maxrregcount", "--maxrregcount"):
        bad, hint = ([] if value.isdigit() else [value]), "it takes a number"
    else:  # an arch the solution names replaces ours, as with torch (e.g. sm_90a for wgmma)
        fits = value == "native" or (re.search(r"(sm|compute)_\d+", value) and re.fullmatch(r"[\w=,\[\]]+", value))
        bad, hint = ([] if fits else [value]), f"name an arch such as sm_{own or '90'} or sm_{own or '90'}a"
    if bad:
        raise FlagError(f"extra_cuda_cflags: {name} {value!r} is not accepted ({hint})")


def check_ldflags(flags: tuple[str, ...], backend: Backend) -> None:
    for flag in flags:
        if flag not in ALLOWED_LIBRARIES:
            raise FlagError(f"extra_ldflags: {flag!r} is not accepted; only {', '.join(ALLOWED_LIBRARIES)} "
                            "(cuBLAS for GEMM, cuDNN for convolutions) may be linked")
        if not backend.is_cuda:
            raise FlagError(f"extra_ldflags: {flag} is a CUDA library and the build is for the cpu backend; "
                            "drop it or evaluate with --device cuda")
