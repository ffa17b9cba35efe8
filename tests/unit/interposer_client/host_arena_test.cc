// The pinned host arena's allocator (interposer/client/host_arena.h):
// first fit, alignment, coalescing, growth by segments, lookups, and
// many threads allocating and freeing at once (label `concurrency`: also
// run under TSan).
#include "interposer/client/host_arena.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

namespace phos::client {
namespace {

// Segments from plain aligned heap memory; records what it made.
struct FakeMaker {
  std::mutex mu;
  std::vector<std::unique_ptr<std::byte, void (*)(void*)>> made;
  std::atomic<int> calls{0};
  std::atomic<size_t> total{0};
  int fail_with = 0;

  SegmentMaker Get() {
    return [this](size_t bytes, HostSegment* out) -> int {
      calls.fetch_add(1);
      if (fail_with != 0) return fail_with;
      void* p = std::aligned_alloc(HostArena::kPage, bytes);
      std::lock_guard<std::mutex> lock(mu);
      made.emplace_back(static_cast<std::byte*>(p), std::free);
      total += bytes;
      *out = HostSegment{made.size(), static_cast<std::byte*>(p), bytes};
      return 0;
    };
  }
};

constexpr size_t kSeg = size_t{4} << 20;  // rounds up to kSegmentRound

TEST(HostArenaTest, AllocatesAlignedBlocksAndReusesFreedOnes) {
  FakeMaker m;
  HostArena a(m.Get(), kSeg);
  void* p = nullptr;
  ASSERT_EQ(a.Allocate(1, 0, &p), 0);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % HostArena::kGranule, 0u);
  void* q = nullptr;
  ASSERT_EQ(a.Allocate(10000, 0, &q), 0);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(q) % HostArena::kPage, 0u) << "a page or more starts on a page";
  EXPECT_NE(p, q);
  EXPECT_EQ(m.calls.load(), 1);
  EXPECT_EQ(a.segment_count(), 1u);
  std::memset(q, 0xab, 10000);  // the block is really usable
  EXPECT_TRUE(a.Free(q));
  void* r = nullptr;
  ASSERT_EQ(a.Allocate(10000, 0, &r), 0);
  EXPECT_EQ(r, q) << "first fit reuses the freed block";
  EXPECT_TRUE(a.Free(r));
  EXPECT_TRUE(a.Free(p));
  EXPECT_EQ(a.live_allocations(), 0u);
}

TEST(HostArenaTest, FreeOfUnknownOrInteriorPointerFails) {
  FakeMaker m;
  HostArena a(m.Get(), kSeg);
  void* p = nullptr;
  ASSERT_EQ(a.Allocate(4096, 0, &p), 0);
  int local = 0;
  EXPECT_FALSE(a.Free(&local));
  EXPECT_FALSE(a.Free(static_cast<std::byte*>(p) + 8));
  EXPECT_TRUE(a.Free(p));
  EXPECT_FALSE(a.Free(p)) << "double free";
}

TEST(HostArenaTest, CoalescesFreeNeighboursBackIntoOneBlock) {
  FakeMaker m;
  HostArena a(m.Get(), kSeg);
  const size_t whole = a.free_bytes();  // 0: no segment yet
  EXPECT_EQ(whole, 0u);
  std::vector<void*> ps(64);
  for (auto& p : ps) ASSERT_EQ(a.Allocate(8192, 0, &p), 0);
  const size_t seg_bytes = a.free_bytes() + 64 * 8192;
  // Free in an interleaved order: odd ones, then even ones.
  for (size_t i = 1; i < ps.size(); i += 2) EXPECT_TRUE(a.Free(ps[i]));
  EXPECT_LT(a.largest_free_block(), seg_bytes);
  for (size_t i = 0; i < ps.size(); i += 2) EXPECT_TRUE(a.Free(ps[i]));
  EXPECT_EQ(a.free_bytes(), seg_bytes);
  EXPECT_EQ(a.largest_free_block(), seg_bytes) << "everything coalesced into one block";
}

TEST(HostArenaTest, GrowsByNewSegmentsAndFitsLargeRequests) {
  FakeMaker m;
  HostArena a(m.Get(), kSeg);
  void* p = nullptr;
  ASSERT_EQ(a.Allocate(kSeg - 4096, 0, &p), 0);
  void* q = nullptr;
  ASSERT_EQ(a.Allocate(kSeg, 0, &q), 0);  // does not fit the first segment
  EXPECT_EQ(a.segment_count(), 2u);
  void* big = nullptr;
  ASSERT_EQ(a.Allocate(size_t{9} << 20, 0, &big), 0);  // larger than a default segment
  EXPECT_EQ(a.segment_count(), 3u);
  EXPECT_TRUE(a.InSegment(big, size_t{9} << 20));
}

