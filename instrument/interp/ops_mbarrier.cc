// mbarrier (sm_80+ shared-memory barriers: cuda::barrier, cuda::pipeline,
// cuda::memcpy_async), on which bulk copies (cp.async.bulk, sm_90)
// complete transactions.
//
// The 8-byte object in shared memory is the interpreter's own encoding (the
// ISA makes it opaque): bits 0-19 arrivals pending in the current phase,
// 20-39 the expected count, 40-61 the pending transaction count (signed:
// the ISA lets a complete_tx run before its expect_tx, as cuda::memcpy_async
// issues them), bit 63 the phase parity. A phase completes when no arrival
// and no transaction is pending: the parity flips and the pending count is
// reset to the expected one. The state token an arrive returns is the word
// before the arrival; a wait is complete once the parity differs from the
// token's (or, for .parity forms, from the operand).
//
// Waiting: the threads of a block run one at a time, so a thread whose
// try_wait/test_wait finds its phase incomplete yields (Thread::kYield) and
// the scheduler (executor.cc) runs the others; it resumes the waiter when
// an mbarrier of the block has changed since (Block::mbar_epoch). When
// nothing else can move, waiters are resumed once with the wait answering
// false (the ISA allows try_wait to time out, and test_wait never blocks),
// so code that does other work between polls still progresses; when that
// changes nothing either, the block is deadlocked (a GPU would hang).
//
// Bulk copies (ops_mem.cc) complete at issue, like cp.async: the mbarrier
// form then performs its complete_tx here (MbarrierCompleteTx).
#include <cstring>

#include "interp/exec.h"

