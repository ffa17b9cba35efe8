// The shared-memory layout of the data plane ring (one region per app
// process; docs/interposer.md "Data plane").
//
// The region is a memfd that phosd creates, sizes, seals against shrinking
// and sends to the app over the SEQPACKET setup channel (channel.h). Both
// processes map it MAP_SHARED. Everything in it is little-endian x86-64
// natural layout; there are no pointers, only byte offsets from the region
// base. Every structure is 64-byte (cache-line) aligned so that fields
// written by different parties never share a line.
//
//   offset                     size                 what
//   0                          4096                 RegionHeader (below)
//   ring_offset   (4096-al.)   ring_bytes (2^k)     request ring: frames
//   slots_offset  (4096-al.)   slot_count * 128     CompletionSlot[]
//   chunk_state_offset (4K-al) chunk_count * 64     ChunkState[]
//   staging_offset (4096-al.)  chunk_count*chunk_bytes  staging arena
//
// Trust: phosd is trusted by the app; the app is NOT trusted by phosd. The
// app can write any byte of the region at any time, so phosd
//   * never re-reads the geometry from the header after creating it (it keeps
//     its private copy, RingGeometry),
//   * reads each frame header exactly once into a private copy and bounds-
//     checks it (record.h DecodeRecord),
//   * bounds-checks every slot index and staging reference before using it,
//   * never blocks on a value only the app could change without also
//     re-checking the socket (liveness) on a timeout.
// The region is sealed with F_SEAL_SHRINK | F_SEAL_SEAL so the app cannot
// make phosd's accesses fault (SIGBUS) by truncating the memfd.
//
// Memory ordering: every "publish" is a release store of a 64-bit sequence
// (or a 32-bit state) after plain writes of the data it covers; every
// reader acquire-loads that sequence before reading the data. Sleep/wake
// handshakes (EventWord) additionally use seq_cst fences (Dekker pattern),
// see waiter.h.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "common/status.h"

namespace phos::ring {

static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared-memory atomics must be lock-free");
static_assert(std::atomic<uint32_t>::is_always_lock_free, "shared-memory atomics must be lock-free");

inline constexpr uint64_t kRegionMagic = 0x474e4952534f4850ull;  // "PHOSRING" little-endian
inline constexpr uint32_t kLayoutVersion = 2;  // 2: RegionHeader::device_output
inline constexpr size_t kCacheLine = 64;
inline constexpr size_t kPage = 4096;
/// Frames in the ring are multiples of this (so a wrap gap always fits a
/// pad frame header, and producers never share a cache line).
inline constexpr size_t kFrameAlign = 64;
inline constexpr size_t kSlotBytes = 128;
inline constexpr size_t kSlotResultBytes = 104;
inline constexpr uint32_t kNoSlot = 0xFFFFFFFFu;

/// A futex-able event: `epoch` is the 32-bit futex word, `sleepers` counts
/// the threads that announced they are about to sleep on it. Waiters
/// increment/decrement `sleepers` and FUTEX_WAIT on `epoch`; the notifier
/// bumps `epoch` and calls FUTEX_WAKE only when `sleepers` != 0, so the fast
/// path (nobody asleep) makes no system call. Protocol: waiter.h.
struct EventWord {
  std::atomic<uint32_t> epoch{0};     // written by the notifier (fetch_add, seq_cst)
  std::atomic<uint32_t> sleepers{0};  // written by waiters (fetch_add/sub, seq_cst)
};
static_assert(sizeof(EventWord) == 8);

/// Byte 0 of the region. Lines 0-1 are immutable after creation (phosd
/// writes them before sending the fd; the app validates and copies them;
/// phosd never reads them back). Lines 2.. are live control words; each
/// says who writes it.
struct alignas(kCacheLine) RegionHeader {
  // ---- line 0-1: geometry, written once by phosd ----
  uint64_t magic;               // 0   kRegionMagic
  uint32_t version;             // 8   kLayoutVersion
  uint32_t header_bytes;        // 12  sizeof(RegionHeader) area = 4096
  uint64_t region_bytes;        // 16  total memfd size
  uint64_t session_id;          // 24  phosd's session id (reattach key)
  uint64_t ring_offset;         // 32
  uint64_t ring_bytes;          // 40  power of two, >= 4096
  uint64_t slots_offset;        // 48
  uint32_t slot_count;          // 56
  uint32_t slot_bytes;          // 60  kSlotBytes
  uint64_t chunk_state_offset;  // 64
  uint64_t staging_offset;      // 72
  uint32_t chunk_count;         // 80
  uint32_t chunk_bytes;         // 84  multiple of 4096
  uint32_t max_frame_bytes;     // 88  largest frame a producer may post
  uint32_t reserved0;           // 92
  uint8_t pad0[128 - 96];

