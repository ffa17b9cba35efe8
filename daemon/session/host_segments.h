// phosd's table of one session's shared pinned host segments
// (docs/interposer.md "Pinned host memory and copies"): the app's
// cudaMallocHost arena segments, mapped into phosd and registered with the
// backend as pinned, so copies from and to them need no staging.
//
// The app is not trusted: Add checks the memfd (a sealed memfd whose size
// matches, sealed against shrinking so the app cannot make phosd's mapping
// fault), the id, the alignment, overlap and per-session limits; Translate
// checks every copy's range (bounds and overflow) against one segment.
//
// Ownership: a member of SessionState, used on the session's consumer
// thread only (no lock). Mappings live as long as the session (the
// destructor unmaps them; by then the context has synchronised and no copy
// can still use one). Registration is per Context: ReleaseAll (teardown,
// cudaDeviceReset) unregisters from the old context, and the next use
// (EnsureRegistered) registers every segment with the current one, so the
// app's arena stays valid across a device reset.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "backend/backend.h"
#include "common/status.h"

namespace phos::session {

class HostSegmentTable {
 public:
  /// Per-session limits (an app could otherwise make phosd map and pin
  /// without bound: pages the cuda backend pins are faulted in, and
  /// charged, by phosd).
  static constexpr uint64_t kMaxSegmentBytes = uint64_t{64} << 30;
  static constexpr uint64_t kMaxTotalBytes = uint64_t{64} << 30;
  static constexpr size_t kMaxSegments = 4096;

  HostSegmentTable() = default;
  ~HostSegmentTable();
  HostSegmentTable(const HostSegmentTable&) = delete;
  HostSegmentTable& operator=(const HostSegmentTable&) = delete;

  /// Validates `memfd` (always closed here) and the request, maps the
  /// segment, registers it with `ctx` as pinned and records app_base ->
  /// phosd's mapping. Where the backend can, it also makes the segment
  /// reachable by kernels at app_base (mapped pinned memory: the app's host
  /// pointer is its device pointer); *kernels_reach (if given) says whether
  /// that worked — it fails when the app's range is where device memory
  /// lives, and the segment is then pinned but not mapped.
  Status Add(uint64_t segment_id, uint64_t app_base, uint64_t bytes, int memfd, backend::Context* ctx,
             bool* kernels_reach = nullptr);
  /// phosd's address of app range [app_addr, app_addr + bytes), which must
  /// lie inside one segment. InvalidArgument otherwise.
  Status Translate(uint64_t app_addr, uint64_t bytes, std::byte** out) const;
  /// Registers every segment with `ctx` unless that was done already (and
  /// maps it for kernels again where it was).
  Status EnsureRegistered(backend::Context* ctx);
  /// Unregisters every segment from `ctx` (if registered with it); the
  /// mappings stay.
  void Unregister(backend::Context* ctx);

  /// What a whole-process image records of a segment: CRIU saves its
  /// pages (a MAP_SHARED memfd mapping in the app), and the restore
  /// re-attaches the restored mapping under the same id and app address.
  struct SegmentInfo {
    uint64_t id = 0;
    uint64_t app_base = 0;
    uint64_t bytes = 0;
  };
  std::vector<SegmentInfo> List() const;

  size_t count() const { return by_app_base_.size(); }
  uint64_t total_bytes() const { return total_bytes_; }

 private:
  struct Segment {
    uint64_t id = 0;
    uint64_t bytes = 0;
    std::byte* mapped = nullptr;
    bool kernels_reach = false;  // mapped for kernels at its app base (MapHostMemoryForKernels)
  };
  // Registers `seg` with `ctx` and, where it was or `try_map`, maps it for
  // kernels; undoes the registration when that fails unexpectedly.
  Status RegisterSegment(backend::Context* ctx, uint64_t app_base, Segment* seg, bool try_map);
  void UnregisterSegment(backend::Context* ctx, uint64_t app_base, const Segment& seg);
  std::map<uint64_t, Segment> by_app_base_;  // app base -> segment
  uint64_t total_bytes_ = 0;
  backend::Context* registered_with_ = nullptr;  // the context every segment is registered with
};

}  // namespace phos::session
