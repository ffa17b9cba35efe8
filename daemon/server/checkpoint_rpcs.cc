// The Checkpoint and Restore RPCs (GPU-only, stop-the-world): find the
// app's session, run the C/R engine's task on its consumer thread
// (Session::PostControl) and stream OperationEvents while it runs.
// docs/control-plane.md "Checkpoint and Restore".
#include <signal.h>
#include <sys/stat.h>

#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <future>

#include "common/proc_stat.h"
#include "common/version.h"
#include "engine/operations.h"
#include "engine/progress.h"
#include "image/image_catalog.h"
#include "server/phos_service.h"
#include "image/job_manifest.h"
#include "process/process_checkpoint.h"
#include "server/rpc_events.h"

namespace phos::server {

// The concepts these RPCs adapt (daemon/process, templates, peer).
using process::CheckpointProcess;
using process::ProcessCheckpointResult;
using process::ProcessRestoreOptions;
using process::ProcessRestoreResult;
using process::RestoreProcess;

namespace {

using Clock = std::chrono::steady_clock;

std::string Timestamp() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[40];
  std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%S", &tm);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  char out[48];
  std::snprintf(out, sizeof out, "%s.%03dZ", buf, static_cast<int>(ms));
  return out;
}

/// The operation's non-zero counters, by their docs/protocols.md names.
std::map<std::string, std::uint64_t> CounterMap(const engine::OperationCounters& c) {
  std::map<std::string, std::uint64_t> m;
  auto put = [&m](const char* name, std::uint64_t v) {
    if (v != 0) m[name] = v;
  };
  put("shadows", c.shadows);
  put("shadow_bytes", c.shadow_bytes);
  put("shadows_while_saving", c.shadows_while_saving);
  put("shadows_from_reserve", c.shadows_from_reserve);
  put("reserve_waits", c.reserve_waits);
  put("writer_waits", c.writer_waits);
  put("copier_yields", c.copier_yields);
  put("recopy_rounds", c.recopy_rounds);
  put("recopy_dirty_bytes", c.recopy_dirty_bytes);
  put("twin_launches", c.twin_launches);
  put("twin_misses", c.twin_misses);
  put("unvalidated_kernels", c.unvalidated_kernels);
  put("cow_fallbacks", c.cow_fallbacks);
  put("recopy_misses", c.recopy_misses);
  put("restore_rollbacks", c.restore_rollbacks);
  put("absent_waits", c.absent_waits);
  return m;
}

/// Shows the session as checkpointing/restoring in `phos ps` while the
/// handler runs, and adds the operation's counters to the session's and
/// the daemon's totals when it ends (success or not).
class OperationRecord {
 public:
  OperationRecord(SessionRegistry* registry, std::uint64_t session_id, v1::SessionState state, const char* kind)
      : registry_(registry), session_id_(session_id), kind_(kind) {
    registry_->SetOperationState(session_id_, state);
  }
  ~OperationRecord() {
    registry_->SetOperationState(session_id_, v1::SESSION_RUNNING);
    counters_[std::string(kind_) + (ok_ ? "s" : "_failures")] += 1;
    registry_->AddOperationCounters(session_id_, counters_);
  }
  void Finish(bool ok, const engine::OperationCounters& c) {
    ok_ = ok;
    counters_ = CounterMap(c);
  }

 private:
  SessionRegistry* registry_;
  std::uint64_t session_id_;
  const char* kind_;
  bool ok_ = false;
  std::map<std::string, std::uint64_t> counters_;
};

}  // namespace

grpc::Status PhosService::FindSession(int pid, std::shared_ptr<session::Session>* out) const {
  if (pid <= 0) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "a pid is required (--pid P)");
  session::SessionServer* server = nullptr;
  if (phos::Status d = DataPlane(&server); !d.ok()) return ToGrpcStatus(d);
  *out = server->FindByPid(pid);
  if (!*out) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        "no phos session for pid " + std::to_string(pid) +
                            " (neither a program's pid nor the pid of the `phos run` that started one) — is it "
                            "running under `phos run`? (`phos ps` lists sessions with their launcher pids and names)");
  }
  return grpc::Status::OK;
}

