"""What a build compiles: a solution's files as a `SourceBundle` (sources, headers and the extra
flags it asks for), from a workspace (kernels/, with the harness's own binding files) or from
load_inline's arguments (the files torch would write). extension.py builds a bundle."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from cuda_agent.devices import Backend
from cuda_agent.workspace import HARNESS_FILES, TEMPLATES

SOURCE_SUFFIXES = (".cpp", ".cu")
HEADER_SUFFIXES = (".h", ".cuh", ".hpp")


@dataclass(frozen=True)
class SourceBundle:
    """The files of one solution (relative path -> text) and the extra flags it asks for."""

    files: dict[str, str]
    extra_cflags: tuple[str, ...] = ()
    extra_cuda_cflags: tuple[str, ...] = ()
    extra_ldflags: tuple[str, ...] = ()   # only -lcublas -lcublasLt -lcudnn are accepted

    @property
    def sources(self) -> list[str]:
        """The files compiled into objects (.cpp and .cu), sorted."""
        return sorted(p for p in self.files if p.endswith(SOURCE_SUFFIXES))

    @property
    def headers(self) -> list[str]:
        return sorted(p for p in self.files if p.endswith(HEADER_SUFFIXES))


def workspace_sources(workspace: str | Path, backend: Backend) -> SourceBundle:
    """kernels/*.cpp, *.cu and headers, the same in the workspace root, and the harness's own
    binding.cpp and binding_registry.h (a workspace's copies are ignored).

    .cu files are kept on the cpu backend too, so that build() refuses them by name."""
    del backend  # the same files on both backends; build() decides what each may compile
    root = Path(workspace)
    files: dict[str, str] = {}
    for folder, prefix in ((root / "kernels", "kernels/"), (root, "")):
        for path in sorted(folder.glob("*")):
            wanted = path.suffix in (*SOURCE_SUFFIXES, *HEADER_SUFFIXES) and path.name not in HARNESS_FILES
            if wanted and path.is_file():
                files[prefix + path.name] = path.read_text(errors="replace")
    binding = (TEMPLATES / "binding.cpp").read_text()
    # The template names the module cuda_extension; the define lets build() choose another name.
    files["binding.cpp"] = binding.replace("PYBIND11_MODULE(cuda_extension,", "PYBIND11_MODULE(TORCH_EXTENSION_NAME,")
    files["binding_registry.h"] = (TEMPLATES / "binding_registry.h").read_text()
    return SourceBundle(files, extra_ldflags=libraries_included(files))


_LIBRARY_HEADERS = {"-lcublas": ("cublas_v2.h", "cublas_api.h"), "-lcublasLt": ("cublasLt.h",), "-lcudnn": ("cudnn.h",)}


def libraries_included(files: dict[str, str]) -> tuple[str, ...]:
    """The allowed libraries (cuBLAS, cuBLASLt, cuDNN) whose headers a workspace's sources include:
    the workspace layout has no link flags of its own, so the build links what is used."""
    text = "\n".join(files.values())
    return tuple(lib for lib, headers in _LIBRARY_HEADERS.items()
                 if any(re.search(rf'#\s*include\s*[<"]{re.escape(h)}[>"]', text) for h in headers))


def inline_sources(name: str, cpp_sources: str | list[str], cuda_sources: str | list[str] | None,
                   functions: list[str] | dict[str, str] | None, extra_cflags: tuple[str, ...] | list[str] = (),
                   extra_cuda_cflags: tuple[str, ...] | list[str] = (),
                   extra_ldflags: tuple[str, ...] | list[str] = ()) -> SourceBundle:
    """The files torch's load_inline would write: main.cpp (torch/extension.h, the C++ sources and a
    PYBIND11_MODULE binding each of `functions`) and cuda.cu (CUDA includes and the CUDA sources).

    `name` must be a valid module name, as for load_inline; the module is named by build()."""
    if not name.isidentifier():
        raise ValueError(f"load_inline name {name!r} is not a valid Python module name")
    cpp = [cpp_sources] if isinstance(cpp_sources, str) else list(cpp_sources)
    cuda = [cuda_sources] if isinstance(cuda_sources, str) else list(cuda_sources or [])
    files = {"main.cpp": "\n".join(["#include <torch/extension.h>", *cpp, *module_definition(functions)])}
    if cuda:
        includes = ["#include <torch/types.h>", "#include <cuda.h>", "#include <cuda_runtime.h>"]
        files["cuda.cu"] = "\n".join([*includes, *cuda])
    return SourceBundle(files, tuple(extra_cflags), tuple(extra_cuda_cflags), tuple(extra_ldflags))


def module_definition(functions: str | list[str] | dict[str, str] | None) -> list[str]:
    """PYBIND11_MODULE lines binding each function under its own name (docstring: its name)."""
    if functions is None:
        return []
    docs = {functions: functions} if isinstance(functions, str) else (
        dict(functions) if isinstance(functions, dict) else {f: f for f in functions})
    lines = ["PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {"]
    for fn, doc in docs.items():
        if not re.fullmatch(r"[A-Za-z_][\w:]*", fn):
            raise ValueError(f"load_inline function {fn!r} is not a C++ function name")
        lines.append(f'  m.def("{fn}", &{fn}, "{c_string(doc)}");')
    return [*lines, "}"]


def c_string(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
