// Block scheduler. Threads of a block are logical threads stepped one at a
// time on the worker's host thread: each runs until it exits or waits
// (bar.sync, warp collective, an incomplete mbarrier wait). When no thread
// can run, waiting warp collectives whose member lanes have all arrived
// complete; failing that, mbarrier waiters whose mbarrier changed resume;
// failing that, a barrier at which every live thread waits releases;
// failing that, mbarrier waits time out (answer false) for up to two
// rounds; failing that, the block is deadlocked and the launch fails (a GPU
// would hang).
#include "interp/executor.h"

#include <algorithm>
#include <cstring>

namespace phos::interp {
namespace {

// Steps one thread until it blocks, exits or fails.
Flow RunThread(Block& b, Thread& t, std::string* error, int* api_error) {
  Exec x = ExecOf(b, t);
  const uint64_t limit = b.opts->max_instructions_per_thread;
  for (;;) {
    Frame& f = t.frames.back();
    if (f.pc >= x.fn->ops.size()) {  // fell off the end: return
      static const Op kRet{};
      const Flow fl = ExecRet(x, kRet);
      if (fl == Flow::kExit) {
        t.set_state(Thread::kExited);
        return fl;
      }
      continue;
    }
    const Op& op = x.fn->ops[f.pc];
    ++t.icount();
    if (limit && t.icount() > limit) {
      *error = b.prog->Where(static_cast<int>(f.func), f.pc) + ": thread exceeded " + std::to_string(limit) +
               " instructions (max_instructions_per_thread)";
      return Flow::kError;
    }
    if (op.guard >= 0 && ((x.r[op.guard] & 1) != 0) == op.guard_neg) {
      ++f.pc;
      continue;
    }
    const uint32_t func = f.func, pc = f.pc;
    switch (op.fn(x, op)) {
      case Flow::kNext: ++t.frames.back().pc; break;
      case Flow::kJump: break;
      case Flow::kBlock: return Flow::kBlock;
      case Flow::kExit: t.set_state(Thread::kExited); return Flow::kExit;
      case Flow::kError:
        *error = b.prog->Where(static_cast<int>(func), pc) + ": " + x.error;
        *api_error = x.api_error;
        return Flow::kError;
      case Flow::kPerThread:  // only warp handlers answer it
        *error = b.prog->Where(static_cast<int>(func), pc) + ": internal: a per-thread handler declined";
        return Flow::kError;
    }
  }
}

std::string ThreadName(const Block& b, const Thread& t) {
  return "block (" + std::to_string(b.ctaid[0]) + "," + std::to_string(b.ctaid[1]) + "," +
         std::to_string(b.ctaid[2]) + ") thread (" + std::to_string(t.tid[0]) + "," + std::to_string(t.tid[1]) +
         "," + std::to_string(t.tid[2]) + ")";
}


// Lanes of warp `w` (nullptr past the block's end) and the ones that exist.
uint32_t WarpLanes(Block& b, uint32_t w, Thread** lanes) {
  uint32_t present = 0;
  for (uint32_t l = 0; l < kWarpSize; ++l) {
    const uint32_t i = w * kWarpSize + l;
    lanes[l] = i < b.nthreads ? &b.threads[i] : nullptr;
    if (lanes[l] != nullptr) present |= 1u << l;
  }
  return present;
}

// Completes the warp collectives of warp `w` whose member lanes have all
// arrived; *progress when one did.
Status ResolveWarpCollectives(Block& b, uint32_t w, bool* progress) {
  Thread* lanes[kWarpSize];
  const uint32_t present = WarpLanes(b, w, lanes);
  const WarpState& ws = b.warps[w];
  uint32_t exited = ~present, waiting = 0;
  for (uint32_t m = present; m; m &= m - 1) {
    const int l = __builtin_ctz(m);
    if (ws.state[l] == Thread::kExited) exited |= 1u << l;
    if (ws.state[l] == Thread::kCollective) waiting |= 1u << l;
  }
  std::string error;
  while (waiting) {
    const int first = __builtin_ctz(waiting);
    const Thread& a = *lanes[first];
    const uint32_t group = CollectiveGroup(b, lanes, waiting, first);
    waiting &= ~group;
    const Flow fl = ResolveCollective(b, lanes, group, exited, &error);
    if (fl == Flow::kNext) *progress = true;
    if (fl == Flow::kError) {
      const Frame& f = a.frames.back();
      return Status::FailedPrecondition("ptx interp: " + ThreadName(b, a) + ": " +
                                        b.prog->Where(static_cast<int>(f.func), f.pc) + ": " + error);
    }
  }
  return Status();
}

// --- Lockstep warps ---------------------------------------------------------

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
  for (uint64_t ran = 0;; ++ran) {
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

// Runs the lanes of warp `w` until none can run (each waits or has exited;
// warp collectives whose lanes have all arrived complete here) or the warp
// used its turn (*yielded: lanes can still run). `entering`: the block's
// first round, every lane at the kernel's first op.
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

}  // namespace

Status RunBlock(Block& b, int kernel, const uint8_t* params, size_t params_size, uint64_t* icount) {
  const Program& p = *b.prog;
  const Function& kf = p.function(kernel);
  const size_t param_bytes = std::min<size_t>(params_size, kf.param_size);
  if (b.threads.size() != b.nthreads) {  // the worker's first block: the ids stay for the launch
    b.threads.resize(b.nthreads);
    for (uint32_t i = 0; i < b.nthreads; ++i) {
      Thread& t = b.threads[i];
      // The launch's parameters, once: the formals are read-only (stores
      // to them fail the launch), so they stay in every thread's buffer for
      // all its blocks; only call-site .param variables past them are
      // zeroed anew per block.
      t.params.assign(kf.param_size, 0);
      if (param_bytes > 0) std::memcpy(t.params.data(), params, param_bytes);  // a kernel without parameters has no buffer
      t.tid[0] = i % b.ntid[0];
      t.tid[1] = (i / b.ntid[0]) % b.ntid[1];
      t.tid[2] = i / (b.ntid[0] * b.ntid[1]);
      t.linear = i;
      t.lane = i % kWarpSize;
      t.warp = i / kWarpSize;
    }
    b.warps.resize(b.nwarps);
    for (uint32_t i = 0; i < b.nthreads; ++i) {
      for (int d = 0; d < 3; ++d) b.warps[i / kWarpSize].tid[d][i % kWarpSize] = b.threads[i].tid[d];
    }
  }
  b.warps.resize(b.nwarps);
  // Every thread enters the kernel: frame 0 (what PushFrame would make,
  // done for the whole block at once, reusing the previous block's
  // vectors): rows [0, num_regs) of its warp zeroed, its parameter buffer
  // the launch's formals (there since the first block) then zeros, its
  // local depot zeroed.
  for (WarpState& ws : b.warps) {
    // The worker's first block: all zero. Later ones: only the registers
    // the kernel may read before setting (the others are set first).
    // (At least one row: a lane's view of a kernel without registers still
    // points into the vector.)
    if (kf.zero_all_at_entry || ws.regs.size() < size_t{std::max(kf.num_regs, 1u)} * kWarpSize) {
      ws.regs.assign(size_t{std::max(kf.num_regs, 1u)} * kWarpSize, 0);
    } else {
      for (uint32_t r : kf.zero_at_entry) std::fill_n(ws.regs.data() + size_t{r} * kWarpSize, kWarpSize, 0);
    }
    std::fill(std::begin(ws.state), std::end(ws.state), Thread::kRunnable);
    std::fill(std::begin(ws.icount), std::end(ws.icount), 0);
  }
  std::fill(std::begin(b.bar_arrived), std::end(b.bar_arrived), 0u);
  Frame entry;
  entry.func = static_cast<uint32_t>(kernel);
  for (uint32_t i = 0; i < b.nthreads; ++i) {
    Thread& t = b.threads[i];
    t.warp_state = &b.warps[i / kWarpSize];
    t.reg_top = kf.num_regs;
    t.params.resize(kf.param_size);  // (a thread that exited inside a call left its callees' frames)
    if (kf.has_callsite_params) std::memset(t.params.data() + kf.formal_bytes, 0, kf.param_size - kf.formal_bytes);
    if (kf.local_size > 0) {
      t.local.resize(kf.local_size);
      std::memset(t.local.data(), 0, kf.local_size);
    } else {
      t.local.clear();
    }
    t.frames.clear();
    t.frames.push_back(entry);
    t.carry = false;
    t.wait_timed_out = false;
    t.wait_epoch = 0;
  }
  b.launch_params = params;
  Status result;
  std::string error;
  int stalls = 0;  // rounds in which only timed-out mbarrier waits moved
  bool first_round = true;
  for (;;) {
    bool progress = false;  // a warp that used its turn, a collective that completed
    if (b.opts->thread_at_a_time) {
      for (Thread& t : b.threads) {
        if (t.state() != Thread::kRunnable) continue;
        int api_error = 0;
        if (RunThread(b, t, &error, &api_error) == Flow::kError) {
          result = Status::FailedPrecondition("ptx interp: " + ThreadName(b, t) + ": " + error);
          if (api_error != 0) result = result.WithApiError(api_error);
          break;
        }
      }
    } else {
      for (uint32_t w = 0; w < b.nwarps && result.ok(); ++w) {
        bool yielded = false;
        result = RunWarp(b, w, first_round, &yielded);
        progress = progress || yielded;
      }
      first_round = false;
    }
    if (!result.ok()) break;
    // Warp collectives. (RunWarp completes its warp's before it returns,
    // and nothing of a warp changes after: a lockstep round has none left.)
    if (b.opts->thread_at_a_time) {
      for (uint32_t w = 0; w < b.nwarps && result.ok(); ++w) result = ResolveWarpCollectives(b, w, &progress);
    }
    if (!result.ok()) break;
    if (progress) {
      stalls = 0;
      continue;
    }
    // Threads waiting at an mbarrier that changed since they yielded (one
    // pass that also counts the finished and the still waiting).
    bool woken = false;
    uint32_t exited = 0, yielded = 0;
    for (uint32_t i = 0; i < b.nthreads; ++i) {  // states from the warps' arrays: Threads only for yields
      uint8_t& state = b.warps[i / kWarpSize].state[i % kWarpSize];
      if (state == Thread::kYield && b.threads[i].wait_epoch != b.mbar_epoch) {
        state = Thread::kRunnable;
        woken = true;
      }
      exited += state == Thread::kExited;
      yielded += state == Thread::kYield;
    }
    if (woken) {
      stalls = 0;
      continue;
    }
    if (exited == b.nthreads) break;
    bool released = false;
    if (!ReleaseBarriers(b, &released, &error)) {
      result = Status::FailedPrecondition("ptx interp: block (" + std::to_string(b.ctaid[0]) + "," +
                                          std::to_string(b.ctaid[1]) + "," + std::to_string(b.ctaid[2]) + "): " + error);
      break;
    }
    if (released) {
      stalls = 0;
      continue;
    }
    // Nothing else can move: let the mbarrier waits answer false once
    // (ops_mbarrier.cc); twice in a row without any change is a deadlock.
    if (yielded > 0 && stalls < 2) {
      ++stalls;
      for (Thread& t : b.threads) {
        if (t.state() == Thread::kYield) {
          t.set_state(Thread::kRunnable);
          t.wait_timed_out = true;
        }
      }
      continue;
    }
    // Nobody can move: report the first thread stuck at a collective.
    for (const Thread& t : b.threads) {
      if (t.state() == Thread::kYield) {
        const Frame& f = t.frames.back();
        result = Status::FailedPrecondition("ptx interp: deadlock: " + ThreadName(b, t) + " waits at " +
                                            p.Where(static_cast<int>(f.func), f.pc) +
                                            " for an mbarrier phase that no thread of the block completes");
        break;
      }
      if (t.state() == Thread::kBarrier) {
        const Frame& f = t.frames.back();
        result = Status::FailedPrecondition("ptx interp: deadlock: " + ThreadName(b, t) + " waits at " +
                                            p.Where(static_cast<int>(f.func), f.pc) + " on " +
                                            BarrierWaitText(b, t) + " for threads that never arrive");
        break;
      }
      if (t.state() == Thread::kCollective) {
        const Frame& f = t.frames.back();
        result = Status::FailedPrecondition(
            "ptx interp: deadlock: " + ThreadName(b, t) + " waits at " + p.Where(static_cast<int>(f.func), f.pc) +
            " for lanes of its member mask that never arrive (or wait at a barrier)");
        break;
      }
    }
    if (result.ok()) result = Status::Internal("ptx interp: block scheduler made no progress");
    break;
  }
  uint64_t ops = 0;
  for (uint32_t i = 0; i < b.nthreads; ++i) ops += b.warps[i / kWarpSize].icount[i % kWarpSize];
  *icount += ops;
  return result;
}

}  // namespace phos::interp
