// The context pool (docs/backends.md "Context pool"): per GPU, up to N contexts created ahead of
// time, so a new session, a cudaDeviceReset or a restore takes one at once
// instead of paying for context creation (hundreds of milliseconds on a real
// GPU, with the cuBLAS handle the cuda backend prepares in each context).
//
// Written against the Backend/Context interface only; works the same on
// every backend (the sim's contexts are cheap, so there the pool changes
// nothing but the counters — it adds no invented delay).
//
// Contexts are never returned to the pool: whoever takes one owns it and
// destroys it when done (a session destroys its context when it ends). A
// context handed out is therefore always one nobody used before — no
// allocations, streams, modules or sticky errors of another session.
//
// Threads: Take() and stats() may be called from any thread at once. One
// refill thread per pool creates contexts while some device holds fewer than
// N ready ones; it sleeps on a condition variable otherwise (and between
// retries after a failed creation, with exponential backoff), never spinning.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "common/retry_backoff.h"

namespace phos::backend {

struct ContextPoolOptions {
  /// Ready contexts to keep per device; 0 disables the pool (no thread; every
  /// Take creates a context on demand and counts as a miss).
  int contexts_per_device = 2;
  /// After a failed creation the refill thread waits `retry_initial`, then
  /// twice as long after each further failure, up to `retry_max`.
  std::chrono::milliseconds retry_initial{100};
  std::chrono::milliseconds retry_max{10000};
  /// How many recent creation times stats() reports.
  std::size_t creation_times_kept = 16;
};

struct ContextPoolStats {
  int contexts_per_device = 0;
  std::uint64_t hits = 0;              // Take served from the pool
  std::uint64_t misses = 0;            // Take had to create a context itself
  std::uint64_t created = 0;           // contexts created (refill + misses)
  std::uint64_t create_failures = 0;   // failed creations (refill + misses)
  std::uint64_t ready = 0;             // contexts waiting, all devices
  std::vector<std::uint64_t> ready_per_device;
  /// Durations of the most recent successful creations, oldest first.
  std::vector<std::chrono::microseconds> recent_creation_times;
};

class ContextPool {
 public:
  /// `backend` must outlive the pool. Starts the refill thread (when
  /// contexts_per_device > 0), which begins filling every device at once.
  ContextPool(Backend* backend, ContextPoolOptions options);
  ~ContextPool();  // Shutdown()
  ContextPool(const ContextPool&) = delete;
  ContextPool& operator=(const ContextPool&) = delete;

  /// A fresh context on `device`: a pooled one if one is ready (a hit; the
  /// refill thread is woken to replace it), else one created synchronously
  /// on the calling thread (a miss, logged at debug). The caller owns it and
  /// destroys it when done; it never goes back to the pool. After Shutdown()
  /// every Take is a miss.
  Status Take(int device, std::unique_ptr<Context>* out);

  /// Stops the refill thread (waiting for a creation in progress, whose
  /// context is then destroyed) and destroys every pooled context.
  /// Idempotent. The backend must still be alive.
  void Shutdown();

  ContextPoolStats stats() const;
  /// stats() as `phos status` counters: context_pool.{size,hits,misses,
  /// ready,created,create_failures,create_us_last,create_us_max}.
  void ExportCounters(std::map<std::string, std::uint64_t>* out) const;

  /// Blocks until every device holds `contexts_per_device` ready contexts,
  /// or `timeout` passes; true if full. For tests and for callers that want
  /// a warm pool before they proceed.
  bool WaitUntilFull(std::chrono::milliseconds timeout) const;

 private:
  struct Device {
    std::deque<std::unique_ptr<Context>> ready;
    // Refill backoff after failures: no attempt before its retry_at().
    RetryBackoff backoff;
  };

  void RefillLoop();
  /// The device the refill thread should fill next (fewest ready, not
  /// backing off), or -1; `*wake_at` = the earliest retry time of a device
  /// that is backing off (max() if none). Caller holds mutex_.
  int PickDeviceLocked(std::chrono::steady_clock::time_point now,
                       std::chrono::steady_clock::time_point* wake_at) const;
  bool FullLocked() const;
  void RecordCreationLocked(std::chrono::steady_clock::duration took);
  /// Creates a context, timing it and counting success/failure.
  Status CreateTimed(int device, std::unique_ptr<Context>* out);

  Backend* const backend_;           // not owned; immutable
  const ContextPoolOptions options_;  // immutable

  // mutex_ guards everything below it except thread_ (touched only by the
  // constructor and Shutdown, which the owner calls from one thread).
  // It is never held while a context is created or destroyed.
  mutable std::mutex mutex_;
  std::condition_variable refill_cv_;        // wakes the refill thread: a take, stop
  mutable std::condition_variable filled_cv_;  // a context was added (WaitUntilFull)
  std::vector<Device> devices_;              // by ordinal
  bool stopping_ = false;
  std::uint64_t hits_ = 0;
  std::uint64_t misses_ = 0;
  std::uint64_t created_ = 0;
  std::uint64_t create_failures_ = 0;
  std::deque<std::chrono::microseconds> recent_creation_times_;

  std::thread thread_;
};

}  // namespace phos::backend
