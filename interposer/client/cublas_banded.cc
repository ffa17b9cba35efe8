// cuBLAS's banded and packed level-2 routines in libphos.so
// (cublas_internal.h; calls.def's BlasGbmv … BlasTpsv rows, blas_spec.h
// says how each reads its request): gbmv, sbmv/hbmv, tbmv, tbsv,
// spmv/hpmv, spr/hpr, spr2/hpr2, tpmv, tpsv, with int and int64_t sizes.
#include <cublas_api.h>

#include <cstdint>

#include "interposer/client/client_internal.h"
#include "interposer/client/cublas_internal.h"
#include "protocol/blas_spec.h"
#include "protocol/calls.h"

namespace phos::client {
namespace {

using wire::BlasRequest;


void SetUplo(BlasRequest* r, cublasFillMode_t uplo) {
  if (uplo == CUBLAS_FILL_MODE_UPPER) r->flags |= wire::kBlasUpper;
}

cublasStatus_t Gbmv(cublasHandle_t handle, cublasOperation_t trans, int64_t m, int64_t n, int64_t kl, int64_t ku,
                    const void* alpha, const void* a, int64_t lda, const void* x, int64_t incx, const void* beta,
                    void* y, int64_t incy, int32_t type) {
  BlasRequest r;
  cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
  BlasHandle* h = BeginBlas(handle, type, &r, &st);
  if (h == nullptr) return st;
  if (!ValidOp(trans)) return CUBLAS_STATUS_INVALID_VALUE;
  r.op_a = static_cast<uint32_t>(trans);
  r.m = m;
  r.n = n;
  r.k = kl;
  r.stride_a = ku;  // (a band matrix has no batch stride: calls.def)
  r.a = reinterpret_cast<uint64_t>(a);
  r.lda = lda;
  r.b = reinterpret_cast<uint64_t>(x);
  r.ldb = incx;
  r.c = reinterpret_cast<uint64_t>(y);
  r.ldc = incy;
  if (!SetBlasScalars(&r, alpha, beta, true)) return CUBLAS_STATUS_INVALID_VALUE;
  return SendBlas(*h, wire::op::kBlasGbmv, r);
}

/// sbmv/hbmv (k >= 0, A banded with lda) and spmv/hpmv (k < 0: AP packed).
cublasStatus_t SymmetricMv(cublasHandle_t handle, wire::ApiId api, cublasFillMode_t uplo, int64_t n, int64_t k,
                           const void* alpha, const void* a, int64_t lda, const void* x, int64_t incx,
                           const void* beta, void* y, int64_t incy, int32_t type, bool hermitian) {
  BlasRequest r;
  cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
  BlasHandle* h = BeginBlas(handle, type, &r, &st);
  if (h == nullptr) return st;
  if (!ValidUplo(uplo)) return CUBLAS_STATUS_INVALID_VALUE;
  SetUplo(&r, uplo);
  if (hermitian) r.flags |= wire::kBlasConjugate;
  r.n = n;
  r.k = k;
  r.a = reinterpret_cast<uint64_t>(a);
  r.lda = lda;
  r.b = reinterpret_cast<uint64_t>(x);
  r.ldb = incx;
  r.c = reinterpret_cast<uint64_t>(y);
  r.ldc = incy;
  if (!SetBlasScalars(&r, alpha, beta, true)) return CUBLAS_STATUS_INVALID_VALUE;
  return SendBlas(*h, api, r);
}

/// tbmv/tbsv (A banded, k, lda) and tpmv/tpsv (AP packed): x in (c, incx).
cublasStatus_t TriangularMv(cublasHandle_t handle, wire::ApiId api, cublasFillMode_t uplo, cublasOperation_t trans,
                            cublasDiagType_t diag, int64_t n, int64_t k, const void* a, int64_t lda, void* x,
                            int64_t incx, int32_t type) {
  BlasRequest r;
  cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
  BlasHandle* h = BeginBlas(handle, type, &r, &st);
  if (h == nullptr) return st;
  if (!ValidUplo(uplo) || !ValidOp(trans) || !ValidDiag(diag)) return CUBLAS_STATUS_INVALID_VALUE;
  SetUplo(&r, uplo);
  if (diag == CUBLAS_DIAG_UNIT) r.flags |= wire::kBlasUnitDiag;
  r.op_a = static_cast<uint32_t>(trans);
  r.n = n;
  r.k = k;
  r.a = reinterpret_cast<uint64_t>(a);
  r.lda = lda;
  r.c = reinterpret_cast<uint64_t>(x);
  r.ldc = incx;
  return SendBlas(*h, api, r);
}

/// spr/hpr (y null) and spr2/hpr2: the packed triangle in (c). hpr's
/// alpha is real.
cublasStatus_t PackedRank(cublasHandle_t handle, cublasFillMode_t uplo, int64_t n, const void* alpha, const void* x,
                          int64_t incx, const void* y, int64_t incy, void* ap, int32_t type, bool hermitian,
                          bool two) {
  BlasRequest r;
  cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
  BlasHandle* h = BeginBlas(handle, type, &r, &st);
  if (h == nullptr) return st;
  if (!ValidUplo(uplo)) return CUBLAS_STATUS_INVALID_VALUE;
  SetUplo(&r, uplo);
  if (hermitian) r.flags |= wire::kBlasConjugate | (two ? 0 : wire::kBlasRealAlpha);
  r.n = n;
  r.a = reinterpret_cast<uint64_t>(x);
  r.lda = incx;
  if (two) {
    r.b = reinterpret_cast<uint64_t>(y);
    r.ldb = incy;
  }
  r.c = reinterpret_cast<uint64_t>(ap);
  if (!SetBlasScalars(&r, alpha, nullptr, false)) return CUBLAS_STATUS_INVALID_VALUE;
  return SendBlas(*h, two ? wire::op::kBlasSpr2 : wire::op::kBlasSpr, r);
}

}  // namespace
}  // namespace phos::client

