// Whole-process checkpoint and restore, end to end (docs/criu.md
// "Whole-process checkpoint and restore"): phosd (sim) + `phos run` +
// checkpoint_app; `phos checkpoint` without --gpu-only saves the GPU state
// and, through CRIU, the process; the app is killed; `phos restore DIR
// --detach` brings it back with the same pid, and the restored app's
// device state and host state are those of the checkpoint.
//
// The app runs in its own session (setsid) with stdout on a log file
// opened O_APPEND (CRIU does not check the size of such a file on
// restore) and stdin on /dev/null, so CRIU needs neither --shell-job nor
// inherited pipes. This test process is a child subreaper: the restored
// app (detached by CRIU from phosd's swrk child) is re-parented to it, so
// the test can kill and reap it.
//
// Skips ("skipped: CRIU unavailable ...") when CriuClient::Check fails
// (not root, no criu binary, a kernel CRIU cannot probe).
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "harness.h"
#include "process_harness.h"

namespace {

using phos::testing::Child;
using phos::testing::Field;
using namespace std::chrono_literals;
namespace fs = std::filesystem;
using Result = phos::testing::PhosResult;

class ProcessRestoreTest : public ::testing::Test, protected phos::testing::CheckpointAppDriver {
 protected:
  void SetUp() override {
    const phos::Status& criu = phos::testing::CriuAvailable();
    if (!criu.ok()) GTEST_SKIP() << "skipped: CRIU unavailable: " << criu.ToString();
    ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
    char tmpl[] = "/tmp/phos_pr_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    socket_ = dir_ + "/phosd.sock";
    ctl_ = dir_ + "/ctl";
    log_ = dir_ + "/app.log";
    fs::create_directories(ctl_);
    ASSERT_NO_FATAL_FAILURE(StartDaemon());
  }

