#include "engine/engine_hook.h"

#include <string>

namespace phos::engine {

std::unique_ptr<session::AdmissionHook> EngineHook::Make(uint64_t /*session_id*/) {
  return std::make_unique<EngineHook>();
}

void EngineHook::SessionEnding(session::SessionState& st) {
  if (!op_) return;
  op_->Cancel(st);
  op_.reset();
}

Status OperationClaim::Acquire(EngineHook* hook, uint64_t session_id, int pid) {
  if (hook == nullptr) return Status::Ok();  // no engine hook: only stop-the-world, serialised by control tasks
  if (!hook->TryBegin()) {
    return Status::FailedPrecondition("a checkpoint or restore of session " + std::to_string(session_id) + " (pid " +
                                      std::to_string(pid) +
                                      ") is already in progress; wait for it to finish and try again");
  }
  hook_ = hook;
  return Status::Ok();
}

}  // namespace phos::engine
