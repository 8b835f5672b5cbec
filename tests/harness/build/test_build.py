"""Real builds of the workspace example and of load_inline-style sources on the CPU: caching, short
compiler errors, refused flags and files, timeouts, the precompiled torch headers. One cold build is
shared by the whole file (it also leaves the precompiled header of the binding files in its cache)."""

from __future__ import annotations

import fcntl
import os
import shutil
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest
import torch

from cuda_agent.devices import Backend, lock_name, resolve_backend
from cuda_agent.harness.build.extension import build, choose_pch, job_count, load_module, make_plan, start_pch_builds
from cuda_agent.harness.build.sources import SourceBundle, inline_sources, workspace_sources
from cuda_agent.harness.build.errors import summarize_errors
from cuda_agent.harness.build.toolchain import (FlagError, arch_flags, check_cuda_cflags, cuda_home, make_toolchain,
                                          split_flags)
from cuda_agent.measure import device_lock
from cuda_agent.workspace import TEMPLATES

CPU = Backend("cpu")
H100 = Backend("cuda", arch="sm_90")  # nvcc compiles for an explicit arch without a GPU


def make_workspace(dest: Path, device: str = "cpu") -> Path:
    """The files of a fresh workspace that matter to the build: the harness files and the example."""
    (dest / "kernels").mkdir(parents=True)
    for name in ("binding.cpp", "binding_registry.h"):
        shutil.copyfile(TEMPLATES / name, dest / name)
    for f in (TEMPLATES / f"kernels_{device}").iterdir():
        shutil.copyfile(f, dest / "kernels" / f.name)
    return dest


def copy_workspace(src: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(src, tmp_path / "ws"))


def nvcc_works() -> bool:
    try:
        return bool(cuda_home())
    except RuntimeError:
        return False


needs_nvcc = pytest.mark.skipif(not nvcc_works(), reason="nvcc (the CUDA toolkit) is not installed")


@pytest.fixture(autouse=True)
def forget_loaded_modules():
    """load_module registers modules in sys.modules; keep other test files from seeing ours."""
    yield
    for name in ("cuda_extension", "add_one", "solution_7", "gpu_example"):
        sys.modules.pop(name, None)


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    """The CPU workspace example, built once into a cache private to this file."""
    root = tmp_path_factory.mktemp("build")
    ws = make_workspace(root / "ws")
    cache = root / "cache"
    result = build(workspace_sources(ws, CPU), CPU, cache_dir=cache)
    assert result.ok, result.errors
    return ws, cache, result


def test_workspace_example_builds_and_computes_relu(example):
    _, _, result = example
    assert result.compiled == 3 and result.cached == 0
    module = load_module(result)
    x = torch.randn(1000)
    torch.testing.assert_close(module.relu_forward(x), torch.relu(x))


def test_unchanged_solution_is_a_full_cache_hit(example):
    ws, cache, _ = example
    start = time.perf_counter()
    result = build(workspace_sources(ws, CPU), CPU, cache_dir=cache)
    elapsed = time.perf_counter() - start
    assert result.ok and result.compiled == 0 and result.cached == 3
    assert elapsed < 0.5 and result.seconds < 0.5


def test_editing_one_file_recompiles_only_that_file(example, tmp_path):
    ws, cache, first = example
    ws = copy_workspace(ws, tmp_path)
    relu = ws / "kernels" / "relu.cpp"
    relu.write_text(relu.read_text() + "\n// tuned\n")
    result = build(workspace_sources(ws, CPU), CPU, cache_dir=cache)
    assert result.ok, result.errors
    assert (result.compiled, result.cached) == (1, 2)
    assert result.module_path != first.module_path


def test_edited_workspace_binding_files_are_ignored(example, tmp_path):
    ws, cache, first = example
    ws = copy_workspace(ws, tmp_path)
    (ws / "binding.cpp").write_text('#include "binding_registry.h"\nPYBIND11_MODULE(cuda_extension, m) {}\n')
    (ws / "binding_registry.h").write_text("#error tampered\n")
    result = build(workspace_sources(ws, CPU), CPU, cache_dir=cache)
    assert result.ok and result.compiled == 0
    assert result.module_path == first.module_path


