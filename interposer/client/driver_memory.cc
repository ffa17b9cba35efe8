// Driver API memory: allocation, copies and memsets. Allocation, pinned
// memory and copies call the runtime's exports (one implementation of each
// wire op; cuMemAlloc'd ranges join the runtime's allocation map, so
// cuMemcpy's unified addressing and cudaMemcpyDefault classify them). The
// D16/D32 memsets, which the runtime has no call for, send kMemset(Async)
// with the element size.
#include <cstring>

#include "interposer/client/connection.h"
#include "interposer/client/driver_internal.h"
#include "interposer/client/graphs.h"
#include "interposer/client/handles.h"

namespace phos::client {
namespace {

void* Ptr(CUdeviceptr p) { return reinterpret_cast<void*>(static_cast<uintptr_t>(p)); }
cudaStream_t Stream(CUstream s) { return reinterpret_cast<cudaStream_t>(s); }

CUresult Copy(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  return ToCu(cudaMemcpy(dst, src, n, kind));
}
CUresult CopyPtds(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  return ToCu(cudaMemcpy_ptds(dst, src, n, kind));
}
CUresult CopyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind kind, CUstream s) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  return ToCu(cudaMemcpyAsync(dst, src, n, kind, Stream(s)));
}
CUresult CopyAsyncPtsz(void* dst, const void* src, size_t n, cudaMemcpyKind kind, CUstream s) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  return ToCu(cudaMemcpyAsync_ptsz(dst, src, n, kind, Stream(s)));
}

// `count` elements of `element_size` bytes; synchronous memsets are called
// (their error comes back), asynchronous ones posted.
CUresult Memset(CUdeviceptr dst, uint32_t value, size_t count, uint32_t element_size, const void* stream, bool sync) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  if (count == 0) return CUDA_SUCCESS;
  if (dst % element_size != 0) return CUDA_ERROR_INVALID_VALUE;  // the driver requires aligned D16/D32 targets
  const uint32_t id = StreamIdOf(stream);
  if (sync) {
    cudaError_t refused = cudaSuccess;
    if (RefuseInCapture(id, "a synchronous memset", &refused)) return ToCu(refused);
    const wire::MemsetRequest req{dst, count, value, element_size};
    return ToCu(Connection::Get().Call(wire::op::kMemset, id, std::as_bytes(std::span<const wire::MemsetRequest>(&req, 1))));
  }
  return ToCu(SubmitMemset(Ptr(dst), value, count, element_size, id));
}

// 2D: `height` rows of `width` elements, `pitch` bytes apart (pitch and
// the address aligned to the element, as the driver requires).
CUresult Memset2D(CUdeviceptr dst, size_t pitch, uint32_t value, uint32_t element_size, size_t width, size_t height,
                  const void* stream, bool sync) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  if (dst % element_size != 0 || pitch % element_size != 0 || width > SIZE_MAX / element_size) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return ToCu(SubmitMemset2D(Ptr(dst), pitch, value, element_size, width * element_size, height, StreamIdOf(stream),
                             sync));
}

// The per-thread default stream, for the _ptds variants of synchronous calls.
const void* PerThread() { return CU_STREAM_PER_THREAD; }
// In per-thread mode (_ptsz) the null stream is the per-thread default stream.
const void* PerThreadIfNull(CUstream s) { return s != nullptr ? static_cast<const void*>(s) : PerThread(); }

}  // namespace

cudaError_t SubmitMemset(void* dst, unsigned value, size_t count, unsigned element_size, uint32_t stream) {
  if (count == 0) return cudaSuccess;
  cudaError_t captured = cudaSuccess;
  if (MaybeCapture(stream, cudaGraphNodeTypeMemset,
                   [=](uint32_t s) { return SubmitMemset(dst, value, count, element_size, s); }, &captured)) {
    return captured == cudaSuccess ? cudaSuccess : SetError(captured);
  }
  if (reinterpret_cast<uintptr_t>(dst) % element_size != 0) return SetError(cudaErrorInvalidValue);
  const wire::MemsetRequest req{reinterpret_cast<uint64_t>(dst), count, value, element_size};
  return Finish(Connection::Get().Post(wire::op::kMemsetAsync, stream,
                                       std::as_bytes(std::span<const wire::MemsetRequest>(&req, 1))));
}

}  // namespace phos::client

using namespace phos::client;  // NOLINT

// ---------------------------------------------------------------- allocation

PHOS_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  if (dptr == nullptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  void* p = nullptr;
  CUresult r = ToCu(cudaMalloc(&p, bytesize));
  if (r == CUDA_SUCCESS) *dptr = reinterpret_cast<CUdeviceptr>(p);
  return r;
}

