// PTX interpreter: the ISA features third-party CUDA code uses (issue #16),
// kernels in isa_kernels.cu, each checked against a CPU reference on random
// data (seed printed on failure; PHOS_TEST_SEED=<n> replays it).
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <set>

#include "interp_harness.h"

namespace phos::interp::test {
namespace {

unsigned TestSeed() {
  if (const char* s = std::getenv("PHOS_TEST_SEED")) return static_cast<unsigned>(std::strtoul(s, nullptr, 10));
  return std::random_device{}();
}

class isa : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(h.Load("isa_kernels")); }
  Harness h;
  const unsigned seed = TestSeed();
  std::mt19937 rng{seed};
};

// cooperative_groups::coalesced_threads() aggregating an atomic: every
// selected thread gets a distinct slot, consecutive in lane order per warp.
TEST_F(isa, CoalescedThreadsAggregateAtomics) {
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int n = 1000;
  auto in = RandInts<int>(rng, n, 1, 1 << 30);
  int* counter = h.Alloc(std::vector<int>{0});
  int* slot = h.Alloc(RandInts<int>(rng, n, 5000, 6000));
  ASSERT_TRUE(h.Launch(h.Kernel("coalesced_inc"), {(n + 127) / 128}, {128},
                       Params().Add(h.Alloc(in)).Add(counter).Add(slot).Add(n)).ok());
  int selected = 0;
  std::set<int> slots;
  for (int i = 0; i < n; ++i) {
    if (in[i] % 3 == 0) {
      EXPECT_EQ(slot[i], -1) << i;
      continue;
    }
    ++selected;
    slots.insert(slot[i]);
  }
  EXPECT_EQ(*counter, selected);
  ASSERT_EQ(static_cast<int>(slots.size()), selected);
  EXPECT_EQ(*slots.begin(), 0);
  EXPECT_EQ(*slots.rbegin(), selected - 1);
  for (int w = 0; w * 32 < n; ++w) {
    int first = -1, rank = 0;
    for (int i = w * 32; i < std::min(n, w * 32 + 32); ++i) {
      if (in[i] % 3 == 0) continue;
      if (first < 0) first = slot[i];
      EXPECT_EQ(slot[i], first + rank) << i;
      ++rank;
    }
  }
}

// labeled_partition by key (match.any.sync) then reductions over each
// partition (redux.sync with each lane's own member mask): per key maxima
// and counts within each warp, values near INT_MAX.
TEST_F(isa, LabeledPartitionReducesPerKey) {
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int n = 1000;  // the last warp is partial
  auto key = RandInts<int>(rng, n, 0, 3);
  auto val = RandInts<int>(rng, n, INT_MAX - 100000, INT_MAX);
  int* mx = h.Alloc(RandInts<int>(rng, n, 1, 9));
  int* cnt = h.Alloc(RandInts<int>(rng, n, 1, 9));
  ASSERT_TRUE(h.Launch(h.Kernel("keyed_max"), {(n + 127) / 128}, {128},
                       Params().Add(h.Alloc(key)).Add(h.Alloc(val)).Add(mx).Add(cnt).Add(n)).ok());
  for (int i = 0; i < n; ++i) {
    const int w = i / 32;
    int want_max = INT_MIN, want_count = 0;
    for (int k = w * 32; k < std::min(n, w * 32 + 32); ++k) {
      if (key[k] != key[i]) continue;
      want_max = std::max(want_max, val[k]);
      ++want_count;
    }
    ASSERT_EQ(mx[i], want_max) << i;
    ASSERT_EQ(cnt[i], want_count) << i;
  }
}

// Independent thread scheduling: odd and even lanes shuffle at two
// different shfl.sync sites with the full mask and still exchange values.
TEST_F(isa, ShufflesAtDifferentSitesMeet) {
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int n = 256;
  auto in = RandInts<int>(rng, n, -100000, 100000);
  int* out = h.Alloc(RandInts<int>(rng, n, 1, 9));
  ASSERT_TRUE(h.Launch(h.Kernel("split_shfl"), {2}, {128}, Params().Add(h.Alloc(in)).Add(out)).ok());
  for (int i = 0; i < n; ++i) {
    const int src = (i & ~31) + (((i & 31) + 5) & 31);
    const int want = (src & 1) ? in[src] * 3 : in[src] + 1000;
    ASSERT_EQ(out[i], want) << i;
  }
}

}  // namespace
}  // namespace phos::interp::test
