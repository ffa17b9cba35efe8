// Floating-point arithmetic on .f32, .f64, .f16, .bf16 and the packed
// .f16x2/.bf16x2 (each half on its own). Half-width values are computed in
// double and rounded once to nearest-even: a double holds a product of two
// halves exactly and rounds a sum or fma of them without a double-rounding
// error (53 >= 2*11+2 bits). .ftz on f16 flushes half subnormals. .relu
// clamps negative results to +0 (NaN stays NaN); min/max.NaN propagate NaN
// where plain min/max return the other operand. Approximate instructions (.approx: rcp, sqrt, rsqrt, ex2, lg2,
// sin, cos, tanh, div) use the correctly rounded libm result, which is
// within the PTX error bounds. .ftz flushes f32 subnormal inputs/outputs to
// signed zero; .sat clamps to [0, 1] (NaN -> 0). An f32/f64 NaN result is
// the GPU's canonical NaN (numeric.h).
#include <cmath>
#include <limits>

#include "interp/exec.h"

namespace phos::interp {

using ptx::Opcode;
using ptx::Type;

namespace {

template <typename T>
T Ftz(T v, bool ftz) {
  if (ftz && std::fpclassify(v) == FP_SUBNORMAL) return std::copysign(T(0), v);
  return v;
}

template <typename T>
T Sat(T v, bool sat) {
  if (!sat) return v;
  if (std::isnan(v)) return T(0);
  return v < T(0) ? T(0) : (v > T(1) ? T(1) : v);
}

float Add(float a, float b, Round r) { return AddF(a, b, r); }
double Add(double a, double b, Round r) { return AddD(a, b, r); }
float Mul(float a, float b, Round r) { return MulF(a, b, r); }
double Mul(double a, double b, Round r) { return MulD(a, b, r); }
float Fma(float a, float b, float c, Round r) { return FmaF(a, b, c, r); }
double Fma(double a, double b, double c, Round r) { return FmaD(a, b, c, r); }
float Div(float a, float b, Round r) { return DivF(a, b, r); }
double Div(double a, double b, Round r) { return DivD(a, b, r); }
float Sqrt(float a, Round r) { return SqrtF(a, r); }
double Sqrt(double a, Round r) { return SqrtD(a, r); }

bool TestP(double v, uint8_t mode) {
  switch (mode) {
    case 1: return std::isfinite(v);
    case 2: return std::isinf(v);
    case 3: return !std::isnan(v);
    case 4: return std::isnan(v);
    case 5: return std::isnormal(v);
    default: return std::fpclassify(v) == FP_SUBNORMAL;
  }
}

// T = float or double; `get`/`put` convert the register bits.
template <typename T, typename Get, typename Put>
Flow Arith(Exec& x, const Op& op, Get get, Put put) {
  const bool ftz = op.ftz && !std::is_same_v<T, double>;
  auto A = [&](int i) { return Ftz<T>(get(Src(x, op, i)), ftz); };
  const Round r = RoundOf(op.rounding);
  T v;
  switch (op.opcode) {
    case Opcode::kAdd: v = Add(A(1), A(2), r); break;
    case Opcode::kSub: v = Add(A(1), -A(2), r); break;
    case Opcode::kMul: v = Mul(A(1), A(2), r); break;
    case Opcode::kMad: case Opcode::kFma: v = Fma(A(1), A(2), A(3), r); break;
    case Opcode::kDiv: v = op.approx ? A(1) / A(2) : Div(A(1), A(2), r); break;
    case Opcode::kAbs: v = std::fabs(A(1)); break;
    case Opcode::kNeg: v = -A(1); break;
    case Opcode::kMin: v = std::fmin(A(1), A(2)); break;
    case Opcode::kMax: v = std::fmax(A(1), A(2)); break;
    case Opcode::kRcp: v = op.approx ? T(1) / A(1) : Div(T(1), A(1), r); break;
    case Opcode::kSqrt: v = op.approx ? std::sqrt(A(1)) : Sqrt(A(1), r); break;
    case Opcode::kRsqrt: v = T(1) / std::sqrt(A(1)); break;
    case Opcode::kEx2: v = std::exp2(A(1)); break;
    case Opcode::kLg2: v = std::log2(A(1)); break;
    case Opcode::kSin: v = std::sin(A(1)); break;
    case Opcode::kCos: v = std::cos(A(1)); break;
    case Opcode::kTanh: v = std::tanh(A(1)); break;
    case Opcode::kCopysign: v = std::copysign(A(2), A(1)); break;
    case Opcode::kUnknown:  // testp
      Set(x, op, 0, TestP(static_cast<double>(get(Src(x, op, 1))), op.sub));
      return Flow::kNext;
    default: return Fail(x, "unsupported floating-point operation");
  }
  v = Sat<T>(Ftz<T>(v, ftz), op.sat);
  if ((op.sub & kFloatNaN) && (op.opcode == Opcode::kMin || op.opcode == Opcode::kMax) &&
      (std::isnan(A(1)) || std::isnan(A(2)))) {
    v = std::numeric_limits<T>::quiet_NaN();
  }
  if ((op.sub & kFloatRelu) && !std::isnan(v) && v < T(0)) v = T(0);
  put(v);
  return Flow::kNext;
}

// A 16-bit float format: its bits <-> double, its smallest normal, and
// whether .ftz flushes its subnormals (f16 only; bf16 arithmetic has no
// .ftz).
struct HalfFormat {
  float (*to_float)(uint16_t);
  uint16_t (*from_double)(double, Round);
  double min_normal;
  bool has_ftz;
};
constexpr HalfFormat kF16{HalfToFloat, DoubleToHalf, 0x1p-14, true};
constexpr HalfFormat kBf16{Bf16ToFloat, DoubleToBf16, 0x1p-126, false};

double FlushHalf(double v, bool ftz, double min_normal) {
  return ftz && v != 0 && std::fabs(v) < min_normal ? std::copysign(0.0, v) : v;
}

// One 16-bit float at bit `shift` of the operands; the result in *out.
Flow HalfArith(Exec& x, const Op& op, const HalfFormat& fmt, int shift, uint64_t* out) {
  const bool ftz = op.ftz && fmt.has_ftz;
  return Arith<double>(
      x, op,
      [&](uint64_t b) {
        return FlushHalf(static_cast<double>(fmt.to_float(static_cast<uint16_t>(b >> shift))), ftz, fmt.min_normal);
      },
      [&](double v) {
        const uint16_t h = fmt.from_double(FlushHalf(v, ftz, fmt.min_normal), Round::kNearest);
        *out |= static_cast<uint64_t>(h) << shift;
      });
}

Flow HalfArith(Exec& x, const Op& op, const HalfFormat& fmt, bool packed) {
  uint64_t d = 0;
  for (int shift : {0, 16}) {
    if (shift == 16 && !packed) break;
    const Flow f = HalfArith(x, op, fmt, shift, &d);
    if (f != Flow::kNext || op.opcode == Opcode::kUnknown) return f;  // testp set its predicate
  }
  Set(x, op, 0, d);
  return Flow::kNext;
}

}  // namespace

Flow ExecFloatArith(Exec& x, const Op& op) {
  switch (op.type) {
    case Type::kF32:
      return Arith<float>(x, op, [](uint64_t b) { return AsF32(b); },
                          [&](float v) { Set(x, op, 0, CanonicalizesNaN(op.opcode) ? F32Result(v) : F32Bits(v)); });
    case Type::kF64:
      return Arith<double>(x, op, [](uint64_t b) { return AsF64(b); },
                           [&](double v) { Set(x, op, 0, CanonicalizesNaN(op.opcode) ? F64Result(v) : F64Bits(v)); });
    case Type::kF16: return HalfArith(x, op, kF16, false);
    case Type::kF16x2: return HalfArith(x, op, kF16, true);
    case Type::kBF16: return HalfArith(x, op, kBf16, false);
    case Type::kBF16x2: return HalfArith(x, op, kBf16, true);
    default:
      return Fail(x, "unsupported floating-point type");
  }
}

}  // namespace phos::interp
