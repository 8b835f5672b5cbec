// out[r] = sum_c x[r, c] for the first `rows` rows.
extern "C" void rowsum_launch(const float* x, float* out, long long rows, long long cols, int config) {
  (void)config;
  for (long long r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    double acc = 0.0;
    for (long long c = 0; c < cols; ++c) acc += xr[c];
    out[r] = static_cast<float>(acc);
  }
}
