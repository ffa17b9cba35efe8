// Helpers for integration tests that drive whole processes under `phos run`
// (docs/criu.md "Whole-process checkpoint and restore"): the app in its own
// session with stdin /dev/null and stdout/stderr on files opened O_APPEND
// (CRIU dumps those without options; a pipe to the test would make a dump
// fail), its host pid looked up with `phos ps --json`, and processes that
// are not our children (restored ones, reaped by phosd or init) waited for
// through /proc. Also phosd on the sim backend, `phos` commands, the CRIU
// check and checkpoint_app's command protocol. See harness.h for Child and
// WaitForDataSocket.
//
// The small helpers are inline here; the rest is process_harness.cc (the
// library phos_process_harness, tests/integration/CMakeLists.txt).
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "harness.h"

namespace phos::testing {

/// The whole file; empty when it cannot be read.
inline std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

/// Entries of `dir` (names), sorted; empty when it does not exist.
inline std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

/// "a, b, c", or "(nothing)" (for failure messages).
inline std::string JoinNames(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s.empty() ? "(nothing)" : s;
}

/// The state letter of `pid` from /proc/PID/stat ('R', 'S', 'T', 'Z', ...),
/// or '\0' when there is no such process.
inline char ProcessState(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(f, stat)) return '\0';
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size()) return '\0';
  return stat[paren + 2];
}

/// Gone, or a zombie nobody has reaped yet (it runs no more either way).
inline bool ProcessEnded(pid_t pid) {
  const char s = ProcessState(pid);
  return s == '\0' || s == 'Z';
}