  // ---- line 2: session state (either side) ----
  // 0 = open; non-zero = closed (1 by app, 2 by phosd). Set with release;
  // after setting it the closer notifies every EventWord so all sleepers
  // re-check. Nobody ever clears it.
  alignas(kCacheLine) std::atomic<uint32_t> closed;
  // Non-zero while phosd holds device output (kernel printf text) of the
  // session. phosd stores it (release) before completing each synchronous
  // call; the app loads it (acquire) after one and, if set, takes the text
  // with kTakeDeviceOutput and writes it to its stdout, where a GPU's
  // driver prints its printf FIFO at synchronization. The app cannot hurt
  // phosd through it: a forged 1 costs it one call.
  std::atomic<uint32_t> device_output;
  uint8_t pad1[kCacheLine - 8];

  // ---- line 3: producer tail (app threads; CAS, acq_rel) ----
  // Byte position (monotonic 64-bit, never wraps in practice) up to which
  // ring space has been reserved. phosd never reads it.
  alignas(kCacheLine) std::atomic<uint64_t> tail;
  uint8_t pad2[kCacheLine - 8];

  // ---- line 4: consumer head (phosd; release store) ----
  // Byte position up to which frames are consumed and their space free.
  // App producers acquire-load it to compute free space.
  alignas(kCacheLine) std::atomic<uint64_t> head;
  uint8_t pad3[kCacheLine - 8];

  // ---- line 5: doorbell (app notifies after commit; phosd sleeps on it) ----
  alignas(kCacheLine) EventWord doorbell;
  uint8_t pad4[kCacheLine - 8];

  // ---- line 6: space (phosd notifies after moving head; producers sleep) ----
  alignas(kCacheLine) EventWord space;
  uint8_t pad5[kCacheLine - 8];

  // ---- line 7: staging (phosd notifies after freeing a chunk; app sleeps) ----
  alignas(kCacheLine) EventWord staging;
  uint8_t pad6[kCacheLine - 8];
};
static_assert(sizeof(RegionHeader) == 8 * kCacheLine);
static_assert(offsetof(RegionHeader, closed) == 128);
static_assert(offsetof(RegionHeader, tail) == 192);
static_assert(offsetof(RegionHeader, head) == 256);
static_assert(offsetof(RegionHeader, doorbell) == 320);

/// One completion slot (128 bytes). Owned by one app thread from the moment
/// it takes the slot (app-private free list) until it has read the result.
/// phosd writes status/result_bytes/result, then done_seq (release), then
/// notifies `ev`. The app waits until done_seq == the call_seq it posted
/// (acquire), then reads the result. A stale or forged done_seq just does
/// not match.
struct alignas(kCacheLine) CompletionSlot {
  EventWord ev;                          // 0   app sleeps, phosd notifies
  std::atomic<uint64_t> done_seq;        // 8   phosd: release store
  int32_t status;                        // 16  phosd: call's return code
  uint32_t result_bytes;                 // 20  phosd: <= kSlotResultBytes
  uint8_t result[kSlotResultBytes];      // 24  phosd: inline result
};
static_assert(sizeof(CompletionSlot) == kSlotBytes);

/// State of one staging chunk (64 bytes so chunks' states never share a
/// line). 0 = free; the app takes a chunk with CAS 0 -> 1 (filling), writes
/// the data, stores 2 (posted, release) and posts a frame that references
/// it; phosd copies the data out and stores 0 (release), then notifies
/// RegionHeader::staging. phosd does not rely on the state for safety (the
/// app may scribble it): it only bounds-checks the reference in the frame.
struct alignas(kCacheLine) ChunkState {
  std::atomic<uint32_t> state;
  uint8_t pad[kCacheLine - 4];
};
inline constexpr uint32_t kChunkFree = 0;
inline constexpr uint32_t kChunkFilling = 1;
inline constexpr uint32_t kChunkPosted = 2;

/// Sizes asked for when a region is created.
struct RingConfig {
  uint64_t ring_bytes = 1u << 20;   // rounded up to a power of two
  uint32_t slot_count = 256;
  uint32_t chunk_count = 16;
  uint32_t chunk_bytes = 256u << 10;
  uint32_t max_frame_bytes = 0;     // 0 = ring_bytes / 4, capped at 1 MiB
};

/// A private, validated copy of the geometry. Both sides work only from
/// this copy, never from the shared header.
struct RingGeometry {
  uint64_t region_bytes = 0;
  uint64_t session_id = 0;
  uint64_t ring_offset = 0;
  uint64_t ring_bytes = 0;
  uint64_t slots_offset = 0;
  uint32_t slot_count = 0;
  uint64_t chunk_state_offset = 0;
  uint64_t staging_offset = 0;
  uint32_t chunk_count = 0;
  uint32_t chunk_bytes = 0;
  uint32_t max_frame_bytes = 0;
};

/// Computes the geometry and region size for a config (no memory touched).
Status ComputeGeometry(const RingConfig& config, uint64_t session_id, RingGeometry* out);

/// phosd: writes a fresh header (and zeroes control words) into `base`,
/// which must be at least geometry.region_bytes, page-aligned and zeroed
/// (a fresh memfd is).
void InitRegion(void* base, const RingGeometry& geometry);

/// app: validates the header found in a mapped region of `size` bytes and
/// returns its geometry (every offset and size checked against `size`).
Status AttachRegion(const void* base, size_t size, RingGeometry* out);

}  // namespace phos::ring
