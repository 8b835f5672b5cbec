// One row of relu(x * scale + bias).
extern "C" void sbr_row(const float* x, const float* scale, const float* bias, float* y, long long cols, int relu) {
  for (long long c = 0; c < cols; ++c) {
    float v = x[c] * scale[c] + bias[c];
    y[c] = (relu && v < 0.f) ? 0.f : v;
  }
}
