// mean(max(0, 1 - predictions * targets)) in one pass, accumulated in double.
extern "C" void hinge_launch(const float* predictions, const float* targets, float* out, long long n) {
  double sum = 0.0;
  for (long long i = 0; i < n; ++i) {
    const float margin = 1.f - predictions[i] * targets[i];
    sum += margin > 0.f ? margin : 0.f;
  }
  out[0] = static_cast<float>(sum / static_cast<double>(n));
}
