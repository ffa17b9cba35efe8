// What the sim's cuBLAS files share (sim_blas.cc: gemm, level 1, cuBLASLt;
// sim_blas_symmetric.cc: the symmetric, Hermitian and triangular
// routines): type constants, scalar reading, element widening, cblas
// enums. Inline, stateless.
#pragma once

#include <cblas.h>

#include <complex>
#include <cstdint>
#include <cstring>
#include <string>

#include "backend/blas_call.h"
#include "common/status.h"
#include "interp/numeric.h"

namespace phos::backend::sim::blas_internal {

// cudaDataType_t values (library_types.h).
constexpr std::int32_t kR32F = 0, kR64F = 1, kR16F = 2, kR8I = 3, kC32F = 4, kC64F = 5, kR32I = 10, kR16BF = 14;

using cf = std::complex<float>;
using cd = std::complex<double>;

inline const char* OpName(BlasOp op) {
  switch (op) {
    case BlasOp::kGemm: return "gemm";
    case BlasOp::kGemmBatched: return "gemm batched";
    case BlasOp::kGemvBatched: return "gemv batched";
    case BlasOp::kTrsmBatched: return "trsm batched";
    case BlasOp::kGetrfBatched: return "getrf batched";
    case BlasOp::kGetrsBatched: return "getrs batched";
    case BlasOp::kGetriBatched: return "getri batched";
    case BlasOp::kGemv: return "gemv";
    case BlasOp::kGeam: return "geam";
    case BlasOp::kTrsm: return "trsm";
    case BlasOp::kGer: return "ger";
    case BlasOp::kSyrk: return "syrk";
    case BlasOp::kAxpy: return "axpy";
    case BlasOp::kScal: return "scal";
    case BlasOp::kCopy: return "copy";
    case BlasOp::kSwap: return "swap";
    case BlasOp::kRot: return "rot";
    case BlasOp::kDot: return "dot";
    case BlasOp::kNrm2: return "nrm2";
    case BlasOp::kAsum: return "asum";
    case BlasOp::kIamax: return "amax";
    case BlasOp::kIamin: return "amin";
    case BlasOp::kLtMatmul: return "Lt matmul";
    case BlasOp::kSymm: return "symm/hemm";
    case BlasOp::kSyr2k: return "syr2k/her2k";
    case BlasOp::kSyrkx: return "syrkx/herkx";
    case BlasOp::kTrmm: return "trmm";
    case BlasOp::kSymv: return "symv/hemv";
    case BlasOp::kTrmv: return "trmv";
    case BlasOp::kTrsv: return "trsv";
    case BlasOp::kSyr: return "syr/her";
    case BlasOp::kSyr2: return "syr2/her2";
    case BlasOp::kDgmm: return "dgmm";
    case BlasOp::kGbmv: return "gbmv";
    case BlasOp::kSbmv: return "sbmv/hbmv";
    case BlasOp::kTbmv: return "tbmv";
    case BlasOp::kTbsv: return "tbsv";
    case BlasOp::kSpmv: return "spmv/hpmv";
    case BlasOp::kSpr: return "spr/hpr";
    case BlasOp::kSpr2: return "spr2/hpr2";
    case BlasOp::kTpmv: return "tpmv";
    case BlasOp::kTpsv: return "tpsv";
  }
  return "?";
}

inline Status Unsupported(const BlasCall& c) {
  return Status::NotSupported(std::string("cuBLAS ") + OpName(c.op) + " with data types A/x=" +
                              std::to_string(c.type_a) + " B/y=" + std::to_string(c.type_b) +
                              " C=" + std::to_string(c.type_c) + " scalar=" + std::to_string(c.scalar_type) +
                              " (cudaDataType_t) is not computed by the sim backend");
}

inline std::size_t ElementBytes(std::int32_t type) {
  switch (type) {
    case kR8I: return 1;
    case kR16F: case kR16BF: return 2;
    case kR32F: case kR32I: return 4;
    case kR64F: case kC32F: return 8;
    case kC64F: return 16;
    default: return 0;
  }
}

/// A scalar (alpha, beta) as a complex double, from its bytes in `type`.
inline cd ReadScalar(const unsigned char* p, std::int32_t type) {
  switch (type) {
    case kR32F: { float v; std::memcpy(&v, p, 4); return v; }
    case kR64F: { double v; std::memcpy(&v, p, 8); return v; }
    case kR16F: { std::uint16_t h; std::memcpy(&h, p, 2); return interp::HalfToFloat(h); }
    case kR16BF: { std::uint16_t h; std::memcpy(&h, p, 2); return interp::Bf16ToFloat(h); }
    case kC32F: { float v[2]; std::memcpy(v, p, 8); return {v[0], v[1]}; }
    case kC64F: { double v[2]; std::memcpy(v, p, 16); return {v[0], v[1]}; }
    case kR32I: { std::int32_t v; std::memcpy(&v, p, 4); return static_cast<double>(v); }
    default: return 0.0;
  }
}

/// The real type of a complex type's precision (herk's scalars).
inline std::int32_t RealOf(std::int32_t type) { return type == kC32F ? kR32F : type == kC64F ? kR64F : type; }
inline cd Alpha(const BlasCall& c) {
  return ReadScalar(c.device_scalars ? reinterpret_cast<const unsigned char*>(c.alpha_ptr) : c.alpha,
                    c.real_alpha ? RealOf(c.scalar_type) : c.scalar_type);
}
inline cd Beta(const BlasCall& c) {
  return ReadScalar(c.device_scalars ? reinterpret_cast<const unsigned char*>(c.beta_ptr) : c.beta,
                    c.real_beta ? RealOf(c.scalar_type) : c.scalar_type);
}

inline float Widen(const unsigned char* p, std::int32_t type) {
  std::uint16_t h;
  std::memcpy(&h, p, 2);
  return type == kR16F ? interp::HalfToFloat(h) : interp::Bf16ToFloat(h);
}
inline void Narrow(float f, unsigned char* p, std::int32_t type) {
  const std::uint16_t h = type == kR16F ? interp::FloatToHalf(f, interp::Round::kNearest)
                                        : interp::FloatToBf16(f, interp::Round::kNearest);
  std::memcpy(p, &h, 2);
}

/// float, double and their complex types: what cblas computes directly.
inline bool Std(std::int32_t t) { return t == kR32F || t == kR64F || t == kC32F || t == kC64F; }
inline bool Complex(std::int32_t t) { return t == kC32F || t == kC64F; }

/// The call's triangle, side and diagonal as cblas's enums.
inline CBLAS_UPLO Uplo(const BlasCall& c) { return c.upper ? CblasUpper : CblasLower; }
inline CBLAS_SIDE Side(const BlasCall& c) { return c.side_right ? CblasRight : CblasLeft; }
inline CBLAS_DIAG Diag(const BlasCall& c) { return c.unit_diag ? CblasUnit : CblasNonUnit; }

/// A dimension or increment as cblas's int (CheckBlasIndices bounded it).
inline int I(std::int64_t v) { return static_cast<int>(v); }

inline CBLAS_TRANSPOSE Trans(std::uint32_t op) {
  return op == 0 ? CblasNoTrans : op == 1 ? CblasTrans : CblasConjTrans;
}

inline bool FitsBlasInt(std::int64_t v) { return v >= 0 && v <= 0x7fffffff; }

template <typename T>
T* At(std::uint64_t base, std::int64_t index) {
  return reinterpret_cast<T*>(base) + index;
}


/// BLAS's vector convention: with a negative increment the vector starts
/// at its last element in memory (x + (n-1)|inc|) and walks down.
inline std::uint64_t VectorElement(std::uint64_t base, std::int64_t n, std::int64_t inc, std::int64_t i, std::size_t es) {
  const std::int64_t index = inc > 0 ? i * inc : (n - 1 - i) * (-inc);
  return base + static_cast<std::uint64_t>(index) * es;
}

}  // namespace phos::backend::sim::blas_internal
