"""KernelBench on the device: `bench` over levels 1 and 2 with a solutions folder of hand-written
CUDA kernels (element-wise level-1 kernels, cuBLAS GEMM + fused epilogue for three level-2 tasks,
one honest but slow softmax, and three hacks; every other task counts as missing), then baseline
tables (eager and torch.compile with spread, speed-of-light) for levels 1, 2 and 3.

    python benchmarks/bench_kernelbench.py --out DIR [--max-seconds 540] [--levels 1 2]
        [--baseline-levels 1 2 3] [--workers 6] [--budget 0.5]
        [--kernelbench ../shared/kernelbench/kernelbench.jsonl]
        [--published ../shared/kernelbench/h100_modal_eager.json] [--skip-bench] [--skip-baselines]
        [--retry-errors]
        [--cpu-check]

Resumable: run it again with the same --out (kept between device calls) and it goes on where it
stopped; --max-seconds is the time after which no new task is started (the bench and its report
first, then the baselines level by level). Writes DIR/solutions/, DIR/bench/report.*,
DIR/baselines_levelN.jsonl + .md.
`--cpu-check` instead evaluates each solution's CPU twin on shrunk inputs with the real harness
(static rules, the ModelNew interface and the op's formula), which needs no GPU.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared" / "kernelbench"

# task name -> (ModelNew constructor arguments, value of the scalar parameter p, CUDA body of op(x, p))
OPS: dict[str, tuple[str, str, str]] = {
    "5_Matrix_scalar_multiplication": ("", "", "return x * p;"),
    "19_ReLU": ("", "0.0", "return fmaxf(x, 0.f);"),
    "20_LeakyReLU": ("negative_slope: float = 0.01", "negative_slope", "return x > 0.f ? x : x * p;"),
    "21_Sigmoid": ("", "0.0", "return 1.f / (1.f + expf(-x));"),
    "22_Tanh": ("", "0.0", "return tanhf(x);"),
    "25_Swish": ("", "0.0", "return x / (1.f + expf(-x));"),
    "26_GELU_": ("", "0.0", "return 0.5f * x * (1.f + erff(x * 0.70710678118654752f));"),
    "27_SELU_": ("", "0.0", "return x > 0.f ? 1.0507009873554805f * x : 1.7580993408473766f * expm1f(x);"),
    "28_HardSigmoid": ("", "0.0", "return fminf(fmaxf(x + 3.f, 0.f), 6.f) / 6.f;"),
    "29_Softplus": ("", "0.0", "return x > 20.f ? x : log1pf(expf(x));"),
    "30_Softsign": ("", "0.0", "return x / (1.f + fabsf(x));"),
    "31_ELU": ("alpha: float = 1.0", "alpha", "return x > 0.f ? x : p * expm1f(x);"),
    "32_HardTanh": ("", "0.0", "return fminf(fmaxf(x, -1.f), 1.f);"),
    "88_MinGPTNewGelu": ("", "0.0", "float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);\n"
                                    "  return 0.5f * x * (1.f + tanhf(u));"),
}

KERNEL_CU = """// y = op(x) element-wise: float4 loads and stores, grid-stride loop, a scalar tail.
#include <cuda_runtime.h>
#include <stdint.h>

__device__ __forceinline__ float op(float x, float p) {
  BODY
}

__global__ void act_kernel(const float* __restrict__ x, float* __restrict__ y, long long n, long long n4, float p) {
  const float4* x4 = reinterpret_cast<const float4*>(x);
  float4* y4 = reinterpret_cast<float4*>(y);
  long long stride = (long long)gridDim.x * blockDim.x;
  long long first = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  for (long long i = first; i < n4; i += stride) {
    float4 v = x4[i];
    v.x = op(v.x, p); v.y = op(v.y, p); v.z = op(v.z, p); v.w = op(v.w, p);
    y4[i] = v;
  }
  for (long long i = n4 * 4 + first; i < n; i += stride) y[i] = op(x[i], p);
}

