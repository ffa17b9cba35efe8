// The executor: admits each decoded call before it runs (docs/protocols.md: "every
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

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <absl/container/inlined_vector.h>

#include "backend/backend.h"
#include "common/status.h"
#include "protocol/wire.h"

namespace phos::session {

struct SessionState;  // call_handlers.h

/// A byte range of device memory a call reads or writes. For copies and
/// memsets the exact bytes; for kernels the whole buffer (start and size of
/// the session's allocation) a parameter value landed in.
struct AccessRange {
  uint64_t ptr = 0;
  uint64_t bytes = 0;
  bool write = false;
};

/// How a call's access set was obtained (docs/protocols.md "Access sets (implemented)"; docs/protocols.md
/// "Access sets (implemented)"). phosd computes every set from the decoded
/// call; the app never supplies one.
enum class AccessKind : uint8_t {
  /// `ranges` is exactly what the call touches: copies, memsets, frees,
  /// spec-table library calls (access_spec.h); empty for calls that touch
  /// no device memory (stream, event, module calls).
  kExact = 0,
  /// A kernel launch: `ranges` are the buffers its parameter values land
  /// in, with roles from the kernel signature (or, for extern "C" kernels
  /// and parameters that could not be typed, every 8-byte parameter as a
  /// read+write candidate). The kernel's module has PTX, so a twin
  /// (instrument/twin) can validate the guess.
  kSpeculated = 1,
  /// Speculated as above, but the module has no PTX: the kernel cannot be
  /// twinned, the guess cannot be checked (policy --unvalidated).
  kUnvalidatable = 2,
  /// No access set: the call may touch any buffer of the session
  /// (cudaDeviceReset; a kernel whose parameter layout is unknown).
  kUnknown = 3,
};

/// "exact", "speculated", "unvalidatable", "unknown".
const char* AccessKindName(AccessKind kind);

/// A kernel launch as the handler is about to run it (CallView::launch):
/// what a hook needs to launch the kernel's twin instead (engine/
/// twin_validator.h). Valid only during the hook calls.
struct LaunchArgs {
  uint32_t function_id = 0;             // the session's virtual function id
  uint32_t module_id = 0;               // its module's virtual id
  const std::string* kernel = nullptr;  // mangled name
  backend::FunctionHandle function = 0;
  backend::Dim3 grid, block;
  unsigned shared_bytes = 0;
  const std::vector<uint8_t>* params = nullptr;  // the parameter block
};

/// What the executor shows a hook about one call. Valid only during the
/// hook call.
struct CallView {
  wire::ApiId api{};
  uint64_t session_id = 0;
  uint32_t stream_id = 0;               // virtual stream id (0 = default)
  backend::StreamHandle stream = 0;     // its backend handle
  /// The context the call runs in: its stream's (SessionState::ctx while
  /// the call runs; another GPU's for a call there). Null in views made
  /// outside a call (tests): hooks then take the session's home context.
  backend::Context* ctx = nullptr;
  bool synchronous = false;             // the app waits for the result
  AccessKind kind = AccessKind::kExact;
  /// Kernels: one entry per distinct buffer (a buffer named by several
  /// parameters appears once, read+write if any of them writes). Inline
  /// room for 4: most calls touch 1-3 buffers, no heap allocation.
  absl::InlinedVector<AccessRange, 4> ranges;
  /// Kernel launches only (null otherwise).
  const LaunchArgs* launch = nullptr;

  /// False only for kUnknown: the hook must assume the call may touch any
  /// buffer of the session.
  bool access_known() const { return kind != AccessKind::kUnknown; }

