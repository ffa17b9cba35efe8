#include "engine/copy_engine_gate.h"

#include <spdlog/spdlog.h>

#include <thread>

#include "protocol/wire.h"

namespace phos::engine {

Status CopyEngineGate::Init(backend::Context* ctx) { return ctx->CreateEvent(backend::kEventDisableTiming, &event_); }

void CopyEngineGate::Destroy(backend::Context* ctx) {
  if (event_ == 0) return;
  if (Status s = ctx->DestroyEvent(event_); !s.ok()) spdlog::warn("copier: cannot destroy its event: {}", s.ToString());
  event_ = 0;
}

void CopyEngineGate::NoteAppCopy(backend::Context* ctx, backend::StreamHandle stream) {
  if (event_ == 0) return;
  if (ctx->RecordEvent(event_, stream).ok()) pending_.store(true, std::memory_order_release);
}

bool CopyEngineGate::YieldIfNeeded(backend::Context* ctx) {
  if (event_ == 0 || !pending_.exchange(false, std::memory_order_acq_rel)) return false;
  // Bounded: poll the event (an error is the app's copy failing: its own
  // call reports it) for at most kMaxYield, then go on.
  const auto deadline = std::chrono::steady_clock::now() + kMaxYield;
  while (ctx->QueryEvent(event_).code() == Status::Code::kNotReady && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  yields_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

bool IsHostDeviceCopy(const session::CallView& call) {
  namespace op = wire::op;
  if (call.ranges.size() != 1) return false;
  const wire::ApiId a = call.api;
  return a == op::kMemcpy || a == op::kMemcpyAsync || a == op::kMemcpy2D || a == op::kMemcpy2DAsync;
}

}  // namespace phos::engine