  void StartDaemon() { ASSERT_TRUE(phos::testing::StartSimDaemon(socket_, daemon_args_, &daemon_)); }
  // A fresh phosd for the restore. The sim places module variables
  // next-fit (never at an address its daemon used before), and a restore
  // into a fresh context needs the app's __device__ variables back at their
  // old addresses: only a daemon that has placed nothing yet gives them
  // (docs/criu.md "Limits").
  void RestartDaemon() {
    ASSERT_TRUE(phos::testing::StopDaemon(&daemon_));
    ASSERT_NO_FATAL_FAILURE(StartDaemon());
  }
  void TearDown() override {
    KillApp();
    EXPECT_TRUE(phos::testing::StopDaemon(&daemon_));
    prctl(PR_SET_CHILD_SUBREAPER, 0);
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  // The app (or its restored copy: our child through the subreaper).
  void KillApp() {
    if (app_pid_ <= 0) return;
    // A restored app is phosd's child (phosd is a subreaper and reaps it);
    // if phosd stops first, the zombie comes to us. Reap whichever way,
    // until the pid is gone (bounded).
    phos::testing::KillAndWaitGone(app_pid_, 10s);
    app_pid_ = -1;
  }

  // checkpoint_app under phos run, in its own session, output on the log.
  pid_t StartApp() {
    // --no-pid-ns: this test covers images restored with their old pid
    // (the app is `phos run` itself); e2e_process_test covers the
    // default, pid-namespaced runs.
    const std::vector<std::string> run = {"run", "--no-pid-ns", "--lib", PHOS_LIB_PATH, "--", PHOS_CHECKPOINT_APP, ctl_};
    const pid_t pid = phos::testing::StartDetached(phos::testing::PhosArgv(socket_, run), log_, log_);
    app_pid_ = pid;
    std::string out;
    if (!WaitLog(0, "checkpoint_app: ready pid ", 60s, &out) || !WaitLog(0, "\n", 5s, &out)) return -1;
    std::smatch m;
    if (!std::regex_search(out, m, std::regex("ready pid (\\d+)"))) return -1;
    return std::stoi(m[1]);
  }

  Result Phos(const std::vector<std::string>& args) { return phos::testing::RunPhos(socket_, args); }

  // phosd's output so far (for failure messages).
  std::string DaemonLog() { return phos::testing::DaemonOutput(&daemon_); }

  // Checkpoint (whole process), one more step, kill, restore: the restored
  // app holds the checkpoint's state and then steps exactly as before.
  // `step_cmd`: the app's command that makes a step (step, texstep).
  void RoundTrip(pid_t pid, const std::string& mode, int steps_done, const std::string& sum_at,
                 const std::string& step_cmd = "step") {
    const std::string img = dir_ + "/img-" + mode;
    Result ck = Phos({"checkpoint", "--pid", std::to_string(pid), "--mode", mode, "--out", img});
    ASSERT_EQ(ck.rc, 0) << ck.output << "\nphosd:\n" << DaemonLog();
    EXPECT_TRUE(fs::exists(img + "/criu/inventory.img")) << ck.output;
    EXPECT_TRUE(fs::exists(img + "/criu/criu-dump.log")) << ck.output;
    const int at_checkpoint = next_cmd_;

    // The app kept running: one more step.
    const std::string next = Cmd(step_cmd);
    const std::string sum_next = Field(next, "checksum");
    ASSERT_NE(next.find("step " + std::to_string(steps_done + 1) + " checksum"), std::string::npos) << next;
    ASSERT_NE(sum_next, sum_at);

    KillApp();
    RewindCommands(at_checkpoint);
    ASSERT_NO_FATAL_FAILURE(RestartDaemon());
    Result rs = Phos({"restore", img, "--detach"});
    ASSERT_EQ(rs.rc, 0) << rs.output << "\nphosd:\n" << DaemonLog() << "\napp:\n" << Log();
    EXPECT_NE(rs.output.find("restored pid " + std::to_string(pid)), std::string::npos) << rs.output;
    app_pid_ = pid;  // same pid, and our child (subreaper)

    const std::string p = Cmd("print");
    EXPECT_EQ(Field(p, "checksum"), sum_at) << p;
    EXPECT_EQ(Field(p, "steps"), std::to_string(steps_done)) << p;
    EXPECT_EQ(Field(p, "ksteps"), std::to_string(steps_done)) << p;  // a module variable only kernels touch
    EXPECT_EQ(Field(p, "verify-step"), std::to_string(steps_done)) << p;
    EXPECT_EQ(Field(p, "verify-big"), std::to_string(steps_done)) << p;
    const std::string again = Cmd(step_cmd);
    EXPECT_NE(again.find("step " + std::to_string(steps_done + 1) + " checksum " + sum_next), std::string::npos)
        << again << "\nexpected checksum " << sum_next;
  }

  // The GPUs `phos ps` lists for `pid` ("0", "0+1"; "" when not listed).
  std::string GpusOf(pid_t pid) {
    Result ps = Phos({"ps"});
    std::istringstream lines(ps.output);
    for (std::string line; std::getline(lines, line);) {
      std::istringstream cols(line);
      std::vector<std::string> c;
      for (std::string w; cols >> w;) c.push_back(w);
      // PID LAUNCHER NAME SESSION JOB(RANK/SIZE) GPU ...; a process of no job: "-"
      if (c.size() > 5 && c[0] == std::to_string(pid) && c[4] == "-") return c[5];
    }
    return "";
  }

  std::string dir_, socket_;
  std::vector<std::string> daemon_args_;
  Child daemon_;
  pid_t app_pid_ = -1;
};

// docs/interposer.md "Several GPUs in one process": a process using two GPUs
// (buffers, streams, events, kernels and a module variable on each) is
// checkpointed whole (stop-the-world), killed, and restored into a fresh phosd
// of three GPUs with its first GPU moved (--device-map 0=2): it finds its
// state on both GPUs and goes on using them (several_gpus.cu checks it all
// after its hold), its calls naming its old GPU 0 going to GPU 2 (phosd's
// log says which GPUs it made contexts on).
TEST_F(ProcessRestoreTest, AProcessOfTwoGpusComesBackOnAnotherGpu) {
  daemon_args_ = {"--sim-gpus", "2"};
  ASSERT_NO_FATAL_FAILURE(RestartDaemon());
  const std::string hold = dir_ + "/several.go";
  const std::vector<std::string> run = {"run", "--no-pid-ns", "--lib", PHOS_LIB_PATH, "--", PHOS_SEVERAL_GPUS, hold};
  const pid_t pid = phos::testing::StartDetached(phos::testing::PhosArgv(socket_, run), log_, log_);
  app_pid_ = pid;
  ASSERT_TRUE(phos::testing::WaitFileText(log_, "several: holding", 120s)) << Log() << DaemonLog();
  EXPECT_EQ(GpusOf(pid), "0+1");
  // The default mode (cow) takes both GPUs itself (no stop-the-world fallback).
  const std::string img = dir_ + "/two-gpus";
  Result ck = Phos({"checkpoint", "--pid", std::to_string(pid), "--out", img});
  ASSERT_EQ(ck.rc, 0) << ck.output << "\nphosd:\n" << DaemonLog();
  EXPECT_NE(ck.output.find("mode_cow"), std::string::npos) << ck.output;
  KillApp();
  ASSERT_EQ(Log().find("several: state intact"), std::string::npos) << Log();

  daemon_args_ = {"--sim-gpus", "3"};
  ASSERT_NO_FATAL_FAILURE(RestartDaemon());
  Result rs = Phos({"restore", img, "--detach", "--device-map", "0=2"});
  ASSERT_EQ(rs.rc, 0) << rs.output << "\nphosd:\n" << DaemonLog() << "\napp:\n" << Log();
  app_pid_ = pid;  // same pid, and our child (subreaper)
  EXPECT_EQ(GpusOf(pid), "2+1");  // its first GPU is phosd's GPU 2 now
  ASSERT_EQ(std::system(("touch " + hold).c_str()), 0);
  ASSERT_TRUE(phos::testing::WaitFileText(log_, "several: OK", 120s)) << Log() << "\nphosd:\n" << DaemonLog();
  EXPECT_NE(Log().find("several: state intact after the hold"), std::string::npos) << Log();
  EXPECT_EQ(Log().find("several_gpus: line "), std::string::npos) << Log();  // no failed check
  const std::string phosd = DaemonLog();
  EXPECT_NE(phosd.find("uses GPU 1 too"), std::string::npos) << phosd;
  EXPECT_EQ(phosd.find("uses GPU 0 too"), std::string::npos) << phosd;  // the app's GPU 0 is GPU 2 now
  // Concurrent (the default): the loader loaded each buffer on its GPU.
  EXPECT_NE(phosd.find("us (concurrent)"), std::string::npos) << phosd;
  EXPECT_TRUE(phos::testing::WaitGone(pid, 30s));
  app_pid_ = -1;
}

TEST_F(ProcessRestoreTest, StopAndCowCheckpointsRestoreTheWholeProcess) {
  const pid_t pid = StartApp();
  ASSERT_GT(pid, 0) << Log();
  std::string s;
  for (int i = 0; i < 3; ++i) s = Cmd("step");
  const std::string sum3 = Field(s, "checksum");
  ASSERT_FALSE(sum3.empty()) << s;
  ASSERT_NO_FATAL_FAILURE(RoundTrip(pid, "stop", 3, sum3));
  // The restored process is checkpointed and restored again, in cow mode.
  s = Cmd("step");  // step 5
  ASSERT_NE(s.find("step 5 checksum"), std::string::npos) << s;
  ASSERT_NO_FATAL_FAILURE(RoundTrip(pid, "cow", 5, Field(s, "checksum")));
  Cmd("quit");
}

// docs/interposer.md "CUDA arrays, textures and surfaces": a process whose
// steps read through a texture object and store through a surface object
// of a CUDA array is checkpointed whole (cow) and restored into a
// restarted phosd: the objects come back under the handles the app holds
// (its next steps use them) and the state matches.
TEST_F(ProcessRestoreTest, TextureAndSurfaceObjectsSurviveAWholeProcessRestore) {
  const pid_t pid = StartApp();
  ASSERT_GT(pid, 0) << Log();
  std::string s;
  for (int i = 0; i < 2; ++i) s = Cmd("texstep");
  ASSERT_NE(s.find("step 2 checksum"), std::string::npos) << s << Log();
  ASSERT_NO_FATAL_FAILURE(RoundTrip(pid, "cow", 2, Field(s, "checksum"), "texstep"));
  Cmd("quit");
}

// docs/interposer.md "The driver's virtual-memory API": a process stepping
// arrays in memory it mapped itself (cuMemAddressReserve + cuMemMap) is
// checkpointed whole and restored into a restarted phosd: its reserved range
// and mappings come back at the addresses it holds (its next steps use
// them) and the state matches.
TEST_F(ProcessRestoreTest, AppMappedMemorySurvivesAWholeProcessRestore) {
  const pid_t pid = StartApp();
  ASSERT_GT(pid, 0) << Log();
  std::string s;
  for (int i = 0; i < 2; ++i) s = Cmd("vmmstep");
  ASSERT_NE(s.find("step 2 checksum"), std::string::npos) << s << Log();
  ASSERT_NO_FATAL_FAILURE(RoundTrip(pid, "stop", 2, Field(s, "checksum"), "vmmstep"));
  const std::string p = Cmd("print");
  EXPECT_EQ(Field(p, "verify-vmm"), "3") << p;
  Cmd("quit");
}

TEST_F(ProcessRestoreTest, FailuresAreClearAndLeaveTheAppAlone) {
  const pid_t pid = StartApp();
  ASSERT_GT(pid, 0) << Log();
  const std::string s = Cmd("step");
  const std::string img = dir_ + "/img";
  Result ck = Phos({"checkpoint", "--pid", std::to_string(pid), "--out", img});
  ASSERT_EQ(ck.rc, 0) << ck.output << "\nphosd:\n" << DaemonLog();

  // Restoring while the process still runs: refused, the app is untouched.
  Result busy = Phos({"restore", img, "--detach"});
  EXPECT_EQ(busy.rc, 1) << busy.output;
  EXPECT_NE(busy.output.find("pid " + std::to_string(pid) + " exists"), std::string::npos) << busy.output;
  EXPECT_EQ(Field(Cmd("print"), "checksum"), Field(s, "checksum"));

  // A corrupt CRIU image: CRIU's error, quoted from its log.
  const std::string bad = dir_ + "/bad";
  fs::copy(img, bad, fs::copy_options::recursive);
  for (const auto& e : fs::directory_iterator(bad + "/criu")) {
    if (e.path().filename().string().rfind("core-", 0) == 0) fs::remove(e.path());
  }
  const int at_checkpoint = next_cmd_ - 1;  // the print above came after the checkpoint
  KillApp();
  RewindCommands(at_checkpoint);
  Result corrupt = Phos({"restore", bad, "--detach"});
  EXPECT_EQ(corrupt.rc, 1) << corrupt.output;
  EXPECT_NE(corrupt.output.find("criu restore"), std::string::npos) << corrupt.output;
  EXPECT_NE(corrupt.output.find("criu-restore.log"), std::string::npos) << corrupt.output;
  EXPECT_NE(kill(pid, 0), 0) << "a failed restore left pid " << pid << " running";

  // The good image still restores.
  ASSERT_NO_FATAL_FAILURE(RestartDaemon());
  Result ok = Phos({"restore", img, "--detach"});
  ASSERT_EQ(ok.rc, 0) << ok.output << "\nphosd:\n" << DaemonLog();
  app_pid_ = pid;
  EXPECT_EQ(Field(Cmd("print"), "checksum"), Field(s, "checksum"));

  // A GPU-only checkpoint still works on the restored process.
  Result gpu = Phos({"checkpoint", "--pid", std::to_string(pid), "--gpu-only", "--out", dir_ + "/gpu"});
  EXPECT_EQ(gpu.rc, 0) << gpu.output;
  Result notwhole = Phos({"restore", dir_ + "/gpu"});
  EXPECT_EQ(notwhole.rc, 1) << notwhole.output;
  EXPECT_NE(notwhole.output.find("not a whole-process image"), std::string::npos) << notwhole.output;
}

// CRIU options (--file-locks, --tcp-established): CRIU refuses a process
// holding a file lock unless asked; asked, the image records the options,
// and the restore (without the flags) brings the lock back.
TEST_F(ProcessRestoreTest, FileLocksAreRefusedUnlessAskedAndComeBack) {
  const pid_t pid = StartApp();
  ASSERT_GT(pid, 0) << Log();
  const std::string s = Cmd("step");
  ASSERT_NE(Cmd("lock").find("locked"), std::string::npos) << Log();
  // True when someone else (the app) holds CTL/lock.
  auto held_elsewhere = [&] {
    const int fd = open((ctl_ + "/lock").c_str(), O_RDWR);
    if (fd < 0) return false;
    const bool busy = flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
    close(fd);
    return busy;
  };
  ASSERT_TRUE(held_elsewhere());

  const std::string refused = dir_ + "/nolocks";
  Result no = Phos({"checkpoint", "--pid", std::to_string(pid), "--out", refused});
  EXPECT_NE(no.rc, 0) << no.output;
  EXPECT_NE(no.output.find("criu dump of pid"), std::string::npos) << no.output;
  EXPECT_FALSE(fs::exists(refused)) << no.output;
  EXPECT_EQ(Field(Cmd("print"), "checksum"), Field(s, "checksum")) << "the app should run on unharmed";

  const std::string img = dir_ + "/locks";
  Result ck = Phos({"checkpoint", "--pid", std::to_string(pid), "--file-locks", "--tcp-established", "--out", img});
  ASSERT_EQ(ck.rc, 0) << ck.output << "\nphosd:\n" << DaemonLog();
  // The options the dump used are in the manifest's process record.
  const Result in = Phos({"inspect", img, "--no-verify"});
  EXPECT_EQ(in.rc, 0) << in.output;
  EXPECT_NE(in.output.find("tcp-established, file-locks"), std::string::npos) << in.output;
  const Result js = Phos({"inspect", img, "--no-verify", "--json"});
  EXPECT_NE(js.output.find("\"file_locks\": true"), std::string::npos) << js.output;
  EXPECT_NE(js.output.find("\"tcp_established\": true"), std::string::npos) << js.output;

  const int at_checkpoint = next_cmd_;
  KillApp();
  EXPECT_FALSE(held_elsewhere()) << "the lock outlived the killed app";
  RewindCommands(at_checkpoint);
  ASSERT_NO_FATAL_FAILURE(RestartDaemon());
  Result rs = Phos({"restore", img, "--detach"});
  ASSERT_EQ(rs.rc, 0) << rs.output << "\nphosd:\n" << DaemonLog() << "\napp:\n" << Log();
  app_pid_ = pid;
  EXPECT_TRUE(held_elsewhere()) << "the restored app does not hold its lock again";
  EXPECT_EQ(Field(Cmd("print"), "checksum"), Field(s, "checksum"));
  Cmd("quit");
}

}  // namespace
