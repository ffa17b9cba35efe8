#include "engine/operation_util.h"

#include <signal.h>

#include <cerrno>

#include <spdlog/spdlog.h>

#include "backend/backend.h"

namespace phos::engine {

Status SessionGone(const Status& s, const session::Session& session, const std::string& outcome) {
  if (s.code() != Status::Code::kUnavailable) return s;
  // Unavailable also comes from elsewhere (CRIU that cannot run, a peer):
  // only say "exited" when the session really ended (its control tasks fail
  // with "... has ended") or the process is gone.
  const bool ended = session.finished() || s.message().find("has ended") != std::string::npos ||
                     backend::IsAbandoned(s) || (kill(session.pid(), 0) != 0 && errno == ESRCH);
  if (!ended) return s.WithContext(outcome);
  return Status::Unavailable("pid " + std::to_string(session.pid()) + " exited during the operation (" + s.message() +
                             "); " + outcome);
}

TwinLauncher::Outcome TwinLauncher::Launch(TwinValidator* validator, const session::SessionState& st,
                                           const session::CallView& call, bool check_reads, const char* what,
                                           const char* policy, std::uint64_t* ticket, Status* status) {
  Status s = validator->Launch(st, *call.launch, call.stream, call.ranges, check_reads, ticket);
  if (s.code() == Status::Code::kNotSupported) {
    const std::string name = call.launch->kernel ? *call.launch->kernel : std::string("?");
    if (warned_.insert(name).second) {
      spdlog::warn("{}: kernel {} cannot be validated ({}); {}", what, name, s.message(), policy);
    }
    return Outcome::kNoTwin;
  }
  *status = s;
  return s.ok() ? Outcome::kLaunched : Outcome::kFailed;
}

}  // namespace phos::engine
