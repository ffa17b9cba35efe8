// Bounds-checked little-endian reads from a byte span (internal to phos_fatbin).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>

#include "common/status.h"

namespace phos::fatbin::internal {

inline std::string Hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

// "<what>: at offset 0x1a0: <message>"
inline Status CorruptAt(std::string_view what, uint64_t offset, const std::string& message) {
  std::string m(what);
  m += ": at offset ";
  m += Hex(offset);
  m += ": ";
  m += message;
  return Status::Corruption(std::move(m));
}

// Little-endian loads; the caller has checked the bounds.
inline uint16_t Load16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
inline uint32_t Load32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}
inline uint64_t Load64(const uint8_t* p) {
  return static_cast<uint64_t>(Load32(p)) | (static_cast<uint64_t>(Load32(p + 4)) << 32);
}

// True when [offset, offset + size) lies inside a buffer of `total` bytes,
// without overflow.
inline bool InBounds(uint64_t offset, uint64_t size, uint64_t total) {
  return offset <= total && size <= total - offset;
}

// Checks that `size` bytes at `offset` are inside `data`; else a Corruption
// "expected <what> of N bytes, M left".
inline Status Need(std::string_view who, std::span<const uint8_t> data, uint64_t offset, uint64_t size,
                   std::string_view what) {
  if (InBounds(offset, size, data.size())) return Status::Ok();
  const uint64_t left = offset <= data.size() ? data.size() - offset : 0;
  return CorruptAt(who, offset,
                   "expected " + std::string(what) + " of " + std::to_string(size) + " bytes, " +
                       std::to_string(left) + " left");
}

}  // namespace phos::fatbin::internal
