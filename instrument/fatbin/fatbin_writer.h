// Fatbin writer: one container holding the given cubins and PTX texts,
// uncompressed, laid out as NVIDIA's `fatbinary` writes it (fatbin_format.h;
// the entry headers match `fatbinary -64 --compress=false` byte for byte,
// checked by tests/unit/instrument_fatbin).
//
// phos writes fatbins for one reason: to give a SASS-only cubin its PTX
// (a JIT-compiled kernel, docs/interposer.md "JIT-compiled kernels keep their
// PTX"), so that phosd's consumers — the sim, twin validation, kernel
// access analysis — find both where they already look for them.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "fatbin/fatbin_reader.h"

namespace phos::fatbin {

struct FatbinImage {
  EntryKind kind = EntryKind::kElf;
  uint32_t sm_arch = 0;  // 90 for sm_90 (cubin) / compute_90 (PTX)
  // A cubin's bytes, or PTX text (with or without a trailing NUL). PTX
  // entries take their ISA version from the text's `.version` directive.
  std::span<const uint8_t> bytes;
};

/// Writes one container with `images` in order. InvalidArgument for an
/// empty list, an empty image, a cubin that is not an ELF or PTX without a
/// `.version` directive.
Status WriteFatbin(std::span<const FatbinImage> images, std::vector<uint8_t>* out);

}  // namespace phos::fatbin