extern "C" void act_launch(const float* x, float* y, long long n, float p, int config, cudaStream_t stream) {
  if (n <= 0) return;
  bool aligned = ((uintptr_t)x % 16 == 0) && ((uintptr_t)y % 16 == 0);
  long long n4 = aligned ? n / 4 : 0;
  int threads = config > 0 ? config : 256;
  long long work = n4 > 0 ? n4 : n;
  long long blocks = (work + threads - 1) / threads;
  if (blocks > 132 * 32) blocks = 132 * 32;
  act_kernel<<<(unsigned)blocks, threads, 0, stream>>>(x, y, n, n4, p);
}
"""

KERNEL_CPP = """// y = op(x) element-wise on the CPU (the CUDA kernel's twin, for checks without a GPU).
#include <cmath>

static inline float op(float x, float p) {
  BODY
}

extern "C" void act_launch(const float* x, float* y, long long n, float p, int config) {
  (void)config;
  for (long long i = 0; i < n; ++i) y[i] = op(x[i], p);
}
"""

BINDING = """#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>
INCLUDE
#include "../binding_registry.h"

extern "C" void act_launch(const float* x, float* y, long long n, float p, int config LAUNCH_STREAM);

static torch::Tensor act_forward(const torch::Tensor& x, double p) {
  TORCH_CHECK(CHECK_DEVICE && x.is_contiguous() && x.scalar_type() == torch::kFloat32,
              "x: a contiguous float32 DEVICE_NAME tensor");
  auto y = torch::empty_like(x);
  act_launch(x.data_ptr<float>(), y.data_ptr<float>(), x.numel(), static_cast<float>(p), 0 CALL_STREAM);
  return y;
}

static void register_act(pybind11::module& m) { m.def("act_forward", &act_forward, "element-wise op"); }

REGISTER_BINDING(act, register_act);
"""

MODEL_NEW = """import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self{init}):
        super().__init__()
        self.p = {p}

    def forward(self, x{extra}):
        return cuda_extension.act_forward(x, {arg})
"""


# Level 2: cuBLAS SGEMM (full FP32, as eager uses) then one fused epilogue kernel over the output.
# task name -> (constructor, the parameter lines of __init__, forward's call arguments, epilogue body of
#               f(v) where v = (x @ W^T)[row, col] + bias[col], the epilogue's scalars a and b)
GEMMS: dict[str, tuple[str, str, str, str]] = {
    "9_Matmul_Subtract_Multiply_ReLU": (
        "in_features, out_features, subtract_value, multiply_value",
        "self.linear = nn.Linear(in_features, out_features)\n"
        "        self.a, self.b = float(subtract_value), float(multiply_value)",
        "x, self.linear.weight, self.linear.bias, self.a, self.b",
        "return fmaxf((v - a) * b, 0.f);"),
    "12_Gemm_Multiply_LeakyReLU": (
        "in_features, out_features, multiplier, negative_slope",
        "self.gemm = nn.Linear(in_features, out_features)\n"
        "        self.leaky_relu = nn.LeakyReLU(negative_slope)\n"
        "        self.a, self.b = float(multiplier), float(negative_slope)",
        "x, self.gemm.weight, self.gemm.bias, self.a, self.b",
        "float t = v * a; return t > 0.f ? t : t * b;"),
    "76_Gemm_Add_ReLU": (
        "in_features, out_features, bias_shape",
        "self.gemm = nn.Linear(in_features, out_features, bias=False)\n"
        "        self.bias = nn.Parameter(torch.empty(bias_shape))",
        "x, self.gemm.weight, self.bias, 0.0, 0.0",
        "return fmaxf(v, 0.f);"),
}

GEMM_CU = """// y = epilogue(x @ W^T + bias): cuBLAS SGEMM (FP32) into y, then one element-wise pass in place.
#include <cuda_runtime.h>
#include <cublas_v2.h>

__global__ void epilogue_kernel(float* __restrict__ y, const float* __restrict__ bias, long long n, int cols,
                                float a, float b) {
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += stride) {
    float v = y[i] + bias[i % cols];
    y[i] = [&]() { BODY }();
  }
}

extern "C" int gemm_epilogue_launch(const float* x, const float* w, const float* bias, float* y, int m, int k,
                                    int n, float a, float b, cudaStream_t stream) {
  static cublasHandle_t handle = nullptr;  // one handle per process: state, not a result
  if (handle == nullptr && cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) return 1;
  cublasSetStream(handle, stream);
  const float one = 1.f, zero = 0.f;
  // Row-major y (m x n) is column-major y^T (n x m) = W (n x k, row-major = k x n column-major)^T x^T.
  if (cublasSgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &one, w, k, x, k, &zero, y, n) != CUBLAS_STATUS_SUCCESS)
    return 2;
  long long total = (long long)m * n;
  long long blocks = (total + 255) / 256;
  if (blocks > 132 * 32) blocks = 132 * 32;
  epilogue_kernel<<<(unsigned)blocks, 256, 0, stream>>>(y, bias, total, n, a, b);
  return 0;
}
"""

GEMM_BINDING = """#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>
#include <c10/cuda/CUDAStream.h>
#include "../binding_registry.h"

