#include "server/daemon_options.h"

#include <cstdlib>

namespace phos::server {

std::string DefaultSocketPath() {
  const char* env = std::getenv("PHOS_SOCKET");
  if (env != nullptr && env[0] != '\0') return env;
  return kDefaultSocketPath;
}

}  // namespace phos::server
