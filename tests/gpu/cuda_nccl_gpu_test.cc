// The cuda backend's NCCL collectives on a real GPU
// (backend/cuda/cuda_collectives.h). SKIPS — never passes — with "skipped:
// no GPU" where CreateCudaBackend returns Unavailable, and with "skipped: no
// NCCL" where phosd's NCCL cannot be loaded (PHOS_GPU_NCCL_LIBRARY names
// one that is not on the loader's path, e.g. PyTorch's
// site-packages/nvidia/nccl/lib/libnccl.so.2; tests/gpu/run.sh sets it).
//
// One GPU allows one-rank communicators only (NCCL refuses two ranks on one
// device): they still run NCCL's kernels on the session's buffers, ordered
// with the session's stream. Two ranks need two GPUs.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "backend/backend_factory.h"

namespace phos::backend {
namespace {

#define ASSERT_OK(expr)                                     \
  do {                                                      \
    ::phos::Status _s = (expr);                             \
    ASSERT_TRUE(_s.ok()) << #expr << ": " << _s.ToString(); \
  } while (0)

constexpr std::uint8_t kFloat = 7;  // ncclFloat32
constexpr std::uint8_t kSum = 0;    // ncclSum

std::uint64_t Host(const void* p) { return reinterpret_cast<std::uint64_t>(p); }

CommunicatorId AppId(std::uint8_t tag) {
  CommunicatorId id{};
  std::memcpy(id.data(), "phosnccl", 8);
  id[8] = tag;
  id[9] = static_cast<std::uint8_t>(std::rand());
  return id;
}

CollectiveOp Op(CollectiveOp::Kind kind, DevicePtr send, DevicePtr recv, std::uint64_t count, int peer = 0) {
  CollectiveOp op;
  op.kind = kind;
  op.datatype = kFloat;
  op.redop = kSum;
  op.send = send;
  op.recv = recv;
  op.count = count;
  op.peer = peer;
  return op;
}

class NcclGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CudaOptions options;
    if (const char* lib = std::getenv("PHOS_GPU_NCCL_LIBRARY"); lib != nullptr && *lib != '\0') {
      options.nccl_library = lib;
    }
    Status s = CreateCudaBackend(options, &backend_);
    if (s.code() == Status::Code::kUnavailable) GTEST_SKIP() << "skipped: no GPU (" << s.message() << ")";
    ASSERT_OK(s);
    ASSERT_OK(backend_->CreateContext(0, &ctx_));
  }

  /// Joins a one-rank communicator, or skips when phosd has no NCCL.
  void JoinAlone(std::shared_ptr<CommRank>* rank) {
    Status s = ctx_->JoinCommunicator(AppId(1), 1, 0, [] { return false; }, rank);
    if (s.code() == Status::Code::kNotSupported && s.message().find("not loaded") != std::string::npos) {
      GTEST_SKIP() << "skipped: no NCCL (" << s.message() << ")";
    }
    ASSERT_OK(s);
  }

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Context> ctx_;
};

TEST_F(NcclGpuTest, OneRankCollectivesRunInTheSessionsStreamOrder) {
  std::shared_ptr<CommRank> rank;
  JoinAlone(&rank);
  if (IsSkipped()) return;
  ASSERT_NE(rank, nullptr);
  EXPECT_EQ(rank->rank(), 0);
  EXPECT_EQ(rank->nranks(), 1);

  constexpr std::size_t kCount = 1 << 20;
  constexpr std::size_t kBytes = kCount * sizeof(float);
  std::vector<float> in(kCount);
  for (std::size_t i = 0; i < kCount; ++i) in[i] = static_cast<float>(i % 97);
  StreamHandle stream = 0;
  ASSERT_OK(ctx_->CreateStream(kStreamNonBlocking, 0, &stream));
  DevicePtr a = 0, b = 0, c = 0, d = 0, e = 0;
  for (DevicePtr* p : {&a, &b, &c, &d, &e}) ASSERT_OK(ctx_->Allocate(kBytes, 0, p));
  for (DevicePtr p : {b, c, d, e}) ASSERT_OK(ctx_->MemsetAsync(p, 0, 4, kCount, stream));
  // The copy is queued right before the groups: they must see its bytes
  // (the session's stream → NCCL's stream edge).
  ASSERT_OK(ctx_->MemcpyAsync(a, Host(in.data()), kBytes, CopyKind::kHostToDevice, stream));

  using K = CollectiveOp::Kind;
  ASSERT_OK(ctx_->EnqueueCollectives(rank, {Op(K::kAllReduce, a, a, kCount)}, stream));  // in place: unchanged
  CollectiveOp doubled = Op(K::kAllReduce, a, b, kCount);
  doubled.redop = CollectiveOp::kPreMulSum;
  const float two = 2.0f;
  std::memcpy(&doubled.scalar, &two, sizeof two);
  ASSERT_OK(ctx_->EnqueueCollectives(rank, {doubled}, stream));                           // b = 2a
  ASSERT_OK(ctx_->EnqueueCollectives(rank, {Op(K::kBroadcast, b, c, kCount)}, stream));   // c = b
  ASSERT_OK(ctx_->EnqueueCollectives(rank, {Op(K::kAllGather, a, d, kCount)}, stream));   // d = a
  ASSERT_OK(ctx_->EnqueueCollectives(rank, {Op(K::kSend, c, 0, kCount), Op(K::kRecv, 0, e, kCount)},
                                     stream));                                            // e = c

  // Read back on the session's stream: the NCCL stream → session edge.
  std::vector<float> out_a(kCount), out_b(kCount), out_d(kCount), out_e(kCount);
  ASSERT_OK(ctx_->MemcpyAsync(Host(out_a.data()), a, kBytes, CopyKind::kDeviceToHost, stream));
  ASSERT_OK(ctx_->MemcpyAsync(Host(out_b.data()), b, kBytes, CopyKind::kDeviceToHost, stream));
  ASSERT_OK(ctx_->MemcpyAsync(Host(out_d.data()), d, kBytes, CopyKind::kDeviceToHost, stream));
  ASSERT_OK(ctx_->MemcpyAsync(Host(out_e.data()), e, kBytes, CopyKind::kDeviceToHost, stream));
  ASSERT_OK(ctx_->SynchronizeStream(stream));
  for (std::size_t i = 0; i < kCount; i += 4099) {
    ASSERT_EQ(out_a[i], in[i]) << i;
    ASSERT_EQ(out_b[i], 2 * in[i]) << i;
    ASSERT_EQ(out_d[i], in[i]) << i;
    ASSERT_EQ(out_e[i], 2 * in[i]) << i;
  }
  EXPECT_TRUE(rank->AsyncError().ok()) << rank->AsyncError().ToString();
  EXPECT_TRUE(rank->Idle());

  // Aborted: the error names why, later groups are refused.
  rank->Abort("the test aborted it");
  Status err = rank->AsyncError();
  EXPECT_EQ(err.code(), Status::Code::kUnavailable);
  EXPECT_NE(err.message().find("the test aborted it"), std::string::npos) << err.message();
  Status later = ctx_->EnqueueCollectives(rank, {Op(K::kAllReduce, a, a, kCount)}, stream);
  EXPECT_EQ(later.code(), Status::Code::kUnavailable) << later.ToString();
  rank.reset();
  for (DevicePtr p : {a, b, c, d, e}) ASSERT_OK(ctx_->Free(p));
  ASSERT_OK(ctx_->DestroyStream(stream));
}

