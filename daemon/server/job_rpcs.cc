// The Checkpoint RPC with `job` and the Restore RPC of a job image: thin
// adapters over jobs/job_checkpoint.h (docs/protocols.md "Job
// checkpoints").
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <future>

#include "common/clock_util.h"
#include "image/job_manifest.h"
#include "jobs/job_checkpoint.h"
#include "jobs/job_migrate.h"
#include "server/phos_service.h"
#include "server/rpc_events.h"

namespace phos::server {
namespace {

using Clock = std::chrono::steady_clock;

std::uint64_t MillisSince(Clock::time_point t0) {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count());
}

}  // namespace

grpc::Status PhosService::CheckpointJobRpc(const v1::CheckpointRequest* req, const session::Session& seed,
                                           const std::string& dir, const engine::CheckpointOptions& opts,
                                           grpc::ServerWriter<v1::OperationEvent>* writer) {
  const auto t0 = Clock::now();
  session::SessionServer* server = nullptr;
  if (phos::Status d = DataPlane(&server); !d.ok()) return FailOperation(writer, "Checkpoint", d);
  spdlog::info("rpc=Checkpoint job of pid {} (session {}) mode={} dir={}", req->pid(), seed.id(),
               engine::ModeName(opts.mode), dir);
  jobs::JobCheckpointOptions jo;
  jo.rank = opts;
  jo.dir = dir;
  jo.criu = FromProto(req->criu());
  jo.criu_binary = criu_binary_;
  jo.cluster = jobs::JobCluster{cluster_, peer_token_, [this] { return stopping_.load(); }};
  jo.kill = req->kill();
  jo.job_name = sessions_->JobOf(seed.id());
  jo.end_ranks = [this](const std::vector<pid_t>& pids) { return EndProcesses(pids); };
  engine::Progress progress;
  jobs::JobCheckpointResult r;
  std::future<phos::Status> done = std::async(std::launch::async, [&] {
    return jobs::CheckpointJob(server, seed.id(), jo, &progress, &r);
  });
  phos::Status s = StreamUntilDone(done, progress, writer);
  if (!s.ok()) return FailOperation(writer, "Checkpoint", s.WithContext("job checkpoint of pid " + std::to_string(req->pid())));
  WriteProgress(writer, progress.Snapshot());
  v1::OperationEvent ev;
  v1::OperationResult* out = ev.mutable_done();
  out->set_image_dir(dir);
  out->set_pid(req->pid());
  out->set_stall_us(r.stall_us);
  out->set_total_ms(MillisSince(t0));
  out->set_bytes_written(r.bytes);
  for (const auto& rank : r.ranks) out->add_rank_pids(static_cast<int32_t>(rank.pid));
  (*out->mutable_counters())["ranks"] = r.ranks.size();
  (*out->mutable_counters())["cut_us"] = r.cut_us;
  if (r.killed > 0) (*out->mutable_counters())["killed"] = r.killed;
  (*out->mutable_counters())["mode_" + std::string(engine::ModeName(opts.mode))] = 1;
  writer->Write(ev);
  return grpc::Status::OK;
}

phos::Status PhosService::JoinCutForPeer(const std::string& cut) {
  session::SessionServer* server = nullptr;
  PHOS_RETURN_IF_ERROR(DataPlane(&server));
  if (cluster_ == nullptr) return phos::Status::FailedPrecondition("this phosd has no --etcd");
  jobs::JobCheckpointOptions base;
  base.rank.cow_reserve_bytes = cow_reserve_bytes_;
  base.rank.shadow_pool = shadow_pool_;
  base.rank.recopy_rounds = recopy_rounds_;
  base.rank.unvalidated = unvalidated_stop_ ? engine::UnvalidatedPolicy::kStop : engine::UnvalidatedPolicy::kTrust;
  base.criu_binary = criu_binary_;
  base.cluster = jobs::JobCluster{cluster_, peer_token_, [this] { return stopping_.load(); }};
  base.test_pause_before_capture = test_pause_cut_before_capture_;
  base.end_ranks = [this](const std::vector<pid_t>& pids) { return EndProcesses(pids); };
  base.on_killed_part = [this](const std::string& dir) {
    std::lock_guard<std::mutex> lock(cuts_mu_);
    killed_parts_.push_back(dir);
    if (killed_parts_.size() > kMaxKilledParts) killed_parts_.pop_front();
  };
  std::lock_guard<std::mutex> lock(cuts_mu_);
  if (stopping_.load()) return phos::Status::Unavailable("phosd is stopping");
  cut_threads_.emplace_back([server, cut, base] {
    phos::Status s = jobs::TakePartInCut(server, cut, base);
    if (!s.ok()) spdlog::warn("job cut {}: this phosd's part failed: {}", cut, s.ToString());
  });
  return phos::Status::Ok();
}

