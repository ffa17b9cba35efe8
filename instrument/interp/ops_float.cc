// Floating-point arithmetic on .f32, .f64 and .f16 (f16 is computed in f32
// and rounded to nearest-even; exact for add/sub/mul/fma operands of this
// width). Approximate instructions (.approx: rcp, sqrt, rsqrt, ex2, lg2,
// sin, cos, tanh, div) use the correctly rounded libm result, which is
// within the PTX error bounds. .ftz flushes f32 subnormal inputs/outputs to
// signed zero; .sat clamps to [0, 1] (NaN -> 0).
#include <cmath>

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
  put(Sat<T>(Ftz<T>(v, ftz), op.sat));
  return Flow::kNext;
}

}  // namespace

Flow ExecFloatArith(Exec& x, const Op& op) {
  switch (op.type) {
    case Type::kF32:
      return Arith<float>(x, op, [](uint64_t b) { return AsF32(b); },
                          [&](float v) { Set(x, op, 0, F32Bits(v)); });
    case Type::kF64:
      return Arith<double>(x, op, [](uint64_t b) { return AsF64(b); },
                           [&](double v) { Set(x, op, 0, F64Bits(v)); });
    case Type::kF16:
      return Arith<float>(x, op, [](uint64_t b) { return HalfToFloat(static_cast<uint16_t>(b)); },
                          [&](float v) { Set(x, op, 0, FloatToHalf(v, Round::kNearest)); });
    case Type::kBF16:
      return Arith<float>(x, op, [](uint64_t b) { return Bf16ToFloat(static_cast<uint16_t>(b)); },
                          [&](float v) { Set(x, op, 0, FloatToBf16(v, Round::kNearest)); });
    default:
      return Fail(x, "unsupported floating-point type");
  }
}

}  // namespace phos::interp
