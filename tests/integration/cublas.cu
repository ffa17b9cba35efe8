// cuBLAS through phos (docs/interposer.md "cuBLAS"): a program linked with
// -lcublas, as a user builds one, computing every forwarded routine family
// on random data and comparing with a double-precision CPU reference.
// Prints "cublas: OK" at the end; a failed check prints its line.
//
// Under `phos run` the cuBLAS calls resolve to libphos.so (preloaded ahead
// of libcublas) and run in phosd: on the sim with OpenBLAS, on a GPU with
// the real cuBLAS on phosd's pooled handle.
#define PHOS_PROGRAM_NAME "cublas"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <complex>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "cublas_checks.h"
#include "program_checks.h"

namespace {

template <typename T>
int CheckGemm(cublasHandle_t h, const char* what, int ta, int tb, int m, int n, int k, double tol,
              cublasStatus_t (*fn)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const T*,
                                   const T*, int, const T*, int, const T*, T*, int)) {
  const int lda = (ta ? k : m) + 3, ldb = (tb ? n : k) + 1, ldc = m + 2;
  auto a = RandomMatrix<T>(static_cast<size_t>(lda) * (ta ? m : k));
  auto b = RandomMatrix<T>(static_cast<size_t>(ldb) * (tb ? k : n));
  auto c = RandomMatrix<T>(static_cast<size_t>(ldc) * n);
  T *da = Device(a), *db = Device(b), *dc = Device(c);
  const T alpha = FromD<T>({0.75, -0.25}), beta = FromD<T>({-1.5, 0.5});
  BCHECK(fn(h, static_cast<cublasOperation_t>(ta), static_cast<cublasOperation_t>(tb), m, n, k, &alpha, da, lda, db,
            ldb, &beta, dc, ldc));
  auto got = Host(dc, c.size());
  auto want = RefGemm(ta, tb, m, n, k, Get(std::vector<T>{alpha}, 1, 0, 0, 0), a, lda, b, ldb,
                      Get(std::vector<T>{beta}, 1, 0, 0, 0), c, ldc);
  for (size_t i = 0; i < c.size(); ++i) {
    const auto g = Get(got, 1, 0, static_cast<int>(i), 0);
    if (std::abs(g - want[i]) > tol * (1 + std::abs(want[i])))
      PHOS_CHECK_FAIL(1, "%s: C[%zu] = (%g, %g), expected (%g, %g)", what, i, g.real(), g.imag(), want[i].real(),
                      want[i].imag());
  }
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
  return 0;
}

int Gemms(cublasHandle_t h) {
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      if (int r = CheckGemm<float>(h, "Sgemm", ta, tb, 37, 29, 41, 1e-5, cublasSgemm)) return r;
      if (int r = CheckGemm<double>(h, "Dgemm", ta, tb, 19, 23, 17, 1e-12, cublasDgemm)) return r;
    }
  if (int r = CheckGemm<cuComplex>(h, "Cgemm", 2, 0, 13, 11, 9, 1e-5, cublasCgemm)) return r;
  if (int r = CheckGemm<cuDoubleComplex>(h, "Zgemm", 1, 2, 7, 12, 5, 1e-12, cublasZgemm)) return r;
  // Half: inputs exact in half, the reference of the rounded inputs.
  if (int r = CheckGemm<__half>(h, "Hgemm", 0, 1, 16, 8, 32, 2e-2, cublasHgemm)) return r;
  std::printf("cublas: gemm S/D/C/Z/H OK\n");
  return 0;
}

