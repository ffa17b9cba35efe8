// The cuBLAS routine specification (interposer/protocol/blas_spec.h): the
// device ranges a routine reads and writes, exact from its dimensions, and
// the requests it refuses — the access sets every C/R protocol relies on
// for library calls, and the checks phosd applies to untrusted requests.
#include "protocol/blas_spec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <limits>

#include "protocol/calls.h"

namespace phos::wire {
namespace {

BlasRequest Gemm(int64_t m, int64_t n, int64_t k, uint32_t op_a, uint32_t op_b, int64_t lda, int64_t ldb,
                 int64_t ldc) {
  BlasRequest r{};
  r.type_a = r.type_b = r.type_c = r.scalar_type = kCudaR32F;
  r.compute = 68;
  r.op_a = op_a;
  r.op_b = op_b;
  r.m = m;
  r.n = n;
  r.k = k;
  r.batch = 1;
  r.a = 0x1000000;
  r.b = 0x2000000;
  r.c = 0x3000000;
  r.lda = lda;
  r.ldb = ldb;
  r.ldc = ldc;
  return r;
}

const BlasOperand* Slot(const BlasOperands& ops, uint32_t slot, int nth = 0) {
  for (uint32_t i = 0; i < ops.count; ++i)
    if (ops.op[i].slot == slot && nth-- == 0) return &ops.op[i];
  return nullptr;
}

TEST(BlasSpec, GemmExtentsFollowTheOperationsAndLeadingDimensions) {
  BlasOperands ops;
  // C = A(5x3, lda 7) B(3x4, ldb 3) into C(5x4, ldc 6): floats.
  ASSERT_EQ(CheckBlas(BlasShape::kGemm, Gemm(5, 4, 3, 0, 0, 7, 3, 6), &ops), nullptr);
  ASSERT_EQ(ops.count, 3u);
  EXPECT_EQ(Slot(ops, kBlasSlotA)->bytes, (2 * 7 + 5) * 4u);   // last column starts at 2*lda
  EXPECT_EQ(Slot(ops, kBlasSlotB)->bytes, (3 * 3 + 3) * 4u);
  EXPECT_EQ(Slot(ops, kBlasSlotC)->bytes, (3 * 6 + 5) * 4u);
  EXPECT_EQ(Slot(ops, kBlasSlotC)->ptr, 0x3000000u);
  // A transposed: A is stored k x m (3 x 5), lda >= 3.
  ASSERT_EQ(CheckBlas(BlasShape::kGemm, Gemm(5, 4, 3, 1, 0, 3, 3, 5), &ops), nullptr);
  EXPECT_EQ(Slot(ops, kBlasSlotA)->bytes, (4 * 3 + 3) * 4u);
  // Strided batched: 3 members, C stride 100 elements, A shared (stride 0).
  BlasRequest r = Gemm(5, 4, 3, 0, 0, 5, 3, 5);
  r.batch = 3;
  r.stride_c = 100;
  ASSERT_EQ(CheckBlas(BlasShape::kGemm, r, &ops), nullptr);
  EXPECT_EQ(Slot(ops, kBlasSlotA)->bytes, (2 * 5 + 5) * 4u);
  EXPECT_EQ(Slot(ops, kBlasSlotC)->bytes, (2 * 100 + 3 * 5 + 5) * 4u);
  // Device-mode scalars are read operands of the scalar's size.
  r.flags = kBlasDeviceScalars;
  r.alpha_ptr = 0x4000000;
  r.beta_ptr = 0x4000004;
  ASSERT_EQ(CheckBlas(BlasShape::kGemm, r, &ops), nullptr);
  EXPECT_EQ(Slot(ops, kBlasSlotAlpha)->bytes, 4u);
  EXPECT_EQ(Slot(ops, kBlasSlotBeta)->ptr, 0x4000004u);
  // An empty product touches nothing; k == 0 still scales C.
  ASSERT_EQ(CheckBlas(BlasShape::kGemm, Gemm(0, 4, 3, 0, 0, 1, 3, 1), &ops), nullptr);
  EXPECT_EQ(Slot(ops, kBlasSlotC), nullptr);
  ASSERT_EQ(CheckBlas(BlasShape::kGemm, Gemm(2, 2, 0, 0, 0, 2, 1, 2), &ops), nullptr);
  EXPECT_EQ(Slot(ops, kBlasSlotA), nullptr);
  EXPECT_EQ(Slot(ops, kBlasSlotC)->bytes, 16u);
}

// Pointer-array batches name their matrices only in device memory: the
// arrays are read, the access set is unknown (the whole session).
TEST(BlasSpec, PointerArrayBatchesReadTheArraysAndAreUnknown) {
  BlasRequest r = Gemm(5, 4, 3, 0, 0, 5, 3, 5);
  r.batch = 7;
  BlasOperands ops;
  ASSERT_EQ(CheckBlas(BlasShape::kGemmBatched, r, &ops), nullptr);
  EXPECT_TRUE(ops.unknown);
  EXPECT_EQ(Slot(ops, kBlasSlotA)->bytes, 7 * 8u);
  EXPECT_EQ(Slot(ops, kBlasSlotInput)->bytes, 7 * 8u);  // C's array: read (its matrices are written)
  EXPECT_EQ(Slot(ops, kBlasSlotC), nullptr);
  r.lda = 2;
  EXPECT_STREQ(CheckBlas(BlasShape::kGemmBatched, r, &ops), "lda smaller than the rows of A");
  r = Gemm(5, 4, 3, 0, 0, 5, 3, 5);
  r.batch = 0;
  ASSERT_EQ(CheckBlas(BlasShape::kGemmBatched, r, &ops), nullptr);
  EXPECT_FALSE(ops.unknown);  // nothing to do: nothing touched
  EXPECT_EQ(ops.count, 0u);
}

TEST(BlasSpec, VectorExtentsUseTheIncrementsEitherSign) {
  BlasRequest r{};
  r.type_a = r.type_b = r.scalar_type = kCudaR64F;
  r.n = 10;
  r.a = 0x1000;
  r.b = 0x8000;
  r.lda = 3;
  r.ldb = -2;
  BlasOperands ops;
  ASSERT_EQ(CheckBlas(BlasShape::kAxpy, r, &ops), nullptr);
  EXPECT_EQ(Slot(ops, kBlasSlotA)->bytes, (9 * 3 + 1) * 8u);   // x read
  EXPECT_EQ(Slot(ops, kBlasSlotC)->bytes, (9 * 2 + 1) * 8u);   // y read and written
  ASSERT_EQ(CheckBlas(BlasShape::kSwap, r, &ops), nullptr);
  ASSERT_NE(Slot(ops, kBlasSlotX, 1), nullptr);                // both read and written
  ASSERT_EQ(CheckBlas(BlasShape::kDot, r, &ops), nullptr);
  EXPECT_EQ(Slot(ops, kBlasSlotC), nullptr);                   // nothing written in host mode
  r.flags = kBlasDeviceScalars;
  r.result = 0x9000;
  ASSERT_EQ(CheckBlas(BlasShape::kDot, r, &ops), nullptr);
  EXPECT_EQ(Slot(ops, kBlasSlotResult)->bytes, 8u);
  ASSERT_EQ(CheckBlas(BlasShape::kIamax, r, &ops), nullptr);
  EXPECT_EQ(Slot(ops, kBlasSlotResult)->bytes, 4u);            // an int
  // gemv: x and y lengths swap with the transpose.
  BlasRequest g{};
  g.type_a = g.type_b = g.type_c = g.scalar_type = kCudaC32F;
  g.m = 4;
  g.n = 6;
  g.batch = 1;
  g.lda = 4;
  g.ldb = 1;
  g.ldc = 2;
  ASSERT_EQ(CheckBlas(BlasShape::kGemv, g, &ops), nullptr);
  EXPECT_EQ(Slot(ops, kBlasSlotB)->bytes, 6 * 8u);
  EXPECT_EQ(Slot(ops, kBlasSlotC)->bytes, (3 * 2 + 1) * 8u);
  g.op_a = 1;
  ASSERT_EQ(CheckBlas(BlasShape::kGemv, g, &ops), nullptr);
  EXPECT_EQ(Slot(ops, kBlasSlotB)->bytes, 4 * 8u);
  EXPECT_EQ(Slot(ops, kBlasSlotC)->bytes, (5 * 2 + 1) * 8u);
}

TEST(BlasSpec, TrsmReadsTheTriangleOrderAndWritesB) {
  BlasRequest r{};
  r.type_a = r.type_c = r.scalar_type = kCudaR64F;
  r.m = 6;
  r.n = 3;
  r.a = 0x1000;
  r.c = 0x9000;
  r.lda = 6;
  r.ldc = 8;
  BlasOperands ops;
  ASSERT_EQ(CheckBlas(BlasShape::kTrsm, r, &ops), nullptr);
  EXPECT_EQ(Slot(ops, kBlasSlotA)->bytes, (5 * 6 + 6) * 8u);  // A is m x m on the left
  EXPECT_EQ(Slot(ops, kBlasSlotC)->bytes, (2 * 8 + 6) * 8u);
  r.flags = kBlasSideRight | kBlasUpper | kBlasUnitDiag;
  EXPECT_STREQ(CheckBlas(BlasShape::kTrsm, r, &ops), nullptr);  // n x n = 3 x 3 fits lda 6
  EXPECT_EQ(Slot(ops, kBlasSlotA)->bytes, (2 * 6 + 3) * 8u);
  r.flags = 0;
  r.lda = 5;
  EXPECT_STREQ(CheckBlas(BlasShape::kTrsm, r, &ops), "lda smaller than the order of A");
}

TEST(BlasSpec, GerAndSyrkExtents) {
  BlasRequest g{};
  g.type_a = g.type_b = g.type_c = g.scalar_type = kCudaR32F;
  g.m = 5;
  g.n = 3;
  g.a = 0x1000;  // x, incx 2
  g.lda = 2;
  g.b = 0x2000;  // y, incy 1
  g.ldb = 1;
  g.c = 0x3000;  // A, lda 7
  g.ldc = 7;
  BlasOperands ops;
  ASSERT_EQ(CheckBlas(BlasShape::kGer, g, &ops), nullptr);
  EXPECT_EQ(Slot(ops, kBlasSlotA)->bytes, (4 * 2 + 1) * 4u);
  EXPECT_EQ(Slot(ops, kBlasSlotB)->bytes, 3 * 4u);
  EXPECT_EQ(Slot(ops, kBlasSlotC)->bytes, (2 * 7 + 5) * 4u);  // A: read and written
  g.ldc = 4;
  EXPECT_STREQ(CheckBlas(BlasShape::kGer, g, &ops), "lda smaller than m");
  BlasRequest k{};
  k.type_a = k.type_c = k.scalar_type = kCudaR64F;
  k.n = 6;
  k.k = 4;
  k.op_a = 1;  // A is k x n
  k.a = 0x1000;
  k.lda = 4;
  k.c = 0x9000;
  k.ldc = 6;
  ASSERT_EQ(CheckBlas(BlasShape::kSyrk, k, &ops), nullptr);
  EXPECT_EQ(Slot(ops, kBlasSlotA)->bytes, (5 * 4 + 4) * 8u);
  EXPECT_EQ(Slot(ops, kBlasSlotC)->bytes, (5 * 6 + 6) * 8u);
  k.op_a = 0;  // now A is n x k: lda 4 < 6
  EXPECT_STREQ(CheckBlas(BlasShape::kSyrk, k, &ops), "lda smaller than the rows of A");
}

TEST(BlasSpec, InvalidRequestsAreRefusedByName) {
  BlasOperands ops;
  EXPECT_STREQ(CheckBlas(BlasShape::kGemm, Gemm(8, 4, 4, 0, 0, 4, 4, 8), &ops), "lda smaller than the rows of A");
  EXPECT_STREQ(CheckBlas(BlasShape::kGemm, Gemm(4, 4, 4, 0, 0, 4, 4, 3), &ops), "ldc smaller than m");
  EXPECT_STREQ(CheckBlas(BlasShape::kGemm, Gemm(-1, 4, 4, 0, 0, 4, 4, 4), &ops), "negative dimension");
  EXPECT_STREQ(CheckBlas(BlasShape::kGemm, Gemm(4, 4, 4, 3, 0, 4, 4, 4), &ops), "invalid transpose operation");
  BlasRequest r = Gemm(4, 4, 4, 0, 0, 4, 4, 4);
  r.type_b = 99;
  EXPECT_STREQ(CheckBlas(BlasShape::kGemm, r, &ops), "unknown data type of B/x");
  r = Gemm(4, 4, 4, 0, 0, 4, 4, 4);
  r.flags = 0x100;  // (the flags defined end at kBlasIndex64, 0x80)
  EXPECT_STREQ(CheckBlas(BlasShape::kGemm, r, &ops), "unknown flags");
  r = Gemm(4, 4, 4, 0, 0, 4, 4, 4);
  r.batch = -2;
  EXPECT_STREQ(CheckBlas(BlasShape::kGemm, r, &ops), "negative batch count");
  // Extents that would overflow (an untrusted request) are refused, not wrapped.
  const int64_t big = std::numeric_limits<int64_t>::max() / 2;
  EXPECT_STREQ(CheckBlas(BlasShape::kGemm, Gemm(big, big, 1, 0, 0, big, 1, big), &ops), "a matrix extent overflows");
  // ... also where only the element size would wrap 128 bits.
  r = Gemm(2, 2, 2, 0, 0, 2, 2, std::numeric_limits<int64_t>::max());
  r.type_a = r.type_b = r.type_c = r.scalar_type = kCudaC64F;
  r.batch = std::numeric_limits<int64_t>::max();
  r.stride_c = std::numeric_limits<int64_t>::max();
  EXPECT_STREQ(CheckBlas(BlasShape::kGemm, r, &ops), "a matrix extent overflows");
  BlasRequest v{};
  v.type_a = v.scalar_type = kCudaR32F;
  v.n = 4;
  v.lda = 0;
  EXPECT_STREQ(CheckBlas(BlasShape::kScal, v, &ops), "incx is 0");
  v.lda = std::numeric_limits<int64_t>::min();
  EXPECT_STREQ(CheckBlas(BlasShape::kScal, v, &ops), "incx is 0");
  v.lda = 1;
  v.n = big;
  EXPECT_STREQ(CheckBlas(BlasShape::kScal, v, &ops), "a vector extent overflows");
}

TEST(BlasSpec, EveryCublasRowHasAShape) {
  int rows = 0;
  for (const CallRow& row : kCalls) {
    BlasShape shape{};
    const bool blas = BlasShapeOf(row.id, &shape);
    EXPECT_EQ(blas, row.access == AccessRule::kBlas) << row.op;
    rows += blas ? 1 : 0;
  }
  EXPECT_EQ(rows, 42);  // (the probe row is not a routine)
}

TEST(BlasSpec, LtMatmulReadsCWritesDAndReadsTheBias) {
  BlasLtRequest r{};
  r.gemm = Gemm(6, 5, 4, 0, 0, 6, 4, 6);
  r.gemm.batch = 2;
  r.gemm.stride_a = 24;
  r.gemm.stride_b = 20;
  r.gemm.stride_c = 30;
  r.d = 0x5000000;
  r.ldd = 8;
  r.stride_d = 40;
  r.type_d = kCudaR32F;
  r.epilogue = kLtEpilogueRelu | kLtEpilogueBias;
  r.bias = 0x6000000;
  r.bias_type = kCudaR16F;
  r.bias_stride = 6;
  BlasOperands ops;
  ASSERT_EQ(CheckBlasLt(r, &ops), nullptr);
  EXPECT_EQ(Slot(ops, kBlasSlotInput)->ptr, 0x3000000u);       // C: read only
  EXPECT_EQ(Slot(ops, kBlasSlotInput)->bytes, (30 + 4 * 6 + 6) * 4u);
  EXPECT_EQ(Slot(ops, kBlasSlotC)->ptr, 0x5000000u);           // D: written
  EXPECT_EQ(Slot(ops, kBlasSlotC)->bytes, (40 + 4 * 8 + 6) * 4u);
  EXPECT_EQ(Slot(ops, kBlasSlotBias)->bytes, (6 + 6) * 2u);    // m halves per batch member
  r.epilogue = 8;  // DRELU without its aux bit: no epilogue cuBLASLt defines
  EXPECT_STREQ(CheckBlasLt(r, &ops), "an epilogue cuBLASLt does not define");
  r.epilogue = kLtEpilogueBias;
  r.bias = 0;
  EXPECT_STREQ(CheckBlasLt(r, &ops), "a bias epilogue without a bias pointer");
  r.epilogue = kLtEpilogueDefault;
  r.ldd = 5;
  EXPECT_STREQ(CheckBlasLt(r, &ops), "ldd smaller than m");
}

TEST(BlasSpec, SymmetricAndTriangularExtents) {
  BlasOperands ops;
  // symm, right side: A is n x n (n 4, lda 6), B and C m x n (m 5).
  BlasRequest r = Gemm(5, 4, 0, 0, 0, 6, 7, 8);
  r.flags = kBlasSideRight | kBlasUpper;
  ASSERT_EQ(CheckBlas(BlasShape::kSymm, r, &ops), nullptr);
  EXPECT_EQ(Slot(ops, kBlasSlotA)->bytes, (3 * 6 + 4) * 4u);
  EXPECT_EQ(Slot(ops, kBlasSlotB)->bytes, (3 * 7 + 5) * 4u);
  EXPECT_EQ(Slot(ops, kBlasSlotC)->bytes, (3 * 8 + 5) * 4u);
  r.lda = 3;  // below the order of A
  EXPECT_STREQ(CheckBlas(BlasShape::kSymm, r, &ops), "lda smaller than the rows of A");
  // syr2k, transposed: A and B k x n (k 3, n 4), C n x n.
  r = Gemm(0, 4, 3, 1, 0, 3, 3, 5);
  ASSERT_EQ(CheckBlas(BlasShape::kSyr2k, r, &ops), nullptr);
  EXPECT_EQ(Slot(ops, kBlasSlotA)->bytes, (3 * 3 + 3) * 4u);
  EXPECT_EQ(Slot(ops, kBlasSlotB)->bytes, (3 * 3 + 3) * 4u);
  EXPECT_EQ(Slot(ops, kBlasSlotC)->bytes, (3 * 5 + 4) * 4u);
  // herk's real scalars in device memory: 4-byte extents for complex float.
  r = Gemm(0, 4, 3, 0, 0, 4, 0, 4);
  r.type_a = r.type_b = r.type_c = r.scalar_type = kCudaC32F;
  r.flags = kBlasConjugate | kBlasRealAlpha | kBlasRealBeta | kBlasDeviceScalars;
  r.op_a = 2;
  r.lda = 3;
  r.alpha_ptr = 0x9000;
  r.beta_ptr = 0x9004;
  ASSERT_EQ(CheckBlas(BlasShape::kSyrk, r, &ops), nullptr);
  EXPECT_EQ(Slot(ops, kBlasSlotAlpha)->bytes, 4u);
  EXPECT_EQ(Slot(ops, kBlasSlotBeta)->bytes, 4u);
  // trmv: x (c, incx) read and written, A n x n; an incx of 0 refused.
  r = Gemm(0, 6, 0, 0, 0, 7, 0, 2);
  ASSERT_EQ(CheckBlas(BlasShape::kTrmv, r, &ops), nullptr);
  EXPECT_EQ(Slot(ops, kBlasSlotA)->bytes, (5 * 7 + 6) * 4u);
  EXPECT_EQ(Slot(ops, kBlasSlotC)->bytes, (5 * 2 + 1) * 4u);
  r.ldc = 0;
  EXPECT_STREQ(CheckBlas(BlasShape::kTrsv, r, &ops), "incx is 0");
  // syr2: A in (c, ldc), x (a, incx) and y (b, incy) read.
  r = Gemm(0, 3, 0, 0, 0, 2, 1, 3);
  ASSERT_EQ(CheckBlas(BlasShape::kSyr2, r, &ops), nullptr);
  EXPECT_EQ(Slot(ops, kBlasSlotC)->bytes, (2 * 3 + 3) * 4u);
  EXPECT_EQ(Slot(ops, kBlasSlotA)->bytes, (2 * 2 + 1) * 4u);
  EXPECT_EQ(Slot(ops, kBlasSlotB)->bytes, 3 * 4u);
  // dgmm, left: x is m long.
  r = Gemm(5, 2, 0, 0, 0, 5, 3, 5);
  ASSERT_EQ(CheckBlas(BlasShape::kDgmm, r, &ops), nullptr);
  EXPECT_EQ(Slot(ops, kBlasSlotB)->bytes, (4 * 3 + 1) * 4u);
  r.flags = kBlasSideRight;  // n long
  ASSERT_EQ(CheckBlas(BlasShape::kDgmm, r, &ops), nullptr);
  EXPECT_EQ(Slot(ops, kBlasSlotB)->bytes, (1 * 3 + 1) * 4u);
}

TEST(BlasSpec, BandedAndPackedExtents) {
  BlasOperands ops;
  // gbmv, transposed: A's band storage (kl 2 + ku 1 + 1 = 4 rows) x n 6,
  // lda 5; x is m (7) long, y n (6).
  BlasRequest r = Gemm(7, 6, 2, 1, 0, 5, 2, 1);
  r.stride_a = 1;  // ku
  ASSERT_EQ(CheckBlas(BlasShape::kGbmv, r, &ops), nullptr);
  EXPECT_EQ(Slot(ops, kBlasSlotA)->bytes, (5 * 5 + 4) * 4u);
  EXPECT_EQ(Slot(ops, kBlasSlotB)->bytes, (6 * 2 + 1) * 4u);
  EXPECT_EQ(Slot(ops, kBlasSlotC)->bytes, 6 * 4u);
  r.lda = 3;  // below the band count
  EXPECT_STREQ(CheckBlas(BlasShape::kGbmv, r, &ops), "lda smaller than the band count");
  r.lda = 5;
  r.stride_a = -1;
  EXPECT_STREQ(CheckBlas(BlasShape::kGbmv, r, &ops), "negative band width");
  // spmv: the packed triangle of n 6 is 21 elements; x (b) and y (c).
  r = Gemm(0, 6, 0, 0, 0, 1, 1, 3);
  ASSERT_EQ(CheckBlas(BlasShape::kSpmv, r, &ops), nullptr);
  EXPECT_EQ(Slot(ops, kBlasSlotA)->bytes, 21 * 4u);
  EXPECT_EQ(Slot(ops, kBlasSlotC)->bytes, (5 * 3 + 1) * 4u);
  // spr: the packed triangle is written (slot C), x read (slot A).
  r = Gemm(0, 4, 0, 0, 0, 2, 1, 1);
  ASSERT_EQ(CheckBlas(BlasShape::kSpr, r, &ops), nullptr);
  EXPECT_EQ(Slot(ops, kBlasSlotC)->bytes, 10 * 4u);
  EXPECT_EQ(Slot(ops, kBlasSlotA)->bytes, (3 * 2 + 1) * 4u);
  // tbsv: A (k 3 + 1 rows) x n 5, x (c) read and written.
  r = Gemm(0, 5, 3, 0, 0, 4, 0, 1);
  ASSERT_EQ(CheckBlas(BlasShape::kTbsv, r, &ops), nullptr);
  EXPECT_EQ(Slot(ops, kBlasSlotA)->bytes, (4 * 4 + 4) * 4u);
  EXPECT_EQ(Slot(ops, kBlasSlotC)->bytes, 5 * 4u);
  // A packed triangle whose extent overflows is refused.
  r = Gemm(0, int64_t{1} << 31, 0, 0, 0, 1, 1, 1);
  EXPECT_STREQ(CheckBlas(BlasShape::kTpmv, r, &ops), "a matrix extent overflows");
}

TEST(BlasSpec, BatchedLuNamesItsArrays) {
  BlasOperands ops;
  // getrf over 3 matrices of order 4: the pointer array read, pivots
  // (3 x 4 ints) and info (3 ints) written, the matrices unknown.
  BlasRequest r = Gemm(0, 4, 0, 0, 0, 4, 0, 1);
  r.batch = 3;
  r.b = 0x7000;
  r.result = 0x8000;
  ASSERT_EQ(CheckBlas(BlasShape::kGetrfBatched, r, &ops), nullptr);
  EXPECT_TRUE(ops.unknown);
  EXPECT_EQ(Slot(ops, kBlasSlotA)->bytes, 3 * 8u);
  EXPECT_EQ(Slot(ops, kBlasSlotResult, 0)->bytes, 3 * 4 * 4u);  // pivots
  EXPECT_EQ(Slot(ops, kBlasSlotResult, 1)->bytes, 3 * 4u);      // info
  r.result = 0;
  EXPECT_STREQ(CheckBlas(BlasShape::kGetrfBatched, r, &ops), "no info array");
  // getrs: pivots read, the B array (c) read; no pivots refused.
  r = Gemm(0, 4, 2, 0, 0, 4, 0, 4);
  r.batch = 3;
  r.b = 0x7000;
  ASSERT_EQ(CheckBlas(BlasShape::kGetrsBatched, r, &ops), nullptr);
  EXPECT_EQ(Slot(ops, kBlasSlotB)->bytes, 3 * 4 * 4u);
  EXPECT_EQ(Slot(ops, kBlasSlotInput)->bytes, 3 * 8u);
  r.b = 0;
  EXPECT_STREQ(CheckBlas(BlasShape::kGetrsBatched, r, &ops), "no pivot array");
  r.b = 0x7000;
  r.ldc = 3;
  EXPECT_STREQ(CheckBlas(BlasShape::kGetrsBatched, r, &ops), "ldb/ldc smaller than n");
}

TEST(BlasSpec, EveryCublasLtEpilogueDecodes) {
  // The 16 values of cublasLtEpilogue_t (cublasLt.h); nothing else.
  const uint32_t defined[] = {1, 2, 130, 4, 6, 134, 136, 152, 32, 160, 36, 164, 192, 208, 256, 512};
  int count = 0;
  for (uint32_t e = 0; e < 1024; ++e) {
    LtEpilogue ep;
    const bool ok = DecodeLtEpilogue(e, &ep);
    EXPECT_EQ(ok, std::find(std::begin(defined), std::end(defined), e) != std::end(defined)) << e;
    count += ok ? 1 : 0;
  }
  EXPECT_EQ(count, 16);
  LtEpilogue ep;
  ASSERT_TRUE(DecodeLtEpilogue(152, &ep));  // DRELU_BGRAD
  EXPECT_TRUE(ep.drelu && ep.aux_in && ep.bgrad && !ep.aux_out && !ep.bias && ep.writes_bias());
  ASSERT_TRUE(DecodeLtEpilogue(164, &ep));  // GELU_AUX_BIAS
  EXPECT_TRUE(ep.gelu && ep.aux_out && ep.bias && !ep.aux_in && !ep.writes_bias() && !ep.relu_mask());
  ASSERT_TRUE(DecodeLtEpilogue(512, &ep));  // BGRADB
  EXPECT_TRUE(ep.bgrad_b && ep.writes_bias() && !ep.bias);
}

TEST(BlasSpec, LtAuxAndBiasGradientExtents) {
  BlasLtRequest r{};
  r.gemm = Gemm(6, 5, 4, 0, 0, 6, 4, 6);  // m 6, n 5, k 4
  r.gemm.batch = 2;
  r.gemm.stride_a = 24;
  r.gemm.stride_b = 20;
  r.gemm.stride_c = 30;
  r.d = 0x5000000;
  r.ldd = 6;
  r.stride_d = 30;
  r.type_d = kCudaR32F;
  r.bias = 0x6000000;
  r.bias_type = kCudaR32F;
  r.bias_stride = 8;
  r.aux = 0x7000000;
  r.aux_ld = 128;       // bits
  r.aux_stride = 1024;  // bits
  r.aux_type = -1;
  BlasOperands ops;
  r.epilogue = kLtEpilogueRelu | kLtEpilogueAux | kLtEpilogueBias;  // RELU_AUX_BIAS: bias read, mask written
  ASSERT_EQ(CheckBlasLt(r, &ops), nullptr);
  EXPECT_EQ(Slot(ops, kBlasSlotBias)->bytes, (8 + 6) * 4u);
  EXPECT_EQ(Slot(ops, kBlasSlotAuxOut)->ptr, 0x7000000u);
  EXPECT_EQ(Slot(ops, kBlasSlotAuxOut)->bytes, (1024 + 4 * 128 + 6 + 7) / 8u);  // bits, rounded up to bytes
  EXPECT_EQ(Slot(ops, kBlasSlotAuxIn), nullptr);
  r.epilogue = kLtEpilogueDRelu | kLtEpilogueAux | kLtEpilogueBGrad;  // DRELU_BGRAD: mask read, gradient written
  ASSERT_EQ(CheckBlasLt(r, &ops), nullptr);
  EXPECT_EQ(Slot(ops, kBlasSlotAuxIn)->bytes, (1024 + 4 * 128 + 6 + 7) / 8u);
  EXPECT_EQ(Slot(ops, kBlasSlotBiasGrad)->bytes, (8 + 6) * 4u);
  EXPECT_EQ(Slot(ops, kBlasSlotBias), nullptr);
  r.aux_ld = 64;  // cuBLASLt: a multiple of 128 bits
  EXPECT_STREQ(CheckBlasLt(r, &ops), "the ReLU mask's ld or batch stride is not a multiple of 128");
  r.epilogue = kLtEpilogueGelu | kLtEpilogueAux;  // GELU_AUX: aux of aux_type, ld in elements
  r.aux_ld = 8;
  r.aux_stride = 48;
  r.aux_type = kCudaR16F;
  ASSERT_EQ(CheckBlasLt(r, &ops), nullptr);
  EXPECT_EQ(Slot(ops, kBlasSlotAuxOut)->bytes, (48 + 4 * 8 + 6) * 2u);
  r.aux_ld = 12;
  EXPECT_STREQ(CheckBlasLt(r, &ops), "the GELU aux matrix's ld or batch stride is not a multiple of 8");
  r.aux_ld = 8;
  r.aux = 0;
  EXPECT_STREQ(CheckBlasLt(r, &ops), "an aux epilogue without an aux pointer");
  r.epilogue = kLtEpilogueBGradB;  // n elements of gradient per member
  ASSERT_EQ(CheckBlasLt(r, &ops), nullptr);
  EXPECT_EQ(Slot(ops, kBlasSlotBiasGrad)->bytes, (8 + 5) * 4u);
  r.epilogue = kLtEpilogueBGradA;  // m
  ASSERT_EQ(CheckBlasLt(r, &ops), nullptr);
  EXPECT_EQ(Slot(ops, kBlasSlotBiasGrad)->bytes, (8 + 6) * 4u);
}

}  // namespace
}  // namespace phos::wire