// Refused with its reason (host_memory.cc); scripts/compat_table.py lists it refused.
PHOS_EXPORT CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
  (void)dptr;
  (void)bytesize;
  (void)flags;
  SayOnce(ManagedMemoryRefusal("cuMemAllocManaged"));
  return CUDA_ERROR_NOT_SUPPORTED;
}

PHOS_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  // Freeing 0 does nothing and succeeds, as cudaFree(nullptr): the CUDA
  // runtime that libraries link statically (libcurand's, CUDA 13.0) calls
  // cuMemFree_v2(0) when it sets up its context and gives up on an error —
  // cuRAND's curandCreateGenerator failed with INITIALIZATION_FAILED here.
  if (dptr == 0) return CUDA_SUCCESS;
  return ToCu(cudaFree(Ptr(dptr)));
}

PHOS_EXPORT CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total_bytes) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  if (free_bytes == nullptr || total_bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return ToCu(cudaMemGetInfo(free_bytes, total_bytes));
}

PHOS_EXPORT CUresult cuMemAllocHost_v2(void** pp, size_t bytesize) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  if (pp == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return ToCu(cudaMallocHost(pp, bytesize));
}

PHOS_EXPORT CUresult cuMemHostAlloc(void** pp, size_t bytesize, unsigned int Flags) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  if (pp == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return ToCu(cudaHostAlloc(pp, bytesize, Flags));  // CU_MEMHOSTALLOC_* == cudaHostAlloc* values
}

PHOS_EXPORT CUresult cuMemFreeHost(void* p) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  return ToCu(cudaFreeHost(p));
}

// Page-locking the app's own memory (numba's cuda.pinned uses it): the
// runtime's cudaHostRegister family, whose flag values equal the driver's
// CU_MEMHOSTREGISTER_*. Registered memory has no device alias under phos
// (cuMemHostGetDevicePointer answers NOT_SUPPORTED for it, as
// cudaHostGetDevicePointer); cuMemHostAlloc / cuMemAllocHost memory has one
// where phosd mapped its segment for kernels (docs/interposer.md "Mapped
// pinned memory").
static_assert(CU_MEMHOSTREGISTER_PORTABLE == cudaHostRegisterPortable &&
              CU_MEMHOSTREGISTER_DEVICEMAP == cudaHostRegisterMapped &&
              CU_MEMHOSTREGISTER_IOMEMORY == cudaHostRegisterIoMemory &&
              CU_MEMHOSTREGISTER_READ_ONLY == cudaHostRegisterReadOnly);
PHOS_EXPORT CUresult cuMemHostRegister_v2(void* p, size_t bytesize, unsigned int Flags) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  return ToCu(cudaHostRegister(p, bytesize, Flags));
}

PHOS_EXPORT CUresult cuMemHostUnregister(void* p) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  return ToCu(cudaHostUnregister(p));
}

PHOS_EXPORT CUresult cuMemHostGetFlags(unsigned int* pFlags, void* p) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  return ToCu(cudaHostGetFlags(pFlags, p));
}

PHOS_EXPORT CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr* pdptr, void* p, unsigned int Flags) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  if (pdptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  void* d = nullptr;
  CUresult r = ToCu(cudaHostGetDevicePointer(&d, p, Flags));
  if (r == CUDA_SUCCESS) *pdptr = reinterpret_cast<CUdeviceptr>(d);
  return r;
}

// ---------------------------------------------------------------- copies

PHOS_EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) {
  return Copy(Ptr(dst), src, n, cudaMemcpyHostToDevice);
}
PHOS_EXPORT CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) {
  return Copy(dst, Ptr(src), n, cudaMemcpyDeviceToHost);
}
PHOS_EXPORT CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return Copy(Ptr(dst), Ptr(src), n, cudaMemcpyDeviceToDevice);
}
PHOS_EXPORT CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return Copy(Ptr(dst), Ptr(src), n, cudaMemcpyDefault);
}
PHOS_EXPORT CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void* src, size_t n) {
  return CopyPtds(Ptr(dst), src, n, cudaMemcpyHostToDevice);
}
PHOS_EXPORT CUresult cuMemcpyDtoH_v2_ptds(void* dst, CUdeviceptr src, size_t n) {
  return CopyPtds(dst, Ptr(src), n, cudaMemcpyDeviceToHost);
}
PHOS_EXPORT CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return CopyPtds(Ptr(dst), Ptr(src), n, cudaMemcpyDeviceToDevice);
}
PHOS_EXPORT CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return CopyPtds(Ptr(dst), Ptr(src), n, cudaMemcpyDefault);
}