int GemmExAndBatched(cublasHandle_t h) {
  // GemmEx: half A and B, float C, float compute (what PyTorch's half linear calls).
  const int m = 24, n = 16, k = 40;
  auto a = RandomMatrix<__half>(static_cast<size_t>(m) * k);
  auto b = RandomMatrix<__half>(static_cast<size_t>(k) * n);
  auto c = RandomMatrix<float>(static_cast<size_t>(m) * n);
  __half *da = Device(a), *db = Device(b);
  float* dc = Device(c);
  const float alpha = 1.25f, beta = 0.5f;
  BCHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, da, CUDA_R_16F, m, db, CUDA_R_16F, k, &beta, dc,
                      CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  auto got = Host(dc, c.size());
  auto want = RefGemm(0, 0, m, n, k, alpha, a, m, b, k, beta, c, m);
  for (size_t i = 0; i < c.size(); ++i) NEAR(got[i], want[i].real(), 1e-4);
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);

  // Strided-batched float: 3 members, A shared (stride 0), as bmm with broadcasting.
  const int batch = 3, lda = m, ldb = k, ldc = m;
  const size_t sb = static_cast<size_t>(k) * n + 5, sc = static_cast<size_t>(m) * n + 7;
  auto fa = RandomMatrix<float>(static_cast<size_t>(m) * k);
  auto fb = RandomMatrix<float>(sb * batch);
  auto fc = RandomMatrix<float>(sc * batch);
  float *dfa = Device(fa), *dfb = Device(fb), *dfc = Device(fc);
  BCHECK(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, dfa, lda, 0, dfb, ldb, sb, &beta,
                                   dfc, ldc, sc, batch));
  auto bgot = Host(dfc, fc.size());
  auto bwant = RefGemm(0, 0, m, n, k, alpha, fa, lda, fb, ldb, beta, fc, ldc, batch, 0, sb, sc);
  for (size_t i = 0; i < fc.size(); ++i) NEAR(bgot[i], bwant[i].real(), 1e-5);

  // The same through GemmStridedBatchedEx with device-pointer scalars.
  float* dscalars = Device(std::vector<float>{alpha, 0.0f});
  auto fc2 = RandomMatrix<float>(sc * batch);
  CHECK(cudaMemcpy(dfc, fc2.data(), fc2.size() * 4, cudaMemcpyHostToDevice));
  BCHECK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE));
  BCHECK(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, dscalars, dfa, CUDA_R_32F, lda, 0, dfb,
                                    CUDA_R_32F, ldb, sb, dscalars + 1, dfc, CUDA_R_32F, ldc, sc, batch,
                                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  BCHECK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
  bgot = Host(dfc, fc2.size());
  bwant = RefGemm(0, 0, m, n, k, alpha, fa, lda, fb, ldb, 0.0, fc2, ldc, batch, 0, sb, sc);
  for (int p = 0; p < batch; ++p)
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) {
        const size_t e = p * sc + i + static_cast<size_t>(j) * ldc;
        NEAR(bgot[e], bwant[e].real(), 1e-5);
      }
  // Batched over arrays of device pointers (members in one buffer, in
  // reverse order): cublasSgemmBatched.
  {
    std::vector<const float*> pa(batch), pb(batch);
    std::vector<float*> pc(batch);
    auto fc3 = RandomMatrix<float>(sc * batch);
    CHECK(cudaMemcpy(dfc, fc3.data(), fc3.size() * 4, cudaMemcpyHostToDevice));
    for (int p = 0; p < batch; ++p) {
      pa[p] = dfa;
      pb[p] = dfb + (batch - 1 - p) * sb;
      pc[p] = dfc + p * sc;
    }
    const float** dpa = nullptr;
    const float** dpb = nullptr;
    float** dpc = nullptr;
    CHECK(cudaMalloc(&dpa, batch * sizeof(void*)));
    CHECK(cudaMalloc(&dpb, batch * sizeof(void*)));
    CHECK(cudaMalloc(&dpc, batch * sizeof(void*)));
    CHECK(cudaMemcpy(dpa, pa.data(), batch * sizeof(void*), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dpb, pb.data(), batch * sizeof(void*), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dpc, pc.data(), batch * sizeof(void*), cudaMemcpyHostToDevice));
    BCHECK(cublasSgemmBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, dpa, lda, dpb, ldb, &beta, dpc, ldc, batch));
    auto got3 = Host(dfc, fc3.size());
    for (int p = 0; p < batch; ++p) {
      std::vector<float> bp(fb.begin() + (batch - 1 - p) * sb, fb.begin() + (batch - p) * sb);
      std::vector<float> cp(fc3.begin() + p * sc, fc3.begin() + (p + 1) * sc);
      auto want3 = RefGemm(0, 0, m, n, k, alpha, fa, lda, bp, ldb, beta, cp, ldc);
      for (int j = 0; j < n; ++j)
        for (int i = 0; i < m; ++i) NEAR(got3[p * sc + i + j * ldc], want3[i + j * ldc].real(), 1e-5);
    }
    cudaFree(dpa);
    cudaFree(dpb);
    cudaFree(dpc);
  }
  cudaFree(dfa);
  cudaFree(dfb);
  cudaFree(dfc);
  cudaFree(dscalars);
  std::printf("cublas: GemmEx, strided batched, pointer-array batched, device scalars OK\n");
  return 0;
}

// An array of device pointers in device memory (what the pointer-array
// batched routines take).
template <typename T>
T** DeviceArray(const std::vector<T*>& ptrs) {
  T** d = nullptr;
  if (cudaMalloc(&d, ptrs.size() * sizeof(T*)) != cudaSuccess) return nullptr;
  cudaMemcpy(d, ptrs.data(), ptrs.size() * sizeof(T*), cudaMemcpyHostToDevice);
  return d;
}

// gemv and trsm over arrays of device pointers (cublas?gemvBatched,
// cublas?trsmBatched): each member against the plain routine's reference.
int PointerArrayBatches(cublasHandle_t h) {
  const int batch = 3;
  {  // y_p = alpha A_p^T x_p + beta y_p, double
    const int m = 6, n = 4, lda = 7;
    std::vector<std::vector<double>> a, x, y;
    std::vector<double*> pa, px, py;
    for (int p = 0; p < batch; ++p) {
      a.push_back(RandomMatrix<double>(static_cast<size_t>(lda) * n));
      x.push_back(RandomMatrix<double>(m));
      y.push_back(RandomMatrix<double>(n));
      pa.push_back(Device(a[p]));
      px.push_back(Device(x[p]));
      py.push_back(Device(y[p]));
    }
    double **dpa = DeviceArray(pa), **dpx = DeviceArray(px), **dpy = DeviceArray(py);
    const double alpha = 0.5, beta = -2.0;
    BCHECK(cublasDgemvBatched(h, CUBLAS_OP_T, m, n, &alpha, dpa, lda, dpx, 1, &beta, dpy, 1, batch));
    for (int p = 0; p < batch; ++p) {
      auto got = Host(py[p], n);
      for (int j = 0; j < n; ++j) {
        double s = 0;
        for (int i = 0; i < m; ++i) s += a[p][i + j * lda] * x[p][i];
        NEAR(got[j], alpha * s + beta * y[p][j], 1e-12);
      }
      cudaFree(pa[p]);
      cudaFree(px[p]);
      cudaFree(py[p]);
    }
    cudaFree(dpa);
    cudaFree(dpx);
    cudaFree(dpy);
  }
  {  // A_p X = alpha B_p, left lower, float
    const int m = 5, n = 3, lda = 6, ldb = 5;
    std::vector<std::vector<float>> a, b;
    std::vector<float*> pa, pb;
    for (int p = 0; p < batch; ++p) {
      std::vector<float> ap(static_cast<size_t>(lda) * m, 999.0f);
      for (int j = 0; j < m; ++j)
        for (int i = j; i < m; ++i) ap[i + j * lda] = static_cast<float>(i == j ? 2.0 + 0.5 * Rand() : 0.2 * Rand());
      a.push_back(ap);
      b.push_back(RandomMatrix<float>(static_cast<size_t>(ldb) * n));
      pa.push_back(Device(a[p]));
      pb.push_back(Device(b[p]));
    }
    float **dpa = DeviceArray(pa), **dpb = DeviceArray(pb);
    const float alpha = 2.0f;
    BCHECK(cublasStrsmBatched(h, CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N, CUBLAS_DIAG_NON_UNIT, m, n,
                              &alpha, dpa, lda, dpb, ldb, batch));
    for (int p = 0; p < batch; ++p) {
      auto xs = Host(pb[p], b[p].size());
      for (int j = 0; j < n; ++j)
        for (int i = 0; i < m; ++i) {
          double s = 0;
          for (int k = 0; k <= i; ++k) s += static_cast<double>(a[p][i + k * lda]) * xs[k + j * ldb];
          NEAR(s, alpha * b[p][i + j * ldb], 1e-4);
        }
      cudaFree(pa[p]);
      cudaFree(pb[p]);
    }
    cudaFree(dpa);
    cudaFree(dpb);
  }
  std::printf("cublas: pointer-array gemv and trsm batches OK\n");
  return 0;
}

