// UringIo: io_uring + O_DIRECT IoBackend (docs/image-format.md, storage study).
//
// One ring per open file; requests in flight are bounded by the staging
// buffers (IoOptions::queue_depth private ones, or a shared pool).
//
// The ring has at least as many entries as the pool has buffers, and every
// request holds a buffer, so the submission queue never overflows.
//
// Locking: mu_ guards the ring (submission AND completion side), in_flight_
// and error_. Completions are reaped by whichever thread needs progress: a
// writer waiting for a free buffer, Drain, or a Read; it waits in
// io_uring_wait_cqe while holding mu_ (every other thread would wait for
// the same completion anyway). Threads that find no buffer and nothing of
// this file in flight (buffers are being filled by other threads, or used
// by other images sharing the pool) wait on the pool, without mu_, for a
// bounded time and re-check. Short writes are resubmitted for the
// remainder; -EAGAIN/-EINTR are resubmitted (bounded).
#pragma once

#include <liburing.h>

#include <mutex>

#include "image/io_backend.h"

namespace phos::image {

class UringIo : public IoBackend {
 public:
  /// NotSupported (with the reason) when io_uring or O_DIRECT is refused;
  /// the caller then falls back to PwriteIo. Other errors are real.
  static Status Open(const std::string& path, IoMode mode, const IoOptions& options,
                     std::unique_ptr<IoBackend>* out);
  ~UringIo() override;

  std::string_view name() const override { return "io_uring+O_DIRECT"; }
  const std::string& path() const override { return path_; }
  std::size_t buffer_bytes() const override { return pool_->buffer_bytes(); }
  Status Acquire(IoBuffer** out) override;
  IoBuffer* TryAcquire() override;
  void Release(IoBuffer* buf) override;
  Status WriteAsync(IoBuffer* buf, std::uint64_t offset, std::size_t len) override;
  Status Drain() override;
  Status Sync() override;
  Status Truncate(std::uint64_t bytes) override;
  Status Read(IoBuffer* buf, std::uint64_t offset, std::size_t len, std::size_t* got) override;
  Status ReadBatch(std::span<ReadOp> ops) override;
  Status StartReads(std::span<ReadOp> ops, std::unique_ptr<PendingReads>* out) override;

 private:
  struct Request {
    IoBuffer* buf = nullptr;
    std::uint64_t offset = 0;
    std::size_t len = 0;
    std::size_t done = 0;    // bytes completed so far
    bool is_read = false;
    bool finished = false;   // reads: the waiting thread checks this
    int retries = 0;
    Status status;
  };

  class UringPendingReads;

  UringIo(std::string path, int fd, std::shared_ptr<BufferPool> pool)
      : path_(std::move(path)), fd_(fd), pool_(std::move(pool)) {}
  /// Queues the remainder of r. Requires mu_.
  Status SubmitLocked(Request* r);
  /// Waits for one completion and handles it. Requires mu_ and in_flight_ > 0.
  void ReapOneLocked();
  /// Handles the completions already there, without waiting; skips if mu_
  /// is busy (its holder is making progress). The pool's reclaimer.
  void ReapCompleted();
  void CompleteLocked(Request* r, int res);
  void FinishLocked(Request* r, Status s);

  const std::string path_;
  const int fd_;
  const std::shared_ptr<BufferPool> pool_;  // thread-safe itself; lock order mu_ -> pool
  std::mutex mu_;
  io_uring ring_{};
  std::size_t in_flight_ = 0;
  Status error_;  // first failed write (sticky)
  std::uint64_t reclaim_token_ = 0;  // set in Open, before any other thread sees this
};

}  // namespace phos::image
