#include "backend/sim/sim_textures.h"

#include <algorithm>

#include "protocol/texture_desc.h"

namespace phos::backend::sim {

std::shared_ptr<const SimTextureTable> SimTextureTable::With(std::uint64_t handle,
                                                             const interp::TextureDesc& desc) const {
  auto copy = std::make_shared<SimTextureTable>(*this);
  copy->objects_[handle] = desc;
  return copy;
}

std::shared_ptr<const SimTextureTable> SimTextureTable::Without(std::uint64_t handle) const {
  auto copy = std::make_shared<SimTextureTable>(*this);
  copy->objects_.erase(handle);
  return copy;
}

interp::TextureDesc ToInterpTexture(const wire::TextureDesc& d, bool surface) {
  interp::TextureDesc t;
  t.surface = surface;
  t.base = d.base;
  t.pitch = d.pitch;
  t.slice_pitch = d.slice_pitch;
  t.width = d.width;
  t.height = d.height;
  t.depth = d.depth;
  t.layers = d.layers;
  t.dims = d.dims;
  t.channels = d.channels;
  t.channel_bytes = d.channel_bytes;
  t.kind = static_cast<interp::TextureDesc::Kind>(d.kind);
  t.linear_memory = d.resource == wire::ResourceKind::kLinear;
  for (int i = 0; i < 3; ++i) t.address[i] = static_cast<interp::TextureDesc::Address>(d.address[i]);
  t.linear_filter = (d.flags & wire::kTextureLinearFilter) != 0;
  t.normalized_coords = (d.flags & wire::kTextureNormalizedCoords) != 0;
  t.read_normalized = (d.flags & wire::kTextureReadNormalized) != 0;
  t.cubemap = (d.flags & wire::kTextureCubemap) != 0;
  t.srgb = (d.flags & wire::kTextureSrgb) != 0;
  for (int i = 0; i < 4; ++i) t.border[i] = d.border[i];
  if (d.mip_levels() > 1) {
    // The chain's levels where wire::MipLevelOf lays them out (the session
    // checked the span covers them).
    t.mip_count = static_cast<uint8_t>(std::min<uint32_t>(d.mip_levels(), wire::kMaxMipLevels));
    for (uint32_t k = 0; k < t.mip_count; ++k) {
      const wire::MipLevel m = wire::MipLevelOf(d, k);
      t.mips[k] = {d.base + m.offset, m.pitch, m.slice_pitch, m.width, m.height, m.depth};
    }
    t.mip_linear = d.mip_linear != 0;
    t.min_level = d.min_level;
    t.max_level = d.max_level;
  }
  return t;
}

}  // namespace phos::backend::sim
