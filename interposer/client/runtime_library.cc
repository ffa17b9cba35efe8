// The runtime's context-independent loading: cudaLibrary* / cudaKernel*
// and cudaGetKernel, on top of the driver's (driver_library.cc): a
// cudaLibrary_t is the CUlibrary (= CUmodule) and a cudaKernel_t from a
// library is the CUfunction, which cudaLaunchKernel[ExC] launch the
// driver's way (launch.cc, LaunchAny). The enums these take (cudaJitOption,
// cudaLibraryOption, cudaFuncAttribute 8 and 9) number their values as the
// driver's do.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include "interposer/client/client_internal.h"
#include "interposer/client/devices.h"
#include "interposer/client/driver_internal.h"

namespace phos::client {
namespace {

cudaError_t FromCu(CUresult r) { return r == CUDA_SUCCESS ? cudaSuccess : SetError(static_cast<cudaError_t>(r)); }

}  // namespace
}  // namespace phos::client

using namespace phos::client;  // NOLINT

static_assert(static_cast<int>(cudaLibraryBinaryIsPreserved) == static_cast<int>(CU_LIBRARY_BINARY_IS_PRESERVED));
static_assert(static_cast<int>(cudaJitInfoLogBuffer) == static_cast<int>(CU_JIT_INFO_LOG_BUFFER));
static_assert(static_cast<int>(cudaFuncAttributeMaxDynamicSharedMemorySize) ==
              static_cast<int>(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES));

PHOS_EXPORT cudaError_t cudaLibraryLoadData(cudaLibrary_t* library, const void* code, cudaJitOption* jitOptions,
                                            void** jitOptionsValues, unsigned int numJitOptions,
                                            cudaLibraryOption* libraryOptions, void** libraryOptionValues,
                                            unsigned int numLibraryOptions) {
  if (cudaError_t e = Initialised(); e != cudaSuccess) return e;
  return FromCu(cuLibraryLoadData(reinterpret_cast<CUlibrary*>(library), code,
                                  reinterpret_cast<CUjit_option*>(jitOptions), jitOptionsValues, numJitOptions,
                                  reinterpret_cast<CUlibraryOption*>(libraryOptions), libraryOptionValues,
                                  numLibraryOptions));
}

PHOS_EXPORT cudaError_t cudaLibraryLoadFromFile(cudaLibrary_t* library, const char* fileName,
                                                cudaJitOption* jitOptions, void** jitOptionsValues,
                                                unsigned int numJitOptions, cudaLibraryOption* libraryOptions,
                                                void** libraryOptionValues, unsigned int numLibraryOptions) {
  if (cudaError_t e = Initialised(); e != cudaSuccess) return e;
  return FromCu(cuLibraryLoadFromFile(reinterpret_cast<CUlibrary*>(library), fileName,
                                      reinterpret_cast<CUjit_option*>(jitOptions), jitOptionsValues, numJitOptions,
                                      reinterpret_cast<CUlibraryOption*>(libraryOptions), libraryOptionValues,
                                      numLibraryOptions));
}

PHOS_EXPORT cudaError_t cudaLibraryUnload(cudaLibrary_t library) {
  if (cudaError_t e = Initialised(); e != cudaSuccess) return e;
  return FromCu(cuLibraryUnload(reinterpret_cast<CUlibrary>(library)));
}

PHOS_EXPORT cudaError_t cudaLibraryGetKernel(cudaKernel_t* pKernel, cudaLibrary_t library, const char* name) {
  if (cudaError_t e = Initialised(); e != cudaSuccess) return e;
  return FromCu(cuLibraryGetKernel(reinterpret_cast<CUkernel*>(pKernel), reinterpret_cast<CUlibrary>(library), name));
}

PHOS_EXPORT cudaError_t cudaLibraryGetGlobal(void** dptr, size_t* bytes, cudaLibrary_t library, const char* name) {
  if (cudaError_t e = Initialised(); e != cudaSuccess) return e;
  return FromCu(
      cuLibraryGetGlobal(reinterpret_cast<CUdeviceptr*>(dptr), bytes, reinterpret_cast<CUlibrary>(library), name));
}

PHOS_EXPORT cudaError_t cudaKernelSetAttributeForDevice(cudaKernel_t kernel, cudaFuncAttribute attr, int value,
                                                        int device) {
  if (cudaError_t e = Initialised(); e != cudaSuccess) return e;
  if (!IsCurrentDevice(device)) return SetError(cudaErrorInvalidDevice);
  DriverFunctionInfo info;
  if (DescribeDriverFunction(kernel, &info)) {
    return FromCu(cuKernelSetAttribute(static_cast<CUfunction_attribute>(attr), value,
                                       reinterpret_cast<CUkernel>(kernel), 0));
  }
  // A registered kernel's handle (cudaGetKernel, __cudaGetKernel).
  return cudaFuncSetAttribute(kernel, attr, value);
}

// The cudaKernel_t of a registered kernel is its record (as __cudaGetKernel
// hands out), which every runtime call taking a kernel accepts.
PHOS_EXPORT cudaError_t cudaGetKernel(cudaKernel_t* kernelPtr, const void* entryFuncAddr) {
  if (kernelPtr == nullptr || entryFuncAddr == nullptr) return SetError(cudaErrorInvalidValue);
  KernelRec* k = FindKernelByStub(entryFuncAddr);
  if (k == nullptr) return SetError(cudaErrorInvalidDeviceFunction);
  *kernelPtr = reinterpret_cast<cudaKernel_t>(k);
  return cudaSuccess;
}