grpc::Status PhosService::Checkpoint(grpc::ServerContext*, const v1::CheckpointRequest* req,
                                     grpc::ServerWriter<v1::OperationEvent>* writer) {
  const auto t0 = Clock::now();
  if (!req->out_dir().empty() && req->out_dir()[0] != '/') {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "out_dir must be an absolute path (got '" + req->out_dir() + "')");
  }
  v1::CheckpointRequest resolved;
  ResolveLauncherPid(&req, &resolved);
  std::shared_ptr<session::Session> sess;
  if (grpc::Status g = FindSession(req->pid(), &sess); !g.ok()) return g;

  // Images that name no --out go to the catalog under the checkpoint root,
  // one directory per lifecycle class, where retention applies
  // (image/image_catalog.h); an explicit --out is the user's to manage.
  image::KeepClass keep_class = image::KeepClass::kManual;
  if (req->keep() == v1::KEEP_LATEST) keep_class = image::KeepClass::kLatest;
  if (req->keep() == v1::KEEP_BEST) keep_class = image::KeepClass::kBest;
  std::unique_ptr<image::ImageCatalog> catalog;
  std::string dir = req->out_dir();
  if (dir.empty()) {
    if (phos::Status c = image::ImageCatalog::Open(DefaultCheckpointRoot(), &catalog); !c.ok()) {
      return FailOperation(writer, "Checkpoint", c.WithContext("opening the checkpoint root"));
    }
    const std::string name = req->name().empty() ? std::to_string(req->pid()) + "-" + Timestamp() : req->name();
    dir = catalog->PathFor(keep_class, name);
  }
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(dir).parent_path(), ec);
  if (ec) {
    return FailOperation(writer, "Checkpoint",
                phos::Status::IoError("cannot create " + std::filesystem::path(dir).parent_path().string() + ": " +
                                      ec.message()));
  }

  image::v1::Manifest meta;
  meta.set_session_id(sess->id());
  meta.set_pid(req->pid());
  for (const v1::SessionInfo& info : sessions_->ListForPid(req->pid())) {
    if (info.session_id() == sess->id()) meta.add_cmdline(info.command());
  }
  engine::CheckpointOptions opts;
  switch (req->mode()) {
    case v1::MODE_STOP: opts.mode = engine::Mode::kStop; break;
    case v1::MODE_RECOPY: opts.mode = engine::Mode::kRecopy; break;
    default: opts.mode = engine::Mode::kCow; break;  // MODE_UNSPECIFIED: the app keeps running
  }
  meta.set_mode(engine::ModeName(opts.mode));
  switch (req->keep()) {
    case v1::KEEP_LATEST: meta.set_keep(image::v1::KEEP_LATEST); break;
    case v1::KEEP_BEST: meta.set_keep(image::v1::KEEP_BEST); break;
    default: meta.set_keep(image::v1::KEEP_MANUAL); break;
  }
  if (req->keep() == v1::KEEP_BEST) meta.set_metric(req->metric_value());
  backend::DeviceProperties props;
  if (backend_->GetDeviceProperties(0, &props).ok()) meta.set_device_name(props.name);

  opts.dir = dir;
  opts.metadata = meta;
  opts.cow_reserve_bytes = cow_reserve_bytes_;
  opts.shadow_pool = shadow_pool_;
  opts.recopy_rounds = recopy_rounds_;
  const bool stop_unvalidated = req->unvalidated() == v1::UNVALIDATED_UNSPECIFIED
                                    ? unvalidated_stop_
                                    : req->unvalidated() == v1::UNVALIDATED_STOP;
  opts.unvalidated = stop_unvalidated ? engine::UnvalidatedPolicy::kStop : engine::UnvalidatedPolicy::kTrust;
  const bool whole = !req->gpu_only();
  if (req->job()) {
    if (!whole) {
      return FailOperation(writer, "Checkpoint",
                           phos::Status::InvalidArgument("a job checkpoint captures every rank whole (its restore "
                                                         "recreates the processes): drop --gpu-only"));
    }
    return CheckpointJobRpc(req, *sess, dir, opts, writer);
  }
  spdlog::info("rpc=Checkpoint pid={} session={} mode={} {} dir={}", req->pid(), sess->id(),
               engine::ModeName(opts.mode), whole ? "whole-process" : "gpu-only", dir);
  engine::Progress progress;
  engine::CheckpointResult r;
  ProcessCheckpointResult pr;  // whole-process only (process_checkpoint.h)
  OperationRecord record(sessions_, sess->id(), v1::SESSION_CHECKPOINTING, "checkpoint");
  std::future<phos::Status> done = std::async(std::launch::async, [&] {
    if (!whole) return engine::Checkpoint(*sess, opts, &progress, &r);
    phos::Status ps = CheckpointProcess(*sess, opts, &progress, &pr, FromProto(req->criu()), criu_binary_);
    r = pr.gpu;
    return ps;
  });
  phos::Status s = StreamUntilDone(done, progress, writer);
  record.Finish(s.ok(), r.counters);
  if (!s.ok()) {
    return FailOperation(writer, "Checkpoint", s.WithContext("checkpoint of pid " + std::to_string(req->pid()) +
                                                    (ProcessRunning(req->pid()) ? " failed; the app keeps running and earlier images are untouched"
                                                                              : " failed; earlier images are untouched")));
  }
  WriteProgress(writer, progress.Snapshot());
  std::vector<std::string> deleted;
  if (catalog && keep_class != image::KeepClass::kManual) {
    image::RetentionPolicy policy;
    if (req->keep_count() > 0) policy.keep_latest = policy.keep_best = req->keep_count();
    policy.higher_is_better = !req->metric_lower_is_better();
    if (phos::Status d = catalog->ApplyRetention(keep_class, policy, &deleted); !d.ok()) {
      spdlog::warn("rpc=Checkpoint retention in {}: {}", catalog->ClassDir(keep_class), d.ToString());
    }
    for (const auto& name : deleted) spdlog::info("rpc=Checkpoint retention removed {}/{}", catalog->ClassDir(keep_class), name);
  }
  spdlog::info("rpc=Checkpoint pid={} committed {} (mode {}, {} bytes, {} buffers, {} globals, stall {} us)",
               req->pid(), dir, engine::ModeName(r.mode), r.bytes, r.buffers, r.globals, r.stall_us);
  // --kill: the image is committed; end the process and wait until its
  // session gave its GPU state back, so the GPU is free when we answer.
  bool killed = false;
  if (req->kill()) {
    sess.reset();
    progress.SetPhase("kill", "image committed; ending pid " + std::to_string(req->pid()));
    WriteProgress(writer, progress.Snapshot());
    if (phos::Status k = EndProcesses({req->pid()}); !k.ok()) {
      return FailOperation(writer, "Checkpoint", k.WithContext("the image " + dir + " is committed"));
    }
    killed = true;
  }
  v1::OperationEvent ev;
  v1::OperationResult* out = ev.mutable_done();
  out->set_image_dir(dir);
  out->set_pid(req->pid());
  out->set_stall_us(r.stall_us);
  out->set_total_ms(static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count()));
  out->set_bytes_written(r.bytes);
  (*out->mutable_counters())["buffers"] = r.buffers;
  (*out->mutable_counters())["globals"] = r.globals;
  (*out->mutable_counters())["mode_" + std::string(engine::ModeName(r.mode))] = 1;
  if (!deleted.empty()) (*out->mutable_counters())["images_removed_by_retention"] = deleted.size();
  if (killed) (*out->mutable_counters())["killed"] = 1;
  if (whole) {
    (*out->mutable_counters())["criu_dump_ms"] = pr.criu_dump_ms;
  }
  for (const auto& [name, value] : CounterMap(r.counters)) (*out->mutable_counters())[name] = value;
  writer->Write(ev);
  return grpc::Status::OK;
}

