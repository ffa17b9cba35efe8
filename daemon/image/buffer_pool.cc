#include "image/buffer_pool.h"

#include <cstdlib>
#include <cstring>

#include "image/image_layout.h"

namespace phos::image {

Status BufferPool::Create(std::size_t count, std::size_t bytes, PinHooks hooks,
                          std::unique_ptr<BufferPool>* out) {
  if (count == 0 || bytes == 0) {
    return Status::InvalidArgument("buffer pool needs at least one non-empty buffer");
  }
  bytes = RoundUp(bytes, kAlign);
  std::unique_ptr<BufferPool> pool(new BufferPool(bytes, std::move(hooks)));
  for (std::size_t i = 0; i < count; ++i) {
    void* p = nullptr;
    if (::posix_memalign(&p, kAlign, bytes) != 0) {
      return Status::OutOfMemory("cannot allocate " + std::to_string(count) + " I/O buffers of " +
                                 std::to_string(bytes) + " bytes; lower the chunk size");
    }
    auto buf = std::make_unique<IoBuffer>();
    buf->data = static_cast<std::uint8_t*>(p);
    buf->capacity = bytes;
    pool->free_.push_back(buf.get());
    pool->all_.push_back(std::move(buf));
    if (pool->hooks_.pin) {
      PHOS_RETURN_IF_ERROR(pool->hooks_.pin(p, bytes).WithContext("pinning an image I/O buffer"));
      pool->pinned_ = pool->all_.size();
    }
  }
  *out = std::move(pool);
  return Status::Ok();
}

BufferPool::~BufferPool() {
  for (std::size_t i = 0; i < all_.size(); ++i) {
    if (i < pinned_ && hooks_.unpin) hooks_.unpin(all_[i]->data, all_[i]->capacity);
    std::free(all_[i]->data);
  }
}

IoBuffer* BufferPool::TryAcquire() {
  std::lock_guard<std::mutex> lock(mu_);
  if (free_.empty()) return nullptr;
  IoBuffer* b = free_.back();
  free_.pop_back();
  return b;
}

void BufferPool::Release(IoBuffer* buf) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(buf);
  }
  released_.notify_all();
}

void BufferPool::WaitForRelease(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!free_.empty()) return;
  released_.wait_for(lock, timeout);
}

std::uint64_t BufferPool::AddReclaimer(std::function<void()> reclaim) {
  std::lock_guard<std::mutex> lock(reclaim_mu_);
  const std::uint64_t token = next_reclaimer_++;
  reclaimers_.emplace(token, std::move(reclaim));
  return token;
}

void BufferPool::RemoveReclaimer(std::uint64_t token) {
  std::lock_guard<std::mutex> lock(reclaim_mu_);
  reclaimers_.erase(token);
}

void BufferPool::ReclaimAll() {
  std::lock_guard<std::mutex> lock(reclaim_mu_);
  for (auto& [token, reclaim] : reclaimers_) reclaim();
}

std::size_t BufferPool::free_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return free_.size();
}

}  // namespace phos::image
