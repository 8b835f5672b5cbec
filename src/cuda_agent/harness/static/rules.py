"""The static checks' tables: what model_new.py and the C++/CUDA sources may name.

Kept apart from the mechanics (python.py, cpp.py) so that an auditor can read what
is allowed in one place. Both checkers work from allowlists where the surface is small (torch
functions in model_new.py, at::/torch:: names in C++, method calls in forward) and from denylists
where it is not (C++ member calls, process and interpreter calls).
"""

from __future__ import annotations

import functools
from typing import Literal

Policy = Literal["strict", "relaxed"]
POLICIES: tuple[str, ...] = ("strict", "relaxed")

# --- model_new.py ---------------------------------------------------------------------------------

EXTENSION_MODULE = "cuda_extension"
LOAD_INLINE = "torch.utils.cpp_extension.load_inline"
# Copies of the reference's input builders: the harness uses the reference's own, so these may
# compute (both policies' bans still hold), and forward may not call them.
INPUT_BUILDERS = ("get_inputs", "get_init_inputs")
# Modules model_new.py may import (qualified name -> what it is). torch.nn.functional: relaxed only.
IMPORTABLE = {"torch", "torch.nn", "torch.nn.functional", "torch.utils.cpp_extension", EXTENSION_MODULE,
              "math", "typing", "__future__"}
# Named so the message can say these are never allowed (the rest are merely not needed).
DANGEROUS_MODULES = {
    "os", "sys", "subprocess", "threading", "multiprocessing", "concurrent", "ctypes", "cffi", "importlib",
    "builtins", "inspect", "gc", "signal", "time", "timeit", "pickle", "marshal", "shelve", "io", "pathlib",
    "shutil", "tempfile", "socket", "asyncio", "atexit", "faulthandler", "sysconfig", "site", "runpy", "code",
    "codeop", "types", "functools", "operator", "weakref", "copyreg", "traceback", "linecache", "resource",
    "mmap", "fcntl", "pty", "select", "selectors", "random", "numpy", "triton", "cupy", "numba", "jax",
    "pycuda", "cuda", "tvm", "model",
}
# torch.<name> references that are refused under both policies: the interpreter's back doors,
# global state that would change the reference, timers, streams, seeds and the checker's own tools.
TORCH_FORBIDDEN = {
    "ops", "library", "utils", "backends", "testing", "allclose", "isclose", "manual_seed", "seed",
    "initial_seed", "random", "get_rng_state", "set_rng_state", "default_generator", "Generator", "compile",
    "jit", "fx", "autograd", "hub", "distributed", "multiprocessing", "profiler", "compiler", "export",
    "overrides", "save", "load", "from_file", "classes", "package", "onnx", "no_grad", "enable_grad",
    "inference_mode", "set_grad_enabled", "use_deterministic_algorithms", "func", "vmap", "xpu", "mps",
    "fork_rng", "set_default_device", "set_default_dtype", "set_default_tensor_type", "set_printoptions",
    "set_num_threads", "set_num_interop_threads", "set_float32_matmul_precision", "set_flush_denormal",
    "set_warn_always", "set_deterministic_debug_mode", "cpu", "mtia", "accelerator", "monitor", "quantization",
    "ao", "sparse", "masked", "nested", "storage", "Storage", "UntypedStorage", "TypedStorage",
}
# --- relaxed policy: what KernelBench accepts of the refusals above --------------------------------
# Each of these changes nothing outside the solution's own process, and what it does there is
# judged by the runtime: outputs checked on fresh inputs, timing in the child, baselines in the
# reference worker (another process, so global flags set here never reach them).
RELAXED_TORCH_ALLOWED = {"no_grad", "enable_grad", "inference_mode", "set_grad_enabled", "is_grad_enabled",
                         "is_inference_mode_enabled", "backends", "set_float32_matmul_precision",
                         "get_float32_matmul_precision", "set_flush_denormal"}
# torch.<module>.<name> the relaxed policy allows inside modules refused as a whole: autograd's
# Function and grad modes (not its profiler or graph hooks), TorchScript's compilers (not
# jit.fork, which runs work on another thread after the call returns, nor jit.load).
RELAXED_TORCH_MEMBERS = {
    "autograd": {"Function", "function", "grad", "Variable", "no_grad", "enable_grad", "set_grad_enabled",
                 "inference_mode"},
    "jit": {"script", "trace", "optimize_for_inference", "freeze", "ignore", "unused", "is_scripting", "is_tracing",
            "annotate", "script_method", "Final", "ScriptModule", "ScriptFunction"},
}
# torch.cuda.<name> the relaxed policy allows: synchronising the current device, autocast, the
# device context, and streams, events and CUDA graphs as KernelBench accepts them. The runtime keeps
# those honest (tests/hacks/cuda/relaxed_graph_* and relaxed_stream_*): every input set and every timed
# call gets inputs of its own (a graph replayed on the captured inputs is wrong), an output that a
# later call overwrites fails with that reason (a graph's static output returned as it is), work left
# on other streams is charged to every timed call. Still refused: set_stream (it would leave the
# harness's timer on the solution's stream) and make_graphed_callables (autograd machinery).
RELAXED_TORCH_CUDA_ALLOWED = {"synchronize", "amp", "device", "is_bf16_supported", "get_arch_list",
                              "Stream", "stream", "default_stream", "Event", "CUDAGraph", "graph", "graph_pool_handle"}
