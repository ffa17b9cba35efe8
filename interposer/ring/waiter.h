// Waiting without burning a core: bounded spin, then futex.
//
// docs/architecture.md "Path 1": a cross-process round trip is ~0.1-0.3 µs when both sides spin
// and ~50 µs when both block in futex_wait, so a waiter first polls its
// condition for a bounded time (WaitPolicy::spin_ns, default 20 µs, checked
// against CLOCK_MONOTONIC every 32 pauses) and then sleeps on an EventWord
// (ring_layout.h) with FUTEX_WAIT (non-private: the word is in a MAP_SHARED
// memfd and the notifier is another process).
//
// Sleep/wake handshake (Dekker, no lost wake-ups):
//   waiter:   e = epoch.load(acquire); sleepers += 1 (seq_cst);
//             if (cond()) { sleepers -= 1; done }
//             futex_wait(&epoch, e, timeout); sleepers -= 1; re-check
//   notifier: <publish the state change>; fence(seq_cst);
//             if (sleepers.load() != 0) { epoch += 1; futex_wake(&epoch, all) }
// Either the waiter's re-check sees the state change, or the notifier sees
// sleepers != 0 and bumps epoch after the waiter read it, so futex_wait
// returns at once (EAGAIN) or is woken. With nobody asleep the notifier's
// cost is one fence and one load: no system call. (Under ThreadSanitizer,
// which does not model fences, the notifier uses a seq_cst RMW on
// `sleepers` instead of fence + load.)
//
// Liveness: every sleep is bounded by WaitPolicy::check_period_ms (100 ms by
// default); after each timeout the waiter calls `alive()` (the ring passes
// a check of the setup socket: EOF/POLLHUP = the peer died). A peer that
// closes in an orderly way also sets RegionHeader::closed and notifies every
// EventWord, which wakes sleepers at once. So a wait never hangs when the
// other process is killed: it returns Unavailable within ~one period.
#pragma once

#include <cstdint>
#include <functional>

#include "common/status.h"
#include "ring/ring_layout.h"

namespace phos::ring {

struct WaitPolicy {
  uint64_t spin_ns = 20'000;       // bounded busy-poll before sleeping
  uint32_t check_period_ms = 100;  // futex timeout between liveness checks
  int64_t deadline_ns = -1;        // absolute CLOCK_MONOTONIC deadline; -1 = none
};

/// Returns false when the peer is gone (called on the slow path only).
using AliveFn = std::function<bool()>;

/// CLOCK_MONOTONIC in ns (vDSO, ~20 ns).
int64_t MonotonicNs();

/// One CPU pause instruction (x86 `pause`; a compiler barrier elsewhere).
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::atomic_signal_fence(std::memory_order_seq_cst);
#endif
}

/// futex(FUTEX_WAIT) on a shared word. Returns 0 when woken or the value
/// differed, ETIMEDOUT on timeout, EINTR when interrupted (callers re-check).
int FutexWait(std::atomic<uint32_t>* word, uint32_t expected, int64_t timeout_ns);
/// futex(FUTEX_WAKE) for up to `count` waiters.
void FutexWake(std::atomic<uint32_t>* word, int count);

/// Notifier side of the handshake. Call after the state change is
/// published (release store). No syscall unless someone sleeps.
void Notify(EventWord* ev);

/// Waits until `ready()` returns true. `closed` (may be null) is the
/// region's closed word: non-zero ends the wait with Unavailable. `alive`
/// (may be empty) is checked after each sleep period. Returns Ok,
/// Unavailable (closed / peer dead) or NotReady (deadline passed).
Status WaitFor(EventWord* ev, const std::function<bool()>& ready, const std::atomic<uint32_t>* closed,
               const AliveFn& alive, const WaitPolicy& policy);

/// Template fast path: spins on `ready` without the std::function call
/// overhead, then falls back to WaitFor for the sleeping part.
template <typename Ready>
Status SpinThenWait(EventWord* ev, Ready&& ready, const std::atomic<uint32_t>* closed,
                    const AliveFn& alive, const WaitPolicy& policy) {
  if (ready()) return Status::Ok();
  if (policy.spin_ns > 0) {
    const int64_t start = MonotonicNs();
    for (;;) {
      for (int i = 0; i < 32; ++i) {
        CpuRelax();
        if (ready()) return Status::Ok();
      }
      if (closed && closed->load(std::memory_order_acquire) != 0) break;
      if (MonotonicNs() - start >= static_cast<int64_t>(policy.spin_ns)) break;
    }
  }
  WaitPolicy no_spin = policy;
  no_spin.spin_ns = 0;
  return WaitFor(ev, std::function<bool()>(std::ref(ready)), closed, alive, no_spin);
}

}  // namespace phos::ring
