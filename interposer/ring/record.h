// Frames of the request ring and their bounds-checked decoding.
//
// A frame starts at a ring position that is a multiple of kFrameAlign and
// occupies `frame_bytes` contiguous bytes (a frame never wraps: a producer
// that would cross the end of the ring first fills the gap with a pad
// frame). Wire layout of the 40-byte header (little-endian):
//
//   off size field          writer / meaning
//   0   8    commit         producer, LAST, release: ring position + 1
//   8   4    frame_bytes    total bytes incl. header, multiple of 64
//   12  1    kind           1 = call, 2 = pad (skip)
//   13  1    device         phosd's ordinal of the GPU current on the
//                           calling thread (cudaSetDevice is per thread);
//                           phosd checks it against its GPUs
//   14  2    flags          kFlag* below; unknown bits are rejected
//   16  4    api_id         which forwarded API (interposer's table)
//   20  4    payload_bytes  <= frame_bytes - 40
//   24  4    slot           completion slot if kFlagWantsReply, else kNoSlot
//   28  4    stream_id      virtual stream id (0 = legacy default stream)
//   32  8    call_seq       app-chosen; phosd echoes it into the slot
//   40  ...  payload
//
// If kFlagStaging is set the payload begins with a StagingRef naming the
// staging chunk that carries the bulk bytes of this piece.
//
// phosd treats every byte as untrusted: DecodeRecord copies the header once
// (no double fetch) and checks every field against the session's private
// limits. The payload span still points into shared memory: its bytes may
// change while phosd reads them, so payload decoders must read each field
// once (or copy the payload out first, RingServer::CopyPayload).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "common/status.h"
#include "ring/ring_layout.h"

namespace phos::ring {

inline constexpr size_t kFrameHeaderBytes = 40;

enum class FrameKind : uint8_t { kCall = 1, kPad = 2 };

inline constexpr uint16_t kFlagWantsReply = 1u << 0;  // a completion slot waits
inline constexpr uint16_t kFlagStaging = 1u << 1;     // payload starts with StagingRef
inline constexpr uint16_t kFlagLastPiece = 1u << 2;   // last staging piece of a transfer
inline constexpr uint16_t kKnownFlags = kFlagWantsReply | kFlagStaging | kFlagLastPiece;

struct FrameHeader {
  uint64_t commit;
  uint32_t frame_bytes;
  uint8_t kind;
  uint8_t device;
  uint16_t flags;
  uint32_t api_id;
  uint32_t payload_bytes;
  uint32_t slot;
  uint32_t stream_id;
  uint64_t call_seq;
};
static_assert(sizeof(FrameHeader) == kFrameHeaderBytes);
static_assert(offsetof(FrameHeader, call_seq) == 32);

/// Reference to bulk bytes in the staging arena (16 bytes, payload prefix).
struct StagingRef {
  uint32_t chunk;        // chunk index < chunk_count
  uint32_t bytes;        // valid bytes in the chunk, <= chunk_bytes
  uint64_t offset;       // offset of this piece within the whole transfer
};
static_assert(sizeof(StagingRef) == 16);

/// What a call looks like to the caller (producer side).
struct CallHeader {
  uint32_t api_id = 0;
  uint32_t stream_id = 0;
  uint8_t device = 0;   // phosd's ordinal of the calling thread's GPU
  uint16_t flags = 0;   // kFlagWantsReply / slot / call_seq are filled by the ring
};

/// Limits a decoder checks against (from the decoder's private geometry).
struct DecodeLimits {
  uint32_t max_frame_bytes = 0;
  uint32_t slot_count = 0;
  uint32_t chunk_count = 0;
  uint32_t chunk_bytes = 0;
};
DecodeLimits LimitsFor(const RingGeometry& g);

/// A decoded frame: a private copy of the header and the payload bytes.
struct Record {
  FrameHeader header{};
  std::span<const std::byte> payload;  // points into the source bytes
  bool has_staging = false;
  StagingRef staging{};                 // valid when has_staging (copied once)
  bool is_pad() const { return header.kind == static_cast<uint8_t>(FrameKind::kPad); }
  bool wants_reply() const { return (header.flags & kFlagWantsReply) != 0; }
};

/// Frame size for a payload: header + payload rounded up to kFrameAlign.
constexpr uint64_t FrameBytesFor(uint64_t payload_bytes) {
  return (kFrameHeaderBytes + payload_bytes + kFrameAlign - 1) & ~uint64_t(kFrameAlign - 1);
}

/// Decodes the frame at the start of `bytes` (which extends to the end of
/// the contiguous area available: the end of the ring, or of a test
/// buffer). Never reads outside `bytes`. Errors are kCorruption and name the
/// bad field. Does not check `commit` (the ring does, before calling this).
Status DecodeRecord(std::span<const std::byte> bytes, const DecodeLimits& limits, Record* out);

/// Writes a header + payload into `out` (which must hold FrameBytesFor
/// bytes); used by tests, the fuzzer's seeds and the producer.
void EncodeFrame(const FrameHeader& h, std::span<const std::byte> payload, std::span<std::byte> out);

}  // namespace phos::ring