# os under the relaxed policy, as released KernelBench solutions use it (CUDA-L1: build folders, paths,
# the process id in a module name, build flags in the environment). Each acts in the solution's own
# process (and the build tools it starts), where the runtime judges what comes of it; nothing here
# starts processes, reads or writes files, or reaches another process. The rest of os stays refused.
RELAXED_OS_ALLOWED = {
    "os.path.join", "os.path.dirname", "os.path.abspath", "os.path.basename", "os.path.exists", "os.path.isdir",
    "os.path.isfile", "os.path.expanduser", "os.path.realpath", "os.path.splitext", "os.makedirs", "os.getpid",
    "os.getcwd", "os.cpu_count", "os.sep", "os.environ", "os.environ.get", "os.environ.setdefault",
}
# Of those, the ones that leave something behind (a folder, a variable: `os.environ` itself is how
# `os.environ[k] = v` and `del os.environ[k]` begin). Only at module level and in __init__, where they
# run before the first call: inside functions, with os.path.exists, they would carry state across calls.
RELAXED_OS_WRITERS = {"os.makedirs", "os.environ", "os.environ.setdefault"}
# Private helpers of torch that copies of nn modules' reset_parameters call (pure functions), and
# TorchScript's fuser switches, which released solutions set at module level: like torch.backends'
# flags they change how the solution's own process compiles scripted code, nothing beyond it.
RELAXED_PRIVATE_ALLOWED = {"torch.nn.init._calculate_fan_in_and_fan_out", "torch.nn.init._calculate_correct_fan",
                           "torch._C._jit_override_can_fuse_on_gpu", "torch._C._jit_override_can_fuse_on_cpu",
                           "torch._C._jit_set_profiling_mode", "torch._C._jit_set_profiling_executor",
                           "torch._C._jit_set_texpr_fuser_enabled", "torch._C._jit_set_nvfuser_enabled",
                           "torch._C._jit_set_bailout_depth", "torch._C._debug_set_autodiff_subgraph_inlining"}
# Modules of pure helpers relaxed code may import besides IMPORTABLE: one level of names below each
# (itertools.product, collections.OrderedDict, collections.abc.Sequence, warnings.warn).
RELAXED_IMPORTABLE = {"itertools", "warnings", "collections", "collections.abc"}
# time under the relaxed policy, as released solutions use it (unique extension names, timing their own
# candidate implementations to pick one): reading clocks and sleeping. A solution that reads the clock
# can tell timed calls from checked ones no better than one that counts its calls, which relaxed allows
# anyway: every timed call gets inputs of its own and timed calls chosen at random are checked. The
# harness binds its own clocks at import (measure/timing.py), and assigning time.<name> stays monkey-patching.
# Modules relaxed code may import whole, whose names are then judged one by one (check_os, and time above).
RELAXED_BY_NAME = {"os", "os.path", "time"}
RELAXED_TIME_ALLOWED = {"time", "time_ns", "perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns",
                        "process_time", "sleep"}
# torch.<...> functions relaxed code may call although their module is refused: activation
# checkpointing (under the harness's no_grad it calls the function and keeps nothing).
RELAXED_TORCH_FUNCTIONS = {"torch.utils.checkpoint.checkpoint"}
# nn.Module methods relaxed ModelNew may override: moving and mode switching, which run outside
# forward and see no input (what they leave behind is judged by the runtime like __init__'s work).
RELAXED_OVERRIDABLE = {"train", "eval", "to", "cuda", "cpu", "extra_repr"}
# Special methods relaxed classes may define besides __init__: clean-up and printing (never operators,
# __torch_function__, __getattr__ or __call__, which change what the harness's own calls do).
RELAXED_DUNDER_METHODS = {"__del__", "__repr__", "__str__"}
# Base classes the relaxed policy allows (besides classes of model_new.py itself): modules, their
# subclasses in torch.nn, and autograd functions. Never torch.Tensor (a subclass can carry
# __torch_function__ or be a lazy output) nor the reference Model.
RELAXED_BASES = {"torch.nn.Module", "torch.autograd.Function"}
# Attributes that relaxed code may set on objects it reached from self or from a local variable
# (self.conv.weight.data = ..., param.requires_grad = False): instance state, never a class's method.
RELAXED_INSTANCE_ATTRIBUTES = {"data", "grad", "requires_grad", "weight", "bias"}

