"""Static checks of a solution before it is built: what model_new.py and the C++/CUDA sources may do.

The harness's verdict is a reward, so a policy will try every trick to fool it. These checks read
the sources (the Python AST, and C++/CUDA text with comments and strings blanked, string literals
read decoded where a name in one counts) and run nothing.

Two policies
------------
strict (default; the CUDA Agent paper's rules)
    model_new.py may import torch, torch.nn, math, typing and the extension (`cuda_extension`, or
    load_inline from torch.utils.cpp_extension). ModelNew subclasses nn.Module only. __init__ may
    construct nn modules to hold parameters (so load_state_dict takes the reference's weights),
    create and initialise tensors and register buffers. forward, and every other method and
    module-level helper, may call only: the extension, ModelNew's own methods, module-level
    functions, allocation (torch.empty, empty_like, empty_strided, zeros, ones, full, arange, ...),
    metadata and views (size, shape, stride, view, reshape, permute, contiguous, ...), moves and
    casts (to, float, half, ...), and harmless builtins (len, range, int, min, max, isinstance,
    print, ...). Not allowed: torch or torch.nn.functional computation, tensor methods that compute
    (x.sum(), x.relu(), x.add_(...)), Python operators on tensors (`@` always; + - * / ... where an
    operand is a tensor), indexing with a tensor, writing into a tensor, calling a submodule
    (self.conv(x)), and keeping state across calls.
    C++/CUDA may use ATen/torch only to allocate (torch::empty, empty_like, zeros, at::empty*,
    TensorOptions) and read metadata (sizes, strides, numel, data_ptr, scalar_type, options, ...),
    plus TORCH_CHECK, AT_DISPATCH_* macros, CUDA guards and the current stream and cuBLAS handle.
    C++ may not cast or copy tensors (.to, .copy_, .clone): do it in the kernel. Libraries:
    cuBLAS (GEMM) and cuDNN (convolutions) only, headers from an allowlist. model_new.py defines
    no class but ModelNew. Copies of get_inputs/get_init_inputs may compute (the harness uses
    the reference's own), but nothing may call them.

relaxed (KernelBench's rules)
    What KernelBench accepts and the runtime can judge: unreplaced torch operations (torch.*,
    torch.nn.functional, tensor methods, operators, calling submodules), ATen calls and casts from
    C++ and any library header not refused below; helper classes subclassing nn.Module, torch.nn's
    module classes, torch.autograd.Function or each other; try/except/finally, with-statements
    (torch.no_grad, autocast, torch.cuda.device), global, imports inside functions (judged like any
    import), decorators (judged as the calls they are), code at module level and in module-level
    if/try/for blocks; grad modes, torch.autograd.Function and grad, TorchScript's script and trace,
    torch.cuda.synchronize, torch.cuda.amp; streams, events and CUDA graphs (torch.cuda.Stream,
    stream, default_stream, Event, CUDAGraph, graph, graph_pool_handle); torch.backends.* flags, set_float32_matmul_precision and
    set_flush_denormal (they change the solution's own process only: the reference and the
    baselines run in another, see tests/hacks/cpu/relaxed_global_flags); setting instance state
    (self.conv.weight.data = ..., param.requires_grad = False, ctx.shape = ... in an autograd
    Function); hasattr(torch, "name"); nn.init's fan helpers; of os, paths (os.path.join, dirname,
    expanduser, exists, ...), os.getpid, os.cpu_count, os.environ.get anywhere, and os.makedirs and
    os.environ writes at module level and in __init__ (build folders and flags, as released solutions
    use them; inside functions they would carry state from call to call). load_inline may be called any number
    of times, anywhere (inside try/except, in a function), each call's arguments literal strings or
    names bound once to them at module level or in the calling function; each name is built as a
    module of its own, and a module that fails to build makes load_inline raise in the child, where
    the solution may catch it, as under torch. What this leaves to the runtime: the outputs (fresh
    inputs, replayed and near-duplicate input sets, outputs checked after timed calls, inputs
    unchanged, plain tensors on the task's device, a scale-aware bound for tiny outputs) and the
    timing (host time charged on a GPU, work on other streams charged). For graphs and streams that
    means: a graph replayed on the inputs it captured is wrong on the next input set, a graph's static
    output returned as it is changes when the next call runs (both fail correctness with that
    reason), and work on a side stream is charged to every timed call (tests/hacks/cuda/relaxed_graph_*,
    relaxed_stream_deferred).
    Still refused under relaxed, as under strict, because the runtime cannot police them:
    torch.cuda.set_stream and ExternalStream (the harness's timer would follow the solution's stream),
    make_graphed_callables, torch.compile (compiler processes and caches outside the sandbox's folder), torch.jit.fork,
    seeds and RNG state, torch.set_* other than the flags above, and every item of the list below.

Both policies forbid
    os (relaxed: but the names above), sys, subprocess, threading, ctypes, importlib, inspect, time, numpy, triton and every
    other import; eval, exec, compile, __import__, getattr/setattr/delattr, globals, locals, vars,
    open, dunder attributes (x.__class__, torch.__dict__) and private ones; torch.ops, torch._C,
    torch.library, torch.utils (but load_inline), torch.cuda streams/events/graphs (relaxed: but the
    above), torch.testing, torch.allclose, seeds and RNG state, torch.compile, storing a module in a
    variable (t = torch);
    async code and generators; assigning attributes of classes and modules (monkey-patching:
    torch.randn, torch.cuda.Event.elapsed_time, torch.Tensor's methods), hooks, mutable or
    computed default arguments, class decorators, classes that subclass torch.Tensor or the
    reference Model, overriding nn.Module's methods, mutating module-level containers.
    Strict alone also forbids: torch.backends, grad modes, torch.autograd, torch.jit,
    torch.cuda.synchronize, torch.set_*; try/except/finally, with, global, nonlocal, yield; imports
    inside functions; decorators (staticmethod excepted); classes other than ModelNew; module-level
    code beyond imports, constants, functions, classes and the one load_inline call.
    In C++/CUDA: threads and processes (std::thread, std::async, pthread, fork, exec*, system,
    popen, OpenMP, host callbacks, glibc's and libstdc++'s other creators (_Fork, daemon, clone3,
    posix_spawn*, __gthread_*), ATen's thread pools (at::parallel_for, at::set_num_threads,
    at::launch)), asm labels and the attributes and pragmas that bind a declaration to another symbol
    (weakref, alias, redefine_extname), inline assembly that calls, jumps out, makes system calls,
    names a symbol or uses assembler directives (asm statements with operands are allowed: static/asm.py),
    exiting the process (exit, abort, quick_exit, signals), the
    Python interpreter (Py*, PyObject, pybind11 eval/exec/import/attr/object), files, the
    environment and dynamic loading, the dispatcher (dispatch keys, TORCH_LIBRARY), PyTorch's
    global state, stream/graph/event creation, device-wide synchronisation and device state,
    run-time compilation, token pasting (##), macro-built includes, non-ASCII code, includes that
    leave the solution, and, in a load_inline call, link flags beyond -lcublas/-lcublasLt/-lcudnn
    and compile flags that pull in code (-I, -include, -L, -D with a non-numeric value, ...).

What static analysis cannot know
    Which values are tensors is inferred by name; an operator on a tensor the checker cannot see
    as one, an ATen call reached by an overload the author declared themselves (C++
    argument-dependent lookup), C++ operators on tensors (a + b), and what a kernel does with its
    pointers (writing its inputs, caching across calls) are left to the runtime checks: while
    forward runs, every PyTorch operator that reaches the dispatcher is checked there
    (harness/workers/runtime.py), and correctness is tested on fresh inputs. The static checks are the
    first line, with messages that say what to do instead; the runtime check is the backstop.

Rule tables: rules.py. Mechanics: python.py (with python_module.py, python_defs.py, python_expr.py,
python_names.py and python_values.py), cpp.py (with cpp_text.py, the source as the compiler sees it; literals.py,
string literals decoded; asm.py, inline assembly), and inline.py (reading load_inline's arguments).

Rule ids
    model_new.py: syntax, unicode-identifier, bidi-control, import-forbidden, import-functional,
    import-star, import-location, reference-import, reference-model, model-new-missing,
    model-new-base, forward-missing, class-def, class-body, dunder-method,
    override-module-method, decorator, default-argument, module-code, module-alias,
    builtin-forbidden, undefined-name, dunder-access, private-access, hook, torch-forbidden,
    torch-compute, torch-functional, tensor-method, tensor-operator, tensor-index, tensor-write,
    tensor-builtin, submodule-call, indirect-call, monkey-patch, state-in-forward, try-except,
    with-statement, global-statement, async-generator, load-inline-placement.
    C++/CUDA: cpp-torch-compute, cpp-library, cpp-include, cpp-threads-process, cpp-exit,
    cpp-python, cpp-files, cpp-dispatcher, cpp-torch-state, cpp-streams, cpp-code-loading,
    cpp-namespace, cpp-token-paste, cpp-obfuscation, cpp-asm-label, cpp-asm, bidi-control.
    load_inline: inline-unresolvable, inline-multiple, inline-flags, inline-functions (strict only).
"""

