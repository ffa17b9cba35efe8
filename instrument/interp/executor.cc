// Block scheduler. A block's threads run on the worker's host thread, warp
// by warp in lockstep groups (lockstep.cc) or, with
// LaunchOptions::thread_at_a_time, thread by thread (RunThread): each runs
// until it exits or waits (bar.sync, warp collective, an incomplete
// mbarrier wait). When no thread can run, waiting warp collectives whose
// member lanes have all arrived complete; failing that, mbarrier waiters
// whose mbarrier changed resume; failing that, a barrier at which every
// live thread waits releases; failing that, mbarrier waits time out
// (answer false) for up to two rounds; failing that, the block is
// deadlocked and the launch fails (a GPU would hang).
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

}  // namespace

std::string ThreadName(const Block& b, const Thread& t) {
  return "block (" + std::to_string(b.ctaid[0]) + "," + std::to_string(b.ctaid[1]) + "," +
         std::to_string(b.ctaid[2]) + ") thread (" + std::to_string(t.tid[0]) + "," + std::to_string(t.tid[1]) +
         "," + std::to_string(t.tid[2]) + ")";
}

uint32_t WarpLanes(Block& b, uint32_t w, Thread** lanes) {
  uint32_t present = 0;
  for (uint32_t l = 0; l < kWarpSize; ++l) {
    const uint32_t i = w * kWarpSize + l;
    lanes[l] = i < b.nthreads ? &b.threads[i] : nullptr;
    if (lanes[l] != nullptr) present |= 1u << l;
  }
  return present;
}

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
