// The Migrate RPC (source side of `phos migrate`) and RestoreForPeer (the
// destination side, reached through PhosPeer.RestoreImage). The protocol is
// server/migration.h; docs/migration.md "phos migrate".
#include <signal.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <chrono>
#include <future>

#include "engine/operations.h"
#include "engine/progress.h"
#include "common/clock_util.h"
#include "peer/migration.h"
#include "server/phos_service.h"
#include "process/process_checkpoint.h"
#include "server/rpc_events.h"

namespace phos::server {

// The concepts these RPCs adapt (daemon/process, templates, peer).
using process::ProcessRestoreOptions;
using process::ProcessRestoreResult;
using process::RestoreProcess;
using peer::MigrateOptions;
using peer::MigrateResult;
using peer::MigrateProcess;


grpc::Status PhosService::Migrate(grpc::ServerContext*, const v1::MigrateRequest* req,
                                  grpc::ServerWriter<v1::OperationEvent>* writer) {
  const auto t0 = std::chrono::steady_clock::now();
  if (req->destination().empty() || req->destination().find(':') == std::string::npos) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "destination must be HOST:PORT of a phosd started with --listen (got '" +
                            req->destination() + "')");
  }
  if (req->peer_token().empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "no peer token: give the destination's token file with --peer-token FILE");
  }
  v1::MigrateRequest resolved;
  ResolveLauncherPid(&req, &resolved);
  std::shared_ptr<session::Session> sess;
  if (grpc::Status g = FindSession(req->pid(), &sess); !g.ok()) return g;
  if (req->job() && req->lazy_pages()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "--lazy-pages moves one process; a job migration (--job) dumps its ranks whole");
  }
  if (req->job()) return MigrateJobRpc(req, *sess, writer);

  MigrateOptions o;
  o.criu_binary = criu_binary_;
  o.destination = req->destination();
  o.token = req->peer_token();
  o.name = "migrate-" + std::to_string(req->pid()) + "-" + std::to_string(RealtimeNs() / 1000000);
  o.staging_dir = DefaultCheckpointRoot() + "/outgoing/" + o.name + ".tmp";
  o.max_bytes_per_sec = req->max_bytes_per_sec();
  o.precopy = !req->no_precopy();
  o.lazy_pages = req->lazy_pages();
  o.criu = FromProto(req->criu());
  o.gpu = MigrationCheckpointOptions(*req);
  image::v1::Manifest meta;
  meta.set_session_id(sess->id());
  meta.set_pid(req->pid());
  meta.set_mode(engine::ModeName(o.gpu.mode));
  meta.set_keep(image::v1::KEEP_MANUAL);
  o.gpu.metadata = meta;
  spdlog::info("rpc=Migrate pid={} session={} to {} mode={}", req->pid(), sess->id(), o.destination,
               engine::ModeName(o.gpu.mode));

  engine::Progress progress;
  MigrateResult r;
  std::future<phos::Status> done =
      std::async(std::launch::async, [&] { return MigrateProcess(*sess, o, &progress, &r); });
  phos::Status s = StreamUntilDone(done, progress, writer);
  if (!s.ok()) return FailOperation(writer, "Migrate", s.WithContext("migration of pid " + std::to_string(req->pid())));
  v1::OperationEvent ev;
  v1::OperationResult* out = ev.mutable_done();
  out->set_image_dir(o.destination + ":incoming/" + o.name);
  out->set_pid(r.destination_pid);
  out->set_stall_us(r.downtime_us);
  out->set_total_ms(static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count()));
  out->set_bytes_written(r.bytes_sent);
  auto& c = *out->mutable_counters();
  c["downtime_us"] = r.downtime_us;
  c["source_pid"] = static_cast<uint64_t>(r.source_pid);
  c["gpu_bytes"] = r.gpu.bytes;
  c["dirty_bytes_at_stop"] = r.dirty_bytes_at_stop;
  c["recopy_rounds"] = r.gpu.counters.recopy_rounds;
  c["criu_dump_ms"] = r.criu_dump_ms;
  c["transfer_ms"] = r.transfer_ms;
  c["precopy_bytes_sent"] = r.precopy_bytes_sent;
  c["precopy_copies"] = r.precopy_copies;
  c["precopied_bytes"] = r.precopied_bytes;
  c["bytes_after_stop"] = r.bytes_streamed_after_stop;
  c["destination_criu_restore_ms"] = r.destination_criu_restore_ms;
  c["destination_gpu_restore_us"] = r.destination_gpu_restore_us;
  if (o.lazy_pages) c["lazy_pages_ms"] = r.lazy_pages_ms;
  writer->Write(ev);
  return grpc::Status::OK;
}

