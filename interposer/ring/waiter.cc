#include "ring/waiter.h"

#include <cerrno>
#include <climits>
#include <ctime>

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

// ThreadSanitizer does not model std::atomic_thread_fence. Under TSan the
// Dekker handshake uses a seq_cst read-modify-write on `sleepers` instead of
// fence + load (equally correct by the C++ model, slightly more expensive
// because it takes the line exclusive).
#if defined(__SANITIZE_THREAD__)
#define PHOS_RING_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define PHOS_RING_TSAN 1
#endif
#endif

namespace phos::ring {

int64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

int FutexWait(std::atomic<uint32_t>* word, uint32_t expected, int64_t timeout_ns) {
  timespec ts{};
  timespec* tsp = nullptr;
  if (timeout_ns >= 0) {
    ts.tv_sec = timeout_ns / 1'000'000'000;
    ts.tv_nsec = timeout_ns % 1'000'000'000;
    tsp = &ts;
  }
  // Non-private futex: the word lives in a MAP_SHARED mapping and the
  // notifier is another process (FUTEX_WAIT timeouts are relative).
  long rc = syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, tsp,
                    nullptr, 0);
  if (rc == 0) return 0;
  if (errno == EAGAIN) return 0;  // value already changed
  return errno;
}

void FutexWake(std::atomic<uint32_t>* word, int count) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, count, nullptr, nullptr, 0);
}

void Notify(EventWord* ev) {
#ifdef PHOS_RING_TSAN
  const uint32_t sleepers = ev->sleepers.fetch_add(0, std::memory_order_seq_cst);
#else
  std::atomic_thread_fence(std::memory_order_seq_cst);
  const uint32_t sleepers = ev->sleepers.load(std::memory_order_seq_cst);
#endif
  if (sleepers != 0) {
    ev->epoch.fetch_add(1, std::memory_order_seq_cst);
    FutexWake(&ev->epoch, INT_MAX);
  }
}

Status WaitFor(EventWord* ev, const std::function<bool()>& ready, const std::atomic<uint32_t>* closed,
               const AliveFn& alive, const WaitPolicy& policy) {
  auto is_closed = [&] { return closed && closed->load(std::memory_order_acquire) != 0; };
  if (ready()) return Status::Ok();
  if (policy.spin_ns > 0) {
    const int64_t start = MonotonicNs();
    for (;;) {
      for (int i = 0; i < 32; ++i) {
        CpuRelax();
        if (ready()) return Status::Ok();
      }
      if (is_closed()) break;
      if (MonotonicNs() - start >= static_cast<int64_t>(policy.spin_ns)) break;
    }
  }
  const int64_t period_ns = int64_t{policy.check_period_ms == 0 ? 100 : policy.check_period_ms} * 1'000'000;
  int64_t last_check = MonotonicNs();
  for (;;) {
    if (is_closed()) return Status::Unavailable("ring closed by the peer");
    int64_t timeout = period_ns;
    if (policy.deadline_ns >= 0) {
      const int64_t left = policy.deadline_ns - MonotonicNs();
      if (left <= 0) return ready() ? Status::Ok() : Status::NotReady("ring wait: deadline passed");
      if (left < timeout) timeout = left;
    }
    const uint32_t e = ev->epoch.load(std::memory_order_acquire);
    ev->sleepers.fetch_add(1, std::memory_order_seq_cst);
#ifndef PHOS_RING_TSAN
    std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
    if (ready()) {
      ev->sleepers.fetch_sub(1, std::memory_order_seq_cst);
      return Status::Ok();
    }
    if (is_closed()) {
      ev->sleepers.fetch_sub(1, std::memory_order_seq_cst);
      return Status::Unavailable("ring closed by the peer");
    }
    const int rc = FutexWait(&ev->epoch, e, timeout);
    ev->sleepers.fetch_sub(1, std::memory_order_seq_cst);
    if (ready()) return Status::Ok();
    // Check the peer after every timeout, and at least once per period
    // even if spurious wake-ups keep the futex from timing out.
    if (alive) {
      const int64_t now = MonotonicNs();
      if (rc == ETIMEDOUT || now - last_check >= period_ns) {
        last_check = now;
        if (!alive()) return Status::Unavailable("ring peer is gone (setup socket closed)");
      }
    }
  }
}

}  // namespace phos::ring
