// The sim's symmetric, Hermitian and triangular cuBLAS routines (symm/hemm,
// syr2k/her2k, syrkx/herkx, trmm, symv/hemv, trmv, trsv, syr/her, syr2/her2) and dgmm:
// OpenBLAS's cblas where it has the routine; the complex symmetric (not
// Hermitian) level-2 routines cuBLAS has and cblas lacks (csymv, csyr,
// csyr2), syrkx/herkx and dgmm are element loops over the stored triangle.
#include <cblas.h>

#include <complex>
#include <cstring>
#include <vector>

#include "backend/sim/sim_blas.h"
#include "backend/sim/sim_blas_internal.h"

namespace phos::backend::sim {

using namespace blas_internal;  // NOLINT: the sim cuBLAS files' shared helpers

namespace {


/// Element (i, j) of the full symmetric (or, `hermitian`, Hermitian) n x n
/// matrix whose `upper` or lower triangle is stored at (base, ld).
template <typename T>
T Sym(std::uint64_t base, std::int64_t ld, bool upper, bool hermitian, std::int64_t i, std::int64_t j) {
  const bool stored = upper ? i <= j : i >= j;
  T v = stored ? *At<T>(base, j * ld + i) : *At<T>(base, i * ld + j);
  if constexpr (std::is_same_v<T, cf> || std::is_same_v<T, cd>) {
    if (hermitian && !stored) v = std::conj(v);
  }
  return v;
}

template <typename T>
T& Vec(std::uint64_t base, std::int64_t n, std::int64_t inc, std::int64_t i) {
  return *reinterpret_cast<T*>(VectorElement(base, n, inc, i, sizeof(T)));
}

/// y = alpha A x + beta y for a complex symmetric A (cuBLAS's csymv/zsymv).
template <typename T>
void SymvLoop(const BlasCall& c, T alpha, T beta) {
  std::vector<T> ax(static_cast<std::size_t>(c.n));
  for (std::int64_t i = 0; i < c.n; ++i) {
    T sum = 0;
    for (std::int64_t j = 0; j < c.n; ++j) sum += Sym<T>(c.a, c.lda, c.upper, false, i, j) * Vec<T>(c.b, c.n, c.ldb, j);
    ax[static_cast<std::size_t>(i)] = sum;
  }
  for (std::int64_t i = 0; i < c.n; ++i) {
    T& y = Vec<T>(c.c, c.n, c.ldc, i);
    y = alpha * ax[static_cast<std::size_t>(i)] + (beta == T(0) ? T(0) : beta * y);  // beta 0: y is not read
  }
}

/// A += alpha (x y^T + y x^T) (two_vectors) or alpha x x^T over the stored
/// triangle, complex symmetric (cuBLAS's csyr, csyr2).
template <typename T>
void SyrLoop(const BlasCall& c, T alpha, bool two_vectors) {
  for (std::int64_t j = 0; j < c.n; ++j)
    for (std::int64_t i = c.upper ? 0 : j; i < (c.upper ? j + 1 : c.n); ++i) {
      const T xi = Vec<T>(c.a, c.n, c.lda, i), xj = Vec<T>(c.a, c.n, c.lda, j);
      T add = xi * xj;
      if (two_vectors) add = xi * Vec<T>(c.b, c.n, c.ldb, j) + Vec<T>(c.b, c.n, c.ldb, i) * xj;
      *At<T>(c.c, j * c.ldc + i) += alpha * add;
    }
}

/// syrkx/herkx: C(i, j) = alpha sum_l op(A)(i, l) op(B)(j, l) (conjugated
/// for herkx) + beta C(i, j) over the stored triangle; herkx's diagonal
/// keeps no imaginary part (BLAS's herk rule).
template <typename T>
void SyrkxLoop(const BlasCall& c, T alpha, T beta) {
  const auto op = [&](std::uint64_t base, std::int64_t ld, std::int64_t i, std::int64_t l) {
    T v = c.op_a == 0 ? *At<T>(base, l * ld + i) : *At<T>(base, i * ld + l);
    if constexpr (std::is_same_v<T, cf> || std::is_same_v<T, cd>) {
      if (c.op_a == 2) v = std::conj(v);
    }
    return v;
  };
  for (std::int64_t j = 0; j < c.n; ++j)
    for (std::int64_t i = c.upper ? 0 : j; i < (c.upper ? j + 1 : c.n); ++i) {
      T sum = 0;
      for (std::int64_t l = 0; l < c.k; ++l) {
        T bj = op(c.b, c.ldb, j, l);
        if constexpr (std::is_same_v<T, cf> || std::is_same_v<T, cd>) {
          if (c.conjugate) bj = std::conj(bj);
        }
        sum += op(c.a, c.lda, i, l) * bj;
      }
      T& out = *At<T>(c.c, j * c.ldc + i);
      T v = alpha * sum + (beta == T(0) ? T(0) : beta * out);  // beta 0: C is not read
      if constexpr (std::is_same_v<T, cf> || std::is_same_v<T, cd>) {
        if (c.conjugate && i == j) v = T(v.real());
      }
      out = v;
    }
}

template <typename T>
void DgmmLoop(const BlasCall& c) {
  const std::int64_t len = c.side_right ? c.n : c.m;
  for (std::int64_t j = 0; j < c.n; ++j)
    for (std::int64_t i = 0; i < c.m; ++i)
      *At<T>(c.c, j * c.ldc + i) = *At<T>(c.a, j * c.lda + i) * Vec<T>(c.b, len, c.ldb, c.side_right ? j : i);
}

Status Symm(const BlasCall& c) {
  if (c.m == 0 || c.n == 0) return Status::Ok();
  const cd alpha = Alpha(c), beta = Beta(c);
  const int m = I(c.m), n = I(c.n), lda = I(c.lda), ldb = I(c.ldb), ldc = I(c.ldc);
  switch (c.type_a) {
    case kR32F:
      cblas_ssymm(CblasColMajor, Side(c), Uplo(c), m, n, static_cast<float>(alpha.real()), At<float>(c.a, 0), lda,
                  At<float>(c.b, 0), ldb, static_cast<float>(beta.real()), At<float>(c.c, 0), ldc);
      break;
    case kR64F:
      cblas_dsymm(CblasColMajor, Side(c), Uplo(c), m, n, alpha.real(), At<double>(c.a, 0), lda, At<double>(c.b, 0), ldb,
                  beta.real(), At<double>(c.c, 0), ldc);
      break;
    case kC32F: {
      const cf al(alpha), be(beta);
      (c.conjugate ? cblas_chemm : cblas_csymm)(CblasColMajor, Side(c), Uplo(c), m, n, &al, At<cf>(c.a, 0), lda,
                                                At<cf>(c.b, 0), ldb, &be, At<cf>(c.c, 0), ldc);
      break;
    }
    case kC64F:
      (c.conjugate ? cblas_zhemm : cblas_zsymm)(CblasColMajor, Side(c), Uplo(c), m, n, &alpha, At<cd>(c.a, 0), lda,
                                                At<cd>(c.b, 0), ldb, &beta, At<cd>(c.c, 0), ldc);
      break;
    default: return Unsupported(c);
  }
  return Status::Ok();
}

Status Syr2k(const BlasCall& c) {
  if (c.n == 0) return Status::Ok();
  const cd alpha = Alpha(c), beta = Beta(c);
  const CBLAS_TRANSPOSE t = c.op_a == 0 ? CblasNoTrans : c.conjugate ? CblasConjTrans : CblasTrans;
  const int n = I(c.n), k = I(c.k), lda = I(c.lda), ldb = I(c.ldb), ldc = I(c.ldc);
  switch (c.type_a) {
    case kR32F:
      cblas_ssyr2k(CblasColMajor, Uplo(c), t, n, k, static_cast<float>(alpha.real()), At<float>(c.a, 0), lda,
                   At<float>(c.b, 0), ldb, static_cast<float>(beta.real()), At<float>(c.c, 0), ldc);
      break;
    case kR64F:
      cblas_dsyr2k(CblasColMajor, Uplo(c), t, n, k, alpha.real(), At<double>(c.a, 0), lda, At<double>(c.b, 0), ldb,
                   beta.real(), At<double>(c.c, 0), ldc);
      break;
    case kC32F: {
      const cf al(alpha), be(beta);
      if (c.conjugate)
        cblas_cher2k(CblasColMajor, Uplo(c), t, n, k, &al, At<cf>(c.a, 0), lda, At<cf>(c.b, 0), ldb,
                     static_cast<float>(beta.real()), At<cf>(c.c, 0), ldc);
      else
        cblas_csyr2k(CblasColMajor, Uplo(c), t, n, k, &al, At<cf>(c.a, 0), lda, At<cf>(c.b, 0), ldb, &be,
                     At<cf>(c.c, 0), ldc);
      break;
    }
    case kC64F:
      if (c.conjugate)
        cblas_zher2k(CblasColMajor, Uplo(c), t, n, k, &alpha, At<cd>(c.a, 0), lda, At<cd>(c.b, 0), ldb, beta.real(),
                     At<cd>(c.c, 0), ldc);
      else
        cblas_zsyr2k(CblasColMajor, Uplo(c), t, n, k, &alpha, At<cd>(c.a, 0), lda, At<cd>(c.b, 0), ldb, &beta,
                     At<cd>(c.c, 0), ldc);
      break;
    default: return Unsupported(c);
  }
  return Status::Ok();
}

Status Syrkx(const BlasCall& c) {
  if (c.n == 0) return Status::Ok();
  const cd alpha = Alpha(c), beta = Beta(c);
  switch (c.type_a) {
    case kR32F: SyrkxLoop<float>(c, static_cast<float>(alpha.real()), static_cast<float>(beta.real())); break;
    case kR64F: SyrkxLoop<double>(c, alpha.real(), beta.real()); break;
    case kC32F: SyrkxLoop<cf>(c, cf(alpha), cf(beta)); break;
    case kC64F: SyrkxLoop<cd>(c, alpha, beta); break;
    default: return Unsupported(c);
  }
  return Status::Ok();
}

Status Trmm(const BlasCall& c) {
  if (c.m == 0 || c.n == 0) return Status::Ok();
  // cuBLAS's trmm is out of place (C = op(A) B); cblas's in place: B's
  // columns are copied into C first unless C is B.
  const std::size_t es = ElementBytes(c.type_a);
  if (c.b != c.c || c.ldb != c.ldc) {
    for (std::int64_t j = 0; j < c.n; ++j)
      std::memmove(reinterpret_cast<void*>(c.c + static_cast<std::uint64_t>(j * c.ldc) * es),
                   reinterpret_cast<const void*>(c.b + static_cast<std::uint64_t>(j * c.ldb) * es),
                   static_cast<std::size_t>(c.m) * es);
  }
  const cd alpha = Alpha(c);
  const int m = I(c.m), n = I(c.n), lda = I(c.lda), ldc = I(c.ldc);
  switch (c.type_a) {
    case kR32F:
      cblas_strmm(CblasColMajor, Side(c), Uplo(c), Trans(c.op_a), Diag(c), m, n, static_cast<float>(alpha.real()),
                  At<float>(c.a, 0), lda, At<float>(c.c, 0), ldc);
      break;
    case kR64F:
      cblas_dtrmm(CblasColMajor, Side(c), Uplo(c), Trans(c.op_a), Diag(c), m, n, alpha.real(), At<double>(c.a, 0), lda,
                  At<double>(c.c, 0), ldc);
      break;
    case kC32F: {
      const cf al(alpha);
      cblas_ctrmm(CblasColMajor, Side(c), Uplo(c), Trans(c.op_a), Diag(c), m, n, &al, At<cf>(c.a, 0), lda,
                  At<cf>(c.c, 0), ldc);
      break;
    }
    case kC64F:
      cblas_ztrmm(CblasColMajor, Side(c), Uplo(c), Trans(c.op_a), Diag(c), m, n, &alpha, At<cd>(c.a, 0), lda,
                  At<cd>(c.c, 0), ldc);
      break;
    default: return Unsupported(c);
  }
  return Status::Ok();
}

Status Symv(const BlasCall& c) {
  if (c.n == 0) return Status::Ok();
  const cd alpha = Alpha(c), beta = Beta(c);
  const int n = I(c.n), lda = I(c.lda), incx = I(c.ldb), incy = I(c.ldc);
  switch (c.type_a) {
    case kR32F:
      cblas_ssymv(CblasColMajor, Uplo(c), n, static_cast<float>(alpha.real()), At<float>(c.a, 0), lda,
                  At<float>(c.b, 0), incx, static_cast<float>(beta.real()), At<float>(c.c, 0), incy);
      break;
    case kR64F:
      cblas_dsymv(CblasColMajor, Uplo(c), n, alpha.real(), At<double>(c.a, 0), lda, At<double>(c.b, 0), incx,
                  beta.real(), At<double>(c.c, 0), incy);
      break;
    case kC32F: {
      const cf al(alpha), be(beta);
      if (c.conjugate)
        cblas_chemv(CblasColMajor, Uplo(c), n, &al, At<cf>(c.a, 0), lda, At<cf>(c.b, 0), incx, &be, At<cf>(c.c, 0),
                    incy);
      else
        SymvLoop<cf>(c, al, be);
      break;
    }
    case kC64F:
      if (c.conjugate)
        cblas_zhemv(CblasColMajor, Uplo(c), n, &alpha, At<cd>(c.a, 0), lda, At<cd>(c.b, 0), incx, &beta,
                    At<cd>(c.c, 0), incy);
      else
        SymvLoop<cd>(c, alpha, beta);
      break;
    default: return Unsupported(c);
  }
  return Status::Ok();
}

Status Triangular(const BlasCall& c) {
  if (c.n == 0) return Status::Ok();
  const bool solve = c.op == BlasOp::kTrsv;
  const int n = I(c.n), lda = I(c.lda), incx = I(c.ldc);
  const CBLAS_TRANSPOSE t = Trans(c.op_a);
  switch (c.type_a) {
    case kR32F:
      (solve ? cblas_strsv : cblas_strmv)(CblasColMajor, Uplo(c), t, Diag(c), n, At<float>(c.a, 0), lda,
                                          At<float>(c.c, 0), incx);
      break;
    case kR64F:
      (solve ? cblas_dtrsv : cblas_dtrmv)(CblasColMajor, Uplo(c), t, Diag(c), n, At<double>(c.a, 0), lda,
                                          At<double>(c.c, 0), incx);
      break;
    case kC32F:
      (solve ? cblas_ctrsv : cblas_ctrmv)(CblasColMajor, Uplo(c), t, Diag(c), n, At<cf>(c.a, 0), lda, At<cf>(c.c, 0),
                                          incx);
      break;
    case kC64F:
      (solve ? cblas_ztrsv : cblas_ztrmv)(CblasColMajor, Uplo(c), t, Diag(c), n, At<cd>(c.a, 0), lda, At<cd>(c.c, 0),
                                          incx);
      break;
    default: return Unsupported(c);
  }
  return Status::Ok();
}

Status Syr(const BlasCall& c) {
  if (c.n == 0) return Status::Ok();
  const bool two = c.op == BlasOp::kSyr2;
  const cd alpha = Alpha(c);
  const int n = I(c.n), incx = I(c.lda), incy = I(c.ldb), lda = I(c.ldc);
  switch (c.type_a) {
    case kR32F:
      if (two)
        cblas_ssyr2(CblasColMajor, Uplo(c), n, static_cast<float>(alpha.real()), At<float>(c.a, 0), incx,
                    At<float>(c.b, 0), incy, At<float>(c.c, 0), lda);
      else
        cblas_ssyr(CblasColMajor, Uplo(c), n, static_cast<float>(alpha.real()), At<float>(c.a, 0), incx,
                   At<float>(c.c, 0), lda);
      break;
    case kR64F:
      if (two)
        cblas_dsyr2(CblasColMajor, Uplo(c), n, alpha.real(), At<double>(c.a, 0), incx, At<double>(c.b, 0), incy,
                    At<double>(c.c, 0), lda);
      else
        cblas_dsyr(CblasColMajor, Uplo(c), n, alpha.real(), At<double>(c.a, 0), incx, At<double>(c.c, 0), lda);
      break;
    case kC32F: {
      const cf al(alpha);
      if (!c.conjugate) SyrLoop<cf>(c, al, two);
      else if (two)
        cblas_cher2(CblasColMajor, Uplo(c), n, &al, At<cf>(c.a, 0), incx, At<cf>(c.b, 0), incy, At<cf>(c.c, 0), lda);
      else
        cblas_cher(CblasColMajor, Uplo(c), n, static_cast<float>(alpha.real()), At<cf>(c.a, 0), incx, At<cf>(c.c, 0),
                   lda);
      break;
    }
    case kC64F:
      if (!c.conjugate) SyrLoop<cd>(c, alpha, two);
      else if (two)
        cblas_zher2(CblasColMajor, Uplo(c), n, &alpha, At<cd>(c.a, 0), incx, At<cd>(c.b, 0), incy, At<cd>(c.c, 0), lda);
      else
        cblas_zher(CblasColMajor, Uplo(c), n, alpha.real(), At<cd>(c.a, 0), incx, At<cd>(c.c, 0), lda);
      break;
    default: return Unsupported(c);
  }
  return Status::Ok();
}

Status Dgmm(const BlasCall& c) {
  switch (c.type_a) {
    case kR32F: DgmmLoop<float>(c); break;
    case kR64F: DgmmLoop<double>(c); break;
    case kC32F: DgmmLoop<cf>(c); break;
    case kC64F: DgmmLoop<cd>(c); break;
    default: return Unsupported(c);
  }
  return Status::Ok();
}

}  // namespace

bool SymmetricBlasTypesComputed(const BlasCall& c) {
  const std::int32_t t = c.type_a;
  if (!Std(t) || c.scalar_type != t) return false;
  // The Hermitian members are complex only; herk/her/her2k's real scalars
  // are flagged, never another scalar type.
  if (c.conjugate && !Complex(t)) return false;
  if ((c.real_alpha || c.real_beta) && !c.conjugate) return false;
  return true;
}

Status RunSymmetricBlas(const BlasCall& c) {
  switch (c.op) {
    case BlasOp::kSymm: return Symm(c);
    case BlasOp::kSyr2k: return Syr2k(c);
    case BlasOp::kSyrkx: return Syrkx(c);
    case BlasOp::kTrmm: return Trmm(c);
    case BlasOp::kSymv: return Symv(c);
    case BlasOp::kTrmv:
    case BlasOp::kTrsv: return Triangular(c);
    case BlasOp::kSyr:
    case BlasOp::kSyr2: return Syr(c);
    case BlasOp::kDgmm: return Dgmm(c);
    default: return Unsupported(c);
  }
}

}  // namespace phos::backend::sim
