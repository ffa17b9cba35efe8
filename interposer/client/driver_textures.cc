// The driver API's CUDA arrays, array copies and texture/surface objects
// (docs/interposer.md "CUDA arrays, textures and surfaces"): each converts
// its descriptor into the runtime's and runs the runtime's code (arrays.h,
// textures.h). A CUarray is the same ArrayRec as a cudaArray_t, as in CUDA,
// where the two are interchangeable. The 2D and 3D copies have their
// per-thread-stream (_ptds/_ptsz) forms; the 1D array copies' stay refused
// stubs.
#include <cuda.h>

#include <cstring>

#include "interposer/client/arrays.h"
#include "interposer/client/driver_internal.h"
#include "interposer/client/textures.h"

namespace phos::client {

// CUarray_format + channel count -> the runtime's channel description.
CUresult ChannelDescOf(CUarray_format f, unsigned channels, cudaChannelFormatDesc* out) {
  int bits = 0;
  cudaChannelFormatKind kind = cudaChannelFormatKindFloat;
  switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8: bits = 8; kind = cudaChannelFormatKindUnsigned; break;
    case CU_AD_FORMAT_UNSIGNED_INT16: bits = 16; kind = cudaChannelFormatKindUnsigned; break;
    case CU_AD_FORMAT_UNSIGNED_INT32: bits = 32; kind = cudaChannelFormatKindUnsigned; break;
    case CU_AD_FORMAT_SIGNED_INT8: bits = 8; kind = cudaChannelFormatKindSigned; break;
    case CU_AD_FORMAT_SIGNED_INT16: bits = 16; kind = cudaChannelFormatKindSigned; break;
    case CU_AD_FORMAT_SIGNED_INT32: bits = 32; kind = cudaChannelFormatKindSigned; break;
    case CU_AD_FORMAT_HALF: bits = 16; break;
    case CU_AD_FORMAT_FLOAT: bits = 32; break;
    default:
      SayOnce("CUDA arrays of CUarray_format " + std::to_string(static_cast<int>(f)) + " are not supported");
      return CUDA_ERROR_NOT_SUPPORTED;
  }
  if (channels != 1 && channels != 2 && channels != 4) return CUDA_ERROR_INVALID_VALUE;
  *out = cudaChannelFormatDesc{bits, channels > 1 ? bits : 0, channels > 2 ? bits : 0, channels > 2 ? bits : 0, kind};
  return CUDA_SUCCESS;
}

namespace {

CUarray_format FormatOf(const ArrayRec& a) {
  switch (a.kind) {
    case wire::ChannelKind::kUnsigned:
      return a.channel_bytes == 1 ? CU_AD_FORMAT_UNSIGNED_INT8
                                  : a.channel_bytes == 2 ? CU_AD_FORMAT_UNSIGNED_INT16 : CU_AD_FORMAT_UNSIGNED_INT32;
    case wire::ChannelKind::kSigned:
      return a.channel_bytes == 1 ? CU_AD_FORMAT_SIGNED_INT8
                                  : a.channel_bytes == 2 ? CU_AD_FORMAT_SIGNED_INT16 : CU_AD_FORMAT_SIGNED_INT32;
    case wire::ChannelKind::kFloat:
      break;
  }
  return a.channel_bytes == 2 ? CU_AD_FORMAT_HALF : CU_AD_FORMAT_FLOAT;
}

// One side of a driver copy as a CopySide; x in bytes, y rows, z slices.
CUresult SideOf(CUmemorytype type, const void* host, CUdeviceptr device, CUarray array, size_t pitch, size_t x,
                size_t y, size_t z, size_t slice_rows, CopySide* out) {
  switch (type) {
    case CU_MEMORYTYPE_ARRAY: {
      const ArrayRec* a = FindArray(array);
      if (a == nullptr) return CUDA_ERROR_INVALID_HANDLE;
      *out = {a->At(0, y, z) + x, a->pitch, a->slice_pitch, true};
      return CUDA_SUCCESS;
    }
    case CU_MEMORYTYPE_HOST: case CU_MEMORYTYPE_DEVICE: case CU_MEMORYTYPE_UNIFIED: {
      const uintptr_t base = type == CU_MEMORYTYPE_HOST ? reinterpret_cast<uintptr_t>(host) : device;
      const size_t slice = pitch * slice_rows;
      const bool is_device = type == CU_MEMORYTYPE_DEVICE ||
                             (type == CU_MEMORYTYPE_UNIFIED && IsDevicePtr(reinterpret_cast<void*>(base)));
      *out = {base + z * slice + y * pitch + x, pitch, slice, is_device};
      return CUDA_SUCCESS;
    }
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult Copy2DOf(const CUDA_MEMCPY2D* p, CUstream stream, bool async, bool per_thread = false) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CopySide src, dst;
  if (CUresult r = SideOf(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcArray, p->srcPitch, p->srcXInBytes,
                          p->srcY, 0, p->Height, &src);
      r != CUDA_SUCCESS) {
    return r;
  }
  if (CUresult r = SideOf(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstArray, p->dstPitch, p->dstXInBytes,
                          p->dstY, 0, p->Height, &dst);
      r != CUDA_SUCCESS) {
    return r;
  }
  return ToCu(
      Copy3D(dst, src, p->WidthInBytes, p->Height, 1, reinterpret_cast<cudaStream_t>(stream), async, per_thread));
}

}  // namespace

CUresult DriverCopy3D(const CUDA_MEMCPY3D* p, CUstream stream, bool async, bool per_thread) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  if (p == nullptr || p->srcLOD != 0 || p->dstLOD != 0) return CUDA_ERROR_INVALID_VALUE;
  CopySide src, dst;
  if (CUresult r = SideOf(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcArray, p->srcPitch, p->srcXInBytes,
                          p->srcY, p->srcZ, p->srcHeight, &src);
      r != CUDA_SUCCESS) {
    return r;
  }
  if (CUresult r = SideOf(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstArray, p->dstPitch, p->dstXInBytes,
                          p->dstY, p->dstZ, p->dstHeight, &dst);
      r != CUDA_SUCCESS) {
    return r;
  }
  return ToCu(Copy3D(dst, src, p->WidthInBytes, p->Height, p->Depth, reinterpret_cast<cudaStream_t>(stream), async,
                     per_thread));
}

