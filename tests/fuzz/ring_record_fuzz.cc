// libFuzzer target for the data plane ring's consumer side: phosd must
// survive any bytes a malicious or corrupt app writes into its ring.
//
// Input byte 0 picks the mode:
//   even: DecodeRecord over the rest of the input (a frame at offset 0 of a
//         contiguous area of that size);
//   odd:  the rest is copied into the request ring of a 4 KiB region (and
//         byte 1 seeds the slot area) and a RingServer consumes until it
//         reports empty or corruption, completing every call that wants a
//         reply and touching every staging reference it accepts.
// Seeds: tests/fuzz/corpus/ring/.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

#include "ring/channel.h"
#include "ring/record.h"
#include "ring/ring.h"

using namespace phos::ring;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const auto* bytes = reinterpret_cast<const std::byte*>(data + 1);
  const size_t n = size - 1;
  if ((data[0] & 1) == 0) {
    Record r;
    DecodeLimits limits{4096, 16, 4, 65536};
    if (DecodeRecord({bytes, n}, limits, &r).ok()) {
      // Touch every accepted payload byte (ASan checks the bounds).
      volatile uint8_t sink = 0;
      for (auto b : r.payload) sink = sink ^ static_cast<uint8_t>(b);
      (void)sink;
    }
    return 0;
  }
  static std::unique_ptr<SharedRegion> region = [] {
    RingConfig c;
    c.ring_bytes = 4096;
    c.slot_count = 8;
    c.chunk_count = 2;
    c.chunk_bytes = 4096;
    std::unique_ptr<SharedRegion> r;
    if (!SharedRegion::CreateAnonymous(c, 1, &r).ok()) __builtin_trap();
    return r;
  }();
  const RingGeometry& g = region->geometry();
  std::memset(region->base(), 0, g.region_bytes);
  InitRegion(region->base(), g);
  auto* ring = static_cast<std::byte*>(region->base()) + g.ring_offset;
  std::memcpy(ring, bytes, n < g.ring_bytes ? n : g.ring_bytes);
  RingOptions o;
  o.wait.spin_ns = 0;
  RingServer server(region->base(), g, o);
  for (int i = 0; i < 256; ++i) {
    Record r;
    if (!server.TryNext(&r).ok()) break;
    volatile uint8_t sink = 0;
    for (auto b : r.payload) sink = sink ^ static_cast<uint8_t>(b);
    if (r.has_staging) {
      for (auto b : server.StagingBytes(r.staging)) sink = sink ^ static_cast<uint8_t>(b);
      server.FreeChunk(r.staging.chunk);
    }
    (void)sink;
    if (r.wants_reply()) {
      const size_t k = r.payload.size() < kSlotResultBytes ? r.payload.size() : kSlotResultBytes;
      if (!server.Complete(r.header.slot, r.header.call_seq, 0, r.payload.first(k)).ok()) __builtin_trap();
    }
    server.Release();
  }
  return 0;
}
