// Stop-the-world, GPU-only checkpoint of one session (docs/protocols.md
// "Stop-the-world").
//
// Three steps, on two threads:
//   Prepare()   caller's thread (the gRPC handler): opens the ImageWriter
//               (creates DIR.tmp; refuses an existing DIR) — before the app
//               is disturbed.
//   Capture()   ON the session's consumer thread, as a control task
//               (Session::RunControl): the consumer has stopped draining the
//               ring, so no call of the app runs; synchronise every context
//               of the session (one per GPU it uses; a sticky fault refuses
//               the checkpoint), then copy every buffer and every module
//               global D2H in chunks, each on a stream of the engine's own
//               in the context of its GPU, and hand each chunk to the writer.
//               Returning resumes the app. stall = this step's duration.
//   Commit()    caller's thread again: waits for the queued writes, fsyncs
//               and renames DIR.tmp -> DIR (ImageWriter::Commit). The app
//               already runs again: disk latency is not part of the stall.
// Any failure aborts the writer (DIR.tmp removed, earlier images untouched)
// and the session simply goes on. The app is never stopped for good:
// GPU-only checkpoints always "leave running".
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "engine/operations.h"
#include "engine/progress.h"
#include "image/image_writer.h"
#include "session/call_handlers.h"

namespace phos::engine {


class CheckpointTask {
 public:
  /// `progress` must outlive the task.
  explicit CheckpointTask(Progress* progress) : progress_(progress) {}
  ~CheckpointTask();  // aborts an uncommitted image

  /// `metadata`: session fields of the manifest (pid, cmdline, session id,
  /// mode, keep, device name).
  Status Prepare(const std::string& dir, const image::v1::Manifest& metadata,
                 const image::ImageWriterOptions& options);
  /// Consumer thread only (control task).
  Status Capture(session::SessionState& st);
  Status Commit();
  void Abort();

  const CheckpointResult& result() const { return result_; }

 private:
  Status CopyRange(backend::Context* ctx, backend::StreamHandle stream, std::size_t index, std::uint64_t address,
                   std::uint64_t bytes, std::byte* host, std::size_t chunk);

  Progress* progress_;
  std::unique_ptr<image::ImageWriter> writer_;
  CheckpointResult result_;
};

}  // namespace phos::engine
