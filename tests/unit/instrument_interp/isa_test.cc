// PTX interpreter: the ISA features third-party CUDA code uses (issue #16),
// kernels in isa_kernels.cu, each checked against a CPU reference on random
// data (seed printed on failure; PHOS_TEST_SEED=<n> replays it).
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <set>
#include <type_traits>

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

// dp4a / dp2a against byte-wise dot products.
TEST_F(isa, Dp4aDp2a) {
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int n = 500;
  auto a = RandInts<int>(rng, n, INT_MIN, INT_MAX), b = RandInts<int>(rng, n, INT_MIN, INT_MAX);
  auto ua = RandInts<unsigned>(rng, n, 0, UINT_MAX), ub = RandInts<unsigned>(rng, n, 0, UINT_MAX);
  int* out_s = h.Alloc(RandInts<int>(rng, n, 1, 9));
  unsigned* out_u = h.Alloc(RandInts<unsigned>(rng, n, 1, 9));
  int* out_2 = h.Alloc(RandInts<int>(rng, n, 1, 9));
  ASSERT_TRUE(h.Launch(h.Kernel("dot_int8"), {4}, {128},
                       Params().Add(h.Alloc(a)).Add(h.Alloc(b)).Add(h.Alloc(ua)).Add(h.Alloc(ub)).Add(out_s).Add(out_u)
                           .Add(out_2).Add(n)).ok());
  auto sbyte = [](uint32_t v, int i) { return static_cast<int64_t>(static_cast<int8_t>(v >> (8 * i))); };
  auto ubyte = [](uint32_t v, int i) { return static_cast<int64_t>((v >> (8 * i)) & 0xFF); };
  for (int i = 0; i < n; ++i) {
    const uint32_t sa = static_cast<uint32_t>(a[i]), sb = static_cast<uint32_t>(b[i]);
    int64_t s = i, u = i;
    for (int k = 0; k < 4; ++k) {
      s += sbyte(sa, k) * sbyte(sb, k);
      u += ubyte(ua[i], k) * ubyte(ub[i], k);
    }
    const int64_t lo = 7 + static_cast<int16_t>(sa) * sbyte(sb, 0) + static_cast<int16_t>(sa >> 16) * sbyte(sb, 1);
    const int64_t hi = 3 + static_cast<int64_t>(ua[i] & 0xFFFF) * ubyte(ub[i], 2) +
                       static_cast<int64_t>(ua[i] >> 16) * ubyte(ub[i], 3);
    ASSERT_EQ(out_s[i], static_cast<int>(static_cast<uint32_t>(s))) << i;
    ASSERT_EQ(out_u[i], static_cast<uint32_t>(u)) << i;
    ASSERT_EQ(out_2[i], static_cast<int>(static_cast<uint32_t>(lo + hi))) << i;
  }
}

// Half-precision helpers for the references: GCC's _Float16 rounds each
// conversion correctly; every operation below is rounded explicitly.
uint16_t HalfBits(_Float16 h) {
  uint16_t u;
  std::memcpy(&u, &h, 2);
  return u;
}
_Float16 HalfOf(uint16_t u) {
  _Float16 h;
  std::memcpy(&h, &u, 2);
  return h;
}
_Float16 H(double v) { return static_cast<_Float16>(v); }

// Packed f16x2 fma/add/mul/sub/neg/abs/max/min, each half on its own.
TEST_F(isa, PackedHalfArithmetic) {
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int n = 600;
  auto rand_half2 = [&] {
    std::vector<uint32_t> v(n);
    std::uniform_int_distribution<int> d(-1024, 1024);
    for (auto& x : v) x = HalfBits(H(d(rng) / 256.0)) | static_cast<uint32_t>(HalfBits(H(d(rng) / 256.0))) << 16;
    return v;
  };
  auto a = rand_half2(), b = rand_half2(), c = rand_half2();
  uint32_t* out = h.Alloc(std::vector<uint32_t>(n, 0xDEADBEEF));
  ASSERT_TRUE(h.Launch(h.Kernel("half2_math"), {5}, {128},
                       Params().Add(h.Alloc(a)).Add(h.Alloc(b)).Add(h.Alloc(c)).Add(out).Add(n)).ok());
  for (int i = 0; i < n; ++i) {
    for (int half = 0; half < 2; ++half) {
      const double x_a = static_cast<double>(HalfOf(static_cast<uint16_t>(a[i] >> (16 * half))));
      const double x_b = static_cast<double>(HalfOf(static_cast<uint16_t>(b[i] >> (16 * half))));
      const double x_c = static_cast<double>(HalfOf(static_cast<uint16_t>(c[i] >> (16 * half))));
      double x = static_cast<double>(H(std::fma(x_a, x_b, x_c)));
      x = static_cast<double>(H(x + static_cast<double>(H(x_a * x_c))));
      x = static_cast<double>(H(x + x_b));
      x = std::max(x, std::fabs(x_c));
      x = std::min(x, 100.0);
      ASSERT_EQ(static_cast<uint16_t>(out[i] >> (16 * half)), HalfBits(H(x))) << i << " half " << half;
    }
  }
}

