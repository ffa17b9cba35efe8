// The `phos run` launchers phosd knows (RegisterRun) and which sessions
// each one started. A user holds the launcher's pid (`phos run ... &` then
// `$!`), while phosd's session is the program's: under `phos run`'s pid
// namespace the program is the launcher's child (pid 1 inside), and with
// --no-pid-ns the launcher execs the program (same pid). This registry
// maps one to the other and keeps each run's optional name unique.
//
// A run is live while its launcher runs (same pid AND start time: pids
// are reused) or while a session it started is bound to it (SIGKILL of the
// launcher leaves the program running, docs/criu.md "Pid namespaces").
// Dead runs are dropped at the next Register.
//
// Thread-safe: mu_ guards runs_ (held while a launcher's /proc/PID/stat is
// read: microseconds).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"

namespace phos::server {

struct RunInfo {
  pid_t launcher_pid = 0;
  std::string name;  // "" = unnamed
  std::string job;   // `phos run --job`: "" = none (many runs share one)
};

class RunRegistry {
 public:
  /// Names a run may take: 1-100 of [A-Za-z0-9_.-], not starting with '.',
  /// not all digits (a CLI target that is all digits is a pid).
  static Status CheckName(const std::string& name);

  /// Records launcher `launcher_pid` (it must run) with `name` ("" = none).
  /// AlreadyExists when a live run holds the name, saying which pids.
  Status Register(pid_t launcher_pid, const std::string& name, const std::string& job = "");
  /// The run that started process `pid` — its launcher is `pid` itself or
  /// `pid`'s parent — and binds session `session_id` to it; nullopt when
  /// none (the process was not started by a registered `phos run`).
  std::optional<RunInfo> BindSession(std::uint64_t session_id, pid_t pid);
  /// The session ended: its run may end with it.
  void UnbindSession(std::uint64_t session_id);

 private:
  struct Run {
    RunInfo info;
    std::uint64_t start_ticks = 0;       // the launcher's, /proc/PID/stat
    std::set<std::uint64_t> sessions;    // bound session ids
  };
  /// The launcher still runs (same pid and start time) or a session is bound.
  static bool Live(const Run& r);

  std::mutex mu_;
  std::vector<Run> runs_;  // guarded by mu_; a handful (one per `phos run`)
};

}  // namespace phos::server