TEST(HostArenaTest, LookupsCheckBoundsAndFlags) {
  FakeMaker m;
  HostArena a(m.Get(), kSeg);
  void* p = nullptr;
  ASSERT_EQ(a.Allocate(1000, 6, &p), 0);
  auto* b = static_cast<std::byte*>(p);
  HostArena::Allocation al;
  ASSERT_TRUE(a.FindAllocation(b + 999, &al));
  EXPECT_EQ(al.base, reinterpret_cast<uintptr_t>(p));
  EXPECT_EQ(al.bytes, 1000u);
  EXPECT_EQ(al.flags, 6u);
  EXPECT_FALSE(a.FindAllocation(b + 1000, nullptr));
  // Segment bounds: the whole segment is in, one byte past is not.
  auto* seg = m.made[0].get();
  const size_t seg_bytes = std::max(kSeg, HostArena::kSegmentRound);
  EXPECT_TRUE(a.InSegment(seg, seg_bytes));
  EXPECT_FALSE(a.InSegment(seg, seg_bytes + 1));
  EXPECT_FALSE(a.InSegment(seg + seg_bytes - 1, 2));
  EXPECT_FALSE(a.InSegment(reinterpret_cast<void*>(UINTPTR_MAX - 4), 100)) << "wrap-around";
  int local = 0;
  EXPECT_FALSE(a.InSegment(&local, 4));
  EXPECT_TRUE(a.Overlaps(seg - 10, 11));
  EXPECT_FALSE(a.Overlaps(seg - 10, 10));
}

TEST(HostArenaTest, MakerErrorsPassThrough) {
  FakeMaker m;
  m.fail_with = 46;
  HostArena a(m.Get(), kSeg);
  void* p = nullptr;
  EXPECT_EQ(a.Allocate(16, 0, &p), 46);
  EXPECT_EQ(a.segment_count(), 0u);
  EXPECT_EQ(a.Allocate(SIZE_MAX - 10, 0, &p), HostArena::kTooLarge);
}

TEST(HostArenaTest, ChildAfterForkForgetsTheParentsSegments) {
  FakeMaker m;
  HostArena a(m.Get(), kSeg);
  void* p = nullptr;
  ASSERT_EQ(a.Allocate(5000, 0, &p), 0);
  a.PrepareFork();
  a.ChildAfterFork();  // as in the child (in-process: the handlers are plain calls)
  EXPECT_EQ(a.segment_count(), 0u);
  EXPECT_FALSE(a.InSegment(p, 5000)) << "the parent's segment is not the child's: copies are staged";
  void* q = nullptr;
  ASSERT_EQ(a.Allocate(5000, 0, &q), 0);
  EXPECT_EQ(m.calls.load(), 2) << "a new segment for the child's session";
  EXPECT_TRUE(a.Free(p)) << "freeing an inherited block succeeds";
  EXPECT_FALSE(a.Free(p));
  EXPECT_TRUE(a.Free(q));
  a.PrepareFork();
  a.ParentAfterFork();
  EXPECT_EQ(a.segment_count(), 1u);
}

TEST(HostArenaTest, ManyThreadsAllocateAndFreeAtOnce) {
  FakeMaker m;
  HostArena a(m.Get(), kSeg);
  constexpr int kThreads = 8, kIters = 2000;
  std::atomic<int> errors{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t) {
    ts.emplace_back([&, t] {
      std::mt19937 rng(t);
      std::vector<std::pair<std::byte*, size_t>> mine;
      for (int i = 0; i < kIters; ++i) {
        if (mine.empty() || rng() % 3 != 0) {
          const size_t n = 1 + rng() % 20000;
          void* p = nullptr;
          if (a.Allocate(n, 0, &p) != 0) {
            errors++;
            continue;
          }
          std::memset(p, t + 1, n);  // overlapping blocks would be caught below
          mine.emplace_back(static_cast<std::byte*>(p), n);
        } else {
          const size_t k = rng() % mine.size();
          auto [p, n] = mine[k];
          for (size_t j = 0; j < n; j += 97) {
            if (p[j] != static_cast<std::byte>(t + 1)) errors++;
          }
          if (!a.InSegment(p, n) || !a.Free(p)) errors++;
          mine[k] = mine.back();
          mine.pop_back();
        }
      }
      for (auto [p, n] : mine) {
        if (!a.Free(p)) errors++;
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(a.live_allocations(), 0u);
  // Every byte of every segment is free again.
  EXPECT_EQ(a.segment_count(), m.made.size());
  EXPECT_EQ(a.free_bytes(), m.total.load());
}

}  // namespace
}  // namespace phos::client
