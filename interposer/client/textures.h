// Texture and surface objects in libphos.so (textures.cc), shared by the
// runtime calls and the driver's cuTexObject*/cuSurfObject* (driver_textures.cc).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "protocol/texture_desc.h"

namespace phos::client {

/// The memory a resource names, as the wire describes it (an array: its
/// buffer, arrays.h). `surface`: only arrays made with
/// cudaArraySurfaceLoadStore qualify.
cudaError_t ResolveResource(const cudaResourceDesc& res, bool surface, wire::TextureDesc* d);
/// Sampling modes of `t` into `d` (address modes, filter, read mode,
/// normalized coordinates, sRGB, border colour; for a mip chain the mipmap
/// filter and level clamps). Refuses by name what phos does not model (a
/// level bias, level clamps between levels).
cudaError_t ApplyTextureDesc(const cudaTextureDesc& t, wire::TextureDesc* d);
/// Asks phosd for the object; *handle is what kernels receive.
cudaError_t CreateObject(const wire::TextureDesc& d, bool surface, uint64_t* handle);
cudaError_t DestroyObject(uint64_t handle, bool surface);

}  // namespace phos::client