phos::Status PhosService::RestoreJobRanksForPeer(const peer::v1::RestoreJobRanksRequest& request,
                                                 const std::function<bool()>& cancelled, std::vector<int>* pids) {
  session::SessionServer* server = nullptr;
  PHOS_RETURN_IF_ERROR(DataPlane(&server));
  spdlog::info("peer: restoring {} ranks of job image {}", request.rank_dirs_size(), request.dir());
  process::ProcessRestoreOptions ro;
  ro.criu_binary = criu_binary_;
  const std::vector<std::string> dirs(request.rank_dirs().begin(), request.rank_dirs().end());
  const std::vector<pid_t> old(request.pids().begin(), request.pids().end());
  std::vector<process::ProcessRestoreResult> results;
  PHOS_RETURN_IF_ERROR(jobs::RestoreRanks(
      server, request.dir(), dirs, old, request.generation(), ro,
      [&] { return stopping_.load() || cancelled(); }, &results));
  // The job's name is in its manifest (RestoreRanks reads only the ranks').
  image::v1::JobManifest jm;
  const std::string job = !request.job_name().empty()                    ? request.job_name()
                          : image::ReadJobManifest(request.dir(), &jm).ok() ? jm.job_name()
                                                                            : "";
  for (const auto& r : results) pids->push_back(r.pid);
  AdoptRestoredRanks(*pids, job);
  return phos::Status::Ok();
}

grpc::Status PhosService::RestoreJobRpc(const v1::RestoreRequest* req, grpc::ServerWriter<v1::OperationEvent>* writer) {
  const auto t0 = Clock::now();
  session::SessionServer* server = nullptr;
  if (phos::Status d = DataPlane(&server); !d.ok()) return ToGrpcStatus(d);
  spdlog::info("rpc=Restore job from {}", req->image_dir());
  engine::Progress progress;
  jobs::JobRestoreResult r;
  process::ProcessRestoreOptions ro;
  ro.concurrent = req->concurrent();
  ro.criu = FromProto(req->criu());
  ro.criu_binary = criu_binary_;
  ro.device_map.insert(req->device_map().begin(), req->device_map().end());
  std::future<phos::Status> done = std::async(std::launch::async, [&] {
    const jobs::JobCluster cluster{cluster_, peer_token_, [this] { return stopping_.load(); }};
    const std::map<std::string, std::string> phosd_map(req->phosd_map().begin(), req->phosd_map().end());
    phos::Status rs = jobs::RestoreJob(server, req->image_dir(), ro, cluster, &progress, &r, phosd_map);
    if (rs.ok()) AdoptRestoredRanks(r.pids_here, r.job_name);
    return rs;
  });
  phos::Status s = StreamUntilDone(done, progress, writer);
  if (!s.ok()) return FailOperation(writer, "Restore", s);
  v1::OperationEvent ev;
  v1::OperationResult* out = ev.mutable_done();
  out->set_image_dir(req->image_dir());
  if (!r.ranks.empty()) out->set_pid(r.ranks.front().pid);
  std::uint64_t stall = 0, bytes = 0;
  for (const auto& rank : r.ranks) {
    out->add_rank_pids(rank.pid);
    stall = std::max(stall, rank.gpu.stall_us);
    bytes += rank.gpu.bytes;
  }
  out->set_stall_us(stall);
  out->set_bytes_written(bytes);
  out->set_total_ms(MillisSince(t0));
  (*out->mutable_counters())["ranks"] = r.ranks.size();
  // A job restore always detaches: its ranks run on, phosd reaps them.
  writer->Write(ev);
  return grpc::Status::OK;
}

