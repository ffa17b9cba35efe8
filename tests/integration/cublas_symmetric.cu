// cuBLAS's symmetric, Hermitian and triangular routines and dgmm through
// phos (docs/interposer.md "cuBLAS and cuBLASLt"): symm/hemm, syr2k/her2k,
// syrkx/herkx, herk, trmm (out of place and in place), symv/hemv, trmv,
// trsv, syr/her, syr2/her2, dgmm, and the banded and packed level 2 — real and complex, both triangles and sides,
// host and device scalars — each against a double-precision CPU
// reference built from the stored triangle. Prints "cublas_symmetric: OK"
// at the end; a failed check prints its line.
#define PHOS_PROGRAM_NAME "cublas_symmetric"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "cublas_checks.h"
#include "program_checks.h"

namespace {

using cdbl = std::complex<double>;

template <typename T>
cdbl Val(const T& v) {
  return Get(std::vector<T>{v}, 1, 0, 0, 0);
}

/// The full n x n matrix whose `upper` or lower triangle is stored at
/// (m, ld): symmetric, or Hermitian (the diagonal's imaginary part taken
/// as zero, as BLAS does).
template <typename T>
std::vector<cdbl> Full(const std::vector<T>& m, int n, int ld, bool upper, bool herm) {
  std::vector<cdbl> f(static_cast<size_t>(n) * n);
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < n; ++i) {
      const bool stored = upper ? i <= j : i >= j;
      cdbl v = stored ? Get(m, ld, 0, i, j) : Get(m, ld, 0, j, i);
      if (herm && !stored) v = std::conj(v);
      if (herm && i == j) v = v.real();
      f[i + static_cast<size_t>(j) * n] = v;
    }
  return f;
}

/// The triangular matrix (unit diagonal: ones) of the stored triangle.
template <typename T>
std::vector<cdbl> Tri(const std::vector<T>& m, int n, int ld, bool upper, bool unit) {
  std::vector<cdbl> f(static_cast<size_t>(n) * n, 0.0);
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < n; ++i) {
      if (upper ? i > j : i < j) continue;
      f[i + static_cast<size_t>(j) * n] = (unit && i == j) ? cdbl(1.0) : Get(m, ld, 0, i, j);
    }
  return f;
}

/// op(F)(i, j) of a dense n-row matrix in double.
cdbl OpF(const std::vector<cdbl>& f, int rows, int op, int i, int j) {
  const cdbl v = op == 0 ? f[i + static_cast<size_t>(j) * rows] : f[j + static_cast<size_t>(i) * rows];
  return op == 2 ? std::conj(v) : v;
}

template <typename T>
int Compare(const char* what, const std::vector<T>& got, const std::vector<cdbl>& want, double tol) {
  for (size_t i = 0; i < want.size(); ++i) {
    const cdbl g = Get(got, 1, 0, static_cast<int>(i), 0);
    if (std::abs(g - want[i]) > tol * (1 + std::abs(want[i])))
      PHOS_CHECK_FAIL(1, "%s: element %zu = (%g, %g), expected (%g, %g)", what, i, g.real(), g.imag(), want[i].real(),
                      want[i].imag());
  }
  return 0;
}

template <typename T>
std::vector<cdbl> AsD(const std::vector<T>& v) {
  std::vector<cdbl> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = Get(v, 1, 0, static_cast<int>(i), 0);
  return out;
}

template <typename T>
double Tol() {
  return sizeof(T) == 4 || std::is_same_v<T, cuComplex> ? 1e-4 : 1e-10;
}

// symm/hemm: C = alpha A B + beta C (left) or alpha B A + beta C (right).
template <typename T, typename Fn>
int CheckSymm(cublasHandle_t h, const char* what, Fn fn, bool herm, cublasSideMode_t side, cublasFillMode_t uplo) {
  const int m = 7, n = 5, ka = side == CUBLAS_SIDE_LEFT ? m : n, lda = ka + 2, ldb = m + 1, ldc = m + 3;
  auto a = RandomMatrix<T>(static_cast<size_t>(lda) * ka), b = RandomMatrix<T>(static_cast<size_t>(ldb) * n);
  auto c = RandomMatrix<T>(static_cast<size_t>(ldc) * n);
  T *da = Device(a), *db = Device(b), *dc = Device(c);
  const T alpha = FromD<T>({0.5, 0.25}), beta = FromD<T>({-1.0, 0.5});
  BCHECK(fn(h, side, uplo, m, n, &alpha, da, lda, db, ldb, &beta, dc, ldc));
  const auto full = Full(a, ka, lda, uplo == CUBLAS_FILL_MODE_UPPER, herm);
  auto want = AsD(c);
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      cdbl s = 0;
      for (int l = 0; l < ka; ++l)
        s += side == CUBLAS_SIDE_LEFT ? full[i + static_cast<size_t>(l) * ka] * Get(b, ldb, 0, l, j)
                                      : Get(b, ldb, 0, i, l) * full[l + static_cast<size_t>(j) * ka];
      want[i + static_cast<size_t>(j) * ldc] = Val(alpha) * s + Val(beta) * want[i + static_cast<size_t>(j) * ldc];
    }
  if (int r = Compare(what, Host(dc, c.size()), want, Tol<T>())) return r;
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
  return 0;
}

// syr2k / her2k / herk: only the `uplo` triangle of C is written; the other
// must be untouched.
// CheckRankK's `two`: one product of A with itself (syrk/herk), two
// (syr2k/her2k), or kOneProduct of A with B (syrkx/herkx).
constexpr int kOneProduct = 2;

