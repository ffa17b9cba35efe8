// Checkpoints of NCCL jobs whose ranks run on two phosds coordinated through
// etcd (docs/protocols.md "Jobs across phosds"), end to end: a real etcd on
// loopback, phosds A and B (sim, --etcd), the 4 ranks of `nccl_ranks train`
// (0 and 1 on A, 2 and 3 on B; rank 0 fastest, so their collective counts
// differ at any moment). `phos checkpoint --job` on A brings all four to
// one cut through the barrier in etcd and captures each where it runs; all
// are killed; fresh phosds restore the job image (A its ranks, B on A's
// request its own) and the ranks finish
// with the bytes of an uninterrupted run — in every mode. And etcd or a
// phosd that dies mid-checkpoint (every rank held at the cut) fails it
// cleanly on every phosd that lives on: nothing committed, an earlier job
// image intact; with etcd gone every rank runs on to the right result.
//
// Ranks log to files opened O_APPEND in sessions of their own (CRIU needs
// no --shell-job); this test is a child subreaper and reaps restored ranks.
// Skips ("skipped: CRIU unavailable ...") when CriuClient::Check fails.
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <future>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "harness.h"
#include "local_etcd.h"
#include "process_harness.h"

namespace {

using phos::testing::Child;
using namespace std::chrono_literals;
namespace fs = std::filesystem;
using Result = phos::testing::PhosResult;

constexpr int kRanks = 4;

class JobAcrossPhosdsTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const phos::Status& criu = phos::testing::CriuAvailable();
    if (!criu.ok()) GTEST_SKIP() << "skipped: CRIU unavailable: " << criu.ToString();
    ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
    char tmpl[] = "/tmp/phos_jobx_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    etcd_ = std::make_unique<phos::testing::LocalEtcd>(dir_);
    ASSERT_TRUE(etcd_->ok()) << etcd_->error();
    token_ = dir_ + "/peer-token";
    std::ofstream(token_) << "job-across-test\n";
    fs::permissions(token_, fs::perms::owner_read | fs::perms::owner_write);
    for (const char* d : {"a", "b"}) fs::create_directories(dir_ + "/" + d);
    // Fixed ports: a phosd started again is the same peer endpoint, which
    // the job image names for the ranks it holds.
    port_["a"] = phos::testing::FreeLoopbackPort();
    port_["b"] = phos::testing::FreeLoopbackPort();
  }
  void TearDown() override {
    for (pid_t& p : pids_) {
      if (p > 0) phos::testing::KillAndWaitGone(p, 10s);
      p = -1;
    }
    EXPECT_TRUE(phos::testing::StopDaemon(&a_));
    EXPECT_TRUE(phos::testing::StopDaemon(&b_));
    etcd_.reset();
    prctl(PR_SET_CHILD_SUBREAPER, 0);
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  std::string Socket(const std::string& which) const { return dir_ + "/" + which + "/phosd.sock"; }
  ::testing::AssertionResult StartPhosd(const std::string& which, Child* out, const std::string& lease_ttl = "5",
                                        const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {"--sim-gpus", "2", "--checkpoint-root", dir_ + "/" + which + "/checkpoints",
                                     "--template-cache", "off", "--listen", Endpoint(which), "--peer-token", token_,
                                     "--etcd", etcd_->endpoint(), "--etcd-lease-ttl", lease_ttl};
    args.insert(args.end(), extra.begin(), extra.end());
    return phos::testing::StartSimDaemon(Socket(which), args, out);
  }
  std::string Endpoint(const std::string& which) { return "127.0.0.1:" + std::to_string(port_[which]); }
  /// Until a job cut's coordinator told the participants to capture (every
  /// rank held at the cut), read from etcd as phosd writes it.
  ::testing::AssertionResult WaitForCapture(std::chrono::seconds limit) {
    std::unique_ptr<phos::cluster::EtcdClient> etcd;
    phos::Status s = phos::cluster::EtcdClient::Connect(etcd_->endpoint(), 5s, &etcd);
    if (s.ok()) {
      s = etcd->WaitPrefix(
          "/phos/v1/cuts/",
          [](const std::vector<phos::cluster::KeyValue>& kvs) {
            for (const auto& kv : kvs) {
              if (kv.key.size() > 8 && kv.key.compare(kv.key.size() - 8, 8, "/capture") == 0) return true;
            }
            return false;
          },
          std::chrono::steady_clock::now() + limit, nullptr, "the cut's capture");
    }
    if (s.ok()) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << s.ToString() << Daemons();
  }
  /// Creates (or removes) the file phosd B's --test-pause-cut-before-capture waits for.
  void GoAhead(bool go) {
    if (go) {
      std::ofstream(Go()) << "go\n";
    } else {
      fs::remove(Go());
    }
  }
  std::string Go() const { return dir_ + "/go-ahead"; }
  std::string LogOf(int rank) const { return dir_ + "/rank" + std::to_string(rank) + ".log"; }
  std::string Log(int rank) const { return phos::testing::ReadFile(LogOf(rank)); }
  std::string Logs() const {
    std::string all;
    for (int r = 0; r < kRanks; ++r) all += "--- rank " + std::to_string(r) + ":\n" + Log(r);
    return all;
  }
  std::string Daemons() { return "\nphosd A:\n" + phos::testing::DaemonOutput(&a_) + "\nphosd B:\n" + phos::testing::DaemonOutput(&b_); }
  // Ranks 0 and 1 on A, 2 and 3 on B (--no-pid-ns: the image keeps the
  // program's own pid, which the restore takes back).
  void StartRanks(bool all_on_a = false) {
    for (int r = 0; r < kRanks; ++r) {
      const std::vector<std::string> run = {"run",      "--no-pid-ns", "--job", "crossjob", "--lib", PHOS_LIB_PATH,
                                            "--",       PHOS_NCCL_RANKS, "train",  std::to_string(r),
                                            std::to_string(kRanks), dir_ + "/job.id"};
      const pid_t pid = phos::testing::StartDetached(phos::testing::PhosArgv(Socket(r < 2 || all_on_a ? "a" : "b"), run),
                                                     LogOf(r), LogOf(r));
      ASSERT_GT(pid, 0);
      pids_.push_back(pid);
    }
  }
  /// Every rank ends with " OK" after `from[r]` bytes of its log, all with
  /// one checksum.
  void ExpectFinishedExactly(const std::vector<size_t>& from) {
    std::vector<std::string> sums;
    for (int r = 0; r < kRanks; ++r) {
      ASSERT_TRUE(phos::testing::WaitFileText(LogOf(r), " OK\n", 240s)) << Logs() << Daemons();
      const std::string after = Log(r).substr(from[static_cast<size_t>(r)]);
      EXPECT_EQ(after.find("nccl_ranks: line "), std::string::npos) << after;  // no failed check
      const std::string want = "rank " + std::to_string(r) + ": trained checksum ";
      const size_t at = after.find(want);
      ASSERT_NE(at, std::string::npos) << after;
      sums.push_back(after.substr(at + want.size(), after.find(' ', at + want.size()) - (at + want.size())));
    }
    for (const std::string& sum : sums) EXPECT_EQ(sum, sums[0]);
  }

  /// A and B (B's etcd lease `lease_ttl` s; B waits before capturing
  /// until GoAhead), the ranks 2 + 2, a committed job image at Good(); then
  /// a second job checkpoint into Bad(), started in the background
  /// (`pending`), which this returns from once it is held where B waits:
  /// every rank held at the cut, `capture` put, B not yet captured.
  void CheckpointPausedBeforeCapture(const std::string& lease_ttl, std::future<Result>* pending) {
    ASSERT_TRUE(StartPhosd("a", &a_));
    ASSERT_TRUE(StartPhosd("b", &b_, lease_ttl, {"--test-pause-cut-before-capture", Go()}));
    StartRanks();
    ASSERT_TRUE(phos::testing::WaitFileText(LogOf(1), "rank 1: step 30", 120s)) << Logs() << Daemons();
    GoAhead(true);
    Result ok = phos::testing::RunPhos(Socket("a"), {"checkpoint", "crossjob", "--job", "--out", Good()}, 180s);
    ASSERT_EQ(ok.rc, 0) << ok.output << Daemons();
    GoAhead(false);
    *pending = std::async(std::launch::async, [this] {
      return phos::testing::RunPhos(Socket("a"), {"checkpoint", "crossjob", "--job", "--out", Bad()}, 180s);
    });
    ASSERT_TRUE(WaitForCapture(120s));
  }
  /// The checkpoint into Bad() failed naming `why`, and cleanly: nothing
  /// committed, no staging left (a participant cleans its part up once it
  /// finds the cut over), the image at Good() intact.
  void ExpectFailedCleanly(const Result& failed, const std::string& why) {
    EXPECT_NE(failed.rc, 0) << failed.output;
    EXPECT_NE(failed.output.find(why), std::string::npos) << failed.output << Daemons();
    EXPECT_NE(failed.output.find("nothing was committed"), std::string::npos) << failed.output;
    EXPECT_FALSE(fs::exists(Bad())) << failed.output;
    EXPECT_TRUE(phos::testing::WaitPathGone(Bad() + ".tmp", 60s)) << Daemons();
    Result in = phos::testing::RunPhos(Socket("a"), {"inspect", Good()});
    EXPECT_EQ(in.rc, 0) << in.output;
  }
  /// `phos migrate crossjob --job --to DESTINATION` on A (stop mode). A
  /// ends the ranks once the job image is committed; this reaps them
  /// meanwhile (we are their parent), which frees their pids for the
  /// restore, and fills `before` with each rank's log size at its end.
  Result MigrateFromA(const std::string& destination, std::vector<size_t>* before,
                      const std::vector<std::string>& extra = {}) {
    auto pending = std::async(std::launch::async, [this, destination, extra] {
      std::vector<std::string> args = {"migrate", "crossjob", "--job", "--to", destination, "--peer-token",
                                       token_, "--mode", "stop"};
      args.insert(args.end(), extra.begin(), extra.end());
      return phos::testing::RunPhos(Socket("a"), args, 180s);
    });
    for (pid_t& p : pids_) {
      EXPECT_TRUE(phos::testing::WaitGone(p, 120s)) << "rank pid " << p << " was not ended on A";
      p = -1;
    }
    before->clear();
    for (int r = 0; r < kRanks; ++r) before->push_back(Log(r).size());
    return pending.get();
  }
  std::string Good() const { return dir_ + "/img-good"; }
  std::string Bad() const { return dir_ + "/img-bad"; }

  std::string dir_, token_;
  std::unique_ptr<phos::testing::LocalEtcd> etcd_;
  Child a_, b_;
  std::vector<pid_t> pids_;
  std::map<std::string, int> port_;
};

