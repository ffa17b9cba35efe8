#include "engine/shadow_pool.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include <spdlog/spdlog.h>

#include "common/hex.h"

namespace phos::engine {

using Clock = std::chrono::steady_clock;

namespace {

constexpr std::uint64_t kBlockGranularity = 2ull << 20;

std::uint64_t RoundUp(std::uint64_t n, std::uint64_t to) { return (n + to - 1) / to * to; }

}  // namespace

ShadowPool::ShadowPool(backend::Backend* backend, ShadowPoolOptions options)
    : backend_(backend),
      options_(std::move(options)),
      bytes_per_device_(RoundUp(options_.bytes_per_device, kBlockGranularity)),
      // Sized once, here: references to elements are kept across unlocks.
      devices_(static_cast<std::size_t>(std::max(0, backend_->device_count()))) {
  if (bytes_per_device_ == 0 || devices_.empty()) return;
  // Allocated now, before phosd serves anyone: the free memory an app sees
  // (cudaMemGetInfo) then never drops under it when the reserve arrives.
  for (std::size_t i = 0; i < devices_.size(); ++i) {
    Device& d = devices_[i];
    if (Status s = Allocate(static_cast<int>(i), &d.ctx, &d.base); !s.ok()) {
      d.last_error = s.ToString();
      d.backoff.Fail(Clock::now(), options_.retry_initial, options_.retry_max);
      spdlog::warn("cow reserve: cannot reserve {} MiB on GPU {}: {} (retrying with backoff; copy-on-write "
                   "checkpoints allocate their shadows themselves meanwhile)",
                   bytes_per_device_ >> 20, i, d.last_error);
    }
  }
  thread_ = std::thread([this] { FillLoop(); });
}

ShadowPool::~ShadowPool() { Shutdown(); }

void ShadowPool::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::vector<std::pair<std::unique_ptr<backend::Context>, backend::DevicePtr>> doomed;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (Device& d : devices_) {
      if (!d.taken.empty()) {
        spdlog::warn("cow reserve: {} ranges still taken at shutdown (a checkpoint outlived its session?)",
                     d.taken.size());
      }
      if (d.ctx) doomed.emplace_back(std::move(d.ctx), d.base);
      d.ready = false;
      d.free.clear();
      d.taken.clear();
      d.in_use = 0;
    }
  }
  for (auto& [ctx, base] : doomed) {
    (void)ctx->Free(base);
    ctx.reset();
  }
}

Status ShadowPool::Allocate(int device, std::unique_ptr<backend::Context>* out_ctx, backend::DevicePtr* out_base) {
  std::unique_ptr<backend::Context> ctx;
  PHOS_RETURN_IF_ERROR(backend_->CreateContext(device, &ctx));
  backend::DevicePtr base = 0;
  if (Status s = ctx->AllocateForDaemon(bytes_per_device_, &base); !s.ok()) {
    return s.WithContext("allocating " + std::to_string(bytes_per_device_ >> 20) + " MiB");
  }
  *out_ctx = std::move(ctx);
  *out_base = base;
  return Status::Ok();
}

Status ShadowPool::Write(backend::Context* ctx, backend::DevicePtr base) {
  // Every byte once, so every page exists before a checkpoint needs it (on
  // a GPU cheap and harmless; on the sim it is the whole point).
  backend::StreamHandle stream = 0;
  Status s = ctx->CreateStream(0, 0, &stream);
  for (std::uint64_t off = 0; s.ok() && off < bytes_per_device_; off += options_.fill_piece_bytes) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopping_) s = Status::Unavailable("phosd is stopping");
    }
    if (!s.ok()) break;
    const std::uint64_t n = std::min(options_.fill_piece_bytes, bytes_per_device_ - off);
    s = ctx->MemsetAsync(base + off, 0, 1, static_cast<std::size_t>(n), stream);
    if (s.ok()) s = ctx->SynchronizeStream(stream);
  }
  if (stream != 0) (void)ctx->DestroyStream(stream);
  return s.ok() ? s : s.WithContext("writing the reserve once");
}

void ShadowPool::FillLoop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    // The first device not ready whose backoff (after a failed allocation)
    // has passed; else sleep until the earliest retry (or for good when
    // all are ready).
    int device = -1;
    Clock::time_point wake_at = Clock::time_point::max();
    const Clock::time_point now = Clock::now();
    for (std::size_t i = 0; i < devices_.size(); ++i) {
      const Device& d = devices_[i];
      if (d.ready) continue;
      if (!d.ctx && d.backoff.Waiting(now)) {
        wake_at = std::min(wake_at, d.backoff.retry_at());
        continue;
      }
      device = static_cast<int>(i);
      break;
    }
    if (device < 0) {
      if (wake_at == Clock::time_point::max()) {
        cv_.wait(lock, [this] { return stopping_; });
      } else {
        cv_.wait_until(lock, wake_at);
      }
      continue;
    }
    Device& d = devices_[static_cast<std::size_t>(device)];
    // Until the device is ready only this thread (and Shutdown, after
    // joining it) touches d.ctx and d.base: taken out, used unlocked.
    std::unique_ptr<backend::Context> ctx = std::move(d.ctx);
    backend::DevicePtr base = d.base;
    lock.unlock();
    const auto start = Clock::now();
    Status s;
    if (!ctx) s = Allocate(device, &ctx, &base);
    if (s.ok()) {
      s = Write(ctx.get(), base);
      if (!s.ok()) {
        (void)ctx->Free(base);
        ctx.reset();
      }
    }
    const auto took = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start);
    lock.lock();
    if (stopping_) {
      lock.unlock();
      if (ctx) {
        (void)ctx->Free(base);
        ctx.reset();
      }
      lock.lock();
      break;
    }
    if (!s.ok()) {
      const int in_a_row = d.backoff.Fail(Clock::now(), options_.retry_initial, options_.retry_max);
      d.last_error = s.ToString();
      if (in_a_row == 1) {
        spdlog::warn("cow reserve: cannot reserve {} MiB on GPU {}: {} (retrying with backoff; copy-on-write "
                     "checkpoints allocate their shadows themselves meanwhile)",
                     bytes_per_device_ >> 20, device, d.last_error);
      } else {
        spdlog::debug("cow reserve: GPU {} failed again ({} in a row, next try in {} ms): {}", device,
                      in_a_row, d.backoff.delay().count(), d.last_error);
      }
      continue;
    }
    d.ctx = std::move(ctx);
    d.base = base;
    d.free = {{0, bytes_per_device_}};
    d.ready = true;
    d.fill_us = static_cast<std::uint64_t>(took.count());
    spdlog::info("cow reserve: {} MiB on GPU {} ready in {} ms", bytes_per_device_ >> 20, device,
                 d.fill_us / 1000);
    cv_.notify_all();
  }
}

