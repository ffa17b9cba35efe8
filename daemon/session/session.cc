#include "session/session.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <string>

#include "common/clock_util.h"
#include "protocol/calls.h"

namespace phos::session {

namespace {
std::string CommandOf(const std::string& cmdline) {
  std::string s = cmdline;
  for (char& c : s) {
    if (c == '\0') c = ' ';
  }
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}
/// The phos::Status of a wire code (ToWire maps it back to the same code
/// for every code a handler produces except kInvalidDevice and kNotFound,
/// which come back as kInvalidValue / kInvalidResourceHandle).
Status StatusOfWireCode(wire::WireStatus w, const std::string& m) {
  using W = wire::WireStatus;
  switch (w) {
    case W::kSuccess: return Status::Ok();
    case W::kMemoryAllocation: return Status::OutOfMemory(m);
    case W::kNotSupported: return Status::NotSupported(m);
    case W::kNotReady: return Status::NotReady(m);
    case W::kDaemonUnavailable: return Status::Unavailable(m);
    case W::kInvalidImage: return Status::Corruption(m);
    case W::kInvalidResourceHandle:
    case W::kNotFound: return Status::NotFound(m);
    case W::kIllegalAddress:
      return Status::InvalidArgument(m.find("illegal address") == std::string::npos ? "illegal address: " + m : m);
    case W::kUnknown:
    case W::kLaunchFailure: return Status::Internal(m);
    default: return Status::InvalidArgument(m);
  }
}

/// A posted call's wire failure as the phos::Status the session keeps
/// until the next synchronising call. The exact number travels too
/// (api_error): ToWire gives it back for those the app must see as they are
/// (no kernel image for this device, a cooperative grid too large, kernel
/// faults), which the code alone turned into cudaErrorInvalidValue (a
/// SASS-only kernel launched on the sim: seen with numba, 29 Nov 2026).
Status StatusFromWire(wire::WireStatus w, const std::string& m) {
  return StatusOfWireCode(w, m).WithApiError(static_cast<int>(w));
}

}  // namespace

Session::Session(uint64_t id, std::unique_ptr<ring::ChannelConnection> conn,
                 std::unique_ptr<ring::SharedRegion> region, backend::Backend* backend,
                 std::unique_ptr<AdmissionHook> hook, SessionCallbacks callbacks)
    : id_(id),
      conn_(std::move(conn)),
      region_(std::move(region)),
      backend_(backend),
      callbacks_(std::move(callbacks)),
      executor_(std::move(hook)) {
  summary_.session_id = id_;
  summary_.pid = conn_->peer_pid();
  summary_.command = CommandOf(conn_->hello().cmdline);
  summary_.access_stats = executor_.stats();
  summary_.started_unix_ms = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
}

Session::~Session() {
  RequestStop();
  Join();
}

Status Session::NewContext(int device, std::unique_ptr<backend::Context>* out) {
  // Pooled contexts are never given back: a session's context dies with it
  // (or with its cudaDeviceReset), so every context it gets is unused.
  if (pool_ != nullptr) return pool_->Take(device, out);
  return backend_->CreateContext(device, out);
}

Status Session::PrepareContext() {
  std::unique_ptr<backend::Context> ctx;
  PHOS_RETURN_IF_ERROR(NewContext(0, &ctx));
  std::lock_guard<std::mutex> lock(ctx_mu_);
  ctx_ = std::move(ctx);
  return Status::Ok();
}

void Session::SetBusy(uint32_t api) {
  busy_api_.store(api, std::memory_order_relaxed);
  busy_since_ns_.store(SteadyNs(), std::memory_order_relaxed);
}

bool Session::BusyCall(std::string* what, int64_t* started_ns) const {
  const int64_t since = busy_since_ns_.load(std::memory_order_relaxed);
  if (since == 0) return false;
  const uint32_t api = busy_api_.load(std::memory_order_relaxed);
  if (started_ns != nullptr) *started_ns = since;
  if (what != nullptr) {
    if (api == kBusyControlTask) {
      *what = "a control task (checkpoint, restore or migration)";
    } else if (api == kBusyContext) {
      *what = "creating its GPU context";
    } else if (const wire::CallRow* row = wire::FindCallRow(static_cast<wire::ApiId>(api)); row != nullptr) {
      *what = row->api;
    } else {
      *what = "api id " + std::to_string(api);
    }
  }
  return true;
}

Status Session::Start() {
  ring::RingOptions opts;
  ring::ChannelConnection* conn = conn_.get();
  opts.alive = [conn] { return conn->PeerAlive(); };
  ring_ = std::make_unique<ring::RingServer>(region_->base(), region_->geometry(), opts);
  state_.session_id = id_;
  state_.device = 0;
  state_.stopping = &stop_requested_;
  state_.backend = backend_;
  state_.ctx = ctx_.get();
  state_.ring = ring_.get();
  state_.region_base = static_cast<std::byte*>(region_->base());
  state_.geometry = region_->geometry();
  state_.executor = &executor_;
  state_.channel = conn_.get();  // pinned host segment records
  state_.replace_context = [this]() -> Status {
    std::unique_ptr<backend::Context> fresh;
    PHOS_RETURN_IF_ERROR(NewContext(state_.device, &fresh));
    std::unique_ptr<backend::Context> old;
    {
      std::lock_guard<std::mutex> lock(ctx_mu_);
      old = std::move(ctx_);
      ctx_ = std::move(fresh);
    }
    old.reset();  // its destructor lets its (no) work drain, outside ctx_mu_
    state_.ctx = ctx_.get();
    return Status::Ok();
  };
  state_.add_context = [this](int device) -> Status {
    std::unique_ptr<backend::Context> fresh;
    PHOS_RETURN_IF_ERROR(NewContext(device, &fresh));
    std::lock_guard<std::mutex> lock(ctx_mu_);
    backend::Context* raw = fresh.get();
    other_ctx_[device] = std::move(fresh);
    state_.other_contexts[device] = raw;
    spdlog::info("session {}: pid {} uses GPU {} too (a context of its own; home GPU {})", id_, summary_.pid,
                 device, state_.device);
    return Status::Ok();
  };
  Publish();
  thread_ = std::thread([this] { Run(); });
  return Status::Ok();
}

void Session::OpenGate() {
  {
    std::lock_guard<std::mutex> lock(gate_mu_);
    gate_open_ = true;
  }
  gate_cv_.notify_all();
}

void Session::CloseGate() {
  std::lock_guard<std::mutex> lock(gate_mu_);
  gate_open_ = false;
}

void Session::WaitGate() {
  std::unique_lock<std::mutex> lock(gate_mu_);
  while (!gate_open_ && !stop_requested_.load(std::memory_order_acquire)) {
    if (ctl_pending_.load(std::memory_order_acquire)) {
      lock.unlock();
      RunControlTasks();
      lock.lock();
      continue;
    }
    // Woken by OpenGate, PostControl and RequestStop (each notifies under
    // or after gate_mu_), so no wake-up is lost; the timeout only bounds a
    // wait on a state change this loop did not foresee.
    gate_cv_.wait_for(lock, std::chrono::milliseconds(200));
  }
}

void Session::RequestStop() {
  if (stop_requested_.exchange(true, std::memory_order_acq_rel)) return;
  {
    std::lock_guard<std::mutex> lock(gate_mu_);  // a gated consumer re-checks stop_requested_
  }
  gate_cv_.notify_all();
  // What the app queued is abandoned: the consumer may be waiting on the
  // backend (a full sim stream) and must not wait for that work to run.
  // Not while a control task runs: its own device work (a stop-the-world
  // checkpoint's copies, made after its quiesce drained the app's work)
  // finishes, and the image it writes is whole; the task's end abandons.
  // Nobody will answer the app's host functions any more.
  state_.host_gates->Cancel();
  {
    std::lock_guard<std::mutex> lock(ctx_mu_);
    if (!in_control_task_) AbandonContextsLocked();
  }
  // The ring may not exist when Start() failed; then nothing waits on it.
  // ring_ is set before the thread starts and never reset before Join.
  if (ring_) ring_->Close();
}

void Session::SetInControlTask(bool running) {
  std::lock_guard<std::mutex> lock(ctx_mu_);
  in_control_task_ = running;
  if (!running && stop_requested_.load(std::memory_order_acquire)) AbandonContextsLocked();
}

void Session::AbandonContextsLocked() {
  if (ctx_) ctx_->Abandon();
  for (auto& [device, ctx] : other_ctx_) ctx->Abandon();
}

void Session::Join() {
  if (thread_.joinable()) thread_.join();
}

std::future<Status> Session::PostControl(ControlFn fn) {
  auto task = std::make_unique<ControlTask>();
  task->fn = std::move(fn);
  std::future<Status> f = task->done.get_future();
  {
    std::lock_guard<std::mutex> lock(ctl_mu_);
    if (ctl_closed_ || ring_ == nullptr) {
      task->done.set_value(Status::Unavailable("session " + std::to_string(id_) + " (pid " +
                                               std::to_string(pid()) + ") has ended"));
      return f;
    }
    ctl_queue_.push_back(std::move(task));
    ctl_pending_.store(true, std::memory_order_release);
  }
  // ring_ is set before the thread starts and lives until ~Session.
  ring_->Interrupt();
  {
    std::lock_guard<std::mutex> lock(gate_mu_);  // a gated consumer re-checks ctl_pending_
  }
  gate_cv_.notify_all();
  return f;
}

Status Session::RunControl(ControlFn fn) { return PostControl(std::move(fn)).get(); }

void Session::RunControlTasks() {
  for (;;) {
    std::unique_ptr<ControlTask> task;
    {
      std::lock_guard<std::mutex> lock(ctl_mu_);
      if (ctl_queue_.empty()) {
        ctl_pending_.store(false, std::memory_order_release);
        return;
      }
      task = std::move(ctl_queue_.front());
      ctl_queue_.pop_front();
    }
    SetInControlTask(true);
    SetBusy(kBusyControlTask);
    Status s = task->fn(state_);
    SetIdle();
    SetInControlTask(false);
    PublishIfChanged();
    task->done.set_value(std::move(s));
  }
}

void Session::FailControlTasks() {
  std::deque<std::unique_ptr<ControlTask>> left;
  {
    std::lock_guard<std::mutex> lock(ctl_mu_);
    ctl_closed_ = true;
    left.swap(ctl_queue_);
    ctl_pending_.store(false, std::memory_order_release);
  }
  for (auto& t : left) {
    t->done.set_value(Status::Unavailable("session " + std::to_string(id_) + " (pid " +
                                          std::to_string(pid()) + ") ended before the operation ran"));
  }
}

void Session::PublishIfChanged() {
  if (state_.buffers.TakeChanged() || summary_.device != state_.device ||
      summary_.other_devices.size() != state_.other_contexts.size()) {
    Publish();
  }
}

void Session::Publish() {
  summary_.device = state_.device;
  summary_.other_devices.clear();
  for (const auto& [device, ctx] : state_.other_contexts) summary_.other_devices.push_back(device);
  summary_.device_memory_bytes = state_.buffers.bytes();
  summary_.buffer_count = static_cast<uint32_t>(state_.buffers.size());
  if (callbacks_.publish) callbacks_.publish(summary_);
}

void Session::Run() {
  Status why;
  if (ctx_ == nullptr) {  // not PrepareContext'd: take it here, off the data plane's poll thread
    SetBusy(kBusyContext);
    std::unique_ptr<backend::Context> ctx;
    why = NewContext(0, &ctx);
    SetIdle();
    if (why.ok()) {
      std::lock_guard<std::mutex> lock(ctx_mu_);
      ctx_ = std::move(ctx);
    } else {
      why = why.WithContext("no GPU context for the session");
      spdlog::warn("session {}: pid {} ({}): {}", id_, summary_.pid, summary_.command, why.ToString());
    }
  }
  state_.ctx = ctx_.get();
  if (why.ok()) spdlog::info("session {}: pid {} ({}) attached", id_, summary_.pid, summary_.command);
  std::vector<std::byte> payload;
  if (why.ok()) WaitGate();
  while (why.ok()) {
    if (ctl_pending_.load(std::memory_order_acquire)) {
      RunControlTasks();
      WaitGate();  // a control task may have closed it (CloseGate)
    }
    ring::Record rec;
    Status s = ring_->Next(&rec);
    // NotReady: Interrupt() (a control task was queued; run at the top of
    // the loop) — no deadline is set.
    if (s.code() == Status::Code::kNotReady) continue;
    if (!s.ok()) {
      why = s;
      break;
    }
    // The app hung up (or phosd stops): what it queued is abandoned, not
    // run — nobody will read the results, and on the sim a queue of
    // kernels could take minutes (docs/interposer.md "Session end").
    if (stop_requested_.load(std::memory_order_acquire)) {
      why = Status::Unavailable("stop requested (the app hung up, or phosd is stopping)");
      break;
    }
    payload = ring::RingServer::CopyPayload(rec);
    std::span<const std::byte> p(payload);
    if (rec.has_staging) p = p.subspan(std::min(p.size(), sizeof(ring::StagingRef)));
    Outcome out;
    SetBusy(rec.header.api_id);
    const bool had_deferred = !state_.deferred.ok();
    // The call runs in the context of its GPU (the calling thread's, or its
    // stream's); a GPU the session cannot use fails the call, named.
    if (Status d = SelectCallDevice(state_, CallDevice(state_, rec)); d.ok()) {
      Dispatch(state_, rec, p, &out);
    } else {
      out.Fail(d);
    }
    SelectHomeDevice(state_);
    SetIdle();
    // This call reported an earlier posted call's error (logged then).
    const bool reported_deferred = had_deferred && state_.deferred.ok();
    // A refusal reaches the app as cudaErrorNotSupported, for a posted call
    // only at its next synchronising call and without the reason: say the
    // reason here, once per call of this session (a GPU run once showed
    // nothing on either side, docs/gpu-report.md third session).
    if (out.status == wire::WireStatus::kNotSupported && !reported_deferred &&
        refused_apis_.insert(rec.header.api_id).second) {
      const wire::CallRow* row = wire::FindCallRow(static_cast<wire::ApiId>(rec.header.api_id));
      spdlog::warn("session {}: pid {}: {} refused (not supported): {}", id_, summary_.pid,
                   row != nullptr ? std::string(row->api) : "api " + std::to_string(rec.header.api_id),
                   out.message);
    }
    // Staged bytes were copied out by the handler (or are not needed).
    if (rec.has_staging) ring_->FreeChunk(rec.staging.chunk);
    const bool wants = rec.wants_reply();
    const uint32_t slot = rec.header.slot;
    const uint64_t seq = rec.header.call_seq;
    ring_->Release();
    // Publish before completing: once cudaMalloc/cudaFree returns in the
    // app, `phos ps` already shows the new buffer count (and the GPU an
    // empty session moved to with its first call there).
    PublishIfChanged();
    if (wants) {
      // Kernel printf text reaches the app at its synchronizing calls
      // (docs/interposer.md "Device printf").
      ring_->SetDeviceOutputPending(PendingDeviceOutput(state_) > 0);
      Status c = ring_->Complete(slot, seq, static_cast<int32_t>(out.status), out.reply());
      if (!c.ok()) spdlog::warn("session {}: cannot complete call: {}", id_, c.ToString());
    } else if (!out.ok()) {
      // A posted call failed: CUDA reports it at the next synchronising call.
      state_.Defer(StatusFromWire(out.status, out.message));
    }
  }
  if (why.code() == Status::Code::kCorruption) {
    spdlog::warn("session {}: pid {} wrote a bad frame, dropping it: {}", id_, summary_.pid, why.message());
  }
  spdlog::info("session {}: pid {} detached ({}); releasing its GPU state", id_, summary_.pid, why.ToString());
  ring_->Close();  // the app's waiters, if any, end with Unavailable
  FailControlTasks();
  // The app is gone or misbehaved: the work it queued on the backend is
  // dropped, so the teardown below takes milliseconds however much was
  // queued (a restore waiting for this pid's addresses, phosd's SIGTERM).
  state_.host_gates->Cancel();  // a gate waiting for the app's function ends
  if (ctx_) {  // without a context the session never ran a call: nothing to release
    {
      std::lock_guard<std::mutex> lock(ctx_mu_);
      AbandonContextsLocked();
    }
    executor_.hook()->SessionEnding(state_);
    ReleaseAll(state_);
  }
  {
    std::lock_guard<std::mutex> lock(ctx_mu_);
    other_ctx_.clear();
    ctx_.reset();
  }
  state_.other_contexts.clear();
  state_.ctx = nullptr;
  if (callbacks_.unpublish) callbacks_.unpublish(id_);
  finished_.store(true, std::memory_order_release);
  if (on_finished_) on_finished_();
}

}  // namespace phos::session
