// The sim's device memory: one reserved virtual address range per backend,
// an allocator inside it, and the modelled capacity of each device.
//
// Device memory is host memory mapped at the device addresses, so a
// DevicePtr is directly usable as a host pointer inside phosd. The range is
// reserved PROT_NONE once (MAP_FIXED_NOREPLACE at the fixed base: never on
// top of someone else's mapping); an allocation replaces part of our own
// reservation with a read/write mapping (MAP_FIXED over our reservation is an
// atomic replace, so no other mmap can land in between), and Free puts
// PROT_NONE back, which also drops the pages. Addresses are reproducible:
// the same base and the same `at` give the same address in another process.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "backend/backend.h"
#include "common/status.h"

namespace phos::backend::sim {

class SimAddressSpace {
 public:
  /// Allocation granularity and alignment (as cuMemAddressReserve's
  /// granularity on current GPUs). A chosen `at` must be aligned to it.
  static constexpr std::uint64_t kGranularity = 2ull << 20;

  /// Reserves [base, base + size) for `device_count` devices of
  /// `capacity_per_device` bytes each. AlreadyExists (naming the range) if
  /// any part of it is already mapped in this process.
  static Status Reserve(std::uint64_t base, std::uint64_t size, int device_count,
                        std::uint64_t capacity_per_device,
                        std::unique_ptr<SimAddressSpace>* out);
  /// Unmaps the whole range (every allocation with it).
  ~SimAddressSpace();

  SimAddressSpace(const SimAddressSpace&) = delete;
  SimAddressSpace& operator=(const SimAddressSpace&) = delete;

  std::uint64_t base() const { return base_; }
  std::uint64_t size() const { return size_; }

  /// Maps `bytes` for `device`, owned by `owner` (a context id). `at` != 0
  /// asks for exactly that address (see Context::Allocate for the errors).
  Status Allocate(int device, std::uint64_t owner, std::size_t bytes, DevicePtr at,
                  DevicePtr* out);
  /// As Allocate(at = 0), but at the highest free address: memory phosd
  /// keeps for itself (Context::AllocateForDaemon), away from the low
  /// addresses next-fit gives the app's allocations — the addresses a
  /// restore into another phosd needs free again.
  Status AllocateHigh(int device, std::uint64_t owner, std::size_t bytes, DevicePtr* out);
  /// Reserves `bytes` (a multiple of kGranularity) of address space for
  /// `owner`, mapping nothing (Context::ReserveAddressRange): at `at`, or
  /// where a gap aligned to `alignment` (0 or a power of two; at least
  /// kGranularity) is. Allocations at an address inside it must be
  /// `owner`'s and lie wholly inside; Allocate(at = 0) never lands in it.
  Status ReserveRange(std::uint64_t owner, std::uint64_t bytes, std::uint64_t alignment, DevicePtr at,
                      DevicePtr* out);
  /// Gives back `owner`'s reservation starting at `start`.
  /// FailedPrecondition while a live allocation lies inside it.
  Status ReleaseRange(std::uint64_t owner, DevicePtr start);
  /// Frees the allocation that starts at `ptr`; it must belong to `owner`.
  /// If a copy is still using it (a caller bug), the range stays reserved
  /// until that copy ends, then is unmapped.
  Status Free(std::uint64_t owner, DevicePtr ptr);
  /// Frees every allocation and reservation of `owner` (a context being
  /// destroyed).
  void FreeAllOwnedBy(std::uint64_t owner);
  /// Free and total modelled memory of `device`.
  void MemoryInfo(int device, std::uint64_t* free_bytes, std::uint64_t* total_bytes) const;

  /// OK if [ptr, ptr + bytes) lies inside one live allocation, or inside
  /// back-to-back allocations of one reservation (the app mapped them
  /// there: one range, as on a GPU), else InvalidArgument naming the
  /// address.
  Status CheckRange(DevicePtr ptr, std::size_t bytes) const;

  /// Keeps the allocations under some device ranges mapped while a copy
  /// runs on a stream worker (so a racing Free cannot unmap them mid-copy).
  /// PinOwnedRange's `owner` that accepts any owner.
  static constexpr std::uint64_t kAnyOwner = ~std::uint64_t{0};