TEST_P(JobAcrossPhosdsTest, JobOnTwoPhosdsCheckpointedThroughEtcdRestoresAndFinishesExactly) {
  const std::string mode = GetParam();
  ASSERT_TRUE(StartPhosd("a", &a_));
  // Cow restores B's ranks on A: their device addresses must not be A's
  // ranks' (one device address space per phosd), so B's range starts
  // higher inside A's (docs/protocols.md "Job restore").
  ASSERT_TRUE(mode == "cow" ? StartPhosd("b", &b_, "5", {"--sim-va-base", "0x7c8000000000"}) : StartPhosd("b", &b_));
  StartRanks();
  ASSERT_TRUE(phos::testing::WaitFileText(LogOf(1), "rank 1: step 30", 120s)) << Logs() << Daemons();

  const std::string img = dir_ + "/img-" + mode;
  // --kill: every phosd ends its ranks once the image is committed.
  Result ck = phos::testing::RunPhos(
      Socket("a"), {"checkpoint", "crossjob", "--job", "--mode", mode, "--out", img, "--kill"}, 180s);
  ASSERT_EQ(ck.rc, 0) << ck.output << Daemons() << Logs();
  EXPECT_NE(ck.output.find("job of 4 ranks"), std::string::npos) << ck.output;
  EXPECT_NE(ck.output.find("4 killed"), std::string::npos) << ck.output;
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_TRUE(fs::exists(img + "/rank-" + std::to_string(r) + "/criu/inventory.img")) << ck.output;
  }
  Result in = phos::testing::RunPhos(Socket("a"), {"inspect", img});
  EXPECT_EQ(in.rc, 0) << in.output;
  EXPECT_NE(in.output.find("job image " + img + ": 4 ranks, mode " + mode), std::string::npos) << in.output;
  EXPECT_NE(in.output.find("job crossjob "), std::string::npos) << in.output;
  EXPECT_NE(in.output.find(Endpoint("a")), std::string::npos) << in.output;  // each rank's phosd
  EXPECT_NE(in.output.find(Endpoint("b")), std::string::npos) << in.output;

  // Ended by --kill (on A and, through etcd, on B) before they finished,
  // else this run proves nothing.
  std::vector<pid_t> ranks = pids_;
  for (pid_t& p : pids_) {
    ASSERT_TRUE(phos::testing::WaitGone(p, 10s)) << "rank pid " << p << " outlived --kill";
    p = -1;
  }
  std::vector<size_t> before;
  for (int r = 0; r < kRanks; ++r) {
    before.push_back(Log(r).size());
    ASSERT_EQ(Log(r).find(" OK\n"), std::string::npos) << "rank " << r << " finished before the kill; lengthen the run";
  }
  // Both phosds go; fresh ones at the same addresses restore the job, each
  // the ranks it had (restored on A, which asks B for B's) — except in cow
  // mode, where B stays gone and A restores B's ranks too (--phosd-map
  // B=here: one file system here, so their images are readable on A).
  ASSERT_TRUE(phos::testing::StopDaemon(&a_));
  ASSERT_TRUE(phos::testing::StopDaemon(&b_));
  const bool without_b = mode == "cow";
  ASSERT_TRUE(StartPhosd("a", &a_));
  if (!without_b) ASSERT_TRUE(StartPhosd("b", &b_));
  std::vector<std::string> restore = {"restore", img};
  if (without_b) restore.insert(restore.end(), {"--phosd-map", Endpoint("b") + "=here"});
  Result rs = phos::testing::RunPhos(Socket("a"), restore, 180s);
  ASSERT_EQ(rs.rc, 0) << rs.output << Daemons() << Logs();
  std::string pids_line = "job of 4 ranks, pids";
  for (pid_t p : ranks) pids_line += " " + std::to_string(p);
  EXPECT_NE(rs.output.find(pids_line), std::string::npos) << rs.output;
  pids_ = ranks;  // re-parented to us (subreaper)
  // The restored ranks keep their job's name (the manifest's), on A and on
  // B; without B, A holds all four.
  const std::string ps_a = phos::testing::RunPhos(Socket("a"), {"ps"}).output;
  EXPECT_NE(ps_a.find("crossjob"), std::string::npos) << ps_a;
  if (without_b) {
    for (pid_t p : ranks) EXPECT_NE(ps_a.find("\n" + std::to_string(p) + " "), std::string::npos) << p << "\n" << ps_a;
  } else {
    EXPECT_NE(phos::testing::RunPhos(Socket("b"), {"ps"}).output.find("crossjob"), std::string::npos);
  }
  ExpectFinishedExactly(before);
  for (pid_t& p : pids_) {
    EXPECT_TRUE(phos::testing::WaitGone(p, 60s));
    p = -1;
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, JobAcrossPhosdsTest, ::testing::Values("stop", "cow", "recopy"));

