// Pitched (2D) regions as the wire carries them (wire.h, Memcpy2DRequest /
// Memset2DRequest): `height` rows of `width` bytes, `pitch` bytes apart,
// packed row after row when staged. Shared by libphos.so (which packs) and
// phosd (which checks and scatters), so both sides agree byte for byte.
#pragma once

#include <algorithm>
#include <cstdint>

namespace phos::wire {

/// Bytes a pitched region spans: pitch*(height-1) + width (0 when height
/// is 0); false on overflow.
inline bool Span2D(uint64_t pitch, uint64_t width, uint64_t height, uint64_t* span) {
  if (height == 0) {
    *span = 0;
    return true;
  }
  if (pitch != 0 && height - 1 > (UINT64_MAX - width) / pitch) return false;
  *span = pitch * (height - 1) + width;
  return true;
}

/// Calls fn(row, column, length, packed_offset) for each row piece of the
/// packed range [off, off + n) of a width-wide region (width > 0).
template <typename Fn>
void ForEachRowPiece(uint64_t off, uint64_t n, uint64_t width, Fn&& fn) {
  const uint64_t end = off + n;
  while (off < end) {
    const uint64_t row = off / width, col = off % width;
    const uint64_t len = std::min(width - col, end - off);
    fn(row, col, len, off);
    off += len;
  }
}

}  // namespace phos::wire
