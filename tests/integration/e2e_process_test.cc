// End to end, whole-process checkpoint and restore of every tests/apps
// program in every checkpoint mode (docs/criu.md "Whole-process checkpoint
// and restore"): phosd (sim) + `phos run` + the program paused at its
// midpoint (tests/apps/common.h AppMidpoint: PHOS_APP_PAUSE=FILE, released
// by removing FILE) + `phos checkpoint` + kill + `phos restore --detach` +
// release. The restored run must print exactly what an uninterrupted run
// of the same program prints (each program is run once uninterrupted, under
// phos run, for the reference).
//
// Then the case a pid namespace makes possible: the original keeps running
// after the checkpoint and a SECOND copy is restored from the image while it
// does — into a second phosd, since all sessions of one phosd share one
// device address space and the copy needs the original's device addresses.
// Both are released; both outputs must equal the reference. This is written
// against the intended behaviour of `phos run` (the app is pid 1 of its own
// pid namespace by default as root): if `phos restore` refuses because the
// original's pid exists, the test FAILS.
//
// Process plumbing from process_harness.h: the app runs in its own session
// with stdin /dev/null and stdout/stderr on separate files opened O_APPEND
// (CRIU needs no option for that; a pipe to this test would make the dump
// fail). stdout holds only the program's result line, so it can be
// compared byte for byte; the midpoint messages go to stderr. The app's
// host pid comes from `phos ps --json` (not from the app, which sees itself
// as pid 1 in its namespace). A restored app is not our child (phosd, or
// init, reaps it): we wait until /proc/PID is gone or a zombie.
//
// Skips ("skipped: CRIU unavailable ...") when CriuClient::Check fails.
// multi_stream holds pinned host memory (cudaMallocHost) with async copies
// from and to it queued when it pauses: its segments travel in CRIU's image
// and are re-attached at restore (docs/criu.md "Pinned host memory").
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "harness.h"
#include "process_harness.h"

namespace {

using phos::testing::Child;
using phos::testing::ProcessEnded;
using phos::testing::ReadFile;
using phos::testing::RunPhos;
using phos::testing::WaitChildExit;
using phos::testing::WaitEnded;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

// The programs (tests/apps/CMakeLists.txt PHOS_TEST_APPS).
std::vector<std::string> Apps() {
  std::vector<std::string> apps;
  std::stringstream ss(PHOS_TEST_APP_LIST);
  for (std::string a; std::getline(ss, a, ',');) {
    if (!a.empty()) apps.push_back(a);
  }
  return apps;
}

// Program arguments: saxpy_loop's iteration count is kept small (every
// launch runs in phosd's PTX interpreter); the midpoint is half-way.
std::vector<std::string> AppArgs(const std::string& app) {
  if (app == "saxpy_loop") return {"24"};
  return {};
}

// A program started by the test: `phos run` (our child) and the files its
// output goes to.
struct App {
  pid_t child = -1;  // phos run (the program itself without a pid namespace)
  std::string out, err;
};

// Uninterrupted runs' stdout, by program (the suite's processes all run the
// same build, so one run per program serves every test).
std::map<std::string, std::string>& References() {
  static std::map<std::string, std::string> refs;
  return refs;
}

class E2eProcess : public ::testing::Test {
 protected:
  void SetUp() override {
    const phos::Status& criu = phos::testing::CriuAvailable();
    if (!criu.ok()) GTEST_SKIP() << "skipped: CRIU unavailable: " << criu.ToString();
    char tmpl[] = "/tmp/phos_e2e_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    pause_ = dir_ + "/pause";
    ASSERT_TRUE(phos::testing::StartSimDaemon(dir_ + "/phosd.sock", {}, &daemon_));
  }