// etcd dies mid-checkpoint: phosd B has held its ranks at the cut and
// waits (--test-pause-cut-before-capture) when etcd is killed; then B goes
// on. The checkpoint fails cleanly on both phosds — nothing committed, the
// job image taken before intact, no staging left — and the job, whose
// collectives go between the phosds directly, runs on to the right result.
TEST_F(JobAcrossPhosdsTest, EtcdKilledMidCheckpointFailsItCleanlyAndTheJobRunsOn) {
  std::future<Result> pending;
  CheckpointPausedBeforeCapture("5", &pending);
  if (HasFatalFailure()) return;
  etcd_->Kill();
  GoAhead(true);
  ExpectFailedCleanly(pending.get(), "etcd");
  std::vector<size_t> from(kRanks, 0);
  ExpectFinishedExactly(from);
  for (pid_t& p : pids_) {
    EXPECT_TRUE(phos::testing::WaitGone(p, 60s));
    p = -1;
  }
}

// A phosd dies mid-checkpoint: B has held its ranks at the cut and waits
// (--test-pause-cut-before-capture) when it is SIGKILLed. Its etcd lease
// ends; the coordinator fails the checkpoint naming B — nothing committed,
// the earlier job image intact — and A's ranks, whose peers died with B,
// fail with NCCL's remote error instead of hanging. A serves on.
TEST_F(JobAcrossPhosdsTest, APhosdKilledMidCheckpointFailsItCleanlyOnTheOthers) {
  std::future<Result> pending;
  CheckpointPausedBeforeCapture("2", &pending);
  if (HasFatalFailure()) return;
  ASSERT_EQ(kill(b_.pid, SIGKILL), 0);
  (void)b_.Wait(10s);
  ExpectFailedCleanly(pending.get(), Endpoint("b"));
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(phos::testing::WaitGone(pids_[static_cast<size_t>(r)], 120s)) << Logs() << Daemons();
    pids_[static_cast<size_t>(r)] = -1;
    EXPECT_NE(Log(r).find("remote process exited or there was a network error"), std::string::npos) << Log(r);
    // A collective cut off by B's death is an error, never a result: no
    // rank checked a half-sum that only held its own part.
    EXPECT_EQ(Log(r).find(", want "), std::string::npos) << Log(r);
  }
  Result ps = phos::testing::RunPhos(Socket("a"), {"ps"});
  EXPECT_EQ(ps.rc, 0) << ps.output << Daemons();
}

