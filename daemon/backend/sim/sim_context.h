// A sim Context: memory in the backend's address space, streams run by
// worker threads, events, host registrations, and modules whose kernels run
// in the PTX interpreter.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/sim/sim_event.h"
#include "backend/sim/sim_host_aliases.h"
#include "backend/sim/sim_module.h"
#include "backend/sim/sim_shared.h"
#include "backend/sim/sim_stream.h"
#include "backend/sim/sim_textures.h"
#include "interp/device_output.h"

namespace phos::backend::sim {

class SimContext final : public Context {
 public:
  SimContext(std::shared_ptr<SimShared> shared, int device, std::uint64_t id);
  /// Lets all queued work finish, then frees the context's allocations.
  ~SimContext() override;

  int device() const override { return device_; }

  Status Allocate(std::size_t bytes, DevicePtr at, DevicePtr* out) override;
  Status Free(DevicePtr ptr) override;
  Status AllocateForDaemon(std::size_t bytes, DevicePtr* out) override;
  Status ReserveAddressRange(std::size_t bytes, std::size_t alignment, DevicePtr at, DevicePtr* out) override;
  Status ReleaseAddressRange(DevicePtr start) override;
  Status GetMemoryInfo(std::uint64_t* free_bytes, std::uint64_t* total_bytes) override;
  Status RegisterHostMemory(void* ptr, std::size_t bytes) override;
  Status UnregisterHostMemory(void* ptr) override;
  Status MapHostMemoryForKernels(void* host, std::size_t bytes, DevicePtr device_address) override;
  Status UnmapHostMemoryForKernels(DevicePtr device_address) override;

  Status CreateStream(unsigned flags, int priority, StreamHandle* out) override;
  Status DestroyStream(StreamHandle stream) override;
  Status SynchronizeStream(StreamHandle stream) override;
  Status QueryStream(StreamHandle stream) override;

  Status MemcpyAsync(std::uint64_t dst, std::uint64_t src, std::size_t bytes, CopyKind kind,
                     StreamHandle stream) override;
  Status MemsetAsync(DevicePtr dst, std::uint32_t value, std::size_t element_size,
                     std::size_t count, StreamHandle stream) override;
  Status LaunchHostFunction(StreamHandle stream, std::function<void()> fn) override;
  /// cuBLAS on OpenBLAS (sim_blas.h), in stream order, its ranges pinned.
  Status Blas(const BlasCall& call, StreamHandle stream) override;
  Status BlasSupports(const BlasCall& call) const override;

  /// Kernels' malloc/free run on a heap the session makes (interp's ops_heap.cc).
  bool WantsDeviceHeap() const override { return true; }
  Status SetDeviceHeap(DevicePtr base, std::size_t bytes) override;
  /// Objects of this context (sim_textures.h); handles count up from 1.
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

  Status Synchronize() override;
  std::size_t PendingDeviceOutput() const override { return device_output_->pending(); }
  void TakeDeviceOutput(std::size_t max, std::string* out) override { device_output_->Take(max, out); }
  Status SetDeviceOutputLimit(std::size_t bytes) override {
    device_output_->SetLimit(bytes);
    return Status::Ok();
  }
  /// Sets the flag every stream and queued kernel of this context reads:
  /// queued ops are skipped, running kernels stop between blocks. Returns
  /// at once (lock-free); Synchronize() then returns soon.
  void Abandon() override;

  Status JoinCommunicator(const CommunicatorId& unique_id, int nranks, int rank,
                          const std::function<bool()>& cancelled, std::shared_ptr<CommRank>* out) override;
  Status EnqueueCollectives(const std::shared_ptr<CommRank>& rank, const std::vector<CollectiveOp>& ops,
                            StreamHandle stream) override;

  Status LoadModule(const void* image, std::size_t size, ModuleHandle* out) override;
  Status LoadModuleWithGlobalsAt(const void* image, std::size_t size, DevicePtr globals_at,
                                 ModuleHandle* out) override;
  Status GetModuleGlobalsBase(ModuleHandle module, DevicePtr* base) override;
  Status UnloadModule(ModuleHandle module) override;
  Status GetFunction(ModuleHandle module, const std::string& name, FunctionHandle* out) override;
  Status GetGlobal(ModuleHandle module, const std::string& name, DevicePtr* ptr,
                   std::size_t* bytes) override;
  Status LaunchKernel(FunctionHandle function, Dim3 grid, Dim3 block,
                      unsigned shared_memory_bytes, StreamHandle stream,
                      const std::vector<std::uint8_t>& params) override;
  Status LaunchCooperativeKernel(FunctionHandle function, Dim3 grid, Dim3 block,
                                 unsigned shared_memory_bytes, StreamHandle stream,
                                 const std::vector<std::uint8_t>& params) override;
  Status GetFunctionAttributes(FunctionHandle function, FunctionAttributes* out) override;
  Status SetFunctionAttribute(FunctionHandle function, FunctionAttribute attribute,
                              int value) override;