def test_syntax_error_names_file_and_line_briefly(example, tmp_path):
    ws, cache, _ = example
    ws = copy_workspace(ws, tmp_path)
    (ws / "kernels" / "broken.cpp").write_text("#include <cstdint>\n\nint twice(int x) {\n  int y = 2 * x\n"
                                               "  return y;\n}\n")
    result = build(workspace_sources(ws, CPU), CPU, cache_dir=cache)
    assert not result.ok
    assert "kernels/broken.cpp:5" in result.errors and ">" in result.errors  # the line, marked in context
    assert len(result.errors) < 3000
    assert result.errors.splitlines()[-1].startswith("1 error in total; full log: ")
    assert Path(result.log_path).exists()


def test_fixing_a_broken_file_recompiles_only_it(example, tmp_path):
    ws, cache, _ = example
    ws = copy_workspace(ws, tmp_path)
    extra = ws / "kernels" / "extra.cpp"
    extra.write_text('extern "C" int extra(int x) { return x +; }\n')
    assert not build(workspace_sources(ws, CPU), CPU, cache_dir=cache).ok
    extra.write_text('extern "C" int extra(int x) { return x + 1; }\n')
    result = build(workspace_sources(ws, CPU), CPU, cache_dir=cache)
    assert result.ok and (result.compiled, result.cached) == (1, 3)


def test_thousands_of_error_lines_come_back_short(tmp_path):
    body = "\n".join(f"int f{i}() {{ return undefined_{i}; }}" for i in range(300))
    result = build(SourceBundle({"kernels/many.cpp": body}), CPU, cache_dir=tmp_path)
    assert not result.ok
    assert len(result.errors) < 3000 and len(result.errors.splitlines()) < 40
    assert "300 errors in total" in result.errors
    assert "kernels/many.cpp:1:" in result.errors


def test_template_error_in_a_library_header_points_at_the_solution(tmp_path):
    source = "#include <algorithm>\n#include <list>\n\nvoid f() {\n  std::list<int> l;\n  std::sort(l.begin(), l.end());\n}\n"
    result = build(SourceBundle({"kernels/sorts.cpp": source}), CPU, cache_dir=tmp_path)
    assert not result.ok
    assert "required from kernels/sorts.cpp:6" in result.errors
    assert "> 6 |   std::sort(l.begin(), l.end());" in result.errors


def test_link_errors_come_back_short(example, tmp_path):
    ws, cache, _ = example
    ws = copy_workspace(ws, tmp_path)
    (ws / "kernels" / "twin.cpp").write_text('extern "C" void relu_launch(const float*, float*, long long, int) {}\n')
    result = build(workspace_sources(ws, CPU), CPU, cache_dir=cache)
    assert not result.ok
    assert "multiple definition of `relu_launch'" in result.errors
    assert len(result.errors) < 3000 and "obj/" not in result.errors


def test_cuda_file_on_cpu_backend_is_refused(example, tmp_path):
    ws, cache, _ = example
    ws = copy_workspace(ws, tmp_path)
    (ws / "kernels" / "fast.cu").write_text("__global__ void k() {}\n")
    result = build(workspace_sources(ws, CPU), CPU, cache_dir=cache)
    assert not result.ok and result.compiled == 0
    assert "kernels/fast.cu" in result.errors and "cuda backend" in result.errors


@pytest.mark.parametrize("flags", [{"extra_ldflags": ("-lpthread",)}, {"extra_ldflags": ("-Wl,-rpath,/tmp",)},
                                   {"extra_cflags": ("-fplugin=/tmp/evil.so",)},
                                   {"extra_cflags": ("-wrapper", "/bin/sh")}, {"extra_cflags": ("-I/etc",)},
                                   {"extra_cflags": ("-include", "/tmp/own_pch.h")}])
def test_flag_that_links_or_runs_foreign_code_is_refused(flags, tmp_path):
    bundle = SourceBundle({"kernels/k.cpp": "int k() { return 0; }\n"}, **flags)
    result = build(bundle, CPU, cache_dir=tmp_path)
    assert not result.ok and result.compiled == 0
    assert "not accepted" in result.errors
    assert not (tmp_path / "objects").exists()  # refused before anything ran


@pytest.mark.parametrize("flags", [("-ccbin", "/tmp/cc"), ("--compiler-bindir=/tmp",),
                                   ("-Xcompiler", "-wrapper,/bin/sh"), ("-Xcompiler=-fplugin=/tmp/p.so",),
                                   ("-Xptxas", "--unknown"), ("-I/etc",), ("-gencode=arch=compute_90;sh",), ("--keep",)])
