// Conversions (cvt, all rounding modes, .sat, .ftz) and comparisons/selects
// (setp, set, selp, slct).
#include <cmath>

#include "interp/exec.h"

namespace phos::interp {

using ptx::CmpOp;
using ptx::Rounding;
using ptx::Type;

namespace {

double FloatValue(Type t, uint64_t bits, bool ftz) {
  switch (t) {
    case Type::kF16: return HalfToFloat(static_cast<uint16_t>(bits));
    case Type::kBF16: return Bf16ToFloat(static_cast<uint16_t>(bits));
    case Type::kF32: {
      float f = AsF32(bits);
      if (ftz && std::fpclassify(f) == FP_SUBNORMAL) f = std::copysign(0.0f, f);
      return f;
    }
    default: return AsF64(bits);
  }
}

bool IsIntegerRounding(Rounding r) {
  return r == Rounding::kRni || r == Rounding::kRzi || r == Rounding::kRmi || r == Rounding::kRpi;
}

// Stores double `v` as float type `t` rounded per `r`.
uint64_t StoreFloat(Type t, double v, Round r, bool ftz, bool sat) {
  if (sat) v = std::isnan(v) ? 0.0 : std::fmin(std::fmax(v, 0.0), 1.0);
  switch (t) {
    case Type::kF16: return DoubleToHalf(v, r);
    case Type::kBF16: return FloatToBf16(D2F(v, r), r);
    case Type::kF32: {
      float f = D2F(v, r);
      if (ftz && std::fpclassify(f) == FP_SUBNORMAL) f = std::copysign(0.0f, f);
      return F32Bits(f);
    }
    default: return F64Bits(v);
  }
}

}  // namespace

bool Compare(CmpOp c, Type t, uint64_t a, uint64_t b, bool ftz) {
  if (IsFloat(t)) {
    const double x = FloatValue(t, a, ftz), y = FloatValue(t, b, ftz);
    const bool nan = std::isnan(x) || std::isnan(y);
    switch (c) {
      case CmpOp::kEq: return !nan && x == y;
      case CmpOp::kNe: return !nan && x != y;
      case CmpOp::kLt: return !nan && x < y;
      case CmpOp::kLe: return !nan && x <= y;
      case CmpOp::kGt: return !nan && x > y;
      case CmpOp::kGe: return !nan && x >= y;
      case CmpOp::kEqu: return nan || x == y;
      case CmpOp::kNeu: return nan || x != y;
      case CmpOp::kLtu: return nan || x < y;
      case CmpOp::kLeu: return nan || x <= y;
      case CmpOp::kGtu: return nan || x > y;
      case CmpOp::kGeu: return nan || x >= y;
      case CmpOp::kNum: return !nan;
      case CmpOp::kNan: return nan;
      default: return false;
    }
  }
  const int bits = TypeBits(t) ? TypeBits(t) : 64;
  if (IsSignedInt(t)) {
    const int64_t x = SExt(a, bits), y = SExt(b, bits);
    switch (c) {
      case CmpOp::kEq: return x == y;
      case CmpOp::kNe: return x != y;
      case CmpOp::kLt: return x < y;
      case CmpOp::kLe: return x <= y;
      case CmpOp::kGt: return x > y;
      case CmpOp::kGe: return x >= y;
      default: break;
    }
  }
  const uint64_t x = Trunc(a, bits), y = Trunc(b, bits);
  switch (c) {
    case CmpOp::kEq: return x == y;
    case CmpOp::kNe: return x != y;
    case CmpOp::kLt: case CmpOp::kLo: return x < y;
    case CmpOp::kLe: case CmpOp::kLs: return x <= y;
    case CmpOp::kGt: case CmpOp::kHi: return x > y;
    case CmpOp::kGe: case CmpOp::kHs: return x >= y;
    default: return false;
  }
}

bool CombineBool(ptx::BoolOp op, bool r, bool c) {
  switch (op) {
    case ptx::BoolOp::kAnd: return r && c;
    case ptx::BoolOp::kOr: return r || c;
    case ptx::BoolOp::kXor: return r != c;
    default: return r;
  }
}

namespace {

// cvt{.relu}{.satfinite}.f16x2.f32 / .bf16x2.f32 d, a, b: a to the upper
// half of d, b to the lower, each rounded as asked.
Flow PackTwoFloats(Exec& x, const Op& op) {
  const Round r = RoundOf(op.rounding);
  uint64_t d = 0;
  for (int i = 0; i < 2; ++i) {
    float v = AsF32(Src(x, op, 1 + i));
    if ((op.sub & kCvtRelu) && !std::isnan(v) && v < 0) v = 0;
    uint16_t h = op.type == Type::kF16x2 ? FloatToHalf(v, r) : FloatToBf16(v, r);
    if ((op.sub & kCvtSatFinite) && !std::isnan(v)) {
      const uint16_t max = op.type == Type::kF16x2 ? 0x7BFF : 0x7F7F, inf = op.type == Type::kF16x2 ? 0x7C00 : 0x7F80;
      if ((h & 0x7FFF) == inf) h = static_cast<uint16_t>((h & 0x8000) | max);
    }
    d |= static_cast<uint64_t>(h) << (i == 0 ? 16 : 0);
  }
  Set(x, op, 0, d);
  return Flow::kNext;
}

// cvt.rna/.rn/.rz.tf32.f32: a float rounded to tf32's 10 fraction bits, in
// a .b32 whose low 13 bits are zero. .rna is ties away from zero.
Flow ToTf32(Exec& x, const Op& op) {
  uint32_t b = static_cast<uint32_t>(Src(x, op, 1));
  if (std::isnan(AsF32(b))) {
    Set(x, op, 0, 0x7FFFFFFFu);
    return Flow::kNext;
  }
  if ((b & 0x7F800000u) != 0x7F800000u) {  // finite: round the magnitude
    switch (op.rounding) {
      case ptx::Rounding::kRna: b += 0x1000u; break;
      case ptx::Rounding::kRn: b += 0xFFFu + ((b >> 13) & 1); break;
      case ptx::Rounding::kRz: break;
      default: return Fail(x, "unsupported rounding for cvt to .tf32");
    }
    b &= ~0x1FFFu;
  }
  Set(x, op, 0, b);
  return Flow::kNext;
}

bool IsFp8x2(Type t) { return t == Type::kE4M3x2 || t == Type::kE5M2x2; }
Fp8 Fp8Of(Type t) { return t == Type::kE4M3x2 ? Fp8::kE4M3 : Fp8::kE5M2; }

// cvt.rn.satfinite{.relu}.e4m3x2/.e5m2x2.f32 d, a, b (a to the upper byte
// of d, b to the lower), and .f16x2 / .bf16x2 d, a (a's upper half to the
// upper byte). .satfinite and .rn are the ISA's only forms.
Flow PackFp8(Exec& x, const Op& op) {
  if (!(op.sub & kCvtSatFinite) || op.rounding != Rounding::kRn) {
    return Fail(x, "cvt to an fp8 pair needs .rn.satfinite");
  }
  double v[2];  // the upper byte's source, then the lower's
  const Type st = op.type2;
  if (st == Type::kF32) {
    v[0] = AsF32(Src(x, op, 1));
    v[1] = AsF32(Src(x, op, 2));
  } else if (st == Type::kF16x2 || st == Type::kBF16x2) {
    const uint64_t s = Src(x, op, 1);
    const auto half = [st](uint64_t h) {
      return st == Type::kF16x2 ? HalfToFloat(static_cast<uint16_t>(h)) : Bf16ToFloat(static_cast<uint16_t>(h));
    };
    v[0] = half(s >> 16 & 0xFFFF);
    v[1] = half(s & 0xFFFF);
  } else {
    return Fail(x, "unsupported conversion to an fp8 pair");
  }
  uint64_t d = 0;
  for (int i = 0; i < 2; ++i) {
    double w = v[i];
    if ((op.sub & kCvtRelu) && !std::isnan(w) && w <= 0) w = 0;
    d |= static_cast<uint64_t>(DoubleToFp8Satfinite(Fp8Of(op.type), w)) << (i == 0 ? 8 : 0);
  }
  Set(x, op, 0, d);
  return Flow::kNext;
}

// cvt.rn{.relu}.f16x2.e4m3x2/.e5m2x2 d, a: each byte of a to a half, in
// place (exact: every fp8 value is a half); a NaN is the canonical 0x7FFF.
Flow UnpackFp8(Exec& x, const Op& op) {
  const uint64_t s = Src(x, op, 1);
  uint64_t d = 0;
  for (int i = 0; i < 2; ++i) {
    double w = Fp8ToDouble(Fp8Of(op.type2), static_cast<uint8_t>(s >> (8 * i)));
    if ((op.sub & kCvtRelu) && !std::isnan(w) && w <= 0) w = 0;
    const uint16_t h = std::isnan(w) ? 0x7FFF : DoubleToHalf(w, Round::kNearest);
    d |= static_cast<uint64_t>(h) << (16 * i);
  }
  Set(x, op, 0, d);
  return Flow::kNext;
}

}  // namespace

Flow ExecCvt(Exec& x, const Op& op) {
  const Type dt = op.type, st = op.type2;
  if (IsFp8x2(dt)) return PackFp8(x, op);
  if (IsFp8x2(st)) {
    if (dt == Type::kF16x2) return UnpackFp8(x, op);
    return Fail(x, "unsupported conversion from an fp8 pair (supported: to .f16x2)");
  }
  if ((dt == Type::kF16x2 || dt == Type::kBF16x2) && st == Type::kF32) return PackTwoFloats(x, op);
  if (dt == Type::kTF32 && st == Type::kF32) return ToTf32(x, op);
  uint64_t d;
  if (!ConvertScalar(op, Src(x, op, 1), &d)) return Fail(x, "unsupported conversion");
  Set(x, op, 0, d);
  return Flow::kNext;
}

bool ConvertScalar(const Op& op, uint64_t a, uint64_t* out) {
  const Type dt = op.type, st = op.type2;
  const int dbits = TypeBits(dt), sbits = TypeBits(st);
  if (!dbits || !sbits || dbits > 64 || sbits > 64 || dt == Type::kPred || st == Type::kPred ||
      dt == Type::kF16x2 || st == Type::kF16x2 || dt == Type::kBF16x2 || st == Type::kBF16x2 ||
      dt == Type::kTF32 || st == Type::kTF32 || TypeBytes(dt) == 0) {
    return false;
  }
  const Round r = RoundOf(op.rounding);
  const bool dflt = IsFloat(dt), sflt = IsFloat(st);
  uint64_t d;
  if (!dflt && !sflt) {
    if (IsSignedInt(st)) {
      int64_t v = SExt(a, sbits);
      if (op.sat) {
        const int64_t hi = IsSignedInt(dt) ? static_cast<int64_t>((uint64_t{1} << (dbits - 1)) - 1)
                                           : (dbits >= 64 ? INT64_MAX : static_cast<int64_t>(Trunc(~0ull, dbits)));
        const int64_t lo = IsSignedInt(dt) ? (dbits >= 64 ? INT64_MIN : -(int64_t{1} << (dbits - 1))) : 0;
        v = v < lo ? lo : (v > hi ? hi : v);
      }
      d = static_cast<uint64_t>(v);
    } else {
      uint64_t v = Trunc(a, sbits);
      if (op.sat) {
        const uint64_t hi = IsSignedInt(dt) ? (uint64_t{1} << (dbits - 1)) - 1 : Trunc(~0ull, dbits);
        v = v > hi ? hi : v;
      }
      d = v;
    }
    if (IsSignedInt(dt)) d = static_cast<uint64_t>(SExt(d, dbits));
    *out = dbits >= 64 || IsSignedInt(dt) ? d : Trunc(d, dbits);
    return true;
  }
  if (sflt && !dflt) {
    double v = FloatValue(st, a, op.ftz);
    if (std::isnan(v)) {
      d = 0;
    } else {
      v = RoundIntegral(v, IsIntegerRounding(op.rounding) ? r : Round::kZero);
      if (IsSignedInt(dt)) {
        const double lo = -std::ldexp(1.0, dbits - 1), hi = std::ldexp(1.0, dbits - 1);
        const int64_t ilo = dbits >= 64 ? INT64_MIN : -(int64_t{1} << (dbits - 1));
        const int64_t ihi = dbits >= 64 ? INT64_MAX : (int64_t{1} << (dbits - 1)) - 1;
        d = static_cast<uint64_t>(v < lo ? ilo : (v >= hi ? ihi : static_cast<int64_t>(v)));
      } else {
        const double hi = std::ldexp(1.0, dbits);
        d = v <= 0 ? 0 : (v >= hi ? Trunc(~0ull, dbits) : static_cast<uint64_t>(v));
      }
    }
    *out = IsSignedInt(dt) ? d : Trunc(d, dbits);
    return true;
  }
  if (!sflt && dflt) {
    const bool sgn = IsSignedInt(st);
    const int64_t v = sgn ? SExt(a, sbits) : static_cast<int64_t>(Trunc(a, sbits));
    double f;
    if (dt == Type::kF32) {
      f = I2F(v, sgn, r);
    } else {
      f = I2D(v, sgn, r);
    }
    *out = StoreFloat(dt, f, r, op.ftz, op.sat);
    return true;
  }
  // float -> float
  double v = FloatValue(st, a, op.ftz);
  if (IsIntegerRounding(op.rounding)) v = RoundIntegral(v, r);
  *out = StoreFloat(dt, v, r, op.ftz, op.sat);
  return true;
}

Flow ExecSetp(Exec& x, const Op& op) {
  const int nd = op.shape[0];
  bool res = Compare(op.cmp, op.type, Src(x, op, nd), Src(x, op, nd + 1), op.ftz);
  bool c = true;
  const bool combine = op.bool_op != ptx::BoolOp::kNone && op.nshape > 3;
  if (combine) c = PredVal(x, Opd(x, op, nd + 2));
  Set(x, op, 0, combine ? CombineBool(op.bool_op, res, c) : res);
  if (nd == 2) Set(x, op, 1, combine ? CombineBool(op.bool_op, !res, c) : !res);
  return Flow::kNext;
}

Flow ExecSet(Exec& x, const Op& op) {
  bool res = Compare(op.cmp, op.type2, Src(x, op, 1), Src(x, op, 2), op.ftz);
  if (op.bool_op != ptx::BoolOp::kNone && op.nshape > 3) res = CombineBool(op.bool_op, res, PredVal(x, Opd(x, op, 3)));
  uint64_t d;
  if (op.type == Type::kF32) d = res ? F32Bits(1.0f) : 0;
  else d = res ? Trunc(~0ull, TypeBits(op.type) ? TypeBits(op.type) : 32) : 0;
  Set(x, op, 0, d);
  return Flow::kNext;
}

Flow ExecSelp(Exec& x, const Op& op) {
  Set(x, op, 0, PredVal(x, Opd(x, op, 3)) ? Src(x, op, 1) : Src(x, op, 2));
  return Flow::kNext;
}

Flow ExecSlct(Exec& x, const Op& op) {
  const uint64_t c = Src(x, op, 3);
  const bool ge = op.type2 == Type::kF32 ? !(AsF32(c) < 0.0f) && !std::isnan(AsF32(c)) : SExt(c, 32) >= 0;
  Set(x, op, 0, ge ? Src(x, op, 1) : Src(x, op, 2));
  return Flow::kNext;
}

}  // namespace phos::interp