// bfloat16 of a float that is exact (the inputs keep every step exact in
// float), rounded to nearest even.
uint16_t Bf16Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}
float Bf16Value(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST_F(isa, PackedBf16Arithmetic) {
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int n = 600;
  auto rand_bf162 = [&] {
    std::vector<uint32_t> v(n);
    std::uniform_int_distribution<int> d(-64, 64);
    for (auto& x : v) x = Bf16Bits(d(rng) / 16.0f) | static_cast<uint32_t>(Bf16Bits(d(rng) / 16.0f)) << 16;
    return v;
  };
  auto a = rand_bf162(), b = rand_bf162();
  uint32_t* out = h.Alloc(std::vector<uint32_t>(n, 0xDEADBEEF));
  float* diff = h.Alloc(RandReals<float>(rng, n, 1, 2));
  ASSERT_TRUE(h.Launch(h.Kernel("bf162_math"), {5}, {128},
                       Params().Add(h.Alloc(a)).Add(h.Alloc(b)).Add(out).Add(diff).Add(n)).ok());
  for (int i = 0; i < n; ++i) {
    float got[2];
    for (int half = 0; half < 2; ++half) {
      const float x_a = Bf16Value(static_cast<uint16_t>(a[i] >> (16 * half)));
      const float x_b = Bf16Value(static_cast<uint16_t>(b[i] >> (16 * half)));
      float x = Bf16Value(Bf16Bits(x_a * x_b + x_a));
      x = Bf16Value(Bf16Bits(x * x_b));
      x = Bf16Value(Bf16Bits(x + x_a));
      ASSERT_EQ(static_cast<uint16_t>(out[i] >> (16 * half)), Bf16Bits(x)) << i << " half " << half;
      got[half] = x;
    }
    ASSERT_EQ(diff[i], got[0] - got[1]) << i;
  }
}

// cp.async (4-byte .ca into dynamic shared memory; 16-byte .cg with a
// zero-filled tail) with commit/wait groups.
TEST_F(isa, CpAsyncCopiesAndZeroFills) {
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int bs = 64, n = bs * 4 * 3;
  auto in = RandReals<float>(rng, n, -100, 100);
  float* out = h.Alloc(RandReals<float>(rng, n, 1, 2));
  ASSERT_TRUE(h.Launch(h.Kernel("async_copy"), {3}, {bs}, Params().Add(h.Alloc(in)).Add(out).Add(n),
                       4 * bs * sizeof(float)).ok());
  for (int i = 0; i < n; ++i) {
    const int base = i / (4 * bs) * 4 * bs, local = i - base;
    ASSERT_EQ(out[i], in[base + (local + 1) % (4 * bs)] * 2.0f) << i;
  }
  const int n4 = 256;
  auto in4 = RandReals<float>(rng, n4 * 4, -100, 100);
  float* out4 = h.Alloc(RandReals<float>(rng, n4 * 4, 1, 2));
  ASSERT_TRUE(h.Launch(h.Kernel("async_copy16"), {2}, {128}, Params().Add(h.Alloc(in4)).Add(out4).Add(n4)).ok());
  for (int j = 0; j < n4; ++j) {
    const int src = (j / 128) * 128 + 127 - (j % 128);
    const int keep = 4 - src % 4;
    for (int e = 0; e < 4; ++e) ASSERT_EQ(out4[j * 4 + e], e < keep ? in4[src * 4 + e] : 0.0f) << j << "." << e;
  }
}

// Calls through function pointers: a table of functions initialized at
// module load, and a pointer picked at run time.
TEST_F(isa, IndirectCallsThroughFunctionPointers) {
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int n = 700;
  auto sel = RandInts<int>(rng, n, 0, 1000);
  auto in = RandInts<int>(rng, n, -30000, 30000);
  int* out = h.Alloc(RandInts<int>(rng, n, 1, 9));
  ASSERT_TRUE(h.Launch(h.Kernel("indirect"), {6}, {128},
                       Params().Add(h.Alloc(sel)).Add(h.Alloc(in)).Add(out).Add(n)).ok());
  auto apply = [](int which, int v) { return which == 0 ? 2 * v : which == 1 ? v * v : -v; };
  for (int i = 0; i < n; ++i) {
    const int first = (sel[i] & 8) ? apply(sel[i] % 3, in[i]) : -in[i];
    ASSERT_EQ(out[i], first + apply((sel[i] + 1) % 3, i)) << i;
  }
}

// wmma tiles: C = scale * (C + A * B), A row-major m x k, B given as n
// rows of k (column-major k x n), C row-major; one warp per tile.
template <typename T, typename Make, typename ToDouble>
void CheckWmma(Harness& h, std::mt19937& rng, const char* kernel, int tm, int tn, int tk, double scale,
               Make make, ToDouble to_double, bool exact) {
  const int m = tm * 2, n = tn * 3, k = tk * 4;
  std::vector<T> a(static_cast<size_t>(m * k)), b(static_cast<size_t>(n * k));
  for (auto& v : a) v = make(rng);
  for (auto& v : b) v = make(rng);
  using C = std::conditional_t<std::is_same_v<T, signed char>, int, std::conditional_t<std::is_same_v<T, double>, double, float>>;
  std::vector<C> c0(static_cast<size_t>(m * n));
  std::uniform_int_distribution<int> d(-50, 50);
  for (auto& v : c0) v = static_cast<C>(d(rng));
  C* c = h.Alloc(c0);
  ASSERT_TRUE(h.Launch(h.Kernel(kernel), {static_cast<unsigned>(n / tn), static_cast<unsigned>(m / tm)}, {32},
                       Params().Add(h.Alloc(a)).Add(h.Alloc(b)).Add(c).Add(m).Add(n).Add(k)).ok())
      << kernel;
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double want = static_cast<double>(c0[static_cast<size_t>(i * n + j)]);
      for (int kk = 0; kk < k; ++kk) want += to_double(a[static_cast<size_t>(i * k + kk)]) * to_double(b[static_cast<size_t>(j * k + kk)]);
      want *= scale;
      const double got = static_cast<double>(c[static_cast<size_t>(i * n + j)]);
      if (exact) {
        ASSERT_EQ(got, want) << kernel << " " << i << "," << j;
      } else {
        ASSERT_TRUE(Near(got, want, 1e-5, 1e-4)) << kernel << " " << i << "," << j << ": " << got << " vs " << want;
      }
    }
  }
}

