// The gRPC service (proto/phos.proto) as phosd serves it.
//
// Status and ListSessions are implemented. The long operations arrive with
// later issues; until then each answers UNIMPLEMENTED with a message naming
// the RPC — never a fake success.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>
#include <string>

#include "backend/backend.h"
#include "cluster/cluster_member.h"
#include "backend/context_pool.h"
#include "peer.pb.h"
#include "phos.grpc.pb.h"
#include "process/restored_processes.h"
#include "server/session_registry.h"
#include "templates/template_store.h"
#include "session/session_server.h"
#include "engine/operations.h"
#include "engine/shadow_pool.h"

namespace phos::server {

/// Everything the service is told, resolved once when phosd starts
/// (Daemon::Start): no setters, nothing read from the environment per
/// request. The pointees must outlive the service.
struct PhosServiceConfig {
  backend::Backend* backend = nullptr;
  std::string backend_detail;                   // why this backend (Status)
  SessionRegistry* sessions = nullptr;
  const backend::ContextPool* context_pool = nullptr;  // null = none; Status reports its counters
  std::string socket_path;
  /// Where images that name no directory go (and templates/, incoming/,
  /// outgoing/ below it): --checkpoint-root, else $PHOS_STATE_DIR/checkpoints,
  /// else <socket dir>/checkpoints (ResolveCheckpointRoot).
  std::string checkpoint_root;
  /// --template-cache: "auto" (a private tmpfs directory under /dev/shm),
  /// "off", or a tmpfs directory.
  std::string template_cache = "auto";
  // The C/R engine's defaults (phosd's flags).
  std::uint64_t cow_reserve_bytes = 2ull << 30;
  /// phosd's cow reserve (shadows come from it; Status reports its
  /// counters); null = none (checkpoints allocate shadows themselves).
  engine::ShadowPool* shadow_pool = nullptr;
  bool unvalidated_stop = false;
  int recopy_rounds = 5;
  /// --criu-binary: the CRIU every whole-process checkpoint, restore,
  /// migration and template runs ("" = `criu` on PATH).
  std::string criu_binary;
  /// --etcd: this phosd's membership (null: none) and the peer token, for
  /// job checkpoints across phosds.
  cluster::ClusterMember* cluster = nullptr;
  std::string peer_token;
  /// --test-pause-cut-before-capture (tests only; JobCheckpointOptions).
  std::string test_pause_cut_before_capture;
};

class PhosService final : public v1::Phos::Service {
 public:
  explicit PhosService(PhosServiceConfig config);
  ~PhosService() override { StopCuts(); }
  /// Makes the job cuts this phosd takes part in give up and waits for
  /// them (they use the data plane: before it goes). Idempotent.
  void StopCuts();

  grpc::Status Status(grpc::ServerContext* ctx, const v1::StatusRequest* req,
                      v1::StatusReply* reply) override;
  grpc::Status ListSessions(grpc::ServerContext* ctx, const v1::ListSessionsRequest* req,
                            v1::ListSessionsReply* reply) override;
  grpc::Status RegisterRun(grpc::ServerContext* ctx, const v1::RegisterRunRequest* req,
                           v1::RegisterRunReply* reply) override;

  grpc::Status Checkpoint(grpc::ServerContext* ctx, const v1::CheckpointRequest* req,
                          grpc::ServerWriter<v1::OperationEvent>* writer) override;
  grpc::Status Restore(grpc::ServerContext* ctx, const v1::RestoreRequest* req,
                       grpc::ServerWriter<v1::OperationEvent>* writer) override;
  grpc::Status Migrate(grpc::ServerContext* ctx, const v1::MigrateRequest* req,
                       grpc::ServerWriter<v1::OperationEvent>* writer) override;
  grpc::Status TemplateSave(grpc::ServerContext* ctx, const v1::TemplateSaveRequest* req,
                            grpc::ServerWriter<v1::OperationEvent>* writer) override;
  grpc::Status TemplateStart(grpc::ServerContext* ctx, const v1::TemplateStartRequest* req,
                             grpc::ServerWriter<v1::OperationEvent>* writer) override;
  // Template RPCs: server/template_rpcs.cc (docs/templates.md).
  grpc::Status TemplateList(grpc::ServerContext* ctx, const v1::TemplateListRequest* req,
                            v1::TemplateListReply* reply) override;
  grpc::Status TemplateRemove(grpc::ServerContext* ctx, const v1::TemplateRemoveRequest* req,
                              v1::TemplateRemoveReply* reply) override;
  grpc::Status WatchOperation(grpc::ServerContext* ctx, const v1::WatchOperationRequest* req,
                              grpc::ServerWriter<v1::OperationEvent>* writer) override;