# torch.cuda.<name> that may be read; everything else there (Stream, Event, graphs, synchronize,
# seeds, memory tools) is refused under both policies.
TORCH_CUDA_ALLOWED = {"is_available", "current_device", "device_count", "get_device_name",
                      "get_device_properties", "get_device_capability", "current_stream"}
# torch.nn.<name> that are refused under both policies (hooks, parametrizations, internals).
NN_FORBIDDEN = {"utils", "modules", "parallel", "attention", "intrinsic", "qat", "quantized", "backends",
                "grad", "parameter", "common_types", "cpp", "factory_kwargs"}

# Strict policy, every method and function: allocation, shapes, dtypes, devices.
TORCH_VALUES = {
    "Tensor", "Size", "device", "dtype", "finfo", "iinfo", "is_tensor", "is_floating_point", "is_complex",
    "get_default_dtype", "promote_types", "result_type", "broadcast_shapes", "float32", "float", "float16",
    "half", "bfloat16", "float64", "double", "int8", "int16", "short", "int32", "int", "int64", "long",
    "uint8", "uint16", "uint32", "uint64", "bool", "complex64", "cfloat", "complex128", "cdouble",
    "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "contiguous_format", "channels_last",
    "channels_last_3d", "preserve_format", "strided", "inf", "nan", "pi", "e", "layout", "memory_format",
}
TORCH_ALLOCATION = {"empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full",
                    "full_like", "arange", "tensor", "as_strided"}
TORCH_VIEWS = {"reshape", "flatten", "unflatten", "unsqueeze", "squeeze", "permute", "transpose", "t", "narrow",
               "select", "split", "chunk", "tensor_split", "unbind", "movedim", "swapaxes", "swapdims",
               "broadcast_to", "view_as_real", "view_as_complex", "diagonal"}
# Strict policy, __init__ only: random initialisation of parameters (the state_dict is copied in).
TORCH_INIT_ONLY = {"randn", "rand", "randint", "randn_like", "rand_like", "randint_like", "randperm", "normal",
                   "linspace", "logspace", "eye", "as_tensor"}

# Method names any object may call in strict forward: metadata, views, moves and casts.
TENSOR_METHODS_ALLOWED = {
    "size", "dim", "ndimension", "numel", "nelement", "stride", "storage_offset", "element_size",
    "is_contiguous", "is_floating_point", "is_complex", "get_device", "data_ptr", "const_data_ptr",
    "contiguous", "view", "view_as", "reshape", "reshape_as", "flatten", "unflatten", "unsqueeze", "squeeze",
    "permute", "transpose", "t", "expand", "expand_as", "broadcast_to", "narrow", "select", "unbind",
    "split", "split_with_sizes", "chunk", "tensor_split", "movedim", "moveaxis", "swapaxes", "swapdims",
    "as_strided", "unfold", "diagonal", "detach", "to", "type_as", "float", "half", "bfloat16", "double", "int",
    "long", "short", "bool", "byte", "char", "cuda", "cpu", "new_empty", "new_empty_strided", "new_zeros",
    "new_ones", "new_full", "requires_grad_", "is_set_to", "is_same_size", "dim_order",
}
# Metadata methods: their result is not a tensor.
TENSOR_METADATA_METHODS = {"size", "dim", "ndimension", "numel", "nelement", "stride", "storage_offset",
                           "element_size", "is_contiguous", "is_floating_point", "is_complex", "get_device",
                           "data_ptr", "const_data_ptr", "is_set_to", "is_same_size", "dim_order"}
# Methods of Python containers and strings (none of them is a torch.Tensor method).
CONTAINER_METHODS = {"append", "extend", "insert", "pop", "items", "keys", "get", "format", "join",
                     "startswith", "endswith", "count", "copy", "update", "setdefault", "lower", "upper",
                     "strip", "replace"}
CONTAINER_MUTATORS = {"append", "extend", "insert", "pop", "update", "setdefault", "clear", "remove"}
# Strict policy, __init__ only: in-place initialisation of parameters and module registration.
INIT_METHODS = {"uniform_", "normal_", "zero_", "fill_", "register_buffer", "register_parameter", "add_module",
                "parameters", "named_parameters", "buffers", "named_buffers", "children", "named_children",
                "modules", "named_modules", "item", "tolist"}
# Attributes that are tensors on the usual nn modules (self.conv.weight and the like).
MODULE_TENSOR_ATTRIBUTES = {"weight", "bias", "running_mean", "running_var", "in_proj_weight", "in_proj_bias",
                            "weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"}
# Attributes whose value is metadata, not a tensor.
TENSOR_METADATA_ATTRIBUTES = {"shape", "dtype", "device", "ndim", "is_cuda", "is_cpu", "layout", "itemsize",
                              "nbytes", "requires_grad", "is_leaf", "names", "is_sparse", "is_quantized"}