// The batched LU: getrf, then getrs solving A_p X = B_p and getri
// inverting A_p; info per matrix (a singular member reports its zero pivot).
int BatchedLu(cublasHandle_t h) {
  const int n = 5, nrhs = 2, batch = 3, lda = 6, ldb = 7;
  std::vector<std::vector<double>> a, b;
  std::vector<double*> pa, pb, pc;
  for (int p = 0; p < batch; ++p) {
    auto m = RandomMatrix<double>(static_cast<size_t>(lda) * n);
    for (int i = 0; i < n; ++i) m[i + i * lda] += 3.0;
    if (p == 2) m[0 + 4 * lda] = m[1 + 4 * lda] = m[2 + 4 * lda] = m[3 + 4 * lda] = m[4 + 4 * lda] = 0.0;  // singular
    a.push_back(m);
    b.push_back(RandomMatrix<double>(static_cast<size_t>(ldb) * nrhs));
    pa.push_back(Device(a[p]));
    pb.push_back(Device(b[p]));
    double* c = nullptr;
    CHECK(cudaMalloc(&c, sizeof(double) * n * n));
    pc.push_back(c);
  }
  double **dpa = DeviceArray(pa), **dpb = DeviceArray(pb), **dpc = DeviceArray(pc);
  int *dpiv = nullptr, *dinfo = nullptr;
  CHECK(cudaMalloc(&dpiv, sizeof(int) * n * batch));
  CHECK(cudaMalloc(&dinfo, sizeof(int) * batch));
  BCHECK(cublasDgetrfBatched(h, n, dpa, lda, dpiv, dinfo, batch));
  auto info = Host(dinfo, batch);
  EXPECT(info[0] == 0 && info[1] == 0 && info[2] == n);  // the last member's fifth pivot is zero
  int hinfo = -1;
  BCHECK(cublasDgetrsBatched(h, CUBLAS_OP_N, n, nrhs, dpa, lda, dpiv, dpb, ldb, &hinfo, 2));
  EXPECT(hinfo == 0);
  BCHECK(cublasDgetriBatched(h, n, dpa, lda, dpiv, dpc, n, dinfo, 2));
  info = Host(dinfo, batch);
  EXPECT(info[0] == 0 && info[1] == 0);
  for (int p = 0; p < 2; ++p) {
    auto x = Host(pb[p], b[p].size());
    auto inv = Host(pc[p], static_cast<size_t>(n) * n);
    for (int j = 0; j < nrhs; ++j)
      for (int i = 0; i < n; ++i) {
        double s = 0;
        for (int k = 0; k < n; ++k) s += a[p][i + k * lda] * x[k + j * ldb];
        NEAR(s, b[p][i + j * ldb], 1e-10);  // A x = b
      }
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < n; ++i) {
        double s = 0;
        for (int k = 0; k < n; ++k) s += a[p][i + k * lda] * inv[k + j * n];
        NEAR(s, i == j ? 1.0 : 0.0, 1e-10);  // A inv(A) = I
      }
  }
  // getrs reports a bad parameter through its host info.
  BEXPECT(cublasDgetrsBatched(h, CUBLAS_OP_N, n, nrhs, dpa, 2, dpiv, dpb, ldb, &hinfo, 2), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT(hinfo == -5);
  for (int p = 0; p < batch; ++p) {
    cudaFree(pa[p]);
    cudaFree(pb[p]);
    cudaFree(pc[p]);
  }
  for (void* p : {static_cast<void*>(dpa), static_cast<void*>(dpb), static_cast<void*>(dpc), static_cast<void*>(dpiv),
                  static_cast<void*>(dinfo)})
    cudaFree(p);
  std::printf("cublas: batched getrf, getrs, getri OK\n");
  return 0;
}

