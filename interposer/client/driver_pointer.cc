// What the driver says about an address: cuPointerGetAttribute(s) and
// cuMemGetAddressRange_v2, from the app's own maps (the device allocations
// the runtime recorded, the pinned arena, cudaHostRegister'ed ranges), as
// cudaPointerGetAttributes answers. CuPy, numba and cuda.core ask these to
// classify the arrays they are handed.
//
// Attributes answered (the value types are cuda.h's):
//   CONTEXT (CUcontext: the calling thread's current context), MEMORY_TYPE
//   (unsigned: DEVICE or HOST), DEVICE_POINTER / HOST_POINTER (the address
//   itself for its own kind; INVALID_VALUE for the other, since phos offers
//   no mapped memory), BUFFER_ID (unsigned long long: the allocation's
//   start, unique while it lives), IS_MANAGED (bool: false), DEVICE_ORDINAL
//   (int: 0), RANGE_START_ADDR / RANGE_SIZE (the allocation), MAPPED (bool:
//   true for device memory).
// Any other attribute answers CUDA_ERROR_NOT_SUPPORTED and is named once.
#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <cstdio>

#include "interposer/client/client_internal.h"
#include "interposer/client/driver_internal.h"

namespace phos::client {
namespace {

enum class Kind { kNone, kDevice, kHost };

struct Where {
  Kind kind = Kind::kNone;
  uintptr_t base = 0;
  size_t bytes = 0;
};

Where Classify(CUdeviceptr ptr) {
  Where w;
  const void* p = reinterpret_cast<const void*>(ptr);
  if (ptr != 0 && FindDeviceBuffer(p, &w.base, &w.bytes)) {
    w.kind = Kind::kDevice;
    return w;
  }
  cudaPointerAttributes a{};
  if (ptr != 0 && cudaPointerGetAttributes(&a, p) == cudaSuccess && a.type == cudaMemoryTypeHost) {
    w.kind = Kind::kHost;
    w.base = ptr;  // the range of a host allocation is not tracked here
  }
  return w;
}

// The attribute ids already reported.
std::atomic<uint64_t> g_reported{0};

CUresult Unsupported(CUpointer_attribute a) {
  const unsigned id = static_cast<unsigned>(a);
  if (FirstTimeFor(g_reported, id)) {
    std::fprintf(stderr, "phos: pointer attribute %u is not supported by phos yet\n", id);
  }
  return CUDA_ERROR_NOT_SUPPORTED;
}

// One attribute of an address phos knows (w.kind != kNone).
CUresult Answer(const Where& w, CUpointer_attribute a, CUdeviceptr ptr, void* data) {
  const bool device = w.kind == Kind::kDevice;
  switch (a) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: {
      CUcontext ctx = nullptr;
      if (CUresult r = cuCtxGetCurrent(&ctx); r != CUDA_SUCCESS) return r;
      *static_cast<CUcontext*>(data) = ctx;
      return CUDA_SUCCESS;
    }
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      *static_cast<unsigned*>(data) = device ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
      if (!device) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<CUdeviceptr*>(data) = ptr;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
      if (device) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<void**>(data) = reinterpret_cast<void*>(ptr);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
      *static_cast<unsigned long long*>(data) = w.base;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
      *static_cast<bool*>(data) = false;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
      *static_cast<int*>(data) = 0;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
      if (!device) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<CUdeviceptr*>(data) = w.base;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
      if (!device) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<size_t*>(data) = w.bytes;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPED:
      *static_cast<bool*>(data) = device;
      return CUDA_SUCCESS;
    default:
      return Unsupported(a);
  }
}

}  // namespace
}  // namespace phos::client

using namespace phos::client;  // NOLINT

PHOS_EXPORT CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const Where w = Classify(ptr);
  if (w.kind == Kind::kNone) return CUDA_ERROR_INVALID_VALUE;  // not memory CUDA knows, as the driver answers
  return Answer(w, attribute, ptr, data);
}

// The plural form answers for any address: memory CUDA does not know gets
// memory type 0, ordinal -2 and zeros, and the call succeeds (as the
// driver's does).
PHOS_EXPORT CUresult cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute* attributes, void** data,
                                            CUdeviceptr ptr) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (numAttributes == 0 || attributes == nullptr || data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const Where w = Classify(ptr);
  for (unsigned i = 0; i < numAttributes; ++i) {
    if (data[i] == nullptr) continue;
    if (w.kind == Kind::kNone) {
      switch (attributes[i]) {
        case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: *static_cast<unsigned*>(data[i]) = 0; continue;
        case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *static_cast<int*>(data[i]) = -2; continue;
        case CU_POINTER_ATTRIBUTE_CONTEXT: *static_cast<CUcontext*>(data[i]) = nullptr; continue;
        case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
        case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *static_cast<CUdeviceptr*>(data[i]) = 0; continue;
        case CU_POINTER_ATTRIBUTE_HOST_POINTER: *static_cast<void**>(data[i]) = nullptr; continue;
        case CU_POINTER_ATTRIBUTE_BUFFER_ID: *static_cast<unsigned long long*>(data[i]) = 0; continue;
        case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *static_cast<size_t*>(data[i]) = 0; continue;
        case CU_POINTER_ATTRIBUTE_IS_MANAGED:
        case CU_POINTER_ATTRIBUTE_MAPPED: *static_cast<bool*>(data[i]) = false; continue;
        default: return Unsupported(attributes[i]);
      }
    }
    CUresult r = Answer(w, attributes[i], ptr, data[i]);
    // The plural form leaves an attribute that does not apply to this kind
    // of memory zeroed instead of failing the whole query.
    if (r == CUDA_ERROR_INVALID_VALUE) {
      if (attributes[i] == CU_POINTER_ATTRIBUTE_HOST_POINTER) *static_cast<void**>(data[i]) = nullptr;
      if (attributes[i] == CU_POINTER_ATTRIBUTE_DEVICE_POINTER || attributes[i] == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR)
        *static_cast<CUdeviceptr*>(data[i]) = 0;
      if (attributes[i] == CU_POINTER_ATTRIBUTE_RANGE_SIZE) *static_cast<size_t*>(data[i]) = 0;
      continue;
    }
    if (r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

PHOS_EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr* pbase, size_t* psize, CUdeviceptr dptr) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  const Where w = Classify(dptr);
  if (w.kind != Kind::kDevice) return CUDA_ERROR_NOT_FOUND;
  if (pbase) *pbase = w.base;
  if (psize) *psize = w.bytes;
  return CUDA_SUCCESS;
}
