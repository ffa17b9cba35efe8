// phos::criu::CriuCommand — one run of the `criu` command line, for what
// libcriu cannot ask for.
//
// Everything else goes through libcriu (criu_client.h). Lazy migration
// needs three options libcriu 4.1.1 has no setter for — `--lazy-pages`,
// `--ps-socket FD` (the page server's connection, already open) and
// `--status-fd FD` (CRIU writes one byte there when its images are written
// and its page server serves) — and a third process, `criu lazy-pages`,
// which has no RPC request at all (docs/criu.md "Lazy pages"). Upstream
// criu PR #3146 adds `criu_set_lazy_pages` to libcriu; it is in no release.
//
// We never parse CRIU's output: a run is judged by its status byte and its
// exit status, and a failure quotes its log (criu_log.h).
//
// Threading: one owner thread (plus the optional exit-clock watcher, which
// only polls the pidfd). The destructor kills and reaps a command still
// running, so no criu process outlives its owner's interest in it.
// Children: the command is phosd's child, reaped by this object with
// waitid() on its pidfd (never waitpid(-1); see criu_client.h "Children").
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"

namespace phos::criu {

class CriuCommand {
 public:
  struct Spec {
    std::string binary;               // "" = `criu` on PATH
    std::vector<std::string> args;    // after the binary: "dump", "-t", "123", ...
    /// File descriptors the command inherits under the same numbers (their
    /// CLOEXEC is cleared in the child only); the caller keeps its copies.
    std::vector<int> inherit_fds;
    /// Appends `--status-fd N`: WaitReady() returns once CRIU wrote to it.
    bool status_fd = false;
    std::string what;      // "criu dump of pid 123 into DIR": the start of every message
    std::string log_path;  // the command's -o log, quoted when it fails
  };

  /// Starts the command (posix_spawn; stdin /dev/null, stdout and stderr
  /// phosd's). Fails only when it cannot be started.
  static Status Start(Spec spec, std::unique_ptr<CriuCommand>* out);

  ~CriuCommand();
  CriuCommand(const CriuCommand&) = delete;
  CriuCommand& operator=(const CriuCommand&) = delete;

  /// Needs Spec::status_fd. Ok once CRIU said it is ready; its error (log
  /// quoted) when it exited first; Unavailable after `timeout` (the command
  /// keeps running: Kill() it).
  Status WaitReady(std::chrono::milliseconds timeout);

  /// Ok when the command exited with status 0; its error (log quoted) for
  /// another status or a signal; Unavailable after `timeout` (still
  /// running).
  Status Wait(std::chrono::milliseconds timeout);

  /// SIGKILL and reap (no-op once it was reaped).
  void Kill();

  pid_t pid() const { return pid_; }
  bool exited() const { return reaped_; }

  /// Starts a watcher thread that notes when the command exits (without
  /// reaping it), so the owner can learn that instant while it is busy
  /// elsewhere (a lazy restore: the daemon's last page vs the GPU load).
  /// At most once; the destructor kills the command, then joins it.
  void StartExitClock();
  /// When the watcher saw the command exit; nullopt before (or without
  /// StartExitClock).
  std::optional<std::chrono::steady_clock::time_point> ExitSeenAt() const;

 private:
  CriuCommand() = default;
  /// Polls the pidfd for up to `timeout`; true when the command exited
  /// (then reaped, exit_status_ set).
  bool WaitExit(std::chrono::milliseconds timeout);
  Status ExitError() const;

  Spec spec_;
  pid_t pid_ = -1;
  int pidfd_ = -1;
  int status_read_ = -1;  // read end of the status pipe, or -1
  bool reaped_ = false;
  int exit_status_ = 0;   // as waitid's si_code/si_status give it (below)
  bool killed_by_signal_ = false;
  // The exit clock: the watcher only polls pidfd_ (fixed after Start) and
  // writes exit_seen_ns_; everything above belongs to the owner thread.
  std::thread exit_clock_;
  std::atomic<std::int64_t> exit_seen_ns_{0};  // steady_clock ns; 0 = not yet
};

/// Why a lazy dump cannot serve its pages here, or Ok. CRIU's page server
/// grows a pipe to ~3.2 MiB (PIPE_MAX_SIZE) for every request; without
/// CAP_SYS_RESOURCE that fails when fs.pipe-max-size is lower (default 1
/// MiB) and CRIU 4.1.1 does not notice: the first request then fails with
/// "tee: 65536: Operation not supported".
Status CheckLazyDumpPrerequisites();

/// Empty when CRIU can cache its kernel probe here; otherwise why not and
/// what it costs. CRIU keeps the probe (kerndat) in /run/criu.kdat only
/// when /run is a tmpfs (so a reboot drops it); elsewhere every CRIU run
/// probes the kernel again — ~30-50 ms on the development VM, three times
/// in a lazy migration's downtime (docs/criu.md "The kernel probe").
std::string KernelProbeCacheWarning();

}  // namespace phos::criu
