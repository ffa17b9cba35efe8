// Lockstep warps: the lanes of a warp that stand at the same op run it
// together (docs/instrument.md §6 "Execution model"). RunWarp picks the
// group (the lanes at the deepest frame and lowest pc, so lanes that
// branched apart meet again where the paths join), RunGroup runs it op by
// op through the ops' whole-warp handlers (warp_ops.cc) or their
// per-thread ones lane by lane, until the lanes part, wait or finish.
#include <algorithm>

#include "interp/executor.h"

namespace phos::interp {
namespace {

// A group runs at most this many ops while other lanes of its warp could
// run, and a warp at most kWarpTurn while it holds the block's host thread:
// lanes spinning on a flag another lane or warp sets must let that one run
// (independent thread scheduling guarantees it progress). Large enough that
// the re-grouping costs nothing measurable.
constexpr uint64_t kGroupTurn = 4096;
constexpr uint64_t kWarpTurn = 65536;

// Where a lane stands; lanes that stand at the same place form a group.
struct Place {  // no initializers: RunWarp keeps an array of 32 it fills itself
  size_t depth;
  uint32_t func, pc, reg_base;
  static Place Of(const Thread& t) {
    const Frame& f = t.frames.back();
    return {t.frames.size(), f.func, f.pc, f.reg_base};
  }
  bool operator==(const Place& o) const {
    return depth == o.depth && func == o.func && pc == o.pc && reg_base == o.reg_base;
  }
  // Runs first: the deepest frame (a callee returns before its callers go
  // on), then the lowest pc — the branch that has further to go to where
  // the paths join, so lanes that branched apart meet again there.
  bool Before(const Place& o) const {
    if (depth != o.depth) return depth > o.depth;
    if (func != o.func) return func < o.func;
    return pc < o.pc;
  }
};

// Why a group stopped running together.
struct GroupEnd {
  uint64_t steps = 0;  // ops it ran (its lanes' icount went up by as many)
  bool turn_over = false;  // it used its turn; its lanes can still run
};

// Runs the lanes `group` of warp `w` (all runnable, all at one Place) op by
// op until they part (a branch some take, a call, a lane that waits or
// exits), or `turn` ops ran. Between ops the shared pc is kept here, not
// in the frames; the frames and icounts are brought up to date before an
// op runs through its per-thread handler and when the group ends. `live`:
// the warp's lanes that have not exited (warp handlers of collectives
// complete one at once only when all of them stand at it).
Status RunGroup(Block& b, uint32_t w, Thread* const* lanes, uint32_t group, uint32_t live, uint64_t turn,
                GroupEnd* end) {
  const Program& p = *b.prog;
  const int lead = __builtin_ctz(group);
  const Place at = Place::Of(*lanes[lead]);
  const Function& fn = p.function(static_cast<int>(at.func));
  WarpState& rf = b.warps[w];
  const uint64_t limit = b.opts->max_instructions_per_thread;
  uint64_t most = 0;  // the highest icount among the lanes (when there is a limit)
  if (limit) {
    for (uint32_t m = group; m; m &= m - 1) most = std::max(most, rf.icount[__builtin_ctz(m)]);
  }
  uint32_t pc = at.pc;
  uint64_t pending = 0;  // ops run since the icounts were last brought up to date
  auto settle = [&] {
    for (uint32_t l = 0; l < kWarpSize; ++l) {  // no mask walk: the group's lanes get `pending`, others 0
      rf.icount[l] += pending & (uint64_t{0} - ((group >> l) & 1));
    }
    most += pending;
    end->steps += pending;
    pending = 0;
  };
  auto park = [&](uint32_t at_pc) {  // the lanes' frames take the shared pc
    for (uint32_t m = group; m; m &= m - 1) lanes[__builtin_ctz(m)]->frames.back().pc = at_pc;
  };
  // Where the warp's other runnable lanes stand in this frame: the group
  // stops when it reaches one of those places, so the lanes that branched
  // apart run on together from there (the paths' join), as a GPU
  // reconverges them. Going on alone would run the group's ops after the
  // join before the other lanes ran theirs before it: warp-synchronous code
  // (cuSPARSE's csrgeam reads a slot another lane rewrites after the join)
  // would see a wrong order. Other lanes do not move while this group runs.
  uint32_t others[kWarpSize];
  int n_others = 0;
  for (uint32_t l = 0; l < kWarpSize; ++l) {
    if (((group >> l) & 1) || lanes[l] == nullptr || rf.state[l] != Thread::kRunnable) continue;
    const Place o = Place::Of(*lanes[l]);
    if (o.depth != at.depth || o.func != at.func || o.reg_base != at.reg_base) continue;
    if (std::find(others, others + n_others, o.pc) == others + n_others) others[n_others++] = o.pc;
  }
  for (uint64_t ran = 0;; ++ran) {
    if (ran > 0 && n_others > 0 && std::find(others, others + n_others, pc) != others + n_others) {
      settle();
      park(pc);
      return Status();
    }
    if (ran == turn) {
      settle();
      park(pc);
      end->turn_over = true;
      return Status();
    }
    if (pc >= fn.ops.size()) {  // fell off the end: return (not counted, as an op)
      settle();
      park(pc);
      static const Op kRet{};
      for (uint32_t m = group; m; m &= m - 1) {
        Thread& t = *lanes[__builtin_ctz(m)];
        Exec x = ExecOf(b, t);
        if (ExecRet(x, kRet) == Flow::kExit) t.set_state(Thread::kExited);
      }
      return Status();
    }
    const Op& op = fn.ops[pc];
    ++pending;
    if (limit && most + pending > limit) {
      settle();
      park(pc);
      return Status::FailedPrecondition("ptx interp: " + ThreadName(b, *lanes[lead]) + ": " + p.Where(static_cast<int>(at.func), pc) +
                                        ": thread exceeded " + std::to_string(limit) +
                                        " instructions (max_instructions_per_thread)");
    }
    uint32_t active = group;
    if (op.guard >= 0) {
      const uint64_t* g = rf.regs.data() + (size_t{at.reg_base} + static_cast<uint32_t>(op.guard)) * kWarpSize;
      const uint64_t flip = op.guard_neg ? 1 : 0;
      uint32_t holds = 0;  // every lane's guard (each has the row); no branch per lane
      for (uint32_t l = 0; l < kWarpSize; ++l) holds |= static_cast<uint32_t>((g[l] ^ flip) & 1) << l;
      active = group & holds;
      if (active == 0) {
        ++pc;
        continue;
      }
    }
    // exit, or ret from the kernel itself: the lanes finish (as ExecExit
    // and ExecRet answer for them); the others go on.
    if (op.fn == &ExecExit || (op.fn == &ExecRet && at.depth == 1)) {
      settle();
      for (uint32_t l = 0; l < kWarpSize; ++l) {  // (an exited lane's frame keeps the pc it had: nothing reads it)
        if ((active >> l) & 1) rf.state[l] = Thread::kExited;
      }
      for (uint32_t m = group & ~active; m; m &= m - 1) lanes[__builtin_ctz(m)]->frames.back().pc = pc + 1;
      return Status();
    }
    if (op.fn == &ExecBra) {
      if (active == group) {
        pc = op.target;
        continue;
      }
      settle();  // the lanes part
      for (uint32_t m = group; m; m &= m - 1) {
        const int l = __builtin_ctz(m);
        lanes[l]->frames.back().pc = (active >> l) & 1 ? op.target : pc + 1;
      }
      return Status();
    }
    if (op.warp_fn != nullptr) {
      WarpExec wx;
      wx.b = &b;
      wx.lanes = lanes;
      wx.fn = &fn;
      wx.rows = rf.regs.data() + size_t{at.reg_base} * kWarpSize;
      wx.ws = &rf;
      wx.depth = at.depth;
      wx.live = live;
      const Flow fl = op.warp_fn(wx, op, active);
      if (fl == Flow::kNext) {
        ++pc;
        continue;
      }
      if (fl == Flow::kBlock) {  // the active lanes wait here; the rest go on
        settle();
        for (uint32_t m = group; m; m &= m - 1) {
          const int l = __builtin_ctz(m);
          lanes[l]->frames.back().pc = (active >> l) & 1 ? pc : pc + 1;
        }
        return Status();
      }
    }
    // Through the op's per-thread handler, lane by lane, as the per-thread
    // interpreter runs it (frames and icounts up to date).
    settle();
    park(pc);
    for (uint32_t m = group; m; m &= m - 1) {
      const int l = __builtin_ctz(m);
      Thread& t = *lanes[l];
      Flow fl = Flow::kNext;
      if ((active >> l) & 1) {
        Exec x = ExecOf(b, t);
        fl = op.fn(x, op);
        if (fl == Flow::kError) {
          Status st = Status::FailedPrecondition("ptx interp: " + ThreadName(b, t) + ": " +
                                                 p.Where(static_cast<int>(at.func), pc) + ": " + x.error);
          return x.api_error != 0 ? st.WithApiError(x.api_error) : st;
        }
      }
      if (fl == Flow::kNext) ++t.frames.back().pc;
      if (fl == Flow::kExit) t.set_state(Thread::kExited);
    }
    // Together still? (All runnable, at one place: the same function and
    // frame, so `fn` and the rows stay right.)
    const Place next = Place::Of(*lanes[lead]);
    for (uint32_t m = group; m; m &= m - 1) {
      const Thread& t = *lanes[__builtin_ctz(m)];
      if (t.state() != Thread::kRunnable || !(Place::Of(t) == next)) return Status();
    }
    if (!(next.depth == at.depth && next.func == at.func && next.reg_base == at.reg_base)) return Status();
    pc = next.pc;
  }
}

}  // namespace

Status RunWarp(Block& b, uint32_t w, bool entering, bool* yielded) {
  Thread* lanes[kWarpSize];
  const uint32_t present = WarpLanes(b, w, lanes);
  const WarpState& ws = b.warps[w];
  uint64_t left = kWarpTurn;
  int rotate_after = -1;  // after a group's turn ran out: lead with the next runnable lane after it
  *yielded = false;
  while (left > 0) {
    if (entering) {  // every lane at the kernel's first op: one group, nothing to look at
      entering = false;
      GroupEnd end;
      PHOS_RETURN_IF_ERROR(RunGroup(b, w, lanes, present, present, left, &end));
      left -= std::min(left, std::max<uint64_t>(end.steps, 1));
      continue;
    }
    // One pass over the lanes: which can run, and where each stands.
    Place places[kWarpSize];
    uint32_t runnable = 0, live = 0, collective = 0;
    for (uint32_t m = present; m; m &= m - 1) {
      const int l = __builtin_ctz(m);
      if (ws.state[l] != Thread::kExited) live |= 1u << l;
      if (ws.state[l] == Thread::kCollective) collective |= 1u << l;
      if (ws.state[l] != Thread::kRunnable) continue;
      runnable |= 1u << l;
      places[l] = Place::Of(*lanes[l]);
    }
    if (runnable == 0) {
      if (collective == 0) return Status();  // all wait at barriers or have finished
      bool progress = false;
      PHOS_RETURN_IF_ERROR(ResolveWarpCollectives(b, w, &progress));
      if (progress) continue;
      return Status();
    }
    int lead = __builtin_ctz(runnable);
    auto group_of = [&](int leader) {
      uint32_t g = 0;
      for (uint32_t m = runnable; m; m &= m - 1) {
        const int l = __builtin_ctz(m);
        if (places[l] == places[leader]) g |= 1u << l;
      }
      return g;
    };
    uint32_t group = group_of(lead);  // usually every runnable lane: converged
    if (rotate_after >= 0) {
      const uint32_t after = runnable & ~((2u << rotate_after) - 1);
      lead = __builtin_ctz(after ? after : runnable);
      rotate_after = -1;
      group = group_of(lead);
    } else if (group != runnable) {
      for (uint32_t m = runnable & (runnable - 1); m; m &= m - 1) {
        const int l = __builtin_ctz(m);
        if (places[l].Before(places[lead])) lead = l;
      }
      group = group_of(lead);
    }
    const uint64_t turn = std::min(left, group == runnable ? left : kGroupTurn);
    GroupEnd end;
    PHOS_RETURN_IF_ERROR(RunGroup(b, w, lanes, group, live, turn, &end));
    left -= std::min(left, std::max<uint64_t>(end.steps, 1));
    if (end.turn_over) rotate_after = lead;
  }
  for (uint32_t m = present; m; m &= m - 1) {
    if (ws.state[__builtin_ctz(m)] == Thread::kRunnable) *yielded = true;
  }
  return Status();
}

}  // namespace phos::interp
