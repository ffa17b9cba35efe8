#include "ring/ring_layout.h"

#include <cstring>
#include <new>
#include <string>

#include "ring/record.h"

namespace phos::ring {
namespace {

constexpr uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }
bool IsPow2(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

}  // namespace

Status ComputeGeometry(const RingConfig& c, uint64_t session_id, RingGeometry* out) {
  if (c.ring_bytes < kPage || c.ring_bytes > (uint64_t{1} << 30)) {
    return Status::InvalidArgument("ring_bytes must be in [4 KiB, 1 GiB]");
  }
  if (c.slot_count == 0 || c.slot_count > 65536) {
    return Status::InvalidArgument("slot_count must be in [1, 65536]");
  }
  if (c.chunk_count > 4096 || (c.chunk_count > 0 && (c.chunk_bytes < kPage || c.chunk_bytes % kPage != 0 ||
                                                       c.chunk_bytes > (64u << 20)))) {
    return Status::InvalidArgument("staging: chunk_count <= 4096, chunk_bytes a multiple of 4 KiB <= 64 MiB");
  }
  RingGeometry g;
  g.session_id = session_id;
  uint64_t ring = kPage;
  while (ring < c.ring_bytes) ring <<= 1;
  g.ring_offset = kPage;
  g.ring_bytes = ring;
  g.slots_offset = g.ring_offset + ring;
  g.slot_count = c.slot_count;
  g.chunk_state_offset = AlignUp(g.slots_offset + uint64_t{c.slot_count} * kSlotBytes, kPage);
  g.chunk_count = c.chunk_count;
  g.chunk_bytes = c.chunk_count ? c.chunk_bytes : 0;
  g.staging_offset = AlignUp(g.chunk_state_offset + uint64_t{c.chunk_count} * sizeof(ChunkState), kPage);
  g.region_bytes = g.staging_offset + uint64_t{g.chunk_count} * g.chunk_bytes;
  uint64_t max_frame = c.max_frame_bytes ? c.max_frame_bytes : ring / 4;
  if (max_frame > (1u << 20)) max_frame = 1u << 20;
  max_frame &= ~uint64_t(kFrameAlign - 1);
  if (max_frame < kFrameAlign || max_frame > ring / 2) {
    return Status::InvalidArgument("max_frame_bytes must be in [64, ring_bytes / 2]");
  }
  g.max_frame_bytes = static_cast<uint32_t>(max_frame);
  *out = g;
  return Status::Ok();
}

void InitRegion(void* base, const RingGeometry& g) {
  auto* h = new (base) RegionHeader{};
  h->magic = kRegionMagic;
  h->version = kLayoutVersion;
  h->header_bytes = kPage;
  h->region_bytes = g.region_bytes;
  h->session_id = g.session_id;
  h->ring_offset = g.ring_offset;
  h->ring_bytes = g.ring_bytes;
  h->slots_offset = g.slots_offset;
  h->slot_count = g.slot_count;
  h->slot_bytes = kSlotBytes;
  h->chunk_state_offset = g.chunk_state_offset;
  h->staging_offset = g.staging_offset;
  h->chunk_count = g.chunk_count;
  h->chunk_bytes = g.chunk_bytes;
  h->max_frame_bytes = g.max_frame_bytes;
  auto* b = static_cast<std::byte*>(base);
  for (uint32_t i = 0; i < g.slot_count; ++i) {
    new (b + g.slots_offset + uint64_t{i} * kSlotBytes) CompletionSlot{};
  }
  for (uint32_t i = 0; i < g.chunk_count; ++i) {
    new (b + g.chunk_state_offset + uint64_t{i} * sizeof(ChunkState)) ChunkState{};
  }
  // Publication to the app happens through sendmsg (a syscall), which
  // orders these plain stores before the app can map the region.
}

Status AttachRegion(const void* base, size_t size, RingGeometry* out) {
  if (size < kPage) return Status::Corruption("ring region smaller than its header");
  RegionHeader h;
  std::memcpy(static_cast<void*>(&h), base, 96);  // the immutable geometry lines only
  if (h.magic != kRegionMagic) return Status::Corruption("ring region: bad magic");
  if (h.version != kLayoutVersion) {
    return Status::FailedPrecondition("ring region: layout version " + std::to_string(h.version) +
                                      ", this libphos speaks " + std::to_string(kLayoutVersion));
  }
  if (h.header_bytes != kPage || h.slot_bytes != kSlotBytes) {
    return Status::Corruption("ring region: unexpected header or slot size");
  }
  if (h.region_bytes != size) return Status::Corruption("ring region: size mismatch with the mapping");
  auto within = [&](uint64_t off, uint64_t len) { return off <= size && len <= size - off; };
  if (!IsPow2(h.ring_bytes) || h.ring_bytes < kPage || h.ring_offset % kPage != 0 ||
      h.ring_offset < kPage || !within(h.ring_offset, h.ring_bytes)) {
    return Status::Corruption("ring region: bad ring geometry");
  }
  if (h.slot_count == 0 || h.slots_offset % kCacheLine != 0 ||
      !within(h.slots_offset, uint64_t{h.slot_count} * kSlotBytes)) {
    return Status::Corruption("ring region: bad slot geometry");
  }
  if (h.chunk_state_offset % kCacheLine != 0 || h.staging_offset % kPage != 0 ||
      !within(h.chunk_state_offset, uint64_t{h.chunk_count} * sizeof(ChunkState)) ||
      !within(h.staging_offset, uint64_t{h.chunk_count} * h.chunk_bytes)) {
    return Status::Corruption("ring region: bad staging geometry");
  }
  if (h.max_frame_bytes < kFrameAlign || h.max_frame_bytes % kFrameAlign != 0 ||
      h.max_frame_bytes > h.ring_bytes / 2) {
    return Status::Corruption("ring region: bad max_frame_bytes");
  }
  RingGeometry g;
  g.region_bytes = h.region_bytes;
  g.session_id = h.session_id;
  g.ring_offset = h.ring_offset;
  g.ring_bytes = h.ring_bytes;
  g.slots_offset = h.slots_offset;
  g.slot_count = h.slot_count;
  g.chunk_state_offset = h.chunk_state_offset;
  g.staging_offset = h.staging_offset;
  g.chunk_count = h.chunk_count;
  g.chunk_bytes = h.chunk_bytes;
  g.max_frame_bytes = h.max_frame_bytes;
  *out = g;
  return Status::Ok();
}

}  // namespace phos::ring
