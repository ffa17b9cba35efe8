// The C/R engine's entry points: one checkpoint or restore of one session's
// GPU state, in any mode (docs/protocols.md). The gRPC handlers and the
// engine tests call these; everything else in daemon/engine/ serves them.
//
// Threading: called on any thread except the session's consumer thread
// (they post control tasks to it and wait). One operation per session at a
// time: a second one while the first is in flight is refused with
// FailedPrecondition ("a checkpoint of session N is already in progress") —
// not queued (docs/protocols.md "Concurrent requests").
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/precopy_sink.h"
#include "engine/progress.h"
#include "image/image_writer.h"
#include "session/session.h"

namespace phos::engine {

class ShadowPool;

enum class Mode { kStop, kCow, kRecopy };
const char* ModeName(Mode m);
/// ModeName's inverse ("stop", "cow", "recopy"); false for anything else.
bool ParseMode(const std::string& name, Mode* out);

/// What to do with a kernel that has no PTX (cannot be twinned) while an
/// operation validates speculation (`phosd --unvalidated`).
enum class UnvalidatedPolicy { kTrust, kStop };

struct CheckpointOptions {
  Mode mode = Mode::kStop;
  std::string dir;                       // the image directory to create
  image::v1::Manifest metadata;          // session fields of the manifest
  image::ImageWriterOptions image;
  /// Soft CoW: device bytes shadows may take (`--cow-reserve`).
  std::uint64_t cow_reserve_bytes = 2ull << 30;
  /// Soft CoW: where shadows come from (phosd's reserve, filled when it
  /// started: shadow_pool.h). Not owned; must outlive the call. Null, or a
  /// device whose reserve is not ready: each shadow is allocated when needed.
  ShadowPool* shadow_pool = nullptr;
  /// Soft recopy: at most this many rounds before the final quiesce.
  int recopy_rounds = 5;
  UnvalidatedPolicy unvalidated = UnvalidatedPolicy::kTrust;
  /// Run ON the consumer thread inside the control task that fixes the
  /// image's state (t1 for stop/cow, t2 for recopy), after the capture,
  /// with no call admitted in between. Live migration freezes the app here
  /// (server/migration.h). A failure fails the checkpoint (no image). May
  /// run twice when cow falls back to stop-the-world.
  std::function<Status(session::SessionState&)> at_capture;
  /// The session is one rank of a job checkpoint that brought every rank
  /// to one cut (docs/protocols.md "Job checkpoints"): its communicators
  /// are recorded instead of refused.
  bool job_rank = false;
  /// Recopy only: every copy a round stages is handed here as it is taken
  /// (live migration's pre-copy, engine/precopy_sink.h), and extents still
  /// equal to a handed-over copy at t2 are written as references, not
  /// bytes. Not owned; must outlive the call. Null: a normal image.
  PrecopySink* precopy = nullptr;
};

/// Counters of one operation (also summed per session and daemon-wide for
/// `phos ps` / `phos status`).
struct OperationCounters {
  std::uint64_t shadows = 0;             // cow: shadow copies made
  std::uint64_t shadow_bytes = 0;
  std::uint64_t shadows_while_saving = 0;// cow: of those, buffers shadowed while the copier was saving them
  std::uint64_t shadows_from_reserve = 0;// cow: of those, taken from phosd's ready reserve (no allocation)
  std::uint64_t reserve_waits = 0;       // cow: writers that waited (no reserve room)
  std::uint64_t writer_waits = 0;        // calls that waited for a buffer being copied/loaded
  std::uint64_t copier_yields = 0;       // copier chunks deferred behind an app copy
  std::uint64_t recopy_rounds = 0;       // recopy: rounds before the final quiesce
  std::uint64_t recopy_dirty_bytes = 0;  // recopy: bytes copied at the final quiesce
  std::uint64_t twin_launches = 0;       // kernels launched as their twin
  std::uint64_t twin_misses = 0;         // accesses outside the speculated set
  std::uint64_t unvalidated_kernels = 0; // kernels without PTX met during the operation
  std::uint64_t cow_fallbacks = 0;       // cow discarded and redone stop-the-world
  std::uint64_t recopy_misses = 0;       // buffers re-dirtied by a twin report
  std::uint64_t restore_rollbacks = 0;   // concurrent restore redone stop-the-world
  std::uint64_t absent_waits = 0;        // restore: calls that waited for an absent buffer
};

struct CheckpointResult {
  std::string dir;
  Mode mode = Mode::kStop;               // the mode that produced the image (stop after a fallback)
  std::uint64_t stall_us = 0;            // total time the app's calls could not be admitted
  std::uint64_t bytes = 0;               // device bytes saved
  std::uint32_t buffers = 0;
  std::uint32_t globals = 0;
  /// Calls the session had admitted when the image's state was fixed (t1
  /// for stop/cow, t2 for recopy): the image equals the device state after
  /// exactly these calls (tests replay a deterministic workload to it).
  std::uint64_t admitted_at_capture = 0;
  std::string io_backend;
  OperationCounters counters;
  /// With CheckpointOptions::precopy: the extents written as references
  /// (their bytes are only at the sink's receiver).
  std::vector<PrecopiedExtent> precopied;
  std::uint64_t precopied_bytes = 0;
};

Status Checkpoint(session::Session& session, const CheckpointOptions& options, Progress* progress,
                  CheckpointResult* result);

/// When a restore checks the image's checksums (docs/protocols.md
/// "Verification"). Every chunk is verified either way: the question is
/// whether a full pass comes before the session is touched (the image is
/// read twice) or each chunk is verified as it is loaded, before it reaches
/// device memory (read once).
enum class Verify {
  /// kFirst for an in-place restore, kAsLoaded for a fresh one. A fresh
  /// restore that meets a bad chunk loses nothing: stop-the-world releases
  /// what it created (the session is empty again; a restored process is
  /// killed, the image untouched); concurrent refuses the app's calls that
  /// need a buffer that never loaded. An in-place restore has the live
  /// session's state to lose and cannot roll back without a copy of all its
  /// device memory, so it checks everything first.
  kAuto,
  kFirst,
  kAsLoaded,
};
const char* VerifyName(Verify v);
/// "auto", "first", "as-loaded" (VerifyName's inverse); false otherwise.
bool ParseVerify(const std::string& name, Verify* out);
/// Whether a restore verifies the whole image before touching the session.
bool VerifiesFirst(Verify v, bool in_place);

struct RestoreOptions {
  std::string dir;
  /// true: buffers start ABSENT and load in the background in first-use
  /// order while the session runs; false: stop-the-world.
  bool concurrent = false;
  /// Concurrent only: called on the caller's thread once the session may
  /// run again (the control task finished, buffers still loading). A
  /// whole-process restore opens its session's gate here.
  std::function<void()> on_resumed;
  /// When the image's checksums are checked (Verify above).
  Verify verify = Verify::kAuto;
  /// A job restore (docs/protocols.md "Job checkpoints"): the image's NCCL
  /// communicators are formed again by all the job's ranks, under unique
  /// ids this number (the same for every rank of one job restore, nonzero)
  /// makes new. 0: an image holding communicators is refused (one rank of a
  /// job comes back only with the others).
  std::uint64_t comm_generation = 0;
  /// Image GPU -> this phosd's GPU (phos restore --device-map); a GPU not
  /// listed stays.
  std::map<int, int> device_map;
};

struct RestoreResult {
  std::string dir;
  bool concurrent = false;
  std::uint64_t stall_us = 0;            // the app could not run at all
  std::uint64_t total_us = 0;            // until every buffer was present
  std::uint64_t bytes = 0;
  std::uint32_t buffers = 0, allocated = 0, freed = 0, globals = 0;
  std::uint64_t source_pid = 0;
  OperationCounters counters;
};

/// In-place restore (roll the session back). Verifies every checksum of
/// the image before touching the session.
Status Restore(session::Session& session, const RestoreOptions& options, Progress* progress,
               RestoreResult* result);

}  // namespace phos::engine
