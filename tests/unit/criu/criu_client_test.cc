// CriuClient against the real CRIU (docs/criu.md): dump/restore of a forked
// counter process. Needs root and CRIU >= 4.0; every CRIU test skips with a
// "skipped: ..." message when CriuClient::Check() fails. The log-quoting
// tests at the end run everywhere.
//
// The counter child calls setsid() and points stdio at /dev/null, so it has
// no controlling terminal, is its own session leader and holds no pipe to
// ctest: CRIU then needs neither --shell-job nor --inherit-fd. It keeps one
// fd open on an 8-byte file and pwrite()s its counter there every 2 ms (a
// fixed size, because CRIU refuses to restore a regular file whose size
// changed since the dump).
#include "criu/criu_client.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "criu/criu_log.h"

namespace phos::criu {
namespace {

using namespace std::chrono_literals;

constexpr auto kWaitLimit = 5s;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return s;
}

// Process state letter from /proc/PID/stat ('R', 'S', 'Z', ...), or 0 when
// there is no such process.
char ProcState(pid_t pid) {
  std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  std::size_t rp = stat.rfind(')');
  if (rp == std::string::npos || rp + 2 >= stat.size()) return 0;
  return stat[rp + 2];
}

bool Alive(pid_t pid) {
  char s = ProcState(pid);
  return s != 0 && s != 'Z' && s != 'X';
}

// The child: never returns.
[[noreturn]] void CounterMain(const std::string& file) {
  ::setsid();
  int null_fd = ::open("/dev/null", O_RDWR);
  ::dup2(null_fd, 0);
  ::dup2(null_fd, 1);
  ::dup2(null_fd, 2);
  ::syscall(SYS_close_range, 3U, ~0U, 0U);
  int fd = ::open(file.c_str(), O_RDWR | O_CREAT, 0600);
  if (fd < 0) ::_exit(2);
  std::uint64_t n = 0;
  for (;;) {
    ++n;
    if (::pwrite(fd, &n, sizeof n, 0) != static_cast<ssize_t>(sizeof n)) ::_exit(3);
    ::usleep(2000);
  }
}

class CriuClientTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { check_ = new Status(CriuClient::Check()); }
  static void TearDownTestSuite() {
    delete check_;
    check_ = nullptr;
  }

