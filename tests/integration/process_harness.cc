// The out-of-line part of process_harness.h: phosd and `phos` commands, the
// CRIU check, and checkpoint_app's command protocol.
#include "process_harness.h"

#include <cerrno>

#include "criu/criu_client.h"

namespace phos::testing {

using namespace std::chrono_literals;

bool WaitGone(pid_t pid, std::chrono::milliseconds limit) {
  const auto deadline = Clock::now() + limit;
  for (;;) {
    waitpid(pid, nullptr, WNOHANG);
    if (kill(pid, 0) != 0 && errno == ESRCH) return true;
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(5ms);
  }
}

bool KillAndWaitGone(pid_t pid, std::chrono::milliseconds limit) {
  if (pid <= 0) return true;
  kill(pid, SIGKILL);
  return WaitGone(pid, limit);
}

const phos::Status& CriuAvailable() {
  // A function-local static: one probe, made by the first test that asks.
  static const phos::Status check = phos::criu::CriuClient::Check();
  return check;
}

std::vector<std::string> PhosArgv(const std::string& socket, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {PHOS_BIN, "--socket", socket};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

PhosResult RunPhos(const std::string& socket, const std::vector<std::string>& args, std::chrono::milliseconds limit) {
  Child c = Child::Start(PhosArgv(socket, args));
  const int rc = c.Wait(limit);
  return {rc, c.output};
}

::testing::AssertionResult StartSimDaemon(const std::string& socket, const std::vector<std::string>& extra,
                                          Child* daemon) {
  std::vector<std::string> argv = {PHOS_BIN, "daemon", "--backend", "sim", "--socket", socket};
  argv.insert(argv.end(), extra.begin(), extra.end());
  *daemon = Child::Start(argv);
  if (WaitForDataSocket(socket, 20s)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "phosd on " << socket << " not ready after 20 s:\n" << daemon->output;
}

::testing::AssertionResult StopDaemon(Child* daemon) {
  if (daemon->pid <= 0) return ::testing::AssertionSuccess();
  kill(daemon->pid, SIGTERM);
  if (daemon->Wait(10s) != -1000) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "phosd did not stop on SIGTERM";
}

std::string DaemonOutput(Child* daemon, std::chrono::milliseconds wait) {
  if (daemon->pid > 0) daemon->ReadUntil("\x01never", wait);
  return daemon->output;
}

pid_t WaitSessionPid(const std::string& socket, const std::string& command, std::chrono::milliseconds limit) {
  const auto deadline = Clock::now() + limit;
  for (;;) {
    const PhosResult ps = RunPhos(socket, {"ps", "--json"});
    EXPECT_EQ(ps.rc, 0) << ps.output;
    const std::vector<pid_t> pids = SessionPids(ps.output, command);
    if (!pids.empty()) return pids[0];
    if (Clock::now() > deadline) {
      ADD_FAILURE() << "no session of " << command << " in phos ps:\n" << ps.output;
      return -1;
    }
    std::this_thread::sleep_for(20ms);
  }
}

std::string Field(const std::string& text, const std::string& key) {
  std::smatch m;
  return std::regex_search(text, m, std::regex(key + " (\\S+)")) ? std::string(m[1]) : "";
}

std::string CheckpointAppDriver::Log() const { return ReadFile(log_); }

bool CheckpointAppDriver::WaitLog(size_t from, const std::string& needle, std::chrono::milliseconds limit,
                                  std::string* out) const {
  const auto deadline = Clock::now() + limit;
  for (;;) {
    const std::string all = Log();
    *out = all.size() > from ? all.substr(from) : "";
    if (out->find(needle) != std::string::npos) return true;
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(5ms);
  }
}

bool CheckpointAppDriver::TryCmd(const std::string& cmd, std::chrono::milliseconds limit, std::string* out) {
  const int n = next_cmd_++;
  const size_t from = Log().size();
  const std::string tmp = ctl_ + "/tmp";
  {
    std::ofstream f(tmp);
    f << cmd << "\n";
  }
  std::filesystem::rename(tmp, ctl_ + "/cmd-" + std::to_string(n));
  return WaitLog(from, "ack " + std::to_string(n) + "\n", limit, out);
}

std::string CheckpointAppDriver::Cmd(const std::string& cmd) {
  std::string out;
  EXPECT_TRUE(TryCmd(cmd, 30s, &out)) << "no ack for '" << cmd << "':\n" << Log();
  return out;
}

void CheckpointAppDriver::RewindCommands(int n) {
  for (int k = n; k < next_cmd_; ++k) std::filesystem::remove(ctl_ + "/cmd-" + std::to_string(k));
  next_cmd_ = n;
}

}  // namespace phos::testing
