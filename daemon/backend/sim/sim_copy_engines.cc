#include "backend/sim/sim_copy_engines.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

namespace phos::backend::sim {

SimCopyEngines::SimCopyEngines(int engines, double link_gbps)
    : engines_(engines), link_gbps_(link_gbps), free_(engines) {}

void SimCopyEngines::Acquire() {
  std::unique_lock<std::mutex> lock(mu_);
  const std::uint64_t ticket = next_ticket_++;
  waiting_.push_back(ticket);
  cv_.wait(lock, [&] { return free_ > 0 && waiting_.front() == ticket; });
  waiting_.pop_front();
  --free_;
  peak_ = std::max(peak_, engines_ - free_);
  lock.unlock();
  cv_.notify_all();  // the next in line may take another free engine
}

int SimCopyEngines::peak_in_use() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_;
}

void SimCopyEngines::Release() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++free_;
  }
  cv_.notify_all();
}

void SimCopyEngines::Copy(void* dst, const void* src, std::size_t bytes) {
  Acquire();
  if (link_gbps_ <= 0.0) {
    std::memmove(dst, src, bytes);
  } else {
    using Clock = std::chrono::steady_clock;
    const auto start = Clock::now();
    const double bytes_per_ns = link_gbps_;  // 10^9 B/s == 1 B/ns
    auto* d = static_cast<unsigned char*>(dst);
    const auto* s = static_cast<const unsigned char*>(src);
    std::size_t done = 0;
    while (done < bytes) {
      const std::size_t n = std::min(kChunkBytes, bytes - done);
      std::memmove(d + done, s + done, n);
      done += n;
      const auto due = start + std::chrono::nanoseconds(
                                   static_cast<std::int64_t>(static_cast<double>(done) /
                                                             bytes_per_ns));
      std::this_thread::sleep_until(due);
    }
  }
  Release();
}

}  // namespace phos::backend::sim
