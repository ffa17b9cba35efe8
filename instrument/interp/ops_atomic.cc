// atom / red on global, shared and generic addresses. Blocks run on
// different host threads, so every RMW is a real host atomic
// (std::atomic_ref on the translated host pointer; CAS loops for min/max/
// inc/dec and floating-point ops). Shared memory needs no atomicity (one
// host thread per block) but uses the same code.
#include <atomic>
#include <cmath>

#include "interp/exec.h"

namespace phos::interp {

using ptx::AtomOp;
using ptx::Type;

namespace {

template <typename U>
U Combine(AtomOp op, Type t, U old, U b) {
  using S = std::make_signed_t<U>;
  switch (op) {
    case AtomOp::kMin:
      if (t == Type::kF32) return static_cast<U>(F32Bits(std::fmin(AsF32(old), AsF32(b))));
      if (t == Type::kF64) return static_cast<U>(F64Bits(std::fmin(AsF64(old), AsF64(b))));
      if (IsSignedInt(t)) return static_cast<S>(b) < static_cast<S>(old) ? b : old;
      return b < old ? b : old;
    case AtomOp::kMax:
      if (t == Type::kF32) return static_cast<U>(F32Bits(std::fmax(AsF32(old), AsF32(b))));
      if (t == Type::kF64) return static_cast<U>(F64Bits(std::fmax(AsF64(old), AsF64(b))));
      if (IsSignedInt(t)) return static_cast<S>(b) > static_cast<S>(old) ? b : old;
      return b > old ? b : old;
    case AtomOp::kAdd:
      if (t == Type::kF32) return static_cast<U>(F32Bits(AsF32(old) + AsF32(b)));
      if (t == Type::kF64) return static_cast<U>(F64Bits(AsF64(old) + AsF64(b)));
      return old + b;
    case AtomOp::kInc: return old >= b ? 0 : old + 1;
    case AtomOp::kDec: return (old == 0 || old > b) ? b : old - 1;
    default: return old;
  }
}

template <typename U>
U Rmw(U* p, AtomOp op, Type t, U b, U c) {
  std::atomic_ref<U> a(*p);
  const bool flt = t == Type::kF32 || t == Type::kF64;
  switch (op) {
    case AtomOp::kAnd: return a.fetch_and(b);
    case AtomOp::kOr: return a.fetch_or(b);
    case AtomOp::kXor: return a.fetch_xor(b);
    case AtomOp::kExch: return a.exchange(b);
    case AtomOp::kCas: {
      U expected = b;
      a.compare_exchange_strong(expected, c);
      return expected;
    }
    case AtomOp::kAdd:
      if (!flt) return a.fetch_add(b);
      [[fallthrough]];
    default: {
      U old = a.load(std::memory_order_relaxed);
      while (!a.compare_exchange_weak(old, Combine(op, t, old, b))) {
      }
      return old;
    }
  }
}

}  // namespace

Flow ExecAtom(Exec& x, const Op& op) {
  const bool has_dst = op.opcode == ptx::Opcode::kAtom;
  const int base = has_dst ? 1 : 0;
  const Type t = op.type;
  const int eb = TypeBytes(t);
  if ((eb != 4 && eb != 8) || op.vec != 1 || op.atom_op == AtomOp::kNone || t == Type::kF16x2 ||
      t == Type::kBF16x2) {
    return Fail(x, "unsupported atomic type/operation");
  }
  if ((op.atom_op == AtomOp::kInc || op.atom_op == AtomOp::kDec) && eb != 4) return Fail(x, "atom.inc/dec need .u32");
  const uint64_t addr = Src(x, op, base);
  uint8_t* p = Resolve(x, op.space, addr, static_cast<size_t>(eb), true);
  if (!p) return Flow::kError;
  if (reinterpret_cast<uintptr_t>(p) % eb != 0) return Fail(x, "misaligned atomic address");
  const uint64_t b = Src(x, op, base + 1);
  const uint64_t c = op.atom_op == AtomOp::kCas ? Src(x, op, base + 2) : 0;
  uint64_t old;
  if (eb == 4) {
    old = Rmw<uint32_t>(reinterpret_cast<uint32_t*>(p), op.atom_op, t, static_cast<uint32_t>(b), static_cast<uint32_t>(c));
    if (IsSignedInt(t)) old = static_cast<uint64_t>(SExt(old, 32));
  } else {
    old = Rmw<uint64_t>(reinterpret_cast<uint64_t*>(p), op.atom_op, t, b, c);
  }
  if (has_dst) Set(x, op, 0, old);
  return Flow::kNext;
}

}  // namespace phos::interp
