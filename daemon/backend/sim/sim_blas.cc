#include "backend/sim/sim_blas.h"

#include "backend/sim/sim_blas_internal.h"

#include <cblas.h>

#include <cmath>
#include <complex>
#include <cstring>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "interp/numeric.h"
#include "protocol/blas_spec.h"

namespace phos::backend::sim {

using namespace blas_internal;  // NOLINT: the sim cuBLAS files' shared helpers

namespace {

/// Elements from a column-major matrix's first to its last element.
std::size_t MatrixElements(std::int64_t rows, std::int64_t cols, std::int64_t ld) {
  if (rows == 0 || cols == 0) return 0;
  return static_cast<std::size_t>((cols - 1) * ld + rows);
}

/// int8 A and B (CUDA_R_8I): products summed exactly; an int32 C
/// (compute 32I, int32 scalars) in int32's wrapping arithmetic, as the
/// GPU's integer units compute it; a float C (compute 32F) in float.
void GemmInt8(const BlasCall& c, std::int64_t oa, std::int64_t ob, std::int64_t oc) {
  const bool int_c = c.type_c == kR32I;
  const auto wrap = [](std::int64_t v) { return static_cast<std::int32_t>(static_cast<std::uint32_t>(v)); };
  std::int32_t ialpha = 0, ibeta = 0;
  if (int_c) {
    std::memcpy(&ialpha, c.device_scalars ? reinterpret_cast<const void*>(c.alpha_ptr) : c.alpha, 4);
    std::memcpy(&ibeta, c.device_scalars ? reinterpret_cast<const void*>(c.beta_ptr) : c.beta, 4);
  }
  const float falpha = static_cast<float>(Alpha(c).real()), fbeta = static_cast<float>(Beta(c).real());
  for (std::int64_t j = 0; j < c.n; ++j)
    for (std::int64_t i = 0; i < c.m; ++i) {
      std::int64_t sum = 0;
      for (std::int64_t l = 0; l < c.k; ++l) {
        const std::int64_t ai = c.op_a == 0 ? oa + l * c.lda + i : oa + i * c.lda + l;
        const std::int64_t bi = c.op_b == 0 ? ob + j * c.ldb + l : ob + l * c.ldb + j;
        sum += static_cast<std::int64_t>(*At<std::int8_t>(c.a, ai)) * *At<std::int8_t>(c.b, bi);
      }
      const std::int64_t ci = oc + j * c.ldc + i;
      if (int_c) {
        std::int32_t* out = At<std::int32_t>(c.c, ci);
        const std::int64_t scaled = static_cast<std::int64_t>(ialpha) * wrap(sum);
        *out = wrap(scaled + (ibeta == 0 ? 0 : static_cast<std::int64_t>(ibeta) * *out));
      } else {
        float* out = At<float>(c.c, ci);
        *out = falpha * static_cast<float>(sum) + (fbeta == 0.0f ? 0.0f : fbeta * *out);
      }
    }
}

Status Gemm(const BlasCall& c) {
  if (c.m == 0 || c.n == 0 || c.batch == 0) return Status::Ok();
  const bool ta = c.op_a != 0, tb = c.op_b != 0;
  const std::int64_t arows = ta ? c.k : c.m, acols = ta ? c.m : c.k;
  const std::int64_t brows = tb ? c.n : c.k, bcols = tb ? c.k : c.n;
  const int m = static_cast<int>(c.m), n = static_cast<int>(c.n), k = static_cast<int>(c.k);
  const int lda = static_cast<int>(c.lda), ldb = static_cast<int>(c.ldb), ldc = static_cast<int>(c.ldc);
  const cd alpha = Alpha(c), beta = Beta(c);
  const std::int32_t t = c.type_a;
  const bool same = c.type_a == c.type_b && c.type_b == c.type_c;
  for (std::int64_t i = 0; i < c.batch; ++i) {
    const std::int64_t oa = i * c.stride_a, ob = i * c.stride_b, oc = i * c.stride_c;
    if (t == kR8I && c.type_b == kR8I && (c.type_c == kR32I || c.type_c == kR32F)) {
      GemmInt8(c, oa, ob, oc);
    } else if (same && t == kR32F) {
      cblas_sgemm(CblasColMajor, Trans(c.op_a), Trans(c.op_b), m, n, k, static_cast<float>(alpha.real()),
                  At<float>(c.a, oa), lda, At<float>(c.b, ob), ldb, static_cast<float>(beta.real()),
                  At<float>(c.c, oc), ldc);
    } else if (same && t == kR64F) {
      cblas_dgemm(CblasColMajor, Trans(c.op_a), Trans(c.op_b), m, n, k, alpha.real(), At<double>(c.a, oa), lda,
                  At<double>(c.b, ob), ldb, beta.real(), At<double>(c.c, oc), ldc);
    } else if (same && t == kC32F) {
      const cf al(alpha), be(beta);
      cblas_cgemm(CblasColMajor, Trans(c.op_a), Trans(c.op_b), m, n, k, &al, At<cf>(c.a, oa), lda,
                  At<cf>(c.b, ob), ldb, &be, At<cf>(c.c, oc), ldc);
    } else if (same && t == kC64F) {
      cblas_zgemm(CblasColMajor, Trans(c.op_a), Trans(c.op_b), m, n, k, &alpha, At<cd>(c.a, oa), lda,
                  At<cd>(c.b, ob), ldb, &beta, At<cd>(c.c, oc), ldc);
    } else if ((t == kR16F || t == kR16BF) && c.type_b == t && (c.type_c == t || c.type_c == kR32F)) {
      // Widen A and B (over their whole extents, gaps included: sgemm
      // reads them with the same leading dimensions), multiply in float.
      const std::size_t na = MatrixElements(arows, acols, c.lda), nb = MatrixElements(brows, bcols, c.ldb);
      std::vector<float> fa(na), fb(nb);
      const auto* pa = At<unsigned char>(c.a, oa * 2);
      const auto* pb = At<unsigned char>(c.b, ob * 2);
      for (std::size_t e = 0; e < na; ++e) fa[e] = Widen(pa + 2 * e, t);
      for (std::size_t e = 0; e < nb; ++e) fb[e] = Widen(pb + 2 * e, t);
      if (c.type_c == kR32F) {
        cblas_sgemm(CblasColMajor, Trans(c.op_a), Trans(c.op_b), m, n, k, static_cast<float>(alpha.real()),
                    fa.data(), lda, fb.data(), ldb, static_cast<float>(beta.real()), At<float>(c.c, oc), ldc);
        continue;
      }
      const std::size_t nc = MatrixElements(c.m, c.n, c.ldc);
      std::vector<float> fc(nc, 0.0f);
      auto* pc = At<unsigned char>(c.c, oc * 2);
      const bool read_c = beta != 0.0;  // cuBLAS does not read C when beta is 0
      for (std::int64_t col = 0; read_c && col < c.n; ++col)
        for (std::int64_t row = 0; row < c.m; ++row) {
          const std::size_t e = static_cast<std::size_t>(col * c.ldc + row);
          fc[e] = Widen(pc + 2 * e, t);
        }
      cblas_sgemm(CblasColMajor, Trans(c.op_a), Trans(c.op_b), m, n, k, static_cast<float>(alpha.real()),
                  fa.data(), lda, fb.data(), ldb, static_cast<float>(beta.real()), fc.data(), ldc);
      for (std::int64_t col = 0; col < c.n; ++col)
        for (std::int64_t row = 0; row < c.m; ++row) {
          const std::size_t e = static_cast<std::size_t>(col * c.ldc + row);
          Narrow(fc[e], pc + 2 * e, t);
        }
    } else {
      return Unsupported(c);
    }
  }
  return Status::Ok();
}

Status Gemv(const BlasCall& c) {
  if (c.batch == 0 || c.m == 0 || c.n == 0) return Status::Ok();
  const std::int32_t t = c.type_a;
  if (c.type_b != t || c.type_c != t) return Unsupported(c);
  const int m = static_cast<int>(c.m), n = static_cast<int>(c.n), lda = static_cast<int>(c.lda);
  const int incx = static_cast<int>(c.ldb), incy = static_cast<int>(c.ldc);
  const cd alpha = Alpha(c), beta = Beta(c);
  for (std::int64_t i = 0; i < c.batch; ++i) {
    const std::int64_t oa = i * c.stride_a, ox = i * c.stride_b, oy = i * c.stride_c;
    switch (t) {
      case kR32F:
        cblas_sgemv(CblasColMajor, Trans(c.op_a), m, n, static_cast<float>(alpha.real()), At<float>(c.a, oa), lda,
                    At<float>(c.b, ox), incx, static_cast<float>(beta.real()), At<float>(c.c, oy), incy);
        break;
      case kR64F:
        cblas_dgemv(CblasColMajor, Trans(c.op_a), m, n, alpha.real(), At<double>(c.a, oa), lda, At<double>(c.b, ox),
                    incx, beta.real(), At<double>(c.c, oy), incy);
        break;
      case kC32F: {
        const cf al(alpha), be(beta);
        cblas_cgemv(CblasColMajor, Trans(c.op_a), m, n, &al, At<cf>(c.a, oa), lda, At<cf>(c.b, ox), incx, &be,
                    At<cf>(c.c, oy), incy);
        break;
      }
      case kC64F:
        cblas_zgemv(CblasColMajor, Trans(c.op_a), m, n, &alpha, At<cd>(c.a, oa), lda, At<cd>(c.b, ox), incx, &beta,
                    At<cd>(c.c, oy), incy);
        break;
      default: return Unsupported(c);
    }
  }
  return Status::Ok();
}

template <typename T>
T OpElement(std::uint64_t base, std::int64_t ld, std::uint32_t op, std::int64_t row, std::int64_t col) {
  // op(M)(row, col): M(row, col) for N, M(col, row) for T, its conjugate for C.
  if (op == 0) return *At<T>(base, col * ld + row);
  T v = *At<T>(base, row * ld + col);
  if constexpr (std::is_same_v<T, cf> || std::is_same_v<T, cd>) {
    if (op == 2) v = std::conj(v);
  }
  return v;
}

template <typename T>
void GeamTyped(const BlasCall& c, T alpha, T beta) {
  // Element by element, column by column: in place (C == A or C == B with
  // op N and the same ld) reads each element before it writes it.
  for (std::int64_t col = 0; col < c.n; ++col)
    for (std::int64_t row = 0; row < c.m; ++row) {
      const T a = alpha == T(0) ? T(0) : OpElement<T>(c.a, c.lda, c.op_a, row, col);
      const T b = beta == T(0) ? T(0) : OpElement<T>(c.b, c.ldb, c.op_b, row, col);
      *At<T>(c.c, col * c.ldc + row) = alpha * a + beta * b;
    }
}

Status Trsm(const BlasCall& c) {
  if (c.m == 0 || c.n == 0) return Status::Ok();
  const CBLAS_SIDE side = Side(c);
  const CBLAS_UPLO uplo = Uplo(c);
  const CBLAS_DIAG diag = Diag(c);
  const int m = static_cast<int>(c.m), n = static_cast<int>(c.n), lda = static_cast<int>(c.lda),
            ldb = static_cast<int>(c.ldc);
  const cd alpha = Alpha(c);
  switch (c.type_a) {
    case kR32F:
      cblas_strsm(CblasColMajor, side, uplo, Trans(c.op_a), diag, m, n, static_cast<float>(alpha.real()),
                  At<float>(c.a, 0), lda, At<float>(c.c, 0), ldb);
      break;
    case kR64F:
      cblas_dtrsm(CblasColMajor, side, uplo, Trans(c.op_a), diag, m, n, alpha.real(), At<double>(c.a, 0), lda,
                  At<double>(c.c, 0), ldb);
      break;
    case kC32F: {
      const cf al(alpha);
      cblas_ctrsm(CblasColMajor, side, uplo, Trans(c.op_a), diag, m, n, &al, At<cf>(c.a, 0), lda, At<cf>(c.c, 0), ldb);
      break;
    }
    case kC64F:
      cblas_ztrsm(CblasColMajor, side, uplo, Trans(c.op_a), diag, m, n, &alpha, At<cd>(c.a, 0), lda, At<cd>(c.c, 0),
                  ldb);
      break;
    default: return Unsupported(c);
  }
  return Status::Ok();
}

Status Ger(const BlasCall& c) {
  if (c.m == 0 || c.n == 0) return Status::Ok();
  const int m = static_cast<int>(c.m), n = static_cast<int>(c.n), incx = static_cast<int>(c.lda),
            incy = static_cast<int>(c.ldb), lda = static_cast<int>(c.ldc);
  const cd alpha = Alpha(c);
  switch (c.type_a) {
    case kR32F:
      cblas_sger(CblasColMajor, m, n, static_cast<float>(alpha.real()), At<float>(c.a, 0), incx, At<float>(c.b, 0),
                 incy, At<float>(c.c, 0), lda);
      break;
    case kR64F:
      cblas_dger(CblasColMajor, m, n, alpha.real(), At<double>(c.a, 0), incx, At<double>(c.b, 0), incy,
                 At<double>(c.c, 0), lda);
      break;
    case kC32F: {
      const cf al(alpha);
      (c.conjugate ? cblas_cgerc : cblas_cgeru)(CblasColMajor, m, n, &al, At<cf>(c.a, 0), incx, At<cf>(c.b, 0), incy,
                                                At<cf>(c.c, 0), lda);
      break;
    }
    case kC64F:
      (c.conjugate ? cblas_zgerc : cblas_zgeru)(CblasColMajor, m, n, &alpha, At<cd>(c.a, 0), incx, At<cd>(c.b, 0),
                                                incy, At<cd>(c.c, 0), lda);
      break;
    default: return Unsupported(c);
  }
  return Status::Ok();
}

Status Syrk(const BlasCall& c) {
  if (c.n == 0) return Status::Ok();
  const CBLAS_UPLO uplo = Uplo(c);
  // herk (conjugate): op N or C, alpha and beta real.
  const CBLAS_TRANSPOSE t = c.op_a == 0 ? CblasNoTrans : c.conjugate ? CblasConjTrans : CblasTrans;
  const int n = static_cast<int>(c.n), k = static_cast<int>(c.k), lda = static_cast<int>(c.lda),
            ldc = static_cast<int>(c.ldc);
  const cd alpha = Alpha(c), beta = Beta(c);
  if (c.conjugate && c.type_a == kC32F) {
    cblas_cherk(CblasColMajor, uplo, t, n, k, static_cast<float>(alpha.real()), At<cf>(c.a, 0), lda,
                static_cast<float>(beta.real()), At<cf>(c.c, 0), ldc);
    return Status::Ok();
  }
  if (c.conjugate && c.type_a == kC64F) {
    cblas_zherk(CblasColMajor, uplo, t, n, k, alpha.real(), At<cd>(c.a, 0), lda, beta.real(), At<cd>(c.c, 0), ldc);
    return Status::Ok();
  }
  switch (c.type_a) {
    case kR32F:
      cblas_ssyrk(CblasColMajor, uplo, t, n, k, static_cast<float>(alpha.real()), At<float>(c.a, 0), lda,
                  static_cast<float>(beta.real()), At<float>(c.c, 0), ldc);
      break;
    case kR64F:
      cblas_dsyrk(CblasColMajor, uplo, t, n, k, alpha.real(), At<double>(c.a, 0), lda, beta.real(), At<double>(c.c, 0),
                  ldc);
      break;
    case kC32F: {
      const cf al(alpha), be(beta);
      cblas_csyrk(CblasColMajor, uplo, t, n, k, &al, At<cf>(c.a, 0), lda, &be, At<cf>(c.c, 0), ldc);
      break;
    }
    case kC64F:
      cblas_zsyrk(CblasColMajor, uplo, t, n, k, &alpha, At<cd>(c.a, 0), lda, &beta, At<cd>(c.c, 0), ldc);
      break;
    default: return Unsupported(c);
  }
  return Status::Ok();
}

Status Geam(const BlasCall& c) {
  const std::int32_t t = c.type_a;
  if (c.type_b != t || c.type_c != t) return Unsupported(c);
  const cd alpha = Alpha(c), beta = Beta(c);
  switch (t) {
    case kR32F: GeamTyped<float>(c, static_cast<float>(alpha.real()), static_cast<float>(beta.real())); break;
    case kR64F: GeamTyped<double>(c, alpha.real(), beta.real()); break;
    case kC32F: GeamTyped<cf>(c, cf(alpha), cf(beta)); break;
    case kC64F: GeamTyped<cd>(c, alpha, beta); break;
    default: return Unsupported(c);
  }
  return Status::Ok();
}

/// rot: (x, y) = (c x + s y, c y - conj(s) x), element by element in T
/// (c is real; s real or complex, conjugated for complex T).
template <typename T>
void RotLoop(const BlasCall& c, T cc, T ss) {
  T sc = ss;
  if constexpr (std::is_same_v<T, cf> || std::is_same_v<T, cd>) sc = std::conj(ss);
  for (std::int64_t i = 0; i < c.n; ++i) {
    T* x = reinterpret_cast<T*>(VectorElement(c.a, c.n, c.lda, i, sizeof(T)));
    T* y = reinterpret_cast<T*>(VectorElement(c.b, c.n, c.ldb, i, sizeof(T)));
    const T xv = *x, yv = *y;
    *x = cc * xv + ss * yv;
    *y = cc * yv - sc * xv;
  }
}

/// sum |re| + |im| over x, in double, rounded once. The sim's own loop
/// for complex float: Debian bookworm's OpenBLAS (0.3.21) returns wrong
/// sums from cblas_scasum for unit-stride vectors of 9 elements and more
/// (found by CuPy's cupy.cublas.asum under phos; docs/backends.md).
template <typename T>
float ComplexAsum(const BlasCall& c) {
  if (c.lda <= 0) return 0.0f;  // BLAS: a non-positive increment sums nothing
  double sum = 0;
  for (std::int64_t i = 0; i < c.n; ++i) {
    const T v = *reinterpret_cast<const T*>(c.a + static_cast<std::uint64_t>(i * c.lda) * sizeof(T));
    sum += std::fabs(static_cast<double>(v.real())) + std::fabs(static_cast<double>(v.imag()));
  }
  return static_cast<float>(sum);
}

void WriteResult(const BlasCall& c, const void* value, std::size_t bytes) {
  if (c.device_scalars) std::memcpy(reinterpret_cast<void*>(c.result), value, bytes);
  else if (c.host_result) std::memcpy(c.host_result->data(), value, bytes);
}

Status Level1(const BlasCall& c) {
  const int n = static_cast<int>(c.n), incx = static_cast<int>(c.lda), incy = static_cast<int>(c.ldb);
  const std::int32_t t = c.type_a;
  switch (c.op) {
    case BlasOp::kAxpy: {
      if (c.n == 0) return Status::Ok();
      if (c.type_b != t || c.scalar_type != t) return Unsupported(c);
      const cd alpha = Alpha(c);
      if (t == kR32F) cblas_saxpy(n, static_cast<float>(alpha.real()), At<float>(c.a, 0), incx, At<float>(c.b, 0), incy);
      else if (t == kR64F) cblas_daxpy(n, alpha.real(), At<double>(c.a, 0), incx, At<double>(c.b, 0), incy);
      else if (t == kC32F) { const cf al(alpha); cblas_caxpy(n, &al, At<cf>(c.a, 0), incx, At<cf>(c.b, 0), incy); }
      else if (t == kC64F) cblas_zaxpy(n, &alpha, At<cd>(c.a, 0), incx, At<cd>(c.b, 0), incy);
      else return Unsupported(c);
      return Status::Ok();
    }
    case BlasOp::kScal: {
      if (c.n == 0) return Status::Ok();
      const cd alpha = Alpha(c);
      const std::int32_t s = c.scalar_type;
      if (t == kR32F && s == kR32F) cblas_sscal(n, static_cast<float>(alpha.real()), At<float>(c.a, 0), incx);
      else if (t == kR64F && s == kR64F) cblas_dscal(n, alpha.real(), At<double>(c.a, 0), incx);
      else if (t == kC32F && s == kC32F) { const cf al(alpha); cblas_cscal(n, &al, At<cf>(c.a, 0), incx); }
      else if (t == kC32F && s == kR32F) cblas_csscal(n, static_cast<float>(alpha.real()), At<cf>(c.a, 0), incx);
      else if (t == kC64F && s == kC64F) cblas_zscal(n, &alpha, At<cd>(c.a, 0), incx);
      else if (t == kC64F && s == kR64F) cblas_zdscal(n, alpha.real(), At<cd>(c.a, 0), incx);
      else return Unsupported(c);
      return Status::Ok();
    }
    case BlasOp::kRot: {
      const cd cs = Alpha(c), sn = Beta(c);  // c real (Alpha reads the real type), s as flagged
      switch (t) {
        case kR32F: RotLoop<float>(c, static_cast<float>(cs.real()), static_cast<float>(sn.real())); break;
        case kR64F: RotLoop<double>(c, cs.real(), sn.real()); break;
        case kC32F: RotLoop<cf>(c, cf(cs), cf(sn)); break;
        case kC64F: RotLoop<cd>(c, cs, sn); break;
        default: return Unsupported(c);
      }
      return Status::Ok();
    }
    case BlasOp::kCopy:
    case BlasOp::kSwap: {
      const std::size_t es = ElementBytes(t);
      if (es == 0 || c.type_b != t) return Unsupported(c);
      for (std::int64_t i = 0; i < c.n; ++i) {
        auto* x = reinterpret_cast<unsigned char*>(VectorElement(c.a, c.n, c.lda, i, es));
        auto* y = reinterpret_cast<unsigned char*>(VectorElement(c.b, c.n, c.ldb, i, es));
        unsigned char tmp[16];
        std::memcpy(tmp, x, es);
        if (c.op == BlasOp::kSwap) std::memcpy(x, y, es);
        std::memcpy(y, tmp, es);
      }
      return Status::Ok();
    }
    case BlasOp::kDot: {
      if (c.type_b != t || c.scalar_type != t) return Unsupported(c);
      if (t == kR32F) {
        const float r = c.n == 0 ? 0.0f : cblas_sdot(n, At<float>(c.a, 0), incx, At<float>(c.b, 0), incy);
        WriteResult(c, &r, sizeof r);
      } else if (t == kR64F) {
        const double r = c.n == 0 ? 0.0 : cblas_ddot(n, At<double>(c.a, 0), incx, At<double>(c.b, 0), incy);
        WriteResult(c, &r, sizeof r);
      } else if (t == kC32F) {
        cf r = 0;
        if (c.n > 0 && c.conjugate) cblas_cdotc_sub(n, At<cf>(c.a, 0), incx, At<cf>(c.b, 0), incy, &r);
        else if (c.n > 0) cblas_cdotu_sub(n, At<cf>(c.a, 0), incx, At<cf>(c.b, 0), incy, &r);
        WriteResult(c, &r, sizeof r);
      } else if (t == kC64F) {
        cd r = 0;
        if (c.n > 0 && c.conjugate) cblas_zdotc_sub(n, At<cd>(c.a, 0), incx, At<cd>(c.b, 0), incy, &r);
        else if (c.n > 0) cblas_zdotu_sub(n, At<cd>(c.a, 0), incx, At<cd>(c.b, 0), incy, &r);
        WriteResult(c, &r, sizeof r);
      } else {
        return Unsupported(c);
      }
      return Status::Ok();
    }
    case BlasOp::kNrm2:
    case BlasOp::kAsum: {
      const bool nrm = c.op == BlasOp::kNrm2;
      if (c.n == 0) {
        const double zero = 0;
        WriteResult(c, &zero, ElementBytes(c.scalar_type) == 8 ? 8 : 4);
        return Status::Ok();
      }
      if ((t == kR32F || t == kC32F) && c.scalar_type == kR32F) {
        float r = 0;
        if (t == kR32F) r = nrm ? cblas_snrm2(n, At<float>(c.a, 0), incx) : cblas_sasum(n, At<float>(c.a, 0), incx);
        else if (nrm) r = cblas_scnrm2(n, At<cf>(c.a, 0), incx);
        else r = ComplexAsum<cf>(c);  // not cblas_scasum: see ComplexAsum
        WriteResult(c, &r, sizeof r);
      } else if ((t == kR64F || t == kC64F) && c.scalar_type == kR64F) {
        double r = 0;
        if (t == kR64F) r = nrm ? cblas_dnrm2(n, At<double>(c.a, 0), incx) : cblas_dasum(n, At<double>(c.a, 0), incx);
        else r = nrm ? cblas_dznrm2(n, At<cd>(c.a, 0), incx) : cblas_dzasum(n, At<cd>(c.a, 0), incx);
        WriteResult(c, &r, sizeof r);
      } else {
        return Unsupported(c);
      }
      return Status::Ok();
    }
    case BlasOp::kIamax:
    case BlasOp::kIamin: {
      // |re| + |im| (cuBLAS's measure for complex), first extreme, 1-based.
      const std::size_t es = ElementBytes(t);
      if (t != kR32F && t != kR64F && t != kC32F && t != kC64F) return Unsupported(c);
      std::int32_t best = 0;
      double best_value = 0;
      for (std::int64_t i = 0; c.lda > 0 && i < c.n; ++i) {  // BLAS: 0 for incx <= 0
        const auto* p = reinterpret_cast<const unsigned char*>(c.a + static_cast<std::uint64_t>(i * c.lda) * es);
        const cd v = ReadScalar(p, t);
        const double mag = std::fabs(v.real()) + std::fabs(v.imag());
        const bool better = c.op == BlasOp::kIamax ? mag > best_value : mag < best_value;
        if (i == 0 || better) {
          best = static_cast<std::int32_t>(i + 1);
          best_value = mag;
        }
      }
      if (c.index64) {
        const std::int64_t wide = best;
        WriteResult(c, &wide, sizeof wide);
      } else {
        WriteResult(c, &best, sizeof best);
      }
      return Status::Ok();
    }
    default: return Unsupported(c);
  }
}


/// The gemm type combinations Gemm computes (plain, pointer-array batched
/// and cuBLASLt's): one type throughout from cblas's four, or 16-bit A and
/// B widened to float with a C of their type or float.
bool GemmTypesComputed(const BlasCall& c) {
  const std::int32_t t = c.type_a;
  return (t == c.type_b && t == c.type_c && Std(t)) ||
         ((t == kR16F || t == kR16BF) && c.type_b == t && (c.type_c == t || c.type_c == kR32F)) ||
         (t == kR8I && c.type_b == kR8I && ((c.type_c == kR32I && c.scalar_type == kR32I) ||
                                            (c.type_c == kR32F && c.scalar_type == kR32F)));
}
bool Real(std::int32_t t) { return t == kR32F || t == kR64F || t == kR16F || t == kR16BF; }
bool AlphaIsOne(const BlasCall& c) { return !c.device_scalars && Alpha(c) == 1.0; }

double ReadReal(const unsigned char* p, std::int32_t t) {
  switch (t) {
    case kR32F: { float v; std::memcpy(&v, p, 4); return v; }
    case kR64F: { double v; std::memcpy(&v, p, 8); return v; }
    default: return Widen(p, t);
  }
}
void WriteReal(double v, unsigned char* p, std::int32_t t) {
  switch (t) {
    case kR32F: { const float f = static_cast<float>(v); std::memcpy(p, &f, 4); return; }
    case kR64F: std::memcpy(p, &v, 8); return;
    default: Narrow(static_cast<float>(v), p, t);
  }
}

constexpr double kGeluScale = 0.7978845608028654;  // sqrt(2 / pi)
constexpr double kGeluCubic = 0.044715;

/// GELU in its tanh form (cuBLASLt's) and its derivative.
double Gelu(double x) { return 0.5 * x * (1.0 + std::tanh(kGeluScale * (x + kGeluCubic * x * x * x))); }
double GeluGrad(double x) {
  const double t = std::tanh(kGeluScale * (x + kGeluCubic * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * kGeluScale * (1.0 + 3.0 * kGeluCubic * x * x);
}

/// op(M)(row, col) of a real column-major matrix of cudaDataType_t `type`.
double OpReal(std::uint64_t base, std::int64_t ld, std::uint32_t op, std::int64_t row, std::int64_t col,
              std::int32_t type) {
  const std::int64_t index = op == 0 ? col * ld + row : row * ld + col;
  return ReadReal(reinterpret_cast<const unsigned char*>(base + static_cast<std::uint64_t>(index) * ElementBytes(type)),
                  type);
}

/// ReLU's bit mask: bit `bit` of the mask at `base` (bits numbered from
/// the least significant bit of the first byte, cuBLASLt's layout).
bool MaskBit(std::uint64_t base, std::uint64_t bit) {
  return (*reinterpret_cast<const unsigned char*>(base + bit / 8) >> (bit % 8)) & 1;
}
void SetMaskBit(std::uint64_t base, std::uint64_t bit, bool on) {
  auto* byte = reinterpret_cast<unsigned char*>(base + bit / 8);
  const auto mask = static_cast<unsigned char>(1u << (bit % 8));
  *byte = on ? static_cast<unsigned char>(*byte | mask) : static_cast<unsigned char>(*byte & ~mask);
}

/// cuBLASLt: D = C (where C is another matrix and beta != 0), then the gemm
/// into D, then the epilogue element by element in double, rounded to D's
/// type (cuBLASLt applies it before D's rounding: for a 16-bit D the sim's
/// result may differ by one rounding step). In order, per element:
/// + bias; aux = the value (GELU) or its sign bit (ReLU); the activation;
/// or, backward, times the activation's derivative at aux. A BGRAD
/// epilogue sums D's final values over each row; BGRADA/BGRADB sum op(A)'s
/// rows / op(B)'s columns over k (alpha is 1: CheckSimBlas).
Status LtMatmul(const BlasCall& c) {
  if (c.m == 0 || c.n == 0 || c.batch == 0) return Status::Ok();
  wire::LtEpilogue ep;
  if (!wire::DecodeLtEpilogue(c.epilogue, &ep)) return Unsupported(c);
  const std::size_t ed = ElementBytes(c.type_d);
  const cd beta = Beta(c);
  if (beta != 0.0 && (c.c != c.d || c.ldc != c.ldd || c.stride_c != c.stride_d)) {
    for (std::int64_t p = 0; p < c.batch; ++p)
      for (std::int64_t j = 0; j < c.n; ++j)
        for (std::int64_t i = 0; i < c.m; ++i) {
          std::memmove(reinterpret_cast<void*>(c.d + static_cast<std::uint64_t>(p * c.stride_d + j * c.ldd + i) * ed),
                       reinterpret_cast<const void*>(c.c + static_cast<std::uint64_t>(p * c.stride_c + j * c.ldc + i) * ed),
                       ed);
        }
  }
  BlasCall g = c;
  g.op = BlasOp::kGemm;
  g.c = c.d;
  g.ldc = c.ldd;
  g.stride_c = c.stride_d;
  g.type_c = c.type_d;
  PHOS_RETURN_IF_ERROR(Gemm(g));
  if (c.epilogue == wire::kLtEpilogueDefault) return Status::Ok();
  const std::size_t eb = ElementBytes(c.bias_type), ex = ElementBytes(c.aux_type);
  const auto bias_at = [&](std::int64_t p, std::int64_t i) {
    return reinterpret_cast<unsigned char*>(c.bias + static_cast<std::uint64_t>(p * c.bias_stride + i) * eb);
  };
  std::vector<double> row_sums;
  for (std::int64_t p = 0; p < c.batch; ++p) {
    if (ep.bgrad_a || ep.bgrad_b) {
      // The gemm's own D stays as computed; the bias gradient comes from
      // the inputs.
      const std::int64_t len = ep.bgrad_a ? c.m : c.n;
      for (std::int64_t x = 0; x < len; ++x) {
        double sum = 0;
        for (std::int64_t kk = 0; kk < c.k; ++kk) {
          sum += ep.bgrad_a ? OpReal(c.a + static_cast<std::uint64_t>(p * c.stride_a) * ElementBytes(c.type_a), c.lda,
                                     c.op_a, x, kk, c.type_a)
                            : OpReal(c.b + static_cast<std::uint64_t>(p * c.stride_b) * ElementBytes(c.type_b), c.ldb,
                                     c.op_b, kk, x, c.type_b);
        }
        WriteReal(sum, bias_at(p, x), c.bias_type);
      }
      continue;
    }
    row_sums.assign(static_cast<std::size_t>(c.m), 0.0);
    for (std::int64_t j = 0; j < c.n; ++j)
      for (std::int64_t i = 0; i < c.m; ++i) {
        auto* e = reinterpret_cast<unsigned char*>(c.d + static_cast<std::uint64_t>(p * c.stride_d + j * c.ldd + i) * ed);
        const std::uint64_t aux_index = static_cast<std::uint64_t>(p * c.aux_stride + j * c.aux_ld + i);
        auto* aux_elem = reinterpret_cast<unsigned char*>(c.aux + aux_index * ex);
        double v = ReadReal(e, c.type_d);
        if (ep.bias) v += ReadReal(bias_at(p, i), c.bias_type);
        if (ep.aux_out && ep.relu) SetMaskBit(c.aux, aux_index, v > 0);
        if (ep.aux_out && ep.gelu) WriteReal(v, aux_elem, c.aux_type);
        if (ep.relu) v = v > 0 ? v : 0;
        if (ep.gelu) v = Gelu(v);
        if (ep.drelu && !MaskBit(c.aux, aux_index)) v = 0;
        if (ep.dgelu) v *= GeluGrad(ReadReal(aux_elem, c.aux_type));
        if (ep.bgrad) row_sums[static_cast<std::size_t>(i)] += v;
        WriteReal(v, e, c.type_d);
      }
    if (ep.bgrad)
      for (std::int64_t i = 0; i < c.m; ++i) WriteReal(row_sums[static_cast<std::size_t>(i)], bias_at(p, i), c.bias_type);
  }
  return Status::Ok();
}

}  // namespace

Status CheckSimBlas(const BlasCall& c) {
  const std::int32_t t = c.type_a, s = c.scalar_type;
  bool ok = false;
  switch (c.op) {
    case BlasOp::kGemmBatched:
    case BlasOp::kGemm: ok = GemmTypesComputed(c); break;
    case BlasOp::kGemvBatched: ok = t == c.type_b && t == c.type_c && Std(t); break;
    case BlasOp::kTrsmBatched: ok = t == c.type_c && s == t && Std(t); break;
    case BlasOp::kGemv:
    case BlasOp::kGeam: ok = t == c.type_b && t == c.type_c && Std(t); break;
    case BlasOp::kTrsm: ok = t == c.type_c && s == t && Std(t); break;
    case BlasOp::kSyrk:  // herk (conjugate): op N or C, real scalars; syrk: op N or T
      ok = t == c.type_c && s == t && Std(t) && (c.conjugate ? c.op_a != 1 && (t == kC32F || t == kC64F) : c.op_a != 2);
      break;
    default:  // the families below
      if (IsLuFamily(c.op)) return CheckSimLu(c);
      ok = IsSymmetricFamily(c.op) ? SymmetricBlasTypesComputed(c) : IsBandedFamily(c.op) && BandedBlasTypesComputed(c);
      break;
    case BlasOp::kGer: ok = t == c.type_b && t == c.type_c && s == t && Std(t); break;
    case BlasOp::kAxpy:
    case BlasOp::kDot: ok = Std(t) && c.type_b == t && s == t; break;
    case BlasOp::kScal:
      ok = (Std(t) && s == t) || (t == kC32F && s == kR32F) || (t == kC64F && s == kR64F);
      break;
    case BlasOp::kCopy:
    case BlasOp::kSwap: ok = ElementBytes(t) != 0 && c.type_b == t; break;
    case BlasOp::kRot: ok = Std(t) && c.type_b == t && s == t && c.real_alpha; break;
    case BlasOp::kNrm2:
    case BlasOp::kAsum:
      ok = ((t == kR32F || t == kC32F) && s == kR32F) || ((t == kR64F || t == kC64F) && s == kR64F);
      break;
    case BlasOp::kIamax:
    case BlasOp::kIamin: ok = Std(t); break;
    case BlasOp::kLtMatmul: {
      wire::LtEpilogue ep;
      if (!wire::DecodeLtEpilogue(c.epilogue, &ep)) break;
      const bool gelu_aux = (ep.aux_in || ep.aux_out) && !ep.relu_mask();
      const bool epilogue_ok = c.epilogue == wire::kLtEpilogueDefault ||
                               (Real(c.type_d) && (!(ep.bias || ep.writes_bias()) || Real(c.bias_type)) &&
                                (!gelu_aux || Real(c.aux_type)));
      ok = GemmTypesComputed(c) && c.type_d == c.type_c && epilogue_ok;
      if (ok && (ep.bgrad_a || ep.bgrad_b) && !AlphaIsOne(c)) {
        // Whether cuBLASLt scales the input's bias gradient by alpha is not
        // documented: refused rather than guessed.
        return Status::NotSupported("cublasLtMatmul: the BGRADA/BGRADB epilogues with an alpha other than a "
                                    "host-pointer 1 are not computed by the sim backend");
      }
      break;
    }
  }
  return ok ? Status::Ok() : Unsupported(c);
}

namespace {

/// OpenBLAS indexes with 32-bit ints: a dimension or leading dimension
/// (increment) beyond that is refused, not truncated. Both entry points
/// (RunBlas, RunBlasBatched) check it.
Status CheckBlasIndices(const BlasCall& c) {
  // (Increments may be negative: their magnitude must fit. A field a
  // routine does not read may hold anything; no negation that overflows.)
  const auto magnitude_fits = [](std::int64_t v) { return v > -0x80000000LL && v <= 0x7fffffff; };
  bool fits = magnitude_fits(c.lda) && magnitude_fits(c.ldb) && magnitude_fits(c.ldc);
  for (std::int64_t v : {c.m, c.n, c.k, c.ldd}) fits = fits && FitsBlasInt(v);
  if (fits) return Status::Ok();
  return Status::InvalidArgument(std::string("cuBLAS ") + OpName(c.op) +
                                 ": a dimension or leading dimension beyond 2^31-1 (the sim's BLAS uses 32-bit "
                                 "indices)");
}

}  // namespace

Status RunBlasBatched(const BlasCall& c, const PinRangeFn& pin) {
  PHOS_RETURN_IF_ERROR(CheckBlasIndices(c));
  InitSimBlas();
  if (IsLuFamily(c.op)) return RunLuBatched(c, pin);
  if (c.m == 0 || c.n == 0 || c.batch == 0) return Status::Ok();
  const auto matrix = [](std::int64_t rows, std::int64_t cols, std::int64_t ld, std::size_t es) -> std::uint64_t {
    return rows == 0 || cols == 0 ? 0 : static_cast<std::uint64_t>((cols - 1) * ld + rows) * es;
  };
  const auto vector = [](std::int64_t n, std::int64_t inc, std::size_t es) -> std::uint64_t {
    return n == 0 ? 0 : static_cast<std::uint64_t>((n - 1) * (inc < 0 ? -inc : inc) + 1) * es;
  };
  // Each member's extents (the handler checked the dimensions once).
  const bool ta = c.op_a != 0, tb = c.op_b != 0;
  BlasOp base = BlasOp::kGemm;
  std::uint64_t abytes = 0, bbytes = 0, cbytes = 0;
  switch (c.op) {
    case BlasOp::kGemvBatched:
      base = BlasOp::kGemv;
      abytes = matrix(c.m, c.n, c.lda, ElementBytes(c.type_a));
      bbytes = vector(ta ? c.m : c.n, c.ldb, ElementBytes(c.type_b));
      cbytes = vector(ta ? c.n : c.m, c.ldc, ElementBytes(c.type_c));
      break;
    case BlasOp::kTrsmBatched: {
      base = BlasOp::kTrsm;
      const std::int64_t order = c.side_right ? c.n : c.m;
      abytes = matrix(order, order, c.lda, ElementBytes(c.type_a));
      cbytes = matrix(c.m, c.n, c.ldc, ElementBytes(c.type_c));
      break;
    }
    default:
      abytes = matrix(ta ? c.k : c.m, ta ? c.m : c.k, c.lda, ElementBytes(c.type_a));
      bbytes = matrix(tb ? c.n : c.k, tb ? c.k : c.n, c.ldb, ElementBytes(c.type_b));
      cbytes = matrix(c.m, c.n, c.ldc, ElementBytes(c.type_c));
  }
  const auto* as = reinterpret_cast<const std::uint64_t*>(c.a);
  const auto* bs = base == BlasOp::kTrsm ? nullptr : reinterpret_cast<const std::uint64_t*>(c.b);
  const auto* cs = reinterpret_cast<const std::uint64_t*>(c.c);
  for (std::int64_t i = 0; i < c.batch; ++i) {
    BlasCall member = c;
    member.op = base;
    member.batch = 1;
    member.stride_a = member.stride_b = member.stride_c = 0;
    member.a = as[i];
    member.b = bs != nullptr ? bs[i] : 0;
    member.c = cs[i];
    if (abytes) PHOS_RETURN_IF_ERROR(pin(member.a, abytes));
    if (bbytes) PHOS_RETURN_IF_ERROR(pin(member.b, bbytes));
    if (cbytes) PHOS_RETURN_IF_ERROR(pin(member.c, cbytes));
    PHOS_RETURN_IF_ERROR(RunBlas(member));
  }
  return Status::Ok();
}

void InitSimBlas() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

Status RunBlas(const BlasCall& c) {
  PHOS_RETURN_IF_ERROR(CheckBlasIndices(c));
  InitSimBlas();
  switch (c.op) {
    case BlasOp::kGemm: return Gemm(c);
    case BlasOp::kGemv: return Gemv(c);
    case BlasOp::kGeam: return Geam(c);
    case BlasOp::kTrsm: return Trsm(c);
    case BlasOp::kGer: return Ger(c);
    case BlasOp::kSyrk: return Syrk(c);
    case BlasOp::kLtMatmul: return LtMatmul(c);
    default:
      if (IsSymmetricFamily(c.op)) return RunSymmetricBlas(c);
      if (IsBandedFamily(c.op)) return RunBandedBlas(c);
      return Level1(c);
  }
}

}  // namespace phos::backend::sim
