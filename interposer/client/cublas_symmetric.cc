// cuBLAS's symmetric, Hermitian and triangular routines in libphos.so
// (cublas_internal.h; calls.def's BlasSymm … BlasDgmm rows, blas_spec.h
// says how each reads its request): symm/hemm, syr2k/her2k, herk (the syrk
// row, conjugated), trmm, symv/hemv, trmv, trsv, syr/her, syr2/her2 and
// dgmm, in S/D/C/Z and their _64 forms. Each checks its enums as cuBLAS
// does (CUBLAS_STATUS_INVALID_VALUE at once), builds one request and sends
// it in stream order like the other routines.
#include <cublas_api.h>

#include <cstdint>

#include "interposer/client/client_internal.h"
#include "interposer/client/cublas_internal.h"
#include "protocol/blas_spec.h"
#include "protocol/calls.h"

namespace phos::client {
namespace {

namespace op = wire::op;
using wire::BlasRequest;


/// A request of one type throughout with its triangle (BeginBlas); false
/// for an unknown handle or a bad triangle (StartFailed says which).
bool Start(cublasHandle_t handle, int32_t type, cublasFillMode_t uplo, BlasRequest* r, BlasHandle** h) {
  cublasStatus_t unused = CUBLAS_STATUS_SUCCESS;
  *h = BeginBlas(handle, type, r, &unused);
  if (*h == nullptr || !ValidUplo(uplo)) return false;
  if (uplo == CUBLAS_FILL_MODE_UPPER) r->flags |= wire::kBlasUpper;
  return true;
}

/// NOT_INITIALIZED for a handle phos does not know, INVALID_VALUE for a bad enum.
cublasStatus_t StartFailed(cublasHandle_t handle) {
  return FindBlasHandle(handle) == nullptr ? CUBLAS_STATUS_NOT_INITIALIZED : CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t Symm(cublasHandle_t handle, cublasSideMode_t side, cublasFillMode_t uplo, int64_t m, int64_t n,
                    const void* alpha, const void* a, int64_t lda, const void* b, int64_t ldb, const void* beta,
                    void* c, int64_t ldc, int32_t type, bool hermitian) {
  BlasRequest r;
  BlasHandle* h = nullptr;
  if (!Start(handle, type, uplo, &r, &h) || !ValidSide(side)) return StartFailed(handle);
  if (side == CUBLAS_SIDE_RIGHT) r.flags |= wire::kBlasSideRight;
  if (hermitian) r.flags |= wire::kBlasConjugate;
  r.m = m;
  r.n = n;
  r.a = reinterpret_cast<uint64_t>(a);
  r.lda = lda;
  r.b = reinterpret_cast<uint64_t>(b);
  r.ldb = ldb;
  r.c = reinterpret_cast<uint64_t>(c);
  r.ldc = ldc;
  if (!SetBlasScalars(&r, alpha, beta, true)) return CUBLAS_STATUS_INVALID_VALUE;
  return SendBlas(*h, op::kBlasSymm, r);
}

/// syr2k (hermitian false: op N or T — C means T for real types), her2k
/// (op N or C, beta real); syrkx/herkx likewise (api kBlasSyrkx). herk goes
/// as the syrk row (Herk below).
cublasStatus_t Syr2k(cublasHandle_t handle, cublasFillMode_t uplo, cublasOperation_t trans, int64_t n, int64_t k,
                     const void* alpha, const void* a, int64_t lda, const void* b, int64_t ldb, const void* beta,
                     void* c, int64_t ldc, int32_t type, bool hermitian, wire::ApiId api = op::kBlasSyr2k) {
  BlasRequest r;
  BlasHandle* h = nullptr;
  if (!Start(handle, type, uplo, &r, &h) || !ValidOp(trans)) return StartFailed(handle);
  if (wire::BlasTypeIsComplex(type) && trans == (hermitian ? CUBLAS_OP_T : CUBLAS_OP_C)) return CUBLAS_STATUS_INVALID_VALUE;
  if (hermitian) r.flags |= wire::kBlasConjugate | wire::kBlasRealBeta;
  r.op_a = trans == CUBLAS_OP_N ? 0 : hermitian ? 2 : 1;
  r.n = n;
  r.k = k;
  r.a = reinterpret_cast<uint64_t>(a);
  r.lda = lda;
  r.b = reinterpret_cast<uint64_t>(b);
  r.ldb = ldb;
  r.c = reinterpret_cast<uint64_t>(c);
  r.ldc = ldc;
  if (!SetBlasScalars(&r, alpha, beta, true)) return CUBLAS_STATUS_INVALID_VALUE;
  return SendBlas(*h, api, r);
}

/// herk: C = alpha op(A) op(A)^H + beta C, op N or C, alpha and beta real.
cublasStatus_t Herk(cublasHandle_t handle, cublasFillMode_t uplo, cublasOperation_t trans, int64_t n, int64_t k,
                    const void* alpha, const void* a, int64_t lda, const void* beta, void* c, int64_t ldc,
                    int32_t type) {
  BlasRequest r;
  BlasHandle* h = nullptr;
  if (!Start(handle, type, uplo, &r, &h) || (trans != CUBLAS_OP_N && trans != CUBLAS_OP_C)) return StartFailed(handle);
  r.flags |= wire::kBlasConjugate | wire::kBlasRealAlpha | wire::kBlasRealBeta;
  r.op_a = static_cast<uint32_t>(trans);
  r.n = n;
  r.k = k;
  r.a = reinterpret_cast<uint64_t>(a);
  r.lda = lda;
  r.c = reinterpret_cast<uint64_t>(c);
  r.ldc = ldc;
  if (!SetBlasScalars(&r, alpha, beta, true)) return CUBLAS_STATUS_INVALID_VALUE;
  return SendBlas(*h, op::kBlasSyrk, r);
}

cublasStatus_t Trmm(cublasHandle_t handle, cublasSideMode_t side, cublasFillMode_t uplo, cublasOperation_t trans,
                    cublasDiagType_t diag, int64_t m, int64_t n, const void* alpha, const void* a, int64_t lda,
                    const void* b, int64_t ldb, void* c, int64_t ldc, int32_t type) {
  BlasRequest r;
  BlasHandle* h = nullptr;
  if (!Start(handle, type, uplo, &r, &h) || !ValidSide(side) || !ValidOp(trans) || !ValidDiag(diag))
    return StartFailed(handle);
  if (side == CUBLAS_SIDE_RIGHT) r.flags |= wire::kBlasSideRight;
  if (diag == CUBLAS_DIAG_UNIT) r.flags |= wire::kBlasUnitDiag;
  r.op_a = static_cast<uint32_t>(trans);
  r.m = m;
  r.n = n;
  r.a = reinterpret_cast<uint64_t>(a);
  r.lda = lda;
  r.b = reinterpret_cast<uint64_t>(b);
  r.ldb = ldb;
  r.c = reinterpret_cast<uint64_t>(c);
  r.ldc = ldc;
  if (!SetBlasScalars(&r, alpha, nullptr, false)) return CUBLAS_STATUS_INVALID_VALUE;
  return SendBlas(*h, op::kBlasTrmm, r);
}

cublasStatus_t Symv(cublasHandle_t handle, cublasFillMode_t uplo, int64_t n, const void* alpha, const void* a,
                    int64_t lda, const void* x, int64_t incx, const void* beta, void* y, int64_t incy, int32_t type,
                    bool hermitian) {
  BlasRequest r;
  BlasHandle* h = nullptr;
  if (!Start(handle, type, uplo, &r, &h)) return StartFailed(handle);
  if (hermitian) r.flags |= wire::kBlasConjugate;
  r.n = n;
  r.a = reinterpret_cast<uint64_t>(a);
  r.lda = lda;
  r.b = reinterpret_cast<uint64_t>(x);
  r.ldb = incx;
  r.c = reinterpret_cast<uint64_t>(y);
  r.ldc = incy;
  if (!SetBlasScalars(&r, alpha, beta, true)) return CUBLAS_STATUS_INVALID_VALUE;
  return SendBlas(*h, op::kBlasSymv, r);
}

/// trmv (api kBlasTrmv) and trsv (kBlasTrsv): x in (c, ldc = incx).
cublasStatus_t Triangular(cublasHandle_t handle, wire::ApiId api, cublasFillMode_t uplo, cublasOperation_t trans,
                          cublasDiagType_t diag, int64_t n, const void* a, int64_t lda, void* x, int64_t incx,
                          int32_t type) {
  BlasRequest r;
  BlasHandle* h = nullptr;
  if (!Start(handle, type, uplo, &r, &h) || !ValidOp(trans) || !ValidDiag(diag)) return StartFailed(handle);
  if (diag == CUBLAS_DIAG_UNIT) r.flags |= wire::kBlasUnitDiag;
  r.op_a = static_cast<uint32_t>(trans);
  r.n = n;
  r.a = reinterpret_cast<uint64_t>(a);
  r.lda = lda;
  r.c = reinterpret_cast<uint64_t>(x);
  r.ldc = incx;
  return SendBlas(*h, api, r);
}

/// syr/her (y null) and syr2/her2: A in (c, ldc). her's alpha is real.
cublasStatus_t Syr(cublasHandle_t handle, cublasFillMode_t uplo, int64_t n, const void* alpha, const void* x,
                   int64_t incx, const void* y, int64_t incy, void* a, int64_t lda, int32_t type, bool hermitian,
                   bool two) {
  BlasRequest r;
  BlasHandle* h = nullptr;
  if (!Start(handle, type, uplo, &r, &h)) return StartFailed(handle);
  if (hermitian) r.flags |= wire::kBlasConjugate | (two ? 0 : wire::kBlasRealAlpha);
  r.n = n;
  r.a = reinterpret_cast<uint64_t>(x);
  r.lda = incx;
  if (two) {
    r.b = reinterpret_cast<uint64_t>(y);
    r.ldb = incy;
  }
  r.c = reinterpret_cast<uint64_t>(a);
  r.ldc = lda;
  if (!SetBlasScalars(&r, alpha, nullptr, false)) return CUBLAS_STATUS_INVALID_VALUE;
  return SendBlas(*h, two ? op::kBlasSyr2 : op::kBlasSyr, r);
}

cublasStatus_t Dgmm(cublasHandle_t handle, cublasSideMode_t mode, int64_t m, int64_t n, const void* a, int64_t lda,
                    const void* x, int64_t incx, void* c, int64_t ldc, int32_t type) {
  BlasRequest r;
  BlasHandle* h = nullptr;
  if (!Start(handle, type, CUBLAS_FILL_MODE_LOWER, &r, &h) || !ValidSide(mode)) return StartFailed(handle);
  if (mode == CUBLAS_SIDE_RIGHT) r.flags |= wire::kBlasSideRight;
  r.m = m;
  r.n = n;
  r.a = reinterpret_cast<uint64_t>(a);
  r.lda = lda;
  r.b = reinterpret_cast<uint64_t>(x);
  r.ldb = incx;
  r.c = reinterpret_cast<uint64_t>(c);
  r.ldc = ldc;
  return SendBlas(*h, op::kBlasDgmm, r);
}

}  // namespace
}  // namespace phos::client

using namespace phos::client;  // NOLINT

// Each family in S/D/C/Z (the Hermitian members in C/Z), with int and
// int64_t dimensions (the _64 forms).
#define PHOS_FOR_TYPES(X, IDX, SUF)                                       \
  X(S, float, float, CUDA_R_32F, IDX, SUF)                                \
  X(D, double, double, CUDA_R_64F, IDX, SUF)                              \
  X(C, cuComplex, float, CUDA_C_32F, IDX, SUF)                            \
  X(Z, cuDoubleComplex, double, CUDA_C_64F, IDX, SUF)
#define PHOS_FOR_COMPLEX(X, IDX, SUF)                                     \
  X(C, cuComplex, float, CUDA_C_32F, IDX, SUF)                            \
  X(Z, cuDoubleComplex, double, CUDA_C_64F, IDX, SUF)
#define PHOS_BOTH_WIDTHS(FOR, X) FOR(X, int, _v2) FOR(X, int64_t, _v2_64)

// symm and hemm share a signature: NAME and whether it is Hermitian.
#define PHOS_SYMM_AS(P, T, CT, IDX, SUF, NAME, HERM)                                                               \
  PHOS_EXPORT cublasStatus_t cublas##P##NAME##SUF(cublasHandle_t h, cublasSideMode_t side, cublasFillMode_t uplo,   \
                                                  IDX m, IDX n, const T* alpha, const T* A, IDX lda, const T* B,    \
                                                  IDX ldb, const T* beta, T* C, IDX ldc) {                          \
    return Symm(h, side, uplo, m, n, alpha, A, lda, B, ldb, beta, C, ldc, CT, HERM);                               \
  }