TEST_F(isa, WmmaTiles) {
  SCOPED_TRACE("seed " + std::to_string(seed));
  auto half = [](std::mt19937& r) {
    return HalfBits(H(std::uniform_int_distribution<int>(-256, 256)(r) / 64.0));
  };
  auto half_value = [](uint16_t u) { return static_cast<double>(HalfOf(u)); };
  CheckWmma<uint16_t>(h, rng, "wmma_f16P", 16, 16, 16, 0.5, half, half_value, false);
  CheckWmma<uint16_t>(h, rng, "wmma_f16_32x8", 32, 8, 16, 2.0, half, half_value, false);
  auto bf16 = [](std::mt19937& r) { return Bf16Bits(std::uniform_int_distribution<int>(-64, 64)(r) / 16.0f); };
  CheckWmma<uint16_t>(h, rng, "wmma_bf16", 16, 16, 16, 1.0, bf16, [](uint16_t u) { return double{Bf16Value(u)}; }, false);
  auto s8 = [](std::mt19937& r) { return static_cast<signed char>(std::uniform_int_distribution<int>(-128, 127)(r)); };
  CheckWmma<signed char>(h, rng, "wmma_s8", 16, 16, 16, 3.0, s8, [](signed char v) { return static_cast<double>(v); }, true);
  auto f64 = [](std::mt19937& r) { return std::uniform_real_distribution<double>(-1, 1)(r); };
  CheckWmma<double>(h, rng, "wmma_f64", 8, 8, 4, 1.0, f64, [](double v) { return v; }, false);
}

// tf32: A column-major, B row-major, C stored column-major from a zeroed
// accumulator; inputs exact in tf32 (11 significant bits).
TEST_F(isa, WmmaTf32ColumnMajor) {
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int m = 32, n = 48, k = 24;
  std::uniform_int_distribution<int> d(-2047, 2047);
  std::vector<float> a(m * k), b(k * n);
  for (auto& v : a) v = static_cast<float>(d(rng)) / 1024.0f;
  for (auto& v : b) v = static_cast<float>(d(rng)) / 1024.0f;
  float* c = h.Alloc(RandReals<float>(rng, m * n, 5, 6));
  ASSERT_TRUE(h.Launch(h.Kernel("wmma_tf32"), {n / 16, m / 16}, {32},
                       Params().Add(h.Alloc(a)).Add(h.Alloc(b)).Add(c).Add(m).Add(n).Add(k)).ok());
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double want = 0;
      for (int kk = 0; kk < k; ++kk) want += static_cast<double>(a[kk * m + i]) * b[kk * n + j];
      ASSERT_TRUE(Near(c[j * m + i], want, 1e-6, 1e-6)) << i << "," << j << ": " << c[j * m + i] << " vs " << want;
    }
  }
}

// printf from a kernel: the launch's DeviceOutput holds each thread's line,
// formatted as the host's printf formats the same values.
TEST_F(isa, DevicePrintfFormatsEveryConversion) {
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int n = 40;
  auto in = RandInts<int>(rng, n, -100000, 100000);
  auto d = RandReals<double>(rng, n, -500, 500);
  DeviceOutput out;
  ASSERT_TRUE(h.Launch(h.Kernel("print_values"), {2}, {32}, Params().Add(h.Alloc(in)).Add(h.Alloc(d)).Add(n), 0, 4,
                       &out).ok());
  std::string text;
  out.Take(SIZE_MAX, &text);
  std::multiset<std::string> got, want;
  for (size_t pos = 0; pos < text.size();) {
    const size_t nl = text.find('\n', pos);
    ASSERT_NE(nl, std::string::npos) << text;
    got.insert(text.substr(pos, nl + 1 - pos));
    pos = nl + 1;
  }
  for (int i = 0; i < n; ++i) {
    char line[512];
    std::snprintf(line, sizeof line, "t%d: %5d|%-4x|%08.3f|%lld|%c|%s|%+.2e|%u|%*d|%.*f|100%%\n", i, in[i],
                  static_cast<unsigned>(in[i]) & 0xfff, d[i], static_cast<long long>(in[i]) * 1000003LL,
                  'a' + (i % 26), (i & 1) ? "odd" : "even", d[i] * 1e10, static_cast<unsigned>(i), 6, -i, 2, d[i]);
    want.insert(line);
  }
  EXPECT_EQ(got, want);
  EXPECT_EQ(out.pending(), 0u);
  EXPECT_EQ(out.dropped(), 0u);
}

// A FIFO too small for every line keeps whole lines only and counts the rest.
TEST_F(isa, DevicePrintfFifoDropsWholeRecords) {
  const int n = 40;
  DeviceOutput out(200);
  ASSERT_TRUE(h.Launch(h.Kernel("print_values"), {2}, {32},
                       Params().Add(h.Alloc(RandInts<int>(rng, n, 1, 9))).Add(h.Alloc(RandReals<double>(rng, n, 1, 2))).Add(n),
                       0, 4, &out).ok());
  std::string text;
  out.Take(SIZE_MAX, &text);
  EXPECT_LE(text.size(), 200u);
  EXPECT_GT(out.dropped(), 0u);
  EXPECT_EQ(static_cast<uint64_t>(std::count(text.begin(), text.end(), '\n')) + out.dropped(), static_cast<uint64_t>(n));
}

// mbarrier through cuda::barrier: arrive_and_wait is mbarrier.arrive then a
// try_wait loop with back-off; threads that find the phase open yield.
TEST_F(isa, CudaBarrierRounds) {
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int bs = 128, n = bs * 3 - 50;  // the last block is partial
  auto in = RandInts<int>(rng, n, -100000, 100000);
  int* out = h.Alloc(RandInts<int>(rng, n * 3, 1, 9));
  ASSERT_TRUE(h.Launch(h.Kernel("barrier_rotate"), {3}, {bs}, Params().Add(h.Alloc(in)).Add(out).Add(n)).ok());
  for (int i = 0; i < n; ++i) {
    const int blk = i / bs, t = i % bs;
    for (int round = 0; round < 3; ++round) {
      const int j = blk * bs + (t + 1 + round) % bs;
      ASSERT_EQ(out[i * 3 + round], (j < n ? in[j] : 0) + round) << i << " round " << round;
    }
  }
}

