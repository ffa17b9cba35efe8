// The narrow interface phosd drives a GPU through (docs/backends.md).
//
// Two implementations: `cuda` (the driver API, dlopen'ed at start) and `sim`
// (a functional GPU in the daemon's memory). Everything above this line —
// sessions, the executor, the C/R engine, the context pool — is written
// against these two classes only.
//
// Threading: a Backend and every Context it creates are safe to call from
// any number of threads at once; each implementation documents the lock that
// makes it so. Handles are plain ids owned by their Context; using a handle
// after destroying it, or with another Context, is an InvalidArgument error,
// never undefined behaviour.
//
// Asynchrony follows CUDA: *Async calls and RecordEvent/StreamWaitEvent
// enqueue work and return; an error found at enqueue time (bad address, bad
// handle) is returned at once; an error found while the work runs is sticky
// on the stream and returned by the next SynchronizeStream/QueryStream/
// Synchronize.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backend/blas_call.h"
#include "backend/collective.h"
#include "common/status.h"

namespace phos::wire {
struct TextureDesc;  // protocol/texture_desc.h
}  // namespace phos::wire

namespace phos::backend {

/// A device virtual address. Real and stable (docs/backends.md): the same value is
/// valid in the app, in phosd, and after a restore.
using DevicePtr = std::uint64_t;

/// Handles of objects that live inside one Context. 0 is never a valid
/// handle except kDefaultStream.
using StreamHandle = std::uint64_t;
using EventHandle = std::uint64_t;
using ModuleHandle = std::uint64_t;
using FunctionHandle = std::uint64_t;

/// The legacy default stream (CUDA's stream 0): work on it waits for all
/// prior work on blocking streams, and blocking streams wait for it.
inline constexpr StreamHandle kDefaultStream = 0;

struct DeviceProperties {
  int ordinal = 0;
  std::string name;
  std::string uuid;                  // "GPU-xxxxxxxx-..." style text
  std::uint64_t total_memory = 0;    // bytes
  int compute_capability_major = 0;
  int compute_capability_minor = 0;
  int multiprocessor_count = 0;
  int max_threads_per_block = 0;
  int max_threads_per_multiprocessor = 0;
  int max_block_dim[3] = {0, 0, 0};
  int max_grid_dim[3] = {0, 0, 0};
  int warp_size = 0;
  std::uint64_t shared_memory_per_block = 0;        // default (opt-in may be more)
  std::uint64_t shared_memory_per_block_optin = 0;
  std::uint64_t shared_memory_per_multiprocessor = 0;
  int registers_per_block = 0;
  int clock_rate_khz = 0;
  int memory_clock_rate_khz = 0;
  int memory_bus_width_bits = 0;
  int l2_cache_bytes = 0;
  int async_engine_count = 0;        // copy engines
  int pci_bus_id = 0;
  int pci_device_id = 0;
  int pci_domain_id = 0;
  std::uint64_t total_constant_memory = 0;
  int concurrent_kernels = 1;
  int unified_addressing = 1;
};

enum class CopyKind { kHostToDevice, kDeviceToHost, kDeviceToDevice, kHostToHost };

/// Launch geometry, as cuLaunchKernel takes it.
struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

/// Flags for CreateStream (values as cudaStreamNonBlocking).
inline constexpr unsigned kStreamNonBlocking = 0x1;
/// Flags for CreateEvent (values as cudaEventDisableTiming etc.).
inline constexpr unsigned kEventBlockingSync = 0x1;
inline constexpr unsigned kEventDisableTiming = 0x2;

/// What cuFuncGetAttribute reports for a kernel (the CUfunction_attribute
/// values, in cudaFuncAttributes' units). Filled by
/// Context::GetFunctionAttributes.
struct FunctionAttributes {
  int max_threads_per_block = 0;             // launchable block size (.maxntid, registers)
  std::uint64_t shared_size_bytes = 0;       // static shared memory per block
  std::uint64_t const_size_bytes = 0;        // user __constant__ memory
  std::uint64_t local_size_bytes = 0;        // local memory per thread
  int num_regs = 0;                          // registers per thread
  int ptx_version = 0;                       // virtual arch, major*10+minor (90 = compute_90)
  int binary_version = 0;                    // SASS arch the function runs as (90 = sm_90)
  int cache_mode_ca = 0;                     // compiled with -Xptxas -dlcm=ca
  int max_dynamic_shared_size_bytes = 0;     // current launch limit (settable)
  int preferred_shared_memory_carveout = -1; // percent, -1 = no preference (settable)
};

/// The settable function attributes (cuFuncSetAttribute).
enum class FunctionAttribute {
  kMaxDynamicSharedSizeBytes,      // 0 .. shared_memory_per_block_optin - static shared
  kPreferredSharedMemoryCarveout,  // -1 .. 100
};

/// GPU libraries whose per-context state a backend may prepare together with
/// the context (docs/backends.md "Context pool": the pool hides their set-up cost too).
enum class Library {
  kCublas,  // a cublasHandle_t
};

/// One GPU context: memory, streams, events and modules of one session (or
/// one pooled context waiting for a session). Thread-safe.
/// The status of work a backend refused or dropped because its context was
/// abandoned (Context::Abandon): the context's session is ending. One text,
/// so the engine can tell "the app exited" from a failure (IsAbandoned).
inline constexpr std::string_view kAbandonedText = "the context was abandoned (its session is ending)";
inline Status AbandonedStatus(std::string_view what) {
  return Status::Unavailable(std::string(what) + ": " + std::string(kAbandonedText));
}
inline bool IsAbandoned(const Status& s) {
  return s.code() == Status::Code::kUnavailable && s.message().find(kAbandonedText) != std::string::npos;
}

class Context {
 public:
  virtual ~Context() = default;