from __future__ import annotations

from cuda_agent.harness.result import Finding, StaticReport
from cuda_agent.harness.static.cpp import check_cpp
from cuda_agent.harness.static.cpp_text import declared_names, prepare
from cuda_agent.harness.static.inline import (InlineSpec, check_inline_flags, extract_inline, extract_inlines,
                                              is_inline_solution)
from cuda_agent.harness.static.python import check_python
from cuda_agent.harness.static.rules import POLICIES, Policy

__all__ = ["Policy", "InlineSpec", "check_python", "check_cpp", "check_solution", "extract_inline",
           "extract_inlines", "is_inline_solution"]

CPP_SUFFIXES = (".cu", ".cuh", ".cpp", ".cc", ".cxx", ".c", ".h", ".hpp", ".hh", ".inl")
HARNESS_FILES = ("binding.cpp", "binding_registry.h")   # the harness builds its own copies


def check_solution(files: dict[str, str], policy: Policy = "strict") -> StaticReport:
    """Check a whole solution (relative path -> text): model_new.py, every C/C++/CUDA file, and
    the C++/CUDA strings and flags of a load_inline call."""
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}: use one of {POLICIES}")
    findings: list[Finding] = []
    model_new = files.get("model_new.py")
    if model_new is None:
        findings.append(Finding("model-new-missing", "the solution has no model_new.py", "model_new.py"))
    else:
        findings += check_python(model_new, "model_new.py", policy).findings
    sources = {p: t for p, t in sorted(files.items()) if p.endswith(CPP_SUFFIXES) and p not in HARNESS_FILES}
    declared = set().union(*(declared_names(prepare(t)) for t in sources.values()))
    for path, text in sources.items():
        findings += check_cpp(text, path, policy, local_headers=set(sources), declared=declared).findings
    if model_new is not None and is_inline_solution(model_new):
        findings += check_inline(model_new, policy)
    return StaticReport(ok=not findings, findings=findings, policy=policy)


