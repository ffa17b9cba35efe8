#include "criu/criu_command.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <linux/magic.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>

#include <spdlog/spdlog.h>

#include "criu/criu_log.h"

extern char** environ;

namespace phos::criu {
namespace {

int PidfdOpen(pid_t pid) { return static_cast<int>(syscall(SYS_pidfd_open, pid, 0)); }

/// Milliseconds left until `deadline` for poll(), at least 0.
int MsLeft(std::chrono::steady_clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  return left.count() > 0 ? static_cast<int>(std::min<std::int64_t>(left.count(), 1 << 30)) : 0;
}

}  // namespace

Status CriuCommand::Start(Spec spec, std::unique_ptr<CriuCommand>* out) {
  std::unique_ptr<CriuCommand> c(new CriuCommand());
  c->spec_ = std::move(spec);
  const std::string binary = c->spec_.binary.empty() ? "criu" : c->spec_.binary;
  std::vector<std::string> args = c->spec_.args;
  std::vector<int> inherit = c->spec_.inherit_fds;
  int status_pipe[2] = {-1, -1};
  if (c->spec_.status_fd) {
    if (pipe2(status_pipe, O_CLOEXEC) != 0) return Status::FromErrno(c->spec_.what + ": pipe", errno);
    c->status_read_ = status_pipe[0];
    args.push_back("--status-fd");
    args.push_back(std::to_string(status_pipe[1]));
    inherit.push_back(status_pipe[1]);
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  // dup2 onto itself clears FD_CLOEXEC in the child (POSIX; glibc >= 2.29):
  // exactly these fds cross the exec, under their own numbers.
  for (int fd : inherit) posix_spawn_file_actions_adddup2(&fa, fd, fd);
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(binary.c_str()));
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  // posix_spawnp looks a bare name up on PATH, as libcriu's execlp does.
  const int rc = posix_spawnp(&pid, binary.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (status_pipe[1] >= 0) close(status_pipe[1]);  // the child holds the write end now
  if (rc != 0) {
    return Status::Unavailable(c->spec_.what + ": could not run '" + binary + "': " + std::strerror(rc) +
                               "; is CRIU >= 4.0 installed and on PATH (scripts/setup.sh)?");
  }
  c->pid_ = pid;
  c->pidfd_ = PidfdOpen(pid);
  if (c->pidfd_ < 0) {
    const int err = errno;
    c->Kill();
    return Status::FromErrno(c->spec_.what + ": pidfd_open of criu pid " + std::to_string(pid), err);
  }
  spdlog::debug("criu: started pid {}: {} {}", pid, binary, fmt::join(args, " "));
  *out = std::move(c);
  return Status::Ok();
}

CriuCommand::~CriuCommand() {
  Kill();  // ends the watcher's poll too: the pidfd turns readable
  if (exit_clock_.joinable()) exit_clock_.join();
  if (pidfd_ >= 0) close(pidfd_);
  if (status_read_ >= 0) close(status_read_);
}

bool CriuCommand::WaitExit(std::chrono::milliseconds timeout) {
  if (reaped_) return true;
  if (pidfd_ < 0) return false;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    pollfd p{pidfd_, POLLIN, 0};
    const int n = poll(&p, 1, MsLeft(deadline));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    break;
  }
  siginfo_t info{};
  if (waitid(P_PIDFD, static_cast<id_t>(pidfd_), &info, WEXITED) != 0) return false;
  reaped_ = true;
  killed_by_signal_ = info.si_code == CLD_KILLED || info.si_code == CLD_DUMPED;
  exit_status_ = info.si_status;
  return true;
}

Status CriuCommand::ExitError() const {
  const std::string how = killed_by_signal_ ? "was killed by signal " + std::to_string(exit_status_)
                                            : "exited with status " + std::to_string(exit_status_);
  return Status::FailedPrecondition(spec_.what + ": criu " + how + QuoteCriuLog(spec_.log_path));
}

Status CriuCommand::WaitReady(std::chrono::milliseconds timeout) {
  if (status_read_ < 0) return Status::Internal(spec_.what + ": WaitReady without a status fd");
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    pollfd p[2] = {{status_read_, POLLIN, 0}, {pidfd_, POLLIN, 0}};
    const int n = poll(p, 2, MsLeft(deadline));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::FromErrno(spec_.what + ": poll", errno);
    if (n == 0) {
      return Status::Unavailable(spec_.what + ": criu (pid " + std::to_string(pid_) + ") was not ready within " +
                                 std::to_string(timeout.count()) + " ms" + QuoteCriuLog(spec_.log_path, 3));
    }
    if (p[0].revents != 0) {
      char byte = 1;
      const ssize_t r = read(status_read_, &byte, 1);
      if (r == 1) return Status::Ok();
      // End of file: criu closed the pipe without writing — it exited.
    }
    if (WaitExit(std::chrono::milliseconds(10000))) {
      if (!killed_by_signal_ && exit_status_ == 0) {
        return Status::Internal(spec_.what + ": criu exited with status 0 before it said it was ready");
      }
      return ExitError();
    }
  }
}

