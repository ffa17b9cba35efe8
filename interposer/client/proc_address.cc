// Driver entry points: cuGetProcAddress (_v2 and the legacy 4-argument
// form), cudaGetDriverEntryPoint and cudaGetDriverEntryPointByVersion. They
// answer with libphos.so's own export for the name (the strong definition
// where phos implements it, else the generated stub, which fails with
// CUDA_ERROR_NOT_SUPPORTED and logs the name once).
//
// Callers pass a base name ("cuMemAlloc") and a CUDA version. The symbol
// that base name means is the one cuda.h #defines it to: kVersioned below
// lists the base names cuda.h versions and takes each target from cuda.h
// itself (stringified macro expansion), so the table cannot disagree with
// the headers. Every other name is looked up as is. (A generic "try _v3,
// _v2, then the name" — FindExportVersioned — would answer cuCtxSynchronize
// with cuCtxSynchronize_v2 and cuCtxGetDevice with cuCtxGetDevice_v2, which
// take different arguments.) Where an older caller's version predates a
// variant whose signature changed, kVersioned names the older symbol.
#include <cstring>
#include <string>
#include <string_view>

#include "interposer/client/driver_internal.h"
#include "phos_api_ids.h"

namespace {

#define PHOS_STR_(x) #x
#define PHOS_STR(x) PHOS_STR_(x)
// {base, cuda.h's target for it, version the target needs, symbol before}
#define PHOS_V(base) {#base, PHOS_STR(base), 0, nullptr}
#define PHOS_V_SINCE(base, since, older) {#base, PHOS_STR(base), since, older}

struct Versioned {
  const char* base;
  const char* target;
  int since;          // callers asking for an older CUDA version get `older`
  const char* older;
};

constexpr Versioned kVersioned[] = {
    PHOS_V(cuDeviceTotalMem),
    PHOS_V_SINCE(cuCtxCreate, 12050, "cuCtxCreate_v2"),  // _v4 takes CUctxCreateParams (12.5)
    PHOS_V(cuModuleGetGlobal),
    PHOS_V(cuMemGetInfo),
    PHOS_V(cuMemAlloc),
    PHOS_V(cuMemAllocPitch),
    PHOS_V(cuMemFree),
    PHOS_V(cuMemGetAddressRange),
    PHOS_V(cuMemAllocHost),
    PHOS_V(cuMemHostGetDevicePointer),
    PHOS_V(cuMemAdvise),
    PHOS_V(cuMemPrefetchAsync),
    PHOS_V(cuMemcpyHtoD),
    PHOS_V(cuMemcpyDtoH),
    PHOS_V(cuMemcpyDtoD),
    PHOS_V(cuMemcpyDtoA),
    PHOS_V(cuMemcpyAtoD),
    PHOS_V(cuMemcpyHtoA),
    PHOS_V(cuMemcpyAtoH),
    PHOS_V(cuMemcpyAtoA),
    PHOS_V(cuMemcpyHtoAAsync),
    PHOS_V(cuMemcpyAtoHAsync),
    PHOS_V(cuMemcpy2D),
    PHOS_V(cuMemcpy2DUnaligned),
    PHOS_V(cuMemcpy3D),
    PHOS_V(cuMemcpyHtoDAsync),
    PHOS_V(cuMemcpyDtoHAsync),
    PHOS_V(cuMemcpyDtoDAsync),
    PHOS_V(cuMemcpy2DAsync),
    PHOS_V(cuMemcpy3DAsync),
    PHOS_V(cuMemcpyBatchAsync),
    PHOS_V(cuMemcpy3DBatchAsync),
    PHOS_V(cuMemsetD8),
    PHOS_V(cuMemsetD16),
    PHOS_V(cuMemsetD32),
    PHOS_V(cuMemsetD2D8),
    PHOS_V(cuMemsetD2D16),
    PHOS_V(cuMemsetD2D32),
    PHOS_V(cuArrayCreate),
    PHOS_V(cuArrayGetDescriptor),
    PHOS_V(cuArray3DCreate),
    PHOS_V(cuArray3DGetDescriptor),
    PHOS_V(cuTexRefSetAddress),
    PHOS_V(cuTexRefGetAddress),
    PHOS_V(cuGraphicsResourceGetMappedPointer),
    PHOS_V(cuCtxDestroy),
    PHOS_V(cuCtxPopCurrent),
    PHOS_V(cuCtxPushCurrent),
    PHOS_V(cuStreamDestroy),
    PHOS_V(cuEventDestroy),
    PHOS_V(cuTexRefSetAddress2D),
    PHOS_V(cuLinkCreate),
    PHOS_V(cuLinkAddData),
    PHOS_V(cuLinkAddFile),
    PHOS_V(cuMemHostRegister),
    PHOS_V(cuGraphicsResourceSetMapFlags),
    PHOS_V(cuStreamBeginCapture),
    PHOS_V(cuDevicePrimaryCtxRelease),
    PHOS_V(cuDevicePrimaryCtxReset),
    PHOS_V(cuDevicePrimaryCtxSetFlags),
    PHOS_V(cuDeviceGetUuid),
    PHOS_V(cuIpcOpenMemHandle),
    PHOS_V(cuGraphInstantiate),
    PHOS_V(cuGraphExecUpdate),
    PHOS_V_SINCE(cuGetProcAddress, 12000, "cuGetProcAddress"),  // _v2 adds symbolStatus (12.0)
    PHOS_V(cuGraphAddKernelNode),
    PHOS_V(cuGraphKernelNodeGetParams),
    PHOS_V(cuGraphKernelNodeSetParams),
    PHOS_V(cuGraphExecKernelNodeSetParams),
    PHOS_V(cuGraphGetEdges),
    PHOS_V(cuGraphNodeGetDependencies),
    PHOS_V(cuGraphNodeGetDependentNodes),
    PHOS_V(cuGraphAddDependencies),
    PHOS_V(cuGraphRemoveDependencies),
    PHOS_V(cuGraphAddNode),
    PHOS_V(cuEventElapsedTime),
    PHOS_V(cuStreamWriteValue32),
    PHOS_V(cuStreamWaitValue32),
    PHOS_V(cuStreamWriteValue64),
    PHOS_V(cuStreamWaitValue64),
    PHOS_V(cuStreamBatchMemOp),
    PHOS_V(cuStreamGetCaptureInfo),
    PHOS_V(cuStreamUpdateCaptureDependencies),
};

// Only driver API names: cuGetProcAddress does not hand out runtime functions.
const void* FindDriverExport(const std::string& name) {
  if (name.rfind("cu", 0) != 0 || name.rfind("cuda", 0) == 0) return nullptr;
  return phos::interposer::FindExport(name.c_str());
}

// The export for `symbol` at `version`; per-thread lookups prefer the
// _ptsz/_ptds variant and fall back to the legacy one, as the driver does.
const void* Lookup(const char* symbol, int version, bool per_thread) {
  std::string name = symbol;
  for (const Versioned& v : kVersioned) {
    if (name == v.base) {
      name = v.older != nullptr && version < v.since ? v.older : v.target;
      break;
    }
  }
  if (per_thread) {
    for (const char* suffix : {"_ptsz", "_ptds"})
      if (const void* p = FindDriverExport(name + suffix)) return p;
  }
  return FindDriverExport(name);
}

CUresult GetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags,
                        CUdriverProcAddressQueryResult* status) {
  if (symbol == nullptr || pfn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if ((flags & ~static_cast<cuuint64_t>(CU_GET_PROC_ADDRESS_LEGACY_STREAM |
                                        CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)) != 0)
    return CUDA_ERROR_INVALID_VALUE;
  // CU_GET_PROC_ADDRESS_DEFAULT means legacy unless the caller was built
  // per-thread, which a library cannot know: legacy.
  const void* p = Lookup(symbol, version, (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0);
  *pfn = const_cast<void*>(p);
  if (status != nullptr) *status = p != nullptr ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return CUDA_SUCCESS;  // not found is CUDA_SUCCESS with a null pfn (cuda.h)
}

cudaError_t DriverEntryPoint(const char* symbol, void** funcPtr, int version, unsigned long long flags,
                             cudaDriverEntryPointQueryResult* status) {
  if (symbol == nullptr || funcPtr == nullptr) return cudaErrorInvalidValue;
  if ((flags & ~static_cast<unsigned long long>(cudaEnableLegacyStream | cudaEnablePerThreadDefaultStream)) != 0)
    return cudaErrorInvalidValue;
  const void* p = Lookup(symbol, version, (flags & cudaEnablePerThreadDefaultStream) != 0);
  *funcPtr = const_cast<void*>(p);
  if (status != nullptr) *status = p != nullptr ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
  return cudaSuccess;  // not found: cudaSuccess with a null funcPtr (cuda_runtime_api.h)
}

}  // namespace

PHOS_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                                         CUdriverProcAddressQueryResult* symbolStatus) {
  return GetProcAddress(symbol, pfn, cudaVersion, flags, symbolStatus);
}

