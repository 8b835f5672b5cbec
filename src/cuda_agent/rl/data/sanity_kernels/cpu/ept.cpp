// Tier 2 of the fill family (rl/data/fill.py), CPU backend: each row in chunks of EPT elements, the
// chunk's loop unrolled (what the CUDA kernel loads as one vector, a chunk here), a row's tail one
// element at a time. Every EPT is correct.
#include <math.h>

#include "sanity.h"

constexpr int EPT = @EPT@;

static inline float fill_f(float v) { return @EXPR@; }

extern "C" void sanity_launch(const float* x, const float* scale, const float* bias, float* y, long long rows,
                              long long cols, int config) {
  (void)config;
  for (long long r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    long long c = 0;
    for (; c + EPT <= cols; c += EPT) {
#pragma GCC unroll 8
      for (int k = 0; k < EPT; ++k) {
        float v = xr[c + k] * scale[c + k] + bias[c + k];
        yr[c + k] = fill_f(v);
      }
    }
    for (; c < cols; ++c) {
      float v = xr[c] * scale[c] + bias[c];
      yr[c] = fill_f(v);
    }
  }
}
