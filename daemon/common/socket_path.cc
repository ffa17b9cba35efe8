#include "common/socket_path.h"

#include <cstdlib>

namespace phos {

std::string DefaultSocketPath() {
  const char* env = std::getenv("PHOS_SOCKET");
  if (env != nullptr && env[0] != '\0') return env;
  return kDefaultSocketPath;
}

}  // namespace phos
