// Checkpoints of whole NCCL jobs, end to end (docs/protocols.md "Job
// checkpoints"): phosd (sim, two GPUs) + two ranks of nccl_ranks' `train`
// mode under `phos run`, rank 1 slower than rank 0, so at any moment their
// collective counts differ; `phos checkpoint --job` brings them to one cut
// and captures both whole (CRIU); both are killed; a fresh phosd restores
// the job directory; the restored ranks form their communicator again and
// finish with parameters bit-identical to the CPU reference of an
// uninterrupted run. Once per mode (stop, cow, recopy).
//
// The ranks run in sessions of their own with stdout on log files opened
// O_APPEND (as process_restore_test's app), so CRIU needs no --shell-job;
// this test is a child subreaper and reaps the restored ranks.
// Skips ("skipped: CRIU unavailable ...") when CriuClient::Check fails.
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "harness.h"
#include "process_harness.h"

namespace {

using phos::testing::Child;
using namespace std::chrono_literals;
namespace fs = std::filesystem;
using Result = phos::testing::PhosResult;

class JobCheckpointTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const phos::Status& criu = phos::testing::CriuAvailable();
    if (!criu.ok()) GTEST_SKIP() << "skipped: CRIU unavailable: " << criu.ToString();
    ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
    char tmpl[] = "/tmp/phos_job_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    socket_ = dir_ + "/phosd.sock";
    ASSERT_TRUE(phos::testing::StartSimDaemon(socket_, {"--sim-gpus", "2"}, &daemon_));
  }
  void TearDown() override {
    for (pid_t& p : pids_) {
      phos::testing::KillAndWaitGone(p, 10s);
      p = -1;
    }
    EXPECT_TRUE(phos::testing::StopDaemon(&daemon_));
    prctl(PR_SET_CHILD_SUBREAPER, 0);
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  std::string LogOf(int rank) const { return dir_ + "/rank" + std::to_string(rank) + ".log"; }
  std::string Log(int rank) const { return phos::testing::ReadFile(LogOf(rank)); }

  // Rank `rank` of the 2-rank job under phos run (--no-pid-ns: the image
  // keeps the program's own pid, which the restore takes back).
  pid_t StartRank(int rank) {
    const std::vector<std::string> run = {"run", "--no-pid-ns", "--lib", PHOS_LIB_PATH, "--", PHOS_NCCL_RANKS,
                                          "train", std::to_string(rank), "2", dir_ + "/job.id"};
    const pid_t pid = phos::testing::StartDetached(phos::testing::PhosArgv(socket_, run), LogOf(rank), LogOf(rank));
    pids_.push_back(pid);
    return pid;
  }

  std::string dir_, socket_;
  Child daemon_;
  std::vector<pid_t> pids_;
};

TEST_P(JobCheckpointTest, JobCheckpointedAtOneCutRestoresAndFinishesExactly) {
  const std::string mode = GetParam();
  const pid_t rank0 = StartRank(0);
  const pid_t rank1 = StartRank(1);
  ASSERT_GT(rank0, 0);
  ASSERT_GT(rank1, 0);
  // Both run, rank 0 ahead of rank 1.
  ASSERT_TRUE(phos::testing::WaitFileText(LogOf(1), "rank 1: step 30", 120s)) << Log(0) << Log(1);

  // A single rank alone is refused by name; nothing is written.
  Result one = phos::testing::RunPhos(socket_, {"checkpoint", "--pid", std::to_string(rank1), "--out", dir_ + "/one"});
  EXPECT_NE(one.rc, 0) << one.output;
  EXPECT_NE(one.output.find("NCCL communicator"), std::string::npos) << one.output;
  EXPECT_FALSE(fs::exists(dir_ + "/one"));

  const std::string img = dir_ + "/img-" + mode;
  Result ck = phos::testing::RunPhos(
      socket_, {"checkpoint", "--pid", std::to_string(rank0), "--job", "--mode", mode, "--out", img}, 120s);
  ASSERT_EQ(ck.rc, 0) << ck.output << "\nphosd:\n" << phos::testing::DaemonOutput(&daemon_) << Log(0) << Log(1);
  EXPECT_NE(ck.output.find("job of 2 ranks"), std::string::npos) << ck.output;
  EXPECT_TRUE(fs::exists(img + "/job")) << ck.output;
  EXPECT_TRUE(fs::exists(img + "/rank-0/criu/inventory.img")) << ck.output;
  EXPECT_TRUE(fs::exists(img + "/rank-1/criu/inventory.img")) << ck.output;

  // Killed before they finished (else this run proves nothing).
  for (pid_t& p : pids_) {
    ASSERT_TRUE(phos::testing::KillAndWaitGone(p, 10s));
    p = -1;
  }
  const size_t before[2] = {Log(0).size(), Log(1).size()};
  ASSERT_EQ(Log(0).find("trained checksum"), std::string::npos) << "rank 0 finished before the kill; lengthen the run";
  ASSERT_EQ(Log(1).find("trained checksum"), std::string::npos) << "rank 1 finished before the kill; lengthen the run";

  // A fresh phosd (as process_restore_test: module variables go back to
  // their addresses) restores the job.
  ASSERT_TRUE(phos::testing::StopDaemon(&daemon_));
  ASSERT_TRUE(phos::testing::StartSimDaemon(socket_, {"--sim-gpus", "2"}, &daemon_));
  Result rs = phos::testing::RunPhos(socket_, {"restore", img}, 120s);
  ASSERT_EQ(rs.rc, 0) << rs.output << "\nphosd:\n" << phos::testing::DaemonOutput(&daemon_) << Log(0) << Log(1);
  EXPECT_NE(rs.output.find("job of 2 ranks, pids " + std::to_string(rank0) + " " + std::to_string(rank1)),
            std::string::npos)
      << rs.output;
  pids_ = {rank0, rank1};  // the same pids, re-parented to us (subreaper)

  std::string sums[2];
  for (int r = 0; r < 2; ++r) {
    const std::string want = "rank " + std::to_string(r) + ": trained checksum ";
    ASSERT_TRUE(phos::testing::WaitFileText(LogOf(r), " OK\n", 180s))
        << Log(r) << "\nphosd:\n" << phos::testing::DaemonOutput(&daemon_);
    const std::string after = Log(r).substr(before[r]);
    const size_t at = after.find(want);
    ASSERT_NE(at, std::string::npos) << after;
    sums[r] = after.substr(at + want.size(), after.find(' ', at + want.size()) - (at + want.size()));
  }
  EXPECT_EQ(sums[0], sums[1]);
  for (pid_t& p : pids_) {
    EXPECT_TRUE(phos::testing::WaitGone(p, 60s));
    p = -1;
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, JobCheckpointTest, ::testing::Values("stop", "cow", "recopy"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
