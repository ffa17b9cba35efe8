// Host functions in stream order (cudaLaunchHostFunc, cudaStreamAddCallback,
// cuLaunchHostFunc, cuStreamAddCallback; docs/interposer.md "Host
// functions in stream order").
//
// The function is the app's code and runs in the app (libphos.so's
// host-function thread); phosd holds the stream at the function's place.
// kLaunchHostFunc names two words in the app's shared pinned memory: the
// function's gate word and the app's doorbell. The backend runs a gate at
// that point of the stream (Context::LaunchHostFunction): it stores
// kHostFuncReached into the word, bumps the doorbell and wakes the app's
// thread, then waits until the word holds anything else (the app stores
// kHostFuncDone once its function returned). Work queued on the stream
// after the function waits for the gate, as CUDA orders it.
//
// The wait is bounded by the session: a gate never outlives it. Cancel()
// (the app died, phosd stops) ends every wait within one check period, so
// teardown never waits for an app that will not answer. A hostile app can
// hold only its own stream (and, on the cuda backend, the driver's thread
// that runs host functions: docs/interposer.md).
#pragma once

#include <atomic>
#include <cstdint>

namespace phos::session {

/// One per session (SessionState::host_gates), shared with the gates its
/// streams run. Thread-safe: gates run on backend threads, Cancel on any.
class HostFunctionGates {
 public:
  /// Ends every wait, now and later: the session is ending.
  void Cancel() { cancelled_.store(true, std::memory_order_release); }
  bool cancelled() const { return cancelled_.load(std::memory_order_acquire); }

  /// The gate (on a backend thread, at the function's place in the
  /// stream): marks `word` reached, rings `doorbell`, waits until the app
  /// changed `word` or Cancel(). Both point into phosd's mapping of an app
  /// segment, which outlives the session's streams.
  void Pass(std::atomic<std::uint32_t>* word, std::atomic<std::uint32_t>* doorbell) const;

 private:
  std::atomic<bool> cancelled_{false};
};

}  // namespace phos::session