namespace {

// A driver resource descriptor as the runtime's.
CUresult RuntimeResource(const CUDA_RESOURCE_DESC& r, cudaResourceDesc* out) {
  std::memset(out, 0, sizeof(*out));
  if (r.flags != 0) return CUDA_ERROR_INVALID_VALUE;
  switch (r.resType) {
    case CU_RESOURCE_TYPE_ARRAY:
      out->resType = cudaResourceTypeArray;
      out->res.array.array = reinterpret_cast<cudaArray_t>(r.res.array.hArray);
      return CUDA_SUCCESS;
    case CU_RESOURCE_TYPE_LINEAR:
      out->resType = cudaResourceTypeLinear;
      out->res.linear.devPtr = reinterpret_cast<void*>(r.res.linear.devPtr);
      out->res.linear.sizeInBytes = r.res.linear.sizeInBytes;
      return ChannelDescOf(r.res.linear.format, r.res.linear.numChannels, &out->res.linear.desc);
    case CU_RESOURCE_TYPE_PITCH2D:
      out->resType = cudaResourceTypePitch2D;
      out->res.pitch2D.devPtr = reinterpret_cast<void*>(r.res.pitch2D.devPtr);
      out->res.pitch2D.width = r.res.pitch2D.width;
      out->res.pitch2D.height = r.res.pitch2D.height;
      out->res.pitch2D.pitchInBytes = r.res.pitch2D.pitchInBytes;
      return ChannelDescOf(r.res.pitch2D.format, r.res.pitch2D.numChannels, &out->res.pitch2D.desc);
    case CU_RESOURCE_TYPE_MIPMAPPED_ARRAY:
      out->resType = cudaResourceTypeMipmappedArray;
      out->res.mipmap.mipmap = reinterpret_cast<cudaMipmappedArray_t>(r.res.mipmap.hMipmappedArray);
      return CUDA_SUCCESS;
  }
  return CUDA_ERROR_INVALID_VALUE;
}

}  // namespace

}  // namespace phos::client

using namespace phos::client;  // NOLINT
namespace wire = phos::wire;

PHOS_EXPORT CUresult cuArray3DCreate_v2(CUarray* out, const CUDA_ARRAY3D_DESCRIPTOR* d) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  if (out == nullptr || d == nullptr) return CUDA_ERROR_INVALID_VALUE;
  cudaChannelFormatDesc desc;
  if (CUresult r = ChannelDescOf(d->Format, d->NumChannels, &desc); r != CUDA_SUCCESS) return r;
  // CUDA_ARRAY3D_* flags share the runtime's cudaArray* numbers.
  cudaArray_t a = nullptr;
  CUresult r = ToCu(CreateArray(desc, d->Width, d->Height, d->Depth, d->Flags, &a));
  if (r == CUDA_SUCCESS) *out = reinterpret_cast<CUarray>(a);
  return r;
}

