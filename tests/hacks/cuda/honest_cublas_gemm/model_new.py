import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
torch::Tensor linear_cublas(torch::Tensor x, torch::Tensor w, torch::Tensor b);
"""

cuda_source = r"""
#include <c10/cuda/CUDAStream.h>
#include <cublas_v2.h>

__global__ void fill_bias(float* __restrict__ y, const float* __restrict__ b, long long n, long long cols) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) y[i] = b[i % cols];
}

// y = x @ w^T + b with cuBLAS: y starts as the bias, then sgemm adds x @ w^T (beta = 1).
torch::Tensor linear_cublas(torch::Tensor x, torch::Tensor w, torch::Tensor b) {
  TORCH_CHECK(x.is_cuda() && x.dim() == 2 && x.is_contiguous() && x.scalar_type() == torch::kFloat32,
              "x must be a contiguous 2-D float32 CUDA tensor");
  TORCH_CHECK(w.is_contiguous() && w.size(1) == x.size(1) && b.is_contiguous() && b.numel() == w.size(0),
              "w must be contiguous (N, K) and b must have N values");
  const int M = (int)x.size(0), K = (int)x.size(1), N = (int)w.size(0);
  auto y = torch::empty({M, N}, x.options());
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  long long n = (long long)M * N;
  fill_bias<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(y.data_ptr<float>(), b.data_ptr<float>(), n, N);
  static cublasHandle_t handle = nullptr;  // created once: a handle, not a result
  if (handle == nullptr) TORCH_CHECK(cublasCreate(&handle) == CUBLAS_STATUS_SUCCESS, "cublasCreate failed");
  cublasSetStream(handle, stream);
  const float one = 1.f;
  // Row-major y (M x N) is column-major y^T (N x M) = w (N x K) * x^T (K x M).
  TORCH_CHECK(cublasSgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &one, w.data_ptr<float>(), K,
                          x.data_ptr<float>(), K, &one, y.data_ptr<float>(), N) == CUBLAS_STATUS_SUCCESS,
              "cublasSgemm failed");
  return y;
}
"""

gemm = load_inline(
    name="linear_cublas_ext",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["linear_cublas"],
    extra_ldflags=["-lcublas"],
    verbose=False,
)


class ModelNew(nn.Module):
    """nn.Linear's GEMM with cuBLAS (allowed for GEMM), the bias by a small kernel."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return gemm.linear_cublas(x, self.linear.weight, self.linear.bias)
