// Stream-ordered allocation and memory pools (docs/interposer.md
// "Stream-ordered allocation"): cudaMallocAsync / cudaFreeAsync /
// cudaMallocFromPoolAsync, the default pool and explicit pools, and the
// driver's cuMemAllocAsync / cuMemFreeAsync / cuMemPool*.
//
// How it maps onto phosd:
//   * an allocation is an ordinary buffer of the session (kMalloc, called):
//     it exists when the call returns, which stream order allows (the app
//     may only use it from work ordered after the allocation), so it is
//     checkpointed, restored and migrated at the same address like every
//     other buffer;
//   * a free is kFreeAsync, posted on the stream: phosd drops the buffer
//     from the session at once and releases its memory once the stream has
//     run the work queued before the free (SessionState::pending_frees);
//   * pools are app-side bookkeeping: which pool each allocation came from,
//     the pool's attributes and its used / high-water bytes. phosd keeps no
//     reserve: memory goes back to the device when the free is reached, so
//     a pool's reserved bytes are its used bytes and cudaMemPoolTrimTo has
//     nothing to give back. A process restored by CRIU gets this state back
//     with its memory.
// Refused by name (cudaErrorNotSupported / CUDA_ERROR_NOT_SUPPORTED, the
// generated stubs or an explicit refusal below): pools in host memory or of
// managed memory, pools whose memory can be exported (any handle type other
// than none), export/import of pools and pointers, and stream-ordered
// allocation on a stream being captured (CUDA makes graph memory nodes of
// it: not offered; the capture is invalidated).
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include "interposer/client/client_internal.h"
#include "interposer/client/devices.h"
#include "interposer/client/connection.h"
#include "interposer/client/driver_internal.h"
#include "interposer/client/graphs.h"
#include "interposer/client/handles.h"

// A pool handle given to the app (cudaMemPool_t == CUmemoryPool) points at
// one of these.
struct CUmemPoolHandle_st {
  int device = 0;
  bool is_default = false;
  bool destroyed = false;   // cudaMemPoolDestroy ran; freed with its last allocation
  uint64_t max_bytes = 0;   // cudaMemPoolProps::maxSize (0: the device's memory)
  int reuse_follow_event_dependencies = 1;
  int reuse_allow_opportunistic = 1;
  int reuse_allow_internal_dependencies = 1;
  uint64_t release_threshold = 0;
  uint64_t used = 0;        // bytes of live allocations
  uint64_t used_high = 0;   // high-water mark of `used` since creation or reset
  uint64_t allocations = 0; // live allocations
};

