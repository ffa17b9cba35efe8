// The driver's virtual-memory API (docs/interposer.md "The driver's
// virtual-memory API"), as PyTorch's expandable segments and other
// allocators that manage their own address space use it:
// cuMemAddressReserve/Free, cuMemCreate/Release, cuMemMap/Unmap,
// cuMemSetAccess/GetAccess, cuMemGetAllocationGranularity,
// cuMemGetAllocationPropertiesFromHandle, cuMemRetainAllocationHandle.
//
// phosd sees reserved ranges and mappings (kMemAddressReserve/Free,
// kMemMap/Unmap): a mapping is a buffer of the session at the app's address.
// Physical allocation handles live here only: phosd backs a handle's memory
// when it is mapped. What that model cannot give is refused by name
// (CUDA_ERROR_NOT_SUPPORTED, said once), never faked:
//   * a handle mapped at two addresses at once (aliasing: two device
//     ranges with one content, which no checkpoint of buffers can carry);
//   * a handle mapped again after cuMemUnmap (its contents must survive
//     unmapped, with no address for phosd to keep them at);
//   * a non-zero offset into a handle;
//   * host, NUMA or other-GPU locations, compression, and exporting or
//     importing handles (cuMemExportToShareableHandle etc. stay refused).
// Access flags are recorded and answered back but not enforced: a kernel
// writing through a read-only mapping succeeds under phos, where a GPU
// would fault.
//
// All state is under one mutex (Vmm::mu); a call sends its wire op with
// the mutex dropped (a handle being mapped is marked `mapping` so a racing
// second cuMemMap of it is refused rather than sent twice).
#include <cuda.h>

#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "interposer/client/client_internal.h"
#include "interposer/client/connection.h"
#include "interposer/client/devices.h"
#include "interposer/client/driver_internal.h"

namespace phos::client {
namespace {

namespace op = wire::op;

struct HandleRec {
  size_t bytes = 0;
  CUmemAllocationProp prop{};
  int refs = 1;               // cuMemCreate and each cuMemRetainAllocationHandle; cuMemRelease drops one
  CUdeviceptr mapped_at = 0;  // 0: not mapped
  bool mapping = false;       // a cuMemMap of it is on the wire
  bool was_mapped = false;    // mapped once and unmapped since: its contents are gone
};

struct MappingRec {
  size_t bytes = 0;
  unsigned long long handle = 0;
  CUmemAccess_flags access = CU_MEM_ACCESS_FLAGS_PROT_NONE;  // as cuMemSetAccess last set it for the GPU
};

struct Vmm {
  std::mutex mu;                                    // guards everything below
  unsigned long long next_handle = 0x7068'0000'0001ull;  // "ph": never 0, unlike a pointer
  std::map<unsigned long long, HandleRec> handles;
  std::map<CUdeviceptr, MappingRec> mappings;       // by start address
};

Vmm& State() {
  static Vmm* v = new Vmm();  // never destroyed: calls may come during exit
  return *v;
}

CUresult Refuse(const std::string& what) {
  SayOnce(what + " is not supported by phos (CUDA_ERROR_NOT_SUPPORTED)");
  return CUDA_ERROR_NOT_SUPPORTED;
}

/// The properties phos can allocate: pinned device memory of the session's GPU.
CUresult CheckProp(const CUmemAllocationProp* prop, const char* call) {
  if (prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED) {
    return Refuse(std::string(call) + " of an allocation type other than CU_MEM_ALLOCATION_TYPE_PINNED");
  }
  if (prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
    return Refuse(std::string(call) + " of host or NUMA memory (location type " +
                  std::to_string(static_cast<int>(prop->location.type)) + ")");
  }
  int count = 0;
  if (VisibleDeviceCount(&count) != cudaSuccess || prop->location.id < 0 || prop->location.id >= count) {
    return CUDA_ERROR_INVALID_DEVICE;
  }
  if (!IsCurrentDevice(prop->location.id)) {
    return Refuse(std::string(call) + " on GPU " + std::to_string(prop->location.id) +
                  " while the calling thread's current GPU is " + std::to_string(CurrentDevice()) +
                  " (phos makes memory on the current GPU only)");
  }
  if (prop->allocFlags.compressionType != 0) return Refuse(std::string(call) + " of compressible memory");
  return CUDA_SUCCESS;
}

bool GranularityMultiple(unsigned long long v) { return v % wire::kVmmGranularity == 0; }

/// The mapping holding `p`, or mappings.end(). Caller holds mu.
std::map<CUdeviceptr, MappingRec>::iterator MappingOf(Vmm& v, CUdeviceptr p) {
  auto it = v.mappings.upper_bound(p);
  if (it == v.mappings.begin()) return v.mappings.end();
  --it;
  return p - it->first < it->second.bytes ? it : v.mappings.end();
}

}  // namespace
}  // namespace phos::client

