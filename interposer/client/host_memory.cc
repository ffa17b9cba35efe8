// Pinned and registered host memory (docs/interposer.md "Pinned host memory
// and copies"): cudaMallocHost, cudaHostAlloc, cudaFreeHost,
// cudaHostRegister, cudaHostUnregister, cudaHostGetFlags,
// cudaHostGetDevicePointer, cudaPointerGetAttributes.
//
// cudaMallocHost memory comes from HostArena segments: each segment is a
// sealed memfd the app maps and hands to phosd (Connection::
// ShareHostSegment), which maps it too and registers it with the backend
// as pinned. Copies whose host side lies in a segment go as one small
// record naming the app address (memory_copy.cc); phosd copies straight
// from / into its own mapping of the same pages.
//
// cudaHostRegister cannot do that: phosd cannot map the app's private
// pages. Registered ranges are only recorded here (for CUDA's flag checks
// and errors, and cudaPointerGetAttributes); copies from them take the
// staged path: correct, but not zero-copy.
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>

#include "interposer/client/client_internal.h"
#include "interposer/client/connection.h"
#include "interposer/client/host_arena.h"

namespace phos::client {
namespace {

std::atomic<uint64_t> g_next_segment_id{1};

/// The SegmentMaker of the process arena: a sealed memfd, mapped here and
/// shared with phosd. Runs under the arena's lock.
int MakeSharedSegment(size_t bytes, HostSegment* out) {
  Connection& c = Connection::Get();
  if (WireStatus w = c.Ensure(); w != WireStatus::kSuccess) return static_cast<int>(w);
  int fd = memfd_create("phos-pinned", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return cudaErrorMemoryAllocation;
  // Sealed so that neither side can shrink the file under the other's
  // mapping (phosd checks F_SEAL_SHRINK before mapping it).
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0 ||
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    close(fd);
    return cudaErrorMemoryAllocation;
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    close(fd);
    return cudaErrorMemoryAllocation;
  }
  const uint64_t id = g_next_segment_id.fetch_add(1, std::memory_order_relaxed);
  bool kernels_reach = false;
  WireStatus w = c.ShareHostSegment(id, bytes, reinterpret_cast<uint64_t>(p), fd, &kernels_reach);
  close(fd);  // phosd holds its own reference; our mapping keeps the pages
  if (w != WireStatus::kSuccess) {
    munmap(p, bytes);
    return static_cast<int>(w);
  }
  *out = HostSegment{id, static_cast<std::byte*>(p), bytes, kernels_reach};
  return 0;
}

HostArena* NewArena() {
  auto* a = new HostArena(MakeSharedSegment);
  static HostArena* forked = a;  // the one arena; for the fork handlers (no captures allowed)
  pthread_atfork([] { forked->PrepareFork(); }, [] { forked->ParentAfterFork(); },
                 [] { forked->ChildAfterFork(); });
  return a;
}

HostArena& Arena() {
  static HostArena* a = NewArena();  // leaked: used until exit
  return *a;
}

/// cudaHostRegister'ed ranges (start -> size, flags). Lock: `mu`.
struct RegisteredRanges {
  struct Range {
    size_t bytes = 0;
    unsigned flags = 0;
  };
  std::mutex mu;
  std::map<uintptr_t, Range> ranges;
  /// Caller holds mu. The range containing p, or end().
  std::map<uintptr_t, Range>::iterator FindLocked(uintptr_t p) {
    auto it = ranges.upper_bound(p);
    if (it == ranges.begin()) return ranges.end();
    --it;
    return p - it->first < it->second.bytes ? it : ranges.end();
  }
};
RegisteredRanges& Registered() {
  static RegisteredRanges* r = new RegisteredRanges();
  return *r;
}

constexpr unsigned kHostAllocFlags = cudaHostAllocPortable | cudaHostAllocMapped | cudaHostAllocWriteCombined;
constexpr unsigned kHostRegisterFlags =
    cudaHostRegisterPortable | cudaHostRegisterMapped | cudaHostRegisterIoMemory | cudaHostRegisterReadOnly;

void LogOnce(std::atomic<bool>& once, const char* text) {
  if (!once.exchange(true)) {
    std::fprintf(stderr, "phos: %s\n", text);
    std::fflush(stderr);
  }
}

cudaError_t HostAlloc(void** ptr, size_t size, unsigned flags) {
  if (cudaError_t s = StickyError(); s != cudaSuccess) return SetError(s);
  if (ptr == nullptr || (flags & ~kHostAllocFlags) != 0) return SetError(cudaErrorInvalidValue);
  int e = Arena().Allocate(size, flags, ptr);
  if (e == HostArena::kTooLarge) return SetError(cudaErrorMemoryAllocation);
  if (e != 0) return SetError(static_cast<cudaError_t>(e));
  return cudaSuccess;
}

}  // namespace

bool IsPinnedRange(const void* p, size_t n) { return Arena().InSegment(p, n); }

}  // namespace phos::client

