#include "session/executor.h"

namespace phos::session {

const char* AccessKindName(AccessKind kind) {
  switch (kind) {
    case AccessKind::kExact: return "exact";
    case AccessKind::kSpeculated: return "speculated";
    case AccessKind::kUnvalidatable: return "unvalidatable";
    case AccessKind::kUnknown: return "unknown";
  }
  return "?";
}

Executor::Executor(std::unique_ptr<AdmissionHook> hook)
    : hook_(hook ? std::move(hook) : std::make_unique<AdmitAllHook>()) {}

}  // namespace phos::session
