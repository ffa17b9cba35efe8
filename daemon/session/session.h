// One app process's session in phosd: its ring, its Context, its buffer map
// and handle maps, and the consumer thread that executes its calls.
//
// Lifetime: SessionServer creates a Session for each accepted connection
// and calls Start(). The consumer thread runs until the ring closes (the
// app closed it, the app died — RingServer's liveness check or the
// server's POLLHUP calling RequestStop() — or phosd shuts down), then
// tears everything down ON THAT THREAD: synchronise, free every buffer,
// destroy every handle, drop the context, unpublish from the registry; and
// finally sets finished(). The server then Join()s and destroys it (which
// unmaps the region and closes the socket).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "backend/backend.h"
#include "ring/channel.h"
#include "ring/ring.h"
#include "session/call_handlers.h"
#include "session/executor.h"

namespace phos::session {

/// What `phos ps` shows about a session (daemon/server turns it into a
/// v1::SessionInfo).
struct SessionSummary {
  uint64_t session_id = 0;
  int pid = 0;
  std::string command;
  int device = 0;
  uint64_t device_memory_bytes = 0;
  uint32_t buffer_count = 0;
  enum class State { kRunning, kExited } state = State::kRunning;
  uint64_t started_unix_ms = 0;
};

/// How sessions report themselves. Called on consumer threads (any
/// number at once): the callee locks (SessionRegistry does).
struct SessionCallbacks {
  std::function<void(const SessionSummary&)> publish;  // added or changed
  std::function<void(uint64_t session_id)> unpublish;  // gone
};

class Session {
 public:
  Session(uint64_t id, std::unique_ptr<ring::ChannelConnection> conn,
          std::unique_ptr<ring::SharedRegion> region, backend::Backend* backend,
          std::unique_ptr<AdmissionHook> hook, SessionCallbacks callbacks);
  ~Session();  // Joins.
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  /// Creates the context and starts the consumer thread.
  Status Start();
  /// Closes the ring: the app's waiters and the consumer wake; the consumer
  /// tears down. Any thread; idempotent.
  void RequestStop();
  /// Waits for the consumer thread (after it tore down).
  void Join();

  uint64_t id() const { return id_; }
  int fd() const { return conn_->fd(); }
  pid_t pid() const { return conn_->peer_pid(); }
  bool finished() const { return finished_.load(std::memory_order_acquire); }
  bool stop_requested() const { return stop_requested_.load(std::memory_order_acquire); }
  /// Called once the consumer finished (used by the server to wake up).
  void set_on_finished(std::function<void()> f) { on_finished_ = std::move(f); }

 private:
  void Run();
  void Publish();

  const uint64_t id_;
  // Immutable after construction; the region stays mapped until ~Session.
  std::unique_ptr<ring::ChannelConnection> conn_;
  std::unique_ptr<ring::SharedRegion> region_;
  backend::Backend* backend_;
  SessionCallbacks callbacks_;
  std::function<void()> on_finished_;  // set before Start()
  SessionSummary summary_;              // consumer thread only (after Start)

  // Consumer-thread state (created in Start, used by the thread only,
  // destroyed after Join).
  std::unique_ptr<backend::Context> ctx_;
  std::unique_ptr<ring::RingServer> ring_;
  Executor executor_;
  SessionState state_;

  std::thread thread_;
  std::atomic<bool> stop_requested_{false};
  std::atomic<bool> finished_{false};
};

}  // namespace phos::session
