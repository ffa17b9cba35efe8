// Soft recopy checkpoint (`--mode recopy`, docs/protocols.md "Soft
// recopy"): the image holds the device state at the final quiesce t2.
//
// Steps (RunRecopy drives them):
//   Start()     control task (consumer thread), no quiesce: snapshot buffers
//               + globals (every one DIRTY), create the copier's stream and
//               the twin validator, install into the EngineHook.
//   CopyRounds() the caller's thread: the copier. Rounds; in each it takes
//               every DIRTY buffer (DIRTY -> COPYING: waits on its stream
//               for the writes admitted so far, remembers the generation),
//               copies it D2H in 4 MiB chunks into the buffer's host staging
//               vector (yielding to app copies, CopyEngineGate), then
//               COPYING -> COPIED if no write was admitted meanwhile (same
//               generation), else it stays DIRTY. Rounds go on while the
//               dirty bytes shrink by >= 10 % per round, at most
//               options.recopy_rounds.
//   Final()     control task = t2 (the stall): collect every twin report,
//               synchronise, take the final snapshot, copy what is DIRTY
//               (and buffers allocated or re-allocated since Start), remove
//               the operation, drop its device state.
//   WriteImage() the caller's thread, the app runs again: every staged host
//               copy into the image (ImageWriter writes each chunk exactly
//               once, so nothing is written before t2).
// Pre-copy (options.precopy, live migration): each copy that ends COPIED is
// checksummed per image chunk and handed to the sink with a fresh copy id
// on the copier's thread; at t2 an extent whose staged copy was handed over
// is written as a reference (ImageWriter::WriteElsewhere), the rest as bytes.
// Admission: recopy never blocks a call (except cudaFree of a buffer the
// copier is reading: it waits for that one chunk). Admitted() — after the
// call was enqueued — marks every buffer the call writes DIRTY, bumps its
// generation and records the stream's write event, so the copier's next
// copy of it waits for the write and a copy racing with it is dropped. A
// call with no access set (kUnknown), or an unvalidatable kernel under
// --unvalidated=stop, dirties every buffer. A twin reporting a write outside
// its speculated set dirties the buffer hit (recopy_misses); an overflowed
// report dirties everything.
//
// Locks: TrackedBuffers::mu guards the buffer states (not `host`: see
// below), stream_events_, the counters and the flags; ctx_use_mu_ is held
// by the copier while it touches the context for one chunk, by Cancel() to
// fence the copier out, and by a cudaFree to wait for a chunk in flight.
// Order: mu before ctx_use_mu_; the copier never takes mu while holding
// ctx_use_mu_. A buffer's `host` vector belongs to the copier while the
// buffer is COPYING and to Final()/WriteImage() after the copier ended.
#pragma once

#include <atomic>
#include <cstdint>
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

/// Rounds of copies while the app runs, then t2: quiesce, copy what is
/// still dirty, resume; the image is written after the resume.
Status RunRecopy(session::Session& session, EngineHook* hook, const CheckpointOptions& options, Progress* progress,
                 CheckpointResult* result);

class RecopyCheckpoint final : public Operation, public std::enable_shared_from_this<RecopyCheckpoint> {
 public:
  enum State : std::uint8_t { kDirty, kCopying, kCopied };

  RecopyCheckpoint(const CheckpointOptions& options, Progress* progress);
  ~RecopyCheckpoint() override;

  Status Start(session::SessionState& st, EngineHook* hook);
  /// The copier; OK also when a cudaDeviceReset ended the rounds early.
  Status CopyRounds();
  /// t2. Fills admitted_at_capture, buffers, globals, bytes.
  Status Final(session::SessionState& st, EngineHook* hook, CheckpointResult* result);
  /// After Final: the staged copies and the session metadata into `writer`;
  /// the extents written as pre-copy references are added to `precopied`.
  Status WriteImage(image::ImageWriter* writer, std::vector<PrecopiedExtent>* precopied);

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
  /// One extent of the image, fixed at t2.
  struct Extent {
    std::uint64_t address = 0;
    std::uint64_t bytes = 0;
    std::vector<std::byte> host;
    std::uint64_t copy_id = 0;            // pre-copy: written as a reference to this copy
    std::vector<std::uint64_t> xxh3;      // its chunk checksums
  };

  /// mu held: the buffer becomes DIRTY (generation++); when `stream` is
  /// set, the copier's next copy waits for `stream`'s write event.
  void MarkDirtyLocked(TrackedBuffer& b, bool written_on_stream, backend::StreamHandle stream);
  /// mu held: records the write event of `stream` after the call just
  /// enqueued on it. False when it could not (then the caller must make
  /// sure the copier's copies of what the call wrote are dropped — they are,
  /// by the generation bump — and retaken after the write: see Admitted).
  bool RecordWriteLocked(backend::StreamHandle stream);
  /// Final's work before it uninstalls: twin reports, synchronise, the
  /// final snapshot, the copies at t2.
  Status CaptureFinal(session::SessionState& st, CheckpointResult* result);
  /// mu held: DIRTY bytes of buffers not freed.
  std::uint64_t DirtyBytesLocked() const;
  /// Copier: copies one buffer into its host vector. *dropped when a free
  /// of the buffer interrupted it.
  Status CopyOne(TrackedBuffer& b, bool* dropped);
  /// Copier, pre-copy only: checksums the COPIED buffer's staged copy and
  /// hands it to options_.precopy under a new copy id.
  Status HandOver(TrackedBuffer& b);
  /// Applies collected twin reports. mu NOT held.
  void ApplyReports(std::vector<TwinValidator::Collected>& reports);
  /// Consumer thread: destroys the validator, the copier's stream, the write
  /// events and the gate's event, and fences the copier out of the context
  /// (Final, Cancel, or before a cudaDeviceReset replaces the context).
  /// Idempotent.
  void DropDeviceState();

  const CheckpointOptions options_;
  Progress* const progress_;
  backend::Context* ctx_ = nullptr;              // the session's context at Start
  const session::SessionState* st_ = nullptr;    // consumer thread only (LaunchInstead)
  backend::StreamHandle stream_ = 0;             // the copier's
  std::unique_ptr<TwinValidator> validator_;     // null when twins are unavailable or dropped
  CopyEngineGate gate_;
  TwinLauncher twins_;         // consumer thread only
  bool device_state_dropped_ = false;            // consumer thread only

  TrackedBuffers table_;
  // Guarded by table_.mu:
  std::vector<std::uint64_t> order_;             // tracked addresses, ascending (immutable after Start)
  std::unordered_map<backend::StreamHandle, backend::EventHandle> stream_events_;  // write event per app stream
  bool abandoned_ = false;                       // cancelled, reset, or t2 reached: admit everything as is
  bool cancelled_ = false;                       // the session ended
  bool reset_ = false;                           // a cudaDeviceReset freed every tracked buffer
  std::uint32_t next_first_use_ = 0;
  std::uint64_t next_copy_id_ = 0;               // copier only (pre-copy ids; not under mu)
  OperationCounters counters_;

  // Written by Final (consumer thread) before WriteImage runs on the
  // caller's thread (RunControl's future orders them).
  SessionSnapshot final_snapshot_;
  std::vector<Extent> extents_;                  // buffers, then globals, as in final_snapshot_

  std::mutex ctx_use_mu_;                        // see the file comment
  std::atomic<bool> fenced_{false};              // set under ctx_use_mu_: the copier must not touch the context
  std::atomic<bool> abort_copy_{false};          // the buffer being copied is being freed: stop copying it
  std::atomic<std::uint64_t> blocked_us_{0};
};

}  // namespace phos::engine
