// phosds coordinated through etcd (docs/protocols.md "Jobs across phosds"),
// against a real etcd the test starts on loopback:
//   - phos's etcd client: writes, create-only writes, prefixes, leases that
//     expire unless kept alive, waiting for a prefix to change;
//   - NCCL ranks on two phosds (--etcd): every collective, operator and
//     type and a training loop, exact against the CPU reference and equal
//     on every rank, 2 + 2 ranks; a 1 + 1 training run;
//   - a rank whose phosd dies makes its peer on the other phosd fail with
//     ncclRemoteError instead of hanging; a rank that exits does too;
//   - phosd refuses --etcd without a peer plane, and an etcd it cannot reach.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <chrono>
#include <fstream>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "cluster/etcd_client.h"
#include "harness.h"
#include "local_etcd.h"

namespace {

using phos::Status;
using phos::cluster::EtcdClient;
using phos::cluster::KeyValue;
using phos::testing::Child;
using phos::testing::LocalEtcd;
using namespace std::chrono_literals;

class ClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/phos_cluster_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    setenv("PHOS_JIT_PTX_CACHE", (dir_ + "/jit-ptx").c_str(), 1);
    etcd_ = std::make_unique<LocalEtcd>(dir_);
    ASSERT_TRUE(etcd_->ok()) << etcd_->error();
    token_ = dir_ + "/peer-token";
    std::ofstream(token_) << "cluster-test-token\n";
    chmod(token_.c_str(), 0600);
  }
  void TearDown() override {
    etcd_.reset();
    unsetenv("PHOS_JIT_PTX_CACHE");
    std::system(("rm -rf " + dir_).c_str());
  }

  std::unique_ptr<EtcdClient> Client() {
    std::unique_ptr<EtcdClient> c;
    Status s = EtcdClient::Connect(etcd_->endpoint(), 5000ms, &c);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return c;
  }

  std::string dir_;
  std::string token_;
  std::unique_ptr<LocalEtcd> etcd_;
};

TEST_F(ClusterTest, EtcdClientReadsWritesAndWaits) {
  auto etcd = Client();
  ASSERT_NE(etcd, nullptr);
  ASSERT_TRUE(etcd->Put("/t/a", "1").ok());
  std::string v;
  ASSERT_TRUE(etcd->Get("/t/a", &v).ok());
  EXPECT_EQ(v, "1");
  EXPECT_EQ(etcd->Get("/t/none", &v).code(), Status::Code::kNotFound);
  bool created = true;
  std::string existing;
  ASSERT_TRUE(etcd->PutIfAbsent("/t/a", "2", 0, &created, &existing).ok());
  EXPECT_FALSE(created);
  EXPECT_EQ(existing, "1");
  ASSERT_TRUE(etcd->PutIfAbsent("/t/b", "2", 0, &created).ok());
  EXPECT_TRUE(created);
  ASSERT_TRUE(etcd->Put("/u/c", "3").ok());  // another prefix
  std::vector<KeyValue> kvs;
  ASSERT_TRUE(etcd->List("/t/", &kvs).ok());
  ASSERT_EQ(kvs.size(), 2u);
  EXPECT_EQ(kvs[0].key, "/t/a");
  EXPECT_EQ(kvs[1].value, "2");
  // A waiter wakes for a write from elsewhere.
  std::thread writer([&] {
    std::this_thread::sleep_for(200ms);
    auto other = Client();
    if (other) (void)other->Put("/t/z", "ready");
  });
  Status w = etcd->WaitPrefix("/t/", [](const std::vector<KeyValue>& k) { return k.size() == 3; },
                              std::chrono::steady_clock::now() + 30s, nullptr, "the third key");
  writer.join();
  EXPECT_TRUE(w.ok()) << w.ToString();
  // ... and gives up when cancelled.
  Status c = etcd->WaitPrefix("/t/", [](const std::vector<KeyValue>&) { return false; },
                              std::chrono::steady_clock::time_point::max(), [] { return true; }, "nothing");
  EXPECT_EQ(c.code(), Status::Code::kUnavailable);
  ASSERT_TRUE(etcd->DeletePrefix("/t/").ok());
  ASSERT_TRUE(etcd->List("/t/", &kvs).ok());
  EXPECT_TRUE(kvs.empty());
  ASSERT_TRUE(etcd->List("/u/", &kvs).ok());
  EXPECT_EQ(kvs.size(), 1u);
}