grpc::Status PhosService::Restore(grpc::ServerContext* ctx, const v1::RestoreRequest* req,
                                  grpc::ServerWriter<v1::OperationEvent>* writer) {
  const auto t0 = Clock::now();
  if (req->image_dir().empty() || req->image_dir()[0] != '/') {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "image_dir must be an absolute path (got '" + req->image_dir() + "')");
  }
  engine::Verify verify = engine::Verify::kAuto;
  if (!req->verify().empty() && !engine::ParseVerify(req->verify(), &verify)) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "unknown --verify '" + req->verify() + "' (auto, first or as-loaded)");
  }
  if (image::IsJobImage(req->image_dir())) {
    if (req->gpu_only()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          req->image_dir() + " is the image of an NCCL job: it restores whole (drop --gpu-only)");
    }
    return RestoreJobRpc(req, writer);
  }
  if (!req->gpu_only()) return RestoreWholeProcess(ctx, req, verify, writer);
  if (!req->device_map().empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "--device-map moves a restored process to other GPUs; a --gpu-only restore rolls a running "
                        "process back on the GPU it runs on");
  }
  v1::RestoreRequest resolved;
  ResolveLauncherPid(&req, &resolved);
  std::shared_ptr<session::Session> sess;
  if (grpc::Status g = FindSession(req->pid(), &sess); !g.ok()) return g;
  spdlog::info("rpc=Restore pid={} session={} gpu-only in place from {} ({})", req->pid(), sess->id(),
               req->image_dir(), req->concurrent() ? "concurrent" : "stop-the-world");
  engine::Progress progress;
  engine::RestoreOptions opts;
  opts.dir = req->image_dir();
  opts.concurrent = req->concurrent();
  opts.verify = verify;
  engine::RestoreResult r;
  OperationRecord record(sessions_, sess->id(), v1::SESSION_RESTORING, "restore");
  std::future<phos::Status> done =
      std::async(std::launch::async, [&] { return engine::Restore(*sess, opts, &progress, &r); });
  phos::Status s = StreamUntilDone(done, progress, writer);
  record.Finish(s.ok(), r.counters);
  if (!s.ok()) return FailOperation(writer, "Restore", s);
  spdlog::info("rpc=Restore pid={} restored {} ({} bytes, {} buffers, {} allocated, {} freed, stall {} us, total {} us)",
               req->pid(), req->image_dir(), r.bytes, r.buffers, r.allocated, r.freed, r.stall_us, r.total_us);
  v1::OperationEvent ev;
  v1::OperationResult* out = ev.mutable_done();
  out->set_image_dir(req->image_dir());
  out->set_pid(req->pid());
  out->set_stall_us(r.stall_us);
  out->set_total_ms(static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count()));
  out->set_bytes_written(r.bytes);
  (*out->mutable_counters())["buffers"] = r.buffers;
  (*out->mutable_counters())["allocated"] = r.allocated;
  (*out->mutable_counters())["freed"] = r.freed;
  (*out->mutable_counters())["globals"] = r.globals;
  (*out->mutable_counters())["total_us"] = r.total_us;
  for (const auto& [name, value] : CounterMap(r.counters)) (*out->mutable_counters())[name] = value;
  writer->Write(ev);
  return grpc::Status::OK;
}

