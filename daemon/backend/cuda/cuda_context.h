// One phos Context on a real GPU: a CUDA context created with cuCtxCreate.
//
// Why a created context and not the device's primary context: the primary
// context is one per device per process, so every phos Context on a GPU would
// share it — one session's Synchronize would wait for every other session's
// work, one faulting kernel would poison all sessions (CUDA errors of device
// work are sticky per context), and a restore could never get the "fresh
// context" docs/protocols.md asks for. The context pool (docs/backends.md "Context pool") wants several
// independent contexts per GPU, created ahead of time; cuCtxCreate gives
// exactly that. (The backend retains the primary context only to answer
// Backend::GetMemoryInfo, see cuda_backend.h.)
//
// Every entry point makes the context current on the calling thread
// (cuCtxSetCurrent), since any phosd thread may call any Context.
//
// Device memory comes from the virtual-memory API (cuMemAddressReserve at a
// chosen address, cuMemCreate, cuMemMap, cuMemSetAccess), so a restore can map
// each buffer at its old address (docs/backends.md). Physical allocations made this
// way belong to the process, not to the context; this Context tracks the ones
// it made and frees them when destroyed.
//
// Handles (streams, events, modules, functions) are ids drawn from one
// process-wide counter, so a handle of another Context is never found here and
// is an InvalidArgument error. The objects behind them are reference counted:
// a call looks its object up under the lock, keeps a reference, drops the lock
// and then calls the driver, so a concurrent Destroy* only unlinks the handle
// and the driver object is destroyed when the last in-flight call is done.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_collectives.h"
#include "backend/cuda/cuda_cublas.h"
#include "backend/cuda/cuda_driver.h"
#include "backend/cuda/cuda_process_health.h"

namespace phos::backend::cuda {

class CudaContext final : public Context {
 public:
  /// Creates a CUDA context on `device` (ordinal `ordinal`) and, when
  /// `cublas` is non-null, a cuBLAS handle in it (a handle that cannot be
  /// created — e.g. no memory left for its workspace — is logged and left
  /// out; the context still works). Leaves the calling thread's current
  /// context as it was.
  /// `health`: the backend's record of whether the process's CUDA still
  /// works; every driver result the context checks goes through it.
  /// `collectives`: the backend's NCCL communicators (cuda_collectives.h).
  static Status Create(std::shared_ptr<const CudaDriver> driver, std::shared_ptr<const CublasLibrary> cublas,
                       std::shared_ptr<ProcessHealth> health, std::shared_ptr<CudaCollectives> collectives,
                       int ordinal, CUdevice device, std::unique_ptr<Context>* out);
  ~CudaContext() override;

  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;

  int device() const override { return ordinal_; }
  /// kCublas: the cublasHandle_t made with the context, or nullptr.
  void* library_handle(Library library) const override {
    return library == Library::kCublas ? static_cast<void*>(cublas_handle_) : nullptr;
  }

  Status Allocate(std::size_t bytes, DevicePtr at, DevicePtr* out) override;
  Status Free(DevicePtr ptr) override;
  Status ReserveAddressRange(std::size_t bytes, std::size_t alignment, DevicePtr at, DevicePtr* out) override;
  Status ReleaseAddressRange(DevicePtr start) override;
  Status GetMemoryInfo(std::uint64_t* free_bytes, std::uint64_t* total_bytes) override;
  Status RegisterHostMemory(void* ptr, std::size_t bytes) override;
  Status UnregisterHostMemory(void* ptr) override;

  Status CreateStream(unsigned flags, int priority, StreamHandle* out) override;
  Status DestroyStream(StreamHandle stream) override;
  Status SynchronizeStream(StreamHandle stream) override;
  Status QueryStream(StreamHandle stream) override;

  Status MemcpyAsync(std::uint64_t dst, std::uint64_t src, std::size_t bytes, CopyKind kind,
                     StreamHandle stream) override;
  Status MemsetAsync(DevicePtr dst, std::uint32_t value, std::size_t element_size,
                     std::size_t count, StreamHandle stream) override;
  Status LaunchHostFunction(StreamHandle stream, std::function<void()> fn) override;
  /// cuBLAS on this context's pooled handle (cuda_blas.cc).
  Status Blas(const BlasCall& call, StreamHandle stream) override;
  /// The real cuBLAS decides when the call runs; here only whether it is
  /// loaded (and cuBLASLt for a Lt matmul).
  Status BlasSupports(const BlasCall& call) const override;