// `phos migrate --job`: a job whose 4 ranks all run on A moves to B — one
// job checkpoint, every rank ended on A once the image is committed, the
// image sent to B, every rank restored there (same pids: --no-pid-ns) —
// and finishes with the bytes of an uninterrupted run.
TEST_F(JobAcrossPhosdsTest, AJobMigratesToAnotherPhosdAndFinishesExactly) {
  ASSERT_TRUE(StartPhosd("a", &a_));
  ASSERT_TRUE(StartPhosd("b", &b_));
  StartRanks(/*all_on_a=*/true);
  ASSERT_TRUE(phos::testing::WaitFileText(LogOf(1), "rank 1: step 30", 120s)) << Logs() << Daemons();
  const std::vector<pid_t> ranks = pids_;
  std::vector<size_t> before;
  Result mig = MigrateFromA(Endpoint("b"), &before);
  ASSERT_EQ(mig.rc, 0) << mig.output << Daemons() << Logs();
  std::string pids_line = "pids";
  for (pid_t p : ranks) pids_line += " " + std::to_string(p);
  EXPECT_NE(mig.output.find("migrated the job of pid"), std::string::npos) << mig.output;
  EXPECT_NE(mig.output.find(pids_line + " there"), std::string::npos) << mig.output;
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_EQ(Log(r).substr(0, before[static_cast<size_t>(r)]).find(" OK\n"), std::string::npos)
        << "rank " << r << " finished before the migration; lengthen the run";
  }
  pids_ = ranks;  // restored on B, re-parented to us (subreaper)
  // B serves them now; A none.
  Result ps_b = phos::testing::RunPhos(Socket("b"), {"ps"});
  Result ps_a = phos::testing::RunPhos(Socket("a"), {"ps"});
  EXPECT_NE(ps_b.output.find("crossjob"), std::string::npos) << ps_b.output;
  EXPECT_EQ(ps_a.output.find("crossjob"), std::string::npos) << ps_a.output;
  ExpectFinishedExactly(before);
  for (pid_t& p : pids_) {
    EXPECT_TRUE(phos::testing::WaitGone(p, 60s));
    p = -1;
  }
}

