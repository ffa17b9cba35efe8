// The scalar "video" instructions: vadd, vsub, vabsdiff, vmin, vmax, vshl,
// vshr (PTX ISA "Scalar Video Instructions"). CUDA's libraries still use
// them (cuSPARSE's binary searches: vshr.u32.u32.u32.clamp.add, a shift and
// an add in one instruction).
//
// The 32-bit forms with whole-word operands are run:
//   vop.dtype.atype.btype{.sat}        d, a, b;
//   vop.dtype.atype.btype{.sat}.op2    d, a, b, c;     op2 = add, min, max
//   (vshl/vshr: btype is .u32 and a .clamp or .wrap mode follows .sat)
// Byte/half selectors on the operands (a.b0, b.h1) and the data-merge form
// (d.b0 with a c operand and no op2) are refused when the kernel is loaded
// (program.cc names the instruction): their registers do not resolve.
#include <algorithm>
#include <cstdint>

#include "interp/exec.h"
#include "interp/numeric.h"

namespace phos::interp {

using ptx::Opcode;

namespace {

int64_t Extend(uint64_t v, ptx::Type t) {
  const uint32_t w = static_cast<uint32_t>(v);
  return IsSignedInt(t) ? static_cast<int64_t>(static_cast<int32_t>(w)) : static_cast<int64_t>(w);
}

// The 32-bit result: clamped to the destination type's range with .sat,
// else its low 32 bits.
uint32_t Narrow(int64_t v, bool sat, bool signed_dst) {
  if (sat) {
    const int64_t lo = signed_dst ? INT32_MIN : 0;
    const int64_t hi = signed_dst ? INT32_MAX : UINT32_MAX;
    v = std::clamp(v, lo, hi);
  }
  return static_cast<uint32_t>(v);
}

}  // namespace

Flow ExecVideo(Exec& x, const Op& op) {
  // op.type: dtype; op.type2: atype; op.type3: btype.
  const int64_t a = Extend(Src(x, op, 1), op.type2);
  int64_t b = Extend(Src(x, op, 2), op.type3);
  const bool signed_dst = IsSignedInt(op.type);
  int64_t tmp = 0;
  switch (op.opcode) {
    case Opcode::kVadd: tmp = a + b; break;
    case Opcode::kVsub: tmp = a - b; break;
    case Opcode::kVabsdiff: tmp = a > b ? a - b : b - a; break;
    case Opcode::kVmin: tmp = std::min(a, b); break;
    case Opcode::kVmax: tmp = std::max(a, b); break;
    case Opcode::kVshl: case Opcode::kVshr: {
      // The shift amount is b as .u32: clamped to 32 or taken modulo 32.
      b = (op.sub & kVideoWrap) ? (b & 0x1f) : std::min<int64_t>(b, 32);
      tmp = op.opcode == Opcode::kVshl ? static_cast<int64_t>(static_cast<uint64_t>(a) << b) : a >> b;
      break;
    }
    default: return Fail(x, "unsupported video operation");
  }
  uint32_t d = Narrow(tmp, op.sat, signed_dst);
  const unsigned op2 = op.sub & kVideoOp2Mask;
  if (op2 != 0) {
    const uint32_t c = static_cast<uint32_t>(Src(x, op, 3));
    const int64_t dv = signed_dst ? static_cast<int32_t>(d) : static_cast<int64_t>(d);
    const int64_t cv = signed_dst ? static_cast<int32_t>(c) : static_cast<int64_t>(c);
    switch (op2) {
      case kVideoOp2Add: d = d + c; break;  // wraps, as a 32-bit add
      case kVideoOp2Min: d = static_cast<uint32_t>(std::min(dv, cv)); break;
      case kVideoOp2Max: d = static_cast<uint32_t>(std::max(dv, cv)); break;
      default: return Fail(x, "unsupported video secondary operation");
    }
  }
  Set(x, op, 0, d);
  return Flow::kNext;
}

}  // namespace phos::interp
