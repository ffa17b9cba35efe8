// Hexadecimal text for addresses and handles in error messages.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace phos {

/// 0x7c0000000000 -> "0x7c0000000000".
inline std::string Hex(std::uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace phos
