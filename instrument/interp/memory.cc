#include "interp/memory.h"

#include <mutex>

namespace phos::interp {

void RangeGlobalMemory::AddRange(uint64_t base, size_t bytes) {
  std::unique_lock lock(mu_);
  ranges_[base] = bytes;
}

void RangeGlobalMemory::RemoveRange(uint64_t base) {
  std::unique_lock lock(mu_);
  ranges_.erase(base);
}

void* RangeGlobalMemory::Translate(uint64_t addr, size_t bytes, bool write) {
  StableRange unused;
  return TranslateStable(addr, bytes, write, &unused);
}

void* RangeGlobalMemory::TranslateStable(uint64_t addr, size_t bytes, bool /*write*/, StableRange* range) {
  *range = {};
  std::shared_lock lock(mu_);
  auto it = ranges_.upper_bound(addr);
  if (it == ranges_.begin()) return nullptr;
  --it;
  const uint64_t off = addr - it->first;
  if (off > it->second || bytes > it->second - off) return nullptr;
  *range = {it->first, it->first + it->second, reinterpret_cast<uint8_t*>(it->first)};
  return reinterpret_cast<void*>(addr);
}

}  // namespace phos::interp
