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
        t.state = Thread::kExited;
        return fl;
      }
      continue;
    }
    const Op& op = x.fn->ops[f.pc];
    ++t.icount;
    if (limit && t.icount > limit) {
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
      case Flow::kExit: t.state = Thread::kExited; return Flow::kExit;
      case Flow::kError:
        *error = b.prog->Where(static_cast<int>(func), pc) + ": " + x.error;
        *api_error = x.api_error;
        return Flow::kError;
    }
  }
}

std::string ThreadName(const Block& b, const Thread& t) {
  return "block (" + std::to_string(b.ctaid[0]) + "," + std::to_string(b.ctaid[1]) + "," +
         std::to_string(b.ctaid[2]) + ") thread (" + std::to_string(t.tid[0]) + "," + std::to_string(t.tid[1]) +
         "," + std::to_string(t.tid[2]) + ")";
}

}  // namespace

Status RunBlock(Block& b, int kernel, const uint8_t* params, size_t params_size, uint64_t* icount) {
  const Program& p = *b.prog;
  const Function& kf = p.function(kernel);
  b.threads.resize(b.nthreads);
  std::fill(std::begin(b.bar_arrived), std::end(b.bar_arrived), 0u);
  for (uint32_t i = 0; i < b.nthreads; ++i) {
    Thread& t = b.threads[i];
    t.regs.clear();
    t.params.clear();
    t.local.clear();
    t.frames.clear();
    t.state = Thread::kRunnable;
    t.carry = false;
    t.wait_timed_out = false;
    t.wait_epoch = 0;
    t.icount = 0;
    t.tid[0] = i % b.ntid[0];
    t.tid[1] = (i / b.ntid[0]) % b.ntid[1];
    t.tid[2] = i / (b.ntid[0] * b.ntid[1]);
    t.linear = i;
    t.lane = i % 32;
    t.warp = i / 32;
    PushFrame(t, p, static_cast<uint32_t>(kernel));
    const size_t n = std::min<size_t>(params_size, kf.param_size);
    if (n > 0) std::memcpy(t.params.data(), params, n);  // a kernel without parameters has no buffer
  }
  Status result;
  std::string error;
  int stalls = 0;  // rounds in which only timed-out mbarrier waits moved
  for (;;) {
    for (Thread& t : b.threads) {
      if (t.state != Thread::kRunnable) continue;
      int api_error = 0;
      if (RunThread(b, t, &error, &api_error) == Flow::kError) {
        result = Status::FailedPrecondition("ptx interp: " + ThreadName(b, t) + ": " + error);
        if (api_error != 0) result = result.WithApiError(api_error);
        break;
      }
    }
    if (!result.ok()) break;
    // Warp collectives.
    bool progress = false;
    for (uint32_t w = 0; w < b.nwarps && result.ok(); ++w) {
      Thread* lanes[32] = {};
      uint32_t exited = 0, waiting = 0;
      for (uint32_t l = 0; l < 32; ++l) {
        const uint32_t i = w * 32 + l;
        if (i >= b.nthreads) {
          exited |= 1u << l;
          continue;
        }
        lanes[l] = &b.threads[i];
        if (lanes[l]->state == Thread::kExited) exited |= 1u << l;
        if (lanes[l]->state == Thread::kCollective) waiting |= 1u << l;
      }
      while (waiting) {
        const int first = __builtin_ctz(waiting);
        const Thread& a = *lanes[first];
        const uint32_t group = CollectiveGroup(b, lanes, waiting, first);
        waiting &= ~group;
        const Flow fl = ResolveCollective(b, lanes, group, exited, &error);
        if (fl == Flow::kNext) progress = true;
        if (fl == Flow::kError) {
          const Frame& f = a.frames.back();
          result = Status::FailedPrecondition("ptx interp: " + ThreadName(b, a) + ": " +
                                              p.Where(static_cast<int>(f.func), f.pc) + ": " + error);
          break;
        }
      }
    }
    if (!result.ok()) break;
    if (progress) {
      stalls = 0;
      continue;
    }
    // Threads waiting at an mbarrier that changed since they yielded.
    bool woken = false;
    for (Thread& t : b.threads) {
      if (t.state == Thread::kYield && t.wait_epoch != b.mbar_epoch) {
        t.state = Thread::kRunnable;
        woken = true;
      }
    }
    if (woken) {
      stalls = 0;
      continue;
    }
    uint32_t exited = 0, yielded = 0;
    for (const Thread& t : b.threads) {
      exited += t.state == Thread::kExited;
      yielded += t.state == Thread::kYield;
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
        if (t.state == Thread::kYield) {
          t.state = Thread::kRunnable;
          t.wait_timed_out = true;
        }
      }
      continue;
    }
    // Nobody can move: report the first thread stuck at a collective.
    for (const Thread& t : b.threads) {
      if (t.state == Thread::kYield) {
        const Frame& f = t.frames.back();
        result = Status::FailedPrecondition("ptx interp: deadlock: " + ThreadName(b, t) + " waits at " +
                                            p.Where(static_cast<int>(f.func), f.pc) +
                                            " for an mbarrier phase that no thread of the block completes");
        break;
      }
      if (t.state == Thread::kBarrier) {
        const Frame& f = t.frames.back();
        result = Status::FailedPrecondition("ptx interp: deadlock: " + ThreadName(b, t) + " waits at " +
                                            p.Where(static_cast<int>(f.func), f.pc) + " on " +
                                            BarrierWaitText(b, t) + " for threads that never arrive");
        break;
      }
      if (t.state == Thread::kCollective) {
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
  for (const Thread& t : b.threads) *icount += t.icount;
  return result;
}

}  // namespace phos::interp