template <typename T, typename SA, typename SB, typename Call>
int CheckRankK(const char* what, int op, bool herm, int two, cublasFillMode_t uplo, SA alpha, SB beta, Call call) {
  const int n = 6, k = 4, rows = op == 0 ? n : k, cols = op == 0 ? k : n, lda = rows + 1, ldc = n + 2;
  auto a = RandomMatrix<T>(static_cast<size_t>(lda) * cols), b = RandomMatrix<T>(static_cast<size_t>(lda) * cols);
  if (two == kOneProduct && herm) {
    // herkx's contract: op(A) op(B)^H is Hermitian — B = A D, D real diagonal.
    for (int col = 0; col < cols; ++col)
      for (int row = 0; row < rows; ++row) {
        const int l = op == 0 ? col : row;
        b[row + static_cast<size_t>(col) * lda] = FromD<T>(Get(a, lda, 0, row, col) * (0.5 + 0.25 * l));
      }
  }
  auto c = RandomMatrix<T>(static_cast<size_t>(ldc) * n);
  T *da = Device(a), *db = Device(b), *dc = Device(c);
  BCHECK(call(da, db, dc, lda, ldc, n, k));
  auto want = AsD(c);
  const bool upper = uplo == CUBLAS_FILL_MODE_UPPER;
  const cdbl al = Val(alpha), be = Val(beta);
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < n; ++i) {
      if (upper ? i > j : i < j) continue;
      cdbl s = 0;
      for (int l = 0; l < k; ++l) {
        // op(X)(i, l) op(Y)(j, l)^T (^H when Hermitian)
        const cdbl ai = Get(a, lda, op, i, l), aj = Get(a, lda, op, j, l);
        const cdbl bi = Get(b, lda, op, i, l), bj = Get(b, lda, op, j, l);
        const auto c = [&](cdbl v) { return herm ? std::conj(v) : v; };
        if (two == kOneProduct) s += al * ai * c(bj);  // syrkx/herkx
        else if (!two) s += al * ai * c(aj);
        else s += al * ai * c(bj) + c(al) * bi * c(aj);
      }
      cdbl& w = want[i + static_cast<size_t>(j) * ldc];
      w = s + be * (herm && i == j ? cdbl(w.real()) : w);
    }
  if (int r = Compare(what, Host(dc, c.size()), want, Tol<T>())) return r;
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
  return 0;
}

