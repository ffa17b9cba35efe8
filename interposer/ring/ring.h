// The request ring: many app threads produce, one phosd session thread
// consumes (MPSC), plus completion slots for synchronous calls and the
// staging arena for bulk bytes. Layout: ring_layout.h; frames: record.h;
// waiting: waiter.h.
//
// Producer protocol (RingClient, any app thread):
//   1. t = tail (relaxed); need = frame bytes, plus the gap to the ring's
//      end if the frame would cross it (the gap becomes a pad frame).
//   2. If t + need - head(acquire) > ring_bytes: the ring is full; wait on
//      `space` (bounded spin, then futex) and retry. Never drops.
//   3. CAS tail t -> t + need (acq_rel). The bytes [t, t+need) are now this
//      thread's alone.
//   4. Write the header and payload (plain stores), then the commit word
//      (pos + 1, release), then Notify(doorbell).
// Consumer protocol (RingServer, one phosd thread):
//   1. At private head h, acquire-load the commit word at h. 0 = not yet
//      published; h + 1 = ready; anything else = corruption.
//   2. Copy and validate the header (DecodeRecord); hand out the record.
//   3. On Release: zero the first word of every 64-byte line of the frame
//      (so stale payload bytes can never look like a commit word in a later
//      lap), then head = h + frame_bytes (release) and Notify(space).
// Records are consumed in reservation order, so each app thread's records
// arrive in the order it posted them.
//
// Sync calls (RingClient::Call): take a completion slot (app-private free
// list), post with kFlagWantsReply + slot + a fresh call_seq, then wait
// until slot.done_seq == call_seq. phosd (RingServer::Complete) writes
// the result, release-stores done_seq and notifies the slot's EventWord.
//
// Every blocking wait ends with Unavailable when the region is closed or
// the `alive` callback reports the peer dead (checked every
// WaitPolicy::check_period_ms while asleep): a call never hangs forever.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <vector>

#include "common/status.h"
#include "ring/record.h"
#include "ring/ring_layout.h"
#include "ring/waiter.h"

namespace phos::ring {

struct RingOptions {
  WaitPolicy wait;   // spin budget / liveness period for every blocking wait
  AliveFn alive;     // e.g. [&ch] { return ch.PeerAlive(); }; empty = assume alive
};

/// Result of a synchronous call, copied out of the completion slot.
struct Reply {
  int32_t status = 0;
  uint32_t bytes = 0;
  std::array<std::byte, kSlotResultBytes> data{};
  std::span<const std::byte> view() const { return {data.data(), bytes}; }
};

/// App side. Thread-safe: any number of threads may post and call at once.
/// Does not own the mapping.
class RingClient {
 public:
  RingClient(void* base, const RingGeometry& geometry, RingOptions options = {});
  RingClient(const RingClient&) = delete;
  RingClient& operator=(const RingClient&) = delete;

  /// Largest payload of one frame.
  size_t max_payload_bytes() const { return geometry_.max_frame_bytes - kFrameHeaderBytes; }

  /// Posts a call nobody waits for (no round trip). Blocks only while the
  /// ring is full. InvalidArgument if the payload is too large;
  /// Unavailable if the ring is closed or phosd is gone.
  Status Post(const CallHeader& call, std::span<const std::byte> payload);

  /// Posts a call and waits for its completion.
  Status Call(const CallHeader& call, std::span<const std::byte> payload, Reply* reply);

  /// Posts `data` through the staging arena in chunk-sized pieces (each a
  /// kFlagStaging frame whose payload is StagingRef + `meta`; the last has
  /// kFlagLastPiece). Pipelined: the app fills chunk k+1 while phosd drains
  /// chunk k; it waits only when every chunk is in flight.
  Status PostBulk(const CallHeader& call, std::span<const std::byte> meta,
                  std::span<const std::byte> data);

  /// Orderly close: sets the closed word and wakes every sleeper on both
  /// sides.
  void Close();
  bool closed() const;
  /// RegionHeader::device_output: phosd holds kernel printf text.
  bool device_output_pending() const;

  const RingGeometry& geometry() const { return geometry_; }

