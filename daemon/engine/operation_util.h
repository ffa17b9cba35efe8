// Small pieces every operation of the C/R engine uses (checkpoint modes,
// restores): timing, the "app exited meanwhile" error, and launching a
// speculated kernel as its twin with the one-warning-per-kernel rule.
#pragma once

#include <chrono>
#include <cstdint>
#include <set>
#include <string>

#include "common/status.h"
#include "engine/twin_validator.h"
#include "session/executor.h"
#include "session/session.h"

namespace phos::engine {

using Clock = std::chrono::steady_clock;

inline std::uint64_t MicrosSince(Clock::time_point t0) {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count());
}

/// An Unavailable status from a control task means the session ended: say
/// so with the pid and what happened to the operation (`outcome`, e.g. "no
/// image was written"). Other statuses pass through.
Status SessionGone(const Status& s, const session::Session& session, const std::string& outcome);

/// Launches speculated kernels as their twins for one operation (consumer
/// thread only: `warned_` has no lock).
class TwinLauncher {
 public:
  enum class Outcome {
    kLaunched,     // the twin runs instead of the kernel; *ticket identifies its report
    kNoTwin,       // no twin can be made: warned once per kernel; the caller applies its policy
    kFailed,       // the twin launch failed; *status is the call's result
  };
  /// `what` names the operation in the warning ("checkpoint", "restore");
  /// `policy` says what happens to a kernel without a twin.
  Outcome Launch(TwinValidator* validator, const session::SessionState& st, const session::CallView& call,
                 bool check_reads, const char* what, const char* policy, std::uint64_t* ticket, Status* status);

 private:
  std::set<std::string> warned_;
};

}  // namespace phos::engine
