#include "engine/soft_operation.h"

#include <spdlog/spdlog.h>

#include "engine/shadow_pool.h"

namespace phos::engine {

SoftOperation::SoftOperation(Progress* progress, const char* what, const char* worker, bool check_reads,
                             const char* twin_policy)
    : progress_(progress), what_(what), worker_(worker), check_reads_(check_reads), twin_policy_(twin_policy) {}

SoftOperation::~SoftOperation() = default;

// ---------------------------------------------------------------- start (control task)

void SoftOperation::Bind(session::SessionState& st) {
  ctx_ = st.ctx;
  home_device_ = st.device;
  st_ = &st;
}

void SoftOperation::Track(std::vector<TrackedBuffer> buffers) {
  // Nobody else can see the table yet (not installed, no worker), but the
  // rule has no exception: cow filling it unlocked while recopy locked was
  // how the three copies of this skeleton had started to drift.
  std::lock_guard<std::mutex> lock(table_.mu);
  for (TrackedBuffer& b : buffers) {
    const std::uint64_t address = b.address;
    table_.by_address.emplace(address, std::move(b));
  }
}

Status SoftOperation::OpenWorker() {
  if (Status s = ctx_->CreateStream(backend::kStreamNonBlocking, 0, &stream_); !s.ok()) {
    stream_ = 0;
    return s;
  }
  if (Status s = gate_.Init(ctx_); !s.ok()) {
    spdlog::warn("{}: {} will not yield to app copies: {}", what_, worker_, s.ToString());
  }
  return Status::Ok();
}

Status SoftOperation::OpenOtherLanes(const session::SessionState& st, const std::set<int>& devices) {
  for (int device : devices) {
    if (device == home_device_ || other_lanes_.count(device) > 0) continue;
    Lane lane;
    lane.ctx = session::ContextOf(st, device);
    if (lane.ctx == nullptr) {
      return Status::Internal("the session holds memory on GPU " + std::to_string(device) + " but no context there");
    }
    PHOS_RETURN_IF_ERROR(lane.ctx->CreateStream(backend::kStreamNonBlocking, 0, &lane.stream)
                             .WithContext(std::string("the ") + worker_ + "'s stream on GPU " + std::to_string(device)));
    auto gate = std::make_unique<CopyEngineGate>();
    if (Status s = gate->Init(lane.ctx); s.ok()) {
      lane.gate = gate.get();
    } else {
      spdlog::warn("{}: {} will not yield to app copies on GPU {}: {}", what_, worker_, device, s.ToString());
    }
    {
      std::lock_guard<std::mutex> lock(table_.mu);
      other_gates_.emplace(device, std::move(gate));
    }
    other_lanes_.emplace(device, lane);
  }
  return Status::Ok();
}

SoftOperation::Lane SoftOperation::LaneOf(int device) {
  if (auto it = other_lanes_.find(device); it != other_lanes_.end()) return it->second;
  return Lane{ctx_, stream_, &gate_};
}

Status SoftOperation::WaitEventOn(backend::Context* stream_ctx, backend::StreamHandle stream,
                                  backend::Context* event_ctx, backend::EventHandle event) {
  if (event_ctx == nullptr || event_ctx == stream_ctx) return stream_ctx->StreamWaitEvent(stream, event);
  return event_ctx->SynchronizeEvent(event);
}

Status SoftOperation::DrainValidators(bool wait, std::vector<TwinValidator::Collected>* reports) {
  Status first;
  if (validator_) first = validator_->Drain(wait, reports);
  for (auto& [ctx, v] : other_validators_) {
    Status s = v->Drain(wait, reports);
    if (first.ok()) first = s;
  }
  return first;
}

void SoftOperation::InstallOperation(EngineHook* hook) {
  // After the protocol mapped/tracked everything: the validator's slots are
  // allocated lazily in this context and must not take an address the
  // operation needs (a restore's buffers are mapped before this).
  validator_ = std::make_unique<TwinValidator>(ctx_);
  hook->Install(shared_from_this());
}

// ---------------------------------------------------------------- admission (consumer thread)

void SoftOperation::NoteFirstUseLocked(const session::CallView& call) {
  for (const auto& r : call.ranges) {
    table_.ForEachOverlapping(r.ptr, r.bytes, [&](TrackedBuffer& b) {
      if (b.first_use == 0) b.first_use = ++next_first_use_;
    });
  }
}

void SoftOperation::Abandon() {
  std::lock_guard<std::mutex> lock(table_.mu);
  abandoned_ = true;
  table_.cv.notify_all();
}

bool SoftOperation::LaunchInstead(const session::CallView& call, Status* result) {
  if (!validator_ || call.kind != session::AccessKind::kSpeculated || call.launch == nullptr) return false;
  // A kernel of another GPU runs as a twin loaded in its own context.
  TwinValidator* validator = validator_.get();
  if (backend::Context* cctx = ContextOfCall(call); cctx != ctx_) {
    auto it = other_validators_.find(cctx);
    if (it == other_validators_.end()) {
      std::lock_guard<std::mutex> use(ctx_use_mu_);  // the worker drains the map under it
      it = other_validators_.emplace(cctx, std::make_unique<TwinValidator>(cctx)).first;
    }
    validator = it->second.get();
  }
  std::uint64_t mark = 0;
  {
    std::lock_guard<std::mutex> lock(table_.mu);
    if (abandoned_ || !WantsTwinLocked(&mark)) return false;
  }
  std::uint64_t ticket = 0;
  switch (twins_.Launch(validator, *st_, call, check_reads_, what_, twin_policy_, &ticket, result)) {
    case TwinLauncher::Outcome::kNoTwin: {
      std::unique_lock<std::mutex> lock(table_.mu);
      ++counters_.unvalidated_kernels;
      NoTwinLocked(lock);
      return false;
    }
    case TwinLauncher::Outcome::kFailed: return true;  // *result is the call's result
    case TwinLauncher::Outcome::kLaunched: break;
  }
  {
    std::lock_guard<std::mutex> lock(table_.mu);
    ++counters_.twin_launches;
    TwinLaunchedLocked(ticket);
  }
  return AfterTwin(call, mark);
}

void SoftOperation::Admitted(const session::CallView& call, const Status& result) {
  if (device_state_dropped_) return;  // after a reset (or the end): nothing of ours is in the context
  // The gate of the GPU the copy runs on.
  if (IsHostDeviceCopy(call) && stream_ != 0) {
    backend::Context* cctx = ContextOfCall(call);
    if (cctx == ctx_) {
      gate_.NoteAppCopy(ctx_, call.stream);
    } else {
      for (const auto& [device, lane] : other_lanes_) {
        if (lane.ctx == cctx && lane.gate != nullptr) lane.gate->NoteAppCopy(cctx, call.stream);
      }
    }
  }
  AdmittedCall(call, result);
}

// ---------------------------------------------------------------- end (consumer thread)

void SoftOperation::Cancel(session::SessionState& /*st*/) {
  {
    std::lock_guard<std::mutex> lock(table_.mu);
    cancelled_ = true;
    abandoned_ = true;
    table_.cv.notify_all();
  }
  DropDeviceState();
}

void SoftOperation::DropDeviceState() {
  if (device_state_dropped_) return;
  device_state_dropped_ = true;
  {
    // After this the worker never touches the context again (UseContext
    // checks fenced_ under ctx_use_mu_ before every use).
    std::lock_guard<std::mutex> use(ctx_use_mu_);
    fenced_.store(true);
  }
  DeviceLeftovers left;
  {
    std::lock_guard<std::mutex> lock(table_.mu);
    DetachLeftoversLocked(&left);
  }
  validator_.reset();  // waits for its pending twins
  {
    std::lock_guard<std::mutex> use(ctx_use_mu_);
    other_validators_.clear();
  }
  // Work of the worker (a chunk, a StreamWaitEvent) may still be queued.
  auto close = [&](backend::Context* ctx, backend::StreamHandle stream) {
    (void)ctx->SynchronizeStream(stream);
    if (Status s = ctx->DestroyStream(stream); !s.ok()) spdlog::warn("{}: {} stream: {}", what_, worker_, s.ToString());
  };
  // The handles stay in stream_ and the lanes, stale: the worker reads
  // them outside UseContext (LaneOf) but uses them only inside it, where
  // the fence stops it; Admitted returns before looking at them.
  if (stream_ != 0) close(ctx_, stream_);
  for (const auto& [device, lane] : other_lanes_) {
    if (lane.stream != 0) close(lane.ctx, lane.stream);
    if (lane.gate != nullptr) lane.gate->Destroy(lane.ctx);
  }
  auto in = [&](backend::Context* ctx) { return ctx != nullptr ? ctx : ctx_; };
  for (const auto& e : left.events_to_wait) {
    (void)in(e.ctx)->SynchronizeEvent(e.event);
    (void)in(e.ctx)->DestroyEvent(e.event);
  }
  for (const auto& e : left.events) (void)in(e.ctx)->DestroyEvent(e.event);
  for (const auto& a : left.allocations) (void)in(a.ctx)->Free(a.ptr);
  for (const auto& p : left.pool_ranges) left.pool->GiveBack(p.device, p.ptr);
  gate_.Destroy(ctx_);
}

OperationCounters SoftOperation::counters() {
  std::lock_guard<std::mutex> lock(table_.mu);
  OperationCounters c = counters_;
  c.copier_yields = gate_.yields();
  for (const auto& [device, gate] : other_gates_) c.copier_yields += gate->yields();
  return c;
}

// ---------------------------------------------------------------- the driver (caller's thread)

Status DriveSoftOperation(session::Session& session, EngineHook* hook, SoftOperation& op,
                          const std::function<void()>& on_started, const std::string& outcome, SoftRun* run) {
  *run = SoftRun{};
  const auto t_start = Clock::now();
  Status started = session.RunControl([&](session::SessionState& st) {
    const auto t = Clock::now();
    Status s = op.Start(st, hook);
    run->start_task_us = MicrosSince(t);
    return s;
  });
  run->start_us = MicrosSince(t_start);
  if (!started.ok()) {
    // Start may have installed the operation or created device state before
    // failing late. When the session ended, SessionEnding did this already
    // and the control task answers Unavailable.
    (void)session.RunControl([&](session::SessionState& st) {
      hook->Remove();
      op.Cancel(st);
      return Status::Ok();
    });
    return SessionGone(started, session, outcome);
  }
  run->started = true;
  if (on_started) on_started();
  Status worked = op.Work();
  run->worked_at = Clock::now();
  run->worked = worked.ok();
  const auto t_finish = Clock::now();
  Status finished = session.RunControl([&](session::SessionState& st) { return op.Finish(st, hook, worked); });
  run->finish_us = MicrosSince(t_finish);
  if (!worked.ok()) return SessionGone(worked, session, outcome);
  if (!finished.ok()) return SessionGone(finished, session, outcome);
  return Status::Ok();
}

}  // namespace phos::engine
