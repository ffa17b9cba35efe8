#include "nvrtc_options.h"

namespace phos::jit {
namespace {

// "sm_90" -> "compute_90"; other values unchanged, *real says which.
std::string Virtual(const std::string& arch, bool* real) {
  if (arch.rfind("sm_", 0) != 0 || arch.size() < 4) return arch;
  *real = true;
  return "compute_" + arch.substr(3);
}

}  // namespace

std::optional<std::vector<std::string>> OptionsForPtx(const std::vector<std::string>& options) {
  std::vector<std::string> out;
  bool real = false;
  for (size_t i = 0; i < options.size(); ++i) {
    const std::string& o = options[i];
    bool rewritten = false;
    for (const char* flag : {"-arch", "--gpu-architecture"}) {
      const std::string f = flag;
      if (o == f && i + 1 < options.size()) {
        out.push_back(o);
        out.push_back(Virtual(options[++i], &real));
        rewritten = true;
        break;
      }
      if (o.rfind(f + "=", 0) == 0) {
        out.push_back(f + "=" + Virtual(o.substr(f.size() + 1), &real));
        rewritten = true;
        break;
      }
    }
    if (!rewritten) out.push_back(o);
  }
  if (!real) return std::nullopt;
  return out;
}

}  // namespace phos::jit
