// Numeric helpers of the PTX interpreter: bit casts, sign extension,
// IEEE half (binary16) and bfloat16 conversions with explicit rounding, and
// float operations under a directed rounding mode (fp_round.cc).
#pragma once

#include <cstdint>
#include <cstring>

#include "ptx/ptx_ir.h"

namespace phos::interp {

// Rounding of a float result: nearest-even, toward zero, toward -inf, +inf.
enum class Round : uint8_t { kNearest, kZero, kDown, kUp };

inline float AsF32(uint64_t bits) {
  uint32_t b = static_cast<uint32_t>(bits);
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
inline double AsF64(uint64_t bits) {
  double d;
  std::memcpy(&d, &bits, 8);
  return d;
}
inline uint64_t F32Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}
inline uint64_t F64Bits(double d) {
  uint64_t b;
  std::memcpy(&b, &d, 8);
  return b;
}
// A NaN result of GPU float arithmetic is the canonical NaN: no payload or
// sign of an operand comes through (x86 would pass the first NaN operand's
// on, and which one is first depends on how the host compiler ordered the
// operands). Sign-bit operations (neg, abs, copysign) keep their operand's
// bits.
constexpr uint64_t kCanonicalNaN32 = 0x7FFFFFFFu;
constexpr uint64_t kCanonicalNaN64 = 0x7FFFFFFFFFFFFFFFull;
inline bool CanonicalizesNaN(ptx::Opcode op) {
  return op != ptx::Opcode::kNeg && op != ptx::Opcode::kAbs && op != ptx::Opcode::kCopysign;
}
inline uint64_t F32Result(float f) { return f != f ? kCanonicalNaN32 : F32Bits(f); }
inline uint64_t F64Result(double d) { return d != d ? kCanonicalNaN64 : F64Bits(d); }

inline uint64_t Trunc(uint64_t v, int bits) { return bits >= 64 ? v : (v & ((uint64_t{1} << bits) - 1)); }
inline int64_t SExt(uint64_t v, int bits) {
  if (bits >= 64) return static_cast<int64_t>(v);
  const int s = 64 - bits;
  return static_cast<int64_t>(v << s) >> s;
}

// Size in bytes of a scalar PTX type as stored in memory (pred: 1).
// Inline: every executed op asks.
inline int TypeBytes(ptx::Type t) {
  using ptx::Type;
  switch (t) {
    case Type::kPred: case Type::kB8: case Type::kU8: case Type::kS8:
    case Type::kE4M3: case Type::kE5M2: return 1;
    case Type::kB16: case Type::kU16: case Type::kS16: case Type::kF16: case Type::kBF16:
    case Type::kE4M3x2: case Type::kE5M2x2: return 2;
    case Type::kB32: case Type::kU32: case Type::kS32: case Type::kF32: case Type::kF16x2:
    case Type::kBF16x2: case Type::kTF32: return 4;
    case Type::kB64: case Type::kU64: case Type::kS64: case Type::kF64: return 8;
    case Type::kB128: return 16;
    default: return 0;
  }
}
inline bool IsSignedInt(ptx::Type t) {
  using ptx::Type;
  return t == Type::kS8 || t == Type::kS16 || t == Type::kS32 || t == Type::kS64;
}
// f16, bf16, f32, f64 (scalar)
inline bool IsFloat(ptx::Type t) {
  using ptx::Type;
  return t == Type::kF16 || t == Type::kBF16 || t == Type::kF32 || t == Type::kF64;
}

// binary16 <-> float. ToHalf rounds as asked (nearest = ties to even),
// handles subnormals, overflow (to inf or max finite per mode) and NaN.
uint16_t FloatToHalf(float f, Round r);
uint16_t DoubleToHalf(double d, Round r);
float HalfToFloat(uint16_t h);
uint16_t FloatToBf16(float f, Round r);
float Bf16ToFloat(uint16_t h);
// double -> bfloat16, correctly rounded (through a round-to-odd float).
uint16_t DoubleToBf16(double d, Round r);

// The two 8-bit floats of the PTX ISA (OCP FP8): .e4m3 (bias 7, no
// infinities, S.1111.111 is NaN, max 448) and .e5m2 (bias 15, IEEE-like:
// infinities and NaNs, max 57344).
enum class Fp8 : uint8_t { kE4M3, kE5M2 };
double Fp8ToDouble(Fp8 f, uint8_t bits);
// Rounded to nearest, ties to even, saturating to +-max finite (.satfinite:
// the only rounding the ISA offers for fp8 results; infinities saturate
// too); a NaN becomes the canonical NaN 0x7F.
uint8_t DoubleToFp8Satfinite(Fp8 f, double v);

// Float arithmetic in a rounding mode (kNearest is the plain operation).
float AddF(float a, float b, Round r);
float MulF(float a, float b, Round r);
float FmaF(float a, float b, float c, Round r);
float DivF(float a, float b, Round r);
float SqrtF(float a, Round r);
double AddD(double a, double b, Round r);
double MulD(double a, double b, Round r);
double FmaD(double a, double b, double c, Round r);
double DivD(double a, double b, Round r);
double SqrtD(double a, Round r);
float D2F(double a, Round r);             // double -> float
float I2F(int64_t v, bool is_signed, Round r);   // 64-bit integer -> float
double I2D(int64_t v, bool is_signed, Round r);  // 64-bit integer -> double
// Round a float/double to an integral value (rni/rzi/rmi/rpi).
double RoundIntegral(double v, Round r);

}  // namespace phos::interp