TEST_F(ClusterTest, LeasedKeysGoWhenTheLeaseIsNotKeptAlive) {
  auto etcd = Client();
  ASSERT_NE(etcd, nullptr);
  std::int64_t kept = 0, dropped = 0;
  ASSERT_TRUE(etcd->GrantLease(2, &kept).ok());
  ASSERT_TRUE(etcd->GrantLease(2, &dropped).ok());
  ASSERT_TRUE(etcd->Put("/l/kept", "x", kept).ok());
  ASSERT_TRUE(etcd->Put("/l/dropped", "x", dropped).ok());
  // The dropped lease's key goes by itself; the kept one's stays as long
  // as it is renewed.
  bool renewing = true;
  std::thread keeper([&] {
    while (renewing) {
      (void)etcd->KeepAlive(kept);
      std::this_thread::sleep_for(300ms);
    }
  });
  Status s = etcd->WaitPrefix("/l/", [](const std::vector<KeyValue>& k) { return k.size() == 1; },
                              std::chrono::steady_clock::now() + 60s, nullptr, "the dropped lease's key to go");
  EXPECT_TRUE(s.ok()) << s.ToString();
  std::string v;
  EXPECT_TRUE(etcd->Get("/l/kept", &v).ok());
  EXPECT_EQ(etcd->KeepAlive(dropped).code(), Status::Code::kNotFound);
  renewing = false;
  keeper.join();
  ASSERT_TRUE(etcd->RevokeLease(kept).ok());
  EXPECT_EQ(etcd->Get("/l/kept", &v).code(), Status::Code::kNotFound);
}

// ---- phosds coordinated through etcd ----

class Phosd {
 public:
  Phosd(const std::string& dir, const std::string& etcd, const std::string& token) : socket_(dir + "/phosd.sock") {
    mkdir(dir.c_str(), 0700);
    child_ = Child::Start({PHOS_BIN, "daemon", "--backend", "sim", "--sim-gpus", "2", "--socket", socket_,
                           "--checkpoint-root", dir + "/checkpoints", "--template-cache", "off", "--listen",
                           "127.0.0.1:0", "--peer-token", token, "--etcd", etcd});
  }
  ~Phosd() { Stop(); }
  bool Ready() {
    return child_.ReadUntil("cluster: registered as", 30s) &&
           phos::testing::WaitForDataSocket(socket_, std::chrono::seconds(20));
  }
  const std::string& socket() const { return socket_; }
  void Kill() {
    if (child_.pid > 0) {
      kill(child_.pid, SIGKILL);
      child_.Wait(10s);
    }
  }
  void Stop() {
    if (child_.pid > 0) {
      kill(child_.pid, SIGTERM);
      if (child_.Wait(20s) == -1000) ADD_FAILURE() << "phosd did not stop on SIGTERM";
    }
  }
  std::string log() const { return child_.output; }

 private:
  std::string socket_;
  Child child_;
};

Child StartRank(const std::string& socket, const std::string& mode, int rank, int nranks, const std::string& id) {
  return Child::Start({PHOS_BIN, "--socket", socket, "run", "--lib", PHOS_LIB_PATH, "--", PHOS_NCCL_RANKS, mode,
                       std::to_string(rank), std::to_string(nranks), id});
}

std::string Line(const std::string& out, const std::string& what) {
  const size_t at = out.find(what);
  return at == std::string::npos ? "" : out.substr(at, out.find('\n', at) - at);
}

