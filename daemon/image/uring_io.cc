#include "image/uring_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "image/file_util.h"

namespace phos::image {
namespace {
constexpr int kMaxRetries = 1000;  // -EAGAIN/-EINTR resubmissions per request
}

Status UringIo::Open(const std::string& path, IoMode mode, const IoOptions& options,
                     std::unique_ptr<IoBackend>* out) {
  const int flags = mode == IoMode::kWrite ? (O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_DIRECT)
                                           : (O_RDONLY | O_CLOEXEC | O_DIRECT);
  int fd = ::open(path.c_str(), flags, 0644);
  if (fd < 0) {
    int err = errno;
    if (err == EINVAL) {
      return Status::NotSupported("the filesystem of " + path + " refuses O_DIRECT");
    }
    if (err == ENOENT) return Status::NotFound(path + " does not exist");
    return ErrnoError("open", path, err);
  }
  std::shared_ptr<BufferPool> pool;
  Status s = PoolFor(options, &pool);
  if (!s.ok()) {
    ::close(fd);
    return s;
  }
  // Every request holds a pool buffer: entries >= buffers means the
  // submission queue cannot overflow.
  unsigned entries = 1;
  while (entries < pool->count()) entries <<= 1;
  std::unique_ptr<UringIo> io(new UringIo(path, fd, std::move(pool)));
  int rc = io_uring_queue_init(entries, &io->ring_, 0);
  if (rc < 0) {
    // The destructor must not tear down a ring that does not exist.
    io->ring_.ring_fd = -1;
    return Status::NotSupported(std::string("io_uring_queue_init failed: ") + std::strerror(-rc));
  }
  if (mode == IoMode::kWrite) SetWriteLifeHint(fd, options.write_life_hint, path);
  UringIo* raw = io.get();
  io->reclaim_token_ = io->pool_->AddReclaimer([raw] { raw->ReapCompleted(); });
  *out = std::move(io);
  return Status::Ok();
}

UringIo::~UringIo() {
  // First, so no other image's waiter runs our reclaimer while we tear
  // down (RemoveReclaimer waits for a running ReclaimAll; we hold no lock).
  if (reclaim_token_ != 0) pool_->RemoveReclaimer(reclaim_token_);
  {
    std::unique_lock<std::mutex> lock(mu_);
    while (in_flight_ > 0 && ring_.ring_fd >= 0) ReapOneLocked();
  }
  if (ring_.ring_fd >= 0) io_uring_queue_exit(&ring_);
  ::close(fd_);
}

Status UringIo::SubmitLocked(Request* r) {
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  if (sqe == nullptr) {
    // Cannot happen (in flight <= buffers <= entries); say so if it does.
    return Status::Internal("io_uring submission queue full with " + std::to_string(in_flight_) +
                            " requests in flight");
  }
  if (r->is_read) {
    io_uring_prep_read(sqe, fd_, r->buf->data + r->done, static_cast<unsigned>(r->len - r->done),
                       r->offset + r->done);
  } else {
    io_uring_prep_write(sqe, fd_, r->buf->data + r->done, static_cast<unsigned>(r->len - r->done),
                        r->offset + r->done);
  }
  io_uring_sqe_set_data(sqe, r);
  int rc = io_uring_submit(&ring_);
  if (rc < 0) return Status::FromErrno("io_uring_submit for " + path_, -rc);
  ++in_flight_;
  return Status::Ok();
}

void UringIo::FinishLocked(Request* r, Status s) {
  if (r->is_read) {
    r->status = std::move(s);
    r->finished = true;
    return;
  }
  if (!s.ok() && error_.ok()) error_ = s;
  pool_->Release(r->buf);
  delete r;
}

void UringIo::CompleteLocked(Request* r, int res) {
  const std::string where = path_ + " at offset " + std::to_string(r->offset + r->done);
  if (res == -EAGAIN || res == -EINTR) {
    if (++r->retries <= kMaxRetries) {
      Status s = SubmitLocked(r);
      if (s.ok()) return;
      FinishLocked(r, s);
      return;
    }
    FinishLocked(r, ErrnoError(r->is_read ? "read" : "write", where, -res));
    return;
  }
  if (res < 0) {
    FinishLocked(r, ErrnoError(r->is_read ? "read" : "write", where, -res));
    return;
  }
  if (res == 0) {
    // Reads: end of file. Writes: no progress means no space.
    FinishLocked(r, r->is_read ? Status::Ok() : DiskFullError(where, ENOSPC));
    return;
  }
  r->done += static_cast<std::size_t>(res);
  if (r->done < r->len && !r->is_read) {
    Status s = SubmitLocked(r);  // short write: the rest
    if (!s.ok()) FinishLocked(r, s);
    return;
  }
  // A short O_DIRECT read only happens at end of file.
  FinishLocked(r, Status::Ok());
}

void UringIo::ReapCompleted() {
  std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
  if (!lock.owns_lock()) return;
  while (in_flight_ > 0) {
    io_uring_cqe* cqe = nullptr;
    if (io_uring_peek_cqe(&ring_, &cqe) != 0 || cqe == nullptr) return;
    auto* r = static_cast<Request*>(io_uring_cqe_get_data(cqe));
    const int res = cqe->res;
    io_uring_cqe_seen(&ring_, cqe);
    --in_flight_;
    CompleteLocked(r, res);
  }
}

void UringIo::ReapOneLocked() {
  io_uring_cqe* cqe = nullptr;
  int rc;
  do {
    rc = io_uring_wait_cqe(&ring_, &cqe);
  } while (rc == -EINTR);
  if (rc < 0) {
    // The ring itself failed: nothing in flight can be trusted any more.
    if (error_.ok()) error_ = Status::FromErrno("io_uring_wait_cqe for " + path_, -rc);
    in_flight_ = 0;
    return;
  }
  auto* r = static_cast<Request*>(io_uring_cqe_get_data(cqe));
  const int res = cqe->res;
  io_uring_cqe_seen(&ring_, cqe);
  --in_flight_;
  CompleteLocked(r, res);
}

Status UringIo::Acquire(IoBuffer** out) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (!error_.ok()) return error_;
    if (IoBuffer* b = pool_->TryAcquire()) {
      *out = b;
      return Status::Ok();
    }
    if (in_flight_ > 0) {
      ReapOneLocked();
    } else {
      // Nothing of ours in flight: the buffers are out with other images
      // sharing the pool. Let them finish what already completed (their
      // own threads may have stopped calling in), then wait a bounded time.
      lock.unlock();
      pool_->ReclaimAll();
      pool_->WaitForRelease(std::chrono::milliseconds(10));
      lock.lock();
    }
  }
}

