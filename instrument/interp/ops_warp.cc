// Barriers and warp collectives as rendezvous points.
//
// A thread reaching bar.sync/barrier.sync or a warp collective (shfl.sync,
// vote.sync, match.sync, redux.sync, activemask, bar.warp.sync) stops there
// (Flow::kBlock) without advancing its pc; the block scheduler
// (executor.cc) resolves the waiting lanes of each warp once no thread of
// the block can run.
//
// Who meets whom follows the PTX ISA for sm_70 and later (independent
// thread scheduling): a .sync collective waits until every non-exited lane
// of its member mask has executed "the same instruction with the same
// qualifiers and the same membermask" — the same kind of instruction, not
// the same site, so lanes at two different shfl.sync sites with equal masks
// exchange values (CollectiveGroup). Lanes at one site with different masks
// (cooperative groups' labeled_partition: match.any.sync, then redux.sync
// over each lane's own mask) form separate groups, each computing over its
// own lanes only. activemask has no rendezvous: its result is the lanes
// that reached that very instruction while the rest of the warp was
// blocked or finished, i.e. the lanes that would be converged on a GPU.
#include <algorithm>
#include <cstdio>

#include "interp/exec.h"

namespace phos::interp {

using ptx::Opcode;
using ptx::ShflMode;
using ptx::Type;
using ptx::VoteMode;

// CTA barriers (bar.sync, bar.red) wait in ops_barrier.cc; of the bar
// opcodes only bar.warp.sync comes here.
Flow ExecCollective(Exec& x, const Op&) {
  x.t->set_state(Thread::kCollective);
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
    case Opcode::kElect: return nd;
    case Opcode::kBar: case Opcode::kBarrier: return 0;
    default: return -1;
  }
}

// The member mask lane `t` passes to `op` (all lanes when it has none).
uint32_t LaneMask(Block& b, Thread& t, const Op& op) {
  const int at = MaskOperand(op);
  if (at < 0) return 0xFFFFFFFFu;
  Exec x = ExecOf(b, t);
  return static_cast<uint32_t>(Src(x, op, at));
}

// "The same qualifiers" of the PTX ISA's rendezvous rule.
bool SameCollective(const Op& a, const Op& c) {
  const int nda = a.nshape ? a.shape[0] : 0, ndc = c.nshape ? c.shape[0] : 0;
  return a.opcode == c.opcode && a.sub == c.sub && a.type == c.type && a.shfl == c.shfl && a.vote == c.vote &&
         a.atom_op == c.atom_op && nda == ndc;
}

// Every lane of `group` done with its collective: on to the next op.
Flow Advance(Thread* const* lanes, uint32_t group) {
  for (uint32_t m = group; m; m &= m - 1) {
    Thread& t = *lanes[__builtin_ctz(m)];
    t.set_state(Thread::kRunnable);
    ++t.frames.back().pc;
  }
  return Flow::kNext;
}

}  // namespace

bool ShuffleSource(ShflMode mode, int lane, uint64_t b, uint64_t c, uint32_t group, int* source) {
  const uint32_t bval = static_cast<uint32_t>(b) & 31;
  const uint32_t cval = static_cast<uint32_t>(c) & 31, seg = (static_cast<uint32_t>(c) >> 8) & 31;
  const int max_lane = static_cast<int>((static_cast<uint32_t>(lane) & seg) | (cval & ~seg));
  const int min_lane = static_cast<int>(static_cast<uint32_t>(lane) & seg);
  int j = lane;
  bool p = false;
  switch (mode) {
    case ShflMode::kUp: j = lane - static_cast<int>(bval); p = j >= max_lane; break;
    case ShflMode::kDown: j = lane + static_cast<int>(bval); p = j <= max_lane; break;
    case ShflMode::kBfly: j = lane ^ static_cast<int>(bval); p = j <= max_lane; break;
    case ShflMode::kIdx: j = min_lane | static_cast<int>(bval & ~seg); p = j <= max_lane; break;
    default: break;
  }
  if (!p || j < 0 || j > 31 || !((group >> j) & 1)) j = lane;
  *source = j;
  return p;
}

uint32_t CollectiveGroup(Block& b, Thread* const* lanes, uint32_t waiting, int first) {
  Thread& a = *lanes[first];
  const Op& op = CurrentOp(b, a);
  uint32_t group = 0;
  if (op.opcode == Opcode::kActivemask) {
    for (uint32_t m = waiting; m; m &= m - 1) {
      const Thread& c = *lanes[__builtin_ctz(m)];
      if (c.frames.size() == a.frames.size() && c.frames.back().func == a.frames.back().func &&
          c.frames.back().pc == a.frames.back().pc) {
        group |= 1u << __builtin_ctz(m);
      }
    }
    return group;
  }
  const uint32_t mask = LaneMask(b, a, op);
  for (uint32_t m = waiting; m; m &= m - 1) {
    Thread& c = *lanes[__builtin_ctz(m)];
    const Op& cop = CurrentOp(b, c);
    if (cop.opcode != Opcode::kActivemask && SameCollective(op, cop) && LaneMask(b, c, cop) == mask) {
      group |= 1u << __builtin_ctz(m);
    }
  }
  return group;
}

