#include "backend/cuda/cuda_context.h"

#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <iterator>
#include <utility>

#include <spdlog/spdlog.h>

#include "backend/cuda/cuda_errors.h"
#include "protocol/texture_desc.h"

namespace phos::backend::cuda {
namespace {

// Looks `handle` up in one of the context's handle maps (caller holds the
// context's mutex). `gone` says how a valid handle stops being valid.
template <typename Map, typename Ptr>
Status FindHandleLocked(const Map& map, std::uint64_t handle, const char* kind, const char* gone,
                        Ptr* out) {
  auto it = map.find(handle);
  if (it == map.end()) {
    return Status::InvalidArgument(std::string("unknown ") + kind + " handle " +
                                   std::to_string(handle) + " (" + gone +
                                   ", or from another context)");
  }
  *out = it->second;
  return Status::Ok();
}

static_assert(kStreamNonBlocking == CU_STREAM_NON_BLOCKING, "stream flag values differ from CUDA's");
static_assert(kEventBlockingSync == CU_EVENT_BLOCKING_SYNC, "event flag values differ from CUDA's");
static_assert(kEventDisableTiming == CU_EVENT_DISABLE_TIMING, "event flag values differ from CUDA's");
static_assert(sizeof(CUdeviceptr) == sizeof(DevicePtr), "CUdeviceptr is not 64-bit");

// Handles come from one process-wide counter so that no two Contexts ever
// mint the same id (a handle used with the wrong Context is then simply not
// found). Lock-free; 2^64 ids do not run out.
std::atomic<std::uint64_t> g_next_handle{1};
std::uint64_t NextHandle() { return g_next_handle.fetch_add(1, std::memory_order_relaxed); }

// The range a device address may be requested in. Device virtual addresses
// share the process's unified address space, whose user half on x86-64 Linux
// (4-level paging) ends at 2^47; the driver places device memory above 4 GiB
// (the low range holds the executable and the heap), so a request below that
// is a caller's mistake (InvalidArgument), not a taken range (AlreadyExists).
constexpr std::uint64_t kAddressBase = 1ull << 32;
constexpr std::uint64_t kAddressLimit = 1ull << 47;

std::string Hex(std::uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%" PRIx64, v);
  return buf;
}

}  // namespace

// ---- reference-counted driver objects ---------------------------------------

// Each destructor skips its driver call once the context is abandoned: the
// call could wait for work in flight, and cuCtxDestroy frees the object.
struct CudaContext::StreamObject {
  const CudaDriver* driver;
  CUcontext ctx;
  std::shared_ptr<const std::atomic<bool>> abandoned;
  CUstream stream = nullptr;
  ~StreamObject() {
    if (stream == nullptr || abandoned->load(std::memory_order_acquire)) return;
    driver->CtxSetCurrent(ctx);
    driver->StreamDestroy(stream);  // enqueued work still runs to completion
  }
};

struct CudaContext::EventObject {
  const CudaDriver* driver;
  CUcontext ctx;
  std::shared_ptr<const std::atomic<bool>> abandoned;
  CUevent event = nullptr;
  unsigned flags = 0;
  ~EventObject() {
    if (event == nullptr || abandoned->load(std::memory_order_acquire)) return;
    driver->CtxSetCurrent(ctx);
    driver->EventDestroy(event);
  }
};

struct CudaContext::ModuleObject {
  const CudaDriver* driver;
  CUcontext ctx;
  std::shared_ptr<const std::atomic<bool>> abandoned;
  CUmodule module = nullptr;
  ~ModuleObject() {
    if (module == nullptr || abandoned->load(std::memory_order_acquire)) return;
    driver->CtxSetCurrent(ctx);
    driver->ModuleUnload(module);
  }
};

struct CudaContext::FunctionObject {
  std::shared_ptr<ModuleObject> module;  // keeps the module loaded while a launch is in flight
  ModuleHandle module_handle = 0;
  CUfunction function = nullptr;
  std::string name;
};

// ---- lifetime -------------------------------------------------------------------

Status CudaContext::Create(std::shared_ptr<const CudaDriver> driver, std::shared_ptr<const CublasLibrary> cublas,
                           std::shared_ptr<ProcessHealth> health, std::shared_ptr<CudaCollectives> collectives,
                           int ordinal, CUdevice device, std::unique_ptr<Context>* out) {
  const CudaDriver* d = driver.get();
  int vmm = 0;
  CUresult rc = d->DeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, device);
  if (rc != CUDA_SUCCESS) return CudaStatus(rc, "cuDeviceGetAttribute(VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)", d);
  if (!vmm) {
    return Status::NotSupported("GPU " + std::to_string(ordinal) +
                                " does not support the CUDA virtual-memory API, which phos needs to "
                                "place buffers at fixed addresses");
  }

  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  std::size_t granularity = 0;
  rc = d->MemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  if (rc != CUDA_SUCCESS) return CudaStatus(rc, "cuMemGetAllocationGranularity", d);
  if (granularity == 0) return Status::Internal("cuMemGetAllocationGranularity returned 0");

  // cuCtxCreate (the CUDA 12.5+ variant, with CUctxCreateParams; NULL = no
  // execution affinity, no CIG) makes the new context current on this thread;
  // pop it so the thread is left as it was. Scheduling flags: CU_CTX_SCHED_AUTO
  // (spin while there are no more contexts than cores, then yield).
  CUcontext ctx = nullptr;
  rc = d->CtxCreate(&ctx, nullptr, CU_CTX_SCHED_AUTO, device);
  if (rc != CUDA_SUCCESS) {
    Status failed = CudaStatus(rc, "cuCtxCreate on GPU " + std::to_string(ordinal), d);
    health->Note(rc, failed);
    return failed;
  }
  // The cuBLAS handle, while the new context is current: cuBLAS's runtime
  // binds the handle (and the default workspace cublasCreate allocates) to
  // the current context. Optional: a context without it still serves every
  // non-cuBLAS call, so a failure is logged, not fatal.
  cublasHandle_t cublas_handle = nullptr;
  if (cublas != nullptr) {
    Status cs = CublasStatus(cublas->Create(&cublas_handle), "cublasCreate_v2 on GPU " + std::to_string(ordinal),
                             cublas.get());
    if (!cs.ok()) {
      spdlog::warn("cuda backend: context without a cuBLAS handle: {}", cs.ToString());
      cublas_handle = nullptr;
    }
  }
  CUcontext popped = nullptr;
  d->CtxPopCurrent(&popped);

  out->reset(new CudaContext(std::move(driver), std::move(cublas), std::move(health), std::move(collectives),
                             ordinal, device, ctx, granularity, cublas_handle));
  return Status::Ok();
}