  /// The data plane whose sessions Checkpoint/Restore operate on. Set by
  /// the Daemon once it started the SessionServer (after the gRPC server
  /// started, hence atomic); null before: the RPCs answer UNAVAILABLE. The
  /// SessionServer must outlive the service's RPCs (the Daemon stops the
  /// gRPC server... after the data plane, whose Stop ends every session:
  /// a pending control task then fails with Unavailable).
  void SetSessionServer(session::SessionServer* server) {
    session_server_.store(server, std::memory_order_release);
  }
  /// The destination side of a migration (PhosPeer.RestoreImage, called
  /// by the peer server): restores the whole-process image in `dir`, with
  /// `resume` SIGCONTs it (it was dumped stopped), and fills `reply`.
  /// `lazy_pages_fd` >= 0: a lazy dump whose memory comes over that
  /// connection (peer::PeerRestoreOptions); answers once it all arrived.
  phos::Status RestoreForPeer(const std::string& dir, bool resume, int lazy_pages_fd,
                              peer::v1::RestoreImageReply* reply);
  /// PhosPeer.JoinCut: starts this phosd's part in job checkpoint `cut`
  /// (jobs::TakePartInCut) on a thread of its own; returns at once.
  phos::Status JoinCutForPeer(const std::string& cut);
  /// PhosPeer.RestoreJobRanks: this phosd's ranks of a job restore another
  /// phosd runs (jobs::RestoreRanks).
  phos::Status RestoreJobRanksForPeer(const peer::v1::RestoreJobRanksRequest& request,
                                      const std::function<bool()>& cancelled, std::vector<int>* pids);
  /// PhosPeer.MoveJobPart: sends this phosd's part of a job image to
  /// another phosd, or removes it (a job migration across phosds). Only a
  /// part this phosd committed for a cut with --kill (killed_parts_).
  phos::Status MoveJobPartForPeer(const peer::v1::MoveJobPartRequest& request, peer::v1::MoveJobPartReply* reply);
  /// Where default checkpoint images go (PhosServiceConfig::checkpoint_root).
  const std::string& DefaultCheckpointRoot() const { return checkpoint_root_; }
  /// Opens the template store, <checkpoint root>/templates, and its
  /// in-memory cache (template_store.h). Call before serving; a failure is
  /// logged and the template RPCs answer UNAVAILABLE with it.
  void OpenTemplates();