Flow ResolveCollective(Block& b, Thread* const* lanes, uint32_t group, uint32_t exited, std::string* error) {
  Exec ctx[32];
  const Op* ops[32] = {};
  for (uint32_t m = group; m; m &= m - 1) {
    const int l = __builtin_ctz(m);
    ctx[l] = ExecOf(b, *lanes[l]);
    ops[l] = &CurrentOp(b, *lanes[l]);
  }
  const int lead = __builtin_ctz(group);
  // The lanes of a group may sit at different sites of the same kind of
  // collective: operand positions (shape) agree, operand slots do not, so
  // each lane reads its operands through its own op.
  const Op& op = *ops[lead];
  const int mask_at = MaskOperand(op);
  if (op.opcode == Opcode::kWmma || op.opcode == Opcode::kMma || op.opcode == Opcode::kLdmatrix ||
      op.opcode == Opcode::kStmatrix) {
    // .aligned over the whole warp
    if (~exited & ~group) return Flow::kBlock;
    const Flow f = op.opcode == Opcode::kWmma       ? WmmaMma(ctx, ops, group, error)
                   : op.opcode == Opcode::kMma      ? MmaSync(ctx, ops, group, error)
                   : op.opcode == Opcode::kLdmatrix ? Ldmatrix(ctx, ops, group, error)
                                                    : Stmatrix(ctx, ops, group, error);
    return f == Flow::kNext ? Advance(lanes, group) : Flow::kError;
  }
  if (mask_at >= 0) {
    const uint32_t want = static_cast<uint32_t>(Src(ctx[lead], op, mask_at));
    for (uint32_t m = group; m; m &= m - 1) {
      const int l = __builtin_ctz(m);
      if (!((want >> l) & 1)) {
        char hex[16];
        std::snprintf(hex, sizeof(hex), "0x%08x", want);
        *error = "lane " + std::to_string(l) + " executes a warp collective whose member mask " + hex +
                 " does not include it (undefined in the PTX ISA)";
        return Flow::kError;
      }
    }
    if (want & ~exited & ~group) return Flow::kBlock;
  }
  const int nd = op.nshape ? op.shape[0] : 0;  // equal for every lane (SameCollective)
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
      each([&](int l) { val[l] = Src(ctx[l], *ops[l], nd); });
      uint64_t res[32] = {};
      bool pv[32] = {};
      each([&](int l) {
        int j = l;
        pv[l] = ShuffleSource(op.shfl, l, Src(ctx[l], *ops[l], nd + 1), Src(ctx[l], *ops[l], nd + 2), group, &j);
        res[l] = val[j];
      });
      each([&](int l) {
        Set(ctx[l], *ops[l], 0, res[l] & 0xFFFFFFFFu);
        if (nd == 2) Set(ctx[l], *ops[l], 1, pv[l]);
      });
      break;
    }
    case Opcode::kVote: {
      uint32_t ballot = 0;
      each([&](int l) {
        if (PredVal(ctx[l], Opd(ctx[l], *ops[l], 1))) ballot |= 1u << l;
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
      each([&](int l) { Set(ctx[l], *ops[l], 0, op.vote == VoteMode::kBallot ? ballot : (r ? 1 : 0)); });
      break;
    }
    case Opcode::kMatch: {
      uint64_t val[32] = {};
      const int bits = TypeBits(op.type) ? TypeBits(op.type) : 32;
      each([&](int l) { val[l] = Trunc(Src(ctx[l], *ops[l], nd), bits); });
      if (op.sub == 2) {  // match.all
        bool same = true;
        each([&](int l) { same = same && val[l] == val[lead]; });
        each([&](int l) {
          Set(ctx[l], *ops[l], 0, same ? group : 0);
          if (nd == 2) Set(ctx[l], *ops[l], 1, same);
        });
      } else {
        each([&](int l) {
          uint32_t m = 0;
          each([&](int k) {
            if (val[k] == val[l]) m |= 1u << k;
          });
          Set(ctx[l], *ops[l], 0, m);
        });
      }
      break;
    }
    case Opcode::kRedux: {
      const bool sgn = IsSignedInt(op.type);
      int64_t acc = 0;
      bool first = true;
      each([&](int l) {
        const uint64_t raw = Src(ctx[l], *ops[l], 1) & 0xFFFFFFFFu;
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
      each([&](int l) { Set(ctx[l], *ops[l], 0, static_cast<uint64_t>(acc) & 0xFFFFFFFFu); });
      break;
    }
    case Opcode::kActivemask:
      each([&](int l) { Set(ctx[l], *ops[l], 0, group); });
      break;
    case Opcode::kElect:  // elect.sync d|p, membermask: the lowest lane leads
      each([&](int l) {
        Set(ctx[l], *ops[l], 0, static_cast<uint64_t>(lead));
        if (nd == 2) Set(ctx[l], *ops[l], 1, l == lead ? 1 : 0);
      });
      break;
    case Opcode::kBar: case Opcode::kBarrier:  // bar.warp.sync
      break;
    default:
      *error = "unsupported warp collective";
      return Flow::kError;
  }
  return Advance(lanes, group);
}

}  // namespace phos::interp
