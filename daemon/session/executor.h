// The executor: admits each decoded call before it runs (DESIGN §4: "every
// call is admitted by the executor only after the protocol has looked at
// its access set").
//
// Ordering: a session has ONE consumer thread that takes calls off the ring
// in ring order and hands them to the backend, whose streams are in-order
// queues; so calls on one stream run in the order the app issued them
// (per app thread; the ring keeps each thread's order), and calls on
// different streams overlap on the backend as CUDA allows. A later issue
// may give the executor per-stream queues; the hook interface stays.
//
// Hooks: the C/R engine plugs an AdmissionHook in (SessionServer::
// SetHookFactory). BeforeCall may block (e.g. while a buffer is copied to a
// shadow or restored) and may refuse a call (its status is the call's
// result); AfterCall sees every admitted call's enqueue result.
#pragma once

#include <array>
#include <cstdint>
#include <memory>

#include "backend/backend.h"
#include "common/status.h"
#include "protocol/wire.h"

namespace phos::session {

/// A byte range of device memory a call reads or writes.
struct AccessRange {
  uint64_t ptr = 0;
  uint64_t bytes = 0;
  bool write = false;
};

/// What the executor shows a hook about one call. Valid only during the
/// hook call.
struct CallView {
  wire::ApiId api{};
  uint64_t session_id = 0;
  uint32_t stream_id = 0;               // virtual stream id (0 = default)
  backend::StreamHandle stream = 0;     // its backend handle
  bool synchronous = false;             // the app waits for the result
  /// True when `ranges` is the exact access set (copies, memsets). False
  /// for launches until kernel signatures arrive (next issue): the set is
  /// "unknown", a hook must assume the call may touch any buffer.
  bool access_known = true;
  uint32_t range_count = 0;
  std::array<AccessRange, 2> ranges{};

  void Add(uint64_t ptr, uint64_t bytes, bool write) {
    if (range_count < ranges.size()) ranges[range_count++] = {ptr, bytes, write};
  }
};

/// Implemented by the C/R engine. Called on the session's consumer thread
/// only (never concurrently for one session); one hook object per session.
class AdmissionHook {
 public:
  virtual ~AdmissionHook() = default;
  /// OK = run the call now. Any other status is the call's result and the
  /// call does not run.
  virtual Status BeforeCall(const CallView& call) = 0;
  /// After an admitted call was handed to the backend (`result` is its
  /// enqueue/sync result).
  virtual void AfterCall(const CallView& call, const Status& result) = 0;
};

/// Admits everything.
class AdmitAllHook final : public AdmissionHook {
 public:
  Status BeforeCall(const CallView&) override { return Status::Ok(); }
  void AfterCall(const CallView&, const Status&) override {}
};

/// Per-session admission. Owned by the Session; used on its consumer thread
/// only (no lock).
class Executor {
 public:
  explicit Executor(std::unique_ptr<AdmissionHook> hook);

  /// Runs `body` if the hook admits `call`; returns the hook's refusal or
  /// the body's status.
  template <typename Body>
  Status Run(const CallView& call, Body&& body) {
    Status admitted = hook_->BeforeCall(call);
    if (!admitted.ok()) return admitted;
    Status s = body();
    hook_->AfterCall(call, s);
    ++admitted_;
    return s;
  }

  uint64_t admitted() const { return admitted_; }

 private:
  std::unique_ptr<AdmissionHook> hook_;
  uint64_t admitted_ = 0;
};

}  // namespace phos::session
