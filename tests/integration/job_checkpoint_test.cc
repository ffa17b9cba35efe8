// Checkpoints of whole NCCL jobs, end to end (docs/protocols.md "Job
// checkpoints"): phosd (sim, two GPUs) + the ranks of an nccl_ranks job
// under `phos run` — `train` (2 ranks, all-reduce; rank 1 slower than rank
// 0, so at any moment their collective counts differ) in every mode, and
// `pipeline` (3 stages over Send/Recv, stage 1 slowest, so messages are in
// flight) — `phos checkpoint --job` brings them to one cut and captures
// every rank whole (CRIU); all are killed; a fresh phosd restores the job
// directory; the restored ranks form their communicator again and finish
// with results bit-identical to the CPU reference of an uninterrupted run.
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
#include <sstream>
#include <string>
#include <vector>

#include "harness.h"
#include "process_harness.h"

namespace {

using phos::testing::Child;
using namespace std::chrono_literals;
namespace fs = std::filesystem;
using Result = phos::testing::PhosResult;

struct JobCase {
  std::string program;  // nccl_ranks mode
  int ranks;
  std::string mode;     // checkpoint mode
  bool swap_gpus = false;  // restore with --device-map 0=1,1=0
  bool kill = false;       // `phos checkpoint --kill` ends the ranks (else the test kills them)
};

// `phos ps`'s GPU column of process `pid` (-1: not listed).
int GpuOf(const std::string& socket, pid_t pid) {
  phos::testing::PhosResult ps = phos::testing::RunPhos(socket, {"ps"});
  std::istringstream lines(ps.output);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream cols(line);
    std::vector<std::string> c;
    for (std::string w; cols >> w;) c.push_back(w);
    // PID LAUNCHER NAME SESSION JOB RANK/SIZE GPU ...
    if (c.size() > 6 && c[0] == std::to_string(pid) && c[4] != "-") return std::stoi(c[6]);
  }
  return -1;
}

class JobCheckpointTest : public ::testing::TestWithParam<JobCase> {
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
  pid_t StartRank(const JobCase& c, int rank) {
    const std::vector<std::string> run = {"run", "--no-pid-ns", "--job", "testjob", "--lib", PHOS_LIB_PATH, "--",
                                          PHOS_NCCL_RANKS,
                                          c.program, std::to_string(rank), std::to_string(c.ranks), dir_ + "/job.id"};
    const pid_t pid = phos::testing::StartDetached(phos::testing::PhosArgv(socket_, run), LogOf(rank), LogOf(rank));
    pids_.push_back(pid);
    return pid;
  }

  std::string dir_, socket_;
  Child daemon_;
  std::vector<pid_t> pids_;
};