int GemvGeam(cublasHandle_t h) {
  const int m = 33, n = 21, lda = 40;
  auto a = RandomMatrix<float>(static_cast<size_t>(lda) * n);
  auto x = RandomMatrix<float>(2 * std::max(m, n));
  auto y = RandomMatrix<float>(3 * std::max(m, n));
  float *da = Device(a), *dx = Device(x), *dy = Device(y);
  const float alpha = -0.5f, beta = 2.0f;
  for (int t = 0; t < 2; ++t) {
    CHECK(cudaMemcpy(dy, y.data(), y.size() * 4, cudaMemcpyHostToDevice));
    BCHECK(cublasSgemv(h, t ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, &alpha, da, lda, dx, 2, &beta, dy, 3));
    auto got = Host(dy, y.size());
    const int ylen = t ? n : m, xlen = t ? m : n;
    for (int i = 0; i < ylen; ++i) {
      double s = 0;
      for (int l = 0; l < xlen; ++l) s += Get(a, lda, t, i, l).real() * x[2 * l];
      NEAR(got[3 * i], alpha * s + beta * y[3 * i], 1e-5);
    }
  }
  // geam: C = alpha A^T + beta B (a transpose, as CuPy does with it).
  auto b = RandomMatrix<double>(static_cast<size_t>(n) * m);
  auto da2 = RandomMatrix<double>(static_cast<size_t>(m) * n);
  double *dA = Device(da2), *dB = Device(b), *dC = nullptr;
  CHECK(cudaMalloc(&dC, sizeof(double) * n * m));
  const double ga = 2.0, gb = -1.0;
  BCHECK(cublasDgeam(h, CUBLAS_OP_T, CUBLAS_OP_N, n, m, &ga, dA, m, &gb, dB, n, dC, n));
  auto c = Host(dC, static_cast<size_t>(n) * m);
  for (int j = 0; j < m; ++j)
    for (int i = 0; i < n; ++i) NEAR(c[i + j * n], ga * da2[j + i * m] + gb * b[i + j * n], 1e-12);
  // A null beta is beta = 0 (B unused): cuSOLVER 13 transposes so, with
  // CUBLAS_OP_C on real data, in cupy.linalg.svd of a non-square matrix.
  BCHECK(cublasDgeam(h, CUBLAS_OP_C, CUBLAS_OP_C, n, m, &ga, dA, m, nullptr, dA, m, dC, n));
  c = Host(dC, static_cast<size_t>(n) * m);
  for (int j = 0; j < m; ++j)
    for (int i = 0; i < n; ++i) NEAR(c[i + j * n], ga * da2[j + i * m], 1e-12);
  cudaFree(da);
  cudaFree(dx);
  cudaFree(dy);
  cudaFree(dA);
  cudaFree(dB);
  cudaFree(dC);
  std::printf("cublas: gemv, geam OK\n");
  return 0;
}

// trsm: solve, then multiply back. The triangle phos must not read holds 999.
int Trsm(cublasHandle_t h) {
  {  // left, lower, A X = alpha B, float
    const int m = 12, n = 7, lda = 14, ldb = 13;
    std::vector<float> a(lda * m, 999.0f), b = RandomMatrix<float>(static_cast<size_t>(ldb) * n);
    for (int j = 0; j < m; ++j)
      for (int i = j; i < m; ++i) a[i + j * lda] = static_cast<float>(i == j ? 2.0 + 0.5 * Rand() : 0.2 * Rand());
    float *da = Device(a), *db = Device(b);
    const float alpha = 1.5f;
    BCHECK(cublasStrsm(h, CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N, CUBLAS_DIAG_NON_UNIT, m, n, &alpha, da,
                       lda, db, ldb));
    auto x = Host(db, b.size());
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) {
        double s = 0;
        for (int k = 0; k <= i; ++k) s += static_cast<double>(a[i + k * lda]) * x[k + j * ldb];
        NEAR(s, alpha * b[i + j * ldb], 1e-4);
      }
    cudaFree(da);
    cudaFree(db);
  }
  {  // right, upper, transposed, unit diagonal: X A^T = alpha B, double
    const int m = 5, n = 9, lda = 9, ldb = 6;
    std::vector<double> a(lda * n, 999.0), b = RandomMatrix<double>(static_cast<size_t>(ldb) * n);
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < j; ++i) a[i + j * lda] = 0.3 * Rand();
    double *da = Device(a), *db = Device(b);
    const double alpha = -0.5;
    BCHECK(cublasDtrsm(h, CUBLAS_SIDE_RIGHT, CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_T, CUBLAS_DIAG_UNIT, m, n, &alpha, da,
                       lda, db, ldb));
    auto x = Host(db, b.size());
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) {
        // (X A^T)(i, j) = sum_k X(i, k) A(j, k); A upper with a unit diagonal: k >= j.
        double s = x[i + j * ldb];
        for (int k = j + 1; k < n; ++k) s += x[i + k * ldb] * a[j + k * lda];
        NEAR(s, alpha * b[i + j * ldb], 1e-12);
      }
    cudaFree(da);
    cudaFree(db);
  }
  {  // ger: A += alpha x y^T (x with increment 2), float
    const int m = 9, n = 6, lda = 11;
    auto a = RandomMatrix<float>(static_cast<size_t>(lda) * n), x = RandomMatrix<float>(2 * m), y = RandomMatrix<float>(n);
    float *da = Device(a), *dx = Device(x), *dy = Device(y);
    const float alpha = 0.75f;
    BCHECK(cublasSger(h, m, n, &alpha, dx, 2, dy, 1, da, lda));
    auto got = Host(da, a.size());
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < lda; ++i)
        NEAR(got[i + j * lda], a[i + j * lda] + (i < m ? alpha * x[2 * i] * y[j] : 0.0), 1e-6);
    cudaFree(da);
    cudaFree(dx);
    cudaFree(dy);
  }
  {  // syrk: upper triangle of C = alpha A^T A + beta C, double; the lower stays
    const int n = 7, k = 5, lda = 6, ldc = 8;
    auto a = RandomMatrix<double>(static_cast<size_t>(lda) * n), c = RandomMatrix<double>(static_cast<size_t>(ldc) * n);
    double *da = Device(a), *dc = Device(c);
    const double alpha = 1.25, beta = -0.5;
    BCHECK(cublasDsyrk(h, CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_T, n, k, &alpha, da, lda, &beta, dc, ldc));
    auto got = Host(dc, c.size());
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < n; ++i) {
        double s = 0;
        for (int l = 0; l < k; ++l) s += a[l + i * lda] * a[l + j * lda];
        NEAR(got[i + j * ldc], i <= j ? alpha * s + beta * c[i + j * ldc] : c[i + j * ldc], 1e-12);
      }
    cudaFree(da);
    cudaFree(dc);
  }
  std::printf("cublas: trsm, ger, syrk OK\n");
  return 0;
}