PHOS_EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, CUstream s) {
  return CopyAsync(Ptr(dst), src, n, cudaMemcpyHostToDevice, s);
}
PHOS_EXPORT CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, CUstream s) {
  return CopyAsync(dst, Ptr(src), n, cudaMemcpyDeviceToHost, s);
}
PHOS_EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  return CopyAsync(Ptr(dst), Ptr(src), n, cudaMemcpyDeviceToDevice, s);
}
PHOS_EXPORT CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  return CopyAsync(Ptr(dst), Ptr(src), n, cudaMemcpyDefault, s);
}
PHOS_EXPORT CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void* src, size_t n, CUstream s) {
  return CopyAsyncPtsz(Ptr(dst), src, n, cudaMemcpyHostToDevice, s);
}
PHOS_EXPORT CUresult cuMemcpyDtoHAsync_v2_ptsz(void* dst, CUdeviceptr src, size_t n, CUstream s) {
  return CopyAsyncPtsz(dst, Ptr(src), n, cudaMemcpyDeviceToHost, s);
}
PHOS_EXPORT CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  return CopyAsyncPtsz(Ptr(dst), Ptr(src), n, cudaMemcpyDeviceToDevice, s);
}
PHOS_EXPORT CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  return CopyAsyncPtsz(Ptr(dst), Ptr(src), n, cudaMemcpyDefault, s);
}

// ---------------------------------------------------------------- peer copies
// Between contexts of two GPUs (docs/interposer.md "Several GPUs in one
// process"): unified addresses say where each side lives, so the copy is
// an ordinary device-to-device one; the contexts must be live.

namespace {
CUresult CheckPeerContexts(CUcontext dst, CUcontext src) {
  if (CUresult r = CheckContextHandle(dst); r != CUDA_SUCCESS) return r;
  return CheckContextHandle(src);
}
}  // namespace

PHOS_EXPORT CUresult cuMemcpyPeer(CUdeviceptr dst, CUcontext dstContext, CUdeviceptr src, CUcontext srcContext,
                                  size_t n) {
  if (CUresult r = CheckPeerContexts(dstContext, srcContext); r != CUDA_SUCCESS) return r;
  return Copy(Ptr(dst), Ptr(src), n, cudaMemcpyDeviceToDevice);
}
PHOS_EXPORT CUresult cuMemcpyPeer_ptds(CUdeviceptr dst, CUcontext dstContext, CUdeviceptr src, CUcontext srcContext,
                                       size_t n) {
  if (CUresult r = CheckPeerContexts(dstContext, srcContext); r != CUDA_SUCCESS) return r;
  return CopyPtds(Ptr(dst), Ptr(src), n, cudaMemcpyDeviceToDevice);
}
PHOS_EXPORT CUresult cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dstContext, CUdeviceptr src, CUcontext srcContext,
                                       size_t n, CUstream s) {
  if (CUresult r = CheckPeerContexts(dstContext, srcContext); r != CUDA_SUCCESS) return r;
  return CopyAsync(Ptr(dst), Ptr(src), n, cudaMemcpyDeviceToDevice, s);
}
PHOS_EXPORT CUresult cuMemcpyPeerAsync_ptsz(CUdeviceptr dst, CUcontext dstContext, CUdeviceptr src,
                                            CUcontext srcContext, size_t n, CUstream s) {
  if (CUresult r = CheckPeerContexts(dstContext, srcContext); r != CUDA_SUCCESS) return r;
  return CopyAsyncPtsz(Ptr(dst), Ptr(src), n, cudaMemcpyDeviceToDevice, s);
}

// ---------------------------------------------------------------- memsets