using namespace phos::client;  // NOLINT
namespace op = phos::wire::op;

// Each family with int and int64_t sizes (suffix _v2 and _v2_64).
#define PHOS_WIDTHS(X, P, T, R, CT) X(P, T, R, CT, int, _v2) X(P, T, R, CT, int64_t, _v2_64)
#define PHOS_REAL(X) PHOS_WIDTHS(X, S, float, float, CUDA_R_32F) PHOS_WIDTHS(X, D, double, double, CUDA_R_64F)
#define PHOS_COMPLEX(X) \
  PHOS_WIDTHS(X, C, cuComplex, float, CUDA_C_32F) PHOS_WIDTHS(X, Z, cuDoubleComplex, double, CUDA_C_64F)

#define PHOS_GBMV(P, T, R, CT, IDX, SUF)                                                                        \
  PHOS_EXPORT cublasStatus_t cublas##P##gbmv##SUF(cublasHandle_t h, cublasOperation_t trans, IDX m, IDX n,     \
                                                  IDX kl, IDX ku, const T* alpha, const T* A, IDX lda,         \
                                                  const T* x, IDX incx, const T* beta, T* y, IDX incy) {       \
    return Gbmv(h, trans, m, n, kl, ku, alpha, A, lda, x, incx, beta, y, incy, CT);                            \
  }
PHOS_REAL(PHOS_GBMV)
PHOS_COMPLEX(PHOS_GBMV)

#define PHOS_SBMV(P, T, R, CT, IDX, SUF, NAME, HERM)                                                            \
  PHOS_EXPORT cublasStatus_t cublas##P##NAME##SUF(cublasHandle_t h, cublasFillMode_t uplo, IDX n, IDX k,       \
                                                  const T* alpha, const T* A, IDX lda, const T* x, IDX incx,   \
                                                  const T* beta, T* y, IDX incy) {                             \
    return SymmetricMv(h, op::kBlasSbmv, uplo, n, k, alpha, A, lda, x, incx, beta, y, incy, CT, HERM);         \
  }
#define PHOS_SPMV(P, T, R, CT, IDX, SUF, NAME, HERM)                                                            \
  PHOS_EXPORT cublasStatus_t cublas##P##NAME##SUF(cublasHandle_t h, cublasFillMode_t uplo, IDX n,              \
                                                  const T* alpha, const T* AP, const T* x, IDX incx,           \
                                                  const T* beta, T* y, IDX incy) {                             \
    return SymmetricMv(h, op::kBlasSpmv, uplo, n, 0, alpha, AP, 1, x, incx, beta, y, incy, CT, HERM);          \
  }
