// Where phosd's control socket is unless a flag says otherwise: one
// definition for the daemon (its --socket default) and every client (the
// CLI's --socket default; the Python SDK has its own copy of the rule).
#pragma once

#include <string>

namespace phos {

/// The default control socket; $PHOS_SOCKET overrides it, --socket too.
inline constexpr const char* kDefaultSocketPath = "/run/phos/phosd.sock";

/// $PHOS_SOCKET if set and non-empty, else kDefaultSocketPath.
std::string DefaultSocketPath();

}  // namespace phos
