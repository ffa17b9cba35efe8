#include "ring/record.h"

#include <cstring>
#include <string>

namespace phos::ring {

DecodeLimits LimitsFor(const RingGeometry& g) {
  return DecodeLimits{g.max_frame_bytes, g.slot_count, g.chunk_count, g.chunk_bytes};
}

Status DecodeRecord(std::span<const std::byte> bytes, const DecodeLimits& limits, Record* out) {
  if (bytes.size() < kFrameHeaderBytes) {
    return Status::Corruption("ring frame: " + std::to_string(bytes.size()) +
                              " bytes left, header needs 40");
  }
  FrameHeader h;
  std::memcpy(&h, bytes.data(), sizeof(h));  // the one and only read of the header
  if (h.frame_bytes < kFrameAlign || h.frame_bytes % kFrameAlign != 0) {
    return Status::Corruption("ring frame: frame_bytes " + std::to_string(h.frame_bytes) +
                              " is not a positive multiple of 64");
  }
  if (h.frame_bytes > bytes.size()) {
    return Status::Corruption("ring frame: frame_bytes " + std::to_string(h.frame_bytes) +
                              " runs past the end of the ring (" + std::to_string(bytes.size()) +
                              " bytes left)");
  }
  if (h.kind == static_cast<uint8_t>(FrameKind::kPad)) {
    // Pad frames carry nothing else; their size alone matters.
    *out = Record{};
    out->header = h;
    return Status::Ok();
  }
  if (h.kind != static_cast<uint8_t>(FrameKind::kCall)) {
    return Status::Corruption("ring frame: unknown kind " + std::to_string(unsigned{h.kind}));
  }
  if (h.frame_bytes > limits.max_frame_bytes) {
    return Status::Corruption("ring frame: frame_bytes " + std::to_string(h.frame_bytes) +
                              " exceeds the limit " + std::to_string(limits.max_frame_bytes));
  }
  if ((h.flags & ~kKnownFlags) != 0) {
    return Status::Corruption("ring frame: unknown flags 0x" + std::to_string(h.flags));
  }
  if (h.payload_bytes > h.frame_bytes - kFrameHeaderBytes) {
    return Status::Corruption("ring frame: payload_bytes " + std::to_string(h.payload_bytes) +
                              " does not fit frame_bytes " + std::to_string(h.frame_bytes));
  }
  if (h.flags & kFlagWantsReply) {
    if (h.slot >= limits.slot_count) {
      return Status::Corruption("ring frame: completion slot " + std::to_string(h.slot) +
                                " out of range (" + std::to_string(limits.slot_count) + " slots)");
    }
  } else if (h.slot != kNoSlot) {
    return Status::Corruption("ring frame: slot set on a call that wants no reply");
  }
  Record r;
  r.header = h;
  r.payload = bytes.subspan(kFrameHeaderBytes, h.payload_bytes);
  if (h.flags & kFlagStaging) {
    if (h.payload_bytes < sizeof(StagingRef)) {
      return Status::Corruption("ring frame: staging flag without a staging reference");
    }
    std::memcpy(&r.staging, r.payload.data(), sizeof(StagingRef));
    if (r.staging.chunk >= limits.chunk_count) {
      return Status::Corruption("ring frame: staging chunk " + std::to_string(r.staging.chunk) +
                                " out of range (" + std::to_string(limits.chunk_count) + ")");
    }
    if (r.staging.bytes > limits.chunk_bytes) {
      return Status::Corruption("ring frame: staging piece of " + std::to_string(r.staging.bytes) +
                                " bytes exceeds the chunk size " + std::to_string(limits.chunk_bytes));
    }
    if (r.staging.offset > (uint64_t{1} << 56)) {
      return Status::Corruption("ring frame: staging offset out of range");
    }
    r.has_staging = true;
  } else if (h.flags & kFlagLastPiece) {
    return Status::Corruption("ring frame: last-piece flag without staging");
  }
  *out = r;
  return Status::Ok();
}

void EncodeFrame(const FrameHeader& h, std::span<const std::byte> payload, std::span<std::byte> out) {
  std::memcpy(out.data(), &h, sizeof(h));
  if (!payload.empty()) std::memcpy(out.data() + kFrameHeaderBytes, payload.data(), payload.size());
}

}  // namespace phos::ring