phos::Status PhosService::DataPlane(session::SessionServer** out) const {
  *out = session_server_.load(std::memory_order_acquire);
  if (*out == nullptr) return phos::Status::Unavailable("phosd's data plane is not running (starting or stopping)");
  return phos::Status::Ok();
}

void PhosService::WaitForRestoredExit(grpc::ServerContext* ctx, int pid, v1::OperationResult* out) {
  for (;;) {
    if (auto e = restored_.WaitExit(pid, std::chrono::milliseconds(200)); e.has_value()) {
      if (e->known) out->set_exit_status(e->status);
      return;
    }
    if (ctx->IsCancelled()) return;  // the client went away; the process runs on
  }
}

grpc::Status PhosService::RestoreWholeProcess(grpc::ServerContext* ctx, const v1::RestoreRequest* req,
                                              engine::Verify verify, grpc::ServerWriter<v1::OperationEvent>* writer) {
  const auto t0 = Clock::now();
  session::SessionServer* server = nullptr;
  if (phos::Status d = DataPlane(&server); !d.ok()) return ToGrpcStatus(d);
  spdlog::info("rpc=Restore whole process from {}", req->image_dir());
  engine::Progress progress;
  ProcessRestoreResult r;
  bool tracked = false;  // phosd reaps it: its exit status can be reported
  // Without --detach: "restored pid N" the moment it runs (buffers may
  // still load behind it); --detach answers with the result.
  RunningAnnouncer announce(writer, progress, "restored pid");
  std::future<phos::Status> done = std::async(
      std::launch::async, [&] {
        ProcessRestoreOptions ro;
        ro.concurrent = req->concurrent();  // the CLI's default: runs while buffers load
        ro.criu = FromProto(req->criu());
        ro.criu_binary = criu_binary_;
        ro.device_map.insert(req->device_map().begin(), req->device_map().end());
        ro.verify = verify;
        if (!req->detach()) ro.on_running = [&](pid_t pid) { announce.Ran(pid); };
        phos::Status rs = RestoreProcess(server, req->image_dir(), &progress, &r, ro);
        if (rs.ok()) tracked = restored_.Track(r.pid);
        return rs;
      });
  phos::Status s = StreamUntilDone(done, progress, writer, [&] { announce.WriteIfRan(); });
  if (!s.ok()) return FailOperation(writer, "Restore", s);
  v1::OperationEvent ev;
  v1::OperationResult* out = ev.mutable_done();
  out->set_image_dir(req->image_dir());
  out->set_pid(r.pid);
  out->set_stall_us(r.gpu.stall_us);
  out->set_total_ms(static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count()));
  out->set_bytes_written(r.gpu.bytes);
  (*out->mutable_counters())["buffers"] = r.gpu.buffers;
  (*out->mutable_counters())["globals"] = r.gpu.globals;
  (*out->mutable_counters())["session_id"] = r.session_id;
  (*out->mutable_counters())["criu_restore_ms"] = r.criu_restore_ms;
  // (The "running" event went out when it started to run.) Not tracked:
  // the CLI waits for the pid itself.
  if (!req->detach() && tracked) WaitForRestoredExit(ctx, r.pid, out);
  writer->Write(ev);
  return grpc::Status::OK;
}

phos::Status PhosService::EndProcesses(const std::vector<pid_t>& pids) {
  session::SessionServer* server = nullptr;
  PHOS_RETURN_IF_ERROR(DataPlane(&server));
  std::vector<std::pair<pid_t, std::uint64_t>> ending;
  for (pid_t pid : pids) {
    std::shared_ptr<session::Session> s = server->FindByPid(pid);
    if (s == nullptr) continue;  // ended already
    ending.emplace_back(pid, s->id());
    if (kill(pid, SIGKILL) != 0 && errno != ESRCH) {
      return phos::Status::FromErrno("kill pid " + std::to_string(pid), errno);
    }
  }
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  for (const auto& [pid, id] : ending) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (!sessions_->WaitRemoved(id, std::max(left, std::chrono::milliseconds(0)))) {
      return phos::Status::Unavailable("pid " + std::to_string(pid) +
                                       " was killed but its session still holds its GPU state after 10 s "
                                       "(phosd's log says why)");
    }
  }
  return phos::Status::Ok();
}

}  // namespace phos::server