CudaContext::CudaContext(std::shared_ptr<const CudaDriver> driver, std::shared_ptr<const CublasLibrary> cublas,
                         std::shared_ptr<ProcessHealth> health, std::shared_ptr<CudaCollectives> collectives,
                         int ordinal, CUdevice device, CUcontext ctx, std::size_t granularity,
                         cublasHandle_t cublas_handle)
    : driver_(std::move(driver)),
      health_(std::move(health)),
      collectives_(std::move(collectives)),
      ordinal_(ordinal),
      device_(device),
      ctx_(ctx),
      granularity_(granularity),
      cublas_(std::move(cublas)),
      cublas_handle_(cublas_handle) {}

CudaContext::~CudaContext() {
  // No other thread may call a Context while it is destroyed, so the lock is
  // only taken for form; objects are destroyed after it is dropped.
  std::map<DevicePtr, Allocation> allocations;
  std::map<DevicePtr, std::size_t> reservations;
  std::unordered_map<FunctionHandle, std::shared_ptr<FunctionObject>> functions;
  std::unordered_map<ModuleHandle, std::shared_ptr<ModuleObject>> modules;
  std::unordered_map<EventHandle, std::shared_ptr<EventObject>> events;
  std::unordered_map<StreamHandle, std::shared_ptr<StreamObject>> streams;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    allocations.swap(allocations_);
    reservations.swap(reservations_);
    functions.swap(functions_);
    modules.swap(modules_);
    events.swap(events_);
    streams.swap(streams_);
  }
  if (abandoned()) {
    // Nothing waits for the device: the objects' destructors make no driver
    // call, the context goes with what it still runs (and its cuBLAS
    // handle's device state; cublasDestroy would synchronise), then the
    // virtual-memory allocations, which cuCtxDestroy does not free.
    functions.clear();
    modules.clear();
    events.clear();
    streams.clear();
    driver_->CtxDestroy(ctx_);
    for (const auto& [ptr, a] : allocations) ReleaseAllocation(ptr, a);
    for (const auto& [ptr, bytes] : reservations) driver_->MemAddressFree(ptr, bytes);
    return;
  }
  if (driver_->CtxSetCurrent(ctx_) == CUDA_SUCCESS) {
    driver_->CtxSynchronize();
    // cuBLAS frees its workspace in the current context: before the
    // context goes. (If the context cannot be made current the handle is
    // left to die with the context rather than destroyed in another one.)
    if (cublas_handle_ != nullptr) cublas_->Destroy(cublas_handle_);
    if (lt_handle_ != nullptr && cublas_->LtDestroy != nullptr) cublas_->LtDestroy(lt_handle_);
  }
  functions.clear();
  modules.clear();
  events.clear();
  streams.clear();
  for (const auto& [ptr, a] : allocations) ReleaseAllocation(ptr, a);
  for (const auto& [ptr, bytes] : reservations) driver_->MemAddressFree(ptr, bytes);
  // Leaves no context current on this thread (cuCtxDestroy pops it if it is).
  driver_->CtxDestroy(ctx_);
}

void CudaContext::Abandon() { abandoned_->store(true, std::memory_order_release); }

Status CudaContext::CheckNotAbandoned(const char* what) const {
  if (!abandoned()) return Status::Ok();
  return AbandonedStatus(what);
}

Status CudaContext::MakeCurrent() const {
  CUresult rc = driver_->CtxSetCurrent(ctx_);
  if (rc != CUDA_SUCCESS) return CudaStatus(rc, "cuCtxSetCurrent", driver_.get());
  return Status::Ok();
}

Status CudaContext::Check(CUresult result, std::string_view what) const {
  Status s = CudaStatus(result, what, driver_.get());
  if (!s.ok()) health_->Note(result, s);
  return s;
}

// ---- lookups ----------------------------------------------------------------------

Status CudaContext::FindStream(StreamHandle handle, CUstream* out, std::shared_ptr<StreamObject>* keep) {
  if (handle == kDefaultStream) {
    // The legacy NULL stream: the entry points were resolved with
    // CU_GET_PROC_ADDRESS_LEGACY_STREAM, so 0 means CU_STREAM_LEGACY here.
    *out = nullptr;
    return Status::Ok();
  }
  std::lock_guard<std::mutex> lock(mutex_);
  PHOS_RETURN_IF_ERROR(FindHandleLocked(streams_, handle, "stream", "destroyed", keep));
  *out = (*keep)->stream;
  return Status::Ok();
}

Status CudaContext::FindEvent(EventHandle handle, std::shared_ptr<EventObject>* out) {
  std::lock_guard<std::mutex> lock(mutex_);
  return FindHandleLocked(events_, handle, "event", "destroyed", out);
}

Status CudaContext::FindModule(ModuleHandle handle, std::shared_ptr<ModuleObject>* out) {
  std::lock_guard<std::mutex> lock(mutex_);
  return FindHandleLocked(modules_, handle, "module", "unloaded", out);
}

Status CudaContext::FindFunction(FunctionHandle handle, std::shared_ptr<FunctionObject>* out) {
  std::lock_guard<std::mutex> lock(mutex_);
  return FindHandleLocked(functions_, handle, "function", "its module was unloaded", out);
}

// ---- memory ------------------------------------------------------------------------

