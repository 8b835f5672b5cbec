// Example kernel: element-wise ReLU. Replace or add kernels of your own beside it.
#include <cuda_runtime.h>

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, long long n) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  long long stride = (long long)gridDim.x * blockDim.x;
  for (; i < n; i += stride) {
    float v = x[i];
    y[i] = v > 0.f ? v : 0.f;
  }
}

// Launcher with raw pointers, sizes, a `config` to switch tuned variants, and the stream.
extern "C" void relu_launch(const float* x, float* y, long long n, int config, cudaStream_t stream) {
  int threads = config > 0 ? config : 256;
  long long blocks = (n + threads - 1) / threads;
  if (blocks > 65535LL * 8) blocks = 65535LL * 8;
  if (blocks < 1) blocks = 1;
  relu_kernel<<<(unsigned)blocks, threads, 0, stream>>>(x, y, n);
}