int Level3(cublasHandle_t h) {
  if (CheckSymm<float>(h, "ssymm left upper", cublasSsymm, false, CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_UPPER)) return 1;
  if (CheckSymm<cuDoubleComplex>(h, "zsymm right lower", cublasZsymm, false, CUBLAS_SIDE_RIGHT, CUBLAS_FILL_MODE_LOWER))
    return 1;
  if (CheckSymm<cuComplex>(h, "chemm left lower", cublasChemm, true, CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_LOWER)) return 1;
  if (CheckSymm<double>(h, "dsymm right upper", cublasDsymm, false, CUBLAS_SIDE_RIGHT, CUBLAS_FILL_MODE_UPPER)) return 1;
  const double dal = 0.75, dbe = -0.5;
  if (CheckRankK<double>("dsyr2k lower N", 0, false, true, CUBLAS_FILL_MODE_LOWER, dal, dbe,
                         [&](double* a, double* b, double* c, int lda, int ldc, int n, int k) {
                           return cublasDsyr2k(h, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N, n, k, &dal, a, lda, b, lda,
                                               &dbe, c, ldc);
                         }))
    return 1;
  const cuComplex cal = make_cuComplex(0.5f, -0.25f), cbe = make_cuComplex(1.0f, 0.5f);
  if (CheckRankK<cuComplex>("csyr2k upper T", 1, false, true, CUBLAS_FILL_MODE_UPPER, cal, cbe,
                            [&](cuComplex* a, cuComplex* b, cuComplex* c, int lda, int ldc, int n, int k) {
                              return cublasCsyr2k(h, CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_T, n, k, &cal, a, lda, b, lda,
                                                  &cbe, c, ldc);
                            }))
    return 1;
  const cuDoubleComplex zal = make_cuDoubleComplex(0.5, 0.75);
  const double zbe = 0.25;
  if (CheckRankK<cuDoubleComplex>("zher2k upper N", 0, true, true, CUBLAS_FILL_MODE_UPPER, zal, zbe,
                                  [&](cuDoubleComplex* a, cuDoubleComplex* b, cuDoubleComplex* c, int lda, int ldc,
                                      int n, int k) {
                                    return cublasZher2k(h, CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_N, n, k, &zal, a, lda, b,
                                                        lda, &zbe, c, ldc);
                                  }))
    return 1;
  if (CheckRankK<double>("dsyrkx upper T", 1, false, kOneProduct, CUBLAS_FILL_MODE_UPPER, dal, dbe,
                         [&](double* a, double* b, double* c, int lda, int ldc, int n, int k) {
                           return cublasDsyrkx(h, CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_T, n, k, &dal, a, lda, b, lda, &dbe,
                                               c, ldc);
                         }))
    return 1;
  // herkx's contract: a Hermitian result (B = A D, and a real alpha).
  const cuDoubleComplex zreal = make_cuDoubleComplex(0.75, 0.0);
  if (CheckRankK<cuDoubleComplex>("zherkx lower N", 0, true, kOneProduct, CUBLAS_FILL_MODE_LOWER, zreal, zbe,
                                  [&](cuDoubleComplex* a, cuDoubleComplex* b, cuDoubleComplex* c, int lda, int ldc,
                                      int n, int k) {
                                    return cublasZherkx(h, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N, n, k, &zreal, a, lda, b,
                                                        lda, &zbe, c, ldc);
                                  }))
    return 1;
  const float hal = 1.5f, hbe = -0.5f;
  if (CheckRankK<cuComplex>("cherk lower C", 2, true, false, CUBLAS_FILL_MODE_LOWER, hal, hbe,
                            [&](cuComplex* a, cuComplex*, cuComplex* c, int lda, int ldc, int n, int k) {
                              return cublasCherk(h, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_C, n, k, &hal, a, lda, &hbe, c,
                                                 ldc);
                            }))
    return 1;
  // herk with its real scalars in device memory (device pointer mode).
  float* dscal = Device(std::vector<float>{hal, hbe});
  BCHECK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE));
  const int rc = CheckRankK<cuComplex>("cherk upper N, device scalars", 0, true, false, CUBLAS_FILL_MODE_UPPER, hal,
                                       hbe, [&](cuComplex* a, cuComplex*, cuComplex* c, int lda, int ldc, int n, int k) {
                                         return cublasCherk(h, CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_N, n, k, dscal, a, lda,
                                                            dscal + 1, c, ldc);
                                       });
  BCHECK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
  cudaFree(dscal);
  if (rc) return rc;
  // trmm: out of place (B kept, C written) and in place (C is B).
  {
    const int m = 6, n = 5, lda = 7, ldb = 8, ldc = 9;
    auto a = RandomMatrix<float>(static_cast<size_t>(lda) * m), b = RandomMatrix<float>(static_cast<size_t>(ldb) * n);
    auto c = RandomMatrix<float>(static_cast<size_t>(ldc) * n);
    float *da = Device(a), *db = Device(b), *dc = Device(c);
    const float alpha = -0.75f;
    BCHECK(cublasStrmm(h, CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_T, CUBLAS_DIAG_UNIT, m, n, &alpha, da, lda,
                       db, ldb, dc, ldc));
    const auto tri = Tri(a, m, lda, true, true);
    auto want = AsD(c);
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) {
        cdbl s = 0;
        for (int l = 0; l < m; ++l) s += OpF(tri, m, 1, i, l) * Get(b, ldb, 0, l, j);
        want[i + static_cast<size_t>(j) * ldc] = static_cast<double>(alpha) * s;
      }
    if (int r = Compare("strmm left upper T unit", Host(dc, c.size()), want, 1e-4)) return r;
    EXPECT(Host(db, b.size()) == b);  // B is only read
    cudaFree(da);
    cudaFree(db);
    cudaFree(dc);
  }
  {
    const int m = 4, n = 6, lda = 7, ldb = 5;
    auto a = RandomMatrix<cuDoubleComplex>(static_cast<size_t>(lda) * n);
    auto b = RandomMatrix<cuDoubleComplex>(static_cast<size_t>(ldb) * n);
    cuDoubleComplex *da = Device(a), *db = Device(b);
    const cuDoubleComplex alpha = make_cuDoubleComplex(0.5, 0.5);
    BCHECK(cublasZtrmm(h, CUBLAS_SIDE_RIGHT, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_C, CUBLAS_DIAG_NON_UNIT, m, n, &alpha,
                       da, lda, db, ldb, db, ldb));
    const auto tri = Tri(a, n, lda, false, false);
    auto want = AsD(b);
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) {
        cdbl s = 0;
        for (int l = 0; l < n; ++l) s += Get(b, ldb, 0, i, l) * OpF(tri, n, 2, l, j);
        want[i + static_cast<size_t>(j) * ldb] = Val(alpha) * s;
      }
    if (int r = Compare("ztrmm right lower C in place", Host(db, b.size()), want, 1e-10)) return r;
    cudaFree(da);
    cudaFree(db);
  }
  std::printf("cublas_symmetric: symm, hemm, syr2k, her2k, syrkx, herkx, herk, trmm OK\n");
  return 0;
}

// symv/hemv: y = alpha A x + beta y, x and y strided.
template <typename T, typename Fn>
int CheckSymv(cublasHandle_t h, const char* what, Fn fn, bool herm, cublasFillMode_t uplo) {
  const int n = 7, lda = 9, incx = 2, incy = 3;
  auto a = RandomMatrix<T>(static_cast<size_t>(lda) * n), x = RandomMatrix<T>(static_cast<size_t>(n) * incx);
  auto y = RandomMatrix<T>(static_cast<size_t>(n) * incy);
  T *da = Device(a), *dx = Device(x), *dy = Device(y);
  const T alpha = FromD<T>({0.5, -0.5}), beta = FromD<T>({2.0, 0.25});
  BCHECK(fn(h, uplo, n, &alpha, da, lda, dx, incx, &beta, dy, incy));
  const auto full = Full(a, n, lda, uplo == CUBLAS_FILL_MODE_UPPER, herm);
  auto want = AsD(y);
  for (int i = 0; i < n; ++i) {
    cdbl s = 0;
    for (int j = 0; j < n; ++j) s += full[i + static_cast<size_t>(j) * n] * Get(x, 1, 0, j * incx, 0);
    want[static_cast<size_t>(i) * incy] = Val(alpha) * s + Val(beta) * want[static_cast<size_t>(i) * incy];
  }
  if (int r = Compare(what, Host(dy, y.size()), want, Tol<T>())) return r;
  cudaFree(da);
  cudaFree(dx);
  cudaFree(dy);
  return 0;
}

