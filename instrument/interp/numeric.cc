#include "interp/numeric.h"

#include <algorithm>
#include <cmath>

namespace phos::interp {

using ptx::Type;


uint16_t DoubleToHalf(double d, Round r) {
  const uint16_t sign = std::signbit(d) ? 0x8000 : 0;
  if (std::isnan(d)) return 0x7FFF;
  const double a = std::fabs(d);
  if (std::isinf(a)) return sign | 0x7C00;
  if (a == 0) return sign;
  int e;
  std::frexp(a, &e);            // a = m * 2^e, m in [0.5, 1)
  int exp = e - 1;              // a in [2^exp, 2^(exp+1))
  if (exp < -14) exp = -14;     // subnormal range: fixed quantum 2^-24
  if (exp > 16) exp = 16;       // far overflow; keeps the scaling exact
  const double t = std::ldexp(a, 10 - exp);  // a / quantum, exact
  double n = std::floor(t);
  const double frac = t - n;
  bool up = false;
  switch (r) {
    case Round::kNearest: up = frac > 0.5 || (frac == 0.5 && std::fmod(n, 2.0) != 0); break;
    case Round::kZero: break;
    case Round::kUp: up = frac > 0 && !sign; break;
    case Round::kDown: up = frac > 0 && sign; break;
  }
  if (up) n += 1;
  // bits = ((exp + 14) << 10) + n works for subnormals (exp == -14, n < 1024),
  // normals (n in [1024, 2048)) and a carry into the next binade (n == 2048).
  const double bits = std::ldexp(exp + 14, 10) + n;
  if (bits >= 0x7C00) {
    const bool to_inf = r == Round::kNearest || (r == Round::kUp && !sign) || (r == Round::kDown && sign);
    return sign | (to_inf ? 0x7C00 : 0x7BFF);
  }
  return sign | static_cast<uint16_t>(bits);
}

uint16_t FloatToHalf(float f, Round r) { return DoubleToHalf(static_cast<double>(f), r); }

namespace {
struct Fp8Format {
  int mant_bits, exp_bits, bias;
  double max_finite;
  uint8_t max_code;  // the largest finite magnitude's bits
};
Fp8Format FormatOf(Fp8 f) {
  return f == Fp8::kE4M3 ? Fp8Format{3, 4, 7, 448.0, 0x7E} : Fp8Format{2, 5, 15, 57344.0, 0x7B};
}
}  // namespace

double Fp8ToDouble(Fp8 f, uint8_t bits) {
  const Fp8Format ff = FormatOf(f);
  const double sign = (bits & 0x80) ? -1.0 : 1.0;
  const int exp = (bits >> ff.mant_bits) & ((1 << ff.exp_bits) - 1);
  const int mant = bits & ((1 << ff.mant_bits) - 1);
  const int exp_max = (1 << ff.exp_bits) - 1;
  if (f == Fp8::kE4M3 && exp == exp_max && mant == (1 << ff.mant_bits) - 1) return std::nan("");
  if (f == Fp8::kE5M2 && exp == exp_max) return mant == 0 ? sign * INFINITY : std::nan("");
  if (exp == 0) return sign * std::ldexp(mant, 1 - ff.bias - ff.mant_bits);  // subnormal
  return sign * std::ldexp(1.0 + std::ldexp(mant, -ff.mant_bits), exp - ff.bias);
}

uint8_t DoubleToFp8Satfinite(Fp8 f, double v) {
  const Fp8Format ff = FormatOf(f);
  if (std::isnan(v)) return 0x7F;
  const uint8_t sign = std::signbit(v) ? 0x80 : 0;
  const double a = std::fabs(v);
  if (a >= ff.max_finite) return static_cast<uint8_t>(sign | ff.max_code);
  if (a == 0) return sign;
  // The spacing of representable values at a's exponent (subnormals share
  // the smallest normal exponent), then round to a multiple of it, ties
  // to even (a / q is exact in double; no dependence on the FPU's mode).
  int e = 0;
  (void)std::frexp(a, &e);
  e = std::max(e - 1, 1 - ff.bias);
  const double q = std::ldexp(1.0, e - ff.mant_bits);
  const double t = a / q, fl = std::floor(t), frac = t - fl;
  const double n = frac > 0.5 ? fl + 1 : frac < 0.5 ? fl : (std::fmod(fl, 2.0) == 0 ? fl : fl + 1);
  const double r = n * q;
  if (r > ff.max_finite) return static_cast<uint8_t>(sign | ff.max_code);
  if (r == 0) return sign;
  if (r < std::ldexp(1.0, 1 - ff.bias)) {  // subnormal
    return static_cast<uint8_t>(sign | static_cast<int>(r / std::ldexp(1.0, 1 - ff.bias - ff.mant_bits)));
  }
  int re = 0;
  const double m = std::frexp(r, &re);  // r = m * 2^re, m in [0.5, 1)
  const int exp = re - 1 + ff.bias;
  const int mant = static_cast<int>(std::ldexp(m * 2.0 - 1.0, ff.mant_bits));
  return static_cast<uint8_t>(sign | exp << ff.mant_bits | mant);
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1F;
  const uint32_t man = h & 0x3FF;
  if (exp == 0) {
    const float v = std::ldexp(static_cast<float>(man), -24);
    return sign ? -v : v;
  }
  uint32_t bits;
  if (exp == 31) {
    bits = sign | 0x7F800000u | (man << 13);
  } else {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  }
  return AsF32(bits);
}

uint16_t FloatToBf16(float f, Round r) {
  const uint32_t u = static_cast<uint32_t>(F32Bits(f));
  if (std::isnan(f)) return 0x7FFF;
  const bool neg = u >> 31;
  const uint32_t low = u & 0xFFFF;
  uint32_t hi = u >> 16;
  switch (r) {
    case Round::kNearest:
      if (low > 0x8000 || (low == 0x8000 && (hi & 1))) ++hi;
      break;
    case Round::kZero: break;
    case Round::kUp: if (low && !neg) ++hi; break;
    case Round::kDown: if (low && neg) ++hi; break;
  }
  return static_cast<uint16_t>(hi);
}

float Bf16ToFloat(uint16_t h) { return AsF32(static_cast<uint32_t>(h) << 16); }

uint16_t DoubleToBf16(double d, Round r) {
  if (std::isnan(d)) return 0x7FFF;
  // Rounding a double to float toward zero and marking inexactness in the
  // last bit ("round to odd") keeps enough information for one correct
  // rounding to bfloat16's 8 bits: the float has 24.
  float f = D2F(d, Round::kZero);
  if (std::isfinite(f) && static_cast<double>(f) != d) f = AsF32(F32Bits(f) | 1);
  return FloatToBf16(f, r);
}

}  // namespace phos::interp
