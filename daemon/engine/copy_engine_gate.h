// "The copier moves 4 MiB chunks and yields to application copies waiting
// for a copy engine" (docs/protocols.md "Terms").
//
// The session's consumer thread notes every app copy it admits during an
// operation (NoteAppCopy: an event recorded after the copy on the app's
// stream); the copier, before each chunk, calls YieldIfNeeded: if app
// copies were admitted since its last chunk it waits until the latest one
// completed, so the app's transfer gets the copy engine first.
//
// Threading: NoteAppCopy on the consumer thread, YieldIfNeeded on the
// copier thread; `pending_` is the only shared variable besides the event
// (the backend is thread-safe; recording and waiting on one event from two
// threads is allowed: the wait sees the latest record or a later one).
#pragma once

#include <atomic>
#include <cstdint>

#include "backend/backend.h"
#include "common/status.h"
#include "protocol/wire.h"

namespace phos::engine {

class CopyEngineGate {
 public:
  /// Creates the event (timing disabled). Call once before use.
  Status Init(backend::Context* ctx);
  /// Destroys the event. Call when neither thread uses the gate any more.
  void Destroy(backend::Context* ctx);

  /// Consumer thread: an app copy was enqueued on `stream`.
  void NoteAppCopy(backend::Context* ctx, backend::StreamHandle stream);
  /// Copier thread: waits for the app's latest copy when one was noted;
  /// true if it waited.
  bool YieldIfNeeded(backend::Context* ctx);

  std::uint64_t yields() const { return yields_.load(std::memory_order_relaxed); }

 private:
  backend::EventHandle event_ = 0;  // set by Init, read-only after
  std::atomic<bool> pending_{false};
  std::atomic<std::uint64_t> yields_{0};
};

/// True for the wire calls that move bytes between host and device (the
/// ones that want a copy engine).
bool IsHostDeviceCopy(wire::ApiId api);

}  // namespace phos::engine