  /// Textures of linear and pitched memory (phos lays CUDA arrays out as
  /// pitched buffers: 1D and 2D arrays qualify) through cuTexObjectCreate.
  /// Refused by name: surfaces, 3D and layered textures (they need real
  /// CUDA arrays), and a `requested` handle (the driver picks handles: a
  /// restore into a fresh context cannot give the app's back). Not yet run
  /// on a GPU.
  Status CreateTextureObject(const wire::TextureDesc& desc, bool surface, std::uint64_t requested,
                             std::uint64_t* handle) override;
  Status DestroyTextureObject(std::uint64_t handle) override;
  Status CreateEvent(unsigned flags, EventHandle* out) override;
  Status DestroyEvent(EventHandle event) override;
  Status RecordEvent(EventHandle event, StreamHandle stream) override;
  Status StreamWaitEvent(StreamHandle stream, EventHandle event) override;
  Status QueryEvent(EventHandle event) override;
  Status SynchronizeEvent(EventHandle event) override;
  Status ElapsedTime(EventHandle start, EventHandle end, float* ms) override;

  /// NCCL (cuda_collectives.h): a rank of a real NCCL communicator, made
  /// in the device's primary context; its groups are ordered with this
  /// context's streams by events. Not yet run on a GPU.
  Status JoinCommunicator(const CommunicatorId& unique_id, int nranks, int rank,
                          const std::function<bool()>& cancelled, std::shared_ptr<CommRank>* out) override;
  Status EnqueueCollectives(const std::shared_ptr<CommRank>& rank, const std::vector<CollectiveOp>& ops,
                            StreamHandle stream) override;

  Status Synchronize() override;
  /// Marks the context abandoned (see Context::Abandon): from then on no call
  /// waits for the device. Synchronisations, copies and launches answer
  /// Unavailable at once; Free, UnloadModule, UnregisterHostMemory and the
  /// destruction of streams, events and modules make no driver call (each of
  /// them may wait for the work in flight) and leave it to the destructor,
  /// which destroys the context without synchronising it first and only
  /// then releases the virtual-memory allocations (the driver does not free
  /// those with the context). What cuCtxDestroy does to a kernel still
  /// running is the driver's: docs/backends.md "Abandoned contexts".
  void Abandon() override;

  Status LoadModule(const void* image, std::size_t size, ModuleHandle* out) override;
  Status UnloadModule(ModuleHandle module) override;
  Status GetFunction(ModuleHandle module, const std::string& name, FunctionHandle* out) override;
  Status GetGlobal(ModuleHandle module, const std::string& name, DevicePtr* ptr,
                   std::size_t* bytes) override;
  Status LaunchKernel(FunctionHandle function, Dim3 grid, Dim3 block, unsigned shared_memory_bytes,
                      StreamHandle stream, const std::vector<std::uint8_t>& params) override;
  Status LaunchCooperativeKernel(FunctionHandle function, Dim3 grid, Dim3 block, unsigned shared_memory_bytes,
                                 StreamHandle stream, const std::vector<std::uint8_t>& params) override;
  Status GetFunctionAttributes(FunctionHandle function, FunctionAttributes* out) override;
  Status SetFunctionAttribute(FunctionHandle function, FunctionAttribute attribute, int value) override;

  /// The allocation granularity (cuMemGetAllocationGranularity, minimum) that
  /// sizes are rounded up to and `at` addresses must be aligned to.
  std::size_t granularity() const { return granularity_; }

 private:
  // Reference-counted driver objects; each destructor makes the context
  // current and destroys its object.
  struct StreamObject;
  struct EventObject;
  struct ModuleObject;
  struct FunctionObject;

  struct Allocation {
    std::size_t size = 0;                      // rounded up to granularity_
    CUmemGenericAllocationHandle handle = 0;   // cuMemCreate
    bool in_reservation = false;  // mapped into a ReserveAddressRange range (whose address stays reserved)
  };