  class Pin {
   public:
    Pin() = default;
    ~Pin();
    Pin(const Pin&) = delete;
    Pin& operator=(const Pin&) = delete;

   private:
    friend class SimAddressSpace;
    SimAddressSpace* space_ = nullptr;
    std::vector<DevicePtr> starts_;  // allocations pinned (their start addresses)
  };
  /// Pins the live allocation(s) holding [ptr, ptr + bytes) (as CheckRange
  /// accepts them) into `pin`. Fails
  /// (InvalidArgument, "illegal address") if it was freed since enqueue.
  Status PinRange(DevicePtr ptr, std::size_t bytes, Pin* pin);
  /// As PinRange, and tells the bounds of the allocation holding `ptr` [*start,
  /// *start + *bytes_out), so a kernel can check later accesses against it
  /// without taking the lock again.
  Status PinRange(DevicePtr ptr, std::size_t bytes, Pin* pin, DevicePtr* start,
                  std::uint64_t* bytes_out);
  /// As above, and the allocation must belong to `owner` (a kernel of one
  /// context touching another context's memory is an illegal address, as
  /// on a GPU where contexts have separate page tables: this is what keeps
  /// the sessions of one phosd apart).
  Status PinOwnedRange(DevicePtr ptr, std::size_t bytes, std::uint64_t owner, Pin* pin, DevicePtr* start,
                       std::uint64_t* bytes_out);

 private:
  struct Allocation {
    std::uint64_t bytes = 0;   // as requested: the valid range for copies
    std::uint64_t mapped = 0;  // rounded up to kGranularity: what is mapped and counted
    int device = 0;
    std::uint64_t owner = 0;
    int pins = 0;              // copies running on it now
    bool freed = false;        // Free was called while pinned; unmap at last unpin
    DevicePtr reservation = 0; // the reservation it lies in (0: none)
  };
  using Map = std::map<DevicePtr, Allocation>;
  struct Reservation {
    std::uint64_t bytes = 0;
    std::uint64_t owner = 0;
  };
  using ReservationMap = std::map<DevicePtr, Reservation>;

  SimAddressSpace(std::uint64_t base, std::uint64_t size, int device_count,
                  std::uint64_t capacity);

  // All below: callers hold mu_.
  /// The live allocation holding `ptr` whose run of back-to-back
  /// allocations in its reservation (see CheckRange) holds all of
  /// [ptr, ptr + bytes); *count (if not null) is how many the range spans.
  Map::const_iterator FindLocked(DevicePtr ptr, std::size_t bytes, std::size_t* count = nullptr) const;
  bool OverlapsLocked(DevicePtr start, std::uint64_t bytes) const;
  /// The reservation overlapping [start, start + bytes), or end().
  ReservationMap::const_iterator OverlappingReservationLocked(DevicePtr start, std::uint64_t bytes) const;
  /// The first address >= from, aligned to `alignment`, with `bytes` free
  /// of allocations and reservations; 0 if none.
  DevicePtr FindGapLocked(std::uint64_t bytes, DevicePtr from, std::uint64_t alignment = kGranularity) const;
  /// mu_ held: the highest kGranularity-aligned free gap of `bytes` (a
  /// multiple of kGranularity), or 0.
  DevicePtr FindHighestGapLocked(std::uint64_t bytes) const;
  void ReleaseLocked(Map::iterator it);  // unmaps and forgets one allocation
  void Unpin(const std::vector<DevicePtr>& starts);

  const std::uint64_t base_;
  const std::uint64_t size_;
  const std::uint64_t capacity_;  // per device

  mutable std::mutex mu_;               // protects everything below
  Map allocations_;                     // by start address; guarded by mu_
  ReservationMap reservations_;         // by start address; guarded by mu_
  std::vector<std::uint64_t> used_;     // mapped bytes per device; guarded by mu_
  DevicePtr cursor_;                    // next-fit search start; guarded by mu_
};

}  // namespace phos::backend::sim
