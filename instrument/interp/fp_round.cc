// Float operations under a directed rounding mode. Compiled with
// -frounding-math (CMakeLists.txt) so that GCC honours the dynamic rounding
// mode set with fesetround. The mode is a per-host-thread setting: each call
// sets it and restores round-to-nearest before returning, so no state leaks
// between interpreted instructions or threads.
#include <cfenv>
#include <cmath>

#include "interp/numeric.h"

namespace phos::interp {
namespace {

int FeMode(Round r) {
  switch (r) {
    case Round::kZero: return FE_TOWARDZERO;
    case Round::kDown: return FE_DOWNWARD;
    case Round::kUp: return FE_UPWARD;
    default: return FE_TONEAREST;
  }
}

template <typename F>
auto InMode(Round r, F f) {
  if (r == Round::kNearest) return f();
  std::fesetround(FeMode(r));
  auto v = f();
  std::fesetround(FE_TONEAREST);
  return v;
}

}  // namespace

float AddF(float a, float b, Round r) { return InMode(r, [&] { volatile float x = a; return x + b; }); }
float MulF(float a, float b, Round r) { return InMode(r, [&] { volatile float x = a; return x * b; }); }
float FmaF(float a, float b, float c, Round r) { return InMode(r, [&] { return std::fmaf(a, b, c); }); }
float DivF(float a, float b, Round r) { return InMode(r, [&] { volatile float x = a; return x / b; }); }
float SqrtF(float a, Round r) { return InMode(r, [&] { return std::sqrt(a); }); }
double AddD(double a, double b, Round r) { return InMode(r, [&] { volatile double x = a; return x + b; }); }
double MulD(double a, double b, Round r) { return InMode(r, [&] { volatile double x = a; return x * b; }); }
double FmaD(double a, double b, double c, Round r) { return InMode(r, [&] { return std::fma(a, b, c); }); }
double DivD(double a, double b, Round r) { return InMode(r, [&] { volatile double x = a; return x / b; }); }
double SqrtD(double a, Round r) { return InMode(r, [&] { return std::sqrt(a); }); }
float D2F(double a, Round r) { return InMode(r, [&] { volatile double x = a; return static_cast<float>(x); }); }
float I2F(int64_t v, bool is_signed, Round r) {
  return InMode(r, [&] {
    volatile int64_t x = v;
    return is_signed ? static_cast<float>(x) : static_cast<float>(static_cast<uint64_t>(x));
  });
}
double I2D(int64_t v, bool is_signed, Round r) {
  return InMode(r, [&] {
    volatile int64_t x = v;
    return is_signed ? static_cast<double>(x) : static_cast<double>(static_cast<uint64_t>(x));
  });
}
double RoundIntegral(double v, Round r) {
  switch (r) {
    case Round::kZero: return std::trunc(v);
    case Round::kDown: return std::floor(v);
    case Round::kUp: return std::ceil(v);
    default: return std::nearbyint(v);  // current mode is nearest-even
  }
}

}  // namespace phos::interp
