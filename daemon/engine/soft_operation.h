// The skeleton every soft operation shares (docs/protocols.md "Code: one
// skeleton"): soft copy-on-write (cow_checkpoint.h), soft recopy
// (recopy_checkpoint.h) and concurrent restore (concurrent_restore.h) each
// derive from SoftOperation and keep only what their protocol says
// differently (what a write to a tracked buffer does, what the worker does,
// the order it takes buffers in). DriveSoftOperation is the one run
// sequence all three go through.
//
// What lives here, once:
//   - the table of tracked buffers (TrackedBuffers) and THE locking rule
//     below;
//   - the worker's context fence (ctx_use_mu_ + fenced_): the worker (the
//     copier of a checkpoint, the loader of a restore) runs on the driver's
//     thread and touches the session's context only inside UseContext();
//     DropDeviceState() fences it out for good before the engine's device
//     state is freed;
//   - the worker's stream, the copy-engine gate (CopyEngineGate) and the
//     twin validator, created by OpenWorker()/InstallOperation() in the
//     Start control task, destroyed by DropDeviceState();
//   - the admission wait (WaitLocked: blocks on the table's condition
//     variable, never polls) and the time calls spent blocked in it;
//   - Cancel (the session ends), the counters, first-use recording, and
//     LaunchInstead (a speculated kernel runs as its twin; the protocol
//     supplies whether a twin is wanted and what follows its launch).
//
// THE LOCKING RULE (one for all three protocols):
//   table_.mu guards the table (the map and every field of every
//   TrackedBuffer — Start's fill included; the one exception is recopy's
//   `host`/`host_xxh3`/`copy_id`, owned by the copier while the buffer is
//   COPYING and by Final/WriteImage after it, see recopy_checkpoint.h),
//   abandoned_, cancelled_, counters_, next_first_use_, and every member a
//   protocol marks "guarded by table_.mu". table_.cv is notified on every
//   change a waiter may be waiting for. mu is held for state changes and
//   non-blocking backend enqueues (StreamWaitEvent, RecordEvent, a D2D
//   MemcpyAsync) only, never across a disk wait nor, on the normal paths,
//   a device wait (rare paths that still do, left as they were: cow
//   allocating a shadow, and synchronising a call's stream after a failed
//   shadow enqueue; recopy's Start synchronising a stream whose write event
//   could not be recorded).
//   ctx_use_mu_ is held by the worker for each use of the context (one
//   chunk, one StreamWaitEvent, one Drain), and by the consumer thread to
//   set fenced_ (DropDeviceState) or to wait out a chunk in flight (recopy's
//   cudaFree). Order: table_.mu before ctx_use_mu_; nobody takes table_.mu
//   while holding ctx_use_mu_.
//   Consumer-thread only (control tasks and the Operation methods): st_,
//   twins_, device_state_dropped_, and the creation/destruction of
//   validator_, stream_ and the gate. ctx_, home_device_ and other_lanes_'
//   entries are written in Start, before the worker runs (the control
//   task's future orders it); their streams are destroyed by
//   DropDeviceState after the fence. other_validators_ is changed by the
//   consumer thread under ctx_use_mu_ (the worker reads it under it).
//
// SEVERAL GPUS (soft copy-on-write of a process that uses more than one):
// the worker has a stream on each GPU it copies from (a Lane: the home one
// is ctx_/stream_), a call runs in its own context (CallView::ctx: the
// shadow D2D and its event go there), a kernel in another context runs as
// a twin of a validator in that context, and an event of one context that
// a stream of another must follow is waited for on the host (the backend
// has no cross-context wait; the session orders app streams so too). Each
// GPU has its copy-engine gate: the worker yields to the app's host copies
// on the GPU it copies on.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "common/status.h"
#include "engine/copy_engine_gate.h"
#include "engine/engine_hook.h"
#include "engine/operation_util.h"
#include "engine/operations.h"
#include "engine/tracked_buffers.h"
#include "engine/twin_validator.h"
#include "session/session.h"

namespace phos::engine {

class SoftOperation : public Operation, public std::enable_shared_from_this<SoftOperation> {
 public:
  ~SoftOperation() override;

  // The three steps DriveSoftOperation runs, in this order.
  /// Control task (the stall): track the buffers, OpenWorker(),
  /// InstallOperation(). On failure the driver removes and cancels the
  /// operation (whatever Start had created is freed).
  virtual Status Start(session::SessionState& st, EngineHook* hook) = 0;
  /// The driver's thread: the copier or loader.
  virtual Status Work() = 0;
  /// Control task after Work, whatever it returned (`worked`): end the
  /// operation (uninstall, drop the device state) as the protocol says.
  virtual Status Finish(session::SessionState& st, EngineHook* hook, const Status& worked) = 0;

  /// Counters so far (any thread).
  OperationCounters counters();
  /// Microseconds calls spent blocked in admission (any thread).
  std::uint64_t blocked_us() const { return blocked_us_.load(std::memory_order_relaxed); }

