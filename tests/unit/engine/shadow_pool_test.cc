// The copy-on-write reserve (daemon/engine/shadow_pool.h) on the sim
// backend: ranges carved first-fit and coalesced when given back, a full
// reserve says OutOfMemory (the writer waits) while a reserve that is not
// there says Unavailable (the checkpoint allocates itself), a session's
// context copies into and out of the reserve's memory (another context's),
// and many threads taking and giving back never get overlapping ranges.
// Label `concurrency`: re-run under ThreadSanitizer.
#include "engine/shadow_pool.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "backend/backend_factory.h"

namespace phos::engine {
namespace {

using namespace std::chrono_literals;

constexpr std::uint64_t kMiB = 1ull << 20;

std::unique_ptr<backend::Backend> SimBackend(std::uint64_t memory_bytes = 80ull << 30) {
  backend::BackendOptions bo;
  bo.kind = backend::BackendKind::kSim;
  bo.sim.memory_bytes = memory_bytes;
  std::unique_ptr<backend::Backend> b;
  std::string why;
  Status s = backend::CreateBackend(bo, &b, &why);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return b;
}

ShadowPoolOptions Reserve(std::uint64_t bytes) {
  ShadowPoolOptions o;
  o.bytes_per_device = bytes;
  o.fill_piece_bytes = 4 * kMiB;
  return o;
}

TEST(ShadowPoolTest, RangesAreCarvedFirstFitAndCoalescedWhenGivenBack) {
  auto backend = SimBackend();
  ShadowPool pool(backend.get(), Reserve(8 * kMiB));
  ASSERT_TRUE(pool.WaitUntilReady(60s));
  backend::DevicePtr a = 0, b = 0, c = 0;
  ASSERT_TRUE(pool.Take(0, 3 * kMiB, &a).ok());
  ASSERT_TRUE(pool.Take(0, 1, &b).ok());  // rounded up to kAlignment
  ASSERT_TRUE(pool.Take(0, 3 * kMiB, &c).ok());
  EXPECT_EQ(b, a + 3 * kMiB);
  EXPECT_EQ(c, b + ShadowPool::kAlignment);
  EXPECT_EQ(pool.stats()[0].in_use, 6 * kMiB + ShadowPool::kAlignment);

  // The middle one back: a hole too small for 3 MiB, the tail too.
  pool.GiveBack(0, b);
  backend::DevicePtr d = 0;
  EXPECT_EQ(pool.Take(0, 3 * kMiB, &d).code(), Status::Code::kOutOfMemory);
  // The first and the last back: everything coalesces into one range.
  pool.GiveBack(0, a);
  pool.GiveBack(0, c);
  EXPECT_EQ(pool.stats()[0].in_use, 0u);
  EXPECT_EQ(pool.stats()[0].largest_free, 8 * kMiB);
  ASSERT_TRUE(pool.Take(0, 8 * kMiB, &d).ok());
  EXPECT_EQ(d, a);
  pool.GiveBack(0, d);
}

TEST(ShadowPoolTest, AFullReserveIsOutOfMemoryAMissingOneUnavailable) {
  auto backend = SimBackend();
  {
    ShadowPool pool(backend.get(), Reserve(2 * kMiB));
    ASSERT_TRUE(pool.WaitUntilReady(60s));
    backend::DevicePtr p = 0;
    // More than the reserve, or more than is free now: the writer waits.
    EXPECT_EQ(pool.Take(0, 3 * kMiB, &p).code(), Status::Code::kOutOfMemory);
    // No such device: no reserve there.
    EXPECT_EQ(pool.Take(1, kMiB, &p).code(), Status::Code::kUnavailable);
  }
  {
    ShadowPool none(backend.get(), Reserve(0));  // --cow-reserve 0
    backend::DevicePtr p = 0;
    EXPECT_EQ(none.Take(0, kMiB, &p).code(), Status::Code::kUnavailable);
    EXPECT_FALSE(none.WaitUntilReady(0ms));
  }
}

TEST(ShadowPoolTest, AReserveTheDeviceCannotHoldIsUnavailableNotAnError) {
  auto backend = SimBackend(64 * kMiB);
  ShadowPool pool(backend.get(), Reserve(128 * kMiB));
  backend::DevicePtr p = 0;
  // Whether the fill has failed yet or not, there is no reserve to take
  // from: the checkpoint allocates its shadows itself.
  EXPECT_EQ(pool.Take(0, kMiB, &p).code(), Status::Code::kUnavailable);
  EXPECT_FALSE(pool.WaitUntilReady(50ms));
  EXPECT_EQ(pool.Take(0, kMiB, &p).code(), Status::Code::kUnavailable);
  pool.Shutdown();  // stops the retries
  EXPECT_FALSE(pool.stats()[0].ready);
}

TEST(ShadowPoolTest, ASessionsContextCopiesIntoAndOutOfTheReserve) {
  auto backend = SimBackend();
  ShadowPool pool(backend.get(), Reserve(4 * kMiB));
  ASSERT_TRUE(pool.WaitUntilReady(60s));
  std::unique_ptr<backend::Context> ctx;
  ASSERT_TRUE(backend->CreateContext(0, &ctx).ok());
  const std::size_t n = kMiB + 123;
  backend::DevicePtr src = 0, back = 0, shadow = 0;
  ASSERT_TRUE(ctx->Allocate(n, 0, &src).ok());
  ASSERT_TRUE(ctx->Allocate(n, 0, &back).ok());
  std::vector<std::uint8_t> host(n);
  for (std::size_t i = 0; i < n; ++i) host[i] = static_cast<std::uint8_t>(i * 7 + 3);
  ASSERT_TRUE(ctx->MemcpyAsync(src, reinterpret_cast<std::uint64_t>(host.data()), n,
                               backend::CopyKind::kHostToDevice, 0).ok());
  ASSERT_TRUE(pool.Take(0, n, &shadow).ok());
  // What cow does: a D2D into the reserve (another context's memory) on the
  // session's stream, later read back out of it.
  ASSERT_TRUE(ctx->MemcpyAsync(shadow, src, n, backend::CopyKind::kDeviceToDevice, 0).ok());
  ASSERT_TRUE(ctx->MemsetAsync(src, 0, 1, n, 0).ok());
  ASSERT_TRUE(ctx->MemcpyAsync(back, shadow, n, backend::CopyKind::kDeviceToDevice, 0).ok());
  std::vector<std::uint8_t> got(n);
  ASSERT_TRUE(ctx->MemcpyAsync(reinterpret_cast<std::uint64_t>(got.data()), back, n,
                               backend::CopyKind::kDeviceToHost, 0).ok());
  ASSERT_TRUE(ctx->SynchronizeStream(0).ok());
  EXPECT_EQ(got, host);
  pool.GiveBack(0, shadow);
  ASSERT_TRUE(ctx->Free(src).ok());
  ASSERT_TRUE(ctx->Free(back).ok());
}

TEST(ShadowPoolTest, ManyThreadsNeverHoldOverlappingRanges) {
  auto backend = SimBackend();
  ShadowPool pool(backend.get(), Reserve(16 * kMiB));
  ASSERT_TRUE(pool.WaitUntilReady(60s));
  std::mutex mu;  // guards held
  std::map<backend::DevicePtr, std::uint64_t> held;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t + 1));
      std::vector<std::pair<backend::DevicePtr, std::uint64_t>> mine;
      for (int i = 0; i < 2000; ++i) {
        if (!mine.empty() && (rng() % 2 == 0 || mine.size() > 6)) {
          const std::size_t k = rng() % mine.size();
          {
            std::lock_guard<std::mutex> lock(mu);
            held.erase(mine[k].first);
          }
          pool.GiveBack(0, mine[k].first);
          mine.erase(mine.begin() + static_cast<std::ptrdiff_t>(k));
          continue;
        }
        const std::uint64_t bytes = 1 + rng() % (2 * kMiB);
        backend::DevicePtr p = 0;
        Status s = pool.Take(0, bytes, &p);
        if (!s.ok()) {
          EXPECT_EQ(s.code(), Status::Code::kOutOfMemory) << s.ToString();
          continue;
        }
        {
          std::lock_guard<std::mutex> lock(mu);
          auto next = held.lower_bound(p);
          if (next != held.end()) {
            EXPECT_LE(p + bytes, next->first) << "overlaps the next range";
          }
          if (next != held.begin()) {
            auto prev = std::prev(next);
            EXPECT_LE(prev->first + prev->second, p) << "overlaps the previous range";
          }
          held.emplace(p, bytes);
        }
        mine.emplace_back(p, bytes);
      }
      for (auto& [p, bytes] : mine) {
        {
          std::lock_guard<std::mutex> lock(mu);
          held.erase(p);
        }
        pool.GiveBack(0, p);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(pool.stats()[0].in_use, 0u);
  EXPECT_EQ(pool.stats()[0].largest_free, 16 * kMiB) << "the free ranges did not coalesce";
}

// The block is taken when the pool is made (phosd's start), not later in
// the background: the free memory apps see never drops under them.
TEST(ShadowPoolTest, TheBlockIsAllocatedBeforeTheConstructorReturns) {
  auto backend = SimBackend();
  std::uint64_t before = 0, after = 0, total = 0;
  ASSERT_TRUE(backend->GetMemoryInfo(0, &before, &total).ok());
  ShadowPool pool(backend.get(), Reserve(64 * kMiB));
  ASSERT_TRUE(backend->GetMemoryInfo(0, &after, &total).ok());
  EXPECT_EQ(after, before - 64 * kMiB);
  ASSERT_TRUE(pool.WaitUntilReady(60s));
  ASSERT_TRUE(backend->GetMemoryInfo(0, &after, &total).ok());
  EXPECT_EQ(after, before - 64 * kMiB);
}

TEST(ShadowPoolTest, ShutdownWhileFillingStopsAndFreesEverything) {
  auto backend = SimBackend();
  std::uint64_t free_before = 0, total = 0;
  ASSERT_TRUE(backend->GetMemoryInfo(0, &free_before, &total).ok());
  {
    ShadowPool pool(backend.get(), Reserve(256 * kMiB));
    pool.Shutdown();
    backend::DevicePtr p = 0;
    EXPECT_EQ(pool.Take(0, kMiB, &p).code(), Status::Code::kUnavailable);
  }
  std::uint64_t free_after = 0;
  ASSERT_TRUE(backend->GetMemoryInfo(0, &free_after, &total).ok());
  EXPECT_EQ(free_after, free_before) << "the reserve's memory was not freed";
}

}  // namespace
}  // namespace phos::engine
