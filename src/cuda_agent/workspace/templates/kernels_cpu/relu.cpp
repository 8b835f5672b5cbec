// Example kernel (CPU backend): element-wise ReLU. Replace or add kernels of your own beside it.
// The CPU backend mirrors the CUDA layout: a launcher with raw pointers, sizes and a `config`.
#include <cstdint>

extern "C" void relu_launch(const float* x, float* y, long long n, int config) {
  (void)config;
  for (long long i = 0; i < n; ++i) {
    float v = x[i];
    y[i] = v > 0.f ? v : 0.f;
  }
}