  virtual int device() const = 0;

  /// Library state created in this context when the context was created,
  /// or nullptr where the backend has none. Owned by the context, valid
  /// until it is destroyed (which destroys it first); use it only with this
  /// context current.
  ///   cuda, kCublas: the cublasHandle_t made by cublasCreate_v2 (with its
  ///     default workspace); nullptr when libcublas could not be loaded.
  ///   sim: always nullptr (no vendor library runs on the sim).
  virtual void* library_handle(Library library) const {
    (void)library;
    return nullptr;
  }

  // ---- memory -----------------------------------------------------------
  /// Allocates `bytes` of device memory. If `at` is non-zero the allocation
  /// must start exactly at `at` (restore maps buffers at their old
  /// addresses); AlreadyExists if that range is taken, InvalidArgument if it
  /// lies outside the device's address range or is misaligned. If `at` is
  /// zero the backend picks the address. Memory is NOT zeroed (as in CUDA);
  /// do not rely on its contents.
  virtual Status Allocate(std::size_t bytes, DevicePtr at, DevicePtr* out) = 0;
  /// Frees an allocation by its start address. Waits for nothing: the caller
  /// (the executor) orders it after work that uses the buffer.
  virtual Status Free(DevicePtr ptr) = 0;
  /// Device memory phosd keeps for itself for a long time (the cow reserve,
  /// engine/shadow_pool.h), freed with Free. Where the backend chooses
  /// addresses it puts it where the app's allocations do not go — the
  /// addresses an image restored into this phosd needs (the sim: the top of
  /// the device address range); the cuda backend's driver chooses.
  virtual Status AllocateForDaemon(std::size_t bytes, DevicePtr* out) { return Allocate(bytes, 0, out); }
  /// The app's own virtual-memory calls (cuMemAddressReserve): reserves
  /// `bytes` of device address space, mapping nothing, aligned to
  /// `alignment` (0: the granularity). `at` != 0 asks for exactly that
  /// address (AlreadyExists if taken); 0 lets the backend choose. Later
  /// Allocate(at) calls may place allocations inside the range (only
  /// there: Allocate(0) never picks an address inside a reservation), and
  /// contiguous allocations inside one reservation form one range for
  /// copies (CheckDeviceRange, the copy engines), as on a GPU.
  virtual Status ReserveAddressRange(std::size_t bytes, std::size_t alignment, DevicePtr at, DevicePtr* out) {
    return Status::NotSupported("this backend cannot reserve device address ranges");
  }
  /// Gives back a range ReserveAddressRange returned (by its start).
  /// FailedPrecondition while an allocation lies inside it.
  virtual Status ReleaseAddressRange(DevicePtr start) {
    return Status::NotSupported("this backend cannot reserve device address ranges");
  }
  /// Free and total device memory, as cuMemGetInfo.
  virtual Status GetMemoryInfo(std::uint64_t* free_bytes, std::uint64_t* total_bytes) = 0;
  /// Registers host memory as pinned (page-locked, DMA-able); copies from it
  /// may run without staging. Unregister before unmapping it.
  virtual Status RegisterHostMemory(void* ptr, std::size_t bytes) = 0;
  virtual Status UnregisterHostMemory(void* ptr) = 0;
  /// Mapped (zero-copy) host memory: makes registered host memory
  /// [host, host + bytes) reachable by this context's kernels at device
  /// address `device_address` — the app's own address of the same pages, so
  /// that the app's host pointer is also its device pointer, as CUDA's
  /// unified addressing promises (docs/interposer.md "Mapped pinned
  /// memory"). AlreadyExists when device memory occupies that range;
  /// NotSupported when the backend cannot (Backend::MapsHostMemoryForKernels).
  virtual Status MapHostMemoryForKernels(void* host, std::size_t bytes, DevicePtr device_address) {
    return Status::NotSupported("this backend cannot map host memory for kernels");
  }
  /// Undoes MapHostMemoryForKernels (before the host memory is unregistered).
  virtual Status UnmapHostMemoryForKernels(DevicePtr device_address) {
    return Status::NotSupported("this backend cannot map host memory for kernels");
  }

