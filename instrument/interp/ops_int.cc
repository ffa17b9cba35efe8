// Integer and bitwise instructions (and logic on .pred).
#include <algorithm>

#include "interp/exec.h"

namespace phos::interp {

using ptx::MulMode;
using ptx::Opcode;
using ptx::Type;

namespace {

using u128 = unsigned __int128;
using i128 = __int128;

int Msb(uint64_t v) { return v ? 63 - __builtin_clzll(v) : -1; }

uint64_t Prmt(uint32_t a, uint32_t b, uint32_t c, uint8_t mode) {
  const uint64_t tmp = (uint64_t{b} << 32) | a;
  auto byte = [&](unsigned i) { return static_cast<uint32_t>((tmp >> (8 * (i & 7))) & 0xFF); };
  uint32_t d = 0;
  const unsigned s = c & 3;
  for (unsigned i = 0; i < 4; ++i) {
    uint32_t v;
    switch (mode) {
      case 0: {
        const unsigned sel = (c >> (4 * i)) & 0xF;
        v = byte(sel & 7);
        if (sel & 8) v = (v & 0x80) ? 0xFF : 0;
        break;
      }
      case 1: v = byte(s + i); break;                       // f4e
      case 2: v = byte(s - i); break;                       // b4e
      case 3: v = byte(s); break;                           // rc8
      case 4: v = byte(std::max(i, s)); break;              // ecl
      case 5: v = byte(std::min(i, s)); break;              // ecr
      default: v = byte((s & 1) * 2 + (i & 1)); break;      // rc16
    }
    d |= v << (8 * i);
  }
  return d;
}

Flow PredLogic(Exec& x, const Op& op) {
  auto P = [&](int i) { return PredVal(x, Opd(x, op, i)); };
  bool r;
  switch (op.opcode) {
    case Opcode::kAnd: r = P(1) && P(2); break;
    case Opcode::kOr: r = P(1) || P(2); break;
    case Opcode::kXor: r = P(1) != P(2); break;
    case Opcode::kNot: case Opcode::kCnot: r = !P(1); break;
    default: return Fail(x, "unsupported .pred operation");
  }
  Set(x, op, 0, r);
  return Flow::kNext;
}

// dp4a / dp2a: 32-bit dot products of bytes (dp4a: a's four bytes with
// b's) or of a's two 16-bit halves with two of b's bytes (dp2a.lo: bytes 0
// and 1, .hi: bytes 2 and 3), added to c, wrapping. Each of a and b is
// signed or unsigned by its own type (op.type, op.type2).
Flow DotProduct(Exec& x, const Op& op) {
  const bool sa = IsSignedInt(op.type), sb = IsSignedInt(op.type2);
  const uint32_t a = static_cast<uint32_t>(Src(x, op, 1)), b = static_cast<uint32_t>(Src(x, op, 2));
  auto byte = [&](uint32_t v, int i, bool sgn) -> int64_t {
    const uint32_t u = (v >> (8 * i)) & 0xFF;
    return sgn ? static_cast<int8_t>(u) : static_cast<int64_t>(u);
  };
  int64_t acc = static_cast<int64_t>(static_cast<uint32_t>(Src(x, op, 3)));
  if (op.opcode == Opcode::kDp4a) {
    for (int i = 0; i < 4; ++i) acc += byte(a, i, sa) * byte(b, i, sb);
  } else {
    const int first = op.sub == 1 ? 2 : 0;  // .hi : .lo
    for (int i = 0; i < 2; ++i) {
      const uint32_t h = (a >> (16 * i)) & 0xFFFF;
      const int64_t ha = sa ? static_cast<int16_t>(h) : static_cast<int64_t>(h);
      acc += ha * byte(b, first + i, sb);
    }
  }
  Set(x, op, 0, static_cast<uint64_t>(acc) & 0xFFFFFFFFu);
  return Flow::kNext;
}

}  // namespace

Flow ExecIntArith(Exec& x, const Op& op) {
  const Type t = op.type;
  if (t == Type::kPred) return PredLogic(x, op);
  if (op.opcode == Opcode::kDp4a || op.opcode == Opcode::kDp2a) return DotProduct(x, op);
  const int bits = TypeBits(t);
  if (bits <= 0 || bits > 64) return Fail(x, "unsupported type");
  const bool sgn = IsSignedInt(t);
  auto U = [&](int i) { return Trunc(Src(x, op, i), bits); };
  auto S = [&](int i) { return SExt(Src(x, op, i), bits); };
  auto out = [&](uint64_t v) {
    Set(x, op, 0, Trunc(v, bits));
    return Flow::kNext;
  };
  const uint64_t mask = Trunc(~uint64_t{0}, bits);
  switch (op.opcode) {
    case Opcode::kAdd: case Opcode::kAddc: {
      const uint64_t cin = op.opcode == Opcode::kAddc && x.t->carry ? 1 : 0;
      if (op.sat && sgn) {
        const i128 r = static_cast<i128>(S(1)) + S(2);
        const i128 lo = -(static_cast<i128>(1) << (bits - 1)), hi = (static_cast<i128>(1) << (bits - 1)) - 1;
        return out(static_cast<uint64_t>(static_cast<int64_t>(std::clamp(r, lo, hi))));
      }
      const u128 r = static_cast<u128>(U(1)) + U(2) + cin;
      if (op.cc) x.t->carry = (r >> bits) != 0;
      return out(static_cast<uint64_t>(r));
    }
    case Opcode::kSub: case Opcode::kSubc: {
      const uint64_t bin = op.opcode == Opcode::kSubc && x.t->carry ? 1 : 0;
      if (op.sat && sgn) {
        const i128 r = static_cast<i128>(S(1)) - S(2);
        const i128 lo = -(static_cast<i128>(1) << (bits - 1)), hi = (static_cast<i128>(1) << (bits - 1)) - 1;
        return out(static_cast<uint64_t>(static_cast<int64_t>(std::clamp(r, lo, hi))));
      }
      const i128 r = static_cast<i128>(U(1)) - static_cast<i128>(U(2)) - static_cast<i128>(bin);
      if (op.cc) x.t->carry = r < 0;
      return out(static_cast<uint64_t>(r));
    }
    case Opcode::kMul: case Opcode::kMad: case Opcode::kMadc: {
      const bool mad = op.opcode == Opcode::kMad || op.opcode == Opcode::kMadc;
      const i128 prod = sgn ? static_cast<i128>(S(1)) * S(2) : static_cast<i128>(static_cast<u128>(U(1)) * U(2));
      if (op.mul_mode == MulMode::kWide) {
        if (bits > 32) return Fail(x, ".wide needs a 16/32-bit type");
        uint64_t r = static_cast<uint64_t>(prod);
        if (mad) r += Src(x, op, 3);
        Set(x, op, 0, Trunc(r, bits * 2));
        return Flow::kNext;
      }
      uint64_t r = op.mul_mode == MulMode::kHi ? static_cast<uint64_t>(static_cast<u128>(prod) >> bits)
                                               : static_cast<uint64_t>(prod);
      if (mad) {
        if (op.sat && sgn && bits == 32) {
          const int64_t v = SExt(r, 32) + S(3);
          return out(static_cast<uint64_t>(std::clamp<int64_t>(v, INT32_MIN, INT32_MAX)));
        }
        // Extended precision (mad.cc / madc): the addition takes the carry
        // flag in (madc) and sets it (.cc), like add.cc / addc. Multi-word
        // products (e.g. libdevice's sin/cos range reduction) chain them.
        const uint64_t cin = op.opcode == Opcode::kMadc && x.t->carry ? 1 : 0;
        const u128 sum = static_cast<u128>(Trunc(r, bits)) + U(3) + cin;
        if (op.cc) x.t->carry = (sum >> bits) != 0;
        r = static_cast<uint64_t>(sum);
      }
      return out(r);
    }
    case Opcode::kMul24: case Opcode::kMad24: {
      const int64_t a = sgn ? SExt(U(1), 24) : static_cast<int64_t>(U(1) & 0xFFFFFF);
      const int64_t b = sgn ? SExt(U(2), 24) : static_cast<int64_t>(U(2) & 0xFFFFFF);
      uint64_t r = static_cast<uint64_t>(a * b);
      if (op.mul_mode == MulMode::kHi) r >>= 16;
      if (op.opcode == Opcode::kMad24) r += Src(x, op, 3);
      return out(r);
    }
    case Opcode::kDiv: case Opcode::kRem: {
      const bool div = op.opcode == Opcode::kDiv;
      if (sgn) {
        const int64_t a = S(1), b = S(2);
        if (b == 0) return out(div ? mask : static_cast<uint64_t>(a));
        if (b == -1) return out(div ? static_cast<uint64_t>(0) - static_cast<uint64_t>(a) : 0);
        return out(static_cast<uint64_t>(div ? a / b : a % b));
      }
      const uint64_t a = U(1), b = U(2);
      if (b == 0) return out(div ? mask : a);
      return out(div ? a / b : a % b);
    }
    case Opcode::kAbs: { const int64_t a = S(1); return out(static_cast<uint64_t>(a < 0 ? -static_cast<uint64_t>(a) : a)); }
    case Opcode::kNeg: return out(0 - U(1));
    case Opcode::kMin: case Opcode::kMax: {
      const bool mn = op.opcode == Opcode::kMin;
      if (sgn) {
        const int64_t a = S(1), b = S(2);
        return out(static_cast<uint64_t>(mn ? std::min(a, b) : std::max(a, b)));
      }
      const uint64_t a = U(1), b = U(2);
      return out(mn ? std::min(a, b) : std::max(a, b));
    }
    case Opcode::kSad: {
      const uint64_t diff = sgn ? static_cast<uint64_t>(S(1) > S(2) ? S(1) - S(2) : S(2) - S(1))
                                : (U(1) > U(2) ? U(1) - U(2) : U(2) - U(1));
      return out(diff + U(3));
    }
    case Opcode::kPopc: Set(x, op, 0, static_cast<uint64_t>(__builtin_popcountll(U(1)))); return Flow::kNext;
    case Opcode::kClz: {
      const uint64_t a = U(1);
      Set(x, op, 0, static_cast<uint64_t>(a ? __builtin_clzll(a) - (64 - bits) : bits));
      return Flow::kNext;
    }
    case Opcode::kBfind: {
      uint64_t a = U(1);
      if (sgn && S(1) < 0) a = Trunc(~a, bits);
      const int pos = Msb(a);
      uint64_t r = 0xFFFFFFFFu;
      if (pos >= 0) r = op.sub ? static_cast<uint64_t>(bits - 1 - pos) : static_cast<uint64_t>(pos);
      Set(x, op, 0, r);
      return Flow::kNext;
    }
    case Opcode::kBrev: {
      const uint64_t a = U(1);
      uint64_t r = 0;
      for (int i = 0; i < bits; ++i) r |= ((a >> i) & 1) << (bits - 1 - i);
      return out(r);
    }
    case Opcode::kBfe: {
      const uint64_t a = U(1);
      const int pos = static_cast<int>(Src(x, op, 2) & 0xFF), len = static_cast<int>(Src(x, op, 3) & 0xFF);
      const int msb = bits - 1;
      const uint64_t sbit = (!sgn || len == 0) ? 0 : (a >> std::min(pos + len - 1, msb)) & 1;
      uint64_t r = 0;
      for (int i = 0; i <= msb; ++i) {
        const uint64_t bit = (i < len && pos + i <= msb) ? (a >> (pos + i)) & 1 : sbit;
        r |= bit << i;
      }
      return out(r);
    }
    case Opcode::kBfi: {
      const uint64_t f = U(1);
      uint64_t r = U(2);
      const int pos = static_cast<int>(Src(x, op, 3) & 0xFF), len = static_cast<int>(Src(x, op, 4) & 0xFF);
      for (int i = 0; i < len && pos + i < bits; ++i) {
        r = (r & ~(uint64_t{1} << (pos + i))) | (((f >> i) & 1) << (pos + i));
      }
      return out(r);
    }
    case Opcode::kPrmt:
      return out(Prmt(static_cast<uint32_t>(Src(x, op, 1)), static_cast<uint32_t>(Src(x, op, 2)),
                      static_cast<uint32_t>(Src(x, op, 3)), op.sub));
    case Opcode::kLop3: {
      const uint64_t a = U(1), b = U(2), c = U(3);
      const uint64_t lut = Src(x, op, 4) & 0xFF;
      uint64_t r = 0;
      for (int k = 0; k < 8; ++k) {
        if ((lut >> k) & 1) r |= ((k & 4) ? a : ~a) & ((k & 2) ? b : ~b) & ((k & 1) ? c : ~c);
      }
      return out(r);
    }
    case Opcode::kShf: {
      const uint64_t lo = Src(x, op, 1) & 0xFFFFFFFFu, hi = Src(x, op, 2) & 0xFFFFFFFFu;
      const uint64_t c = Src(x, op, 3) & 0xFFFFFFFFu;
      const unsigned n = (op.sub & 2) ? static_cast<unsigned>(std::min<uint64_t>(c, 32)) : static_cast<unsigned>(c & 31);
      const uint64_t v = (hi << 32) | lo;
      const uint64_t r = (op.sub & 1) ? (v >> n) : ((v << n) >> 32);
      Set(x, op, 0, r & 0xFFFFFFFFu);
      return Flow::kNext;
    }
    case Opcode::kShl: {
      const uint64_t n = Src(x, op, 2) & 0xFFFFFFFFu;
      return out(n >= static_cast<uint64_t>(bits) ? 0 : U(1) << n);
    }
    case Opcode::kShr: {
      const uint64_t n = Src(x, op, 2) & 0xFFFFFFFFu;
      if (sgn) {
        const int64_t a = S(1);
        return out(static_cast<uint64_t>(n >= static_cast<uint64_t>(bits) ? (a < 0 ? -1 : 0) : a >> n));
      }
      return out(n >= static_cast<uint64_t>(bits) ? 0 : U(1) >> n);
    }
    case Opcode::kAnd: return out(U(1) & U(2));
    case Opcode::kOr: return out(U(1) | U(2));
    case Opcode::kXor: return out(U(1) ^ U(2));
    case Opcode::kNot: return out(~U(1));
    case Opcode::kCnot: return out(U(1) == 0 ? 1 : 0);
    default: return Fail(x, "unsupported integer operation");
  }
}

}  // namespace phos::interp