 private:
  // LaunchKernel and LaunchCooperativeKernel.
  Status Launch(FunctionHandle function, Dim3 grid, Dim3 block, unsigned shared_memory_bytes,
                StreamHandle stream, const std::vector<std::uint8_t>& params, bool cooperative);

  struct StreamEntry {
    std::unique_ptr<SimStream> stream;
    bool blocking = true;  // synchronises with the legacy default stream
  };
  // A point in a stream's queue to wait for.
  struct Mark {
    SimStream::Progress progress;
    std::uint64_t seq = 0;
  };

  /// A stream with the sim's queue bound and this context's abandon flag.
  std::unique_ptr<SimStream> NewStream() const;
  // All *Locked helpers: the caller holds mu_.
  std::uint64_t NewHandleLocked();
  Status FindStreamLocked(StreamHandle handle, StreamEntry** out);
  Status FindEventLocked(EventHandle handle, std::shared_ptr<SimEvent>* out);
  /// Enqueues `op` on a stream, adding the legacy default-stream waits.
  Status EnqueueLocked(StreamHandle handle, SimStream::Op op,
                       std::function<void()> after = nullptr);
  /// Marks for all pending work on blocking streams (live and retired).
  void BlockingMarksLocked(std::vector<Mark>* out);
  /// What waiting for `handle` means: its own work, and for the default
  /// stream also all prior work on blocking streams.
  Status StreamMarksLocked(StreamHandle handle, std::vector<Mark>* out);
  /// Joins destroyed streams whose queues have drained.
  void ReapRetiredLocked();

  const std::shared_ptr<SimShared> shared_;
  const int device_;
  const std::uint64_t id_;  // tags this context's handles (high 32 bits)
  // Set once by Abandon(); read by every stream and queued kernel launch
  // (they share it, so it outlives the context if one of them does).
  const std::shared_ptr<std::atomic<bool>> abandoned_ = std::make_shared<std::atomic<bool>>(false);
  // What this context's kernels print (device printf), until the session
  // takes it. Shared with queued launches, which may outlive a call.
  // Thread-safe itself (interp/device_output.h).
  const std::shared_ptr<interp::DeviceOutput> device_output_ = std::make_shared<interp::DeviceOutput>();
  // Mapped host memory; its own lock. Shared with queued launches.
  const std::shared_ptr<SimHostAliases> host_aliases_ = std::make_shared<SimHostAliases>();

  // mu_ protects every member below, and serialises enqueueing so the
  // default-stream dependencies of concurrent enqueues never form a cycle.
  // Lock order: mu_ before any SimStream/SimEvent/SimAddressSpace lock;
  // stream workers never take mu_.
  std::mutex mu_;
  std::uint32_t next_handle_ = 0;
  // Texture and surface objects: replaced, never changed in place (each
  // launch keeps the table it was enqueued with).
  std::shared_ptr<const SimTextureTable> textures_ = std::make_shared<SimTextureTable>();
  std::uint64_t next_texture_ = 1;
  // The device heap (SetDeviceHeap; 0: none yet).
  DevicePtr heap_base_ = 0;
  std::size_t heap_bytes_ = 0;
  StreamEntry default_stream_;                          // kDefaultStream
  std::map<StreamHandle, StreamEntry> streams_;          // created streams
  std::vector<StreamEntry> retired_;                    // destroyed, still draining
  std::map<EventHandle, std::shared_ptr<SimEvent>> events_;  // shared with record/wait ops
  // Loaded modules. Shared with launches queued on streams, so unloading
  // a module never pulls it from under a kernel that is about to run.
  std::map<ModuleHandle, std::shared_ptr<SimModule>> modules_;
  struct KernelEntry {
    ModuleHandle module = 0;
    std::shared_ptr<SimModule> program;
    std::string name;
    // Whether the interpreter can run every instruction the kernel reaches,
    // found once by GetFunction and returned by every LaunchKernel.
    Status runnable;
    // From SimModule::KernelAttributes; the settable ones change with
    // SetFunctionAttribute and bound LaunchKernel's dynamic shared memory.
    FunctionAttributes attributes;
  };
  std::map<FunctionHandle, KernelEntry> functions_;     // from GetFunction
  std::map<std::uintptr_t, std::size_t> host_ranges_;   // registered host memory
};

}  // namespace phos::backend::sim
