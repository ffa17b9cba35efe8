// Everything `phos daemon` / phosd can be told on its command line.
#pragma once

#include <cstdint>
#include <string>

#include "backend/backend_factory.h"

namespace phos::server {

/// The default control socket; $PHOS_SOCKET overrides it, --socket too.
inline constexpr const char* kDefaultSocketPath = "/run/phos/phosd.sock";

/// $PHOS_SOCKET if set and non-empty, else kDefaultSocketPath.
std::string DefaultSocketPath();

struct DaemonOptions {
  std::string socket_path = DefaultSocketPath();
  std::string log_level = "info";
  backend::BackendOptions backend;
  /// Contexts pre-created per GPU by the context pool (DESIGN §6); 0
  /// disables it (every session creates its context on demand).
  int pool_size = 2;
  /// Bounded on-device reserve for soft copy-on-write shadows.
  std::uint64_t cow_reserve_bytes = 2ull << 30;
};

}  // namespace phos::server