TENSOR_VIEW_ATTRIBUTES = {"T", "mT", "H", "mH", "real", "imag", "data"}

# Builtins model_new.py may use (both policies); every other builtin is refused.
BUILTINS_ALLOWED = {
    "len", "range", "int", "float", "bool", "str", "tuple", "list", "dict", "set", "frozenset", "min", "max",
    "abs", "round", "divmod", "isinstance", "issubclass", "enumerate", "zip", "reversed", "sorted", "print",
    "super", "hasattr", "type", "slice", "all", "any", "sum", "map", "filter", "iter", "next", "pow", "repr",
    "hash", "id", "callable", "None", "True", "False", "NotImplemented", "Ellipsis", "staticmethod",
    "property", "object", "ascii", "bin", "chr", "hex", "oct", "ord", "format", "complex", "bytes",
    "bytearray",
}
# Builtins whose result on a tensor would be torch computation (strict flags a tensor argument).
BUILTINS_TENSOR_SAFE = {"len", "isinstance", "print", "list", "tuple", "enumerate", "zip", "type", "hasattr",
                        "super", "iter", "next", "reversed", "dict", "id", "callable", "repr", "str"}
# Builtins strict refuses in forward: they call a function value (possibly a submodule) for you.
BUILTINS_INDIRECT = {"map", "filter"}
# Never: the interpreter's back doors and the file system.
BUILTINS_FORBIDDEN = {
    "eval", "exec", "compile", "__import__", "getattr", "setattr", "delattr", "globals", "locals", "vars",
    "open", "input", "breakpoint", "memoryview", "__builtins__", "__build_class__", "__loader__", "__spec__",
    "dir", "exit", "quit", "help", "SystemExit", "KeyboardInterrupt", "GeneratorExit",
}
METHOD_NAMES_FORBIDDEN = {"register_forward_hook", "register_forward_pre_hook", "register_full_backward_hook",
                          "register_backward_hook", "register_full_backward_pre_hook", "register_hook",
                          "register_load_state_dict_post_hook", "register_load_state_dict_pre_hook",
                          "register_state_dict_pre_hook", "register_state_dict_post_hook",
                          "register_post_accumulate_grad_hook", "register_module", "set_submodule",
                          "record_stream", "share_memory_", "apply_", "map_", "map2_", "module_load"}
TYPE_ANNOTATIONS_NOT_TENSOR = {"int", "float", "bool", "str", "tuple", "list", "dict", "None", "Tuple", "List",
                               "Optional", "Sequence"}


@functools.cache
def tensor_method_names() -> frozenset[str]:
    """Public methods of torch.Tensor (read from the installed torch, so the list stays complete)."""
    import torch

    return frozenset(n for n in dir(torch.Tensor) if not n.startswith("_") and callable(getattr(torch.Tensor, n, None)))


@functools.cache
def module_attribute_names() -> frozenset[str]:
    """Attributes of nn.Module that ModelNew must not override (it may define forward and extra_repr)."""
    import torch

    return frozenset(set(dir(torch.nn.Module)) - {"forward", "extra_repr", "__init__"})


@functools.cache
def module_private_names() -> frozenset[str]:
    """nn.Module's own _attributes (_modules, _forward_hooks, ...): not ModelNew's to touch."""
    import torch

    return frozenset({n for n in dir(torch.nn.Module) if n.startswith("_")} | set(vars(torch.nn.Module())))


# --- C++ / CUDA -------------------------------------------------------------------------------------

# at::/torch::/c10:: names strict allows: types, allocation, metadata helpers, constants (k...).
ATEN_ALLOWED = {
    "Tensor", "TensorBase", "TensorOptions", "TensorList", "IntArrayRef", "ArrayRef", "OptionalIntArrayRef",
    "SymInt", "SymIntArrayRef", "Scalar", "ScalarType", "Dtype", "Device", "DeviceType", "DeviceIndex", "Layout",
    "MemoryFormat", "Half", "BFloat16", "Float8_e4m3fn", "Float8_e5m2", "Float8_e4m3fnuz", "Float8_e5m2fnuz",
    "complex", "optional", "nullopt", "string_view", "irange", "Error", "TensorAccessor", "PackedTensorAccessor",
    "PackedTensorAccessor32", "PackedTensorAccessor64", "GenericPackedTensorAccessor", "RestrictPtrTraits",
    "DefaultPtrTraits", "opmath_type", "acc_type", "empty", "empty_like", "empty_strided", "zeros",
    "zeros_like", "ones", "ones_like", "full", "full_like", "from_blob", "dtype", "device", "layout",
    "elementSize", "typeMetaToScalarType", "isFloatingType", "isComplexType", "isIntegralType", "toString",
    "indexing", "cuda", "TensorArg", "device_of", "DeviceGuard", "OptionalDeviceGuard", "ceil_div",
    "numeric_limits", "isReducedFloatingType", "str",
}
# at::cuda:: / c10::cuda:: names strict allows (current stream, cuBLAS handle, device guards).
ATEN_CUDA_ALLOWED = {"getCurrentCUDAStream", "getDefaultCUDAStream", "getCurrentCUDABlasHandle",
                     "getCurrentCUDABlasLtHandle", "getCurrentDeviceProperties", "getDeviceProperties",
                     "current_device", "device_count", "CUDAGuard", "OptionalCUDAGuard", "CUDAStream",
                     "warp_size"}
