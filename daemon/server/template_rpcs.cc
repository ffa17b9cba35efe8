// The template RPCs (docs/templates.md): TemplateSave = a whole-process
// checkpoint (process_checkpoint.h) committed into the TemplateStore, then
// (by default) the source process ended; TemplateStart = a whole-process
// restore from the template's in-memory copy; TemplateList, TemplateRemove.
//
// One device address space per phosd: an instance's buffers must be at the
// template's device addresses, so while the source (saved with
// leave_running) or an earlier instance of the same template runs on this
// phosd, a start cannot succeed; it is refused up front, naming the pid.
#include <signal.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <cerrno>
#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <future>
#include <thread>

#include "common/proc_stat.h"
#include "criu/criu_client.h"
#include "engine/operations.h"
#include "engine/progress.h"
#include "image/file_util.h"
#include "common/clock_util.h"
#include "server/phos_service.h"
#include "process/process_checkpoint.h"
#include "server/rpc_events.h"
#include "templates/template_store.h"

namespace phos::server {

// The concepts these RPCs adapt (daemon/process, templates, peer).
using process::CheckpointProcess;
using process::ProcessCheckpointResult;
using process::ProcessRestoreOptions;
using process::ProcessRestoreResult;
using process::RestoreProcess;
using process::ProcessImage;
using templates::TemplateStore;
using templates::TemplateInstance;
using templates::TemplateMeta;
using templates::TemplateView;

namespace {

/// The instance's session is still published: phosd has not released its
/// device memory yet (a session is unpublished only after ReleaseAll).
bool SessionLive(const SessionRegistry* sessions, const TemplateInstance& i) {
  for (const v1::SessionInfo& s : sessions->ListForPid(i.pid)) {
    if (s.session_id() == i.session_id) return true;
  }
  return false;
}

}  // namespace

void PhosService::OpenTemplates() {
  TemplateStore::Options o;
  o.root = DefaultCheckpointRoot() + "/templates";
  if (template_cache_ == "off") {
    o.cache_root.clear();
  } else if (template_cache_.empty() || template_cache_ == "auto") {
    o.cache_root = TemplateStore::DefaultCacheRoot(o.root);
  } else {
    o.cache_root = template_cache_;
  }
  // CRIU's probe (~100 ms, cached once it passes: criu_client.h) in the
  // background at startup, so the first start after a phosd restart does
  // not pay for it.
  o.prepare = [binary = criu_binary_] {
    if (phos::Status c = criu::CriuClient::Check(binary); !c.ok()) {
      spdlog::warn("templates: CRIU is not usable here, template starts will fail: {}", c.ToString());
    }
  };
  templates_status_ = TemplateStore::Open(o, &templates_);
  if (!templates_status_.ok()) {
    templates_status_ = templates_status_.WithContext("templates are unavailable in this phosd");
    spdlog::warn("{}", templates_status_.ToString());
  }
}

grpc::Status PhosService::TemplatesReady() const {
  if (templates_) return grpc::Status::OK;
  return grpc::Status(grpc::StatusCode::UNAVAILABLE, templates_status_.ok()
                                                         ? std::string("the template store is not open yet")
                                                         : templates_status_.message());
}

grpc::Status PhosService::TemplateSave(grpc::ServerContext*, const v1::TemplateSaveRequest* req,
                                       grpc::ServerWriter<v1::OperationEvent>* writer) {
  const auto t0 = Clock::now();
  if (grpc::Status g = TemplatesReady(); !g.ok()) return g;
  if (phos::Status n = TemplateStore::CheckName(req->name()); !n.ok()) return ToGrpcStatus(n);
  v1::TemplateSaveRequest resolved;
  ResolveLauncherPid(&req, &resolved);
  std::shared_ptr<session::Session> sess;
  if (grpc::Status g = FindSession(req->pid(), &sess); !g.ok()) {
    return grpc::Status(g.error_code(), "cannot save template " + req->name() + ": " + g.error_message());
  }
  TemplateStore::Lease lease = templates_->Acquire(req->name());
  std::string staging;
  if (phos::Status s = templates_->PrepareStaging(lease, &staging); !s.ok()) {
    return FailOperation(writer, "TemplateSave", s.WithContext("template " + req->name()));
  }

  engine::CheckpointOptions opts;
  switch (req->mode()) {
    case v1::MODE_COW: opts.mode = engine::Mode::kCow; break;
    case v1::MODE_RECOPY: opts.mode = engine::Mode::kRecopy; break;
    default: opts.mode = engine::Mode::kStop; break;
  }
  std::string command;
  for (const v1::SessionInfo& info : sessions_->ListForPid(req->pid())) {
    if (info.session_id() == sess->id()) command = info.command();
  }
  image::v1::Manifest meta;
  meta.set_session_id(sess->id());
  meta.set_pid(req->pid());
  meta.add_cmdline(command);
  meta.set_mode(engine::ModeName(opts.mode));
  meta.set_keep(image::v1::KEEP_MANUAL);
  backend::DeviceProperties props;
  if (backend_->GetDeviceProperties(0, &props).ok()) meta.set_device_name(props.name);
  opts.dir = staging;
  opts.metadata = meta;
  opts.cow_reserve_bytes = cow_reserve_bytes_;
  opts.shadow_pool = shadow_pool_;
  opts.recopy_rounds = recopy_rounds_;
  opts.unvalidated = unvalidated_stop_ ? engine::UnvalidatedPolicy::kStop : engine::UnvalidatedPolicy::kTrust;
  spdlog::info("rpc=TemplateSave name={} pid={} session={} mode={}{}", req->name(), req->pid(), sess->id(),
               engine::ModeName(opts.mode), req->leave_running() ? " leave-running" : "");

  engine::Progress progress;
  ProcessCheckpointResult pr;
  sessions_->SetOperationState(sess->id(), v1::SESSION_CHECKPOINTING);
  std::future<phos::Status> done =
      std::async(std::launch::async, [&] { return CheckpointProcess(*sess, opts, &progress, &pr, {}, criu_binary_); });
  phos::Status s = StreamUntilDone(done, progress, writer);
  TemplateMeta tm;
  if (s.ok()) {
    progress.SetPhase("commit", "committing template " + req->name());
    WriteProgress(writer, progress.Snapshot());
    tm.saved_unix_ms = static_cast<std::uint64_t>(RealtimeNs() / 1000000);
    tm.source_pid = req->pid();
    tm.source_command = command;
    tm.mode = engine::ModeName(pr.gpu.mode);
    s = templates_->Commit(lease, staging, &tm);
  }
  sessions_->SetOperationState(sess->id(), v1::SESSION_RUNNING);
  sessions_->AddOperationCounters(sess->id(), {{s.ok() ? "template_saves" : "template_save_failures", 1}});
  if (!s.ok()) {
    (void)image::RemoveTree(staging);
    return FailOperation(writer, "TemplateSave",
                         s.WithContext("saving template " + req->name() + " from pid " + std::to_string(req->pid()) +
                                       " failed; the app keeps running and an earlier template of that name is "
                                       "untouched"));
  }

  // The source's device addresses are the template's: while it runs, no
  // instance can start on this phosd. End it (default), and wait until its
  // session released its device memory so the next start finds it free.
  const TemplateInstance source{req->pid(), sess->id(), true};
  bool source_gone = false;
  sess.reset();
  if (req->leave_running()) {
    templates_->AddInstance(lease, source);
  } else {
    progress.SetPhase("stop-source", "ending the source pid " + std::to_string(req->pid()));
    WriteProgress(writer, progress.Snapshot());
    if (kill(req->pid(), SIGKILL) != 0 && errno != ESRCH) {
      spdlog::warn("rpc=TemplateSave cannot kill the source pid {}: {}", req->pid(), std::strerror(errno));
    }
    source_gone = sessions_->WaitRemoved(source.session_id, std::chrono::seconds(10));
    if (!source_gone) {
      // Still recorded, so a start names it instead of failing on addresses.
      templates_->AddInstance(lease, source);
      spdlog::warn("rpc=TemplateSave the session of the source pid {} did not end within 10 s", req->pid());
    }
  }

  std::uint64_t fill_ms = 0;
  if (!templates_->cache_root().empty()) {
    progress.SetPhase("cache", "copying template " + req->name() + " to " + templates_->cache_root());
    WriteProgress(writer, progress.Snapshot());
    if (phos::Status c = templates_->Fill(lease, &fill_ms); !c.ok()) {
      spdlog::warn("rpc=TemplateSave {}: no in-memory copy ({}); starts will read {}", req->name(), c.ToString(),
                   templates_->DirOf(req->name()));
    }
  }
  std::string cache_dir;
  for (const TemplateView& v : templates_->List([](const TemplateInstance&) { return true; })) {
    if (v.meta.name == req->name()) cache_dir = v.cache_dir;
  }
  spdlog::info("rpc=TemplateSave committed {} ({} bytes, criu dump {} ms, source {})", templates_->DirOf(req->name()),
               tm.bytes, pr.criu_dump_ms,
               req->leave_running() ? "left running" : source_gone ? "ended" : "killed, session still ending");

  v1::OperationEvent ev;
  v1::OperationResult* out = ev.mutable_done();
  out->set_image_dir(templates_->DirOf(req->name()));
  out->set_pid(req->pid());
  out->set_stall_us(pr.gpu.stall_us);
  out->set_total_ms(MsSince(t0));
  out->set_bytes_written(pr.gpu.bytes);
  auto& c = *out->mutable_counters();
  c["template_bytes"] = tm.bytes;
  c["buffers"] = pr.gpu.buffers;
  c["criu_dump_ms"] = pr.criu_dump_ms;
  c["source_ended"] = req->leave_running() ? 0 : 1;
  c["cached"] = cache_dir.empty() ? 0 : 1;
  c["cache_fill_ms"] = fill_ms;
  c["mode_" + tm.mode] = 1;
  writer->Write(ev);
  return grpc::Status::OK;
}

grpc::Status PhosService::TemplateStart(grpc::ServerContext* ctx, const v1::TemplateStartRequest* req,
                                        grpc::ServerWriter<v1::OperationEvent>* writer) {
  const auto t0 = Clock::now();
  if (grpc::Status g = TemplatesReady(); !g.ok()) return g;
  if (phos::Status n = TemplateStore::CheckName(req->name()); !n.ok()) return ToGrpcStatus(n);
  session::SessionServer* server = nullptr;
  if (phos::Status d = DataPlane(&server); !d.ok()) return ToGrpcStatus(d);
  engine::Progress progress;
  ProcessRestoreResult r;
  std::string dir;
  bool from_cache = false, tracked = false, verified = false;
  std::uint64_t fill_ms = 0;
  Clock::time_point running_at = t0;  // set by RestoreProcess's on_running
  std::int64_t running_unix_ns = 0;   // the same instant, CLOCK_REALTIME (the app's own log clock)
  {
    // Held until the instance runs: starts of one template are serialised
    // (the second then sees the first instance and is refused).
    TemplateStore::Lease lease = templates_->Acquire(req->name());
    phos::Status s = templates_->StartDir(lease, &dir, &from_cache, &fill_ms, &verified);
    if (!s.ok()) return FailOperation(writer, "TemplateStart", s);
    auto alive = [this](const TemplateInstance& i) { return SessionLive(sessions_, i); };
    for (const TemplateInstance& i : templates_->LiveInstances(lease, alive)) {
      if (!ProcessRunning(i.pid)) {
        if (sessions_->WaitRemoved(i.session_id, std::chrono::seconds(10))) continue;
        return FailOperation(writer, "TemplateStart",
                             phos::Status::FailedPrecondition(
                                 "cannot start template " + req->name() + " yet: pid " + std::to_string(i.pid) +
                                 " has ended but its phos session is still releasing the template's device "
                                 "addresses after 10 s; try again (phosd's log says what the session is doing)"));
      }
      const std::string who = i.source ? "its source process (saved with --leave-running)" : "an instance of it";
      return FailOperation(
          writer, "TemplateStart",
          phos::Status::FailedPrecondition(
              "cannot start template " + req->name() + ": pid " + std::to_string(i.pid) + ", " + who +
              ", still runs on this phosd and holds the template's device addresses (all processes of one phosd "
              "share one device address space, and an instance needs its buffers at the template's addresses); "
              "wait until pid " + std::to_string(i.pid) + " exits or end it (kill " + std::to_string(i.pid) +
              "), or start the template on another phosd"));
    }
    spdlog::info("rpc=TemplateStart name={} from {}{}{}", req->name(), dir,
                 from_cache ? (fill_ms > 0 ? " (cache filled now)" : " (cache)") : " (disk)",
                 verified ? ", verified when cached" : ", verifying every checksum first");
    // Concurrent restore: the instance runs once its handles and mappings
    // are back; buffers load in first-use order behind it.
    ProcessRestoreOptions ro;
    ro.concurrent = true;
    ro.criu_binary = criu_binary_;
    // A verified cache copy whose files did not change since (StartDir): no
    // full verification, each chunk is verified as it loads. From disk:
    // everything first, so that no instance of a damaged template ever runs
    // (a concurrent restore as loaded would let it run until the bad chunk).
    ro.verify = verified ? engine::Verify::kAsLoaded : engine::Verify::kFirst;
    // The instance runs: say so at once ("started pid N"), not when every
    // buffer has loaded.
    RunningAnnouncer announce(writer, progress, "started pid");
    ro.on_running = [&](pid_t pid) {
      running_at = Clock::now();
      running_unix_ns = RealtimeNs();
      announce.Ran(pid);
    };
    // The restore fulfils `result` and only then wakes the stream
    // (Notify), so the reply leaves as soon as it is done rather than at
    // StreamUntilDone's next 50 ms check (measured: 0-50 ms on every start).
    std::promise<phos::Status> result;
    std::future<phos::Status> done = result.get_future();
    std::thread worker([&] {
      phos::Status rs = RestoreProcess(server, dir, &progress, &r, ro);
      if (rs.ok()) tracked = restored_.Track(r.pid);
      result.set_value(rs);
      progress.Notify();
    });
    s = StreamUntilDone(done, progress, writer, [&] { announce.WriteIfRan(); });
    worker.join();  // it may still be in Notify()
    if (!s.ok()) {
      // engine/fresh_restore.cc's words when a buffer's address is in use
      // (by a process this store does not know of: checked above otherwise).
      if (s.message().find("address may be taken") != std::string::npos) {
        s = s.WithContext("another process on this phosd holds device memory at the template's addresses (`phos "
                          "ps` lists them; start the template on a phosd where they are free)");
      }
      return FailOperation(writer, "TemplateStart", s.WithContext("cannot start template " + req->name()));
    }
    templates_->AddInstance(lease, TemplateInstance{r.pid, r.session_id, false});
  }
  // Until the process could run (concurrent: before every buffer loaded).
  const std::uint64_t running_ms = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(running_at - t0).count());
  sessions_->AddOperationCounters(r.session_id, {{"template_starts", 1}});
  spdlog::info("rpc=TemplateStart name={} pid {} runs (session {}; criu {} ms, gpu {} us, total {} ms)", req->name(),
               r.pid, r.session_id, r.criu_restore_ms, r.gpu.total_us, running_ms);