 private:
  /// The live session of `pid`, or a NOT_FOUND / UNAVAILABLE status.
  grpc::Status FindSession(int pid, std::shared_ptr<session::Session>* out) const;
  /// A request naming its process by the pid of the `phos run` that
  /// started it is answered as if it named the program's pid: *req is
  /// pointed at `copy`, a copy with that pid. Every RPC taking a pid calls
  /// this first, so the rest of it (messages, image metadata) sees one pid.
  template <class Request>
  void ResolveLauncherPid(const Request** req, Request* copy) const {
    const int program = sessions_->ResolvePid((*req)->pid());
    if (program == 0 || program == (*req)->pid()) return;
    *copy = **req;
    copy->set_pid(program);
    *req = copy;
  }
  /// The data plane (SetSessionServer), or UNAVAILABLE while phosd starts
  /// or stops.
  phos::Status DataPlane(session::SessionServer** out) const;
  /// After a whole-process restore without --detach: waits for the process
  /// to exit (or the client to go away), then fills `out`'s exit status
  /// (restored_processes.h). The "running" event went out before
  /// (RunningAnnouncer).
  void WaitForRestoredExit(grpc::ServerContext* ctx, int pid, v1::OperationResult* out);
  /// OK when the template store is open, else UNAVAILABLE saying why.
  grpc::Status TemplatesReady() const;
  /// Restore RPC, gpu_only = false (process_checkpoint.h); `verify` parsed
  /// from the request.
  grpc::Status RestoreWholeProcess(grpc::ServerContext* ctx, const v1::RestoreRequest* req, engine::Verify verify,
                                   grpc::ServerWriter<v1::OperationEvent>* writer);
  /// Checkpoint RPC with `job` (job_rpcs.cc; jobs/job_checkpoint.h): `dir`
  /// and the per-rank `opts` as the single-process path resolved them.
  grpc::Status CheckpointJobRpc(const v1::CheckpointRequest* req, const session::Session& seed,
                                const std::string& dir, const engine::CheckpointOptions& opts,
                                grpc::ServerWriter<v1::OperationEvent>* writer);
  /// --kill after a committed image: SIGKILLs every pid (a session of
  /// this phosd's) and waits, at most 10 s in all, until each session gave
  /// its GPU state back, so the GPU is free when the RPC answers.
  phos::Status EndProcesses(const std::vector<pid_t>& pids);
  /// The engine options a migration's checkpoint runs with: the request's
  /// mode (default recopy) and rounds, phosd's defaults for the rest.
  engine::CheckpointOptions MigrationCheckpointOptions(const v1::MigrateRequest& req) const;
  /// Ranks of job `job` this phosd restored (a job restore, its part of
  /// one, a migration's fallback): reaped when they exit, shown with the
  /// job's name (a restored process has no `phos run` launcher).
  void AdoptRestoredRanks(const std::vector<int>& pids, const std::string& job);
  /// Migrate RPC with `job` (job_rpcs.cc; jobs/job_migrate.h).
  grpc::Status MigrateJobRpc(const v1::MigrateRequest* req, const session::Session& seed,
                             grpc::ServerWriter<v1::OperationEvent>* writer);
  /// Restore RPC of a job image (job_rpcs.cc).
  grpc::Status RestoreJobRpc(const v1::RestoreRequest* req, grpc::ServerWriter<v1::OperationEvent>* writer);

  // Set at construction (PhosServiceConfig) and only read afterwards; the
  // pointees are thread-safe (Backend's contract, SessionRegistry's mutex,
  // the pool's own lock).
  backend::Backend* const backend_;
  const std::string backend_detail_;
  SessionRegistry* const sessions_;
  const std::string socket_path_;
  const std::chrono::steady_clock::time_point started_;
  const backend::ContextPool* const context_pool_;
  const std::string checkpoint_root_;
  const std::uint64_t cow_reserve_bytes_;
  engine::ShadowPool* const shadow_pool_;  // thread-safe (its own lock); may be null
  const bool unvalidated_stop_;
  const int recopy_rounds_;
  const std::string template_cache_;
  const std::string criu_binary_;  // every CRIU call's binary ("" = criu on PATH)
  std::atomic<session::SessionServer*> session_server_{nullptr};  // see SetSessionServer
  std::unique_ptr<templates::TemplateStore> templates_;   // set by OpenTemplates before serving; locks itself
  phos::Status templates_status_;              // why templates_ is null; set with it
  process::RestoredProcesses restored_;  // reaps what Restore restored (thread-safe)
  cluster::ClusterMember* const cluster_;  // --etcd, else null
  const std::string peer_token_;
  const std::string test_pause_cut_before_capture_;
  std::atomic<bool> stopping_{false};      // set by the destructor: cut participants give up
  std::mutex cuts_mu_;                     // guards cut_threads_ and killed_parts_
  // Job image parts this phosd committed for cuts with --kill (their
  // directories): what MoveJobPart may send or remove. At most
  // kMaxKilledParts, oldest dropped first.
  std::deque<std::string> killed_parts_;
  static constexpr std::size_t kMaxKilledParts = 64;
  std::vector<std::thread> cut_threads_;   // JoinCutForPeer's, joined by the destructor
};

}  // namespace phos::server
