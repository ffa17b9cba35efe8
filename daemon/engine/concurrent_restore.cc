#include "engine/concurrent_restore.h"

#include "engine/operation_util.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <unordered_set>

#include "common/hex.h"

namespace phos::engine {

ConcurrentRestore::ConcurrentRestore(std::unique_ptr<RestoreTask> task, Progress* progress,
                                     ConcurrentRestoreHooks hooks, ControlStep step)
    : SoftOperation(progress, "restore", "loader", /*check_reads=*/true, "it waits until every buffer is loaded"),
      task_(std::move(task)),
      hooks_(std::move(hooks)),
      step_(std::move(step)) {}

ConcurrentRestore::~ConcurrentRestore() = default;

// ---------------------------------------------------------------- start (control task)

Status ConcurrentRestore::Start(session::SessionState& st, EngineHook* /*hook*/) { return step_(st, *this); }

Status ConcurrentRestore::StartInPlace(session::SessionState& st, EngineHook* hook) {
  PHOS_RETURN_IF_ERROR(task_->MapBuffers(st));
  Status s = StartMapped(st, hook);
  return s.ok() ? s : RestoreTask::Undefined(s);
}

Status ConcurrentRestore::StartMapped(session::SessionState& st, EngineHook* hook) {
  Bind(st);
  const SessionSnapshot& snap = task_->snapshot();
  // Globals are small and live in module memory the app reaches by symbol:
  // load them now rather than track them.
  std::vector<std::size_t> globals;
  std::uint64_t global_bytes = 0;
  for (const auto& g : snap.globals) {
    const long e = task_->extent_of(g.address);
    if (e < 0) return Status::Internal("global " + Hex(g.address) + " has no extent");
    globals.push_back(static_cast<std::size_t>(e));
    global_bytes += g.bytes;
  }
  progress_->SetPhase("globals", "loading " + std::to_string(globals.size()) + " module globals", global_bytes);
  PHOS_RETURN_IF_ERROR(task_->LoadExtentsOnTheirDevices(st, globals).WithContext("loading the module globals"));

  std::vector<std::size_t> all;  // every buffer's extent (the synchronous fallback below)
  std::vector<TrackedBuffer> tracked;
  std::set<int> devices;
  for (const auto& r : snap.buffers) {
    const long e = task_->extent_of(r.address);
    if (e < 0) return Status::Internal("buffer " + Hex(r.address) + " has no extent");
    TrackedBuffer b;
    b.address = r.address;
    b.bytes = r.bytes;
    b.state = kAbsent;
    b.image_index = static_cast<std::size_t>(e);
    b.device = task_->SessionDeviceOfExtent(st, b.image_index);  // the loader copies it in its GPU's context
    devices.insert(b.device);
    total_bytes_ += r.bytes;
    all.push_back(b.image_index);
    tracked.push_back(std::move(b));
  }
  Track(std::move(tracked));
  {
    std::lock_guard<std::mutex> lock(table_.mu);
    // First-use order recorded at checkpoint, then the rest by address.
    std::unordered_set<std::uint64_t> seen;
    for (std::uint64_t a : snap.first_use) {
      if (table_.by_address.count(a) && seen.insert(a).second) order_.push_back(a);
    }
    for (const auto& [a, b] : table_.by_address) {
      if (!seen.count(a)) order_.push_back(a);
    }
  }
  Status worker = OpenWorker();
  if (worker.ok()) worker = OpenOtherLanes(st, devices);  // a stream on each GPU it loads into
  if (!worker.ok()) {
    // No background loader without its streams: restore stop-the-world.
    spdlog::warn("restore: no stream for the background loader ({}); loading every buffer now", worker.ToString());
    progress_->SetPhase("copy", "copying the image to the device", total_bytes_);
    PHOS_RETURN_IF_ERROR(task_->LoadExtentsOnTheirDevices(st, all));
    std::lock_guard<std::mutex> lock(table_.mu);
    for (auto& [a, b] : table_.by_address) {
      b.state = kPresent;
      present_stamp_[a] = ++present_;
      load_order_.push_back(a);
    }
    return Status::Ok();
  }
  InstallOperation(hook);
  progress_->SetPhase("load",
                      "loading " + std::to_string(snap.buffers.size()) +
                          " buffers in first-use order while the app runs (concurrent restore)",
                      total_bytes_);
  return Status::Ok();
}

// ---------------------------------------------------------------- admission (consumer thread)

bool ConcurrentRestore::WaitPresent(std::unique_lock<std::mutex>& lock, const std::vector<TrackedBuffer*>& wanted) {
  auto ready = [&] {
    if (abandoned_) return true;
    for (TrackedBuffer* b : wanted) {
      if (b->state != kPresent) return false;
    }
    return true;
  };
  if (ready()) return false;
  // Jump the loader's queue (a LOADING one is finished first anyway).
  for (TrackedBuffer* b : wanted) {
    if (b->state == kAbsent && !b->urgent) {
      b->urgent = true;
      urgent_.push_back(b->address);
    }
  }
  table_.cv.notify_all();
  WaitLocked(lock, ready);
  return true;
}

bool ConcurrentRestore::WaitAllPresent(std::unique_lock<std::mutex>& lock) {
  // The loader goes on in its own order; every buffer is needed anyway.
  return WaitLocked(lock, [&] { return all_present(); });
}

Status ConcurrentRestore::Admit(const session::CallView& call) {
  std::unique_lock<std::mutex> lock(table_.mu);
  if (call.api == wire::op::kDeviceReset) {
    // The context is replaced by the call: everything must be loaded, and
    // nothing of ours may stay in the old context.
    const auto t0 = Clock::now();
    if (WaitAllPresent(lock)) {
      ++counters_.absent_waits;
      AddBlocked(t0);
    }
    const bool drop = !abandoned_;
    // The reset ends every buffer: nothing of a failed load is left to guard.
    load_error_ = Status::Ok();
    lock.unlock();
    if (drop) DropDeviceState();
    return Status::Ok();
  }
  if (!load_error_.ok()) return RefuseIfUnloaded(call);
  if (abandoned_ || all_present()) return Status::Ok();
  const bool unvalidatable = call.kind == session::AccessKind::kUnvalidatable;
  const auto t0 = Clock::now();
  bool waited = false;
  if (!call.access_known() || unvalidatable) {
    // May touch any buffer (or its set cannot be checked): --unvalidated=stop.
    if (unvalidatable) ++counters_.unvalidated_kernels;
    waited = WaitAllPresent(lock);
  } else {
    std::vector<TrackedBuffer*> hit;
    for (const auto& r : call.ranges) {
      table_.ForEachOverlapping(r.ptr, r.bytes, [&](TrackedBuffer& b) {
        if (b.state != kPresent && std::find(hit.begin(), hit.end(), &b) == hit.end()) hit.push_back(&b);
      });
    }
    if (!hit.empty()) waited = WaitPresent(lock, hit);
  }
  if (waited) {
    ++counters_.absent_waits;
    AddBlocked(t0);
  }
  // Woken by a failed loader: what it waited for may never have come.
  if (!load_error_.ok()) return RefuseIfUnloaded(call);
  return Status::Ok();
}

Status ConcurrentRestore::RefuseIfUnloaded(const session::CallView& call) {
  if (all_present()) return Status::Ok();
  std::string why;
  if (!call.access_known() || call.kind == session::AccessKind::kUnvalidatable) {
    why = "buffers never loaded and this call's accesses unknown";
  } else {
    for (const auto& r : call.ranges) {
      table_.ForEachOverlapping(r.ptr, r.bytes, [&](TrackedBuffer& b) {
        if (why.empty() && b.state != kPresent) why = "buffer " + Hex(b.address) + " never loaded";
      });
      if (!why.empty()) break;
    }
  }
  if (why.empty()) return Status::Ok();
  // The reason first: the app's reply keeps only a message's first 40 and
  // last 61 bytes (session/call_handlers.cc), the cause is last.
  return Status(load_error_.code(), why + ": call refused (the restore failed: " + load_error_.message() + ")");
}

bool ConcurrentRestore::WantsTwinLocked(std::uint64_t* mark) {
  // Nothing absent any more: a load outside the set cannot see garbage.
  if (all_present()) return false;
  *mark = present_;  // a buffer stamped later was not present at the launch
  return true;
}

void ConcurrentRestore::NoTwinLocked(std::unique_lock<std::mutex>& lock) {
  // Restore has no --unvalidated=trust: accesses that cannot be checked
  // run on complete input only.
  const auto t0 = Clock::now();
  if (WaitAllPresent(lock)) {
    ++counters_.absent_waits;
    AddBlocked(t0);
  }
}

bool ConcurrentRestore::AfterTwin(const session::CallView& call, std::uint64_t launched_at) {
  const std::string& name = call.launch->kernel ? *call.launch->kernel : std::string("?");
  // Wait for the report now (the cost of validating during the restore
  // window): a rollback must happen before the session's next call runs.
  std::vector<TwinValidator::Collected> reports;
  if (Status d = DrainValidators(true, &reports); !d.ok()) {
    spdlog::warn("restore: collecting the twin report of kernel {}: {}", name, d.ToString());
  }
  std::unique_lock<std::mutex> lock(table_.mu);
  std::string why;
  for (const auto& r : reports) {
    counters_.twin_misses += r.misses.size();
    for (const auto& m : r.misses) {
      if (!why.empty()) break;
      TrackedBuffer* b = table_.Find(m.address);
      if (b == nullptr) continue;  // not restored memory (allocated since, a global, twin slots)
      auto stamp = present_stamp_.find(b->address);
      const bool was_present = b->state == kPresent && stamp != present_stamp_.end() && stamp->second <= launched_at;
      if (!was_present) {
        why = std::string(m.write ? "wrote " : "read ") + Hex(m.address) + " in buffer " + Hex(b->address) +
              ", outside its speculated access set, before that buffer was loaded";
      }
    }
    // Unrecorded accesses may have touched any buffer not loaded at launch.
    if (r.overflowed() && why.empty()) {
      why = "overflowed its twin report (" + std::to_string(r.dropped) + " accesses unrecorded)";
    }
  }
  if (why.empty() || abandoned_) return true;
  // Roll back: load everything while the session waits, then run the
  // original kernel once more on complete input.
  ++counters_.restore_rollbacks;
  spdlog::warn("restore: kernel {} {}; loading every remaining buffer stop-the-world and re-running the kernel "
               "(correct unless its outputs depend on their own previous values)",
               name, why);
  const auto t0 = Clock::now();
  if (WaitAllPresent(lock)) {
    ++counters_.absent_waits;
    AddBlocked(t0);
  }
  return false;  // the handler launches the original kernel
}

// ---------------------------------------------------------------- the loader (caller's thread)

TrackedBuffer* ConcurrentRestore::NextToLoad() {
  while (!urgent_.empty()) {
    TrackedBuffer& b = table_.by_address.at(urgent_.front());
    urgent_.pop_front();
    if (b.state == kAbsent) return &b;
  }
  while (next_ < order_.size()) {
    TrackedBuffer& b = table_.by_address.at(order_[next_]);
    if (b.state == kAbsent) return &b;
    ++next_;
  }
  return nullptr;
}

Status ConcurrentRestore::LoadAll() {
  ChunkLoader loader(task_->reader(), ctx_, stream_, [this](const std::function<void()>& f) { return UseContext(f); },
                     progress_, ChunkLoader::kConcurrentReadAhead);
  Lane lane = LaneOf(home_device_);  // the GPU the loader copies into now
  loader.set_before_copy([&lane] { YieldToAppCopies(lane); });
  Status status;
  for (;;) {
    TrackedBuffer* b = nullptr;
    {
      std::lock_guard<std::mutex> lock(table_.mu);
      if (abandoned_) {
        if (cancelled_) status = Status::Unavailable("the process exited during the restore");
        break;
      }
      b = NextToLoad();
      if (b == nullptr) break;
      b->state = kLoading;
    }
    // address, bytes, image_index and device never change after Start:
    // read unlocked. Each buffer loads on the stream of its GPU.
    lane = LaneOf(b->device);
    loader.SetTarget(lane.ctx, lane.stream);
    bool paused = false;
    status = LoadOne(*b, loader, &paused);
    {
      std::lock_guard<std::mutex> lock(table_.mu);
      if (status.ok() && paused) {
        // Back in the queue at its place (NextToLoad's position still
        // points at it), after the urgent buffers a call waits for.
        b->state = kAbsent;
        continue;
      }
      if (!status.ok()) {
        if (cancelled_) {
          status = Status::Unavailable("the process exited during the restore");
        } else if (status.code() != Status::Code::kUnavailable) {
          // Set before the waiters wake: they are refused, never run on the
          // missing bytes (Admit); the caller reports the failure.
          load_error_ = status;
        }
        abandoned_ = true;
        table_.cv.notify_all();
        break;
      }
      b->state = kPresent;
      b->urgent = false;
      present_stamp_[b->address] = ++present_;
      load_order_.push_back(b->address);
      table_.cv.notify_all();
    }
    if (hooks_.loaded) hooks_.loaded(b->address);
  }
  loader.Finish();
  if (!status.ok() && status.code() != Status::Code::kUnavailable) return RestoreTask::Undefined(status);
  return status;
}

bool ConcurrentRestore::ShouldPause(const TrackedBuffer& b) {
  std::lock_guard<std::mutex> lock(table_.mu);
  if (b.urgent || abandoned_) return false;
  for (std::uint64_t a : urgent_) {
    if (table_.by_address.at(a).state == kAbsent) return true;
  }
  return false;
}

Status ConcurrentRestore::LoadOne(const TrackedBuffer& b, ChunkLoader& loader, bool* paused) {
  *paused = false;
  const auto& e = task_->reader().manifest().buffers(static_cast<int>(b.image_index));
  const std::uint64_t chunks = static_cast<std::uint64_t>(e.chunk_xxh3_size());
  std::uint64_t first = 0;
  {
    std::lock_guard<std::mutex> lock(table_.mu);
    auto it = resume_at_.find(b.address);
    if (it != resume_at_.end()) {
      first = it->second;
      resume_at_.erase(it);
    }
  }
  // A call waits for another buffer: serve it first (a big buffer's chunks
  // would otherwise keep it waiting for up to the whole buffer; measured:
  // the first kernel of a template start waited 3-8 ms behind a 16 MiB
  // buffer). Resumed at `next` later.
  std::uint64_t next = first;
  Status s = loader.Load(b.image_index, b.address, first, chunks, [&] { return ShouldPause(b); }, &next);
  if (!s.ok()) {
    if (s.code() == Status::Code::kUnavailable) return s;
    return s.WithContext("loading buffer " + Hex(b.address));
  }
  if (next < chunks) {
    std::lock_guard<std::mutex> lock(table_.mu);
    resume_at_[b.address] = next;
    *paused = true;
  }
  return Status::Ok();
}

// ---------------------------------------------------------------- end (consumer thread)

Status ConcurrentRestore::Work() {
  Status loaded = LoadAll();
  failed_ = load_failed();
  return loaded;
}

Status ConcurrentRestore::Finish(session::SessionState& /*st*/, EngineHook* hook, const Status& /*worked*/) {
  if (failed_) {
    // Stays installed (the hook keeps it) to refuse calls on unloaded buffers.
    DropDeviceState();
    return Status::Ok();
  }
  hook->Remove();
  Abandon();
  DropDeviceState();
  return Status::Ok();
}

bool ConcurrentRestore::load_failed() {
  std::lock_guard<std::mutex> lock(table_.mu);
  return !load_error_.ok();
}

std::vector<std::uint64_t> ConcurrentRestore::load_order() {
  std::lock_guard<std::mutex> lock(table_.mu);
  return load_order_;
}

// ---------------------------------------------------------------- the driver (caller's thread)

Status RunConcurrentRestore(session::Session& session, EngineHook* hook, const RestoreOptions& options,
                            Progress* progress, RestoreResult* result) {
  return RunConcurrentRestoreWithHooks(session, hook, options, progress, result, {});
}

Status RunConcurrentRestoreWithHooks(session::Session& session, EngineHook* hook, const RestoreOptions& options,
                                     Progress* progress, RestoreResult* result, const ConcurrentRestoreHooks& hooks,
                                     std::vector<std::uint64_t>* load_order) {
  const auto t0 = Clock::now();
  auto task = std::make_unique<RestoreTask>(progress);
  // In place: by default every checksum before the session is touched.
  if (Status p = task->Prepare(options.dir, VerifiesFirst(options.verify, true)); !p.ok()) {
    return p.WithContext("restore refused; the session of pid " + std::to_string(session.pid()) + " is untouched");
  }
  // In place: make the session's buffer map match the image, then track.
  ControlStep step = [hook](session::SessionState& st, ConcurrentRestore& op) { return op.StartInPlace(st, hook); };
  return DriveConcurrentRestore(session, hook, std::move(task), step, options, progress, result, hooks, load_order,
                                t0);
}

Status DriveConcurrentRestore(session::Session& session, EngineHook* hook, std::unique_ptr<RestoreTask> task,
                              const ControlStep& step, const RestoreOptions& options, Progress* progress,
                              RestoreResult* result, const ConcurrentRestoreHooks& hooks,
                              std::vector<std::uint64_t>* load_order, Clock::time_point t0) {
  auto op = std::make_shared<ConcurrentRestore>(std::move(task), progress, hooks, step);
  SoftRun run;
  auto resumed = [&] {
    spdlog::info("restore of pid {}: session resumed after {} us; loading {} buffers in the background",
                 session.pid(), run.start_task_us, op->task().snapshot().buffers.size());
    if (options.on_resumed) options.on_resumed();
  };
  Status s = DriveSoftOperation(session, hook, *op, resumed, "the restore did not complete", &run);
  *result = op->task().result();
  result->dir = options.dir;
  result->concurrent = true;
  result->stall_us = run.start_task_us;  // the control task only
  result->counters = op->counters();
  if (!run.started) return s;
  result->total_us = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(run.worked_at - t0).count());
  if (load_order != nullptr) *load_order = op->load_order();
  if (!s.ok()) return s;
  const OperationCounters& c = result->counters;
  spdlog::info("restore of pid {}: every buffer present after {} us (stall {} us, {} calls waited {} us for "
               "absent buffers, {} twin launches, {} rollbacks)",
               session.pid(), result->total_us, result->stall_us, c.absent_waits, op->blocked_us(), c.twin_launches,
               c.restore_rollbacks);
  return Status::Ok();
}

}  // namespace phos::engine
