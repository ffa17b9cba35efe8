// Soft copy-on-write checkpoint (`--mode cow`, docs/protocols.md "Soft
// copy-on-write"): the image holds the device state at the quiesce t1; the
// app runs on while the copier saves buffers, and a call about to write a
// buffer not saved yet first copies it to a device shadow (or waits).
//
// Steps (engine::Checkpoint drives them):
//   Start()     control task (consumer thread) = t1: synchronise (a sticky
//               fault refuses), snapshot buffers + globals (every one
//               PENDING, an extent each in the image), create the copier's
//               stream and the twin validator, install into the EngineHook.
//               The stall of the app is this step plus its waits in Admit.
//   CopyAll()   the caller's thread: the copier. Takes buffers in order
//               (urgent ones — a call waits — first): PENDING -> SAVING
//               (copies the buffer) or SHADOWED -> SAVING (copies the
//               shadow, then frees it), -> SAVED. 4 MiB chunks D2H on its
//               own stream, each handed to the ImageWriter; before each
//               chunk it yields to app copies (CopyEngineGate).
//   Finish()    control task: uninstall, collect every twin report, free
//               what is left. Reports a write outside a kernel's speculated
//               set to a buffer that was not yet shadowed/saved when that
//               kernel was admitted: the t1 content may be lost, the caller
//               discards the image and retries stop-the-world.
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
// Lock: TrackedBuffers::mu guards the buffer states, seq_, reserve_used_,
// the tickets map and the counters; ctx_use_mu_ is held by the copier
// while it touches the context for one chunk, and by Cancel() to fence
// the copier out before the session releases the context.
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

#include "engine/copy_engine_gate.h"
#include "engine/engine_hook.h"
#include "engine/operation_util.h"
#include "engine/operations.h"
#include "engine/session_snapshot.h"
#include "engine/tracked_buffers.h"
#include "engine/twin_validator.h"
#include "image/image_writer.h"

namespace phos::engine {

class CowCheckpoint final : public Operation, public std::enable_shared_from_this<CowCheckpoint> {
 public:
  enum State : std::uint8_t { kPending, kShadowed, kSaving, kSaved };

  CowCheckpoint(const CheckpointOptions& options, Progress* progress, image::ImageWriter* writer);
  ~CowCheckpoint() override;

  Status Start(session::SessionState& st, EngineHook* hook, CheckpointResult* result);
  Status CopyAll();
  Status Finish(session::SessionState& st, EngineHook* hook, bool* fallback);

  /// Counters so far (any thread).
  OperationCounters counters();
  /// Microseconds calls spent blocked in Admit.
  std::uint64_t blocked_us() const { return blocked_us_.load(std::memory_order_relaxed); }

  // Operation (consumer thread).
  Status Admit(const session::CallView& call) override;
  bool LaunchInstead(const session::CallView& call, Status* result) override;
  void Admitted(const session::CallView& call, const Status& result) override;
  void Cancel(session::SessionState& st) override;

 private:
  /// mu held: picks the next buffer for the copier (urgent first).
  TrackedBuffer* NextToSave();
  /// mu held (lock passed in): makes B safe for a write at admission seq
  /// `seq` — shadow or wait. Returns a refusal only when cancelled.
  Status MakeWritable(std::unique_lock<std::mutex>& lock, TrackedBuffer& b, const session::CallView& call,
                      std::uint64_t seq);
  /// mu held: a shadow of `bytes` (a spare one of that size, else a new
  /// allocation within the reserve); OutOfMemory when the reserve is full.
  Status TakeShadow(std::uint64_t bytes, backend::DevicePtr* out);
  /// mu held: a saved buffer's shadow, kept for reuse (still in the reserve).
  void GiveBackShadow(std::uint64_t bytes, backend::DevicePtr shadow);
  /// mu held: waits until every buffer is SAVED.
  void WaitAllSaved(std::unique_lock<std::mutex>& lock);
  /// Copier: copies one buffer (from `src`: itself or its shadow) to the image.
  Status SaveOne(TrackedBuffer& b, backend::DevicePtr src, std::byte* host, std::size_t chunk);
  /// Checks collected twin reports; sets fallback_ when one may have
  /// changed t1 content. mu NOT held.
  void CheckReports(std::vector<TwinValidator::Collected>& reports);
  /// Consumer thread: destroys the validator, the copier's stream, events
  /// and left shadows, and fences the copier out of the context (Finish,
  /// Cancel, or before a cudaDeviceReset replaces the context). Idempotent.
  void DropDeviceState();

  const CheckpointOptions options_;
  Progress* const progress_;
  image::ImageWriter* const writer_;
  backend::Context* ctx_ = nullptr;              // the session's context at t1
  const session::SessionState* st_ = nullptr;    // consumer thread only (LaunchInstead)
  backend::StreamHandle stream_ = 0;             // the copier's
  std::unique_ptr<TwinValidator> validator_;     // null when twins are unavailable
  CopyEngineGate gate_;

  SessionSnapshot snapshot_;                     // at t1; first_use filled by Finish
  std::uint64_t total_bytes_ = 0;
  TwinLauncher twins_;         // consumer thread only
  bool device_state_dropped_ = false;            // consumer thread only

  TrackedBuffers table_;
  // Guarded by table_.mu:
  std::size_t saved_ = 0;                        // buffers SAVED
  TrackedBuffer* saving_ = nullptr;              // the buffer the copier is reading a chunk of
  bool chunk_busy_ = false;                      // ... directly from the buffer (not its shadow)
  std::multimap<std::uint64_t, backend::DevicePtr> spare_shadows_;  // bytes -> saved shadows for reuse
  bool abandoned_ = false;                       // cancelled, failed or finished: admit everything
  std::uint64_t seq_ = 0;                        // admissions so far (Admit)
  std::uint64_t reserve_used_ = 0;
  std::size_t next_ = 0;                         // copier's position in order_
  std::vector<std::uint64_t> order_;             // addresses, ascending
  std::unordered_map<std::uint64_t, std::uint64_t> ticket_seq_;  // twin ticket -> admission seq
  std::vector<std::uint64_t> shadows_to_free_;   // shadows whose D2D could not be confirmed done: freed with the device state
  OperationCounters counters_;
  std::uint32_t next_first_use_ = 0;
  bool cancelled_ = false;
  bool fallback_ = false;
  std::string fallback_why_;

  std::mutex ctx_use_mu_;                        // see the file comment
  std::atomic<bool> fenced_{false};              // set under ctx_use_mu_: the copier must not touch the context
  std::atomic<std::uint64_t> blocked_us_{0};
};

}  // namespace phos::engine