#define PHOS_SYMM(P, T, R, CT, IDX, SUF) PHOS_SYMM_AS(P, T, CT, IDX, SUF, symm, false)
#define PHOS_HEMM(P, T, R, CT, IDX, SUF) PHOS_SYMM_AS(P, T, CT, IDX, SUF, hemm, true)
PHOS_BOTH_WIDTHS(PHOS_FOR_TYPES, PHOS_SYMM)
PHOS_BOTH_WIDTHS(PHOS_FOR_COMPLEX, PHOS_HEMM)

// syr2k/her2k and syrkx/herkx share a signature but for beta's type (BT:
// real for the Hermitian members): NAME, BT, whether Hermitian, the row.
#define PHOS_RANK2K_AS(P, T, BT, CT, IDX, SUF, NAME, HERM, API)                                                      \
  PHOS_EXPORT cublasStatus_t cublas##P##NAME##SUF(cublasHandle_t h, cublasFillMode_t uplo, cublasOperation_t trans, \
                                                  IDX n, IDX k, const T* alpha, const T* A, IDX lda, const T* B,    \
                                                  IDX ldb, const BT* beta, T* C, IDX ldc) {                         \
    return Syr2k(h, uplo, trans, n, k, alpha, A, lda, B, ldb, beta, C, ldc, CT, HERM, phos::wire::op::API);        \
  }