  v1::OperationEvent ev;
  v1::OperationResult* out = ev.mutable_done();
  out->set_image_dir(dir);
  out->set_pid(r.pid);
  out->set_stall_us(r.gpu.stall_us);
  out->set_total_ms(running_ms);
  out->set_bytes_written(r.gpu.bytes);
  auto& c = *out->mutable_counters();
  c["criu_restore_ms"] = r.criu_restore_ms;
  c["gpu_restore_ms"] = r.gpu.total_us / 1000;
  c["gpu_restore_us"] = r.gpu.total_us;
  c["running_ms"] = running_ms;
  // Wall clock of that instant: a caller compares it with the instance's
  // own CLOCK_REALTIME stamps (tests/bench/process_cr_bench.sh: its first
  // kernel).
  c["running_unix_us"] = static_cast<std::uint64_t>(running_unix_ns / 1000);
  c["from_cache"] = from_cache ? 1 : 0;
  c["cache_fill_ms"] = fill_ms;
  c["preverified"] = verified ? 1 : 0;
  c["buffers"] = r.gpu.buffers;
  c["session_id"] = r.session_id;
  // (The "running" event went out when the instance started to run.)
  if (!req->detach() && tracked) WaitForRestoredExit(ctx, r.pid, out);
  // Not tracked (phosd is not its subreaper): the result comes now without
  // an exit status and the CLI waits for the pid itself.
  writer->Write(ev);
  return grpc::Status::OK;
}

