// CUDA arrays (arrays.h) and the runtime calls that make, describe, copy
// and free them; cudaMemcpy3D / cudaMalloc3D / cudaMemset3D of linear
// memory, which share the 3D copy. Every copy becomes the pitched 2D copies
// of memory_copy.cc (one per slice, or one when the slices are contiguous),
// so it travels, is captured into graphs and is checkpointed as they are.
#include "interposer/client/arrays.h"

#include <cuda_runtime.h>  // make_cudaExtent, make_cudaPitchedPtr

#include <algorithm>
#include <memory>
#include <mutex>
#include <unordered_set>

#include "interposer/client/client_internal.h"

// The per-thread default stream forms (memory_copy.cc): the headers declare
// them only with CUDA_API_PER_THREAD_DEFAULT_STREAM.
extern "C" {
cudaError_t cudaMemcpy2D_ptds(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                              cudaMemcpyKind kind);
cudaError_t cudaMemcpy2DAsync_ptsz(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                                   size_t height, cudaMemcpyKind kind, cudaStream_t stream);
cudaError_t cudaMemset2D_ptds(void* devPtr, size_t pitch, int value, size_t width, size_t height);
cudaError_t cudaMemset2DAsync_ptsz(void* devPtr, size_t pitch, int value, size_t width, size_t height,
                                   cudaStream_t stream);
}

namespace phos::client {

namespace {

// Rows of an array start on this many bytes (a GPU's texturePitchAlignment
// is 32; pitched textures of these rows then also work on the cuda backend).
// The mip levels' layout uses the same rule (wire::MipLevelOf).
constexpr size_t kArrayPitchAlign = wire::kArrayPitchAlign;
// CUDA's limits for 3D arrays and layered 2D arrays on sm_90.
constexpr size_t kMaxExtent = 1u << 16;

std::mutex g_arrays_mu;
std::unordered_set<const ArrayRec*>& LiveArrays() {  // guarded by g_arrays_mu
  static auto* live = new std::unordered_set<const ArrayRec*>();
  return *live;
}

}  // namespace

// The channel layout of `d`: every present channel the same width, 1, 2 or
// 4 channels (CUDA arrays cannot have 3).
cudaError_t ChannelLayout(const cudaChannelFormatDesc& d, uint8_t* channels, uint8_t* bytes, wire::ChannelKind* kind) {
  const int bits[4] = {d.x, d.y, d.z, d.w};
  int n = 0;
  while (n < 4 && bits[n] != 0) ++n;
  for (int i = n; i < 4; ++i) {
    if (bits[i] != 0) return SetError(cudaErrorInvalidChannelDescriptor);
  }
  if (n == 0 || n == 3) return SetError(cudaErrorInvalidChannelDescriptor);
  for (int i = 1; i < n; ++i) {
    if (bits[i] != bits[0]) {
      return RefuseNotSupported("CUDA arrays with channels of different widths are not supported");
    }
  }
  if (bits[0] != 8 && bits[0] != 16 && bits[0] != 32) return SetError(cudaErrorInvalidChannelDescriptor);
  switch (d.f) {
    case cudaChannelFormatKindSigned: *kind = wire::ChannelKind::kSigned; break;
    case cudaChannelFormatKindUnsigned: *kind = wire::ChannelKind::kUnsigned; break;
    case cudaChannelFormatKindFloat:
      if (bits[0] == 8) return SetError(cudaErrorInvalidChannelDescriptor);
      *kind = wire::ChannelKind::kFloat;
      break;
    default:
      return RefuseNotSupported("CUDA arrays of channel format kind " + std::to_string(static_cast<int>(d.f)) +
                    " (normalized, block-compressed or NV12 formats) are not supported");
  }
  *channels = static_cast<uint8_t>(n);
  *bytes = static_cast<uint8_t>(bits[0] / 8);
  return cudaSuccess;
}

namespace {

cudaError_t Copy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                   cudaMemcpyKind kind, cudaStream_t stream, bool async, bool per_thread) {
  if (async) {
    return per_thread ? cudaMemcpy2DAsync_ptsz(dst, dpitch, src, spitch, width, height, kind, stream)
                      : cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, kind, stream);
  }
  return per_thread ? cudaMemcpy2D_ptds(dst, dpitch, src, spitch, width, height, kind)
                    : cudaMemcpy2D(dst, dpitch, src, spitch, width, height, kind);
}