TEST_F(NcclGpuTest, AJoinWaitingForAPeerEndsWhenTheAppEnds) {
  std::shared_ptr<CommRank> probe;
  JoinAlone(&probe);  // skips without NCCL
  if (IsSkipped()) return;
  probe.reset();
  std::atomic<bool> app_ended{false};
  auto join = std::async(std::launch::async, [&] {
    std::shared_ptr<CommRank> rank;
    return ctx_->JoinCommunicator(AppId(2), 2, 0, [&] { return app_ended.load(); }, &rank);
  });
  // Rank 1 never comes; the app "ends" instead.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  app_ended = true;
  const Status s = join.get();
  EXPECT_EQ(s.code(), Status::Code::kUnavailable) << s.ToString();
}

TEST_F(NcclGpuTest, TwoRanksOnTwoGpusReduceTogether) {
  if (backend_->device_count() < 2) GTEST_SKIP() << "skipped: needs 2 GPUs (this machine has 1)";
  std::shared_ptr<CommRank> probe;
  JoinAlone(&probe);
  if (IsSkipped()) return;
  probe.reset();
  std::unique_ptr<Context> other;
  ASSERT_OK(backend_->CreateContext(1, &other));
  const CommunicatorId id = AppId(3);
  std::shared_ptr<CommRank> r0, r1;
  auto j1 = std::async(std::launch::async, [&] { return other->JoinCommunicator(id, 2, 1, [] { return false; }, &r1); });
  ASSERT_OK(ctx_->JoinCommunicator(id, 2, 0, [] { return false; }, &r0));
  ASSERT_OK(j1.get());

  constexpr std::size_t kCount = 4096;
  std::vector<float> v0(kCount, 1.0f), v1(kCount, 2.0f), out0(kCount), out1(kCount);
  DevicePtr p0 = 0, p1 = 0;
  ASSERT_OK(ctx_->Allocate(kCount * 4, 0, &p0));
  ASSERT_OK(other->Allocate(kCount * 4, 0, &p1));
  ASSERT_OK(ctx_->MemcpyAsync(p0, Host(v0.data()), kCount * 4, CopyKind::kHostToDevice, kDefaultStream));
  ASSERT_OK(other->MemcpyAsync(p1, Host(v1.data()), kCount * 4, CopyKind::kHostToDevice, kDefaultStream));
  ASSERT_OK(ctx_->EnqueueCollectives(r0, {Op(CollectiveOp::Kind::kAllReduce, p0, p0, kCount)}, kDefaultStream));
  ASSERT_OK(other->EnqueueCollectives(r1, {Op(CollectiveOp::Kind::kAllReduce, p1, p1, kCount)}, kDefaultStream));
  ASSERT_OK(ctx_->MemcpyAsync(Host(out0.data()), p0, kCount * 4, CopyKind::kDeviceToHost, kDefaultStream));
  ASSERT_OK(other->MemcpyAsync(Host(out1.data()), p1, kCount * 4, CopyKind::kDeviceToHost, kDefaultStream));
  ASSERT_OK(ctx_->SynchronizeStream(kDefaultStream));
  ASSERT_OK(other->SynchronizeStream(kDefaultStream));
  EXPECT_EQ(out0[0], 3.0f);
  EXPECT_EQ(out1[kCount - 1], 3.0f);
  // One rank aborted ends the other's too (CommRank::Abort's contract).
  r0->Abort("rank 0's app ended");
  EXPECT_EQ(r1->AsyncError().code(), Status::Code::kUnavailable);
  r0.reset();
  r1.reset();
  ASSERT_OK(ctx_->Free(p0));
  ASSERT_OK(other->Free(p1));
}

}  // namespace
}  // namespace phos::backend