  CudaContext(std::shared_ptr<const CudaDriver> driver, std::shared_ptr<const CublasLibrary> cublas,
              std::shared_ptr<ProcessHealth> health, std::shared_ptr<CudaCollectives> collectives, int ordinal,
              CUdevice device, CUcontext ctx, std::size_t granularity, cublasHandle_t cublas_handle);

  // LaunchKernel and LaunchCooperativeKernel.
  Status Launch(FunctionHandle function, Dim3 grid, Dim3 block, unsigned shared_memory_bytes, StreamHandle stream,
                const std::vector<std::uint8_t>& params, bool cooperative);

  /// cuCtxSetCurrent(ctx_) on the calling thread.
  Status MakeCurrent() const;
  Status Check(CUresult result, std::string_view what) const;

  /// Resolves a stream handle: kDefaultStream -> the legacy NULL stream;
  /// `keep` holds the object alive while the caller uses *out.
  Status FindStream(StreamHandle handle, CUstream* out, std::shared_ptr<StreamObject>* keep);
  Status FindEvent(EventHandle handle, std::shared_ptr<EventObject>* out);
  Status FindModule(ModuleHandle handle, std::shared_ptr<ModuleObject>* out);
  Status FindFunction(FunctionHandle handle, std::shared_ptr<FunctionObject>* out);

  /// OK if [ptr, ptr + bytes) lies inside one allocation of this context,
  /// or else inside one allocation the driver knows (a module global, memory
  /// of another context on this device); InvalidArgument otherwise. Checked
  /// before enqueueing, because a copy that strays out of mapped memory would
  /// fault on the device and poison the whole context (a sticky error).
  Status CheckDeviceRange(DevicePtr ptr, std::size_t bytes, const char* what);

  /// Unavailable if the context was abandoned (checked by every call that
  /// would wait for the device or queue more work on it).
  Status CheckNotAbandoned(const char* what) const;
  bool abandoned() const { return abandoned_->load(std::memory_order_acquire); }

  /// Unmaps, releases and frees one allocation (no lock needed: the caller
  /// has already removed it from allocations_).
  void ReleaseAllocation(DevicePtr ptr, const Allocation& a);

  const std::shared_ptr<const CudaDriver> driver_;
  const std::shared_ptr<ProcessHealth> health_;  // the backend's; thread-safe
  const std::shared_ptr<CudaCollectives> collectives_;  // the backend's; thread-safe
  const int ordinal_;
  const CUdevice device_;
  const CUcontext ctx_;
  const std::size_t granularity_;
  // Immutable after construction; destroyed (context current) in the
  // destructor before the context. Null when cuBLAS is absent.
  const std::shared_ptr<const CublasLibrary> cublas_;
  const cublasHandle_t cublas_handle_;
  // Set once by Abandon(), never cleared. Shared with the stream, event and
  // module objects, whose destructors then skip their driver call; atomic,
  // no lock (Abandon may come from any thread during a call).
  const std::shared_ptr<std::atomic<bool>> abandoned_ = std::make_shared<std::atomic<bool>>(false);

  // mutex_ guards the six maps below and nothing else. It is never held
  // across a driver call that can block (synchronisation, copies, launches,
  // object destruction): calls copy what they need out under the lock.
  mutable std::mutex mutex_;
  // Serialises Blas: the pooled handle's stream and pointer mode are set
  // per call, then the routine is enqueued, as one step.
  std::mutex blas_mutex_;
  cublasLtHandle_t lt_handle_ = nullptr;  // made at the first cublasLtMatmul; guarded by blas_mutex_
  /// cuda_blas.cc: cublasLtMatmul (blas_mutex_ held, context current).
  Status LtMatmul(const BlasCall& call, CUstream stream);
  std::map<DevicePtr, Allocation> allocations_;   // by start address
  std::map<DevicePtr, std::size_t> reservations_;  // ReserveAddressRange: start -> bytes
  std::unordered_map<StreamHandle, std::shared_ptr<StreamObject>> streams_;
  std::unordered_map<EventHandle, std::shared_ptr<EventObject>> events_;
  std::unordered_map<ModuleHandle, std::shared_ptr<ModuleObject>> modules_;
  std::unordered_map<FunctionHandle, std::shared_ptr<FunctionObject>> functions_;
};

}  // namespace phos::backend::cuda