cudaMemcpyKind KindOf(bool dst_device, bool src_device) {
  return dst_device ? (src_device ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                    : (src_device ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
}

// The side of a copy an array is: its element (x, y, z) as the origin.
CopySide ArraySide(const ArrayRec& a, size_t x, size_t y, size_t z) {
  return {a.At(x, y, z), a.pitch, a.slice_pitch, true};
}

// Whether [x, x + w) x [y, y + h) x [z, z + d) (x, w in bytes) fits `a`.
bool FitsArray(const ArrayRec& a, size_t x_bytes, size_t y, size_t z, size_t w_bytes, size_t h, size_t d) {
  const size_t row = a.width * a.texel_bytes();
  return x_bytes <= row && w_bytes <= row - x_bytes && y <= a.rows() && h <= a.rows() - y && z <= a.slices() &&
         d <= a.slices() - z;
}

}  // namespace

const ArrayRec* FindArray(const void* handle) {
  std::lock_guard<std::mutex> lock(g_arrays_mu);
  auto* a = static_cast<const ArrayRec*>(handle);
  return LiveArrays().count(a) ? a : nullptr;
}

cudaError_t CreateArray(const cudaChannelFormatDesc& desc, size_t width, size_t height, size_t depth, unsigned flags,
                        cudaArray_t* out) {
  if (out == nullptr) return SetError(cudaErrorInvalidValue);
  if (cudaError_t e = Initialised(); e != cudaSuccess) return SetError(e);
  if (flags & (cudaArraySparse | cudaArrayDeferredMapping)) {
    return RefuseNotSupported("sparse and deferred-mapping CUDA arrays are not supported");
  }
  if (flags & ~unsigned{cudaArrayLayered | cudaArraySurfaceLoadStore | cudaArrayTextureGather | cudaArrayCubemap}) {
    return SetError(cudaErrorInvalidValue);
  }
  if (flags & cudaArrayCubemap) {
    // Square faces, 6 of them (6 per cube when layered); stored as a
    // layered 2D array whose layers are the faces in CUDA's order.
    const bool layered_cubes = (flags & cudaArrayLayered) != 0;
    if (width == 0 || height != width || depth == 0 || depth % 6 != 0 || (!layered_cubes && depth != 6)) {
      return SetError(cudaErrorInvalidValue);
    }
  }
  auto a = std::make_unique<ArrayRec>();
  if (cudaError_t e = ChannelLayout(desc, &a->channels, &a->channel_bytes, &a->kind); e != cudaSuccess) return e;
  const bool layered = (flags & (cudaArrayLayered | cudaArrayCubemap)) != 0;
  // CUDA: a 1D array has height 0 and depth 0; a layered one depth layers.
  if (width == 0 || (depth != 0 && height == 0 && !layered) || (layered && depth == 0)) {
    return SetError(cudaErrorInvalidValue);
  }
  if (width > (size_t{1} << 27) || height > kMaxExtent || depth > (layered ? 2048 : kMaxExtent)) {
    return SetError(cudaErrorInvalidValue);
  }
  a->desc = desc;
  a->width = width;
  a->height = height;
  a->depth = depth;
  a->flags = flags;
  const size_t row = width * a->texel_bytes();
  a->pitch = a->rows() > 1 || a->slices() > 1 ? (row + kArrayPitchAlign - 1) / kArrayPitchAlign * kArrayPitchAlign
                                              : row;
  a->slice_pitch = a->pitch * a->rows();
  a->bytes = a->slice_pitch * a->slices();
  void* p = nullptr;
  if (cudaError_t e = cudaMalloc(&p, a->bytes); e != cudaSuccess) return e;
  a->buffer = reinterpret_cast<uintptr_t>(p);
  {
    std::lock_guard<std::mutex> lock(g_arrays_mu);
    LiveArrays().insert(a.get());
  }
  *out = reinterpret_cast<cudaArray_t>(a.release());
  return cudaSuccess;
}

void RegisterArray(const ArrayRec* a) {
  std::lock_guard<std::mutex> lock(g_arrays_mu);
  LiveArrays().insert(a);
}
void UnregisterArray(const ArrayRec* a) {
  std::lock_guard<std::mutex> lock(g_arrays_mu);
  LiveArrays().erase(a);
}

cudaError_t DestroyArray(cudaArray_t array) {
  if (array == nullptr) return cudaSuccess;
  auto* a = reinterpret_cast<ArrayRec*>(array);
  {
    std::lock_guard<std::mutex> lock(g_arrays_mu);
    if (!LiveArrays().count(a)) return SetError(cudaErrorInvalidResourceHandle);
    // A level of a mipmapped array goes with it (cudaFreeMipmappedArray).
    if (a->mip_chain != nullptr) return SetError(cudaErrorInvalidValue);
    LiveArrays().erase(a);
  }
  cudaError_t e = cudaFree(reinterpret_cast<void*>(a->buffer));
  delete a;
  return e;
}

cudaError_t Copy3D(const CopySide& dst, const CopySide& src, size_t width, size_t height, size_t depth,
                   cudaStream_t stream, bool async, bool per_thread) {
  if (width == 0 || height == 0 || depth == 0) return cudaSuccess;
  const cudaMemcpyKind kind = KindOf(dst.device, src.device);
  if (height == 1 && depth == 1) {  // one row: its pitch does not matter (apps pass 0)
    return Copy2D(reinterpret_cast<void*>(dst.ptr), width, reinterpret_cast<const void*>(src.ptr), width, width, 1,
                  kind, stream, async, per_thread);
  }
  // Slices contiguous on both sides: one 2D copy of height * depth rows.
  if (depth == 1 || (dst.slice == dst.pitch * height && src.slice == src.pitch * height)) {
    return Copy2D(reinterpret_cast<void*>(dst.ptr), dst.pitch, reinterpret_cast<const void*>(src.ptr), src.pitch,
                  width, height * depth, kind, stream, async, per_thread);
  }
  for (size_t z = 0; z < depth; ++z) {
    cudaError_t e = Copy2D(reinterpret_cast<void*>(dst.ptr + z * dst.slice), dst.pitch,
                           reinterpret_cast<const void*>(src.ptr + z * src.slice), src.pitch, width, height, kind,
                           stream, async, per_thread);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

namespace {

// One side of a cudaMemcpy3DParms: array `a` (when not null) at `pos` (x in
// its elements), else the pitched pointer at `pos` (x in bytes); the region
// is w bytes x h rows x d slices. False when it does not fit or is absent.
bool ParmsSide(const ArrayRec* a, const cudaPos& pos, const cudaPitchedPtr& ptr, size_t elem, size_t w, size_t h,
               size_t d, CopySide* out) {
  if (a != nullptr) {
    if (!FitsArray(*a, pos.x * elem, pos.y, pos.z, w, h, d)) return false;
    *out = ArraySide(*a, pos.x, pos.y, pos.z);
    return true;
  }
  if (ptr.ptr == nullptr && w != 0) return false;
  *out = {reinterpret_cast<uintptr_t>(ptr.ptr) + pos.z * ptr.pitch * ptr.ysize + pos.y * ptr.pitch + pos.x, ptr.pitch,
          ptr.pitch * ptr.ysize, IsDevicePtr(ptr.ptr)};
  return true;
}

}  // namespace

cudaError_t Memcpy3D(const cudaMemcpy3DParms* p, cudaStream_t stream, bool async, bool per_thread) {
  if (p == nullptr) return SetError(cudaErrorInvalidValue);
  const bool src_is_array = p->srcArray != nullptr, dst_is_array = p->dstArray != nullptr;
  if ((src_is_array && p->srcPtr.ptr != nullptr) || (dst_is_array && p->dstPtr.ptr != nullptr)) {
    return SetError(cudaErrorInvalidValue);  // both an array and a pointer for one side
  }
  const ArrayRec* sa = src_is_array ? FindArray(p->srcArray) : nullptr;
  const ArrayRec* da = dst_is_array ? FindArray(p->dstArray) : nullptr;
  if ((src_is_array && sa == nullptr) || (dst_is_array && da == nullptr)) {
    return SetError(cudaErrorInvalidResourceHandle);
  }
  // With an array on either side, x extents and positions count its
  // elements; else bytes. Both arrays: their element sizes must agree.
  size_t elem = 1;
  if (sa != nullptr) elem = sa->texel_bytes();
  if (da != nullptr) {
    if (sa != nullptr && sa->texel_bytes() != da->texel_bytes()) return SetError(cudaErrorInvalidValue);
    elem = da->texel_bytes();
  }
  const size_t w = p->extent.width * elem, h = p->extent.height, d = p->extent.depth;
  if (w / elem != p->extent.width) return SetError(cudaErrorInvalidValue);
  CopySide src, dst;
  if (!ParmsSide(sa, p->srcPos, p->srcPtr, elem, w, h, d, &src) ||
      !ParmsSide(da, p->dstPos, p->dstPtr, elem, w, h, d, &dst)) {
    return SetError(cudaErrorInvalidValue);
  }
  // A given kind must agree with where the memory is (cudaMemcpyDefault
  // infers it; the 2D copies below check pointers again).
  if (p->kind != cudaMemcpyDefault && p->kind != KindOf(dst.device, src.device)) {
    return SetError(cudaErrorInvalidMemcpyDirection);
  }
  return Copy3D(dst, src, w, h, d, stream, async, per_thread);
}

wire::TextureDesc ArrayTextureDesc(const ArrayRec& a) {
  wire::TextureDesc d{};
  d.base = a.buffer;
  d.pitch = a.pitch;
  d.slice_pitch = a.slice_pitch;
  d.width = static_cast<uint32_t>(a.width);
  d.height = static_cast<uint32_t>(a.rows());
  d.channels = a.channels;
  d.channel_bytes = a.channel_bytes;
  d.kind = a.kind;
  d.resource = wire::ResourceKind::kArray;
  if (a.layered()) {
    d.flags |= wire::kTextureLayered;
    if (a.cubemap()) d.flags |= wire::kTextureCubemap;
    d.layers = static_cast<uint32_t>(a.depth);
    d.depth = 1;
    d.dims = a.height == 0 ? 1 : 2;
  } else {
    d.depth = static_cast<uint32_t>(a.slices());
    d.dims = a.depth != 0 ? 3 : a.height != 0 ? 2 : 1;
  }
  return d;
}

}  // namespace phos::client

using namespace phos::client;  // NOLINT

// ---------------------------------------------------------------- arrays

PHOS_EXPORT cudaChannelFormatDesc cudaCreateChannelDesc(int x, int y, int z, int w, cudaChannelFormatKind f) {
  return cudaChannelFormatDesc{x, y, z, w, f};
}

PHOS_EXPORT cudaError_t cudaMallocArray(cudaArray_t* array, const cudaChannelFormatDesc* desc, size_t width,
                                        size_t height, unsigned int flags) {
  if (desc == nullptr || (flags & cudaArrayLayered)) return SetError(cudaErrorInvalidValue);
  return CreateArray(*desc, width, height, 0, flags, array);
}

PHOS_EXPORT cudaError_t cudaMalloc3DArray(cudaArray_t* array, const cudaChannelFormatDesc* desc, cudaExtent extent,
                                          unsigned int flags) {
  if (desc == nullptr) return SetError(cudaErrorInvalidValue);
  return CreateArray(*desc, extent.width, extent.height, extent.depth, flags, array);
}

PHOS_EXPORT cudaError_t cudaFreeArray(cudaArray_t array) { return DestroyArray(array); }

PHOS_EXPORT cudaError_t cudaArrayGetInfo(cudaChannelFormatDesc* desc, cudaExtent* extent, unsigned int* flags,
                                         cudaArray_t array) {
  const ArrayRec* a = FindArray(array);
  if (a == nullptr) return SetError(cudaErrorInvalidResourceHandle);
  if (desc != nullptr) *desc = a->desc;
  if (extent != nullptr) *extent = make_cudaExtent(a->width, a->height, a->depth);
  if (flags != nullptr) *flags = a->flags;
  return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaGetChannelDesc(cudaChannelFormatDesc* desc, cudaArray_const_t array) {
  const ArrayRec* a = FindArray(array);
  if (a == nullptr) return SetError(cudaErrorInvalidResourceHandle);
  if (desc == nullptr) return SetError(cudaErrorInvalidValue);
  *desc = a->desc;
  return cudaSuccess;
}

// ---------------------------------------------------------------- copies with arrays

namespace {

// A 2D copy with an array on one or both sides; offsets: w in bytes, h in
// rows (the runtime's 2D array calls).
cudaError_t ArrayCopy2D(const ArrayRec* da, size_t dw, size_t dh, void* dptr, size_t dpitch, const ArrayRec* sa,
                        size_t sw, size_t sh, const void* sptr, size_t spitch, size_t width, size_t height,
                        cudaMemcpyKind kind, cudaStream_t stream, bool async, bool per_thread) {
  CopySide dst, src;
  if (da != nullptr) {
    if (!FitsArray(*da, dw, dh, 0, width, height, 1)) return SetError(cudaErrorInvalidValue);
    dst = {da->At(0, dh, 0) + dw, da->pitch, da->slice_pitch, true};
  } else {
    dst = {reinterpret_cast<uintptr_t>(dptr), dpitch, 0, IsDevicePtr(dptr)};
  }
  if (sa != nullptr) {
    if (!FitsArray(*sa, sw, sh, 0, width, height, 1)) return SetError(cudaErrorInvalidValue);
    src = {sa->At(0, sh, 0) + sw, sa->pitch, sa->slice_pitch, true};
  } else {
    src = {reinterpret_cast<uintptr_t>(sptr), spitch, 0, IsDevicePtr(sptr)};
  }
  if (kind != cudaMemcpyDefault && kind != KindOf(dst.device, src.device)) {
    return SetError(cudaErrorInvalidMemcpyDirection);
  }
  return Copy3D(dst, src, width, height, 1, stream, async, per_thread);
}

// The deprecated 1D-style calls: `count` bytes from byte `w` of row `h`,
// running on into the following rows (the array's rows as if packed).
// Split into a partial first row, whole rows and a partial last row.
cudaError_t ArrayCopyLinear(const ArrayRec* da, size_t dw, size_t dh, void* dptr, const ArrayRec* sa, size_t sw,
                            size_t sh, const void* sptr, size_t count, cudaMemcpyKind kind, cudaStream_t stream,
                            bool async, bool per_thread) {
  const ArrayRec* a = da != nullptr ? da : sa;
  const size_t row = a->width * a->texel_bytes();
  size_t w = da != nullptr ? dw : sw, h = da != nullptr ? dh : sh;
  if (w >= row && count != 0) return SetError(cudaErrorInvalidValue);
  size_t done = 0;
  auto step = [&](size_t width, size_t rows) {
    char* lin = static_cast<char*>(da != nullptr ? const_cast<void*>(sptr) : dptr) + done;
    cudaError_t e = da != nullptr ? ArrayCopy2D(da, w, h, nullptr, 0, nullptr, 0, 0, lin, width, width, rows, kind,
                                                stream, async, per_thread)
                                  : ArrayCopy2D(nullptr, 0, 0, lin, width, sa, w, h, nullptr, 0, width, rows, kind,
                                                stream, async, per_thread);
    done += width * rows;
    return e;
  };
  while (done < count) {
    cudaError_t e = cudaSuccess;
    if (w != 0 || count - done < row) {
      const size_t n = std::min(row - w, count - done);
      e = step(n, 1);
      w = (w + n) % row;
      if (w == 0) ++h;
    } else {
      const size_t rows = (count - done) / row;
      e = step(row, rows);
      h += rows;
    }
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

const ArrayRec* ArrayOrFail(const void* handle, cudaError_t* e) {
  const ArrayRec* a = FindArray(handle);
  *e = a == nullptr ? SetError(cudaErrorInvalidResourceHandle) : cudaSuccess;
  return a;
}

}  // namespace

#define PHOS_TO_ARRAY_2D(NAME, ASYNC, PT, STREAM_PARAM, STREAM)                                                    \
  PHOS_EXPORT cudaError_t NAME(cudaArray_t dst, size_t wOffset, size_t hOffset, const void* src, size_t spitch,    \
                               size_t width, size_t height, cudaMemcpyKind kind STREAM_PARAM) {                   \
    cudaError_t e;                                                                                                 \
    const ArrayRec* a = ArrayOrFail(dst, &e);                                                                      \
    if (a == nullptr) return e;                                                                                    \
    return ArrayCopy2D(a, wOffset, hOffset, nullptr, 0, nullptr, 0, 0, src, spitch, width, height, kind, STREAM,   \
                       ASYNC, PT);                                                                                 \
  }
#define PHOS_FROM_ARRAY_2D(NAME, ASYNC, PT, STREAM_PARAM, STREAM)                                                  \
  PHOS_EXPORT cudaError_t NAME(void* dst, size_t dpitch, cudaArray_const_t src, size_t wOffset, size_t hOffset,    \
                               size_t width, size_t height, cudaMemcpyKind kind STREAM_PARAM) {                   \
    cudaError_t e;                                                                                                 \
    const ArrayRec* a = ArrayOrFail(src, &e);                                                                      \
    if (a == nullptr) return e;                                                                                    \
    return ArrayCopy2D(nullptr, 0, 0, dst, dpitch, a, wOffset, hOffset, nullptr, 0, width, height, kind, STREAM,   \
                       ASYNC, PT);                                                                                 \
  }
#define PHOS_TO_ARRAY_1D(NAME, ASYNC, PT, STREAM_PARAM, STREAM)                                                    \
  PHOS_EXPORT cudaError_t NAME(cudaArray_t dst, size_t wOffset, size_t hOffset, const void* src, size_t count,     \
                               cudaMemcpyKind kind STREAM_PARAM) {                                                \
    cudaError_t e;                                                                                                 \
    const ArrayRec* a = ArrayOrFail(dst, &e);                                                                      \
    if (a == nullptr) return e;                                                                                    \
    return ArrayCopyLinear(a, wOffset, hOffset, nullptr, nullptr, 0, 0, src, count, kind, STREAM, ASYNC, PT);      \
  }
#define PHOS_FROM_ARRAY_1D(NAME, ASYNC, PT, STREAM_PARAM, STREAM)                                                  \
  PHOS_EXPORT cudaError_t NAME(void* dst, cudaArray_const_t src, size_t wOffset, size_t hOffset, size_t count,     \
                               cudaMemcpyKind kind STREAM_PARAM) {                                                \
    cudaError_t e;                                                                                                 \
    const ArrayRec* a = ArrayOrFail(src, &e);                                                                      \
    if (a == nullptr) return e;                                                                                    \
    return ArrayCopyLinear(nullptr, 0, 0, dst, a, wOffset, hOffset, nullptr, count, kind, STREAM, ASYNC, PT);      \
  }
#define PHOS_COMMA ,
PHOS_TO_ARRAY_2D(cudaMemcpy2DToArray, false, false, , nullptr)
PHOS_TO_ARRAY_2D(cudaMemcpy2DToArray_ptds, false, true, , nullptr)
PHOS_TO_ARRAY_2D(cudaMemcpy2DToArrayAsync, true, false, PHOS_COMMA cudaStream_t stream, stream)
PHOS_TO_ARRAY_2D(cudaMemcpy2DToArrayAsync_ptsz, true, true, PHOS_COMMA cudaStream_t stream, stream)
PHOS_FROM_ARRAY_2D(cudaMemcpy2DFromArray, false, false, , nullptr)
PHOS_FROM_ARRAY_2D(cudaMemcpy2DFromArray_ptds, false, true, , nullptr)
PHOS_FROM_ARRAY_2D(cudaMemcpy2DFromArrayAsync, true, false, PHOS_COMMA cudaStream_t stream, stream)
PHOS_FROM_ARRAY_2D(cudaMemcpy2DFromArrayAsync_ptsz, true, true, PHOS_COMMA cudaStream_t stream, stream)
PHOS_TO_ARRAY_1D(cudaMemcpyToArray, false, false, , nullptr)
PHOS_TO_ARRAY_1D(cudaMemcpyToArray_ptds, false, true, , nullptr)
PHOS_TO_ARRAY_1D(cudaMemcpyToArrayAsync, true, false, PHOS_COMMA cudaStream_t stream, stream)
PHOS_TO_ARRAY_1D(cudaMemcpyToArrayAsync_ptsz, true, true, PHOS_COMMA cudaStream_t stream, stream)
PHOS_FROM_ARRAY_1D(cudaMemcpyFromArray, false, false, , nullptr)
PHOS_FROM_ARRAY_1D(cudaMemcpyFromArray_ptds, false, true, , nullptr)
PHOS_FROM_ARRAY_1D(cudaMemcpyFromArrayAsync, true, false, PHOS_COMMA cudaStream_t stream, stream)
PHOS_FROM_ARRAY_1D(cudaMemcpyFromArrayAsync_ptsz, true, true, PHOS_COMMA cudaStream_t stream, stream)

static cudaError_t ArrayToArray(cudaArray_t dst, size_t wOffsetDst, size_t hOffsetDst, cudaArray_const_t src,
                                size_t wOffsetSrc, size_t hOffsetSrc, size_t width, size_t height, cudaMemcpyKind kind,
                                bool per_thread) {
  cudaError_t e;
  const ArrayRec* da = ArrayOrFail(dst, &e);
  if (da == nullptr) return e;
  const ArrayRec* sa = ArrayOrFail(src, &e);
  if (sa == nullptr) return e;
  if (kind != cudaMemcpyDeviceToDevice && kind != cudaMemcpyDefault) return SetError(cudaErrorInvalidMemcpyDirection);
  return ArrayCopy2D(da, wOffsetDst, hOffsetDst, nullptr, 0, sa, wOffsetSrc, hOffsetSrc, nullptr, 0, width, height,
                     cudaMemcpyDeviceToDevice, nullptr, false, per_thread);
}

PHOS_EXPORT cudaError_t cudaMemcpy2DArrayToArray(cudaArray_t dst, size_t wOffsetDst, size_t hOffsetDst,
                                                 cudaArray_const_t src, size_t wOffsetSrc, size_t hOffsetSrc,
                                                 size_t width, size_t height, cudaMemcpyKind kind) {
  return ArrayToArray(dst, wOffsetDst, hOffsetDst, src, wOffsetSrc, hOffsetSrc, width, height, kind, false);
}
PHOS_EXPORT cudaError_t cudaMemcpy2DArrayToArray_ptds(cudaArray_t dst, size_t wOffsetDst, size_t hOffsetDst,
                                                      cudaArray_const_t src, size_t wOffsetSrc, size_t hOffsetSrc,
                                                      size_t width, size_t height, cudaMemcpyKind kind) {
  return ArrayToArray(dst, wOffsetDst, hOffsetDst, src, wOffsetSrc, hOffsetSrc, width, height, kind, true);
}
PHOS_EXPORT cudaError_t cudaMemcpyArrayToArray(cudaArray_t dst, size_t wOffsetDst, size_t hOffsetDst,
                                               cudaArray_const_t src, size_t wOffsetSrc, size_t hOffsetSrc,
                                               size_t count, cudaMemcpyKind kind) {
  // Within one row only (the deprecated call; rows are padded in phos).
  return ArrayToArray(dst, wOffsetDst, hOffsetDst, src, wOffsetSrc, hOffsetSrc, count, 1, kind, false);
}
PHOS_EXPORT cudaError_t cudaMemcpyArrayToArray_ptds(cudaArray_t dst, size_t wOffsetDst, size_t hOffsetDst,
                                                    cudaArray_const_t src, size_t wOffsetSrc, size_t hOffsetSrc,
                                                    size_t count, cudaMemcpyKind kind) {
  return ArrayToArray(dst, wOffsetDst, hOffsetDst, src, wOffsetSrc, hOffsetSrc, count, 1, kind, true);
}

// ---------------------------------------------------------------- 3D copies and memsets

PHOS_EXPORT cudaError_t cudaMemcpy3D(const cudaMemcpy3DParms* p) { return Memcpy3D(p, nullptr, false, false); }
PHOS_EXPORT cudaError_t cudaMemcpy3D_ptds(const cudaMemcpy3DParms* p) { return Memcpy3D(p, nullptr, false, true); }
PHOS_EXPORT cudaError_t cudaMemcpy3DAsync(const cudaMemcpy3DParms* p, cudaStream_t stream) {
  return Memcpy3D(p, stream, true, false);
}
PHOS_EXPORT cudaError_t cudaMemcpy3DAsync_ptsz(const cudaMemcpy3DParms* p, cudaStream_t stream) {
  return Memcpy3D(p, stream, true, true);
}

PHOS_EXPORT cudaError_t cudaMalloc3D(cudaPitchedPtr* out, cudaExtent extent) {
  if (out == nullptr) return SetError(cudaErrorInvalidValue);
  const size_t rows = extent.height * extent.depth;
  if (extent.depth != 0 && rows / extent.depth != extent.height) return SetError(cudaErrorMemoryAllocation);
  void* p = nullptr;
  size_t pitch = 0;
  cudaError_t e = cudaMallocPitch(&p, &pitch, extent.width, rows);
  if (e == cudaSuccess) *out = make_cudaPitchedPtr(p, pitch, extent.width, extent.height);
  return e;
}

static cudaError_t Memset3D(cudaPitchedPtr p, int value, cudaExtent e, cudaStream_t stream, bool async,
                            bool per_thread) {
  if (e.width == 0 || e.height == 0 || e.depth == 0) return cudaSuccess;
  if (e.width > p.pitch && e.height * e.depth > 1) return SetError(cudaErrorInvalidValue);
  auto set2d = [&](char* at, size_t rows) {
    if (async) {
      return per_thread ? cudaMemset2DAsync_ptsz(at, p.pitch, value, e.width, rows, stream)
                        : cudaMemset2DAsync(at, p.pitch, value, e.width, rows, stream);
    }
    return per_thread ? cudaMemset2D_ptds(at, p.pitch, value, e.width, rows)
                      : cudaMemset2D(at, p.pitch, value, e.width, rows);
  };
  char* base = static_cast<char*>(p.ptr);
  if (e.depth == 1 || p.ysize == e.height) return set2d(base, e.height * e.depth);
  for (size_t z = 0; z < e.depth; ++z) {
    if (cudaError_t r = set2d(base + z * p.pitch * p.ysize, e.height); r != cudaSuccess) return r;
  }
  return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaMemset3D(cudaPitchedPtr p, int value, cudaExtent extent) {
  return Memset3D(p, value, extent, nullptr, false, false);
}
PHOS_EXPORT cudaError_t cudaMemset3D_ptds(cudaPitchedPtr p, int value, cudaExtent extent) {
  return Memset3D(p, value, extent, nullptr, false, true);
}
PHOS_EXPORT cudaError_t cudaMemset3DAsync(cudaPitchedPtr p, int value, cudaExtent extent, cudaStream_t stream) {
  return Memset3D(p, value, extent, stream, true, false);
}
PHOS_EXPORT cudaError_t cudaMemset3DAsync_ptsz(cudaPitchedPtr p, int value, cudaExtent extent, cudaStream_t stream) {
  return Memset3D(p, value, extent, stream, true, true);
}
