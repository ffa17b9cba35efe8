// Texture and surface objects as the PTX interpreter reads them (tex, tld4,
// txq, suld, sust, suq: ops_texture.cc; docs/instrument.md §6).
//
// A kernel holds an object as an opaque 64-bit handle; the launch resolves
// it through a TextureTable the embedder provides (the sim backend:
// daemon/backend/sim/sim_textures.h). The texels are ordinary device memory
// reached through GlobalMemory, so every texel read and surface store is
// bounds-checked like a load or store.
#pragma once

#include <cstdint>

namespace phos::interp {

struct TextureDesc {
  enum class Kind : uint8_t { kUnsigned, kSigned, kFloat };
  enum class Address : uint8_t { kWrap, kClamp, kMirror, kBorder };
  bool surface = false;
  uint64_t base = 0;         // device address of texel (0, 0, 0) of layer 0
  uint64_t pitch = 0;        // bytes between rows
  uint64_t slice_pitch = 0;  // bytes between depth slices or layers
  uint32_t width = 1, height = 1, depth = 1;  // texels
  uint32_t layers = 0;       // 0: not layered
  uint8_t dims = 1;          // 1, 2, 3
  uint8_t channels = 1;      // 1, 2, 4
  uint8_t channel_bytes = 4; // 1, 2, 4 (2 with kFloat: half)
  Kind kind = Kind::kFloat;
  bool linear_memory = false;  // a linear resource (tex1Dfetch): out of range reads 0
  // Sampling (textures only).
  Address address[3] = {Address::kClamp, Address::kClamp, Address::kClamp};
  bool linear_filter = false;
  bool normalized_coords = false;
  bool read_normalized = false;  // integer texels read as floats in [0,1] / [-1,1]
  bool srgb = false;
  bool cubemap = false;  // layers are cube faces, 6 per cube (tex.cube / tex.acube)
  // A mip chain: levels after level 0 at offsets from `base`
  // (wire::MipLevelOf's layout, which the embedder resolved into
  // `mips`: one entry per level, level 0 first; empty: no chain).
  struct Mip {
    uint64_t base = 0, pitch = 0, slice_pitch = 0;
    uint32_t width = 1, height = 1, depth = 1;
  };
  Mip mips[16];
  uint8_t mip_count = 0;   // entries of `mips` in use (0 or 1: no chain)
  bool mip_linear = false;  // blend the two nearest levels
  uint8_t min_level = 0, max_level = 0;
  float border[4] = {0, 0, 0, 0};

  uint32_t texel_bytes() const { return uint32_t{channels} * channel_bytes; }
};

// Handle -> object, for the duration of a launch. Called from every worker
// thread of a launch at once: implementations must be thread-safe (the sim
// gives each launch an immutable snapshot).
class TextureTable {
 public:
  virtual ~TextureTable() = default;
  // The object `handle` names; nullptr when none (the access faults).
  virtual const TextureDesc* Find(uint64_t handle) const = 0;
};

}  // namespace phos::interp
