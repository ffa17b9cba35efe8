// The sim's banded and packed level-2 cuBLAS routines: gbmv, sbmv/hbmv,
// tbmv, tbsv, spmv/hpmv, spr/hpr, spr2/hpr2, tpmv, tpsv — each OpenBLAS's
// cblas routine of the same name (cuBLAS has the symmetric members in S/D
// and the Hermitian ones in C/Z only, as cblas).
#include <cblas.h>

#include "backend/sim/sim_blas.h"
#include "backend/sim/sim_blas_internal.h"

namespace phos::backend::sim {

using namespace blas_internal;  // NOLINT: the sim cuBLAS files' shared helpers

namespace {

Status Gbmv(const BlasCall& c) {
  const cd alpha = Alpha(c), beta = Beta(c);
  const int m = I(c.m), n = I(c.n), kl = I(c.k), ku = I(c.stride_a), lda = I(c.lda), incx = I(c.ldb),
            incy = I(c.ldc);
  const CBLAS_TRANSPOSE t = Trans(c.op_a);
  switch (c.type_a) {
    case kR32F:
      cblas_sgbmv(CblasColMajor, t, m, n, kl, ku, static_cast<float>(alpha.real()), At<float>(c.a, 0), lda,
                  At<float>(c.b, 0), incx, static_cast<float>(beta.real()), At<float>(c.c, 0), incy);
      break;
    case kR64F:
      cblas_dgbmv(CblasColMajor, t, m, n, kl, ku, alpha.real(), At<double>(c.a, 0), lda, At<double>(c.b, 0), incx,
                  beta.real(), At<double>(c.c, 0), incy);
      break;
    case kC32F: {
      const cf al(alpha), be(beta);
      cblas_cgbmv(CblasColMajor, t, m, n, kl, ku, &al, At<cf>(c.a, 0), lda, At<cf>(c.b, 0), incx, &be, At<cf>(c.c, 0),
                  incy);
      break;
    }
    case kC64F:
      cblas_zgbmv(CblasColMajor, t, m, n, kl, ku, &alpha, At<cd>(c.a, 0), lda, At<cd>(c.b, 0), incx, &beta,
                  At<cd>(c.c, 0), incy);
      break;
    default: return Unsupported(c);
  }
  return Status::Ok();
}

/// sbmv/hbmv (banded) and spmv/hpmv (packed): y = alpha A x + beta y.
Status SymmetricMv(const BlasCall& c) {
  const bool band = c.op == BlasOp::kSbmv;
  const cd alpha = Alpha(c), beta = Beta(c);
  const int n = I(c.n), k = I(c.k), lda = I(c.lda), incx = I(c.ldb), incy = I(c.ldc);
  switch (c.type_a) {
    case kR32F: {
      const float al = static_cast<float>(alpha.real()), be = static_cast<float>(beta.real());
      if (band)
        cblas_ssbmv(CblasColMajor, Uplo(c), n, k, al, At<float>(c.a, 0), lda, At<float>(c.b, 0), incx, be,
                    At<float>(c.c, 0), incy);
      else
        cblas_sspmv(CblasColMajor, Uplo(c), n, al, At<float>(c.a, 0), At<float>(c.b, 0), incx, be, At<float>(c.c, 0),
                    incy);
      break;
    }
    case kR64F:
      if (band)
        cblas_dsbmv(CblasColMajor, Uplo(c), n, k, alpha.real(), At<double>(c.a, 0), lda, At<double>(c.b, 0), incx,
                    beta.real(), At<double>(c.c, 0), incy);
      else
        cblas_dspmv(CblasColMajor, Uplo(c), n, alpha.real(), At<double>(c.a, 0), At<double>(c.b, 0), incx, beta.real(),
                    At<double>(c.c, 0), incy);
      break;
    case kC32F: {
      const cf al(alpha), be(beta);
      if (band)
        cblas_chbmv(CblasColMajor, Uplo(c), n, k, &al, At<cf>(c.a, 0), lda, At<cf>(c.b, 0), incx, &be, At<cf>(c.c, 0),
                    incy);
      else
        cblas_chpmv(CblasColMajor, Uplo(c), n, &al, At<cf>(c.a, 0), At<cf>(c.b, 0), incx, &be, At<cf>(c.c, 0), incy);
      break;
    }
    case kC64F:
      if (band)
        cblas_zhbmv(CblasColMajor, Uplo(c), n, k, &alpha, At<cd>(c.a, 0), lda, At<cd>(c.b, 0), incx, &beta,
                    At<cd>(c.c, 0), incy);
      else
        cblas_zhpmv(CblasColMajor, Uplo(c), n, &alpha, At<cd>(c.a, 0), At<cd>(c.b, 0), incx, &beta, At<cd>(c.c, 0),
                    incy);
      break;
    default: return Unsupported(c);
  }
  return Status::Ok();
}

/// tbmv, tbsv (banded) and tpmv, tpsv (packed): x = op(A) x or inv(op(A)) x.
Status TriangularMv(const BlasCall& c) {
  const int n = I(c.n), k = I(c.k), lda = I(c.lda), incx = I(c.ldc);
  const CBLAS_TRANSPOSE t = Trans(c.op_a);
  const CBLAS_UPLO u = Uplo(c);
  const CBLAS_DIAG d = Diag(c);
  switch (c.op) {
    case BlasOp::kTbmv:
      switch (c.type_a) {
        case kR32F: cblas_stbmv(CblasColMajor, u, t, d, n, k, At<float>(c.a, 0), lda, At<float>(c.c, 0), incx); break;
        case kR64F: cblas_dtbmv(CblasColMajor, u, t, d, n, k, At<double>(c.a, 0), lda, At<double>(c.c, 0), incx); break;
        case kC32F: cblas_ctbmv(CblasColMajor, u, t, d, n, k, At<cf>(c.a, 0), lda, At<cf>(c.c, 0), incx); break;
        case kC64F: cblas_ztbmv(CblasColMajor, u, t, d, n, k, At<cd>(c.a, 0), lda, At<cd>(c.c, 0), incx); break;
        default: return Unsupported(c);
      }
      break;
    case BlasOp::kTbsv:
      switch (c.type_a) {
        case kR32F: cblas_stbsv(CblasColMajor, u, t, d, n, k, At<float>(c.a, 0), lda, At<float>(c.c, 0), incx); break;
        case kR64F: cblas_dtbsv(CblasColMajor, u, t, d, n, k, At<double>(c.a, 0), lda, At<double>(c.c, 0), incx); break;
        case kC32F: cblas_ctbsv(CblasColMajor, u, t, d, n, k, At<cf>(c.a, 0), lda, At<cf>(c.c, 0), incx); break;
        case kC64F: cblas_ztbsv(CblasColMajor, u, t, d, n, k, At<cd>(c.a, 0), lda, At<cd>(c.c, 0), incx); break;
        default: return Unsupported(c);
      }
      break;
    case BlasOp::kTpmv:
      switch (c.type_a) {
        case kR32F: cblas_stpmv(CblasColMajor, u, t, d, n, At<float>(c.a, 0), At<float>(c.c, 0), incx); break;
        case kR64F: cblas_dtpmv(CblasColMajor, u, t, d, n, At<double>(c.a, 0), At<double>(c.c, 0), incx); break;
        case kC32F: cblas_ctpmv(CblasColMajor, u, t, d, n, At<cf>(c.a, 0), At<cf>(c.c, 0), incx); break;
        case kC64F: cblas_ztpmv(CblasColMajor, u, t, d, n, At<cd>(c.a, 0), At<cd>(c.c, 0), incx); break;
        default: return Unsupported(c);
      }
      break;
    default:  // kTpsv
      switch (c.type_a) {
        case kR32F: cblas_stpsv(CblasColMajor, u, t, d, n, At<float>(c.a, 0), At<float>(c.c, 0), incx); break;
        case kR64F: cblas_dtpsv(CblasColMajor, u, t, d, n, At<double>(c.a, 0), At<double>(c.c, 0), incx); break;
        case kC32F: cblas_ctpsv(CblasColMajor, u, t, d, n, At<cf>(c.a, 0), At<cf>(c.c, 0), incx); break;
        case kC64F: cblas_ztpsv(CblasColMajor, u, t, d, n, At<cd>(c.a, 0), At<cd>(c.c, 0), incx); break;
        default: return Unsupported(c);
      }
  }
  return Status::Ok();
}

/// spr/hpr and spr2/hpr2 on the packed triangle in (c).
Status PackedRank(const BlasCall& c) {
  const bool two = c.op == BlasOp::kSpr2;
  const cd alpha = Alpha(c);
  const int n = I(c.n), incx = I(c.lda), incy = I(c.ldb);
  switch (c.type_a) {
    case kR32F:
      if (two)
        cblas_sspr2(CblasColMajor, Uplo(c), n, static_cast<float>(alpha.real()), At<float>(c.a, 0), incx,
                    At<float>(c.b, 0), incy, At<float>(c.c, 0));
      else
        cblas_sspr(CblasColMajor, Uplo(c), n, static_cast<float>(alpha.real()), At<float>(c.a, 0), incx,
                   At<float>(c.c, 0));
      break;
    case kR64F:
      if (two)
        cblas_dspr2(CblasColMajor, Uplo(c), n, alpha.real(), At<double>(c.a, 0), incx, At<double>(c.b, 0), incy,
                    At<double>(c.c, 0));
      else
        cblas_dspr(CblasColMajor, Uplo(c), n, alpha.real(), At<double>(c.a, 0), incx, At<double>(c.c, 0));
      break;
    case kC32F:
      if (two) {
        const cf al(alpha);
        cblas_chpr2(CblasColMajor, Uplo(c), n, &al, At<cf>(c.a, 0), incx, At<cf>(c.b, 0), incy, At<cf>(c.c, 0));
      } else {
        cblas_chpr(CblasColMajor, Uplo(c), n, static_cast<float>(alpha.real()), At<cf>(c.a, 0), incx, At<cf>(c.c, 0));
      }
      break;
    case kC64F:
      if (two)
        cblas_zhpr2(CblasColMajor, Uplo(c), n, &alpha, At<cd>(c.a, 0), incx, At<cd>(c.b, 0), incy, At<cd>(c.c, 0));
      else
        cblas_zhpr(CblasColMajor, Uplo(c), n, alpha.real(), At<cd>(c.a, 0), incx, At<cd>(c.c, 0));
      break;
    default: return Unsupported(c);
  }
  return Status::Ok();
}

}  // namespace

bool BandedBlasTypesComputed(const BlasCall& c) {
  const std::int32_t t = c.type_a;
  const bool complex = Complex(t);
  if (!Std(t) || c.scalar_type != t) return false;
  switch (c.op) {
    // The symmetric members are real, the Hermitian ones complex (cuBLAS's
    // and cblas's sets); hpr's alpha is real.
    case BlasOp::kSbmv:
    case BlasOp::kSpmv:
    case BlasOp::kSpr2: return complex == c.conjugate && !c.real_alpha;
    case BlasOp::kSpr: return complex == c.conjugate && c.real_alpha == complex;
    default: return !c.conjugate;
  }
}

Status RunBandedBlas(const BlasCall& c) {
  if (c.n == 0 || (c.op == BlasOp::kGbmv && c.m == 0)) return Status::Ok();
  switch (c.op) {
    case BlasOp::kGbmv: return Gbmv(c);
    case BlasOp::kSbmv:
    case BlasOp::kSpmv: return SymmetricMv(c);
    case BlasOp::kTbmv:
    case BlasOp::kTbsv:
    case BlasOp::kTpmv:
    case BlasOp::kTpsv: return TriangularMv(c);
    case BlasOp::kSpr:
    case BlasOp::kSpr2: return PackedRank(c);
    default: return Unsupported(c);
  }
}

}  // namespace phos::backend::sim