ATEN_ROOTS = {"at", "torch", "c10", "aten", "caffe2"}
PYBIND_ROOTS = {"pybind11", "py"}
# pybind11:: names allowed under both policies: what a binding needs, nothing that reaches Python.
PYBIND_ALLOWED = {"module", "module_", "arg", "arg_v", "kw_only", "pos_only", "gil_scoped_release",
                  "gil_scoped_acquire", "call_guard", "return_value_policy", "none", "class_", "init", "enum_",
                  "overload_cast", "const_", "literals"}
# Identifiers refused under both policies, wherever they appear (qualified or not).
CPP_FORBIDDEN_WORDS = {
    # threads and processes
    "fork": "threads-process", "vfork": "threads-process", "popen": "threads-process",
    "execl": "threads-process", "execlp": "threads-process", "execle": "threads-process",
    "execv": "threads-process", "execvp": "threads-process", "execvpe": "threads-process",
    "execve": "threads-process", "fexecve": "threads-process", "jthread": "threads-process",
    "cudaLaunchHostFunc": "threads-process", "cudaStreamAddCallback": "threads-process",
    "cuLaunchHostFunc": "threads-process",
    # what glibc and libstdc++ export besides: process creators, thread creators, and the
    # notifications and asynchronous I/O that run a callback on a thread of their own
    "_Fork": "threads-process", "__fork": "threads-process", "__vfork": "threads-process",
    "execveat": "threads-process", "daemon": "threads-process", "clone3": "threads-process",
    "__clone": "threads-process", "__clone2": "threads-process", "__clone3": "threads-process",
    "timer_create": "threads-process", "SIGEV_THREAD": "threads-process", "mq_notify": "threads-process",
    "aio_read": "threads-process", "aio_write": "threads-process", "aio_fsync": "threads-process",
    "lio_listio": "threads-process",
    # leaving the process
    "quick_exit": "exit", "_Exit": "exit", "__builtin_trap": "exit", "atexit": "exit", "at_quick_exit": "exit", "sigaction": "exit",
    # the interpreter
    "PyObject": "python", "THPVariable_Wrap": "python", "THPVariable_Unpack": "python",
    # files, environment, dynamic loading, system calls
    "fopen": "files", "freopen": "files", "fdopen": "files", "openat": "files", "mmap": "files",
    "ofstream": "files", "ifstream": "files", "fstream": "files", "filebuf": "files", "filesystem": "files",
    "getenv": "files", "setenv": "files", "putenv": "files", "unsetenv": "files", "dlopen": "files",
    "dlsym": "files", "dlmopen": "files", "ptrace": "files", "prctl": "files", "syscall": "files",
    # the dispatcher and torch's global state
    "DispatchKey": "dispatcher", "DispatchKeySet": "dispatcher", "ExcludeDispatchKeyGuard": "dispatcher",
    "IncludeDispatchKeyGuard": "dispatcher", "Dispatcher": "dispatcher", "RegisterOperators": "dispatcher",
    "Library": "dispatcher", "PythonDispatcherTLS": "dispatcher", "PythonTorchFunctionTLS": "dispatcher",
    "globalContext": "torch-state", "manual_seed": "torch-state", "getDefaultCUDAGenerator": "torch-state",
    "setMemoryFraction": "torch-state", "emptyCache": "torch-state",
    # streams, graphs, events, device-wide synchronisation and state
    "getStreamFromPool": "streams", "getStreamFromExternal": "streams", "setCurrentCUDAStream": "streams",
    "CUDAStreamGuard": "streams", "OptionalCUDAStreamGuard": "streams", "CUDAMultiStreamGuard": "streams",
    "CUDAEvent": "streams", "CUDAGraph": "streams", "cudaStreamPerThread": "streams",
    "cudaStreamBeginCapture": "streams", "cudaDeviceSynchronize": "streams", "cudaThreadSynchronize": "streams",
    "device_synchronize": "streams", "cudaMallocManaged": "streams", "cudaDeviceReset": "streams",
    "cudaSetDevice": "streams", "cudaSetDeviceFlags": "streams", "cudaThreadExit": "streams",
    "cudaProfilerStart": "streams", "cudaProfilerStop": "streams",
    # code not in the sources
    "nvrtcCompileProgram": "code-loading", "cuModuleLoad": "code-loading", "cuModuleLoadData": "code-loading",
    "cuLibraryLoadData": "code-loading", "cudaLibraryLoadData": "code-loading", "cuLinkCreate": "code-loading",
}
# Of CPP_FORBIDDEN_WORDS, what the relaxed policy allows: a device-wide synchronise, as
# torch.cuda.synchronize in Python (the call waits, and the wait is timed with it).
RELAXED_CPP_ALLOWED = {"cudaDeviceSynchronize", "cudaThreadSynchronize", "device_synchronize"}
# Prefixes refused under both policies (rule).
CPP_FORBIDDEN_PREFIXES = {
    "pthread_": "threads-process", "__pthread_": "threads-process", "__gthread_": "threads-process",
    "posix_spawn": "threads-process", "thrd_": "threads-process", "omp_": "threads-process",
    "GOMP_": "threads-process", "__kmpc_": "threads-process", "kmp_": "threads-process",
    "pthreadpool": "threads-process", "Py_": "python", "_Py": "python", "PyRun_": "python", "PyEval_": "python",
    "PyImport_": "python", "PyGILState_": "python", "THP": "python", "PYBIND11_EMBEDDED": "python",
    "PYBIND11_OVERRIDE": "python", "PYBIND11_OVERLOAD": "python", "TORCH_LIBRARY": "dispatcher",
    "AutoDispatchBelow": "dispatcher", "tls_set_dispatch": "dispatcher", "setAllowTF32": "torch-state",
    "setAllowBF16": "torch-state", "setAllowFP16": "torch-state", "setBenchmark": "torch-state",
    "setDeterministic": "torch-state", "setFloat32MatmulPrecision": "torch-state", "cudaStreamCreate": "streams",
    "cudaGraph": "streams", "cudaEvent": "streams", "cudaDeviceSet": "streams", "cudaIpc": "streams",
    "cuStreamCreate": "streams", "cuGraph": "streams", "cuCtx": "streams", "cuDevicePrimaryCtx": "streams",
    "cuEvent": "streams", "cuIpc": "streams", "nvrtc": "code-loading", "cuModule": "code-loading",
    "cuLibrary": "code-loading", "cudaLibrary": "code-loading", "cuLink": "code-loading",
    "nvJitLink": "code-loading", "__libc_": "files",
    # any driver function by its name (cuCtxSetLimit, cuStreamCreate, cuModuleLoadData ...): dynamic loading
    "cudaGetDriverEntryPoint": "files", "cuGetProcAddress": "files",
}
# Generic words refused only where used as a function (called, or its address taken).
CPP_FORBIDDEN_CALLS = {"system": "threads-process", "exit": "exit", "_exit": "exit", "abort": "exit",
                       "terminate": "exit", "kill": "exit", "raise": "exit", "signal": "exit", "clone": "threads-process",
                       "open": "files", "creat": "files", "unlink": "files", "socket": "files",
                       "connect": "files", "chdir": "files", "setuid": "files"}