int Level1(cublasHandle_t h) {
  const int n = 1000;
  auto x = RandomMatrix<float>(n), y = RandomMatrix<float>(2 * n);
  float *dx = Device(x), *dy = Device(y);
  double dot = 0, nrm = 0, asum = 0;
  int amax = 1, amin = 1;
  for (int i = 0; i < n; ++i) {
    dot += static_cast<double>(x[i]) * y[2 * i];
    nrm += static_cast<double>(x[i]) * x[i];
    asum += std::fabs(x[i]);
    if (std::fabs(x[i]) > std::fabs(x[amax - 1])) amax = i + 1;
    if (std::fabs(x[i]) < std::fabs(x[amin - 1])) amin = i + 1;
  }
  float r = 0;
  BCHECK(cublasSdot(h, n, dx, 1, dy, 2, &r));
  NEAR(r, dot, 1e-5);
  BCHECK(cublasSnrm2(h, n, dx, 1, &r));
  NEAR(r, std::sqrt(nrm), 1e-5);
  BCHECK(cublasSasum(h, n, dx, 1, &r));
  NEAR(r, asum, 1e-5);
  int idx = 0;
  BCHECK(cublasIsamax(h, n, dx, 1, &idx));
  EXPECT(idx == amax);
  BCHECK(cublasIsamin(h, n, dx, 1, &idx));
  EXPECT(idx == amin);
  // The _64 forms: a 64-bit index, on the host and in device memory.
  int64_t idx64 = 0;
  BCHECK(cublasIsamax_64(h, n, dx, 1, &idx64));
  EXPECT(idx64 == amax);
  BCHECK(cublasIaminEx_64(h, n, dx, CUDA_R_32F, 1, &idx64));
  EXPECT(idx64 == amin);
  int64_t* didx = nullptr;
  CHECK(cudaMalloc(&didx, 2 * sizeof(int64_t)));
  CHECK(cudaMemset(didx, 0xff, 2 * sizeof(int64_t)));
  BCHECK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE));
  BCHECK(cublasIsamax_64(h, n, dx, 1, didx));
  BCHECK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
  int64_t back64[2] = {};
  CHECK(cudaMemcpy(back64, didx, sizeof back64, cudaMemcpyDeviceToHost));
  EXPECT(back64[0] == amax && back64[1] == -1);  // 8 bytes written, no more
  cudaFree(didx);
  BCHECK(cublasDotEx_64(h, n, dx, CUDA_R_32F, 1, dy, CUDA_R_32F, 2, &r, CUDA_R_32F, CUDA_R_32F));
  NEAR(r, dot, 1e-5);
  const float alpha = 3.0f;
  BCHECK(cublasSaxpy(h, n, &alpha, dx, 1, dy, 2));
  auto got = Host(dy, y.size());
  for (int i = 0; i < n; ++i) NEAR(got[2 * i], y[2 * i] + 3.0 * x[i], 1e-6);
  for (int i = 0; i < n; ++i) NEAR(got[2 * i + 1], y[2 * i + 1], 0);  // the gaps untouched
  BCHECK(cublasSscal(h, n, &alpha, dx, 1));
  BCHECK(cublasScopy(h, n, dx, 1, dy, 1));
  got = Host(dy, n);
  for (int i = 0; i < n; ++i) NEAR(got[i], 3.0 * x[i], 1e-6);
  BCHECK(cublasSswap(h, n / 2, dx, 2, dy, 2));
  auto gx = Host(dx, n);
  EXPECT(gx[0] == got[0] && gx[2] == got[2]);

  // rot: real (srot, strided), complex with a complex s (crot), complex
  // with a real s (zdrot), and RotEx; (x, y) = (c x + s y, c y - conj(s) x).
  {
    auto rx = RandomMatrix<float>(40), ry = RandomMatrix<float>(80);
    float *drx = Device(rx), *dry = Device(ry);
    const float rc = 0.6f, rs = 0.8f;
    BCHECK(cublasSrot(h, 40, drx, 1, dry, 2, &rc, &rs));
    auto gx2 = Host(drx, rx.size()), gy2 = Host(dry, ry.size());
    for (int i = 0; i < 40; ++i) {
      NEAR(gx2[i], 0.6 * rx[i] + 0.8 * ry[2 * i], 1e-6);
      NEAR(gy2[2 * i], 0.6 * ry[2 * i] - 0.8 * rx[i], 1e-6);
      NEAR(gy2[2 * i + 1], ry[2 * i + 1], 0);
    }
    BCHECK(cublasRotEx(h, 40, drx, CUDA_R_32F, 1, dry, CUDA_R_32F, 2, &rc, &rs, CUDA_R_32F, CUDA_R_32F));
    auto gx3 = Host(drx, rx.size());
    for (int i = 0; i < 40; ++i) NEAR(gx3[i], 0.6 * gx2[i] + 0.8 * gy2[2 * i], 1e-6);
    auto zx = RandomMatrix<cuComplex>(30), zy = RandomMatrix<cuComplex>(30);
    cuComplex *dzx = Device(zx), *dzy = Device(zy);
    const cuComplex cs = make_cuComplex(0.48f, 0.64f);
    BCHECK(cublasCrot(h, 30, dzx, 1, dzy, 1, &rc, &cs));
    auto gzx = Host(dzx, zx.size()), gzy = Host(dzy, zy.size());
    const std::complex<double> s(0.48, 0.64);
    for (int i = 0; i < 30; ++i) {
      const auto x0 = Get(zx, 1, 0, i, 0), y0 = Get(zy, 1, 0, i, 0);
      const auto wx = 0.6 * x0 + s * y0, wy = 0.6 * y0 - std::conj(s) * x0;
      NEAR(gzx[i].x, wx.real(), 1e-5);
      NEAR(gzx[i].y, wx.imag(), 1e-5);
      NEAR(gzy[i].x, wy.real(), 1e-5);
      NEAR(gzy[i].y, wy.imag(), 1e-5);
    }
    auto dx2 = RandomMatrix<cuDoubleComplex>(20), dy2 = RandomMatrix<cuDoubleComplex>(20);
    cuDoubleComplex *ddx2 = Device(dx2), *ddy2 = Device(dy2);
    const double zc = 0.8, zs = -0.6;
    BCHECK(cublasZdrot(h, 20, ddx2, 1, ddy2, 1, &zc, &zs));
    auto gdx = Host(ddx2, dx2.size()), gdy = Host(ddy2, dy2.size());
    for (int i = 0; i < 20; ++i) {
      const auto x0 = Get(dx2, 1, 0, i, 0), y0 = Get(dy2, 1, 0, i, 0);
      NEAR(gdx[i].y, (zc * x0 + zs * y0).imag(), 1e-12);
      NEAR(gdy[i].x, (zc * y0 - zs * x0).real(), 1e-12);
    }
    for (void* p : {static_cast<void*>(drx), static_cast<void*>(dry), static_cast<void*>(dzx), static_cast<void*>(dzy),
                    static_cast<void*>(ddx2), static_cast<void*>(ddy2)})
      cudaFree(p);
  }

  // scasum of 50 elements (the sim's OpenBLAS gets it wrong from 9 up).
  {
    auto za = RandomMatrix<cuComplex>(50);
    cuComplex* dza = Device(za);
    double want = 0;
    for (const auto& v : za) want += std::fabs(v.x) + std::fabs(v.y);
    float got = 0;
    BCHECK(cublasScasum(h, 50, dza, 1, &got));
    NEAR(got, want, 1e-5);
    cudaFree(dza);
  }

  // Complex conjugated dot and a double dot into device memory.
  auto cx = RandomMatrix<cuComplex>(64), cy = RandomMatrix<cuComplex>(64);
  cuComplex *dcx = Device(cx), *dcy = Device(cy);
  std::complex<double> cdot = 0;
  for (int i = 0; i < 64; ++i) cdot += std::conj(Get(cx, 1, 0, i, 0)) * Get(cy, 1, 0, i, 0);
  cuComplex cr;
  BCHECK(cublasCdotc(h, 64, dcx, 1, dcy, 1, &cr));
  NEAR(cr.x, cdot.real(), 1e-5);
  NEAR(cr.y, cdot.imag(), 1e-5);
  auto dvx = RandomMatrix<double>(300), dvy = RandomMatrix<double>(300);
  double *ddx = Device(dvx), *ddy = Device(dvy), *dres = nullptr;
  CHECK(cudaMalloc(&dres, sizeof(double)));
  BCHECK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE));
  BCHECK(cublasDdot(h, 300, ddx, 1, ddy, 1, dres));
  BCHECK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
  double ddot = 0, want = 0;
  for (int i = 0; i < 300; ++i) want += dvx[i] * dvy[i];
  CHECK(cudaMemcpy(&ddot, dres, sizeof ddot, cudaMemcpyDeviceToHost));
  NEAR(ddot, want, 1e-12);
  for (void* p : {static_cast<void*>(dx), static_cast<void*>(dy), static_cast<void*>(dcx), static_cast<void*>(dcy),
                  static_cast<void*>(ddx), static_cast<void*>(ddy), static_cast<void*>(dres)})
    cudaFree(p);
  std::printf("cublas: level 1 OK\n");
  return 0;
}