// syr/her/syr2/her2 on the stored triangle; the other triangle untouched.
template <typename T, typename Call>
int CheckRank1(const char* what, bool herm, bool two, cublasFillMode_t uplo, cdbl alpha, Call call) {
  const int n = 6, lda = 8, incx = 1, incy = 2;
  auto a = RandomMatrix<T>(static_cast<size_t>(lda) * n), x = RandomMatrix<T>(static_cast<size_t>(n) * incx);
  auto y = RandomMatrix<T>(static_cast<size_t>(n) * incy);
  T *da = Device(a), *dx = Device(x), *dy = Device(y);
  BCHECK(call(dx, incx, dy, incy, da, lda, n));
  auto want = AsD(a);
  const bool upper = uplo == CUBLAS_FILL_MODE_UPPER;
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < n; ++i) {
      if (upper ? i > j : i < j) continue;
      const cdbl xi = Get(x, 1, 0, i * incx, 0), xj = Get(x, 1, 0, j * incx, 0);
      const cdbl yi = Get(y, 1, 0, i * incy, 0), yj = Get(y, 1, 0, j * incy, 0);
      const auto c = [&](cdbl v) { return herm ? std::conj(v) : v; };
      cdbl add = two ? alpha * xi * c(yj) + c(alpha) * yi * c(xj) : alpha * xi * c(xj);
      cdbl& w = want[i + static_cast<size_t>(j) * lda];
      w = (herm && i == j ? cdbl(w.real()) : w) + add;
    }
  if (int r = Compare(what, Host(da, a.size()), want, Tol<T>())) return r;
  cudaFree(da);
  cudaFree(dx);
  cudaFree(dy);
  return 0;
}

int Level2(cublasHandle_t h) {
  if (CheckSymv<double>(h, "dsymv upper", cublasDsymv, false, CUBLAS_FILL_MODE_UPPER)) return 1;
  if (CheckSymv<cuComplex>(h, "csymv lower", cublasCsymv, false, CUBLAS_FILL_MODE_LOWER)) return 1;
  if (CheckSymv<cuDoubleComplex>(h, "zhemv upper", cublasZhemv, true, CUBLAS_FILL_MODE_UPPER)) return 1;
  // trmv, then trsv undoing it: x = op(A) x; solve op(A) z = x gives back x.
  {
    const int n = 8, lda = 9, incx = 2;
    auto a = RandomMatrix<double>(static_cast<size_t>(lda) * n);
    for (int i = 0; i < n; ++i) a[i + static_cast<size_t>(i) * lda] += 4.0;  // well conditioned
    auto x = RandomMatrix<double>(static_cast<size_t>(n) * incx);
    double *da = Device(a), *dx = Device(x);
    BCHECK(cublasDtrmv(h, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_T, CUBLAS_DIAG_NON_UNIT, n, da, lda, dx, incx));
    const auto tri = Tri(a, n, lda, false, false);
    auto want = AsD(x);
    for (int i = 0; i < n; ++i) {
      cdbl s = 0;
      for (int j = 0; j < n; ++j) s += OpF(tri, n, 1, i, j) * Get(x, 1, 0, j * incx, 0);
      want[static_cast<size_t>(i) * incx] = s;
    }
    if (int r = Compare("dtrmv lower T", Host(dx, x.size()), want, 1e-12)) return r;
    BCHECK(cublasDtrsv(h, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_T, CUBLAS_DIAG_NON_UNIT, n, da, lda, dx, incx));
    if (int r = Compare("dtrsv lower T (undoes dtrmv)", Host(dx, x.size()), AsD(x), 1e-10)) return r;
    cudaFree(da);
    cudaFree(dx);
  }
  {
    const int n = 5, lda = 5;
    auto a = RandomMatrix<cuComplex>(static_cast<size_t>(lda) * n);
    for (int i = 0; i < n; ++i) a[i + static_cast<size_t>(i) * lda].x += 4.0f;
    auto x = RandomMatrix<cuComplex>(n);
    cuComplex *da = Device(a), *dx = Device(x);
    BCHECK(cublasCtrsv(h, CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_C, CUBLAS_DIAG_UNIT, n, da, lda, dx, 1));
    // op(A) z should equal x: multiply back on the CPU.
    const auto tri = Tri(a, n, lda, true, true);
    auto z = Host(dx, x.size());
    std::vector<cdbl> back(n);
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) back[i] += OpF(tri, n, 2, i, j) * Get(z, 1, 0, j, 0);
    if (int r = Compare("ctrsv upper C unit", x, back, 1e-4)) return r;
    cudaFree(da);
    cudaFree(dx);
  }
  const float sal = 0.5f;
  if (CheckRank1<float>("ssyr lower", false, false, CUBLAS_FILL_MODE_LOWER, sal,
                        [&](float* x, int incx, float*, int, float* a, int lda, int n) {
                          return cublasSsyr(h, CUBLAS_FILL_MODE_LOWER, n, &sal, x, incx, a, lda);
                        }))
    return 1;
  const cuComplex cal = make_cuComplex(0.5f, 1.0f);
  if (CheckRank1<cuComplex>("csyr upper", false, false, CUBLAS_FILL_MODE_UPPER, Val(cal),
                            [&](cuComplex* x, int incx, cuComplex*, int, cuComplex* a, int lda, int n) {
                              return cublasCsyr(h, CUBLAS_FILL_MODE_UPPER, n, &cal, x, incx, a, lda);
                            }))
    return 1;
  const double zal = -0.75;
  if (CheckRank1<cuDoubleComplex>("zher lower", true, false, CUBLAS_FILL_MODE_LOWER, zal,
                                  [&](cuDoubleComplex* x, int incx, cuDoubleComplex*, int, cuDoubleComplex* a, int lda,
                                      int n) { return cublasZher(h, CUBLAS_FILL_MODE_LOWER, n, &zal, x, incx, a, lda); }))
    return 1;
  const double dal = 1.25;
  if (CheckRank1<double>("dsyr2 upper", false, true, CUBLAS_FILL_MODE_UPPER, dal,
                         [&](double* x, int incx, double* y, int incy, double* a, int lda, int n) {
                           return cublasDsyr2(h, CUBLAS_FILL_MODE_UPPER, n, &dal, x, incx, y, incy, a, lda);
                         }))
    return 1;
  if (CheckRank1<cuComplex>("cher2 lower", true, true, CUBLAS_FILL_MODE_LOWER, Val(cal),
                            [&](cuComplex* x, int incx, cuComplex* y, int incy, cuComplex* a, int lda, int n) {
                              return cublasCher2(h, CUBLAS_FILL_MODE_LOWER, n, &cal, x, incx, y, incy, a, lda);
                            }))
    return 1;
  if (CheckRank1<cuComplex>("csyr2 upper", false, true, CUBLAS_FILL_MODE_UPPER, Val(cal),
                            [&](cuComplex* x, int incx, cuComplex* y, int incy, cuComplex* a, int lda, int n) {
                              return cublasCsyr2(h, CUBLAS_FILL_MODE_UPPER, n, &cal, x, incx, y, incy, a, lda);
                            }))
    return 1;
  std::printf("cublas_symmetric: symv, hemv, trmv, trsv, syr, her, syr2, her2 OK\n");
  return 0;
}

