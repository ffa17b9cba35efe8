// The phos binary end to end: errors without a daemon; status/ps against a
// daemon started with `phos daemon`; clean shutdown on SIGTERM.
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>

namespace {

struct Result {
  int exit_code = -1;
  std::string out, err;
};

// True if something accepts connections on the unix socket at `path`.
bool Accepts(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  bool ok = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return ok;
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/phos-cli-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    socket_ = dir_ + "/phosd.sock";
  }
  void TearDown() override {
    if (daemon_pid_ > 0) {
      kill(daemon_pid_, SIGKILL);
      waitpid(daemon_pid_, nullptr, 0);
    }
    std::filesystem::remove_all(dir_);
  }

  // Runs `phos ARGS` with PHOS_SOCKET unset, capturing both streams.
  Result Phos(const std::string& args) {
    std::string cmd = "env -u PHOS_SOCKET " + std::string(PHOS_CLI_PATH) + " " + args + " >" +
                      dir_ + "/out 2>" + dir_ + "/err";
    int rc = std::system(cmd.c_str());
    Result r;
    r.exit_code = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    r.out = Slurp(dir_ + "/out");
    r.err = Slurp(dir_ + "/err");
    return r;
  }

  void StartDaemon() {
    daemon_pid_ = fork();
    ASSERT_GE(daemon_pid_, 0);
    if (daemon_pid_ == 0) {
      std::string log = dir_ + "/daemon.log";
      freopen(log.c_str(), "w", stderr);
      execl(PHOS_CLI_PATH, PHOS_CLI_PATH, "daemon", "--backend", "sim", "--socket",
            socket_.c_str(), "--log-level", "debug", static_cast<char*>(nullptr));
      _exit(127);
    }
    // Bounded wait until the daemon accepts connections. (A stale socket
    // file may exist before the new daemon replaces it, so existence alone
    // proves nothing.)
    bool up = false;
    for (int i = 0; i < 500 && !up; ++i) {
      up = Accepts(socket_);
      if (!up) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ASSERT_TRUE(up) << Slurp(dir_ + "/daemon.log");
  }

  std::string dir_, socket_;
  pid_t daemon_pid_ = -1;
};

TEST_F(CliTest, StatusWithoutDaemonSaysWhereItLookedAndHowToStart) {
  Result r = Phos("status --socket " + socket_);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find(socket_), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("phos daemon"), std::string::npos) << r.err;
  // One clear line, not a stack of gRPC noise.
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

TEST_F(CliTest, PsWithoutDaemonFailsToo) {
  Result r = Phos("ps --socket " + socket_);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find(socket_), std::string::npos) << r.err;
}

TEST_F(CliTest, HelpListsCommands) {
  Result r = Phos("--help");
  EXPECT_EQ(r.exit_code, 0);
  for (const char* cmd : {"daemon", "status", "ps"}) {
    EXPECT_NE(r.out.find(cmd), std::string::npos) << cmd << " missing from:\n" << r.out;
  }
  Result d = Phos("daemon --help");
  EXPECT_EQ(d.exit_code, 0);
  for (const char* flag : {"--backend", "--socket", "--log-level", "--sim-link-gbps"}) {
    EXPECT_NE(d.out.find(flag), std::string::npos) << flag << " missing from:\n" << d.out;
  }
}

TEST_F(CliTest, BadBackendNameIsRejected) {
  Result r = Phos("daemon --backend tpu --socket " + socket_);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_FALSE(std::filesystem::exists(socket_));
}

TEST_F(CliTest, StatusAndPsAgainstARunningDaemonThenSigterm) {
  StartDaemon();
  Result st = Phos("status --socket " + socket_);
  ASSERT_EQ(st.exit_code, 0) << st.err;
  EXPECT_NE(st.out.find("sim"), std::string::npos) << st.out;
  EXPECT_NE(st.out.find("phos sim"), std::string::npos) << st.out;
  EXPECT_NE(st.out.find("80.0 GiB"), std::string::npos) << st.out;

  // PHOS_SOCKET is honoured too.
  std::string cmd = "PHOS_SOCKET=" + socket_ + " " + PHOS_CLI_PATH + " status --json >" + dir_ +
                    "/json 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << Slurp(dir_ + "/json");
  EXPECT_NE(Slurp(dir_ + "/json").find("\"backend\": \"sim\""), std::string::npos)
      << Slurp(dir_ + "/json");

  Result ps = Phos("ps --socket " + socket_);
  ASSERT_EQ(ps.exit_code, 0) << ps.err;
  EXPECT_NE(ps.out.find("PID"), std::string::npos) << ps.out;
  EXPECT_NE(ps.out.find("STATE"), std::string::npos) << ps.out;

  // A second daemon on the same socket refuses and names the first.
  Result second = Phos("daemon --backend sim --socket " + socket_);
  EXPECT_NE(second.exit_code, 0);
  EXPECT_NE(second.err.find(std::to_string(daemon_pid_)), std::string::npos) << second.err;

  ASSERT_EQ(kill(daemon_pid_, SIGTERM), 0);
  int status = 0;
  ASSERT_EQ(waitpid(daemon_pid_, &status, 0), daemon_pid_);
  daemon_pid_ = -1;
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << Slurp(dir_ + "/daemon.log");
  EXPECT_FALSE(std::filesystem::exists(socket_));
  EXPECT_NE(Slurp(dir_ + "/daemon.log").find("exited cleanly"), std::string::npos);
}

TEST_F(CliTest, DaemonKilledHardLeavesAStaleSocketThatTheNextOneReplaces) {
  StartDaemon();
  kill(daemon_pid_, SIGKILL);
  waitpid(daemon_pid_, nullptr, 0);
  daemon_pid_ = -1;
  ASSERT_TRUE(std::filesystem::exists(socket_));  // left behind
  Result r = Phos("status --socket " + socket_);
  EXPECT_NE(r.exit_code, 0);
  StartDaemon();  // replaces it
  Result st = Phos("status --socket " + socket_);
  EXPECT_EQ(st.exit_code, 0) << st.err;
  EXPECT_NE(Slurp(dir_ + "/daemon.log").find("stale socket"), std::string::npos);
}

}  // namespace
