#include "server/daemon_options.h"

#include <cstdlib>
#include <filesystem>

namespace phos::server {

std::string ResolveCheckpointRoot(const DaemonOptions& options) {
  if (!options.checkpoint_root.empty()) return options.checkpoint_root;
  if (const char* env = std::getenv("PHOS_STATE_DIR"); env != nullptr && *env != '\0') {
    return std::string(env) + "/checkpoints";
  }
  std::string state = std::filesystem::path(options.socket_path).parent_path().string();
  return (state.empty() ? std::string(".") : state) + "/checkpoints";
}

std::uint64_t CowReserveFor(std::uint64_t asked, const std::string& backend_name) {
  if (asked != kCowReserveAuto) return asked;
  // The sim's device memory is this host's RAM, and the reserve is written
  // once at start (engine/shadow_pool.h): 2 GiB per phosd would cost every
  // sim phosd (tests start dozens) 2 GiB of RAM and a second of CPU.
  return backend_name == "sim" ? 256ull << 20 : 2ull << 30;
}

std::string DefaultSignatureCacheDir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && xdg[0] == '/')
    return std::string(xdg) + "/phos/signatures";
  if (const char* home = std::getenv("HOME"); home != nullptr && home[0] == '/')
    return std::string(home) + "/.cache/phos/signatures";
  return "";
}

}  // namespace phos::server
