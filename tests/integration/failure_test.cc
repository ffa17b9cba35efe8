// Whole-process checkpoints that fail (issue #6 item 4): the app keeps
// running (where it still has a phosd), no earlier image is harmed, and no
// half image is left looking whole, when
//   a. CRIU fails (phosd runs a --criu-binary wrapper that exits 1 on cue),
//   b. the disk fills (--out on a small tmpfs),
//   c. the app exits during a checkpoint (killed while a slow copy runs),
//   d. phosd is SIGKILLed during a checkpoint (its restart removes the
//      .tmp image and says so).
// Each case first takes a good whole-process image of the same app, and at
// the end checks it with `phos inspect` and restores it into a fresh phosd
// (the sim places module variables next-fit, so a whole-process restore
// needs a phosd that has placed nothing yet: docs/criu.md "Limits").
//
// Slow copies: phosd's sim link is throttled (--sim-link-gbps) and the app
// allocates extra device buffers ("alloc", never copied by the app itself)
// so a checkpoint's copy takes seconds while the app's own steps stay short.
//
// The app runs as in process_restore_test.cc: own session, stdout on a log
// file opened O_APPEND, stdin /dev/null; this test is a child subreaper. The
// app's pid as seen here is `phos run`'s child when `phos run` gave it a
// pid namespace, else `phos run` itself (it execs the program).
//
// Skips ("skipped: ...") when CRIU is unavailable, or when a case cannot set
// up its condition (a tmpfs mount refused).
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"
#include "process_harness.h"

namespace {

using phos::testing::Child;
using phos::testing::Clock;
using phos::testing::Field;
using phos::testing::JoinNames;
using phos::testing::KillAndWaitGone;
using phos::testing::ListDir;
using namespace std::chrono_literals;
namespace fs = std::filesystem;
using Result = phos::testing::PhosResult;

// Device memory the slow checkpoints copy on top of checkpoint_app's ~7 MiB.
constexpr int kExtraMiB = 24;
// Modelled link speed for the slow cases, GB/s per copy engine (2 engines):
// ~31 MiB take ~1.6-3 s, the app's start (7 MiB up) ~0.7 s, a step ~1.4 s.
constexpr const char* kSlowLink = "0.01";

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

bool Contains(const std::string& text, const std::string& needle) {
  return Lower(text).find(Lower(needle)) != std::string::npos;
}

// The real criu binary (PATH), for the wrapper of case a.
std::string FindOnPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream ss(path != nullptr ? path : "");
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    const std::string p = (dir.empty() ? "." : dir) + "/" + name;
    if (access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

// Children of `pid` (by their /proc/*/stat parent field).
std::vector<pid_t> ChildrenOf(pid_t pid) {
  std::vector<pid_t> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename().string();
    if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
    std::ifstream f(e.path() / "stat");
    std::string stat;
    std::getline(f, stat);
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 2));
    char state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == pid) out.push_back(std::stoi(name));
  }
  return out;
}

// The app (original or restored) and `phos run` are ended with
// KillAndWaitGone: reaped by us if our child or re-parented to us (we are a
// subreaper), else by their parent (`phos run`, or phosd for a restored
// process).
class FailureTest : public ::testing::Test, protected phos::testing::CheckpointAppDriver {
 protected:
  void SetUp() override {
    const phos::Status& criu = phos::testing::CriuAvailable();
    if (!criu.ok()) GTEST_SKIP() << "skipped: CRIU unavailable: " << criu.ToString();
    ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
    char tmpl[] = "/tmp/phos_fail_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    socket_ = dir_ + "/phosd.sock";
    ctl_ = dir_ + "/ctl";
    log_ = dir_ + "/app.log";
    root_ = dir_ + "/checkpoints";
    fs::create_directories(ctl_);
  }