// `phos migrate --job` of a job across phosds: ranks 0 and 1 run on A, 2
// and 3 on B; A's go to B (--to) and B's to A (--phosd-map B=A). A map
// that leaves a phosd's ranks without a destination is refused before
// anything is held (the job runs on). Then one job checkpoint across both,
// every rank ended, each part sent by the phosd that took it
// (PhosPeer.MoveJobPart for B's), every rank restored at its destination
// (same pids: --no-pid-ns) — finishing with the bytes of an uninterrupted
// run; the staged parts are gone.
TEST_F(JobAcrossPhosdsTest, AJobAcrossPhosdsMigratesEachPhosdsRanksAndFinishesExactly) {
  ASSERT_TRUE(StartPhosd("a", &a_));
  ASSERT_TRUE(StartPhosd("b", &b_));
  StartRanks();
  ASSERT_TRUE(phos::testing::WaitFileText(LogOf(3), "rank 3: step 30", 120s)) << Logs() << Daemons();
  const std::vector<pid_t> ranks = pids_;

  Result unmapped = phos::testing::RunPhos(
      Socket("a"), {"migrate", "crossjob", "--job", "--to", Endpoint("b"), "--peer-token", token_, "--mode", "stop"},
      60s);
  EXPECT_NE(unmapped.rc, 0) << unmapped.output;
  EXPECT_NE(unmapped.output.find("ranks of the job run on the phosd at " + Endpoint("b") + ", which has no destination"),
            std::string::npos)
      << unmapped.output << Daemons();
  for (pid_t p : ranks) EXPECT_EQ(kill(p, 0), 0) << "rank pid " << p << " did not run on";

  std::vector<size_t> before;
  Result mig = MigrateFromA(Endpoint("b"), &before, {"--phosd-map", Endpoint("b") + "=" + Endpoint("a")});
  ASSERT_EQ(mig.rc, 0) << mig.output << Daemons() << Logs();
  EXPECT_NE(mig.output.find("migrated the job of pid"), std::string::npos) << mig.output;
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_EQ(Log(r).substr(0, before[static_cast<size_t>(r)]).find(" OK\n"), std::string::npos)
        << "rank " << r << " finished before the migration; lengthen the run";
  }
  pids_ = ranks;  // restored, re-parented to us (subreaper)
  // Each phosd serves the other's ranks now.
  const std::string ps_a = phos::testing::RunPhos(Socket("a"), {"ps"}).output;
  const std::string ps_b = phos::testing::RunPhos(Socket("b"), {"ps"}).output;
  for (int r = 0; r < kRanks; ++r) {
    const std::string row = "\n" + std::to_string(ranks[static_cast<size_t>(r)]) + " ";
    EXPECT_NE((r < 2 ? ps_b : ps_a).find(row), std::string::npos) << "rank " << r << "\nA:\n" << ps_a << "\nB:\n" << ps_b;
    EXPECT_EQ((r < 2 ? ps_a : ps_b).find(row), std::string::npos) << "rank " << r << "\nA:\n" << ps_a << "\nB:\n" << ps_b;
  }
  EXPECT_NE(ps_a.find("crossjob"), std::string::npos) << ps_a;
  EXPECT_NE(ps_b.find("crossjob"), std::string::npos) << ps_b;
  ExpectFinishedExactly(before);
  for (pid_t& p : pids_) {
    EXPECT_TRUE(phos::testing::WaitGone(p, 60s));
    p = -1;
  }
  // The staged parts (under A's outgoing/, the path both took) are gone.
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir_ + "/a/checkpoints/outgoing", ec)) {
    ADD_FAILURE() << "left staged: " << e.path();
  }
}