  void TearDown() override {
    for (pid_t p : kill_list_) {
      if (p > 0 && !ProcessEnded(p)) kill(p, SIGKILL);
    }
    for (App* a : {&first_, &second_}) {
      if (a->child > 0) {
        kill(a->child, SIGKILL);
        waitpid(a->child, nullptr, 0);
      }
    }
    for (Child* d : {&daemon_, &daemon2_}) EXPECT_TRUE(phos::testing::StopDaemon(d));
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  std::string Logs() {
    return "\nphosd:\n" + phos::testing::DaemonOutput(&daemon_) +
           (daemon2_.pid > 0 ? "\nsecond phosd:\n" + phos::testing::DaemonOutput(&daemon2_) : "") +
           "\napp stderr:\n" + ReadFile(first_.err);
  }

  // `phos run APP` in its own session, stdin /dev/null, stdout/stderr on
  // `tag`.out / `tag`.err (O_APPEND); paused at the midpoint if `pause`.
  App StartApp(const std::string& app, const std::string& tag, bool pause) {
    App a;
    a.out = dir_ + "/" + tag + ".out";
    a.err = dir_ + "/" + tag + ".err";
    std::vector<std::string> args = {"run", "--lib", PHOS_LIB_PATH, "--", std::string(PHOS_APPS_DIR) + "/" + app};
    for (const auto& x : AppArgs(app)) args.push_back(x);
    const std::vector<std::string> argv = phos::testing::PhosArgv(dir_ + "/phosd.sock", args);
    if (pause) {
      a.child = phos::testing::StartDetached(argv, a.out, a.err, {"PHOS_APP_PAUSE=" + pause_});
    } else {
      a.child = phos::testing::StartDetached(argv, a.out, a.err, {}, {"PHOS_APP_PAUSE"});
    }
    return a;
  }

  // The uninterrupted run's stdout (computed on first use, on this test's
  // phosd).
  void Reference(const std::string& app, std::string* ref) {
    auto& refs = References();
    if (auto it = refs.find(app); it != refs.end()) {
      *ref = it->second;
      return;
    }
    App a = StartApp(app, "reference", /*pause=*/false);
    const int rc = WaitChildExit(&a.child, 60s);
    const std::string out = ReadFile(a.out);
    ASSERT_EQ(rc, 0) << app << " uninterrupted under phos run:\n" << out << ReadFile(a.err) << Logs();
    ASSERT_NE(out.find(app + ": checksum 0x"), std::string::npos) << out;
    ASSERT_NE(out.find(" OK\n"), std::string::npos) << out;
    refs[app] = out;
    *ref = out;
  }

  // Starts `app` paused at its midpoint; its host pid in *pid.
  void StartPaused(const std::string& app, App* a, pid_t* pid) {
    std::ofstream(pause_).put('\n');
    *a = StartApp(app, "first", /*pause=*/true);
    ASSERT_TRUE(phos::testing::WaitFileText(a->err, "paused at midpoint", 60s))
        << app << " did not reach its midpoint:\n" << ReadFile(a->out) << Logs();
    *pid = phos::testing::WaitSessionPid(dir_ + "/phosd.sock", std::string(PHOS_APPS_DIR) + "/" + app, 10s);
    ASSERT_GT(*pid, 0);
    kill_list_.push_back(*pid);
  }

  // `phos checkpoint` of pid into dir_/img.
  void Checkpoint(pid_t pid, const std::string& mode, std::string* img) {
    *img = dir_ + "/img-" + mode;
    phos::testing::PhosResult ck =
        RunPhos(dir_ + "/phosd.sock", {"checkpoint", "--pid", std::to_string(pid), "--mode", mode, "--out", *img});
    ASSERT_EQ(ck.rc, 0) << ck.output << Logs();
    EXPECT_TRUE(fs::exists(*img + "/criu/inventory.img")) << ck.output;
  }

  // `phos restore img --detach` on the phosd at `socket`; the restored pid.
  pid_t Restore(const std::string& socket, const std::string& img) {
    phos::testing::PhosResult rs = RunPhos(socket, {"restore", img, "--detach"});
    EXPECT_EQ(rs.rc, 0) << rs.output << Logs();
    if (rs.rc != 0) return -1;
    std::smatch m;
    if (!std::regex_search(rs.output, m, std::regex("restored pid (\\d+)"))) {
      ADD_FAILURE() << "no 'restored pid N' in:\n" << rs.output;
      return -1;
    }
    const pid_t pid = std::stoi(m[1]);
    kill_list_.push_back(pid);
    return pid;
  }

  // What every test starts with: `app`'s reference output in *ref, the app
  // started paused at its midpoint (first_; its host pid in *pid) and
  // checkpointed whole in `mode` into *img.
  void StartAndCheckpoint(const std::string& app, const std::string& mode, std::string* ref, pid_t* pid,
                          std::string* img) {
    ASSERT_NO_FATAL_FAILURE(Reference(app, ref));
    ASSERT_NO_FATAL_FAILURE(StartPaused(app, &first_, pid));
    ASSERT_NO_FATAL_FAILURE(Checkpoint(*pid, mode, img));
  }

  std::string dir_, pause_;
  Child daemon_, daemon2_;
  App first_, second_;
  std::vector<pid_t> kill_list_;  // app pids (ours and restored) to kill if a test ends early
};

// ------------------------------------------------ every program, every mode

using AppMode = std::tuple<std::string, std::string>;

// Every program in every mode.
std::vector<AppMode> AppsTimesModes() {
  std::vector<AppMode> all;
  for (const auto& app : Apps()) {
    for (const char* mode : {"cow", "recopy", "stop"}) all.emplace_back(app, mode);
  }
  return all;
}

std::string ParamName(const ::testing::TestParamInfo<AppMode>& info) {
  return std::get<0>(info.param) + "_" + std::get<1>(info.param);
}

class E2eRoundTrip : public E2eProcess,
                     public ::testing::WithParamInterface<AppMode> {};

// Paused at the midpoint, checkpointed, killed, restored, released: the
// restored run prints what an uninterrupted run prints.
TEST_P(E2eRoundTrip, RestoredRunMatchesUninterrupted) {
  const auto& [app, mode] = GetParam();
  std::string ref, img;
  pid_t pid = -1;
  ASSERT_NO_FATAL_FAILURE(StartAndCheckpoint(app, mode, &ref, &pid, &img));
  if (IsSkipped()) return;
  const size_t out_at = ReadFile(first_.out).size();  // 0: the result is printed at the end

  kill(pid, SIGKILL);
  const int rc = WaitChildExit(&first_.child, 20s);
  EXPECT_TRUE(rc == -SIGKILL || rc == 128 + SIGKILL) << "phos run ended with " << rc << " after SIGKILL of pid "
                                                     << pid;
  ASSERT_TRUE(WaitEnded(pid, 10s)) << "pid " << pid << " still runs after SIGKILL";

  const pid_t restored = Restore(dir_ + "/phosd.sock", img);
  ASSERT_GT(restored, 0);
  fs::remove(pause_);
  ASSERT_TRUE(WaitEnded(restored, 60s)) << "restored pid " << restored << " did not finish:\n"
                                        << ReadFile(first_.err) << Logs();
  EXPECT_EQ(ReadFile(first_.out).substr(out_at), ref) << "restored " << app << " (" << mode << "):\n"
                                                     << ReadFile(first_.err);
  EXPECT_NE(ReadFile(first_.err).find("resumed after midpoint"), std::string::npos) << ReadFile(first_.err);
}

INSTANTIATE_TEST_SUITE_P(AllAppsAllModes, E2eRoundTrip, ::testing::ValuesIn(AppsTimesModes()), ParamName);

// ------------------------------------- a second copy while the first runs

// Every program in every mode: the original keeps running after the
// checkpoint; a second copy is restored from the image into a second phosd
// while it does (a new host pid: the copy lives in a new pid namespace).
// Both finish with the reference output.
class E2eSecondCopy : public E2eProcess,
                      public ::testing::WithParamInterface<AppMode> {};

TEST_P(E2eSecondCopy, RunsBesideTheOriginal) {
  const auto& [app, mode] = GetParam();
  std::string ref, img;
  pid_t pid = -1;
  ASSERT_NO_FATAL_FAILURE(StartAndCheckpoint(app, mode, &ref, &pid, &img));
  if (IsSkipped()) return;
  ASSERT_FALSE(ProcessEnded(pid)) << "the checkpoint did not leave pid " << pid << " running";

  // The copy reopens the app's output files by path: move the original's
  // (it keeps writing to them through its open descriptors) and give the
  // copy fresh ones, so each output can be compared on its own.
  second_.out = first_.out;
  second_.err = first_.err;
  first_.out = dir_ + "/original.out";
  first_.err = dir_ + "/original.err";
  fs::rename(second_.out, first_.out);
  fs::rename(second_.err, first_.err);
  for (const auto& f : {second_.out, second_.err}) {
    const int fd = open(f.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
    ASSERT_GE(fd, 0) << f;
    close(fd);
  }
  const size_t out_at = ReadFile(first_.out).size();

  const std::string socket2 = dir_ + "/phosd2.sock";
  ASSERT_TRUE(phos::testing::StartSimDaemon(socket2, {}, &daemon2_));
  const pid_t copy = Restore(socket2, img);
  ASSERT_GT(copy, 0) << "restoring a second copy while pid " << pid << " runs (needs `phos run`'s pid namespace)";
  EXPECT_NE(copy, pid);
  EXPECT_FALSE(ProcessEnded(pid)) << "the original (pid " << pid << ") stopped when the copy was restored";
  EXPECT_EQ(phos::testing::WaitSessionPid(socket2, std::string(PHOS_APPS_DIR) + "/" + app, 10s), copy)
      << "phos ps on the second phosd";

  fs::remove(pause_);  // releases both: they poll the same path
  EXPECT_EQ(WaitChildExit(&first_.child, 60s), 0) << "the original:\n" << ReadFile(first_.err) << Logs();
  ASSERT_TRUE(WaitEnded(copy, 60s)) << "the copy (pid " << copy << ") did not finish:\n"
                                    << ReadFile(second_.err) << Logs();
  EXPECT_EQ(ReadFile(first_.out).substr(out_at), ref) << "the original:\n" << ReadFile(first_.err);
  EXPECT_EQ(ReadFile(second_.out), ref) << "the copy:\n" << ReadFile(second_.err);
  EXPECT_NE(ReadFile(second_.err).find("resumed after midpoint"), std::string::npos) << ReadFile(second_.err);
}

INSTANTIATE_TEST_SUITE_P(AllAppsAllModes, E2eSecondCopy, ::testing::ValuesIn(AppsTimesModes()), ParamName);

}  // namespace
