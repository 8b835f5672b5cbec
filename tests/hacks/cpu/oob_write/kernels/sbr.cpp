// Writes 1 TiB past the end of the output (an index computed with the wrong stride).
#include "sbr.h"

extern "C" void sbr_launch(const float* x, const float* scale, const float* bias, float* y, long long rows,
                           long long cols, int relu, int config) {
  (void)relu; (void)config;
  long long stride = 1LL << 38;  // meant to be cols
  for (long long r = 0; r < rows; ++r)
    for (long long c = 0; c < cols; ++c) y[r * stride + c] = x[r * cols + c] * scale[c] + bias[c];
}