  void SetUp() override {
    if (!check_->ok()) GTEST_SKIP() << "skipped: CRIU not usable here: " << check_->ToString();
    std::string tmpl = (std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") +
                       std::string("/phos-criu-test-XXXXXX");
    char* p = ::mkdtemp(tmpl.data());
    ASSERT_NE(p, nullptr);
    dir_ = p;
    counter_file_ = dir_ + "/counter";
  }

  void TearDown() override {
    // Kill everything this test started or restored, reap what is ours,
    // and wait (bounded) until the rest is gone or a zombie of init.
    for (pid_t pid : pids_) {
      ::kill(pid, SIGKILL);
      // ECHILD for a detached restore: init (or a subreaper) reaps that one.
      ::waitpid(pid, nullptr, 0);
      auto deadline = std::chrono::steady_clock::now() + kWaitLimit;
      while (Alive(pid) && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(1ms);
      }
      EXPECT_FALSE(Alive(pid)) << "pid " << pid << " survived SIGKILL";
    }
    if (!dir_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
    }
  }

  pid_t StartCounter() {
    // Create the file before the fork, so it exists with its final size.
    WriteCounter(0);
    pid_t pid = ::fork();
    if (pid == 0) CounterMain(counter_file_);
    pids_.push_back(pid);
    return pid;
  }

  std::uint64_t ReadCounter() const {
    std::uint64_t n = 0;
    int fd = ::open(counter_file_.c_str(), O_RDONLY);
    if (fd >= 0) {
      if (::pread(fd, &n, sizeof n, 0) != static_cast<ssize_t>(sizeof n)) n = 0;
      ::close(fd);
    }
    return n;
  }

  void WriteCounter(std::uint64_t n) const {
    int fd = ::open(counter_file_.c_str(), O_WRONLY | O_CREAT, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::pwrite(fd, &n, sizeof n, 0), static_cast<ssize_t>(sizeof n));
    ::close(fd);
  }

  // Polls (1 ms sleeps, bounded) until the counter exceeds `n`; returns it.
  std::uint64_t WaitCounterAbove(std::uint64_t n) const {
    auto deadline = std::chrono::steady_clock::now() + kWaitLimit;
    std::uint64_t v = ReadCounter();
    while (v <= n && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(1ms);
      v = ReadCounter();
    }
    return v;
  }

  // Reaps our own child that a dump (leave_running=false) killed; its pid
  // must be free again before a restore can reuse it.
  static void ExpectKilledAndReap(pid_t pid) {
    int st = 0;
    ASSERT_EQ(::waitpid(pid, &st, 0), pid);
    EXPECT_TRUE(WIFSIGNALED(st)) << "status " << st;
  }

  static Status* check_;
  std::string dir_;
  std::string counter_file_;
  std::vector<pid_t> pids_;  // killed in TearDown
};

Status* CriuClientTest::check_ = nullptr;

TEST_F(CriuClientTest, DumpLeaveRunningKeepsTheProcessRunning) {
  pid_t pid = StartCounter();
  ASSERT_GT(WaitCounterAbove(10), 10u);
  DumpOptions opts;  // leave_running = true
  Status s = CriuClient::Dump(pid, dir_ + "/img", opts);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/img/inventory.img"));
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/img/criu-dump.log"));
  std::uint64_t after = ReadCounter();
  EXPECT_GT(WaitCounterAbove(after + 5), after + 5) << "the child stopped counting after the dump";
  EXPECT_TRUE(Alive(pid));
}

TEST_F(CriuClientTest, DumpRestoreContinuesWithTheSamePid) {
  pid_t pid = StartCounter();
  ASSERT_GT(WaitCounterAbove(100), 100u);
  DumpOptions opts;
  opts.leave_running = false;
  Status s = CriuClient::Dump(pid, dir_ + "/img", opts);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ExpectKilledAndReap(pid);
  std::uint64_t at_dump = ReadCounter();
  ASSERT_GE(at_dump, 100u);

  // Zero the file: whatever the restored process writes next comes from its
  // restored memory, not from the file.
  WriteCounter(0);
  pid_t restored = -1;
  s = CriuClient::Restore(dir_ + "/img", RestoreOptions{}, &restored);
  ASSERT_TRUE(s.ok()) << s.ToString();
  pids_.push_back(restored);
  EXPECT_EQ(restored, pid);
  std::uint64_t v = WaitCounterAbove(0);
  EXPECT_GE(v, at_dump) << "the restored process counts from scratch, not from its dump";
  EXPECT_GT(WaitCounterAbove(v + 5), v + 5) << "the restored process does not run";
  EXPECT_TRUE(Alive(restored));
  // detach: re-parented away from us (to init or a subreaper), not our child.
  EXPECT_EQ(::waitpid(restored, nullptr, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
}

TEST_F(CriuClientTest, RestoreAsChildIsReapedByTheCaller) {
  pid_t pid = StartCounter();
  ASSERT_GT(WaitCounterAbove(10), 10u);
  DumpOptions opts;
  opts.leave_running = false;
  Status s = CriuClient::Dump(pid, dir_ + "/img", opts);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ExpectKilledAndReap(pid);

  RestoreOptions ropts;
  ropts.detach = false;
  pid_t restored = -1;
  s = CriuClient::Restore(dir_ + "/img", ropts, &restored);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(restored, pid);
  std::uint64_t v = ReadCounter();
  EXPECT_GT(WaitCounterAbove(v + 5), v + 5);
  // Our child now: SIGKILL and reap it here.
  ASSERT_EQ(::kill(restored, SIGKILL), 0);
  int st = 0;
  ASSERT_EQ(::waitpid(restored, &st, 0), restored);
  EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
}

TEST_F(CriuClientTest, PreDumpThenDumpWithParent) {
  CriuFeatures f;
  ASSERT_TRUE(CriuClient::QueryFeatures(&f).ok());
  pid_t pid = StartCounter();
  ASSERT_GT(WaitCounterAbove(10), 10u);
  if (!f.mem_track) {
    // Without soft-dirty tracking CRIU refuses a pre-dump; it must say so
    // clearly and leave the process alone.
    Status s = CriuClient::PreDump(pid, dir_ + "/pre1", DumpOptions{});
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("criu log " + dir_ + "/pre1/criu-dump.log"), std::string::npos)
        << s.message();
    EXPECT_NE(s.message().find("Error"), std::string::npos) << s.message();
    std::uint64_t v = ReadCounter();
    EXPECT_GT(WaitCounterAbove(v + 5), v + 5);
    GTEST_SKIP() << "skipped: this kernel has no soft-dirty memory tracking (CRIU mem_track), "
                    "which pre-dumps need; checked only that PreDump fails clearly: "
                 << s.message();
  }
  Status s = CriuClient::PreDump(pid, dir_ + "/pre1", DumpOptions{});
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::uint64_t v = ReadCounter();
  EXPECT_GT(WaitCounterAbove(v + 5), v + 5) << "a pre-dump must leave the process running";

  DumpOptions opts;
  opts.leave_running = false;
  opts.track_mem = true;
  opts.parent_dir = "../pre1";
  s = CriuClient::Dump(pid, dir_ + "/dump", opts);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ExpectKilledAndReap(pid);
  // CRIU links the parent images into the dump.
  EXPECT_TRUE(std::filesystem::is_symlink(dir_ + "/dump/parent"));
  std::uint64_t at_dump = ReadCounter();

  WriteCounter(0);
  pid_t restored = -1;
  s = CriuClient::Restore(dir_ + "/dump", RestoreOptions{}, &restored);
  ASSERT_TRUE(s.ok()) << s.ToString();
  pids_.push_back(restored);
  EXPECT_EQ(restored, pid);
  EXPECT_GE(WaitCounterAbove(0), at_dump);
}

TEST_F(CriuClientTest, DumpOfADeadPidNamesThePidAndQuotesTheLog) {
  pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  ASSERT_EQ(::waitpid(pid, nullptr, 0), pid);
  Status s = CriuClient::Dump(pid, dir_ + "/img", DumpOptions{});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Status::Code::kNotFound) << s.ToString();
  EXPECT_NE(s.message().find("pid " + std::to_string(pid)), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("criu log " + dir_ + "/img/criu-dump.log"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("Error"), std::string::npos) << s.message();
}

TEST_F(CriuClientTest, RestoreFromAnEmptyDirectoryFails) {
  std::filesystem::create_directory(dir_ + "/empty");
  pid_t restored = 123;
  Status s = CriuClient::Restore(dir_ + "/empty", RestoreOptions{}, &restored);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find(dir_ + "/empty"), std::string::npos) << s.message();
  EXPECT_EQ(restored, -1);

  s = CriuClient::Restore(dir_ + "/missing", RestoreOptions{}, &restored);
  EXPECT_EQ(s.code(), Status::Code::kNotFound) << s.ToString();
}

TEST_F(CriuClientTest, RestoreFromCorruptImagesFailsAndQuotesTheLog) {
  pid_t pid = StartCounter();
  ASSERT_GT(WaitCounterAbove(10), 10u);
  DumpOptions opts;
  opts.leave_running = false;
  Status s = CriuClient::Dump(pid, dir_ + "/img", opts);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ExpectKilledAndReap(pid);
  {
    std::ofstream bad(dir_ + "/img/pstree.img", std::ios::trunc | std::ios::binary);
    bad << "this is not a protobuf image";
  }
  pid_t restored = -1;
  s = CriuClient::Restore(dir_ + "/img", RestoreOptions{}, &restored);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(restored, -1);
  EXPECT_EQ(s.code(), Status::Code::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find("criu restore from " + dir_ + "/img"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("criu log " + dir_ + "/img/criu-restore.log"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("Error"), std::string::npos) << s.message();
  EXPECT_FALSE(Alive(pid)) << "a failed restore left pid " << pid << " running";
}

TEST_F(CriuClientTest, RefusesADirectoryThatAlreadyHoldsImages) {
  std::filesystem::create_directory(dir_ + "/img");
  std::ofstream(dir_ + "/img/inventory.img") << "x";
  Status s = CriuClient::Dump(::getpid(), dir_ + "/img", DumpOptions{});
  EXPECT_EQ(s.code(), Status::Code::kAlreadyExists) << s.ToString();
}

TEST_F(CriuClientTest, RefusesALogPath) {
  DumpOptions opts;
  opts.log_file = "sub/dump.log";
  Status s = CriuClient::Dump(::getpid(), dir_ + "/img", opts);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
}

// ---- log quoting (no CRIU needed) ----

TEST(CriuLogTest, QuotesTheLastErrorLinesInOrder) {
  std::string log;
  for (int i = 0; i < 50; ++i) log += "(00.00" + std::to_string(i) + ") some info line\n";
  log += "(00.100) Error (criu/cr-dump.c:1): first\n";
  log += "(00.101) info between\n";
  log += "(00.102) Error (criu/cr-dump.c:2): second\n";
  log += "(00.103) Dumping FAILED.\n";
  std::vector<std::string> lines = CriuLogErrorLines(log, 10);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], "(00.100) Error (criu/cr-dump.c:1): first");
  EXPECT_EQ(lines[1], "(00.102) Error (criu/cr-dump.c:2): second");
  EXPECT_EQ(lines[2], "(00.103) Dumping FAILED.");
  lines = CriuLogErrorLines(log, 2);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "(00.102) Error (criu/cr-dump.c:2): second");
}

