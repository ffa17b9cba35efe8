#include "server/phos_service.h"

#include <cstdio>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include "common/version.h"
#include "common/grpc_status.h"

namespace phos::server {
namespace {

grpc::Status Unimplemented(const char* rpc, const char* issue) {
  spdlog::warn("rpc={} refused: not implemented yet", rpc);
  return grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                      std::string(rpc) + " is not implemented in this phosd yet (" + issue + ")");
}

}  // namespace

PhosService::PhosService(PhosServiceConfig config)
    : backend_(config.backend),
      backend_detail_(std::move(config.backend_detail)),
      sessions_(config.sessions),
      socket_path_(std::move(config.socket_path)),
      started_(std::chrono::steady_clock::now()),
      context_pool_(config.context_pool),
      checkpoint_root_(std::move(config.checkpoint_root)),
      cow_reserve_bytes_(config.cow_reserve_bytes),
      shadow_pool_(config.shadow_pool),
      unvalidated_stop_(config.unvalidated_stop),
      recopy_rounds_(config.recopy_rounds),
      template_cache_(std::move(config.template_cache)),
      criu_binary_(std::move(config.criu_binary)),
      cluster_(config.cluster),
      peer_token_(std::move(config.peer_token)),
      test_pause_cut_before_capture_(std::move(config.test_pause_cut_before_capture)) {}

void PhosService::StopCuts() {
  stopping_.store(true);
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(cuts_mu_);
    threads.swap(cut_threads_);
  }
  for (std::thread& t : threads) t.join();
}

grpc::Status PhosService::Status(grpc::ServerContext*, const v1::StatusRequest*,
                                 v1::StatusReply* reply) {
  reply->set_version(VersionString());
  reply->set_backend(backend_->name());
  reply->set_backend_detail(backend_->detail() + "; " + backend_detail_);
  for (int d = 0; d < backend_->device_count(); ++d) {
    backend::DeviceProperties props;
    phos::Status s = backend_->GetDeviceProperties(d, &props);
    if (!s.ok()) {
      return grpc::Status(grpc::StatusCode::INTERNAL,
                          "device " + std::to_string(d) + " properties: " + s.ToString());
    }
    std::uint64_t free_bytes = 0, total_bytes = 0;
    s = backend_->GetMemoryInfo(d, &free_bytes, &total_bytes);
    if (!s.ok()) {
      return grpc::Status(grpc::StatusCode::INTERNAL,
                          "device " + std::to_string(d) + " memory: " + s.ToString());
    }
    v1::GpuInfo* gpu = reply->add_gpus();
    gpu->set_ordinal(d);
    gpu->set_name(props.name);
    gpu->set_uuid(props.uuid);
    gpu->set_total_memory_bytes(total_bytes);
    gpu->set_free_memory_bytes(free_bytes);
    gpu->set_compute_capability_major(props.compute_capability_major);
    gpu->set_compute_capability_minor(props.compute_capability_minor);
    gpu->set_multiprocessor_count(props.multiprocessor_count);
  }
  auto up = std::chrono::steady_clock::now() - started_;
  reply->set_uptime_ms(
      static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(up).count()));
  reply->set_daemon_pid(getpid());
  reply->set_socket_path(socket_path_);
  reply->set_session_count(static_cast<std::uint32_t>(sessions_->size()));
  if (context_pool_ != nullptr) {
    std::map<std::string, std::uint64_t> counters;
    context_pool_->ExportCounters(&counters);
    for (const auto& [name, value] : counters) (*reply->mutable_counters())[name] = value;
  }
  if (shadow_pool_ != nullptr) {
    std::map<std::string, std::uint64_t> counters;
    shadow_pool_->ExportCounters(&counters);
    for (const auto& [name, value] : counters) (*reply->mutable_counters())[name] = value;
  }
  // Checkpoints, restores and the C/R engine's fallbacks since start.
  for (const auto& [name, value] : sessions_->DaemonCounters()) (*reply->mutable_counters())[name] = value;
  return grpc::Status::OK;
}

grpc::Status PhosService::ListSessions(grpc::ServerContext*, const v1::ListSessionsRequest* req,
                                       v1::ListSessionsReply* reply) {
  session::SessionServer* server = session_server_.load(std::memory_order_acquire);
  for (const v1::SessionInfo& s : sessions_->ListForPid(req->pid())) {
    v1::SessionInfo* out = reply->add_sessions();
    *out = s;
    if (server == nullptr) continue;
    // Its job: its rank in the largest communicator it holds.
    const session::CommunicatorBook::Communicators comms = server->communicators().Snapshot({s.session_id()});
    int best = 0;
    for (const auto& [id, c] : comms) {
      for (const auto& [rank, r] : c.ranks) {
        if (r.session_id != s.session_id() || c.nranks <= best) continue;
        best = c.nranks;
        char hex[9];
        std::snprintf(hex, sizeof hex, "%02x%02x%02x%02x", id[8], id[9], id[10], id[11]);
        if (s.job().empty()) out->set_job(std::string("nccl-") + hex);
        out->set_job_rank(rank);
        out->set_job_size(c.nranks);
      }
    }
  }
  return grpc::Status::OK;
}

grpc::Status PhosService::RegisterRun(grpc::ServerContext*, const v1::RegisterRunRequest* req,
                                      v1::RegisterRunReply*) {
  phos::Status s = sessions_->runs().Register(req->launcher_pid(), req->name(), req->job());
  if (!s.ok()) return ToGrpcStatus(s);
  spdlog::info("rpc=RegisterRun launcher_pid={}{}", req->launcher_pid(),
               req->name().empty() ? "" : " name=" + req->name());
  return grpc::Status::OK;
}

// Checkpoint and Restore: server/checkpoint_rpcs.cc.
// Migrate: server/migrate_rpcs.cc.
// TemplateSave, TemplateStart, TemplateList, TemplateRemove: server/template_rpcs.cc.
grpc::Status PhosService::WatchOperation(grpc::ServerContext*, const v1::WatchOperationRequest*,
                                         grpc::ServerWriter<v1::OperationEvent>*) {
  return Unimplemented("WatchOperation",
                       "an operation is watched on the stream of the call that started it; re-attaching to it "
                       "from another client is not built");
}

}  // namespace phos::server
