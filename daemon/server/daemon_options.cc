#include "server/daemon_options.h"

#include <cstdlib>

namespace phos::server {

std::string DefaultSignatureCacheDir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && xdg[0] == '/')
    return std::string(xdg) + "/phos/signatures";
  if (const char* home = std::getenv("HOME"); home != nullptr && home[0] == '/')
    return std::string(home) + "/.cache/phos/signatures";
  return "";
}

}  // namespace phos::server
