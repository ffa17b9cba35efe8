// The sim's NCCL (backend/sim/sim_collectives.h): ranks are contexts of one
// sim backend, joined from threads as sessions would; collectives computed
// over the ranks' memory; a rank that gives up fails the others instead of
// leaving them waiting. Runs stream workers and joiners on several threads
// (re-run under ThreadSanitizer).
#include <cuda.h>

#include <atomic>
#include <cstring>
#include <future>
#include <thread>

#include "sim_test_util.h"

namespace phos::backend {
namespace {

using sim_test::kMiB;

CommunicatorId IdOf(std::uint8_t tag) {
  CommunicatorId id{};
  id[0] = tag;
  id[1] = 0x5a;
  return id;
}

struct Ranks {
  std::unique_ptr<Backend> backend;
  std::vector<std::unique_ptr<Context>> ctx;
  std::vector<std::shared_ptr<CommRank>> rank;
  std::vector<StreamHandle> stream;

  // `n` contexts (on `devices` GPUs, round robin) joined to one communicator.
  Status Init(int n, int devices, std::uint8_t tag) {
    SimOptions o;
    o.device_count = devices;
    o.memory_bytes = 1ull << 30;
    PHOS_RETURN_IF_ERROR(CreateSimBackend(o, &backend));
    ctx.resize(static_cast<std::size_t>(n));
    rank.resize(static_cast<std::size_t>(n));
    stream.resize(static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r) {
      PHOS_RETURN_IF_ERROR(backend->CreateContext(r % devices, &ctx[r]));
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
};

float* F(DevicePtr p) { return sim_test::Floats(p); }
CollectiveOp Op(CollectiveOp::Kind kind, DevicePtr send, DevicePtr recv, std::uint64_t count, int peer = 0,
                std::uint8_t redop = 0) {
  return sim_test::FloatOp(kind, send, recv, count, peer, redop);
}

TEST(SimCollectives, AllReduceOfFourRanksOnTwoGpusInRankOrder) {
  Ranks k;
  SIM_ASSERT_OK(k.Init(4, 2, 1));
  const std::size_t n = 1000;
  std::vector<DevicePtr> buf;
  for (int r = 0; r < 4; ++r) {
    buf.push_back(k.Alloc(r, n * sizeof(float)));
    for (std::size_t i = 0; i < n; ++i) F(buf[r])[i] = static_cast<float>(r * 10 + i % 7);
  }
  // Enqueued from four threads at once, in place.
  std::vector<std::thread> t;
  for (int r = 0; r < 4; ++r) {
    t.emplace_back([&, r] {
      EXPECT_TRUE(k.ctx[r]->EnqueueCollectives(k.rank[r], {Op(CollectiveOp::Kind::kAllReduce, buf[r], buf[r], n)},
                                               k.stream[r]).ok());
    });
  }
  for (auto& th : t) th.join();
  for (int r = 0; r < 4; ++r) SIM_ASSERT_OK(k.ctx[r]->SynchronizeStream(k.stream[r]));
  for (int r = 0; r < 4; ++r) {
    EXPECT_TRUE(k.rank[r]->AsyncError().ok()) << k.rank[r]->AsyncError().ToString();
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(F(buf[r])[i], 60.0f + 4.0f * (i % 7)) << r << " " << i;
  }
}

TEST(SimCollectives, PreMulSumScalesEachRankByItsScalarFromHostOrDevice) {
  Ranks k;
  SIM_ASSERT_OK(k.Init(2, 2, 7));
  const std::size_t n = 16;
  std::vector<DevicePtr> buf, scalar;
  for (int r = 0; r < 2; ++r) {
    buf.push_back(k.Alloc(r, n * sizeof(float)));
    scalar.push_back(k.Alloc(r, sizeof(float)));
    *F(scalar[r]) = static_cast<float>(r + 2);  // 2 and 3
    for (std::size_t i = 0; i < n; ++i) F(buf[r])[i] = static_cast<float>(i);
  }
  for (bool on_device : {true, false}) {
    for (int r = 0; r < 2; ++r) {
      CollectiveOp op = Op(CollectiveOp::Kind::kAllReduce, buf[r], buf[r], n, 0, CollectiveOp::kPreMulSum);
      op.scalar_on_device = on_device;
      if (on_device) {
        op.scalar = scalar[r];
      } else {
        const float f = static_cast<float>(r + 2);
        std::memcpy(&op.scalar, &f, sizeof f);
      }
      SIM_ASSERT_OK(k.ctx[r]->EnqueueCollectives(k.rank[r], {op}, k.stream[r]));
    }
    for (int r = 0; r < 2; ++r) SIM_ASSERT_OK(k.ctx[r]->SynchronizeStream(k.stream[r]));
    for (int r = 0; r < 2; ++r) EXPECT_TRUE(k.rank[r]->AsyncError().ok()) << k.rank[r]->AsyncError().ToString();
  }
  // Twice scaled by 2 + 3: x * 5 * 5.
  for (int r = 0; r < 2; ++r)
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(F(buf[r])[i], 25.0f * static_cast<float>(i)) << r << " " << i;
}

TEST(SimCollectives, RingExchangeInOneGroupDoesNotDeadlock) {
  Ranks k;
  SIM_ASSERT_OK(k.Init(3, 3, 2));
  const std::size_t n = 64;
  std::vector<DevicePtr> send, recv;
  for (int r = 0; r < 3; ++r) {
    send.push_back(k.Alloc(r, n * sizeof(float)));
    recv.push_back(k.Alloc(r, n * sizeof(float)));
    for (std::size_t i = 0; i < n; ++i) F(send[r])[i] = static_cast<float>(100 * r + i);
  }
  for (int r = 0; r < 3; ++r) {
    SIM_ASSERT_OK(k.ctx[r]->EnqueueCollectives(
        k.rank[r],
        {Op(CollectiveOp::Kind::kSend, send[r], 0, n, (r + 1) % 3), Op(CollectiveOp::Kind::kRecv, 0, recv[r], n, (r + 2) % 3)},
        k.stream[r]));
  }
  for (int r = 0; r < 3; ++r) SIM_ASSERT_OK(k.ctx[r]->SynchronizeStream(k.stream[r]));
  for (int r = 0; r < 3; ++r) {
    const int prev = (r + 2) % 3;
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(F(recv[r])[i], static_cast<float>(100 * prev + i));
  }
}

TEST(SimCollectives, RanksThatDisagreeFailAllWithTheirAsyncError) {
  Ranks k;
  SIM_ASSERT_OK(k.Init(2, 1, 3));
  DevicePtr a = k.Alloc(0, 4096), b = k.Alloc(1, 4096);
  SIM_ASSERT_OK(k.ctx[0]->EnqueueCollectives(k.rank[0], {Op(CollectiveOp::Kind::kAllReduce, a, a, 16)}, k.stream[0]));
  SIM_ASSERT_OK(k.ctx[1]->EnqueueCollectives(k.rank[1], {Op(CollectiveOp::Kind::kAllReduce, b, b, 32)}, k.stream[1]));
  for (int r = 0; r < 2; ++r) {
    // Nothing was reduced: the stream says so (an NCCL kernel that failed),
    // so no app reads its buffer as a result.
    const Status sync = k.ctx[r]->SynchronizeStream(k.stream[r]);
    EXPECT_EQ(sync.api_error(), CUDA_ERROR_LAUNCH_FAILED) << sync.ToString();
    EXPECT_NE(sync.message().find("did not complete"), std::string::npos) << sync.ToString();
    const Status e = k.rank[r]->AsyncError();
    EXPECT_FALSE(e.ok());
    EXPECT_NE(e.message().find("disagree"), std::string::npos) << e.ToString();
  }
}

TEST(SimCollectives, AnAbandonedRankFailsItsWaitingPeers) {
  Ranks k;
  SIM_ASSERT_OK(k.Init(2, 2, 4));
  DevicePtr a = k.Alloc(0, 4096);
  // Rank 0 waits in an all-reduce rank 1 never posts; rank 1's context is
  // abandoned (its app died) and its session aborts the communicator.
  SIM_ASSERT_OK(k.ctx[0]->EnqueueCollectives(k.rank[0], {Op(CollectiveOp::Kind::kAllReduce, a, a, 16)}, k.stream[0]));
  k.ctx[1]->Abandon();
  k.rank[1]->Abort("rank 1: its process ended");
  // Rank 0's all-reduce never got rank 1's part: its stream fails instead
  // of completing with rank 0's own bytes as "the sum".
  const Status sync = k.ctx[0]->SynchronizeStream(k.stream[0]);
  EXPECT_EQ(sync.api_error(), CUDA_ERROR_LAUNCH_FAILED) << sync.ToString();
  EXPECT_NE(sync.message().find("process ended"), std::string::npos) << sync.ToString();
  const Status e = k.rank[0]->AsyncError();
  EXPECT_EQ(e.code(), Status::Code::kUnavailable) << e.ToString();
  EXPECT_NE(e.message().find("process ended"), std::string::npos) << e.ToString();
  // Later groups fail at once.
  SIM_ASSERT_OK(k.ctx[0]->EnqueueCollectives(k.rank[0], {Op(CollectiveOp::Kind::kAllReduce, a, a, 16)}, k.stream[0]));
  EXPECT_FALSE(k.ctx[0]->SynchronizeStream(k.stream[0]).ok());
}

// A rank whose own app ends the communicator (ncclCommAbort) while its
// all-reduce waits drops that collective as NCCL does: the app asked for it,
// knows the buffer holds no result, and its stream goes on without error.
// The peer, which did not ask, gets the error on its stream.
TEST(SimCollectives, ARankThatAbortsItselfKeepsItsStreamItsPeerDoesNot) {
  Ranks k;
  SIM_ASSERT_OK(k.Init(2, 2, 9));
  DevicePtr a = k.Alloc(0, 4096), b = k.Alloc(1, 4096);
  // Rank 0 waits in an all-reduce whose other part comes only after rank 1
  // aborted (so it never arrives in time).
  SIM_ASSERT_OK(k.ctx[0]->EnqueueCollectives(k.rank[0], {Op(CollectiveOp::Kind::kAllReduce, a, a, 16)}, k.stream[0]));
  k.rank[0]->Abort("rank 0 called ncclCommAbort");
  SIM_ASSERT_OK(k.ctx[0]->SynchronizeStream(k.stream[0]));
  EXPECT_FALSE(k.rank[0]->AsyncError().ok());
  SIM_ASSERT_OK(k.ctx[1]->EnqueueCollectives(k.rank[1], {Op(CollectiveOp::Kind::kAllReduce, b, b, 16)}, k.stream[1]));
  const Status sync = k.ctx[1]->SynchronizeStream(k.stream[1]);
  EXPECT_EQ(sync.api_error(), CUDA_ERROR_LAUNCH_FAILED) << sync.ToString();
  EXPECT_NE(sync.message().find("ncclCommAbort"), std::string::npos) << sync.ToString();
}

TEST(SimCollectives, AJoinGivesUpWhenCancelledAndALaterJoinFormsAFreshOne) {
  SimOptions o;
  o.memory_bytes = 1ull << 30;
  std::unique_ptr<Backend> b;
  SIM_ASSERT_OK(CreateSimBackend(o, &b));
  std::unique_ptr<Context> c0, c1;
  SIM_ASSERT_OK(b->CreateContext(0, &c0));
  SIM_ASSERT_OK(b->CreateContext(0, &c1));
  std::atomic<bool> stop{false};
  std::shared_ptr<CommRank> r0, r1;
  auto waiting = std::async(std::launch::async, [&] {
    return c0->JoinCommunicator(IdOf(5), 2, 0, [&] { return stop.load(); }, &r0);
  });
  stop = true;  // its app ended before rank 1 came
  EXPECT_EQ(waiting.get().code(), Status::Code::kUnavailable);
  // The same id again: a new communicator of the two that come now.
  auto j0 = std::async(std::launch::async, [&] { return c0->JoinCommunicator(IdOf(5), 2, 0, [] { return false; }, &r0); });
  auto j1 = std::async(std::launch::async, [&] { return c1->JoinCommunicator(IdOf(5), 2, 1, [] { return false; }, &r1); });
  SIM_ASSERT_OK(j0.get());
  SIM_ASSERT_OK(j1.get());
  EXPECT_EQ(r0->nranks(), 2);
  EXPECT_EQ(r1->rank(), 1);
  // Two processes that pass the same rank: whichever comes second is
  // refused at once; the first forms the communicator with rank 1.
  std::unique_ptr<Context> c2;
  SIM_ASSERT_OK(b->CreateContext(0, &c2));
  std::shared_ptr<CommRank> a, bb, c;
  auto a0 = std::async(std::launch::async, [&] { return c0->JoinCommunicator(IdOf(6), 2, 0, [] { return false; }, &a); });
  auto a1 = std::async(std::launch::async, [&] { return c1->JoinCommunicator(IdOf(6), 2, 0, [] { return false; }, &bb); });
  while (a0.wait_for(std::chrono::milliseconds(10)) != std::future_status::ready &&
         a1.wait_for(std::chrono::milliseconds(10)) != std::future_status::ready) {
  }
  SIM_ASSERT_OK(c2->JoinCommunicator(IdOf(6), 2, 1, [] { return false; }, &c));
  const Status s0 = a0.get(), s1 = a1.get();
  EXPECT_NE(s0.ok(), s1.ok()) << s0.ToString() << " / " << s1.ToString();
  EXPECT_EQ((s0.ok() ? s1 : s0).code(), Status::Code::kInvalidArgument);
}

}  // namespace
}  // namespace phos::backend