// dgmm: C = diag(x) A (left, x m long) or A diag(x) (right, n long); in place.
int Dgmm(cublasHandle_t h) {
  const int m = 5, n = 4, lda = 6, ldc = 7;
  auto a = RandomMatrix<float>(static_cast<size_t>(lda) * n), x = RandomMatrix<float>(static_cast<size_t>(m) * 2);
  auto c = RandomMatrix<float>(static_cast<size_t>(ldc) * n);
  float *da = Device(a), *dx = Device(x), *dc = Device(c);
  BCHECK(cublasSdgmm(h, CUBLAS_SIDE_LEFT, m, n, da, lda, dx, 2, dc, ldc));
  auto want = AsD(c);
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) want[i + static_cast<size_t>(j) * ldc] = Get(a, lda, 0, i, j) * static_cast<double>(x[i * 2]);
  if (int r = Compare("sdgmm left incx 2", Host(dc, c.size()), want, 1e-6)) return r;
  auto za = RandomMatrix<cuDoubleComplex>(static_cast<size_t>(lda) * n), zx = RandomMatrix<cuDoubleComplex>(n);
  cuDoubleComplex *dza = Device(za), *dzx = Device(zx);
  BCHECK(cublasZdgmm(h, CUBLAS_SIDE_RIGHT, m, n, dza, lda, dzx, 1, dza, lda));
  auto zwant = AsD(za);
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) zwant[i + static_cast<size_t>(j) * lda] = Get(za, lda, 0, i, j) * Get(zx, 1, 0, j, 0);
  if (int r = Compare("zdgmm right in place", Host(dza, za.size()), zwant, 1e-12)) return r;
  for (void* p : {static_cast<void*>(da), static_cast<void*>(dx), static_cast<void*>(dc), static_cast<void*>(dza),
                  static_cast<void*>(dzx)})
    cudaFree(p);
  std::printf("cublas_symmetric: dgmm OK\n");
  return 0;
}

// ---- banded and packed storage

/// Dense m x n (column-major, ld m) from gbmv's band storage (kl, ku, lda).
template <typename T>
std::vector<cdbl> FromBand(const std::vector<T>& a, int m, int n, int kl, int ku, int lda) {
  std::vector<cdbl> f(static_cast<size_t>(m) * n, 0.0);
  for (int j = 0; j < n; ++j)
    for (int i = std::max(0, j - ku); i <= std::min(m - 1, j + kl); ++i)
      f[i + static_cast<size_t>(j) * m] = Get(a, lda, 0, ku + i - j, j);
  return f;
}

/// The stored triangle of an n x n symmetric/triangular band matrix (k
/// off-diagonals, lda) as a dense matrix with zeros elsewhere.
template <typename T>
std::vector<cdbl> TriangleFromBand(const std::vector<T>& a, int n, int k, int lda, bool upper) {
  std::vector<cdbl> f(static_cast<size_t>(n) * n, 0.0);
  for (int j = 0; j < n; ++j)
    for (int i = upper ? std::max(0, j - k) : j; i <= (upper ? j : std::min(n - 1, j + k)); ++i)
      f[i + static_cast<size_t>(j) * n] = Get(a, lda, 0, upper ? k + i - j : i - j, j);
  return f;
}

/// The packed triangle's index of element (i, j) (in the stored triangle).
size_t PackedIndex(int n, bool upper, int i, int j) {
  return upper ? static_cast<size_t>(i) + static_cast<size_t>(j) * (j + 1) / 2
               : static_cast<size_t>(i) + static_cast<size_t>(2 * n - j - 1) * j / 2;
}

template <typename T>
std::vector<cdbl> TriangleFromPacked(const std::vector<T>& ap, int n, bool upper) {
  std::vector<cdbl> f(static_cast<size_t>(n) * n, 0.0);
  for (int j = 0; j < n; ++j)
    for (int i = upper ? 0 : j; i <= (upper ? j : n - 1); ++i)
      f[i + static_cast<size_t>(j) * n] = Get(ap, 1, 0, static_cast<int>(PackedIndex(n, upper, i, j)), 0);
  return f;
}

