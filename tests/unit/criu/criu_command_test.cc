// CriuCommand (daemon/criu/criu_command.h): the runner of criu's command
// line for lazy migration. Driven with bash standing in for criu, so the
// status byte, the exit status, the log quote, the fds that cross the exec
// and the kill of a hung command are checked without CRIU or root.
#include "criu/criu_command.h"

#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

namespace phos::criu {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

class CriuCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/phos_criu_command_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // bash -c SCRIPT: with status_fd, "--status-fd N" follows, so $2 is N.
  CriuCommand::Spec Bash(const std::string& script, bool status_fd) const {
    CriuCommand::Spec spec;
    spec.binary = "bash";
    spec.args = {"-c", script, "criu"};
    spec.status_fd = status_fd;
    spec.what = "test command";
    spec.log_path = dir_ + "/cmd.log";
    return spec;
  }
  std::string dir_;
};

TEST_F(CriuCommandTest, ReadyThenExitZero) {
  std::unique_ptr<CriuCommand> c;
  ASSERT_TRUE(CriuCommand::Start(Bash("printf x >&\"$2\"; sleep 0.1; exit 0", true), &c).ok());
  ASSERT_GT(c->pid(), 0);
  EXPECT_TRUE(c->WaitReady(10s).ok());
  EXPECT_TRUE(c->Wait(10s).ok());
  EXPECT_TRUE(c->exited());
}

TEST_F(CriuCommandTest, ExitBeforeReadyQuotesTheLog) {
  std::unique_ptr<CriuCommand> c;
  const std::string script =
      "echo '(00.001) Error (criu/x.c:1): injected failure' > " + dir_ + "/cmd.log; exit 3";
  ASSERT_TRUE(CriuCommand::Start(Bash(script, true), &c).ok());
  const Status s = c->WaitReady(10s);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Status::Code::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find("exited with status 3"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("injected failure"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("test command"), std::string::npos) << s.ToString();
  EXPECT_TRUE(c->exited());
}

TEST_F(CriuCommandTest, NonZeroExitAfterReadyIsAnError) {
  std::unique_ptr<CriuCommand> c;
  ASSERT_TRUE(CriuCommand::Start(Bash("printf x >&\"$2\"; exit 5", true), &c).ok());
  ASSERT_TRUE(c->WaitReady(10s).ok());
  const Status s = c->Wait(10s);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("exited with status 5"), std::string::npos) << s.ToString();
}

TEST_F(CriuCommandTest, HungCommandTimesOutAndIsKilled) {
  std::unique_ptr<CriuCommand> c;
  ASSERT_TRUE(CriuCommand::Start(Bash("exec sleep 600", true), &c).ok());
  const Status s = c->WaitReady(100ms);
  EXPECT_EQ(s.code(), Status::Code::kUnavailable) << s.ToString();
  EXPECT_FALSE(c->exited());
  EXPECT_EQ(c->Wait(50ms).code(), Status::Code::kUnavailable);
  const pid_t pid = c->pid();
  c->Kill();
  EXPECT_TRUE(c->exited());
  EXPECT_NE(kill(pid, 0), 0) << "pid " << pid << " still exists after Kill()";
  const Status w = c->Wait(10s);
  EXPECT_NE(w.message().find("killed by signal 9"), std::string::npos) << w.ToString();
}

// Only the named fds cross the exec (under their own numbers), although
// every fd here is CLOEXEC.
TEST_F(CriuCommandTest, OnlyInheritedFdsCrossTheExec) {
  int named[2], other[2];
  ASSERT_EQ(pipe2(named, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(other, O_CLOEXEC), 0);
  const std::string w = std::to_string(named[1]), o = std::to_string(other[1]);
  const std::string script = "if [ -e /proc/self/fd/" + o + " ]; then echo leaked >&" + w +
                             "; else echo inherited >&" + w + "; fi";
  CriuCommand::Spec spec = Bash(script, false);
  spec.inherit_fds = {named[1]};
  std::unique_ptr<CriuCommand> c;
  ASSERT_TRUE(CriuCommand::Start(spec, &c).ok());
  close(named[1]);  // the child has its own copy
  ASSERT_TRUE(c->Wait(10s).ok());
  char buf[32] = {};
  const ssize_t n = read(named[0], buf, sizeof buf - 1);
  ASSERT_GT(n, 0);
  EXPECT_EQ(std::string(buf, static_cast<std::size_t>(n)), "inherited\n");
  close(named[0]);
  close(other[0]);
  close(other[1]);
  // Ours stayed CLOEXEC: the child's copy was cleared, not the parent's.
}

TEST_F(CriuCommandTest, MissingBinaryIsUnavailable) {
  CriuCommand::Spec spec = Bash("true", true);
  spec.binary = dir_ + "/no-such-criu";
  std::unique_ptr<CriuCommand> c;
  const Status s = CriuCommand::Start(spec, &c);
  EXPECT_EQ(s.code(), Status::Code::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("could not run"), std::string::npos) << s.ToString();
  EXPECT_EQ(c, nullptr);
}

// The exit clock notes the exit while the owner does something else, and
// its instant lies between the start and the owner's reaping.
TEST_F(CriuCommandTest, ExitClockSeesTheExitWithoutTheOwner) {
  std::unique_ptr<CriuCommand> c;
  const auto before = std::chrono::steady_clock::now();
  ASSERT_TRUE(CriuCommand::Start(Bash("exit 0", false), &c).ok());
  c->StartExitClock();
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!c->ExitSeenAt() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(1ms);
  ASSERT_TRUE(c->ExitSeenAt().has_value()) << "the watcher never saw the exit";
  EXPECT_FALSE(c->exited()) << "the watcher must not reap";
  ASSERT_TRUE(c->Wait(10s).ok());
  EXPECT_GE(*c->ExitSeenAt(), before);
  EXPECT_LE(*c->ExitSeenAt(), std::chrono::steady_clock::now());
}

// A watched command that never exits is killed by the destructor, which
// then joins the watcher (this test would hang otherwise).
TEST_F(CriuCommandTest, DestructorEndsAWatchedCommand) {
  std::unique_ptr<CriuCommand> c;
  ASSERT_TRUE(CriuCommand::Start(Bash("exec sleep 600", false), &c).ok());
  c->StartExitClock();
  const pid_t pid = c->pid();
  c.reset();
  EXPECT_NE(kill(pid, 0), 0);
}

TEST_F(CriuCommandTest, DestructorKillsARunningCommand) {
  pid_t pid = -1;
  {
    std::unique_ptr<CriuCommand> c;
    ASSERT_TRUE(CriuCommand::Start(Bash("exec sleep 600", false), &c).ok());
    pid = c->pid();
  }
  EXPECT_NE(kill(pid, 0), 0) << "pid " << pid << " outlived its CriuCommand";
}

}  // namespace
}  // namespace phos::criu