namespace phos::interp {

namespace {

constexpr uint64_t kCountMask = (uint64_t{1} << 20) - 1;
constexpr int kExpectedShift = 20, kTxShift = 40, kTxBits = 22, kParityShift = 63;

struct Mbar {
  uint64_t pending = 0, expected = 0;
  int64_t tx = 0;
  uint64_t parity = 0;
  static Mbar Decode(uint64_t w) {
    Mbar m;
    m.pending = w & kCountMask;
    m.expected = (w >> kExpectedShift) & kCountMask;
    m.tx = SExt((w >> kTxShift) & ((uint64_t{1} << kTxBits) - 1), kTxBits);
    m.parity = (w >> kParityShift) & 1;
    return m;
  }
  uint64_t Encode() const {
    return (pending & kCountMask) | (expected & kCountMask) << kExpectedShift |
           (static_cast<uint64_t>(tx) & ((uint64_t{1} << kTxBits) - 1)) << kTxShift | parity << kParityShift;
  }
  void CompleteIfDone() {
    if (pending == 0 && tx == 0) {
      parity ^= 1;
      pending = expected;
    }
  }
};

// The mbarrier word at `addr` (shared, or generic pointing at shared).
uint8_t* Word(Exec& x, const Op& op, uint64_t addr) {
  ptx::Space s = op.space;
  if (s == ptx::Space::kSharedCta || s == ptx::Space::kSharedCluster) s = ptx::Space::kShared;  // cluster of one
  if (addr % 8 != 0) {
    x.error = "mbarrier object not 8-byte aligned";
    return nullptr;
  }
  return Resolve(x, s, addr, 8, true);
}

uint64_t Load(const uint8_t* p) {
  uint64_t w;
  std::memcpy(&w, p, 8);
  return w;
}

void Store(Exec& x, uint8_t* p, const Mbar& m) {
  const uint64_t w = m.Encode();
  std::memcpy(p, &w, 8);
  ++x.b->mbar_epoch;
}

Flow Update(Exec& x, const Op& op, uint64_t addr, int64_t arrivals, int64_t drop, int64_t tx, uint64_t* old) {
  uint8_t* p = Word(x, op, addr);
  if (p == nullptr) return Flow::kError;
  const uint64_t w = Load(p);
  if (old) *old = w;
  Mbar m = Mbar::Decode(w);
  if (arrivals > static_cast<int64_t>(m.pending) || drop > static_cast<int64_t>(m.expected)) {
    return Fail(x, "mbarrier arrival count exceeds the pending count (" + std::to_string(m.pending) + ")");
  }
  m.expected -= static_cast<uint64_t>(drop);
  m.tx += tx;
  m.pending -= static_cast<uint64_t>(arrivals);
  m.CompleteIfDone();
  Store(x, p, m);
  return Flow::kNext;
}

}  // namespace

Flow ExecMbarrier(Exec& x, const Op& op) {
  switch (op.sub) {
    case kMbarInit: {
      uint8_t* p = Word(x, op, Src(x, op, 0));
      if (p == nullptr) return Flow::kError;
      const uint64_t count = Src(x, op, 1) & 0xFFFFFFFFu;
      if (count == 0 || count > kCountMask) return Fail(x, "mbarrier.init count out of range 1..2^20-1");
      Mbar m;
      m.pending = m.expected = count;
      Store(x, p, m);
      return Flow::kNext;
    }
    case kMbarInval: {
      uint8_t* p = Word(x, op, Src(x, op, 0));
      if (p == nullptr) return Flow::kError;
      std::memset(p, 0, 8);
      ++x.b->mbar_epoch;
      return Flow::kNext;
    }
    case kMbarArrive: case kMbarArriveDrop: {
      // state, [addr]{, count | tx_count}
      const bool expect_tx = (op.target & kMbarFlagExpectTx) != 0;
      const bool has_count = op.nshape > 2;
      const int64_t n = has_count && !expect_tx ? static_cast<int64_t>(Src(x, op, 2) & 0xFFFFFFFFu) : 1;
      const int64_t tx = expect_tx ? static_cast<int64_t>(Src(x, op, 2) & 0xFFFFFFFFu) : 0;
      uint64_t old = 0;
      if (Update(x, op, Src(x, op, 1), n, op.sub == kMbarArriveDrop ? n : 0, tx, &old) != Flow::kNext) {
        return Flow::kError;
      }
      Set(x, op, 0, old);
      return Flow::kNext;
    }
    case kMbarExpectTx:
      return Update(x, op, Src(x, op, 0), 0, 0, static_cast<int64_t>(Src(x, op, 1) & 0xFFFFFFFFu), nullptr);
    case kMbarCompleteTx:
      return Update(x, op, Src(x, op, 0), 0, 0, -static_cast<int64_t>(Src(x, op, 1) & 0xFFFFFFFFu), nullptr);
    case kMbarPendingCount:
      Set(x, op, 0, Mbar::Decode(Src(x, op, 1)).pending);
      return Flow::kNext;
    case kMbarTestWait: case kMbarTryWait: {
      // waitComplete, [addr], state | phaseParity {, suspendTimeHint}
      uint8_t* p = Word(x, op, Src(x, op, 1));
      if (p == nullptr) return Flow::kError;
      const uint64_t waited = (op.target & kMbarFlagParity) ? (Src(x, op, 2) & 1) : ((Src(x, op, 2) >> kParityShift) & 1);
      const bool done = Mbar::Decode(Load(p)).parity != waited;
      Thread& t = *x.t;
      if (!done && !t.wait_timed_out) {
        t.wait_epoch = x.b->mbar_epoch;
        t.set_state(Thread::kYield);
        return Flow::kBlock;  // the pc stays: the wait runs again when resumed
      }
      t.wait_timed_out = false;
      Set(x, op, 0, done ? 1 : 0);
      return Flow::kNext;
    }
    default:
      return Fail(x, "unsupported mbarrier operation");
  }
}

// cp.async.mbarrier.arrive{.noinc}.shared.b64 [addr]: an arrival once the
// thread's earlier cp.async copies complete — they completed at issue.
// Without .noinc the pending count is raised first, so the net effect is
// none; with .noinc the arrival counts against the expected ones.
Flow ExecCpAsyncMbarrierArrive(Exec& x, const Op& op) {
  if (!(op.target & kMbarFlagNoInc)) return Flow::kNext;
  return Update(x, op, Src(x, op, 0), 1, 0, 0, nullptr);
}

Flow MbarrierCompleteTx(Exec& x, const Op& op, uint64_t addr, uint64_t bytes) {
  return Update(x, op, addr, 0, 0, -static_cast<int64_t>(bytes), nullptr);
}

}  // namespace phos::interp