#define PHOS_SYR2K(P, T, R, CT, IDX, SUF) PHOS_RANK2K_AS(P, T, T, CT, IDX, SUF, syr2k, false, kBlasSyr2k)
#define PHOS_HER2K(P, T, R, CT, IDX, SUF) PHOS_RANK2K_AS(P, T, R, CT, IDX, SUF, her2k, true, kBlasSyr2k)
#define PHOS_HERK(P, T, R, CT, IDX, SUF)                                                                            \
  PHOS_EXPORT cublasStatus_t cublas##P##herk##SUF(cublasHandle_t h, cublasFillMode_t uplo, cublasOperation_t trans, \
                                                  IDX n, IDX k, const R* alpha, const T* A, IDX lda, const R* beta, \
                                                  T* C, IDX ldc) {                                                  \
    return Herk(h, uplo, trans, n, k, alpha, A, lda, beta, C, ldc, CT);                                            \
  }
PHOS_BOTH_WIDTHS(PHOS_FOR_TYPES, PHOS_SYR2K)
// syrkx/herkx: no _v2 in their names.
#define PHOS_SYRKX(P, T, R, CT, IDX, SUF) PHOS_RANK2K_AS(P, T, T, CT, IDX, SUF, syrkx, false, kBlasSyrkx)
#define PHOS_HERKX(P, T, R, CT, IDX, SUF) PHOS_RANK2K_AS(P, T, R, CT, IDX, SUF, herkx, true, kBlasSyrkx)
PHOS_FOR_TYPES(PHOS_SYRKX, int, )
PHOS_FOR_TYPES(PHOS_SYRKX, int64_t, _64)
PHOS_FOR_COMPLEX(PHOS_HERKX, int, )
PHOS_FOR_COMPLEX(PHOS_HERKX, int64_t, _64)
PHOS_BOTH_WIDTHS(PHOS_FOR_COMPLEX, PHOS_HER2K)
PHOS_BOTH_WIDTHS(PHOS_FOR_COMPLEX, PHOS_HERK)

