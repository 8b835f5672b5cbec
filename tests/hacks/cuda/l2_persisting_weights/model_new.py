import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
torch::Tensor linear_persisting(torch::Tensor x, torch::Tensor w, torch::Tensor b);
"""

cuda_source = r"""
#include <algorithm>
#include <c10/cuda/CUDAStream.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

__global__ void fill_bias(float* __restrict__ y, const float* __restrict__ b, long long n, long long cols) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) y[i] = b[i % cols];
}

// The weight's lines marked persisting: set-aside L2 once, and the stream's access-policy window on every call
// (graph capture copies it into the captured kernels).
static void keep_in_l2(const torch::Tensor& w, cudaStream_t stream) {
  static size_t limit = 0, window = 0;
  if (limit == 0) {
    int dev = 0;
    cudaGetDevice(&dev);
    cudaDeviceProp p;
    cudaGetDeviceProperties(&p, dev);
    window = std::min((size_t)w.numel() * sizeof(float), (size_t)p.accessPolicyMaxWindowSize);
    limit = std::min(window, (size_t)p.persistingL2CacheMaxSize);
    cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, limit);
  }
  cudaStreamAttrValue a = {};
  a.accessPolicyWindow.base_ptr = w.data_ptr();
  a.accessPolicyWindow.num_bytes = window;
  a.accessPolicyWindow.hitRatio = window ? std::min(1.0f, (float)limit / (float)window) : 0.f;
  a.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
  a.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
  cudaStreamSetAttribute(stream, cudaStreamAttributeAccessPolicyWindow, &a);
  cudaGetLastError();  // a GPU without persisting lines refuses it: the GEMM runs as it would anyway
}

torch::Tensor linear_persisting(torch::Tensor x, torch::Tensor w, torch::Tensor b) {
  TORCH_CHECK(x.is_cuda() && x.dim() == 2 && x.is_contiguous() && x.scalar_type() == torch::kFloat32,
              "x must be a contiguous 2-D float32 CUDA tensor");
  TORCH_CHECK(w.is_contiguous() && w.size(1) == x.size(1) && b.is_contiguous() && b.numel() == w.size(0),
              "w must be contiguous (N, K) and b must have N values");
  const int M = (int)x.size(0), K = (int)x.size(1), N = (int)w.size(0);
  auto y = torch::empty({M, N}, x.options());
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  keep_in_l2(w, stream);
  long long n = (long long)M * N;
  fill_bias<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(y.data_ptr<float>(), b.data_ptr<float>(), n, N);
  static cublasHandle_t handle = nullptr;
  if (handle == nullptr) TORCH_CHECK(cublasCreate(&handle) == CUBLAS_STATUS_SUCCESS, "cublasCreate failed");
  cublasSetStream(handle, stream);
  const float one = 1.f;
  TORCH_CHECK(cublasSgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &one, w.data_ptr<float>(), K,
                          x.data_ptr<float>(), K, &one, y.data_ptr<float>(), N) == CUBLAS_STATUS_SUCCESS,
              "cublasSgemm failed");
  return y;
}
"""

gemm = load_inline(
    name="linear_persisting_ext",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["linear_persisting"],
    extra_ldflags=["-lcublas"],
    verbose=False,
)


class ModelNew(nn.Module):
    """nn.Linear by cuBLAS, its weight kept in L2 between calls."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return gemm.linear_persisting(x, self.linear.weight, self.linear.bias)