// cuda::memcpy_async into shared memory with a barrier: a bulk copy whose
// complete_tx runs before the expect_tx, as libcu++ issues them.
TEST_F(isa, BulkCopyCompletesTransactions) {
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int blocks = 3;
  auto in = RandReals<float>(rng, blocks * 256, -50, 50);
  float* out = h.Alloc(RandReals<float>(rng, blocks * 256, 1, 2));
  ASSERT_TRUE(h.Launch(h.Kernel("bulk_copy_tile"), {blocks}, {256}, Params().Add(h.Alloc(in)).Add(out)).ok());
  for (int b = 0; b < blocks; ++b) {
    for (int t = 0; t < 256; ++t) ASSERT_EQ(out[b * 256 + t], in[b * 256 + 255 - t] * 3.0f) << b << "," << t;
  }
}

// A wait for a phase nobody completes is a deadlock the launch reports (a
// GPU would hang), after the waits were allowed to time out.
TEST(isa_errors, MbarrierWaitNobodyCompletesIsADeadlock) {
  Harness h;
  ASSERT_TRUE(h.LoadText(R"(
.version 8.0
.target sm_90
.address_size 64
.visible .entry stuck()
{
  .shared .align 8 .b64 bar;
  .reg .pred %p<2>;
  .reg .b32 %r<3>;
  .reg .b64 %rd<3>;
  mov.u32 %r1, bar;
  mov.u32 %r2, 64;
  mbarrier.init.shared.b64 [%r1], %r2;
  mbarrier.arrive.shared.b64 %rd1, [%r1];
$Lwait:
  mbarrier.try_wait.shared.b64 %p1, [%r1], %rd1;
  @!%p1 bra $Lwait;
  ret;
}
)"));
  Status st = h.Launch("stuck", {1}, {32}, Params());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("mbarrier phase"), std::string::npos) << st.ToString();
}

// bar.red: __syncthreads_count/_and/_or, the last block partial.
TEST_F(isa, BlockVotes) {
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int bs = 128, blocks = 4, n = bs * blocks - 37;
  auto in = RandInts<int>(rng, n, -60, 100);
  int* count = h.Alloc(std::vector<int>(blocks, -1));
  int* all = h.Alloc(std::vector<int>(blocks, -1));
  int* any = h.Alloc(std::vector<int>(blocks, -1));
  ASSERT_TRUE(h.Launch(h.Kernel("block_votes"), {blocks}, {bs},
                       Params().Add(h.Alloc(in)).Add(count).Add(all).Add(any).Add(n)).ok());
  for (int b = 0; b < blocks; ++b) {
    int c = 0;
    bool a = true, o = false;
    for (int t = 0; t < bs; ++t) {
      const int i = b * bs + t, v = i < n ? in[i] : 0;
      c += v > 0;
      a = a && v > -50;
      o = o || v > 90;
    }
    EXPECT_EQ(count[b], c) << b;
    EXPECT_EQ(all[b] != 0, a) << b;
    EXPECT_EQ(any[b] != 0, o) << b;
  }
}

// Named barrier 1 with 128 threads: 64 producers bar.arrive, 64 consumers
// bar.sync, then read every producer's value.
TEST_F(isa, NamedBarrierProducersConsumers) {
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int blocks = 3;
  auto in = RandInts<int>(rng, blocks * 64, -100000, 100000);
  int* out = h.Alloc(RandInts<int>(rng, blocks * 64, 1, 9));
  ASSERT_TRUE(h.Launch(h.Kernel("producer_consumer"), {blocks}, {128}, Params().Add(h.Alloc(in)).Add(out)).ok());
  for (int b = 0; b < blocks; ++b) {
    for (int t = 0; t < 64; ++t) ASSERT_EQ(out[b * 64 + t], in[b * 64 + 63 - t] * 2 + 1) << b << "," << t;
  }
}

// elect.sync: the lowest lane of the member mask leads; its count of the
// mask's lanes is added once per warp.
TEST_F(isa, ElectSyncPicksTheLowestLane) {
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int n = 300;
  auto in = RandInts<int>(rng, n, 0, 1000);
  int* counts = h.Alloc(std::vector<int>((n + 31) / 32, 0));
  int* leaders = h.Alloc(std::vector<int>(n, -1));
  ASSERT_TRUE(h.Launch(h.Kernel("elect_leaders"), {3}, {128},
                       Params().Add(h.Alloc(in)).Add(counts).Add(leaders).Add(n)).ok());
  for (int w = 0; w * 32 < n; ++w) {
    int lowest = -1, odd = 0;
    for (int i = w * 32; i < std::min(n, w * 32 + 32); ++i) {
      if (!(in[i] & 1)) continue;
      if (lowest < 0) lowest = i % 32;
      ++odd;
    }
    EXPECT_EQ(counts[w], odd) << w;
    for (int i = w * 32; i < std::min(n, w * 32 + 32); ++i) {
      EXPECT_EQ(leaders[i], (in[i] & 1) ? lowest : -1) << i;
    }
  }
}

// mma.sync with ldmatrix-built fragments (the ISA's layouts, as CUTLASS
// uses them): C += A * B per warp, f16 inputs, f32 accumulators.
TEST_F(isa, MmaSyncWithLdmatrixFragments) {
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int tiles = 3;
  std::uniform_int_distribution<int> d(-64, 64);
  std::vector<uint16_t> a(tiles * 256), b(tiles * 128);
  for (auto& v : a) v = HalfBits(H(d(rng) / 16.0));
  for (auto& v : b) v = HalfBits(H(d(rng) / 16.0));
  auto c0 = RandReals<float>(rng, tiles * 128, -10, 10);
  float* c = h.Alloc(c0);
  ASSERT_TRUE(h.Launch(h.Kernel("mma_f16_tile"), {tiles}, {32}, Params().Add(h.Alloc(a)).Add(h.Alloc(b)).Add(c)).ok());
  for (int tile = 0; tile < tiles; ++tile) {
    for (int i = 0; i < 16; ++i) {
      for (int j = 0; j < 8; ++j) {
        double want = c0[tile * 128 + i * 8 + j];
        for (int k = 0; k < 16; ++k) {
          want += static_cast<double>(HalfOf(a[tile * 256 + i * 16 + k])) * static_cast<double>(HalfOf(b[tile * 128 + k * 8 + j]));
        }
        ASSERT_TRUE(Near(c[tile * 128 + i * 8 + j], want, 1e-6, 1e-5)) << tile << ": " << i << "," << j;
      }
    }
  }
}

