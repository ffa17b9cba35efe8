// Soft recopy checkpoint (`--mode recopy`, docs/protocols.md "Soft
// recopy"): the image holds the device state at the final quiesce t2.
//
// Steps (RunRecopy, through DriveSoftOperation):
//   Start()     control task (consumer thread), no quiesce: snapshot buffers
//               + globals (every one DIRTY), create the copier's stream and
//               the twin validator, install into the EngineHook.
//   Work()      = CopyRounds(), the caller's thread: the copier. Rounds; in each it takes
//               every DIRTY buffer (DIRTY -> COPYING: waits on its stream
//               for the writes admitted so far, remembers the generation),
//               copies it D2H in 4 MiB chunks into the buffer's host staging
//               vector (yielding to app copies, CopyEngineGate), then
//               COPYING -> COPIED if no write was admitted meanwhile (same
//               generation), else it stays DIRTY. Rounds go on while the
//               dirty bytes shrink by >= 10 % per round, at most
//               options.recopy_rounds.
//   Finish()    control task. After a failed copier: remove and cancel
//               (no image). Else Final() = t2 (the stall): collect every
//               twin report, synchronise, take the final snapshot, copy what
//               is DIRTY (and buffers allocated or re-allocated since
//               Start), remove the operation, drop its device state; then
//               options.at_capture.
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
// Locks: the soft-operation rule (soft_operation.h): table_.mu guards the
// table (not `host`/`host_xxh3`/`copy_id`: a buffer's staged copy belongs
// to the copier while the buffer is COPYING and to Final()/WriteImage()
// after the copier ended) and every member below marked so; the copier
// touches the context only through UseContext; a cudaFree of a buffer the
// copier is reading takes ctx_use_mu_ to wait out the chunk in flight.
#pragma once

#include <atomic>
#include <cstdint>
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

/// Rounds of copies while the app runs, then t2: quiesce, copy what is
/// still dirty, resume; the image is written after the resume.
Status RunRecopy(session::Session& session, EngineHook* hook, const CheckpointOptions& options, Progress* progress,
                 CheckpointResult* result);

class RecopyCheckpoint final : public SoftOperation {
 public:
  enum State : std::uint8_t { kDirty, kCopying, kCopied };

  /// `result`: filled at t2 (admitted_at_capture, buffers, globals, bytes).
  RecopyCheckpoint(const CheckpointOptions& options, Progress* progress, CheckpointResult* result);
  ~RecopyCheckpoint() override;

  // SoftOperation.
  Status Start(session::SessionState& st, EngineHook* hook) override;
  /// The copier; OK also when a cudaDeviceReset ended the rounds early.
  Status Work() override { return CopyRounds(); }
  Status Finish(session::SessionState& st, EngineHook* hook, const Status& worked) override;
  /// After Finish: the staged copies and the session metadata into `writer`;
  /// the extents written as pre-copy references are added to `precopied`.
  Status WriteImage(image::ImageWriter* writer, std::vector<PrecopiedExtent>* precopied);

  // Operation (consumer thread).
  Status Admit(const session::CallView& call) override;

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
  /// by the generation bump — and retaken after the write: see AdmittedCall).
  bool RecordWriteLocked(backend::StreamHandle stream);
  // SoftOperation.
  void AdmittedCall(const session::CallView& call, const Status& result) override;
  void DetachLeftoversLocked(DeviceLeftovers* out) override;

  Status CopyRounds();
  /// t2 (control task).
  Status Final(session::SessionState& st, EngineHook* hook);
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

  const CheckpointOptions options_;
  CheckpointResult* const result_;               // written by Final (consumer thread), read after the driver

  // Guarded by table_.mu:
  std::vector<std::uint64_t> order_;             // tracked addresses, ascending: set by Start under mu, read-only
                                                 // after (the copier reads it unlocked)
  std::unordered_map<backend::StreamHandle, backend::EventHandle> stream_events_;  // write event per app stream
  bool reset_ = false;                           // a cudaDeviceReset freed every tracked buffer
  std::uint64_t next_copy_id_ = 0;               // copier only: pre-copy ids
  std::atomic<bool> abort_copy_{false};          // set by Admit (a free, a reset), cleared and read by the copier:
                                                 // the buffer being copied goes away, stop copying it

  // Written by Final (consumer thread) before WriteImage runs on the
  // caller's thread (RunControl's future orders them).
  SessionSnapshot final_snapshot_;
  std::vector<Extent> extents_;                  // buffers, then globals, as in final_snapshot_
};

}  // namespace phos::engine