Status ShadowPool::Take(int device, std::uint64_t bytes, backend::DevicePtr* out) {
  const std::uint64_t want = RoundUp(std::max<std::uint64_t>(bytes, 1), kAlignment);
  std::lock_guard<std::mutex> lock(mutex_);
  if (device < 0 || static_cast<std::size_t>(device) >= devices_.size() || bytes_per_device_ == 0) {
    return Status::Unavailable("no copy-on-write reserve on GPU " + std::to_string(device));
  }
  Device& d = devices_[static_cast<std::size_t>(device)];
  if (!d.ready) {
    if (stopping_) return Status::Unavailable("the copy-on-write reserve is shut down");
    if (d.backoff.failures() > 0) {
      return Status::Unavailable("the copy-on-write reserve of GPU " + std::to_string(device) +
                                 " could not be filled: " + d.last_error);
    }
    return Status::Unavailable("the copy-on-write reserve of GPU " + std::to_string(device) +
                               " is still being filled");
  }
  for (auto it = d.free.begin(); it != d.free.end(); ++it) {
    if (it->second < want) continue;
    const std::uint64_t offset = it->first;
    const std::uint64_t left = it->second - want;
    d.free.erase(it);
    if (left > 0) d.free.emplace(offset + want, left);
    *out = d.base + offset;
    d.taken.emplace(*out, want);
    d.in_use += want;
    return Status::Ok();
  }
  return Status::OutOfMemory("the copy-on-write reserve of GPU " + std::to_string(device) + " has no free " +
                             std::to_string(want) + " bytes now (" + std::to_string(d.in_use) + " of " +
                             std::to_string(bytes_per_device_) + " taken)");
}

void ShadowPool::GiveBack(int device, backend::DevicePtr ptr) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (device < 0 || static_cast<std::size_t>(device) >= devices_.size()) return;
  Device& d = devices_[static_cast<std::size_t>(device)];
  auto t = d.taken.find(ptr);
  if (t == d.taken.end()) {
    spdlog::error("cow reserve: {} given back to GPU {} was never taken from it (ignored)", Hex(ptr), device);
    return;
  }
  std::uint64_t offset = ptr - d.base;
  std::uint64_t bytes = t->second;
  d.taken.erase(t);
  d.in_use -= bytes;
  // Coalesce with the free neighbours on both sides.
  auto next = d.free.lower_bound(offset);
  if (next != d.free.end() && next->first == offset + bytes) {
    bytes += next->second;
    next = d.free.erase(next);
  }
  if (next != d.free.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      prev->second += bytes;
      return;
    }
  }
  d.free.emplace(offset, bytes);
}

bool ShadowPool::AllReadyLocked() const {
  for (const Device& d : devices_) {
    if (!d.ready) return false;
  }
  return true;
}

bool ShadowPool::WaitUntilReady(std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mutex_);
  if (bytes_per_device_ == 0) return false;
  return cv_.wait_for(lock, timeout, [this] { return stopping_ || AllReadyLocked(); }) && !stopping_;
}

std::vector<ShadowPoolDeviceStats> ShadowPool::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<ShadowPoolDeviceStats> out;
  for (const Device& d : devices_) {
    ShadowPoolDeviceStats s;
    s.ready = d.ready;
    s.bytes = d.ready ? bytes_per_device_ : 0;
    s.in_use = d.in_use;
    for (const auto& [offset, bytes] : d.free) s.largest_free = std::max(s.largest_free, bytes);
    s.fill_failures = static_cast<std::uint64_t>(d.backoff.failures());
    s.fill_us = d.fill_us;
    s.last_error = d.last_error;
    out.push_back(std::move(s));
  }
  return out;
}

void ShadowPool::ExportCounters(std::map<std::string, std::uint64_t>* out) const {
  std::uint64_t ready = 0, in_use = 0, failures = 0, fill_max = 0;
  for (const ShadowPoolDeviceStats& s : stats()) {
    ready += s.ready ? 1 : 0;
    in_use += s.in_use;
    failures += s.fill_failures;
    fill_max = std::max(fill_max, s.fill_us);
  }
  (*out)["cow_reserve.bytes_per_device"] = bytes_per_device_;
  (*out)["cow_reserve.ready_devices"] = ready;
  (*out)["cow_reserve.in_use"] = in_use;
  (*out)["cow_reserve.fill_failures"] = failures;
  (*out)["cow_reserve.fill_us_max"] = fill_max;
}

}  // namespace phos::engine