Status CudaContext::Allocate(std::size_t bytes, DevicePtr at, DevicePtr* out) {
  if (out == nullptr) return Status::InvalidArgument("Allocate: null output pointer");
  if (bytes == 0) return Status::InvalidArgument("Allocate: size is 0");
  if (bytes > kAddressLimit) return Status::OutOfMemory("Allocate: " + std::to_string(bytes) + " bytes");
  const std::size_t size = (bytes + granularity_ - 1) / granularity_ * granularity_;
  bool in_reservation = false;  // `at` lies in one of reservations_
  if (at != 0) {
    if (at % granularity_ != 0) {
      return Status::InvalidArgument("Allocate at " + Hex(at) + ": not aligned to the allocation granularity " +
                                     Hex(granularity_));
    }
    if (at < kAddressBase || at >= kAddressLimit || kAddressLimit - at < size) {
      return Status::InvalidArgument("Allocate at " + Hex(at) + " (+" + Hex(size) +
                                     "): outside the device address range [" + Hex(kAddressBase) + ", " +
                                     Hex(kAddressLimit) + ")");
    }
    std::lock_guard<std::mutex> lock(mutex_);
    auto next = allocations_.lower_bound(at);
    if (next != allocations_.end() && next->first < at + size) {
      return Status::AlreadyExists("Allocate at " + Hex(at) + ": overlaps the allocation at " + Hex(next->first));
    }
    if (next != allocations_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second.size > at) {
        return Status::AlreadyExists("Allocate at " + Hex(at) + ": overlaps the allocation at " + Hex(prev->first));
      }
    }
    // Inside one of our reserved ranges: map there, reserving nothing.
    auto r = reservations_.upper_bound(at + size - 1);
    if (r != reservations_.begin()) {
      --r;
      if (r->first + r->second > at) {
        if (at < r->first || at + size > r->first + r->second) {
          return Status::AlreadyExists("Allocate at " + Hex(at) + ": overlaps the reserved range at " +
                                       Hex(r->first) + " without lying inside it");
        }
        in_reservation = true;
      }
    }
  }
  PHOS_RETURN_IF_ERROR(MakeCurrent());
  const CudaDriver* d = driver_.get();

  // 1. Reserve the address range (at the requested address if there is one;
  //    the driver takes `at` as a hint and returns another range if it is taken).
  CUdeviceptr ptr = static_cast<CUdeviceptr>(at);
  CUresult rc = CUDA_SUCCESS;
  if (!in_reservation) {
    rc = d->MemAddressReserve(&ptr, size, granularity_, static_cast<CUdeviceptr>(at), 0);
    if (rc != CUDA_SUCCESS) {
      if (rc == CUDA_ERROR_OUT_OF_MEMORY) {
        return Status::OutOfMemory("cuMemAddressReserve of " + std::to_string(size) + " bytes" +
                                   (at ? " at " + Hex(at) : std::string()) + ": no free address range");
      }
      return Check(rc, "cuMemAddressReserve");
    }
    if (at != 0 && ptr != at) {
      d->MemAddressFree(ptr, size);
      return Status::AlreadyExists("Allocate at " + Hex(at) + ": the address range is taken (the driver offered " +
                                   Hex(ptr) + " instead)");
    }
  }
  // Undoes step 1 on a later failure.
  auto unreserve = [&] {
    if (!in_reservation) d->MemAddressFree(ptr, size);
  };

  // 2. Physical memory on this device.
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device_;
  CUmemGenericAllocationHandle handle = 0;
  rc = d->MemCreate(&handle, size, &prop, 0);
  if (rc != CUDA_SUCCESS) {
    unreserve();
    return Check(rc, ("cuMemCreate of " + std::to_string(size) + " bytes"));
  }

  // 3. Map it and allow this device to read and write it.
  rc = d->MemMap(ptr, size, 0, handle, 0);
  if (rc != CUDA_SUCCESS) {
    d->MemRelease(handle);
    unreserve();
    return Check(rc, "cuMemMap");
  }
  CUmemAccessDesc access = {};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device_;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  rc = d->MemSetAccess(ptr, size, &access, 1);
  if (rc != CUDA_SUCCESS) {
    d->MemUnmap(ptr, size);
    d->MemRelease(handle);
    unreserve();
    return Check(rc, "cuMemSetAccess");
  }

  {
    std::lock_guard<std::mutex> lock(mutex_);
    allocations_[ptr] = Allocation{size, handle, in_reservation};
  }
  *out = ptr;
  return Status::Ok();
}

void CudaContext::ReleaseAllocation(DevicePtr ptr, const Allocation& a) {
  const CudaDriver* d = driver_.get();
  d->MemUnmap(ptr, a.size);
  d->MemRelease(a.handle);
  if (!a.in_reservation) d->MemAddressFree(ptr, a.size);
}

Status CudaContext::Free(DevicePtr ptr) {
  Allocation a;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = allocations_.find(ptr);
    if (it == allocations_.end()) {
      return Status::InvalidArgument("Free " + Hex(ptr) + ": not the start of an allocation of this context");
    }
    // Abandoned: cuMemUnmap would wait for kernels that may still use the
    // range; the destructor releases it after the context is gone.
    if (abandoned()) return Status::Ok();
    a = it->second;
    allocations_.erase(it);
  }
  PHOS_RETURN_IF_ERROR(MakeCurrent());
  const CudaDriver* d = driver_.get();
  CUresult rc = d->MemUnmap(ptr, a.size);
  CUresult rc2 = d->MemRelease(a.handle);
  CUresult rc3 = a.in_reservation ? CUDA_SUCCESS : d->MemAddressFree(ptr, a.size);
  if (rc != CUDA_SUCCESS) return Check(rc, "cuMemUnmap");
  if (rc2 != CUDA_SUCCESS) return Check(rc2, "cuMemRelease");
  return Check(rc3, "cuMemAddressFree");
}

Status CudaContext::ReserveAddressRange(std::size_t bytes, std::size_t alignment, DevicePtr at, DevicePtr* out) {
  if (out == nullptr) return Status::InvalidArgument("ReserveAddressRange: null output pointer");
  if (bytes == 0 || bytes % granularity_ != 0) {
    return Status::InvalidArgument("cannot reserve " + std::to_string(bytes) +
                                   " bytes of device address space: the size must be a non-zero multiple of " +
                                   Hex(granularity_));
  }
  if (alignment < granularity_) alignment = granularity_;
  if ((alignment & (alignment - 1)) != 0) {
    return Status::InvalidArgument("address alignment " + Hex(alignment) + " is not a power of two");
  }
  if (at % alignment != 0) {
    return Status::InvalidArgument("device address " + Hex(at) + " is not aligned to " + Hex(alignment));
  }
  PHOS_RETURN_IF_ERROR(CheckNotAbandoned("ReserveAddressRange"));
  PHOS_RETURN_IF_ERROR(MakeCurrent());
  CUdeviceptr ptr = 0;
  CUresult rc = driver_->MemAddressReserve(&ptr, bytes, alignment, static_cast<CUdeviceptr>(at), 0);
  if (rc == CUDA_ERROR_OUT_OF_MEMORY) {
    return Status::OutOfMemory("cuMemAddressReserve of " + std::to_string(bytes) + " bytes: no free address range");
  }
  PHOS_RETURN_IF_ERROR(Check(rc, "cuMemAddressReserve"));
  if (at != 0 && ptr != at) {
    driver_->MemAddressFree(ptr, bytes);
    return Status::AlreadyExists("ReserveAddressRange at " + Hex(at) + ": the address range is taken (the driver "
                                 "offered " + Hex(ptr) + " instead)");
  }
  std::lock_guard<std::mutex> lock(mutex_);
  reservations_[ptr] = bytes;
  *out = ptr;
  return Status::Ok();
}

