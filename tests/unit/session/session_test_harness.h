// What session_test runs against, chosen at link time: a real Daemon whose
// sessions are read through the ListSessions RPC (session_test_daemon.cc:
// session_test), or the data plane alone — the sim backend, a SessionServer
// and a SessionRegistry fed exactly as Daemon::Start feeds it
// (session_test_data_plane.cc: session_data_plane_test). The system's gRPC
// and abseil are not instrumented, so ThreadSanitizer reports false races
// as soon as a gRPC server starts: the TSan build runs the data-plane one
// (label `concurrency`), which also builds without the daemon's libraries.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "phos.pb.h"
#include "session/session_server.h"

namespace phos::session::testing {

class SessionTestHarness {
 public:
  /// The harness this binary was linked with.
  static std::unique_ptr<SessionTestHarness> Make();
  virtual ~SessionTestHarness() = default;

  /// Starts on the sim backend with `gpus` GPUs; the control socket is
  /// `socket_path` (the data socket beside it, SessionServer::DataSocketPath).
  virtual Status Start(const std::string& socket_path, int gpus) = 0;
  virtual backend::Backend* backend() = 0;
  virtual SessionServer* session_server() = 0;
  /// The sessions as `phos ps` would list them.
  virtual std::vector<v1::SessionInfo> ListSessions() = 0;
  /// Daemon::Shutdown (or what it does to the data plane).
  virtual void Shutdown() = 0;
};

}  // namespace phos::session::testing
