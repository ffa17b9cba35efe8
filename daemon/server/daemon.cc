#include "server/daemon.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <spdlog/spdlog.h>

#include "backend/backend_factory.h"
#include "criu/criu_client.h"
#include "criu/criu_command.h"
#include "engine/engine_hook.h"
#include "common/version.h"
#include "image/recovery.h"
#include "peer/peer_token.h"
#include "session/kernel_access.h"
#include "signature/signature_cache.h"

namespace phos::server {

Daemon::Daemon() = default;
Daemon::~Daemon() { Shutdown(); }

Status Daemon::Start(const DaemonOptions& options) {
  bool removed_stale = false;
  PHOS_RETURN_IF_ERROR(socket_guard_.Acquire(options.socket_path, &removed_stale));
  if (removed_stale) {
    spdlog::warn("removed stale socket {} left by a daemon that is no longer running",
                 options.socket_path);
  }

  std::string why;
  backend::BackendOptions backend_options = options.backend;
  if (!options.etcd.empty()) {
    // Jobs across phosds (docs/protocols.md "Jobs across phosds"): etcd
    // first, so a phosd that cannot reach it says so before anything runs.
    cluster::ClusterOptions co;
    co.etcd_endpoints = options.etcd;
    co.lease_ttl_s = options.etcd_lease_ttl_s;
    std::string token;
    Status c = peer::LoadPeerToken(options.peer_token_file, &token).WithContext("--peer-token");
    if (c.ok()) c = cluster::ClusterMember::Join(co, &cluster_).WithContext("--etcd " + options.etcd);
    if (!c.ok()) {
      socket_guard_.Release();
      return c;
    }
    fabric_ = std::make_unique<cluster::EtcdFabric>(cluster_.get(), std::move(token));
    backend_options.sim.fabric = fabric_.get();
  }
  // The socket first: a second daemon must be refused before it touches a
  // GPU (or the sim's fixed address range).
  Status backend_status = backend::CreateBackend(backend_options, &backend_, &why);
  if (!backend_status.ok()) {
    socket_guard_.Release();
    return backend_status.WithContext("cannot start the GPU backend");
  }
  spdlog::info("backend={} ({}) devices={}: {}", backend_->name(), backend_->detail(),
               backend_->device_count(), why);
  if (fabric_ != nullptr && backend_->name() == "cuda") {
    // The cuda backend's NCCL ids are made by the phosd of a communicator's
    // ranks (backend/cuda/cuda_collectives.h): ranks on two phosds never meet.
    spdlog::warn("--etcd with the cuda backend: jobs are coordinated across phosds, but an NCCL communicator "
                 "must have all its ranks on one phosd (ranks elsewhere are not reached: their init waits "
                 "until their apps end)");
  }

  // Processes phosd restores (CRIU detaches them) become our children, so
  // phosd can reap them and report their exit status
  // (server/restored_processes.h).
  if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
    spdlog::warn("cannot become a child subreaper ({}): exit statuses of restored processes will be unknown",
                 std::strerror(errno));
  }

  // The pool starts filling at once, in the background (docs/backends.md "Context pool").
  backend::ContextPoolOptions pool_options;
  pool_options.contexts_per_device = options.pool_size;
  context_pool_ = std::make_unique<backend::ContextPool>(backend_.get(), pool_options);
  // So does the copy-on-write reserve (engine/shadow_pool.h): no cow
  // checkpoint allocates device memory while the app waits.
  const std::uint64_t cow_reserve = CowReserveFor(options.cow_reserve_bytes, backend_->name());
  engine::ShadowPoolOptions shadow_options;
  shadow_options.bytes_per_device = cow_reserve;
  shadow_pool_ = std::make_unique<engine::ShadowPool>(backend_.get(), shadow_options);

