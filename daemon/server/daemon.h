// phosd's lifetime: backend, socket ownership, the gRPC server.
//
// Start() brings everything up and returns; Wait() blocks until Shutdown().
// RunDaemonUntilSignal() is what `phos daemon` and `phosd` run: it starts a
// Daemon and shuts it down cleanly on SIGTERM or SIGINT.
#pragma once

#include <memory>
#include <thread>
#include <string>

#include <grpcpp/grpcpp.h>

#include "backend/backend.h"
#include "backend/context_pool.h"
#include "engine/shadow_pool.h"
#include "cluster/cluster_member.h"
#include "cluster/etcd_fabric.h"
#include "common/status.h"
#include "server/daemon_options.h"
#include "peer/peer_service.h"
#include "server/phos_service.h"
#include "server/session_registry.h"
#include "server/socket_guard.h"
#include "session/session_server.h"

namespace phos::signature {
class SignatureCache;
}  // namespace phos::signature

namespace phos::server {

class Daemon {
 public:
  Daemon();  // out of line: members of types only declared here (SignatureCache)
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  /// Creates the backend, takes the socket and starts serving.
  Status Start(const DaemonOptions& options);
  /// Blocks until Shutdown() is called (from another thread).
  void Wait();
  /// Stops serving (in-flight RPCs get a short grace period), removes the
  /// socket and releases the backend. Idempotent.
  void Shutdown();

  backend::Backend* backend() const { return backend_.get(); }
  /// Fresh contexts for sessions and restores (`--pool`); null when not started.
  backend::ContextPool* context_pool() const { return context_pool_.get(); }
  SessionRegistry* sessions() { return &sessions_; }
  /// The data plane (apps connect at `<socket_path>.data`); null when not
  /// started.
  session::SessionServer* session_server() const { return session_server_.get(); }

 private:
  // Owned; created in Start() and destroyed in Shutdown(), both on the
  // thread that owns the Daemon. gRPC threads only reach them through
  // service_, which is stopped before they are destroyed.
  // --etcd: this phosd's membership and the fabric its backend's
  // communicators use to reach other phosds. Created before the backend,
  // destroyed after it (contexts may still tell peers they ended).
  std::unique_ptr<cluster::ClusterMember> cluster_;
  std::unique_ptr<cluster::EtcdFabric> fabric_;
  std::unique_ptr<backend::Backend> backend_;
  // Created right after the backend, shut down (pooled contexts destroyed)
  // just before it, after everything that takes from it has stopped.
  std::unique_ptr<backend::ContextPool> context_pool_;
  // --cow-reserve, per GPU: created and shut down beside the context pool.
  std::unique_ptr<engine::ShadowPool> shadow_pool_;
  SessionRegistry sessions_;
  SocketGuard socket_guard_;
  std::unique_ptr<PhosService> service_;
  std::unique_ptr<grpc::Server> server_;
  // The TCP peer plane (--listen); started after the checkpoint root is
  // known, stopped first in Shutdown().
  peer::PeerServer peer_server_;
  // With the peer plane: asks CRIU's Check() once at start, so a first
  // migration does not probe the kernel in its downtime; joined in Shutdown().
  std::thread criu_warm_;
  // Kernel signatures (--signature-cache-dir) for every session's access
  // sets; created before the data plane and destroyed after it.
  std::unique_ptr<signature::SignatureCache> signature_cache_;
  // The data plane; created in Start() after the backend, stopped first in
  // Shutdown() (apps waiting in calls are released) and destroyed before
  // the backend. Its sessions publish into sessions_.
  std::unique_ptr<session::SessionServer> session_server_;
};

/// Runs a daemon until SIGTERM/SIGINT. Returns the process exit code.
int RunDaemonUntilSignal(const DaemonOptions& options);

}  // namespace phos::server
