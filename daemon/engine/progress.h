// Progress of one long operation (checkpoint, restore), written by the
// thread doing the work and read by the gRPC handler that streams
// OperationEvents.
//
// Lock: mu_ guards every field; writers Update() under it and notify cv_;
// the reader waits with a timeout (WaitForChange) and takes a Snapshot().
// Nobody holds mu_ across device or disk work.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

namespace phos::engine {

struct ProgressSnapshot {
  std::string phase;    // "verify", "quiesce", "copy", "commit", "done", ...
  std::string message;  // for humans
  std::uint64_t bytes_done = 0;
  std::uint64_t bytes_total = 0;
  std::uint64_t elapsed_ms = 0;
  double bytes_per_second = 0;  // over the current phase
  std::uint64_t version = 0;    // bumps on every update
};

class Progress {
 public:
  Progress();
  /// Starts a new phase: bytes_done resets, the rate restarts.
  void SetPhase(std::string phase, std::string message, std::uint64_t bytes_total = 0);
  /// Adds bytes to the current phase's bytes_done.
  void AddBytes(std::uint64_t n);
  /// For a reporter of running totals (done, total), as an image transfer
  /// calls it: done 0 starts phase `phase` of `total` bytes, each later
  /// call adds what was done since. Call it from one thread at a time.
  std::function<void(std::uint64_t done, std::uint64_t total)> TotalsReporter(std::string phase,
                                                                              std::string message);
  ProgressSnapshot Snapshot() const;
  /// Waits until the version differs from `seen` or `timeout` passes.
  void WaitForChange(std::uint64_t seen, std::chrono::milliseconds timeout) const;
  /// Wakes readers (e.g. the operation finished).
  void Notify();

 private:
  using Clock = std::chrono::steady_clock;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  ProgressSnapshot s_;              // guarded by mu_
  Clock::time_point started_;       // immutable
  Clock::time_point phase_started_; // guarded by mu_
};

}  // namespace phos::engine
