// ImageReader: opens a committed checkpoint directory and reads buffers
// back, verifying every chunk's xxh3.
//
// Open refuses anything that is not a complete image: no manifest ("not a
// phos image"), a manifest whose header, checksum or structure is wrong,
// a gpu.img whose header does not match the manifest, or a gpu.img shorter
// than the manifest says (reported with the first buffer, chunk and file
// offset that lie past its end). Errors name the buffer address, chunk
// index and gpu.img offset, so `phos inspect` and the restore path can say
// exactly what is damaged — before anything touches a running session.
//
// Reads use io_uring + O_DIRECT when available (pread fallback); the
// manifest is small and read buffered. Thread-safe after Open: reads may
// run concurrently (the IoBackend serializes what it must).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "image.pb.h"
#include "image/io_backend.h"

namespace phos::image {

struct ImageReaderOptions {
  /// Staging buffers for reads (buffer_bytes is set to the largest chunk;
  /// queue_depth = buffers, i.e. chunk reads in flight at most).
  IoOptions io = [] {
    IoOptions o;
    o.queue_depth = 4;
    return o;
  }();
  IoBackendFactory backend_factory;
};

/// Reads DIR/manifest and validates it (no gpu.img access). NotFound when
/// DIR has no manifest: such a directory is never an image.
Status ReadManifest(const std::string& dir, v1::Manifest* m);

class ImageReader {
 public:
  static Status Open(const std::string& dir, const ImageReaderOptions& options,
                     std::unique_ptr<ImageReader>* out);

  const v1::Manifest& manifest() const { return manifest_; }
  const std::string& dir() const { return dir_; }
  std::size_t buffer_count() const { return static_cast<std::size_t>(manifest_.buffers_size()); }
  std::string_view io_backend_name() const { return io_->name(); }

  /// Reads a whole buffer (manifest().buffers(i).bytes() bytes) into dst.
  Status ReadBuffer(std::size_t buffer, void* dst);
  /// Reads and verifies every chunk without keeping the data; stops at the
  /// first problem. `progress(done_bytes, total_bytes)` after each chunk.
  Status VerifyAll(const std::function<void(std::uint64_t, std::uint64_t)>& progress = {});

  /// A verified chunk still in its staging buffer (no copy out of it): the
  /// caller copies from `data` (e.g. H2D straight from the staging buffer)
  /// and gives it back with Release().
  struct StagedChunk {
    IoBuffer* buf = nullptr;
    std::uint64_t chunk = 0;
    const std::uint8_t* data = nullptr;
    std::size_t len = 0;
  };
  /// Reads chunks first, first+1, ... (at most `max`, none at or past
  /// `end`) of `buffer` with as many reads in flight as staging buffers it
  /// gets, verifies each and appends them to *out in order. `wait`: block
  /// for the first staging buffer; false: append nothing when none is free
  /// (a caller holding staged chunks releases them first — it would
  /// otherwise wait for itself). On error *out is unchanged and nothing
  /// stays acquired; the error names the first bad chunk.
  Status ReadStaged(std::size_t buffer, std::uint64_t first, std::uint64_t end, std::size_t max, bool wait,
                    std::vector<StagedChunk>* out);

  /// ReadStaged in two steps, so that the caller works while the reads run
  /// (ChunkLoader verifies and copies one batch while the next is read).
  /// Dropping it unfinished waits for its reads and releases their buffers.
  class PendingChunks {
   public:
    ~PendingChunks();
    std::uint64_t first() const { return first_; }
    std::size_t size() const { return ops_.size(); }
    /// Waits for the reads (not the checks: FinishStaged); the first error.
    Status Wait();

   private:
    friend class ImageReader;
    ImageReader* reader_ = nullptr;
    std::size_t buffer_ = 0;
    std::uint64_t first_ = 0;
    std::vector<IoBackend::ReadOp> ops_;
    std::unique_ptr<IoBackend::PendingReads> reads_;  // null once waited for
    Status read_status_;
  };
  /// Starts the reads ReadStaged would do. *out stays null when there is
  /// nothing to read (first >= end) or, without `wait`, no staging buffer
  /// is free.
  Status StartStaged(std::size_t buffer, std::uint64_t first, std::uint64_t end, std::size_t max, bool wait,
                     std::unique_ptr<PendingChunks>* out);
  /// Waits for `p`'s reads, verifies each chunk and appends them to *out as
  /// ReadStaged does (on error nothing is appended and nothing stays
  /// acquired).
  Status FinishStaged(std::unique_ptr<PendingChunks> p, std::vector<StagedChunk>* out);
  void Release(const StagedChunk& c) { io_->Release(c.buf); }
  /// Staging buffers (concurrent reads in flight at most).
  std::size_t queue_depth() const { return queue_depth_; }

 private:
  ImageReader() = default;
  /// Reads chunks [first, end) of a buffer with up to queue-depth reads in
  /// flight (ReadStaged), verifies each and passes it to `sink(chunk, data,
  /// len)` in order.
  Status ReadChunks(std::size_t buffer, std::uint64_t first, std::uint64_t end,
                    const std::function<void(std::uint64_t, const std::uint8_t*, std::size_t)>& sink);
  /// Checks one chunk read into `data` (got bytes): length and xxh3.
  Status CheckChunk(std::size_t buffer, std::uint64_t chunk, const std::uint8_t* data,
                    std::size_t got) const;

  std::string dir_;
  v1::Manifest manifest_;         // immutable after Open
  std::unique_ptr<IoBackend> io_;  // thread-safe itself
  std::size_t queue_depth_ = 1;    // immutable after Open
};

}  // namespace phos::image