int StreamsCaptureHelpers(cublasHandle_t h) {
  // Set/GetMatrix with padded leading dimensions.
  const int rows = 5, cols = 4;
  std::vector<float> host(8 * cols), back(6 * cols, -7.0f);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i);
  float* d = nullptr;
  CHECK(cudaMalloc(&d, sizeof(float) * 7 * cols));
  BCHECK(cublasSetMatrix_64(rows, cols, sizeof(float), host.data(), 8, d, 7));
  BCHECK(cublasGetMatrix(rows, cols, sizeof(float), d, 7, back.data(), 6));
  for (int j = 0; j < cols; ++j)
    for (int i = 0; i < 6; ++i) EXPECT(back[i + j * 6] == (i < rows ? host[i + j * 8] : -7.0f));
  cudaFree(d);

  // A GEMM on the handle's stream, captured into a graph launched twice:
  // C += A B each launch.
  const int n = 16;
  auto a = RandomMatrix<float>(n * n), b = RandomMatrix<float>(n * n);
  std::vector<float> c(n * n, 0.0f);
  float *da = Device(a), *db = Device(b), *dc = Device(c);
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  BCHECK(cublasSetStream(h, s));
  cudaStream_t got_stream = nullptr;
  BCHECK(cublasGetStream(h, &got_stream));
  EXPECT(got_stream == s);
  const float one = 1.0f;
  cudaGraph_t graph;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  BCHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, da, n, db, n, &one, dc, n));
  CHECK(cudaStreamEndCapture(s, &graph));
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaStreamSynchronize(s));
  auto got = Host(dc, c.size());
  auto once = RefGemm(0, 0, n, n, n, 1.0, a, n, b, n, 0.0, c, n);
  for (size_t i = 0; i < c.size(); ++i) NEAR(got[i], 2 * once[i].real(), 1e-5);
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  BCHECK(cublasSetStream(h, nullptr));
  CHECK(cudaStreamDestroy(s));
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
  std::printf("cublas: streams, capture, matrix helpers OK\n");
  return 0;
}

