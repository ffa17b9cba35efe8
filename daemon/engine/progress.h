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
