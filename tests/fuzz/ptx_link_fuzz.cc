// libFuzzer target for the PTX linker (ptx/ptx_link.h), which the nvJitLink
// shim runs on an app's PTX inputs: the input is split at its first NUL
// into two texts (no NUL: the text twice) and linked; a link that succeeds
// must emit text that parses again. Also links the whole input alone.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "ptx/ptx_link.h"
#include "ptx/ptx_parser.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  const size_t nul = all.find('\0');
  std::vector<std::string> texts;
  if (nul == std::string_view::npos) {
    texts = {std::string(all), std::string(all)};
  } else {
    texts = {std::string(all.substr(0, nul)), std::string(all.substr(nul + 1))};
  }
  for (const std::vector<std::string>& inputs : {texts, std::vector<std::string>{texts[0]}}) {
    std::string linked;
    if (!phos::ptx::LinkPtxTexts(inputs, &linked).ok()) continue;
    phos::ptx::Module m;
    if (!phos::ptx::ParseModule(linked, &m).ok()) std::abort();  // the linker emitted unparseable text
  }
  return 0;
}
