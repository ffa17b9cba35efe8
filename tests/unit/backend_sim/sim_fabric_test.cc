// The sim's NCCL across phosds (docs/backends.md "Collectives across
// phosds"): two sim backends in one process stand for two phosds, joined by
// an in-memory CollectiveFabric that does what daemon/cluster's does over
// etcd and the peer plane (rendezvous, delivery to the other backend's
// DeliverCollective). Ranks on both compute every collective exactly; a
// rank that ends, or a phosd that is lost, fails the ranks waiting for it;
// a peer's malformed message is refused. Re-run under ThreadSanitizer.
#include <cuda.h>

#include <condition_variable>
#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <thread>

#include "sim_test_util.h"

namespace phos::backend {
namespace {

/// The network and etcd between the two "phosds".
struct Switch {
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::string, Backend*> phosds;                             // endpoint -> backend
  std::map<CommunicatorId, std::map<int, std::string>> rendezvous;    // id -> rank -> endpoint
  std::map<std::string, int> delivered;                               // messages per destination
  bool lose_aborts = false;  // a phosd's abort never reaches the other (the network lost it)
};

class LoopbackFabric final : public CollectiveFabric {
 public:
  LoopbackFabric(Switch* sw, std::string self) : sw_(sw), self_(std::move(self)) {}
  Status Rendezvous(const CommunicatorId& comm, int nranks, int rank, const std::function<bool()>& cancelled,
                    std::vector<std::string>* where) override {
    std::unique_lock<std::mutex> lock(sw_->mu);
    auto& ranks = sw_->rendezvous[comm];
    if (ranks.count(rank) != 0) return Status::InvalidArgument("rank joined twice");
    ranks[rank] = self_;
    sw_->cv.notify_all();
    while (static_cast<int>(ranks.size()) < nranks) {
      if (cancelled && cancelled()) {
        ranks.erase(rank);
        return Status::Unavailable("cancelled");
      }
      sw_->cv.wait_for(lock, std::chrono::milliseconds(50));
    }
    where->assign(static_cast<std::size_t>(nranks), "");
    for (const auto& [r, e] : ranks) {
      if (e != self_) (*where)[static_cast<std::size_t>(r)] = e;
    }
    return Status::Ok();
  }
  Status Send(const std::string& endpoint, const FabricMessage& m) override {
    Backend* to = nullptr;
    {
      std::lock_guard<std::mutex> lock(sw_->mu);
      auto it = sw_->phosds.find(endpoint);
      if (it == sw_->phosds.end()) return Status::Unavailable("no phosd at " + endpoint);
      to = it->second;
      if (sw_->lose_aborts && m.kind == FabricMessage::Kind::kAbort) return Status::Unavailable("lost");
      ++sw_->delivered[endpoint];
    }
    const FabricMessage copy = m;  // what crosses the wire
    return to->DeliverCollective(copy);
  }
  void Leave(const CommunicatorId& comm, int rank) override {
    std::lock_guard<std::mutex> lock(sw_->mu);
    sw_->rendezvous[comm].erase(rank);
  }

 private:
  Switch* const sw_;
  const std::string self_;
};

CommunicatorId IdOf(std::uint8_t tag) {
  CommunicatorId id{};
  id[0] = tag;
  id[1] = 0xfa;
  return id;
}

float* F(DevicePtr p) { return sim_test::Floats(p); }
CollectiveOp Op(CollectiveOp::Kind kind, DevicePtr send, DevicePtr recv, std::uint64_t count, int peer = 0,
                std::uint8_t redop = 0) {
  return sim_test::FloatOp(kind, send, recv, count, peer, redop);
}

/// Two phosds "A" and "B"; `n` ranks of one communicator, rank r on A when
/// r < split.
struct TwoPhosds {
  Switch sw;
  LoopbackFabric fabric_a{&sw, "A"}, fabric_b{&sw, "B"};
  std::unique_ptr<Backend> a, b;
  std::vector<Backend*> on;  // per rank
  std::vector<std::unique_ptr<Context>> ctx;
  std::vector<std::shared_ptr<CommRank>> rank;
  std::vector<StreamHandle> stream;

