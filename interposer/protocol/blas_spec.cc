#include "protocol/blas_spec.h"

#include <cstdlib>

namespace phos::wire {
namespace {

constexpr unsigned __int128 kMaxExtent = static_cast<unsigned __int128>(1) << 62;

struct Builder {
  BlasOperands* out;
  const char* error = nullptr;

  void Add(uint32_t slot, uint64_t ptr, unsigned __int128 bytes) {
    if (bytes == 0) return;
    out->op[out->count++] = BlasOperand{slot, ptr, static_cast<uint64_t>(bytes)};
  }
};

/// Bytes from the first to the last element of `batch` column-major
/// rows x cols matrices `stride` elements apart. Sets *why when invalid.
bool MatrixExtent(int64_t rows, int64_t cols, int64_t ld, int64_t stride, int64_t batch, uint32_t elem,
                  const char* bad_ld, unsigned __int128* bytes, const char** why) {
  *bytes = 0;
  if (ld < (rows > 1 ? rows : 1)) {
    *why = bad_ld;
    return false;
  }
  if (rows == 0 || cols == 0 || batch == 0) return true;
  unsigned __int128 one = static_cast<unsigned __int128>(cols - 1) * static_cast<uint64_t>(ld) +
                          static_cast<uint64_t>(rows);
  // Each term is below 2^127 (int64 by int64), so the sum fits; compare
  // before scaling by the element size, which could wrap.
  const unsigned __int128 total = one + static_cast<unsigned __int128>(batch - 1) * static_cast<uint64_t>(stride);
  if (total > kMaxExtent / elem) {
    *why = "a matrix extent overflows";
    return false;
  }
  *bytes = total * elem;
  return true;
}

/// Bytes from the first to the last element of `batch` vectors of `n`
/// elements `inc` apart (either sign), `stride` elements between vectors.
bool VectorExtent(int64_t n, int64_t inc, int64_t stride, int64_t batch, uint32_t elem, const char* bad_inc,
                  unsigned __int128* bytes, const char** why) {
  *bytes = 0;
  if (inc == 0 || inc == INT64_MIN) {
    *why = bad_inc;
    return false;
  }
  if (n == 0 || batch == 0) return true;
  unsigned __int128 one = static_cast<unsigned __int128>(n - 1) * static_cast<uint64_t>(std::llabs(inc)) + 1;
  const unsigned __int128 total = one + static_cast<unsigned __int128>(batch - 1) * static_cast<uint64_t>(stride);
  if (total > kMaxExtent / elem) {
    *why = "a vector extent overflows";
    return false;
  }
  *bytes = total * elem;
  return true;
}

bool ValidOp(uint32_t op) { return op <= 2; }

}  // namespace

bool BlasShapeOf(ApiId op, BlasShape* out) {
  switch (op) {
    case op::kBlasGemm: *out = BlasShape::kGemm; return true;
    case op::kBlasGemmBatched: *out = BlasShape::kGemmBatched; return true;
    case op::kBlasGemvBatched: *out = BlasShape::kGemvBatched; return true;
    case op::kBlasTrsmBatched: *out = BlasShape::kTrsmBatched; return true;
    case op::kBlasGetrfBatched: *out = BlasShape::kGetrfBatched; return true;
    case op::kBlasGetrsBatched: *out = BlasShape::kGetrsBatched; return true;
    case op::kBlasGetriBatched: *out = BlasShape::kGetriBatched; return true;
    case op::kBlasGemv: *out = BlasShape::kGemv; return true;
    case op::kBlasGeam: *out = BlasShape::kGeam; return true;
    case op::kBlasTrsm: *out = BlasShape::kTrsm; return true;
    case op::kBlasGer: *out = BlasShape::kGer; return true;
    case op::kBlasSyrk: *out = BlasShape::kSyrk; return true;
    case op::kBlasAxpy: *out = BlasShape::kAxpy; return true;
    case op::kBlasScal: *out = BlasShape::kScal; return true;
    case op::kBlasCopy: *out = BlasShape::kCopy; return true;
    case op::kBlasSwap: *out = BlasShape::kSwap; return true;
    case op::kBlasRot: *out = BlasShape::kRot; return true;
    case op::kBlasDot: *out = BlasShape::kDot; return true;
    case op::kBlasNrm2: *out = BlasShape::kNrm2; return true;
    case op::kBlasAsum: *out = BlasShape::kAsum; return true;
    case op::kBlasIamax: *out = BlasShape::kIamax; return true;
    case op::kBlasIamin: *out = BlasShape::kIamin; return true;
    case op::kBlasLtMatmul: *out = BlasShape::kLtMatmul; return true;
    case op::kBlasSymm: *out = BlasShape::kSymm; return true;
    case op::kBlasSyr2k: *out = BlasShape::kSyr2k; return true;
    case op::kBlasSyrkx: *out = BlasShape::kSyrkx; return true;
    case op::kBlasTrmm: *out = BlasShape::kTrmm; return true;
    case op::kBlasSymv: *out = BlasShape::kSymv; return true;
    case op::kBlasTrmv: *out = BlasShape::kTrmv; return true;
    case op::kBlasTrsv: *out = BlasShape::kTrsv; return true;
    case op::kBlasSyr: *out = BlasShape::kSyr; return true;
    case op::kBlasSyr2: *out = BlasShape::kSyr2; return true;
    case op::kBlasDgmm: *out = BlasShape::kDgmm; return true;
    case op::kBlasGbmv: *out = BlasShape::kGbmv; return true;
    case op::kBlasSbmv: *out = BlasShape::kSbmv; return true;
    case op::kBlasTbmv: *out = BlasShape::kTbmv; return true;
    case op::kBlasTbsv: *out = BlasShape::kTbsv; return true;
    case op::kBlasSpmv: *out = BlasShape::kSpmv; return true;
    case op::kBlasSpr: *out = BlasShape::kSpr; return true;
    case op::kBlasSpr2: *out = BlasShape::kSpr2; return true;
    case op::kBlasTpmv: *out = BlasShape::kTpmv; return true;
    case op::kBlasTpsv: *out = BlasShape::kTpsv; return true;
    default: return false;
  }
}

const char* BlasShapeName(BlasShape shape) {
  switch (shape) {
    case BlasShape::kGemm: return "gemm";
    case BlasShape::kGemmBatched: return "gemm batched";
    case BlasShape::kGemvBatched: return "gemv batched";
    case BlasShape::kTrsmBatched: return "trsm batched";
    case BlasShape::kGetrfBatched: return "getrf batched";
    case BlasShape::kGetrsBatched: return "getrs batched";
    case BlasShape::kGetriBatched: return "getri batched";
    case BlasShape::kGemv: return "gemv";
    case BlasShape::kGeam: return "geam";
    case BlasShape::kTrsm: return "trsm";
    case BlasShape::kGer: return "ger";
    case BlasShape::kSyrk: return "syrk";
    case BlasShape::kAxpy: return "axpy";
    case BlasShape::kScal: return "scal";
    case BlasShape::kCopy: return "copy";
    case BlasShape::kSwap: return "swap";
    case BlasShape::kRot: return "rot";
    case BlasShape::kDot: return "dot";
    case BlasShape::kNrm2: return "nrm2";
    case BlasShape::kAsum: return "asum";
    case BlasShape::kIamax: return "amax";
    case BlasShape::kIamin: return "amin";
    case BlasShape::kLtMatmul: return "Lt matmul";
    case BlasShape::kSymm: return "symm/hemm";
    case BlasShape::kSyr2k: return "syr2k/her2k";
    case BlasShape::kSyrkx: return "syrkx/herkx";
    case BlasShape::kTrmm: return "trmm";
    case BlasShape::kSymv: return "symv/hemv";
    case BlasShape::kTrmv: return "trmv";
    case BlasShape::kTrsv: return "trsv";
    case BlasShape::kSyr: return "syr/her";
    case BlasShape::kSyr2: return "syr2/her2";
    case BlasShape::kDgmm: return "dgmm";
    case BlasShape::kGbmv: return "gbmv";
    case BlasShape::kSbmv: return "sbmv/hbmv";
    case BlasShape::kTbmv: return "tbmv";
    case BlasShape::kTbsv: return "tbsv";
    case BlasShape::kSpmv: return "spmv/hpmv";
    case BlasShape::kSpr: return "spr/hpr";
    case BlasShape::kSpr2: return "spr2/hpr2";
    case BlasShape::kTpmv: return "tpmv";
    case BlasShape::kTpsv: return "tpsv";
  }
  return "?";
}

uint32_t BlasTypeBytes(int32_t type) {
  switch (type) {
    case kCudaR8I: return 1;
    case kCudaR16F: case kCudaR16BF: return 2;
    case kCudaR32F: case kCudaR32I: case kCudaC16F: case kCudaC16BF: return 4;
    case kCudaR64F: case kCudaC32F: return 8;
    case kCudaC64F: return 16;
    default: return 0;
  }
}

bool BlasTypeIsComplex(int32_t type) {
  return type == kCudaC32F || type == kCudaC64F || type == kCudaC16F || type == kCudaC16BF;
}

int32_t BlasRealTypeOf(int32_t type) {
  switch (type) {
    case kCudaC32F: return kCudaR32F;
    case kCudaC64F: return kCudaR64F;
    case kCudaC16F: return kCudaR16F;
    case kCudaC16BF: return kCudaR16BF;
    default: return type;
  }
}

const char* CheckBlas(BlasShape shape, const BlasRequest& req, BlasOperands* out) {
  *out = BlasOperands{};
  Builder b{out};
  const char* why = nullptr;
  const bool device_scalars = (req.flags & kBlasDeviceScalars) != 0;
  if ((req.flags & ~(kBlasDeviceScalars | kBlasConjugate | kBlasSideRight | kBlasUpper | kBlasUnitDiag |
                     kBlasRealAlpha | kBlasRealBeta | kBlasIndex64)) != 0)
    return "unknown flags";
  const uint32_t ea = BlasTypeBytes(req.type_a);
  const uint32_t es = BlasTypeBytes(req.scalar_type);
  if (ea == 0) return "unknown data type of A/x";
  if (es == 0) return "unknown scalar type";
  // Device-mode scalars' extents: herk's, her2k's beta and her's are real.
  const uint32_t es_real = BlasTypeBytes(BlasRealTypeOf(req.scalar_type));
  const uint32_t es_alpha = (req.flags & kBlasRealAlpha) ? es_real : es;
  const uint32_t es_beta = (req.flags & kBlasRealBeta) ? es_real : es;
  unsigned __int128 bytes = 0;
  switch (shape) {
    case BlasShape::kGemmBatched:
    case BlasShape::kGemvBatched:
    case BlasShape::kTrsmBatched: {
      // The dimensions as one member's (each member's extents are checked
      // when its pointers are read); the arrays of `batch` pointers read.
      const BlasShape base = shape == BlasShape::kGemmBatched   ? BlasShape::kGemm
                             : shape == BlasShape::kGemvBatched ? BlasShape::kGemv
                                                                : BlasShape::kTrsm;
      BlasRequest one = req;
      one.batch = req.batch > 0 ? 1 : 0;
      one.stride_a = one.stride_b = one.stride_c = 0;
      one.flags &= ~kBlasDeviceScalars;
      BlasOperands member;
      if (const char* why = CheckBlas(base, one, &member); why != nullptr) return why;
      if (req.batch < 0) return "negative batch count";
      if (static_cast<uint64_t>(req.batch) > (uint64_t{1} << 40)) return "a batch count beyond 2^40";
      const bool empty = req.batch == 0 || req.m == 0 || req.n == 0;
      const uint64_t array = static_cast<uint64_t>(req.batch) * 8;
      b.Add(kBlasSlotA, req.a, array);
      if (base != BlasShape::kTrsm) b.Add(kBlasSlotB, req.b, array);
      b.Add(kBlasSlotInput, req.c, array);
      if (device_scalars && !empty) {
        b.Add(kBlasSlotAlpha, req.alpha_ptr, es_alpha);
        if (base != BlasShape::kTrsm) b.Add(kBlasSlotBeta, req.beta_ptr, es_beta);
      }
      out->unknown = !empty;
      return nullptr;
    }
    case BlasShape::kGetrfBatched:
    case BlasShape::kGetrsBatched:
    case BlasShape::kGetriBatched: {
      // n x n members named by arrays of device pointers (unknown access),
      // the pivot and info arrays contiguous.
      if (req.type_c != req.type_a) return "A and B/C of different types";
      if (req.n < 0 || (shape == BlasShape::kGetrsBatched && req.k < 0)) return "negative dimension";
      if (req.batch < 0) return "negative batch count";
      if (static_cast<uint64_t>(req.batch) > (uint64_t{1} << 40)) return "a batch count beyond 2^40";
      if (req.lda < (req.n > 1 ? req.n : 1)) return "lda smaller than n";
      if (shape != BlasShape::kGetrfBatched && req.ldc < (req.n > 1 ? req.n : 1)) return "ldb/ldc smaller than n";
      if (shape == BlasShape::kGetrsBatched && !ValidOp(req.op_a)) return "invalid transpose operation";
      if (req.n > (int64_t{1} << 31)) return "n beyond 2^31";
      const bool empty = req.batch == 0 || req.n == 0 || (shape == BlasShape::kGetrsBatched && req.k == 0);
      const uint64_t array = static_cast<uint64_t>(req.batch) * 8;
      const uint64_t pivots = static_cast<uint64_t>(req.batch) * static_cast<uint64_t>(req.n) * 4;
      b.Add(kBlasSlotA, req.a, array);
      if (shape != BlasShape::kGetrfBatched) b.Add(kBlasSlotInput, req.c, array);
      if (req.b != 0 && !empty) b.Add(shape == BlasShape::kGetrfBatched ? kBlasSlotResult : kBlasSlotB, req.b, pivots);
      if (shape != BlasShape::kGetrsBatched && req.batch > 0) {
        if (req.result == 0) return "no info array";
        b.Add(kBlasSlotResult, req.result, static_cast<uint64_t>(req.batch) * 4);
      }
      if (shape == BlasShape::kGetrsBatched && req.b == 0) return "no pivot array";
      out->unknown = !empty;
      return nullptr;
    }
    case BlasShape::kGemm:
    case BlasShape::kGemv:
    case BlasShape::kGeam: {
      const uint32_t eb = BlasTypeBytes(req.type_b);
      const uint32_t ec = BlasTypeBytes(req.type_c);
      if (eb == 0) return "unknown data type of B/x";
      if (ec == 0) return "unknown data type of C/y";
      if (!ValidOp(req.op_a) || !ValidOp(req.op_b)) return "invalid transpose operation";
      if (req.m < 0 || req.n < 0 || req.k < 0) return "negative dimension";
      const bool geam = shape == BlasShape::kGeam;
      const int64_t batch = geam ? 1 : req.batch;
      if (batch < 0) return "negative batch count";
      if (req.stride_a < 0 || req.stride_b < 0 || req.stride_c < 0) return "negative stride";
      const bool ta = req.op_a != 0, tb = req.op_b != 0;
      if (shape == BlasShape::kGemm) {
        if (!MatrixExtent(ta ? req.k : req.m, ta ? req.m : req.k, req.lda, req.stride_a, batch, ea,
                          "lda smaller than the rows of A", &bytes, &why)) return why;
        b.Add(kBlasSlotA, req.a, bytes);
        if (!MatrixExtent(tb ? req.n : req.k, tb ? req.k : req.n, req.ldb, req.stride_b, batch, eb,
                          "ldb smaller than the rows of B", &bytes, &why)) return why;
        b.Add(kBlasSlotB, req.b, bytes);
        if (!MatrixExtent(req.m, req.n, req.ldc, req.stride_c, batch, ec, "ldc smaller than m", &bytes, &why))
          return why;
        b.Add(kBlasSlotC, req.c, bytes);
      } else if (shape == BlasShape::kGemv) {
        if (!MatrixExtent(req.m, req.n, req.lda, req.stride_a, batch, ea, "lda smaller than m", &bytes, &why))
          return why;
        b.Add(kBlasSlotA, req.a, bytes);
        const int64_t xlen = ta ? req.m : req.n, ylen = ta ? req.n : req.m;
        if (!VectorExtent(xlen, req.ldb, req.stride_b, batch, eb, "incx is 0", &bytes, &why)) return why;
        b.Add(kBlasSlotB, req.b, bytes);
        if (!VectorExtent(ylen, req.ldc, req.stride_c, batch, ec, "incy is 0", &bytes, &why)) return why;
        b.Add(kBlasSlotC, req.c, bytes);
      } else {
        if (!MatrixExtent(ta ? req.n : req.m, ta ? req.m : req.n, req.lda, 0, 1, ea,
                          "lda smaller than the rows of A", &bytes, &why)) return why;
        b.Add(kBlasSlotA, req.a, bytes);
        if (!MatrixExtent(tb ? req.n : req.m, tb ? req.m : req.n, req.ldb, 0, 1, eb,
                          "ldb smaller than the rows of B", &bytes, &why)) return why;
        b.Add(kBlasSlotB, req.b, bytes);
        if (!MatrixExtent(req.m, req.n, req.ldc, 0, 1, ec, "ldc smaller than m", &bytes, &why)) return why;
        b.Add(kBlasSlotC, req.c, bytes);
      }
      if (device_scalars) {
        b.Add(kBlasSlotAlpha, req.alpha_ptr, es_alpha);
        b.Add(kBlasSlotBeta, req.beta_ptr, es_beta);
      }
      return nullptr;
    }
    case BlasShape::kGer: {
      if (req.type_b != req.type_a || req.type_c != req.type_a) return "x, y and A of different types";
      if (req.m < 0 || req.n < 0) return "negative dimension";
      if (!MatrixExtent(req.m, req.n, req.ldc, 0, 1, ea, "lda smaller than m", &bytes, &why)) return why;
      if (req.m == 0 || req.n == 0) return nullptr;
      b.Add(kBlasSlotC, req.c, bytes);
      if (!VectorExtent(req.m, req.lda, 0, 1, ea, "incx is 0", &bytes, &why)) return why;
      b.Add(kBlasSlotA, req.a, bytes);
      if (!VectorExtent(req.n, req.ldb, 0, 1, ea, "incy is 0", &bytes, &why)) return why;
      b.Add(kBlasSlotB, req.b, bytes);
      if (device_scalars) b.Add(kBlasSlotAlpha, req.alpha_ptr, es_alpha);
      return nullptr;
    }
    case BlasShape::kSyrk: {
      if (req.type_c != req.type_a) return "A and C of different types";
      if (!ValidOp(req.op_a)) return "invalid transpose operation";
      if (req.n < 0 || req.k < 0) return "negative dimension";
      const bool t = req.op_a != 0;
      if (!MatrixExtent(t ? req.k : req.n, t ? req.n : req.k, req.lda, 0, 1, ea, "lda smaller than the rows of A",
                        &bytes, &why))
        return why;
      b.Add(kBlasSlotA, req.a, bytes);
      if (!MatrixExtent(req.n, req.n, req.ldc, 0, 1, ea, "ldc smaller than n", &bytes, &why)) return why;
      b.Add(kBlasSlotC, req.c, bytes);
      if (device_scalars && req.n > 0) {
        b.Add(kBlasSlotAlpha, req.alpha_ptr, es_alpha);
        b.Add(kBlasSlotBeta, req.beta_ptr, es_beta);
      }
      return nullptr;
    }
    case BlasShape::kTrsm: {
      if (BlasTypeBytes(req.type_c) != ea) return "B's type differs from A's";
      if (!ValidOp(req.op_a)) return "invalid transpose operation";
      if (req.m < 0 || req.n < 0) return "negative dimension";
      const int64_t k = (req.flags & kBlasSideRight) ? req.n : req.m;
      if (!MatrixExtent(k, k, req.lda, 0, 1, ea, "lda smaller than the order of A", &bytes, &why)) return why;
      if (req.m > 0 && req.n > 0) b.Add(kBlasSlotA, req.a, bytes);
      if (!MatrixExtent(req.m, req.n, req.ldc, 0, 1, ea, "ldb smaller than m", &bytes, &why)) return why;
      b.Add(kBlasSlotC, req.c, bytes);
      if (device_scalars && req.m > 0 && req.n > 0) b.Add(kBlasSlotAlpha, req.alpha_ptr, es_alpha);
      return nullptr;
    }
    case BlasShape::kAxpy:
    case BlasShape::kScal:
    case BlasShape::kCopy:
    case BlasShape::kSwap:
    case BlasShape::kRot:
    case BlasShape::kDot:
    case BlasShape::kNrm2:
    case BlasShape::kAsum:
    case BlasShape::kIamax:
    case BlasShape::kIamin: {
      if (req.n < 0) return "negative n";
      const bool two_vectors = shape == BlasShape::kAxpy || shape == BlasShape::kCopy ||
                               shape == BlasShape::kSwap || shape == BlasShape::kRot || shape == BlasShape::kDot;
      const uint32_t eb = two_vectors ? BlasTypeBytes(req.type_b) : 1;
      if (eb == 0) return "unknown data type of y";
      // cuBLAS does nothing (and reads no scalar) for n <= 0; a reduction
      // still stores its result.
      if (req.n == 0 && shape != BlasShape::kDot && shape != BlasShape::kNrm2 && shape != BlasShape::kAsum &&
          shape != BlasShape::kIamax && shape != BlasShape::kIamin)
        return nullptr;
      if (!VectorExtent(req.n, req.lda, 0, 1, ea, "incx is 0", &bytes, &why)) return why;
      const unsigned __int128 xbytes = bytes;
      unsigned __int128 ybytes = 0;
      if (two_vectors && !VectorExtent(req.n, req.ldb, 0, 1, eb, "incy is 0", &ybytes, &why)) return why;
      switch (shape) {
        case BlasShape::kAxpy:
        case BlasShape::kCopy:
          b.Add(kBlasSlotA, req.a, xbytes);
          b.Add(kBlasSlotC, req.b, ybytes);
          break;
        case BlasShape::kScal: b.Add(kBlasSlotX, req.a, xbytes); break;
        case BlasShape::kSwap:
        case BlasShape::kRot:
          b.Add(kBlasSlotX, req.a, xbytes);
          b.Add(kBlasSlotX, req.b, ybytes);
          break;
        case BlasShape::kDot:
          b.Add(kBlasSlotA, req.a, xbytes);
          b.Add(kBlasSlotB, req.b, ybytes);
          break;
        default: b.Add(kBlasSlotA, req.a, xbytes); break;
      }
      if (device_scalars) {
        if (shape == BlasShape::kAxpy || shape == BlasShape::kScal || shape == BlasShape::kRot)
          b.Add(kBlasSlotAlpha, req.alpha_ptr, es_alpha);
        if (shape == BlasShape::kRot) b.Add(kBlasSlotBeta, req.beta_ptr, es_beta);
        if (shape == BlasShape::kIamax || shape == BlasShape::kIamin)
          b.Add(kBlasSlotResult, req.result, (req.flags & kBlasIndex64) ? 8 : 4);
        else if (shape == BlasShape::kDot || shape == BlasShape::kNrm2 || shape == BlasShape::kAsum)
          b.Add(kBlasSlotResult, req.result, es);
      }
      return nullptr;
    }
    case BlasShape::kSymm:
    case BlasShape::kSyr2k:
    case BlasShape::kSyrkx:
    case BlasShape::kTrmm:
    case BlasShape::kDgmm: {
      // Level 3 (and dgmm) with one type throughout.
      if (req.type_b != req.type_a || req.type_c != req.type_a) return "A, B and C of different types";
      if (req.m < 0 || req.n < 0 || req.k < 0) return "negative dimension";
      const bool right = (req.flags & kBlasSideRight) != 0;
      int64_t arows = 0, acols = 0, brows = 0, bcols = 0, crows = req.m, ccols = req.n;
      if (shape == BlasShape::kSymm || shape == BlasShape::kTrmm) {
        arows = acols = right ? req.n : req.m;
        brows = req.m;
        bcols = req.n;
        if (shape == BlasShape::kTrmm && !ValidOp(req.op_a)) return "invalid transpose operation";
      } else if (shape == BlasShape::kSyr2k || shape == BlasShape::kSyrkx) {
        if (!ValidOp(req.op_a)) return "invalid transpose operation";
        const bool t = req.op_a != 0;
        arows = brows = t ? req.k : req.n;
        acols = bcols = t ? req.n : req.k;
        crows = ccols = req.n;
      } else {  // dgmm: x is B
        arows = req.m;
        acols = req.n;
      }
      const bool empty = crows == 0 || ccols == 0;
      if (!MatrixExtent(arows, acols, req.lda, 0, 1, ea, "lda smaller than the rows of A", &bytes, &why)) return why;
      if (!empty) b.Add(kBlasSlotA, req.a, bytes);
      if (shape == BlasShape::kDgmm) {
        if (!VectorExtent(right ? req.n : req.m, req.ldb, 0, 1, ea, "incx is 0", &bytes, &why)) return why;
      } else if (!MatrixExtent(brows, bcols, req.ldb, 0, 1, ea, "ldb smaller than the rows of B", &bytes, &why)) {
        return why;
      }
      if (!empty) b.Add(kBlasSlotB, req.b, bytes);
      if (!MatrixExtent(crows, ccols, req.ldc, 0, 1, ea, "ldc smaller than the rows of C", &bytes, &why)) return why;
      b.Add(kBlasSlotC, req.c, bytes);
      if (device_scalars && !empty && shape != BlasShape::kDgmm) {
        b.Add(kBlasSlotAlpha, req.alpha_ptr, es_alpha);
        if (shape != BlasShape::kTrmm) b.Add(kBlasSlotBeta, req.beta_ptr, es_beta);
      }
      return nullptr;
    }
    case BlasShape::kSymv:
    case BlasShape::kTrmv:
    case BlasShape::kTrsv:
    case BlasShape::kSyr:
    case BlasShape::kSyr2: {
      // Level 2 on an n x n symmetric, Hermitian or triangular matrix.
      const bool has_y = shape == BlasShape::kSymv || shape == BlasShape::kSyr2;
      if ((has_y || shape == BlasShape::kSyr) && req.type_c != req.type_a) return "x, y and A of different types";
      if (has_y && req.type_b != req.type_a) return "x, y and A of different types";
      if ((shape == BlasShape::kTrmv || shape == BlasShape::kTrsv) && req.type_c != req.type_a)
        return "x and A of different types";
      if (shape != BlasShape::kSymv && shape != BlasShape::kSyr2 && shape != BlasShape::kSyr && !ValidOp(req.op_a))
        return "invalid transpose operation";
      if (req.n < 0) return "negative n";
      const bool matrix_in_c = shape == BlasShape::kSyr || shape == BlasShape::kSyr2;
      if (!MatrixExtent(req.n, req.n, matrix_in_c ? req.ldc : req.lda, 0, 1, ea, "lda smaller than n", &bytes, &why))
        return why;
      if (req.n == 0) return nullptr;
      b.Add(matrix_in_c ? kBlasSlotC : kBlasSlotA, matrix_in_c ? req.c : req.a, bytes);
      switch (shape) {
        case BlasShape::kSymv:
          if (!VectorExtent(req.n, req.ldb, 0, 1, ea, "incx is 0", &bytes, &why)) return why;
          b.Add(kBlasSlotB, req.b, bytes);
          if (!VectorExtent(req.n, req.ldc, 0, 1, ea, "incy is 0", &bytes, &why)) return why;
          b.Add(kBlasSlotC, req.c, bytes);
          break;
        case BlasShape::kTrmv:
        case BlasShape::kTrsv:
          if (!VectorExtent(req.n, req.ldc, 0, 1, ea, "incx is 0", &bytes, &why)) return why;
          b.Add(kBlasSlotC, req.c, bytes);
          break;
        default:  // syr, syr2: x (and y) read
          if (!VectorExtent(req.n, req.lda, 0, 1, ea, "incx is 0", &bytes, &why)) return why;
          b.Add(kBlasSlotA, req.a, bytes);
          if (shape == BlasShape::kSyr2) {
            if (!VectorExtent(req.n, req.ldb, 0, 1, ea, "incy is 0", &bytes, &why)) return why;
            b.Add(kBlasSlotB, req.b, bytes);
          }
      }
      if (device_scalars && shape != BlasShape::kTrmv && shape != BlasShape::kTrsv) {
        b.Add(kBlasSlotAlpha, req.alpha_ptr, es_alpha);
        if (shape == BlasShape::kSymv) b.Add(kBlasSlotBeta, req.beta_ptr, es_beta);
      }
      return nullptr;
    }
    case BlasShape::kGbmv:
    case BlasShape::kSbmv:
    case BlasShape::kTbmv:
    case BlasShape::kTbsv:
    case BlasShape::kSpmv:
    case BlasShape::kSpr:
    case BlasShape::kSpr2:
    case BlasShape::kTpmv:
    case BlasShape::kTpsv: {
      // Banded and packed level 2, one type throughout.
      const bool gbmv = shape == BlasShape::kGbmv;
      const bool packed = shape == BlasShape::kSpmv || shape == BlasShape::kSpr || shape == BlasShape::kSpr2 ||
                          shape == BlasShape::kTpmv || shape == BlasShape::kTpsv;
      const bool triangular = shape == BlasShape::kTbmv || shape == BlasShape::kTbsv || shape == BlasShape::kTpmv ||
                              shape == BlasShape::kTpsv;
      const bool has_y = shape == BlasShape::kGbmv || shape == BlasShape::kSbmv || shape == BlasShape::kSpmv ||
                         shape == BlasShape::kSpr2;
      const bool rank = shape == BlasShape::kSpr || shape == BlasShape::kSpr2;
      if (req.type_c != req.type_a || (has_y && req.type_b != req.type_a)) return "x, y and A of different types";
      if ((gbmv || triangular) && !ValidOp(req.op_a)) return "invalid transpose operation";
      if (req.n < 0 || (gbmv && req.m < 0)) return "negative dimension";
      const int64_t rows = gbmv ? req.m : req.n;
      if (req.n == 0 || rows == 0) return nullptr;
      // The matrix: band storage (bands x n, lda) or the packed triangle.
      if (packed) {
        const unsigned __int128 elems = static_cast<unsigned __int128>(req.n) * static_cast<uint64_t>(req.n + 1) / 2;
        if (elems > kMaxExtent / ea) return "a matrix extent overflows";
        b.Add(rank ? kBlasSlotC : kBlasSlotA, rank ? req.c : req.a, elems * ea);
      } else {
        if (req.k < 0 || (gbmv && req.stride_a < 0)) return "negative band width";
        const int64_t ku = gbmv ? req.stride_a : 0;
        if (req.k > INT64_MAX / 2 - ku) return "a band width overflows";
        const int64_t bands = req.k + ku + 1;
        if (!MatrixExtent(bands, req.n, req.lda, 0, 1, ea, "lda smaller than the band count", &bytes, &why)) return why;
        b.Add(kBlasSlotA, req.a, bytes);
      }
      const bool t = req.op_a != 0;
      if (triangular) {
        if (!VectorExtent(req.n, req.ldc, 0, 1, ea, "incx is 0", &bytes, &why)) return why;
        b.Add(kBlasSlotC, req.c, bytes);
      } else if (rank) {
        if (!VectorExtent(req.n, req.lda, 0, 1, ea, "incx is 0", &bytes, &why)) return why;
        b.Add(kBlasSlotA, req.a, bytes);
        if (shape == BlasShape::kSpr2) {
          if (!VectorExtent(req.n, req.ldb, 0, 1, ea, "incy is 0", &bytes, &why)) return why;
          b.Add(kBlasSlotB, req.b, bytes);
        }
      } else {  // gbmv, sbmv, spmv: x (b, ldb) read, y (c, ldc) read and written
        if (!VectorExtent(gbmv && !t ? req.n : rows, req.ldb, 0, 1, ea, "incx is 0", &bytes, &why)) return why;
        b.Add(kBlasSlotB, req.b, bytes);
        if (!VectorExtent(gbmv && !t ? rows : req.n, req.ldc, 0, 1, ea, "incy is 0", &bytes, &why)) return why;
        b.Add(kBlasSlotC, req.c, bytes);
      }
      if (device_scalars && !triangular) {
        b.Add(kBlasSlotAlpha, req.alpha_ptr, es_alpha);
        if (!rank) b.Add(kBlasSlotBeta, req.beta_ptr, es_beta);
      }
      return nullptr;
    }
    case BlasShape::kLtMatmul: return "a cuBLASLt matmul is checked by CheckBlasLt";
  }
  return "unknown routine";
}

bool DecodeLtEpilogue(uint32_t e, LtEpilogue* out) {
  *out = LtEpilogue{};
  switch (e) {
    case kLtEpilogueDefault:
    case kLtEpilogueRelu:
    case kLtEpilogueRelu | kLtEpilogueAux:
    case kLtEpilogueBias:
    case kLtEpilogueRelu | kLtEpilogueBias:
    case kLtEpilogueRelu | kLtEpilogueAux | kLtEpilogueBias:
    case kLtEpilogueDRelu | kLtEpilogueAux:
    case kLtEpilogueDRelu | kLtEpilogueAux | kLtEpilogueBGrad:
    case kLtEpilogueGelu:
    case kLtEpilogueGelu | kLtEpilogueAux:
    case kLtEpilogueGelu | kLtEpilogueBias:
    case kLtEpilogueGelu | kLtEpilogueAux | kLtEpilogueBias:
    case kLtEpilogueDGelu | kLtEpilogueAux:
    case kLtEpilogueDGelu | kLtEpilogueAux | kLtEpilogueBGrad:
    case kLtEpilogueBGradA:
    case kLtEpilogueBGradB: break;
    default: return false;
  }
  out->relu = (e & kLtEpilogueRelu) != 0;
  out->gelu = (e & kLtEpilogueGelu) != 0;
  out->drelu = (e & kLtEpilogueDRelu) != 0;
  out->dgelu = (e & kLtEpilogueDGelu) != 0;
  out->bias = (e & kLtEpilogueBias) != 0;
  const bool aux = (e & kLtEpilogueAux) != 0;
  out->aux_out = aux && (out->relu || out->gelu);
  out->aux_in = aux && (out->drelu || out->dgelu);
  out->bgrad = (e & kLtEpilogueBGrad) != 0;
  out->bgrad_a = e == kLtEpilogueBGradA;
  out->bgrad_b = e == kLtEpilogueBGradB;
  return true;
}

bool LtEpilogueSupported(uint32_t e) {
  LtEpilogue decoded;
  return DecodeLtEpilogue(e, &decoded);
}

const char* CheckBlasLt(const BlasLtRequest& req, BlasOperands* out) {
  if (const char* why = CheckBlas(BlasShape::kGemm, req.gemm, out); why != nullptr) return why;
  if (req.reserved != 0 || req.reserved2 != 0) return "reserved field set";
  LtEpilogue ep;
  if (!DecodeLtEpilogue(req.epilogue, &ep)) return "an epilogue cuBLASLt does not define";
  const uint32_t ed = BlasTypeBytes(req.type_d);
  if (ed == 0) return "unknown data type of D";
  // The gemm's C operand is Lt's input C: read only.
  for (uint32_t i = 0; i < out->count; ++i)
    if (out->op[i].slot == kBlasSlotC) out->op[i].slot = kBlasSlotInput;
  Builder b{out};
  const char* why = nullptr;
  unsigned __int128 bytes = 0;
  const BlasRequest& g = req.gemm;
  if (req.stride_d < 0 || req.bias_stride < 0 || req.aux_stride < 0) return "negative stride";
  if (!MatrixExtent(g.m, g.n, req.ldd, req.stride_d, g.batch, ed, "ldd smaller than m", &bytes, &why)) return why;
  b.Add(kBlasSlotC, req.d, bytes);
  if (ep.bias || ep.writes_bias()) {
    const uint32_t eb = BlasTypeBytes(req.bias_type);
    if (eb == 0) return "unknown data type of the bias";
    if (req.bias == 0) return "a bias epilogue without a bias pointer";
    if (!VectorExtent(ep.bgrad_b ? g.n : g.m, 1, req.bias_stride, g.batch, eb, "bias", &bytes, &why)) return why;
    b.Add(ep.bias ? kBlasSlotBias : kBlasSlotBiasGrad, req.bias, bytes);
  }
  if (ep.aux_in || ep.aux_out) {
    if (req.aux == 0) return "an aux epilogue without an aux pointer";
    if (ep.relu_mask()) {
      // One bit per element of D, aux_ld bits per column (cuBLASLt: a
      // multiple of 128, at least m), aux_stride bits per batch member.
      if (req.aux_ld % 128 != 0 || req.aux_stride % 128 != 0)
        return "the ReLU mask's ld or batch stride is not a multiple of 128";
      if (!MatrixExtent(g.m, g.n, req.aux_ld, req.aux_stride, g.batch, 1, "aux ld smaller than m", &bytes, &why))
        return why;
      bytes = (bytes + 7) / 8;
    } else {
      const uint32_t ex = BlasTypeBytes(req.aux_type);
      if (ex == 0) return "unknown data type of the aux matrix";
      if (req.aux_ld % 8 != 0 || req.aux_stride % 8 != 0)
        return "the GELU aux matrix's ld or batch stride is not a multiple of 8";
      if (!MatrixExtent(g.m, g.n, req.aux_ld, req.aux_stride, g.batch, ex, "aux ld smaller than m", &bytes, &why))
        return why;
    }
    b.Add(ep.aux_in ? kBlasSlotAuxIn : kBlasSlotAuxOut, req.aux, bytes);
  }
  return nullptr;
}

}  // namespace phos::wire
