// cuBLAS's batched LU routines in libphos.so (cublas_internal.h; calls.def's
// BlasGetrfBatched, BlasGetrsBatched, BlasGetriBatched): getrf, getrs and
// getri over arrays of device pointers, in S/D/C/Z — what CuPy's
// cupy.cublas.batched_gesv and PyTorch's batched small-matrix solve and
// inverse call. getrs reports parameter errors through its host `info`,
// as cuBLAS does; getrf and getri write one info per matrix in device
// memory, in stream order.
#include <cublas_api.h>

#include <cstdint>

#include "interposer/client/client_internal.h"
#include "interposer/client/cublas_internal.h"
#include "protocol/blas_spec.h"
#include "protocol/calls.h"

namespace phos::client {
namespace {

using wire::BlasRequest;

cublasStatus_t Lu(cublasHandle_t handle, wire::ApiId api, cublasOperation_t trans, int64_t n, int64_t nrhs,
                  const void* a_array, int64_t lda, const void* pivots, void* c_array, int64_t ldc, int* info,
                  int64_t batch, int32_t type) {
  BlasHandle* h = FindBlasHandle(handle);
  if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  BlasRequest r = BlasBase(*h);
  r.flags &= ~wire::kBlasDeviceScalars;  // (no scalars)
  r.type_a = r.type_b = r.type_c = r.compute = r.scalar_type = type;
  r.op_a = static_cast<uint32_t>(trans);
  r.n = n;
  r.k = nrhs;
  r.batch = batch;
  r.a = reinterpret_cast<uint64_t>(a_array);
  r.lda = lda;
  r.b = reinterpret_cast<uint64_t>(pivots);
  r.c = reinterpret_cast<uint64_t>(c_array);
  r.ldc = ldc;
  r.result = reinterpret_cast<uint64_t>(info);
  return SendBlas(*h, api, r);
}

}  // namespace
}  // namespace phos::client

using namespace phos::client;  // NOLINT
namespace op = phos::wire::op;

#define PHOS_LU(P, T, CT)                                                                                          \
  PHOS_EXPORT cublasStatus_t cublas##P##getrfBatched(cublasHandle_t h, int n, T* const A[], int lda, int* P_,      \
                                                     int* info, int batch) {                                      \
    return Lu(h, op::kBlasGetrfBatched, CUBLAS_OP_N, n, 0, A, lda, P_, nullptr, 1, info, batch, CT);              \
  }                                                                                                                \
  PHOS_EXPORT cublasStatus_t cublas##P##getriBatched(cublasHandle_t h, int n, const T* const A[], int lda,         \
                                                     const int* P_, T* const C[], int ldc, int* info, int batch) { \
    return Lu(h, op::kBlasGetriBatched, CUBLAS_OP_N, n, 0, A, lda, P_, const_cast<T**>(C), ldc, info, batch, CT);  \
  }                                                                                                                \
  PHOS_EXPORT cublasStatus_t cublas##P##getrsBatched(cublasHandle_t h, cublasOperation_t trans, int n, int nrhs,   \
                                                     const T* const A[], int lda, const int* ipiv, T* const B[],  \
                                                     int ldb, int* info, int batch) {                              \
    /* info (host): 0, or minus the position of the first bad parameter (the handle not counted) */              \
    if (info == nullptr) return CUBLAS_STATUS_INVALID_VALUE;                                                       \
    const int need = n > 1 ? n : 1;                                                                                \
    *info = trans != CUBLAS_OP_N && trans != CUBLAS_OP_T && trans != CUBLAS_OP_C ? -1                            \
            : n < 0                                                                                                \
                ? -2                                                                                               \
            : nrhs < 0    ? -3                                                                                     \
            : lda < need  ? -5                                                                                     \
            : ipiv == nullptr && n > 0 ? -6                                                                        \
            : ldb < need  ? -8                                                                                     \
            : batch < 0   ? -10                                                                                    \
                          : 0;                                                                                     \
    if (*info != 0) return CUBLAS_STATUS_INVALID_VALUE;                                                            \
    return Lu(h, op::kBlasGetrsBatched, trans, n, nrhs, A, lda, ipiv, const_cast<T**>(B), ldb, nullptr, batch, CT); \
  }
PHOS_LU(S, float, CUDA_R_32F)
PHOS_LU(D, double, CUDA_R_64F)
PHOS_LU(C, cuComplex, CUDA_C_32F)
PHOS_LU(Z, cuDoubleComplex, CUDA_C_64F)