def test_nvcc_flag_that_runs_or_reads_foreign_code_is_refused(flags):
    with pytest.raises(FlagError):
        check_cuda_cflags(split_flags(flags), H100)


def test_usual_nvcc_flags_are_accepted():
    flags = ("-O3 --use_fast_math", "", "-Xptxas", "-v,-O3", "-U__CUDA_NO_HALF_OPERATORS__", "-lineinfo",
             "--expt-extended-lambda", "-maxrregcount=64", "-gencode=arch=compute_90a,code=sm_90a", "-std=c++17")
    check_cuda_cflags(split_flags(flags), H100)
    assert arch_flags(H100, split_flags(flags)) == []  # the solution's own arch replaces ours
    assert arch_flags(H100, ()) == ["-gencode=arch=compute_90,code=sm_90"]


def test_flags_are_split_like_torch_load(tmp_path):
    """load_inline solutions pass "-O3 -DX=1" as one string and "" for nothing; torch accepts both."""
    bundle = SourceBundle({"kernels/k.cpp": "#if X != 1\n#error X not defined\n#endif\nint k() { return X; }\n"},
                          extra_cflags=("-O2 -DX=1", ""), extra_ldflags=("",))
    result = build(bundle, CPU, "flags_split", cache_dir=tmp_path)
    assert result.ok, result.errors


def test_cuda_libraries_are_refused_on_cpu(tmp_path):
    bundle = SourceBundle({"kernels/k.cpp": "int k() { return 0; }\n"}, extra_ldflags=("-lcublas",))
    result = build(bundle, CPU, cache_dir=tmp_path)
    assert not result.ok and "cpu backend" in result.errors


def test_inline_cpp_function_is_callable(tmp_path):
    bundle = inline_sources("add_one", ["torch::Tensor add_one(torch::Tensor x) { return x + 1; }"], None,
                            ["add_one"], extra_cflags=["-O2"])
    assert set(bundle.files) == {"main.cpp"} and bundle.extra_cflags == ("-O2",)
    result = build(bundle, CPU, "add_one", cache_dir=tmp_path)
    assert result.ok, result.errors
    module = load_module(result)
    torch.testing.assert_close(module.add_one(torch.zeros(4)), torch.ones(4))


def test_inline_sources_mirror_load_inline_layout():
    bundle = inline_sources("m", "int f(int x) { return x; }", ["__global__ void k() {}"], {"f": 'doc "q"'})
    main, cuda = bundle.files["main.cpp"], bundle.files["cuda.cu"]
    assert main.startswith("#include <torch/extension.h>\n")
    assert 'm.def("f", &f, "doc \\"q\\"");' in main and "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)" in main
    assert cuda.splitlines()[:3] == ["#include <torch/types.h>", "#include <cuda.h>", "#include <cuda_runtime.h>"]
    with pytest.raises(ValueError):
        inline_sources("not a name", [], None, None)


def test_cold_build_past_timeout_fails_with_reason(example, tmp_path):
    ws, _, _ = example
    result = build(workspace_sources(ws, CPU), CPU, cache_dir=tmp_path, timeout_s=0.5)
    assert not result.ok
    assert result.errors.startswith("build timed out after 0.5s")
    assert result.seconds < 10
    assert not any((tmp_path / "scratch").iterdir())  # the staging copy is cleaned up
    assert not any((tmp_path / "objects").iterdir())  # no half-written object is kept


def test_module_name_other_than_cuda_extension(tmp_path):
    ws = tmp_path / "ws"
    (ws / "kernels").mkdir(parents=True)
    (ws / "kernels" / "answer.cpp").write_text(
        '#include "binding_registry.h"\nstatic int answer() { return 42; }\n'
        'static void register_answer(pybind11::module& m) { m.def("answer", &answer); }\n'
        "REGISTER_BINDING(answer, register_answer);\n")
    result = build(workspace_sources(ws, CPU), CPU, "solution_7", cache_dir=tmp_path / "cache")
    assert result.ok, result.errors
    assert load_module(result).answer() == 42  # PyInit_solution_7, from the harness's binding.cpp


def test_loading_a_failed_build_raises(tmp_path):
    result = build(SourceBundle({"kernels/k.cpp": "int k( {\n"}), CPU, cache_dir=tmp_path)
    with pytest.raises(RuntimeError, match="did not build"):
        load_module(result)


