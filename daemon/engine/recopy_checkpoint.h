// Soft recopy checkpoint (`--mode recopy`, docs/protocols.md "Soft
// recopy"): the image holds the device state at the final quiesce t2.
//
// Steps (RunRecopy, through DriveSoftOperation):
//   Start()     control task (consumer thread), no quiesce: snapshot buffers
//               + globals (every one DIRTY), create the copier's stream and
//               the twin validator, install into the EngineHook.
//   Work()      = CopyRounds(), the caller's thread: the copier. Rounds; in each it takes
//               every DIRTY buffer (DIRTY -> COPYING: waits on its stream
//               for the writes admitted so far, takes its dirty chunks and
//               clears them), copies those chunks D2H into the buffer's
//               host staging vector (yielding to app copies,
//               CopyEngineGate; from round 2 on, a chunk written during the
//               current round is left for later: it is being written now,
//               so a copy would likely be stale before t2 — Xen's pre-copy
//               skips such pages the same way), then COPYING -> COPIED if no chunk was
//               dirtied meanwhile, else DIRTY (a chunk written during its
//               copy is dirty again; the others stay copied). Rounds go on
//               while the dirty bytes shrink by >= 10 % per round, at most
//               options.recopy_rounds.
//   Finish()    control task. After a failed copier: remove and cancel
//               (no image). Else Final() = t2 (the stall): collect every
//               twin report, synchronise, take the final snapshot, copy the
//               chunks still dirty (and whole buffers allocated or
//               re-allocated since Start), remove the operation, drop its
//               device state; then options.at_capture.
//   WriteImage() the caller's thread, the app runs again: every staged host
//               copy into the image (ImageWriter writes each chunk exactly
//               once, so nothing is written before t2).
// Dirtiness is per image chunk (4 MiB by default): a write whose range is
// exact (copies, memsets, spec-table library calls) dirties the chunks it
// overlaps, so a round re-copies what changed, not whole buffers; kernels,
// twin misses and calls without an access set dirty whole buffers.
// Pre-copy (options.precopy, live migration): each run of chunks a copy
// left clean is checksummed per chunk and handed to the sink with a fresh
// copy id on the copier's thread; at t2 a chunk whose staged copy was
// handed over and is still current is written as a reference (copy id,
// offset; ImageWriter::WriteElsewhere), the rest as bytes.
// Admission: recopy never blocks a call (except cudaFree of a buffer the
// copier is reading: it waits for that one chunk). Admitted() — after the
// call was enqueued — marks the chunks the call writes dirty and records
// the stream's write event, so the copier's next copy of them waits for
// the write, and a copy racing with it leaves them dirty. A call with no
// access set (kUnknown), or an unvalidatable kernel under
// --unvalidated=stop, dirties every buffer. A twin reporting a write outside
// its speculated set dirties the buffer hit (recopy_misses); an overflowed
// report dirties everything.
//
// A process that uses several GPUs (soft_operation.h "SEVERAL GPUS"):
// each buffer knows its GPU and the copier copies it on its stream there;
// write events are recorded per stream in the stream's own context (a call
// of GPU 0 writing GPU 1's buffer records it in GPU 0's); a copy waits for
// an event of another context on the host (the backend has no
// cross-context wait); t2 quiesces every context and copies each range in
// its GPU's context.
//
// Locks: the soft-operation rule (soft_operation.h): table_.mu guards the
// table (not `host`/`host_xxh3`/`handed`: a buffer's staged copy belongs
// to the copier while the buffer is COPYING and to Final()/WriteImage()
// after the copier ended) and every member below marked so; the copier
// touches the context only through UseContext; a cudaFree of a buffer the
// copier is reading takes ctx_use_mu_ to wait out the chunk in flight.
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
  /// One extent of the image, fixed at t2: per chunk, its bytes in `host`
  /// or, when refs[c].copy_id != 0, a reference to a pre-copy (then
  /// xxh3[c] is its checksum).
  struct Extent {
    std::uint64_t address = 0;
    std::uint64_t bytes = 0;
    std::vector<std::byte> host;
    std::vector<TrackedBuffer::Handed> refs;  // empty: no chunk referenced
    std::vector<std::uint64_t> xxh3;
  };

  /// mu held: the chunks of `b` overlapping [ptr, ptr + bytes) (bytes 0
  /// counts as 1) become dirty, and the buffer DIRTY.
  void DirtyChunksLocked(TrackedBuffer& b, std::uint64_t ptr, std::uint64_t bytes);
  void DirtyAllLocked(TrackedBuffer& b) { DirtyChunksLocked(b, b.address, b.bytes); }
  /// mu held: the copier's next copy of `b` waits for the write event of
  /// `stream` of `ctx`.
  void WrittenOnLocked(TrackedBuffer& b, backend::Context* ctx, backend::StreamHandle stream);
  /// mu held: records the write event of `stream` (of `ctx`) after the call
  /// just enqueued on it. False when it could not (then the caller must make
  /// sure the copier's copies of what the call wrote are dropped — they are,
  /// by their chunks becoming dirty again — and retaken after the write: see AdmittedCall).
  bool RecordWriteLocked(backend::Context* ctx, backend::StreamHandle stream);
  // SoftOperation.
  void AdmittedCall(const session::CallView& call, const Status& result) override;
  void DetachLeftoversLocked(DeviceLeftovers* out) override;

  Status CopyRounds();
  /// t2 (control task).
  Status Final(session::SessionState& st, EngineHook* hook);
  /// Final's work before it uninstalls: twin reports, synchronise, the
  /// final snapshot, the copies at t2.
  Status CaptureFinal(session::SessionState& st, CheckpointResult* result);
  /// mu held: bytes of the dirty chunks of buffers not freed.
  std::uint64_t DirtyBytesLocked() const;
  /// Copier: copies the chunks of `b` flagged in `chunks` into its host
  /// vector. *dropped when a free of the buffer interrupted it.
  Status CopyOne(TrackedBuffer& b, const Lane& lane, const std::vector<bool>& chunks, bool* dropped);
  /// Copier, pre-copy only: checksums the chunks of `b` flagged in `chunks`
  /// (copied and still clean) and hands each run of them to
  /// options_.precopy under a new copy id.
  Status HandOver(TrackedBuffer& b, const std::vector<bool>& chunks);
  /// Applies collected twin reports. mu NOT held.
  void ApplyReports(std::vector<TwinValidator::Collected>& reports);

  const CheckpointOptions options_;
  const std::uint64_t chunk_;                    // the image's chunk size: the unit of dirtiness and of copies
  CheckpointResult* const result_;               // written by Final (consumer thread), read after the driver

  // Guarded by table_.mu:
  std::vector<std::uint64_t> order_;             // tracked addresses, ascending: set by Start under mu, read-only
                                                 // after (the copier reads it unlocked)
  std::map<std::pair<backend::Context*, backend::StreamHandle>, backend::EventHandle> stream_events_;  // write event per app stream (in its context)
  bool reset_ = false;                           // a cudaDeviceReset freed every tracked buffer
  std::uint64_t next_copy_id_ = 0;               // copier only: pre-copy ids
  std::uint32_t round_ = 0;                      // the copier's round (1, 2, ...; 0 before the first)
  std::atomic<bool> abort_copy_{false};          // set by Admit (a free, a reset), cleared and read by the copier:
                                                 // the buffer being copied goes away, stop copying it

  // Written by Final (consumer thread) before WriteImage runs on the
  // caller's thread (RunControl's future orders them).
  SessionSnapshot final_snapshot_;
  std::vector<Extent> extents_;                  // buffers, then globals, as in final_snapshot_
};

}  // namespace phos::engine