/// Symmetric or Hermitian completion of a stored triangle (dense n x n).
std::vector<cdbl> Complete(std::vector<cdbl> f, int n, bool upper, bool herm) {
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < n; ++i) {
      const bool stored = upper ? i <= j : i >= j;
      if (!stored) f[i + static_cast<size_t>(j) * n] = herm ? std::conj(f[j + static_cast<size_t>(i) * n])
                                                            : f[j + static_cast<size_t>(i) * n];
      if (herm && i == j) f[i + static_cast<size_t>(j) * n] = f[i + static_cast<size_t>(j) * n].real();
    }
  return f;
}

/// y = alpha op(F) x + beta y for a dense rows x cols F, strided x and y.
template <typename T>
std::vector<cdbl> RefMv(const std::vector<cdbl>& f, int rows, int cols, int op, cdbl alpha, const std::vector<T>& x,
                        int incx, cdbl beta, const std::vector<T>& y, int incy) {
  const int out = op == 0 ? rows : cols, in = op == 0 ? cols : rows;
  auto want = AsD(y);
  for (int i = 0; i < out; ++i) {
    cdbl s = 0;
    for (int j = 0; j < in; ++j) s += OpF(f, rows, op, i, j) * Get(x, 1, 0, j * incx, 0);
    want[static_cast<size_t>(i) * incy] = alpha * s + beta * want[static_cast<size_t>(i) * incy];
  }
  return want;
}