  Status Init(int n, int split, std::uint8_t tag) {
    // Two backends in one process: halves of the default address range.
    SimOptions o;
    o.memory_bytes = 1ull << 30;
    o.va_size = 1ull << 38;
    o.fabric = &fabric_a;
    PHOS_RETURN_IF_ERROR(CreateSimBackend(o, &a));
    o.va_base += o.va_size;
    o.fabric = &fabric_b;
    PHOS_RETURN_IF_ERROR(CreateSimBackend(o, &b));
    {
      std::lock_guard<std::mutex> lock(sw.mu);
      sw.phosds["A"] = a.get();
      sw.phosds["B"] = b.get();
    }
    ctx.resize(static_cast<std::size_t>(n));
    rank.resize(static_cast<std::size_t>(n));
    stream.resize(static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r) {
      on.push_back(r < split ? a.get() : b.get());
      PHOS_RETURN_IF_ERROR(on[r]->CreateContext(0, &ctx[r]));
      PHOS_RETURN_IF_ERROR(ctx[r]->CreateStream(0, 0, &stream[r]));
    }
    std::vector<std::future<Status>> joins;
    for (int r = 0; r < n; ++r) {
      joins.push_back(std::async(std::launch::async, [this, r, n, tag] {
        return ctx[r]->JoinCommunicator(IdOf(tag), n, r, [] { return false; }, &rank[r]);
      }));
    }
    for (auto& j : joins) PHOS_RETURN_IF_ERROR(j.get());
    return Status::Ok();
  }
  DevicePtr Alloc(int r, std::size_t bytes) {
    DevicePtr p = 0;
    EXPECT_TRUE(ctx[r]->Allocate(bytes, 0, &p).ok());
    return p;
  }
  /// Each rank enqueues its group from its own thread, then all drain.
  void RunGroups(const std::vector<std::vector<CollectiveOp>>& groups) {
    std::vector<std::thread> t;
    for (std::size_t r = 0; r < groups.size(); ++r) {
      t.emplace_back([&, r] { EXPECT_TRUE(ctx[r]->EnqueueCollectives(rank[r], groups[r], stream[r]).ok()); });
    }
    for (auto& th : t) th.join();
    for (std::size_t r = 0; r < groups.size(); ++r) EXPECT_TRUE(ctx[r]->SynchronizeStream(stream[r]).ok());
  }
  ~TwoPhosds() {
    rank.clear();
    ctx.clear();
  }
};

TEST(SimFabric, EveryCollectiveAcrossTwoPhosdsGivesTheBytesOfOne) {
  TwoPhosds k;
  SIM_ASSERT_OK(k.Init(4, 2, 1));
  const std::size_t n = 257;
  std::vector<DevicePtr> in, out, gathered, scalar;
  for (int r = 0; r < 4; ++r) {
    in.push_back(k.Alloc(r, 4 * n * sizeof(float)));
    out.push_back(k.Alloc(r, n * sizeof(float)));
    gathered.push_back(k.Alloc(r, 4 * n * sizeof(float)));
    scalar.push_back(k.Alloc(r, sizeof(float)));
    *F(scalar[r]) = static_cast<float>(r + 1);
    for (std::size_t i = 0; i < 4 * n; ++i) F(in[r])[i] = static_cast<float>((i * 3 + r * 5) % 13) - 6.0f;
  }
  auto input = [](int r, std::size_t i) { return static_cast<float>((i * 3 + r * 5) % 13) - 6.0f; };
  // One group per rank: all-reduce (max), broadcast from rank 3 (on B),
  // reduce to rank 1 (on A), all-gather, reduce-scatter, PreMulSum with a
  // device scalar.
  std::vector<std::vector<CollectiveOp>> groups(4);
  std::vector<DevicePtr> ar, bc, rd, rs, pm;
  for (int r = 0; r < 4; ++r) {
    ar.push_back(k.Alloc(r, n * sizeof(float)));
    bc.push_back(k.Alloc(r, n * sizeof(float)));
    rd.push_back(k.Alloc(r, n * sizeof(float)));
    rs.push_back(k.Alloc(r, n * sizeof(float)));
    pm.push_back(k.Alloc(r, n * sizeof(float)));
    CollectiveOp premul = Op(CollectiveOp::Kind::kAllReduce, in[r], pm[r], n, 0, CollectiveOp::kPreMulSum);
    premul.scalar_on_device = true;
    premul.scalar = scalar[r];
    groups[r] = {Op(CollectiveOp::Kind::kAllReduce, in[r], ar[r], n, 0, 2),
                 Op(CollectiveOp::Kind::kBroadcast, in[r], bc[r], n, 3),
                 Op(CollectiveOp::Kind::kReduce, in[r], rd[r], n, 1),
                 Op(CollectiveOp::Kind::kAllGather, in[r], gathered[r], n),
                 Op(CollectiveOp::Kind::kReduceScatter, in[r], rs[r], n),
                 premul};
  }
  k.RunGroups(groups);
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(k.rank[r]->AsyncError().ok()) << k.rank[r]->AsyncError().ToString();
    for (std::size_t i = 0; i < n; ++i) {
      float mx = input(0, i), sum = 0, premul = 0;
      for (int q = 0; q < 4; ++q) {
        mx = std::max(mx, input(q, i));
        sum += input(q, i);
        premul += input(q, i) * static_cast<float>(q + 1);
      }
      ASSERT_EQ(F(ar[r])[i], mx) << r << " " << i;
      ASSERT_EQ(F(bc[r])[i], input(3, i)) << r << " " << i;
      if (r == 1) {
        ASSERT_EQ(F(rd[r])[i], sum) << i;
      }
      ASSERT_EQ(F(pm[r])[i], premul) << r << " " << i;
      float block = 0;
      for (int q = 0; q < 4; ++q) block += input(q, static_cast<std::size_t>(r) * n + i);
      ASSERT_EQ(F(rs[r])[i], block) << r << " " << i;
      for (int q = 0; q < 4; ++q) ASSERT_EQ(F(gathered[r])[static_cast<std::size_t>(q) * n + i], input(q, i));
    }
  }
  std::lock_guard<std::mutex> lock(k.sw.mu);
  EXPECT_GT(k.sw.delivered["A"], 0);
  EXPECT_GT(k.sw.delivered["B"], 0);
}

TEST(SimFabric, SendsAndReceivesCrossPhosdsInOneGroup) {
  TwoPhosds k;
  SIM_ASSERT_OK(k.Init(3, 1, 2));  // rank 0 on A, ranks 1 and 2 on B
  const std::size_t n = 100;
  std::vector<DevicePtr> send, recv;
  for (int r = 0; r < 3; ++r) {
    send.push_back(k.Alloc(r, n * sizeof(float)));
    recv.push_back(k.Alloc(r, n * sizeof(float)));
    for (std::size_t i = 0; i < n; ++i) F(send[r])[i] = static_cast<float>(1000 * r + i);
  }
  std::vector<std::vector<CollectiveOp>> ring(3);
  for (int r = 0; r < 3; ++r) {
    ring[r] = {Op(CollectiveOp::Kind::kSend, send[r], 0, n, (r + 1) % 3),
               Op(CollectiveOp::Kind::kRecv, 0, recv[r], n, (r + 2) % 3)};
  }
  k.RunGroups(ring);
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(k.rank[r]->AsyncError().ok()) << k.rank[r]->AsyncError().ToString();
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(F(recv[r])[i], static_cast<float>(1000 * ((r + 2) % 3) + i));
  }
}