extern "C" int gemm_epilogue_launch(const float* x, const float* w, const float* bias, float* y, int m, int k,
                                    int n, float a, float b, cudaStream_t stream);

static torch::Tensor gemm_epilogue(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& bias,
                                   double a, double b) {
  TORCH_CHECK(x.is_cuda() && x.dim() == 2 && x.is_contiguous() && x.scalar_type() == torch::kFloat32,
              "x: a contiguous 2-D float32 CUDA tensor");
  TORCH_CHECK(w.is_contiguous() && w.dim() == 2 && w.size(1) == x.size(1) && bias.numel() == w.size(0),
              "w: contiguous (out, in); bias: out values");
  auto y = torch::empty({x.size(0), w.size(0)}, x.options());
  int rc = gemm_epilogue_launch(x.data_ptr<float>(), w.data_ptr<float>(), bias.data_ptr<float>(), y.data_ptr<float>(),
                                (int)x.size(0), (int)x.size(1), (int)w.size(0), (float)a, (float)b,
                                c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(rc == 0, "cuBLAS failed (code ", rc, ")");
  return y;
}

static void register_gemm(pybind11::module& m) { m.def("gemm_epilogue", &gemm_epilogue, "GEMM + epilogue"); }

REGISTER_BINDING(gemm, register_gemm);
"""

GEMM_MODEL_NEW = """import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, {init}):
        super().__init__()
        {params}

    def forward(self, x):
        return cuda_extension.gemm_epilogue({args})
"""

# An honest solution that is slower than eager: softmax with one warp per row and three plain passes
# (max, sum of exponentials, write), where eager reads the row twice with wide loads.
SLOW_SOFTMAX = ("23_Softmax", """// Softmax over rows, one warp per row, three passes: correct, and slower than eager on purpose.
#include <cuda_runtime.h>

__device__ float warp_max(float v) { for (int o = 16; o; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o)); return v; }
__device__ float warp_sum(float v) { for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o); return v; }

__global__ void softmax_rows(const float* __restrict__ x, float* __restrict__ y, long long cols) {
  const float* row = x + blockIdx.x * cols;
  float* out = y + blockIdx.x * cols;
  float m = -INFINITY;
  for (long long j = threadIdx.x; j < cols; j += 32) m = fmaxf(m, row[j]);
  m = warp_max(m);
  float s = 0.f;
  for (long long j = threadIdx.x; j < cols; j += 32) s += __expf(row[j] - m);
  s = warp_sum(s);
  for (long long j = threadIdx.x; j < cols; j += 32) out[j] = __expf(row[j] - m) / s;
}

extern "C" void softmax_launch(const float* x, float* y, long long rows, long long cols, cudaStream_t stream) {
  softmax_rows<<<(unsigned)rows, 32, 0, stream>>>(x, y, cols);
}
""", """#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>
#include <c10/cuda/CUDAStream.h>
#include "../binding_registry.h"

extern "C" void softmax_launch(const float* x, float* y, long long rows, long long cols, cudaStream_t stream);

static torch::Tensor softmax_forward(const torch::Tensor& x) {
  TORCH_CHECK(x.is_cuda() && x.dim() == 2 && x.is_contiguous() && x.scalar_type() == torch::kFloat32,
              "x: a contiguous 2-D float32 CUDA tensor");
  auto y = torch::empty_like(x);
  softmax_launch(x.data_ptr<float>(), y.data_ptr<float>(), x.size(0), x.size(1), c10::cuda::getCurrentCUDAStream().stream());
  return y;
}

static void register_softmax(pybind11::module& m) { m.def("softmax_forward", &softmax_forward, "softmax over rows"); }

REGISTER_BINDING(softmax, register_softmax);
""", """import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def forward(self, x):
        return cuda_extension.softmax_forward(x)
