// The cuda backend's NCCL collectives on a real GPU
// (backend/cuda/cuda_collectives.h). SKIPS — never passes — with "skipped:
// no GPU" where CreateCudaBackend returns Unavailable, and with "skipped: no
// NCCL" where phosd's NCCL cannot be loaded (PHOS_GPU_NCCL_LIBRARY names
// one that is not on the loader's path, e.g. PyTorch's
// site-packages/nvidia/nccl/lib/libnccl.so.2; tests/gpu/run.sh sets it).
//
// One GPU allows one-rank communicators only (NCCL refuses two ranks on one
// device); the one-rank collectives in stream order are the backend
// conformance suite's (OneRankCollectivesRunInStreamOrder, sim and cuda).
// Here: what only the cuda backend does — a join waiting for a peer that
// never comes, and two ranks on two GPUs.
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
#include "collective_ops.h"

namespace phos::backend {
namespace {

#define ASSERT_OK(expr)                                     \
  do {                                                      \
    ::phos::Status _s = (expr);                             \
    ASSERT_TRUE(_s.ok()) << #expr << ": " << _s.ToString(); \
  } while (0)

std::uint64_t Host(const void* p) { return reinterpret_cast<std::uint64_t>(p); }

CommunicatorId AppId(std::uint8_t tag) {
  CommunicatorId id{};
  std::memcpy(id.data(), "phosnccl", 8);
  id[8] = tag;
  id[9] = static_cast<std::uint8_t>(std::rand());
  return id;
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
  ASSERT_OK(ctx_->EnqueueCollectives(r0, {testing::FloatOp(CollectiveOp::Kind::kAllReduce, p0, p0, kCount)}, kDefaultStream));
  ASSERT_OK(other->EnqueueCollectives(r1, {testing::FloatOp(CollectiveOp::Kind::kAllReduce, p1, p1, kCount)}, kDefaultStream));
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
