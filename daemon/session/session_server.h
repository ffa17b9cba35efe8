// The data-plane server: accepts app connections on `<control socket>.data`
// (SOCK_SEQPACKET, mode 0660; ring/channel.h does the handshake and
// SO_PEERCRED check), creates one Session per connection and notices dead
// peers at once.
//
// Threads: one server thread polls the listening socket, an eventfd (wake
// up: stop, a session finished) and every live session's socket for
// POLLHUP/POLLRDHUP/POLLERR; a hang-up calls Session::RequestStop() (the
// ring's own liveness check would notice within check_period_ms; this is
// immediate). Each Session has its consumer thread, which takes the
// session's GPU context first: the server thread never calls the driver, so
// a driver call that blocks cannot stop phosd from accepting apps or
// noticing hang-ups. The server thread also logs calls running past
// slow_call_log_ms (Session::BusyCall). Finished sessions are joined and
// destroyed by the server thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "common/status.h"
#include "ring/channel.h"
#include "ring/ring_layout.h"
#include "session/executor.h"
#include "session/communicator_book.h"
#include "session/session.h"

namespace phos::session {

struct SessionServerOptions {
  ring::RingConfig ring;               // sizes of each app's region
  int hello_timeout_ms = 1000;         // an app that connects must say hello this fast
  // Sessions take their contexts from here (null: the backend creates
  // them on demand). Not owned; must outlive the server.
  backend::ContextPool* context_pool = nullptr;
  // Kernel signatures for every session's access sets (not owned; must
  // outlive the server; null = a memory-only cache per module load).
  signature::SignatureCache* signature_cache = nullptr;
  // A call a session has executed this long is logged once (warn), with the
  // session, pid and API: a kernel that never ends or a deadlocked driver
  // call shows in the log while it happens. 0 = never.
  int slow_call_log_ms = 10000;
};

class SessionServer {
 public:
  using HookFactory = std::function<std::unique_ptr<AdmissionHook>(uint64_t session_id)>;

  SessionServer(backend::Backend* backend, SessionServerOptions options, SessionCallbacks callbacks);
  ~SessionServer();  // Stop()
  SessionServer(const SessionServer&) = delete;
  SessionServer& operator=(const SessionServer&) = delete;

  /// The data-plane socket path for a control socket path.
  static std::string DataSocketPath(const std::string& control_socket_path) {
    return control_socket_path + ".data";
  }

  /// Listens on `path` and starts the server thread.
  Status Start(const std::string& path);
  /// Closes every session's ring (apps waiting in a call get Unavailable),
  /// waits for their consumers to tear down, stops listening. Idempotent.
  void Stop();

  /// Hooks for sessions created from now on (default: admit everything).
  void SetHookFactory(HookFactory factory);
  /// Live sessions (not yet torn down).
  size_t session_count() const;
  /// The live session of process `pid` (the newest if it has several), or
  /// null. The shared_ptr keeps the Session object alive while the caller
  /// uses it (e.g. posts a control task); its consumer may still end
  /// meanwhile, which PostControl reports as Unavailable.
  std::shared_ptr<Session> FindByPid(pid_t pid) const;
  /// True while any session of `pid` has not finished tearing down
  /// (including one whose stop was requested: its GPU memory is still
  /// allocated). The whole-process restore waits for this to turn false.
  bool PidHasSession(pid_t pid) const;
  /// The live session with id `id`, or null.
  std::shared_ptr<Session> FindById(uint64_t id) const;
  /// Every NCCL communicator rank of this server's sessions (a job's cut).
  CommunicatorBook& communicators() { return comm_book_; }
  const std::string& path() const { return path_; }

  /// Adopts a connection phosd did not accept (whole-process restore: its
  /// end of the socketpair CRIU gave the restored app, and the restored
  /// app's ring memfd mapped again): a new session id, the hook factory's
  /// hook, started GATED (Session::set_start_gated: the caller restores the
  /// GPU state with control tasks, then calls OpenGate()). Polled for
  /// hang-ups like any session. Any thread.
  Status Adopt(std::unique_ptr<ring::ChannelConnection> conn, std::unique_ptr<ring::SharedRegion> region,
               std::shared_ptr<Session>* out);

 private:
  void Loop();
  void Wake();
  void AcceptOne();
  void Reap(bool all);
  /// Server thread, each round: logs calls running past slow_call_log_ms.
  void LogSlowCalls();
  /// Stop, for sessions whose consumer has not finished: says what each is
  /// still executing (before joining it, which may take that long).
  void LogUnfinished(const std::vector<std::shared_ptr<Session>>& sessions) const;

  backend::Backend* backend_;
  const SessionServerOptions options_;
  const SessionCallbacks callbacks_;
  std::string path_;
  std::unique_ptr<ring::ChannelListener> listener_;  // server thread only after Start
  int wake_fd_ = -1;                                 // eventfd
  std::thread thread_;
  std::atomic<bool> stop_{false};

  mutable std::mutex mu_;
  // Guarded by mu_: live sessions by id, and the hook factory. Sessions are
  // inserted and erased by the server thread (and by Stop after the thread
  // has been joined). shared_ptr: FindByPid hands out references (the C/R
  // engine's RPCs); the last holder destroys (joins) the Session.
  std::map<uint64_t, std::shared_ptr<Session>> sessions_;
  HookFactory hook_factory_;
  // Thread-safe itself; its sessions point to it, so it is declared before
  // nothing that outlives them (the sessions are joined in Stop).
  CommunicatorBook comm_book_;
  std::atomic<uint64_t> next_id_{1};  // AcceptOne (server thread) and Adopt (any thread)
  // Server thread only: session id -> start (BusyCall) of the call already
  // logged as slow, so each slow call is logged once.
  std::map<uint64_t, int64_t> slow_logged_;
};

}  // namespace phos::session