TEST(SimFabric, ARankEndingOnOnePhosdFailsTheRanksWaitingOnTheOther) {
  TwoPhosds k;
  SIM_ASSERT_OK(k.Init(2, 1, 3));
  DevicePtr p = k.Alloc(1, 4096);
  // Rank 1 (B) waits in an all-reduce rank 0 (A) never posts; rank 0's app
  // ends and its session aborts the communicator, which tells B.
  SIM_ASSERT_OK(k.ctx[1]->EnqueueCollectives(k.rank[1], {Op(CollectiveOp::Kind::kAllReduce, p, p, 16)}, k.stream[1]));
  k.rank[0]->Abort("rank 0: its process ended");
  // Rank 1's stream fails: its buffer holds no sum.
  const Status sync = k.ctx[1]->SynchronizeStream(k.stream[1]);
  EXPECT_EQ(sync.api_error(), CUDA_ERROR_LAUNCH_FAILED) << sync.ToString();
  const Status e = k.rank[1]->AsyncError();
  EXPECT_EQ(e.code(), Status::Code::kUnavailable) << e.ToString();
  EXPECT_NE(e.message().find("process ended"), std::string::npos) << e.ToString();
}

// The abort of a rank ending on A never reaches B (lost on the way). B's
// rank then posts a collective: A refuses its part (the communicator ended
// there), so B's rank fails instead of waiting forever for A's part —
// whether A still holds the ended communicator or has dropped it.
TEST(SimFabric, APeersPartForACommunicatorThatEndedIsRefusedSoItsRankFails) {
  for (const bool dropped : {false, true}) {
    TwoPhosds k;
    SIM_ASSERT_OK(k.Init(2, 1, dropped ? 6 : 5));
    k.sw.lose_aborts = true;
    DevicePtr p = k.Alloc(1, 4096);
    k.rank[0]->Abort("rank 0: its process ended");
    if (dropped) k.rank[0].reset();  // A keeps nothing of it
    SIM_ASSERT_OK(
        k.ctx[1]->EnqueueCollectives(k.rank[1], {Op(CollectiveOp::Kind::kAllReduce, p, p, 16)}, k.stream[1]));
    auto sync = std::async(std::launch::async, [&k] { return k.ctx[1]->SynchronizeStream(k.stream[1]); });
    if (sync.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
      ADD_FAILURE() << "rank 1 still waits for a communicator that ended on A (dropped " << dropped << ")";
      k.rank[1]->Abort("the test gives up");  // lets the stream end
    }
    const Status s = sync.get();
    EXPECT_EQ(s.api_error(), CUDA_ERROR_LAUNCH_FAILED) << s.ToString();
    const Status e = k.rank[1]->AsyncError();
    EXPECT_EQ(e.code(), Status::Code::kUnavailable) << e.ToString();
    EXPECT_NE(e.message().find("ended on this phosd"), std::string::npos) << e.ToString();
  }
}

