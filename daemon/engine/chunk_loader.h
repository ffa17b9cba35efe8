// ChunkLoader: copies an image's chunks into device memory, reading gpu.img
// once (docs/protocols.md "Verification").
//
// Per extent, chunk by chunk in batches: a batch of up to half the reader's
// staging buffers is read with that many reads in flight (io_uring +
// O_DIRECT through the reader's IoBackend), every chunk's checksum is
// verified in its staging buffer, and the batch is copied H2D straight from
// the staging buffers (pinned once per buffer, no copy out of them) on the
// loader's stream. The next batch is read while those copies run; a batch's
// buffers go back to the reader once its copies are synchronised. So a
// chunk that fails its checksum never reaches device memory, and what
// Load() reports as loaded is on the device.
//
// Both restores use it: RestoreTask::LoadExtents (stop-the-world, on the
// session's consumer thread, ContextAccess runs the call directly) and the
// concurrent restore's loader (its own thread, ContextAccess =
// SoftOperation::UseContext, which refuses once the session has ended).
//
// Threading: one thread uses a ChunkLoader; it touches the context only
// inside ContextAccess.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <vector>

#include "backend/backend.h"
#include "common/status.h"
#include "engine/progress.h"
#include "image/image_reader.h"

namespace phos::engine {

class ChunkLoader {
 public:
  /// Runs `f` (device calls) on the context; false when the context may no
  /// longer be used (the session ended): the load ends with Unavailable.
  using ContextAccess = std::function<bool(const std::function<void()>& f)>;

  ChunkLoader(image::ImageReader& reader, backend::Context* ctx, backend::StreamHandle stream, ContextAccess access,
              Progress* progress);
  /// Finish() if it was not called.
  ~ChunkLoader();
  ChunkLoader(const ChunkLoader&) = delete;
  ChunkLoader& operator=(const ChunkLoader&) = delete;

  /// Called inside ContextAccess before each batch's copies are queued (the
  /// concurrent restore yields to the app's copies there).
  void set_before_copy(std::function<void()> f) { before_copy_ = std::move(f); }

  /// Loads chunks [first, end) of manifest extent `extent` to `base` + the
  /// chunk's offset. Before each batch but the first, `pause` (may be
  /// empty) can stop it. *next: the first chunk not loaded (end when it
  /// completed); every chunk before it is on the device when this returns,
  /// also on error. Progress bytes are added per chunk on the device.
  Status Load(std::size_t extent, std::uint64_t base, std::uint64_t first, std::uint64_t end,
              const std::function<bool()>& pause, std::uint64_t* next);

  /// Unregisters the staging buffers it pinned (inside ContextAccess).
  void Finish();

 private:
  /// Synchronises the stream, then gives the in-flight batch back.
  Status Drain();
  /// Queues H2D copies of `batch` to base + chunk offsets; `chunk_bytes` the
  /// extent's chunk size.
  Status Queue(const std::vector<image::ImageReader::StagedChunk>& batch, std::uint64_t base,
               std::uint64_t chunk_bytes);

  image::ImageReader& reader_;
  backend::Context* ctx_;
  backend::StreamHandle stream_;
  ContextAccess access_;
  Progress* progress_;
  std::function<void()> before_copy_;
  std::size_t batch_;                                  // chunks per batch: half the staging buffers
  std::vector<image::ImageReader::StagedChunk> inflight_;  // copies queued, not yet synchronised
  std::set<const void*> pinned_;                      // staging buffers registered with ctx_
  bool finished_ = false;
};

}  // namespace phos::engine
