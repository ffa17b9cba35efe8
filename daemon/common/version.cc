#include "common/version.h"

namespace phos {

std::string VersionString() {
  return std::string(PHOS_VERSION_STRING) + " (git " + PHOS_GIT_REV + ")";
}

}  // namespace phos
