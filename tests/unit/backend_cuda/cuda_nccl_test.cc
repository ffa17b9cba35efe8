// The cuda backend's NCCL on a machine without a GPU: loading the library
// (backend/cuda/cuda_nccl.h), its results as Status, the book of NCCL ids
// (nccl_id_book.h), and a join refused by name when NCCL is not loaded.
// Running collectives needs a GPU: tests/gpu/cuda_backend_gpu_test.cc.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "backend/cuda/cuda_collectives.h"
#include "backend/cuda/cuda_nccl.h"
#include "backend/cuda/nccl_id_book.h"

namespace phos::backend::cuda {
namespace {

TEST(CudaNcclTest, VersionTextReadsBothEncodings) {
  EXPECT_EQ(NcclVersionText(22809), "2.28.9");
  EXPECT_EQ(NcclVersionText(21400), "2.14.0");
  EXPECT_EQ(NcclVersionText(2307), "2.3.7");  // before 2.9: X*1000 + Y*100 + Z
}

TEST(CudaNcclTest, ResultsMapToStatusCodes) {
  EXPECT_TRUE(NcclStatus(ncclSuccess, "x", nullptr).ok());
  EXPECT_EQ(NcclStatus(ncclRemoteError, "x", nullptr).code(), Status::Code::kUnavailable);
  EXPECT_EQ(NcclStatus(ncclInvalidUsage, "x", nullptr).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(NcclStatus(ncclInvalidArgument, "x", nullptr).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(NcclStatus(ncclUnhandledCudaError, "x", nullptr).code(), Status::Code::kInternal);
  const Status s = NcclStatus(ncclSystemError, "ncclAllReduce (op 0 of the group)", nullptr);
  EXPECT_EQ(s.code(), Status::Code::kInternal);
  EXPECT_NE(s.message().find("ncclAllReduce (op 0 of the group): ncclSystemError"), std::string::npos)
      << s.message();
  EXPECT_EQ(NcclResultName(static_cast<ncclResult_t>(42)), "ncclResult 42");
}

TEST(CudaNcclTest, MissingLibraryIsUnavailableNamingIt) {
  std::shared_ptr<const NcclLibrary> lib;
  const Status s = LoadNccl("/nonexistent/libnccl.so.2", &lib);
  EXPECT_EQ(s.code(), Status::Code::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("/nonexistent/libnccl.so.2"), std::string::npos) << s.message();
  EXPECT_EQ(lib, nullptr);
}

TEST(CudaNcclTest, NotNcclIsUnavailableNamingTheSymbol) {
  std::shared_ptr<const NcclLibrary> lib;
  const Status s = LoadNccl("libc.so.6", &lib);
  EXPECT_EQ(s.code(), Status::Code::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("ncclGetVersion"), std::string::npos) << s.message();
}

// setup.sh installs NCCL beside the toolkit; CMake passes its path.
TEST(CudaNcclTest, ToolkitLibraryResolvesEveryEntryPointAndMakesIds) {
  std::shared_ptr<const NcclLibrary> lib;
  const Status s = LoadNccl(PHOS_NCCL_LIBRARY, &lib);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_GE(lib->version, kMinimumNcclVersion);
  EXPECT_EQ(lib->version, NCCL_VERSION_CODE) << "the library is not the NCCL of the header phos was built with";
  for (const void* fn : {reinterpret_cast<const void*>(lib->GetUniqueId), reinterpret_cast<const void*>(lib->CommInitRankConfig),
                         reinterpret_cast<const void*>(lib->CommFinalize), reinterpret_cast<const void*>(lib->CommAbort),
                         reinterpret_cast<const void*>(lib->GroupEnd), reinterpret_cast<const void*>(lib->AllReduce),
                         reinterpret_cast<const void*>(lib->Send), reinterpret_cast<const void*>(lib->Recv),
                         reinterpret_cast<const void*>(lib->RedOpCreatePreMulSum)}) {
    EXPECT_NE(fn, nullptr);
  }
  // A unique id needs no GPU (NCCL's bootstrap root: a socket of this
  // process); two ids differ.
  ncclUniqueId a{}, b{};
  ASSERT_EQ(lib->GetUniqueId(&a), ncclSuccess);
  ASSERT_EQ(lib->GetUniqueId(&b), ncclSuccess);
  EXPECT_NE(std::memcmp(&a, &b, sizeof a), 0);
}

TEST(CudaNcclTest, JoinWithoutNcclIsRefusedSayingWhyAndWhatToDo) {
  auto collectives = std::make_shared<CudaCollectives>(nullptr, nullptr, "dlopen libnccl.so.2 failed: not found");
  std::shared_ptr<CommRank> rank;
  const Status s = collectives->Join(CommunicatorId{}, 2, 0, 0, nullptr, nullptr, &rank);
  EXPECT_EQ(s.code(), Status::Code::kNotSupported) << s.ToString();
  EXPECT_NE(s.message().find("dlopen libnccl.so.2 failed"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("--nccl-library"), std::string::npos) << s.message();
  EXPECT_EQ(rank, nullptr);
}

// ---- the id book -------------------------------------------------------------------

CommunicatorId AppId(std::uint8_t tag) {
  CommunicatorId id{};
  std::memcpy(id.data(), "phosnccl", 8);
  id[8] = tag;
  return id;
}

// Ids numbered by the call that made them.
NcclIdBook CountingBook(std::atomic<int>* made) {
  return NcclIdBook([made](ncclUniqueId* out) {
    std::memset(out, 0, sizeof *out);
    out->internal[0] = static_cast<char>(++*made);
    return Status::Ok();
  });
}

TEST(NcclIdBookTest, EveryRankOfAnAppIdTakesTheIdItsFirstRankMade) {
  std::atomic<int> made{0};
  NcclIdBook book = CountingBook(&made);
  ncclUniqueId r0{}, r1{}, r2{}, other{};
  ASSERT_TRUE(book.Take(AppId(1), 3, 1, &r1).ok());
  ASSERT_TRUE(book.Take(AppId(2), 2, 0, &other).ok());
  ASSERT_TRUE(book.Take(AppId(1), 3, 0, &r0).ok());
  EXPECT_EQ(book.forming(), 2u);
  ASSERT_TRUE(book.Take(AppId(1), 3, 2, &r2).ok());
  EXPECT_EQ(made.load(), 2);
  EXPECT_EQ(r0.internal[0], 1);
  EXPECT_EQ(std::memcmp(&r0, &r1, sizeof r0), 0);
  EXPECT_EQ(std::memcmp(&r0, &r2, sizeof r0), 0);
  EXPECT_EQ(other.internal[0], 2);
  EXPECT_EQ(book.forming(), 1u);  // app id 1 formed: its entry is gone
}

TEST(NcclIdBookTest, AFormedAppIdJoinedAgainGetsAFreshId) {
  std::atomic<int> made{0};
  NcclIdBook book = CountingBook(&made);
  ncclUniqueId first{}, again{};
  ASSERT_TRUE(book.Take(AppId(1), 1, 0, &first).ok());
  ASSERT_TRUE(book.Take(AppId(1), 1, 0, &again).ok());  // a restore of the same communicator
  EXPECT_NE(first.internal[0], again.internal[0]);
  EXPECT_EQ(book.forming(), 0u);
}

TEST(NcclIdBookTest, DisagreeingSizesAndTwiceJoinedRanksAreRefused) {
  std::atomic<int> made{0};
  NcclIdBook book = CountingBook(&made);
  ncclUniqueId id{};
  ASSERT_TRUE(book.Take(AppId(1), 4, 0, &id).ok());
  Status size = book.Take(AppId(1), 2, 1, &id);
  EXPECT_EQ(size.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(size.message().find("formed with 4"), std::string::npos) << size.message();
  Status twice = book.Take(AppId(1), 4, 0, &id);
  EXPECT_EQ(twice.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(twice.message().find("joined twice"), std::string::npos) << twice.message();
  EXPECT_EQ(book.Take(AppId(1), 4, 4, &id).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(book.Take(AppId(1), 0, 0, &id).code(), Status::Code::kInvalidArgument);
}

TEST(NcclIdBookTest, AGivenBackRankMayJoinAgainWithTheSameId) {
  std::atomic<int> made{0};
  NcclIdBook book = CountingBook(&made);
  ncclUniqueId a{}, b{}, c{};
  ASSERT_TRUE(book.Take(AppId(1), 2, 0, &a).ok());
  ASSERT_TRUE(book.Take(AppId(1), 2, 1, &b).ok());
  // Formed: gone. A new communicator of that app id whose rank 0 fails.
  ASSERT_TRUE(book.Take(AppId(1), 2, 0, &c).ok());
  book.GiveBack(AppId(1), 0);
  EXPECT_EQ(book.forming(), 0u);  // its only rank gave it back
  ASSERT_TRUE(book.Take(AppId(1), 2, 1, &a).ok());
  book.GiveBack(AppId(1), 0);  // rank 0 never took this one: nothing changes
  ASSERT_TRUE(book.Take(AppId(1), 2, 0, &b).ok());
  EXPECT_EQ(std::memcmp(&a, &b, sizeof a), 0);
  EXPECT_EQ(made.load(), 3);
}

TEST(NcclIdBookTest, AFailedIdMakerFailsTheJoinAndKeepsNoEntry) {
  NcclIdBook book([](ncclUniqueId*) { return Status::Internal("ncclGetUniqueId: ncclSystemError"); });
  ncclUniqueId id{};
  const Status s = book.Take(AppId(1), 2, 0, &id);
  EXPECT_EQ(s.code(), Status::Code::kInternal);
  EXPECT_EQ(book.forming(), 0u);
}

TEST(NcclIdBookTest, RanksJoiningFromManyThreadsShareOneId) {
  std::atomic<int> made{0};
  NcclIdBook book = CountingBook(&made);
  constexpr int kRanks = 16;
  std::vector<ncclUniqueId> ids(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] { ASSERT_TRUE(book.Take(AppId(7), kRanks, r, &ids[r]).ok()); });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(made.load(), 1);
  for (int r = 1; r < kRanks; ++r) EXPECT_EQ(std::memcmp(&ids[0], &ids[r], sizeof ids[0]), 0) << r;
  EXPECT_EQ(book.forming(), 0u);
}

}  // namespace
}  // namespace phos::backend::cuda