# Names under at::/torch::/c10::/caffe2:: refused under both policies: they start threads or size
# ATen's thread pools, as torch.set_num_threads does in Python (relaxed allows the rest of ATen).
ATEN_THREADS = {"set_num_threads", "set_num_interop_threads", "init_num_threads", "lazy_init_num_threads",
                "set_thread_num", "ThreadIdGuard", "parallel_for", "parallel_reduce", "launch",
                "launch_no_thread_state", "intraop_launch", "intraop_launch_future", "invoke_parallel",
                "TaskThreadPoolBase", "ThreadPool", "TaskThreadPool", "PTThreadPool", "ThreadPoolRegistry",
                "PThreadPool", "pthreadpool", "get_pthreadpool"}
# With `using namespace std`, these unqualified words are std's threads and processes.
STD_WORDS_FORBIDDEN = {"thread", "jthread", "async", "system", "exit", "quick_exit", "abort", "terminate",
                       "getenv", "ofstream", "ifstream", "fstream"}
# std:: members refused under both policies.
STD_FORBIDDEN = {"thread", "jthread", "async", "launch", "execution", "system", "exit", "quick_exit", "_Exit", "abort",
                 "terminate", "atexit", "getenv", "signal", "raise", "filesystem", "ofstream", "ifstream",
                 "fstream", "fopen"}
# Member calls refused under both policies (pybind11 objects reaching into Python).
CPP_MEMBERS_FORBIDDEN = {"attr", "import", "exec", "eval", "eval_file"}
# Libraries: strict allows cuBLAS (GEMM) and cuDNN (convolutions) only.
LIBRARY_PREFIXES = {"cusparse": "cuSPARSE", "cusolver": "cuSOLVER", "cufft": "cuFFT", "curand": "cuRAND",
                    "nccl": "NCCL", "nvshmem": "NVSHMEM", "cutensor": "cuTENSOR", "magma": "MAGMA", "mkl": "MKL"}
