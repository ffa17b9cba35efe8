// ChunkLoader: copies an image's chunks into device memory, reading gpu.img
// once (docs/protocols.md "Verification").
//
// Per extent, chunk by chunk, as a pipeline: up to `read_ahead` chunk
// reads are in flight (io_uring + O_DIRECT through the reader's IoBackend)
// while the chunk before them is verified (its checksum, in its staging
// buffer) and queued H2D straight from the staging buffer (pinned once per
// buffer, no copy out of it) on the loader's stream, and the copy of the
// chunk before that finishes. A chunk's staging buffer goes back to the
// reader once its copy is synchronised. So the disk is kept busy, a chunk
// that fails verification never reaches device memory, and what Load()
// reports as loaded is on the device.
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
#include <map>
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
  /// Concurrent restore: how far its loader reads ahead.
  static constexpr std::size_t kConcurrentReadAhead = 2;

  /// `read_ahead`: chunk reads kept in flight, at most the reader's
  /// queue depth - 2 (one staging buffer is verified, one copied). The
  /// stop-the-world restore reads as far ahead as it can; the concurrent
  /// restore little (kConcurrentReadAhead), because a call waiting for
  /// another buffer waits for the reads already in flight.
  ChunkLoader(image::ImageReader& reader, backend::Context* ctx, backend::StreamHandle stream, ContextAccess access,
              Progress* progress, std::size_t read_ahead);
  /// Finish() if it was not called.
  ~ChunkLoader();
  ChunkLoader(const ChunkLoader&) = delete;
  ChunkLoader& operator=(const ChunkLoader&) = delete;

  /// Called inside ContextAccess before each chunk's copy is queued (the
  /// concurrent restore yields to the app's copies there).
  void set_before_copy(std::function<void()> f) { before_copy_ = std::move(f); }
  /// Between two Loads (nothing is in flight then): the context and stream
  /// later Loads copy with — a process of several GPUs loads each buffer in
  /// its GPU's context. A staging buffer stays pinned in the context that
  /// pinned it first (others copy from it as from pageable memory).
  void SetTarget(backend::Context* ctx, backend::StreamHandle stream) {
    ctx_ = ctx;
    stream_ = stream;
  }

  /// Loads chunks [first, end) of manifest extent `extent` to `base` + the
  /// chunk's offset. Before each chunk's read and copy but the first's,
  /// `pause` (may be empty) can stop it; chunks read ahead are then dropped. *next: the
  /// first chunk not loaded (end when it completed); every chunk before it
  /// is on the device when this returns, also on error. Progress bytes are
  /// added per chunk on the device.
  Status Load(std::size_t extent, std::uint64_t base, std::uint64_t first, std::uint64_t end,
              const std::function<bool()>& pause, std::uint64_t* next);

  /// Unregisters the staging buffers it pinned (inside ContextAccess).
  void Finish();

 private:
  /// Synchronises the stream, then gives the copied chunk's buffer back.
  Status Drain();
  /// Queues H2D copies of `batch` (verified chunks) to base + chunk
  /// offsets; `chunk_bytes` the extent's chunk size.
  Status Queue(const std::vector<image::ImageReader::StagedChunk>& batch, std::uint64_t base,
               std::uint64_t chunk_bytes);

  image::ImageReader& reader_;
  backend::Context* ctx_;
  backend::StreamHandle stream_;
  ContextAccess access_;
  Progress* progress_;
  std::function<void()> before_copy_;
  std::size_t read_ahead_;
  std::vector<image::ImageReader::StagedChunk> inflight_;  // a copy queued, not yet synchronised
  std::set<const void*> tried_pin_;  // staging buffers we tried to register (once each)
  std::map<const void*, backend::Context*> pinned_;  // ... and those registered, with the context that did
  bool finished_ = false;
};

}  // namespace phos::engine
