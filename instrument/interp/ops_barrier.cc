// CTA barriers: bar.sync / barrier.sync, bar.arrive, bar.red (what
// __syncthreads, __syncthreads_count/_and/_or and named barriers compile to).
//
// A thread at bar.sync or bar.red waits (Thread::kBarrier) at barrier
// a (0..15); bar.arrive counts an arrival at barrier a without waiting
// (producer/consumer code: producers arrive, consumers sync). The block
// scheduler (executor.cc) calls ReleaseBarriers once no thread can run: a
// barrier releases when its waiting threads plus the generation's arrivals
// reach the thread count b, or — without b — when every thread of the block
// that has not exited waits there (exited threads count as arrived, as
// before). Release computes bar.red's result over the waiting threads
// (popc: how many had c true; and/or of c) and starts a new generation.
#include "interp/exec.h"

namespace phos::interp {

namespace {

// Operand positions: bar.sync a{, b}; bar.arrive a, b; bar.red d, a{, b}, c.
int BarrierOperand(const Op& op) { return op.sub == kBarRed ? 1 : 0; }

}  // namespace

Flow ExecBarrier(Exec& x, const Op& op) {
  const uint64_t id = Src(x, op, BarrierOperand(op));
  if (id >= kNumBarriers) return Fail(x, "barrier " + std::to_string(id) + " is outside 0..15");
  x.t->bar_id = static_cast<uint8_t>(id);
  x.t->set_state(Thread::kBarrier);
  return Flow::kBlock;
}

Flow ExecBarArrive(Exec& x, const Op& op) {
  const uint64_t id = Src(x, op, 0);
  if (id >= kNumBarriers) return Fail(x, "barrier " + std::to_string(id) + " is outside 0..15");
  ++x.b->bar_arrived[id];
  return Flow::kNext;
}

bool ReleaseBarriers(Block& b, bool* released, std::string* error) {
  *released = false;
  // One pass: who has finished, and who waits at which barrier.
  uint32_t exited = 0;
  uint32_t waiting_at[kNumBarriers] = {};
  Thread* first_at[kNumBarriers] = {};
  for (Thread& t : b.threads) {
    exited += t.state() == Thread::kExited;
    if (t.state() == Thread::kBarrier) {
      if (waiting_at[t.bar_id]++ == 0) first_at[t.bar_id] = &t;
    }
  }
  for (uint32_t id = 0; id < kNumBarriers; ++id) {
    const uint32_t waiting = waiting_at[id];
    Thread* first = first_at[id];
    if (first == nullptr) continue;
    const Op& op0 = CurrentOp(b, *first);
    uint64_t want = b.nthreads - exited;  // no count: every thread still running
    uint64_t have = waiting + b.bar_arrived[id];
    if (op0.target & kBarHasCount) {
      Exec x = ExecOf(b, *first);
      want = Src(x, op0, BarrierOperand(op0) + 1) & 0xFFFFFFFFu;
      if (want == 0 || want % 32 != 0 || want > b.nthreads + 31) {
        *error = "barrier " + std::to_string(id) + " thread count " + std::to_string(want) +
                 " is not a positive multiple of 32 within the block";
        return false;
      }
    }
    if (have < want) continue;
    // bar.red: the reduction over the waiting threads' predicates.
    uint32_t popc = 0, count = 0;
    if (op0.sub == kBarRed) {
      for (Thread& t : b.threads) {
        if (t.state() != Thread::kBarrier || t.bar_id != id) continue;
        Exec x = ExecOf(b, t);
        const Op& op = CurrentOp(b, t);
        if (op.sub != kBarRed || op.target != op0.target) {
          *error = "threads meet at barrier " + std::to_string(id) + " with different bar.red operations";
          return false;
        }
        popc += PredVal(x, Opd(x, op, (op.target & kBarHasCount) ? 3 : 2)) ? 1 : 0;
        ++count;
      }
    }
    for (Thread& t : b.threads) {
      if (t.state() != Thread::kBarrier || t.bar_id != id) continue;
      if (op0.sub == kBarRed) {
        Exec x = ExecOf(b, t);
        const Op& op = CurrentOp(b, t);
        uint64_t v = popc;
        if (op0.target & kBarRedAnd) v = popc == count ? 1 : 0;
        if (op0.target & kBarRedOr) v = popc > 0 ? 1 : 0;
        Set(x, op, 0, v);
      }
      t.set_state(Thread::kRunnable);
      ++t.frames.back().pc;
    }
    b.bar_arrived[id] = 0;
    *released = true;
  }
  return true;
}

std::string BarrierWaitText(const Block& b, const Thread& t) {
  return "barrier " + std::to_string(t.bar_id) + " (" + std::to_string(b.bar_arrived[t.bar_id]) +
         " bar.arrive arrivals)";
}

}  // namespace phos::interp
