#include "process/lazy_copy_guard.h"

#include <fcntl.h>
#include <linux/close_range.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

namespace phos::process {
namespace {

// The guard's fds after the fork: the pipe's read end and the copy's pidfd.
constexpr int kReleaseFd = 3;
constexpr int kCopyFd = 4;

[[noreturn]] void RunGuard(int release_fd, int copy_fd) {
  // Only async-signal-safe calls from here on. First keep nothing of
  // phosd's but the two fds: not its sockets (a listening port held here
  // would outlive phosd) and not the write end of any other guard's pipe.
  if (release_fd != kReleaseFd) {
    if (copy_fd == kReleaseFd) {
      copy_fd = fcntl(copy_fd, F_DUPFD, kCopyFd + 1);
      if (copy_fd < 0) _exit(2);
    }
    if (dup2(release_fd, kReleaseFd) < 0) _exit(2);
  }
  if (copy_fd != kCopyFd && dup2(copy_fd, kCopyFd) < 0) _exit(2);
  (void)syscall(SYS_close_range, kCopyFd + 1, ~0u, 0u);
  // A terminate sent to phosd's whole group (a service manager stopping
  // it) must not end the guard before phosd: the guard acts on phosd's end.
  (void)signal(SIGTERM, SIG_IGN);
  (void)signal(SIGINT, SIG_IGN);
  (void)signal(SIGHUP, SIG_IGN);
  for (;;) {
    char byte;
    const ssize_t n = read(kReleaseFd, &byte, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n == 1) _exit(0);  // released: the copy has its memory
    // End of file (or a broken pipe): phosd is gone before the copy's
    // memory arrived. It must not run on zeros.
    (void)syscall(SYS_pidfd_send_signal, kCopyFd, SIGKILL, nullptr, 0);
    _exit(1);
  }
}

}  // namespace

Status LazyCopyGuard::Start(pid_t copy) {
  if (guard_ != 0) return Status::FailedPrecondition("lazy copy guard already started");
  const int copy_fd = static_cast<int>(syscall(SYS_pidfd_open, copy, 0));
  if (copy_fd < 0) return Status::FromErrno("pidfd_open of the lazily restored pid " + std::to_string(copy), errno);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    const int err = errno;
    close(copy_fd);
    return Status::FromErrno("pipe for the lazy copy guard", err);
  }
  const pid_t child = fork();
  if (child < 0) {
    const int err = errno;
    close(copy_fd);
    close(fds[0]);
    close(fds[1]);
    return Status::FromErrno("fork of the lazy copy guard of pid " + std::to_string(copy), err);
  }
  if (child == 0) RunGuard(fds[0], copy_fd);
  close(copy_fd);
  close(fds[0]);
  guard_ = child;
  release_fd_ = fds[1];
  return Status::Ok();
}

bool LazyCopyGuard::Release() {
  if (guard_ == 0) return false;
  const char done = 'd';
  ssize_t w;
  do {
    w = write(release_fd_, &done, 1);
  } while (w < 0 && errno == EINTR);
  close(release_fd_);
  release_fd_ = -1;
  // Reaped by pid, never waitpid(-1) (criu_client.h "Children"). A guard
  // whose write failed sees end of file instead — and kills: a write to a
  // pipe whose reader is alive does not fail.
  siginfo_t info{};
  int rc;
  while ((rc = waitid(P_PID, static_cast<id_t>(guard_), &info, WEXITED)) != 0 && errno == EINTR) {
  }
  guard_ = 0;
  return rc == 0 && info.si_code == CLD_EXITED && info.si_status == 0;
}

}  // namespace phos::process
