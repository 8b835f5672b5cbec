// The launcher: one call of the row kernel (kernels/sbr_row.cpp) per row.
#include "sbr.h"

extern "C" void sbr_row(const float* x, const float* scale, const float* bias, float* y, long long cols, int relu);

extern "C" void sbr_launch(const float* x, const float* scale, const float* bias, float* y, long long rows,
                           long long cols, int relu, int config) {
  (void)config;
  for (long long r = 0; r < rows; ++r) sbr_row(x + r * cols, scale, bias, y + r * cols, cols, relu);
}