using namespace phos::client;  // NOLINT

// Flags under phos: Portable — every allocation is usable from every
// context anyway (phosd registers segments portable); Mapped — every arena
// segment phosd could map for kernels is mapped, at the app's own address
// (the host pointer is the device pointer, as with unified addressing;
// docs/interposer.md "Mapped pinned memory"), with or without the flag;
// WriteCombined — accepted and ignored (ordinary cached memory, a
// performance hint only).
PHOS_EXPORT cudaError_t cudaHostAlloc(void** ptr, size_t size, unsigned int flags) {
  return HostAlloc(ptr, size, flags);
}

PHOS_EXPORT cudaError_t cudaMallocHost(void** ptr, size_t size) { return HostAlloc(ptr, size, cudaHostAllocDefault); }

PHOS_EXPORT cudaError_t cudaFreeHost(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  // The segment stays mapped (and registered in phosd) for reuse: copies
  // still in flight from or into the freed block cannot fault either side.
  if (!Arena().Free(ptr)) return SetError(cudaErrorInvalidValue);
  return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaHostRegister(void* ptr, size_t size, unsigned int flags) {
  if (ptr == nullptr || size == 0 || (flags & ~kHostRegisterFlags) != 0) return SetError(cudaErrorInvalidValue);
  if (flags & cudaHostRegisterIoMemory) {
    static std::atomic<bool> once{false};
    LogOnce(once, "cudaHostRegister: cudaHostRegisterIoMemory (device I/O memory) is not supported by phos");
    return SetError(cudaErrorNotSupported);
  }
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  if (p > UINTPTR_MAX - size) return SetError(cudaErrorInvalidValue);
  // Arena memory is pinned already.
  if (Arena().Overlaps(ptr, size)) return SetError(cudaErrorHostMemoryAlreadyRegistered);
  RegisteredRanges& r = Registered();
  std::lock_guard<std::mutex> lock(r.mu);
  auto next = r.ranges.lower_bound(p);
  if (next != r.ranges.end() && next->first < p + size) return SetError(cudaErrorHostMemoryAlreadyRegistered);
  if (next != r.ranges.begin()) {
    auto prev = std::prev(next);
    if (p - prev->first < prev->second.bytes) return SetError(cudaErrorHostMemoryAlreadyRegistered);
  }
  r.ranges.emplace(p, RegisteredRanges::Range{size, flags});
  return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaHostUnregister(void* ptr) {
  if (ptr == nullptr) return SetError(cudaErrorInvalidValue);
  RegisteredRanges& r = Registered();
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.ranges.erase(reinterpret_cast<uintptr_t>(ptr)) == 0) return SetError(cudaErrorHostMemoryNotRegistered);
  return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaHostGetFlags(unsigned int* flags, void* ptr) {
  if (flags == nullptr || ptr == nullptr) return SetError(cudaErrorInvalidValue);
  HostArena::Allocation a;
  if (Arena().FindAllocation(ptr, &a)) {
    *flags = a.flags;
    return cudaSuccess;
  }
  RegisteredRanges& r = Registered();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.FindLocked(reinterpret_cast<uintptr_t>(ptr));
  if (it == r.ranges.end()) return SetError(cudaErrorInvalidValue);
  *flags = it->second.flags;
  return cudaSuccess;
}

// Arena memory in a segment phosd mapped for kernels: the device pointer is
// the host pointer. cudaHostRegister'ed memory is the app's private pages,
// which phosd cannot reach: refused by name, like a segment phosd could not
// map (the backend cannot, or device memory lives at that address).
PHOS_EXPORT cudaError_t cudaHostGetDevicePointer(void** pDevice, void* pHost, unsigned int flags) {
  if (pDevice == nullptr || pHost == nullptr || flags != 0) return SetError(cudaErrorInvalidValue);
  HostArena::Allocation a;
  if (Arena().FindAllocation(pHost, &a)) {
    if (a.kernels_reach) {
      *pDevice = pHost;
      return cudaSuccess;
    }
    static std::atomic<bool> once{false};
    LogOnce(once, "cudaHostGetDevicePointer: this pinned memory is not mapped for kernels (phosd's backend cannot "
                  "map host memory, or device memory occupies its address); returning cudaErrorNotSupported");
    return SetError(cudaErrorNotSupported);
  }
  {
    RegisteredRanges& r = Registered();
    std::lock_guard<std::mutex> lock(r.mu);
    if (r.FindLocked(reinterpret_cast<uintptr_t>(pHost)) != r.ranges.end()) {
      static std::atomic<bool> once{false};
      LogOnce(once, "cudaHostGetDevicePointer: memory registered with cudaHostRegister stays in the app's private "
                    "pages, which phos cannot map for kernels (allocate it with cudaHostAlloc(cudaHostAllocMapped) "
                    "instead); returning cudaErrorNotSupported");
      return SetError(cudaErrorNotSupported);
    }
  }
  return SetError(cudaErrorInvalidValue);  // not pinned memory at all, as CUDA answers
}

// What CUDA reports, with these phos differences: pinned memory has a
// device pointer (itself) only where phosd mapped its segment for kernels;
// cudaHostRegister'ed memory has none (devicePointer is null).
PHOS_EXPORT cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attr, const void* ptr) {
  if (attr == nullptr) return SetError(cudaErrorInvalidValue);
  *attr = cudaPointerAttributes{};
  uintptr_t base = 0;
  size_t bytes = 0;
  if (ptr != nullptr && FindDeviceBuffer(ptr, &base, &bytes)) {
    attr->type = cudaMemoryTypeDevice;
    attr->device = 0;
    attr->devicePointer = const_cast<void*>(ptr);
    attr->hostPointer = nullptr;
    return cudaSuccess;
  }
  HostArena::Allocation a;
  bool host = ptr != nullptr && Arena().FindAllocation(ptr, &a);
  const bool mapped = host && a.kernels_reach;
  if (!host && ptr != nullptr) {
    RegisteredRanges& r = Registered();
    std::lock_guard<std::mutex> lock(r.mu);
    host = r.FindLocked(reinterpret_cast<uintptr_t>(ptr)) != r.ranges.end();
  }
  if (host) {
    attr->type = cudaMemoryTypeHost;
    attr->device = 0;
    attr->devicePointer = mapped ? const_cast<void*>(ptr) : nullptr;
    attr->hostPointer = const_cast<void*>(ptr);
    return cudaSuccess;
  }
  // Unregistered host memory (CUDA 11+ answers cudaSuccess).
  attr->type = cudaMemoryTypeUnregistered;
  attr->device = -2;
  attr->devicePointer = nullptr;
  attr->hostPointer = const_cast<void*>(ptr);
  return cudaSuccess;
}

// ---------------------------------------------------------------- managed memory

std::string phos::client::ManagedMemoryRefusal(const char* api) {
  return std::string(api) +
         ": managed memory is not offered by phos: device memory lives in phosd, out of the app's reach "
         "(cudaDevAttrManagedMemory is 0; use cudaMalloc, or cudaHostAlloc for memory both host and kernels "
         "touch; docs/interposer.md \"Managed memory\")";
}

// scripts/compat_table.py lists it refused (a strong definition replaces
// the generated stub).
PHOS_EXPORT cudaError_t cudaMallocManaged(void** devPtr, size_t size, unsigned int flags) {
  (void)devPtr;
  (void)size;
  (void)flags;
  return RefuseNotSupported(ManagedMemoryRefusal("cudaMallocManaged"));
}

/// phos-private (not a CUDA symbol): this session's copy statistics from
/// phosd (wire::HostCopyStatsReply, six counters into out[0..5]). Tests
/// look it up with dlsym to prove pinned copies take the zero-copy path.
/// Returns a cudaError_t value.
PHOS_EXPORT int phosGetHostCopyStats(uint64_t* out) {
  if (out == nullptr) return cudaErrorInvalidValue;
  phos::ring::Reply r;
  WireStatus w = Connection::Get().Call(phos::wire::op::kHostCopyStats, 0, {}, &r);
  phos::wire::HostCopyStatsReply v{};
  if (w != WireStatus::kSuccess) return static_cast<int>(w);
  if (r.bytes != sizeof(v)) return cudaErrorUnknown;
  std::memcpy(&v, r.data.data(), sizeof(v));
  const uint64_t vals[6] = {v.pinned_copies, v.pinned_bytes, v.staged_copies, v.staged_bytes, v.segments,
                            v.segment_bytes};
  std::memcpy(out, vals, sizeof(vals));
  return cudaSuccess;
}
