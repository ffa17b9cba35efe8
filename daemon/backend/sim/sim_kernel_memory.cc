#include "backend/sim/sim_kernel_memory.h"

#include <mutex>

namespace phos::backend::sim {

bool SimKernelMemory::CachedLocked(std::uint64_t addr, std::size_t bytes) const {
  for (const auto& [begin, end] : pinned_) {
    if (addr >= begin && addr < end && bytes <= end - addr) return true;
  }
  return false;
}

void* SimKernelMemory::Translate(std::uint64_t addr, std::size_t bytes, bool /*write*/) {
  {
    std::shared_lock<std::shared_mutex> lock(mu_);
    if (CachedLocked(addr, bytes)) return reinterpret_cast<void*>(addr);
  }
  // Mapped host memory, before the exclusive path: a kernel reading it
  // must not serialise every access on mu_ and fail a pin each time. The
  // aliases never overlap the device address range (MapHostMemoryForKernels
  // refuses that), so the order decides nothing.
  if (host_aliases_ != nullptr) {
    if (void* host = host_aliases_->Translate(addr, bytes)) return host;
  }
  std::unique_lock<std::shared_mutex> lock(mu_);
  if (CachedLocked(addr, bytes)) return reinterpret_cast<void*>(addr);
  DevicePtr start = 0;
  std::uint64_t size = 0;
  if (!space_->PinOwnedRange(addr, bytes, owner_, &pin_, &start, &size).ok()) return nullptr;  // illegal address
  pinned_.emplace_back(start, start + size);
  return reinterpret_cast<void*>(addr);
}

}  // namespace phos::backend::sim