int Banded(cublasHandle_t h) {
  {  // sgbmv N and zgbmv C
    const int m = 7, n = 6, kl = 2, ku = 1, lda = 5, incx = 2, incy = 1;
    auto a = RandomMatrix<float>(static_cast<size_t>(lda) * n), x = RandomMatrix<float>(static_cast<size_t>(n) * incx);
    auto y = RandomMatrix<float>(m);
    float *da = Device(a), *dx = Device(x), *dy = Device(y);
    const float alpha = 0.5f, beta = 2.0f;
    BCHECK(cublasSgbmv(h, CUBLAS_OP_N, m, n, kl, ku, &alpha, da, lda, dx, incx, &beta, dy, incy));
    if (Compare("sgbmv N", Host(dy, y.size()), RefMv(FromBand(a, m, n, kl, ku, lda), m, n, 0, alpha, x, incx, beta, y,
                                                      incy), 1e-5))
      return 1;
    auto za = RandomMatrix<cuDoubleComplex>(static_cast<size_t>(lda) * n), zx = RandomMatrix<cuDoubleComplex>(m);
    auto zy = RandomMatrix<cuDoubleComplex>(n);
    cuDoubleComplex *dza = Device(za), *dzx = Device(zx), *dzy = Device(zy);
    const cuDoubleComplex zal = make_cuDoubleComplex(0.5, -1.0), zbe = make_cuDoubleComplex(0.0, 0.0);
    BCHECK(cublasZgbmv(h, CUBLAS_OP_C, m, n, kl, ku, &zal, dza, lda, dzx, 1, &zbe, dzy, 1));
    if (Compare("zgbmv C, beta 0", Host(dzy, zy.size()),
                RefMv(FromBand(za, m, n, kl, ku, lda), m, n, 2, Val(zal), zx, 1, 0.0, zy, 1), 1e-12))
      return 1;
    for (void* p : {static_cast<void*>(da), static_cast<void*>(dx), static_cast<void*>(dy), static_cast<void*>(dza),
                    static_cast<void*>(dzx), static_cast<void*>(dzy)})
      cudaFree(p);
  }
  {  // dsbmv upper, chbmv lower; dspmv lower, zhpmv upper
    const int n = 6, k = 2, lda = 4;
    auto a = RandomMatrix<double>(static_cast<size_t>(lda) * n), x = RandomMatrix<double>(n), y = RandomMatrix<double>(n);
    double *da = Device(a), *dx = Device(x), *dy = Device(y);
    const double alpha = 1.5, beta = -1.0;
    BCHECK(cublasDsbmv(h, CUBLAS_FILL_MODE_UPPER, n, k, &alpha, da, lda, dx, 1, &beta, dy, 1));
    if (Compare("dsbmv upper", Host(dy, y.size()),
                RefMv(Complete(TriangleFromBand(a, n, k, lda, true), n, true, false), n, n, 0, alpha, x, 1, beta, y, 1),
                1e-12))
      return 1;
    auto ca = RandomMatrix<cuComplex>(static_cast<size_t>(lda) * n), cx = RandomMatrix<cuComplex>(n);
    auto cy = RandomMatrix<cuComplex>(n);
    cuComplex *dca = Device(ca), *dcx = Device(cx), *dcy = Device(cy);
    const cuComplex cal = make_cuComplex(1.0f, 0.5f), cbe = make_cuComplex(0.5f, 0.0f);
    BCHECK(cublasChbmv(h, CUBLAS_FILL_MODE_LOWER, n, 1, &cal, dca, lda, dcx, 1, &cbe, dcy, 1));
    if (Compare("chbmv lower", Host(dcy, cy.size()),
                RefMv(Complete(TriangleFromBand(ca, n, 1, lda, false), n, false, true), n, n, 0, Val(cal), cx, 1,
                      Val(cbe), cy, 1),
                1e-4))
      return 1;
    auto ap = RandomMatrix<double>(n * (n + 1) / 2);
    double* dap = Device(ap);
    CHECK(cudaMemcpy(dy, y.data(), y.size() * sizeof(double), cudaMemcpyHostToDevice));  // y afresh
    BCHECK(cublasDspmv(h, CUBLAS_FILL_MODE_LOWER, n, &alpha, dap, dx, 1, &beta, dy, 1));
    if (Compare("dspmv lower", Host(dy, y.size()),
                RefMv(Complete(TriangleFromPacked(ap, n, false), n, false, false), n, n, 0, alpha, x, 1, beta, y, 1),
                1e-12))
      return 1;
    auto zap = RandomMatrix<cuDoubleComplex>(n * (n + 1) / 2), zx = RandomMatrix<cuDoubleComplex>(2 * n);
    auto zy = RandomMatrix<cuDoubleComplex>(n);
    cuDoubleComplex *dzap = Device(zap), *dzx = Device(zx), *dzy = Device(zy);
    const cuDoubleComplex zal = make_cuDoubleComplex(-0.5, 0.25), zbe = make_cuDoubleComplex(1.0, 1.0);
    BCHECK(cublasZhpmv(h, CUBLAS_FILL_MODE_UPPER, n, &zal, dzap, dzx, 2, &zbe, dzy, 1));
    if (Compare("zhpmv upper", Host(dzy, zy.size()),
                RefMv(Complete(TriangleFromPacked(zap, n, true), n, true, true), n, n, 0, Val(zal), zx, 2, Val(zbe), zy,
                      1),
                1e-12))
      return 1;
    for (void* p : {static_cast<void*>(da), static_cast<void*>(dx), static_cast<void*>(dy), static_cast<void*>(dca),
                    static_cast<void*>(dcx), static_cast<void*>(dcy), static_cast<void*>(dap), static_cast<void*>(dzap),
                    static_cast<void*>(dzx), static_cast<void*>(dzy)})
      cudaFree(p);
  }
  {  // stbmv lower T unit; dtbsv undoing dtbmv; ctpmv upper C; stpsv lower N
    const int n = 7, k = 2, lda = 3;
    auto a = RandomMatrix<float>(static_cast<size_t>(lda) * n), x = RandomMatrix<float>(n);
    float *da = Device(a), *dx = Device(x);
    BCHECK(cublasStbmv(h, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_T, CUBLAS_DIAG_UNIT, n, k, da, lda, dx, 1));
    auto tri = TriangleFromBand(a, n, k, lda, false);
    for (int i = 0; i < n; ++i) tri[i + static_cast<size_t>(i) * n] = 1.0;  // unit diagonal
    if (Compare("stbmv lower T unit", Host(dx, x.size()), RefMv(tri, n, n, 1, 1.0, x, 1, 0.0, x, 1), 1e-5)) return 1;
    auto d = RandomMatrix<double>(static_cast<size_t>(lda) * n), dv = RandomMatrix<double>(n);
    for (int j = 0; j < n; ++j) d[k + static_cast<size_t>(j) * lda] += 4.0;  // the upper band's diagonal row
    double *dd = Device(d), *ddv = Device(dv);
    BCHECK(cublasDtbmv(h, CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_N, CUBLAS_DIAG_NON_UNIT, n, k, dd, lda, ddv, 1));
    BCHECK(cublasDtbsv(h, CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_N, CUBLAS_DIAG_NON_UNIT, n, k, dd, lda, ddv, 1));
    if (Compare("dtbsv undoes dtbmv", Host(ddv, dv.size()), AsD(dv), 1e-12)) return 1;
    auto cap = RandomMatrix<cuComplex>(n * (n + 1) / 2), cx = RandomMatrix<cuComplex>(n);
    cuComplex *dcap = Device(cap), *dcx = Device(cx);
    BCHECK(cublasCtpmv(h, CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_C, CUBLAS_DIAG_NON_UNIT, n, dcap, dcx, 1));
    if (Compare("ctpmv upper C", Host(dcx, cx.size()),
                RefMv(TriangleFromPacked(cap, n, true), n, n, 2, 1.0, cx, 1, 0.0, cx, 1), 1e-4))
      return 1;
    auto sap = RandomMatrix<float>(n * (n + 1) / 2), sx = RandomMatrix<float>(2 * n);
    for (int j = 0; j < n; ++j) sap[PackedIndex(n, false, j, j)] += 4.0f;
    float *dsap = Device(sap), *dsx = Device(sx);
    BCHECK(cublasStpsv(h, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N, CUBLAS_DIAG_NON_UNIT, n, dsap, dsx, 2));
    // L z = x: multiplying back gives x.
    auto z = Host(dsx, sx.size());
    auto back = RefMv(TriangleFromPacked(sap, n, false), n, n, 0, 1.0, z, 2, 0.0, z, 2);
    if (Compare("stpsv lower N", sx, back, 1e-4)) return 1;
    for (void* p : {static_cast<void*>(da), static_cast<void*>(dx), static_cast<void*>(dd), static_cast<void*>(ddv),
                    static_cast<void*>(dcap), static_cast<void*>(dcx), static_cast<void*>(dsap), static_cast<void*>(dsx)})
      cudaFree(p);
  }
  {  // sspr upper, chpr lower (real alpha), dspr2 lower, zhpr2 upper: against the dense rank updates
    const int n = 5;
    const auto check = [&](const char* what, auto ap0, auto got, auto x, auto y, bool upper, bool herm, bool two,
                           cdbl alpha) {
      const auto c = [&](cdbl v) { return herm ? std::conj(v) : v; };
      auto want = AsD(ap0);
      for (int j = 0; j < n; ++j)
        for (int i = upper ? 0 : j; i <= (upper ? j : n - 1); ++i) {
          const cdbl xi = Get(x, 1, 0, i, 0), xj = Get(x, 1, 0, j, 0);
          cdbl add = alpha * xi * c(xj);
          if (two) add = alpha * xi * c(Get(y, 1, 0, j, 0)) + c(alpha) * Get(y, 1, 0, i, 0) * c(xj);
          cdbl& w = want[PackedIndex(n, upper, i, j)];
          w = (herm && i == j ? cdbl(w.real()) : w) + add;
        }
      return Compare(what, got, want, 1e-4);
    };
    auto sap = RandomMatrix<float>(n * (n + 1) / 2), sx = RandomMatrix<float>(n);
    float *dsap = Device(sap), *dsx = Device(sx);
    const float sal = 0.75f;
    BCHECK(cublasSspr(h, CUBLAS_FILL_MODE_UPPER, n, &sal, dsx, 1, dsap));
    if (check("sspr upper", sap, Host(dsap, sap.size()), sx, sx, true, false, false, sal)) return 1;
    auto cap = RandomMatrix<cuComplex>(n * (n + 1) / 2), cx = RandomMatrix<cuComplex>(n);
    cuComplex *dcap = Device(cap), *dcx = Device(cx);
    const float cal = -0.5f;
    BCHECK(cublasChpr(h, CUBLAS_FILL_MODE_LOWER, n, &cal, dcx, 1, dcap));
    if (check("chpr lower", cap, Host(dcap, cap.size()), cx, cx, false, true, false, cal)) return 1;
    auto dap = RandomMatrix<double>(n * (n + 1) / 2), dx = RandomMatrix<double>(n), dy = RandomMatrix<double>(n);
    double *ddap = Device(dap), *ddx = Device(dx), *ddy = Device(dy);
    const double dal = 1.25;
    BCHECK(cublasDspr2(h, CUBLAS_FILL_MODE_LOWER, n, &dal, ddx, 1, ddy, 1, ddap));
    if (check("dspr2 lower", dap, Host(ddap, dap.size()), dx, dy, false, false, true, dal)) return 1;
    auto zap = RandomMatrix<cuDoubleComplex>(n * (n + 1) / 2), zx = RandomMatrix<cuDoubleComplex>(n);
    auto zy = RandomMatrix<cuDoubleComplex>(n);
    cuDoubleComplex *dzap = Device(zap), *dzx = Device(zx), *dzy = Device(zy);
    const cuDoubleComplex zal = make_cuDoubleComplex(0.5, 0.5);
    BCHECK(cublasZhpr2(h, CUBLAS_FILL_MODE_UPPER, n, &zal, dzx, 1, dzy, 1, dzap));
    if (check("zhpr2 upper", zap, Host(dzap, zap.size()), zx, zy, true, true, true, Val(zal))) return 1;
    for (void* p : {static_cast<void*>(dsap), static_cast<void*>(dsx), static_cast<void*>(dcap), static_cast<void*>(dcx),
                    static_cast<void*>(ddap), static_cast<void*>(ddx), static_cast<void*>(ddy), static_cast<void*>(dzap),
                    static_cast<void*>(dzx), static_cast<void*>(dzy)})
      cudaFree(p);
  }
  std::printf("cublas_symmetric: gbmv, sbmv, hbmv, spmv, hpmv, tbmv, tbsv, tpmv, tpsv, spr, hpr, spr2, hpr2 OK\n");
  return 0;
}