  void TearDown() override {
    KillApp();
    StopDaemon();
    if (!mount_.empty()) {
      umount2(mount_.c_str(), MNT_DETACH);
      mount_.clear();
    }
    prctl(PR_SET_CHILD_SUBREAPER, 0);
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  // phosd on the sim with this test's socket and checkpoint root, plus `extra` flags.
  void StartDaemon(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> flags = {"--checkpoint-root", root_};
    flags.insert(flags.end(), extra.begin(), extra.end());
    ASSERT_TRUE(phos::testing::StartSimDaemon(socket_, flags, &daemon_));
  }
  void StopDaemon() { EXPECT_TRUE(phos::testing::StopDaemon(&daemon_)); }
  // phosd's output so far (for failure messages).
  std::string DaemonLog() { return phos::testing::DaemonOutput(&daemon_, 100ms); }

  // `phos run` of `program`. PHOS_FAILURE_TEST_RUN_ARGS adds one flag to
  // `phos run` (e.g. --no-pid-ns, to compare).
  std::vector<std::string> RunArgv(const std::vector<std::string>& program) const {
    std::vector<std::string> args = {"run", "--lib", PHOS_LIB_PATH};
    if (const char* x = std::getenv("PHOS_FAILURE_TEST_RUN_ARGS"); x != nullptr && *x != '\0') args.push_back(x);
    args.push_back("--");
    args.insert(args.end(), program.begin(), program.end());
    return phos::testing::PhosArgv(socket_, args);
  }

  // checkpoint_app under `phos run`, in its own session, output on the log.
  // Sets run_pid_ (our child) and app_pid_ (the app as seen here).
  void StartApp() {
    const pid_t pid = phos::testing::StartDetached(RunArgv({PHOS_CHECKPOINT_APP, ctl_}), log_, log_);
    ASSERT_GT(pid, 0);
    run_pid_ = pid;
    // Ready once the line is complete; a run that exits first fails at once.
    const auto deadline = Clock::now() + 60s;
    int status = 0;
    for (;;) {
      const std::string log = Log();
      const size_t at = log.find("checkpoint_app: ready pid ");
      if (at != std::string::npos && log.find('\n', at) != std::string::npos) break;
      if (waitpid(run_pid_, &status, WNOHANG) == run_pid_) {
        run_pid_ = -1;
        FAIL() << "phos run exited (status " << status << ") before checkpoint_app was ready:\n"
               << log << "\nphosd:\n" << DaemonLog();
      }
      ASSERT_LT(Clock::now(), deadline) << "checkpoint_app not ready after 60 s:\n" << log << "\nphosd:\n"
                                        << DaemonLog();
      std::this_thread::sleep_for(5ms);
    }
    const std::vector<pid_t> kids = ChildrenOf(run_pid_);
    app_pid_ = kids.size() == 1 ? kids[0] : run_pid_;
  }

  // Kills the app (original or restored) and `phos run`, and waits until both are gone.
  void KillApp() {
    if (app_pid_ > 0) {
      EXPECT_TRUE(KillAndWaitGone(app_pid_)) << "pid " << app_pid_ << " did not go away";
    }
    if (run_pid_ > 0 && run_pid_ != app_pid_) {
      EXPECT_TRUE(KillAndWaitGone(run_pid_)) << "phos run (pid " << run_pid_ << ") did not go away";
    }
    app_pid_ = run_pid_ = -1;
  }

  // Shows what phos said about a failure (the error line) in the test's
  // output, so a run documents the messages users get.
  static void Show(const std::string& what, const std::string& output) {
    std::istringstream in(output);
    std::string line;
    bool on = false;  // from the first error line on (CRIU's log quote follows it)
    while (std::getline(in, line)) {
      on = on || line.rfind("phos: ", 0) == 0;
      if (on) std::cout << "[ message  ] " << what << ": " << line << "\n";
    }
  }

  Result Phos(const std::vector<std::string>& args) { return phos::testing::RunPhos(socket_, args); }
  Child PhosAsync(const std::vector<std::string>& args) { return Child::Start(phos::testing::PhosArgv(socket_, args)); }

  // A good whole-process image taken after `steps` steps, to check later.
  struct Earlier {
    std::string dir;
    std::string checksum;  // the app's state in it
    int steps = 0;
    int next_cmd = 0;  // the command the restored app waits for
  };

  // `steps` steps, then a whole-process (stop) checkpoint into `dir`.
  void TakeEarlier(int steps, const std::string& dir, Earlier* e) {
    std::string s;
    for (int i = 0; i < steps; ++i) s = Cmd("step");
    ASSERT_NE(s.find("step " + std::to_string(steps) + " checksum"), std::string::npos) << s;
    Result ck = Phos({"checkpoint", "--pid", std::to_string(app_pid_), "--mode", "stop", "--out", dir});
    ASSERT_EQ(ck.rc, 0) << ck.output << "\nphosd:\n" << DaemonLog();
    ASSERT_TRUE(fs::exists(dir + "/criu/inventory.img")) << ck.output;
    e->dir = dir;
    e->checksum = Field(s, "checksum");
    e->steps = steps;
    e->next_cmd = next_cmd_;
  }

  // The app still runs and computes right: one more step (step `expect`),
  // and its device state matches the CPU reference for that many steps.
  void ExpectAppProgresses(int expect) {
    const std::string s = Cmd("step");
    EXPECT_NE(s.find("step " + std::to_string(expect) + " checksum"), std::string::npos) << s;
    const std::string p = Cmd("print");
    EXPECT_EQ(Field(p, "verify-step"), std::to_string(expect)) << p;
    EXPECT_EQ(Field(p, "verify-big"), std::to_string(expect)) << p;
    EXPECT_EQ(Field(p, "steps"), std::to_string(expect)) << p;
  }

  // A failed checkpoint into `dir` left no image looking whole: neither DIR
  // (it would be taken for a complete image) nor its work directory.
  void ExpectNoImage(const std::string& dir) {
    const std::string parent = fs::path(dir).parent_path().string();
    EXPECT_FALSE(fs::exists(dir)) << dir << " exists after a failed checkpoint; " << parent
                                  << " holds: " << JoinNames(ListDir(parent));
    EXPECT_FALSE(fs::exists(dir + ".tmp")) << dir << ".tmp was left behind; " << parent
                                           << " holds: " << JoinNames(ListDir(parent));
  }

  // `phos inspect` verifies every checksum of the GPU image; the manifest's
  // process record marks a whole-process image.
  void ExpectIntact(const Earlier& e) {
    Result in = Phos({"inspect", e.dir});
    EXPECT_EQ(in.rc, 0) << in.output;
    EXPECT_NE(in.output.find("OK: every checksum matches"), std::string::npos) << in.output;
    EXPECT_NE(in.output.find("process   pid "), std::string::npos) << in.output;
    EXPECT_TRUE(fs::exists(e.dir + "/criu/inventory.img"));
  }

  // Ends the app and restores `e` into a fresh phosd (plain flags): the
  // restored app holds the image's state and steps on correctly.
  void ExpectRestorable(const Earlier& e) {
    KillApp();
    StopDaemon();
    ASSERT_NO_FATAL_FAILURE(StartDaemon());
    RewindCommands(e.next_cmd);
    Result rs = Phos({"restore", e.dir, "--detach"});
    ASSERT_EQ(rs.rc, 0) << rs.output << "\nphosd:\n" << DaemonLog() << "\napp:\n" << Log();
    const std::string pid = Field(rs.output, "restored pid");
    ASSERT_FALSE(pid.empty()) << rs.output;
    app_pid_ = std::stoi(pid);
    const std::string p = Cmd("print");
    EXPECT_EQ(Field(p, "checksum"), e.checksum) << p;
    EXPECT_EQ(Field(p, "verify-step"), std::to_string(e.steps)) << p;
    EXPECT_EQ(Field(p, "verify-big"), std::to_string(e.steps)) << p;
    const std::string s = Cmd("step");
    EXPECT_NE(s.find("step " + std::to_string(e.steps + 1) + " checksum"), std::string::npos) << s;
    Cmd("quit");
  }

  // Starts a checkpoint of the app and returns `into` after its copy (or
  // the CRIU dump at the capture, which comes just before the copy) began:
  // the copy is throttled to take seconds, so it is still going then.
  Child StartSlowCheckpoint(const std::vector<std::string>& where, std::chrono::milliseconds into) {
    std::vector<std::string> args = {"checkpoint", "--pid", std::to_string(app_pid_), "--mode", "cow"};
    args.insert(args.end(), where.begin(), where.end());
    Child c = PhosAsync(args);
    const auto deadline = Clock::now() + 30s;
    while (c.output.find("checkpoint: copy") == std::string::npos &&
           c.output.find("checkpoint: criu-dump") == std::string::npos) {
      c.ReadUntil("\x01never", 50ms);  // whatever arrives in 50 ms
      if (Clock::now() > deadline || c.out < 0) {
        ADD_FAILURE() << "the checkpoint did not start copying:\n" << c.output << "\nphosd:\n" << DaemonLog();
        break;
      }
    }
    std::this_thread::sleep_for(into);
    EXPECT_GE(c.out, 0) << "the checkpoint ended before the test could interrupt it (copy too fast?):\n"
                        << c.output;
    return c;
  }

  // After a failed checkpoint onto the small tmpfs: no directory (it could
  // be taken for an image); at most CRIU's log kept next to the image
  // (IMG.criu-dump.log), and then whole, never a truncated copy.
  void ExpectNothingHalfWritten() {
    for (const auto& name : ListDir(mount_)) {
      const std::string path = mount_ + "/" + name;
      std::error_code ec;
      const auto bytes = fs::file_size(path, ec);
      std::cout << "[ left     ] on the full tmpfs: " << name << " (" << bytes << " bytes)\n";
      EXPECT_FALSE(fs::is_directory(path)) << "left on the full tmpfs: " << JoinNames(ListDir(mount_));
      EXPECT_TRUE(name == "img.criu-dump.log" && !ec && bytes > 0)
          << path << " was left half-written on the full tmpfs (" << bytes << " bytes)";
    }
  }

  std::string dir_, socket_, root_, mount_;
  Child daemon_;
  pid_t run_pid_ = -1;
  pid_t app_pid_ = -1;
};

// a. CRIU fails: phosd runs a wrapper (--criu-binary) that exits 1 at once
// (before speaking CRIU's RPC) while a marker file exists, or once anything
// named dumpfail* exists: the checkpoint into "dumpfail" creates its
// directories after its CRIU check and before its dump, so the check passes
// and the dump fails. Else the wrapper runs the real criu.
TEST_F(FailureTest, CriuFailureLeavesTheAppAndEarlierImagesAlone) {
  const std::string real = FindOnPath("criu");
  if (real.empty()) GTEST_SKIP() << "skipped: no criu on PATH to wrap";
  const std::string wrapper = dir_ + "/criu-wrapper";
  const std::string marker = dir_ + "/criu-fail";
  {
    std::ofstream f(wrapper);
    f << "#!/bin/sh\n"
      << "# failure_test.cc: a CRIU that fails on cue\n"
      << "if [ -e '" << marker << "' ]; then echo 'criu-wrapper: failing on purpose' >&2; exit 1; fi\n"
      << "for d in '" << dir_ << "'/dumpfail*; do\n"
      << "  if [ -e \"$d\" ]; then echo 'criu-wrapper: failing the dump' >&2; exit 1; fi\n"
      << "done\n"
      << "exec '" << real << "' \"$@\"\n";
  }
  fs::permissions(wrapper, fs::perms::owner_all);
  ASSERT_NO_FATAL_FAILURE(StartDaemon({"--criu-binary", wrapper}));
  ASSERT_NO_FATAL_FAILURE(StartApp());
  Earlier early;
  ASSERT_NO_FATAL_FAILURE(TakeEarlier(2, dir_ + "/early", &early));
  ExpectAppProgresses(3);

  // CRIU cannot even be started. Its earlier passed check is cached (the
  // wrapper file did not change: criu_client.h "Check's cache"), so this
  // fails at the dump, inside the checkpoint: no image is committed, the
  // error names the binary, and the next Check() probes again.
  { std::ofstream(marker) << "1\n"; }
  const std::string nocriu = dir_ + "/nocriu";
  Result a = Phos({"checkpoint", "--pid", std::to_string(app_pid_), "--out", nocriu});
  Show("CRIU cannot start", a.output);
  EXPECT_NE(a.rc, 0) << a.output;
  EXPECT_TRUE(Contains(a.output, "criu")) << a.output;
  EXPECT_NE(a.output.find(wrapper), std::string::npos) << "the error should name the CRIU binary:\n" << a.output;
  ExpectNoImage(nocriu);
  ExpectAppProgresses(4);
  fs::remove(marker);

  // CRIU fails the dump itself, after the GPU image was written.
  const std::string dumpfail = dir_ + "/dumpfail";
  Result b = Phos({"checkpoint", "--pid", std::to_string(app_pid_), "--out", dumpfail});
  Show("CRIU dump fails", b.output);
  EXPECT_NE(b.rc, 0) << b.output;
  EXPECT_TRUE(Contains(b.output, "criu dump of pid")) << b.output << "\nphosd:\n" << DaemonLog();
  EXPECT_NE(b.output.find(wrapper), std::string::npos) << b.output;
  EXPECT_TRUE(Contains(b.output, "keeps running")) << b.output;
  EXPECT_FALSE(Contains(b.output, "exited")) << "the error blames an exit; CRIU failed and the app runs:\n"
                                             << b.output;
  ExpectNoImage(dumpfail);
  ExpectAppProgresses(5);
  int daemon_status = 0;
  EXPECT_EQ(waitpid(daemon_.pid, &daemon_status, WNOHANG), 0) << "phosd died:\n" << DaemonLog();

  ExpectIntact(early);
  ExpectRestorable(early);
}

// b. The disk fills: --out on a tmpfs too small for either part of the
// image, then on one that holds the GPU image but not CRIU's. Whichever
// part fails (the GPU image writer or CRIU, which may dump first), the
// error must say there is no space.
TEST_F(FailureTest, FullDiskFailsClearlyAndLeavesNothingHalfWritten) {
  mount_ = dir_ + "/small";
  fs::create_directories(mount_);
  // 1 MiB: less than the GPU image (~7 MiB) and than CRIU's images.
  if (mount("phos-failure-test", mount_.c_str(), "tmpfs", 0, "size=1m,mode=0700") != 0) {
    const int err = errno;
    mount_.clear();
    GTEST_SKIP() << "skipped: cannot mount a tmpfs (" << std::strerror(err) << ")";
  }
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  ASSERT_NO_FATAL_FAILURE(StartApp());
  Earlier early;
  ASSERT_NO_FATAL_FAILURE(TakeEarlier(2, dir_ + "/early", &early));

  Result a = Phos({"checkpoint", "--pid", std::to_string(app_pid_), "--out", mount_ + "/img"});
  Show("1 MiB tmpfs", a.output);
  EXPECT_NE(a.rc, 0) << a.output;
  EXPECT_TRUE(Contains(a.output, "no space")) << a.output;
  ExpectNoImage(mount_ + "/img");
  ExpectNothingHalfWritten();
  for (const auto& name : ListDir(mount_)) fs::remove(mount_ + "/" + name);  // room for the next part
  ExpectAppProgresses(3);

  // Room for the GPU image (its size + 1 MiB), not for CRIU's images (the
  // app's memory, the ring's staging arena included).
  std::uintmax_t gpu_bytes = 0;
  for (const auto& e : fs::recursive_directory_iterator(early.dir)) {
    if (e.is_regular_file() && e.path().parent_path() == fs::path(early.dir)) gpu_bytes += e.file_size();
  }
  const std::string size = "size=" + std::to_string((gpu_bytes >> 20) + 2) + "m";
  ASSERT_EQ(mount("phos-failure-test", mount_.c_str(), "tmpfs", MS_REMOUNT, size.c_str()), 0)
      << "remount " << size << ": " << std::strerror(errno);
  Result b = Phos({"checkpoint", "--pid", std::to_string(app_pid_), "--out", mount_ + "/img"});
  Show("tmpfs holds the GPU image only", b.output);
  EXPECT_NE(b.rc, 0) << b.output;
  EXPECT_TRUE(Contains(b.output, "no space")) << b.output << "\nphosd:\n" << DaemonLog();
  ExpectNoImage(mount_ + "/img");
  ExpectNothingHalfWritten();
  std::smatch named;
  if (std::regex_search(b.output, named, std::regex("CRIU's log(?: kept as|:) (\\S+?)\\)"))) {
    std::error_code ec;
    EXPECT_GT(fs::file_size(named[1].str(), ec), 0u) << "the error names " << named[1] << ", which is empty or missing";
    EXPECT_FALSE(ec) << named[1];
  }
  ExpectAppProgresses(4);

  ExpectIntact(early);
  ExpectRestorable(early);
}

// c. The app exits while a (slow, cow) checkpoint copies its GPU state.
TEST_F(FailureTest, AppExitingDuringACheckpointFailsItCleanly) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon({"--sim-link-gbps", kSlowLink}));
  ASSERT_NO_FATAL_FAILURE(StartApp());
  Earlier early;
  ASSERT_NO_FATAL_FAILURE(TakeEarlier(1, dir_ + "/early", &early));
  for (int i = 0; i < kExtraMiB; ++i) Cmd("alloc");

  const std::string slow = dir_ + "/slow";
  const pid_t pid = app_pid_;
  Child ck = StartSlowCheckpoint({"--out", slow}, 300ms);
  KillApp();
  const auto killed = Clock::now();
  const int rc = ck.Wait(60s);
  Show("app killed during the copy", ck.output);
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - killed).count();
  EXPECT_NE(rc, 0) << ck.output;
  EXPECT_NE(rc, -1000) << "the checkpoint did not end within 60 s of the app's exit";
  EXPECT_NE(ck.output.find("pid " + std::to_string(pid)), std::string::npos) << ck.output;
  EXPECT_TRUE(Contains(ck.output, "exited")) << ck.output;
  EXPECT_FALSE(Contains(ck.output, "keeps running")) << "the error claims the exited app keeps running:\n"
                                                     << ck.output;
  EXPECT_LT(took, 15000) << "the checkpoint took " << took << " ms to notice the app was gone";
  ExpectNoImage(slow);

  // phosd still serves other sessions.
  Child other = Child::Start(RunArgv({PHOS_APPS_DIR "/saxpy_loop", "32"}));
  EXPECT_EQ(other.Wait(60s), 0) << other.output << "\nphosd:\n" << DaemonLog();
  EXPECT_NE(other.output.find("saxpy_loop: checksum"), std::string::npos) << other.output;
  EXPECT_NE(other.output.find(" OK"), std::string::npos) << other.output;
  Result st = Phos({"status"});
  EXPECT_EQ(st.rc, 0) << st.output;

  ExpectIntact(early);
  ExpectRestorable(early);
}

