// Shared declarations inside libphos.so (hidden): error bookkeeping
// (runtime_api.cc), the kernel / module / variable registry
// (registration.cc), used by launch.cc.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "protocol/wire.h"

#define PHOS_EXPORT extern "C" __attribute__((visibility("default")))

namespace phos::client {

/// The bytes of one value, for a request's payload.
template <typename T>
std::span<const std::byte> Bytes(const T& v) {
  return std::as_bytes(std::span<const T>(&v, 1));
}

using wire::WireStatus;

// ---- errors (runtime_api.cc)
/// Records `e` as this thread's last error (when not cudaSuccess; sticky
/// errors — illegal address, launch failure, daemon unavailable — are also
/// remembered process-wide) and returns it.
cudaError_t SetError(cudaError_t e);
inline cudaError_t Finish(WireStatus w) { return SetError(static_cast<cudaError_t>(w)); }
/// Connects to phosd if not yet done (device_api.cc): cudaSuccess, or the
/// error every call reports (an unavailable phosd, a forked child). For the
/// calls answered in the app, which must still fail where CUDA would.
cudaError_t Initialised();
/// True the first time `id` is passed with this `seen` set (one bit per id;
/// ids above 63 share the last bit): for refusals printed once per
/// attribute. Lock-free, any thread.
inline bool FirstTimeFor(std::atomic<uint64_t>& seen, unsigned id) {
  const uint64_t bit = uint64_t{1} << (id < 63 ? id : 63);
  return (seen.fetch_or(bit, std::memory_order_relaxed) & bit) == 0;
}
/// Prints "phos: TEXT" on stderr the first time this process meets TEXT
/// (runtime_api.cc): a refusal or a limit named once, however often it is
/// hit. Any thread.
void SayOnce(const std::string& text);
/// An API form phos does not offer: says `what` once and records
/// cudaErrorNotSupported as the call's result.
inline cudaError_t RefuseNotSupported(const std::string& what) {
  SayOnce(what);
  return SetError(cudaErrorNotSupported);
}
/// Why `api` (cudaMallocManaged, cuMemAllocManaged) is refused, as printed
/// once (host_memory.cc).
std::string ManagedMemoryRefusal(const char* api);
/// The process-wide sticky error, or cudaSuccess.
cudaError_t StickyError();
/// A device's uuid text as phosd sends it ("GPU-xxxxxxxx-xxxx-...", 32 hex
/// digits) -> its 16 bytes; false (out zeroed or partial) if malformed.
bool ParseUuidText(const char* text, unsigned char out[16]);

// ---- memory (runtime_api.cc, host_memory.cc, memory_copy.cc)
/// `p` lies in a cudaMalloc buffer (runtime_api.cc's map).
bool IsDevicePtr(const void* p);
/// The cudaMalloc buffer containing `p`.
bool FindDeviceBuffer(const void* p, uintptr_t* base, size_t* bytes);
/// [p, p + n) lies inside one pinned arena segment (host_memory.cc): copies
/// from / into it take the zero-copy path.
bool IsPinnedRange(const void* p, size_t n);
/// cudaMemcpy* / cudaMemset* bodies (memory_copy.cc). `stream` is a
/// virtual stream id; `sync`: the synchronous variant.
cudaError_t DoMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind, uint32_t stream, bool sync);
cudaError_t DoMemset(void* dst, int value, size_t count, uint32_t stream, bool sync);
/// `count` elements of `element_size` (1, 2, 4) bytes at `dst` set to the
/// low bytes of `value`, posted on wire stream `stream` (driver_memory.cc;
/// graph memset nodes).
cudaError_t SubmitMemset(void* dst, unsigned value, size_t count, unsigned element_size, uint32_t stream);
/// `height` rows of `width_bytes` bytes, `pitch` bytes apart, filled with
/// `value`'s low `element_size` (1, 2, 4) bytes: cudaMemset2D[Async],
/// cuMemsetD2D8/16/32[Async] and 2D memset graph nodes. Captured when
/// `stream` is capturing (a synchronous one refused there).
cudaError_t SubmitMemset2D(void* dst, size_t pitch, unsigned value, unsigned element_size, size_t width_bytes,
                           size_t height, uint32_t stream, bool sync);
/// A registered kernel's launch packed for the wire (launch.cc): the
/// LaunchRequest and parameter block, and whether it must be called rather
/// than posted. For graph kernel nodes.
cudaError_t PackKernelLaunch(const void* func, dim3 grid, dim3 block, void** args, size_t shmem,
                             std::vector<std::byte>* payload, bool* call);
