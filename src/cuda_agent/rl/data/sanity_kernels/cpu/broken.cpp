// One fused pass that forgets the bias: wrong.
#include <math.h>

#include "sanity.h"

extern "C" void sanity_launch(const float* x, const float* scale, const float* bias, float* y, long long rows,
                              long long cols, int config) {
  (void)config;
  (void)bias;
  for (long long r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    for (long long c = 0; c < cols; ++c) {
      float v = xr[c] * scale[c];
      yr[c] = @EXPR@;
    }
  }
}
