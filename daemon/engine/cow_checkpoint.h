// Soft copy-on-write checkpoint (`--mode cow`, docs/protocols.md "Soft
// copy-on-write"): the image holds the device state at the quiesce t1; the
// app runs on while the copier saves buffers, and a call about to write a
// buffer not saved yet first copies it to a device shadow (or waits).
// Buffers are tracked as pieces of one image chunk each (TrackedBuffer::
// piece_offset): "buffer B" below is one piece, and a write shadows only the
// pieces its range overlaps. Shadows are ranges of phosd's reserve
// (CheckpointOptions::shadow_pool, filled when phosd started), else
// allocations of their own.
//
// Steps (DriveSoftOperation runs them; RunCow in operations.cc):
//   Start()     control task (consumer thread) = t1: synchronise every
//               context of the session (a sticky fault refuses), snapshot buffers + globals (every one
//               PENDING, an extent each in the image), the copier's stream
//               and gate, the twin validator, install into the EngineHook,
//               then options.at_capture. The stall of the app is this step
//               plus its waits in Admit.
//   Work()      the caller's thread: the copier. Takes buffers in order
//               (urgent ones — a call waits — first): PENDING -> SAVING
//               (copies the buffer) or SHADOWED -> SAVING (copies the
//               shadow, then frees it), -> SAVED. 4 MiB chunks D2H on its
//               own stream, each handed to the ImageWriter; before each
//               chunk it yields to app copies (CopyEngineGate).
//   Finish()    control task: uninstall, collect every twin report, free
//               what is left. Reports a write outside a kernel's speculated
//               set to a buffer that was not yet shadowed/saved when that
//               kernel was admitted (fallback()): the t1 content may be
//               lost, the caller discards the image and retries
//               stop-the-world.
// Admission (consumer thread, Admit): a call writing buffer B:
//   B PENDING, reserve has room -> D2D B -> shadow on the call's stream
//                                  (event recorded after it), B SHADOWED
//   B PENDING, no room          -> B urgent; wait until SAVED
//   B SAVING, reserve has room  -> wait for the chunk being read (if it is
//                                  read from B itself), then shadow B as
//                                  above; the copier reads the remaining
//                                  chunks from the shadow
//   B SAVING, no room           -> wait until SAVED
//   B SHADOWED / SAVED          -> admit
// Reads never wait. Kernel arguments are never rewritten. A call with no
// access set (kUnknown) — or an unvalidatable kernel under
// --unvalidated=stop — waits until every buffer is SAVED.
//
// A process using several GPUs (soft_operation.h "SEVERAL GPUS"): each
// piece knows its GPU; its shadow comes from that GPU's reserve, the D2D
// into it runs on the writing call's stream in the call's context (maybe
// another GPU's: a peer copy), the copier reads it on its stream there.
//
// Locks: the soft-operation rule (soft_operation.h): table_.mu guards the
// table and every member below marked so; the copier touches the context
// only through UseContext.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/operations.h"
#include "engine/session_snapshot.h"
#include "engine/soft_operation.h"
#include "engine/tracked_buffers.h"
#include "engine/twin_validator.h"
#include "image/image_writer.h"

namespace phos::engine {

class CowCheckpoint final : public SoftOperation {
 public:
  enum State : std::uint8_t { kPending, kShadowed, kSaving, kSaved };

  /// `writer`: the image being written (extents added at t1). `result`:
  /// admitted_at_capture, buffers and globals are filled at t1.
  CowCheckpoint(const CheckpointOptions& options, Progress* progress, image::ImageWriter* writer,
                CheckpointResult* result);
  ~CowCheckpoint() override;

  // SoftOperation.
  Status Start(session::SessionState& st, EngineHook* hook) override;
  Status Work() override { return CopyAll(); }
  Status Finish(session::SessionState& st, EngineHook* hook, const Status& worked) override;

  /// After Finish (any thread): the image must be discarded and retaken
  /// stop-the-world (a mis-speculated write may have lost t1 content).
  bool fallback();

  // Operation (consumer thread).
  Status Admit(const session::CallView& call) override;

 private:
  // SoftOperation.
  void TwinLaunchedLocked(std::uint64_t ticket) override;
  void DetachLeftoversLocked(DeviceLeftovers* out) override;

  Status CopyAll();
  /// mu held: picks the next buffer for the copier (urgent first).
  TrackedBuffer* NextToSave();
  /// mu held (lock passed in): makes B safe for a write at admission seq
  /// `seq` — shadow or wait. Returns a refusal only when cancelled.
  Status MakeWritable(std::unique_lock<std::mutex>& lock, TrackedBuffer& b, const session::CallView& call,
                      std::uint64_t seq);
  /// mu held: a shadow of `bytes` on phosd's GPU `device` (the buffer's)
  /// — a range of that GPU's ready reserve (options_.shadow_pool), else a
  /// spare one of that size, else a new allocation within the reserve;
  /// OutOfMemory when that GPU's reserve is full.
  Status TakeShadow(int device, std::uint64_t bytes, backend::DevicePtr* out);
  /// mu held: a saved buffer's shadow, no copy into it still queued: back
  /// to phosd's reserve, or kept for reuse (still counted in the reserve).
  void GiveBackShadow(int device, std::uint64_t bytes, backend::DevicePtr shadow);
  /// mu held: a shadow freed (or given back to the reserve) by
  /// DropDeviceState, after the events it waits for.
  void ReleaseLaterLocked(int device, backend::DevicePtr shadow, DeviceLeftovers* out);
  /// Copier: copies one buffer (from `src`: itself or its shadow) to the image.
  Status SaveOne(TrackedBuffer& b, const Lane& lane, backend::DevicePtr src, std::byte* host, std::size_t chunk);
  /// Checks collected twin reports; sets fallback_ when one may have
  /// changed t1 content. mu NOT held.
  void CheckReports(std::vector<TwinValidator::Collected>& reports);

  const CheckpointOptions options_;
  image::ImageWriter* const writer_;             // the copier writes chunks; Finish the metadata
  CheckpointResult* const result_;               // written by Start (consumer thread), read after the driver
  SessionSnapshot snapshot_;                     // written by Start; first_use filled by Finish (consumer thread)

  // Guarded by table_.mu:
  std::size_t saved_ = 0;                        // buffers SAVED
  TrackedBuffer* saving_ = nullptr;              // the buffer the copier is reading a chunk of
  bool chunk_busy_ = false;                      // ... directly from the buffer (not its shadow)
  std::multimap<std::pair<int, std::uint64_t>, backend::DevicePtr> spare_shadows_;  // (GPU, bytes) -> saved shadows for reuse
  std::unordered_map<backend::DevicePtr, std::uint64_t> pooled_;     // shadows taken from options_.shadow_pool -> bytes
  bool pool_unavailable_logged_ = false;
  std::uint64_t seq_ = 0;                        // admissions so far (Admit)
  std::map<int, std::uint64_t> reserve_used_;    // per GPU: shadow bytes held (the reserve is per GPU)
  std::size_t next_ = 0;                         // copier's position in order_
  std::vector<std::uint64_t> order_;             // the copier's order: snapshot buffers, then globals (set by Start)
  std::unordered_map<std::uint64_t, std::uint64_t> ticket_seq_;  // twin ticket -> admission seq
  std::vector<std::pair<int, backend::DevicePtr>> shadows_to_free_;  // (GPU, shadow) whose D2D could not be confirmed done: freed with the device state
  bool fallback_ = false;
  std::string fallback_why_;
};

}  // namespace phos::engine
