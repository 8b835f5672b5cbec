extern "C" void sbr_launch(const float* x, const float* s, const float* b, float* y, long long rows, long long cols, int config) {
  (void)config;
  for (long long r = 0; r < rows; ++r) {
    const float* xr = x + r * cols; float* yr = y + r * cols;
    for (long long c = 0; c < cols; ++c) { float v = xr[c] * s[c] + b[c]; yr[c] = v > 0.f ? v : 0.f; }
  }
}
