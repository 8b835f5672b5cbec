// y[m, n] = sum_k x[m, k] * w[n, k] + b[n]  (nn.Linear's layout: w is out_features x in_features).
// Blocked over n so a tile of w stays in cache while every row of x streams past it.
extern "C" void gemm_bias_launch(const float* x, const float* w, const float* b, float* y, long long M, long long N,
                                 long long K, int config) {
  (void)config;
  const long long tile = 16;
  for (long long n0 = 0; n0 < N; n0 += tile) {
    long long n1 = n0 + tile < N ? n0 + tile : N;
    for (long long m = 0; m < M; ++m) {
      const float* xr = x + m * K;
      for (long long n = n0; n < n1; ++n) {
        const float* wr = w + n * K;
        float acc0 = 0.f, acc1 = 0.f, acc2 = 0.f, acc3 = 0.f;
        long long k = 0;
        for (; k + 4 <= K; k += 4) {
          acc0 += xr[k] * wr[k];
          acc1 += xr[k + 1] * wr[k + 1];
          acc2 += xr[k + 2] * wr[k + 2];
          acc3 += xr[k + 3] * wr[k + 3];
        }
        for (; k < K; ++k) acc0 += xr[k] * wr[k];
        y[m * N + n] = (acc0 + acc1) + (acc2 + acc3) + b[n];
      }
    }
  }
}
