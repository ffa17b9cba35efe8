// One cuBLAS routine as a backend runs it (Context::Blas): the session's
// handler (daemon/session/blas_handlers.cc) has checked it against the
// routine's specification (interposer/protocol/blas_spec.h) and that every
// device range it names lies in the session's buffers, so a backend may
// trust the dimensions and addresses it is given.
//
// Matrices are column-major (cuBLAS's layout). Types are cudaDataType_t
// values; `compute` a cublasComputeType_t or, in GemmEx's legacy form and
// the Ex level-1 routines, a cudaDataType_t.
#pragma once

#include <array>
#include <cstdint>
#include <memory>

namespace phos::backend {

enum class BlasOp : std::uint8_t {
  kGemm,   // C = alpha op(A) op(B) + beta C, `batch` members `stride_*` apart
  kGemmBatched,  // kGemm over `batch` members named by arrays of device pointers at a, b, c
  kGemvBatched,  // kGemv likewise (A, x, y arrays at a, b, c)
  kTrsmBatched,  // kTrsm likewise (A, B arrays at a, c)
  // Batched LU (n x n members, arrays of device pointers): pivots at b
  // (n int32 per member; getrf: 0 means none), info at result (int32 per
  // member), getrs's nrhs in k.
  kGetrfBatched,  // A = P L U in place
  kGetrsBatched,  // B (array at c, ldc) = inv(op(A)) B
  kGetriBatched,  // C (array at c, ldc) = inv(A)
  kGemv,   // y(c, ldc = incy) = alpha op(A) x(b, ldb = incx) + beta y, strided-batched
  kGeam,   // C = alpha op(A) + beta op(B)
  kGer,    // C (A) += alpha x(a, lda) y(b, ldb)^T, y conjugated when `conjugate`
  kSyrk,   // C (n x n, `upper` triangle or lower) = alpha op(A) op(A)^T + beta C
  kTrsm,   // C (B) = alpha inv(op(A)) B, or alpha B inv(op(A)) when side_right
  kAxpy,   // y(b, ldb) += alpha x(a, lda)
  kScal,   // x(a, lda) *= alpha
  kCopy,   // y(b, ldb) = x(a, lda)
  kSwap,   // x <-> y
  kRot,    // (x, y) = (c x + s y, c y - conj(s) x): c = alpha (real), s = beta
  kDot,    // result = x . y (conj(x) . y when `conjugate`)
  kNrm2,   // result = ||x||_2
  kAsum,   // result = sum |re| + |im|
  kIamax,  // result (int32) = 1-based index of the first max |re| + |im|
  kIamin,
  kLtMatmul,  // D(d, ldd, stride_d) = epilogue(alpha op(A) op(B) + beta C); C only read
  // The symmetric, Hermitian and triangular routines (wire::BlasShape says
  // which fields each reads); `conjugate` selects the Hermitian member.
  kSymm,   // C = alpha A B + beta C, or alpha B A + beta C when side_right; A's `upper` triangle or lower
  kSyr2k,  // C (n x n triangle) = alpha op(A) op(B)^T + alpha op(B) op(A)^T + beta C
  kSyrkx,  // C (n x n triangle) = alpha op(A) op(B)^T + beta C (herkx: ^H)
  kTrmm,   // C = alpha op(A) B, or alpha B op(A); B in (b, ldb), A triangular (upper, unit_diag)
  kSymv,   // y(c, ldc) = alpha A x(b, ldb) + beta y
  kTrmv,   // x(c, ldc) = op(A) x
  kTrsv,   // x(c, ldc) = inv(op(A)) x
  kSyr,    // A(c, ldc) += alpha x(a, lda) x^T (her: x x^H)
  kSyr2,   // A(c, ldc) += alpha x y^T + alpha y x^T (her2: conjugated), y in (b, ldb)
  kDgmm,   // C = A diag(x) (side_right) or diag(x) A; x in (b, ldb)
  // Banded (A's band storage in (a, lda); widths in k, gbmv's ku in
  // stride_a) and packed (the triangle, n(n+1)/2 elements) level 2.
  kGbmv,   // y(c, ldc) = alpha op(A) x(b, ldb) + beta y
  kSbmv,   // y = alpha A x + beta y, A symmetric (hbmv: Hermitian)
  kTbmv,   // x(c, ldc) = op(A) x
  kTbsv,   // x(c, ldc) = inv(op(A)) x
  kSpmv,   // y(c, ldc) = alpha AP(a) x(b, ldb) + beta y
  kSpr,    // AP(c) += alpha x(a, lda) x^T (hpr: x x^H)
  kSpr2,   // AP(c) += alpha x y^T + alpha y x^T (hpr2: conjugated), y in (b, ldb)
  kTpmv,   // x(c, ldc) = op(AP(a)) x
  kTpsv,   // x(c, ldc) = inv(op(AP(a))) x
};

/// The symmetric, Hermitian and triangular routines and dgmm (one
/// family: the sim's sim_blas_symmetric.cc computes them).
inline bool IsSymmetricFamily(BlasOp op) {
  switch (op) {
    case BlasOp::kSymm: case BlasOp::kSyr2k: case BlasOp::kSyrkx: case BlasOp::kTrmm: case BlasOp::kSymv:
    case BlasOp::kTrmv: case BlasOp::kTrsv: case BlasOp::kSyr: case BlasOp::kSyr2: case BlasOp::kDgmm: return true;
    default: return false;
  }
}

/// The banded and packed level-2 routines (sim_blas_banded.cc).
inline bool IsBandedFamily(BlasOp op) {
  switch (op) {
    case BlasOp::kGbmv: case BlasOp::kSbmv: case BlasOp::kTbmv: case BlasOp::kTbsv: case BlasOp::kSpmv:
    case BlasOp::kSpr: case BlasOp::kSpr2: case BlasOp::kTpmv: case BlasOp::kTpsv: return true;
    default: return false;
  }
}

/// The batched LU routines (sim_blas_lu.cc).
inline bool IsLuFamily(BlasOp op) {
  return op == BlasOp::kGetrfBatched || op == BlasOp::kGetrsBatched || op == BlasOp::kGetriBatched;
}

/// Whether `op` names its operands by arrays of device pointers (the
/// backend reads them and checks each member's memory).
inline bool IsPointerArrayBatch(BlasOp op) {
  return op == BlasOp::kGemmBatched || op == BlasOp::kGemvBatched || op == BlasOp::kTrsmBatched || IsLuFamily(op);
}

struct BlasCall {
  BlasOp op = BlasOp::kGemm;
  std::int32_t type_a = 0, type_b = 0, type_c = 0;
  std::int32_t compute = 0;
  std::int32_t scalar_type = 0;  // alpha, beta, and a reduction's result
  std::uint32_t op_a = 0, op_b = 0;  // cublasOperation_t: 0 N, 1 T, 2 C
  bool conjugate = false;
  bool side_right = false, upper = false, unit_diag = false;  // trsm, trmm, symm, ...
  // alpha / beta of the real type of scalar_type's precision (herk, her,
  // her2k's beta).
  bool real_alpha = false, real_beta = false;
  bool index64 = false;  // amax/amin: the result is an int64 (the _64 forms)
  std::int64_t m = 0, n = 0, k = 0, batch = 1;
  std::uint64_t a = 0, b = 0, c = 0;
  std::int64_t lda = 1, ldb = 1, ldc = 1;
  std::int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  // Scalars: device addresses when `device_scalars`, else the values.
  bool device_scalars = false;
  std::uint64_t alpha_ptr = 0, beta_ptr = 0;
  unsigned char alpha[16] = {}, beta[16] = {};
  // A reduction's result: a device address when `device_scalars`, else
  // `host_result` (shared: the enqueued work keeps it alive even when the
  // caller stops waiting for it, e.g. its context is abandoned).
  std::uint64_t result = 0;
  // cuBLASLt (kLtMatmul): the output D, the epilogue (a cublasLtEpilogue_t
  // value; wire::DecodeLtEpilogue says what it does), the bias or bias
  // gradient vector (m elements — n for BGRADB — bias_stride apart per
  // batch member), the aux matrix (ReLU's bit mask: aux_ld and aux_stride
  // in bits; GELU's input: elements of aux_type).
  std::uint64_t d = 0;
  std::int64_t ldd = 1, stride_d = 0;
  std::int32_t type_d = 0;
  std::uint32_t epilogue = 1;
  std::uint64_t bias = 0;
  std::int32_t bias_type = 0;
  std::int64_t bias_stride = 0;
  std::uint64_t aux = 0;
  std::int64_t aux_ld = 0, aux_stride = 0;
  std::int32_t aux_type = 0;
  std::shared_ptr<std::array<unsigned char, 16>> host_result;

  // The device ranges the routine reads or writes (the handler's operands,
  // from the routine's specification): a backend that pins or checks
  // memory around the work uses these.
  struct Range {
    std::uint64_t ptr = 0;
    std::uint64_t bytes = 0;
  };
  Range ranges[12];
  std::uint32_t range_count = 0;
};

}  // namespace phos::backend