PHOS_EXPORT CUresult cuArrayCreate_v2(CUarray* out, const CUDA_ARRAY_DESCRIPTOR* d) {
  if (d == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUDA_ARRAY3D_DESCRIPTOR d3{};
  d3.Width = d->Width;
  d3.Height = d->Height;
  d3.Format = d->Format;
  d3.NumChannels = d->NumChannels;
  return cuArray3DCreate_v2(out, &d3);
}

PHOS_EXPORT CUresult cuArrayDestroy(CUarray a) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  if (FindArray(a) == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  return ToCu(DestroyArray(reinterpret_cast<cudaArray_t>(a)));
}

PHOS_EXPORT CUresult cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR* out, CUarray array) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  const ArrayRec* a = FindArray(array);
  if (a == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *out = CUDA_ARRAY3D_DESCRIPTOR{a->width, a->height, a->depth, FormatOf(*a), a->channels, a->flags};
  return CUDA_SUCCESS;
}

PHOS_EXPORT CUresult cuArrayGetDescriptor_v2(CUDA_ARRAY_DESCRIPTOR* out, CUarray array) {
  CUDA_ARRAY3D_DESCRIPTOR d3;
  if (CUresult r = cuArray3DGetDescriptor_v2(&d3, array); r != CUDA_SUCCESS) return r;
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *out = CUDA_ARRAY_DESCRIPTOR{d3.Width, d3.Height, d3.Format, d3.NumChannels};
  return CUDA_SUCCESS;
}

PHOS_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height,
                                        unsigned int element_bytes) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  if (dptr == nullptr || pitch == nullptr || (element_bytes != 4 && element_bytes != 8 && element_bytes != 16)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  void* p = nullptr;
  CUresult r = ToCu(cudaMallocPitch(&p, pitch, width, height));
  if (r == CUDA_SUCCESS) *dptr = reinterpret_cast<CUdeviceptr>(p);
  return r;
}

PHOS_EXPORT CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D* p) { return Copy2DOf(p, nullptr, false); }
PHOS_EXPORT CUresult cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D* p) { return Copy2DOf(p, nullptr, false); }
PHOS_EXPORT CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D* p, CUstream s) { return Copy2DOf(p, s, true); }
PHOS_EXPORT CUresult cuMemcpy3D_v2(const CUDA_MEMCPY3D* p) { return DriverCopy3D(p, nullptr, false); }
PHOS_EXPORT CUresult cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D* p, CUstream s) { return DriverCopy3D(p, s, true); }
PHOS_EXPORT CUresult cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D* p) { return Copy2DOf(p, nullptr, false, true); }
PHOS_EXPORT CUresult cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D* p) { return Copy2DOf(p, nullptr, false, true); }
PHOS_EXPORT CUresult cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D* p, CUstream s) { return Copy2DOf(p, s, true, true); }
PHOS_EXPORT CUresult cuMemcpy3D_v2_ptds(const CUDA_MEMCPY3D* p) { return DriverCopy3D(p, nullptr, false, true); }
PHOS_EXPORT CUresult cuMemcpy3DAsync_v2_ptsz(const CUDA_MEMCPY3D* p, CUstream s) {
  return DriverCopy3D(p, s, true, true);
}