TEST_F(ClusterTest, NcclRanksOnTwoPhosdsRunEveryCollectiveExactly) {
  Phosd a(dir_ + "/a", etcd_->endpoint(), token_), b(dir_ + "/b", etcd_->endpoint(), token_);
  ASSERT_TRUE(a.Ready()) << a.log();
  ASSERT_TRUE(b.Ready()) << b.log();
  // 4 ranks: 0 and 1 on A, 2 and 3 on B.
  std::vector<Child> ranks;
  for (int r = 0; r < 4; ++r) ranks.push_back(StartRank(r < 2 ? a.socket() : b.socket(), "collectives", r, 4, dir_ + "/c.id"));
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(ranks[r].Wait(300s), 0) << "rank " << r << ":\n" << ranks[r].output;
    EXPECT_NE(ranks[r].output.find("rank " + std::to_string(r) + ": OK"), std::string::npos) << ranks[r].output;
  }
  const std::string checksum = Line(ranks[0].output, "training checksum");
  EXPECT_FALSE(checksum.empty()) << ranks[0].output;
  for (int r = 1; r < 4; ++r) EXPECT_EQ(Line(ranks[r].output, "training checksum"), checksum) << "rank " << r;
  // A data-parallel training run, one rank on each phosd, ends exactly as
  // the CPU reference says.
  Child t0 = StartRank(a.socket(), "train", 0, 2, dir_ + "/t.id");
  Child t1 = StartRank(b.socket(), "train", 1, 2, dir_ + "/t.id");
  EXPECT_EQ(t0.Wait(300s), 0) << t0.output;
  EXPECT_EQ(t1.Wait(300s), 0) << t1.output;
  EXPECT_NE(t0.output.find("trained checksum"), std::string::npos) << t0.output;
  EXPECT_EQ(Line(t0.output, "trained checksum"), Line(t1.output, "trained checksum")) << t0.output << t1.output;
}

TEST_F(ClusterTest, ARankThatDiesOnOnePhosdFailsItsPeerOnTheOther) {
  Phosd a(dir_ + "/a", etcd_->endpoint(), token_), b(dir_ + "/b", etcd_->endpoint(), token_);
  ASSERT_TRUE(a.Ready()) << a.log();
  ASSERT_TRUE(b.Ready()) << b.log();
  Child r0 = StartRank(a.socket(), "dies", 0, 2, dir_ + "/d.id");
  Child r1 = StartRank(b.socket(), "dies", 1, 2, dir_ + "/d.id");
  EXPECT_EQ(r1.Wait(120s), 3) << r1.output;
  EXPECT_EQ(r0.Wait(120s), 0) << r0.output;
  EXPECT_NE(r0.output.find("rank 0: remote error"), std::string::npos) << r0.output;
}

TEST_F(ClusterTest, APhosdThatDiesFailsTheRanksOfItsPeersInsteadOfHangingThem) {
  Phosd a(dir_ + "/a", etcd_->endpoint(), token_), b(dir_ + "/b", etcd_->endpoint(), token_);
  ASSERT_TRUE(a.Ready()) << a.log();
  ASSERT_TRUE(b.Ready()) << b.log();
  Child r0 = StartRank(a.socket(), "train", 0, 2, dir_ + "/k.id");
  Child r1 = StartRank(b.socket(), "train", 1, 2, dir_ + "/k.id");
  ASSERT_TRUE(r0.ReadUntil("rank 0: step 50\n", 120s)) << r0.output;
  b.Kill();
  // Rank 0 waits in an all-reduce for rank 1's part, which never comes:
  // phosd A learns of B's end (a refused send, or B's etcd lease ending)
  // and fails the communicator.
  EXPECT_EQ(r0.Wait(120s), 2) << r0.output << "\nphosd A:\n" << a.log();
  EXPECT_NE(r0.output.find("remote process exited or there was a network error"), std::string::npos) << r0.output;
  EXPECT_NE(r1.Wait(60s), 0) << r1.output;
}

TEST_F(ClusterTest, PhosdRefusesEtcdWithoutAPeerPlaneOrAReachableEtcd) {
  Child no_listen = Child::Start({PHOS_BIN, "daemon", "--backend", "sim", "--socket", dir_ + "/x.sock", "--etcd",
                                  etcd_->endpoint()});
  EXPECT_NE(no_listen.Wait(30s), 0);
  EXPECT_NE(no_listen.output.find("needs --listen"), std::string::npos) << no_listen.output;
  const int dead = phos::testing::FreeLoopbackPort();
  Child unreachable = Child::Start({PHOS_BIN, "daemon", "--backend", "sim", "--socket", dir_ + "/y.sock", "--listen",
                                    "127.0.0.1:0", "--peer-token", token_, "--etcd",
                                    "127.0.0.1:" + std::to_string(dead)});
  EXPECT_NE(unreachable.Wait(60s), 0);
  EXPECT_NE(unreachable.output.find("no etcd answers at"), std::string::npos) << unreachable.output;
}

}  // namespace
