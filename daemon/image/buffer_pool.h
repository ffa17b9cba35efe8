// Reusable page-aligned staging buffers for image I/O (DESIGN §5: "from
// reusable pinned buffers, no per-object allocation").
//
// Buffers are allocated once with posix_memalign (4 KiB aligned, as O_DIRECT
// needs). PinHooks let the C/R engine register them with the GPU backend as
// pinned host memory (cuMemHostRegister) so device->host copies land in them
// directly; the image store itself does not need pinning.
//
// One pool can serve many images (phosd keeps one, pinned once, and passes
// it in IoOptions::pool) or be private to one open file (the default).
//
// Thread-safe: mu_ guards free_; released_ wakes threads waiting for a
// buffer. Backends never wait on released_ while holding their own lock.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "common/status.h"

namespace phos::image {

struct IoBuffer {
  std::uint8_t* data = nullptr;
  std::size_t capacity = 0;
};

struct PinHooks {
  /// Called once per buffer after allocation; an error fails pool creation.
  std::function<Status(void* data, std::size_t bytes)> pin;
  /// Called once per pinned buffer before it is freed.
  std::function<void(void* data, std::size_t bytes)> unpin;
};

class BufferPool {
 public:
  /// `count` buffers of `bytes` (rounded up to 4 KiB) each.
  static Status Create(std::size_t count, std::size_t bytes, PinHooks hooks,
                       std::unique_ptr<BufferPool>* out);
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  /// A free buffer, or nullptr when all are out.
  IoBuffer* TryAcquire();
  void Release(IoBuffer* buf);
  /// Waits until a buffer is released or `timeout` passes (bounded: callers
  /// re-check their own state, e.g. completions they could reap).
  void WaitForRelease(std::chrono::milliseconds timeout);
  std::size_t buffer_bytes() const { return bytes_; }
  std::size_t count() const { return all_.size(); }
  std::size_t free_count() const;

 private:
  BufferPool(std::size_t bytes, PinHooks hooks) : bytes_(bytes), hooks_(std::move(hooks)) {}
  std::size_t bytes_;
  PinHooks hooks_;
  std::vector<std::unique_ptr<IoBuffer>> all_;  // fixed after Create
  mutable std::mutex mu_;                        // guards free_
  std::condition_variable released_;
  std::vector<IoBuffer*> free_;
  std::size_t pinned_ = 0;  // all_[0..pinned_) were pinned
};

}  // namespace phos::image
