// The driver's context-independent loading: cuLibrary* and cuKernel*
// (CUDA 12.0+; numba-cuda loads every kernel this way, and CUDA 13's
// runtime does too). On top of the driver modules (driver_module.cc):
//   CUlibrary == the CUmodule of the same image (cuLibraryGetModule answers
//                it; a phos process has one session, so "every context" is
//                that session and the module is loaded there once),
//   CUkernel  == the CUfunction of the same name (cuKernelGetFunction
//                answers it; cuLaunchKernel[Ex] accept either, as CUDA does).
// Library options: CU_LIBRARY_BINARY_IS_PRESERVED is a memory hint (phos
// copies the image to phosd anyway) and accepted;
// CU_LIBRARY_HOST_UNIVERSAL_FUNCTION_AND_DATA_TABLE (the runtime's own use)
// is refused with CUDA_ERROR_NOT_SUPPORTED and its name printed once. JIT
// options answer as for cuModuleLoadDataEx (empty logs).
// Not yet (refused by the generated stubs): cuLibraryGetKernelCount,
// cuLibraryEnumerateKernels, cuLibraryGetManaged,
// cuLibraryGetUnifiedFunction.
#include <atomic>
#include <cstdio>
#include <cstring>
#include <vector>

#include "interposer/client/devices.h"
#include "interposer/client/driver_internal.h"
#include "interposer/client/image_layouts.h"

namespace phos::client {
namespace {

std::atomic<bool> g_host_table_reported{false};

CUresult CheckLibraryOptions(unsigned n, const CUlibraryOption* options) {
  if (n != 0 && options == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned i = 0; i < n; ++i) {
    if (options[i] == CU_LIBRARY_BINARY_IS_PRESERVED) continue;
    if (options[i] == CU_LIBRARY_HOST_UNIVERSAL_FUNCTION_AND_DATA_TABLE) {
      if (!g_host_table_reported.exchange(true)) {
        std::fprintf(stderr,
                     "phos: cuLibraryLoadData option CU_LIBRARY_HOST_UNIVERSAL_FUNCTION_AND_DATA_TABLE is not "
                     "supported by phos yet\n");
      }
      return CUDA_ERROR_NOT_SUPPORTED;
    }
    return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

// Both loads: checks, then the image becomes a driver module.
CUresult LoadLibrary(CUlibrary* library, std::span<const std::byte> image, CUjit_option* jit_options,
                     void** jit_values, unsigned num_jit, const CUlibraryOption* library_options,
                     unsigned num_library_options) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (library == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (num_jit != 0 && (jit_options == nullptr || jit_values == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = CheckLibraryOptions(num_library_options, library_options); r != CUDA_SUCCESS) return r;
  CUmodule module = nullptr;
  if (CUresult r = LoadDriverLibrary(&module, image); r != CUDA_SUCCESS) return r;
  AnswerJitOptionsForLoad(num_jit, jit_options, jit_values);
  *library = reinterpret_cast<CUlibrary>(module);
  return CUDA_SUCCESS;
}

// The CUfunction behind a CUkernel, if it is one of ours.
bool Describe(CUkernel kernel, DriverFunctionInfo* info) {
  return kernel != nullptr && DescribeDriverFunction(kernel, info);
}

// Every CUkernel call takes a device: the session's GPU (devices.h).
CUresult CheckKernelDevice(CUdevice dev) { return IsCurrentDevice(dev) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE; }

}  // namespace
}  // namespace phos::client

using namespace phos::client;  // NOLINT

PHOS_EXPORT CUresult cuLibraryLoadData(CUlibrary* library, const void* code, CUjit_option* jitOptions,
                                       void** jitOptionsValues, unsigned int numJitOptions,
                                       CUlibraryOption* libraryOptions, void** libraryOptionValues,
                                       unsigned int numLibraryOptions) {
  if (code == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return LoadLibrary(library, ImageInMemory(code), jitOptions, jitOptionsValues, numJitOptions, libraryOptions,
                     numLibraryOptions);
}

PHOS_EXPORT CUresult cuLibraryLoadFromFile(CUlibrary* library, const char* fileName, CUjit_option* jitOptions,
                                           void** jitOptionsValues, unsigned int numJitOptions,
                                           CUlibraryOption* libraryOptions, void** libraryOptionValues,
                                           unsigned int numLibraryOptions) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (fileName == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::vector<std::byte> bytes;
  if (CUresult r = ReadModuleFile(fileName, &bytes); r != CUDA_SUCCESS) return r;
  return LoadLibrary(library, bytes, jitOptions, jitOptionsValues, numJitOptions, libraryOptions, numLibraryOptions);
}

PHOS_EXPORT CUresult cuLibraryUnload(CUlibrary library) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  return UnloadDriverModule(reinterpret_cast<CUmodule>(library));
}

PHOS_EXPORT CUresult cuLibraryGetKernel(CUkernel* pKernel, CUlibrary library, const char* name) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (pKernel == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUfunction f = nullptr;
  if (CUresult r = GetDriverFunction(&f, reinterpret_cast<CUmodule>(library), name); r != CUDA_SUCCESS) return r;
  *pKernel = reinterpret_cast<CUkernel>(f);
  return CUDA_SUCCESS;
}

PHOS_EXPORT CUresult cuLibraryGetModule(CUmodule* pMod, CUlibrary library) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (pMod == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!IsDriverModule(reinterpret_cast<CUmodule>(library))) return CUDA_ERROR_INVALID_HANDLE;
  *pMod = reinterpret_cast<CUmodule>(library);
  return CUDA_SUCCESS;
}

PHOS_EXPORT CUresult cuLibraryGetGlobal(CUdeviceptr* dptr, size_t* bytes, CUlibrary library, const char* name) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  return GetDriverGlobal(dptr, bytes, reinterpret_cast<CUmodule>(library), name);
}

PHOS_EXPORT CUresult cuKernelGetFunction(CUfunction* pFunc, CUkernel kernel) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (pFunc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  DriverFunctionInfo info;
  if (!Describe(kernel, &info)) return CUDA_ERROR_INVALID_HANDLE;
  *pFunc = reinterpret_cast<CUfunction>(kernel);
  return CUDA_SUCCESS;
}

PHOS_EXPORT CUresult cuKernelGetLibrary(CUlibrary* pLib, CUkernel kernel) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (pLib == nullptr) return CUDA_ERROR_INVALID_VALUE;
  DriverFunctionInfo info;
  if (!Describe(kernel, &info)) return CUDA_ERROR_INVALID_HANDLE;
  *pLib = reinterpret_cast<CUlibrary>(info.module);
  return CUDA_SUCCESS;
}

