// "The copier moves 4 MiB chunks and yields to application copies waiting
// for a copy engine" (docs/protocols.md "Terms").
//
// The session's consumer thread notes every app host<->device copy it
// admits during an operation (NoteAppCopy: an event recorded after the copy
// on the app's stream); the copier, before each chunk, calls YieldIfNeeded:
// if app copies were admitted since its last chunk it lets the latest one
// go first — for at most kMaxYield: the event also covers everything queued
// before the copy on the app's stream (kernels, shadow copies), and the
// copier must not wait for all of that (the benchmark found unbounded
// yields doubling a copy-on-write checkpoint's copy phase).
//
// Threading: NoteAppCopy on the consumer thread, YieldIfNeeded on the
// copier thread; `pending_` is the only shared variable besides the event
// (the backend is thread-safe; recording and waiting on one event from two
// threads is allowed: the wait sees the latest record or a later one).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

#include "backend/backend.h"
#include "common/status.h"
#include "protocol/wire.h"
#include "session/executor.h"

namespace phos::engine {

class CopyEngineGate {
 public:
  /// Creates the event (timing disabled). Call once before use.
  Status Init(backend::Context* ctx);
  /// Destroys the event. Call when neither thread uses the gate any more.
  void Destroy(backend::Context* ctx);

  /// Consumer thread: an app copy was enqueued on `stream`.
  void NoteAppCopy(backend::Context* ctx, backend::StreamHandle stream);
  /// Copier thread: when an app copy was noted, waits until it completed
  /// or kMaxYield passed (polling the event every 50 µs: a bounded wait);
  /// true if it yielded.
  bool YieldIfNeeded(backend::Context* ctx);
  static constexpr std::chrono::microseconds kMaxYield{1000};

  std::uint64_t yields() const { return yields_.load(std::memory_order_relaxed); }

 private:
  backend::EventHandle event_ = 0;  // set by Init, read-only after
  std::atomic<bool> pending_{false};
  std::atomic<std::uint64_t> yields_{0};
};

/// True for calls that move bytes between host and device (the ones that
/// want a copy engine): a copy whose access set has one device range (a
/// device-to-device copy has two and runs on the SMs, not a copy engine).
bool IsHostDeviceCopy(const session::CallView& call);

}  // namespace phos::engine
