// A kernel that never finishes.
#include "sbr.cuh"

__global__ void spin(volatile int* flag) {
  while (*flag == 0) {
  }
}

extern "C" void sbr_launch(const float* x, const float* scale, const float* bias, float* y, long long rows,
                           long long cols, int relu, int config, cudaStream_t stream) {
  (void)x; (void)scale; (void)bias; (void)rows; (void)cols; (void)relu; (void)config;
  // y is uninitialized device memory: most likely not all zero bytes, but make sure it spins.
  cudaMemsetAsync(y, 0, sizeof(int), stream);
  spin<<<1, 1, 0, stream>>>(reinterpret_cast<volatile int*>(y));
}