// The same migration when one destination refuses its part (B takes at
// most 1 KiB): every rank, already ended, is restored where it was taken —
// A's on A, B's on B, which still holds its staged part — and finishes
// exactly; the error says so.
TEST_F(JobAcrossPhosdsTest, AJobAcrossPhosdsWhoseMigrationFailsIsRestoredWhereItRan) {
  ASSERT_TRUE(StartPhosd("a", &a_));
  ASSERT_TRUE(StartPhosd("b", &b_, "5", {"--max-receive-bytes", "1K"}));
  StartRanks();
  ASSERT_TRUE(phos::testing::WaitFileText(LogOf(3), "rank 3: step 30", 120s)) << Logs() << Daemons();
  const std::vector<pid_t> ranks = pids_;
  std::vector<size_t> before;
  Result failed = MigrateFromA(Endpoint("b"), &before, {"--phosd-map", Endpoint("b") + "=" + Endpoint("a")});
  EXPECT_NE(failed.rc, 0) << failed.output;
  EXPECT_NE(failed.output.find("the job runs where it was taken again"), std::string::npos)
      << failed.output << Daemons();
  pids_ = ranks;  // restored where they ran, re-parented to us (subreaper)
  const std::string ps_a = phos::testing::RunPhos(Socket("a"), {"ps"}).output;
  const std::string ps_b = phos::testing::RunPhos(Socket("b"), {"ps"}).output;
  for (int r = 0; r < kRanks; ++r) {
    const std::string row = "\n" + std::to_string(ranks[static_cast<size_t>(r)]) + " ";
    EXPECT_NE((r < 2 ? ps_a : ps_b).find(row), std::string::npos) << "rank " << r << "\nA:\n" << ps_a << "\nB:\n" << ps_b;
  }
  ExpectFinishedExactly(before);
  for (pid_t& p : pids_) {
    EXPECT_TRUE(phos::testing::WaitGone(p, 60s));
    p = -1;
  }
}

