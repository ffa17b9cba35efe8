// Barriers and warp collectives as rendezvous points.
//
// A thread reaching bar.sync/barrier.sync or a warp collective (shfl.sync,
// vote.sync, match.sync, redux.sync, activemask, bar.warp.sync) stops there
// (Flow::kBlock) without advancing its pc; the block scheduler
// (executor.cc) calls ResolveCollective once no thread of the block can run.
// The lanes waiting at the same op form the group; the op completes when
// every lane of its member mask that has not exited is in the group, and
// then every lane of the group gets its result and moves on. activemask
// completes at once with the group as its result: the lanes that reached
// that instruction while the rest of the warp was blocked or finished,
// i.e. the lanes that would be converged on a GPU.
#include <algorithm>

#include "interp/exec.h"

namespace phos::interp {

using ptx::Opcode;
using ptx::ShflMode;
using ptx::Type;
using ptx::VoteMode;

bool IsBarrierOp(const Op& op) {
  return (op.opcode == Opcode::kBar || op.opcode == Opcode::kBarrier) && op.sub == 0;
}

Flow ExecCollective(Exec& x, const Op& op) {
  x.t->state = IsBarrierOp(op) ? Thread::kBarrier : Thread::kCollective;
  return Flow::kBlock;
}

namespace {

// Index of the member-mask operand, or -1 if the op has none.
int MaskOperand(const Op& op) {
  const int nd = op.nshape ? op.shape[0] : 0;
  switch (op.opcode) {
    case Opcode::kShfl: return nd + 3;
    case Opcode::kVote: case Opcode::kRedux: return 2;
    case Opcode::kMatch: return nd + 1;
    case Opcode::kBar: case Opcode::kBarrier: return 0;
    default: return -1;
  }
}

}  // namespace

Flow ResolveCollective(Block& b, Thread* const* lanes, uint32_t group, uint32_t exited, std::string* error) {
  Exec ctx[32];
  for (uint32_t m = group; m; m &= m - 1) {
    const int l = __builtin_ctz(m);
    ctx[l].b = &b;
    ctx[l].t = lanes[l];
    ctx[l].Refresh();
  }
  const int lead = __builtin_ctz(group);
  const Frame& f = lanes[lead]->frames.back();
  const Op& op = b.prog->function(static_cast<int>(f.func)).ops[f.pc];
  const int mask_at = MaskOperand(op);
  if (mask_at >= 0) {
    uint32_t want = 0;
    for (uint32_t m = group; m; m &= m - 1) {
      const int l = __builtin_ctz(m);
      want |= static_cast<uint32_t>(Src(ctx[l], op, mask_at));
    }
    if (want & ~exited & ~group) return Flow::kBlock;
  }
  const int nd = op.nshape ? op.shape[0] : 0;
  auto each = [&](auto fn) {
    for (uint32_t m = group; m; m &= m - 1) fn(__builtin_ctz(m));
  };
  switch (op.opcode) {
    case Opcode::kShfl: {
      if (TypeBits(op.type) != 32) {
        *error = "unsupported shfl type";
        return Flow::kError;
      }
      uint64_t val[32] = {};
      each([&](int l) { val[l] = Src(ctx[l], op, nd); });
      uint64_t res[32] = {};
      bool pv[32] = {};
      each([&](int l) {
        const uint32_t bval = static_cast<uint32_t>(Src(ctx[l], op, nd + 1)) & 31;
        const uint32_t c = static_cast<uint32_t>(Src(ctx[l], op, nd + 2));
        const uint32_t cval = c & 31, seg = (c >> 8) & 31;
        const int lane = l;
        const int max_lane = static_cast<int>((lane & seg) | (cval & ~seg));
        const int min_lane = static_cast<int>(lane & seg);
        int j = lane;
        bool p = false;
        switch (op.shfl) {
          case ShflMode::kUp: j = lane - static_cast<int>(bval); p = j >= max_lane; break;
          case ShflMode::kDown: j = lane + static_cast<int>(bval); p = j <= max_lane; break;
          case ShflMode::kBfly: j = lane ^ static_cast<int>(bval); p = j <= max_lane; break;
          case ShflMode::kIdx: j = min_lane | static_cast<int>(bval & ~seg); p = j <= max_lane; break;
          default: break;
        }
        if (!p || j < 0 || j > 31 || !((group >> j) & 1)) j = lane;
        res[l] = val[j];
        pv[l] = p;
      });
      each([&](int l) {
        Set(ctx[l], op, 0, res[l] & 0xFFFFFFFFu);
        if (nd == 2) Set(ctx[l], op, 1, pv[l]);
      });
      break;
    }
    case Opcode::kVote: {
      uint32_t ballot = 0;
      each([&](int l) {
        if (PredVal(ctx[l], Opd(ctx[l], op, 1))) ballot |= 1u << l;
      });
      bool r = false;
      switch (op.vote) {
        case VoteMode::kAll: r = ballot == group; break;
        case VoteMode::kAny: r = ballot != 0; break;
        case VoteMode::kUni: r = ballot == group || ballot == 0; break;
        case VoteMode::kBallot: break;
        default:
          *error = "unsupported vote mode";
          return Flow::kError;
      }
      each([&](int l) { Set(ctx[l], op, 0, op.vote == VoteMode::kBallot ? ballot : (r ? 1 : 0)); });
      break;
    }
    case Opcode::kMatch: {
      uint64_t val[32] = {};
      const int bits = TypeBits(op.type) ? TypeBits(op.type) : 32;
      each([&](int l) { val[l] = Trunc(Src(ctx[l], op, nd), bits); });
      if (op.sub == 2) {  // match.all
        bool same = true;
        each([&](int l) { same = same && val[l] == val[lead]; });
        each([&](int l) {
          Set(ctx[l], op, 0, same ? group : 0);
          if (nd == 2) Set(ctx[l], op, 1, same);
        });
      } else {
        each([&](int l) {
          uint32_t m = 0;
          each([&](int k) {
            if (val[k] == val[l]) m |= 1u << k;
          });
          Set(ctx[l], op, 0, m);
        });
      }
      break;
    }
    case Opcode::kRedux: {
      const bool sgn = IsSignedInt(op.type);
      int64_t acc = 0;
      bool first = true;
      each([&](int l) {
        const uint64_t raw = Src(ctx[l], op, 1) & 0xFFFFFFFFu;
        const int64_t v = sgn ? SExt(raw, 32) : static_cast<int64_t>(raw);
        if (first) {
          acc = v;
          first = false;
          return;
        }
        switch (op.atom_op) {
          case ptx::AtomOp::kAdd: acc += v; break;
          case ptx::AtomOp::kMin: acc = std::min(acc, v); break;
          case ptx::AtomOp::kMax: acc = std::max(acc, v); break;
          case ptx::AtomOp::kAnd: acc &= v; break;
          case ptx::AtomOp::kOr: acc |= v; break;
          case ptx::AtomOp::kXor: acc ^= v; break;
          default: break;
        }
      });
      if (op.atom_op == ptx::AtomOp::kNone || op.atom_op == ptx::AtomOp::kCas || op.atom_op == ptx::AtomOp::kExch ||
          op.atom_op == ptx::AtomOp::kInc || op.atom_op == ptx::AtomOp::kDec) {
        *error = "unsupported redux operation";
        return Flow::kError;
      }
      each([&](int l) { Set(ctx[l], op, 0, static_cast<uint64_t>(acc) & 0xFFFFFFFFu); });
      break;
    }
    case Opcode::kActivemask:
      each([&](int l) { Set(ctx[l], op, 0, group); });
      break;
    case Opcode::kBar: case Opcode::kBarrier:  // bar.warp.sync
      break;
    default:
      *error = "unsupported warp collective";
      return Flow::kError;
  }
  each([&](int l) {
    lanes[l]->state = Thread::kRunnable;
    ++lanes[l]->frames.back().pc;
  });
  return Flow::kNext;
}

}  // namespace phos::interp