// cuBLASLt: D = epilogue(alpha op(A) op(B) + beta C) with bias + ReLU in
// float (C and D apart), GELU + bias in half in place (C == D), and a
// heuristic query, as PyTorch's addmm-with-bias calls it.
int Lt() {
  cublasLtHandle_t lt;
  BCHECK(cublasLtCreate(&lt));
  const int m = 20, n = 12, k = 16, batch = 2;
  const long long sa = m * k, sb = k * n, sc = m * n;
  auto a = RandomMatrix<float>(sa * batch), b = RandomMatrix<float>(sb * batch), c = RandomMatrix<float>(sc * batch);
  auto bias = RandomMatrix<float>(m);
  float *da = Device(a), *db = Device(b), *dc = Device(c), *dbias = Device(bias), *dd = nullptr;
  CHECK(cudaMalloc(&dd, sizeof(float) * sc * batch));
  cublasLtMatmulDesc_t desc;
  BCHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t tn = CUBLAS_OP_T;
  BCHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &tn, sizeof tn));
  cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_RELU_BIAS;
  BCHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
  BCHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &dbias, sizeof dbias));
  cublasLtMatrixLayout_t la, lb, lc;
  BCHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, k, m, k));  // A stored k x m, used transposed
  BCHECK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, k, n, k));
  BCHECK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, m, n, m));
  for (cublasLtMatrixLayout_t l : {la, lb, lc})
    BCHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch));
  BCHECK(cublasLtMatrixLayoutSetAttribute(la, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sa, sizeof sa));
  BCHECK(cublasLtMatrixLayoutSetAttribute(lb, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sb, sizeof sb));
  BCHECK(cublasLtMatrixLayoutSetAttribute(lc, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sc, sizeof sc));
  cublasLtMatmulPreference_t pref;
  BCHECK(cublasLtMatmulPreferenceCreate(&pref));
  size_t ws = 1 << 20;
  BCHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  cublasLtMatmulHeuristicResult_t heur[4];
  int found = 0;
  BCHECK(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, pref, 4, heur, &found));
  EXPECT(found >= 1 && heur[0].state == CUBLAS_STATUS_SUCCESS && heur[0].workspaceSize <= ws);
  void* workspace = nullptr;
  if (heur[0].workspaceSize > 0) CHECK(cudaMalloc(&workspace, heur[0].workspaceSize));
  const float alpha = 0.5f, beta = -1.0f;
  BCHECK(cublasLtMatmul(lt, desc, &alpha, da, la, db, lb, &beta, dc, lc, dd, lc, &heur[0].algo, workspace,
                        heur[0].workspaceSize, nullptr));
  auto got = Host(dd, c.size());
  auto want = RefGemm(1, 0, m, n, k, alpha, a, k, b, k, beta, c, m, batch, sa, sb, sc);
  for (int p = 0; p < batch; ++p)
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) {
        const size_t e = p * sc + i + j * m;
        NEAR(got[e], std::max(0.0, want[e].real() + bias[i]), 1e-5);
      }
  // Half, GELU + bias, in place (C == D), one matrix.
  auto ha = RandomMatrix<__half>(m * k), hb = RandomMatrix<__half>(k * n), hc = RandomMatrix<__half>(m * n);
  auto hbias = RandomMatrix<__half>(m);
  __half *dha = Device(ha), *dhb = Device(hb), *dhc = Device(hc), *dhbias = Device(hbias);
  cublasLtMatmulDesc_t hdesc;
  BCHECK(cublasLtMatmulDescCreate(&hdesc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  epi = CUBLASLT_EPILOGUE_GELU_BIAS;
  BCHECK(cublasLtMatmulDescSetAttribute(hdesc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
  BCHECK(cublasLtMatmulDescSetAttribute(hdesc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &dhbias, sizeof dhbias));
  cublasLtMatrixLayout_t hla, hlb, hlc;
  BCHECK(cublasLtMatrixLayoutCreate(&hla, CUDA_R_16F, m, k, m));
  BCHECK(cublasLtMatrixLayoutCreate(&hlb, CUDA_R_16F, k, n, k));
  BCHECK(cublasLtMatrixLayoutCreate(&hlc, CUDA_R_16F, m, n, m));
  const float one = 1.0f;
  BCHECK(cublasLtMatmul(lt, hdesc, &one, dha, hla, dhb, hlb, &one, dhc, hlc, dhc, hlc, nullptr, nullptr, 0, nullptr));
  auto hgot = Host(dhc, hc.size());
  auto hwant = RefGemm(0, 0, m, n, k, 1.0, ha, m, hb, k, 1.0, hc, m);
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      const double x = hwant[i + j * m].real() + __half2float(hbias[i]);
      const double gelu = 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
      NEAR(__half2float(hgot[i + j * m]), gelu, 2e-2);
    }
  // A row-major layout is refused by name.
  int32_t row = CUBLASLT_ORDER_ROW;
  BCHECK(cublasLtMatrixLayoutSetAttribute(hlc, CUBLASLT_MATRIX_LAYOUT_ORDER, &row, sizeof row));
  BEXPECT(cublasLtMatmul(lt, hdesc, &one, dha, hla, dhb, hlb, &one, dhc, hlc, dhc, hlc, nullptr, nullptr, 0, nullptr),
          CUBLAS_STATUS_NOT_SUPPORTED);
  for (cublasLtMatrixLayout_t l : {la, lb, lc, hla, hlb, hlc}) BCHECK(cublasLtMatrixLayoutDestroy(l));
  BCHECK(cublasLtMatmulDescDestroy(desc));
  BCHECK(cublasLtMatmulDescDestroy(hdesc));
  BCHECK(cublasLtMatmulPreferenceDestroy(pref));
  BCHECK(cublasLtDestroy(lt));
  for (void* p : {static_cast<void*>(da), static_cast<void*>(db), static_cast<void*>(dc), static_cast<void*>(dd),
                  static_cast<void*>(dbias), static_cast<void*>(dha), static_cast<void*>(dhb), static_cast<void*>(dhc),
                  static_cast<void*>(dhbias), workspace})
    cudaFree(p);
  std::printf("cublas: cuBLASLt matmul with bias, ReLU, GELU OK\n");
  return 0;
}

int Errors(cublasHandle_t h) {
  float* d = nullptr;
  CHECK(cudaMalloc(&d, 64 * sizeof(float)));
  const float one = 1.0f;
  // lda smaller than m, a null scalar, a negative size: refused at once.
  BEXPECT(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 8, 4, 4, &one, d, 4, d, 4, &one, d, 8), CUBLAS_STATUS_INVALID_VALUE);
  BEXPECT(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, nullptr, d, 4, d, 4, &one, d, 4),
          CUBLAS_STATUS_INVALID_VALUE);
  BEXPECT(cublasSaxpy(h, -1, &one, d, 1, d, 1), CUBLAS_STATUS_SUCCESS);  // n <= 0: nothing to do
  float r = -1.0f;
  BCHECK(cublasSnrm2(h, 0, d, 1, &r));  // ... and a reduction's result is 0
  EXPECT(r == 0.0f);
  BEXPECT(cublasSetPointerMode(h, static_cast<cublasPointerMode_t>(7)), CUBLAS_STATUS_INVALID_VALUE);
  // int8 GEMM (GemmEx 8I x 8I -> 32I, compute 32I, int32 scalars), exact.
  {
    const int m = 16, n = 12, k = 8;
    std::vector<int8_t> ha(m * k), hb(k * n);
    std::vector<int32_t> hc(m * n);
    for (auto& v : ha) v = static_cast<int8_t>(std::lround(Rand() * 127));
    for (auto& v : hb) v = static_cast<int8_t>(std::lround(Rand() * 127));
    for (auto& v : hc) v = static_cast<int32_t>(std::lround(Rand() * 100000));
    int8_t *da = Device(ha), *db = Device(hb);
    int32_t* dc = Device(hc);
    const int32_t ialpha = 3, ibeta = -2;
    const cublasStatus_t int8 = cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &ialpha, da, CUDA_R_8I, m, db,
                                             CUDA_R_8I, k, &ibeta, dc, CUDA_R_32I, m, CUBLAS_COMPUTE_32I,
                                             CUBLAS_GEMM_DEFAULT);
    std::printf("cublas: int8 GemmEx: %s\n", cublasGetStatusName(int8));
    BCHECK(int8);
    auto got = Host(dc, hc.size());
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) {
        int64_t sum = 0;
        for (int l = 0; l < k; ++l) sum += int64_t{ha[i + l * m]} * hb[l + j * k];
        EXPECT(got[i + j * m] == static_cast<int32_t>(ialpha * sum + ibeta * int64_t{hc[i + j * m]}));
      }
    cudaFree(da);
    cudaFree(db);
    cudaFree(dc);
  }
  // A handle destroyed is no handle.
  cublasHandle_t gone;
  BCHECK(cublasCreate(&gone));
  BCHECK(cublasDestroy(gone));
  BEXPECT(cublasSgemm(gone, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, d, 4, d, 4, &one, d, 4),
          CUBLAS_STATUS_NOT_INITIALIZED);
  BEXPECT(cublasDestroy(gone), CUBLAS_STATUS_NOT_INITIALIZED);
  cudaFree(d);
  EXPECT(std::strcmp(cublasGetStatusName(CUBLAS_STATUS_INVALID_VALUE), "CUBLAS_STATUS_INVALID_VALUE") == 0);
  std::printf("cublas: error paths OK\n");
  return 0;
}

}  // namespace