@contextmanager
def device_timed_for(seconds: float) -> Iterator[None]:
    """Another thread times on the CPU backend's device (holds its lock alone) for `seconds`."""
    held, done = threading.Event(), threading.Event()

    def timer() -> None:
        with device_lock(lock_name("cpu")):
            held.set()
            done.wait(seconds)

    t = threading.Thread(target=timer)
    t.start()
    held.wait(10)
    try:
        yield
    finally:
        done.set()
        t.join(10)


def test_a_build_waits_while_the_device_times_and_the_wait_is_not_build_time(tmp_path):
    """Compilers beside timing slow a host-bound model's figure: the build starts once timing ends."""
    t0 = time.perf_counter()
    with device_timed_for(1.5):
        result = build(SourceBundle({"kernels/k.cpp": "int k( {\n"}), CPU, cache_dir=tmp_path)
    wall = time.perf_counter() - t0
    assert not result.ok and "k.cpp" in result.errors
    assert result.waited_s >= 1.2, result
    assert result.seconds <= wall - result.waited_s + 0.05


def test_a_build_with_quiet_off_or_a_full_cache_hit_does_not_wait(example, tmp_path):
    ws, cache, _ = example
    with device_timed_for(30):
        t0 = time.perf_counter()
        loud = build(SourceBundle({"kernels/k.cpp": "int k( {\n"}), CPU, cache_dir=tmp_path, quiet=False)
        hit = build(workspace_sources(ws, CPU), CPU, cache_dir=cache)  # no compiler runs: nothing to wait for
        assert time.perf_counter() - t0 < 20
    assert not loud.ok and loud.waited_s < 0.05
    assert hit.ok and hit.compiled == 0 and hit.waited_s == 0.0


def test_jobs_are_bounded_by_work_and_overridable(monkeypatch):
    assert job_count(8, 2) == 2
    assert job_count(None, 0) == 1
    monkeypatch.setenv("CUDA_AGENT_BUILD_JOBS", "1")
    assert job_count(None, 10) == 1
    monkeypatch.setenv("CUDA_AGENT_BUILD_JOBS", "many")
    with pytest.raises(ValueError, match="CUDA_AGENT_BUILD_JOBS"):
        job_count(None, 10)


# --- precompiled headers ------------------------------------------------------------------------

def binding_pch(ws: Path, cache: Path):
    """The precompiled header that the workspace's kernels/relu_binding.cpp uses, in `cache`."""
    plan = make_plan(workspace_sources(ws, CPU), make_toolchain(CPU, "cuda_extension"), "cuda_extension", cache)
    return plan.pch["kernels/relu_binding.cpp"]


def new_solution(ws: Path, tmp_path: Path) -> Path:
    """A copy of `ws` whose binding file differs, so that no cached object fits it."""
    ws = copy_workspace(ws, tmp_path)
    binding = ws / "kernels" / "relu_binding.cpp"
    binding.write_text(binding.read_text() + f"\n// solution {time.time_ns()}\n")
    return ws