LIBRARY_NAMESPACES = {"thrust": "Thrust", "cub": "CUB", "cutlass": "CUTLASS", "cute": "CuTe (CUTLASS)",
                      "triton": "Triton", "dnnl": "oneDNN", "Eigen": "Eigen"}
LIBRARY_HEADERS = {"cutlass/": "CUTLASS", "cute/": "CuTe (CUTLASS)", "thrust/": "Thrust", "cub/": "CUB",
                   "cufft": "cuFFT", "curand": "cuRAND", "cusparse": "cuSPARSE", "cusolver": "cuSOLVER",
                   "nccl": "NCCL", "nvshmem": "NVSHMEM", "cutensor": "cuTENSOR", "triton": "Triton",
                   "ATen/native/": "ATen native kernels", "ATen/ops/": "ATen operators",
                   "torch/torch.h": "the libtorch C++ API (torch::nn)", "torch/nn": "the libtorch C++ API (torch::nn)",
                   "torch/all.h": "the libtorch C++ API", "torch/csrc/api/": "the libtorch C++ API",
                   "Eigen/": "Eigen", "mkl": "MKL", "magma": "MAGMA"}
# Headers refused under both policies: threads, processes, files, the interpreter, code loading.
SYSTEM_HEADERS_FORBIDDEN = {"thread": "threads", "future": "threads", "pthread.h": "threads",
                            "execution": "parallel algorithms (threads)",
                            "tbb/": "threads (TBB)", "oneapi/tbb": "threads (TBB)", "sched.h": "processes (clone)",
                            "ATen/Parallel": "ATen's thread pools", "c10/core/thread_pool.h": "thread pools",
                            "omp.h": "OpenMP threads", "fstream": "files", "filesystem": "files",
                            "fcntl.h": "files", "unistd.h": "POSIX system calls", "sys/": "POSIX system calls",
                            "spawn.h": "processes", "signal.h": "signals", "csignal": "signals",
                            "dlfcn.h": "dynamic loading", "Python.h": "the Python C API",
                            "torch/python.h": "the Python C API", "torch/csrc/jit": "TorchScript",
                            "torch/script.h": "TorchScript", "torch/csrc/autograd/python": "the Python C API",
                            "nvrtc": "run-time compilation", "nvJitLink": "run-time linking",
                            "pybind11/embed.h": "the embedded interpreter", "pybind11/eval.h": "the interpreter",
                            "c10/core/impl/": "dispatcher internals", "ATen/core/dispatch": "the dispatcher",
                            "torch/library.h": "operator registration"}
# Headers strict allows (besides the solution's own headers): C/C++ standard, CUDA, cuBLAS,
# cuDNN, the torch headers a binding needs, pybind11.
STD_HEADERS = {
    "cstdio", "cstdlib", "cstdint", "cstddef", "cstring", "cmath", "cfloat", "climits", "cassert", "cstdarg",
    "cinttypes", "algorithm", "array", "vector", "string", "string_view", "tuple", "utility", "type_traits",
    "limits", "numeric", "memory", "functional", "iostream", "sstream", "iomanip", "initializer_list",
    "optional", "variant", "stdexcept", "exception", "new", "iterator", "map", "unordered_map", "set",
    "unordered_set", "deque", "list", "bitset", "complex", "atomic", "cctype", "ratio", "stdio.h", "stdlib.h",
    "stdint.h", "stddef.h", "string.h", "math.h", "float.h", "limits.h", "assert.h", "stdbool.h", "stdarg.h",
    "inttypes.h",
}
HEADERS_ALLOWED = {
    "cuda_runtime.h", "cuda_runtime_api.h", "cuda.h", "cuda_fp16.h", "cuda_fp16.hpp", "cuda_bf16.h",
    "cuda_bf16.hpp", "cuda_fp8.h", "cuda_fp8.hpp", "mma.h", "cooperative_groups.h", "cuda_pipeline.h",
    "cuda_pipeline_primitives.h", "cuda_awbarrier.h", "cuda_awbarrier_primitives.h", "device_launch_parameters.h",
    "device_functions.h", "vector_types.h", "vector_functions.h", "math_constants.h", "cuda/pipeline",
    "cuda/barrier", "cuda/ptx", "cuda/atomic", "cuda/annotated_ptr", "cublas_v2.h", "cublas_api.h",
    "cublasLt.h", "cudnn.h", "torch/types.h", "torch/extension.h", "torch/csrc/utils/pybind.h",
    "c10/cuda/CUDAStream.h", "c10/cuda/CUDAGuard.h", "c10/cuda/CUDAException.h", "c10/cuda/CUDAMathCompat.h",
    "ATen/cuda/CUDAContext.h", "ATen/cuda/CUDAContextLight.h", "ATen/ATen.h", "ATen/Dispatch.h",
    "ATen/AccumulateType.h", "ATen/OpMathType.h", "ATen/cuda/Exceptions.h", "c10/util/Half.h",
    "c10/util/BFloat16.h", "c10/util/complex.h", "c10/util/Optional.h", "c10/util/irange.h",
    "c10/macros/Macros.h", "c10/core/ScalarType.h", "binding_registry.h",
}
HEADER_PREFIXES_ALLOWED = ("cooperative_groups/", "cuda/std/", "cudnn", "pybind11/", "c10/util/Float8",
                           "sm_", "crt/")
