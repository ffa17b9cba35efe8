// State of one sim backend shared by the backend and all its contexts (a
// context may outlive the Backend object that created it).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/backend_factory.h"
#include "backend/sim/sim_address_space.h"
#include "backend/sim/sim_collectives.h"
#include "backend/sim/sim_copy_engines.h"

namespace phos::backend::sim {

struct SimShared {
  explicit SimShared(const SimOptions& o) : options(o), comms(o.fabric) {}
  // Set once at creation, read-only afterwards.
  SimOptions options;
  std::vector<DeviceProperties> devices;  // ModelDeviceProperties of each ordinal
  // Thread-safe objects (each has its own lock).
  std::unique_ptr<SimAddressSpace> memory;               // all devices share one VA range
  std::vector<std::unique_ptr<SimCopyEngines>> engines;  // one pool per device
  SimCommRegistry comms;                                 // NCCL communicators forming or spanning phosds
  // Ids tag every handle a context mints, so a handle used with another
  // context is recognised as foreign.
  std::atomic<std::uint64_t> next_context_id{1};
};

}  // namespace phos::backend::sim
