#include "engine/checkpoint_task.h"

#include <spdlog/spdlog.h>

#include <chrono>
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

Status CheckpointTask::CopyRange(session::SessionState& st, backend::StreamHandle stream, std::size_t index,
                                 std::uint64_t address, std::uint64_t bytes, std::byte* host,
                                 std::size_t chunk) {
  for (std::uint64_t off = 0; off < bytes; off += chunk) {
    const std::size_t len = static_cast<std::size_t>(std::min<std::uint64_t>(chunk, bytes - off));
    Status s = st.ctx->MemcpyAsync(reinterpret_cast<std::uint64_t>(host), address + off, len,
                                   backend::CopyKind::kDeviceToHost, stream);
    if (s.ok()) s = st.ctx->SynchronizeStream(stream);
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
  if (Status s = RefuseSeveralDevices(st); !s.ok()) return s;
  progress_->SetPhase("quiesce", "waiting for the session's GPU work to finish");
  // Everything the app enqueued finishes; a kernel fault is sticky and
  // makes the device state meaningless: refuse rather than save garbage.
  if (Status s = st.ctx->Synchronize(); !s.ok()) {
    stall();
    return Status::FailedPrecondition("the session's GPU context has a sticky error (" + s.message() +
                                      "); its device state cannot be checkpointed");
  }
  const SessionSnapshot snap = CaptureSnapshot(st);
  result_.admitted_at_capture = st.executor->admitted();
  std::uint64_t total = 0;
  for (const auto& b : snap.buffers) total += b.bytes;
  for (const auto& g : snap.globals) total += g.bytes;
  SetSessionSections(snap, writer_->mutable_metadata());

  const std::size_t chunk = static_cast<std::size_t>(image::kDefaultChunkBytes);
  std::vector<std::byte> host(chunk);
  // Pinned when the backend can (DMA straight into it); plain memory works too.
  const bool pinned = st.ctx->RegisterHostMemory(host.data(), host.size()).ok();
  backend::StreamHandle stream = 0;
  Status s = st.ctx->CreateStream(0, 0, &stream);
  progress_->SetPhase("copy", "copying " + std::to_string(snap.buffers.size()) + " buffers and " +
                                  std::to_string(snap.globals.size()) + " globals to the image",
                      total);
  auto copy_all = [&](const std::vector<DeviceRange>& ranges) -> Status {
    for (const auto& r : ranges) {
      std::size_t index = 0;
      PHOS_RETURN_IF_ERROR(writer_->AddBuffer(r.address, r.bytes, &index));
      PHOS_RETURN_IF_ERROR(CopyRange(st, stream, index, r.address, r.bytes, host.data(), chunk));
    }
    return Status::Ok();
  };
  if (s.ok()) s = copy_all(snap.buffers);
  if (s.ok()) s = copy_all(snap.globals);
  if (stream != 0) {
    Status d = st.ctx->DestroyStream(stream);
    if (!d.ok()) spdlog::warn("checkpoint: cannot destroy the engine's stream: {}", d.ToString());
  }
  if (pinned) (void)st.ctx->UnregisterHostMemory(host.data());
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
