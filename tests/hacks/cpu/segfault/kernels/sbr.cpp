// Writes through a null pointer.
#include "sbr.h"

extern "C" void sbr_launch(const float* x, const float* scale, const float* bias, float* y, long long rows,
                           long long cols, int relu, int config) {
  (void)x; (void)scale; (void)bias; (void)y; (void)rows; (void)cols; (void)relu; (void)config;
  volatile float* p = nullptr;
  *p = 1.f;
}
