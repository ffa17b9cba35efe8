// The cuBLAS routines the cuda backend picks by data type (cuda_cublas.h,
// RunTypedCublas; PHOS_CUBLAS_TYPED_ROUTINES lists their entry points):
// the call's own routine in the real cuBLAS, on the handle Context::Blas
// has bound to the session's stream and the call's pointer mode.
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

cublasStatus_t RunTypedCublas(const CublasLibrary& lib, cublasHandle_t h, const BlasCall& c, const char** what) {
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
    case BlasOp::kSyrkx:
      if (c.conjugate) {
        *what = "cublas?herkx";
        return ByType(t, nullptr, nullptr, lib.Cherkx, lib.Zherkx, [&](auto fn, auto tag) {
          using T = decltype(tag);
          using R = typename RealOf<T>::type;
          return fn(h, uplo, trans, n, k, static_cast<const T*>(alpha), A(tag), lda, B(tag), ldb,
                    static_cast<const R*>(beta), C(tag), ldc);
        });
      }
      *what = "cublas?syrkx";
      return ByType(t, lib.Ssyrkx, lib.Dsyrkx, lib.Csyrkx, lib.Zsyrkx, [&](auto fn, auto tag) {
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
    case BlasOp::kGbmv:
      *what = "cublas?gbmv_v2";
      return ByType(t, lib.Sgbmv_v2, lib.Dgbmv_v2, lib.Cgbmv_v2, lib.Zgbmv_v2, [&](auto fn, auto tag) {
        using T = decltype(tag);
        return fn(h, trans, m, n, k, static_cast<int>(c.stride_a), static_cast<const T*>(alpha), A(tag), lda, B(tag),
                  ldb, static_cast<const T*>(beta), C(tag), ldc);
      });
    case BlasOp::kSbmv:
      *what = c.conjugate ? "cublas?hbmv_v2" : "cublas?sbmv_v2";
      return ByType(t, lib.Ssbmv_v2, lib.Dsbmv_v2, lib.Chbmv_v2, lib.Zhbmv_v2, [&](auto fn, auto tag) {
        using T = decltype(tag);
        return fn(h, uplo, n, k, static_cast<const T*>(alpha), A(tag), lda, B(tag), ldb, static_cast<const T*>(beta),
                  C(tag), ldc);
      });
    case BlasOp::kSpmv:
      *what = c.conjugate ? "cublas?hpmv_v2" : "cublas?spmv_v2";
      return ByType(t, lib.Sspmv_v2, lib.Dspmv_v2, lib.Chpmv_v2, lib.Zhpmv_v2, [&](auto fn, auto tag) {
        using T = decltype(tag);
        return fn(h, uplo, n, static_cast<const T*>(alpha), A(tag), B(tag), ldb, static_cast<const T*>(beta), C(tag),
                  ldc);
      });
    case BlasOp::kTbmv:
    case BlasOp::kTbsv: {
      const bool solve = c.op == BlasOp::kTbsv;
      *what = solve ? "cublas?tbsv_v2" : "cublas?tbmv_v2";
      return ByType(t, solve ? lib.Stbsv_v2 : lib.Stbmv_v2, solve ? lib.Dtbsv_v2 : lib.Dtbmv_v2,
                    solve ? lib.Ctbsv_v2 : lib.Ctbmv_v2, solve ? lib.Ztbsv_v2 : lib.Ztbmv_v2,
                    [&](auto fn, auto tag) { return fn(h, uplo, trans, diag, n, k, A(tag), lda, C(tag), ldc); });
    }
    case BlasOp::kTpmv:
    case BlasOp::kTpsv: {
      const bool solve = c.op == BlasOp::kTpsv;
      *what = solve ? "cublas?tpsv_v2" : "cublas?tpmv_v2";
      return ByType(t, solve ? lib.Stpsv_v2 : lib.Stpmv_v2, solve ? lib.Dtpsv_v2 : lib.Dtpmv_v2,
                    solve ? lib.Ctpsv_v2 : lib.Ctpmv_v2, solve ? lib.Ztpsv_v2 : lib.Ztpmv_v2,
                    [&](auto fn, auto tag) { return fn(h, uplo, trans, diag, n, A(tag), C(tag), ldc); });
    }
    case BlasOp::kSpr:
      if (c.conjugate) {
        *what = "cublas?hpr_v2";
        return ByType(t, nullptr, nullptr, lib.Chpr_v2, lib.Zhpr_v2, [&](auto fn, auto tag) {
          using R = typename RealOf<decltype(tag)>::type;
          return fn(h, uplo, n, static_cast<const R*>(alpha), A(tag), lda, C(tag));
        });
      }
      *what = "cublas?spr_v2";
      return ByType(t, lib.Sspr_v2, lib.Dspr_v2, nullptr, nullptr, [&](auto fn, auto tag) {
        using T = decltype(tag);
        return fn(h, uplo, n, static_cast<const T*>(alpha), A(tag), lda, C(tag));
      });
    case BlasOp::kSpr2:
      *what = c.conjugate ? "cublas?hpr2_v2" : "cublas?spr2_v2";
      return ByType(t, lib.Sspr2_v2, lib.Dspr2_v2, lib.Chpr2_v2, lib.Zhpr2_v2, [&](auto fn, auto tag) {
        using T = decltype(tag);
        return fn(h, uplo, n, static_cast<const T*>(alpha), A(tag), lda, B(tag), ldb, C(tag));
      });
    case BlasOp::kGetrfBatched:
      *what = "cublas?getrfBatched";
      return ByType(t, lib.SgetrfBatched, lib.DgetrfBatched, lib.CgetrfBatched, lib.ZgetrfBatched,
                    [&](auto fn, auto tag) {
                      return fn(h, n, reinterpret_cast<decltype(tag)* const*>(c.a), lda, reinterpret_cast<int*>(c.b),
                                reinterpret_cast<int*>(c.result), static_cast<int>(c.batch));
                    });
    case BlasOp::kGetrsBatched: {
      *what = "cublas?getrsBatched";
      int info = 0;  // parameter errors only (libphos.so checked them)
      const cublasStatus_t st = ByType(
          t, lib.SgetrsBatched, lib.DgetrsBatched, lib.CgetrsBatched, lib.ZgetrsBatched, [&](auto fn, auto tag) {
            using T = decltype(tag);
            return fn(h, trans, n, k, reinterpret_cast<const T* const*>(c.a), lda, reinterpret_cast<const int*>(c.b),
                      reinterpret_cast<T* const*>(c.c), ldc, &info, static_cast<int>(c.batch));
          });
      return st == CUBLAS_STATUS_SUCCESS && info != 0 ? CUBLAS_STATUS_INVALID_VALUE : st;
    }
    case BlasOp::kGetriBatched:
      *what = "cublas?getriBatched";
      return ByType(t, lib.SgetriBatched, lib.DgetriBatched, lib.CgetriBatched, lib.ZgetriBatched,
                    [&](auto fn, auto tag) {
                      using T = decltype(tag);
                      return fn(h, n, reinterpret_cast<const T* const*>(c.a), lda, reinterpret_cast<const int*>(c.b),
                                reinterpret_cast<T* const*>(c.c), ldc, reinterpret_cast<int*>(c.result),
                                static_cast<int>(c.batch));
                    });
    case BlasOp::kGemvBatched:
      // The arrays hold device pointers of the app, which are phosd's too.
      *what = "cublas?gemvBatched";
      return ByType(t, lib.SgemvBatched, lib.DgemvBatched, lib.CgemvBatched, lib.ZgemvBatched, [&](auto fn, auto tag) {
        using T = decltype(tag);
        return fn(h, trans, m, n, static_cast<const T*>(alpha), reinterpret_cast<const T* const*>(c.a), lda,
                  reinterpret_cast<const T* const*>(c.b), ldb, static_cast<const T*>(beta),
                  reinterpret_cast<T* const*>(c.c), ldc, static_cast<int>(c.batch));
      });
    case BlasOp::kTrsmBatched:
      *what = "cublas?trsmBatched";
      return ByType(t, lib.StrsmBatched, lib.DtrsmBatched, lib.CtrsmBatched, lib.ZtrsmBatched, [&](auto fn, auto tag) {
        using T = decltype(tag);
        return fn(h, side, uplo, trans, diag, m, n, static_cast<const T*>(alpha), reinterpret_cast<const T* const*>(c.a),
                  lda, reinterpret_cast<T* const*>(c.c), ldc, static_cast<int>(c.batch));
      });
    case BlasOp::kRot: {
      const auto X = [&](auto tag) { return reinterpret_cast<decltype(tag)*>(c.a); };
      const auto Y = [&](auto tag) { return reinterpret_cast<decltype(tag)*>(c.b); };
      if (c.real_beta || t == CUDA_R_32F || t == CUDA_R_64F) {  // s real: srot, drot, csrot, zdrot
        *what = "cublas?rot_v2";
        return ByType(t, lib.Srot_v2, lib.Drot_v2, lib.Csrot_v2, lib.Zdrot_v2, [&](auto fn, auto tag) {
          using R = typename RealOf<decltype(tag)>::type;
          return fn(h, n, X(tag), lda, Y(tag), ldb, static_cast<const R*>(alpha), static_cast<const R*>(beta));
        });
      }
      *what = "cublas?rot_v2";
      return ByType(t, nullptr, nullptr, lib.Crot_v2, lib.Zrot_v2, [&](auto fn, auto tag) {
        using T = decltype(tag);
        using R = typename RealOf<T>::type;
        return fn(h, n, X(tag), lda, Y(tag), ldb, static_cast<const R*>(alpha), static_cast<const T*>(beta));
      });
    }
    case BlasOp::kIamax:
    case BlasOp::kIamin: {  // the _64 forms (Context::Blas runs the others)
      const bool max = c.op == BlasOp::kIamax;
      *what = max ? "cublasI?amax_v2_64" : "cublasI?amin_v2_64";
      auto* result = reinterpret_cast<int64_t*>(
          c.device_scalars ? reinterpret_cast<void*>(c.result)
                           : (c.host_result ? static_cast<void*>(c.host_result->data()) : nullptr));
      return ByType(t, max ? lib.Isamax_v2_64 : lib.Isamin_v2_64, max ? lib.Idamax_v2_64 : lib.Idamin_v2_64,
                    max ? lib.Icamax_v2_64 : lib.Icamin_v2_64, max ? lib.Izamax_v2_64 : lib.Izamin_v2_64,
                    [&](auto fn, auto tag) { return fn(h, c.n, A(tag), c.lda, result); });
    }
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

}  // namespace phos::backend::cuda
