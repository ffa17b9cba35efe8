// The C/R engine's per-session admission hook (session/executor.h): the
// point where an operation in flight (soft copy-on-write, soft recopy,
// concurrent restore) sees every call of the app before it runs.
//
// With no operation in flight the hook admits everything at the cost of
// one pointer test. An operation is installed and removed by control
// tasks (Session::RunControl), i.e. on the session's consumer thread
// between two calls — the only thread that calls BeforeCall/AfterCall —
// so `op_` needs no lock.
//
// One operation per session at a time: TryBegin()/End() (any thread) hold
// an atomic flag, set for the whole operation, from before its first
// control task to after its last; a second request is refused.
#pragma once

#include <atomic>
#include <memory>

#include "common/status.h"
#include "session/call_handlers.h"
#include "session/executor.h"

namespace phos::engine {

/// One checkpoint or restore in flight, as the session's calls see it. All
/// methods are called on the session's consumer thread.
class Operation {
 public:
  virtual ~Operation() = default;
  /// Before a call runs: OK admits it; may block (a buffer being copied or
  /// loaded); another status refuses the call (it becomes the call's result).
  virtual Status Admit(const session::CallView& call) = 0;
  /// For admitted kernel launches: true when the operation launched the
  /// kernel itself (its twin).
  virtual bool LaunchInstead(const session::CallView& call, Status* result) {
    (void)call;
    (void)result;
    return false;
  }
  /// After an admitted call was handed to the backend.
  virtual void Admitted(const session::CallView& call, const Status& result) = 0;
  /// The session ends while the operation is installed: stop every other
  /// thread's use of the context before returning (it is released next).
  virtual void Cancel(session::SessionState& st) = 0;
};

class EngineHook final : public session::AdmissionHook {
 public:
  /// The factory SessionServer::SetHookFactory takes.
  static std::unique_ptr<session::AdmissionHook> Make(uint64_t session_id);
  /// The engine hook of a session, or null when the session was created
  /// without one (then only stop-the-world operations are possible).
  static EngineHook* Of(session::AdmissionHook* hook) { return dynamic_cast<EngineHook*>(hook); }

  // session::AdmissionHook (consumer thread).
  Status BeforeCall(const session::CallView& call) override {
    return op_ ? op_->Admit(call) : Status::Ok();
  }
  void AfterCall(const session::CallView& call, const Status& result) override {
    if (op_) op_->Admitted(call, result);
  }
  bool LaunchInstead(const session::CallView& call, Status* result) override {
    return op_ && op_->LaunchInstead(call, result);
  }
  void SessionEnding(session::SessionState& st) override;

  /// Consumer thread (control tasks) only. The hook shares ownership of
  /// `op` until Remove() or SessionEnding() (which may run after the
  /// operation's driver gave up on the session).
  void Install(std::shared_ptr<Operation> op) { op_ = std::move(op); }
  void Remove() { op_.reset(); }
  bool installed() const { return op_ != nullptr; }

  /// Any thread: claims the session for one operation; false if one is
  /// already in flight.
  bool TryBegin() { return !busy_.exchange(true, std::memory_order_acq_rel); }
  void End() { busy_.store(false, std::memory_order_release); }

 private:
  std::shared_ptr<Operation> op_;  // consumer thread only
  std::atomic<bool> busy_{false};
};

/// RAII claim of a session's hook for one operation (TryBegin/End).
class OperationClaim {
 public:
  OperationClaim() = default;
  ~OperationClaim() {
    if (hook_ != nullptr) hook_->End();
  }
  OperationClaim(const OperationClaim&) = delete;
  OperationClaim& operator=(const OperationClaim&) = delete;
  /// FailedPrecondition naming the session when another operation runs.
  Status Acquire(EngineHook* hook, uint64_t session_id, int pid);

 private:
  EngineHook* hook_ = nullptr;
};

}  // namespace phos::engine