TEST_P(JobCheckpointTest, JobCheckpointedAtOneCutRestoresAndFinishesExactly) {
  const JobCase c = GetParam();
  std::vector<pid_t> ranks;
  for (int r = 0; r < c.ranks; ++r) {
    ranks.push_back(StartRank(c, r));
    ASSERT_GT(ranks.back(), 0);
  }
  auto logs = [&] {
    std::string all;
    for (int r = 0; r < c.ranks; ++r) all += "--- rank " + std::to_string(r) + ":\n" + Log(r);
    return all;
  };
  // All run (rank 1 is the slowest).
  ASSERT_TRUE(phos::testing::WaitFileText(LogOf(1), "rank 1: step 30", 120s)) << logs();

  // A single rank alone is refused by name; nothing is written.
  Result one =
      phos::testing::RunPhos(socket_, {"checkpoint", "--pid", std::to_string(ranks[1]), "--out", dir_ + "/one"});
  EXPECT_NE(one.rc, 0) << one.output;
  EXPECT_NE(one.output.find("NCCL communicator"), std::string::npos) << one.output;
  EXPECT_FALSE(fs::exists(dir_ + "/one"));

  const std::string img = dir_ + "/img-" + c.mode;
  // The job by a rank's pid, or (swap case) by its `phos run --job` name.
  const std::string target = c.swap_gpus ? "testjob" : std::to_string(ranks[0]);
  std::vector<std::string> checkpoint = {"checkpoint", target, "--job", "--mode", c.mode, "--out", img};
  if (c.kill) checkpoint.push_back("--kill");
  Result ck = phos::testing::RunPhos(socket_, checkpoint, 120s);
  ASSERT_EQ(ck.rc, 0) << ck.output << "\nphosd:\n" << phos::testing::DaemonOutput(&daemon_) << logs();
  EXPECT_NE(ck.output.find("job of " + std::to_string(c.ranks) + " ranks"), std::string::npos) << ck.output;
  EXPECT_TRUE(fs::exists(img + "/job")) << ck.output;
  for (int r = 0; r < c.ranks; ++r) {
    EXPECT_TRUE(fs::exists(img + "/rank-" + std::to_string(r) + "/criu/inventory.img")) << ck.output;
  }
  // `phos inspect` reads the job image: its manifest, then every rank's image, all intact.
  Result in = phos::testing::RunPhos(socket_, {"inspect", img});
  EXPECT_EQ(in.rc, 0) << in.output;
  EXPECT_NE(in.output.find("job image " + img + ": " + std::to_string(c.ranks) + " ranks, mode " + c.mode),
            std::string::npos)
      << in.output;
  EXPECT_NE(in.output.find("=== rank-" + std::to_string(c.ranks - 1) + " ==="), std::string::npos) << in.output;

  // Killed before they finished (else this run proves nothing): by
  // --kill, which answers once every rank's session is gone (phos ps
  // lists none of them; the dead ranks wait for us, their reaper), or here.
  if (c.kill) {
    EXPECT_NE(ck.output.find(std::to_string(c.ranks) + " killed"), std::string::npos) << ck.output;
    for (pid_t p : ranks) EXPECT_EQ(GpuOf(socket_, p), -1) << "rank pid " << p << " still has a session";
    for (pid_t& p : pids_) {
      ASSERT_TRUE(phos::testing::WaitGone(p, 10s)) << "rank pid " << p << " outlived --kill";
      p = -1;
    }
  }
  for (pid_t& p : pids_) {
    ASSERT_TRUE(phos::testing::KillAndWaitGone(p, 10s));
    p = -1;
  }
  std::vector<size_t> before;
  for (int r = 0; r < c.ranks; ++r) {
    before.push_back(Log(r).size());
    ASSERT_EQ(Log(r).find(" OK\n"), std::string::npos) << "rank " << r << " finished before the kill; lengthen the run";
  }

  // A fresh phosd (as process_restore_test: module variables go back to
  // their addresses) restores the job.
  ASSERT_TRUE(phos::testing::StopDaemon(&daemon_));
  ASSERT_TRUE(phos::testing::StartSimDaemon(socket_, {"--sim-gpus", "2"}, &daemon_));
  std::vector<std::string> restore = {"restore", img};
  if (c.swap_gpus) restore.insert(restore.end(), {"--device-map", "0=1,1=0"});
  Result rs = phos::testing::RunPhos(socket_, restore, 120s);
  ASSERT_EQ(rs.rc, 0) << rs.output << "\nphosd:\n" << phos::testing::DaemonOutput(&daemon_) << logs();
  std::string pids_line = "job of " + std::to_string(c.ranks) + " ranks, pids";
  for (pid_t p : ranks) pids_line += " " + std::to_string(p);
  EXPECT_NE(rs.output.find(pids_line), std::string::npos) << rs.output;
  pids_ = ranks;  // the same pids, re-parented to us (subreaper)
  // Rank r ran on GPU r % 2; swapped, it runs on the other one now.
  int listed = 0;
  for (int r = 0; r < c.ranks; ++r) {
    const int want = c.swap_gpus ? 1 - r % 2 : r % 2;
    const int got = GpuOf(socket_, ranks[r]);
    if (got == -1) continue;  // it finished already
    ++listed;
    EXPECT_EQ(got, want) << "rank " << r;
  }
  EXPECT_GT(listed, 0) << "no restored rank was listed by phos ps (all finished at once?)";

  std::vector<std::string> sums;
  for (int r = 0; r < c.ranks; ++r) {
    ASSERT_TRUE(phos::testing::WaitFileText(LogOf(r), " OK\n", 180s))
        << logs() << "\nphosd:\n" << phos::testing::DaemonOutput(&daemon_);
    const std::string after = Log(r).substr(before[r]);
    EXPECT_EQ(after.find("nccl_ranks: line "), std::string::npos) << after;  // no failed check
    const std::string want = "rank " + std::to_string(r) + ": trained checksum ";
    if (const size_t at = after.find(want); at != std::string::npos) {
      sums.push_back(after.substr(at + want.size(), after.find(' ', at + want.size()) - (at + want.size())));
    }
  }
  if (c.program == "train") {
    ASSERT_EQ(sums.size(), static_cast<size_t>(c.ranks));
    for (const std::string& sum : sums) EXPECT_EQ(sum, sums[0]);
  }
  for (pid_t& p : pids_) {
    EXPECT_TRUE(phos::testing::WaitGone(p, 60s));
    p = -1;
  }
}

INSTANTIATE_TEST_SUITE_P(Jobs, JobCheckpointTest,
                         ::testing::Values(JobCase{"train", 2, "stop"}, JobCase{"train", 2, "cow"},
                                           JobCase{"train", 2, "recopy", false, true},
                                           JobCase{"pipeline", 3, "cow", true, true}),
                         [](const ::testing::TestParamInfo<JobCase>& i) {
                           return i.param.program + "_" + std::to_string(i.param.ranks) + "_ranks_" + i.param.mode +
                                  (i.param.swap_gpus ? "_gpus_swapped" : "") + (i.param.kill ? "_killed" : "");
                         });

}  // namespace
