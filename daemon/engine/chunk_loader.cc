#include "engine/chunk_loader.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "common/hex.h"

namespace phos::engine {

ChunkLoader::ChunkLoader(image::ImageReader& reader, backend::Context* ctx, backend::StreamHandle stream,
                         ContextAccess access, Progress* progress)
    : reader_(reader),
      ctx_(ctx),
      stream_(stream),
      access_(std::move(access)),
      progress_(progress),
      batch_(std::max<std::size_t>(reader.queue_depth() / 2, 1)) {}

ChunkLoader::~ChunkLoader() { Finish(); }

Status ChunkLoader::Drain() {
  if (inflight_.empty()) return Status::Ok();
  Status s;
  const bool used = access_([&] { s = ctx_->SynchronizeStream(stream_); });
  if (!used) s = Status::Unavailable("the process exited during the restore");
  std::uint64_t bytes = 0;
  for (const auto& c : inflight_) {
    bytes += c.len;
    reader_.Release(c);
  }
  inflight_.clear();
  if (s.ok()) progress_->AddBytes(bytes);
  return s;
}

Status ChunkLoader::Queue(const std::vector<image::ImageReader::StagedChunk>& batch, std::uint64_t base,
                          std::uint64_t chunk_bytes) {
  Status s;
  const bool used = access_([&] {
    if (before_copy_) before_copy_();
    for (const auto& c : batch) {
      // Pinned memory lets the copy run asynchronously (DMA) while the next
      // batch is read; a backend that refuses still copies, synchronously.
      if (pinned_.insert(c.buf->data).second && !ctx_->RegisterHostMemory(c.buf->data, c.buf->capacity).ok()) {
        pinned_.erase(c.buf->data);
      }
      const std::uint64_t dst = base + c.chunk * chunk_bytes;
      s = ctx_->MemcpyAsync(dst, reinterpret_cast<std::uint64_t>(c.data), c.len, backend::CopyKind::kHostToDevice,
                            stream_);
      if (!s.ok()) {
        s = s.WithContext("copying chunk " + std::to_string(c.chunk) + " to " + Hex(dst));
        return;
      }
    }
  });
  if (!used) return Status::Unavailable("the process exited during the restore");
  return s;
}

Status ChunkLoader::Load(std::size_t extent, std::uint64_t base, std::uint64_t first, std::uint64_t end,
                         const std::function<bool()>& pause, std::uint64_t* next) {
  const std::uint64_t chunk_bytes = reader_.manifest().buffers(static_cast<int>(extent)).chunk_bytes();
  std::uint64_t c = first;   // next chunk to read
  std::uint64_t done = first;  // chunks before it are on the device (after Drain)
  Status s;
  std::vector<image::ImageReader::StagedChunk> batch;
  while (c < end) {
    if (c > first && pause && pause()) break;
    batch.clear();
    // Blocking only with nothing of ours in flight: else the staging
    // buffers we wait for could be the ones our own copies hold.
    s = reader_.ReadStaged(extent, c, end, batch_, inflight_.empty(), &batch);
    if (!s.ok()) break;
    // The previous batch was copied while this one was read.
    s = Drain();
    if (s.ok()) done = c;
    if (!s.ok() || batch.empty()) {
      for (const auto& b : batch) reader_.Release(b);
      if (!s.ok()) break;
      continue;  // every staging buffer was ours: now they are free
    }
    s = Queue(batch, base, chunk_bytes);
    inflight_ = batch;  // also on failure: queued copies must finish before the buffers go back
    if (!s.ok()) break;
    c += batch.size();
  }
  // Whatever is in flight ends at c (the failed batch of a Queue() error
  // was not counted in c).
  Status d = Drain();
  if (d.ok()) done = c;
  if (s.ok()) s = d;
  *next = done;
  return s;
}

void ChunkLoader::Finish() {
  if (finished_) return;
  finished_ = true;
  (void)Drain();
  if (pinned_.empty()) return;
  access_([&] {
    for (const void* p : pinned_) (void)ctx_->UnregisterHostMemory(const_cast<void*>(p));
  });
  pinned_.clear();
}

}  // namespace phos::engine
