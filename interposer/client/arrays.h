// CUDA arrays in libphos.so (docs/interposer.md "CUDA arrays, textures and
// surfaces"). An array is an ordinary device buffer of the session
// (cudaMalloc), laid out here: rows `pitch` bytes apart, slices (depth or
// layers) `slice_pitch` apart. So checkpoint, restore and migration carry
// its bytes as they carry any buffer, and copies to and from it are the
// pitched copies phosd already runs. The cudaArray_t / CUarray the app
// holds is an ArrayRec of this process (a whole-process restore brings it
// back with the process's memory).
//
// Lock: one mutex guards the set of live arrays (arrays.cc); an ArrayRec is
// immutable between its creation and cudaFreeArray.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "protocol/texture_desc.h"

namespace phos::client {

struct ArrayRec {
  uintptr_t buffer = 0;           // the device buffer
  size_t bytes = 0;               // its size
  cudaChannelFormatDesc desc{};   // as the app gave it
  uint8_t channels = 1;           // 1, 2, 4
  uint8_t channel_bytes = 4;      // 1, 2, 4
  wire::ChannelKind kind = wire::ChannelKind::kFloat;
  size_t width = 0, height = 0, depth = 0;  // as the app gave them (0: absent dimension)
  unsigned flags = 0;             // cudaArray* flags
  size_t pitch = 0;               // bytes between rows
  size_t slice_pitch = 0;         // bytes between slices / layers
  const void* mip_chain = nullptr;  // a level of this mipmapped array (freed with it, not by cudaFreeArray)

  size_t texel_bytes() const { return size_t{channels} * channel_bytes; }
  size_t rows() const { return height == 0 ? 1 : height; }
  size_t slices() const { return depth == 0 ? 1 : depth; }
  /// Layered arrays, and cube maps (their faces are layers, 6 per cube).
  bool layered() const { return (flags & (cudaArrayLayered | cudaArrayCubemap)) != 0; }
  bool cubemap() const { return (flags & cudaArrayCubemap) != 0; }
  /// Device address of texel (x, y) of slice z.
  uintptr_t At(size_t x, size_t y, size_t z) const { return buffer + z * slice_pitch + y * pitch + x * texel_bytes(); }
};

/// The channel layout of a format: 1, 2 or 4 channels of one width (8, 16,
/// 32 bits). Formats phos does not model are refused by name.
cudaError_t ChannelLayout(const cudaChannelFormatDesc& d, uint8_t* channels, uint8_t* bytes, wire::ChannelKind* kind);

/// The live array `handle` names, or null (not an array, or freed).
const ArrayRec* FindArray(const void* handle);

/// Creates an array (cudaMalloc3DArray's semantics: height 0 = 1D, depth 0
/// = 2D; cudaArrayLayered makes depth the layer count). Refuses by name
/// what phos does not model (cube maps, sparse, deferred mapping).
cudaError_t CreateArray(const cudaChannelFormatDesc& desc, size_t width, size_t height, size_t depth,
                        unsigned flags, cudaArray_t* out);
cudaError_t DestroyArray(cudaArray_t array);

/// One side of a 3D copy: where byte (x, y, z) of the region is
/// (ptr + z * slice + y * pitch + x), and whether it is device memory.
struct CopySide {
  uintptr_t ptr = 0;
  size_t pitch = 0;
  size_t slice = 0;
  bool device = false;
};
/// Copies `width` bytes x `height` rows x `depth` slices between two
/// sides as pitched 2D copies (one when the slices are contiguous on both
/// sides). `stream` null: the default stream; `async`: stream-ordered;
/// `per_thread`: the per-thread default stream for a null stream.
cudaError_t Copy3D(const CopySide& dst, const CopySide& src, size_t width, size_t height, size_t depth,
                   cudaStream_t stream, bool async, bool per_thread);

/// cudaMemcpy3DParms, arrays or pitched pointers on either side.
cudaError_t Memcpy3D(const cudaMemcpy3DParms* p, cudaStream_t stream, bool async, bool per_thread);

/// The texels of an array as the wire describes them (texture_desc.h).
wire::TextureDesc ArrayTextureDesc(const ArrayRec& a);

/// Arrays FindArray knows besides CreateArray's (a mipmapped array's
/// levels, which view parts of its buffer).
void RegisterArray(const ArrayRec* a);
void UnregisterArray(const ArrayRec* a);

/// The texels of a mipmapped array's whole chain (levels > 1) as the wire
/// describes them, for a texture object; cudaErrorInvalidResourceHandle
/// when `handle` is not a live mipmapped array (mipmapped_arrays.cc).
cudaError_t MipmappedTextureDesc(const void* handle, wire::TextureDesc* d);

}  // namespace phos::client
