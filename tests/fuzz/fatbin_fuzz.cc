// libFuzzer target: fatbin containers (and, through them, zstd/LZ4
// decompression and cubin .nv.info parsing). Seeds: corpus/fatbin.
// Run longer by hand: see docs/instrument.md.
#include <cstddef>
#include <cstdint>
#include <span>

#include "fatbin/fatbin_reader.h"
#include "fatbin/nv_info.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace phos::fatbin;
  ParseOptions options;
  options.max_uncompressed_size = 16u << 20;  // keep RSS bounded under the fuzzer
  Fatbin fb;
  phos::Status s = ParseFatbin(std::span<const uint8_t>(data, size), &fb, options);
  if (!s.ok()) {
    if (s.message().empty()) __builtin_trap();
    return 0;
  }
  for (const FatbinEntry& e : fb.entries) {
    // Views must lie inside the input.
    if (!e.stored.empty() && (e.stored.data() < data || e.stored.data() + e.stored.size() > data + size))
      __builtin_trap();
    if (e.is_elf()) {
      CubinInfo info;
      (void)ReadCubinInfo(e.contents, &info);
    }
  }
  (void)Describe(fb);
  return 0;
}
