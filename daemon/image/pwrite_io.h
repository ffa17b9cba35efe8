// PwriteIo: the fallback IoBackend — buffered pwrite/pread in the calling
// thread (one request per thread in flight). Used where io_uring or
// O_DIRECT is refused, or when forced (IoOptions::force_pwrite).
#pragma once

#include <mutex>

#include "image/io_backend.h"

namespace phos::image {

class PwriteIo : public IoBackend {
 public:
  static Status Open(const std::string& path, IoMode mode, const IoOptions& options,
                     std::unique_ptr<IoBackend>* out);
  ~PwriteIo() override;

  std::string_view name() const override { return "pwrite"; }
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

 private:
  PwriteIo(std::string path, int fd, std::shared_ptr<BufferPool> pool)
      : path_(std::move(path)), fd_(fd), pool_(std::move(pool)) {}
  void RecordError(const Status& s);

  const std::string path_;
  const int fd_;  // pwrite/pread are thread-safe on one fd: no lock around I/O
  const std::shared_ptr<BufferPool> pool_;  // thread-safe itself
  std::mutex mu_;  // guards error_
  Status error_;
};

}  // namespace phos::image