namespace phos::client {
namespace {

using Pool = CUmemPoolHandle_st;

// Every pool and which pool each live allocation came from. Lock: mu
// (everything below). Never destroyed: calls may come during exit.
struct PoolRegistry {
  std::mutex mu;
  Pool default_pool{0, true};
  Pool* current = &default_pool;  // cudaDeviceSetMemPool's (one device)
  std::set<Pool*> created;        // live explicit pools
  struct Allocation {
    Pool* pool = nullptr;
    uint64_t bytes = 0;
  };
  std::map<uintptr_t, Allocation> allocations;
};
PoolRegistry& Pools() {
  static auto* r = new PoolRegistry;
  return *r;
}

// Caller holds mu.
bool IsLivePool(const PoolRegistry& r, const Pool* p) {
  return p == &r.default_pool || (p != nullptr && r.created.count(const_cast<Pool*>(p)) != 0);
}

// Caller holds mu: `ptr`'s allocation is gone (freed, or a device reset).
void ForgetAllocation(PoolRegistry& r, uintptr_t ptr) {
  auto it = r.allocations.find(ptr);
  if (it == r.allocations.end()) return;
  Pool* p = it->second.pool;
  p->used -= it->second.bytes;
  p->allocations -= 1;
  r.allocations.erase(it);
  if (p->destroyed && p->allocations == 0) delete p;
}

// Prints once per kind what was refused and why.
void NoteRefused(const char* what) {
  SayOnce(std::string(what) + " is not supported under phos (docs/interposer.md \"Stream-ordered allocation\")");
}

// Pools live on the session's GPU (devices.h).
cudaError_t CheckDevice(int device) {
  if (cudaError_t e = Initialised(); e != cudaSuccess) return e;
  return IsCurrentDevice(device) ? cudaSuccess : cudaErrorInvalidDevice;
}

// The stream a stream-ordered call names must exist; phos never captures.
cudaError_t CheckStream(const void* stream, DefaultStream zero, uint32_t* id) {
  *id = StreamIdOf(stream, zero);
  return IsKnownStream(*id) ? cudaSuccess : cudaErrorInvalidResourceHandle;
}

cudaError_t AllocateFrom(void** out, size_t size, Pool* pool, const void* stream, DefaultStream zero) {
  if (cudaError_t e = Initialised(); e != cudaSuccess) return e;
  if (out == nullptr) return SetError(cudaErrorInvalidValue);
  uint32_t id = 0;
  if (cudaError_t e = CheckStream(stream, zero, &id); e != cudaSuccess) return SetError(e);
  // Inside a capture: a graph memory node (graphs.h), not a pool's.
  if (cudaError_t captured; size != 0 && CaptureMemAlloc(id, size, out, &captured)) {
    return captured == cudaSuccess ? captured : SetError(captured);
  }
  PoolRegistry& r = Pools();
  {
    std::lock_guard<std::mutex> lock(r.mu);
    if (pool == nullptr) pool = r.current;
    if (!IsLivePool(r, pool) || pool->destroyed) return SetError(cudaErrorInvalidValue);
    if (pool->max_bytes != 0 && size > pool->max_bytes - std::min(pool->max_bytes, pool->used)) {
      return SetError(cudaErrorMemoryAllocation);
    }
  }
  if (size == 0) {  // as cudaMalloc: nothing to allocate
    *out = nullptr;
    return cudaSuccess;
  }
  // The allocation exists from now on: earlier than the stream needs it,
  // which stream order permits.
  void* p = nullptr;
  if (cudaError_t e = cudaMalloc(&p, size); e != cudaSuccess) return e;
  std::lock_guard<std::mutex> lock(r.mu);
  if (!IsLivePool(r, pool)) pool = r.current;  // destroyed meanwhile by another thread
  pool->used += size;
  pool->allocations += 1;
  pool->used_high = std::max(pool->used_high, pool->used);
  r.allocations[reinterpret_cast<uintptr_t>(p)] = {pool, size};
  *out = p;
  return cudaSuccess;
}

cudaError_t FreeOnStream(void* ptr, const void* stream, DefaultStream zero) {
  if (cudaError_t e = Initialised(); e != cudaSuccess) return e;
  if (cudaError_t e = StickyError(); e != cudaSuccess) return SetError(e);
  uint32_t id = 0;
  if (cudaError_t e = CheckStream(stream, zero, &id); e != cudaSuccess) return SetError(e);
  if (ptr == nullptr) return cudaSuccess;
  if (cudaError_t captured; CaptureMemFree(id, ptr, &captured)) {
    return captured == cudaSuccess ? captured : SetError(captured);
  }
  // Graph memory stays with its graph (its next launch brings it back at
  // the same address): freeing it after a launch is a no-op.
  if (IsGraphAllocation(ptr)) return cudaSuccess;
  uintptr_t base = 0;
  size_t bytes = 0;
  // Only the start of a buffer can be freed; refused here, not deferred.
  if (!FindDeviceBuffer(ptr, &base, &bytes) || base != reinterpret_cast<uintptr_t>(ptr)) {
    return SetError(cudaErrorInvalidValue);
  }
  const wire::PointerRequest req{reinterpret_cast<uint64_t>(ptr)};
  WireStatus w = Connection::Get().Post(wire::op::kFreeAsync, id, std::as_bytes(std::span(&req, 1)));
  if (w == WireStatus::kSuccess) {
    ForgetDeviceAllocation(base);
    PoolRegistry& r = Pools();
    std::lock_guard<std::mutex> lock(r.mu);
    ForgetAllocation(r, base);
  }
  return Finish(w);
}

cudaError_t CreatePool(Pool** out, const cudaMemPoolProps* props) {
  if (cudaError_t e = Initialised(); e != cudaSuccess) return e;
  if (out == nullptr || props == nullptr) return SetError(cudaErrorInvalidValue);
  if (props->allocType == cudaMemAllocationTypeManaged) {
    NoteRefused("a memory pool of managed memory");
    return SetError(cudaErrorNotSupported);
  }
  if (props->allocType != cudaMemAllocationTypePinned) return SetError(cudaErrorInvalidValue);
  if (props->location.type == cudaMemLocationTypeHost || props->location.type == cudaMemLocationTypeHostNuma ||
      props->location.type == cudaMemLocationTypeHostNumaCurrent) {
    NoteRefused("a memory pool in host memory");
    return SetError(cudaErrorNotSupported);
  }
  if (props->location.type != cudaMemLocationTypeDevice) return SetError(cudaErrorInvalidValue);
  if (cudaError_t e = CheckDevice(props->location.id); e != cudaSuccess) return SetError(cudaErrorInvalidValue);
  if (props->handleTypes != cudaMemHandleTypeNone) {
    NoteRefused("a memory pool whose memory can be exported (handleTypes)");
    return SetError(cudaErrorNotSupported);
  }
  if (props->usage != 0) {
    NoteRefused("a memory pool with a usage flag (cudaMemPoolProps::usage)");
    return SetError(cudaErrorNotSupported);
  }
  auto* p = new Pool;
  p->device = props->location.id;
  p->max_bytes = props->maxSize;
  PoolRegistry& r = Pools();
  std::lock_guard<std::mutex> lock(r.mu);
  r.created.insert(p);
  *out = p;
  return cudaSuccess;
}

cudaError_t DestroyPool(Pool* pool) {
  if (cudaError_t e = Initialised(); e != cudaSuccess) return e;
  PoolRegistry& r = Pools();
  std::lock_guard<std::mutex> lock(r.mu);
  // The default pool cannot be destroyed; an unknown handle is invalid.
  if (pool == &r.default_pool || !r.created.count(pool)) return SetError(cudaErrorInvalidValue);
  r.created.erase(pool);
  if (r.current == pool) r.current = &r.default_pool;
  // Outstanding allocations keep it until their frees (CUDA's rule).
  pool->destroyed = true;
  if (pool->allocations == 0) delete pool;
  return cudaSuccess;
}

cudaError_t SetAttribute(Pool* pool, int attr, const void* value) {
  if (cudaError_t e = Initialised(); e != cudaSuccess) return e;
  if (value == nullptr) return SetError(cudaErrorInvalidValue);
  PoolRegistry& r = Pools();
  std::lock_guard<std::mutex> lock(r.mu);
  if (!IsLivePool(r, pool)) return SetError(cudaErrorInvalidValue);
  const int i = *static_cast<const int*>(value);
  const uint64_t u = *static_cast<const uint64_t*>(value);
  switch (attr) {
    case cudaMemPoolReuseFollowEventDependencies: pool->reuse_follow_event_dependencies = i != 0; break;
    case cudaMemPoolReuseAllowOpportunistic: pool->reuse_allow_opportunistic = i != 0; break;
    case cudaMemPoolReuseAllowInternalDependencies: pool->reuse_allow_internal_dependencies = i != 0; break;
    case cudaMemPoolAttrReleaseThreshold: pool->release_threshold = u; break;
    // The high-water marks may only be reset (to the current value).
    case cudaMemPoolAttrReservedMemHigh:
    case cudaMemPoolAttrUsedMemHigh:
      if (u != 0) return SetError(cudaErrorInvalidValue);
      pool->used_high = pool->used;
      break;
    default: return SetError(cudaErrorInvalidValue);  // the current values are read-only
  }
  return cudaSuccess;
}

cudaError_t GetAttribute(Pool* pool, int attr, void* value) {
  if (cudaError_t e = Initialised(); e != cudaSuccess) return e;
  if (value == nullptr) return SetError(cudaErrorInvalidValue);
  PoolRegistry& r = Pools();
  std::lock_guard<std::mutex> lock(r.mu);
  if (!IsLivePool(r, pool)) return SetError(cudaErrorInvalidValue);
  auto put_int = [&](int v) { *static_cast<int*>(value) = v; };
  auto put_u64 = [&](uint64_t v) { *static_cast<uint64_t*>(value) = v; };
  switch (attr) {
    case cudaMemPoolReuseFollowEventDependencies: put_int(pool->reuse_follow_event_dependencies); break;
    case cudaMemPoolReuseAllowOpportunistic: put_int(pool->reuse_allow_opportunistic); break;
    case cudaMemPoolReuseAllowInternalDependencies: put_int(pool->reuse_allow_internal_dependencies); break;
    case cudaMemPoolAttrReleaseThreshold: put_u64(pool->release_threshold); break;
    // phosd keeps no reserve: what the pool holds is what is allocated.
    case cudaMemPoolAttrReservedMemCurrent:
    case cudaMemPoolAttrUsedMemCurrent: put_u64(pool->used); break;
    case cudaMemPoolAttrReservedMemHigh:
    case cudaMemPoolAttrUsedMemHigh: put_u64(pool->used_high); break;
    default: return SetError(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}

cudaError_t TrimPool(Pool* pool, size_t min_bytes_to_keep) {
  (void)min_bytes_to_keep;  // nothing is reserved beyond the live allocations
  if (cudaError_t e = Initialised(); e != cudaSuccess) return e;
  PoolRegistry& r = Pools();
  std::lock_guard<std::mutex> lock(r.mu);
  return IsLivePool(r, pool) ? cudaSuccess : SetError(cudaErrorInvalidValue);
}

// One device: the pool's own device is read-write (and cannot be made
// inaccessible); there is no peer to grant.
cudaError_t SetAccess(Pool* pool, const cudaMemAccessDesc* descs, size_t count) {
  if (cudaError_t e = Initialised(); e != cudaSuccess) return e;
  if (count != 0 && descs == nullptr) return SetError(cudaErrorInvalidValue);
  PoolRegistry& r = Pools();
  int device = 0;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    if (!IsLivePool(r, pool)) return SetError(cudaErrorInvalidValue);
    device = pool->device;
  }
  for (size_t i = 0; i < count; ++i) {
    if (descs[i].location.type != cudaMemLocationTypeDevice) return SetError(cudaErrorInvalidValue);
    if (CheckDevice(descs[i].location.id) != cudaSuccess) return SetError(cudaErrorInvalidDevice);
    if (descs[i].location.id == device && descs[i].flags != cudaMemAccessFlagsProtReadWrite) {
      return SetError(cudaErrorInvalidValue);
    }
  }
  return cudaSuccess;
}

cudaError_t GetAccess(cudaMemAccessFlags* flags, Pool* pool, const cudaMemLocation* location) {
  if (cudaError_t e = Initialised(); e != cudaSuccess) return e;
  if (flags == nullptr || location == nullptr) return SetError(cudaErrorInvalidValue);
  if (location->type != cudaMemLocationTypeDevice) return SetError(cudaErrorInvalidValue);
  if (CheckDevice(location->id) != cudaSuccess) return SetError(cudaErrorInvalidDevice);
  PoolRegistry& r = Pools();
  std::lock_guard<std::mutex> lock(r.mu);
  if (!IsLivePool(r, pool)) return SetError(cudaErrorInvalidValue);
  *flags = location->id == pool->device ? cudaMemAccessFlagsProtReadWrite : cudaMemAccessFlagsProtNone;
  return cudaSuccess;
}

// `current`: the device's current pool, else its default pool.
cudaError_t DevicePool(Pool** out, int device, bool current) {
  if (cudaError_t e = Initialised(); e != cudaSuccess) return e;
  if (out == nullptr) return SetError(cudaErrorInvalidValue);
  if (cudaError_t e = CheckDevice(device); e != cudaSuccess) return SetError(e);
  PoolRegistry& r = Pools();
  std::lock_guard<std::mutex> lock(r.mu);
  *out = current ? r.current : &r.default_pool;
  return cudaSuccess;
}

cudaError_t SetDevicePool(int device, Pool* pool) {
  if (cudaError_t e = Initialised(); e != cudaSuccess) return e;
  if (cudaError_t e = CheckDevice(device); e != cudaSuccess) return SetError(e);
  PoolRegistry& r = Pools();
  std::lock_guard<std::mutex> lock(r.mu);
  if (!IsLivePool(r, pool) || pool->device != device) return SetError(cudaErrorInvalidValue);
  r.current = pool;
  return cudaSuccess;
}

// The CUDA 13 location-typed forms: device pinned memory only.
cudaError_t LocationPool(Pool** out, const cudaMemLocation* location, cudaMemAllocationType type, bool current) {
  if (location == nullptr) return SetError(cudaErrorInvalidValue);
  if (type == cudaMemAllocationTypeManaged || location->type != cudaMemLocationTypeDevice) {
    NoteRefused("a memory pool of managed memory or in host memory");
    return SetError(cudaErrorNotSupported);
  }
  if (type != cudaMemAllocationTypePinned) return SetError(cudaErrorInvalidValue);
  return DevicePool(out, location->id, current);
}

cudaError_t SetLocationPool(const cudaMemLocation* location, cudaMemAllocationType type, Pool* pool) {
  if (location == nullptr) return SetError(cudaErrorInvalidValue);
  if (type == cudaMemAllocationTypeManaged || location->type != cudaMemLocationTypeDevice) {
    NoteRefused("a memory pool of managed memory or in host memory");
    return SetError(cudaErrorNotSupported);
  }
  if (type != cudaMemAllocationTypePinned) return SetError(cudaErrorInvalidValue);
  return SetDevicePool(location->id, pool);
}

const void* DriverStream(CUstream s) { return s; }

// The driver's structs and enums are the runtime's with other names (same
// layout and numbers); checked here so a header change cannot slip by.
static_assert(sizeof(CUmemPoolProps) == sizeof(cudaMemPoolProps));
static_assert(sizeof(CUmemAccessDesc) == sizeof(cudaMemAccessDesc));
static_assert(sizeof(CUmemLocation) == sizeof(cudaMemLocation));
static_assert(static_cast<int>(CU_MEMPOOL_ATTR_USED_MEM_HIGH) == static_cast<int>(cudaMemPoolAttrUsedMemHigh));
static_assert(static_cast<int>(CU_MEM_ALLOCATION_TYPE_PINNED) == static_cast<int>(cudaMemAllocationTypePinned));
static_assert(static_cast<int>(CU_MEM_LOCATION_TYPE_DEVICE) == static_cast<int>(cudaMemLocationTypeDevice));
static_assert(static_cast<int>(CU_MEM_ACCESS_FLAGS_PROT_READWRITE) ==
              static_cast<int>(cudaMemAccessFlagsProtReadWrite));

template <typename T>
const T& As(const void* p) {
  return *static_cast<const T*>(p);
}

}  // namespace

void ForgetPoolAllocations() {
  PoolRegistry& r = Pools();
  std::lock_guard<std::mutex> lock(r.mu);
  while (!r.allocations.empty()) ForgetAllocation(r, r.allocations.begin()->first);
}

void NotePoolAllocationFreed(uintptr_t ptr) {
  PoolRegistry& r = Pools();
  std::lock_guard<std::mutex> lock(r.mu);
  ForgetAllocation(r, ptr);
}

}  // namespace phos::client

using namespace phos::client;  // NOLINT

// ---------------------------------------------------------------- runtime

PHOS_EXPORT cudaError_t cudaMallocAsync(void** ptr, size_t size, cudaStream_t stream) {
  return AllocateFrom(ptr, size, nullptr, stream, DefaultStream::kLegacy);
}
PHOS_EXPORT cudaError_t cudaMallocAsync_ptsz(void** ptr, size_t size, cudaStream_t stream) {
  return AllocateFrom(ptr, size, nullptr, stream, DefaultStream::kPerThread);
}
PHOS_EXPORT cudaError_t cudaMallocFromPoolAsync(void** ptr, size_t size, cudaMemPool_t pool, cudaStream_t stream) {
  if (pool == nullptr) return SetError(cudaErrorInvalidValue);
  return AllocateFrom(ptr, size, pool, stream, DefaultStream::kLegacy);
}
PHOS_EXPORT cudaError_t cudaMallocFromPoolAsync_ptsz(void** ptr, size_t size, cudaMemPool_t pool,
                                                    cudaStream_t stream) {
  if (pool == nullptr) return SetError(cudaErrorInvalidValue);
  return AllocateFrom(ptr, size, pool, stream, DefaultStream::kPerThread);
}
PHOS_EXPORT cudaError_t cudaFreeAsync(void* ptr, cudaStream_t stream) {
  return FreeOnStream(ptr, stream, DefaultStream::kLegacy);
}
PHOS_EXPORT cudaError_t cudaFreeAsync_ptsz(void* ptr, cudaStream_t stream) {
  return FreeOnStream(ptr, stream, DefaultStream::kPerThread);
}
PHOS_EXPORT cudaError_t cudaMemPoolCreate(cudaMemPool_t* pool, const cudaMemPoolProps* props) {
  return CreatePool(pool, props);
}
PHOS_EXPORT cudaError_t cudaMemPoolDestroy(cudaMemPool_t pool) { return DestroyPool(pool); }
PHOS_EXPORT cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) {
  return SetAttribute(pool, attr, value);
}
PHOS_EXPORT cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) {
  return GetAttribute(pool, attr, value);
}
PHOS_EXPORT cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t min_bytes_to_keep) {
  return TrimPool(pool, min_bytes_to_keep);
}
PHOS_EXPORT cudaError_t cudaMemPoolSetAccess(cudaMemPool_t pool, const cudaMemAccessDesc* descs, size_t count) {
  return SetAccess(pool, descs, count);
}
PHOS_EXPORT cudaError_t cudaMemPoolGetAccess(cudaMemAccessFlags* flags, cudaMemPool_t pool,
                                             cudaMemLocation* location) {
  return GetAccess(flags, pool, location);
}
PHOS_EXPORT cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device) {
  return DevicePool(pool, device, false);
}
PHOS_EXPORT cudaError_t cudaDeviceGetMemPool(cudaMemPool_t* pool, int device) {
  return DevicePool(pool, device, true);
}
PHOS_EXPORT cudaError_t cudaDeviceSetMemPool(int device, cudaMemPool_t pool) { return SetDevicePool(device, pool); }
PHOS_EXPORT cudaError_t cudaMemGetDefaultMemPool(cudaMemPool_t* pool, cudaMemLocation* location,
                                                 cudaMemAllocationType type) {
  return LocationPool(pool, location, type, false);
}
PHOS_EXPORT cudaError_t cudaMemGetMemPool(cudaMemPool_t* pool, cudaMemLocation* location,
                                          cudaMemAllocationType type) {
  return LocationPool(pool, location, type, true);
}
PHOS_EXPORT cudaError_t cudaMemSetMemPool(cudaMemLocation* location, cudaMemAllocationType type,
                                          cudaMemPool_t pool) {
  return SetLocationPool(location, type, pool);
}

