// Device memory as one running kernel sees it (interp::GlobalMemory).
//
// The first access to an allocation pins it (SimAddressSpace::PinRange), so
// a racing Free cannot unmap it under the kernel; later accesses to the same
// allocation are checked against the cached bounds under a shared lock.
// One object per launch; pins are released when it is destroyed. Only the
// launching context's allocations can be pinned: another session's memory
// is an illegal address for this kernel. Mapped host memory
// (SimHostAliases) is reached through the context's aliases, looked up
// after the cached allocations and before pinning a new one.
#pragma once

#include <cstdint>
#include <shared_mutex>
#include <utility>
#include <vector>

#include "backend/sim/sim_address_space.h"
#include "backend/sim/sim_host_aliases.h"
#include "interp/memory.h"

namespace phos::backend::sim {

class SimKernelMemory final : public interp::GlobalMemory {
 public:
  /// `owner`: the launching context; the kernel may touch only its
  /// allocations (SimAddressSpace::PinOwnedRange).
  /// `host_aliases` (may be null): the context's mapped host memory; the
  /// caller keeps it alive for the launch.
  SimKernelMemory(SimAddressSpace* space, std::uint64_t owner, const SimHostAliases* host_aliases = nullptr)
      : space_(space), owner_(owner), host_aliases_(host_aliases) {}
  /// Called by every interpreter worker thread at once.
  void* Translate(std::uint64_t addr, std::size_t bytes, bool write) override;
  /// A pinned allocation stays for the launch: it is the stable range
  /// (mapped host memory is not: its aliases may go).
  void* TranslateStable(std::uint64_t addr, std::size_t bytes, bool write, interp::StableRange* range) override;

 private:
  // The pinned allocation holding [addr, addr + bytes), or null.
  const std::pair<std::uint64_t, std::uint64_t>* CachedLocked(std::uint64_t addr, std::size_t bytes) const;

  SimAddressSpace* const space_;
  const std::uint64_t owner_;
  const SimHostAliases* const host_aliases_;
  std::shared_mutex mu_;  // shared: lookups; exclusive: pinning a new allocation
  std::vector<std::pair<std::uint64_t, std::uint64_t>> pinned_;  // [begin, end); guarded by mu_
  SimAddressSpace::Pin pin_;                                     // guarded by mu_
};

}  // namespace phos::backend::sim
