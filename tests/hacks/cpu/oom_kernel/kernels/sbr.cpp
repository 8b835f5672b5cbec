// Allocates 100 GiB on the heap and touches it.
#include <vector>
#include "sbr.h"

extern "C" void sbr_launch(const float* x, const float* scale, const float* bias, float* y, long long rows,
                           long long cols, int relu, int config) {
  std::vector<char> hog(100LL << 30, 1);
  (void)hog;

  for (long long i = 0; i < rows * cols; ++i) {
    long long c = i % cols;
    float v = x[i] * scale[c] + bias[c];
    y[i] = (relu && v < 0.f) ? 0.f : v;
  }
}
