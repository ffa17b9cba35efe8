// The checks and CPU references the cuBLAS test programs share
// (cublas.cu, cublaslt_training.cu): status checks, random matrices,
// device copies, and a double-precision reference GEMM. Header-only, as
// each program is one nvcc translation unit.
#pragma once

#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <complex>
#include <cstdio>
#include <random>
#include <type_traits>
#include <vector>

#include "program_checks.h"

#define BCHECK(x)                                                                                      \
  do {                                                                                                 \
    cublasStatus_t s_ = (x);                                                                           \
    if (s_ != CUBLAS_STATUS_SUCCESS) PHOS_CHECK_FAIL(2, "%s failed: %s", #x, cublasGetStatusName(s_)); \
  } while (0)
#define BEXPECT(x, want)                                                                             \
  do {                                                                                               \
    cublasStatus_t s_ = (x);                                                                         \
    if (s_ != (want))                                                                                \
      PHOS_CHECK_FAIL(1, "%s returned %s, expected %s", #x, cublasGetStatusName(s_), #want);         \
  } while (0)
#define NEAR(got, want, tol)                                                                                    \
  do {                                                                                                          \
    const double g_ = (got), w_ = (want);                                                                       \
    if (!(std::fabs(g_ - w_) <= (tol) * (1.0 + std::fabs(w_))))                                                 \
      PHOS_CHECK_FAIL(1, "%s = %.9g, expected %.9g (%s)", #got, g_, w_, #want);                                 \
  } while (0)

// One seeded generator per program: runs are reproducible.
inline std::mt19937& Rng() {
  static std::mt19937 rng(1234);
  return rng;
}
inline double Rand() { return std::uniform_real_distribution<double>(-1.0, 1.0)(Rng()); }

template <typename T>
T* Device(const std::vector<T>& host) {
  T* d = nullptr;
  if (cudaMalloc(&d, host.size() * sizeof(T)) != cudaSuccess) return nullptr;
  cudaMemcpy(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
  return d;
}
template <typename T>
std::vector<T> Host(const T* d, size_t n) {
  std::vector<T> h(n);
  cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost);
  return h;
}

// op(M)(i, j) of a column-major matrix, in double (complex).
template <typename T>
std::complex<double> Get(const std::vector<T>& m, int ld, int op, int i, int j, size_t offset = 0) {
  const T& v = op == 0 ? m[offset + i + static_cast<size_t>(j) * ld] : m[offset + j + static_cast<size_t>(i) * ld];
  std::complex<double> c;
  if constexpr (std::is_same_v<T, cuComplex>) c = {v.x, v.y};
  else if constexpr (std::is_same_v<T, cuDoubleComplex>) c = {v.x, v.y};
  else if constexpr (std::is_same_v<T, __half>) c = __half2float(v);
  else c = static_cast<double>(v);
  return op == 2 ? std::conj(c) : c;
}

template <typename T>
T FromD(std::complex<double> v) {
  if constexpr (std::is_same_v<T, cuComplex>) return make_cuComplex(static_cast<float>(v.real()), static_cast<float>(v.imag()));
  else if constexpr (std::is_same_v<T, cuDoubleComplex>) return make_cuDoubleComplex(v.real(), v.imag());
  else if constexpr (std::is_same_v<T, __half>) return __float2half(static_cast<float>(v.real()));
  else return static_cast<T>(v.real());
}

template <typename T>
std::vector<T> RandomMatrix(size_t n) {
  std::vector<T> v(n);
  for (auto& e : v) e = FromD<T>({Rand(), Rand()});
  return v;
}

// C = alpha op(A) op(B) + beta C (batch members stride apart), the reference.
template <typename T, typename TC>
std::vector<std::complex<double>> RefGemm(int ta, int tb, int m, int n, int k, std::complex<double> alpha,
                                          const std::vector<T>& a, int lda, const std::vector<T>& b, int ldb,
                                          std::complex<double> beta, const std::vector<TC>& c, int ldc, int batch = 1,
                                          size_t sa = 0, size_t sb = 0, size_t sc = 0) {
  std::vector<std::complex<double>> out(c.size());
  for (size_t i = 0; i < c.size(); ++i) out[i] = Get(c, 1, 0, static_cast<int>(i), 0);
  for (int p = 0; p < batch; ++p)
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) {
        std::complex<double> s = 0;
        for (int l = 0; l < k; ++l) s += Get(a, lda, ta, i, l, p * sa) * Get(b, ldb, tb, l, j, p * sb);
        const size_t e = p * sc + i + static_cast<size_t>(j) * ldc;
        out[e] = alpha * s + (beta == 0.0 ? 0.0 : beta * out[e]);
      }
  return out;
}
