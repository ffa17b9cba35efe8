// Reusable page-aligned staging buffers for image I/O (docs/image-format.md: "from
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
// reclaim_mu_ guards the reclaimers (see AddReclaimer).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
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
  /// Backends that keep buffers in flight register a callback that
  /// finishes their already-completed requests WITHOUT blocking, so that
  /// with a shared pool one image's finished writes give their buffers back
  /// even when no thread is calling into that image (else a writer of
  /// another image could wait for them forever). Returns a token for
  /// RemoveReclaimer, which waits for a running ReclaimAll to finish.
  std::uint64_t AddReclaimer(std::function<void()> reclaim);
  void RemoveReclaimer(std::uint64_t token);
  /// Runs every registered reclaimer. Callers must not hold their own
  /// backend lock (lock order: reclaim_mu_ -> backend mu_ -> pool mu_).
  void ReclaimAll();
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
  std::mutex reclaim_mu_;   // guards reclaimers_ and is held while they run
  std::map<std::uint64_t, std::function<void()>> reclaimers_;
  std::uint64_t next_reclaimer_ = 1;  // guarded by reclaim_mu_
};

}  // namespace phos::image