// d. phosd is SIGKILLed while a checkpoint copies; restarted on the same
// checkpoint root, it removes the .tmp image and says so. The app loses
// its GPU with phosd: its next CUDA call fails (cudaErrorDevicesUnavailable,
// checkpoint_app then exits), it is not reconnected to the new phosd.
TEST_F(FailureTest, PhosdKilledDuringACheckpointIsCleanedUpOnRestart) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon({"--sim-link-gbps", kSlowLink}));
  ASSERT_NO_FATAL_FAILURE(StartApp());
  Earlier early;
  ASSERT_NO_FATAL_FAILURE(TakeEarlier(1, root_ + "/early", &early));
  for (int i = 0; i < kExtraMiB; ++i) Cmd("alloc");

  // --name: the image goes to the catalog under the checkpoint root
  // (root/manual/slow), where start-up recovery looks.
  const std::string manual = root_ + "/manual";
  Child ck = StartSlowCheckpoint({"--name", "slow"}, 300ms);
  std::vector<std::string> tmps;
  for (const auto& name : ListDir(manual)) {
    if (name.rfind("slow", 0) == 0 && name.size() > 4 && name.substr(name.size() - 4) == ".tmp") tmps.push_back(name);
  }
  ASSERT_FALSE(tmps.empty()) << "no slow*.tmp in " << manual << " during the copy: " << JoinNames(ListDir(manual))
                             << "\n" << ck.output;
  kill(daemon_.pid, SIGKILL);
  EXPECT_EQ(daemon_.Wait(10s), -SIGKILL);
  const int rc = ck.Wait(30s);
  Show("phosd killed during the copy", ck.output);
  EXPECT_NE(rc, 0) << ck.output;
  EXPECT_NE(rc, -1000) << "the checkpoint command hung after phosd died";
  EXPECT_TRUE(Contains(ck.output, "failed")) << ck.output;
  // It must say that phosd went away (not only gRPC's "Socket closed").
  EXPECT_TRUE(Contains(ck.output, "phosd")) << "the error does not say phosd went away:\n" << ck.output;
  for (const auto& t : tmps) EXPECT_TRUE(fs::exists(manual + "/" + t)) << t << " (before the restart)";

  // What the app does without its phosd: its next CUDA call fails and
  // checkpoint_app exits (its CHECK); `phos run` exits with it.
  const size_t from = Log().size();
  const int n = next_cmd_;
  std::string out;
  EXPECT_FALSE(TryCmd("step", 0ms, &out));
  EXPECT_TRUE(WaitLog(from, "cudaErrorDevicesUnavailable", 15s, &out)) << "the app without phosd:\n" << out;
  EXPECT_EQ(out.find("ack " + std::to_string(n) + "\n"), std::string::npos) << "a GPU step completed without phosd:\n"
                                                                             << out;
  Child run;
  run.pid = run_pid_;
  const int run_rc = run.Wait(10s);
  EXPECT_NE(run_rc, -1000) << "the app did not exit after its CUDA call failed";
  EXPECT_NE(run_rc, 0) << "phos run should exit with the app's CUDA error";
  run_pid_ = -1;
  if (kill(app_pid_, 0) != 0) app_pid_ = -1;

  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  const std::string said = "removed incomplete checkpoint " + manual + "/" + tmps[0];
  EXPECT_TRUE(daemon_.ReadUntil(said, 5s)) << "phosd did not say '" << said << "':\n" << daemon_.output;
  for (const auto& t : tmps) EXPECT_FALSE(fs::exists(manual + "/" + t)) << t << " survived the restart";
  EXPECT_FALSE(fs::exists(manual + "/slow")) << "the interrupted image looks whole";

  ExpectIntact(early);
  // The restarted phosd has placed nothing yet: the image restores into it.
  KillApp();
  RewindCommands(early.next_cmd);
  Result rs = Phos({"restore", early.dir, "--detach"});
  ASSERT_EQ(rs.rc, 0) << rs.output << "\nphosd:\n" << DaemonLog() << "\napp:\n" << Log();
  const std::string pid = Field(rs.output, "restored pid");
  ASSERT_FALSE(pid.empty()) << rs.output;
  app_pid_ = std::stoi(pid);
  const std::string p = Cmd("print");
  EXPECT_EQ(Field(p, "checksum"), early.checksum) << p;
  EXPECT_EQ(Field(p, "verify-step"), std::to_string(early.steps)) << p;
  Cmd("quit");
}

}  // namespace