  // ---- streams ------------------------------------------------------------
  virtual Status CreateStream(unsigned flags, int priority, StreamHandle* out) = 0;
  /// Destroys a stream; work already enqueued still runs to completion.
  virtual Status DestroyStream(StreamHandle stream) = 0;
  virtual Status SynchronizeStream(StreamHandle stream) = 0;
  /// OK when all work is done, NotReady while some is pending, or the sticky
  /// error of failed work.
  virtual Status QueryStream(StreamHandle stream) = 0;

  // ---- copies and memset (enqueued on a stream) ----------------------------
  /// Copies `bytes` from `src` to `dst`. Host pointers are plain pointers in
  /// the daemon's address space (cast to uint64); device ones are DevicePtr.
  virtual Status MemcpyAsync(std::uint64_t dst, std::uint64_t src, std::size_t bytes,
                             CopyKind kind, StreamHandle stream) = 0;
  /// Sets `count` elements of `element_size` bytes (1, 2 or 4) at `dst` to
  /// the low bytes of `value` (cuMemsetD8/D16/D32).
  virtual Status MemsetAsync(DevicePtr dst, std::uint32_t value, std::size_t element_size,
                             std::size_t count, StreamHandle stream) = 0;

  // ---- libraries (enqueued on a stream) ------------------------------------
  /// Enqueues one cuBLAS routine (blas_call.h) on `stream`. cuda: the real
  /// cuBLAS on this context's pooled handle (library_handle(kCublas)); sim:
  /// a CPU BLAS (OpenBLAS) on the simulated memory, in stream order.
  /// NotSupported, naming the routine and types, for a combination the
  /// backend cannot compute; InvalidArgument for a bad stream.
  virtual Status Blas(const BlasCall& call, StreamHandle stream) {
    (void)call;
    (void)stream;
    return Status::NotSupported("this backend runs no cuBLAS routines");
  }
  /// OK when Blas would compute `call`'s routine with its types (and
  /// epilogue); else why not (NotSupported / Unavailable). Touches no
  /// memory: the dimensions and addresses of `call` are not looked at.
  virtual Status BlasSupports(const BlasCall& call) const {
    (void)call;
    return Status::NotSupported("this backend runs no cuBLAS routines");
  }

