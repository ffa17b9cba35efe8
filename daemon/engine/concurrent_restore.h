// Concurrent in-place restore (docs/protocols.md "Concurrent restore"): the
// session resumes at once with every buffer ABSENT; a loader fills them in
// first-use order while calls touching an absent buffer wait for it.
//
// Two restores share this machinery (DriveConcurrentRestore drives both,
// through DriveSoftOperation like every soft operation, soft_operation.h):
// the in-place one (RunConcurrentRestore: roll a live session back) and the
// fresh one (fresh_restore.h, RestoreFresh with options.concurrent: a new,
// empty session gets the app's handles recreated first). They differ only
// in how the image's buffers come to be mapped at their recorded
// addresses (the ControlStep that Start() runs); from StartMapped() on
// they are the same.
//
// Steps:
//   Prepare     caller's thread: RestoreTask::Prepare — open the image; in
//               place (by default, engine::Verify) verify every checksum
//               BEFORE the session is touched.
//   control     (the stall, RestoreResult::stall_us) the ControlStep maps
//               the image's buffers, then calls StartMapped(). In place
//               that is StartInPlace(): RestoreTask::MapBuffers (synchronise,
//               CheckFits, free the buffers not in the image, allocate the
//               missing ones at their addresses), then StartMapped().
//   StartMapped() the session already holds every image buffer at its
//               recorded address (and every global): load the module
//               globals synchronously (small), mark every image buffer
//               ABSENT, create the loader's stream and the twin validator
//               (after the mapping: their memory cannot take an address the
//               image needs), install into the EngineHook. The session
//               resumes when the control task returns.
//   Work()      caller's thread: the loader (LoadAll). Order: urgent buffers (a call
//               waits for them) first, then the image's first-use order
//               (SessionSnapshot::first_use; empty for stop-mode images),
//               then the rest by ascending address. ABSENT -> LOADING ->
//               H2D chunk by chunk (the image's chunks, 4 MiB by default;
//               ChunkLoader: each verified as it is read, two reads ahead)
//               on its own stream, yielding to app copies (CopyEngineGate)
//               -> PRESENT, waiters notified. Between two chunks a buffer
//               nobody waits for is paused (back to ABSENT, resumed at that
//               chunk; chunks read ahead are dropped) when a call waits for
//               another absent buffer: a waiting call waits for at most one
//               chunk of something else plus the two reads in flight.
//   Finish()    control task once every buffer is PRESENT: uninstall, drop
//               the validator, stream and gate. total_us ends when the
//               loader returned.
//               When the loader failed instead (a chunk that does
//               not match its checksum, a read or copy error; not the
//               session ending): drop the validator, stream and gate but
//               stay installed, so that from then on a call touching a
//               buffer that never became PRESENT (or one whose access set
//               is unknown) is refused with the loader's error instead of
//               running on bytes that were never restored. Calls touching
//               only PRESENT buffers still run. It stays until the session
//               ends, another operation is installed, or a cudaDeviceReset.
// Admission (consumer thread, Admit): a call whose ranges (read or write)
// touch an ABSENT or LOADING buffer marks those urgent and waits until they
// are PRESENT (counters.absent_waits). A call with no access set (kUnknown)
// and an unvalidatable kernel (no PTX; restore uses --unvalidated=stop
// semantics: counters.unvalidated_kernels) wait until every buffer is
// PRESENT. cudaFree of an absent buffer simply waits for it.
// Validation: a speculated kernel admitted while some buffer is still not
// PRESENT runs as its twin with check_reads (every range of the call
// allowed), and the consumer thread waits for the twin's report right after
// the launch (TwinValidator::Drain(true)) — the launch becomes synchronous
// for the restore window only. A miss (load or store) in a buffer that was
// not PRESENT when the twin launched, or a report that overflowed while
// such buffers existed, rolls the restore back: every remaining buffer is
// loaded while the consumer waits (stop-the-world from there on) and the
// original kernel is launched once more (counters.restore_rollbacks).
// LIMITATION: the kernel already ran once on partly unloaded input; the
// re-run is correct for kernels whose outputs do not depend on their own
// previous outputs (no in-place accumulation such as y += a*x into a buffer
// it reads back); an in-place kernel is applied twice to its own outputs.
//
// Locks: the soft-operation rule (soft_operation.h): table_.mu guards the
// table and every member below marked so (the urgent queue, the loader's
// position, present stamps, the order log, the load error); the loader
// touches the context only through UseContext.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/chunk_loader.h"
#include "engine/engine_hook.h"
#include "engine/operations.h"
#include "engine/restore_task.h"
#include "engine/soft_operation.h"
#include "engine/tracked_buffers.h"
#include "engine/twin_validator.h"

