// Texture and surface objects as the wire carries them (kCreateTextureObject,
// kCreateSurfaceObject; docs/interposer.md "CUDA arrays, textures and
// surfaces"): ONE fixed-layout description, shared by libphos.so (which
// resolves the app's cudaResourceDesc/cudaTextureDesc or CUDA_RESOURCE_DESC/
// CUDA_TEXTURE_DESC into it), phosd's session (which checks it against the
// session's buffers), the backends (which create the object from it) and
// the image (which records it for a restore into a fresh session).
//
// A CUDA array is, in phos, an ordinary device buffer of the session laid
// out row after row, slice after slice (libphos.so's arrays.h): so a
// checkpoint, a restore and a migration carry its bytes with no new code.
// The descriptor therefore names memory, not an array: `base` and the
// pitches say where each texel lives, whatever resource the app named.
#pragma once

#include <cstdint>
#include <string>

namespace phos::wire {

/// What the texels' channels hold (cudaChannelFormatKind / CUarray_format).
enum class ChannelKind : uint8_t { kUnsigned = 0, kSigned = 1, kFloat = 2 };
/// What the app's resource was (informative: the layout fields say where
/// texels are): a CUDA array, linear memory (tex1Dfetch), pitched 2D memory.
enum class ResourceKind : uint8_t { kArray = 0, kLinear = 1, kPitch2D = 2 };
/// cudaTextureAddressMode / CUaddress_mode values.
enum class AddressMode : uint8_t { kWrap = 0, kClamp = 1, kMirror = 2, kBorder = 3 };

inline constexpr uint32_t kTextureLayered = 1;          // array layers (a1d/a2d)
inline constexpr uint32_t kTextureLinearFilter = 2;     // cudaFilterModeLinear
inline constexpr uint32_t kTextureNormalizedCoords = 4; // coordinates in [0, 1)
inline constexpr uint32_t kTextureReadNormalized = 8;   // cudaReadModeNormalizedFloat
inline constexpr uint32_t kTextureSrgb = 16;            // sRGB -> linear on read
/// A cube map (cudaArrayCubemap): a layered 2D resource of square faces, 6
/// layers per cube (+x, -x, +y, -y, +z, -z), sampled by direction (tex.cube).
inline constexpr uint32_t kTextureCubemap = 32;
inline constexpr uint32_t kTextureKnownFlags = 63;

struct TextureDesc {
  uint64_t base;         // device address of texel (0, 0, 0) of layer 0
  uint64_t pitch;        // bytes from one row to the next
  uint64_t slice_pitch;  // bytes from one depth slice (or layer) to the next
  uint32_t width;        // texels per row (>= 1)
  uint32_t height;       // rows (1 for 1D)
  uint32_t depth;        // slices (1 for 1D and 2D)
  uint32_t layers;       // layers of a layered resource (0: not layered)
  uint32_t flags;        // kTexture* above
  uint8_t dims;          // 1, 2 or 3
  uint8_t channels;      // 1, 2 or 4
  uint8_t channel_bytes; // 1, 2 or 4 (2 with kFloat: half)
  ChannelKind kind;
  ResourceKind resource;
  AddressMode address[3];  // textures only
  float border[4];         // kBorder's colour (textures only)
  // A mip chain (a texture of a mipmapped array): its levels, laid out one
  // after another from `base` (MipLevelOf); 0 or 1: none. The rest sample
  // it (textures only): linear blending between levels, and the levels a
  // fetch's level of detail is clamped to.
  uint8_t levels;
  uint8_t mip_linear;  // cudaFilterModeLinear as the mipmap filter mode
  uint8_t min_level, max_level;

  uint32_t texel_bytes() const { return uint32_t{channels} * channel_bytes; }
  uint32_t mip_levels() const { return levels < 2 ? 1u : levels; }
};
static_assert(sizeof(TextureDesc) == 72);

/// The most levels a mip chain has (CUDA's: 1 + log2 of a 32768 extent).
inline constexpr uint32_t kMaxMipLevels = 16;
/// Rows of a CUDA array are this many bytes apart at least when it has
/// more than one row (libphos.so's arrays; the mip levels' layout).
inline constexpr uint64_t kArrayPitchAlign = 128;
/// Where level `k` of a mip chain lives: its offset from level 0's first
/// texel, pitches and extents. Level k's extents are level 0's halved k
/// times (at least 1; layers stay); each level is laid out as an array of
/// its own (rows kArrayPitchAlign apart when there is more than one row or
/// slice) and starts 512-byte aligned. ONE layout for libphos.so (which
/// allocates the chain and hands out level arrays), phosd (the span it
/// checks) and the interpreter (which samples it). Level 0 of `d` must
/// already have this layout (CheckTextureDesc checks).
struct MipLevel {
  uint64_t offset = 0, pitch = 0, slice_pitch = 0, bytes = 0;
  uint32_t width = 1, height = 1, depth = 1;
};
MipLevel MipLevelOf(const TextureDesc& d, uint32_t level);

/// Request of kCreateTextureObject / kCreateSurfaceObject. The reply is a
/// ValueReply with the handle the kernels receive.
struct TextureObjectRequest {
  TextureDesc desc;
};
static_assert(sizeof(TextureObjectRequest) == 72);

/// Request of kDestroyTextureObject / kDestroySurfaceObject.
struct TextureHandleRequest {
  uint64_t handle;
};
static_assert(sizeof(TextureHandleRequest) == 8);

/// Checks that `d` describes something a backend can sample: known flags
/// and modes, a supported format, extents that fit, and a memory span that
/// does not wrap. `surface`: a surface object (no filtering, no read modes).
/// On success *span is the number of bytes from `base` the texels occupy.
/// False: *why says what is wrong (the wire's kInvalidValue message).
bool CheckTextureDesc(const TextureDesc& d, bool surface, uint64_t* span, std::string* why);

}  // namespace phos::wire