// The legacy 4-argument symbol (declared by cuda.h only for its own build;
// kVersioned above has already expanded the macro).
#undef cuGetProcAddress
extern "C" CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags);
PHOS_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags) {
  return GetProcAddress(symbol, pfn, cudaVersion, flags, nullptr);
}

// cudaGetDriverEntryPoint answers for the runtime's own version.
PHOS_EXPORT cudaError_t cudaGetDriverEntryPoint(const char* symbol, void** funcPtr, unsigned long long flags,
                                                cudaDriverEntryPointQueryResult* driverStatus) {
  return DriverEntryPoint(symbol, funcPtr, CUDART_VERSION, flags, driverStatus);
}
PHOS_EXPORT cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** funcPtr, unsigned int cudaVersion,
                                                         unsigned long long flags,
                                                         cudaDriverEntryPointQueryResult* driverStatus) {
  return DriverEntryPoint(symbol, funcPtr, static_cast<int>(cudaVersion), flags, driverStatus);
}

// Per-thread builds (nvcc --default-stream per-thread) call the _ptsz
// forms: there cudaEnableDefault means the per-thread variants.
extern "C" cudaError_t cudaGetDriverEntryPoint_ptsz(const char* symbol, void** funcPtr, unsigned long long flags,
                                                    cudaDriverEntryPointQueryResult* driverStatus);
extern "C" cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char* symbol, void** funcPtr,
                                                             unsigned int cudaVersion, unsigned long long flags,
                                                             cudaDriverEntryPointQueryResult* driverStatus);
PHOS_EXPORT cudaError_t cudaGetDriverEntryPoint_ptsz(const char* symbol, void** funcPtr, unsigned long long flags,
                                                     cudaDriverEntryPointQueryResult* driverStatus) {
  if (flags == cudaEnableDefault) flags = cudaEnablePerThreadDefaultStream;
  return DriverEntryPoint(symbol, funcPtr, CUDART_VERSION, flags, driverStatus);
}
PHOS_EXPORT cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char* symbol, void** funcPtr,
                                                              unsigned int cudaVersion, unsigned long long flags,
                                                              cudaDriverEntryPointQueryResult* driverStatus) {
  if (flags == cudaEnableDefault) flags = cudaEnablePerThreadDefaultStream;
  return DriverEntryPoint(symbol, funcPtr, static_cast<int>(cudaVersion), flags, driverStatus);
}