TEST(CriuLogTest, FallsBackToTheTailWithoutErrorLines) {
  std::vector<std::string> lines = CriuLogErrorLines("a\nb\n\nc\nd\n", 10);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], "b");
  EXPECT_EQ(lines[2], "d");
  EXPECT_TRUE(CriuLogErrorLines("", 10).empty());
}

TEST(CriuLogTest, CutsLongLinesAndNamesAMissingLog) {
  std::string long_line = "Error: " + std::string(1000, 'x');
  std::vector<std::string> lines = CriuLogErrorLines(long_line, 10);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_LT(lines[0].size(), 320u);
  std::string q = QuoteCriuLog("/nonexistent/phos/criu.log");
  EXPECT_NE(q.find("no criu log at /nonexistent/phos/criu.log"), std::string::npos) << q;
}

// The binary a call names (phosd passes its --criu-binary to every call) is
// the one Check and the dump run; "" is `criu` on PATH.
TEST_F(CriuClientTest, TheNamedBinaryIsUsedByCheckAndDump) {
  const std::string fake = dir_ + "/fake-criu";
  {
    std::ofstream f(fake);
    f << "#!/bin/sh\nexit 1\n";
  }
  std::filesystem::permissions(fake, std::filesystem::perms::owner_all);
  Status check = CriuClient::Check(fake);
  pid_t pid = StartCounter();
  DumpOptions faked;
  faked.criu_binary = fake;
  Status dump = CriuClient::Dump(pid, dir_ + "/img", faked);
  Status real_dump = CriuClient::Dump(pid, dir_ + "/img2", DumpOptions{});

  EXPECT_EQ(check.code(), Status::Code::kUnavailable) << check.ToString();
  EXPECT_NE(check.message().find(fake), std::string::npos) << check.ToString();
  EXPECT_EQ(dump.code(), Status::Code::kUnavailable) << dump.ToString();
  EXPECT_NE(dump.message().find("'" + fake + " swrk'"), std::string::npos) << dump.ToString();
  EXPECT_TRUE(real_dump.ok()) << real_dump.ToString();
  EXPECT_TRUE(CriuClient::Check("").ok());
  const std::uint64_t before = ReadCounter();
  EXPECT_GT(WaitCounterAbove(before), before) << "the dumped process stopped running";
}

}  // namespace
}  // namespace phos::criu