  PhosServiceConfig config;
  config.backend = backend_.get();
  config.backend_detail = why;
  config.sessions = &sessions_;
  config.context_pool = context_pool_.get();
  config.socket_path = options.socket_path;
  config.checkpoint_root = ResolveCheckpointRoot(options);
  config.template_cache = options.template_cache;
  config.cow_reserve_bytes = cow_reserve;
  config.shadow_pool = shadow_pool_.get();
  config.unvalidated_stop = options.unvalidated == "stop";
  config.recopy_rounds = options.recopy_rounds;
  // Every CRIU call phosd makes runs this one ("" = criu on PATH): the
  // service passes it down to each whole-process operation.
  config.criu_binary = options.criu_binary;
  config.cluster = cluster_.get();
  if (fabric_) config.peer_token = fabric_->peer_token();
  config.test_pause_cut_before_capture = options.test_pause_cut_before_capture;
  service_ = std::make_unique<PhosService>(std::move(config));
  if (!options.criu_binary.empty()) spdlog::info("criu binary: {}", options.criu_binary);
  if (std::string w = criu::KernelProbeCacheWarning(); !w.empty()) spdlog::warn("criu: {}", w);
  // A daemon killed mid-checkpoint leaves `NAME.tmp`: never an image (no
  // manifest), removed here and said so (image/recovery.h).
  const std::string checkpoint_root = service_->DefaultCheckpointRoot();
  // (RecoverDirectory logs each removal.)
  if (Status r = image::RecoverDirectory(checkpoint_root); !r.ok()) {
    spdlog::warn("cannot clean up incomplete checkpoints in {}: {}", checkpoint_root, r.ToString());
  }
  // Templates (docs/templates.md): after the recovery above; copies them
  // to the in-memory cache in the background.
  service_->OpenTemplates();
  if (!options.listen.empty()) {
    PhosService* service = service_.get();  // outlives the peer server (Shutdown order)
    peer::PeerRestorer restorer = [service](const std::string& dir, const peer::PeerRestoreOptions& o,
                                            peer::v1::RestoreImageReply* reply) {
      return service->RestoreForPeer(dir, o.resume, o.lazy_pages_fd, reply);
    };
    peer::PeerServerOptions po;
    po.listen = options.listen;
    po.peer_token_file = options.peer_token_file;
    po.max_receive_bytes = options.max_receive_bytes;
    po.test_drop_restore_reply = options.test_drop_restore_reply;
    peer::CollectiveSink collectives;
    if (cluster_) {
      backend::Backend* b = backend_.get();  // outlives the peer server (Shutdown order)
      collectives = [b](const backend::FabricMessage& m) { return b->DeliverCollective(m); };
    }
    peer::PeerHandlers handlers;
    handlers.restorer = std::move(restorer);
    handlers.collectives = std::move(collectives);
    // A job migrated here from one phosd needs no etcd: its ranks all come
    // back here and meet in this phosd.
    handlers.restore_job_ranks = [service](const peer::v1::RestoreJobRanksRequest& r, const std::function<bool()>& c,
                                           std::vector<int>* pids) { return service->RestoreJobRanksForPeer(r, c, pids); };
    if (cluster_) {
      handlers.join_cut = [service](const std::string& cut) { return service->JoinCutForPeer(cut); };
      handlers.move_job_part = [service](const peer::v1::MoveJobPartRequest& r, peer::v1::MoveJobPartReply* reply) {
        return service->MoveJobPartForPeer(r, reply);
      };
    }
    if (Status p = peer_server_.Start(po, checkpoint_root, std::move(handlers)); !p.ok()) {
      Shutdown();
      return p.WithContext("cannot start the peer plane");
    }
    // A migration's destination runs CriuClient::Check() in its downtime
    // (RestoreProcess): asked now, in the background, the first migration
    // finds the answer cached (~50-150 ms of kernel probing otherwise).
    criu_warm_ = std::thread([binary = options.criu_binary] {
      if (Status c = criu::CriuClient::Check(binary); !c.ok()) {
        spdlog::warn("peer: this phosd cannot restore migrated processes until CRIU works here: {}", c.ToString());
      }
    });
    if (cluster_) {
      std::string advertise = options.advertise;
      if (advertise.empty()) {
        advertise = options.listen.substr(0, options.listen.rfind(':')) + ":" + std::to_string(peer_server_.port());
      }
      backend::Backend* b = backend_.get();
      Status a = cluster_->Announce(advertise, [b](const std::string& e, const std::string& why) {
        b->PeerLost(e, why);
      });
      if (!a.ok()) {
        Shutdown();
        return a.WithContext("--etcd " + options.etcd);
      }
    }
  }
  session::SessionCallbacks callbacks;
  SessionRegistry* registry = &sessions_;
  callbacks.publish = [registry](const session::SessionSummary& s) { registry->Publish(s); };
  callbacks.unpublish = [registry](uint64_t id) { registry->Remove(id); };
  session::SessionServerOptions session_options;
  session_options.context_pool = context_pool_.get();
  signature_cache_ = std::make_unique<signature::SignatureCache>(options.signature_cache_dir);
  session_options.signature_cache = signature_cache_.get();
  session_options.slow_call_log_ms = options.slow_call_log_s * 1000;
  session_server_ = std::make_unique<session::SessionServer>(backend_.get(), session_options,
                                                             std::move(callbacks));
  // Every session gets the C/R engine's admission hook (soft checkpoints,
  // concurrent restores see its calls through it).
  session_server_->SetHookFactory(engine::EngineHook::Make);
  // The data-plane socket first: an app is started (phos run) only after
  // its launcher reached the control socket, so once that answers, this
  // one is there too.
  const std::string data_path = session::SessionServer::DataSocketPath(options.socket_path);
  Status data_status = session_server_->Start(data_path);
  if (!data_status.ok()) {
    Shutdown();
    return data_status.WithContext("cannot listen on the data-plane socket " + data_path);
  }
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + options.socket_path, grpc::InsecureServerCredentials());
  builder.RegisterService(service_.get());
  // Socket mode 0660 (docs/architecture.md "Path 1": access to the socket is access to phosd).
  // Set through the umask so the socket is never, even briefly, wider.
  mode_t old_umask = umask(0117);
  server_ = builder.BuildAndStart();
  umask(old_umask);
  if (server_ == nullptr) {
    Shutdown();  // the data plane is up already; releases the socket guard too
    return Status::IoError("cannot listen on unix:" + options.socket_path +
                           " (is the directory writable?)");
  }
  // Belt and braces: some gRPC versions create the socket themselves with a
  // fixed mode; enforce 0660 explicitly.
  if (chmod(options.socket_path.c_str(), 0660) != 0) {
    spdlog::warn("chmod 0660 {} failed: {}", options.socket_path, std::strerror(errno));
  }
  service_->SetSessionServer(session_server_.get());  // Checkpoint/Restore find sessions here
  spdlog::info("phosd {} listening on {} (pid {}, pool {}, cow-reserve {} MiB, unvalidated {}, recopy-rounds {})",
               VersionString(), options.socket_path, getpid(), options.pool_size, cow_reserve >> 20,
               options.unvalidated, options.recopy_rounds);
  return Status::Ok();
}