  // Operation (consumer thread).
  bool LaunchInstead(const session::CallView& call, Status* result) final;
  void Admitted(const session::CallView& call, const Status& result) final;
  void Cancel(session::SessionState& st) final;

 protected:
  /// Leftovers of a protocol in the context, handed to DropDeviceState.
  struct DeviceLeftovers {
    // Each in its context (null: the home context ctx_).
    struct Event {
      backend::Context* ctx = nullptr;
      backend::EventHandle event = 0;
    };
    struct Allocation {
      backend::Context* ctx = nullptr;
      backend::DevicePtr ptr = 0;
    };
    struct PoolRange {
      int device = 0;  // phosd's GPU of the reserve it came from
      backend::DevicePtr ptr = 0;
    };
    std::vector<Event> events_to_wait;      // synchronised, then destroyed (cow: a shadow's D2D)
    std::vector<Event> events;              // destroyed
    std::vector<Allocation> allocations;    // freed last (cow: shadows)
    ShadowPool* pool = nullptr;             // cow: phosd's reserve, if pool_ranges
    std::vector<PoolRange> pool_ranges;     // given back to `pool` last (cow: its shadows)
  };
  /// The worker's stream on one GPU, and the copy-engine gate of that GPU
  /// (null when it could not be made: no yields there).
  struct Lane {
    backend::Context* ctx = nullptr;
    backend::StreamHandle stream = 0;
    CopyEngineGate* gate = nullptr;
  };

  /// `what` names the operation in messages ("checkpoint", "restore"),
  /// `worker` its worker ("copier", "loader"); twins launched by
  /// LaunchInstead check reads too when `check_reads`, and `twin_policy`
  /// says in the one warning per kernel what happens to one without a twin.
  SoftOperation(Progress* progress, const char* what, const char* worker, bool check_reads, const char* twin_policy);

  // ---- Start (control task, consumer thread)
  /// Records the session's context (ctx_, st_).
  void Bind(session::SessionState& st);
  /// Adds `buffers` to the table, under table_.mu like every access.
  void Track(std::vector<TrackedBuffer> buffers);
  /// The worker's stream (its failure is returned, stream_ stays 0), then
  /// the copy-engine gate (its failure only warns: no yields).
  Status OpenWorker();
  /// After OpenWorker: a worker stream on each GPU of `devices` other than
  /// the home one, in the session's context there (its failure is
  /// returned; what was made is destroyed by DropDeviceState).
  Status OpenOtherLanes(const session::SessionState& st, const std::set<int>& devices);
  /// Creates the twin validator and installs the operation into `hook`.
  void InstallOperation(EngineHook* hook);

  // ---- admission (consumer thread, table_.mu held through `lock`)
  /// Blocks until `ready()` or the operation is abandoned (table_.cv: every
  /// change a waiter needs notifies it; no polling). True when it waited.
  template <typename Pred>
  bool WaitLocked(std::unique_lock<std::mutex>& lock, Pred ready) {
    auto done = [&] { return abandoned_ || ready(); };
    if (done()) return false;
    table_.cv.wait(lock, done);
    return true;
  }
  /// Adds the time since `t0` to the calls' blocked time.
  void AddBlocked(Clock::time_point t0) { blocked_us_.fetch_add(MicrosSince(t0), std::memory_order_relaxed); }
  /// mu held: numbers the tracked buffers the call touches by first use.
  void NoteFirstUseLocked(const session::CallView& call);
  /// Abandons the operation (no more waiting: every waiter wakes).
  void Abandon();

  // ---- hooks of LaunchInstead (consumer thread)
  /// mu held, not abandoned: false when no twin is needed now; `*mark` is
  /// handed to AfterTwin (restore: how many buffers were present).
  virtual bool WantsTwinLocked(std::uint64_t* mark) {
    (void)mark;
    return true;
  }
  /// mu held: a kernel without a twin is about to run as it is
  /// (unvalidated_kernels was counted).
  virtual void NoTwinLocked(std::unique_lock<std::mutex>& lock) { (void)lock; }
  /// mu held: the twin was launched under `ticket` (twin_launches counted).
  virtual void TwinLaunchedLocked(std::uint64_t ticket) { (void)ticket; }
  /// mu NOT held, after the twin launched: LaunchInstead's answer (true:
  /// the twin ran instead; false: the handler launches the kernel itself).
  virtual bool AfterTwin(const session::CallView& call, std::uint64_t mark) {
    (void)call;
    (void)mark;
    return true;
  }
  /// After an admitted call was enqueued, unless the device state was
  /// dropped (the gate has seen the call already).
  virtual void AdmittedCall(const session::CallView& call, const Status& result) {
    (void)call;
    (void)result;
  }