#define PHOS_TRMM(P, T, R, CT, IDX, SUF)                                                                             \
  PHOS_EXPORT cublasStatus_t cublas##P##trmm##SUF(cublasHandle_t h, cublasSideMode_t side, cublasFillMode_t uplo,    \
                                                  cublasOperation_t trans, cublasDiagType_t diag, IDX m, IDX n,      \
                                                  const T* alpha, const T* A, IDX lda, const T* B, IDX ldb, T* C,    \
                                                  IDX ldc) {                                                         \
    return Trmm(h, side, uplo, trans, diag, m, n, alpha, A, lda, B, ldb, C, ldc, CT);                               \
  }
PHOS_BOTH_WIDTHS(PHOS_FOR_TYPES, PHOS_TRMM)

#define PHOS_SYMV(P, T, R, CT, IDX, SUF)                                                                      \
  PHOS_EXPORT cublasStatus_t cublas##P##symv##SUF(cublasHandle_t h, cublasFillMode_t uplo, IDX n,             \
                                                  const T* alpha, const T* A, IDX lda, const T* x, IDX incx,  \
                                                  const T* beta, T* y, IDX incy) {                            \
    return Symv(h, uplo, n, alpha, A, lda, x, incx, beta, y, incy, CT, false);                               \
  }
#define PHOS_HEMV(P, T, R, CT, IDX, SUF)                                                                      \
  PHOS_EXPORT cublasStatus_t cublas##P##hemv##SUF(cublasHandle_t h, cublasFillMode_t uplo, IDX n,             \
                                                  const T* alpha, const T* A, IDX lda, const T* x, IDX incx,  \
                                                  const T* beta, T* y, IDX incy) {                            \
    return Symv(h, uplo, n, alpha, A, lda, x, incx, beta, y, incy, CT, true);                                \
  }
