// Texture and surface objects, runtime API (docs/interposer.md "CUDA
// arrays, textures and surfaces"): cudaCreateTextureObject,
// cudaCreateSurfaceObject, their destroy calls and descriptor getters.
//
// The app's cudaResourceDesc / cudaTextureDesc are resolved here into ONE
// wire::TextureDesc (an array becomes the memory of its buffer,
// arrays.h) and sent to phosd, which checks it against the session's
// buffers and answers the handle kernels use. The app's own descriptors
// are kept for the getters (one mutex, g_objects_mu).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>

#include "interposer/client/arrays.h"
#include "interposer/client/client_internal.h"
#include "interposer/client/connection.h"
#include "interposer/client/textures.h"

namespace phos::client {

namespace {

struct ObjectRec {
  bool surface = false;
  cudaResourceDesc res{};
  cudaTextureDesc tex{};
};
std::mutex g_objects_mu;
std::map<uint64_t, ObjectRec>& Objects() {  // guarded by g_objects_mu
  static auto* objects = new std::map<uint64_t, ObjectRec>();
  return *objects;
}

wire::AddressMode AddressOf(cudaTextureAddressMode m) {
  switch (m) {
    case cudaAddressModeWrap: return wire::AddressMode::kWrap;
    case cudaAddressModeMirror: return wire::AddressMode::kMirror;
    case cudaAddressModeBorder: return wire::AddressMode::kBorder;
    default: return wire::AddressMode::kClamp;
  }
}

}  // namespace

cudaError_t ResolveResource(const cudaResourceDesc& res, bool surface, wire::TextureDesc* d) {
  *d = wire::TextureDesc{};
  if (res.flags != 0) return SetError(cudaErrorInvalidValue);
  switch (res.resType) {
    case cudaResourceTypeArray: {
      const ArrayRec* a = FindArray(res.res.array.array);
      if (a == nullptr) return SetError(cudaErrorInvalidResourceHandle);
      if (surface && !(a->flags & cudaArraySurfaceLoadStore)) {
        return SetError(cudaErrorInvalidValue);  // CUDA: the array must allow surface load/store
      }
      *d = ArrayTextureDesc(*a);
      return cudaSuccess;
    }
    case cudaResourceTypeLinear: case cudaResourceTypePitch2D: {
      if (surface) return SetError(cudaErrorInvalidValue);  // surfaces are of arrays only
      const bool linear = res.resType == cudaResourceTypeLinear;
      const cudaChannelFormatDesc& f = linear ? res.res.linear.desc : res.res.pitch2D.desc;
      if (cudaError_t e = ChannelLayout(f, &d->channels, &d->channel_bytes, &d->kind); e != cudaSuccess) return e;
      if (linear) {
        d->base = reinterpret_cast<uintptr_t>(res.res.linear.devPtr);
        const size_t n = res.res.linear.sizeInBytes / d->texel_bytes();
        if (n == 0 || n > (size_t{1} << 28)) return SetError(cudaErrorInvalidValue);
        d->width = static_cast<uint32_t>(n);
        d->pitch = res.res.linear.sizeInBytes;
        d->height = d->depth = 1;
        d->dims = 1;
        d->resource = wire::ResourceKind::kLinear;
      } else {
        const auto& p = res.res.pitch2D;
        if (p.width == 0 || p.height == 0 || p.width > (1u << 17) || p.height > (1u << 16)) {
          return SetError(cudaErrorInvalidValue);
        }
        d->base = reinterpret_cast<uintptr_t>(p.devPtr);
        d->width = static_cast<uint32_t>(p.width);
        d->height = static_cast<uint32_t>(p.height);
        d->depth = 1;
        d->pitch = p.pitchInBytes;
        d->dims = 2;
        d->resource = wire::ResourceKind::kPitch2D;
      }
      return cudaSuccess;
    }
    case cudaResourceTypeMipmappedArray:
      if (surface) return SetError(cudaErrorInvalidValue);  // surfaces are of one level (an array)
      return MipmappedTextureDesc(res.res.mipmap.mipmap, d);
    default:
      return SetError(cudaErrorInvalidValue);
  }
}

cudaError_t ApplyTextureDesc(const cudaTextureDesc& t, wire::TextureDesc* d) {
  for (int i = 0; i < 3; ++i) d->address[i] = AddressOf(t.addressMode[i]);
  if (t.filterMode == cudaFilterModeLinear) d->flags |= wire::kTextureLinearFilter;
  if (t.readMode == cudaReadModeNormalizedFloat) d->flags |= wire::kTextureReadNormalized;
  if (t.normalizedCoords) d->flags |= wire::kTextureNormalizedCoords;
  if (t.sRGB) d->flags |= wire::kTextureSrgb;
  for (int i = 0; i < 4; ++i) d->border[i] = t.borderColor[i];
  if (d->levels > 1) {
    // The level clamps as whole levels (CUDA's maxMipmapLevelClamp
    // defaults to 0: level 0 only, as here).
    if (t.mipmapLevelBias != 0.0f) return RefuseNotSupported("a mipmap level bias (mipmapLevelBias) is not supported");
    const float top = static_cast<float>(d->levels - 1);
    const float lo = std::clamp(t.minMipmapLevelClamp, 0.0f, top), hi = std::clamp(t.maxMipmapLevelClamp, 0.0f, top);
    if (lo != std::floor(lo) || hi != std::floor(hi)) {
      return RefuseNotSupported("mipmap level clamps between two levels are not supported");
    }
    if (lo > hi) return SetError(cudaErrorInvalidValue);
    d->min_level = static_cast<uint8_t>(lo);
    d->max_level = static_cast<uint8_t>(hi);
    d->mip_linear = t.mipmapFilterMode == cudaFilterModeLinear ? 1 : 0;
  }
  return cudaSuccess;
}

cudaError_t CreateObject(const wire::TextureDesc& d, bool surface, uint64_t* handle) {
  if (cudaError_t e = Initialised(); e != cudaSuccess) return SetError(e);
  Connection& c = Connection::Get();
  wire::TextureObjectRequest req{d};
  ring::Reply r;
  WireStatus w = c.Call(surface ? wire::op::kCreateSurfaceObject : wire::op::kCreateTextureObject, 0,
                        std::as_bytes(std::span<const wire::TextureObjectRequest>(&req, 1)), &r);
  if (w != WireStatus::kSuccess) return Finish(w);
  wire::ValueReply v{};
  if (r.bytes != sizeof(v)) return SetError(cudaErrorUnknown);
  std::memcpy(&v, r.data.data(), sizeof(v));
  *handle = static_cast<uint64_t>(v.value);
  return cudaSuccess;
}

cudaError_t DestroyObject(uint64_t handle, bool surface) {
  if (handle == 0) return cudaSuccess;
  if (cudaError_t e = Initialised(); e != cudaSuccess) return SetError(e);
  wire::TextureHandleRequest req{handle};
  return Finish(Connection::Get().Call(surface ? wire::op::kDestroySurfaceObject : wire::op::kDestroyTextureObject,
                                       0, std::as_bytes(std::span<const wire::TextureHandleRequest>(&req, 1))));
}

}  // namespace phos::client

