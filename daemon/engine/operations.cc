// engine::Checkpoint / engine::Restore: pick the protocol, claim the
// session, drive the steps (control tasks on the consumer thread, the
// copier on this thread), fall back to stop-the-world where the protocol
// says so. docs/protocols.md. The soft protocols (cow here, recopy and
// concurrent restore in their files) all run through DriveSoftOperation
// (soft_operation.h); what is left here and there is the image around it.
#include "engine/operations.h"

#include <spdlog/spdlog.h>

#include <chrono>

#include "engine/checkpoint_task.h"
#include "engine/concurrent_restore.h"
#include "engine/cow_checkpoint.h"
#include "engine/engine_hook.h"
#include "engine/operation_util.h"
#include "engine/recopy_checkpoint.h"
#include "engine/restore_task.h"
#include "engine/soft_operation.h"

namespace phos::engine {

namespace {

/// Stop-the-world into options.dir (also the fallback of the soft modes).
Status RunStop(session::Session& session, const CheckpointOptions& options, Progress* progress,
               CheckpointResult* result) {
  CheckpointTask task(progress);
  image::v1::Manifest meta = options.metadata;
  meta.set_mode("stop");
  PHOS_RETURN_IF_ERROR(task.Prepare(options.dir, meta, options.image));
  Status s = session.RunControl([&](session::SessionState& st) {
    Status c = task.Capture(st);
    if (c.ok() && options.at_capture) c = options.at_capture(st);
    return c;
  });
  if (!s.ok()) {
    task.Abort();
    return SessionGone(s, session, "no image was written");
  }
  PHOS_RETURN_IF_ERROR(task.Commit());
  const CheckpointResult& r = task.result();
  result->mode = Mode::kStop;
  result->stall_us += r.stall_us;
  result->bytes = r.bytes;
  result->buffers = r.buffers;
  result->globals = r.globals;
  result->admitted_at_capture = r.admitted_at_capture;
  result->io_backend = r.io_backend;
  return Status::Ok();
}

/// A soft mode's fallback: RunStop, keeping the counters the soft mode set
/// (which say why it fell back).
Status FallBackToStop(session::Session& session, const CheckpointOptions& options, Progress* progress,
                      CheckpointResult* result) {
  OperationCounters keep = result->counters;
  Status stop = RunStop(session, options, progress, result);
  result->counters = keep;
  return stop;
}

Status RunCow(session::Session& session, EngineHook* hook, const CheckpointOptions& options, Progress* progress,
              CheckpointResult* result) {
  image::v1::Manifest meta = options.metadata;
  meta.set_mode("cow");
  std::unique_ptr<image::ImageWriter> writer;
  PHOS_RETURN_IF_ERROR(image::ImageWriter::Open(options.dir, meta, options.image, &writer));
  result->io_backend = std::string(writer->io_backend_name());
  auto op = std::make_shared<CowCheckpoint>(options, progress, writer.get(), result);
  SoftRun run;
  Status s = DriveSoftOperation(session, hook, *op, nullptr, "no image was written", &run);
  if (!run.started) {
    writer->Abort();
    return s;
  }
  result->counters = op->counters();
  result->stall_us = run.start_us + op->blocked_us();  // t1 and the admission waits
  if (!s.ok()) {
    writer->Abort();
    return s;
  }
  if (op->fallback()) {
    writer->Abort();
    ++result->counters.cow_fallbacks;
    spdlog::warn("checkpoint of pid {}: copy-on-write discarded after a mis-speculated kernel; retrying "
                 "stop-the-world", session.pid());
    return FallBackToStop(session, options, progress, result);
  }
  progress->SetPhase("commit", "writing and syncing " + options.dir);
  PHOS_RETURN_IF_ERROR(writer->Commit());
  result->mode = Mode::kCow;
  std::uint64_t bytes = 0;
  for (const auto& b : writer->mutable_metadata()->buffers()) bytes += b.bytes();
  result->bytes = bytes;
  return Status::Ok();
}

}  // namespace

const char* ModeName(Mode m) {
  switch (m) {
    case Mode::kCow: return "cow";
    case Mode::kRecopy: return "recopy";
    case Mode::kStop: return "stop";
  }
  return "?";
}

bool ParseMode(const std::string& name, Mode* out) {
  for (Mode m : {Mode::kStop, Mode::kCow, Mode::kRecopy}) {
    if (name == ModeName(m)) {
      *out = m;
      return true;
    }
  }
  return false;
}

const char* VerifyName(Verify v) {
  switch (v) {
    case Verify::kAuto: return "auto";
    case Verify::kFirst: return "first";
    case Verify::kAsLoaded: return "as-loaded";
  }
  return "?";
}

bool ParseVerify(const std::string& name, Verify* out) {
  for (Verify v : {Verify::kAuto, Verify::kFirst, Verify::kAsLoaded}) {
    if (name == VerifyName(v)) {
      *out = v;
      return true;
    }
  }
  return false;
}

bool VerifiesFirst(Verify v, bool in_place) {
  switch (v) {
    case Verify::kFirst: return true;
    case Verify::kAsLoaded: return false;
    case Verify::kAuto: break;
  }
  return in_place;
}

Status Checkpoint(session::Session& session, const CheckpointOptions& options, Progress* progress,
                  CheckpointResult* result) {
  *result = CheckpointResult{};
  result->dir = options.dir;
  result->mode = options.mode;
  EngineHook* hook = EngineHook::Of(session.hook());
  OperationClaim claim;
  PHOS_RETURN_IF_ERROR(claim.Acquire(hook, session.id(), session.pid()));
  if (options.mode != Mode::kStop && hook == nullptr) {
    return Status::FailedPrecondition(std::string("mode '") + ModeName(options.mode) +
                                      "' needs the engine's admission hook, which this session was created without");
  }
  // A rank of an NCCL job alone is no checkpoint of the job: its peers'
  // collectives would be half inside it (docs/protocols.md "Job checkpoints").
  PHOS_RETURN_IF_ERROR(session.RunControl([pid = session.pid(), job = options.job_rank](session::SessionState& st) {
    if (st.comms.empty() || job) return Status::Ok();
    return Status::FailedPrecondition(
        "pid " + std::to_string(pid) + " holds " + std::to_string(st.comms.size()) +
        " NCCL communicator rank(s): one rank of a job alone is no consistent checkpoint; checkpoint the whole "
        "job (phos checkpoint --job)");
  }));
  switch (options.mode) {
    case Mode::kStop: return RunStop(session, options, progress, result);
    case Mode::kCow: return RunCow(session, hook, options, progress, result);
    case Mode::kRecopy: return RunRecopy(session, hook, options, progress, result);
  }
  return Status::InvalidArgument("unknown checkpoint mode");
}

Status Restore(session::Session& session, const RestoreOptions& options, Progress* progress, RestoreResult* result) {
  *result = RestoreResult{};
  result->dir = options.dir;
  result->concurrent = options.concurrent;
  EngineHook* hook = EngineHook::Of(session.hook());
  OperationClaim claim;
  PHOS_RETURN_IF_ERROR(claim.Acquire(hook, session.id(), session.pid()));
  if (options.concurrent) {
    if (hook == nullptr) {
      return Status::FailedPrecondition("a concurrent restore needs the engine's admission hook, which this "
                                        "session was created without");
    }
    return RunConcurrentRestore(session, hook, options, progress, result);
  }
  const auto t0 = Clock::now();
  RestoreTask task(progress);
  if (Status p = task.Prepare(options.dir, VerifiesFirst(options.verify, true)); !p.ok()) {
    return p.WithContext("restore refused; the session of pid " + std::to_string(session.pid()) + " is untouched");
  }
  Status s = session.RunControl([&task](session::SessionState& st) { return task.Apply(st); });
  if (!s.ok()) return SessionGone(s, session, "the restore did not complete");
  *result = task.result();
  result->concurrent = false;
  result->total_us = MicrosSince(t0);
  return Status::Ok();
}

}  // namespace phos::engine