PHOS_EXPORT CUresult cuKernelGetName(const char** name, CUkernel hfunc) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  DriverFunctionInfo info;
  if (!Describe(hfunc, &info)) return CUDA_ERROR_INVALID_HANDLE;
  *name = info.name;
  return CUDA_SUCCESS;
}

PHOS_EXPORT CUresult cuKernelGetParamInfo(CUkernel kernel, size_t paramIndex, size_t* paramOffset,
                                          size_t* paramSize) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  DriverFunctionInfo info;
  if (!Describe(kernel, &info)) return CUDA_ERROR_INVALID_HANDLE;
  if (!info.params_known || paramIndex >= info.params.size()) return CUDA_ERROR_INVALID_VALUE;
  if (paramOffset) *paramOffset = info.params[paramIndex].offset;
  if (paramSize) *paramSize = info.params[paramIndex].size;
  return CUDA_SUCCESS;
}

extern "C" CUresult cuFuncGetAttribute(int*, CUfunction_attribute, CUfunction);
extern "C" CUresult cuFuncSetAttribute(CUfunction, CUfunction_attribute, int);

PHOS_EXPORT CUresult cuKernelGetAttribute(int* pi, CUfunction_attribute attrib, CUkernel kernel, CUdevice dev) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (CUresult r = CheckKernelDevice(dev); r != CUDA_SUCCESS) return r;
  DriverFunctionInfo info;
  if (!Describe(kernel, &info)) return CUDA_ERROR_INVALID_HANDLE;
  return cuFuncGetAttribute(pi, attrib, reinterpret_cast<CUfunction>(kernel));
}

PHOS_EXPORT CUresult cuKernelSetAttribute(CUfunction_attribute attrib, int val, CUkernel kernel, CUdevice dev) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (CUresult r = CheckKernelDevice(dev); r != CUDA_SUCCESS) return r;
  DriverFunctionInfo info;
  if (!Describe(kernel, &info)) return CUDA_ERROR_INVALID_HANDLE;
  return cuFuncSetAttribute(reinterpret_cast<CUfunction>(kernel), attrib, val);
}

// A preference of the L1/shared split: a hint (cudaFuncSetCacheConfig is
// recorded the same way), accepted.
PHOS_EXPORT CUresult cuKernelSetCacheConfig(CUkernel kernel, CUfunc_cache config, CUdevice dev) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (CUresult r = CheckKernelDevice(dev); r != CUDA_SUCCESS) return r;
  DriverFunctionInfo info;
  if (!Describe(kernel, &info)) return CUDA_ERROR_INVALID_HANDLE;
  if (config < CU_FUNC_CACHE_PREFER_NONE || config > CU_FUNC_CACHE_PREFER_EQUAL) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}