def check_inline(model_new: str, policy: Policy) -> list[Finding]:
    """The load_inline calls' strings, scanned like files, and their flags and function names."""
    specs = extract_inlines(model_new, policy)
    if isinstance(specs, Finding):
        return [specs]
    findings: list[Finding] = []
    for spec in specs:
        findings += check_inline_spec(spec, policy, spec.name if len(specs) > 1 else "")
    return findings


def check_inline_spec(spec: InlineSpec, policy: Policy, module: str) -> list[Finding]:
    parts = {"cpp_sources": spec.cpp_sources, "cuda_sources": spec.cuda_sources}
    named = {inline_label(key, i, len(texts), module): text for key, texts in parts.items()
             for i, text in enumerate(texts)}
    declared = set().union(*(declared_names(prepare(t)) for t in named.values()))
    findings = check_inline_flags(spec)
    for label, text in named.items():
        findings += check_cpp(text, label, policy, local_headers=set(), declared=declared).findings
    missing = [f for f in spec.functions or [] if f not in declared]
    if missing and policy == "strict":  # relaxed: the build fails, and load_inline raises that in the child
        findings.append(Finding("inline-functions", f"load_inline functions {', '.join(missing)} are not declared "
                                "in cpp_sources/cuda_sources: bind only functions your sources define",
                                "model_new.py", spec.line))
    return findings


def inline_label(key: str, index: int, count: int, module: str = "") -> str:
    """How findings name an inline string: model_new.py:cuda_sources, ...:cuda_sources[1], or, where
    the relaxed policy builds several modules, model_new.py:<module>:cuda_sources."""
    where = f"model_new.py:{module}:" if module else "model_new.py:"
    return f"{where}{key}" if count == 1 else f"{where}{key}[{index}]"
