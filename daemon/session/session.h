// One app process's session in phosd: its ring, its Context, its buffer map
// and handle maps, and the consumer thread that executes its calls.
//
// Lifetime: SessionServer creates a Session for each accepted connection
// and calls Start(). The consumer thread runs until the ring closes (the
// app closed it, the app died — RingServer's liveness check or the
// server's POLLHUP calling RequestStop() — or phosd shuts down), then
// tears everything down ON THAT THREAD: synchronise, free every buffer,
// destroy every handle, drop the context, unpublish from the registry; and
// finally sets finished(). The server then Join()s and destroys it (which
// unmaps the region and closes the socket).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <set>
#include <mutex>
#include <string>
#include <thread>

#include "backend/backend.h"
#include "backend/context_pool.h"
#include "ring/channel.h"
#include "ring/ring.h"
#include "session/call_handlers.h"
#include "session/executor.h"

namespace phos::session {

/// What `phos ps` shows about a session (daemon/server turns it into a
/// v1::SessionInfo).
struct SessionSummary {
  uint64_t session_id = 0;
  int pid = 0;
  std::string command;
  int device = 0;
  std::vector<int> other_devices;  // further GPUs it has a context on, ascending
  uint64_t device_memory_bytes = 0;
  uint32_t buffer_count = 0;
  enum class State { kRunning, kExited } state = State::kRunning;
  uint64_t started_unix_ms = 0;
  // Counts of admitted calls by access kind (executor.h), live: read when
  // `phos ps` asks, so the session does not republish on every call.
  std::shared_ptr<const AccessStats> access_stats;
};

/// How sessions report themselves. Called on consumer threads (any
/// number at once): the callee locks (SessionRegistry does).
struct SessionCallbacks {
  std::function<void(const SessionSummary&)> publish;  // added or changed
  std::function<void(uint64_t session_id)> unpublish;  // gone
};

class Session {
 public:
  Session(uint64_t id, std::unique_ptr<ring::ChannelConnection> conn,
          std::unique_ptr<ring::SharedRegion> region, backend::Backend* backend,
          std::unique_ptr<AdmissionHook> hook, SessionCallbacks callbacks);
  ~Session();  // Joins.
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  /// Takes the session's first context now, on the calling thread, so the
  /// caller sees a failure (Adopt: the restore RPC wants the error). Without
  /// it the consumer takes the context as its first step, and the data
  /// plane's poll thread, which accepts apps, never waits on the driver.
  /// Before Start().
  Status PrepareContext();
  /// Starts the consumer thread (which takes a context first unless
  /// PrepareContext did).
  Status Start();
  /// Closes the ring: the app's waiters and the consumer wake; the consumer
  /// tears down. The work the app queued is abandoned (Context::Abandon):
  /// nobody will read its results. Any thread; idempotent.
  void RequestStop();
  /// Waits for the consumer thread (after it tore down).
  void Join();

  uint64_t id() const { return id_; }
  int fd() const { return conn_->fd(); }
  pid_t pid() const { return conn_->peer_pid(); }
  /// The app's NUL-separated argv from its hello (immutable).
  const std::string& cmdline() const { return conn_->hello().cmdline; }
  bool finished() const { return finished_.load(std::memory_order_acquire); }
  bool stop_requested() const { return stop_requested_.load(std::memory_order_acquire); }
  /// What the consumer is executing now and since when, for the slow-call
  /// log and the shutdown report: `*what` = "cudaStreamSynchronize", "a
  /// control task", ...; `*started_ns` = steady-clock ns when it began (an
  /// identity: a new call has a new start). False when idle. Any thread.
  bool BusyCall(std::string* what, int64_t* started_ns) const;
  /// Called once the consumer finished (used by the server to wake up).
  void set_on_finished(std::function<void()> f) { on_finished_ = std::move(f); }
  /// Where the session's contexts come from (its first one, and the fresh
  /// one cudaDeviceReset swaps in); null = backend->CreateContext. Set
  /// before Start(); the pool must outlive the session.
  void set_context_pool(backend::ContextPool* pool) { pool_ = pool; }
  /// The kernel-signature cache module loads use (not owned; must outlive
  /// the session; null = a memory-only one per load). Before Start().
  void set_signature_cache(signature::SignatureCache* cache) { state_.signature_cache = cache; }
  /// phosd's book of NCCL ranks (not owned; must outlive the session).
  /// Before Start().
  void set_comm_book(CommunicatorBook* book) { state_.comm_book = book; }
  /// Start() with the consumer held: it runs control tasks but takes no
  /// call off the ring until OpenGate(). A session adopted for a restored
  /// process (whole-process restore) is gated so the GPU state is back
  /// (a control task) before the first call it finds in the restored ring
  /// executes. Set before Start().
  void set_start_gated() { gate_open_ = false; }
  /// Lets a gated consumer take calls. Any thread; idempotent.
  void OpenGate();
  /// Holds the consumer again after the current control task: it runs
  /// control tasks but takes no call until OpenGate(). Consumer thread only
  /// (from a control task): live migration keeps the frozen app's posted
  /// calls in the ring while its state travels (server/migration.h).
  void CloseGate();
  /// The ring region (its memfd and geometry): the whole-process checkpoint
  /// finds the app's mapping of it. Immutable after construction.
  const ring::SharedRegion& region() const { return *region_; }

