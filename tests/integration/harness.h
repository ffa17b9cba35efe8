// Process plumbing shared by the integration tests: a child process with
// its output on a pipe, and waiting for phosd's data socket. Header-only
// (each test is one executable).
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace phos::testing {

using Clock = std::chrono::steady_clock;

/// A child process with stdout+stderr on a pipe.
struct Child {
  pid_t pid = -1;
  int out = -1;
  std::string output;

  /// fork + execv(argv[0]); `env` entries ("K=V") are added to the child's
  /// environment.
  static Child Start(const std::vector<std::string>& argv, const std::vector<std::string>& env = {}) {
    Child c;
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return c;
    c.pid = fork();
    if (c.pid == 0) {
      dup2(fds[1], 1);
      dup2(fds[1], 2);
      for (const auto& e : env) putenv(const_cast<char*>(e.c_str()));
      std::vector<char*> args;
      for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
    close(fds[1]);
    c.out = fds[0];
    return c;
  }

  /// Reads output until `needle` appears, the process closes its output, or
  /// the deadline passes. True if the needle was seen (or, for an empty
  /// needle, the output was closed).
  bool ReadUntil(const std::string& needle, std::chrono::milliseconds limit) {
    const auto deadline = Clock::now() + limit;
    while (needle.empty() || output.find(needle) == std::string::npos) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0 || out < 0) return false;
      pollfd p{out, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left)) <= 0) continue;
      char buf[4096];
      ssize_t n = read(out, buf, sizeof buf);
      if (n <= 0) {
        close(out);
        out = -1;
        return needle.empty() ? true : output.find(needle) != std::string::npos;
      }
      output.append(buf, n);
    }
    return true;
  }

  /// Waits for exit (SIGKILL after `limit`). The exit status, -signal, or
  /// -1000 on timeout.
  int Wait(std::chrono::milliseconds limit) {
    ReadUntil("", limit);
    const auto deadline = Clock::now() + limit;
    int status = 0;
    for (;;) {
      pid_t r = waitpid(pid, &status, WNOHANG);
      if (r == pid) break;
      if (Clock::now() > deadline) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        if (out >= 0) close(out);
        out = -1;
        pid = -1;
        return -1000;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (out >= 0) {
      ReadUntil("", std::chrono::milliseconds(1000));
      if (out >= 0) close(out);
      out = -1;
    }
    pid = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  }
};

/// Whether a UNIX socket at `path` of `type` accepts a connection now.
inline bool UnixSocketAccepts(const std::string& path, int type) {
  int fd = ::socket(AF_UNIX, type | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  close(fd);
  return ok;
}

/// Waits until phosd serves: its data socket (`<control socket>.data`) and
/// its control socket both accept a connection. (phosd opens the data plane
/// first: waiting for it alone let a test's next `phos` command find no
/// control socket yet — seen once in e2e_process_test under load.)
inline bool WaitForDataSocket(const std::string& control_socket, std::chrono::milliseconds limit) {
  const auto deadline = Clock::now() + limit;
  while (Clock::now() < deadline) {
    if (UnixSocketAccepts(control_socket + ".data", SOCK_SEQPACKET) &&
        UnixSocketAccepts(control_socket, SOCK_STREAM)) {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

}  // namespace phos::testing
