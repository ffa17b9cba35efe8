#include "backend/sim/sim_address_space.h"

#include "common/hex.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <iterator>
#include <string>

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

// ThreadSanitizer's annotation (exported by its runtime; null in other
// builds, so the check below is a runtime one, not a build mode).
extern "C" void AnnotateBenignRaceSized(const char* file, int line, const volatile void* mem, unsigned long size,
                                        const char* description) __attribute__((weak));

namespace phos::backend::sim {
namespace {

std::string RangeText(std::uint64_t start, std::uint64_t bytes) {
  return "[" + Hex(start) + ", " + Hex(start + bytes) + ")";
}

bool AlignUp(std::uint64_t v, std::uint64_t a, std::uint64_t* out) {
  if (v > UINT64_MAX - (a - 1)) return false;
  *out = (v + a - 1) / a * a;
  return true;
}

// Puts PROT_NONE back over [start, start + bytes) of our reservation and
// drops its pages.
int Unmap(std::uint64_t start, std::uint64_t bytes) {
  void* p = mmap(reinterpret_cast<void*>(start), bytes, PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  return p == MAP_FAILED ? errno : 0;
}

}  // namespace

Status SimAddressSpace::Reserve(std::uint64_t base, std::uint64_t size, int device_count,
                                std::uint64_t capacity_per_device,
                                std::unique_ptr<SimAddressSpace>* out) {
  if (base == 0 || base % kGranularity != 0 || size == 0 || size % kGranularity != 0 ||
      base > UINT64_MAX - size) {
    return Status::InvalidArgument("sim backend: device address range " + RangeText(base, size) +
                                   " must be non-empty and aligned to " + Hex(kGranularity));
  }
  if (device_count < 1) {
    return Status::InvalidArgument("sim backend: device_count must be at least 1");
  }
  void* want = reinterpret_cast<void*>(base);
  void* got = mmap(want, size, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
  if (got == MAP_FAILED) {
    int err = errno;
    if (err == EEXIST) {
      return Status::AlreadyExists(
          "sim backend: cannot reserve device address range " + RangeText(base, size) +
          " at " + Hex(base) +
          ": part of it is already mapped in this process (another sim backend, or a "
          "library); choose another va_base");
    }
    return Status::FromErrno("sim backend: cannot reserve device address range " +
                                 RangeText(base, size) + " at " + Hex(base),
                             err);
  }
  if (got != want) {
    // A kernel older than 4.17 treats MAP_FIXED_NOREPLACE as a hint.
    munmap(got, size);
    return Status::AlreadyExists("sim backend: cannot reserve device address range " +
                                 RangeText(base, size) + " at " + Hex(base) +
                                 ": the kernel placed it elsewhere (range taken?)");
  }
  // Device memory is not C++ memory: on a GPU, a copy engine reading a
  // buffer while a kernel writes it is legal (the result is torn, and the C/R
  // engine's protocols rely on detecting and discarding such copies, e.g.
  // soft recopy's generations). The sim backs device memory with host pages,
  // so those device-level races look like data races to ThreadSanitizer.
  // Mark the device range as racy by design; host memory (staging buffers,
  // the engine's own state) stays fully checked.
  if (AnnotateBenignRaceSized != nullptr) {
    AnnotateBenignRaceSized(__FILE__, __LINE__, want, size, "sim device memory (device-level races are legal)");
  }
  out->reset(new SimAddressSpace(base, size, device_count, capacity_per_device));
  return Status::Ok();
}

SimAddressSpace::SimAddressSpace(std::uint64_t base, std::uint64_t size, int device_count,
                                 std::uint64_t capacity)
    : base_(base), size_(size), capacity_(capacity), used_(device_count, 0), cursor_(base) {}

SimAddressSpace::~SimAddressSpace() { munmap(reinterpret_cast<void*>(base_), size_); }

SimAddressSpace::Map::const_iterator SimAddressSpace::FindLocked(DevicePtr ptr, std::size_t bytes,
                                                                 std::size_t* count) const {
  auto it = allocations_.upper_bound(ptr);
  if (it == allocations_.begin()) return allocations_.end();
  --it;
  const Allocation& a = it->second;
  if (a.freed || ptr - it->first > a.bytes) return allocations_.end();
  std::size_t n = 1;
  // Past its end: the next allocation must start right there, in the same
  // reservation (the app mapped them back to back), and so on.
  std::uint64_t left = bytes;
  std::uint64_t room = a.bytes - (ptr - it->first);
  auto cur = it;
  while (left > room) {
    if (cur->second.reservation == 0 || cur->second.bytes != cur->second.mapped) return allocations_.end();
    left -= room;
    auto next = std::next(cur);
    if (next == allocations_.end() || next->first != cur->first + cur->second.mapped || next->second.freed ||
        next->second.reservation != cur->second.reservation || next->second.owner != cur->second.owner) {
      return allocations_.end();
    }
    cur = next;
    room = cur->second.bytes;
    ++n;
  }
  if (count != nullptr) *count = n;
  return it;
}

bool SimAddressSpace::OverlapsLocked(DevicePtr start, std::uint64_t bytes) const {
  auto it = allocations_.lower_bound(start);
  if (it != allocations_.end() && it->first < start + bytes) return true;
  if (it != allocations_.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second.mapped > start) return true;
  }
  return false;
}

SimAddressSpace::ReservationMap::const_iterator SimAddressSpace::OverlappingReservationLocked(
    DevicePtr start, std::uint64_t bytes) const {
  auto it = reservations_.lower_bound(start);
  if (it != reservations_.end() && it->first < start + bytes) return it;
  if (it != reservations_.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second.bytes > start) return prev;
  }
  return reservations_.end();
}

DevicePtr SimAddressSpace::FindGapLocked(std::uint64_t bytes, DevicePtr from, std::uint64_t alignment) const {
  const std::uint64_t end = base_ + size_;
  DevicePtr cand = 0;
  if (!AlignUp(from, alignment, &cand)) return 0;
  // Each step moves past one allocation or reservation in the way, so this
  // ends after at most as many steps as there are of them.
  for (;;) {
    if (cand < from || cand >= end || bytes > end - cand) return 0;
    std::uint64_t past = 0;  // the end of something in the way
    auto it = allocations_.lower_bound(cand);
    if (it != allocations_.begin() && std::prev(it)->first + std::prev(it)->second.mapped > cand) {
      past = std::prev(it)->first + std::prev(it)->second.mapped;
    } else if (it != allocations_.end() && it->first < cand + bytes) {
      past = it->first + it->second.mapped;
    }
    auto r = OverlappingReservationLocked(cand, bytes);
    if (r != reservations_.end()) past = std::max(past, r->first + r->second.bytes);
    if (past == 0) return cand;
    if (!AlignUp(past, alignment, &cand)) return 0;
  }
}

DevicePtr SimAddressSpace::FindHighestGapLocked(std::uint64_t bytes) const {
  if (bytes > size_) return 0;
  auto align_down = [](std::uint64_t v) { return v / kGranularity * kGranularity; };
  DevicePtr cand = align_down(base_ + size_ - bytes);
  // Each step moves below one allocation or reservation in the way, so this
  // ends after at most as many steps as there are of them.
  for (;;) {
    if (cand < base_) return 0;
    std::uint64_t below = 0;  // the start of something in the way (0: nothing)
    auto it = allocations_.lower_bound(cand + bytes);
    if (it != allocations_.begin() && std::prev(it)->first + std::prev(it)->second.mapped > cand) {
      below = std::prev(it)->first;
    }
    auto r = OverlappingReservationLocked(cand, bytes);
    if (r != reservations_.end()) below = below == 0 ? r->first : std::min(below, r->first);
    if (below == 0) return cand;
    if (below < base_ + bytes) return 0;
    cand = align_down(below - bytes);
  }
}

Status SimAddressSpace::AllocateHigh(int device, std::uint64_t owner, std::size_t bytes, DevicePtr* out) {
  std::uint64_t mapped = 0;
  if (bytes == 0 || !AlignUp(bytes, kGranularity, &mapped) || mapped > size_) {
    return Allocate(device, owner, bytes, 0, out);  // its error
  }
  // The gap is found and taken under two locks: another allocation may take
  // it in between (AlreadyExists), then look again.
  for (int attempt = 0; attempt < 16; ++attempt) {
    DevicePtr at = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      at = FindHighestGapLocked(mapped);
    }
    if (at == 0) {
      return Status::OutOfMemory("device address range " + RangeText(base_, size_) + " has no free gap of " +
                                 std::to_string(mapped) + " bytes");
    }
    Status s = Allocate(device, owner, bytes, at, out);
    if (s.code() != Status::Code::kAlreadyExists) return s;
  }
  return Status::Unavailable("device address range " + RangeText(base_, size_) +
                             " kept changing while a high gap was looked for");
}

