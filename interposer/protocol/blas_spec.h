// The specification of each forwarded cuBLAS routine (docs/interposer.md
// "cuBLAS"): which fields of a wire::BlasRequest it reads, what makes it
// invalid, and which device ranges it reads and writes — with extents from
// its dimensions, leading dimensions, increments, strides and batch count,
// not whole buffers.
//
// Shared by both sides of the line: libphos.so checks a call before it
// sends it (cuBLAS answers CUBLAS_STATUS_INVALID_VALUE at once, so must
// phos), and phosd checks it again (the request is untrusted) and derives
// the call's access set from it (daemon/session/access_spec.cc gives each
// slot its role). Pure functions of their arguments: any thread.
#pragma once

#include <cstdint>

#include "protocol/wire.h"

namespace phos::wire {

/// What a row of calls.def's cuBLAS section computes.
enum class BlasShape : uint8_t {
  kGemm,   // C = alpha op(A) op(B) + beta C, strided-batched (batch 1: plain gemm)
  kGemmBatched,  // the same over `batch` matrices named by arrays of device pointers (a, b, c)
  kGemvBatched,  // gemv over arrays of device pointers (A, x, y in a, b, c)
  kTrsmBatched,  // trsm over arrays of device pointers (A, B in a, c)
  // Batched LU over arrays of device pointers (calls.def): n x n members.
  kGetrfBatched,  // A = P L U in place; pivots (b) and info (result) written
  kGetrsBatched,  // B (c array) = inv(op(A)) B from the LU; pivots (b) read; nrhs in k
  kGetriBatched,  // C (c array) = inv(A) from the LU; pivots (b) read, info (result) written
  kGemv,   // y = alpha op(A) x + beta y, strided-batched
  kGeam,   // C = alpha op(A) + beta op(B)
  kGer,    // A (c, ldc) += alpha x (a, lda) y (b, ldb)^T (y conjugated: kBlasConjugate)
  kSyrk,   // C (n x n triangle) = alpha op(A) op(A)^T + beta C (herk: ^H, real scalars, kBlasConjugate)
  kTrsm,   // B (c, ldc) = alpha inv(op(A)) B (left) or alpha B inv(op(A)) (kBlasSideRight)
  // C (m x n) = alpha A B + beta C (left) or alpha B A + beta C (kBlasSideRight);
  // A (a, lda) symmetric (Hermitian: kBlasConjugate), m x m or n x n, its
  // kBlasUpper or lower triangle read; B in (b, ldb).
  kSymm,
  // C (n x n triangle) = alpha op(A) op(B)^T + alpha op(B) op(A)^T + beta C
  // (her2k: ^H, conj(alpha) in the second term, beta real); A, B n x k (op
  // N) or k x n.
  kSyr2k,
  // C (n x n triangle) = alpha op(A) op(B)^T + beta C (herkx: ^H, beta
  // real); A and B as syr2k's.
  kSyrkx,
  // C (m x n, c/ldc) = alpha op(A) B (left) or alpha B op(A); A triangular
  // (kBlasUpper, kBlasUnitDiag), B (b, ldb) read.
  kTrmm,
  kSymv,   // y (c, ldc = incy) = alpha A x (b, ldb = incx) + beta y; A n x n symmetric/Hermitian
  kTrmv,   // x (c, ldc = incx) = op(A) x; A n x n triangular
  kTrsv,   // x (c, ldc = incx) = inv(op(A)) x
  kSyr,    // A (c, ldc; n x n triangle) += alpha x x^T (her: x x^H, alpha real); x in (a, lda = incx)
  kSyr2,   // A (c, ldc) += alpha x y^T + alpha y x^T (her2: conjugates); y in (b, ldb = incy)
  kDgmm,   // C (m x n) = A diag(x) (kBlasSideRight; x n long) or diag(x) A (x m long); x in (b, ldb = incx)
  // Banded: A (a, lda) is the band storage — (kl + ku + 1) x n for gbmv
  // (kl in k, ku in stride_a), (k + 1) x n for the others.
  kGbmv,   // y (c, ldc) = alpha op(A) x (b, ldb) + beta y; A m x n
  kSbmv,   // y = alpha A x + beta y; A n x n symmetric (hbmv: Hermitian, kBlasConjugate)
  kTbmv,   // x (c, ldc) = op(A) x; A n x n triangular
  kTbsv,   // x (c, ldc) = inv(op(A)) x
  // Packed: the triangle of an n x n matrix, n(n+1)/2 elements.
  kSpmv,   // y (c, ldc) = alpha AP x (b, ldb) + beta y; AP in a (hpmv: kBlasConjugate)
  kSpr,    // AP (c) += alpha x x^T (hpr: x x^H, alpha real); x in (a, lda)
  kSpr2,   // AP (c) += alpha x y^T + alpha y x^T (hpr2: conjugates); y in (b, ldb)
  kTpmv,   // x (c, ldc) = op(AP) x; AP in a
  kTpsv,   // x (c, ldc) = inv(op(AP)) x
  kAxpy,   // y += alpha x
  kScal,   // x *= alpha
  kCopy,   // y = x
  kSwap,   // x <-> y
  kRot,    // (x, y) = (c x + s y, c y - conj(s) x); c in alpha (real), s in beta
  kDot,    // result = x . y (conjugated with kBlasConjugate)
  kNrm2,   // result = ||x||_2
  kAsum,   // result = sum |re| + |im|
  kIamax,  // result = 1-based index of the first max |re| + |im|
  kIamin,  // ... min
  kLtMatmul,  // cuBLASLt: D = epilogue(alpha op(A) op(B) + beta C) (CheckBlasLt)
};

/// The operand slots of the kBlas access rule, in the rule's order
/// (access_spec.cc names them and gives their roles).
enum BlasSlot : uint32_t {
  kBlasSlotA = 0,       // A, or level 1's x: read
  kBlasSlotB = 1,       // B, or gemv's x, dot's y: read
  kBlasSlotC = 2,       // C, gemv's y, axpy's/copy's y: read and written
  kBlasSlotX = 3,       // scal's x, swap's x and y: read and written
  kBlasSlotAlpha = 4,   // device-mode alpha: read
  kBlasSlotBeta = 5,    // device-mode beta: read
  kBlasSlotResult = 6,  // device-mode reduction result: written
  kBlasSlotInput = 7,   // cuBLASLt's C (its output is D, in slot C): read
  kBlasSlotBias = 8,    // cuBLASLt's bias vector: read
  kBlasSlotBiasGrad = 9,  // cuBLASLt's bias gradient (BGRAD epilogues): written
  kBlasSlotAuxIn = 10,    // cuBLASLt's aux matrix read by DRELU/DGELU
  kBlasSlotAuxOut = 11,   // cuBLASLt's aux matrix written by *_AUX epilogues
  kBlasSlotCount = 12,
};

struct BlasOperand {
  uint32_t slot = 0;
  uint64_t ptr = 0;
  uint64_t bytes = 0;
};

/// The device operands of one call (empty ranges left out).
struct BlasOperands {
  BlasOperand op[10];
  uint32_t count = 0;
  /// The routine may touch device memory its request does not name (the
  /// matrices of a pointer-array batch): its access set is unknown.
  bool unknown = false;
};

// cudaDataType_t values (library_types.h; a stable ABI), for the code that
// must not include the CUDA headers.
inline constexpr int32_t kCudaR32F = 0, kCudaR64F = 1, kCudaR16F = 2, kCudaR8I = 3, kCudaC32F = 4,
                         kCudaC64F = 5, kCudaC16F = 6, kCudaR32I = 10, kCudaR16BF = 14, kCudaC16BF = 15;

/// The row's shape; false when `op` is no cuBLAS row.
bool BlasShapeOf(ApiId op, BlasShape* out);
const char* BlasShapeName(BlasShape shape);
/// Bytes of one element of cudaDataType_t `type`; 0 for a type phos does
/// not know.
uint32_t BlasTypeBytes(int32_t type);
/// Whether `type` is complex.
bool BlasTypeIsComplex(int32_t type);
/// The result type of a real reduction (nrm2, asum) of `type`: the real
/// type of the same precision.
int32_t BlasRealTypeOf(int32_t type);

/// nullptr when `req` is a valid call of `shape`, and then `*out` holds its
/// device operands; otherwise why not (a static string naming the field).
/// Dimensions must be >= 0, leading dimensions >= max(1, rows),
/// increments non-zero, strides and the batch count >= 0, every type known,
/// no extent overflowing 2^62 bytes.
const char* CheckBlas(BlasShape shape, const BlasRequest& req, BlasOperands* out);

// cublasLtEpilogue_t bits (cublasLt.h): every epilogue is a combination.
inline constexpr uint32_t kLtEpilogueDefault = 1, kLtEpilogueRelu = 2, kLtEpilogueBias = 4, kLtEpilogueDRelu = 8,
                          kLtEpilogueBGrad = 16, kLtEpilogueGelu = 32, kLtEpilogueDGelu = 64, kLtEpilogueAux = 128,
                          kLtEpilogueBGradA = 256, kLtEpilogueBGradB = 512;

/// What an epilogue does, decoded from its cublasLtEpilogue_t value.
struct LtEpilogue {
  bool relu = false, gelu = false;    // forward activation
  bool drelu = false, dgelu = false;  // backward: D *= activation'(aux)
  bool bias = false;                  // forward: D += bias (read)
  bool aux_out = false;               // forward: aux = ReLU mask / GELU input
  bool aux_in = false;                // backward: aux read
  bool bgrad = false;                 // bias gradient of D (m elements)
  bool bgrad_a = false, bgrad_b = false;  // bias gradient from op(A) (m) / op(B) (n)
  bool relu_mask() const { return relu || drelu; }
  /// Whether the epilogue writes a bias gradient into the bias pointer.
  bool writes_bias() const { return bgrad || bgrad_a || bgrad_b; }
};
/// False when `e` is no epilogue cuBLASLt defines (all 16 it defines are
/// decoded).
bool DecodeLtEpilogue(uint32_t e, LtEpilogue* out);
/// Whether `e` is an epilogue cuBLASLt defines.
bool LtEpilogueSupported(uint32_t e);
/// As CheckBlas, for cublasLtMatmul: A and B as a gemm's, C read, D (m x n,
/// ldd, stride_d) read and written; the bias (m elements per batch member)
/// read when the epilogue adds one; the bias gradient (m elements, n for
/// BGRADB) written; the aux matrix (m x n: bits, aux_ld a multiple of 128,
/// for ReLU's mask; elements of aux_type, aux_ld a multiple of 8, for
/// GELU's input) written by the *_AUX epilogues, read by DRELU/DGELU.
const char* CheckBlasLt(const BlasLtRequest& req, BlasOperands* out);

}  // namespace phos::wire