 private:
  Status WriteFrame(FrameHeader h, std::span<const std::byte> a, std::span<const std::byte> b);
  Status AcquireSlot(uint32_t* slot);
  void ReleaseSlot(uint32_t slot);
  Status AcquireChunk(uint32_t* chunk);

  std::byte* base_;
  RingGeometry geometry_;
  RingOptions options_;
  RegionHeader* header_;
  std::byte* ring_;
  uint64_t mask_;
  CompletionSlot* slots_;
  ChunkState* chunks_;
  std::byte* staging_;
  std::atomic<uint64_t> next_seq_{0};
  std::atomic<uint32_t> chunk_hint_{0};
  std::mutex slot_mu_;                 // guards free_slots_ (app-private)
  std::condition_variable slot_cv_;
  std::vector<uint32_t> free_slots_;
};

/// phosd side: exactly one thread consumes. Does not own the mapping.
class RingServer {
 public:
  RingServer(void* base, const RingGeometry& geometry, RingOptions options = {});
  RingServer(const RingServer&) = delete;
  RingServer& operator=(const RingServer&) = delete;

  /// Waits for the next call record (pad frames are skipped). Ok with a
  /// record that stays valid until Release(); NotReady when
  /// options.wait.deadline_ns passed or Interrupt() was called (message
  /// "interrupted"; a ready record wins over a pending interrupt, which then
  /// ends the next wait); Unavailable when the ring is closed or
  /// the app is gone; Corruption when the app wrote a bad frame (the
  /// session must be torn down; every later call returns the same error).
  Status Next(Record* record);
  /// Like Next but never waits: NotReady if nothing is published.
  Status TryNext(Record* record);
  /// Frees the space of the record Next() returned last.
  void Release();

  /// Copies a record's payload out of shared memory (no double fetch).
  static std::vector<std::byte> CopyPayload(const Record& record);

  /// Completes a synchronous call. `slot` and `call_seq` come from the
  /// record; the slot index is re-checked. InvalidArgument if the result is
  /// larger than kSlotResultBytes.
  Status Complete(uint32_t slot, uint64_t call_seq, int32_t status, std::span<const std::byte> result);

  /// The staging bytes a (decoded, hence bounds-checked) reference names.
  std::span<const std::byte> StagingBytes(const StagingRef& ref) const;
  /// Gives a staging chunk back to the app (after its bytes were copied).
  void FreeChunk(uint32_t chunk);

  void Close();
  bool closed() const;
  /// Publishes whether the session has device output waiting
  /// (RegionHeader::device_output). Consumer thread, before Complete().
  void SetDeviceOutputPending(bool pending);
  const RingGeometry& geometry() const { return geometry_; }
  /// The consumer position as published in the region (between two calls
  /// it equals the private one): what a whole-process image records.
  /// Consumer thread.
  uint64_t published_head() const { return header_->head.load(std::memory_order_acquire); }

  /// Makes the consumer's current or next Next() return NotReady
  /// ("interrupted") instead of sleeping: phosd's control tasks (C/R
  /// engine) use it to get the consumer thread between two calls. Any
  /// thread. The flag lives in phosd's memory, not in the shared region, so
  /// the app can neither raise nor clear it; the wake-up goes through the
  /// doorbell's ordinary Notify handshake (no lost wake-up).
  void Interrupt();
  /// True if an Interrupt() is pending (consumer thread; does not clear it).
  bool interrupt_pending() const { return interrupt_.load(std::memory_order_acquire); }

 private:
  Status Peek(Record* record, bool* ready);

  std::byte* base_;
  RingGeometry geometry_;
  RingOptions options_;
  DecodeLimits limits_;
  RegionHeader* header_;
  std::byte* ring_;
  uint64_t mask_;
  CompletionSlot* slots_;
  ChunkState* chunks_;
  std::byte* staging_;
  uint64_t head_ = 0;         // private copy of the consumer position
  uint32_t pending_bytes_ = 0; // frame handed out by Next, not yet released
  Status poisoned_;           // sticky Corruption
  // Set by Interrupt() (any thread), cleared by the consumer when Next()
  // reports it. Atomic; no lock.
  std::atomic<bool> interrupt_{false};
};

}  // namespace phos::ring