/// A host function in stream order on wire stream `stream` (host_functions.cc).
cudaError_t LaunchHostFunctionOn(uint32_t stream, std::function<void()> run);

// ---- streams, functions, reset and fork (docs/interposer.md "Streams,
// functions, reset and fork"; device_api.cc, function_api.cc, fork_guard.cc)
/// Stream priorities (cudaDeviceGetStreamPriorityRange): 0 is the least,
/// -5 the greatest, as on the H100; others are clamped into the range.
inline constexpr int kLeastStreamPriority = 0;
inline constexpr int kGreatestStreamPriority = -5;
inline int ClampStreamPriority(int p) {
  return p > kLeastStreamPriority ? kLeastStreamPriority : (p < kGreatestStreamPriority ? kGreatestStreamPriority : p);
}
/// The phosd function id of a kernel handle: a host stub, cudaKernel_t or
/// cudaFunction_t (a KernelRec; its module is loaded lazily), or a
/// CUfunction the driver API minted (DriverFunctionId). Not the kernel:
/// kInvalidResourceHandle.
WireStatus FunctionIdOf(const void* func, uint32_t* id);
/// The driver API's CUfunction -> function id (false if `f` is not one).
/// function_api.cc has a weak default answering false; the driver API's
/// module code overrides it.
bool DriverFunctionId(const void* f, uint32_t* id);
/// cudaDeviceReset, app side: phosd released everything, so forget it.
void ClearErrorsForReset();       // runtime_api.cc: sticky + this thread's last error
void ForgetDeviceAllocations();   // runtime_api.cc: the cudaMalloc map
void ForgetDeviceAllocation(uintptr_t ptr);  // runtime_api.cc: one buffer of it (cudaFreeAsync)
/// runtime_api.cc: a device range phosd made that cudaMalloc did not (a
/// cuMemMap mapping) joins the map, so copies and pointer queries see it.
void NoteDeviceAllocation(uintptr_t ptr, size_t bytes);
void ForgetVirtualMemory();       // driver_vmm.cc: allocation handles and mappings
void ForgetConditionalSlots();    // graphs.cc: the chunk conditional handles' slots come from
void ForgetPoolAllocations();     // stream_ordered_alloc.cc: which pool each allocation came from
void NotePoolAllocationFreed(uintptr_t ptr);  // stream_ordered_alloc.cc: cudaFree of a pool's allocation
void ForgetLoadedModules();       // registration.cc: modules/kernels reload lazily
/// Whether this process is a child forked after CUDA was initialised
/// (fork_guard.cc): then every CUDA call fails (cudaErrorInitializationError).
bool InForkedChild();

// ---- registry (registration.cc)
struct ModuleRec {
  uint32_t id = 0;
  std::vector<std::byte> image;  // the fatbin container, as cuModuleLoadData takes it
  std::mutex mu;
  bool load_tried = false;
  WireStatus load_status = WireStatus::kSuccess;
};

struct ParamSlot {
  uint32_t offset = 0;
  uint32_t size = 0;
};

struct KernelRec {
  ModuleRec* module = nullptr;
  const void* host_stub = nullptr;
  std::string name;                // mangled device name
  std::vector<ParamSlot> params;   // in signature order
  uint32_t param_bytes = 0;        // size of the packed block
  bool params_known = false;
  std::mutex mu;
  bool fetch_tried = false;
  WireStatus fetch_status = WireStatus::kSuccess;
  uint32_t function_id = 0;
};

struct VarRec {
  ModuleRec* module = nullptr;
  std::string name;
  size_t size = 0;
};

/// The kernel registered for a host stub (or the KernelRec* itself, as a
/// cudaKernel_t from __cudaGetKernel), or null.
KernelRec* FindKernelByStub(const void* stub);
bool IsKernelRec(const void* p);
VarRec* FindVar(const void* host_shadow);
/// Loads the kernel's module in phosd (once) and fetches its function id
/// (once). Thread-safe.
WireStatus EnsureKernel(KernelRec* k);
WireStatus EnsureModule(ModuleRec* m);

// PtxEntryParams and the other image layout readers: image_layouts.h.

/// A device's PCI domain, bus and device numbers, from its attributes
/// (identity_queries.cc): for bus ids and the driver's INTEGRITY_CHECK.
struct PciLocation {
  int domain = 0, bus = 0, device = 0;
};
cudaError_t GetPciLocation(int device, PciLocation* out);

}  // namespace phos::client
