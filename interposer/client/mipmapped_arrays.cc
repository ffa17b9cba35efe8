// Mipmapped CUDA arrays (docs/interposer.md "CUDA arrays, textures and
// surfaces"): cudaMallocMipmappedArray, cudaGetMipmappedArrayLevel,
// cudaFreeMipmappedArray and the driver's cuMipmappedArray*.
//
// A chain is ONE buffer of the session (cudaMalloc; checkpoints carry it
// like any buffer) with its levels one after another as wire::MipLevelOf
// lays them out, the layout phosd checks a texture's span with and the
// sim's interpreter samples by. Each level is an ArrayRec viewing its part
// of the buffer (registered with FindArray, so copies to and from a level,
// and textures or surfaces of one level, work as for any array); the app
// frees the levels only with the chain.
//
// All state is under g_mu (the set of live chains); ArrayRecs of levels
// are immutable once made.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <unordered_set>
#include <vector>

#include "interposer/client/arrays.h"
#include "interposer/client/client_internal.h"
#include "interposer/client/driver_internal.h"

namespace phos::client {
namespace {

struct MipChain {
  uintptr_t buffer = 0;
  wire::TextureDesc desc{};                     // level 0's texels, levels = the chain's
  std::vector<std::unique_ptr<ArrayRec>> levels;
};

std::mutex g_mu;
std::unordered_set<const MipChain*>& Live() {  // guarded by g_mu
  static auto* live = new std::unordered_set<const MipChain*>();
  return *live;
}

const MipChain* Find(const void* handle) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto* c = static_cast<const MipChain*>(handle);
  return Live().count(c) ? c : nullptr;
}

// 1 + floor(log2 of the largest extent that shrinks (layers do not)).
unsigned MaxLevels(size_t w, size_t h, size_t d, bool layered) {
  size_t m = std::max({w, h, layered ? size_t{1} : d, size_t{1}});
  unsigned n = 1;
  while (m > 1) m >>= 1, ++n;
  return n;
}

cudaError_t Create(const cudaChannelFormatDesc& desc, size_t w, size_t h, size_t d, unsigned levels, unsigned flags,
                   MipChain** out) {
  if (out == nullptr || levels == 0) return SetError(cudaErrorInvalidValue);
  if (cudaError_t e = Initialised(); e != cudaSuccess) return SetError(e);
  if (flags & cudaArrayCubemap) return RefuseNotSupported("mipmapped cube maps are not supported");
  if (flags & (cudaArraySparse | cudaArrayDeferredMapping)) {
    return RefuseNotSupported("sparse and deferred-mapping CUDA arrays are not supported");
  }
  if (flags & ~unsigned{cudaArrayLayered | cudaArraySurfaceLoadStore | cudaArrayTextureGather}) {
    return SetError(cudaErrorInvalidValue);
  }
  const bool layered = (flags & cudaArrayLayered) != 0;
  if (w == 0 || w > (1u << 15) || h > (1u << 15) || d > (layered ? 2048u : (1u << 15)) ||
      (d != 0 && h == 0 && !layered) || (layered && d == 0)) {
    return SetError(cudaErrorInvalidValue);
  }
  levels = std::min(levels, MaxLevels(w, h, d, layered));  // CUDA clamps it so too
  // Level 0's shape as an array (not allocated): its texture descriptor
  // gives the chain's layout.
  ArrayRec shape;
  if (cudaError_t e = ChannelLayout(desc, &shape.channels, &shape.channel_bytes, &shape.kind); e != cudaSuccess) {
    return e;
  }
  shape.desc = desc;
  shape.width = w, shape.height = h, shape.depth = d, shape.flags = flags;
  wire::TextureDesc td = ArrayTextureDesc(shape);
  const wire::MipLevel first = wire::MipLevelOf(td, 0);
  shape.pitch = first.pitch;
  shape.slice_pitch = first.slice_pitch;
  td = ArrayTextureDesc(shape);
  td.levels = static_cast<uint8_t>(levels);
  const wire::MipLevel last = wire::MipLevelOf(td, levels - 1);
  void* p = nullptr;
  if (cudaError_t e = cudaMalloc(&p, last.offset + last.bytes); e != cudaSuccess) return e;
  auto chain = std::make_unique<MipChain>();
  chain->buffer = reinterpret_cast<uintptr_t>(p);
  td.base = chain->buffer;
  chain->desc = td;
  for (unsigned k = 0; k < levels; ++k) {
    const wire::MipLevel m = wire::MipLevelOf(td, k);
    auto a = std::make_unique<ArrayRec>(shape);
    a->buffer = chain->buffer + m.offset;
    a->bytes = m.bytes;
    a->width = m.width;
    a->height = h == 0 ? 0 : m.height;
    a->depth = d == 0 ? 0 : layered ? d : m.depth;
    a->pitch = m.pitch;
    a->slice_pitch = m.slice_pitch;
    a->mip_chain = chain.get();
    RegisterArray(a.get());
    chain->levels.push_back(std::move(a));
  }
  {
    std::lock_guard<std::mutex> lock(g_mu);
    Live().insert(chain.get());
  }
  *out = chain.release();
  return cudaSuccess;
}

cudaError_t Level(const void* handle, unsigned level, const ArrayRec** out) {
  if (out == nullptr) return SetError(cudaErrorInvalidValue);
  const MipChain* c = Find(handle);
  if (c == nullptr) return SetError(cudaErrorInvalidResourceHandle);
  if (level >= c->levels.size()) return SetError(cudaErrorInvalidValue);
  *out = c->levels[level].get();
  return cudaSuccess;
}

cudaError_t Destroy(const void* handle) {
  if (handle == nullptr) return cudaSuccess;
  auto* c = static_cast<const MipChain*>(handle);
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (!Live().erase(c)) return SetError(cudaErrorInvalidResourceHandle);
  }
  for (const auto& a : c->levels) UnregisterArray(a.get());
  const cudaError_t e = cudaFree(reinterpret_cast<void*>(c->buffer));
  delete c;
  return e;
}

}  // namespace

