#include "protocol/texture_desc.h"

#include <algorithm>
#include <cmath>

namespace phos::wire {

namespace {

// Span of `count` steps of `step` bytes plus `last` bytes; false on overflow.
bool AddSpan(uint64_t step, uint64_t count, uint64_t last, uint64_t* out) {
  if (count == 0) {
    *out = last;
    return true;
  }
  if (step != 0 && count > (UINT64_MAX - last) / step) return false;
  *out = step * count + last;
  return true;
}

}  // namespace

MipLevel MipLevelOf(const TextureDesc& d, uint32_t level) {
  MipLevel m;
  uint64_t offset = 0;
  const bool layered = (d.flags & kTextureLayered) != 0;
  for (uint32_t k = 0; k <= level; ++k) {
    m.width = std::max<uint32_t>(1, d.width >> k);
    m.height = d.dims >= 2 ? std::max<uint32_t>(1, d.height >> k) : 1;
    m.depth = d.dims == 3 ? std::max<uint32_t>(1, d.depth >> k) : 1;
    const uint64_t slices = layered ? d.layers : m.depth;
    const uint64_t row = uint64_t{m.width} * d.texel_bytes();
    m.pitch = (m.height > 1 || slices > 1) ? (row + kArrayPitchAlign - 1) / kArrayPitchAlign * kArrayPitchAlign : row;
    m.slice_pitch = m.pitch * m.height;
    m.bytes = m.slice_pitch * slices;
    m.offset = offset;
    offset = (offset + m.bytes + 511) / 512 * 512;
  }
  return m;
}

bool CheckTextureDesc(const TextureDesc& d, bool surface, uint64_t* span, std::string* why) {
  auto fail = [&](std::string m) {
    *why = std::move(m);
    return false;
  };
  if (d.base == 0) return fail("no memory (base address 0)");
  if ((d.flags & ~kTextureKnownFlags) != 0) return fail("unknown flags " + std::to_string(d.flags));
  if (d.dims < 1 || d.dims > 3) return fail("dimensions " + std::to_string(d.dims) + " (1, 2 or 3)");
  if (d.channels != 1 && d.channels != 2 && d.channels != 4) {
    return fail(std::to_string(d.channels) + " channels (1, 2 or 4)");
  }
  if (d.channel_bytes != 1 && d.channel_bytes != 2 && d.channel_bytes != 4) {
    return fail(std::to_string(d.channel_bytes * 8) + "-bit channels (8, 16 or 32)");
  }
  if (static_cast<uint8_t>(d.kind) > 2) return fail("unknown channel kind");
  if (d.kind == ChannelKind::kFloat && d.channel_bytes == 1) return fail("8-bit float channels");
  if (static_cast<uint8_t>(d.resource) > 2) return fail("unknown resource kind");
  for (AddressMode m : d.address) {
    if (static_cast<uint8_t>(m) > 3) return fail("unknown address mode");
  }
  for (float b : d.border) {
    if (!std::isfinite(b)) return fail("border colour is not finite");
  }
  if (d.width == 0 || d.height == 0 || d.depth == 0) return fail("an extent of 0");
  if (d.dims == 1 && (d.height != 1 || d.depth != 1)) return fail("a 1D resource with height or depth");
  if (d.dims == 2 && d.depth != 1) return fail("a 2D resource with depth");
  const bool layered = (d.flags & kTextureLayered) != 0;
  if (layered != (d.layers != 0)) return fail("layers without the layered flag, or the reverse");
  if (layered && d.dims == 3) return fail("a layered 3D resource");
  if ((d.flags & kTextureCubemap) != 0) {
    if (!layered || d.dims != 2 || d.width != d.height || d.layers % 6 != 0) {
      return fail("a cube map that is not layered square 2D faces, 6 per cube");
    }
    if (!surface && (d.flags & kTextureLinearFilter) != 0) {
      // The hardware filters across the edges of adjacent faces (seamless);
      // the interpreter models point sampling of one face only.
      return fail("linear filtering of a cube map (seamless across faces) is not modelled");
    }
  }
  const uint64_t row = uint64_t{d.width} * d.texel_bytes();
  if (d.pitch < row && (d.height > 1 || d.depth > 1 || layered)) return fail("a row pitch smaller than a row");
  const uint64_t slices = layered ? d.layers : d.depth;
  uint64_t slice_span = 0;
  if (!AddSpan(d.pitch, d.height - 1, row, &slice_span)) return fail("extents overflow");
  if (slices > 1 && d.slice_pitch < slice_span) return fail("a slice pitch smaller than a slice");
  if (!AddSpan(d.slice_pitch, slices - 1, slice_span, span)) return fail("extents overflow");
  if (d.levels > 1) {
    // A mip chain: within the limits, level 0 in the one layout, the span
    // covering the last level.
    if (surface || d.resource != ResourceKind::kArray) return fail("mip levels on a surface or on memory");
    if (d.levels > kMaxMipLevels || d.width > (1u << 15) || d.height > (1u << 15) || d.depth > (1u << 15)) {
      return fail("more mip levels or larger extents than a mipmapped array has");
    }
    if (d.min_level > d.max_level || d.max_level >= d.levels) return fail("mip level clamps outside the chain");
    const MipLevel l0 = MipLevelOf(d, 0);
    if (l0.pitch != d.pitch || l0.slice_pitch != d.slice_pitch) return fail("a mip chain not in the mip layout");
    const MipLevel last = MipLevelOf(d, d.levels - 1u);
    *span = last.offset + last.bytes;
    if ((d.flags & kTextureCubemap) != 0) return fail("mip levels of a cube map");
    if ((d.flags & kTextureNormalizedCoords) == 0) return fail("a mip chain sampled with unnormalized coordinates");
  } else if (d.levels <= 1 && (d.mip_linear != 0 || d.min_level != 0 || d.max_level != 0)) {
    return fail("mip filtering without mip levels");
  }
  if (d.base + *span < d.base) return fail("the texels wrap around the address space");
  if (surface) {
    if (d.resource != ResourceKind::kArray) return fail("a surface of memory that is not a CUDA array");
    if ((d.flags & (kTextureLinearFilter | kTextureReadNormalized | kTextureNormalizedCoords | kTextureSrgb)) != 0) {
      return fail("filtering, normalized coordinates or read modes on a surface");
    }
  } else {
    const bool int_channels = d.kind != ChannelKind::kFloat;
    if ((d.flags & kTextureReadNormalized) && (!int_channels || d.channel_bytes == 4)) {
      return fail("cudaReadModeNormalizedFloat on channels that are not 8- or 16-bit integers");
    }
    if ((d.flags & kTextureLinearFilter) && int_channels && !(d.flags & kTextureReadNormalized)) {
      return fail("linear filtering of integer texels read as integers");
    }
    if ((d.flags & kTextureSrgb) && !(int_channels && d.channel_bytes == 1 && (d.flags & kTextureReadNormalized))) {
      return fail("sRGB on texels that are not 8-bit normalized integers");
    }
  }
  return true;
}

}  // namespace phos::wire