// The 1D array copies: bytes from byte `offset` of the array's first row.
static CUresult ArrayRowCopy(CUarray array, size_t offset, bool to_array, CUmemorytype other_type, const void* host,
                             CUdeviceptr device, size_t n, CUstream stream, bool async) {
  CUDA_MEMCPY2D p{};
  p.WidthInBytes = n;
  p.Height = 1;
  if (to_array) {
    p.dstMemoryType = CU_MEMORYTYPE_ARRAY;
    p.dstArray = array;
    p.dstXInBytes = offset;
    p.srcMemoryType = other_type;
    p.srcHost = host;
    p.srcDevice = device;
    p.srcPitch = n;
  } else {
    p.srcMemoryType = CU_MEMORYTYPE_ARRAY;
    p.srcArray = array;
    p.srcXInBytes = offset;
    p.dstMemoryType = other_type;
    p.dstHost = const_cast<void*>(host);
    p.dstDevice = device;
    p.dstPitch = n;
  }
  const ArrayRec* a = FindArray(array);
  if (a == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (offset > a->width * a->texel_bytes() || n > a->width * a->texel_bytes() - offset) {
    SayOnce("cuMemcpy*A* copies that run past an array's first row are not supported");
    return CUDA_ERROR_INVALID_VALUE;
  }
  return Copy2DOf(&p, stream, async);
}

PHOS_EXPORT CUresult cuMemcpyHtoA_v2(CUarray dst, size_t offset, const void* src, size_t n) {
  return ArrayRowCopy(dst, offset, true, CU_MEMORYTYPE_HOST, src, 0, n, nullptr, false);
}
PHOS_EXPORT CUresult cuMemcpyAtoH_v2(void* dst, CUarray src, size_t offset, size_t n) {
  return ArrayRowCopy(src, offset, false, CU_MEMORYTYPE_HOST, dst, 0, n, nullptr, false);
}
PHOS_EXPORT CUresult cuMemcpyHtoAAsync_v2(CUarray dst, size_t offset, const void* src, size_t n, CUstream s) {
  return ArrayRowCopy(dst, offset, true, CU_MEMORYTYPE_HOST, src, 0, n, s, true);
}
PHOS_EXPORT CUresult cuMemcpyAtoHAsync_v2(void* dst, CUarray src, size_t offset, size_t n, CUstream s) {
  return ArrayRowCopy(src, offset, false, CU_MEMORYTYPE_HOST, dst, 0, n, s, true);
}
PHOS_EXPORT CUresult cuMemcpyDtoA_v2(CUarray dst, size_t offset, CUdeviceptr src, size_t n) {
  return ArrayRowCopy(dst, offset, true, CU_MEMORYTYPE_DEVICE, nullptr, src, n, nullptr, false);
}
PHOS_EXPORT CUresult cuMemcpyAtoD_v2(CUdeviceptr dst, CUarray src, size_t offset, size_t n) {
  return ArrayRowCopy(src, offset, false, CU_MEMORYTYPE_DEVICE, nullptr, dst, n, nullptr, false);
}

PHOS_EXPORT CUresult cuTexObjectCreate(CUtexObject* out, const CUDA_RESOURCE_DESC* res, const CUDA_TEXTURE_DESC* tex,
                                       const CUDA_RESOURCE_VIEW_DESC* view) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  if (out == nullptr || res == nullptr || tex == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (view != nullptr) {
    SayOnce("texture objects with a resource view (CUDA_RESOURCE_VIEW_DESC) are not supported");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  cudaResourceDesc rr;
  if (CUresult r = RuntimeResource(*res, &rr); r != CUDA_SUCCESS) return r;
  wire::TextureDesc d;
  if (CUresult r = ToCu(ResolveResource(rr, false, &d)); r != CUDA_SUCCESS) return r;
  cudaTextureDesc t{};
  for (int i = 0; i < 3; ++i) t.addressMode[i] = static_cast<cudaTextureAddressMode>(tex->addressMode[i]);
  t.filterMode = tex->filterMode == CU_TR_FILTER_MODE_LINEAR ? cudaFilterModeLinear : cudaFilterModePoint;
  // The driver reads 8- and 16-bit integer texels as normalized floats
  // unless CU_TRSF_READ_AS_INTEGER; 32-bit ones always as integers.
  const bool small_int = d.kind != wire::ChannelKind::kFloat && d.channel_bytes < 4;
  t.readMode = small_int && !(tex->flags & CU_TRSF_READ_AS_INTEGER) ? cudaReadModeNormalizedFloat
                                                                     : cudaReadModeElementType;
  t.normalizedCoords = (tex->flags & CU_TRSF_NORMALIZED_COORDINATES) ? 1 : 0;
  t.sRGB = (tex->flags & CU_TRSF_SRGB) ? 1 : 0;
  std::memcpy(t.borderColor, tex->borderColor, sizeof(t.borderColor));
  t.mipmapFilterMode = tex->mipmapFilterMode == CU_TR_FILTER_MODE_LINEAR ? cudaFilterModeLinear : cudaFilterModePoint;
  t.mipmapLevelBias = tex->mipmapLevelBias;
  t.minMipmapLevelClamp = tex->minMipmapLevelClamp;
  t.maxMipmapLevelClamp = tex->maxMipmapLevelClamp;
  if (CUresult r = ToCu(ApplyTextureDesc(t, &d)); r != CUDA_SUCCESS) return r;
  uint64_t h = 0;
  if (CUresult r = ToCu(CreateObject(d, false, &h)); r != CUDA_SUCCESS) return r;
  *out = h;
  return CUDA_SUCCESS;
}

PHOS_EXPORT CUresult cuTexObjectDestroy(CUtexObject h) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  return ToCu(DestroyObject(h, false));
}

PHOS_EXPORT CUresult cuSurfObjectCreate(CUsurfObject* out, const CUDA_RESOURCE_DESC* res) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  if (out == nullptr || res == nullptr) return CUDA_ERROR_INVALID_VALUE;
  cudaResourceDesc rr;
  if (CUresult r = RuntimeResource(*res, &rr); r != CUDA_SUCCESS) return r;
  wire::TextureDesc d;
  if (CUresult r = ToCu(ResolveResource(rr, true, &d)); r != CUDA_SUCCESS) return r;
  uint64_t h = 0;
  if (CUresult r = ToCu(CreateObject(d, true, &h)); r != CUDA_SUCCESS) return r;
  *out = h;
  return CUDA_SUCCESS;
}

PHOS_EXPORT CUresult cuSurfObjectDestroy(CUsurfObject h) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  return ToCu(DestroyObject(h, true));
}