Status SimAddressSpace::Allocate(int device, std::uint64_t owner, std::size_t bytes,
                                 DevicePtr at, DevicePtr* out) {
  if (bytes == 0) return Status::InvalidArgument("cannot allocate 0 bytes of device memory");
  std::uint64_t mapped = 0;
  if (!AlignUp(bytes, kGranularity, &mapped) || mapped > size_) {
    return Status::OutOfMemory("cannot allocate " + std::to_string(bytes) +
                               " bytes: larger than the device address range");
  }
  if (at != 0) {
    if (at % kGranularity != 0) {
      return Status::InvalidArgument("device address " + Hex(at) + " is not aligned to " +
                                     Hex(kGranularity));
    }
    if (at < base_ || at - base_ > size_ || mapped > size_ - (at - base_)) {
      return Status::InvalidArgument("device range " + RangeText(at, mapped) +
                                     " lies outside the device address range " +
                                     RangeText(base_, size_));
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (device < 0 || device >= static_cast<int>(used_.size())) {
    return Status::InvalidArgument("no device " + std::to_string(device));
  }
  DevicePtr start = at;
  DevicePtr reservation = 0;
  if (at != 0) {
    if (OverlapsLocked(at, mapped)) {
      return Status::AlreadyExists("device range " + RangeText(at, mapped) +
                                   " overlaps an existing allocation");
    }
    auto r = OverlappingReservationLocked(at, mapped);
    if (r != reservations_.end()) {
      if (r->second.owner != owner || at < r->first || mapped > r->second.bytes - (at - r->first)) {
        return Status::AlreadyExists("device range " + RangeText(at, mapped) + " overlaps the reserved range " +
                                     RangeText(r->first, r->second.bytes) +
                                     (r->second.owner != owner ? " of another context" : " without lying inside it"));
      }
      reservation = r->first;
    }
  }
  if (used_[device] + mapped > capacity_ || used_[device] + mapped < used_[device]) {
    return Status::OutOfMemory("out of device memory on device " + std::to_string(device) +
                               ": " + std::to_string(bytes) + " bytes requested, " +
                               std::to_string(capacity_ - used_[device]) + " of " +
                               std::to_string(capacity_) + " free");
  }
  if (at == 0) {
    start = FindGapLocked(mapped, cursor_);
    if (start == 0) start = FindGapLocked(mapped, base_);
    if (start == 0) {
      return Status::OutOfMemory("device address range " + RangeText(base_, size_) +
                                 " has no free gap of " + std::to_string(mapped) + " bytes");
    }
  }
  void* p = mmap(reinterpret_cast<void*>(start), mapped, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  if (p == MAP_FAILED) {
    int err = errno;
    return Status::OutOfMemory("cannot map device memory at " + Hex(start) + ": " +
                               Status::FromErrno("mmap", err).message());
  }
  Allocation a;
  a.bytes = bytes;
  a.mapped = mapped;
  a.device = device;
  a.owner = owner;
  a.reservation = reservation;
  allocations_.emplace(start, a);
  used_[device] += mapped;
  if (at == 0) cursor_ = start + mapped;
  *out = start;
  return Status::Ok();
}

Status SimAddressSpace::ReserveRange(std::uint64_t owner, std::uint64_t bytes, std::uint64_t alignment,
                                     DevicePtr at, DevicePtr* out) {
  if (bytes == 0 || bytes % kGranularity != 0) {
    return Status::InvalidArgument("cannot reserve " + std::to_string(bytes) +
                                   " bytes of device address space: the size must be a non-zero multiple of " +
                                   Hex(kGranularity));
  }
  if (alignment < kGranularity) alignment = kGranularity;
  if ((alignment & (alignment - 1)) != 0) {
    return Status::InvalidArgument("address alignment " + Hex(alignment) + " is not a power of two");
  }
  if (bytes > size_) {
    return Status::OutOfMemory("cannot reserve " + std::to_string(bytes) +
                               " bytes: larger than the device address range " + RangeText(base_, size_));
  }
  std::lock_guard<std::mutex> lock(mu_);
  DevicePtr start = at;
  if (at != 0) {
    if (at % alignment != 0) {
      return Status::InvalidArgument("device address " + Hex(at) + " is not aligned to " + Hex(alignment));
    }
    if (at < base_ || at - base_ > size_ || bytes > size_ - (at - base_)) {
      return Status::InvalidArgument("device range " + RangeText(at, bytes) +
                                     " lies outside the device address range " + RangeText(base_, size_));
    }
    if (OverlapsLocked(at, bytes) || OverlappingReservationLocked(at, bytes) != reservations_.end()) {
      return Status::AlreadyExists("device range " + RangeText(at, bytes) +
                                   " overlaps an allocation or a reserved range");
    }
  } else {
    start = FindGapLocked(bytes, cursor_, alignment);
    if (start == 0) start = FindGapLocked(bytes, base_, alignment);
    if (start == 0) {
      return Status::OutOfMemory("device address range " + RangeText(base_, size_) + " has no free gap of " +
                                 std::to_string(bytes) + " bytes aligned to " + Hex(alignment));
    }
    cursor_ = start + bytes;
  }
  reservations_.emplace(start, Reservation{bytes, owner});
  *out = start;
  return Status::Ok();
}

Status SimAddressSpace::ReleaseRange(std::uint64_t owner, DevicePtr start) {
  std::lock_guard<std::mutex> lock(mu_);
  auto r = reservations_.find(start);
  if (r == reservations_.end() || r->second.owner != owner) {
    return Status::InvalidArgument("device address " + Hex(start) + " is not the start of a reserved range" +
                                   (r == reservations_.end() ? std::string() : " of this context"));
  }
  for (auto it = allocations_.lower_bound(start); it != allocations_.end() && it->first < start + r->second.bytes;
       ++it) {
    // An allocation freed while a copy still reads it only waits for that
    // copy (its last Unpin unmaps it); it does not keep the range.
    if (!it->second.freed) {
      return Status::FailedPrecondition("the reserved range " + RangeText(start, r->second.bytes) +
                                        " still holds the allocation at " + Hex(it->first));
    }
  }
  for (auto it = allocations_.lower_bound(start); it != allocations_.end() && it->first < start + r->second.bytes;
       ++it) {
    it->second.reservation = 0;
  }
  reservations_.erase(r);
  return Status::Ok();
}

void SimAddressSpace::ReleaseLocked(Map::iterator it) {
  Unmap(it->first, it->second.mapped);
  used_[it->second.device] -= it->second.mapped;
  allocations_.erase(it);
}

Status SimAddressSpace::Free(std::uint64_t owner, DevicePtr ptr) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = allocations_.find(ptr);
  if (it == allocations_.end() || it->second.freed) {
    return Status::InvalidArgument("device address " + Hex(ptr) +
                                   " is not the start of a live allocation");
  }
  if (it->second.owner != owner) {
    return Status::InvalidArgument("device address " + Hex(ptr) +
                                   " was allocated by another context");
  }
  if (it->second.pins > 0) {
    it->second.freed = true;  // the last Unpin releases it
  } else {
    ReleaseLocked(it);
  }
  return Status::Ok();
}

void SimAddressSpace::FreeAllOwnedBy(std::uint64_t owner) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = allocations_.begin(); it != allocations_.end();) {
    auto next = std::next(it);
    if (it->second.owner == owner && !it->second.freed) {
      if (it->second.pins > 0) {
        it->second.freed = true;
      } else {
        ReleaseLocked(it);
      }
    }
    it = next;
  }
  for (auto it = reservations_.begin(); it != reservations_.end();) {
    it = it->second.owner == owner ? reservations_.erase(it) : std::next(it);
  }
  for (auto& [start, a] : allocations_) {
    if (a.owner == owner) a.reservation = 0;
  }
}