using namespace phos::client;  // NOLINT
namespace wire = phos::wire;
namespace ring = phos::ring;
namespace op = phos::wire::op;

PHOS_EXPORT CUresult cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                                   CUmemAllocationGranularity_flags option) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  if (granularity == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (CUresult r = CheckProp(prop, "cuMemGetAllocationGranularity"); r != CUDA_SUCCESS) return r;
  *granularity = wire::kVmmGranularity;
  return CUDA_SUCCESS;
}

PHOS_EXPORT CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                         unsigned long long flags) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  if (ptr == nullptr || size == 0 || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  const wire::AddressReserveRequest req{size, alignment, addr};
  ring::Reply r;
  WireStatus w = Connection::Get().Call(op::kMemAddressReserve, 0, Bytes(req), &r);
  wire::MallocReply got{};
  if (w == WireStatus::kSuccess && r.bytes != sizeof(got)) w = WireStatus::kUnknown;
  if (w != WireStatus::kSuccess) return ToCu(w);
  std::memcpy(&got, r.data.data(), sizeof(got));
  *ptr = got.ptr;
  return CUDA_SUCCESS;
}

PHOS_EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  if (ptr == 0 || size == 0) return CUDA_ERROR_INVALID_VALUE;
  return ToCu(Connection::Get().Call(op::kMemAddressFree, 0, Bytes(wire::AddressRangeRequest{ptr, size})));
}

PHOS_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                                 unsigned long long flags) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  if (handle == nullptr || size == 0 || flags != 0 || !GranularityMultiple(size)) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = CheckProp(prop, "cuMemCreate"); r != CUDA_SUCCESS) return r;
  Vmm& v = State();
  std::lock_guard<std::mutex> lock(v.mu);
  const unsigned long long id = v.next_handle++;
  HandleRec& h = v.handles[id];
  h.bytes = size;
  h.prop = *prop;
  *handle = id;
  return CUDA_SUCCESS;
}

PHOS_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  Vmm& v = State();
  std::lock_guard<std::mutex> lock(v.mu);
  auto it = v.handles.find(handle);
  if (it == v.handles.end() || it->second.refs == 0) return CUDA_ERROR_INVALID_VALUE;
  // The memory goes when the last reference and the last mapping are gone.
  if (--it->second.refs == 0 && it->second.mapped_at == 0 && !it->second.mapping) v.handles.erase(it);
  return CUDA_SUCCESS;
}

PHOS_EXPORT CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop,
                                                            CUmemGenericAllocationHandle handle) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Vmm& v = State();
  std::lock_guard<std::mutex> lock(v.mu);
  auto it = v.handles.find(handle);
  if (it == v.handles.end() || it->second.refs == 0) return CUDA_ERROR_INVALID_VALUE;
  *prop = it->second.prop;
  return CUDA_SUCCESS;
}

PHOS_EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Vmm& v = State();
  std::lock_guard<std::mutex> lock(v.mu);
  auto m = MappingOf(v, reinterpret_cast<CUdeviceptr>(addr));
  auto h = m == v.mappings.end() ? v.handles.end() : v.handles.find(m->second.handle);
  if (h == v.handles.end()) return CUDA_ERROR_INVALID_VALUE;
  h->second.refs++;
  *handle = m->second.handle;
  return CUDA_SUCCESS;
}

PHOS_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                              unsigned long long flags) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  if (ptr == 0 || size == 0 || flags != 0 || !GranularityMultiple(size) || !GranularityMultiple(ptr)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  Vmm& v = State();
  {
    std::lock_guard<std::mutex> lock(v.mu);
    auto it = v.handles.find(handle);
    if (it == v.handles.end() || it->second.refs == 0) return CUDA_ERROR_INVALID_VALUE;
    HandleRec& h = it->second;
    if (offset != 0) return Refuse("cuMemMap at a non-zero offset into an allocation");
    if (size > h.bytes) return CUDA_ERROR_INVALID_VALUE;
    if (h.mapped_at != 0 || h.mapping) {
      return Refuse("cuMemMap of an allocation that is already mapped (one allocation at two addresses)");
    }
    if (h.was_mapped) {
      return Refuse("cuMemMap of an allocation after cuMemUnmap (its contents would have to outlive the mapping)");
    }
    h.mapping = true;
  }
  const WireStatus w = Connection::Get().Call(op::kMemMap, 0, Bytes(wire::AddressRangeRequest{ptr, size}));
  std::lock_guard<std::mutex> lock(v.mu);
  // `mapping` kept the handle (cuMemRelease leaves it); only a
  // cudaDeviceReset meanwhile (ForgetVirtualMemory) removes it.
  auto it = v.handles.find(handle);
  if (it == v.handles.end()) return w == WireStatus::kSuccess ? CUDA_ERROR_INVALID_VALUE : ToCu(w);
  HandleRec& h = it->second;
  h.mapping = false;
  if (w != WireStatus::kSuccess) {
    if (h.refs == 0) v.handles.erase(it);
    return ToCu(w);
  }
  h.mapped_at = ptr;
  v.mappings[ptr] = MappingRec{size, handle};
  NoteDeviceAllocation(ptr, size);
  return CUDA_SUCCESS;
}