  void Add(uint64_t ptr, uint64_t bytes, bool write) { ranges.push_back({ptr, bytes, write}); }
  /// Kernels: the buffer at `ptr` with the role `write`, merged into its
  /// entry when the set names it already (read+write if either writes).
  void AddOrMerge(uint64_t ptr, uint64_t bytes, bool write) {
    for (AccessRange& r : ranges) {
      if (r.ptr == ptr) {
        r.write = r.write || write;
        return;
      }
    }
    Add(ptr, bytes, write);
  }
};

/// Per-session counts of admitted calls by AccessKind (`phos ps`). Written
/// by the session's consumer thread only (single writer: relaxed
/// load+store, no locked instruction on the launch path); read from any
/// thread (the registry, on ListSessions). Shared so the registry can read
/// it without asking the session.
struct AccessStats {
  std::atomic<uint64_t> exact{0};          // kExact calls with at least one range
  std::atomic<uint64_t> speculated{0};
  std::atomic<uint64_t> unvalidatable{0};
  std::atomic<uint64_t> unknown{0};

  void Count(const CallView& call) {
    std::atomic<uint64_t>* c = nullptr;
    switch (call.kind) {
      case AccessKind::kExact: c = call.ranges.empty() ? nullptr : &exact; break;
      case AccessKind::kSpeculated: c = &speculated; break;
      case AccessKind::kUnvalidatable: c = &unvalidatable; break;
      case AccessKind::kUnknown: c = &unknown; break;
    }
    if (c != nullptr) c->store(c->load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }

  /// A kernel of the session that is unvalidatable, and why (no PTX; an
  /// access its twin cannot check): `phos ps` lists them. The first
  /// kMaxKernelsListed distinct names are kept; past them, each kernel a
  /// module load brings is only counted (a module loaded twice counts its
  /// kernels twice: no set of every name is kept).
  struct UnvalidatableKernel {
    std::string kernel, reason;
  };
  static constexpr size_t kMaxKernelsListed = 64;
  void NoteUnvalidatable(const std::string& kernel, const std::string& reason) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& k : kernels_)
      if (k.kernel == kernel) return;
    if (kernels_.size() < kMaxKernelsListed) kernels_.push_back({kernel, reason});
    else ++kernels_not_listed_;
  }
  std::vector<UnvalidatableKernel> UnvalidatableKernels(uint64_t* not_listed) const {
    std::lock_guard<std::mutex> lock(mu_);
    *not_listed = kernels_not_listed_;
    return kernels_;
  }

 private:
  mutable std::mutex mu_;                      // guards the two below
  std::vector<UnvalidatableKernel> kernels_;   // distinct names, first come
  uint64_t kernels_not_listed_ = 0;
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
  /// Kernel launches only (call.launch set), after BeforeCall admitted the
  /// call: true = the hook launched the kernel itself (its twin, while a
  /// checkpoint or restore validates speculation) and `*result` is that
  /// launch's status; false = the handler launches the original kernel.
  virtual bool LaunchInstead(const CallView& call, Status* result) {
    (void)call;
    (void)result;
    return false;
  }
  /// The session is ending (the app exited or phosd stops): called on the
  /// consumer thread before its GPU state is released, while the context
  /// still works. A hook with work in flight on other threads (the C/R
  /// engine's copier) stops it here, so nothing touches the context after
  /// this returns.
  virtual void SessionEnding(SessionState& st) { (void)st; }
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
    Status s;
    if (call.launch == nullptr || !hook_->LaunchInstead(call, &s)) s = body();
    hook_->AfterCall(call, s);
    admitted_.store(admitted_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
    stats_->Count(call);
    return s;
  }

  /// Calls admitted so far. Written by the consumer thread only; any
  /// thread may read it (tests wait for a call count).
  uint64_t admitted() const { return admitted_.load(std::memory_order_acquire); }
  /// The session's hook (the C/R engine finds its per-session state
  /// through it; consumer thread only).
  AdmissionHook* hook() const { return hook_.get(); }
  /// Counts of admitted calls by access kind; shared with the registry.
  std::shared_ptr<const AccessStats> stats() const { return stats_; }
  /// Records an unvalidatable kernel for `phos ps` (module load; consumer
  /// thread).
  void NoteUnvalidatable(const std::string& kernel, const std::string& reason) {
    stats_->NoteUnvalidatable(kernel, reason);
  }

 private:
  std::unique_ptr<AdmissionHook> hook_;
  std::atomic<uint64_t> admitted_{0};
  std::shared_ptr<AccessStats> stats_ = std::make_shared<AccessStats>();
};

}  // namespace phos::session
