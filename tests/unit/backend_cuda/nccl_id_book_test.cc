// The book of NCCL ids of the cuda backend (backend/cuda/nccl_id_book.h):
// every rank of an app id gets the id its first rank made, a formed id is
// made afresh for the next formation, and disagreeing ranks are refused.
// Also under ThreadSanitizer (label concurrency): ranks join from threads.
#include "backend/cuda/nccl_id_book.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

namespace phos::backend::cuda {
namespace {

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
