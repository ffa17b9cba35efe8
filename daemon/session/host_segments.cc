#include "session/host_segments.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace phos::session {

namespace {
constexpr uint64_t kPage = 4096;

struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) close(fd);
  }
};
}  // namespace

HostSegmentTable::~HostSegmentTable() {
  // The context is gone (or going) by now: only unmap.
  for (auto& [base, seg] : by_app_base_) munmap(seg.mapped, seg.bytes);
}

Status HostSegmentTable::Add(uint64_t segment_id, uint64_t app_base, uint64_t bytes, int memfd,
                             backend::Context* ctx, bool* kernels_reach) {
  FdCloser closer{memfd};
  if (segment_id == 0) return Status::InvalidArgument("host segment id 0");
  if (bytes == 0 || bytes % kPage != 0 || bytes > kMaxSegmentBytes) {
    return Status::InvalidArgument(fmt::format("host segment of {} bytes (must be a nonzero multiple of {}, at most {})",
                                               bytes, kPage, kMaxSegmentBytes));
  }
  if (app_base == 0 || app_base % kPage != 0 || app_base > UINT64_MAX - bytes) {
    return Status::InvalidArgument(fmt::format("host segment app address 0x{:x} is not page aligned or wraps", app_base));
  }
  if (by_app_base_.size() >= kMaxSegments || total_bytes_ + bytes > kMaxTotalBytes) {
    return Status::OutOfMemory(fmt::format("session limit of pinned host memory reached ({} segments, {} bytes)",
                                           by_app_base_.size(), total_bytes_));
  }
  for (const auto& [base, seg] : by_app_base_) {
    if (seg.id == segment_id) return Status::InvalidArgument(fmt::format("host segment id {} is in use", segment_id));
  }
  auto next = by_app_base_.lower_bound(app_base);
  bool overlap = next != by_app_base_.end() && next->first < app_base + bytes;
  if (!overlap && next != by_app_base_.begin()) {
    auto prev = std::prev(next);
    overlap = app_base - prev->first < prev->second.bytes;
  }
  if (overlap) return Status::InvalidArgument(fmt::format("host segment at 0x{:x} overlaps another", app_base));
  // The fd must be a memfd the app can no longer shrink (a shrink would
  // turn phosd's accesses into SIGBUS) and exactly as large as announced.
  const int seals = fcntl(memfd, F_GET_SEALS);
  if (seals < 0) return Status::InvalidArgument("host segment fd is not a memfd (F_GET_SEALS failed)");
  if (!(seals & F_SEAL_SHRINK)) return Status::InvalidArgument("host segment memfd is not sealed against shrinking");
  struct stat st {};
  if (fstat(memfd, &st) != 0) return Status::FromErrno("fstat host segment memfd", errno);
  if (!S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) != bytes) {
    return Status::InvalidArgument(fmt::format("host segment memfd holds {} bytes, the app says {}",
                                               static_cast<int64_t>(st.st_size), bytes));
  }
  PHOS_RETURN_IF_ERROR(EnsureRegistered(ctx));
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
  if (p == MAP_FAILED) return Status::FromErrno("mmap host segment", errno);
  Segment seg{segment_id, bytes, static_cast<std::byte*>(p)};
  if (Status s = RegisterSegment(ctx, app_base, &seg, /*try_map=*/true); !s.ok()) {
    munmap(p, bytes);
    return s.WithContext("registering a pinned host segment");
  }
  if (kernels_reach != nullptr) *kernels_reach = seg.kernels_reach;
  by_app_base_.emplace(app_base, seg);
  total_bytes_ += bytes;
  return Status::Ok();
}

Status HostSegmentTable::RegisterSegment(backend::Context* ctx, uint64_t app_base, Segment* seg, bool try_map) {
  PHOS_RETURN_IF_ERROR(ctx->RegisterHostMemory(seg->mapped, seg->bytes));
  if (!try_map && !seg->kernels_reach) return Status::Ok();
  Status m = ctx->MapHostMemoryForKernels(seg->mapped, seg->bytes, app_base);
  if (m.ok()) {
    seg->kernels_reach = true;
  } else if (m.code() == Status::Code::kNotSupported || m.code() == Status::Code::kAlreadyExists) {
    // Pinned, not mapped: kernels cannot reach it (the app's
    // cudaHostGetDevicePointer says so). Not an error for the segment.
    if (m.code() == Status::Code::kAlreadyExists)
      spdlog::info("host segment {} at 0x{:x} is pinned but not mapped for kernels: {}", seg->id, app_base, m.message());
    seg->kernels_reach = false;
  } else {
    (void)ctx->UnregisterHostMemory(seg->mapped);
    return m.WithContext("mapping a pinned host segment for kernels");
  }
  return Status::Ok();
}

void HostSegmentTable::UnregisterSegment(backend::Context* ctx, uint64_t app_base, const Segment& seg) {
  if (seg.kernels_reach) {
    if (Status s = ctx->UnmapHostMemoryForKernels(app_base); !s.ok())
      spdlog::warn("unmapping pinned host segment {} for kernels: {}", seg.id, s.ToString());
  }
  if (Status s = ctx->UnregisterHostMemory(seg.mapped); !s.ok())
    spdlog::warn("unregistering pinned host segment {}: {}", seg.id, s.ToString());
}

std::vector<HostSegmentTable::SegmentInfo> HostSegmentTable::List() const {
  std::vector<SegmentInfo> out;
  for (const auto& [base, seg] : by_app_base_) out.push_back(SegmentInfo{seg.id, base, seg.bytes});
  return out;
}

Status HostSegmentTable::Translate(uint64_t app_addr, uint64_t bytes, std::byte** out) const {
  auto it = by_app_base_.upper_bound(app_addr);
  if (it != by_app_base_.begin()) {
    --it;
    const uint64_t off = app_addr - it->first;
    if (off < it->second.bytes && bytes <= it->second.bytes - off) {
      *out = it->second.mapped + off;
      return Status::Ok();
    }
  }
  return Status::InvalidArgument(
      fmt::format("host range [0x{:x}, +{}) is not inside a pinned host segment of this session", app_addr, bytes));
}

Status HostSegmentTable::EnsureRegistered(backend::Context* ctx) {
  if (registered_with_ == ctx) return Status::Ok();
  for (auto& [base, seg] : by_app_base_) {
    Status s = RegisterSegment(ctx, base, &seg, /*try_map=*/false);
    if (!s.ok()) {
      // Leave no half-registered table behind.
      for (auto& [b2, done] : by_app_base_) {
        if (b2 == base) break;
        UnregisterSegment(ctx, b2, done);
      }
      return s.WithContext("registering pinned host segments with a new context");
    }
  }
  registered_with_ = ctx;
  return Status::Ok();
}

void HostSegmentTable::Unregister(backend::Context* ctx) {
  if (ctx == nullptr || registered_with_ != ctx) return;
  for (auto& [base, seg] : by_app_base_) UnregisterSegment(ctx, base, seg);
  registered_with_ = nullptr;
}

}  // namespace phos::session