#define PHOS_SBMV_S(P, T, R, CT, IDX, SUF) PHOS_SBMV(P, T, R, CT, IDX, SUF, sbmv, false)
#define PHOS_HBMV(P, T, R, CT, IDX, SUF) PHOS_SBMV(P, T, R, CT, IDX, SUF, hbmv, true)
#define PHOS_SPMV_S(P, T, R, CT, IDX, SUF) PHOS_SPMV(P, T, R, CT, IDX, SUF, spmv, false)
#define PHOS_HPMV(P, T, R, CT, IDX, SUF) PHOS_SPMV(P, T, R, CT, IDX, SUF, hpmv, true)
PHOS_REAL(PHOS_SBMV_S)
PHOS_COMPLEX(PHOS_HBMV)
PHOS_REAL(PHOS_SPMV_S)
PHOS_COMPLEX(PHOS_HPMV)

#define PHOS_TBMV(P, T, R, CT, IDX, SUF)                                                                           \
  PHOS_EXPORT cublasStatus_t cublas##P##tbmv##SUF(cublasHandle_t h, cublasFillMode_t uplo, cublasOperation_t trans, \
                                                  cublasDiagType_t diag, IDX n, IDX k, const T* A, IDX lda, T* x,   \
                                                  IDX incx) {                                                       \
    return TriangularMv(h, op::kBlasTbmv, uplo, trans, diag, n, k, A, lda, x, incx, CT);                           \
  }                                                                                                                 \
  PHOS_EXPORT cublasStatus_t cublas##P##tbsv##SUF(cublasHandle_t h, cublasFillMode_t uplo, cublasOperation_t trans, \
                                                  cublasDiagType_t diag, IDX n, IDX k, const T* A, IDX lda, T* x,   \
                                                  IDX incx) {                                                       \
    return TriangularMv(h, op::kBlasTbsv, uplo, trans, diag, n, k, A, lda, x, incx, CT);                           \
  }                                                                                                                 \
  PHOS_EXPORT cublasStatus_t cublas##P##tpmv##SUF(cublasHandle_t h, cublasFillMode_t uplo, cublasOperation_t trans, \
                                                  cublasDiagType_t diag, IDX n, const T* AP, T* x, IDX incx) {      \
    return TriangularMv(h, op::kBlasTpmv, uplo, trans, diag, n, 0, AP, 1, x, incx, CT);                            \
  }                                                                                                                 \
  PHOS_EXPORT cublasStatus_t cublas##P##tpsv##SUF(cublasHandle_t h, cublasFillMode_t uplo, cublasOperation_t trans, \
                                                  cublasDiagType_t diag, IDX n, const T* AP, T* x, IDX incx) {      \
    return TriangularMv(h, op::kBlasTpsv, uplo, trans, diag, n, 0, AP, 1, x, incx, CT);                            \
  }
PHOS_REAL(PHOS_TBMV)
PHOS_COMPLEX(PHOS_TBMV)

// spr/hpr differ in alpha's type (AT: real for hpr) and name; spr2/hpr2 in
// name only.
#define PHOS_SPR_AS(P, T, AT, CT, IDX, SUF, R1, R2, HERM)                                                    \
  PHOS_EXPORT cublasStatus_t cublas##P##R1##SUF(cublasHandle_t h, cublasFillMode_t uplo, IDX n,              \
                                                const AT* alpha, const T* x, IDX incx, T* AP) {              \
    return PackedRank(h, uplo, n, alpha, x, incx, nullptr, 0, AP, CT, HERM, false);                          \
  }                                                                                                          \
  PHOS_EXPORT cublasStatus_t cublas##P##R2##SUF(cublasHandle_t h, cublasFillMode_t uplo, IDX n,              \
                                                const T* alpha, const T* x, IDX incx, const T* y, IDX incy,  \
                                                T* AP) {                                                     \
    return PackedRank(h, uplo, n, alpha, x, incx, y, incy, AP, CT, HERM, true);                              \
  }
#define PHOS_SPR(P, T, R, CT, IDX, SUF) PHOS_SPR_AS(P, T, T, CT, IDX, SUF, spr, spr2, false)
#define PHOS_HPR(P, T, R, CT, IDX, SUF) PHOS_SPR_AS(P, T, R, CT, IDX, SUF, hpr, hpr2, true)
PHOS_REAL(PHOS_SPR)
PHOS_COMPLEX(PHOS_HPR)