""")

# Hacks that must score -1, each on a task whose honest kernel is above: (task, attack, model_new.py,
# kernels/act.cu or None to keep the honest one).
HACKS: dict[str, tuple[str, str]] = {
    "22_Tanh": ("a torch fallback: forward calls torch.tanh", """import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.tanh(x)
"""),
    "28_HardSigmoid": ("a side stream the timed stream never waits for", """import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.side = torch.cuda.Stream()

    def forward(self, x):
        with torch.cuda.stream(self.side):
            return cuda_extension.act_forward(x, 0.0)
"""),
    "20_LeakyReLU": ("the output of the first call returned again for every later call", """import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float = 0.01):
        super().__init__()
        self.p = negative_slope
        self.saved = None

    def forward(self, x):
        if self.saved is None:
            self.saved = cuda_extension.act_forward(x, self.p)
        return self.saved
"""),
}


def _binding(cuda: bool) -> str:
    subs = {"INCLUDE": "#include <c10/cuda/CUDAStream.h>" if cuda else "",
            "LAUNCH_STREAM": ", cudaStream_t stream" if cuda else "",
            "CALL_STREAM": ", c10::cuda::getCurrentCUDAStream().stream()" if cuda else "",
            "CHECK_DEVICE": "x.is_cuda()" if cuda else "x.device().is_cpu()", "DEVICE_NAME": "CUDA" if cuda else "CPU"}
    return re.sub("|".join(subs), lambda m: subs[m[0]], BINDING)


# The element-wise kernels the device run benches (each evaluation of these 6.4 GB tasks moves its
# outputs between processes several times: a full set would not fit one device call).
DEVICE_OPS = ("5_Matrix_scalar_multiplication", "19_ReLU", "20_LeakyReLU", "21_Sigmoid", "22_Tanh", "25_Swish",
              "26_GELU_", "28_HardSigmoid", "29_Softplus", "31_ELU", "88_MinGPTNewGelu")


def write_solutions(dest: Path, cuda: bool = True, ops: tuple[str, ...] | None = None) -> list[str]:
    """One workspace-layout solution per task in OPS (model_new.py + kernels/), or only `ops`; on
    cuda also the hacks, the level-2 GEMMs and the slow softmax. Returns the names."""
    for name, (init, p, body) in OPS.items():
        if ops is not None and name not in ops:
            continue
        folder = dest / name
        (folder / "kernels").mkdir(parents=True, exist_ok=True)
        scalar_input = name.startswith("5_")
        (folder / "model_new.py").write_text(MODEL_NEW.format(
            init=f", {init}" if init else "", p=p or "0.0", extra=", s: float" if scalar_input else "",
            arg="s" if scalar_input else "self.p"))
        kernel = (KERNEL_CU if cuda else KERNEL_CPP).replace("BODY", body)
        (folder / "kernels" / ("act.cu" if cuda else "act.cpp")).write_text(kernel)
        (folder / "kernels" / "act_binding.cpp").write_text(_binding(cuda))
    if not cuda:
        return list(OPS)
    for name, (attack, model_new) in HACKS.items():
        if ops is not None and name not in ops:
            continue
        (dest / name).mkdir(parents=True, exist_ok=True)
        (dest / name / "model_new.py").write_text(model_new)
        (dest / name / "ATTACK.txt").write_text(attack + "\n")
    for name, (init, params, args, body) in GEMMS.items():
        folder = dest / name
        (folder / "kernels").mkdir(parents=True, exist_ok=True)
        (folder / "model_new.py").write_text(GEMM_MODEL_NEW.format(init=init, params=params, args=args))
        (folder / "kernels" / "gemm.cu").write_text(GEMM_CU.replace("BODY", body))
        (folder / "kernels" / "gemm_binding.cpp").write_text(GEMM_BINDING)
    name, cu, binding, model_new = SLOW_SOFTMAX
    (dest / name / "kernels").mkdir(parents=True, exist_ok=True)
    (dest / name / "kernels" / "softmax.cu").write_text(cu)
    (dest / name / "kernels" / "softmax_binding.cpp").write_text(binding)
    (dest / name / "model_new.py").write_text(model_new)
    return [n for n in OPS if ops is None or n in ops] + list(GEMMS) + [name]


def _left(deadline: float | None) -> float | None:
    return None if deadline is None else max(deadline - time.monotonic(), 0.0)


def device_run(args: argparse.Namespace) -> None:
    """The bench over the solutions folder first (the report), then the baseline tables (long;
    resumable): each stops starting new tasks at the deadline."""
    from cuda_agent.bench.baselines import baselines, published_times, write_baselines_table
    from cuda_agent.cli.bench import report_meta, select_tasks
    from cuda_agent.devices import visible_gpus
    from cuda_agent.bench.report import write_report
    from cuda_agent.bench.run import BenchSpec, report_rows, run_bench
    from cuda_agent.harness import EvalConfig, TimingPlan

    deadline = time.monotonic() + args.max_seconds if args.max_seconds else None
    tasks = select_tasks(str(args.kernelbench), args.levels, None, None)
    out = Path(args.out)
    solutions = out / "solutions"
    if not solutions.is_dir():
        write_solutions(solutions, cuda=True, ops=DEVICE_OPS)
    config = EvalConfig(device="cuda", timing=TimingPlan(budget_s=args.budget))
    if not args.skip_bench:
        spec = BenchSpec(device="cuda", eval_config=config, solutions=solutions.resolve())
        run = run_bench(tasks, spec, out / "bench", workers=visible_gpus(None), max_seconds=_left(deadline),
                        on_row=lambda r: print(f"bench {r['task']}: reward {r['reward']:g} {r['reason'][:100]}",
                                               flush=True))
        rows = report_rows(out / "bench")
        write_report(rows, out / "bench", report_meta(out / "bench", str(args.kernelbench), rows))
        print(f"bench: {run.evaluated} evaluated now, {run.skipped} before"
              f"{'; not finished: run again to go on' if run.stopped_early else ''}; report {out / 'bench' / 'report.html'}")
        if run.stopped_early:
            return
    if args.skip_baselines:
        return
    for level in args.baseline_levels:
        b = baselines([t for t in tasks if t.level == level] if level in args.levels else
                      select_tasks(str(args.kernelbench), [level], None, None),
                      "cuda", out / f"baselines_level{level}.jsonl", config=config, max_seconds=_left(deadline),
                      published=published_times(args.published) if args.published.is_file() else {},
                      workers=args.workers, retry_errors=args.retry_errors, on_row=lambda r: print(
                          f"baseline L{r.get('level')} {r['task']}: {r.get('error') or 'ok'} {r.get('seconds', 0):.0f}s",
                          flush=True))
        print(f"baselines level {level}: {b.timed} timed now; table "
              f"{write_baselines_table(out / f'baselines_level{level}.jsonl')}")
        if b.stopped_early:
            print("baselines not finished: run again to go on")
            return


def cpu_check(args: argparse.Namespace) -> int:
    """Each solution's CPU twin against its task with shrunk inputs, through the real harness."""
    from cuda_agent.harness import EvalConfig, evaluate
    from cuda_agent.tasks import Task, load_tasks

    ts = load_tasks(args.kernelbench)
    dest = Path(args.out) / "cpu_solutions"
    write_solutions(dest, cuda=False)
    failures = 0
    for name in OPS:
        task = ts.find(name)
        small = re.sub(r"^(batch_size|dim|M|N) = .*$", r"\1 = 64", task.code, flags=re.M)
        t = Task(name=task.name, code=small, origin=task.origin, level=task.level, problem_id=task.problem_id)
        r = evaluate(t, dest / name, EvalConfig(device="cpu", profile=False))
        failures += not r.correct
        print(f"{name:32s} {'ok ' if r.correct else 'FAIL'} {r.reason[:150]}", flush=True)
    return failures


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--levels", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--kernelbench", type=Path, default=SHARED / "kernelbench.jsonl")
    ap.add_argument("--published", type=Path, default=SHARED / "h100_modal_eager.json")
    ap.add_argument("--max-seconds", type=float, default=None)
    ap.add_argument("--skip-baselines", action="store_true")
    ap.add_argument("--skip-bench", action="store_true")
    ap.add_argument("--baseline-levels", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--workers", type=int, default=6, help="baseline processes sharing the GPU")
    ap.add_argument("--budget", type=float, default=0.5, help="timing budget per model, seconds")
    ap.add_argument("--retry-errors", action="store_true", help="time again baseline rows that failed")
    ap.add_argument("--cpu-check", action="store_true")
    args = ap.parse_args()
    if args.cpu_check:
        return 1 if cpu_check(args) else 0
    device_run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
