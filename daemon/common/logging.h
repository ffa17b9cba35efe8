// Logging setup for phos binaries (spdlog). Libraries just call spdlog::info
// etc. on the default logger; binaries call InitLogging once at start.
#pragma once

#include <string>

#include "common/status.h"

namespace phos {

/// Sets the default logger's level ("trace", "debug", "info", "warn",
/// "error", "critical", "off") and a pattern with time, level, thread and
/// source. Logs go to stderr.
Status InitLogging(const std::string& level);

}  // namespace phos