void Daemon::Wait() {
  if (server_) server_->Wait();
}

void Daemon::Shutdown() {
  // The data plane first: apps blocked in a call get Unavailable at once,
  // and every session releases its GPU state while the backend still lives.
  // It is destroyed only after the gRPC server stopped: a Checkpoint or
  // Restore RPC may still hold it (its sessions have ended, so their
  // control tasks fail with Unavailable and the RPCs return).
  peer_server_.Shutdown();  // no new transfers; in-flight ones get a grace period
  if (criu_warm_.joinable()) criu_warm_.join();
  if (service_) service_->StopCuts();  // job cuts this phosd takes part in use the data plane
  if (session_server_) session_server_->Stop();
  if (server_) {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    server_->Wait();
    server_.reset();
    spdlog::info("stopped serving");
  }
  session_server_.reset();
  signature_cache_.reset();  // flushes its files; no session is left to use it
  service_.reset();
  socket_guard_.Release();
  // Pooled contexts and the cow reserve go before the backend that made
  // them, after every session (and so every checkpoint using the reserve).
  if (shadow_pool_) {
    shadow_pool_->Shutdown();
    shadow_pool_.reset();
  }
  if (context_pool_) {
    context_pool_->Shutdown();
    context_pool_.reset();
  }
  // The membership's threads call into the backend (PeerLost): stopped
  // first; the fabric goes after the backend whose contexts use it.
  if (cluster_) cluster_->Stop();
  backend_.reset();
  fabric_.reset();
  cluster_.reset();
}

int RunDaemonUntilSignal(const DaemonOptions& options) {
  // Block the signals in every thread (threads inherit the mask), then take
  // them synchronously here: no async-signal-safety puzzles in shutdown.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  Daemon daemon;
  Status s = daemon.Start(options);
  if (!s.ok()) {
    spdlog::error("phosd failed to start: {}", s.message());
    return 1;
  }
  int sig = 0;
  sigwait(&signals, &sig);
  spdlog::info("received {}, shutting down", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  // A session whose consumer is stuck in the driver (a kernel that never
  // ends, a deadlocked load) would hold the shutdown forever; the data plane
  // logs what each one is executing (SessionServer::Stop). Past the timeout
  // phosd exits without waiting: the driver frees whatever the process held.
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::thread watchdog;
  if (options.stop_timeout_s > 0) {
    watchdog = std::thread([&] {
      std::unique_lock<std::mutex> lock(mu);
      if (cv.wait_for(lock, std::chrono::seconds(options.stop_timeout_s), [&] { return done; })) return;
      spdlog::error("shutdown did not finish within {} s (--stop-timeout): a session is stuck in the GPU driver "
                    "(see the lines above); exiting without waiting for it",
                    options.stop_timeout_s);
      spdlog::default_logger()->flush();
      std::_Exit(3);
    });
  }
  daemon.Shutdown();
  if (watchdog.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mu);
      done = true;
    }
    cv.notify_all();
    watchdog.join();
  }
  spdlog::info("phosd exited cleanly");
  return 0;
}

}  // namespace phos::server