phos::Status PhosService::RestoreForPeer(const std::string& dir, bool resume, int lazy_pages_fd,
                                         peer::v1::RestoreImageReply* reply) {
  session::SessionServer* server = nullptr;
  PHOS_RETURN_IF_ERROR(DataPlane(&server));
  ProcessRestoreResult r;
  engine::Progress progress;  // the engine reports into one; nobody watches it here
  ProcessRestoreOptions ro;
  ro.concurrent = true;  // it runs while its buffers load, in first-use order
  ro.criu_binary = criu_binary_;
  ro.lazy_pages_fd = lazy_pages_fd;
  // No full checksum pass before the restore (the default of a fresh
  // restore, engine::Verify; it would read the whole gpu.img in the
  // downtime, and O_DIRECT reads of a file just written first wait for its
  // writeback): every byte was checked on arrival — streamed files against
  // FileEnd's xxh3, pre-copied buffers against their chunk checksums
  // (PrecopyStore), the values the manifest holds — and the concurrent
  // restore checks each chunk again as it loads it.
  std::int64_t resumed_ns = 0;
  phos::Status cont;
  // CRIU restores a process dumped stopped as stopped: let it run the
  // moment its session may take calls. This is the first instruction at
  // the destination (the downtime's end).
  ro.on_running = [&](pid_t pid) {
    if (resume && kill(pid, SIGCONT) != 0) cont = phos::Status::FromErrno("SIGCONT restored pid " + std::to_string(pid), errno);
    resumed_ns = RealtimeNs();
  };
  PHOS_RETURN_IF_ERROR(RestoreProcess(server, dir, &progress, &r, ro));
  restored_.Track(r.pid);
  if (!cont.ok()) {
    kill(r.pid, SIGKILL);
    return cont.WithContext("killed it");
  }
  reply->set_resumed_unix_ns(resumed_ns);
  reply->set_pid(r.pid);
  reply->set_criu_restore_ms(r.criu_restore_ms);
  reply->set_gpu_restore_us(r.gpu.stall_us);  // concurrent: until it could run
  reply->set_gpu_bytes(r.gpu.bytes);
  reply->set_lazy_pages_ms(r.lazy_pages_ms);
  spdlog::info("peer restore: {} runs as pid {} (criu {} ms, gpu {} bytes{})", dir, r.pid, r.criu_restore_ms,
               r.gpu.bytes, lazy_pages_fd >= 0 ? ", its memory arrived in " + std::to_string(r.lazy_pages_ms) + " ms" : "");
  return phos::Status::Ok();
}

engine::CheckpointOptions PhosService::MigrationCheckpointOptions(const v1::MigrateRequest& req) const {
  engine::CheckpointOptions o;
  o.mode = req.mode() == v1::MODE_STOP  ? engine::Mode::kStop
           : req.mode() == v1::MODE_COW ? engine::Mode::kCow
                                        : engine::Mode::kRecopy;
  o.recopy_rounds = req.max_precopy_rounds() > 0 ? static_cast<int>(req.max_precopy_rounds()) : recopy_rounds_;
  o.cow_reserve_bytes = cow_reserve_bytes_;
  o.shadow_pool = shadow_pool_;
  o.unvalidated = unvalidated_stop_ ? engine::UnvalidatedPolicy::kStop : engine::UnvalidatedPolicy::kTrust;
  return o;
}

}  // namespace phos::server