PHOS_BOTH_WIDTHS(PHOS_FOR_TYPES, PHOS_SYMV)
PHOS_BOTH_WIDTHS(PHOS_FOR_COMPLEX, PHOS_HEMV)

#define PHOS_TRMV(P, T, R, CT, IDX, SUF)                                                                             \
  PHOS_EXPORT cublasStatus_t cublas##P##trmv##SUF(cublasHandle_t h, cublasFillMode_t uplo, cublasOperation_t trans,  \
                                                  cublasDiagType_t diag, IDX n, const T* A, IDX lda, T* x,           \
                                                  IDX incx) {                                                        \
    return Triangular(h, phos::wire::op::kBlasTrmv, uplo, trans, diag, n, A, lda, x, incx, CT);                     \
  }                                                                                                                  \
  PHOS_EXPORT cublasStatus_t cublas##P##trsv##SUF(cublasHandle_t h, cublasFillMode_t uplo, cublasOperation_t trans,  \
                                                  cublasDiagType_t diag, IDX n, const T* A, IDX lda, T* x,           \
                                                  IDX incx) {                                                        \
    return Triangular(h, phos::wire::op::kBlasTrsv, uplo, trans, diag, n, A, lda, x, incx, CT);                     \
  }
PHOS_BOTH_WIDTHS(PHOS_FOR_TYPES, PHOS_TRMV)

#define PHOS_SYR(P, T, R, CT, IDX, SUF)                                                                             \
  PHOS_EXPORT cublasStatus_t cublas##P##syr##SUF(cublasHandle_t h, cublasFillMode_t uplo, IDX n, const T* alpha,    \
                                                 const T* x, IDX incx, T* A, IDX lda) {                             \
    return Syr(h, uplo, n, alpha, x, incx, nullptr, 0, A, lda, CT, false, false);                                  \
  }                                                                                                                 \
  PHOS_EXPORT cublasStatus_t cublas##P##syr2##SUF(cublasHandle_t h, cublasFillMode_t uplo, IDX n, const T* alpha,   \
                                                  const T* x, IDX incx, const T* y, IDX incy, T* A, IDX lda) {      \
    return Syr(h, uplo, n, alpha, x, incx, y, incy, A, lda, CT, false, true);                                      \
  }
#define PHOS_HER(P, T, R, CT, IDX, SUF)                                                                             \
  PHOS_EXPORT cublasStatus_t cublas##P##her##SUF(cublasHandle_t h, cublasFillMode_t uplo, IDX n, const R* alpha,    \
                                                 const T* x, IDX incx, T* A, IDX lda) {                             \
    return Syr(h, uplo, n, alpha, x, incx, nullptr, 0, A, lda, CT, true, false);                                   \
  }                                                                                                                 \
  PHOS_EXPORT cublasStatus_t cublas##P##her2##SUF(cublasHandle_t h, cublasFillMode_t uplo, IDX n, const T* alpha,   \
                                                  const T* x, IDX incx, const T* y, IDX incy, T* A, IDX lda) {      \
    return Syr(h, uplo, n, alpha, x, incx, y, incy, A, lda, CT, true, true);                                       \
  }
PHOS_BOTH_WIDTHS(PHOS_FOR_TYPES, PHOS_SYR)
PHOS_BOTH_WIDTHS(PHOS_FOR_COMPLEX, PHOS_HER)

// dgmm has no _v2: plain and _64.
#define PHOS_DGMM(P, T, R, CT, IDX, SUF)                                                                       \
  PHOS_EXPORT cublasStatus_t cublas##P##dgmm##SUF(cublasHandle_t h, cublasSideMode_t mode, IDX m, IDX n,       \
                                                  const T* A, IDX lda, const T* x, IDX incx, T* C, IDX ldc) {  \
    return Dgmm(h, mode, m, n, A, lda, x, incx, C, ldc, CT);                                                   \
  }
PHOS_FOR_TYPES(PHOS_DGMM, int, )
PHOS_FOR_TYPES(PHOS_DGMM, int64_t, _64)