int Errors(cublasHandle_t h) {
  float* d = nullptr;
  CHECK(cudaMalloc(&d, 64 * sizeof(float)));
  const float one = 1.0f;
  // A bad triangle, side or operation, an lda below the order: refused at once.
  BEXPECT(cublasSsymm(h, CUBLAS_SIDE_LEFT, static_cast<cublasFillMode_t>(5), 2, 2, &one, d, 2, d, 2, &one, d, 2),
          CUBLAS_STATUS_INVALID_VALUE);
  BEXPECT(cublasStrmm(h, static_cast<cublasSideMode_t>(9), CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N, CUBLAS_DIAG_UNIT, 2, 2,
                      &one, d, 2, d, 2, d, 2),
          CUBLAS_STATUS_INVALID_VALUE);
  BEXPECT(cublasSsymv(h, CUBLAS_FILL_MODE_UPPER, 4, &one, d, 3, d, 1, &one, d, 1), CUBLAS_STATUS_INVALID_VALUE);
  cuComplex* z = reinterpret_cast<cuComplex*>(d);
  BEXPECT(cublasCherk(h, CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_T, 2, 2, &one, z, 2, &one, z, 2), CUBLAS_STATUS_INVALID_VALUE);
  BEXPECT(cublasStrsv(h, CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_N, CUBLAS_DIAG_UNIT, 2, d, 2, d, 0), CUBLAS_STATUS_INVALID_VALUE);
  CHECK(cudaDeviceSynchronize());  // nothing was enqueued
  cudaFree(d);
  std::printf("cublas_symmetric: error paths OK\n");
  return 0;
}

}  // namespace

int main() {
  cublasHandle_t h;
  BCHECK(cublasCreate(&h));
  if (int r = Level3(h)) return r;
  if (int r = Level2(h)) return r;
  if (int r = Dgmm(h)) return r;
  if (int r = Banded(h)) return r;
  if (int r = Errors(h)) return r;
  CHECK(cudaDeviceSynchronize());
  BCHECK(cublasDestroy(h));
  std::printf("cublas_symmetric: OK\n");
  return 0;
}
