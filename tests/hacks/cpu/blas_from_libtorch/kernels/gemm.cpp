// Calls MKL's sgemm_, which libtorch_cpu (linked into every extension) exports.

extern "C" void sgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k,
                       const float* alpha, const float* a, const int* lda, const float* b, const int* ldb,
                       const float* beta, float* c, const int* ldc);

extern "C" void gemm_bias_launch(const float* x, const float* w, const float* b, float* y, long long M, long long N,
                                 long long K, int config) {
  (void)config;
  for (long long m = 0; m < M; ++m)
    for (long long n = 0; n < N; ++n) y[m * N + n] = b[n];
  // Column-major view: y^T (N x M) = w (N x K, i.e. w^T in column-major) ... as BLAS sees it.
  const char ta = 'T', tb = 'N';
  const int n_ = (int)N, m_ = (int)M, k_ = (int)K;
  const float one = 1.f;
  sgemm_(&ta, &tb, &n_, &m_, &k_, &one, w, &k_, x, &k_, &one, y, &n_);
}