grpc::Status PhosService::TemplateList(grpc::ServerContext*, const v1::TemplateListRequest*,
                                       v1::TemplateListReply* reply) {
  if (grpc::Status g = TemplatesReady(); !g.ok()) return g;
  reply->set_root(templates_->root());
  reply->set_cache_root(templates_->cache_root());
  reply->set_cache_note(templates_->cache_note());
  auto alive = [this](const TemplateInstance& i) { return SessionLive(sessions_, i); };
  for (const TemplateView& v : templates_->List(alive)) {
    v1::TemplateInfo* t = reply->add_templates();
    t->set_name(v.meta.name);
    t->set_dir(v.dir);
    t->set_cache_dir(v.cache_dir);
    t->set_bytes(v.meta.bytes);
    t->set_source_pid(v.meta.source_pid);
    t->set_source_command(v.meta.source_command);
    t->set_saved_unix_ms(v.meta.saved_unix_ms);
    t->set_mode(v.meta.mode);
    for (const TemplateInstance& i : v.instances) t->add_running_pids(i.pid);
  }
  return grpc::Status::OK;
}

grpc::Status PhosService::TemplateRemove(grpc::ServerContext*, const v1::TemplateRemoveRequest* req,
                                         v1::TemplateRemoveReply* reply) {
  if (grpc::Status g = TemplatesReady(); !g.ok()) return g;
  if (phos::Status n = TemplateStore::CheckName(req->name()); !n.ok()) return ToGrpcStatus(n);
  TemplateStore::Lease lease = templates_->Acquire(req->name());
  if (phos::Status s = templates_->Remove(lease); !s.ok()) {
    spdlog::warn("rpc=TemplateRemove {}: {}", req->name(), s.ToString());
    return ToGrpcStatus(s);
  }
  spdlog::info("rpc=TemplateRemove removed {}", templates_->DirOf(req->name()));
  reply->set_removed_dir(templates_->DirOf(req->name()));
  return grpc::Status::OK;
}

}  // namespace phos::server