PHOS_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  if (ptr == 0 || size == 0 || ptr + size < ptr) return CUDA_ERROR_INVALID_VALUE;
  const CUdeviceptr end = ptr + size;
  Vmm& v = State();
  std::vector<std::pair<CUdeviceptr, size_t>> targets;  // whole mappings inside [ptr, end)
  {
    std::lock_guard<std::mutex> lock(v.mu);
    // The range must start at a mapping and cut none (CUDA unmaps whole
    // mappings only).
    if (v.mappings.find(ptr) == v.mappings.end()) return CUDA_ERROR_INVALID_VALUE;
    for (auto it = v.mappings.find(ptr); it != v.mappings.end() && it->first < end; ++it) {
      if (it->second.bytes > end - it->first) return CUDA_ERROR_INVALID_VALUE;
      targets.emplace_back(it->first, it->second.bytes);
    }
  }
  for (const auto& [start, bytes] : targets) {
    const WireStatus w = Connection::Get().Call(op::kMemUnmap, 0, Bytes(wire::AddressRangeRequest{start, bytes}));
    if (w != WireStatus::kSuccess) return ToCu(w);
    ForgetDeviceAllocation(start);
    std::lock_guard<std::mutex> lock(v.mu);
    auto m = v.mappings.find(start);
    if (m == v.mappings.end()) continue;  // a racing cuMemUnmap of the same range (phosd answered one of them)
    auto h = v.handles.find(m->second.handle);
    v.mappings.erase(m);
    if (h == v.handles.end()) continue;
    h->second.mapped_at = 0;
    h->second.was_mapped = true;
    if (h->second.refs == 0) v.handles.erase(h);
  }
  return CUDA_SUCCESS;
}

PHOS_EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  if (desc == nullptr || count == 0 || size == 0 || ptr + size < ptr) return CUDA_ERROR_INVALID_VALUE;
  CUmemAccess_flags flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;
  bool for_gpu = false;
  for (size_t i = 0; i < count; ++i) {
    if (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE && desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
        desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
      return Refuse("cuMemSetAccess for host or NUMA locations");
    }
    if (!IsCurrentDevice(desc[i].location.id)) {
      return Refuse("cuMemSetAccess for GPU " + std::to_string(desc[i].location.id) +
                    " while the calling thread's current GPU is " + std::to_string(CurrentDevice()) +
                    " (phos maps memory for the current GPU only)");
    }
    flags = desc[i].flags;
    for_gpu = true;
  }
  Vmm& v = State();
  std::lock_guard<std::mutex> lock(v.mu);
  // The range must be mapped throughout, back to back.
  const CUdeviceptr end = ptr + size;
  CUdeviceptr at = ptr;
  auto it = MappingOf(v, ptr);
  std::vector<std::map<CUdeviceptr, MappingRec>::iterator> covered;
  while (at < end) {
    if (it == v.mappings.end() || it->first > at) return CUDA_ERROR_INVALID_VALUE;
    covered.push_back(it);
    at = it->first + it->second.bytes;
    ++it;
  }
  if (for_gpu) {
    for (auto& m : covered) m->second.access = flags;
  }
  return CUDA_SUCCESS;
}

PHOS_EXPORT CUresult cuMemGetAccess(unsigned long long* flags, const CUmemLocation* location, CUdeviceptr ptr) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  if (flags == nullptr || location == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Vmm& v = State();
  std::lock_guard<std::mutex> lock(v.mu);
  auto m = MappingOf(v, ptr);
  if (m == v.mappings.end()) return CUDA_ERROR_INVALID_VALUE;
  const bool gpu = location->type == CU_MEM_LOCATION_TYPE_DEVICE && IsCurrentDevice(location->id);
  *flags = gpu ? m->second.access : CU_MEM_ACCESS_FLAGS_PROT_NONE;
  return CUDA_SUCCESS;
}

namespace phos::client {

void ForgetVirtualMemory() {
  Vmm& v = State();
  std::lock_guard<std::mutex> lock(v.mu);
  v.handles.clear();
  v.mappings.clear();
}

}  // namespace phos::client
