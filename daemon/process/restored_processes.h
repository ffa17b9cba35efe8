// RestoredProcesses: phosd reaps the processes it restored and keeps their
// exit status for `phos restore` / `phos template start` without --detach
// (docs/criu.md "Who reaps the restored process").
//
// phosd makes itself a child subreaper at start (Daemon), so CRIU's
// detached restore re-parents each restored root to phosd. Each tracked
// process gets a pidfd; one reaper thread polls all of them (plus an
// eventfd for changes and shutdown) and reaps exactly the tracked pids
// with waitid(P_PIDFD) — never waitpid(-1), which would steal libcriu's
// `criu swrk` children.
//
// Thread-safe: mu_ guards entries_ and exited_; cv_ signals new exits.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

namespace phos::process {

class RestoredProcesses {
 public:
  RestoredProcesses();
  ~RestoredProcesses();  // stops the reaper; tracked processes keep running
  RestoredProcesses(const RestoredProcesses&) = delete;
  RestoredProcesses& operator=(const RestoredProcesses&) = delete;

  /// Starts reaping `pid` (a process phosd restored). False if it cannot
  /// (no pidfd: it is already gone, or the kernel lacks pidfd_open).
  bool Track(pid_t pid);

  struct Exit {
    bool known = false;  // false: not our child, exit status unknown
    int status = 0;      // shell convention: exit code, or 128 + signal
  };
  /// Waits up to `timeout` for `pid` to exit. nullopt while it still runs
  /// (or if it was never tracked). The result is kept for later callers.
  std::optional<Exit> WaitExit(pid_t pid, std::chrono::milliseconds timeout);

 private:
  void ReaperLoop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::map<pid_t, int> entries_;  // tracked, still running: pid -> pidfd (guarded by mu_)
  std::map<pid_t, Exit> exited_;  // guarded by mu_; bounded by what phosd restored
  int wake_fd_ = -1;              // eventfd: entries_ changed or shutting down
  bool stopping_ = false;         // guarded by mu_
  std::thread reaper_;
};

}  // namespace phos::process
