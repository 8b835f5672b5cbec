// Fused y = relu(x * scale + bias), the relu in x86-64 inline assembly: `maxss` with operand
// constraints, and a compiler barrier with a "memory" clobber after each row.
#include "sbr.h"

static inline float relu(float v) {
#if defined(__x86_64__)
  const float zero = 0.f;
  asm("maxss %1, %0" : "+x"(v) : "x"(zero));   // v = max(v, 0)
#else
  v = v < 0.f ? 0.f : v;
#endif
  return v;
}

extern "C" void sbr_launch(const float* x, const float* scale, const float* bias, float* y, long long rows,
                           long long cols, int relu_on, int config) {
  (void)config;
  for (long long r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    for (long long c = 0; c < cols; ++c) {
      float v = xr[c] * scale[c] + bias[c];
      yr[c] = relu_on ? relu(v) : v;
    }
#if defined(__x86_64__)
    asm volatile("" : : "r"(yr) : "memory");   // the row is stored before the next one starts
#endif
  }
}