  /// A function run ON the consumer thread between two calls (the C/R
  /// engine's control tasks: stop-the-world checkpoint, in-place restore).
  /// While it runs no call of this session executes: the session is
  /// quiesced by construction (calls the app posts meanwhile wait in the
  /// ring). It may change SessionState; the Session republishes afterwards.
  using ControlFn = std::function<Status(SessionState&)>;
  /// Queues `fn` and interrupts the consumer's ring wait. The future is
  /// set with fn's Status, or Unavailable if the session ends (or already
  /// ended) before fn ran. Any thread except the consumer itself.
  std::future<Status> PostControl(ControlFn fn);
  /// PostControl + wait.
  Status RunControl(ControlFn fn);

  /// The session's admission hook (set at construction, never replaced):
  /// the C/R engine finds its per-session state through it. Any thread.
  AdmissionHook* hook() const { return executor_.hook(); }
  /// Calls admitted so far (any thread; tests wait for a count).
  uint64_t admitted() const { return executor_.admitted(); }

 private:
  struct ControlTask {
    ControlFn fn;
    std::promise<Status> done;
  };
  void Run();
  void Publish();
  /// Publish when `phos ps` would show something else: the buffers changed,
  /// the session moved, or it took a context on one more GPU (contexts are
  /// only ever added, so a count tells).
  void PublishIfChanged();
  /// A fresh context on `device`, from pool_ when there is one.
  Status NewContext(int device, std::unique_ptr<backend::Context>* out);
  /// Consumer thread: runs every queued control task.
  void RunControlTasks();
  /// Consumer thread, at teardown: closes the queue and fails what is left.
  void FailControlTasks();

  const uint64_t id_;
  // Immutable after construction; the region stays mapped until ~Session.
  std::unique_ptr<ring::ChannelConnection> conn_;
  std::unique_ptr<ring::SharedRegion> region_;
  backend::Backend* backend_;
  backend::ContextPool* pool_ = nullptr;  // set before Start, then read-only
  SessionCallbacks callbacks_;
  std::function<void()> on_finished_;  // set before Start()
  SessionSummary summary_;              // consumer thread only (after Start)
  /// Api ids whose refusal (cudaErrorNotSupported) this session has logged:
  /// each is logged once, with phosd's reason. Consumer thread only.
  std::set<uint32_t> refused_apis_;

  // Consumer-thread state (created in Start, used by the thread only,
  // destroyed after Join). ctx_ is replaced (device reset) and dropped
  // (teardown) by the consumer under ctx_mu_, which RequestStop holds to
  // abandon it from another thread; the consumer reads it without the lock.
  std::mutex ctx_mu_;
  std::unique_ptr<backend::Context> ctx_;
  // Contexts on the process's other GPUs (SessionState::other_contexts),
  // same rules as ctx_: added and dropped by the consumer under ctx_mu_.
  std::map<int, std::unique_ptr<backend::Context>> other_ctx_;
  /// Abandon() on ctx_ and every other context. Caller holds ctx_mu_.
  void AbandonContextsLocked();
  bool in_control_task_ = false;  // guarded by ctx_mu_: RequestStop then leaves the abandoning to the task's end
  /// Consumer thread: marks a control task running or done (a stop
  /// requested meanwhile abandons the context when it is done).
  void SetInControlTask(bool running);
  std::unique_ptr<ring::RingServer> ring_;
  Executor executor_;
  SessionState state_;

  // Control queue. ctl_mu_ guards ctl_queue_ and ctl_closed_ (held only to
  // push/pop, never while a task runs). ctl_pending_ mirrors "queue not
  // empty" so the consumer checks the queue with one atomic load per call.
  std::mutex ctl_mu_;
  std::deque<std::unique_ptr<ControlTask>> ctl_queue_;
  bool ctl_closed_ = false;  // set by the consumer at teardown
  std::atomic<bool> ctl_pending_{false};

  // Start gate (set_start_gated / OpenGate). gate_mu_ guards gate_open_;
  // gate_cv_ wakes the held consumer (OpenGate, PostControl, RequestStop).
  std::mutex gate_mu_;
  std::condition_variable gate_cv_;
  bool gate_open_ = true;
  /// Consumer thread: runs control tasks until the gate opens or a stop.
  void WaitGate();

  // The call the consumer executes (BusyCall): written by the consumer only,
  // read by any thread. busy_since_ns_ == 0 when idle. Two relaxed atomics:
  // a reader may pair an api with the neighbouring call's start for an
  // instant, which only affects a log line.
  static constexpr uint32_t kBusyControlTask = 0xffffffffu;
  static constexpr uint32_t kBusyContext = 0xfffffffeu;
  std::atomic<uint32_t> busy_api_{0};
  std::atomic<int64_t> busy_since_ns_{0};
  void SetBusy(uint32_t api);
  void SetIdle() { busy_since_ns_.store(0, std::memory_order_relaxed); }

  std::thread thread_;
  std::atomic<bool> stop_requested_{false};
  std::atomic<bool> finished_{false};
};

}  // namespace phos::session