using namespace phos::client;  // NOLINT
namespace wire = phos::wire;

PHOS_EXPORT cudaError_t cudaCreateTextureObject(cudaTextureObject_t* out, const cudaResourceDesc* res,
                                                const cudaTextureDesc* tex, const cudaResourceViewDesc* view) {
  if (out == nullptr || res == nullptr || tex == nullptr) return SetError(cudaErrorInvalidValue);
  if (view != nullptr) {
    return RefuseNotSupported("texture objects with a resource view (cudaResourceViewDesc) are not supported");
  }
  wire::TextureDesc d;
  if (cudaError_t e = ResolveResource(*res, false, &d); e != cudaSuccess) return e;
  if (cudaError_t e = ApplyTextureDesc(*tex, &d); e != cudaSuccess) return e;
  uint64_t h = 0;
  if (cudaError_t e = CreateObject(d, false, &h); e != cudaSuccess) return e;
  {
    std::lock_guard<std::mutex> lock(g_objects_mu);
    Objects()[h] = {false, *res, *tex};
  }
  *out = h;
  return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaDestroyTextureObject(cudaTextureObject_t h) {
  cudaError_t e = DestroyObject(h, false);
  if (e == cudaSuccess) {
    std::lock_guard<std::mutex> lock(g_objects_mu);
    Objects().erase(h);
  }
  return e;
}

PHOS_EXPORT cudaError_t cudaCreateSurfaceObject(cudaSurfaceObject_t* out, const cudaResourceDesc* res) {
  if (out == nullptr || res == nullptr) return SetError(cudaErrorInvalidValue);
  wire::TextureDesc d;
  if (cudaError_t e = ResolveResource(*res, true, &d); e != cudaSuccess) return e;
  uint64_t h = 0;
  if (cudaError_t e = CreateObject(d, true, &h); e != cudaSuccess) return e;
  {
    std::lock_guard<std::mutex> lock(g_objects_mu);
    Objects()[h] = {true, *res, {}};
  }
  *out = h;
  return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaDestroySurfaceObject(cudaSurfaceObject_t h) {
  cudaError_t e = DestroyObject(h, true);
  if (e == cudaSuccess) {
    std::lock_guard<std::mutex> lock(g_objects_mu);
    Objects().erase(h);
  }
  return e;
}

static cudaError_t FindObject(uint64_t h, bool surface, ObjectRec* out) {
  std::lock_guard<std::mutex> lock(g_objects_mu);
  auto it = Objects().find(h);
  if (it == Objects().end() || it->second.surface != surface) return SetError(cudaErrorInvalidValue);
  *out = it->second;
  return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaGetTextureObjectResourceDesc(cudaResourceDesc* res, cudaTextureObject_t h) {
  ObjectRec r;
  if (res == nullptr) return SetError(cudaErrorInvalidValue);
  if (cudaError_t e = FindObject(h, false, &r); e != cudaSuccess) return e;
  *res = r.res;
  return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaGetTextureObjectTextureDesc(cudaTextureDesc* tex, cudaTextureObject_t h) {
  ObjectRec r;
  if (tex == nullptr) return SetError(cudaErrorInvalidValue);
  if (cudaError_t e = FindObject(h, false, &r); e != cudaSuccess) return e;
  *tex = r.tex;
  return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaGetTextureObjectResourceViewDesc(cudaResourceViewDesc* view, cudaTextureObject_t h) {
  ObjectRec r;
  if (view == nullptr) return SetError(cudaErrorInvalidValue);
  if (cudaError_t e = FindObject(h, false, &r); e != cudaSuccess) return e;
  // phos creates no views: CUDA answers an object made without one with an error.
  return SetError(cudaErrorInvalidValue);
}

PHOS_EXPORT cudaError_t cudaGetSurfaceObjectResourceDesc(cudaResourceDesc* res, cudaSurfaceObject_t h) {
  ObjectRec r;
  if (res == nullptr) return SetError(cudaErrorInvalidValue);
  if (cudaError_t e = FindObject(h, true, &r); e != cudaSuccess) return e;
  *res = r.res;
  return cudaSuccess;
}