grpc::Status PhosService::MigrateJobRpc(const v1::MigrateRequest* req, const session::Session& seed,
                                        grpc::ServerWriter<v1::OperationEvent>* writer) {
  const auto t0 = Clock::now();
  session::SessionServer* server = nullptr;
  if (phos::Status d = DataPlane(&server); !d.ok()) return FailOperation(writer, "Migrate", d);
  jobs::JobMigrateOptions o;
  o.destination = req->destination();
  o.token = req->peer_token();
  o.name = "migrate-job-" + std::to_string(req->pid()) + "-" + std::to_string(RealtimeNs() / 1000000);
  o.max_bytes_per_sec = req->max_bytes_per_sec();
  o.phosd_map.insert(req->phosd_map().begin(), req->phosd_map().end());
  jobs::JobCheckpointOptions& ck = o.checkpoint;
  ck.rank = MigrationCheckpointOptions(*req);
  ck.dir = DefaultCheckpointRoot() + "/outgoing/" + o.name;
  ck.criu = FromProto(req->criu());
  ck.criu_binary = criu_binary_;
  ck.end_ranks = [this](const std::vector<pid_t>& pids) { return EndProcesses(pids); };
  ck.job_name = sessions_->JobOf(seed.id());
  if (cluster_ != nullptr) ck.cluster = jobs::JobCluster{cluster_, peer_token_, [this] { return stopping_.load(); }};
  o.restore_here.criu = ck.criu;
  o.restore_here.criu_binary = criu_binary_;
  spdlog::info("rpc=Migrate job of pid {} (session {}) to {} mode={}", req->pid(), seed.id(), o.destination,
               engine::ModeName(ck.rank.mode));
  engine::Progress progress;
  jobs::JobMigrateResult r;
  std::future<phos::Status> done = std::async(std::launch::async, [&] {
    phos::Status ms = jobs::MigrateJob(server, seed.id(), o, &progress, &r);
    AdoptRestoredRanks(r.restored_here_pids, o.checkpoint.job_name);
    return ms;
  });
  phos::Status s = StreamUntilDone(done, progress, writer);
  if (!s.ok()) return FailOperation(writer, "Migrate", s.WithContext("job migration of pid " + std::to_string(req->pid())));
  WriteProgress(writer, progress.Snapshot());
  v1::OperationEvent ev;
  v1::OperationResult* out = ev.mutable_done();
  out->set_image_dir(o.destination + ":" + r.destination_dir);
  if (!r.destination_pids.empty()) out->set_pid(r.destination_pids.front());
  for (int pid : r.destination_pids) out->add_rank_pids(pid);
  out->set_stall_us(r.downtime_us);
  out->set_total_ms(MillisSince(t0));
  out->set_bytes_written(r.bytes_sent);
  auto& c = *out->mutable_counters();
  c["ranks"] = r.destination_pids.size();
  c["downtime_us"] = r.downtime_us;
  c["cut_us"] = r.checkpoint.cut_us;
  c["transfer_ms"] = r.transfer_ms;
  c["source_pid"] = static_cast<std::uint64_t>(req->pid());
  writer->Write(ev);
  return grpc::Status::OK;
}

phos::Status PhosService::MoveJobPartForPeer(const peer::v1::MoveJobPartRequest& request,
                                             peer::v1::MoveJobPartReply* reply) {
  const std::string& dir = request.dir();
  {
    std::lock_guard<std::mutex> lock(cuts_mu_);
    if (std::find(killed_parts_.begin(), killed_parts_.end(), dir) == killed_parts_.end()) {
      return phos::Status::NotFound(dir + " is no part of a job image this phosd took with --kill (only such a part "
                                          "is sent or removed for a job migration)");
    }
  }
  if (request.action() == peer::v1::MoveJobPartRequest::DISCARD) {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    std::lock_guard<std::mutex> lock(cuts_mu_);
    killed_parts_.erase(std::remove(killed_parts_.begin(), killed_parts_.end(), dir), killed_parts_.end());
    if (ec) return phos::Status::IoError("removing " + dir + ": " + ec.message());
    spdlog::info("peer: removed the job part {} (its ranks run elsewhere now)", dir);
    return phos::Status::Ok();
  }
  spdlog::info("peer: sending the job part {} to {} as {}", dir, request.destination(), request.name());
  peer::SendImageResult sent;
  PHOS_RETURN_IF_ERROR(
      jobs::SendJobImage(request.destination(), peer_token_, dir, request.name(), request.max_bytes_per_sec(), nullptr,
                         &sent)
          .WithContext("sending " + dir + " to " + request.destination()));
  reply->set_path(sent.path);
  reply->set_bytes(sent.bytes);
  return phos::Status::Ok();
}

void PhosService::AdoptRestoredRanks(const std::vector<int>& pids, const std::string& job) {
  for (int pid : pids) {
    restored_.Track(pid);
    sessions_->SetRestoredJob(pid, job);
  }
}

}  // namespace phos::server
