#include "engine/chunk_loader.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <deque>

#include "common/hex.h"

namespace phos::engine {

ChunkLoader::ChunkLoader(image::ImageReader& reader, backend::Context* ctx, backend::StreamHandle stream,
                         ContextAccess access, Progress* progress, std::size_t read_ahead)
    : reader_(reader),
      ctx_(ctx),
      stream_(stream),
      access_(std::move(access)),
      progress_(progress),
      // One staging buffer is being verified, one copied: the rest may be read.
      read_ahead_(std::clamp<std::size_t>(read_ahead, 1, std::max<std::size_t>(reader.queue_depth(), 3) - 2)) {}

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
      if (tried_pin_.insert(c.buf->data).second && ctx_->RegisterHostMemory(c.buf->data, c.buf->capacity).ok()) {
        pinned_.emplace(c.buf->data, ctx_);
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
  using Pending = std::unique_ptr<image::ImageReader::PendingChunks>;
  const std::uint64_t chunk_bytes = reader_.manifest().buffers(static_cast<int>(extent)).chunk_bytes();
  std::uint64_t c = first;     // the first chunk not queued for copying
  std::uint64_t done = first;  // chunks before it are on the device
  std::uint64_t reading = first;  // the first chunk whose read was not started
  bool paused = false;
  std::deque<Pending> ahead;  // reads started, in chunk order
  // Keeps up to read_ahead_ chunk reads in flight. Before each read and
  // each copy but the first, `pause` may stop the load (a call waits for
  // another buffer).
  auto read_more = [&]() -> Status {
    while (!paused && ahead.size() < read_ahead_ && reading < end) {
      if (reading > first && pause && pause()) {
        paused = true;
        break;
      }
      Pending p;
      // Blocking only with nothing of ours held: else the staging buffers
      // we would wait for could be the ones our own reads and copies hold.
      PHOS_RETURN_IF_ERROR(reader_.StartStaged(extent, reading, end, 1, ahead.empty() && inflight_.empty(), &p));
      if (p == nullptr) {
        if (!ahead.empty()) break;  // more once these are consumed
        PHOS_RETURN_IF_ERROR(Drain());  // every free buffer was in our copies
        if (done < c) done = c;
        PHOS_RETURN_IF_ERROR(reader_.StartStaged(extent, reading, end, 1, true, &p));
      }
      reading += p->size();
      ahead.push_back(std::move(p));
    }
    return Status::Ok();
  };
  Status s = read_more();
  std::vector<image::ImageReader::StagedChunk> chunk;
  while (s.ok() && !ahead.empty()) {
    // Also before each copy: the reads of this buffer may all have started
    // before a call began to wait for another one.
    if (c > first && pause && pause()) break;
    Pending p = std::move(ahead.front());
    ahead.pop_front();
    chunk.clear();
    s = reader_.FinishStaged(std::move(p), &chunk);  // waits, verifies: a bad chunk stops here
    if (!s.ok()) break;
    // The previous chunk was copied while this one was read and verified.
    s = Drain();
    if (s.ok()) done = c;
    if (s.ok()) s = Queue(chunk, base, chunk_bytes);
    inflight_ = chunk;  // also on failure: queued copies must finish before the buffers go back
    if (!s.ok()) break;
    c += chunk.size();
    s = read_more();
  }
  // Dropping reads still in flight waits for them and frees their buffers
  // (read ahead of a pause: read again when the load resumes).
  ahead.clear();
  // What is in flight ends at c (a chunk whose Queue() failed was not
  // counted in c).
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
    for (const auto& [p, ctx] : pinned_) (void)ctx->UnregisterHostMemory(const_cast<void*>(p));
  });
  pinned_.clear();
}

}  // namespace phos::engine
