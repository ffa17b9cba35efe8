// Shared declarations of libphos.so's CUDA driver API (driver_*.cc,
// proc_address.cc): initialisation, the current-context check and the
// mapping of results to CUresult. docs/interposer.md "Driver API".
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <span>
#include <vector>

#include "interposer/client/client_internal.h"

// The runtime's per-thread-default-stream exports (runtime_api.cc) that the
// driver's _ptds/_ptsz variants call: the headers declare them only when
// CUDA_API_PER_THREAD_DEFAULT_STREAM is defined.
extern "C" {
cudaError_t cudaMemcpy_ptds(void* dst, const void* src, size_t count, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync_ptsz(void* dst, const void* src, size_t count, cudaMemcpyKind kind, cudaStream_t stream);
cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t stream);
cudaError_t cudaStreamGetFlags_ptsz(cudaStream_t stream, unsigned int* flags);
cudaError_t cudaStreamGetPriority_ptsz(cudaStream_t stream, int* priority);
cudaError_t cudaStreamGetDevice_ptsz(cudaStream_t stream, int* device);
cudaError_t cudaStreamGetId_ptsz(cudaStream_t stream, unsigned long long* id);
cudaError_t cudaStreamQuery_ptsz(cudaStream_t stream);
cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t stream, cudaEvent_t event, unsigned int flags);
cudaError_t cudaEventRecord_ptsz(cudaEvent_t event, cudaStream_t stream);
cudaError_t cudaEventRecordWithFlags_ptsz(cudaEvent_t event, cudaStream_t stream, unsigned int flags);
}

namespace phos::client {

// ---- initialisation (driver_device.cc)
/// CUDA_SUCCESS once cuInit(0) succeeded in this process, else
/// CUDA_ERROR_NOT_INITIALIZED; a sticky error (phosd lost, a kernel fault)
/// wins, as in the driver.
CUresult CheckInit();

// ---- contexts (driver_context.cc)
/// CheckInit(), then CUDA_ERROR_INVALID_CONTEXT when no (live) context is
/// current on this thread. Every call that works "in the current context"
/// (memory, modules, streams, events, launches) starts with it.
CUresult CheckContext();
/// Whether the runtime API contacted phosd before the driver API did: then
/// the primary context is this process's implicit current context, as the
/// CUDA runtime makes it (see driver_context.cc).
bool RuntimeCameFirst();
/// The device's primary context handle, without retaining or activating it
/// (what the runtime's private interface hands the CUDA runtime: see
/// export_tables.cc).
CUcontext PrimaryContextHandle(CUdevice dev);
/// CUDA_SUCCESS when `ctx` is a live (not destroyed) context handle.
CUresult CheckContextHandle(CUcontext ctx);
/// Called by cuInit: records whether the runtime came first.
void NoteDriverInit();

// ---- results
/// A runtime result (from the runtime exports the driver calls reuse) as the
/// driver's CUresult: equal numbers except the runtime-only codes.
CUresult ToCu(cudaError_t e);
/// A wire status as a CUresult (the numbers coincide, wire.h); sticky
/// errors are recorded process-wide like the runtime does.
inline CUresult ToCu(WireStatus w) { return ToCu(static_cast<cudaError_t>(w)); }

// ---- modules (driver_module.cc), shared with the library calls
// (driver_library.cc). None checks for a current context: cuModule* do
// that themselves, cuLibrary* / cuKernel* are context-independent in CUDA.
/// Loads an image (fatbin, cubin or NUL-terminated PTX) as a new module.
CUresult LoadDriverModule(CUmodule* out, std::span<const std::byte> image);
/// As LoadDriverModule, for cuLibraryLoad*: a library is context
/// independent (on a machine with GPUs of several kinds it loads though
/// some cannot run it), so an image with no code for this GPU loads
/// anyway, as nothing in phosd, and NO_BINARY_FOR_GPU comes when one of
/// its kernels or variables is asked for. CUDA's runtime loads every
/// fatbin of a library at start (cuSPARSE has 20 for other GPUs only) and
/// gives up at the first load that fails.
CUresult LoadDriverLibrary(CUmodule* out, std::span<const std::byte> image);
CUresult UnloadDriverModule(CUmodule module);
/// The module's function `name` (one handle per name and module).
CUresult GetDriverFunction(CUfunction* out, CUmodule module, const char* name);
struct DriverFunctionInfo {
  CUmodule module = nullptr;
  const char* name = nullptr;  // valid while the function is
  bool params_known = false;
  std::vector<ParamSlot> params;
};
/// False when `f` is not a live CUfunction minted by GetDriverFunction.
bool DescribeDriverFunction(const void* f, DriverFunctionInfo* out);
/// A driver function's launch packed for the wire (kernelParams or `extra`
/// copied now): a kLaunchKernel payload. For launches and for graph
/// kernel nodes (graph_driver.cc).
CUresult PackDriverLaunch(CUfunction f, dim3 grid, dim3 block, unsigned shmem, void** kernelParams, void** extra,
                          bool cooperative, std::vector<std::byte>* payload);
/// CUarray_format + channel count -> the runtime's channel description
/// (driver_textures.cc; formats phos does not model are refused by name).
CUresult ChannelDescOf(CUarray_format f, unsigned channels, cudaChannelFormatDesc* out);
/// cuMemcpy3D(Async)'s body (driver_textures.cc): arrays, host, device or
/// unified memory on either side; for graph memcpy nodes too.
/// `per_thread`: a null stream is the per-thread default stream (_ptds/_ptsz).
CUresult DriverCopy3D(const CUDA_MEMCPY3D* p, CUstream stream, bool async, bool per_thread = false);
/// Launches a driver function (a CUfunction or CUkernel the runtime API was
/// handed) as cuLaunchKernel does, or as cuLaunchCooperativeKernel; with
/// `per_thread`, a null stream is the per-thread default stream.
CUresult LaunchDriverFunction(CUfunction f, dim3 grid, dim3 block, unsigned shmem, CUstream stream, bool per_thread,
                              void** kernelParams, bool cooperative);
bool IsDriverModule(CUmodule module);
/// Address and size of the module's global `name` (kModuleGetGlobal).
CUresult GetDriverGlobal(CUdeviceptr* dptr, size_t* bytes, CUmodule module, const char* name);
/// A module file's bytes, NUL-terminated (PTX text needs it).
CUresult ReadModuleFile(const char* path, std::vector<std::byte>* out);
/// What a load's JIT options ask back (logs, timings): empty answers, as
/// phos does no JIT of its own.
void AnswerJitOptionsForLoad(unsigned n, CUjit_option* options, void** values);

}  // namespace phos::client
