// A session's device allocations — address -> bytes — with their total and
// whether they changed since the registry last saw them, kept in step in
// one place. The handlers (cudaMalloc/cudaFree), the restores (in place and
// fresh) and the teardown change the map only through Add/Erase/Clear, so
// the total `phos ps` shows and the republish flag can never drift from the
// map (they were three fields kept in step by hand in four files).
//
// Owner: the session's consumer thread, like all of SessionState (no lock).
// Readers see it as the std::map it wraps (iteration, find, lower_bound,
// and `const std::map&` parameters such as ComputeLaunchAccess's).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <utility>

namespace phos::session {

/// The range of `m` (start -> bytes, non-overlapping) that holds all of
/// [ptr, ptr + bytes): its start and size, or false. The one lookup behind
/// CheckDeviceRange, the launch probes and texture objects.
inline bool FindHoldingRange(const std::map<std::uint64_t, std::uint64_t>& m, std::uint64_t ptr, std::uint64_t bytes,
                             std::uint64_t* start, std::uint64_t* size) {
  auto it = m.upper_bound(ptr);
  if (it == m.begin()) return false;
  --it;
  if (bytes > it->second || ptr - it->first > it->second - bytes) return false;
  *start = it->first;
  *size = it->second;
  return true;
}

/// The same lookup as a value: (start, size) of the range holding all of
/// [ptr, ptr + bytes), or nullopt. Equal results of two maps mean the same
/// holding range (restore compares an image's reserved ranges with a
/// session's this way).
inline std::optional<std::pair<std::uint64_t, std::uint64_t>> HoldingRange(
    const std::map<std::uint64_t, std::uint64_t>& m, std::uint64_t ptr, std::uint64_t bytes) {
  std::uint64_t start = 0, size = 0;
  if (!FindHoldingRange(m, ptr, bytes, &start, &size)) return std::nullopt;
  return std::make_pair(start, size);
}

/// Whether [ptr, ptr + bytes) lies in buffers of `buffers` that sit back
/// to back inside one range of `reserved` (the app's mappings of one
/// cuMemAddressReserve range, which CUDA lets a copy cross). Called when
/// FindHoldingRange found no single buffer.
inline bool InMappedRun(const std::map<std::uint64_t, std::uint64_t>& buffers,
                        const std::map<std::uint64_t, std::uint64_t>& reserved, std::uint64_t ptr,
                        std::uint64_t bytes) {
  std::uint64_t rstart = 0, rbytes = 0;
  if (reserved.empty() || !FindHoldingRange(reserved, ptr, bytes, &rstart, &rbytes)) return false;
  auto it = buffers.upper_bound(ptr);
  if (it == buffers.begin()) return false;
  --it;
  if (it->first < rstart || ptr - it->first >= it->second) return false;
  const std::uint64_t end = ptr + bytes;  // inside the reserved range: no wrap
  std::uint64_t covered = it->first + it->second;
  while (covered < end) {
    ++it;
    if (it == buffers.end() || it->first != covered) return false;
    covered += it->second;
  }
  return true;
}

class BufferMap {
 public:
  using Map = std::map<std::uint64_t, std::uint64_t>;
  using const_iterator = Map::const_iterator;

  /// Records an allocation at `address` (replacing one recorded there).
  void Add(std::uint64_t address, std::uint64_t bytes) {
    auto [it, inserted] = map_.try_emplace(address, bytes);
    if (!inserted) {
      bytes_ -= it->second;
      it->second = bytes;
    }
    bytes_ += bytes;
    changed_ = true;
  }
  /// Forgets the allocation at `it`; the next one.
  const_iterator Erase(const_iterator it) {
    bytes_ -= it->second;
    changed_ = true;
    return map_.erase(it);
  }
  /// Forgets every allocation.
  void Clear() {
    map_.clear();
    bytes_ = 0;
    changed_ = true;
  }

  /// Bytes of all allocations.
  std::uint64_t bytes() const { return bytes_; }
  /// True once after any change (the session republishes its summary).
  bool TakeChanged() {
    const bool c = changed_;
    changed_ = false;
    return c;
  }

  const Map& map() const { return map_; }
  operator const Map&() const { return map_; }  // NOLINT: read as the map it is
  const_iterator begin() const { return map_.begin(); }
  const_iterator end() const { return map_.end(); }
  const_iterator find(std::uint64_t address) const { return map_.find(address); }
  const_iterator lower_bound(std::uint64_t address) const { return map_.lower_bound(address); }
  const_iterator upper_bound(std::uint64_t address) const { return map_.upper_bound(address); }
  std::size_t count(std::uint64_t address) const { return map_.count(address); }
  std::size_t size() const { return map_.size(); }
  bool empty() const { return map_.empty(); }

 private:
  Map map_;
  std::uint64_t bytes_ = 0;
  bool changed_ = false;
};

}  // namespace phos::session