IoBuffer* UringIo::TryAcquire() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_.ok()) return nullptr;
  }
  return pool_->TryAcquire();
}

void UringIo::Release(IoBuffer* buf) { pool_->Release(buf); }

Status UringIo::WriteAsync(IoBuffer* buf, std::uint64_t offset, std::size_t len) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!error_.ok()) {
    pool_->Release(buf);
    return error_;
  }
  auto* r = new Request;
  r->buf = buf;
  r->offset = offset;
  r->len = len;
  Status s = SubmitLocked(r);
  if (!s.ok()) {
    FinishLocked(r, s);
    return s;
  }
  return Status::Ok();
}

Status UringIo::Drain() {
  std::unique_lock<std::mutex> lock(mu_);
  while (in_flight_ > 0) ReapOneLocked();
  return error_;
}

Status UringIo::Sync() {
  PHOS_RETURN_IF_ERROR(Drain());
  if (::fsync(fd_) != 0) return ErrnoError("fsync", path_, errno);
  return Status::Ok();
}

Status UringIo::Truncate(std::uint64_t bytes) {
  if (::ftruncate(fd_, static_cast<off_t>(bytes)) != 0) return ErrnoError("truncate", path_, errno);
  return Status::Ok();
}

Status UringIo::Read(IoBuffer* buf, std::uint64_t offset, std::size_t len, std::size_t* got) {
  ReadOp op{buf, offset, len, 0};
  Status s = ReadBatch({&op, 1});
  *got = op.got;
  return s;
}

// Its requests live here until finished: ReapOneLocked completes them by
// pointer (whichever thread reaps). The vector is sized once, so the
// pointers stay valid.
class UringIo::UringPendingReads : public IoBackend::PendingReads {
 public:
  UringPendingReads(UringIo* io, std::span<ReadOp> ops) : io_(io), ops_(ops), reqs_(ops.size()) {}
  ~UringPendingReads() override {
    if (!waited_) (void)Wait();
  }

  /// Submits every op (stops at the first failure, kept for Wait).
  void Submit() {
    std::unique_lock<std::mutex> lock(io_->mu_);
    for (; submitted_ < ops_.size(); ++submitted_) {
      Request& r = reqs_[submitted_];
      r.buf = ops_[submitted_].buf;
      r.offset = ops_[submitted_].offset;
      r.len = ops_[submitted_].len;
      r.is_read = true;
      first_ = io_->SubmitLocked(&r);
      if (!first_.ok()) break;
    }
  }

  Status Wait() override {
    waited_ = true;
    std::unique_lock<std::mutex> lock(io_->mu_);
    for (std::size_t i = 0; i < submitted_; ++i) {
      while (!reqs_[i].finished) {
        if (io_->in_flight_ == 0) {
          // The ring failed (ReapOneLocked): nothing more will complete.
          for (std::size_t j = i; j < submitted_; ++j) reqs_[j].finished = true;
          return Status::Internal("io_uring lost a read of " + io_->path_);
        }
        io_->ReapOneLocked();
      }
      ops_[i].got = reqs_[i].done;
      if (first_.ok() && !reqs_[i].status.ok()) first_ = reqs_[i].status;
    }
    return first_;
  }

 private:
  UringIo* io_;
  std::span<ReadOp> ops_;
  std::vector<Request> reqs_;
  std::size_t submitted_ = 0;
  Status first_;
  bool waited_ = false;
};

Status UringIo::StartReads(std::span<ReadOp> ops, std::unique_ptr<PendingReads>* out) {
  auto pending = std::make_unique<UringPendingReads>(this, ops);
  pending->Submit();
  *out = std::move(pending);
  return Status::Ok();
}

Status UringIo::ReadBatch(std::span<ReadOp> ops) {
  std::unique_ptr<PendingReads> pending;
  PHOS_RETURN_IF_ERROR(StartReads(ops, &pending));
  return pending->Wait();
}

}  // namespace phos::image
