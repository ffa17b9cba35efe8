// libFuzzer target for the PTX parser: any input must either parse (and then
// re-emit to text that parses to the same emission) or fail with a Status.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "ptx/ptx_emitter.h"
#include "ptx/ptx_parser.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  phos::ptx::Module m;
  if (!phos::ptx::ParseModule(text, &m).ok()) return 0;
  std::string e1 = phos::ptx::EmitModule(m);
  phos::ptx::Module m2;
  if (!phos::ptx::ParseModule(e1, &m2).ok()) std::abort();  // emitter produced unparseable text
  if (phos::ptx::EmitModule(m2) != e1) std::abort();         // round trip not idempotent
  phos::ptx::Instruction in;
  (void)phos::ptx::ParseInstruction(text.substr(0, 256), &in);
  return 0;
}