  /// Runs `fn` on a backend thread once the work enqueued on `stream`
  /// before it has run; work enqueued on `stream` after it waits until `fn`
  /// returns (cuLaunchHostFunc). `fn` must not call into this context and
  /// must return by itself (the session's host-function gate returns when
  /// the app answers or the session ends).
  virtual Status LaunchHostFunction(StreamHandle stream, std::function<void()> fn) {
    (void)stream;
    (void)fn;
    return Status::NotSupported("this backend cannot run host functions in stream order");
  }

  // ---- collectives (NCCL; docs/backends.md "Collectives") --------------------
  /// Makes this context rank `rank` of the `nranks`-rank communicator
  /// `unique_id` names (ncclCommInitRank): blocks until every rank joined,
  /// `cancelled()` returns true (Unavailable), or the communicator was
  /// aborted. Ranks may be contexts of several sessions of this backend.
  virtual Status JoinCommunicator(const CommunicatorId& unique_id, int nranks, int rank,
                                  const std::function<bool()>& cancelled, std::shared_ptr<CommRank>* out) {
    (void)unique_id;
    (void)nranks;
    (void)rank;
    (void)cancelled;
    (void)out;
    return Status::NotSupported("this backend runs no NCCL collectives");
  }
  /// Enqueues one group of collective and point-to-point ops of `rank`'s
  /// communicator on `stream` (ncclGroupEnd, or one ncclAllReduce ...):
  /// the group's sends are posted first, then its collectives run in
  /// order, then its receives, so the groups of a ring exchange never wait
  /// on each other. Every buffer must be this context's. Errors of the
  /// group as it runs (a peer that aborted) go to rank.AsyncError(), not
  /// to the stream.
  virtual Status EnqueueCollectives(const std::shared_ptr<CommRank>& rank, const std::vector<CollectiveOp>& ops,
                                    StreamHandle stream) {
    (void)rank;
    (void)ops;
    (void)stream;
    return Status::NotSupported("this backend runs no NCCL collectives");
  }

  // ---- the device heap (device-side malloc/free) ------------------------------
  /// Whether kernels' malloc/free need a heap the session makes
  /// (SetDeviceHeap): the sim's interpreter does; a GPU's driver keeps its
  /// own heap inside the context.
  virtual bool WantsDeviceHeap() const { return false; }
  /// The heap kernels' malloc/free use from now on: `bytes` of device
  /// memory of this context at `base` (a buffer of the session).
  virtual Status SetDeviceHeap(DevicePtr base, std::size_t bytes) {
    (void)base;
    (void)bytes;
    return Status::NotSupported("this backend keeps its own device heap");
  }

  // ---- texture and surface objects (protocol/texture_desc.h) ---------------
  /// Creates an object sampling (texture) or loading and storing (surface)
  /// the texels `desc` describes. The session has checked `desc`
  /// (wire::CheckTextureDesc) and that its texels lie in one of its
  /// buffers. `requested` 0: any handle; else exactly that handle (a
  /// restore into a fresh session: the app and its kernels hold the old
  /// value), or FailedPrecondition naming why not. Backends without them:
  /// NotSupported.
  virtual Status CreateTextureObject(const wire::TextureDesc& desc, bool surface, std::uint64_t requested,
                                     std::uint64_t* handle) {
    (void)desc;
    (void)surface;
    (void)requested;
    (void)handle;
    return Status::NotSupported("this backend has no texture or surface objects");
  }
  virtual Status DestroyTextureObject(std::uint64_t handle) {
    (void)handle;
    return Status::NotSupported("this backend has no texture or surface objects");
  }

