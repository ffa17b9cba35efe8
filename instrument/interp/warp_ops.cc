// Whole-warp handlers (WarpFn): the common ops run once for every lane of
// a warp that stands at them together, reading and writing the warp's
// lane-interleaved register rows (exec.h WarpState), with no per-lane
// dispatch or operand decoding. This is where the lockstep interpreter's
// speed comes from (docs/benchmarks.md "PTX interpreter").
//
// Each handler computes exactly what the op's per-thread handler computes
// (ops_int.cc, ops_float.cc, ops_cvt.cc, ops_mem.cc) — the same
// truncations, sign extensions, comparisons and host atomics — and the
// lockstep tests check it against them op by op on random values. Forms a
// handler does not cover are not bound (Op::warp_fn stays null); values it
// cannot vouch for at run time (an address outside one allocation, a
// special register that counts instructions) make it answer kPerThread,
// and the per-thread handler runs the op and words any error.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>

#include "interp/exec.h"
#include "interp/scalar_access.h"

namespace phos::interp {

namespace {

using ptx::CmpOp;
using ptx::MulMode;
using ptx::Opcode;
using ptx::Space;
using ptx::Type;

constexpr uint32_t kAllLanes = 0xFFFFFFFFu;
using u128 = unsigned __int128;
using i128 = __int128;

// --- Operands ----------------------------------------------------------------

// Special registers whose value does not depend on how far a lane has run
// (%clock does: the lockstep loop brings instruction counts up to date
// only before per-thread ops).
bool GatherSreg(const WarpExec& w, uint32_t id, uint64_t* v) {
  const Block& b = *w.b;
  auto each_lane = [&](auto f) {
    for (uint32_t l = 0; l < kWarpSize; ++l) v[l] = w.lanes[l] != nullptr ? f(*w.lanes[l], l) : 0;
  };
  auto all = [&](uint64_t x) {
    for (uint32_t l = 0; l < kWarpSize; ++l) v[l] = x;
  };
  switch (id) {
    case kTidX: case kTidY: case kTidZ: {  // from the warp's array: no Thread to touch
      const uint32_t* tid = w.ws->tid[id - kTidX];
      for (uint32_t l = 0; l < kWarpSize; ++l) v[l] = tid[l];
      return true;
    }
    case kNtidX: case kNtidY: case kNtidZ: all(b.ntid[id - kNtidX]); return true;
    case kCtaidX: case kCtaidY: case kCtaidZ: all(b.ctaid[id - kCtaidX]); return true;
    case kNctaidX: case kNctaidY: case kNctaidZ: all(b.nctaid[id - kNctaidX]); return true;
    case kLaneid:
      for (uint32_t l = 0; l < kWarpSize; ++l) v[l] = l;
      return true;
    case kWarpid: each_lane([](const Thread& t, uint32_t) -> uint64_t { return t.warp; }); return true;
    case kNwarpid: all(b.nwarps); return true;
    case kWarpSz: all(kWarpSize); return true;
    default: return false;  // the rest through ReadSreg, lane by lane
  }
}

bool GatherOther(const WarpExec& w, const Operand& o, uint64_t* v);

// Operand `o`'s value in every lane (as Val; lanes outside the group too —
// every lane has every row, and no read has a side effect). False when it
// must be read lane by lane. Registers and immediates inline: they are
// nearly every operand.
[[gnu::always_inline]] inline bool Gather(const WarpExec& w, const Operand& o, uint64_t* v) {
  if (o.kind == Operand::kReg) {
    const uint64_t* row = w.rows + size_t{o.reg} * kWarpSize;
    const uint64_t imm = o.imm;
    for (uint32_t l = 0; l < kWarpSize; ++l) v[l] = row[l] + imm;
    return true;
  }
  if (o.kind == Operand::kImm) {
    const uint64_t imm = o.imm;
    for (uint32_t l = 0; l < kWarpSize; ++l) v[l] = imm;
    return true;
  }
  return GatherOther(w, o, v);
}

bool GatherOther(const WarpExec& w, const Operand& o, uint64_t* v) {
  switch (o.kind) {
    case Operand::kSreg: return GatherSreg(w, o.reg, v);
    case Operand::kLocalSym:
      for (uint32_t l = 0; l < kWarpSize; ++l) {
        v[l] = w.lanes[l] != nullptr ? w.lanes[l]->frames.back().local_base + o.imm : 0;
      }
      return true;
    default:
      for (uint32_t l = 0; l < kWarpSize; ++l) v[l] = 0;
      return true;
  }
}

// As Set: the active lanes' values into register `o` (nothing for `_`).
[[gnu::always_inline]] inline void Scatter(const WarpExec& w, const Operand& o, uint32_t active, const uint64_t* v) {
  if (o.kind != Operand::kReg) return;
  uint64_t* row = w.rows + size_t{o.reg} * kWarpSize;
  if (active == kAllLanes) {
    for (uint32_t l = 0; l < kWarpSize; ++l) row[l] = v[l];
    return;
  }
  for (uint32_t m = active; m; m &= m - 1) {
    const int l = __builtin_ctz(m);
    row[l] = v[l];
  }
}

// As PredVal, from gathered values.
inline bool Pred(const Operand& o, uint64_t v) { return ((v & 1) != 0) != o.neg; }

// Where operand `o`'s values are: its register row itself when it is a
// plain register, else `tmp` filled by Gather; null when it must be read
// lane by lane.
[[gnu::always_inline]] inline const uint64_t* Source(const WarpExec& w, const Operand& o, uint64_t* tmp) {
  if (o.kind == Operand::kReg && o.imm == 0) return w.rows + size_t{o.reg} * kWarpSize;
  return Gather(w, o, tmp) ? tmp : nullptr;
}

// d = F(a, b, c) lane-wise over sources 1..N of `op`, straight into d's
// row (a lane reads its sources before it writes: d may be one of them).
template <int N, typename F>
[[gnu::always_inline]] inline Flow Map(WarpExec& w, const Op& op, uint32_t active, F f) {
  uint64_t tmp[N][kWarpSize];
  const uint64_t* s[N];
  for (int i = 0; i < N; ++i) {
    s[i] = Source(w, w.Opd(op, 1 + i), tmp[i]);
    if (s[i] == nullptr) return Flow::kPerThread;
  }
  const Operand& d = w.Opd(op, 0);
  if (d.kind != Operand::kReg) return Flow::kNext;  // `_`
  uint64_t* row = w.rows + size_t{d.reg} * kWarpSize;
  auto one = [&](uint32_t l) {
    if constexpr (N == 1) row[l] = f(s[0][l]);
    if constexpr (N == 2) row[l] = f(s[0][l], s[1][l]);
    if constexpr (N == 3) row[l] = f(s[0][l], s[1][l], s[2][l]);
  };
  if (active == kAllLanes) {
    for (uint32_t l = 0; l < kWarpSize; ++l) one(l);
  } else {
    for (uint32_t m = active; m; m &= m - 1) one(static_cast<uint32_t>(__builtin_ctz(m)));
  }
  return Flow::kNext;
}

// --- Integer arithmetic (ops_int.cc) -------------------------------------------

template <int B>
constexpr uint64_t U(uint64_t v) {
  return Trunc(v, B);
}
template <int B>
constexpr int64_t S(uint64_t v) {
  return SExt(v, B);
}

enum class Int { kAdd, kSub, kMulLo, kMulHi, kMulWide, kMadLo, kMadHi, kMadWide, kShl, kShr, kAnd, kOr, kXor, kNot,
                 kMin, kMax, kNeg, kDiv, kRem, kAbs, kPopc, kClz };

// The product as ops_int.cc forms it (signed in 128 bits, or unsigned).
template <int B, bool Sgn>
inline i128 Product(uint64_t a, uint64_t b) {
  return Sgn ? static_cast<i128>(S<B>(a)) * S<B>(b) : static_cast<i128>(static_cast<u128>(U<B>(a)) * U<B>(b));
}

template <Int K, int B, bool Sgn>
Flow IntOp(WarpExec& w, const Op& op, uint32_t active) {
  if constexpr (K == Int::kAdd) return Map<2>(w, op, active, [](uint64_t a, uint64_t b) { return U<B>(U<B>(a) + U<B>(b)); });
  if constexpr (K == Int::kSub) return Map<2>(w, op, active, [](uint64_t a, uint64_t b) { return U<B>(U<B>(a) - U<B>(b)); });
  if constexpr (K == Int::kMulLo) {
    return Map<2>(w, op, active, [](uint64_t a, uint64_t b) { return U<B>(static_cast<uint64_t>(Product<B, Sgn>(a, b))); });
  }
  if constexpr (K == Int::kMulHi) {
    return Map<2>(w, op, active, [](uint64_t a, uint64_t b) {
      return U<B>(static_cast<uint64_t>(static_cast<u128>(Product<B, Sgn>(a, b)) >> B));
    });
  }
  if constexpr (K == Int::kMulWide) {
    return Map<2>(w, op, active, [](uint64_t a, uint64_t b) { return U<2 * B>(static_cast<uint64_t>(Product<B, Sgn>(a, b))); });
  }
  if constexpr (K == Int::kMadLo) {
    return Map<3>(w, op, active, [](uint64_t a, uint64_t b, uint64_t c) {
      return U<B>(U<B>(static_cast<uint64_t>(Product<B, Sgn>(a, b))) + U<B>(c));
    });
  }
  if constexpr (K == Int::kMadHi) {
    return Map<3>(w, op, active, [](uint64_t a, uint64_t b, uint64_t c) {
      return U<B>(U<B>(static_cast<uint64_t>(static_cast<u128>(Product<B, Sgn>(a, b)) >> B)) + U<B>(c));
    });
  }
  if constexpr (K == Int::kMadWide) {
    return Map<3>(w, op, active,
                  [](uint64_t a, uint64_t b, uint64_t c) { return U<2 * B>(static_cast<uint64_t>(Product<B, Sgn>(a, b)) + c); });
  }
  if constexpr (K == Int::kShl) {
    return Map<2>(w, op, active, [](uint64_t a, uint64_t b) {
      const uint64_t n = b & 0xFFFFFFFFu;
      return n >= B ? 0 : U<B>(U<B>(a) << n);
    });
  }
  if constexpr (K == Int::kShr) {
    return Map<2>(w, op, active, [](uint64_t a, uint64_t b) -> uint64_t {
      const uint64_t n = b & 0xFFFFFFFFu;
      if constexpr (Sgn) {
        const int64_t v = S<B>(a);
        return U<B>(static_cast<uint64_t>(n >= B ? (v < 0 ? -1 : 0) : v >> n));
      }
      return n >= B ? 0 : U<B>(a) >> n;
    });
  }
  if constexpr (K == Int::kAnd) return Map<2>(w, op, active, [](uint64_t a, uint64_t b) { return U<B>(a & b); });
  if constexpr (K == Int::kOr) return Map<2>(w, op, active, [](uint64_t a, uint64_t b) { return U<B>(a | b); });
  if constexpr (K == Int::kXor) return Map<2>(w, op, active, [](uint64_t a, uint64_t b) { return U<B>(a ^ b); });
  if constexpr (K == Int::kNot) return Map<1>(w, op, active, [](uint64_t a) { return U<B>(~a); });
  if constexpr (K == Int::kNeg) return Map<1>(w, op, active, [](uint64_t a) { return U<B>(0 - U<B>(a)); });
  if constexpr (K == Int::kDiv || K == Int::kRem) {  // as ops_int.cc: x/0 is all ones (div) or x (rem)
    return Map<2>(w, op, active, [](uint64_t a, uint64_t b) -> uint64_t {
      constexpr bool div = K == Int::kDiv;
      if constexpr (Sgn) {
        const int64_t x = S<B>(a), y = S<B>(b);
        if (y == 0) return U<B>(div ? ~uint64_t{0} : static_cast<uint64_t>(x));
        if (y == -1) return U<B>(div ? uint64_t{0} - static_cast<uint64_t>(x) : 0);
        return U<B>(static_cast<uint64_t>(div ? x / y : x % y));
      }
      const uint64_t x = U<B>(a), y = U<B>(b);
      if (y == 0) return U<B>(div ? ~uint64_t{0} : x);
      return U<B>(div ? x / y : x % y);
    });
  }
  if constexpr (K == Int::kAbs) {
    return Map<1>(w, op, active, [](uint64_t a) {
      const int64_t x = S<B>(a);
      return U<B>(static_cast<uint64_t>(x < 0 ? -static_cast<uint64_t>(x) : x));
    });
  }
  if constexpr (K == Int::kPopc) {  // (the count, not truncated to the type: as ops_int.cc)
    return Map<1>(w, op, active, [](uint64_t a) { return static_cast<uint64_t>(__builtin_popcountll(U<B>(a))); });
  }
  if constexpr (K == Int::kClz) {
    return Map<1>(w, op, active, [](uint64_t a) {
      const uint64_t x = U<B>(a);
      return static_cast<uint64_t>(x ? __builtin_clzll(x) - (64 - B) : B);
    });
  }
  if constexpr (K == Int::kMin || K == Int::kMax) {
    return Map<2>(w, op, active, [](uint64_t a, uint64_t b) -> uint64_t {
      if constexpr (Sgn) {
        const int64_t x = S<B>(a), y = S<B>(b);
        return U<B>(static_cast<uint64_t>(K == Int::kMin ? std::min(x, y) : std::max(x, y)));
      }
      return K == Int::kMin ? std::min(U<B>(a), U<B>(b)) : std::max(U<B>(a), U<B>(b));
    });
  }
  return Flow::kPerThread;
}

template <Int K, int B>
WarpFn IntBySign(bool sgn) {
  return sgn ? &IntOp<K, B, true> : &IntOp<K, B, false>;
}

template <Int K>
WarpFn IntByType(Type t) {
  const bool sgn = IsSignedInt(t);
  switch (TypeBits(t)) {
    case 16: return IntBySign<K, 16>(sgn);
    case 32: return IntBySign<K, 32>(sgn);
    case 64:
      if constexpr (K == Int::kMulWide || K == Int::kMadWide) return nullptr;  // .wide needs 16/32 bits
      else return IntBySign<K, 64>(sgn);
    default: return nullptr;
  }
}

WarpFn BindInt(const Op& op) {
  if (op.type == Type::kPred || IsFloat(op.type) || op.cc || op.sat) return nullptr;
  switch (op.opcode) {
    case Opcode::kAdd: return IntByType<Int::kAdd>(op.type);
    case Opcode::kSub: return IntByType<Int::kSub>(op.type);
    case Opcode::kMul:
      return op.mul_mode == MulMode::kWide ? IntByType<Int::kMulWide>(op.type)
             : op.mul_mode == MulMode::kHi ? IntByType<Int::kMulHi>(op.type)
                                           : IntByType<Int::kMulLo>(op.type);
    case Opcode::kMad:
      return op.mul_mode == MulMode::kWide ? IntByType<Int::kMadWide>(op.type)
             : op.mul_mode == MulMode::kHi ? IntByType<Int::kMadHi>(op.type)
                                           : IntByType<Int::kMadLo>(op.type);
    case Opcode::kShl: return IntByType<Int::kShl>(op.type);
    case Opcode::kShr: return IntByType<Int::kShr>(op.type);
    case Opcode::kAnd: return IntByType<Int::kAnd>(op.type);
    case Opcode::kOr: return IntByType<Int::kOr>(op.type);
    case Opcode::kXor: return IntByType<Int::kXor>(op.type);
    case Opcode::kNot: return IntByType<Int::kNot>(op.type);
    case Opcode::kNeg: return IntByType<Int::kNeg>(op.type);
    case Opcode::kMin: return IntByType<Int::kMin>(op.type);
    case Opcode::kMax: return IntByType<Int::kMax>(op.type);
    case Opcode::kDiv: return IntByType<Int::kDiv>(op.type);
    case Opcode::kRem: return IntByType<Int::kRem>(op.type);
    case Opcode::kAbs: return IntByType<Int::kAbs>(op.type);
    case Opcode::kPopc: return IntByType<Int::kPopc>(op.type);
    case Opcode::kClz: return IntByType<Int::kClz>(op.type);
    default: return nullptr;
  }
}

// --- Floating point (ops_float.cc), round to nearest, no .ftz/.sat -------------

enum class Float { kAdd, kSub, kMul, kFma, kMin, kMax, kNeg, kAbs };

template <typename T>
T FromBits(uint64_t b) {
  if constexpr (std::is_same_v<T, float>) return AsF32(b);
  else return AsF64(b);
}
template <typename T>
uint64_t ToBits(T v) {  // an arithmetic result: a NaN is the canonical one
  if constexpr (std::is_same_v<T, float>) return F32Result(v);
  else return F64Result(v);
}
template <typename T>
uint64_t SignBits(T v) {  // neg/abs: the operand's bits, sign changed
  if constexpr (std::is_same_v<T, float>) return F32Bits(v);
  else return F64Bits(v);
}

template <Float K, typename T>
Flow FloatOp(WarpExec& w, const Op& op, uint32_t active) {
  auto F = [](uint64_t b) { return FromBits<T>(b); };
  if constexpr (K == Float::kAdd) return Map<2>(w, op, active, [&](uint64_t a, uint64_t b) { return ToBits<T>(F(a) + F(b)); });
  if constexpr (K == Float::kSub) return Map<2>(w, op, active, [&](uint64_t a, uint64_t b) { return ToBits<T>(F(a) + -F(b)); });
  if constexpr (K == Float::kMul) return Map<2>(w, op, active, [&](uint64_t a, uint64_t b) { return ToBits<T>(F(a) * F(b)); });
  if constexpr (K == Float::kFma) {
    return Map<3>(w, op, active, [&](uint64_t a, uint64_t b, uint64_t c) { return ToBits<T>(std::fma(F(a), F(b), F(c))); });
  }
  if constexpr (K == Float::kMin) return Map<2>(w, op, active, [&](uint64_t a, uint64_t b) { return ToBits<T>(std::fmin(F(a), F(b))); });
  if constexpr (K == Float::kMax) return Map<2>(w, op, active, [&](uint64_t a, uint64_t b) { return ToBits<T>(std::fmax(F(a), F(b))); });
  if constexpr (K == Float::kNeg) return Map<1>(w, op, active, [&](uint64_t a) { return SignBits<T>(-F(a)); });
  if constexpr (K == Float::kAbs) return Map<1>(w, op, active, [&](uint64_t a) { return SignBits<T>(std::fabs(F(a))); });
  return Flow::kPerThread;
}

template <Float K>
WarpFn FloatByType(Type t) {
  return t == Type::kF32 ? &FloatOp<K, float> : t == Type::kF64 ? &FloatOp<K, double> : nullptr;
}

WarpFn BindFloat(const Op& op) {
  const bool nearest = op.rounding == ptx::Rounding::kNone || op.rounding == ptx::Rounding::kRn;
  if (!nearest || op.ftz || op.sat || op.sub != 0 || (op.type != Type::kF32 && op.type != Type::kF64)) return nullptr;
  switch (op.opcode) {
    case Opcode::kAdd: return FloatByType<Float::kAdd>(op.type);
    case Opcode::kSub: return FloatByType<Float::kSub>(op.type);
    case Opcode::kMul: return FloatByType<Float::kMul>(op.type);
    case Opcode::kMad: case Opcode::kFma: return FloatByType<Float::kFma>(op.type);
    case Opcode::kMin: return FloatByType<Float::kMin>(op.type);
    case Opcode::kMax: return FloatByType<Float::kMax>(op.type);
    case Opcode::kNeg: return FloatByType<Float::kNeg>(op.type);
    case Opcode::kAbs: return FloatByType<Float::kAbs>(op.type);
    default: return nullptr;
  }
}

// --- Comparisons and selection (ops_cvt.cc) ------------------------------------

// setp's d (and d|p's p) from the per-lane results `res`, combined with a
// predicate as ExecSetp does.
Flow FinishSetp(WarpExec& w, const Op& op, uint32_t active, const bool* res) {
  const int nd = op.shape[0];
  const bool combine = op.bool_op != ptx::BoolOp::kNone && op.nshape > 3;
  if (!combine) {  // the usual `setp.cc.t p, a, b`
    uint64_t d[kWarpSize];
    for (uint32_t l = 0; l < kWarpSize; ++l) d[l] = res[l];
    Scatter(w, w.Opd(op, 0), active, d);
    if (nd == 2) {
      for (uint32_t l = 0; l < kWarpSize; ++l) d[l] = !res[l];
      Scatter(w, w.Opd(op, 1), active, d);
    }
    return Flow::kNext;
  }
  uint64_t c[kWarpSize];
  if (combine && !Gather(w, w.Opd(op, nd + 2), c)) return Flow::kPerThread;
  const Operand& co = combine ? w.Opd(op, nd + 2) : w.Opd(op, 0);
  auto with = [&](bool r, int l) {
    if (!combine) return r;
    const bool p = Pred(co, c[l]);
    switch (op.bool_op) {
      case ptx::BoolOp::kAnd: return r && p;
      case ptx::BoolOp::kOr: return r || p;
      case ptx::BoolOp::kXor: return r != p;
      default: return r;
    }
  };
  uint64_t d[kWarpSize], q[kWarpSize];
  for (uint32_t l = 0; l < kWarpSize; ++l) {
    d[l] = with(res[l], static_cast<int>(l));
    q[l] = with(!res[l], static_cast<int>(l));
  }
  Scatter(w, w.Opd(op, 0), active, d);
  if (nd == 2) Scatter(w, w.Opd(op, 1), active, q);
  return Flow::kNext;
}

// Integer comparisons as Compare makes them: signed types compare signed
// values for eq..ge, everything else compares the truncated bits.
template <CmpOp C, int B, bool Sgn>
inline bool CompareInt(uint64_t a, uint64_t b) {
  if constexpr (Sgn) {
    const int64_t x = S<B>(a), y = S<B>(b);
    return C == CmpOp::kEq ? x == y : C == CmpOp::kNe ? x != y : C == CmpOp::kLt ? x < y
         : C == CmpOp::kLe ? x <= y : C == CmpOp::kGt ? x > y : x >= y;
  } else {
    const uint64_t x = U<B>(a), y = U<B>(b);
    return C == CmpOp::kEq ? x == y : C == CmpOp::kNe ? x != y : C == CmpOp::kLt ? x < y
         : C == CmpOp::kLe ? x <= y : C == CmpOp::kGt ? x > y : x >= y;
  }
}

template <CmpOp C, int B, bool Sgn>
Flow SetpInt(WarpExec& w, const Op& op, uint32_t active) {
  const int nd = op.shape[0];
  if (nd == 1 && !(op.bool_op != ptx::BoolOp::kNone && op.nshape > 3)) {  // `setp.cc.t p, a, b`: straight into p
    const Operand& a = w.Opd(op, 1), & b = w.Opd(op, 2);
    uint64_t ta[kWarpSize], tb[kWarpSize];
    const uint64_t* sa = Source(w, a, ta);
    const uint64_t* sb = Source(w, b, tb);
    if (sa == nullptr || sb == nullptr) return Flow::kPerThread;
    const Operand& d = w.Opd(op, 0);
    if (d.kind != Operand::kReg) return Flow::kNext;
    uint64_t* row = w.rows + size_t{d.reg} * kWarpSize;
    if (active == kAllLanes) {
      for (uint32_t l = 0; l < kWarpSize; ++l) row[l] = CompareInt<C, B, Sgn>(sa[l], sb[l]);
    } else {
      for (uint32_t m = active; m; m &= m - 1) {
        const int l = __builtin_ctz(m);
        row[l] = CompareInt<C, B, Sgn>(sa[l], sb[l]);
      }
    }
    return Flow::kNext;
  }
  uint64_t a[kWarpSize], b[kWarpSize];
  if (!Gather(w, w.Opd(op, nd), a) || !Gather(w, w.Opd(op, nd + 1), b)) return Flow::kPerThread;
  bool res[kWarpSize];
  for (uint32_t l = 0; l < kWarpSize; ++l) res[l] = CompareInt<C, B, Sgn>(a[l], b[l]);
  return FinishSetp(w, op, active, res);
}

// Any other setp: Compare itself, lane by lane.
Flow SetpAny(WarpExec& w, const Op& op, uint32_t active) {
  const int nd = op.shape[0];
  uint64_t a[kWarpSize], b[kWarpSize];
  if (!Gather(w, w.Opd(op, nd), a) || !Gather(w, w.Opd(op, nd + 1), b)) return Flow::kPerThread;
  bool res[kWarpSize];
  for (uint32_t l = 0; l < kWarpSize; ++l) res[l] = Compare(op.cmp, op.type, a[l], b[l], op.ftz);
  return FinishSetp(w, op, active, res);
}

template <int B, bool Sgn>
WarpFn SetpIntBy(CmpOp c) {
  // The unsigned spellings (lo/ls/hi/hs) compare bits, also of a signed type.
  switch (c) {
    case CmpOp::kEq: return &SetpInt<CmpOp::kEq, B, Sgn>;
    case CmpOp::kNe: return &SetpInt<CmpOp::kNe, B, Sgn>;
    case CmpOp::kLt: return &SetpInt<CmpOp::kLt, B, Sgn>;
    case CmpOp::kLe: return &SetpInt<CmpOp::kLe, B, Sgn>;
    case CmpOp::kGt: return &SetpInt<CmpOp::kGt, B, Sgn>;
    case CmpOp::kGe: return &SetpInt<CmpOp::kGe, B, Sgn>;
    case CmpOp::kLo: return &SetpInt<CmpOp::kLt, B, false>;
    case CmpOp::kLs: return &SetpInt<CmpOp::kLe, B, false>;
    case CmpOp::kHi: return &SetpInt<CmpOp::kGt, B, false>;
    case CmpOp::kHs: return &SetpInt<CmpOp::kGe, B, false>;
    default: return nullptr;
  }
}

WarpFn BindSetp(const Op& op) {
  if (op.nshape < 3 || op.shape[0] < 1 || op.shape[0] > 2) return nullptr;
  const Type t = op.type;
  if (t == Type::kPred || IsFloat(t) || TypeBits(t) == 0) return &SetpAny;
  WarpFn f = nullptr;
  const bool sgn = IsSignedInt(t);
  switch (TypeBits(t)) {
    case 16: f = sgn ? SetpIntBy<16, true>(op.cmp) : SetpIntBy<16, false>(op.cmp); break;
    case 32: f = sgn ? SetpIntBy<32, true>(op.cmp) : SetpIntBy<32, false>(op.cmp); break;
    case 64: f = sgn ? SetpIntBy<64, true>(op.cmp) : SetpIntBy<64, false>(op.cmp); break;
    default: break;
  }
  return f != nullptr ? f : &SetpAny;
}

Flow Selp(WarpExec& w, const Op& op, uint32_t active) {
  const Operand& po = w.Opd(op, 3);
  return Map<3>(w, op, active, [&](uint64_t a, uint64_t b, uint64_t p) { return Pred(po, p) ? a : b; });
}

// --- Moves and conversions -----------------------------------------------------

Flow Mov(WarpExec& w, const Op& op, uint32_t active) { return Map<1>(w, op, active, [](uint64_t a) { return a; }); }

// mov.b64 {a, b}, %rd (unpack) and mov.b64 %rd, {a, b} (pack), as ExecMov:
// element i is bits [eb*i, eb*(i+1)) of the wide value.
Flow MovUnpack(WarpExec& w, const Op& op, uint32_t active) {
  const int n = op.shape[0];
  const int eb = (TypeBits(op.type) ? TypeBits(op.type) : 64) / n;
  uint64_t v[kWarpSize], d[kWarpSize];
  if (!Gather(w, w.Opd(op, n), v)) return Flow::kPerThread;
  for (int i = 0; i < n; ++i) {
    for (uint32_t l = 0; l < kWarpSize; ++l) d[l] = Trunc(v[l] >> (eb * i), eb);
    Scatter(w, w.Opd(op, i), active, d);
  }
  return Flow::kNext;
}
Flow MovPack(WarpExec& w, const Op& op, uint32_t active) {
  const int n = op.shape[1];
  const int eb = (TypeBits(op.type) ? TypeBits(op.type) : 64) / n;
  uint64_t v[kWarpSize], d[kWarpSize] = {};
  for (int i = 0; i < n; ++i) {
    if (!Gather(w, w.Opd(op, 1 + i), v)) return Flow::kPerThread;
    for (uint32_t l = 0; l < kWarpSize; ++l) d[l] |= Trunc(v[l], eb) << (eb * i);
  }
  Scatter(w, w.Opd(op, 0), active, d);
  return Flow::kNext;
}
Flow MovPred(WarpExec& w, const Op& op, uint32_t active) {
  const Operand& o = w.Opd(op, 1);
  return Map<1>(w, op, active, [&](uint64_t a) -> uint64_t { return Pred(o, a); });
}

// Integer to integer without .sat (ConvertScalar's first case): the source
// read as its type, the destination's bits kept (sign-extended for a
// signed destination).
template <int SB, bool SS, int DB, bool DS>
Flow CvtInt(WarpExec& w, const Op& op, uint32_t active) {
  return Map<1>(w, op, active, [](uint64_t a) -> uint64_t {
    const uint64_t v = SS ? static_cast<uint64_t>(S<SB>(a)) : U<SB>(a);
    if constexpr (DS) return static_cast<uint64_t>(S<DB>(v));
    return U<DB>(v);
  });
}

Flow CvtAny(WarpExec& w, const Op& op, uint32_t active) {
  uint64_t a[kWarpSize], d[kWarpSize];
  if (!Gather(w, w.Opd(op, 1), a)) return Flow::kPerThread;
  for (uint32_t m = active; m; m &= m - 1) {
    const int l = __builtin_ctz(m);
    if (!ConvertScalar(op, a[l], &d[l])) return Flow::kPerThread;
  }
  Scatter(w, w.Opd(op, 0), active, d);
  return Flow::kNext;
}

template <int SB, bool SS>
WarpFn CvtIntTo(Type dt) {
  const bool ds = IsSignedInt(dt);
  switch (TypeBits(dt)) {
    case 16: return ds ? &CvtInt<SB, SS, 16, true> : &CvtInt<SB, SS, 16, false>;
    case 32: return ds ? &CvtInt<SB, SS, 32, true> : &CvtInt<SB, SS, 32, false>;
    case 64: return ds ? &CvtInt<SB, SS, 64, true> : &CvtInt<SB, SS, 64, false>;
    default: return nullptr;
  }
}

WarpFn BindCvt(const Op& op) {
  const Type dt = op.type, st = op.type2;
  auto packed = [](Type t) {
    return t == Type::kF16x2 || t == Type::kBF16x2 || t == Type::kTF32 || t == Type::kPred || t == Type::kE4M3x2 ||
           t == Type::kE5M2x2 || t == Type::kE4M3 || t == Type::kE5M2;
  };
  if (packed(dt) || packed(st) || TypeBits(dt) == 0 || TypeBits(st) == 0) return nullptr;
  if (!IsFloat(dt) && !IsFloat(st) && !op.sat) {
    WarpFn f = nullptr;
    const bool ss = IsSignedInt(st);
    switch (TypeBits(st)) {
      case 16: f = ss ? CvtIntTo<16, true>(dt) : CvtIntTo<16, false>(dt); break;
      case 32: f = ss ? CvtIntTo<32, true>(dt) : CvtIntTo<32, false>(dt); break;
      case 64: f = ss ? CvtIntTo<64, true>(dt) : CvtIntTo<64, false>(dt); break;
      default: break;
    }
    if (f != nullptr) return f;
  }
  return &CvtAny;
}

// cvta between generic and global/const (the identity) or shared (the
// shared window); .param's depends on the lane's frame: per thread.
template <bool Narrow>
Flow CvtaBy(WarpExec& w, const Op& op, uint32_t active) {
  uint64_t window = 0;
  switch (op.space) {
    case Space::kShared: case Space::kSharedCta: case Space::kSharedCluster: window = kSharedWindow; break;
    case Space::kLocal: window = kLocalWindow; break;
    default: break;
  }
  const bool to = op.to;
  return Map<1>(w, op, active, [&](uint64_t a) {
    const uint64_t d = window ? (to ? a - window : a + window) : a;
    return Narrow ? d & 0xFFFFFFFFu : d;
  });
}

WarpFn BindCvta(const Op& op) {
  switch (op.space) {
    case Space::kShared: case Space::kSharedCta: case Space::kSharedCluster: case Space::kLocal:
    case Space::kGlobal: case Space::kConst:
      return op.type == Type::kU32 || op.type == Type::kB32 ? &CvtaBy<true> : &CvtaBy<false>;
    default: return nullptr;
  }
}

// --- Loads and stores (ops_mem.cc), scalar and weak ----------------------------

// The lowest and highest address of the active lanes; false when `eb`
// bytes at the highest would wrap.
bool Span(const uint64_t* a, uint32_t active, int eb, uint64_t* lo, uint64_t* hi) {
  uint64_t l0 = UINT64_MAX, h0 = 0;
  if (active == kAllLanes) {  // no mask to walk: a loop the compiler vectorises
    for (uint32_t l = 0; l < kWarpSize; ++l) {
      l0 = a[l] < l0 ? a[l] : l0;
      h0 = a[l] > h0 ? a[l] : h0;
    }
  } else {
    for (uint32_t m = active; m; m &= m - 1) {
      const uint64_t v = a[__builtin_ctz(m)];
      l0 = std::min(l0, v);
      h0 = std::max(h0, v);
    }
  }
  *lo = l0;
  *hi = h0;
  return h0 <= UINT64_MAX - static_cast<uint64_t>(eb);
}

// Host bytes for every active lane's access, or false (then per thread).
// Global: one lookup for the span of the lanes' addresses — inside one
// allocation (the usual case) it stands for each lane's own lookup, which
// would find the same allocation; anything else goes lane by lane.
template <bool Write>
bool Locate(WarpExec& w, const Op& op, const uint64_t* a, uint32_t active, int eb, uint8_t** host) {
  Block& b = *w.b;
  switch (op.space) {
    case Space::kNone:  // generic: global when no lane's address is in a shared/local/param window
      for (uint32_t m = active; m; m &= m - 1) {
        const uint64_t v = a[__builtin_ctz(m)];
        if (InWindow(v, kSharedWindow) || InWindow(v, kLocalWindow) || InWindow(v, kParamWindow)) return false;
      }
      [[fallthrough]];
    case Space::kGlobal: {
      uint64_t lo = 0, hi = 0;
      if (!Span(a, active, eb, &lo, &hi)) return false;
      uint8_t* base = GlobalBytes(b, lo, hi - lo + static_cast<uint64_t>(eb), Write);
      if (base == nullptr) return false;
      // Every lane's (only the active lanes' are used: an inactive lane's
      // address may lie anywhere, so this is integer arithmetic).
      const uintptr_t at = reinterpret_cast<uintptr_t>(base);
      for (uint32_t l = 0; l < kWarpSize; ++l) host[l] = reinterpret_cast<uint8_t*>(at + (a[l] - lo));
      return true;
    }
    case Space::kShared: case Space::kSharedCta: case Space::kSharedCluster: {
      const uint64_t size = b.shared.size();
      for (uint32_t m = active; m; m &= m - 1) {
        const int l = __builtin_ctz(m);
        const uint64_t off = InWindow(a[l], kSharedWindow) ? a[l] - kSharedWindow : a[l];
        if (off > size || static_cast<uint64_t>(eb) > size - off) return false;
        host[l] = b.shared.data() + off;
      }
      return true;
    }
    case Space::kParam: {
      if (Write) return false;
      for (uint32_t m = active; m; m &= m - 1) {
        const int l = __builtin_ctz(m);
        Thread& t = *w.lanes[l];
        const uint64_t off = InWindow(a[l], kParamWindow) ? a[l] - kParamWindow : t.frames.back().param_base + a[l];
        if (off > t.params.size() || static_cast<uint64_t>(eb) > t.params.size() - off) return false;
        host[l] = t.params.data() + off;
      }
      return true;
    }
    case Space::kConst: {
      if (Write) return false;
      for (uint32_t m = active; m; m &= m - 1) {
        const int l = __builtin_ctz(m);
        if (!b.prog->InModuleStorage(a[l], static_cast<size_t>(eb))) return false;
        host[l] = reinterpret_cast<uint8_t*>(a[l]);
      }
      return true;
    }
    default: return false;
  }
}

// ld.param of a kernel formal at a fixed offset, in the kernel's own frame
// (param_base 0): every lane's copy holds the launch's bytes there (they
// are read-only), so one read serves the warp.
template <int EB, bool Sgn>
bool LdFormal(WarpExec& w, const Op& op, uint32_t active) {
  const Operand& ao = w.Opd(op, 1);
  if (w.depth != 1 || ao.kind != Operand::kImm || InWindow(ao.imm, kParamWindow)) return false;
  if (ao.imm > w.fn->formal_bytes || static_cast<uint64_t>(EB) > w.fn->formal_bytes - ao.imm) return false;
  uint64_t v = LoadScalar(w.b->launch_params + ao.imm, EB, false, std::memory_order_relaxed);
  if (Sgn) v = static_cast<uint64_t>(SExt(v, EB * 8));
  uint64_t d[kWarpSize];
  for (uint32_t l = 0; l < kWarpSize; ++l) d[l] = v;
  Scatter(w, w.Opd(op, 0), active, d);
  return true;
}

// Global memory (and generic addresses, which Locate admits only when
// they are global) is shared with the blocks on other host threads: its
// aligned accesses are host atomics, as in ExecLd/ExecSt.
inline bool SharedWithOtherHostThreads(const Op& op) { return op.space == Space::kGlobal || op.space == Space::kNone; }

// ld{.v2,.v4}: N elements of EB bytes each into operands 0..N-1, the
// address operand after them.
template <int EB, bool Sgn, int N>
Flow Ld(WarpExec& w, const Op& op, uint32_t active) {
  if (N == 1 && op.space == Space::kParam && LdFormal<EB, Sgn>(w, op, active)) return Flow::kNext;
  uint64_t a[kWarpSize];
  uint8_t* host[kWarpSize];
  if (!Gather(w, w.Opd(op, N), a) || !Locate<false>(w, op, a, active, EB * N, host)) return Flow::kPerThread;
  const bool atomic = SharedWithOtherHostThreads(op);
  for (int i = 0; i < N; ++i) {
    uint64_t d[kWarpSize];
    for (uint32_t m = active; m; m &= m - 1) {
      const int l = __builtin_ctz(m);
      const uint64_t v = LoadScalar(host[l] + i * EB, EB, atomic, std::memory_order_relaxed);
      d[l] = Sgn ? static_cast<uint64_t>(SExt(v, EB * 8)) : v;
    }
    Scatter(w, w.Opd(op, i), active, d);
  }
  return Flow::kNext;
}

// st{.v2,.v4}: the address operand, then N elements of EB bytes each.
template <int EB, int N>
Flow St(WarpExec& w, const Op& op, uint32_t active) {
  uint64_t a[kWarpSize], v[N][kWarpSize];
  uint8_t* host[kWarpSize];
  if (!Gather(w, w.Opd(op, 0), a)) return Flow::kPerThread;
  for (int i = 0; i < N; ++i) {
    if (!Gather(w, w.Opd(op, 1 + i), v[i])) return Flow::kPerThread;
  }
  if (!Locate<true>(w, op, a, active, EB * N, host)) return Flow::kPerThread;
  const bool atomic = SharedWithOtherHostThreads(op);
  // Lane order, each lane's elements in order, as the per-thread
  // interpreter stores: of lanes storing to one address the highest lane's
  // value stays (the PTX ISA leaves which one to the machine).
  for (uint32_t m = active; m; m &= m - 1) {
    const int l = __builtin_ctz(m);
    for (int i = 0; i < N; ++i) StoreScalar(host[l] + i * EB, EB, v[i][l], atomic, std::memory_order_relaxed);
  }
  return Flow::kNext;
}

template <bool Load, bool Sgn, int N>
WarpFn MemBy(int eb) {
  switch (eb) {
    case 1: return Load ? &Ld<1, Sgn, N> : &St<1, N>;
    case 2: return Load ? &Ld<2, Sgn, N> : &St<2, N>;
    case 4: return Load ? &Ld<4, Sgn, N> : &St<4, N>;
    case 8: return Load ? &Ld<8, Sgn, N> : &St<8, N>;
    default: return nullptr;
  }
}

template <bool Load, bool Sgn>
WarpFn MemBy(int eb, int n) {
  switch (n) {
    case 1: return MemBy<Load, Sgn, 1>(eb);
    case 2: return MemBy<Load, Sgn, 2>(eb);
    case 4: return MemBy<Load, Sgn, 4>(eb);
    default: return nullptr;
  }
}

WarpFn BindMem(const Op& op, bool load) {
  // Ordered accesses (volatile, relaxed, acquire, release) keep their
  // per-thread handler: it orders them and yields in cooperative launches.
  if (op.sem != ptx::Semantics::kNone && op.sem != ptx::Semantics::kWeak) return nullptr;
  if (op.nshape != 2 || op.type == Type::kPred) return nullptr;
  const int n = load ? op.shape[0] : op.shape[1];  // elements (.v2, .v4)
  const int eb = TypeBytes(op.type);
  if (eb == 0 || eb > 8) return nullptr;
  switch (op.space) {
    case Space::kGlobal: case Space::kNone: case Space::kShared: case Space::kSharedCta: case Space::kSharedCluster:
      break;
    case Space::kParam: case Space::kConst:
      if (!load) return nullptr;
      break;
    default: return nullptr;  // local: per thread
  }
  const bool sgn = IsSignedInt(op.type);
  return load ? (sgn ? MemBy<true, true>(eb, n) : MemBy<true, false>(eb, n)) : MemBy<false, false>(eb, n);
}

// --- Barriers and warp collectives (ops_barrier.cc, ops_warp.cc) -------------

// bar.sync a{, b} / barrier.sync: the active lanes wait at barrier a, as
// ExecBarrier leaves each (release stays with the block scheduler).
Flow BarSync(WarpExec& w, const Op& op, uint32_t active) {
  uint64_t id[kWarpSize];
  if (!Gather(w, w.Opd(op, 0), id)) return Flow::kPerThread;
  for (uint32_t m = active; m; m &= m - 1) {
    if (id[__builtin_ctz(m)] >= kNumBarriers) return Flow::kPerThread;  // its handler words the error
  }
  for (uint32_t m = active; m; m &= m - 1) {
    const int l = __builtin_ctz(m);
    w.lanes[l]->bar_id = static_cast<uint8_t>(id[l]);
    w.lanes[l]->set_state(Thread::kBarrier);
  }
  return Flow::kBlock;
}

// The member mask every active lane passes (operand `at`), when all of
// them pass the same one and it names them all; else (mask != the value)
// false. `active` must be every live lane (the caller checks).
bool UniformMask(const WarpExec& w, const Op& op, int at, uint32_t active, uint32_t* mask) {
  uint64_t m[kWarpSize];
  if (!Gather(w, w.Opd(op, at), m)) return false;
  const uint32_t want = static_cast<uint32_t>(m[__builtin_ctz(active)]);
  if ((want & active) != active) return false;
  for (uint32_t r = active; r; r &= r - 1) {
    if (static_cast<uint32_t>(m[__builtin_ctz(r)]) != want) return false;
  }
  *mask = want;
  return true;
}

// shfl.sync d{|p}, a, b, c, membermask when every lane of the warp that has
// not exited stands at it, all with one member mask that names them all:
// then no lane has yet to arrive, and the exchange is what
// ResolveCollective computes for that group. Anything else (lanes elsewhere
// or guarded off, masks that differ or leave out a lane) waits the
// per-thread way.
Flow Shfl(WarpExec& w, const Op& op, uint32_t active) {
  if (active != w.live || TypeBits(op.type) != 32) return Flow::kPerThread;
  const int nd = op.shape[0];
  uint64_t val[kWarpSize], b[kWarpSize], c[kWarpSize];
  if (!Gather(w, w.Opd(op, nd), val) || !Gather(w, w.Opd(op, nd + 1), b) || !Gather(w, w.Opd(op, nd + 2), c)) {
    return Flow::kPerThread;
  }
  uint32_t mask = 0;
  if (!UniformMask(w, op, nd + 3, active, &mask)) return Flow::kPerThread;
  uint64_t d[kWarpSize], p[kWarpSize];
  for (uint32_t m = active; m; m &= m - 1) {
    const int l = __builtin_ctz(m);
    int j = l;
    p[l] = ShuffleSource(op.shfl, l, b[l], c[l], active, &j) ? 1 : 0;
    d[l] = val[j] & 0xFFFFFFFFu;
  }
  Scatter(w, w.Opd(op, 0), active, d);
  if (nd == 2) Scatter(w, w.Opd(op, 1), active, p);
  return Flow::kNext;
}

// vote.sync.{all,any,uni,ballot} d, {!}p, membermask with every live lane
// at it (as Shfl): what ResolveCollective computes for that group.
Flow Vote(WarpExec& w, const Op& op, uint32_t active) {
  uint32_t mask = 0;
  if (active != w.live || !UniformMask(w, op, 2, active, &mask)) return Flow::kPerThread;
  const Operand& po = w.Opd(op, 1);
  uint64_t p[kWarpSize];
  if (!Gather(w, po, p)) return Flow::kPerThread;
  uint32_t ballot = 0;
  for (uint32_t r = active; r; r &= r - 1) {
    const int l = __builtin_ctz(r);
    if (Pred(po, p[l])) ballot |= 1u << l;
  }
  uint64_t v = 0;
  switch (op.vote) {
    case ptx::VoteMode::kAll: v = ballot == active; break;
    case ptx::VoteMode::kAny: v = ballot != 0; break;
    case ptx::VoteMode::kUni: v = ballot == active || ballot == 0; break;
    case ptx::VoteMode::kBallot: v = ballot; break;
    default: return Flow::kPerThread;  // its handler words the error
  }
  uint64_t d[kWarpSize];
  for (uint32_t l = 0; l < kWarpSize; ++l) d[l] = v;
  Scatter(w, w.Opd(op, 0), active, d);
  return Flow::kNext;
}

// activemask d with every live lane at it: they are the converged lanes.
Flow Activemask(WarpExec& w, const Op& op, uint32_t active) {
  if (active != w.live) return Flow::kPerThread;
  uint64_t d[kWarpSize];
  for (uint32_t l = 0; l < kWarpSize; ++l) d[l] = active;
  Scatter(w, w.Opd(op, 0), active, d);
  return Flow::kNext;
}

}  // namespace

WarpFn BindWarp(const Op& op, const std::vector<Operand>& operands) {
  (void)operands;
  if (op.fn == &ExecIntArith) return BindInt(op);
  if (op.fn == &ExecFloatArith) return BindFloat(op);
  if (op.fn == &ExecSetp) return BindSetp(op);
  if (op.fn == &ExecSelp) return op.count >= 4 ? &Selp : nullptr;
  if (op.fn == &ExecCvt) return BindCvt(op);
  if (op.fn == &ExecCvta) return BindCvta(op);
  if (op.fn == &ExecMov) {
    if (op.nshape == 2 && op.shape[0] > 1) return &MovUnpack;
    if (op.nshape == 2 && op.shape[1] > 1) return &MovPack;
    return op.type == Type::kPred ? &MovPred : &Mov;
  }
  if (op.fn == &ExecLd) return BindMem(op, true);  // ld, ld.global.nc, ldu
  if (op.fn == &ExecSt) return BindMem(op, false);
  if (op.fn == &ExecBarrier && op.sub == kBarSync) return &BarSync;
  if (op.fn == &ExecCollective && op.opcode == Opcode::kShfl && op.nshape >= 1) return &Shfl;
  if (op.fn == &ExecCollective && op.opcode == Opcode::kVote && op.count >= 3) return &Vote;
  if (op.fn == &ExecCollective && op.opcode == Opcode::kActivemask) return &Activemask;
  return nullptr;
}

}  // namespace phos::interp
