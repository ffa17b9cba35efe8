// The symmetric, Hermitian and triangular cuBLAS routines and dgmm on the
// cuda backend (cuda_cublas.h, RunSymmetricCublas): the call's own routine
// in the real cuBLAS, picked by data type, on the handle Context::Blas has
// bound to the session's stream and the call's pointer mode.
//
// Unverified on a GPU so far (no GPU was lent when this was written): the
// sim computes the same calls.
#include <type_traits>

#include "backend/cuda/cuda_cublas.h"

namespace phos::backend::cuda {
namespace {

template <typename T>
struct RealOf { using type = T; };
template <>
struct RealOf<cuComplex> { using type = float; };
template <>
struct RealOf<cuDoubleComplex> { using type = double; };

/// Calls `call(fn, T{})` with the entry point of `type` (float, double,
/// cuComplex, cuDoubleComplex); NOT_SUPPORTED when this cuBLAS lacks it or
/// the family has no member of that type (nullptr).
template <typename FS, typename FD, typename FC, typename FZ, typename Call>
cublasStatus_t ByType(int type, FS s, FD d, FC c, FZ z, Call&& call) {
  switch (type) {
    case CUDA_R_32F:
      if constexpr (!std::is_null_pointer_v<FS>) if (s) return call(s, float{});
      break;
    case CUDA_R_64F:
      if constexpr (!std::is_null_pointer_v<FD>) if (d) return call(d, double{});
      break;
    case CUDA_C_32F:
      if constexpr (!std::is_null_pointer_v<FC>) if (c) return call(c, cuComplex{});
      break;
    case CUDA_C_64F:
      if constexpr (!std::is_null_pointer_v<FZ>) if (z) return call(z, cuDoubleComplex{});
      break;
    default: break;
  }
  return CUBLAS_STATUS_NOT_SUPPORTED;
}

}  // namespace

cublasStatus_t RunSymmetricCublas(const CublasLibrary& lib, cublasHandle_t h, const BlasCall& c, const char** what) {
  const void* alpha = c.device_scalars ? reinterpret_cast<const void*>(c.alpha_ptr) : c.alpha;
  const void* beta = c.device_scalars ? reinterpret_cast<const void*>(c.beta_ptr) : c.beta;
  const int m = static_cast<int>(c.m), n = static_cast<int>(c.n), k = static_cast<int>(c.k);
  const int lda = static_cast<int>(c.lda), ldb = static_cast<int>(c.ldb), ldc = static_cast<int>(c.ldc);
  const auto side = c.side_right ? CUBLAS_SIDE_RIGHT : CUBLAS_SIDE_LEFT;
  const auto uplo = c.upper ? CUBLAS_FILL_MODE_UPPER : CUBLAS_FILL_MODE_LOWER;
  const auto diag = c.unit_diag ? CUBLAS_DIAG_UNIT : CUBLAS_DIAG_NON_UNIT;
  const auto trans = static_cast<cublasOperation_t>(c.op_a);
  const int t = c.type_a;
  const auto A = [&](auto tag) { return reinterpret_cast<const decltype(tag)*>(c.a); };
  const auto B = [&](auto tag) { return reinterpret_cast<const decltype(tag)*>(c.b); };
  const auto C = [&](auto tag) { return reinterpret_cast<decltype(tag)*>(c.c); };
  switch (c.op) {
    case BlasOp::kSymm:
      *what = c.conjugate ? "cublas?hemm_v2" : "cublas?symm_v2";
      return ByType(t, lib.Ssymm_v2, lib.Dsymm_v2, c.conjugate ? lib.Chemm_v2 : lib.Csymm_v2,
                    c.conjugate ? lib.Zhemm_v2 : lib.Zsymm_v2, [&](auto fn, auto tag) {
                      using T = decltype(tag);
                      return fn(h, side, uplo, m, n, static_cast<const T*>(alpha), A(tag), lda, B(tag), ldb,
                                static_cast<const T*>(beta), C(tag), ldc);
                    });
    case BlasOp::kSyr2k:
      if (c.conjugate) {
        *what = "cublas?her2k_v2";
        return ByType(t, nullptr, nullptr, lib.Cher2k_v2, lib.Zher2k_v2, [&](auto fn, auto tag) {
          using T = decltype(tag);
          using R = typename RealOf<T>::type;
          return fn(h, uplo, trans, n, k, static_cast<const T*>(alpha), A(tag), lda, B(tag), ldb,
                    static_cast<const R*>(beta), C(tag), ldc);
        });
      }
      *what = "cublas?syr2k_v2";
      return ByType(t, lib.Ssyr2k_v2, lib.Dsyr2k_v2, lib.Csyr2k_v2, lib.Zsyr2k_v2, [&](auto fn, auto tag) {
        using T = decltype(tag);
        return fn(h, uplo, trans, n, k, static_cast<const T*>(alpha), A(tag), lda, B(tag), ldb,
                  static_cast<const T*>(beta), C(tag), ldc);
      });
    case BlasOp::kSyrk:  // herk: Context::Blas runs syrk itself
      *what = "cublas?herk_v2";
      return ByType(t, nullptr, nullptr, lib.Cherk_v2, lib.Zherk_v2, [&](auto fn, auto tag) {
        using R = typename RealOf<decltype(tag)>::type;
        return fn(h, uplo, trans, n, k, static_cast<const R*>(alpha), A(tag), lda, static_cast<const R*>(beta), C(tag),
                  ldc);
      });
    case BlasOp::kTrmm:
      *what = "cublas?trmm_v2";
      return ByType(t, lib.Strmm_v2, lib.Dtrmm_v2, lib.Ctrmm_v2, lib.Ztrmm_v2, [&](auto fn, auto tag) {
        using T = decltype(tag);
        return fn(h, side, uplo, trans, diag, m, n, static_cast<const T*>(alpha), A(tag), lda, B(tag), ldb, C(tag), ldc);
      });
    case BlasOp::kSymv:
      *what = c.conjugate ? "cublas?hemv_v2" : "cublas?symv_v2";
      return ByType(t, lib.Ssymv_v2, lib.Dsymv_v2, c.conjugate ? lib.Chemv_v2 : lib.Csymv_v2,
                    c.conjugate ? lib.Zhemv_v2 : lib.Zsymv_v2, [&](auto fn, auto tag) {
                      using T = decltype(tag);
                      return fn(h, uplo, n, static_cast<const T*>(alpha), A(tag), lda, B(tag), ldb,
                                static_cast<const T*>(beta), C(tag), ldc);
                    });
    case BlasOp::kTrmv:
    case BlasOp::kTrsv: {
      const bool solve = c.op == BlasOp::kTrsv;
      *what = solve ? "cublas?trsv_v2" : "cublas?trmv_v2";
      return ByType(t, solve ? lib.Strsv_v2 : lib.Strmv_v2, solve ? lib.Dtrsv_v2 : lib.Dtrmv_v2,
                    solve ? lib.Ctrsv_v2 : lib.Ctrmv_v2, solve ? lib.Ztrsv_v2 : lib.Ztrmv_v2,
                    [&](auto fn, auto tag) { return fn(h, uplo, trans, diag, n, A(tag), lda, C(tag), ldc); });
    }
    case BlasOp::kSyr:
      if (c.conjugate) {
        *what = "cublas?her_v2";
        return ByType(t, nullptr, nullptr, lib.Cher_v2, lib.Zher_v2, [&](auto fn, auto tag) {
          using R = typename RealOf<decltype(tag)>::type;
          return fn(h, uplo, n, static_cast<const R*>(alpha), A(tag), lda, C(tag), ldc);
        });
      }
      *what = "cublas?syr_v2";
      return ByType(t, lib.Ssyr_v2, lib.Dsyr_v2, lib.Csyr_v2, lib.Zsyr_v2, [&](auto fn, auto tag) {
        using T = decltype(tag);
        return fn(h, uplo, n, static_cast<const T*>(alpha), A(tag), lda, C(tag), ldc);
      });
    case BlasOp::kSyr2:
      *what = c.conjugate ? "cublas?her2_v2" : "cublas?syr2_v2";
      return ByType(t, lib.Ssyr2_v2, lib.Dsyr2_v2, c.conjugate ? lib.Cher2_v2 : lib.Csyr2_v2,
                    c.conjugate ? lib.Zher2_v2 : lib.Zsyr2_v2, [&](auto fn, auto tag) {
                      using T = decltype(tag);
                      return fn(h, uplo, n, static_cast<const T*>(alpha), A(tag), lda, B(tag), ldb, C(tag), ldc);
                    });
    case BlasOp::kDgmm:
      *what = "cublas?dgmm";
      return ByType(t, lib.Sdgmm, lib.Ddgmm, lib.Cdgmm, lib.Zdgmm, [&](auto fn, auto tag) {
        return fn(h, side, m, n, A(tag), lda, B(tag), ldb, C(tag), ldc);
      });
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

}  // namespace phos::backend::cuda