PHOS_EXPORT CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char v, size_t n) {
  return Memset(dst, v, n, 1, nullptr, true);
}
PHOS_EXPORT CUresult cuMemsetD16_v2(CUdeviceptr dst, unsigned short v, size_t n) {
  return Memset(dst, v, n, 2, nullptr, true);
}
PHOS_EXPORT CUresult cuMemsetD32_v2(CUdeviceptr dst, unsigned int v, size_t n) {
  return Memset(dst, v, n, 4, nullptr, true);
}
PHOS_EXPORT CUresult cuMemsetD8_v2_ptds(CUdeviceptr dst, unsigned char v, size_t n) {
  return Memset(dst, v, n, 1, PerThread(), true);
}
PHOS_EXPORT CUresult cuMemsetD16_v2_ptds(CUdeviceptr dst, unsigned short v, size_t n) {
  return Memset(dst, v, n, 2, PerThread(), true);
}
PHOS_EXPORT CUresult cuMemsetD32_v2_ptds(CUdeviceptr dst, unsigned int v, size_t n) {
  return Memset(dst, v, n, 4, PerThread(), true);
}
PHOS_EXPORT CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, CUstream s) {
  return Memset(dst, v, n, 1, s, false);
}
PHOS_EXPORT CUresult cuMemsetD16Async(CUdeviceptr dst, unsigned short v, size_t n, CUstream s) {
  return Memset(dst, v, n, 2, s, false);
}
PHOS_EXPORT CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned int v, size_t n, CUstream s) {
  return Memset(dst, v, n, 4, s, false);
}
PHOS_EXPORT CUresult cuMemsetD8Async_ptsz(CUdeviceptr dst, unsigned char v, size_t n, CUstream s) {
  return Memset(dst, v, n, 1, PerThreadIfNull(s), false);
}
PHOS_EXPORT CUresult cuMemsetD16Async_ptsz(CUdeviceptr dst, unsigned short v, size_t n, CUstream s) {
  return Memset(dst, v, n, 2, PerThreadIfNull(s), false);
}
PHOS_EXPORT CUresult cuMemsetD32Async_ptsz(CUdeviceptr dst, unsigned int v, size_t n, CUstream s) {
  return Memset(dst, v, n, 4, PerThreadIfNull(s), false);
}

PHOS_EXPORT CUresult cuMemsetD2D8_v2(CUdeviceptr dst, size_t pitch, unsigned char v, size_t w, size_t h) {
  return Memset2D(dst, pitch, v, 1, w, h, nullptr, true);
}
PHOS_EXPORT CUresult cuMemsetD2D16_v2(CUdeviceptr dst, size_t pitch, unsigned short v, size_t w, size_t h) {
  return Memset2D(dst, pitch, v, 2, w, h, nullptr, true);
}
PHOS_EXPORT CUresult cuMemsetD2D32_v2(CUdeviceptr dst, size_t pitch, unsigned int v, size_t w, size_t h) {
  return Memset2D(dst, pitch, v, 4, w, h, nullptr, true);
}
PHOS_EXPORT CUresult cuMemsetD2D8_v2_ptds(CUdeviceptr dst, size_t pitch, unsigned char v, size_t w, size_t h) {
  return Memset2D(dst, pitch, v, 1, w, h, PerThread(), true);
}
PHOS_EXPORT CUresult cuMemsetD2D16_v2_ptds(CUdeviceptr dst, size_t pitch, unsigned short v, size_t w, size_t h) {
  return Memset2D(dst, pitch, v, 2, w, h, PerThread(), true);
}
PHOS_EXPORT CUresult cuMemsetD2D32_v2_ptds(CUdeviceptr dst, size_t pitch, unsigned int v, size_t w, size_t h) {
  return Memset2D(dst, pitch, v, 4, w, h, PerThread(), true);
}
PHOS_EXPORT CUresult cuMemsetD2D8Async(CUdeviceptr dst, size_t pitch, unsigned char v, size_t w, size_t h, CUstream s) {
  return Memset2D(dst, pitch, v, 1, w, h, s, false);
}
PHOS_EXPORT CUresult cuMemsetD2D16Async(CUdeviceptr dst, size_t pitch, unsigned short v, size_t w, size_t h,
                                        CUstream s) {
  return Memset2D(dst, pitch, v, 2, w, h, s, false);
}
PHOS_EXPORT CUresult cuMemsetD2D32Async(CUdeviceptr dst, size_t pitch, unsigned int v, size_t w, size_t h, CUstream s) {
  return Memset2D(dst, pitch, v, 4, w, h, s, false);
}
PHOS_EXPORT CUresult cuMemsetD2D8Async_ptsz(CUdeviceptr dst, size_t pitch, unsigned char v, size_t w, size_t h,
                                            CUstream s) {
  return Memset2D(dst, pitch, v, 1, w, h, PerThreadIfNull(s), false);
}
PHOS_EXPORT CUresult cuMemsetD2D16Async_ptsz(CUdeviceptr dst, size_t pitch, unsigned short v, size_t w, size_t h,
                                             CUstream s) {
  return Memset2D(dst, pitch, v, 2, w, h, PerThreadIfNull(s), false);
}
PHOS_EXPORT CUresult cuMemsetD2D32Async_ptsz(CUdeviceptr dst, size_t pitch, unsigned int v, size_t w, size_t h,
                                             CUstream s) {
  return Memset2D(dst, pitch, v, 4, w, h, PerThreadIfNull(s), false);
}