  // ---- events ---------------------------------------------------------------
  virtual Status CreateEvent(unsigned flags, EventHandle* out) = 0;
  virtual Status DestroyEvent(EventHandle event) = 0;
  /// Captures the work enqueued on `stream` so far; the event completes when
  /// that work has run.
  virtual Status RecordEvent(EventHandle event, StreamHandle stream) = 0;
  /// Work enqueued on `stream` after this call waits until the event's last
  /// record completes (an event never recorded is already complete).
  virtual Status StreamWaitEvent(StreamHandle stream, EventHandle event) = 0;
  /// OK if complete, NotReady if not.
  virtual Status QueryEvent(EventHandle event) = 0;
  virtual Status SynchronizeEvent(EventHandle event) = 0;
  /// Milliseconds between two completed events (cuEventElapsedTime);
  /// NotReady if either is pending, InvalidArgument if timing is disabled.
  virtual Status ElapsedTime(EventHandle start, EventHandle end, float* ms) = 0;

  /// Waits for all work on all streams of this context; returns the first
  /// sticky error, if any.
  virtual Status Synchronize() = 0;
  // Text the context's kernels printed (device printf) that the app has
  // not taken yet: how many bytes, and up to `max` of them (removed). The
  // sim collects it (interp::DeviceOutput); on a GPU the driver prints
  // printf in phosd's own process, so the cuda backend has none to give.
  virtual std::size_t PendingDeviceOutput() const { return 0; }
  /// cudaLimitPrintfFifoSize: the bytes of device printf text kept before
  /// more is dropped. A backend whose driver prints itself accepts it.
  virtual Status SetDeviceOutputLimit(std::size_t bytes) {
    (void)bytes;
    return Status::Ok();
  }
  virtual void TakeDeviceOutput(std::size_t max, std::string* out) { out->clear(); }

  /// The context's owner is gone (its app died or phosd is stopping) and
  /// nobody will read the results of its queued work: drop what has not
  /// started and stop what runs as soon as the backend can; Synchronize()
  /// then returns soon. Returns at once; any thread (also while another
  /// thread is inside a call on this context); idempotent. Only for a
  /// context about to be released (the session's teardown); later work
  /// fails or is dropped.
  ///   sim: queued ops are skipped, a running kernel stops between blocks.
  ///   cuda: the driver cannot cancel submitted work, so no later call
  ///     waits for it (synchronisations, copies and launches answer
  ///     Unavailable; frees and unloads are left to the destructor), and the
  ///     destructor destroys the context without synchronising it first.
  virtual void Abandon() {}

