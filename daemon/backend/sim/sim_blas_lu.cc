// The sim's batched LU routines (getrfBatched, getrsBatched, getriBatched):
// each member with LAPACK's routine of the same name from OpenBLAS (which
// carries LAPACK), on the member's matrices pinned in the calling
// context's memory. Pivots are LAPACK's and cuBLAS's alike (1-based row
// interchanges); info per member as LAPACK reports it (0, or the 1-based
// index of a zero pivot). getrf or getri without pivoting (a null pivot
// array) is refused by name: LAPACK has none.
#include <cstring>
#include <string>
#include <vector>

#include "backend/sim/sim_blas.h"
#include "backend/sim/sim_blas_internal.h"

// LAPACK's Fortran entry points (OpenBLAS exports them; Debian ships no
// prototypes with it). A character argument's hidden length follows last.
extern "C" {
void sgetrf_(const int* m, const int* n, void* a, const int* lda, int* ipiv, int* info);
void dgetrf_(const int* m, const int* n, void* a, const int* lda, int* ipiv, int* info);
void cgetrf_(const int* m, const int* n, void* a, const int* lda, int* ipiv, int* info);
void zgetrf_(const int* m, const int* n, void* a, const int* lda, int* ipiv, int* info);
void sgetrs_(const char* trans, const int* n, const int* nrhs, const void* a, const int* lda, const int* ipiv, void* b,
             const int* ldb, int* info, std::size_t trans_len);
void dgetrs_(const char* trans, const int* n, const int* nrhs, const void* a, const int* lda, const int* ipiv, void* b,
             const int* ldb, int* info, std::size_t trans_len);
void cgetrs_(const char* trans, const int* n, const int* nrhs, const void* a, const int* lda, const int* ipiv, void* b,
             const int* ldb, int* info, std::size_t trans_len);
void zgetrs_(const char* trans, const int* n, const int* nrhs, const void* a, const int* lda, const int* ipiv, void* b,
             const int* ldb, int* info, std::size_t trans_len);
void sgetri_(const int* n, void* a, const int* lda, const int* ipiv, void* work, const int* lwork, int* info);
void dgetri_(const int* n, void* a, const int* lda, const int* ipiv, void* work, const int* lwork, int* info);
void cgetri_(const int* n, void* a, const int* lda, const int* ipiv, void* work, const int* lwork, int* info);
void zgetri_(const int* n, void* a, const int* lda, const int* ipiv, void* work, const int* lwork, int* info);
}

namespace phos::backend::sim {

using namespace blas_internal;  // NOLINT: the sim cuBLAS files' shared helpers

namespace {

using Getrf = void (*)(const int*, const int*, void*, const int*, int*, int*);
using Getrs = void (*)(const char*, const int*, const int*, const void*, const int*, const int*, void*, const int*, int*,
                       std::size_t);
using Getri = void (*)(const int*, void*, const int*, const int*, void*, const int*, int*);

struct Lapack {
  Getrf getrf;
  Getrs getrs;
  Getri getri;
};

bool LapackOf(std::int32_t type, Lapack* out) {
  switch (type) {
    case kR32F: *out = {sgetrf_, sgetrs_, sgetri_}; return true;
    case kR64F: *out = {dgetrf_, dgetrs_, dgetri_}; return true;
    case kC32F: *out = {cgetrf_, cgetrs_, cgetri_}; return true;
    case kC64F: *out = {zgetrf_, zgetrs_, zgetri_}; return true;
    default: return false;
  }
}

std::uint64_t MatrixBytes(std::int64_t rows, std::int64_t cols, std::int64_t ld, std::size_t es) {
  return rows == 0 || cols == 0 ? 0 : static_cast<std::uint64_t>((cols - 1) * ld + rows) * es;
}

}  // namespace

Status CheckSimLu(const BlasCall& c) {
  Lapack lapack{};
  if (!LapackOf(c.type_a, &lapack) || c.type_c != c.type_a) return Unsupported(c);
  // Without pivots (a null pivot array: getrf/getri without pivoting)
  // LAPACK has nothing to run; getrs's pivots the specification requires.
  if (c.b == 0 && c.n > 0 && c.batch > 0) {
    return Status::NotSupported(std::string("cublas?") + OpName(c.op) +
                                " without pivoting (a null pivot array) is not computed by the sim backend (LAPACK's "
                                "getrf always pivots)");
  }
  return Status::Ok();
}

Status RunLuBatched(const BlasCall& c, const PinRangeFn& pin) {
  PHOS_RETURN_IF_ERROR(CheckSimLu(c));
  if (c.n == 0 || c.batch == 0 || (c.op == BlasOp::kGetrsBatched && c.k == 0)) return Status::Ok();
  Lapack lapack{};
  LapackOf(c.type_a, &lapack);
  const std::size_t es = ElementBytes(c.type_a);
  const int n = static_cast<int>(c.n), lda = static_cast<int>(c.lda), ldc = static_cast<int>(c.ldc),
            nrhs = static_cast<int>(c.k);
  const auto* as = reinterpret_cast<const std::uint64_t*>(c.a);
  const auto* cs = reinterpret_cast<const std::uint64_t*>(c.c);
  auto* pivots = reinterpret_cast<int*>(c.b);
  auto* info = reinterpret_cast<int*>(c.result);
  const std::uint64_t abytes = MatrixBytes(c.n, c.n, c.lda, es);
  std::vector<unsigned char> work;
  for (std::int64_t i = 0; i < c.batch; ++i) {
    PHOS_RETURN_IF_ERROR(pin(as[i], abytes));
    void* a = reinterpret_cast<void*>(as[i]);
    int* ipiv = pivots + i * c.n;
    int status = 0;
    switch (c.op) {
      case BlasOp::kGetrfBatched:
        lapack.getrf(&n, &n, a, &lda, ipiv, &status);
        info[i] = status;
        break;
      case BlasOp::kGetrsBatched: {
        PHOS_RETURN_IF_ERROR(pin(cs[i], MatrixBytes(c.n, c.k, c.ldc, es)));
        const char trans = c.op_a == 0 ? 'N' : c.op_a == 1 ? 'T' : 'C';
        lapack.getrs(&trans, &n, &nrhs, a, &lda, ipiv, reinterpret_cast<void*>(cs[i]), &ldc, &status, 1);
        break;  // (status: parameter errors only, checked before the call)
      }
      default: {  // getri: C = A, then the inverse in place
        PHOS_RETURN_IF_ERROR(pin(cs[i], MatrixBytes(c.n, c.n, c.ldc, es)));
        for (std::int64_t j = 0; j < c.n; ++j)
          std::memmove(reinterpret_cast<void*>(cs[i] + static_cast<std::uint64_t>(j * c.ldc) * es),
                       reinterpret_cast<const void*>(as[i] + static_cast<std::uint64_t>(j * c.lda) * es),
                       static_cast<std::size_t>(c.n) * es);
        const int lwork = 64 * n;
        work.resize(static_cast<std::size_t>(lwork) * es);
        lapack.getri(&n, reinterpret_cast<void*>(cs[i]), &ldc, ipiv, work.data(), &lwork, &status);
        info[i] = status;
      }
    }
  }
  return Status::Ok();
}

}  // namespace phos::backend::sim
