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

  uint32_t texel_bytes() const { return uint32_t{channels} * channel_bytes; }
};
static_assert(sizeof(TextureDesc) == 72);

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