void SimAddressSpace::MemoryInfo(int device, std::uint64_t* free_bytes,
                                 std::uint64_t* total_bytes) const {
  std::lock_guard<std::mutex> lock(mu_);
  *total_bytes = capacity_;
  *free_bytes = capacity_ - used_.at(device);
}

Status SimAddressSpace::CheckRange(DevicePtr ptr, std::size_t bytes) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (FindLocked(ptr, bytes) == allocations_.end()) {
    return Status::InvalidArgument("device range " + RangeText(ptr, bytes) + " (address " +
                                   Hex(ptr) + ") is not inside a live allocation");
  }
  return Status::Ok();
}

Status SimAddressSpace::PinRange(DevicePtr ptr, std::size_t bytes, Pin* pin) {
  DevicePtr start = 0;
  std::uint64_t size = 0;
  return PinRange(ptr, bytes, pin, &start, &size);
}

Status SimAddressSpace::PinRange(DevicePtr ptr, std::size_t bytes, Pin* pin, DevicePtr* start,
                                 std::uint64_t* bytes_out) {
  return PinOwnedRange(ptr, bytes, kAnyOwner, pin, start, bytes_out);
}

Status SimAddressSpace::PinOwnedRange(DevicePtr ptr, std::size_t bytes, std::uint64_t owner, Pin* pin,
                                      DevicePtr* start, std::uint64_t* bytes_out) {
  std::lock_guard<std::mutex> lock(mu_);
  std::size_t count = 0;
  auto cit = FindLocked(ptr, bytes, &count);
  if (cit == allocations_.end()) {
    return Status::InvalidArgument("illegal address: device range " + RangeText(ptr, bytes) +
                                   " was freed before the work using it ran");
  }
  if (owner != kAnyOwner && cit->second.owner != owner) {
    return Status::InvalidArgument("illegal address: device range " + RangeText(ptr, bytes) +
                                   " belongs to another context");
  }
  *start = cit->first;
  *bytes_out = cit->second.bytes;
  pin->space_ = this;
  auto it = allocations_.find(cit->first);
  for (std::size_t i = 0; i < count; ++i, ++it) {  // the run FindLocked checked
    it->second.pins++;
    pin->starts_.push_back(it->first);
  }
  return Status::Ok();
}

void SimAddressSpace::Unpin(const std::vector<DevicePtr>& starts) {
  std::lock_guard<std::mutex> lock(mu_);
  for (DevicePtr s : starts) {
    auto it = allocations_.find(s);
    if (it == allocations_.end()) continue;  // cannot happen: pinned entries stay
    if (--it->second.pins == 0 && it->second.freed) ReleaseLocked(it);
  }
}

SimAddressSpace::Pin::~Pin() {
  if (space_ != nullptr) space_->Unpin(starts_);
}

}  // namespace phos::backend::sim
