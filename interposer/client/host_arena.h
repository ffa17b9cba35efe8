// The pinned host arena of libphos.so (docs/interposer.md "Pinned host
// memory and copies"): cudaMallocHost / cudaHostAlloc memory comes from
// shared-memory segments that phosd maps and registers as pinned, so
// copies from and to it need no staging.
//
// This class is only the allocator: segments are made by a SegmentMaker
// (host_memory.cc: memfd + mmap + hand the fd to phosd; tests: plain
// memory). Inside a segment it is first fit over a free list kept by
// offset, coalescing on free. Allocations are rounded up to 256 bytes;
// those of a page or more start on a page boundary. Segments are never
// returned (phosd may still be copying from or into one; they go when the
// session ends), so a free block stays reusable.
//
// Lock: one std::shared_mutex `mu_` guards every member. Allocate and Free
// take it exclusively (Allocate also while it makes a segment, so two
// threads never both grow the arena for one shortage; the maker therefore
// must not call back into the arena). The lookups copies make (InSegment,
// FindAllocation, Overlaps) take it shared.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <shared_mutex>
#include <vector>

namespace phos::client {

struct HostSegment {
  uint64_t id = 0;
  std::byte* base = nullptr;  // page aligned
  size_t bytes = 0;           // a multiple of the page size
  bool kernels_reach = false;  // phosd mapped it for kernels (mapped pinned memory)
};

/// Makes a segment of exactly `bytes` bytes. Returns 0, or a nonzero error
/// code that Allocate passes through (host_memory.cc: a cudaError_t).
using SegmentMaker = std::function<int(size_t bytes, HostSegment* out)>;

class HostArena {
 public:
  static constexpr size_t kDefaultSegmentBytes = size_t{64} << 20;
  static constexpr size_t kGranule = 256;
  static constexpr size_t kPage = 4096;
  /// Segment sizes are rounded up to this (a huge page, for the driver).
  static constexpr size_t kSegmentRound = size_t{2} << 20;
  /// Allocate's error when the size cannot be represented.
  static constexpr int kTooLarge = -1;

  explicit HostArena(SegmentMaker maker, size_t segment_bytes = kDefaultSegmentBytes);
  HostArena(const HostArena&) = delete;
  HostArena& operator=(const HostArena&) = delete;

  /// 0 and *out, or the maker's error / kTooLarge. `bytes` 0 allocates the
  /// smallest block (CUDA returns a valid pointer for 0 bytes too).
  int Allocate(size_t bytes, unsigned flags, void** out);
  /// False when `p` is not the start of a live allocation.
  bool Free(void* p);

  struct Allocation {
    uintptr_t base = 0;
    size_t bytes = 0;  // as requested
    unsigned flags = 0;
    uint64_t segment_id = 0;
    bool kernels_reach = false;  // its segment's HostSegment::kernels_reach
  };
  /// The live allocation containing `p`.
  bool FindAllocation(const void* p, Allocation* out) const;
  /// [p, p + n) lies inside one segment (n >= 1; n == 0 tests p alone).
  bool InSegment(const void* p, size_t n) const;
  /// Some byte of [p, p + n) lies in a segment.
  bool Overlaps(const void* p, size_t n) const;

  /// fork() (pthread_atfork, host_memory.cc): Prepare takes the lock in
  /// the forking thread; the parent then unlocks; the child forgets every
  /// segment (they are MAP_SHARED with the parent and registered with the
  /// parent's session, not the child's: handing out more of them would let
  /// parent and child write the same pages; a new allocation needs a new
  /// segment, which fails in a child that inherited a connection, as every
  /// CUDA call does there — fork_guard.cc). The child keeps the old pages
  /// mapped (its data stays readable) and cudaFreeHost of an inherited
  /// block succeeds and does nothing.
  void PrepareFork();
  void ParentAfterFork();
  void ChildAfterFork();

  size_t segment_count() const;
  size_t live_allocations() const;
  /// Free bytes over all segments (tests: everything comes back).
  size_t free_bytes() const;
  /// Largest free block of one segment (tests: coalescing).
  size_t largest_free_block() const;

 private:
  struct Segment {
    HostSegment seg;
    std::map<size_t, size_t> free;  // offset -> bytes, disjoint, coalesced
  };
  struct Live {
    Segment* segment = nullptr;
    size_t offset = 0;
    size_t rounded = 0;  // what the free list gave
    size_t requested = 0;
    unsigned flags = 0;
  };
  bool CarveLocked(Segment* s, size_t bytes, size_t align, size_t* offset);
  const Segment* SegmentOfLocked(uintptr_t p) const;

  const SegmentMaker maker_;
  const size_t segment_bytes_;
  mutable std::shared_mutex mu_;
  std::vector<std::unique_ptr<Segment>> segments_;  // grows only
  std::map<uintptr_t, Segment*> by_base_;           // segment base -> segment
  std::map<uintptr_t, Live> live_;                  // allocation start -> allocation
  std::map<uintptr_t, size_t> inherited_;           // blocks live at fork (child only)
};

}  // namespace phos::client