Status CudaContext::ReleaseAddressRange(DevicePtr start) {
  std::size_t bytes = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto r = reservations_.find(start);
    if (r == reservations_.end()) {
      return Status::InvalidArgument("device address " + Hex(start) + " is not the start of a reserved range of "
                                     "this context");
    }
    auto inside = allocations_.lower_bound(start);
    if (inside != allocations_.end() && inside->first < start + r->second) {
      return Status::FailedPrecondition("the reserved range at " + Hex(start) + " still holds the allocation at " +
                                        Hex(inside->first));
    }
    bytes = r->second;
    reservations_.erase(r);
  }
  if (abandoned()) return Status::Ok();  // the destructor's cuCtxDestroy path frees nothing more
  PHOS_RETURN_IF_ERROR(MakeCurrent());
  return Check(driver_->MemAddressFree(start, bytes), "cuMemAddressFree");
}

Status CudaContext::CheckDeviceRange(DevicePtr ptr, std::size_t bytes, const char* what) {
  if (ptr > ~std::uint64_t{0} - bytes) {
    return Status::InvalidArgument(std::string(what) + ": device range " + Hex(ptr) + " + " + Hex(bytes) +
                                   " wraps around");
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = allocations_.upper_bound(ptr);
    if (it != allocations_.begin()) {
      --it;
      const DevicePtr start = it->first;
      const std::uint64_t end = start + it->second.size;
      if (ptr < end) {
        if (ptr + bytes <= end) return Status::Ok();
        // Back-to-back mappings in one reserved range are one range (the
        // app mapped them so, as PyTorch's expandable segments do).
        auto cur = it;
        while (cur->second.in_reservation) {
          auto next = std::next(cur);
          if (next == allocations_.end() || !next->second.in_reservation ||
              next->first != cur->first + cur->second.size) {
            break;
          }
          cur = next;
          if (ptr + bytes <= cur->first + cur->second.size) return Status::Ok();
        }
        return Status::InvalidArgument(std::string(what) + ": device range " + Hex(ptr) + " + " + Hex(bytes) +
                                       " runs past the end of the allocation at " + Hex(start) + " (" +
                                       Hex(it->second.size) + " bytes)");
      }
    }
  }
  // Not ours: a module global, or memory of another context. Ask the driver.
  PHOS_RETURN_IF_ERROR(MakeCurrent());
  CUdeviceptr base = 0;
  std::size_t size = 0;
  if (driver_->MemGetAddressRange(&base, &size, ptr) == CUDA_SUCCESS && ptr + bytes <= base + size) {
    return Status::Ok();
  }
  return Status::InvalidArgument(std::string(what) + ": device range " + Hex(ptr) + " + " + Hex(bytes) +
                                 " is not (entirely) inside allocated device memory");
}

Status CudaContext::GetMemoryInfo(std::uint64_t* free_bytes, std::uint64_t* total_bytes) {
  PHOS_RETURN_IF_ERROR(MakeCurrent());
  std::size_t free_b = 0, total_b = 0;
  PHOS_RETURN_IF_ERROR(Check(driver_->MemGetInfo(&free_b, &total_b), "cuMemGetInfo"));
  if (free_bytes) *free_bytes = free_b;
  if (total_bytes) *total_bytes = total_b;
  return Status::Ok();
}

Status CudaContext::RegisterHostMemory(void* ptr, std::size_t bytes) {
  if (ptr == nullptr || bytes == 0) return Status::InvalidArgument("RegisterHostMemory: null pointer or size 0");
  PHOS_RETURN_IF_ERROR(MakeCurrent());
  // PORTABLE: the staging arena is pinned for every context of the daemon,
  // not just this one.
  return Check(driver_->MemHostRegister(ptr, bytes, CU_MEMHOSTREGISTER_PORTABLE), "cuMemHostRegister");
}

Status CudaContext::UnregisterHostMemory(void* ptr) {
  if (ptr == nullptr) return Status::InvalidArgument("UnregisterHostMemory: null pointer");
  // Abandoned: the registration goes with the context (cuCtxDestroy), and
  // unregistering could wait for copies still reading the pages.
  if (abandoned()) return Status::Ok();
  PHOS_RETURN_IF_ERROR(MakeCurrent());
  return Check(driver_->MemHostUnregister(ptr), "cuMemHostUnregister");
}

// ---- streams -----------------------------------------------------------------------

Status CudaContext::CreateStream(unsigned flags, int priority, StreamHandle* out) {
  if (out == nullptr) return Status::InvalidArgument("CreateStream: null output pointer");
  if ((flags & ~kStreamNonBlocking) != 0) {
    return Status::InvalidArgument("CreateStream: unknown flags " + Hex(flags));
  }
  PHOS_RETURN_IF_ERROR(MakeCurrent());
  auto obj = std::make_shared<StreamObject>();
  obj->driver = driver_.get();
  obj->ctx = ctx_;
  obj->abandoned = abandoned_;
  // The driver clamps the priority to the device's range, as CUDA does.
  PHOS_RETURN_IF_ERROR(Check(driver_->StreamCreateWithPriority(&obj->stream, flags, priority),
                             "cuStreamCreateWithPriority"));
  const StreamHandle h = NextHandle();
  std::lock_guard<std::mutex> lock(mutex_);
  streams_.emplace(h, std::move(obj));
  *out = h;
  return Status::Ok();
}

Status CudaContext::DestroyStream(StreamHandle stream) {
  if (stream == kDefaultStream) return Status::InvalidArgument("DestroyStream: the default stream cannot be destroyed");
  std::shared_ptr<StreamObject> obj;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = streams_.find(stream);
    if (it == streams_.end()) {
      return Status::InvalidArgument("DestroyStream: unknown stream handle " + std::to_string(stream));
    }
    obj = std::move(it->second);
    streams_.erase(it);
  }
  return Status::Ok();  // obj's destructor destroys the stream (or the last in-flight call's)
}

Status CudaContext::SynchronizeStream(StreamHandle stream) {
  PHOS_RETURN_IF_ERROR(CheckNotAbandoned("SynchronizeStream"));
  CUstream s = nullptr;
  std::shared_ptr<StreamObject> keep;
  PHOS_RETURN_IF_ERROR(FindStream(stream, &s, &keep));
  PHOS_RETURN_IF_ERROR(MakeCurrent());
  return Check(driver_->StreamSynchronize(s), "cuStreamSynchronize");
}

Status CudaContext::QueryStream(StreamHandle stream) {
  CUstream s = nullptr;
  std::shared_ptr<StreamObject> keep;
  PHOS_RETURN_IF_ERROR(FindStream(stream, &s, &keep));
  PHOS_RETURN_IF_ERROR(MakeCurrent());
  return Check(driver_->StreamQuery(s), "cuStreamQuery");
}