def test_first_build_leaves_a_pch_that_a_new_solution_reuses(example, tmp_path):
    ws, cache, first = example
    pch = binding_pch(ws, cache)
    first_log = Path(first.log_path).read_text()
    assert "not cached yet, compiled without it for kernels/relu_binding.cpp" in first_log
    assert f"precompiled header {pch.key[:16]}: built in" in first_log
    before = pch.gch.stat()
    result = build(workspace_sources(new_solution(ws, tmp_path), CPU), CPU, cache_dir=cache)
    assert result.ok, result.errors
    assert result.compiled == 1
    log = Path(result.log_path).read_text()
    assert f"precompiled header {pch.key[:16]} (torch/types.h torch/csrc/utils/pybind.h): used for " \
           "kernels/relu_binding.cpp" in log
    assert f"-include {pch.folder}/pch.h -c kernels/relu_binding.cpp" in log
    assert "[-Winvalid-pch]" not in log  # g++ warns so when it skips a precompiled header it found
    assert (pch.gch.stat().st_ino, pch.gch.stat().st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    x = torch.randn(100)
    torch.testing.assert_close(load_module(result).relu_forward(x), torch.relu(x))


def test_object_compiled_with_the_pch_is_the_same_as_without(example, tmp_path):
    """The same source in a cache holding only the precompiled header: the object is byte for byte
    the one the first build compiled without it."""
    ws, cache, _ = example
    pch, other = binding_pch(ws, cache), tmp_path / "cache"
    twin = binding_pch(ws, other)
    twin.folder.mkdir(parents=True)
    shutil.copyfile(pch.folder / "pch.h", twin.folder / "pch.h")
    os.link(pch.gch, twin.gch)  # 500 MB: shared, not copied
    result = build(workspace_sources(ws, CPU), CPU, cache_dir=other)
    assert result.ok and result.compiled == 3, result.errors
    assert "used for kernels/relu_binding.cpp" in Path(result.log_path).read_text()
    key = make_plan(workspace_sources(ws, CPU), make_toolchain(CPU, "cuda_extension"), "cuda_extension", cache)
    obj = key.object_path("kernels/relu_binding.cpp")
    assert (other / "objects" / obj.name).read_bytes() == obj.read_bytes()


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_damaged_pch_in_the_cache_does_not_break_a_build(example, tmp_path, damage):
    """g++ skips a file that is no precompiled header; one cut short stops it, and the build runs
    again without. Either way the build succeeds and the damaged file leaves the cache."""
    ws, cache, _ = example
    good = binding_pch(ws, cache)
    bundle = SourceBundle({"kernels/k.cpp": "#include <torch/types.h>\n#include <torch/csrc/utils/pybind.h>\n\n"
                                            "int k() { return 1; }\n"})
    bad = choose_pch(bundle, make_toolchain(CPU, "cuda_extension"), (tmp_path / "cache" / "pch").resolve())
    bad = bad["kernels/k.cpp"]
    assert bad.key == good.key
    bad.folder.mkdir(parents=True)
    shutil.copyfile(good.folder / "pch.h", bad.folder / "pch.h")
    with open(good.gch, "rb") as f:
        bad.gch.write_bytes(b"not a precompiled header\n" * 100 if damage == "garbage" else f.read(4096))
    result = build(bundle, CPU, cache_dir=tmp_path / "cache")
    assert result.ok, result.errors
    assert not bad.gch.exists()
    log = Path(result.log_path).read_text()
    assert ("damaged, dropped from the cache" if damage == "garbage" else "now dropped") in log


def test_errors_in_a_file_compiled_with_the_pch_name_its_lines(example, tmp_path):
    ws, cache, _ = example
    ws = copy_workspace(ws, tmp_path)
    binding = ws / "kernels" / "relu_binding.cpp"
    text = binding.read_text().replace("auto y = torch::empty_like(x);", "auto y = torch::empty_like(x)\n  int q = 1;")
    binding.write_text(text + "static void sizes(const torch::Tensor& x) { std::vector<int> v = x.sizes(); }\n")
    lines = binding.read_text().splitlines()
    result = build(workspace_sources(ws, CPU), CPU, cache_dir=cache)
    assert not result.ok
    assert "used for kernels/relu_binding.cpp" in Path(result.log_path).read_text()
    assert f"kernels/relu_binding.cpp:{lines.index('  int q = 1;') + 1}: error: expected" in result.errors
    assert f"kernels/relu_binding.cpp:{len(lines)}: error: conversion from 'c10::IntArrayRef'" in result.errors
    assert "pch" not in result.errors.replace(result.log_path, "")


def test_only_leading_torch_includes_choose_a_pch():
    """A file gets the precompiled header only when it begins with exactly those includes: then g++
    sees the same headers in the same order. Anything before them, or another order, and it does not."""
    toolchain = make_toolchain(CPU, "cuda_extension")
    head = "#include <torch/types.h>\n#include <torch/csrc/utils/pybind.h>\n"
    files = {
        "kernels/a.cpp": "// a\n/* more\n */\n#pragma once\n" + head + "int a();\n",
        "kernels/b.cpp": '#include "../b.h"\nint b();\n',                  # through a header of includes only
        "b.h": "#pragma once\n#include <torch/extension.h>\n#include <vector>\n",
        "kernels/c.cpp": "#define TORCH_ASSERT_NO_OPERATORS\n" + head,         # a macro before: not the same
        "kernels/d.cpp": "#include <torch/csrc/utils/pybind.h>\n#include <torch/types.h>\n",  # other order
        "kernels/e.cpp": "#include <vector>\n" + head,                         # something else first
        "kernels/f.cu": head,                                                  # nvcc takes none
    }
    chosen = choose_pch(SourceBundle(files), toolchain, Path("/cache/pch"))
    assert {src: pch.headers for src, pch in chosen.items()} == {
        "kernels/a.cpp": ("torch/types.h", "torch/csrc/utils/pybind.h"), "kernels/b.cpp": ("torch/extension.h",)}


def test_solution_flags_or_a_stand_in_torch_header_turn_the_pch_off():
    head = "#include <torch/types.h>\n#include <torch/csrc/utils/pybind.h>\n"
    plain = make_toolchain(CPU, "cuda_extension")
    assert choose_pch(SourceBundle({"kernels/a.cpp": head}), plain, Path("/p"))
    flagged = make_toolchain(CPU, "cuda_extension", ("-DN=4",))
    assert choose_pch(SourceBundle({"kernels/a.cpp": head}, extra_cflags=("-DN=4",)), flagged, Path("/p")) == {}
    # -I. finds the bundle's c10/macros/Macros.h before torch's: the shared header was built with torch's
    stand_in = SourceBundle({"kernels/a.cpp": head, "c10/macros/Macros.h": "#pragma once\n"})
    assert choose_pch(stand_in, plain, Path("/p")) == {}


def test_pch_another_process_is_building_is_not_built_twice(tmp_path):
    toolchain = make_toolchain(CPU, "cuda_extension")
    bundle = SourceBundle({"kernels/a.cpp": "#include <torch/extension.h>\n"})
    pch = choose_pch(bundle, toolchain, tmp_path / "pch")["kernels/a.cpp"]
    pch.folder.parent.mkdir(parents=True)
    with open(pch.folder.parent / f"{pch.key}.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        assert start_pch_builds([pch], toolchain, tmp_path / "scratch") == []


def test_precompiled_header_files_in_a_solution_are_refused(tmp_path):
    bundle = SourceBundle({"kernels/k.cpp": '#include "k.h"\nint k() { return K; }\n', "kernels/k.h": "#define K 1\n",
                           "kernels/k.h.gch": "gpch.013"})
    result = build(bundle, CPU, cache_dir=tmp_path)
    assert not result.ok and result.compiled == 0
    assert "kernels/k.h.gch: precompiled headers are the harness's own" in result.errors


def test_nvcc_error_format_is_parsed():
    log = 'kernels/relu.cu(4): error: expected a ";"\n      x[i] = foo;\n\n1 error detected in ...\n'
    text = summarize_errors(log, {"kernels/relu.cu": "a\nb\nc\nint i = 0\nx[i] = foo;\n"}, "/log")
    assert text.startswith('kernels/relu.cu:4: error: expected a ";"')
    assert ">" in text and "1 error in total; full log: /log" in text


@needs_nvcc
def test_nvcc_syntax_error_names_file_and_line(tmp_path):
    bundle = SourceBundle({"kernels/bad.cu": "__global__ void k(float* x) {\n  int i = threadIdx.x\n"
                                             "  x[i] = 0.f;\n}\n"})
    result = build(bundle, H100, cache_dir=tmp_path)
    assert not result.ok and "kernels/bad.cu:3" in result.errors and len(result.errors) < 3000


@needs_nvcc
def test_cuda_example_compiles_with_nvcc_without_gpu(tmp_path):
    """The cuda workspace example compiles for sm_90 here; with a CPU-only torch only the link to
    torch's CUDA libraries (absent from that wheel) can fail."""
    ws = make_workspace(tmp_path / "ws", "cuda")
    bundle = workspace_sources(ws, H100)
    if torch.version.cuda is None:  # the CPU wheel lacks this generated header; stand in for it
        bundle.files["c10/cuda/impl/cuda_cmake_macros.h"] = "#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n"
    result = build(bundle, H100, cache_dir=tmp_path / "cache")
    assert result.compiled == 3, result.errors
    assert "-gencode=arch=compute_90,code=sm_90" in Path(result.log_path).read_text()
    if torch.version.cuda is None:
        assert not result.ok and "cannot find -lc10_cuda" in result.errors
    else:
        assert result.ok, result.errors


@pytest.mark.cuda
def test_cuda_example_runs_on_the_gpu(tmp_path):
    backend = resolve_backend("cuda")
    ws = make_workspace(tmp_path / "ws", "cuda")
    result = build(workspace_sources(ws, backend), backend, "gpu_example", cache_dir=tmp_path / "cache")
    assert result.ok, result.errors
    x = torch.randn(1 << 20, device="cuda")
    torch.testing.assert_close(load_module(result).relu_forward(x), torch.relu(x))
