#include "backend/sim/sim_address_space.h"

#include "common/hex.h"

#include <sys/mman.h>

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

SimAddressSpace::Map::const_iterator SimAddressSpace::FindLocked(DevicePtr ptr,
                                                                 std::size_t bytes) const {
  auto it = allocations_.upper_bound(ptr);
  if (it == allocations_.begin()) return allocations_.end();
  --it;
  const Allocation& a = it->second;
  if (a.freed || ptr - it->first > a.bytes || bytes > a.bytes - (ptr - it->first)) {
    return allocations_.end();
  }
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

DevicePtr SimAddressSpace::FindGapLocked(std::uint64_t bytes, DevicePtr from) const {
  const std::uint64_t end = base_ + size_;
  DevicePtr cand = from;
  auto it = allocations_.lower_bound(cand);
  if (it != allocations_.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second.mapped > cand) cand = prev->first + prev->second.mapped;
  }
  for (;;) {
    if (cand >= end || bytes > end - cand) return 0;
    if (it == allocations_.end() || cand + bytes <= it->first) return cand;
    cand = it->first + it->second.mapped;
    ++it;
  }
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
  if (at != 0) {
    if (OverlapsLocked(at, mapped)) {
      return Status::AlreadyExists("device range " + RangeText(at, mapped) +
                                   " overlaps an existing allocation");
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
  allocations_.emplace(start, a);
  used_[device] += mapped;
  if (at == 0) cursor_ = start + mapped;
  *out = start;
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
  auto cit = FindLocked(ptr, bytes);
  if (cit == allocations_.end()) {
    return Status::InvalidArgument("illegal address: device range " + RangeText(ptr, bytes) +
                                   " was freed before the work using it ran");
  }
  if (owner != kAnyOwner && cit->second.owner != owner) {
    return Status::InvalidArgument("illegal address: device range " + RangeText(ptr, bytes) +
                                   " belongs to another context");
  }
  allocations_.find(cit->first)->second.pins++;
  *start = cit->first;
  *bytes_out = cit->second.bytes;
  pin->space_ = this;
  pin->starts_.push_back(cit->first);
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