// ---- copies ---------------------------------------------------------------------------

Status CudaContext::MemcpyAsync(std::uint64_t dst, std::uint64_t src, std::size_t bytes, CopyKind kind,
                                StreamHandle stream) {
  PHOS_RETURN_IF_ERROR(CheckNotAbandoned("MemcpyAsync"));
  CUstream s = nullptr;
  std::shared_ptr<StreamObject> keep;
  PHOS_RETURN_IF_ERROR(FindStream(stream, &s, &keep));
  if (bytes == 0) return Status::Ok();
  if (dst == 0 || src == 0) return Status::InvalidArgument("MemcpyAsync: null address");
  if (kind == CopyKind::kDeviceToHost || kind == CopyKind::kDeviceToDevice) {
    PHOS_RETURN_IF_ERROR(CheckDeviceRange(src, bytes, "MemcpyAsync source"));
  }
  if (kind == CopyKind::kHostToDevice || kind == CopyKind::kDeviceToDevice) {
    PHOS_RETURN_IF_ERROR(CheckDeviceRange(dst, bytes, "MemcpyAsync destination"));
  }
  PHOS_RETURN_IF_ERROR(MakeCurrent());
  const CudaDriver* d = driver_.get();
  switch (kind) {
    case CopyKind::kHostToDevice:
      return Check(d->MemcpyHtoDAsync(dst, reinterpret_cast<const void*>(src), bytes, s), "cuMemcpyHtoDAsync");
    case CopyKind::kDeviceToHost:
      return Check(d->MemcpyDtoHAsync(reinterpret_cast<void*>(dst), src, bytes, s), "cuMemcpyDtoHAsync");
    case CopyKind::kDeviceToDevice:
      // Unified addressing: one side may be another GPU's memory (a process
      // on several GPUs, docs/interposer.md "Several GPUs in one process");
      // cuMemcpyAsync infers a peer copy from the pointers (cuMemcpyDtoD
      // is documented for one context's memory).
      return Check(d->MemcpyAsync(dst, src, bytes, s), "cuMemcpyAsync");
    case CopyKind::kHostToHost:
      // Unified addressing: the driver infers both sides are host memory.
      return Check(d->MemcpyAsync(dst, src, bytes, s), "cuMemcpyAsync");
  }
  return Status::InvalidArgument("MemcpyAsync: unknown copy kind");
}

Status CudaContext::MemsetAsync(DevicePtr dst, std::uint32_t value, std::size_t element_size, std::size_t count,
                                StreamHandle stream) {
  PHOS_RETURN_IF_ERROR(CheckNotAbandoned("MemsetAsync"));
  CUstream s = nullptr;
  std::shared_ptr<StreamObject> keep;
  PHOS_RETURN_IF_ERROR(FindStream(stream, &s, &keep));
  if (element_size != 1 && element_size != 2 && element_size != 4) {
    return Status::InvalidArgument("MemsetAsync: element size " + std::to_string(element_size) +
                                   " (must be 1, 2 or 4)");
  }
  if (count == 0) return Status::Ok();
  if (count > ~std::size_t{0} / element_size) return Status::InvalidArgument("MemsetAsync: count overflows");
  if (dst % element_size != 0) {
    return Status::InvalidArgument("MemsetAsync: " + Hex(dst) + " is not aligned to the element size " +
                                   std::to_string(element_size));
  }
  PHOS_RETURN_IF_ERROR(CheckDeviceRange(dst, count * element_size, "MemsetAsync"));
  PHOS_RETURN_IF_ERROR(MakeCurrent());
  const CudaDriver* d = driver_.get();
  switch (element_size) {
    case 1:
      return Check(d->MemsetD8Async(dst, static_cast<unsigned char>(value), count, s), "cuMemsetD8Async");
    case 2:
      return Check(d->MemsetD16Async(dst, static_cast<unsigned short>(value), count, s), "cuMemsetD16Async");
    default:
      return Check(d->MemsetD32Async(dst, value, count, s), "cuMemsetD32Async");
  }
}

// ---- events -----------------------------------------------------------------------------

namespace {

CUarray_format DriverFormat(const wire::TextureDesc& d) {
  switch (d.kind) {
    case wire::ChannelKind::kUnsigned:
      return d.channel_bytes == 1 ? CU_AD_FORMAT_UNSIGNED_INT8
                                  : d.channel_bytes == 2 ? CU_AD_FORMAT_UNSIGNED_INT16 : CU_AD_FORMAT_UNSIGNED_INT32;
    case wire::ChannelKind::kSigned:
      return d.channel_bytes == 1 ? CU_AD_FORMAT_SIGNED_INT8
                                  : d.channel_bytes == 2 ? CU_AD_FORMAT_SIGNED_INT16 : CU_AD_FORMAT_SIGNED_INT32;
    case wire::ChannelKind::kFloat:
      break;
  }
  return d.channel_bytes == 2 ? CU_AD_FORMAT_HALF : CU_AD_FORMAT_FLOAT;
}

}  // namespace

