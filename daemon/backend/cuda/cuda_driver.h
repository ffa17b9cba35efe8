// The CUDA driver API, loaded at run time (docs/backends.md).
//
// phos never links against libcuda: the same phosd binary must start on a
// machine with no NVIDIA driver and fall back to the sim backend. LoadCudaDriver
// dlopens the driver library, calls cuInit(0), and resolves every entry point
// the cuda backend uses into a table of typed function pointers.
//
// Entry points are resolved with cuGetProcAddress_v2, each at the CUDA version
// its function-pointer typedef in cudaTypedefs.h names (PFN_cuX_vNNNNN): the
// driver then returns exactly that ABI variant. Asking every symbol at
// CUDA_VERSION (13000) would be wrong for some of them — e.g. cuda.h declares
// `cuCtxSynchronize(void)` with no version macro, while cuCtxSynchronize at
// 13000 resolves to cuCtxSynchronize_v2(CUcontext) — so the version is spelled
// out per entry point, next to the typedef that fixes the signature. The flags
// are CU_GET_PROC_ADDRESS_LEGACY_STREAM (what CU_GET_PROC_ADDRESS_DEFAULT means
// for code built without per-thread default streams, spelled out): stream 0 is
// the legacy default stream, as backend.h's kDefaultStream promises.
//
// Only cuda.h / cudaTypedefs.h TYPES are used; nothing here calls a symbol
// that the linker would have to find.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

#include <memory>
#include <string>

#include "common/status.h"

namespace phos::backend::cuda {

// X(name without the "cu" prefix, CUDA version of the ABI variant wanted).
// The member is called `name` (e.g. driver.MemcpyHtoDAsync), the symbol asked
// for is "cu" #name, its type is PFN_cu##name##_v##version.
#define PHOS_CUDA_DRIVER_ENTRY_POINTS(X)  \
  X(Init, 2000)                           \
  X(DriverGetVersion, 2020)               \
  X(GetErrorName, 6000)                   \
  X(GetErrorString, 6000)                 \
  X(DeviceGetCount, 2000)                 \
  X(DeviceGet, 2000)                      \
  X(DeviceGetName, 2000)                  \
  X(DeviceTotalMem, 3020)                 \
  X(DeviceGetUuid, 11040)                 \
  X(DeviceGetAttribute, 2000)             \
  X(DevicePrimaryCtxRetain, 7000)         \
  X(DevicePrimaryCtxRelease, 11000)       \
  X(CtxCreate, 12050)                     \
  X(CtxDestroy, 4000)                     \
  X(CtxSetCurrent, 4000)                  \
  X(CtxPopCurrent, 4000)                  \
  X(CtxSynchronize, 2000)                 \
  X(MemGetInfo, 3020)                     \
  X(MemGetAllocationGranularity, 10020)   \
  X(MemAddressReserve, 10020)             \
  X(MemAddressFree, 10020)                \
  X(MemCreate, 10020)                     \
  X(MemRelease, 10020)                    \
  X(MemMap, 10020)                        \
  X(MemUnmap, 10020)                      \
  X(MemSetAccess, 10020)                  \
  X(MemGetAddressRange, 3020)             \
  X(MemHostRegister, 6050)                \
  X(MemHostUnregister, 4000)              \
  X(StreamCreateWithPriority, 5050)       \
  X(StreamDestroy, 4000)                  \
  X(StreamSynchronize, 2000)              \
  X(StreamQuery, 2000)                    \
  X(StreamWaitEvent, 3020)                \
  X(MemcpyHtoDAsync, 3020)                \
  X(MemcpyDtoHAsync, 3020)                \
  X(MemcpyDtoDAsync, 3020)                \
  X(MemcpyAsync, 4000)                    \
  X(MemsetD8Async, 3020)                  \
  X(MemsetD16Async, 3020)                 \
  X(MemsetD32Async, 3020)                 \
  X(LaunchHostFunc, 10000)                \
  X(TexObjectCreate, 5000)                \
  X(TexObjectDestroy, 5000)               \
  X(EventCreate, 2000)                    \
  X(EventDestroy, 4000)                   \
  X(EventRecord, 2000)                    \
  X(EventQuery, 2000)                     \
  X(EventSynchronize, 2000)               \
  X(EventElapsedTime, 12080)              \
  X(ModuleLoadData, 2000)                 \
  X(ModuleUnload, 2000)                   \
  X(ModuleGetFunction, 2000)              \
  X(ModuleGetGlobal, 3020)                \
  X(FuncGetAttribute, 2020)               \
  X(FuncSetAttribute, 9000)               \
  X(LaunchKernel, 4000)                   \
  X(LaunchKernelEx, 11060)

/// The oldest driver (as cuDriverGetVersion reports it) whose every entry
/// point above exists: the highest version in the table.
inline constexpr int kMinimumDriverVersion = 12080;

/// The resolved driver. Immutable after LoadCudaDriver returns, so shared by
/// the backend and all its contexts without a lock.
struct CudaDriver {
  std::string library;   // what was dlopen'ed
  int version = 0;       // cuDriverGetVersion, e.g. 13000
  void* handle = nullptr;  // dlopen handle; never dlclose'd (see cuda_driver.cc)

#define PHOS_CUDA_DECLARE_ENTRY(name, ver) PFN_cu##name##_v##ver name = nullptr;
  PHOS_CUDA_DRIVER_ENTRY_POINTS(PHOS_CUDA_DECLARE_ENTRY)
#undef PHOS_CUDA_DECLARE_ENTRY
};

/// dlopens `library`, calls cuInit(0), checks the driver version and resolves
/// every entry point. Unavailable, with the reason, when any step fails:
///   "no NVIDIA driver: dlopen libcuda.so.1 failed: <dlerror>"
///   "cuInit failed: CUDA_ERROR_NO_DEVICE (no CUDA-capable device is detected)"
///   "<library> has no symbol cuGetProcAddress_v2 (driver older than CUDA 12.0)"
/// Does not check for devices (the backend does).
Status LoadCudaDriver(const std::string& library, std::shared_ptr<const CudaDriver>* out);

/// "13.0" for 13000.
std::string DriverVersionText(int version);

}  // namespace phos::backend::cuda
