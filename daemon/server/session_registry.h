// The sessions phosd serves (one per app process). The remoting issue adds
// sessions as apps connect; the C/R engine reads and changes their state.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include "phos.pb.h"
#include "server/run_registry.h"
#include "session/session.h"

namespace phos::server {

class SessionRegistry {
 public:
  /// A copy of every session's public description, ordered by session id.
  std::vector<v1::SessionInfo> List() const;
  /// Only the sessions of one pid, the program's or its launcher's (pid 0 = all).
  std::vector<v1::SessionInfo> ListForPid(int pid) const;
  std::size_t size() const;

  /// Fills the fields of a session that change on every call (the access
  /// statistics) at List time, so sessions need not republish per call.
  /// Called under the registry's lock: must be quick and must not block.
  using LiveFields = std::function<void(v1::SessionInfo*)>;

  /// Adds or replaces the description of a session.
  void Upsert(const v1::SessionInfo& info, LiveFields live = nullptr);
  /// Upsert of a session's own summary (SessionCallbacks::publish): the
  /// conversion to v1::SessionInfo, access statistics included (live).
  void Publish(const session::SessionSummary& summary);
  /// Removes a session; false if it was not there.
  bool Remove(std::uint64_t session_id);
  /// Waits until session `session_id` is removed (its GPU state is
  /// released: a session is removed only after its teardown), at most
  /// `limit`; true when it is gone.
  bool WaitRemoved(std::uint64_t session_id, std::chrono::milliseconds limit) const;

  /// `phos run` launchers (RegisterRun): a session published after its
  /// launcher registered shows the launcher's pid and the run's name.
  RunRegistry& runs() { return runs_; }
  /// The host pid of the live session `target` names: its own pid, or the
  /// pid of the `phos run` that started it; 0 when none.
  int ResolvePid(int target) const;

  /// The C/R engine's view of a session while an operation runs: the state
  /// `phos ps` shows (SESSION_CHECKPOINTING / SESSION_RESTORING; RUNNING
  /// again when it ends). Kept apart from the published description, which
  /// the session replaces on every change.
  void SetOperationState(std::uint64_t session_id, v1::SessionState state);
  /// Adds an operation's counters (fallbacks, waits, twin launches...) to
  /// the session's totals (SessionInfo.counters) and the daemon's
  /// (DaemonCounters, `phos status`).
  void AddOperationCounters(std::uint64_t session_id, const std::map<std::string, std::uint64_t>& counters);
  /// A restored rank of job `job` (its image's job name; "" = none): the
  /// session of process `pid` shows it, as `phos run --job` would have
  /// (a restored process has no launcher). Forgotten with the session.
  void SetRestoredJob(pid_t pid, const std::string& job);
  /// The job name session `session_id` shows ("" = none).
  std::string JobOf(std::uint64_t session_id) const;
  /// Totals over every operation since phosd started.
  std::map<std::string, std::uint64_t> DaemonCounters() const;

 private:
  RunRegistry runs_;  // locks itself; never called with mu_ held
  mutable std::mutex mu_;
  mutable std::condition_variable removed_cv_;  // notified by Remove (with mu_ released)
  struct Entry {
    v1::SessionInfo info;
    LiveFields live;  // may be empty
  };
  // session id -> description. Guarded by mu_.
  std::map<std::uint64_t, Entry> sessions_;
  // Guarded by mu_: the run each published session belongs to, looked up
  // once at its first Publish (nullopt: none); erased with the session.
  std::map<std::uint64_t, std::optional<RunInfo>> run_of_;
  // Guarded by mu_: pid -> job name of restored ranks (SetRestoredJob);
  // erased when a session of that pid is removed.
  std::map<int, std::string> restored_job_;
  // Guarded by mu_: per-session operation state and counter totals (erased
  // with the session), and the daemon-wide totals (never erased).
  std::map<std::uint64_t, v1::SessionState> op_state_;
  std::map<std::uint64_t, std::map<std::string, std::uint64_t>> op_counters_;
  std::map<std::string, std::uint64_t> daemon_counters_;
};

}  // namespace phos::server