TEST(SimFabric, ALostPhosdFailsTheRanksWaitingForIt) {
  TwoPhosds k;
  SIM_ASSERT_OK(k.Init(2, 1, 4));
  DevicePtr p = k.Alloc(0, 4096);
  SIM_ASSERT_OK(k.ctx[0]->EnqueueCollectives(k.rank[0], {Op(CollectiveOp::Kind::kAllReduce, p, p, 16)}, k.stream[0]));
  // B vanishes without a word (its etcd lease ended).
  k.a->PeerLost("B", "its etcd lease ended");
  const Status sync = k.ctx[0]->SynchronizeStream(k.stream[0]);
  EXPECT_EQ(sync.api_error(), CUDA_ERROR_LAUNCH_FAILED) << sync.ToString();
  EXPECT_NE(sync.message().find("phosd at B"), std::string::npos) << sync.ToString();
  const Status e = k.rank[0]->AsyncError();
  EXPECT_EQ(e.code(), Status::Code::kUnavailable) << e.ToString();
  EXPECT_NE(e.message().find("phosd at B"), std::string::npos) << e.ToString();
}

TEST(SimFabric, APeersMalformedPartsAreRefusedAndChangeNothing) {
  TwoPhosds k;
  SIM_ASSERT_OK(k.Init(2, 1, 5));  // rank 0 on A, rank 1 on B
  FabricMessage m;
  m.kind = FabricMessage::Kind::kCollective;
  m.comm = IdOf(5);
  m.nranks = 2;
  m.from_rank = 1;
  m.op = Op(CollectiveOp::Kind::kAllReduce, 0, 0, 4);
  m.data.assign(16, 0);
  FabricMessage bad = m;
  bad.nranks = 3;
  EXPECT_EQ(k.a->DeliverCollective(bad).code(), Status::Code::kInvalidArgument);
  bad = m;
  bad.from_rank = 0;  // A's own rank
  EXPECT_EQ(k.a->DeliverCollective(bad).code(), Status::Code::kInvalidArgument);
  bad = m;
  bad.data.resize(15);
  EXPECT_EQ(k.a->DeliverCollective(bad).code(), Status::Code::kInvalidArgument);
  bad = m;
  bad.op.datatype = 200;
  EXPECT_EQ(k.a->DeliverCollective(bad).code(), Status::Code::kInvalidArgument);
  bad = m;
  bad.kind = FabricMessage::Kind::kSend;  // a collective's op in a Send
  EXPECT_EQ(k.a->DeliverCollective(bad).code(), Status::Code::kInvalidArgument);
  // The well-formed part is taken once, not twice.
  SIM_ASSERT_OK(k.a->DeliverCollective(m));
  EXPECT_EQ(k.a->DeliverCollective(m).code(), Status::Code::kInvalidArgument);
  // Rank 0 posts its part: the all-reduce completes with B's part as sent.
  DevicePtr p = k.Alloc(0, 16);
  for (int i = 0; i < 4; ++i) F(p)[i] = static_cast<float>(i);
  SIM_ASSERT_OK(k.ctx[0]->EnqueueCollectives(k.rank[0], {Op(CollectiveOp::Kind::kAllReduce, p, p, 4)}, k.stream[0]));
  SIM_ASSERT_OK(k.ctx[0]->SynchronizeStream(k.stream[0]));
  ASSERT_TRUE(k.rank[0]->AsyncError().ok()) << k.rank[0]->AsyncError().ToString();
  for (int i = 0; i < 4; ++i) EXPECT_EQ(F(p)[i], static_cast<float>(i));
}

}  // namespace
}  // namespace phos::backend
