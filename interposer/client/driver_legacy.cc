// The legacy unversioned driver symbols old binaries still link against
// (cuCtxCreate, cuCtxDestroy, cuStreamDestroy, ...), where their arguments
// are those of the current variant: each forwards to it. The ones taking
// 32-bit device pointers or sizes (CUdeviceptr_v1: cuMemAlloc,
// cuMemcpyHtoD, ...) stay stubs: phosd's device addresses do not fit.
//
// cuda.h declares these prototypes only in its own implementation view
// (__CUDA_API_VERSION_INTERNAL), so this file alone includes it that way
// (as the generated phos_api_stubs_internal.cc does) and declares the
// versioned functions it forwards to itself.
#define __CUDA_API_VERSION_INTERNAL
#include <cuda.h>

#include <cstdint>

#define PHOS_EXPORT extern "C" __attribute__((visibility("default")))

extern "C" {
CUresult cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* params, unsigned int flags, CUdevice dev);
CUresult cuCtxDestroy_v2(CUcontext ctx);
CUresult cuCtxPopCurrent_v2(CUcontext* pctx);
CUresult cuCtxPushCurrent_v2(CUcontext ctx);
CUresult cuStreamDestroy_v2(CUstream hStream);
CUresult cuEventDestroy_v2(CUevent hEvent);
CUresult cuEventElapsedTime_v2(float* pMilliseconds, CUevent hStart, CUevent hEnd);
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev);
CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev);
CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags);
CUresult cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev);
CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev);
CUresult cuMemHostRegister_v2(void* p, size_t bytesize, unsigned int Flags);
CUresult cuStreamGetCaptureInfo_v3(CUstream hStream, CUstreamCaptureStatus* captureStatus_out, cuuint64_t* id_out,
                                   CUgraph* graph_out, const CUgraphNode** dependencies_out,
                                   const CUgraphEdgeData** edgeData_out, size_t* numDependencies_out);
CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream hStream, CUstreamCaptureStatus* captureStatus_out,
                                        cuuint64_t* id_out, CUgraph* graph_out, const CUgraphNode** dependencies_out,
                                        const CUgraphEdgeData** edgeData_out, size_t* numDependencies_out);
CUresult cuMemAllocHost_v2(void** pp, size_t bytesize);
}

PHOS_EXPORT CUresult cuCtxCreate(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  return cuCtxCreate_v4(pctx, nullptr, flags, dev);
}
PHOS_EXPORT CUresult cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  return cuCtxCreate_v4(pctx, nullptr, flags, dev);
}
PHOS_EXPORT CUresult cuCtxDestroy(CUcontext ctx) { return cuCtxDestroy_v2(ctx); }
PHOS_EXPORT CUresult cuCtxPopCurrent(CUcontext* pctx) { return cuCtxPopCurrent_v2(pctx); }
PHOS_EXPORT CUresult cuCtxPushCurrent(CUcontext ctx) { return cuCtxPushCurrent_v2(ctx); }
PHOS_EXPORT CUresult cuStreamDestroy(CUstream hStream) { return cuStreamDestroy_v2(hStream); }
PHOS_EXPORT CUresult cuEventDestroy(CUevent hEvent) { return cuEventDestroy_v2(hEvent); }
PHOS_EXPORT CUresult cuEventElapsedTime(float* ms, CUevent hStart, CUevent hEnd) {
  return cuEventElapsedTime_v2(ms, hStart, hEnd);
}
PHOS_EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev) { return cuDevicePrimaryCtxRelease_v2(dev); }
PHOS_EXPORT CUresult cuDevicePrimaryCtxReset(CUdevice dev) { return cuDevicePrimaryCtxReset_v2(dev); }
PHOS_EXPORT CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags) {
  return cuDevicePrimaryCtxSetFlags_v2(dev, flags);
}
PHOS_EXPORT CUresult cuDeviceGetUuid(CUuuid* uuid, CUdevice dev) { return cuDeviceGetUuid_v2(uuid, dev); }
// The 32-bit size saturates, as the driver reports memory above 4 GiB to
// this old entry point.
PHOS_EXPORT CUresult cuDeviceTotalMem(unsigned int* bytes, CUdevice dev) {
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  size_t total = 0;
  CUresult r = cuDeviceTotalMem_v2(&total, dev);
  if (r == CUDA_SUCCESS) *bytes = total > UINT32_MAX ? UINT32_MAX : static_cast<unsigned int>(total);
  return r;
}
PHOS_EXPORT CUresult cuMemAllocHost(void** pp, unsigned int bytesize) { return cuMemAllocHost_v2(pp, bytesize); }

// capture_api.cc: no stream of a phos process is ever capturing.
PHOS_EXPORT CUresult cuStreamGetCaptureInfo(CUstream hStream, CUstreamCaptureStatus* captureStatus_out,
                                            cuuint64_t* id_out) {
  return cuStreamGetCaptureInfo_v3(hStream, captureStatus_out, id_out, nullptr, nullptr, nullptr, nullptr);
}
PHOS_EXPORT CUresult cuStreamGetCaptureInfo_ptsz(CUstream hStream, CUstreamCaptureStatus* captureStatus_out,
                                                 cuuint64_t* id_out) {
  return cuStreamGetCaptureInfo_v3_ptsz(hStream, captureStatus_out, id_out, nullptr, nullptr, nullptr, nullptr);
}
// The unversioned name with the same arguments (driver_memory.cc).
PHOS_EXPORT CUresult cuMemHostRegister(void* p, size_t bytesize, unsigned int Flags) {
  return cuMemHostRegister_v2(p, bytesize, Flags);
}
