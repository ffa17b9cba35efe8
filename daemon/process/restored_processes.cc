#include "process/restored_processes.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <cerrno>
#include <vector>

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

namespace phos::process {

RestoredProcesses::RestoredProcesses() {
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  reaper_ = std::thread([this] { ReaperLoop(); });
}

RestoredProcesses::~RestoredProcesses() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof one);
  reaper_.join();
  for (auto& [pid, fd] : entries_) close(fd);
  close(wake_fd_);
}

bool RestoredProcesses::Track(pid_t pid) {
  const int fd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) {
    spdlog::warn("restored pid {}: cannot watch it (pidfd_open: {}); its exit status will be unknown", pid,
                 std::strerror(errno));
    return false;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    exited_.erase(pid);  // a reused pid
    entries_[pid] = fd;
  }
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof one);
  return true;
}

std::optional<RestoredProcesses::Exit> RestoredProcesses::WaitExit(pid_t pid, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return exited_.count(pid) != 0 || stopping_; });
  auto it = exited_.find(pid);
  if (it == exited_.end()) return std::nullopt;
  return it->second;
}

void RestoredProcesses::ReaperLoop() {
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<pid_t> pids;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
      fds.push_back({wake_fd_, POLLIN, 0});
      pids.push_back(0);
      for (const auto& [pid, fd] : entries_) {
        fds.push_back({fd, POLLIN, 0});
        pids.push_back(pid);
      }
    }
    // Blocks until a tracked process exits or the set changes: no polling.
    if (poll(fds.data(), fds.size(), -1) < 0) continue;  // EINTR
    if (fds[0].revents != 0) {
      uint64_t v;
      (void)!read(wake_fd_, &v, sizeof v);
    }
    for (size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      Exit e;
      siginfo_t info{};
      if (waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(fds[i].fd), &info, WEXITED) == 0) {
        e.known = true;
        e.status = info.si_code == CLD_EXITED ? info.si_status : 128 + info.si_status;
      }  // else ECHILD: not our child (phosd is not its subreaper): unknown
      std::lock_guard<std::mutex> lock(mu_);
      close(fds[i].fd);
      entries_.erase(pids[i]);
      exited_[pids[i]] = e;
      spdlog::info("restored pid {} exited ({})", pids[i],
                   e.known ? "status " + std::to_string(e.status) : std::string("status unknown: not phosd's child"));
      cv_.notify_all();
    }
  }
}

}  // namespace phos::process
