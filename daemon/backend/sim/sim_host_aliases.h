// Mapped (zero-copy) host memory as the sim's kernels see it: device
// address ranges (the app's own addresses of its pinned pages) that stand
// for phosd's mapping of the same pages (Context::MapHostMemoryForKernels,
// docs/interposer.md "Mapped pinned memory").
//
// One per SimContext, shared with the kernel launches queued on its streams
// (a launch keeps it alive). Lock: mu_ — shared for Translate (every
// interpreter worker thread of a launch), exclusive for Add/Remove.
// Ranges are removed only after the context synchronised (the session
// unregisters host segments in ReleaseAll), so no kernel is using one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <shared_mutex>

#include "common/status.h"

namespace phos::backend::sim {

class SimHostAliases {
 public:
  /// Kernels reaching [device_address, + bytes) reach host[0, bytes).
  /// AlreadyExists when the range overlaps an alias already there.
  Status Add(std::uint64_t device_address, void* host, std::size_t bytes);
  /// InvalidArgument when no alias starts at `device_address`.
  Status Remove(std::uint64_t device_address);
  /// phosd's pointer for [addr, addr + bytes), or nullptr when the range is
  /// not wholly inside one alias.
  void* Translate(std::uint64_t addr, std::size_t bytes) const;
  bool empty() const;

 private:
  struct Alias {
    std::size_t bytes;
    char* host;
  };
  mutable std::shared_mutex mu_;
  std::map<std::uint64_t, Alias> aliases_;  // by device address; guarded by mu_
};

}  // namespace phos::backend::sim
