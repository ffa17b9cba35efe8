#include "common/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace phos {

Status InitLogging(const std::string& level) {
  spdlog::level::level_enum lvl = spdlog::level::from_str(level);
  // from_str maps unknown names to "off"; only accept "off" when asked.
  if (lvl == spdlog::level::off && level != "off") {
    return Status::InvalidArgument("unknown log level '" + level +
                                   "' (trace, debug, info, warn, error, critical, off)");
  }
  auto logger = spdlog::stderr_color_mt("phos");
  spdlog::set_default_logger(logger);
  spdlog::set_level(lvl);
  // time, level, thread id, message. Structured fields go into the message
  // as key=value pairs so logs stay grep-able.
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ [%t] %v");
  return Status::Ok();
}

}  // namespace phos