// ---------------------------------------------------------------- driver

namespace {

CUresult DriverAlloc(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool, CUstream s, DefaultStream zero) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  if (dptr == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  void* p = nullptr;
  CUresult r = ToCu(AllocateFrom(&p, bytes, pool, DriverStream(s), zero));
  if (r == CUDA_SUCCESS) *dptr = reinterpret_cast<CUdeviceptr>(p);
  return r;
}
CUresult DriverFree(CUdeviceptr dptr, CUstream s, DefaultStream zero) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  if (dptr == 0) return CUDA_ERROR_INVALID_VALUE;
  return ToCu(FreeOnStream(reinterpret_cast<void*>(static_cast<uintptr_t>(dptr)), DriverStream(s), zero));
}
template <typename F>
CUresult Driver(F&& f) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  return ToCu(f());
}

}  // namespace

PHOS_EXPORT CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytes, CUstream s) {
  return DriverAlloc(dptr, bytes, nullptr, s, DefaultStream::kLegacy);
}
PHOS_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytes, CUstream s) {
  return DriverAlloc(dptr, bytes, nullptr, s, DefaultStream::kPerThread);
}
PHOS_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool, CUstream s) {
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return DriverAlloc(dptr, bytes, pool, s, DefaultStream::kLegacy);
}
PHOS_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool, CUstream s) {
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return DriverAlloc(dptr, bytes, pool, s, DefaultStream::kPerThread);
}
PHOS_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream s) { return DriverFree(dptr, s, DefaultStream::kLegacy); }
PHOS_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream s) {
  return DriverFree(dptr, s, DefaultStream::kPerThread);
}
PHOS_EXPORT CUresult cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* props) {
  return Driver([&] { return CreatePool(pool, reinterpret_cast<const cudaMemPoolProps*>(props)); });
}
PHOS_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool) {
  return Driver([&] { return DestroyPool(pool); });
}
PHOS_EXPORT CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  return Driver([&] { return SetAttribute(pool, attr, value); });
}
PHOS_EXPORT CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  return Driver([&] { return GetAttribute(pool, attr, value); });
}
PHOS_EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t min_bytes_to_keep) {
  return Driver([&] { return TrimPool(pool, min_bytes_to_keep); });
}
PHOS_EXPORT CUresult cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc* descs, size_t count) {
  return Driver([&] { return SetAccess(pool, reinterpret_cast<const cudaMemAccessDesc*>(descs), count); });
}
PHOS_EXPORT CUresult cuMemPoolGetAccess(CUmemAccess_flags* flags, CUmemoryPool pool, CUmemLocation* location) {
  return Driver([&] {
    return GetAccess(reinterpret_cast<cudaMemAccessFlags*>(flags), pool,
                     reinterpret_cast<const cudaMemLocation*>(location));
  });
}
PHOS_EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool* pool, CUdevice dev) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  return ToCu(DevicePool(pool, dev, false));
}
PHOS_EXPORT CUresult cuDeviceGetMemPool(CUmemoryPool* pool, CUdevice dev) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  return ToCu(DevicePool(pool, dev, true));
}
PHOS_EXPORT CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  return ToCu(SetDevicePool(dev, pool));
}
PHOS_EXPORT CUresult cuMemGetDefaultMemPool(CUmemoryPool* pool, CUmemLocation* location, CUmemAllocationType type) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  return ToCu(LocationPool(pool, reinterpret_cast<const cudaMemLocation*>(location),
                           static_cast<cudaMemAllocationType>(type), false));
}
PHOS_EXPORT CUresult cuMemGetMemPool(CUmemoryPool* pool, CUmemLocation* location, CUmemAllocationType type) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  return ToCu(LocationPool(pool, reinterpret_cast<const cudaMemLocation*>(location),
                           static_cast<cudaMemAllocationType>(type), true));
}
PHOS_EXPORT CUresult cuMemSetMemPool(CUmemLocation* location, CUmemAllocationType type, CUmemoryPool pool) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  return ToCu(SetLocationPool(reinterpret_cast<const cudaMemLocation*>(location),
                              static_cast<cudaMemAllocationType>(type), pool));
}