Status CudaContext::CreateTextureObject(const wire::TextureDesc& d, bool surface, std::uint64_t requested,
                                        std::uint64_t* handle) {
  if (surface) {
    return Status::NotSupported("surface objects on the cuda backend (they need real CUDA arrays; phos lays arrays "
                                "out as buffers)");
  }
  if (d.dims == 3 || d.layers != 0) {
    return Status::NotSupported("3D and layered textures on the cuda backend (they need real CUDA arrays)");
  }
  if (d.mip_levels() > 1) {
    // A texture of level 0's memory would sample level 0 whatever level of
    // detail a kernel asks for: a wrong answer, so refused.
    return Status::NotSupported("textures of mipmapped arrays on the cuda backend (they need real mipmapped arrays)");
  }
  if (requested != 0) {
    return Status::FailedPrecondition("texture object " + std::to_string(requested) +
                                      " cannot be recreated with its handle: the CUDA driver picks handles");
  }
  PHOS_RETURN_IF_ERROR(MakeCurrent());
  CUDA_RESOURCE_DESC res{};
  const std::size_t row = std::size_t{d.width} * d.texel_bytes();
  if (d.resource == wire::ResourceKind::kLinear) {
    res.resType = CU_RESOURCE_TYPE_LINEAR;
    res.res.linear.devPtr = d.base;
    res.res.linear.format = DriverFormat(d);
    res.res.linear.numChannels = d.channels;
    res.res.linear.sizeInBytes = row;
  } else {
    // A 1D array is a pitched texture of one row (filtering and addressing
    // work there, unlike a linear resource); its pitch rounded to the
    // driver's 32-byte rule reads nothing past the row.
    res.resType = CU_RESOURCE_TYPE_PITCH2D;
    res.res.pitch2D.devPtr = d.base;
    res.res.pitch2D.format = DriverFormat(d);
    res.res.pitch2D.numChannels = d.channels;
    res.res.pitch2D.width = d.width;
    res.res.pitch2D.height = d.height;
    res.res.pitch2D.pitchInBytes = d.dims == 1 ? (row + 31) / 32 * 32 : d.pitch;
  }
  CUDA_TEXTURE_DESC td{};
  for (int i = 0; i < 3; ++i) td.addressMode[i] = static_cast<CUaddress_mode>(d.address[i]);  // same numbers
  td.filterMode = (d.flags & wire::kTextureLinearFilter) ? CU_TR_FILTER_MODE_LINEAR : CU_TR_FILTER_MODE_POINT;
  if (d.kind != wire::ChannelKind::kFloat && !(d.flags & wire::kTextureReadNormalized)) {
    td.flags |= CU_TRSF_READ_AS_INTEGER;
  }
  if (d.flags & wire::kTextureNormalizedCoords) td.flags |= CU_TRSF_NORMALIZED_COORDINATES;
  if (d.flags & wire::kTextureSrgb) td.flags |= CU_TRSF_SRGB;
  for (int i = 0; i < 4; ++i) td.borderColor[i] = d.border[i];
  CUtexObject tex = 0;
  PHOS_RETURN_IF_ERROR(Check(driver_->TexObjectCreate(&tex, &res, &td, nullptr), "cuTexObjectCreate"));
  *handle = tex;
  return Status::Ok();
}

Status CudaContext::DestroyTextureObject(std::uint64_t handle) {
  PHOS_RETURN_IF_ERROR(MakeCurrent());
  return Check(driver_->TexObjectDestroy(static_cast<CUtexObject>(handle)), "cuTexObjectDestroy");
}

Status CudaContext::CreateEvent(unsigned flags, EventHandle* out) {
  if (out == nullptr) return Status::InvalidArgument("CreateEvent: null output pointer");
  if ((flags & ~(kEventBlockingSync | kEventDisableTiming)) != 0) {
    return Status::InvalidArgument("CreateEvent: unknown flags " + Hex(flags));
  }
  PHOS_RETURN_IF_ERROR(MakeCurrent());
  auto obj = std::make_shared<EventObject>();
  obj->driver = driver_.get();
  obj->ctx = ctx_;
  obj->abandoned = abandoned_;
  obj->flags = flags;
  PHOS_RETURN_IF_ERROR(Check(driver_->EventCreate(&obj->event, flags), "cuEventCreate"));
  const EventHandle h = NextHandle();
  std::lock_guard<std::mutex> lock(mutex_);
  events_.emplace(h, std::move(obj));
  *out = h;
  return Status::Ok();
}

Status CudaContext::DestroyEvent(EventHandle event) {
  std::shared_ptr<EventObject> obj;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = events_.find(event);
    if (it == events_.end()) {
      return Status::InvalidArgument("DestroyEvent: unknown event handle " + std::to_string(event));
    }
    obj = std::move(it->second);
    events_.erase(it);
  }
  return Status::Ok();
}

Status CudaContext::RecordEvent(EventHandle event, StreamHandle stream) {
  std::shared_ptr<EventObject> e;
  PHOS_RETURN_IF_ERROR(FindEvent(event, &e));
  CUstream s = nullptr;
  std::shared_ptr<StreamObject> keep;
  PHOS_RETURN_IF_ERROR(FindStream(stream, &s, &keep));
  PHOS_RETURN_IF_ERROR(MakeCurrent());
  return Check(driver_->EventRecord(e->event, s), "cuEventRecord");
}

namespace {
// cuLaunchHostFunc's trampoline: runs and frees the heap-held function.
void CUDA_CB RunHostFunction(void* arg) {
  std::unique_ptr<std::function<void()>> fn(static_cast<std::function<void()>*>(arg));
  (*fn)();
}
}  // namespace

Status CudaContext::LaunchHostFunction(StreamHandle stream, std::function<void()> fn) {
  PHOS_RETURN_IF_ERROR(CheckNotAbandoned("LaunchHostFunction"));
  if (!fn) return Status::InvalidArgument("LaunchHostFunction: no function");
  CUstream s = nullptr;
  std::shared_ptr<StreamObject> keep;
  PHOS_RETURN_IF_ERROR(FindStream(stream, &s, &keep));
  PHOS_RETURN_IF_ERROR(MakeCurrent());
  auto held = std::make_unique<std::function<void()>>(std::move(fn));
  CUresult rc = driver_->LaunchHostFunc(s, &RunHostFunction, held.get());
  if (rc == CUDA_SUCCESS) held.release();  // the trampoline owns it now
  return Check(rc, "cuLaunchHostFunc");
}

Status CudaContext::StreamWaitEvent(StreamHandle stream, EventHandle event) {
  std::shared_ptr<EventObject> e;
  PHOS_RETURN_IF_ERROR(FindEvent(event, &e));
  CUstream s = nullptr;
  std::shared_ptr<StreamObject> keep;
  PHOS_RETURN_IF_ERROR(FindStream(stream, &s, &keep));
  PHOS_RETURN_IF_ERROR(MakeCurrent());
  return Check(driver_->StreamWaitEvent(s, e->event, CU_EVENT_WAIT_DEFAULT), "cuStreamWaitEvent");
}

Status CudaContext::QueryEvent(EventHandle event) {
  std::shared_ptr<EventObject> e;
  PHOS_RETURN_IF_ERROR(FindEvent(event, &e));
  PHOS_RETURN_IF_ERROR(MakeCurrent());
  return Check(driver_->EventQuery(e->event), "cuEventQuery");
}

Status CudaContext::SynchronizeEvent(EventHandle event) {
  PHOS_RETURN_IF_ERROR(CheckNotAbandoned("SynchronizeEvent"));
  std::shared_ptr<EventObject> e;
  PHOS_RETURN_IF_ERROR(FindEvent(event, &e));
  PHOS_RETURN_IF_ERROR(MakeCurrent());
  return Check(driver_->EventSynchronize(e->event), "cuEventSynchronize");
}

