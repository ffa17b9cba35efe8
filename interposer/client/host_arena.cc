#include "interposer/client/host_arena.h"

#include <algorithm>
#include <iterator>
#include <mutex>

namespace phos::client {

namespace {
constexpr size_t AlignUp(size_t v, size_t a) { return (v + a - 1) / a * a; }
}  // namespace

HostArena::HostArena(SegmentMaker maker, size_t segment_bytes)
    : maker_(std::move(maker)), segment_bytes_(AlignUp(segment_bytes == 0 ? kPage : segment_bytes, kPage)) {}

bool HostArena::CarveLocked(Segment* s, size_t bytes, size_t align, size_t* offset) {
  for (auto it = s->free.begin(); it != s->free.end(); ++it) {
    const size_t off = it->first, len = it->second;
    const size_t start = AlignUp(off, align);
    if (start < off || start - off > len || len - (start - off) < bytes) continue;
    const size_t end = start + bytes;
    s->free.erase(it);
    if (start > off) s->free.emplace(off, start - off);
    if (end < off + len) s->free.emplace(end, off + len - end);
    *offset = start;
    return true;
  }
  return false;
}

int HostArena::Allocate(size_t bytes, unsigned flags, void** out) {
  if (bytes > SIZE_MAX - kSegmentRound - kPage) return kTooLarge;
  const size_t rounded = AlignUp(bytes == 0 ? 1 : bytes, kGranule);
  const size_t align = rounded >= kPage ? kPage : kGranule;
  std::unique_lock<std::shared_mutex> lock(mu_);
  Segment* seg = nullptr;
  size_t offset = 0;
  for (auto& s : segments_) {
    if (CarveLocked(s.get(), rounded, align, &offset)) {
      seg = s.get();
      break;
    }
  }
  if (seg == nullptr) {
    const size_t want = std::max(AlignUp(rounded, kSegmentRound), segment_bytes_);
    HostSegment hs;
    if (int e = maker_(want, &hs); e != 0) return e;
    auto s = std::make_unique<Segment>();
    s->seg = hs;
    s->free.emplace(0, hs.bytes);
    seg = s.get();
    by_base_.emplace(reinterpret_cast<uintptr_t>(hs.base), seg);
    segments_.push_back(std::move(s));
    if (!CarveLocked(seg, rounded, align, &offset)) return kTooLarge;  // maker gave less than asked
  }
  const uintptr_t p = reinterpret_cast<uintptr_t>(seg->seg.base) + offset;
  live_.emplace(p, Live{seg, offset, rounded, bytes, flags});
  *out = reinterpret_cast<void*>(p);
  return 0;
}

bool HostArena::Free(void* p) {
  std::unique_lock<std::shared_mutex> lock(mu_);
  auto it = live_.find(reinterpret_cast<uintptr_t>(p));
  if (it == live_.end()) return inherited_.erase(reinterpret_cast<uintptr_t>(p)) != 0;
  Segment* s = it->second.segment;
  size_t off = it->second.offset, len = it->second.rounded;
  live_.erase(it);
  // Coalesce with the free neighbours.
  auto next = s->free.lower_bound(off);
  if (next != s->free.end() && next->first == off + len) {
    len += next->second;
    next = s->free.erase(next);
  }
  if (next != s->free.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == off) {
      off = prev->first;
      len += prev->second;
      s->free.erase(prev);
    }
  }
  s->free.emplace(off, len);
  return true;
}

const HostArena::Segment* HostArena::SegmentOfLocked(uintptr_t p) const {
  auto it = by_base_.upper_bound(p);
  if (it == by_base_.begin()) return nullptr;
  --it;
  const Segment* s = it->second;
  return p - it->first < s->seg.bytes ? s : nullptr;
}

bool HostArena::FindAllocation(const void* ptr, Allocation* out) const {
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  std::shared_lock<std::shared_mutex> lock(mu_);
  auto it = live_.upper_bound(p);
  if (it == live_.begin()) return false;
  --it;
  if (p - it->first >= std::max<size_t>(it->second.requested, 1)) return false;
  if (out)
    *out = Allocation{it->first, it->second.requested, it->second.flags, it->second.segment->seg.id,
                      it->second.segment->seg.kernels_reach};
  return true;
}

bool HostArena::InSegment(const void* ptr, size_t n) const {
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  if (n == 0) n = 1;
  if (p > UINTPTR_MAX - n) return false;
  std::shared_lock<std::shared_mutex> lock(mu_);
  const Segment* s = SegmentOfLocked(p);
  if (s == nullptr) return false;
  const uintptr_t base = reinterpret_cast<uintptr_t>(s->seg.base);
  return n <= s->seg.bytes - (p - base);
}

bool HostArena::Overlaps(const void* ptr, size_t n) const {
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  if (n == 0) n = 1;
  const uintptr_t end = p > UINTPTR_MAX - n ? UINTPTR_MAX : p + n;
  std::shared_lock<std::shared_mutex> lock(mu_);
  if (SegmentOfLocked(p) != nullptr) return true;
  auto it = by_base_.upper_bound(p);  // first segment starting after p
  return it != by_base_.end() && it->first < end;
}

void HostArena::PrepareFork() { mu_.lock(); }

void HostArena::ParentAfterFork() { mu_.unlock(); }

void HostArena::ChildAfterFork() {
  for (const auto& [p, l] : live_) inherited_.emplace(p, l.requested);
  live_.clear();
  by_base_.clear();
  for (auto& s : segments_) s.release();  // NOLINT: leaked on purpose, the pages stay mapped
  segments_.clear();
  mu_.unlock();
}

size_t HostArena::segment_count() const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  return segments_.size();
}

size_t HostArena::live_allocations() const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  return live_.size();
}

size_t HostArena::free_bytes() const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  size_t n = 0;
  for (const auto& s : segments_)
    for (const auto& [off, len] : s->free) n += len;
  return n;
}

size_t HostArena::largest_free_block() const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  size_t m = 0;
  for (const auto& s : segments_)
    for (const auto& [off, len] : s->free) m = std::max(m, len);
  return m;
}

}  // namespace phos::client
