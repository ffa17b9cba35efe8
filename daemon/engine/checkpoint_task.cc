#include "engine/checkpoint_task.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <map>
#include <utility>
#include <vector>

#include "common/hex.h"
#include "engine/session_sections.h"
#include "engine/session_snapshot.h"

namespace phos::engine {

namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

CheckpointTask::~CheckpointTask() { Abort(); }

Status CheckpointTask::Prepare(const std::string& dir, const image::v1::Manifest& metadata,
                               const image::ImageWriterOptions& options) {
  progress_->SetPhase("prepare", "creating " + dir + ".tmp");
  result_.dir = dir;
  PHOS_RETURN_IF_ERROR(image::ImageWriter::Open(dir, metadata, options, &writer_));
  result_.io_backend = std::string(writer_->io_backend_name());
  return Status::Ok();
}

Status CheckpointTask::CopyRange(backend::Context* ctx, backend::StreamHandle stream, std::size_t index,
                                 std::uint64_t address, std::uint64_t bytes, std::byte* host,
                                 std::size_t chunk) {
  for (std::uint64_t off = 0; off < bytes; off += chunk) {
    const std::size_t len = static_cast<std::size_t>(std::min<std::uint64_t>(chunk, bytes - off));
    Status s = ctx->MemcpyAsync(reinterpret_cast<std::uint64_t>(host), address + off, len,
                                backend::CopyKind::kDeviceToHost, stream);
    if (s.ok()) s = ctx->SynchronizeStream(stream);
    if (!s.ok()) {
      return s.WithContext("copying buffer " + Hex(address) + " at offset " + std::to_string(off) +
                           " to the host");
    }
    PHOS_RETURN_IF_ERROR(writer_->Write(index, off, host, len));
    progress_->AddBytes(len);
  }
  return Status::Ok();
}

Status CheckpointTask::Capture(session::SessionState& st) {
  if (!writer_) return Status::FailedPrecondition("checkpoint: Prepare() was not called");
  const auto t0 = Clock::now();
  auto stall = [&] {
    result_.stall_us = static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count());
  };
  progress_->SetPhase("quiesce", "waiting for the session's GPU work to finish");
  // Everything the app enqueued finishes, on every GPU it uses; a kernel
  // fault is sticky and makes the device state meaningless: refuse rather
  // than save garbage.
  if (Status s = QuiesceAllDevices(st); !s.ok()) {
    stall();
    return s;
  }
  const SessionSnapshot snap = CaptureSnapshot(st);
  result_.admitted_at_capture = st.executor->admitted();
  std::uint64_t total = 0;
  for (const auto& b : snap.buffers) total += b.bytes;
  for (const auto& g : snap.globals) total += g.bytes;
  SetSessionSections(snap, writer_->mutable_metadata());

  const std::size_t chunk = static_cast<std::size_t>(image::kDefaultChunkBytes);
  std::vector<std::byte> host(chunk);
  // Pinned when the backend can (DMA straight into it); plain memory works
  // too (the copies of other GPUs' ranges use it so).
  backend::Context* home = session::HomeContext(st);
  const bool pinned = home->RegisterHostMemory(host.data(), host.size()).ok();
  // One stream of the engine's per GPU, made when a range there is copied.
  std::map<int, std::pair<backend::Context*, backend::StreamHandle>> streams;
  progress_->SetPhase("copy", "copying " + std::to_string(snap.buffers.size()) + " buffers and " +
                                  std::to_string(snap.globals.size()) + " globals to the image",
                      total);
  auto copy_all = [&](const std::vector<DeviceRange>& ranges) -> Status {
    for (const auto& r : ranges) {
      const int device = snap.objects.DeviceOf(r.address);
      auto& [ctx, stream] = streams[device];
      if (ctx == nullptr) {
        ctx = session::ContextOf(st, device);
        if (ctx == nullptr) return Status::Internal("no context of the session on GPU " + std::to_string(device));
        PHOS_RETURN_IF_ERROR(ctx->CreateStream(0, 0, &stream).WithContext("a copy stream on GPU " +
                                                                            std::to_string(device)));
      }
      std::size_t index = 0;
      PHOS_RETURN_IF_ERROR(writer_->AddBuffer(r.address, r.bytes, &index));
      PHOS_RETURN_IF_ERROR(CopyRange(ctx, stream, index, r.address, r.bytes, host.data(), chunk));
    }
    return Status::Ok();
  };
  Status s = copy_all(snap.buffers);
  if (s.ok()) s = copy_all(snap.globals);
  for (const auto& [device, made] : streams) {
    if (made.second == 0) continue;
    Status d = made.first->DestroyStream(made.second);
    if (!d.ok()) spdlog::warn("checkpoint: cannot destroy the engine's stream on GPU {}: {}", device, d.ToString());
  }
  if (pinned) (void)home->UnregisterHostMemory(host.data());
  stall();
  if (!s.ok()) return s;
  result_.bytes = total;
  result_.buffers = static_cast<std::uint32_t>(snap.buffers.size());
  result_.globals = static_cast<std::uint32_t>(snap.globals.size());
  return Status::Ok();
}

Status CheckpointTask::Commit() {
  if (!writer_) return Status::FailedPrecondition("checkpoint: nothing to commit");
  progress_->SetPhase("commit", "writing and syncing " + result_.dir);
  Status s = writer_->Commit();
  writer_.reset();
  return s;
}

void CheckpointTask::Abort() {
  if (writer_) {
    writer_->Abort();
    writer_.reset();
  }
}

}  // namespace phos::engine
