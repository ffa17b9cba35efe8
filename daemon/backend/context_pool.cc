#include "backend/context_pool.h"

#include <algorithm>
#include <limits>
#include <utility>

#include <spdlog/spdlog.h>

namespace phos::backend {

using Clock = std::chrono::steady_clock;

ContextPool::ContextPool(Backend* backend, ContextPoolOptions options)
    : backend_(backend),
      options_(std::move(options)),
      // Sized once, here (never resized: Device is not movable, and
      // references to its elements are kept across unlocks).
      devices_(static_cast<std::size_t>(std::max(0, backend_->device_count()))) {
  if (options_.contexts_per_device > 0 && !devices_.empty()) {
    thread_ = std::thread([this] { RefillLoop(); });
  }
}

ContextPool::~ContextPool() { Shutdown(); }

void ContextPool::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  refill_cv_.notify_all();
  filled_cv_.notify_all();
  // The thread may be inside CreateContext; it finishes that creation, sees
  // stopping_ and destroys what it made.
  if (thread_.joinable()) thread_.join();
  std::vector<std::unique_ptr<Context>> doomed;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (Device& d : devices_) {
      for (auto& c : d.ready) doomed.push_back(std::move(c));
      d.ready.clear();
    }
  }
  doomed.clear();  // destroyed without the lock held
}

Status ContextPool::CreateTimed(int device, std::unique_ptr<Context>* out) {
  const auto start = Clock::now();
  Status s = backend_->CreateContext(device, out);
  const auto took = Clock::now() - start;
  std::lock_guard<std::mutex> lock(mutex_);
  if (s.ok()) {
    ++created_;
    RecordCreationLocked(took);
  } else {
    ++create_failures_;
  }
  return s;
}

void ContextPool::RecordCreationLocked(Clock::duration took) {
  if (options_.creation_times_kept == 0) return;
  recent_creation_times_.push_back(std::chrono::duration_cast<std::chrono::microseconds>(took));
  while (recent_creation_times_.size() > options_.creation_times_kept) recent_creation_times_.pop_front();
}

Status ContextPool::Take(int device, std::unique_ptr<Context>* out) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (device >= 0 && static_cast<std::size_t>(device) < devices_.size() && !stopping_) {
      Device& d = devices_[static_cast<std::size_t>(device)];
      if (!d.ready.empty()) {
        *out = std::move(d.ready.front());
        d.ready.pop_front();
        ++hits_;
        // notify under the lock is fine: the refill thread re-checks state.
        refill_cv_.notify_one();
        return Status::Ok();
      }
    }
    ++misses_;
  }
  // Empty (or disabled, or shut down, or a bad ordinal — which the backend
  // rejects with its own message): create one here. The refill thread is
  // already working if the pool is enabled and the device is short.
  spdlog::debug("context pool: miss on GPU {}, creating a context on demand", device);
  return CreateTimed(device, out);
}

bool ContextPool::FullLocked() const {
  for (const Device& d : devices_) {
    if (d.ready.size() < static_cast<std::size_t>(options_.contexts_per_device)) return false;
  }
  return true;
}

int ContextPool::PickDeviceLocked(Clock::time_point now, Clock::time_point* wake_at) const {
  *wake_at = Clock::time_point::max();
  int best = -1;
  for (std::size_t i = 0; i < devices_.size(); ++i) {
    const Device& d = devices_[i];
    if (d.ready.size() >= static_cast<std::size_t>(options_.contexts_per_device)) continue;
    if (d.backoff.Waiting(now)) {
      *wake_at = std::min(*wake_at, d.backoff.retry_at());
      continue;
    }
    if (best < 0 || d.ready.size() < devices_[static_cast<std::size_t>(best)].ready.size()) {
      best = static_cast<int>(i);
    }
  }
  return best;
}

void ContextPool::RefillLoop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    Clock::time_point wake_at;
    const int device = PickDeviceLocked(Clock::now(), &wake_at);
    if (device < 0) {
      // Nothing to do until a Take, a stop, or the next retry time.
      if (wake_at == Clock::time_point::max()) {
        refill_cv_.wait(lock);
      } else {
        refill_cv_.wait_until(lock, wake_at);
      }
      continue;
    }
    lock.unlock();
    std::unique_ptr<Context> ctx;
    Status s = CreateTimed(device, &ctx);
    lock.lock();
    Device& d = devices_[static_cast<std::size_t>(device)];
    if (!s.ok()) {
      if (d.backoff.Fail(Clock::now(), options_.retry_initial, options_.retry_max) == 1) {
        spdlog::warn("context pool: cannot pre-create a context on GPU {}: {} (retrying with backoff; "
                     "sessions create their own meanwhile)",
                     device, s.ToString());
      } else {
        spdlog::debug("context pool: GPU {} refill failed again ({} in a row, next try in {} ms): {}",
                      device, d.backoff.failures(), d.backoff.delay().count(), s.ToString());
      }
      continue;
    }
    if (const int ended = d.backoff.Succeed(); ended > 0) {
      spdlog::info("context pool: GPU {} refills again after {} failures", device, ended);
    }
    if (stopping_) {
      lock.unlock();
      ctx.reset();  // made while Shutdown waited for us
      lock.lock();
      break;
    }
    d.ready.push_back(std::move(ctx));
    filled_cv_.notify_all();
  }
}

bool ContextPool::WaitUntilFull(std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mutex_);
  return filled_cv_.wait_for(lock, timeout, [this] { return stopping_ || FullLocked(); }) && !stopping_;
}

ContextPoolStats ContextPool::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  ContextPoolStats s;
  s.contexts_per_device = options_.contexts_per_device;
  s.hits = hits_;
  s.misses = misses_;
  s.created = created_;
  s.create_failures = create_failures_;
  for (const Device& d : devices_) {
    s.ready_per_device.push_back(d.ready.size());
    s.ready += d.ready.size();
  }
  s.recent_creation_times.assign(recent_creation_times_.begin(), recent_creation_times_.end());
  return s;
}

void ContextPool::ExportCounters(std::map<std::string, std::uint64_t>* out) const {
  const ContextPoolStats s = stats();
  (*out)["context_pool.size"] = static_cast<std::uint64_t>(s.contexts_per_device);
  (*out)["context_pool.hits"] = s.hits;
  (*out)["context_pool.misses"] = s.misses;
  (*out)["context_pool.ready"] = s.ready;
  (*out)["context_pool.created"] = s.created;
  (*out)["context_pool.create_failures"] = s.create_failures;
  std::uint64_t last = 0, max = 0;
  for (auto t : s.recent_creation_times) {
    last = static_cast<std::uint64_t>(t.count());
    max = std::max(max, last);
  }
  (*out)["context_pool.create_us_last"] = last;
  (*out)["context_pool.create_us_max"] = max;
}

}  // namespace phos::backend