// Undocumented: no header declares them, libcublas.so.13 exports them and
// cuSOLVER 13's cusolverDnCreate calls the setter with 1 on its handle.
extern "C" cublasStatus_t cublasSetEnvironmentMode(cublasHandle_t handle, int mode);
extern "C" cublasStatus_t cublasGetEnvironmentMode(cublasHandle_t handle, int* mode);

namespace {

int EnvironmentMode() {
  cublasHandle_t h;
  BCHECK(cublasCreate(&h));
  int mode = -1;
  BCHECK(cublasGetEnvironmentMode(h, &mode));
  EXPECT(mode == 0);
  BCHECK(cublasSetEnvironmentMode(h, 1));
  BCHECK(cublasGetEnvironmentMode(h, &mode));
  EXPECT(mode == 1);
  BEXPECT(cublasSetEnvironmentMode(h, 2), CUBLAS_STATUS_INVALID_VALUE);
  BEXPECT(cublasSetEnvironmentMode(h, -1), CUBLAS_STATUS_INVALID_VALUE);
  BEXPECT(cublasGetEnvironmentMode(h, nullptr), CUBLAS_STATUS_INVALID_VALUE);
  BCHECK(cublasGetEnvironmentMode(h, &mode));
  EXPECT(mode == 1);
  BEXPECT(cublasSetEnvironmentMode(nullptr, 1), CUBLAS_STATUS_NOT_INITIALIZED);
  // The handle still computes (a 2x2 identity times itself).
  const float eye[4] = {1, 0, 0, 1};
  float* d = nullptr;
  CHECK(cudaMalloc(&d, 2 * sizeof eye));
  CHECK(cudaMemcpy(d, eye, sizeof eye, cudaMemcpyHostToDevice));
  const float one = 1.0f, zero = 0.0f;
  BCHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, d, 2, d, 2, &zero, d + 4, 2));
  float got[4] = {};
  CHECK(cudaMemcpy(got, d + 4, sizeof got, cudaMemcpyDeviceToHost));
  for (int i = 0; i < 4; ++i) EXPECT(got[i] == eye[i]);
  cudaFree(d);
  BCHECK(cublasDestroy(h));
  std::printf("cublas: environment mode OK\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  cublasHandle_t h;
  BCHECK(cublasCreate(&h));
  int version = 0;
  BCHECK(cublasGetVersion(h, &version));
  EXPECT(version > 0);
  if (int r = Gemms(h)) return r;
  if (int r = GemmExAndBatched(h)) return r;
  if (int r = GemvGeam(h)) return r;
  if (int r = PointerArrayBatches(h)) return r;
  if (int r = BatchedLu(h)) return r;
  if (int r = Trsm(h)) return r;
  if (int r = Level1(h)) return r;
  if (int r = StreamsCaptureHelpers(h)) return r;
  if (int r = Lt()) return r;
  if (int r = Errors(h)) return r;
  if (int r = EnvironmentMode()) return r;
  CHECK(cudaDeviceSynchronize());
  BCHECK(cublasDestroy(h));
  std::printf("cublas: OK\n");
  return 0;
}
