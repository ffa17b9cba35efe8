#include "backend/sim/sim_kernel_memory.h"

#include <mutex>

namespace phos::backend::sim {

const std::pair<std::uint64_t, std::uint64_t>* SimKernelMemory::CachedLocked(std::uint64_t addr,
                                                                              std::size_t bytes) const {
  for (const auto& range : pinned_) {
    const auto& [begin, end] = range;
    if (addr >= begin && addr < end && bytes <= end - addr) return &range;
  }
  return nullptr;
}

void* SimKernelMemory::Translate(std::uint64_t addr, std::size_t bytes, bool write) {
  interp::StableRange unused;
  return TranslateStable(addr, bytes, write, &unused);
}

void* SimKernelMemory::TranslateStable(std::uint64_t addr, std::size_t bytes, bool /*write*/,
                                       interp::StableRange* range) {
  *range = {};
  auto stable = [&](const std::pair<std::uint64_t, std::uint64_t>& pinned) {
    *range = {pinned.first, pinned.second, reinterpret_cast<std::uint8_t*>(pinned.first)};
    return reinterpret_cast<void*>(addr);
  };
  {
    std::shared_lock<std::shared_mutex> lock(mu_);
    if (const auto* pinned = CachedLocked(addr, bytes)) return stable(*pinned);
  }
  // Mapped host memory, before the exclusive path: a kernel reading it
  // must not serialise every access on mu_ and fail a pin each time. The
  // aliases never overlap the device address range (MapHostMemoryForKernels
  // refuses that), so the order decides nothing.
  if (host_aliases_ != nullptr) {
    if (void* host = host_aliases_->Translate(addr, bytes)) return host;
  }
  std::unique_lock<std::shared_mutex> lock(mu_);
  if (const auto* pinned = CachedLocked(addr, bytes)) return stable(*pinned);
  DevicePtr start = 0;
  std::uint64_t size = 0;
  if (!space_->PinOwnedRange(addr, bytes, owner_, &pin_, &start, &size).ok()) return nullptr;  // illegal address
  pinned_.emplace_back(start, start + size);
  return stable(pinned_.back());
}

}  // namespace phos::backend::sim