Status CriuCommand::Wait(std::chrono::milliseconds timeout) {
  if (!WaitExit(timeout)) {
    return Status::Unavailable(spec_.what + ": criu (pid " + std::to_string(pid_) + ") still runs after " +
                               std::to_string(timeout.count()) + " ms");
  }
  if (killed_by_signal_ || exit_status_ != 0) return ExitError();
  return Status::Ok();
}

void CriuCommand::StartExitClock() {
  if (exit_clock_.joinable() || pidfd_ < 0) return;
  const int pidfd = pidfd_;
  exit_clock_ = std::thread([this, pidfd] {
    for (;;) {
      pollfd p{pidfd, POLLIN, 0};
      const int n = poll(&p, 1, -1);  // the destructor kills the command first: this returns
      if (n < 0 && errno == EINTR) continue;
      if (n > 0) {
        exit_seen_ns_.store(std::chrono::steady_clock::now().time_since_epoch().count(), std::memory_order_release);
      }
      return;
    }
  });
}

std::optional<std::chrono::steady_clock::time_point> CriuCommand::ExitSeenAt() const {
  const std::int64_t ns = exit_seen_ns_.load(std::memory_order_acquire);
  if (ns == 0) return std::nullopt;
  return std::chrono::steady_clock::time_point(std::chrono::steady_clock::duration(ns));
}

void CriuCommand::Kill() {
  if (reaped_ || pid_ <= 0) return;
  if (pidfd_ >= 0) {
    (void)syscall(SYS_pidfd_send_signal, pidfd_, SIGKILL, nullptr, 0);
  } else {
    (void)kill(pid_, SIGKILL);
  }
  if (!WaitExit(std::chrono::milliseconds(10000))) {
    spdlog::error("criu: pid {} ({}) did not end within 10 s of SIGKILL", pid_, spec_.what);
  }
}

std::string KernelProbeCacheWarning() {
  struct statfs fs {};
  if (::statfs("/run", &fs) != 0) return "";
  if (fs.f_type == TMPFS_MAGIC || fs.f_type == RAMFS_MAGIC) return "";
  if (::access("/run/criu.kdat", R_OK) == 0) return "";  // someone provides the cache
  return "/run is not a tmpfs, so CRIU cannot cache its kernel probe (/run/criu.kdat): every checkpoint, "
         "restore, migration and template start probes the kernel again (tens of ms each; docs/criu.md "
         "\"The kernel probe\"). Hosts whose /run is a tmpfs (systemd's default) do not pay this";
}

Status CheckLazyDumpPrerequisites() {
  // CRIU 4.1.1 (criu/include/page-pipe.h): PIPE_MAX_SIZE = 8 pages / 40-byte
  // pipe_buffer = 819 slots of 4 KiB.
  constexpr std::uint64_t kCriuTeePipeBytes = 819ull * 4096;
  std::uint64_t max_size = 0;
  {
    std::ifstream f("/proc/sys/fs/pipe-max-size");
    f >> max_size;
  }
  if (max_size >= kCriuTeePipeBytes) return Status::Ok();
  // CAP_SYS_RESOURCE (bit 24) lets CRIU exceed the limit.
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("CapEff:", 0) != 0) continue;
    std::uint64_t caps = 0;
    std::istringstream(line.substr(7)) >> std::hex >> caps;
    if ((caps >> 24) & 1u) return Status::Ok();
  }
  return Status::FailedPrecondition(
      "lazy migration: CRIU's page server needs pipes of " + std::to_string(kCriuTeePipeBytes) +
      " bytes, but fs.pipe-max-size is " + std::to_string(max_size) +
      " and phosd lacks CAP_SYS_RESOURCE to exceed it; raise it on this host (`sysctl -w "
      "fs.pipe-max-size=4194304`) or migrate without --lazy-pages");
}

}  // namespace phos::criu