  // ---- modules and kernels ---------------------------------------------------
  /// Loads a module from an image (fatbin, cubin or PTX text, as
  /// cuModuleLoadData takes it).
  virtual Status LoadModule(const void* image, std::size_t size, ModuleHandle* out) = 0;
  virtual Status UnloadModule(ModuleHandle module) = 0;
  /// LoadModule with the module's variables (__device__, __constant__)
  /// placed as one block starting at `globals_at`, for a restore that must
  /// put them back where the app saw them (its pointers to them are in its
  /// memory). Same image, same layout: one base fixes every variable.
  ///   sim: supported; AlreadyExists when the range is taken.
  ///   cuda: NotSupported (the driver places module variables itself;
  ///     docs/criu.md "Module globals").
  virtual Status LoadModuleWithGlobalsAt(const void* image, std::size_t size, DevicePtr globals_at,
                                         ModuleHandle* out) {
    return Status::NotSupported("this backend places module variables itself");
  }
  /// Where the module's variable block starts (0 when it has none);
  /// NotSupported where LoadModuleWithGlobalsAt is.
  virtual Status GetModuleGlobalsBase(ModuleHandle module, DevicePtr* base) {
    return Status::NotSupported("this backend places module variables itself");
  }
  virtual Status GetFunction(ModuleHandle module, const std::string& name, FunctionHandle* out) = 0;
  /// Address and size of a __device__ variable in a module.
  virtual Status GetGlobal(ModuleHandle module, const std::string& name, DevicePtr* ptr,
                           std::size_t* bytes) = 0;
  /// Launches a kernel. `params` holds the kernel's argument block exactly
  /// as laid out by the kernel's parameter table (offsets from .nv.info).
  virtual Status LaunchKernel(FunctionHandle function, Dim3 grid, Dim3 block,
                              unsigned shared_memory_bytes, StreamHandle stream,
                              const std::vector<std::uint8_t>& params) = 0;
  /// A cooperative launch (cuLaunchCooperativeKernel): every block of the
  /// grid is resident at once, so blocks may wait for each other
  /// (cooperative_groups' grid.sync()). A grid larger than the device holds
  /// at once fails with InvalidArgument carrying api_error 720
  /// (CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE), as in CUDA.
  virtual Status LaunchCooperativeKernel(FunctionHandle function, Dim3 grid, Dim3 block,
                                         unsigned shared_memory_bytes, StreamHandle stream,
                                         const std::vector<std::uint8_t>& params) {
    return Status::NotSupported("this backend has no cooperative launches");
  }
  /// The kernel's attributes (cuFuncGetAttribute for every attribute).
  virtual Status GetFunctionAttributes(FunctionHandle function, FunctionAttributes* out) = 0;
  /// Sets a launch attribute (cuFuncSetAttribute). InvalidArgument for a
  /// value out of range. A launch asking for more dynamic shared memory than
  /// kMaxDynamicSharedSizeBytes allows (default 48 KiB minus static shared)
  /// fails with InvalidArgument, as in CUDA.
  virtual Status SetFunctionAttribute(FunctionHandle function, FunctionAttribute attribute,
                                      int value) = 0;
};

/// A GPU driver: enumerates devices and creates contexts. Thread-safe.
class Backend {
 public:
  virtual ~Backend() = default;

  /// "cuda" or "sim".
  virtual std::string name() const = 0;
  /// One line for `phos status`: driver version, or the sim's model.
  virtual std::string detail() const = 0;
  virtual int device_count() const = 0;
  virtual Status GetDeviceProperties(int device, DeviceProperties* out) const = 0;
  /// One device attribute, by its CUdevice_attribute number (cudaDeviceAttr
  /// uses the same numbers): the driver's answer on cuda, the model's on the
  /// sim (sim_device_attributes.cc). InvalidArgument for a number the
  /// backend does not know. This is the device's answer; whether phos offers
  /// the feature an attribute advertises is decided by the session
  /// (daemon/session/device_attributes.h).
  virtual Status GetDeviceAttribute(int device, int attribute, std::int64_t* out) const = 0;
  /// Whether its contexts implement MapHostMemoryForKernels (phos then
  /// offers CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY).
  virtual bool MapsHostMemoryForKernels() const { return false; }
  /// Whether kernels can set phos's conditional graph handles
  /// (cudaGraphSetConditional stores its value at the handle, the address
  /// of a slot libphos.so allocated): the sim's interpreter does; a GPU's
  /// device runtime expects the driver's handles.
  virtual bool ImplementsConditionalHandles() const { return false; }
  /// Free/total memory of a device, across all contexts.
  virtual Status GetMemoryInfo(int device, std::uint64_t* free_bytes,
                               std::uint64_t* total_bytes) const = 0;
  /// Creates a context on `device` (slow on a real GPU: hundreds of ms; the
  /// context pool hides it).
  virtual Status CreateContext(int device, std::unique_ptr<Context>* out) = 0;
  /// A message from another phosd about a communicator whose ranks are on
  /// both (CollectiveFabric; the peer plane's Collective call). InvalidArgument
  /// for one that contradicts the communicator.
  virtual Status DeliverCollective(const FabricMessage& message) {
    (void)message;
    return Status::NotSupported("this backend runs no collectives across phosds");
  }
  /// The phosd at peer `endpoint` is gone (its etcd lease expired): every
  /// communicator with a rank there ends (its ranks see ncclRemoteError).
  virtual void PeerLost(const std::string& endpoint, const std::string& why) {
    (void)endpoint;
    (void)why;
  }
};

}  // namespace phos::backend
