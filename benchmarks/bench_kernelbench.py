"""KernelBench levels 1 and 2 on the device: baseline tables, then `bench` over a solutions folder
of hand-written CUDA kernels (14 element-wise level-1 tasks; the other tasks count as failures).

    python benchmarks/bench_kernelbench.py --out DIR [--max-seconds 540] [--levels 1 2]
        [--kernelbench ../shared/kernelbench/kernelbench.jsonl]
        [--published ../shared/kernelbench/h100_modal_eager.json] [--skip-baselines] [--cpu-check]

Resumable: run it again with the same --out (kept between device calls) and it goes on where it
stopped; --max-seconds is the time after which no new task is started (baselines first, then the
bench, then the report). Writes DIR/solutions/, DIR/baselines.jsonl + .md, DIR/bench/report.*.
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


def _binding(cuda: bool) -> str:
    subs = {"INCLUDE": "#include <c10/cuda/CUDAStream.h>" if cuda else "",
            "LAUNCH_STREAM": ", cudaStream_t stream" if cuda else "",
            "CALL_STREAM": ", c10::cuda::getCurrentCUDAStream().stream()" if cuda else "",
            "CHECK_DEVICE": "x.is_cuda()" if cuda else "x.device().is_cpu()", "DEVICE_NAME": "CUDA" if cuda else "CPU"}
    return re.sub("|".join(subs), lambda m: subs[m[0]], BINDING)


def write_solutions(dest: Path, cuda: bool = True) -> list[str]:
    """One workspace-layout solution per task in OPS (model_new.py + kernels/); returns the names."""
    for name, (init, p, body) in OPS.items():
        folder = dest / name
        (folder / "kernels").mkdir(parents=True, exist_ok=True)
        scalar_input = name.startswith("5_")
        (folder / "model_new.py").write_text(MODEL_NEW.format(
            init=f", {init}" if init else "", p=p or "0.0", extra=", s: float" if scalar_input else "",
            arg="s" if scalar_input else "self.p"))
        kernel = (KERNEL_CU if cuda else KERNEL_CPP).replace("BODY", body)
        (folder / "kernels" / ("act.cu" if cuda else "act.cpp")).write_text(kernel)
        (folder / "kernels" / "act_binding.cpp").write_text(_binding(cuda))
    return list(OPS)


def _left(deadline: float | None) -> float | None:
    return None if deadline is None else max(deadline - time.monotonic(), 0.0)


def device_run(args: argparse.Namespace) -> None:
    from cuda_agent.bench.baselines import baselines, published_times, write_baselines_table
    from cuda_agent.bench.cli import report_meta, select_tasks, visible_gpus
    from cuda_agent.bench.report import write_report
    from cuda_agent.bench.run import BenchSpec, report_rows, run_bench
    from cuda_agent.harness.config import EvalConfig

    deadline = time.monotonic() + args.max_seconds if args.max_seconds else None
    tasks = select_tasks(str(args.kernelbench), args.levels, None, None)
    out = Path(args.out)
    solutions = out / "solutions"
    if not solutions.is_dir():
        write_solutions(solutions, cuda=True)
    config = EvalConfig(device="cuda")
    if not args.skip_baselines:
        b = baselines(tasks, "cuda", out / "baselines.jsonl", config=config, max_seconds=_left(deadline),
                      published=published_times(args.published) if args.published.is_file() else {},
                      on_row=lambda r: print(f"baseline {r['task']}: {r.get('error') or 'ok'}", flush=True))
        print(f"baselines: {b.timed} timed now; table {write_baselines_table(out / 'baselines.jsonl', tasks)}")
        if b.stopped_early:
            print("baselines not finished: run again to go on (the bench starts after them)")
            return
    spec = BenchSpec(device="cuda", eval_config=config, solutions=solutions.resolve())
    run = run_bench(tasks, spec, out / "bench", workers=visible_gpus(None), max_seconds=_left(deadline),
                    on_row=lambda r: print(f"bench {r['task']}: reward {r['reward']:g} {r['reason'][:100]}",
                                           flush=True))
    rows = report_rows(out / "bench")
    write_report(rows, out / "bench", report_meta(out / "bench", str(args.kernelbench), rows))
    print(f"bench: {run.evaluated} evaluated now, {run.skipped} before"
          f"{'; not finished: run again to go on' if run.stopped_early else ''}; report {out / 'bench' / 'report.html'}")


def cpu_check(args: argparse.Namespace) -> int:
    """Each solution's CPU twin against its task with shrunk inputs, through the real harness."""
    from cuda_agent.harness.config import EvalConfig
    from cuda_agent.harness.evaluate import evaluate
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
    ap.add_argument("--cpu-check", action="store_true")
    args = ap.parse_args()
    if args.cpu_check:
        return 1 if cpu_check(args) else 0
    device_run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