cudaError_t MipmappedTextureDesc(const void* handle, wire::TextureDesc* d) {
  const MipChain* c = Find(handle);
  if (c == nullptr) return SetError(cudaErrorInvalidResourceHandle);
  *d = c->desc;
  return cudaSuccess;
}

}  // namespace phos::client

using namespace phos::client;  // NOLINT

PHOS_EXPORT cudaError_t cudaMallocMipmappedArray(cudaMipmappedArray_t* out, const cudaChannelFormatDesc* desc,
                                                 cudaExtent extent, unsigned int levels, unsigned int flags) {
  if (desc == nullptr || out == nullptr) return SetError(cudaErrorInvalidValue);
  MipChain* c = nullptr;
  if (cudaError_t e = Create(*desc, extent.width, extent.height, extent.depth, levels, flags, &c); e != cudaSuccess) {
    return e;
  }
  *out = reinterpret_cast<cudaMipmappedArray_t>(c);
  return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaGetMipmappedArrayLevel(cudaArray_t* out, cudaMipmappedArray_const_t chain,
                                                   unsigned int level) {
  const ArrayRec* a = nullptr;
  if (cudaError_t e = Level(chain, level, &a); e != cudaSuccess) return e;
  *out = reinterpret_cast<cudaArray_t>(const_cast<ArrayRec*>(a));
  return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaFreeMipmappedArray(cudaMipmappedArray_t chain) { return Destroy(chain); }

PHOS_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray* out, const CUDA_ARRAY3D_DESCRIPTOR* d,
                                            unsigned int levels) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  if (d == nullptr || out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  cudaChannelFormatDesc desc{};
  if (CUresult r = ChannelDescOf(d->Format, d->NumChannels, &desc); r != CUDA_SUCCESS) return r;
  MipChain* c = nullptr;
  // CUDA_ARRAY3D_* flags share the runtime's cudaArray* numbers.
  if (CUresult r = ToCu(Create(desc, d->Width, d->Height, d->Depth, levels, d->Flags, &c)); r != CUDA_SUCCESS) {
    return r;
  }
  *out = reinterpret_cast<CUmipmappedArray>(c);
  return CUDA_SUCCESS;
}

PHOS_EXPORT CUresult cuMipmappedArrayGetLevel(CUarray* out, CUmipmappedArray chain, unsigned int level) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  const ArrayRec* a = nullptr;
  if (CUresult r = ToCu(Level(chain, level, &a)); r != CUDA_SUCCESS) return r;
  *out = reinterpret_cast<CUarray>(const_cast<ArrayRec*>(a));
  return CUDA_SUCCESS;
}

PHOS_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray chain) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  return ToCu(Destroy(chain));
}