TEST_F(isa, MmaSyncF64) {
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int tiles = 2;
  auto a = RandReals<double>(rng, tiles * 32, -1, 1), b = RandReals<double>(rng, tiles * 32, -1, 1);
  auto c0 = RandReals<double>(rng, tiles * 64, -1, 1);
  double* c = h.Alloc(c0);
  ASSERT_TRUE(h.Launch(h.Kernel("mma_f64_tile"), {tiles}, {32}, Params().Add(h.Alloc(a)).Add(h.Alloc(b)).Add(c)).ok());
  for (int tile = 0; tile < tiles; ++tile) {
    for (int i = 0; i < 8; ++i) {
      for (int j = 0; j < 8; ++j) {
        double want = c0[tile * 64 + i * 8 + j];
        for (int k = 0; k < 4; ++k) want = std::fma(a[tile * 32 + i * 4 + k], b[tile * 32 + k * 8 + j], want);
        ASSERT_TRUE(Near(c[tile * 64 + i * 8 + j], want, 1e-14, 1e-14)) << tile << ": " << i << "," << j;
      }
    }
  }
}

// What stays unsupported is refused by name at launch, saying what it is.
// brx.idx through a .branchtargets list (what LLVM's NVPTX backend emits
// for a dense switch; nvcc's NVVM uses branch trees): the lanes of a warp
// jump to different labels by their own index, meet again after, and an
// index past the list fails the launch by name. Registers set on only some
// targets must read 0 on the others (entry-register analysis follows every
// target).
TEST_F(isa, BrxIdxJumpsThroughItsBranchTargets) {
  SCOPED_TRACE("seed " + std::to_string(seed));
  Harness hx;
  ASSERT_TRUE(hx.LoadText(R"(
.version 8.0
.target sm_90
.address_size 64
.visible .entry switch4(.param .u64 in, .param .u64 out)
{
  .reg .b32 %r<8>;
  .reg .b64 %rd<6>;
  ld.param.u64 %rd1, [in];
  ld.param.u64 %rd2, [out];
  mov.u32 %r5, %ctaid.x;
  mov.u32 %r6, %ntid.x;
  mov.u32 %r7, %tid.x;
  mad.lo.u32 %r1, %r5, %r6, %r7;
  mul.wide.u32 %rd3, %r1, 4;
  add.s64 %rd4, %rd1, %rd3;
  ld.global.u32 %r2, [%rd4];
  add.s64 %rd5, %rd2, %rd3;
  ts: .branchtargets $L_a, $L_b, $L_c, $L_d;
  brx.idx %r2, ts;
$L_a:
  mov.u32 %r3, 100;
  bra.uni $L_join;
$L_b:
  mul.lo.u32 %r3, %r1, 3;
  bra.uni $L_join;
$L_c:
  mov.u32 %r4, 7;
  add.u32 %r3, %r1, %r4;
  bra.uni $L_join;
$L_d:
  mov.u32 %r3, 0;
  add.u32 %r3, %r3, %r4;
$L_join:
  st.global.u32 [%rd5], %r3;
  ret;
}
)"));
  // Blocks run one after another on the same warps: block 0's lanes at
  // $L_c set %r4, block 1's at $L_d read it, and must read 0.
  const int bs = 64, blocks = 4, n = bs * blocks;
  std::vector<unsigned> idx = RandInts<unsigned>(rng, n, 0, 3);
  idx[0] = 0, idx[1] = 1, idx[2] = 2, idx[3] = 3;  // every target in warp 0
  for (int i = 0; i < bs; ++i) idx[i] = i % 2 ? 2 : idx[i], idx[bs + i] = 3;
  unsigned* out = hx.Alloc(RandInts<unsigned>(rng, n, 5000, 6000));
  ASSERT_TRUE(hx.Launch(hx.Kernel("switch4"), {blocks}, {bs}, Params().Add(hx.Alloc(idx)).Add(out), 0, 1).ok());
  for (int i = 0; i < n; ++i) {
    const unsigned want = idx[i] == 0 ? 100u : idx[i] == 1 ? 3u * i : idx[i] == 2 ? i + 7u : 0u;  // %r4 unset: 0
    EXPECT_EQ(out[i], want) << "thread " << i << " index " << idx[i];
  }
  std::vector<unsigned> bad(n, 1);
  bad[37] = 4;
  Status st = hx.Launch(hx.Kernel("switch4"), {blocks}, {bs}, Params().Add(hx.Alloc(bad)).Add(out));
  EXPECT_EQ(st.code(), Status::Code::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find("brx.idx index 4 is past its .branchtargets list of 4 labels"), std::string::npos)
      << st.ToString();
}

TEST(isa_errors, DeviceLaunchIsRefusedByName) {
  Harness h;
  ASSERT_TRUE(h.LoadText(R"(
.version 8.0
.target sm_90
.address_size 64
.extern .func (.param .b64 func_retval0) __cudaCDP2GetParameterBufferV2(.param .b64 a, .param .b64 b, .param .b64 c);
.visible .entry launcher()
{
  .reg .b64 %rd<2>;
  { .param .b64 a; .param .b64 b; .param .b64 c; .param .b64 r;
    st.param.b64 [a], 0; st.param.b64 [b], 64; st.param.b64 [c], 16;
    call.uni (r), __cudaCDP2GetParameterBufferV2, (a, b, c);
    ld.param.b64 %rd1, [r]; }
  ret;
}
)"));
  Status st = h.Launch("launcher", {1}, {1}, Params());
  EXPECT_EQ(st.code(), Status::Code::kNotSupported) << st.ToString();
  EXPECT_NE(st.message().find("dynamic parallelism"), std::string::npos) << st.ToString();
}

// The device heap (ops_heap.cc): blocks malloc'ed by one launch are read
// and freed by another (the allocator's state lives in the heap), a
// request larger than the heap is NULL, freed memory is reused, a double
// free fails the launch naming it, and without a heap malloc fails.
TEST(isa_heap, MallocInOneLaunchFreeInAnother) {
  Harness h;
  ASSERT_TRUE(h.LoadText(R"(
.version 8.0
.target sm_90
.address_size 64
.extern .func (.param .b64 func_retval0) malloc(.param .b64 n);
.extern .func free(.param .b64 p);
.visible .entry alloc(.param .u64 ptrs, .param .u64 want)
{
  .reg .b32 %r<4>;
  .reg .b64 %rd<8>;
  .reg .pred %p<2>;
  ld.param.u64 %rd1, [ptrs];
  ld.param.u64 %rd6, [want];
  mov.u32 %r1, %tid.x;
  { .param .b64 n; .param .b64 r;
    st.param.b64 [n], %rd6;
    call.uni (r), malloc, (n);
    ld.param.b64 %rd2, [r]; }
  mul.wide.u32 %rd3, %r1, 8;
  add.u64 %rd4, %rd1, %rd3;
  st.global.u64 [%rd4], %rd2;
  setp.eq.u64 %p1, %rd2, 0;
  @%p1 bra DONE;
  st.global.u32 [%rd2], %r1;
DONE:
  ret;
}
.visible .entry readfree(.param .u64 ptrs, .param .u64 out)
{
  .reg .b32 %r<4>;
  .reg .b64 %rd<8>;
  .reg .pred %p<2>;
  ld.param.u64 %rd1, [ptrs];
  ld.param.u64 %rd5, [out];
  mov.u32 %r1, %tid.x;
  mul.wide.u32 %rd3, %r1, 8;
  add.u64 %rd4, %rd1, %rd3;
  ld.global.u64 %rd2, [%rd4];
  ld.global.u32 %r2, [%rd2];
  mul.wide.u32 %rd6, %r1, 4;
  add.u64 %rd7, %rd5, %rd6;
  st.global.u32 [%rd7], %r2;
  { .param .b64 p;
    st.param.b64 [p], %rd2;
    call.uni free, (p); }
  ret;
}
)"));
  constexpr unsigned kThreads = 100;
  std::vector<uint8_t> heap(1 << 16, 0);
  h.heap_base = reinterpret_cast<uint64_t>(h.Alloc(heap));
  h.heap_bytes = heap.size();
  uint64_t* ptrs = h.Alloc(std::vector<uint64_t>(kThreads, 0));
  uint32_t* out = h.Alloc(std::vector<uint32_t>(kThreads, 0));
  ASSERT_TRUE(h.Launch("alloc", {1}, {kThreads}, Params().Add(ptrs).Add(uint64_t{24})).ok());
  std::set<uint64_t> distinct;
  for (unsigned i = 0; i < kThreads; ++i) {
    ASSERT_NE(ptrs[i], 0u) << i;
    EXPECT_EQ(ptrs[i] % 16, 0u) << i;
    EXPECT_GE(ptrs[i], h.heap_base);
    EXPECT_LE(ptrs[i] + 24, h.heap_base + h.heap_bytes);
    distinct.insert(ptrs[i]);
  }
  EXPECT_EQ(distinct.size(), kThreads);
  ASSERT_TRUE(h.Launch("readfree", {1}, {kThreads}, Params().Add(ptrs).Add(out)).ok());
  for (unsigned i = 0; i < kThreads; ++i) EXPECT_EQ(out[i], i);
  // Everything was freed: 100 blocks of 600 bytes fit again (60 000 of 64 KiB).
  ASSERT_TRUE(h.Launch("alloc", {1}, {kThreads}, Params().Add(ptrs).Add(uint64_t{600})).ok());
  for (unsigned i = 0; i < kThreads; ++i) EXPECT_NE(ptrs[i], 0u) << i;
  ASSERT_TRUE(h.Launch("readfree", {1}, {kThreads}, Params().Add(ptrs).Add(out)).ok());
  // More than the heap holds: NULL, as CUDA.
  ASSERT_TRUE(h.Launch("alloc", {1}, {1}, Params().Add(ptrs).Add(uint64_t{1} << 20)).ok());
  EXPECT_EQ(ptrs[0], 0u);
  // A double free fails the launch, naming it.
  ASSERT_TRUE(h.Launch("alloc", {1}, {1}, Params().Add(ptrs).Add(uint64_t{8})).ok());
  ASSERT_TRUE(h.Launch("readfree", {1}, {1}, Params().Add(ptrs).Add(out)).ok());
  Status st = h.Launch("readfree", {1}, {1}, Params().Add(ptrs).Add(out));
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("not a live block of the device heap"), std::string::npos) << st.message();
  // No heap: malloc fails the launch.
  h.heap_base = h.heap_bytes = 0;
  st = h.Launch("alloc", {1}, {1}, Params().Add(ptrs).Add(uint64_t{8}));
  EXPECT_NE(st.message().find("without a device heap"), std::string::npos) << st.message();
}

// Aligned device allocations (ops_heap.cc): __nv_aligned_device_malloc and
// an over-aligned `new`, as nvcc lowers them, give aligned, distinct,
// non-overlapping blocks inside the heap that hold what the thread wrote;
// an alignment that is not a power of two gives NULL; everything freed, the
// heap takes as many again.
TEST_F(isa, AlignedDeviceMallocAndOverAlignedNew) {
  SCOPED_TRACE("seed " + std::to_string(seed));
  constexpr int kThreads = 64;
  std::vector<uint8_t> heap(1 << 17, 0);
  h.heap_base = reinterpret_cast<uint64_t>(h.Alloc(heap));
  h.heap_bytes = heap.size();
  auto in = RandReals<float>(rng, kThreads, -4, 4);
  uint64_t* ptrs = h.Alloc(std::vector<uint64_t>(2 * kThreads, 1));
  float* out = h.Alloc(RandReals<float>(rng, kThreads, 100, 200));
  const float* din = h.Alloc(in);
  for (int round = 0; round < 2; ++round) {
    ASSERT_TRUE(h.Launch(h.Kernel("aligned_allocs"), {1}, {kThreads},
                         Params().Add(ptrs).Add(din).Add(out).Add(uint64_t{256})).ok());
    std::vector<std::pair<uint64_t, uint64_t>> blocks;  // [begin, end)
    for (int t = 0; t < kThreads; ++t) {
      const uint64_t p = ptrs[2 * t], q = ptrs[2 * t + 1];
      ASSERT_NE(p, 0u) << t;
      ASSERT_NE(q, 0u) << t;
      EXPECT_EQ(p % 256, 0u) << t;
      EXPECT_EQ(q % 128, 0u) << t;
      blocks.push_back({p, p + 4 * (t + 1)});
      blocks.push_back({q, q + 160});
      float s = 0;
      for (int i = 0; i <= t; ++i) s += in[t] * static_cast<float>(i + 1);
      for (int i = 0; i < 40; ++i) s += in[t] + static_cast<float>(i);
      EXPECT_EQ(out[t], s) << t;
    }
    std::sort(blocks.begin(), blocks.end());
    for (size_t i = 0; i < blocks.size(); ++i) {
      EXPECT_GE(blocks[i].first, h.heap_base);
      EXPECT_LE(blocks[i].second, h.heap_base + h.heap_bytes);
      if (i > 0) EXPECT_LE(blocks[i - 1].second, blocks[i].first) << "blocks overlap";
    }
  }
  // 48 is not a power of two: NULL (the over-aligned new still works).
  ASSERT_TRUE(h.Launch(h.Kernel("aligned_allocs"), {1}, {kThreads},
                       Params().Add(ptrs).Add(din).Add(out).Add(uint64_t{48})).ok());
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(ptrs[2 * t], 0u) << t;
    EXPECT_NE(ptrs[2 * t + 1], 0u) << t;
  }
  h.heap_base = h.heap_bytes = 0;
}

// The fp8 formats, decoded here from their definitions (OCP FP8, PTX ISA
// "Alternate floating point data formats"), independently of the
// interpreter; NaN for the NaN codes.
double Fp8Value(bool e5m2, uint8_t b) {
  const int mant_bits = e5m2 ? 2 : 3, bias = e5m2 ? 15 : 7;
  const int exp = (b & 0x7F) >> mant_bits, mant = b & ((1 << mant_bits) - 1);
  const double sign = (b & 0x80) ? -1 : 1;
  if (!e5m2 && (b & 0x7F) == 0x7F) return NAN;
  if (e5m2 && exp == 31) return mant == 0 ? sign * INFINITY : NAN;
  if (exp == 0) return sign * mant * std::ldexp(1.0, 1 - bias - mant_bits);
  return sign * (1 + mant / double(1 << mant_bits)) * std::ldexp(1.0, exp - bias);
}
// v rounded to the nearest fp8 value (ties to the even code), saturating to
// the largest finite one: found by walking every code, not by arithmetic.
uint8_t Fp8Nearest(bool e5m2, double v) {
  if (std::isnan(v)) return 0x7F;
  const uint8_t max_code = e5m2 ? 0x7B : 0x7E;
  const double a = std::fabs(v);
  if (a >= Fp8Value(e5m2, max_code)) return static_cast<uint8_t>((std::signbit(v) ? 0x80 : 0) | max_code);  // .satfinite
  uint8_t best = 0;
  for (uint8_t c = 1; c <= max_code; ++c) {
    const double dc = std::fabs(Fp8Value(e5m2, c) - a), db = std::fabs(Fp8Value(e5m2, best) - a);
    if (dc < db || (dc == db && (c & 1) == 0)) best = c;
  }
  return static_cast<uint8_t>((std::signbit(v) ? 0x80 : 0) | best);
}

// float -> fp8 (rounded, saturated), fp8 -> float, half2 -> an fp8 pair,
// on values across both formats' ranges: subnormals, ties, beyond the
// maxima, infinities, NaN.
TEST_F(isa, Fp8ConversionsRoundSaturateAndComeBack) {
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int n = 512;
  std::vector<float> in(n);
  std::uniform_int_distribution<int> pick(0, 5);
  std::uniform_real_distribution<double> mant(-1, 1);
  std::uniform_int_distribution<int> ex(-20, 17);
  for (float& v : in) {
    switch (pick(rng)) {
      case 0: v = static_cast<float>(mant(rng) * std::ldexp(1.0, ex(rng))); break;  // wide range
      case 1: v = static_cast<float>(Fp8Value(false, static_cast<uint8_t>(rng() & 0x7E)) *
                                     (rng() & 1 ? 1 : -1) * 1.0625);  // near e4m3 values, some ties
              break;
      case 2: v = static_cast<float>(mant(rng) * 600); break;  // around e4m3's 448
      case 3: v = static_cast<float>(mant(rng) * 70000); break;  // around e5m2's 57344
      case 4: v = static_cast<float>(mant(rng) * std::ldexp(1.0, -14)); break;  // subnormals
      default: v = static_cast<float>(mant(rng) * 10); break;
    }
  }
  in[0] = INFINITY, in[1] = -INFINITY, in[2] = NAN, in[3] = 0.0f, in[4] = -0.0f, in[5] = 464.0f, in[6] = 460.0f;
  auto* e4 = h.Alloc(std::vector<uint8_t>(n, 0x11));
  auto* e5 = h.Alloc(std::vector<uint8_t>(n, 0x11));
  auto* back4 = h.Alloc(std::vector<float>(n, 7.0f));
  auto* back5 = h.Alloc(std::vector<float>(n, 7.0f));
  auto* pair4 = h.Alloc(std::vector<uint16_t>(n, 0x1111));
  auto* pair5 = h.Alloc(std::vector<uint16_t>(n, 0x1111));
  ASSERT_TRUE(h.Launch(h.Kernel("fp8_convert"), {n / 128}, {128},
                       Params().Add(h.Alloc(in)).Add(e4).Add(e5).Add(back4).Add(back5).Add(pair4).Add(pair5).Add(n))
                  .ok());
  for (int i = 0; i < n; ++i) {
    const double v = in[i];
    ASSERT_EQ(e4[i], Fp8Nearest(false, v)) << i << ": " << v;
    ASSERT_EQ(e5[i], Fp8Nearest(true, v)) << i << ": " << v;
    const double b4 = Fp8Value(false, e4[i]), b5 = Fp8Value(true, e5[i]);
    if (std::isnan(b4)) EXPECT_TRUE(std::isnan(back4[i])) << i;
    else EXPECT_EQ(back4[i], static_cast<float>(b4)) << i;
    if (std::isnan(b5)) EXPECT_TRUE(std::isnan(back5[i])) << i;
    else EXPECT_EQ(back5[i], static_cast<float>(b5)) << i;
    // The pair: __floats2half2_rn puts in[i] in the low half, -in[i]/2 in
    // the high one; each half goes to the byte at its place.
    const double lo = static_cast<double>(H(in[i])), hi = static_cast<double>(H(-in[i] * 0.5f));
    EXPECT_EQ(pair4[i], Fp8Nearest(false, hi) << 8 | Fp8Nearest(false, lo)) << i << ": " << v;
    EXPECT_EQ(pair5[i], Fp8Nearest(true, hi) << 8 | Fp8Nearest(true, lo)) << i << ": " << v;
  }
}

// mma.sync m16n8k32 with e4m3 and e5m2 inputs: D = A*B + C against a CPU
// product of the decoded values (exact in double, rounded once to float).
TEST_F(isa, MmaSyncFp8) {
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (bool e5m2 : {false, true}) {
    std::vector<uint8_t> a(16 * 32), b(32 * 8);
    auto finite_code = [&] {
      for (;;) {
        const uint8_t c = static_cast<uint8_t>(rng());
        if (!std::isnan(Fp8Value(e5m2, c)) && !std::isinf(Fp8Value(e5m2, c)) && std::fabs(Fp8Value(e5m2, c)) < 64) {
          return c;
        }
      }
    };
    for (auto& v : a) v = finite_code();
    for (auto& v : b) v = finite_code();
    auto c0 = RandReals<float>(rng, 16 * 8, -100, 100);
    float* c = h.Alloc(c0);
    ASSERT_TRUE(h.Launch(h.Kernel(e5m2 ? "mma_e5m2_tile" : "mma_e4m3_tile"), {1}, {32},
                         Params().Add(h.Alloc(a)).Add(h.Alloc(b)).Add(c))
                    .ok());
    for (int r = 0; r < 16; ++r) {
      for (int col = 0; col < 8; ++col) {
        double want = c0[r * 8 + col];
        for (int k = 0; k < 32; ++k) want += Fp8Value(e5m2, a[r * 32 + k]) * Fp8Value(e5m2, b[k * 8 + col]);
        EXPECT_EQ(c[r * 8 + col], static_cast<float>(want)) << (e5m2 ? "e5m2" : "e4m3") << " " << r << "," << col;
      }
    }
  }
}

// ldmatrix.trans then stmatrix: a 16x16 half tile comes out transposed.
TEST_F(isa, StmatrixStoresWhatLdmatrixLoaded) {
  SCOPED_TRACE("seed " + std::to_string(seed));
  auto in = RandInts<uint16_t>(rng, 256, 1, 0x7BFF);
  uint16_t* out = h.Alloc(std::vector<uint16_t>(256, 0));
  ASSERT_TRUE(h.Launch(h.Kernel("stmatrix_transpose"), {1}, {32}, Params().Add(h.Alloc(in)).Add(out)).ok());
  for (int r = 0; r < 16; ++r) {
    for (int c = 0; c < 16; ++c) ASSERT_EQ(out[r * 16 + c], in[c * 16 + r]) << r << "," << c;
  }
}

// A call whose return operand is not a call-site .param variable (a module
// variable here; ptxas would reject it) fails the launch by name instead
// of writing at the variable's address as an offset into phosd's memory
// (found by ptx_interp_fuzz through vprintf's return).
TEST(isa_errors, CallReturnOutsideTheParamSpaceFails) {
  Harness h;
  ASSERT_TRUE(h.LoadText(R"(
.version 8.0
.target sm_90
.address_size 64
.global .align 8 .b64 g;
.extern .func (.param .b32 func_retval0) vprintf(.param .b64 a, .param .b64 b);
.func (.param .b32 r) one()
{
  st.param.b32 [r], 1;
  ret;
}
.visible .entry bad_ret()
{
  call.uni (g), one, ();
  ret;
}
.visible .entry bad_printf_ret()
{
  { .param .b64 a; .param .b64 b;
    st.param.b64 [a], 0; st.param.b64 [b], 0;
    call.uni (g), vprintf, (a, b); }
  ret;
}
)"));
  for (const char* kernel : {"bad_ret", "bad_printf_ret"}) {
    Status st = h.Launch(kernel, {1}, {1}, Params());
    ASSERT_FALSE(st.ok()) << kernel;
    EXPECT_NE(st.message().find("outside the caller's .param space"), std::string::npos) << st.ToString();
  }
}

}  // namespace
}  // namespace phos::interp::test