// `phos migrate --job` that cannot finish: to a destination that does not
// answer, nothing is touched (the job runs on); to one that refuses the
// image (B takes at most 1 KiB), the ranks, already ended here, are
// restored here from the image at the cut — and finish exactly.
TEST_F(JobAcrossPhosdsTest, AJobWhoseMigrationFailsRunsOnOrIsRestoredHere) {
  ASSERT_TRUE(StartPhosd("a", &a_));
  ASSERT_TRUE(StartPhosd("b", &b_, "5", {"--max-receive-bytes", "1K"}));
  StartRanks(/*all_on_a=*/true);
  ASSERT_TRUE(phos::testing::WaitFileText(LogOf(1), "rank 1: step 30", 120s)) << Logs() << Daemons();
  const std::vector<pid_t> ranks = pids_;

  const std::string nobody = "127.0.0.1:" + std::to_string(phos::testing::FreeLoopbackPort());
  Result unreachable = phos::testing::RunPhos(
      Socket("a"), {"migrate", "crossjob", "--job", "--to", nobody, "--peer-token", token_, "--mode", "stop"}, 60s);
  EXPECT_NE(unreachable.rc, 0) << unreachable.output;
  EXPECT_NE(unreachable.output.find("nothing was done, the job runs on here"), std::string::npos)
      << unreachable.output;
  for (pid_t p : ranks) EXPECT_EQ(kill(p, 0), 0) << "rank pid " << p << " did not run on";

  std::vector<size_t> before;
  Result failed = MigrateFromA(Endpoint("b"), &before);
  EXPECT_NE(failed.rc, 0) << failed.output;
  EXPECT_NE(failed.output.find("the job runs here again"), std::string::npos) << failed.output << Daemons();
  pids_ = ranks;  // restored on A, re-parented to us (subreaper)
  EXPECT_NE(phos::testing::RunPhos(Socket("a"), {"ps"}).output.find("crossjob"), std::string::npos);
  ExpectFinishedExactly(before);
  for (pid_t& p : pids_) {
    EXPECT_TRUE(phos::testing::WaitGone(p, 60s));
    p = -1;
  }
}

}  // namespace