namespace phos::engine {

class ConcurrentRestore;

Status RunConcurrentRestore(session::Session& session, EngineHook* hook, const RestoreOptions& options,
                            Progress* progress, RestoreResult* result);

/// Observation points for tests (all optional).
struct ConcurrentRestoreHooks {
  /// Loader thread, no lock held, after buffer `address` became PRESENT.
  /// Tests record the load order here or slow the loader down.
  std::function<void(std::uint64_t address)> loaded;
};

/// The control task of a concurrent restore (consumer thread, the stall):
/// maps every buffer of the image (op.task()) at its recorded address, then
/// calls op.StartMapped(st, hook). On failure it leaves the session as its
/// error says (in place: unchanged or undefined; fresh: empty again).
using ControlStep = std::function<Status(session::SessionState& st, ConcurrentRestore& op)>;

/// The driver both concurrent restores share. `task`: prepared (the image
/// opened; verified first where options.verify says so). Runs `step` as a control task, then the
/// loader on the caller's thread, then Finish (Fail when the loader failed)
/// as a control task. result: the task's
/// result plus concurrent, stall_us (the control task), total_us (from
/// `t0` to the last buffer present), counters. `load_order` (optional):
/// the addresses in the order they became PRESENT.
Status DriveConcurrentRestore(session::Session& session, EngineHook* hook, std::unique_ptr<RestoreTask> task,
                              const ControlStep& step, const RestoreOptions& options, Progress* progress,
                              RestoreResult* result, const ConcurrentRestoreHooks& hooks,
                              std::vector<std::uint64_t>* load_order, std::chrono::steady_clock::time_point t0);

/// RunConcurrentRestore with test hooks; `load_order` (optional) receives
/// the addresses in the order the loader made them PRESENT.
Status RunConcurrentRestoreWithHooks(session::Session& session, EngineHook* hook, const RestoreOptions& options,
                                     Progress* progress, RestoreResult* result, const ConcurrentRestoreHooks& hooks,
                                     std::vector<std::uint64_t>* load_order = nullptr);

class ConcurrentRestore final : public SoftOperation {
 public:
  enum State : std::uint8_t { kAbsent, kLoading, kPresent };

  /// `task`: prepared (RestoreTask::Prepare). Owned: the hook may keep the
  /// operation after its driver gave up on the session. `step`: what
  /// Start() runs (StartInPlace, or the fresh restore's recreation).
  ConcurrentRestore(std::unique_ptr<RestoreTask> task, Progress* progress, ConcurrentRestoreHooks hooks,
                    ControlStep step);
  ~ConcurrentRestore() override;

  // SoftOperation.
  /// Control task: the ControlStep (which ends in StartMapped).
  Status Start(session::SessionState& st, EngineHook* hook) override;
  /// Caller's thread: the loader (LoadAll). Unavailable when the session ended.
  Status Work() override;
  /// Control task: uninstall and drop device state; after a failed load
  /// (load_failed() when Work returned) drop device state but stay
  /// installed, refusing calls on unloaded buffers (file comment).
  Status Finish(session::SessionState& st, EngineHook* hook, const Status& worked) override;