Status CudaContext::ElapsedTime(EventHandle start, EventHandle end, float* ms) {
  if (ms == nullptr) return Status::InvalidArgument("ElapsedTime: null output pointer");
  std::shared_ptr<EventObject> a, b;
  PHOS_RETURN_IF_ERROR(FindEvent(start, &a));
  PHOS_RETURN_IF_ERROR(FindEvent(end, &b));
  if ((a->flags & kEventDisableTiming) || (b->flags & kEventDisableTiming)) {
    return Status::InvalidArgument("ElapsedTime: an event was created with timing disabled");
  }
  PHOS_RETURN_IF_ERROR(MakeCurrent());
  // cuEventElapsedTime_v2 (CUDA 12.8+): NOT_READY while either is pending,
  // INVALID_HANDLE if one was never recorded.
  return Check(driver_->EventElapsedTime(ms, a->event, b->event), "cuEventElapsedTime");
}

// ---- collectives (cuda_collectives.h) ----------------------------------------------

Status CudaContext::JoinCommunicator(const CommunicatorId& unique_id, int nranks, int rank,
                                     const std::function<bool()>& cancelled, std::shared_ptr<CommRank>* out) {
  PHOS_RETURN_IF_ERROR(CheckNotAbandoned("ncclCommInitRank"));
  PHOS_RETURN_IF_ERROR(health_->Check());
  return collectives_->Join(unique_id, nranks, rank, device_, ctx_, cancelled, out);
}

Status CudaContext::EnqueueCollectives(const std::shared_ptr<CommRank>& rank, const std::vector<CollectiveOp>& ops,
                                       StreamHandle stream) {
  auto cuda_rank = std::dynamic_pointer_cast<CudaCommRank>(rank);
  if (!cuda_rank || cuda_rank->session_context() != ctx_) {
    return Status::InvalidArgument("EnqueueCollectives: not a communicator of this context");
  }
  PHOS_RETURN_IF_ERROR(CheckNotAbandoned("an NCCL group"));
  CUstream s = nullptr;
  std::shared_ptr<StreamObject> keep;
  PHOS_RETURN_IF_ERROR(FindStream(stream, &s, &keep));
  return cuda_rank->RunGroup(ops, ctx_, s);
}

Status CudaContext::Synchronize() {
  PHOS_RETURN_IF_ERROR(CheckNotAbandoned("Synchronize"));
  PHOS_RETURN_IF_ERROR(MakeCurrent());
  return Check(driver_->CtxSynchronize(), "cuCtxSynchronize");
}

// ---- modules -------------------------------------------------------------------------------

Status CudaContext::LoadModule(const void* image, std::size_t size, ModuleHandle* out) {
  if (image == nullptr || size == 0 || out == nullptr) {
    return Status::InvalidArgument("LoadModule: empty image or null output pointer");
  }
  // cuModuleLoadData reads PTX text up to its NUL; make sure there is one
  // when the image does not look like a binary (ELF cubin or fatbin).
  const auto* bytes = static_cast<const unsigned char*>(image);
  const bool elf = size >= 4 && bytes[0] == 0x7f && bytes[1] == 'E' && bytes[2] == 'L' && bytes[3] == 'F';
  // 0xBA55ED50: fatbin container; 0x466243B1: the __fatBinC_Wrapper_t around one.
  const bool fatbin = size >= 4 && ((bytes[0] == 0x50 && bytes[1] == 0xed && bytes[2] == 0x55 && bytes[3] == 0xba) ||
                                    (bytes[0] == 0xb1 && bytes[1] == 0x43 && bytes[2] == 0x62 && bytes[3] == 0x46));
  std::string text;
  if (!elf && !fatbin && bytes[size - 1] != '\0') {
    text.assign(static_cast<const char*>(image), size);
    image = text.c_str();
  }
  PHOS_RETURN_IF_ERROR(MakeCurrent());
  auto obj = std::make_shared<ModuleObject>();
  obj->driver = driver_.get();
  obj->ctx = ctx_;
  obj->abandoned = abandoned_;
  PHOS_RETURN_IF_ERROR(Check(driver_->ModuleLoadData(&obj->module, image), "cuModuleLoadData"));
  const ModuleHandle h = NextHandle();
  std::lock_guard<std::mutex> lock(mutex_);
  modules_.emplace(h, std::move(obj));
  *out = h;
  return Status::Ok();
}

Status CudaContext::UnloadModule(ModuleHandle module) {
  std::shared_ptr<ModuleObject> obj;
  std::vector<std::shared_ptr<FunctionObject>> dropped;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = modules_.find(module);
    if (it == modules_.end()) {
      return Status::InvalidArgument("UnloadModule: unknown module handle " + std::to_string(module));
    }
    obj = std::move(it->second);
    modules_.erase(it);
    for (auto f = functions_.begin(); f != functions_.end();) {
      if (f->second->module_handle == module) {
        dropped.push_back(std::move(f->second));
        f = functions_.erase(f);
      } else {
        ++f;
      }
    }
  }
  return Status::Ok();  // the module is unloaded when the last reference goes
}

Status CudaContext::GetFunction(ModuleHandle module, const std::string& name, FunctionHandle* out) {
  if (out == nullptr) return Status::InvalidArgument("GetFunction: null output pointer");
  std::shared_ptr<ModuleObject> m;
  PHOS_RETURN_IF_ERROR(FindModule(module, &m));
  PHOS_RETURN_IF_ERROR(MakeCurrent());
  auto obj = std::make_shared<FunctionObject>();
  CUresult rc = driver_->ModuleGetFunction(&obj->function, m->module, name.c_str());
  if (rc != CUDA_SUCCESS) return Check(rc, ("cuModuleGetFunction(\"" + name + "\")"));
  obj->module = std::move(m);
  obj->module_handle = module;
  obj->name = name;
  const FunctionHandle h = NextHandle();
  std::lock_guard<std::mutex> lock(mutex_);
  if (modules_.find(module) == modules_.end()) {
    return Status::InvalidArgument("GetFunction: module " + std::to_string(module) + " was unloaded meanwhile");
  }
  functions_.emplace(h, std::move(obj));
  *out = h;
  return Status::Ok();
}

Status CudaContext::GetGlobal(ModuleHandle module, const std::string& name, DevicePtr* ptr, std::size_t* bytes) {
  std::shared_ptr<ModuleObject> m;
  PHOS_RETURN_IF_ERROR(FindModule(module, &m));
  PHOS_RETURN_IF_ERROR(MakeCurrent());
  CUdeviceptr p = 0;
  std::size_t size = 0;
  CUresult rc = driver_->ModuleGetGlobal(&p, &size, m->module, name.c_str());
  if (rc != CUDA_SUCCESS) return Check(rc, ("cuModuleGetGlobal(\"" + name + "\")"));
  if (ptr) *ptr = p;
  if (bytes) *bytes = size;
  return Status::Ok();
}

