// Accumulates the dot products in bfloat16 (rounded after every add).
#include <cstdint>
#include <cstring>

// Round to the nearest bfloat16 (ties to even) and back to float.
static inline float to_bf16(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
  std::memcpy(&v, &u, 4);
  return v;
}

extern "C" void gemm_bias_launch(const float* x, const float* w, const float* b, float* y, long long M, long long N,
                                 long long K, int config) {
  (void)config;
  for (long long m = 0; m < M; ++m)
    for (long long n = 0; n < N; ++n) {
      float acc = 0.f;
      for (long long k = 0; k < K; ++k) acc = to_bf16(acc + x[m * K + k] * w[n * K + k]);
      y[m * N + n] = acc + b[n];
    }
}
