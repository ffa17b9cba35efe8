#include "session/executor.h"

namespace phos::session {

Executor::Executor(std::unique_ptr<AdmissionHook> hook)
    : hook_(hook ? std::move(hook) : std::make_unique<AdmitAllHook>()) {}

}  // namespace phos::session
