// IoBackend: how the image store moves bytes between staging buffers and
// one file (gpu.img). Two implementations:
//   UringIo  (uring_io.h)  io_uring + O_DIRECT, several requests in flight;
//   PwriteIo (pwrite_io.h) plain pwrite/pread in the calling thread.
// OpenIoBackend picks io_uring and falls back to pwrite when io_uring is
// refused (io_uring_queue_init fails: old kernel, seccomp, sysctl) or the
// filesystem refuses O_DIRECT (e.g. tmpfs on older kernels); it logs once
// which one is used and why.
//
// Every implementation is thread-safe: several writer threads may Acquire,
// fill and WriteAsync concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "common/status.h"
#include "image/buffer_pool.h"
#include "image/image_layout.h"

namespace phos::image {

enum class IoMode { kWrite, kRead };

struct IoOptions {
  /// Requests in flight = staging buffers in the pool.
  std::size_t queue_depth = 8;
  /// Staging buffer size (rounded up to 4 KiB); must hold one chunk.
  std::size_t buffer_bytes = kDefaultChunkBytes;
  /// Skip io_uring and use pwrite/pread (tests, benchmarks, --image-io=pwrite).
  bool force_pwrite = false;
  /// RWH_WRITE_LIFE_* for written files (0 = no hint).
  std::uint64_t write_life_hint = 0;
  /// A pool shared by many images (buffers allocated and pinned once); its
  /// buffers must hold buffer_bytes. Null: the backend allocates its own
  /// queue_depth buffers (with `pin`) for the life of the open file.
  std::shared_ptr<BufferPool> pool;
  PinHooks pin;
};

/// The pool a backend uses: options.pool, or a new private one.
Status PoolFor(const IoOptions& options, std::shared_ptr<BufferPool>* out);

class IoBackend {
 public:
  virtual ~IoBackend() = default;
  /// "io_uring+O_DIRECT" or "pwrite".
  virtual std::string_view name() const = 0;
  virtual const std::string& path() const = 0;
  virtual std::size_t buffer_bytes() const = 0;

  /// A free staging buffer; blocks (reaping completions) until one is free.
  /// After a failed write it returns that (sticky) error instead.
  virtual Status Acquire(IoBuffer** out) = 0;
  /// A free staging buffer or nullptr, without waiting (for batching more
  /// requests once one buffer is held).
  virtual IoBuffer* TryAcquire() = 0;
  /// Returns a buffer that will not be submitted.
  virtual void Release(IoBuffer* buf) = 0;
  /// Queues a write of buf->data[0, len) at `offset` (both multiples of
  /// 4 KiB). The buffer goes back to the pool when the write completes, also
  /// when this call fails. Errors of queued writes are sticky: later calls
  /// and Drain return the first one (ENOSPC as a DiskFullError).
  virtual Status WriteAsync(IoBuffer* buf, std::uint64_t offset, std::size_t len) = 0;
  /// Waits for every queued write; the first error if any failed.
  virtual Status Drain() = 0;
  /// Drain, then fsync the file.
  virtual Status Sync() = 0;
  virtual Status Truncate(std::uint64_t bytes) = 0;
  /// Synchronous read of [offset, offset+len) into buf (offset and len
  /// multiples of 4 KiB); *got < len only at end of file.
  virtual Status Read(IoBuffer* buf, std::uint64_t offset, std::size_t len, std::size_t* got) = 0;

  /// One read of a batch.
  struct ReadOp {
    IoBuffer* buf = nullptr;
    std::uint64_t offset = 0;  // multiple of 4 KiB
    std::size_t len = 0;       // multiple of 4 KiB
    std::size_t got = 0;       // out: bytes read (< len only at end of file)
  };
  /// Reads all ops with up to ops.size() requests in flight (io_uring) or
  /// one after another (pread); returns when all are done. The first error.
  virtual Status ReadBatch(std::span<ReadOp> ops) {
    for (ReadOp& op : ops) PHOS_RETURN_IF_ERROR(Read(op.buf, op.offset, op.len, &op.got));
    return Status::Ok();
  }

  /// Reads started by StartReads. Destroying it waits for them (their
  /// buffers and ops must not be reused while the kernel may still write).
  class PendingReads {
   public:
    virtual ~PendingReads() = default;
    /// Waits until every read is done (ops' `got` set); the first error.
    /// Call at most once.
    virtual Status Wait() = 0;
  };
  /// Queues reads of all ops and returns at once where the backend can
  /// (io_uring), so the caller can work while they run; `ops` must stay
  /// valid until Wait() returned. The default (pread) reads them now.
  virtual Status StartReads(std::span<ReadOp> ops, std::unique_ptr<PendingReads>* out);
};

/// Opens `path` (created/truncated for kWrite) with io_uring or the fallback.
Status OpenIoBackend(const std::string& path, IoMode mode, const IoOptions& options,
                     std::unique_ptr<IoBackend>* out);

/// Lets tests inject a backend (e.g. one that fails with ENOSPC).
using IoBackendFactory = std::function<Status(const std::string& path, IoMode mode,
                                              const IoOptions& options,
                                              std::unique_ptr<IoBackend>* out)>;

}  // namespace phos::image