  /// Control task, in place: RestoreTask::MapBuffers, then StartMapped.
  /// Failures after the first change are RestoreTask::Undefined.
  Status StartInPlace(session::SessionState& st, EngineHook* hook);
  /// Control task, once every image buffer and global is mapped at its
  /// recorded address. On success the operation is installed (or, when the
  /// loader's stream cannot be made, everything was loaded synchronously
  /// and nothing is installed). A failure (a global's or, in the fallback,
  /// a buffer's load) leaves the operation uninstalled and the device
  /// state partly loaded; the caller says what that means.
  Status StartMapped(session::SessionState& st, EngineHook* hook);
  /// Any thread: LoadAll failed for another reason than the session ending.
  bool load_failed();

  RestoreTask& task() { return *task_; }
  /// Any thread.
  std::vector<std::uint64_t> load_order();

  // Operation (consumer thread).
  Status Admit(const session::CallView& call) override;

 private:
  // SoftOperation: a speculated kernel runs as its read-checked twin while
  // a buffer is not PRESENT; a miss rolls back (file comment).
  bool WantsTwinLocked(std::uint64_t* mark) override;
  void NoTwinLocked(std::unique_lock<std::mutex>& lock) override;
  bool AfterTwin(const session::CallView& call, std::uint64_t mark) override;

  Status LoadAll();
  /// mu held: the loader's next buffer (urgent first), or null.
  TrackedBuffer* NextToLoad();
  /// Loader: one buffer's chunks H2D, from where a paused load stopped.
  /// Between two chunks it pauses (*paused, OK) when a call waits for
  /// another, absent buffer and this one is not wanted urgently. mu NOT
  /// held.
  Status LoadOne(const TrackedBuffer& b, ChunkLoader& loader, bool* paused);
  /// Loader, mu NOT held: an absent urgent buffer waits and `b` is not urgent.
  bool ShouldPause(const TrackedBuffer& b);
  /// mu held: waits until every buffer in `wanted` is PRESENT (marks the
  /// absent ones urgent first). Returns true if it waited.
  bool WaitPresent(std::unique_lock<std::mutex>& lock, const std::vector<TrackedBuffer*>& wanted);
  /// mu held: waits until every buffer is PRESENT.
  bool WaitAllPresent(std::unique_lock<std::mutex>& lock);
  /// mu held, load_error_ set: the refusal of a call touching a buffer that
  /// is not PRESENT (or of unknown access), else OK.
  Status RefuseIfUnloaded(const session::CallView& call);
  bool all_present() const { return present_ == table_.by_address.size(); }

  // The image: mapped and its globals loaded by Start (consumer thread),
  // then read chunk by chunk by the loader only; the result read after the
  // driver ended. Never used by two threads at once.
  const std::unique_ptr<RestoreTask> task_;
  const ConcurrentRestoreHooks hooks_;         // immutable; `loaded` runs on the loader, no lock held
  const ControlStep step_;                     // immutable; run by Start
  std::uint64_t total_bytes_ = 0;              // consumer thread, written by StartMapped only
  bool failed_ = false;                        // load_failed() when Work returned (the driver's thread; Finish
                                               // reads it after: posting the control task orders them)

  // Guarded by table_.mu:
  std::size_t present_ = 0;                    // buffers PRESENT
  std::deque<std::uint64_t> urgent_;           // addresses calls wait for, oldest first
  std::vector<std::uint64_t> order_;           // first-use order, then ascending address
  std::size_t next_ = 0;                       // loader's position in order_
  std::unordered_map<std::uint64_t, std::uint64_t> resume_at_;  // address -> first chunk a paused load left
  std::unordered_map<std::uint64_t, std::uint64_t> present_stamp_;  // address -> value of present_ once PRESENT
  std::vector<std::uint64_t> load_order_;      // addresses as they became PRESENT
  Status load_error_;                          // LoadAll's failure (not a cancel): refuse calls on unloaded buffers
};

}  // namespace phos::engine
