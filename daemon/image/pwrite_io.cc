#include "image/pwrite_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "image/file_util.h"

namespace phos::image {

Status PwriteIo::Open(const std::string& path, IoMode mode, const IoOptions& options,
                      std::unique_ptr<IoBackend>* out) {
  std::shared_ptr<BufferPool> pool;
  PHOS_RETURN_IF_ERROR(PoolFor(options, &pool));
  const int flags = mode == IoMode::kWrite ? (O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC)
                                           : (O_RDONLY | O_CLOEXEC);
  int fd = ::open(path.c_str(), flags, 0644);
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT) return Status::NotFound(path + " does not exist");
    return ErrnoError("open", path, err);
  }
  if (mode == IoMode::kWrite) SetWriteLifeHint(fd, options.write_life_hint, path);
  out->reset(new PwriteIo(path, fd, std::move(pool)));
  return Status::Ok();
}

PwriteIo::~PwriteIo() { ::close(fd_); }

void PwriteIo::RecordError(const Status& s) {
  std::lock_guard<std::mutex> lock(mu_);
  if (error_.ok()) error_ = s;
}

Status PwriteIo::Acquire(IoBuffer** out) {
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_.ok()) return error_;
    }
    if (IoBuffer* b = pool_->TryAcquire()) {
      *out = b;
      return Status::Ok();
    }
    // Every buffer is being filled or written by another thread (or, with a
    // shared pool, another image); they come back without our help.
    pool_->WaitForRelease(std::chrono::milliseconds(10));
  }
}

IoBuffer* PwriteIo::TryAcquire() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_.ok()) return nullptr;
  }
  return pool_->TryAcquire();
}

void PwriteIo::Release(IoBuffer* buf) { pool_->Release(buf); }

Status PwriteIo::WriteAsync(IoBuffer* buf, std::uint64_t offset, std::size_t len) {
  Status s;
  std::size_t done = 0;
  while (done < len) {
    ssize_t n = ::pwrite(fd_, buf->data + done, len - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      s = ErrnoError("write", path_ + " at offset " + std::to_string(offset + done), errno);
      break;
    }
    if (n == 0) {
      s = DiskFullError(path_ + " at offset " + std::to_string(offset + done), ENOSPC);
      break;
    }
    done += static_cast<std::size_t>(n);
  }
  Release(buf);
  if (!s.ok()) RecordError(s);
  return s;
}

Status PwriteIo::Drain() {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

Status PwriteIo::Sync() {
  PHOS_RETURN_IF_ERROR(Drain());
  if (::fsync(fd_) != 0) return ErrnoError("fsync", path_, errno);
  return Status::Ok();
}

Status PwriteIo::Truncate(std::uint64_t bytes) {
  if (::ftruncate(fd_, static_cast<off_t>(bytes)) != 0) return ErrnoError("truncate", path_, errno);
  return Status::Ok();
}

Status PwriteIo::Read(IoBuffer* buf, std::uint64_t offset, std::size_t len, std::size_t* got) {
  std::size_t done = 0;
  while (done < len) {
    ssize_t n = ::pread(fd_, buf->data + done, len - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return ErrnoError("read", path_ + " at offset " + std::to_string(offset + done), errno);
    }
    if (n == 0) break;
    done += static_cast<std::size_t>(n);
  }
  *got = done;
  return Status::Ok();
}

}  // namespace phos::image