Status CudaContext::LaunchKernel(FunctionHandle function, Dim3 grid, Dim3 block, unsigned shared_memory_bytes,
                                 StreamHandle stream, const std::vector<std::uint8_t>& params) {
  return Launch(function, grid, block, shared_memory_bytes, stream, params, /*cooperative=*/false);
}

Status CudaContext::LaunchCooperativeKernel(FunctionHandle function, Dim3 grid, Dim3 block,
                                            unsigned shared_memory_bytes, StreamHandle stream,
                                            const std::vector<std::uint8_t>& params) {
  return Launch(function, grid, block, shared_memory_bytes, stream, params, /*cooperative=*/true);
}

// The argument block goes in as one buffer (`extra`); the driver copies it
// before the launch returns. A cooperative launch is cuLaunchKernelEx with
// CU_LAUNCH_ATTRIBUTE_COOPERATIVE: the one cooperative entry point that takes
// `extra`; the driver bounds the grid (COOPERATIVE_LAUNCH_TOO_LARGE).
Status CudaContext::Launch(FunctionHandle function, Dim3 grid, Dim3 block, unsigned shared_memory_bytes,
                           StreamHandle stream, const std::vector<std::uint8_t>& params, bool cooperative) {
  PHOS_RETURN_IF_ERROR(CheckNotAbandoned("LaunchKernel"));
  std::shared_ptr<FunctionObject> f;
  PHOS_RETURN_IF_ERROR(FindFunction(function, &f));
  CUstream s = nullptr;
  std::shared_ptr<StreamObject> keep;
  PHOS_RETURN_IF_ERROR(FindStream(stream, &s, &keep));
  PHOS_RETURN_IF_ERROR(MakeCurrent());
  std::size_t size = params.size();
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, const_cast<std::uint8_t*>(params.data()),
                   CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END};
  void** packed = params.empty() ? nullptr : extra;
  if (!cooperative) {
    CUresult rc = driver_->LaunchKernel(f->function, grid.x, grid.y, grid.z, block.x, block.y, block.z,
                                        shared_memory_bytes, s, nullptr, packed);
    return rc == CUDA_SUCCESS ? Status::Ok() : Check(rc, "cuLaunchKernel(" + f->name + ")");
  }
  CUlaunchAttribute attr{};
  attr.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
  attr.value.cooperative = 1;
  CUlaunchConfig config{};
  config.gridDimX = grid.x;
  config.gridDimY = grid.y;
  config.gridDimZ = grid.z;
  config.blockDimX = block.x;
  config.blockDimY = block.y;
  config.blockDimZ = block.z;
  config.sharedMemBytes = shared_memory_bytes;
  config.hStream = s;
  config.attrs = &attr;
  config.numAttrs = 1;
  CUresult rc = driver_->LaunchKernelEx(&config, f->function, nullptr, packed);
  return rc == CUDA_SUCCESS ? Status::Ok() : Check(rc, "cuLaunchKernelEx(cooperative, " + f->name + ")");
}

Status CudaContext::GetFunctionAttributes(FunctionHandle function, FunctionAttributes* out) {
  if (out == nullptr) return Status::InvalidArgument("GetFunctionAttributes: null output pointer");
  std::shared_ptr<FunctionObject> f;
  PHOS_RETURN_IF_ERROR(FindFunction(function, &f));
  PHOS_RETURN_IF_ERROR(MakeCurrent());
  // One cuFuncGetAttribute per field (the driver has no bulk query).
  auto get = [&](CUfunction_attribute a, const char* what, int* v) -> Status {
    CUresult rc = driver_->FuncGetAttribute(v, a, f->function);
    if (rc != CUDA_SUCCESS) return Check(rc, std::string("cuFuncGetAttribute(") + f->name + ", " + what + ")");
    return Status::Ok();
  };
  FunctionAttributes a;
  int shared = 0, constant = 0, local = 0;
  PHOS_RETURN_IF_ERROR(get(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, "MAX_THREADS_PER_BLOCK", &a.max_threads_per_block));
  PHOS_RETURN_IF_ERROR(get(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, "SHARED_SIZE_BYTES", &shared));
  PHOS_RETURN_IF_ERROR(get(CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES, "CONST_SIZE_BYTES", &constant));
  PHOS_RETURN_IF_ERROR(get(CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, "LOCAL_SIZE_BYTES", &local));
  PHOS_RETURN_IF_ERROR(get(CU_FUNC_ATTRIBUTE_NUM_REGS, "NUM_REGS", &a.num_regs));
  PHOS_RETURN_IF_ERROR(get(CU_FUNC_ATTRIBUTE_PTX_VERSION, "PTX_VERSION", &a.ptx_version));
  PHOS_RETURN_IF_ERROR(get(CU_FUNC_ATTRIBUTE_BINARY_VERSION, "BINARY_VERSION", &a.binary_version));
  PHOS_RETURN_IF_ERROR(get(CU_FUNC_ATTRIBUTE_CACHE_MODE_CA, "CACHE_MODE_CA", &a.cache_mode_ca));
  PHOS_RETURN_IF_ERROR(get(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, "MAX_DYNAMIC_SHARED_SIZE_BYTES",
                           &a.max_dynamic_shared_size_bytes));
  PHOS_RETURN_IF_ERROR(get(CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, "PREFERRED_SHARED_MEMORY_CARVEOUT",
                           &a.preferred_shared_memory_carveout));
  a.shared_size_bytes = static_cast<std::uint64_t>(shared);
  a.const_size_bytes = static_cast<std::uint64_t>(constant);
  a.local_size_bytes = static_cast<std::uint64_t>(local);
  *out = a;
  return Status::Ok();
}

Status CudaContext::SetFunctionAttribute(FunctionHandle function, FunctionAttribute attribute, int value) {
  std::shared_ptr<FunctionObject> f;
  PHOS_RETURN_IF_ERROR(FindFunction(function, &f));
  PHOS_RETURN_IF_ERROR(MakeCurrent());
  CUfunction_attribute a = CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
  const char* what = "MAX_DYNAMIC_SHARED_SIZE_BYTES";
  if (attribute == FunctionAttribute::kPreferredSharedMemoryCarveout) {
    a = CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT;
    what = "PREFERRED_SHARED_MEMORY_CARVEOUT";
  }
  CUresult rc = driver_->FuncSetAttribute(f->function, a, value);
  if (rc != CUDA_SUCCESS) {
    return Check(rc, std::string("cuFuncSetAttribute(") + f->name + ", " + what + ", " + std::to_string(value) + ")");
  }
  return Status::Ok();
}

}  // namespace phos::backend::cuda