  // ---- several GPUs
  /// The worker's lane on phosd's GPU `device` (the home lane for the home
  /// GPU and for one Start opened none on).
  Lane LaneOf(int device);
  /// Worker thread, inside UseContext, before a chunk's copy on `lane`:
  /// lets an app copy admitted on that GPU since the last chunk go first.
  static void YieldToAppCopies(const Lane& lane) {
    if (lane.gate != nullptr) lane.gate->YieldIfNeeded(lane.ctx);
  }
  /// The context a call runs in (its own, else the home one).
  backend::Context* ContextOfCall(const session::CallView& call) const { return call.ctx != nullptr ? call.ctx : ctx_; }
  /// Orders `stream` of `stream_ctx` after `event` of `event_ctx`: an
  /// enqueue when both are one context, else a host wait for the event
  /// (the backend has no cross-context wait).
  static Status WaitEventOn(backend::Context* stream_ctx, backend::StreamHandle stream, backend::Context* event_ctx,
                            backend::EventHandle event);
  /// Worker thread inside UseContext, or the consumer thread: collects the
  /// reports of every validator (home and other contexts').
  Status DrainValidators(bool wait, std::vector<TwinValidator::Collected>* reports);

  // ---- the worker's use of the context
  /// Worker thread: runs f() under ctx_use_mu_ unless the worker is fenced
  /// out; false when fenced (f did not run).
  template <typename F>
  bool UseContext(F&& f) {
    std::lock_guard<std::mutex> use(ctx_use_mu_);
    if (fenced_.load()) return false;
    f();
    return true;
  }

  // ---- end (consumer thread)
  /// Fences the worker out of the context for good, then destroys the
  /// validator, the worker's stream (after its queued work), the
  /// protocol's leftovers (DetachLeftoversLocked) and the gate. Finish,
  /// Cancel, or before a cudaDeviceReset replaces the context. Idempotent.
  void DropDeviceState();
  /// mu held, inside DropDeviceState after the fence: hands over (and
  /// forgets) what the protocol holds in the context.
  virtual void DetachLeftoversLocked(DeviceLeftovers* out) { (void)out; }

  Progress* const progress_;                     // not owned; thread-safe (its own lock, progress.h)
  const char* const what_;
  const char* const worker_;
  backend::Context* ctx_ = nullptr;              // the session's (home) context at Start (written once, before the worker runs)
  int home_device_ = 0;                          // phosd's GPU of ctx_ (written with it)
  std::map<int, Lane> other_lanes_;              // worker streams on the other GPUs (file comment)
  // Their copy-engine gates: inserted by Start under table_.mu (counters()
  // reads their yields under it), never erased before the destructor
  // (DropDeviceState destroys their events).
  std::map<int, std::unique_ptr<CopyEngineGate>> other_gates_;
  std::map<backend::Context*, std::unique_ptr<TwinValidator>> other_validators_;  // by context (file comment)
  const session::SessionState* st_ = nullptr;    // consumer thread only (LaunchInstead)
  backend::StreamHandle stream_ = 0;             // the worker's; set by Start (0: none), destroyed by DropDeviceState after the fence
  std::unique_ptr<TwinValidator> validator_;     // created/destroyed on the consumer thread; null when unavailable or dropped
  CopyEngineGate gate_;                          // its own threading (copy_engine_gate.h)
  bool device_state_dropped_ = false;            // consumer thread only

  TrackedBuffers table_;                         // the table; its mu is THE lock (file comment)
  // Guarded by table_.mu:
  bool abandoned_ = false;                       // cancelled, failed or ended: admit everything, nobody waits
  bool cancelled_ = false;                       // the session ended (Cancel)
  OperationCounters counters_;                   // copier_yields comes from gate_
  std::uint32_t next_first_use_ = 0;             // NoteFirstUseLocked's numbering

  std::mutex ctx_use_mu_;                        // the worker's use of the context (file comment)
  std::atomic<bool> fenced_{false};              // set under ctx_use_mu_: the worker must not touch the context

 private:
  const bool check_reads_;
  const char* const twin_policy_;
  TwinLauncher twins_;                           // consumer thread only
  std::atomic<std::uint64_t> blocked_us_{0};     // any thread (relaxed sum)
};

/// What DriveSoftOperation measured.
struct SoftRun {
  bool started = false;               // Start succeeded (Work and Finish ran)
  bool worked = false;                // Work returned OK
  std::uint64_t start_us = 0;         // Start's control task, from posting it to its end
  std::uint64_t start_task_us = 0;    // ... Start alone, on the consumer thread
  std::uint64_t finish_us = 0;        // Finish's control task, from posting it to its end
  Clock::time_point worked_at{};      // when Work returned
};

/// The one run sequence of a soft operation (the driver's thread, never
/// the session's consumer thread):
///   1. Start as a control task (the app's calls wait meanwhile); when it
///      fails, a second control task removes and cancels the operation.
///   2. `on_started` (optional), then Work on this thread while the app runs.
///   3. Finish as a control task, whatever Work returned.
/// Returns the first failure of the three — an Unavailable one said as
/// SessionGone(…, `outcome`) — else OK. `run` is filled either way.
Status DriveSoftOperation(session::Session& session, EngineHook* hook, SoftOperation& op,
                          const std::function<void()>& on_started, const std::string& outcome, SoftRun* run);

}  // namespace phos::engine
