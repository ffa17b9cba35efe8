// Frame encode/decode: round trip, and rejection of every truncated,
// oversized or corrupt frame (phosd treats the ring as untrusted).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "ring/record.h"

namespace phos::ring {
namespace {

DecodeLimits Limits() { return DecodeLimits{4096, 16, 4, 65536}; }

std::vector<std::byte> Encode(const FrameHeader& h, size_t payload_bytes, uint8_t fill = 0xAB) {
  std::vector<std::byte> payload(payload_bytes, std::byte{fill});
  std::vector<std::byte> out(FrameBytesFor(payload_bytes));
  EncodeFrame(h, payload, out);
  return out;
}

FrameHeader CallHeaderFor(size_t payload_bytes) {
  FrameHeader h{};
  h.commit = 1;
  h.frame_bytes = static_cast<uint32_t>(FrameBytesFor(payload_bytes));
  h.kind = static_cast<uint8_t>(FrameKind::kCall);
  h.api_id = 77;
  h.payload_bytes = static_cast<uint32_t>(payload_bytes);
  h.slot = kNoSlot;
  h.stream_id = 5;
  h.call_seq = 123456789;
  return h;
}

TEST(RecordTest, RoundTrip) {
  for (size_t n : {0u, 1u, 23u, 24u, 25u, 100u, 1000u}) {
    FrameHeader h = CallHeaderFor(n);
    h.flags = kFlagWantsReply;
    h.slot = 15;
    h.device = 3;
    auto bytes = Encode(h, n, 0x5A);
    Record r;
    ASSERT_TRUE(DecodeRecord(bytes, Limits(), &r).ok()) << n;
    EXPECT_EQ(r.header.api_id, 77u);
    EXPECT_EQ(r.header.device, 3u);  // the calling thread's GPU (several_devices.cc)
    EXPECT_EQ(bytes[13], std::byte{3});  // beside the kind byte: the wire layout record.h documents
    EXPECT_EQ(r.header.stream_id, 5u);
    EXPECT_EQ(r.header.call_seq, 123456789u);
    EXPECT_EQ(r.header.slot, 15u);
    EXPECT_TRUE(r.wants_reply());
    EXPECT_FALSE(r.is_pad());
    ASSERT_EQ(r.payload.size(), n);
    for (auto b : r.payload) EXPECT_EQ(b, std::byte{0x5A});
    EXPECT_EQ(r.header.frame_bytes % kFrameAlign, 0u);
  }
}

TEST(RecordTest, StagingReferenceRoundTrip) {
  FrameHeader h = CallHeaderFor(sizeof(StagingRef) + 8);
  h.flags = kFlagStaging | kFlagLastPiece;
  std::vector<std::byte> payload(sizeof(StagingRef) + 8);
  StagingRef ref{3, 65536, 1 << 20};
  std::memcpy(payload.data(), &ref, sizeof(ref));
  std::vector<std::byte> out(h.frame_bytes);
  EncodeFrame(h, payload, out);
  Record r;
  ASSERT_TRUE(DecodeRecord(out, Limits(), &r).ok());
  ASSERT_TRUE(r.has_staging);
  EXPECT_EQ(r.staging.chunk, 3u);
  EXPECT_EQ(r.staging.bytes, 65536u);
  EXPECT_EQ(r.staging.offset, uint64_t{1} << 20);
}

TEST(RecordTest, PadFrame) {
  FrameHeader h{};
  h.kind = static_cast<uint8_t>(FrameKind::kPad);
  h.frame_bytes = 192;
  std::vector<std::byte> out(192);
  EncodeFrame(h, {}, out);
  Record r;
  ASSERT_TRUE(DecodeRecord(out, Limits(), &r).ok());
  EXPECT_TRUE(r.is_pad());
}

TEST(RecordTest, EveryTruncationRejected) {
  FrameHeader h = CallHeaderFor(300);
  auto bytes = Encode(h, 300);
  for (size_t len = 0; len < bytes.size(); ++len) {
    Record r;
    Status s = DecodeRecord(std::span<const std::byte>(bytes.data(), len), Limits(), &r);
    EXPECT_EQ(s.code(), Status::Code::kCorruption) << "len " << len;
  }
}

struct Mutation {
  const char* name;
  void (*apply)(FrameHeader*);
};

TEST(RecordTest, CorruptHeadersRejected) {
  const Mutation mutations[] = {
      {"frame_bytes zero", [](FrameHeader* h) { h->frame_bytes = 0; }},
      {"frame_bytes unaligned", [](FrameHeader* h) { h->frame_bytes += 8; }},
      {"frame_bytes past buffer", [](FrameHeader* h) { h->frame_bytes += 64; }},
      {"frame_bytes huge", [](FrameHeader* h) { h->frame_bytes = 0xFFFFFFC0u; }},
      {"kind zero", [](FrameHeader* h) { h->kind = 0; }},
      {"kind unknown", [](FrameHeader* h) { h->kind = 9; }},
      {"unknown flag", [](FrameHeader* h) { h->flags = 0x8000; }},
      {"payload > frame", [](FrameHeader* h) { h->payload_bytes = h->frame_bytes - kFrameHeaderBytes + 1; }},
      {"payload huge", [](FrameHeader* h) { h->payload_bytes = 0xFFFFFFFFu; }},
      {"slot out of range", [](FrameHeader* h) { h->flags = kFlagWantsReply; h->slot = 16; }},
      {"slot none but wants reply", [](FrameHeader* h) { h->flags = kFlagWantsReply; h->slot = kNoSlot; }},
      {"slot without reply", [](FrameHeader* h) { h->slot = 0; }},
      {"last piece without staging", [](FrameHeader* h) { h->flags = kFlagLastPiece; }},
      {"staging without ref", [](FrameHeader* h) { h->flags = kFlagStaging; h->payload_bytes = 8; }},
  };
  for (const auto& m : mutations) {
    FrameHeader h = CallHeaderFor(200);
    m.apply(&h);
    std::vector<std::byte> buf(FrameBytesFor(200));
    std::memcpy(buf.data(), &h, sizeof(h));
    Record r;
    EXPECT_EQ(DecodeRecord(buf, Limits(), &r).code(), Status::Code::kCorruption) << m.name;
  }
}

TEST(RecordTest, OversizedFrameRejectedEvenIfItFits) {
  FrameHeader h = CallHeaderFor(5000);  // frame 5056 > limit 4096
  auto bytes = Encode(h, 5000);
  Record r;
  EXPECT_EQ(DecodeRecord(bytes, Limits(), &r).code(), Status::Code::kCorruption);
}

TEST(RecordTest, BadStagingReferencesRejected) {
  const StagingRef bad[] = {{4, 10, 0}, {0xFFFFFFFF, 10, 0}, {0, 65537, 0}, {1, 1, ~uint64_t{0}}};
  for (const auto& ref : bad) {
    FrameHeader h = CallHeaderFor(sizeof(StagingRef));
    h.flags = kFlagStaging;
    std::vector<std::byte> out(h.frame_bytes);
    EncodeFrame(h, std::as_bytes(std::span<const StagingRef>(&ref, 1)), out);
    Record r;
    EXPECT_EQ(DecodeRecord(out, Limits(), &r).code(), Status::Code::kCorruption) << ref.chunk;
  }
}

// Random header bytes: decode either fails or yields a record whose
// invariants hold (payload inside the buffer, slot in range, ...).
TEST(RecordTest, RandomHeadersNeverViolateInvariants) {
  std::mt19937_64 rng(42);
  std::vector<std::byte> buf(1024);
  int accepted = 0;
  for (int iter = 0; iter < 50000; ++iter) {
    for (auto& b : buf) b = std::byte(rng());
    // Bias towards plausible headers so the accept path is exercised too.
    FrameHeader h;
    std::memcpy(&h, buf.data(), sizeof(h));
    h.frame_bytes = static_cast<uint32_t>(64 * (1 + rng() % 20));
    h.kind = static_cast<uint16_t>(1 + rng() % 3);
    h.flags = static_cast<uint16_t>(rng() % 16);
    h.payload_bytes = static_cast<uint32_t>(rng() % 1400);
    h.slot = (rng() % 2) ? kNoSlot : static_cast<uint32_t>(rng() % 20);
    std::memcpy(buf.data(), &h, sizeof(h));
    const size_t len = rng() % (buf.size() + 1);
    Record r;
    if (!DecodeRecord(std::span<const std::byte>(buf.data(), len), Limits(), &r).ok()) continue;
    ++accepted;
    ASSERT_LE(r.header.frame_bytes, len);
    if (r.is_pad()) continue;
    ASSERT_LE(r.header.frame_bytes, Limits().max_frame_bytes);
    ASSERT_GE(r.payload.data(), buf.data());
    ASSERT_LE(r.payload.data() + r.payload.size(), buf.data() + len);
    if (r.wants_reply()) {
      ASSERT_LT(r.header.slot, Limits().slot_count);
    }
    if (r.has_staging) {
      ASSERT_LT(r.staging.chunk, Limits().chunk_count);
      ASSERT_LE(r.staging.bytes, Limits().chunk_bytes);
    }
  }
  EXPECT_GT(accepted, 100);
}

}  // namespace
}  // namespace phos::ring