LDFLAGS_ALLOWED = {"-lcublas", "-lcublasLt", "-lcudnn"}
# Unqualified names of ATen operators: with a torch::Tensor argument, C++ argument-dependent lookup
# finds at::<name> without any `at::` written. Math functions CUDA also defines are left out.
ATEN_COMPUTE_NAMES = {
    "matmul", "mm", "bmm", "addmm", "addbmm", "baddbmm", "addmv", "mv", "einsum", "tensordot", "outer",
    "linear", "bilinear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
    "conv_transpose3d", "convolution", "cudnn_convolution", "max_pool1d", "max_pool2d", "max_pool3d",
    "avg_pool1d", "avg_pool2d", "avg_pool3d", "adaptive_avg_pool1d", "adaptive_avg_pool2d",
    "adaptive_avg_pool3d", "adaptive_max_pool1d", "adaptive_max_pool2d", "adaptive_max_pool3d", "relu", "relu_",
    "relu6", "gelu", "silu", "mish", "sigmoid", "softmax", "log_softmax", "softmin", "softplus", "softsign",
    "hardtanh", "hardswish", "hardsigmoid", "leaky_relu", "elu", "selu", "celu", "glu", "prelu", "rrelu",
    "logsigmoid", "hardshrink", "softshrink", "tanhshrink", "layer_norm", "group_norm", "batch_norm",
    "instance_norm", "rms_norm", "native_layer_norm", "native_batch_norm", "local_response_norm", "dropout",
    "cat", "concat", "stack", "hstack", "vstack", "sum", "mean", "prod", "cumsum", "cumprod", "amax", "amin",
    "argmax", "argmin", "logsumexp", "topk", "kthvalue", "median", "clamp", "clamp_min", "clamp_max", "clip",
    "where", "masked_fill", "masked_select", "index_select", "gather", "scatter", "scatter_add", "index_add",
    "index_put", "add", "sub", "mul", "div", "true_divide", "floor_divide", "remainder", "addcmul", "addcdiv",
    "lerp", "reciprocal", "square", "maximum", "minimum", "embedding", "embedding_bag", "cross_entropy",
    "nll_loss", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "kl_div", "binary_cross_entropy",
    "binary_cross_entropy_with_logits", "cosine_similarity", "pairwise_distance", "cdist",
    "triplet_margin_loss", "margin_ranking_loss", "hinge_embedding_loss", "constant_pad_nd",
    "reflection_pad1d", "reflection_pad2d", "replication_pad2d", "upsample_nearest2d", "upsample_bilinear2d",
    "interpolate", "grid_sampler", "pixel_shuffle", "pixel_unshuffle", "scaled_dot_product_attention",
    "clone", "flip", "roll", "tril", "triu", "repeat_interleave", "tile", "nan_to_num", "frobenius_norm",
    "nuclear_norm", "linalg_norm", "vector_norm", "matrix_norm", "one_hot", "argsort", "im2col", "col2im",
    "matrix_exp", "inverse", "svd", "cholesky", "bincount", "histc", "normalize", "threshold", "diff",
}
# C++ Tensor methods strict allows: metadata, views and raw access (contiguous as in model_new.py).
CPP_TENSOR_METHODS_ALLOWED = TENSOR_METHODS_ALLOWED - {"to", "type_as", "float", "half", "bfloat16", "double",
                                                       "int", "long", "short", "bool", "byte", "char", "cuda",
                                                       "cpu"} | {
    "sizes", "strides", "options", "scalar_type", "dtype", "device", "is_cuda", "is_cpu", "defined",
    "data", "mutable_data_ptr", "accessor", "packed_accessor32", "packed_accessor64",
    "generic_packed_accessor", "itemsize", "nbytes", "resize_", "type", "layout", "suggest_memory_format",
    "is_non_overlapping_and_dense", "real", "imag", "values", "all", "any", "storage", "get", "resize",
}
CPP_TENSOR_METHODS_EXTRA = {"index", "index_put_", "to", "copy_", "item", "toType", "clone", "fill_", "zero_"}


@functools.cache
def cpp_tensor_methods_forbidden() -> frozenset[str]:
    """Tensor methods that compute: every public torch.Tensor method but the allowed ones."""
    return frozenset((tensor_method_names() | CPP_TENSOR_METHODS_EXTRA) - CPP_TENSOR_METHODS_ALLOWED)