/// Waits (bounded, 5 ms steps) until ProcessEnded(pid).
inline bool WaitEnded(pid_t pid, std::chrono::milliseconds limit) {
  const auto deadline = Clock::now() + limit;
  while (!ProcessEnded(pid)) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

/// Waits (bounded, 5 ms steps) until the file at `path` contains `needle`.
inline bool WaitFileText(const std::string& path, const std::string& needle, std::chrono::milliseconds limit) {
  const auto deadline = Clock::now() + limit;
  while (ReadFile(path).find(needle) == std::string::npos) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

/// Waits (bounded, 5 ms steps) until nothing exists at `path`.
inline bool WaitPathGone(const std::string& path, std::chrono::milliseconds limit) {
  const auto deadline = Clock::now() + limit;
  std::error_code ec;
  while (std::filesystem::exists(path, ec)) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

/// fork + execv(argv[0]) in a new session, stdin /dev/null, stdout/stderr
/// appended to `out` / `err` (created 0644; one open file for both when
/// they are the same path), no other descriptors. `set` entries ("K=V") are
/// added to the environment, `unset` names removed. The child's pid (our
/// child), or -1.
inline pid_t StartDetached(const std::vector<std::string>& argv, const std::string& out, const std::string& err,
                           const std::vector<std::string>& set = {}, const std::vector<std::string>& unset = {}) {
  const pid_t pid = fork();
  if (pid != 0) return pid;
  setsid();
  const int in = open("/dev/null", O_RDONLY);
  const int o = open(out.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  const int e = err == out ? dup(o) : open(err.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (in < 0 || o < 0 || e < 0) _exit(126);
  dup2(in, 0);
  dup2(o, 1);
  dup2(e, 2);
  syscall(SYS_close_range, 3u, ~0u, 0u);
  for (const auto& name : unset) unsetenv(name.c_str());
  for (const auto& kv : set) putenv(const_cast<char*>(kv.c_str()));
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  execv(args[0], args.data());
  _exit(127);
}

/// True while our child `pid` has not exited (does not reap it otherwise:
/// WNOWAIT).
inline bool ChildRunning(pid_t pid) {
  siginfo_t info{};
  return waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == 0;
}

/// Waits for our child *pid to exit and sets *pid to -1. Its exit status,
/// -signal, or -1000 if it did not exit within `limit` (then it is killed).
inline int WaitChildExit(pid_t* pid, std::chrono::milliseconds limit) {
  const auto deadline = Clock::now() + limit;
  int st = 0;
  for (;;) {
    if (waitpid(*pid, &st, WNOHANG) == *pid) break;
    if (Clock::now() > deadline) {
      kill(*pid, SIGKILL);
      waitpid(*pid, &st, 0);
      *pid = -1;
      return -1000;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  *pid = -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
}

/// The host pids of the sessions in `phos ps --json` output whose command
/// contains `command` (field order as proto/phos.proto SessionInfo: pid,
/// then command).
inline std::vector<pid_t> SessionPids(const std::string& ps_json, const std::string& command) {
  static const std::regex session(R"re("pid":\s*(\d+),\s*"command":\s*"((?:[^"\\]|\\.)*)")re");
  std::vector<pid_t> pids;
  for (auto it = std::sregex_iterator(ps_json.begin(), ps_json.end(), session); it != std::sregex_iterator(); ++it) {
    if ((*it)[2].str().find(command) != std::string::npos) pids.push_back(std::stoi((*it)[1]));
  }
  return pids;
}

// ------------------------------------------------------------ process_harness.cc

/// Waits (bounded, 5 ms steps) until no process `pid` exists, reaping it
/// if it is our child (or was re-parented to us, a subreaper). A process
/// that is not our child counts once its parent reaped it.
bool WaitGone(pid_t pid, std::chrono::milliseconds limit);

/// SIGKILLs `pid` and WaitGone()s it; true at once for pid <= 0.
bool KillAndWaitGone(pid_t pid, std::chrono::milliseconds limit = std::chrono::seconds(10));

/// CriuClient::Check(), run once per test program (tests skip when it failed).
const phos::Status& CriuAvailable();

/// What a `phos` command printed (stdout and stderr) and its exit status.
struct PhosResult {
  int rc;
  std::string output;
};

/// {phos, "--socket", socket, args...}
std::vector<std::string> PhosArgv(const std::string& socket, const std::vector<std::string>& args);

/// Runs `phos --socket SOCKET ARGS...` to its end (Child::Wait: -1000 and
/// killed when it runs past `limit`).
PhosResult RunPhos(const std::string& socket, const std::vector<std::string>& args,
                   std::chrono::milliseconds limit = std::chrono::seconds(60));

/// `phos daemon --backend sim --socket SOCKET EXTRA...` into *daemon; fails
/// (with its output) unless its data socket accepts within 20 s.
::testing::AssertionResult StartSimDaemon(const std::string& socket, const std::vector<std::string>& extra,
                                          Child* daemon);

/// SIGTERM to *daemon and wait up to 10 s for it to exit; fails if it did
/// not. Nothing to do (success) when it is not running.
::testing::AssertionResult StopDaemon(Child* daemon);

/// What *daemon printed so far, after reading what arrives within `wait`
/// (phosd's output is a pipe: read it now and then so it never fills).
std::string DaemonOutput(Child* daemon, std::chrono::milliseconds wait = std::chrono::milliseconds(200));

/// The host pid of the first session, on the phosd at `socket`, whose
/// command contains `command` (`phos ps --json`), waiting up to `limit` for
/// one; -1 and a test failure if none comes.
pid_t WaitSessionPid(const std::string& socket, const std::string& command, std::chrono::milliseconds limit);

/// The word after "KEY " in `text` ("checksum 0x1f" -> "0x1f"); "" if absent.
std::string Field(const std::string& text, const std::string& key);

/// A mixin for fixtures that drive checkpoint_app (checkpoint_app.cu): it
/// takes commands as files CTL/cmd-N (written whole, by rename) and answers
/// each with a line "ack N" in its log, its stdout and stderr. The fixture
/// sets ctl_ and log_ (SetUp) and starts the app; a restored app waits for
/// the command after the last one its image saw (RewindCommands).
class CheckpointAppDriver {
 protected:
  /// The whole log ("" before the app wrote any).
  std::string Log() const;
  /// Waits (5 ms steps) until the log from byte `from` contains `needle`;
  /// *out = that part of the log, either way.
  bool WaitLog(size_t from, const std::string& needle, std::chrono::milliseconds limit, std::string* out) const;
  /// Sends the next command; waits up to `limit` for its ack. *out = the log's answer.
  bool TryCmd(const std::string& cmd, std::chrono::milliseconds limit, std::string* out);
  /// TryCmd with 30 s; a test failure (with the log) when no ack comes. The answer.
  std::string Cmd(const std::string& cmd);
  /// Removes the command files from `n` on: the next command sent is n.
  void RewindCommands(int n);

  std::string ctl_;   // the app's control directory
  std::string log_;   // its stdout+stderr (O_APPEND)
  int next_cmd_ = 0;  // the number of the next command
};

}  // namespace phos::testing
