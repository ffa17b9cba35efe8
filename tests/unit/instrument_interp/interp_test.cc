// PTX interpreter: one test per instruction family (kernels in
// interp_kernels.cu) plus error behaviour on hand-written PTX.
#include <climits>
#include <cmath>

#include "interp_harness.h"

namespace phos::interp::test {
namespace {

class interp : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(h.Load("interp_kernels")); }
  Harness h;
  std::mt19937 rng{42};
};

TEST_F(interp, AtomicsContendAcrossBlocks) {
  const int n = 4096, bs = 128, blocks = n / bs;
  auto in = RandInts<unsigned>(rng, n, 1, 0x7FFFFFFF);
  unsigned* u32 = h.Alloc(std::vector<unsigned>{5});
  auto* u64 = h.Alloc(std::vector<unsigned long long>{7});
  float* f32 = h.Alloc(std::vector<float>{1.0f});
  double* f64 = h.Alloc(std::vector<double>{2.0});
  int* smin = h.Alloc(std::vector<int>{INT_MAX});
  int* smax = h.Alloc(std::vector<int>{INT_MIN});
  unsigned* bor = h.Alloc(std::vector<unsigned>{0x80000000u});
  unsigned* band = h.Alloc(std::vector<unsigned>{0xFFFFFFFFu});
  unsigned* bxor = h.Alloc(std::vector<unsigned>{0x12345678u});
  unsigned* inc = h.Alloc(std::vector<unsigned>{3});
  unsigned* cas = h.Alloc(std::vector<unsigned>{1});
  unsigned* sums = h.Alloc(RandInts<unsigned>(rng, blocks, 1, 9));
  ASSERT_TRUE(h.Launch(h.Kernel("atomics"), {blocks}, {bs},
                       Params().Add(h.Alloc(in)).Add(n).Add(u32).Add(u64).Add(f32).Add(f64).Add(smin).Add(smax)
                           .Add(bor).Add(band).Add(bxor).Add(inc).Add(cas).Add(sums)).ok());
  unsigned r32 = 5, ror = 0x80000000u, rand_ = 0xFFFFFFFFu, rxor = 0x12345678u, rcas = 1;
  unsigned long long r64 = 7;
  double rf = 1.0, rd = 2.0;
  int rmin = INT_MAX, rmax = INT_MIN;
  for (int i = 0; i < n; ++i) {
    unsigned v = in[i];
    r32 += v & 0xFFFF;
    r64 += static_cast<unsigned long long>(v) * 3;
    rf += v & 0xFF;
    rd += (v & 0xFFF) * 0.5;
    rmin = std::min(rmin, static_cast<int>(v));
    rmax = std::max(rmax, static_cast<int>(v));
    ror |= v & 0x0F0F0F0F;
    rand_ &= v | 0x10101010;
    rxor ^= v;
    rcas = std::max(rcas, v >> 1);
  }
  EXPECT_EQ(*u32, r32);
  EXPECT_EQ(*u64, r64);
  EXPECT_EQ(*f32, static_cast<float>(rf));  // integers < 2^24: exact in any order
  EXPECT_EQ(*f64, rd);
  EXPECT_EQ(*smin, rmin);
  EXPECT_EQ(*smax, rmax);
  EXPECT_EQ(*bor, ror);
  EXPECT_EQ(*band, rand_);
  EXPECT_EQ(*bxor, rxor);
  EXPECT_EQ(*inc, (3u + n) % 1001u);
  EXPECT_EQ(*cas, rcas);
  for (int b = 0; b < blocks; ++b) {
    unsigned s = 0;
    for (int i = b * bs; i < (b + 1) * bs; ++i) s += in[i] & 0xFF;
    EXPECT_EQ(sums[b], s);
  }
}

// grid.sync() of a cooperative launch: every block runs at once and waits
// for the others at each barrier; more blocks than host cores.
TEST_F(interp, CooperativeGridSyncWaitsForEveryBlock) {
  const int bs = 64, blocks = 12, n = bs * blocks, rounds = 3;
  auto init = RandInts<int>(rng, n, -1000, 1000);
  int* data = h.Alloc(init);
  int* out = h.Alloc(std::vector<int>(n, 0x5a5a5a5a));
  auto* workspace = h.Alloc(std::vector<unsigned>{0, 0});
  ASSERT_TRUE(h.LaunchCooperative(h.Kernel("grid_sync_rounds"), {blocks}, {bs},
                                  Params().Add(data).Add(out).Add(n).Add(rounds),
                                  reinterpret_cast<uint64_t>(workspace)).ok());
  std::vector<int> ref = init, acc(n, 0);
  for (int r = 0; r < rounds; ++r) {
    for (int i = 0; i < n; ++i) ref[i] += i + r;
    for (int i = 0; i < n; ++i) acc[i] += ref[(i + bs) % n];
  }
  for (int i = 0; i < n; ++i) ASSERT_EQ(out[i], acc[i]) << "element " << i;
  for (int i = 0; i < n; ++i) ASSERT_EQ(data[i], ref[i]) << "element " << i;
}

// Without a grid workspace (a plain launch), grid.sync() traps, as on a GPU.
TEST_F(interp, GridSyncWithoutAWorkspaceTraps) {
  const int bs = 32, blocks = 2, n = bs * blocks;
  int* data = h.Alloc(std::vector<int>(n, 1));
  int* out = h.Alloc(std::vector<int>(n, 0));
  Status s = h.LaunchCooperative(h.Kernel("grid_sync_rounds"), {blocks}, {bs},
                                 Params().Add(data).Add(out).Add(n).Add(1), 0);
  EXPECT_EQ(s.code(), Status::Code::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find("trap"), std::string::npos) << s.message();
}

// numba's this_grid().sync(): the kernel's PTX calls libcudadevrt's
// cudaCGGetIntrinsicHandle and cudaCGSynchronize, declared `.extern` (the
// library is SASS only); the interpreter supplies their bodies
// (device_runtime_ptx.h). Each thread adds its index to its element, the
// grid synchronises, then reads the element one block further on, which
// another block wrote. Launched twice on one workspace: the barrier's top
// bit starts flipped the second time.
const char* const kDevrtGridSyncPtx = R"PTX(
.version 8.0
.target sm_90
.address_size 64
.extern .func (.param .b32 func_retval0) cudaCGSynchronize(.param .b64 cudaCGSynchronize_param_0, .param .b32 cudaCGSynchronize_param_1);
.extern .func (.param .b64 func_retval0) cudaCGGetIntrinsicHandle(.param .b32 cudaCGGetIntrinsicHandle_param_0);
.visible .entry shift_after_grid_sync(.param .u64 x, .param .u64 out, .param .u64 status, .param .u32 n)
{
  .reg .b32 %r<12>;
  .reg .b64 %rd<12>;
  ld.param.u64 %rd1, [x];
  ld.param.u64 %rd2, [out];
  ld.param.u64 %rd10, [status];
  ld.param.u32 %r1, [n];
  {
  .param .b32 param0;
  st.param.b32 [param0+0], 1;
  .param .b64 retval0;
  call.uni (retval0), cudaCGGetIntrinsicHandle, (param0);
  ld.param.b64 %rd3, [retval0+0];
  }
  mov.u32 %r2, %tid.x;
  mov.u32 %r3, %ntid.x;
  mov.u32 %r4, %ctaid.x;
  mad.lo.u32 %r5, %r3, %r4, %r2;
  mul.wide.u32 %rd4, %r5, 4;
  add.u64 %rd5, %rd1, %rd4;
  ld.u32 %r6, [%rd5];
  add.u32 %r6, %r6, %r5;
  st.u32 [%rd5], %r6;
  {
  .param .b64 param0;
  st.param.b64 [param0+0], %rd3;
  .param .b32 param1;
  st.param.b32 [param1+0], 0;
  .param .b32 retval0;
  call.uni (retval0), cudaCGSynchronize, (param0, param1);
  ld.param.b32 %r7, [retval0+0];
  }
  add.u32 %r8, %r5, %r3;
  rem.u32 %r8, %r8, %r1;
  mul.wide.u32 %rd6, %r8, 4;
  add.u64 %rd7, %rd1, %rd6;
  ld.u32 %r9, [%rd7];
  add.u64 %rd8, %rd2, %rd4;
  st.u32 [%rd8], %r9;
  add.u64 %rd11, %rd10, %rd4;
  st.u32 [%rd11], %r7;
  ret;
}
)PTX";

TEST(interp_device_runtime, NumbaGridSyncThroughTheDeviceRuntimeWaitsForEveryBlock) {
  Harness d;
  ASSERT_TRUE(d.LoadText(kDevrtGridSyncPtx));
  const int bs = 32, blocks = 6, n = bs * blocks;
  std::mt19937 gen(7);
  std::vector<unsigned> init(n);
  for (auto& v : init) v = gen() % 1000;
  unsigned* x = d.Alloc(init);
  unsigned* out = d.Alloc(std::vector<unsigned>(n, 0));
  unsigned* status = d.Alloc(std::vector<unsigned>(n, 77));
  auto* workspace = d.Alloc(std::vector<unsigned>{8, 0});
  std::vector<unsigned> ref = init;
  for (int launch = 0; launch < 2; ++launch) {
    SCOPED_TRACE(launch);
    ASSERT_TRUE(d.LaunchCooperative(d.Kernel("shift_after_grid_sync"), {blocks}, {bs},
                                    Params().Add(x).Add(out).Add(status).Add(n),
                                    reinterpret_cast<uint64_t>(workspace)).ok());
    for (int i = 0; i < n; ++i) ref[i] += i;
    for (int i = 0; i < n; ++i) {
      ASSERT_EQ(x[i], ref[i]) << "element " << i;
      ASSERT_EQ(out[i], ref[(i + bs) % n]) << "element " << i;
      ASSERT_EQ(status[i], 0u) << "element " << i;  // cudaSuccess
    }
  }
  // Without a workspace (not a cooperative launch) the handle is 0 and
  // the synchronisation traps.
  Status s = d.LaunchCooperative(d.Kernel("shift_after_grid_sync"), {blocks}, {bs},
                                 Params().Add(x).Add(out).Add(status).Add(n), 0);
  EXPECT_EQ(s.code(), Status::Code::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find("trap"), std::string::npos) << s.message();
}

// Only prototypes of the same shape get a body: another signature stays
// external and the program refuses the call by name.
TEST(interp_device_runtime, OnlyMatchingPrototypesAreSupplied) {
  ptx::Module m;
  ASSERT_TRUE(ptx::ParseModule(kDevrtGridSyncPtx, &m).ok());
  EXPECT_EQ(SupplyDeviceRuntime(&m), (std::vector<std::string>{"cudaCGSynchronize", "cudaCGGetIntrinsicHandle"}));
  EXPECT_TRUE(m.FindFunction("cudaCGSynchronize")->has_body);

  std::string other = kDevrtGridSyncPtx;
  const std::string proto = "cudaCGGetIntrinsicHandle(.param .b32 cudaCGGetIntrinsicHandle_param_0)";
  other.replace(other.find(proto), proto.size(),
                "cudaCGGetIntrinsicHandle(.param .b32 cudaCGGetIntrinsicHandle_param_0, .param .b32 extra)");
  ptx::Module m2;
  ASSERT_TRUE(ptx::ParseModule(other, &m2).ok());
  EXPECT_EQ(SupplyDeviceRuntime(&m2), std::vector<std::string>{"cudaCGSynchronize"});
  Harness d;  // the program builds; the kernel that calls it is refused at launch
  ASSERT_TRUE(d.LoadText(other));
  unsigned* buf = d.Alloc(std::vector<unsigned>(32, 0));
  auto* workspace = d.Alloc(std::vector<unsigned>{8, 0});
  Status s = d.LaunchCooperative(d.Kernel("shift_after_grid_sync"), {1}, {32},
                                 Params().Add(buf).Add(buf).Add(buf).Add(32), reinterpret_cast<uint64_t>(workspace));
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cudaCGGetIntrinsicHandle"), std::string::npos) << s.message();
}

TEST_F(interp, WarpShuffleVoteReduxMatch) {
  const int n = 256;
  auto in = RandInts<int>(rng, n, -20, 1000);
  std::vector<int*> outs;
  auto fresh = [&] { return h.Alloc(RandInts<int>(rng, n, 1, 9)); };
  int *sd = fresh(), *sx = fresh(), *scan = fresh(), *bc = fresh(), *allp = fresh(), *anyb = fresh(), *red = fresh();
  unsigned* ballot = h.Alloc(RandInts<unsigned>(rng, n, 1, 9));
  unsigned* active = h.Alloc(RandInts<unsigned>(rng, n, 1, 9));
  unsigned* match = h.Alloc(RandInts<unsigned>(rng, n, 1, 9));
  ASSERT_TRUE(h.Launch(h.Kernel("warp_ops"), {2}, {128},
                       Params().Add(h.Alloc(in)).Add(sd).Add(sx).Add(scan).Add(bc).Add(ballot).Add(allp).Add(anyb)
                           .Add(active).Add(red).Add(match)).ok());
  for (int w = 0; w < n / 32; ++w) {
    const int* v = &in[w * 32];
    int sum = 0, mx = INT_MIN;
    unsigned bal = 0, umx = 0;
    bool all = true, any = false;
    for (int l = 0; l < 32; ++l) {
      sum += v[l];
      if (v[l] & 1) bal |= 1u << l;
      all = all && v[l] >= 0;
      any = any || v[l] > 900;
      umx = std::max(umx, static_cast<unsigned>(v[l]));
    }
    (void)mx;
    int sc = 0;
    for (int l = 0; l < 32; ++l) {
      const int i = w * 32 + l;
      sc += v[l];
      int down = 0;  // lanes l.. with clamped down-shuffles: tree sum of the upper part
      {
        int s[32];
        for (int k = 0; k < 32; ++k) s[k] = v[k];
        for (int o = 16; o > 0; o >>= 1) {
          int t[32];
          for (int k = 0; k < 32; ++k) t[k] = s[k] + (k + o < 32 ? s[k + o] : s[k]);
          std::copy(t, t + 32, s);
        }
        down = s[l];
      }
      EXPECT_EQ(sd[i], down) << i;
      EXPECT_EQ(sx[i], sum) << i;
      EXPECT_EQ(scan[i], sc) << i;
      EXPECT_EQ(bc[i], v[(l * 7 + 3) & 31]) << i;
      EXPECT_EQ(ballot[i], bal) << i;
      EXPECT_EQ(allp[i], all ? 1 : 0) << i;
      EXPECT_EQ(anyb[i], any ? 1 : 0) << i;
      EXPECT_EQ(active[i], l < 10 ? 0x3FFu : 0u) << i;
      EXPECT_EQ(red[i], static_cast<int>(static_cast<unsigned>(sum) ^ umx)) << i;
      unsigned m = 0;
      for (int k = 0; k < 32; ++k) m |= ((v[k] & 3) == (v[l] & 3)) ? 1u << k : 0;
      EXPECT_EQ(match[i], m) << i;
    }
  }
}

TEST_F(interp, F64Math) {
  const int n = 1000;
  auto x = RandReals<double>(rng, n, 0.001, 1000);
  double* y = h.Alloc(RandReals<double>(rng, n, 1, 2));
  ASSERT_TRUE(h.Launch(h.Kernel("f64_math"), {4}, {256}, Params().Add(h.Alloc(x)).Add(y).Add(n)).ok());
  for (int i = 0; i < n; ++i) {
    const double a = x[i];
    const double want = std::sqrt(a) * 1.5 + a / (a + 3.0) + std::fma(a, a, -2.0) + std::fabs(a - 4.0) +
                        std::fmin(a, 2.0) + 1.0 / std::sqrt(a + 1.0);
    ASSERT_TRUE(Near(y[i], want, 1e-12)) << i << ": " << y[i] << " vs " << want;
  }
}

TEST_F(interp, F32ApproxMath) {
  const int n = 1000;
  auto x = RandReals<float>(rng, n, 0.01, 10);
  float* y = h.Alloc(RandReals<float>(rng, n, 1, 2));
  ASSERT_TRUE(h.Launch(h.Kernel("f32_math"), {4}, {256}, Params().Add(h.Alloc(x)).Add(y).Add(n)).ok());
  for (int i = 0; i < n; ++i) {
    const double a = x[i];
    const double want = a / (a + 1) + std::exp(a * 0.1) + std::log(a + 1) + std::sin(a) + std::cos(a) + std::sqrt(a) +
                        1 / std::sqrt(a + 1) + std::tanh(a * 0.01) + (a - 5 < 0 ? -1 : 1) + 1 / (a + 2);
    ASSERT_TRUE(Near(y[i], want, 1e-4, 1e-4)) << i << ": " << y[i] << " vs " << want;
  }
}

float DirectedF(double d, int mode) {  // 0 rn, 1 rz, 2 rd, 3 ru
  float f = static_cast<float>(d);
  if (mode == 1 && std::fabs(static_cast<double>(f)) > std::fabs(d)) f = std::nextafter(f, 0.0f);
  if (mode == 2 && static_cast<double>(f) > d) f = std::nextafter(f, -INFINITY);
  if (mode == 3 && static_cast<double>(f) < d) f = std::nextafter(f, INFINITY);
  return f;
}

TEST_F(interp, ConversionsWithRounding) {
  const int n = 1024;
  auto f = RandReals<float>(rng, n, -3000, 3000);
  auto d = RandReals<double>(rng, n, -1e5, 1e5);
  auto k = RandInts<int>(rng, n, INT_MIN, INT_MAX);
  f[0] = 2.5f;
  f[1] = -2.5f;
  f[2] = 3.5f;
  int* oi = h.Alloc(RandInts<int>(rng, n * 4, 1, 9));
  float* of = h.Alloc(RandReals<float>(rng, n * 8, 1, 2));
  unsigned short* oh = h.Alloc(RandInts<unsigned short>(rng, n, 1, 9));
  float* ohf = h.Alloc(RandReals<float>(rng, n, 1, 2));
  long long* oll = h.Alloc(RandInts<long long>(rng, n, 1, 9));
  unsigned* ou = h.Alloc(RandInts<unsigned>(rng, n, 1, 9));
  ASSERT_TRUE(h.Launch(h.Kernel("conversions"), {4}, {256},
                       Params().Add(h.Alloc(f)).Add(h.Alloc(d)).Add(h.Alloc(k)).Add(oi).Add(of).Add(oh).Add(ohf)
                           .Add(oll).Add(ou).Add(n)).ok());
  for (int i = 0; i < n; ++i) {
    const float a = f[i];
    EXPECT_EQ(oi[i * 4 + 0], static_cast<int>(std::nearbyint(a))) << i;
    EXPECT_EQ(oi[i * 4 + 1], static_cast<int>(std::trunc(a))) << i;
    EXPECT_EQ(oi[i * 4 + 2], static_cast<int>(std::floor(a))) << i;
    EXPECT_EQ(oi[i * 4 + 3], static_cast<int>(std::ceil(a))) << i;
    for (int m = 0; m < 4; ++m) EXPECT_EQ(of[i * 8 + m], DirectedF(d[i], m)) << i << " mode " << m;
    EXPECT_EQ(of[i * 8 + 4], DirectedF(static_cast<double>(k[i]), 1)) << i;
    EXPECT_EQ(of[i * 8 + 5], static_cast<float>(k[i])) << i;
    EXPECT_EQ(of[i * 8 + 6], std::fmin(std::fmax(a * 0.01f, 0.0f), 1.0f)) << i;
    const float r7 = ((std::nearbyint(a * 0.5f) + std::trunc(a * 0.25f)) + std::floor(a)) + std::ceil(a);
    EXPECT_EQ(of[i * 8 + 7], r7) << i;
    const _Float16 hv = static_cast<_Float16>(a * 1e-3f);
    unsigned short hb;
    std::memcpy(&hb, &hv, 2);
    EXPECT_EQ(oh[i], hb) << i << " " << a;
    const unsigned short hin = static_cast<unsigned short>(k[i] & 0xFFFF);
    _Float16 hh;
    std::memcpy(&hh, &hin, 2);
    if (std::isnan(static_cast<float>(hh))) EXPECT_TRUE(std::isnan(ohf[i])) << i;
    else EXPECT_EQ(ohf[i], static_cast<float>(hh)) << i;
    const long long ll = static_cast<long long>(std::trunc(d[i] * 1e6)) + static_cast<signed char>(k[i]) +
                         static_cast<short>(k[i] >> 3);
    EXPECT_EQ(oll[i], ll) << i;
    EXPECT_EQ(ou[i], a <= 0 ? 0u : static_cast<unsigned>(std::nearbyint(a))) << i;
  }
}

unsigned BytePerm(unsigned x, unsigned y, unsigned s) {
  uint64_t t = (uint64_t{y} << 32) | x;
  unsigned r = 0;
  for (int i = 0; i < 4; ++i) r |= static_cast<unsigned>((t >> (8 * ((s >> (4 * i)) & 7))) & 0xFF) << (8 * i);
  return r;
}

TEST_F(interp, IntegerAndBitOps) {
  const int n = 512;
  auto a = RandInts<unsigned>(rng, n, 1, 0xFFFFFFFFu), b = RandInts<unsigned>(rng, n, 1, 0xFFFFFFFFu);
  unsigned* out = h.Alloc(RandInts<unsigned>(rng, n * 16, 1, 9));
  auto* out64 = h.Alloc(RandInts<unsigned long long>(rng, n * 2, 1, 9));
  ASSERT_TRUE(h.Launch(h.Kernel("int_ops"), {2}, {256}, Params().Add(h.Alloc(a)).Add(h.Alloc(b)).Add(out).Add(out64).Add(n)).ok());
  for (int i = 0; i < n; ++i) {
    const unsigned x = a[i], y = b[i] | 1;
    const int sx = static_cast<int>(x), sy = static_cast<int>(y >> 3) + 1;
    const unsigned* o = out + i * 16;
    unsigned rev = 0;
    for (int k = 0; k < 32; ++k) rev |= ((x >> k) & 1u) << (31 - k);
    const uint64_t fl = (uint64_t{y} << 32) | x;
    EXPECT_EQ(o[0], static_cast<unsigned>(__builtin_popcount(x) + (__builtin_clz(y) << 8))) << i;
    EXPECT_EQ(o[1], rev) << i;
    EXPECT_EQ(o[2], BytePerm(x, y, 0x5140)) << i;
    EXPECT_EQ(o[3], static_cast<unsigned>((fl << (y & 31)) >> 32)) << i;
    EXPECT_EQ(o[4], static_cast<unsigned>(fl >> (x & 31))) << i;
    EXPECT_EQ(o[5], static_cast<unsigned>((uint64_t{x} * y) >> 32)) << i;
    EXPECT_EQ(o[6], static_cast<unsigned>((int64_t{sx} * sy) >> 32)) << i;
    EXPECT_EQ(o[7], x / y + x % y) << i;
    EXPECT_EQ(o[8], static_cast<unsigned>(sx / sy) ^ static_cast<unsigned>(sx % sy)) << i;
    EXPECT_EQ(o[9], (x >> 5) & 0x3F) << i;
    EXPECT_EQ(o[10], static_cast<unsigned>(__builtin_ffs(static_cast<int>(x)) + (__builtin_clzll(x) << 16))) << i;
    EXPECT_EQ(o[11], (x & y) ^ (~x | (y >> 2)) ^ ((x ^ y) & 0xF0F0F0F0u)) << i;
    EXPECT_EQ(o[12], static_cast<unsigned>(std::abs(static_cast<long long>(sx) - sy)) + 7u) << i;
    const int x24 = (sx << 8) >> 8, y24 = (sy << 8) >> 8;
    EXPECT_EQ(o[13], static_cast<unsigned>(static_cast<int64_t>(x24) * y24)) << i;
    EXPECT_EQ(o[14], static_cast<unsigned>(std::min(sx, sy)) + std::max(x, y) + static_cast<unsigned>(std::abs(sx))) << i;
    EXPECT_EQ(o[15], static_cast<unsigned>(sx >> (y & 31)) + (x << (y & 15))) << i;
    const unsigned __int128 hp = static_cast<unsigned __int128>(uint64_t{x} << 20) * (uint64_t{y} << 30);
    EXPECT_EQ(out64[i * 2], uint64_t{x} * y + static_cast<uint64_t>(hp >> 64)) << i;
    EXPECT_EQ(out64[i * 2 + 1], ((uint64_t{x} << 32) | y) / (uint64_t{y} + 1) +
                                    static_cast<uint64_t>(__builtin_popcountll(uint64_t{x} * 0x9E3779B97F4A7C15ull))) << i;
  }
}

TEST_F(interp, ExtendedPrecisionMultiplyAdd) {
  const int n = 256;
  std::uniform_int_distribution<unsigned long long> word;  // the full 64-bit range
  std::vector<unsigned long long> a(n), b(n);
  for (int i = 0; i < n; ++i) a[i] = word(rng), b[i] = word(rng);
  a[0] = b[0] = ~0ull;  // every partial sum carries
  unsigned* out = h.Alloc(RandInts<unsigned>(rng, n * 4, 1, 9));
  ASSERT_TRUE(h.Launch(h.Kernel("wide_mul"), {2}, {128}, Params().Add(h.Alloc(a)).Add(h.Alloc(b)).Add(out).Add(n)).ok());
  for (int i = 0; i < n; ++i) {
    const unsigned __int128 p = static_cast<unsigned __int128>(a[i]) * b[i];
    for (int w = 0; w < 4; ++w) EXPECT_EQ(out[i * 4 + w], static_cast<unsigned>(p >> (32 * w))) << i << " word " << w;
  }
}

int Fib(int n) { return n < 2 ? n : Fib(n - 1) + Fib(n - 2); }

TEST_F(interp, CallsRecursionLocalAndGenericAddressing) {
  const int n = 256;
  auto in = RandInts<int>(rng, n, 0, 999);
  auto g0 = RandInts<int>(rng, n, -100, 100);
  int* out = h.Alloc(RandInts<int>(rng, n * 4, 1, 9));
  int* g = h.Alloc(g0);
  ASSERT_TRUE(h.Launch(h.Kernel("calls"), {2}, {128}, Params().Add(h.Alloc(in)).Add(out).Add(g).Add(n)).ok());
  for (int i = 0; i < n; ++i) {
    const int v = in[i];
    int local[16];
    for (int k = 0; k < 16; ++k) local[k] = v * k + (k ^ (v & 7));
    local[v & 15] += 5;
    local[(v >> 4) & 15] += 11;
    int s = 0;
    for (int k = 0; k < 16; ++k) s += local[k];
    EXPECT_EQ(out[i * 4 + 0], Fib(v & 15)) << i;
    EXPECT_EQ(out[i * 4 + 1], 2 * v + static_cast<int>(static_cast<float>(v) * 0.5f)) << i;
    EXPECT_EQ(out[i * 4 + 2], s + v + 3) << i;
    EXPECT_EQ(out[i * 4 + 3], 7) << i;
    EXPECT_EQ(g[i], g0[i] + v) << i;
  }
}

TEST_F(interp, ConstantMemoryAndModuleGlobals) {
  const int n = 300;
  auto in = RandInts<int>(rng, n, 0, 1 << 20);
  uint64_t addr = 0, cnt_addr = 0;
  size_t size = 0;
  ASSERT_TRUE(h.program().SymbolAddress("c_coeffs", &addr, &size));
  ASSERT_EQ(size, 16u);
  const float coeffs[4] = {0.5f, -1.25f, 3.0f, 10.0f};
  std::memcpy(reinterpret_cast<void*>(addr), coeffs, 16);  // like cudaMemcpyToSymbol
  ASSERT_TRUE(h.program().SymbolAddress("g_counter", &cnt_addr, &size));
  float* out = h.Alloc(RandReals<float>(rng, n, 1, 2));
  ASSERT_TRUE(h.Launch(h.Kernel("constants"), {3}, {128}, Params().Add(h.Alloc(in)).Add(out).Add(n)).ok());
  const int table[8] = {3, 1, 4, 1, 5, 9, 2, 6};
  for (int i = 0; i < n; ++i) EXPECT_EQ(out[i], table[in[i] & 7] * coeffs[in[i] & 3]) << i;
  EXPECT_EQ(*reinterpret_cast<unsigned long long*>(cnt_addr), static_cast<unsigned long long>(n));
}

template <typename T>
void CheckScaleAdd(Harness& h, std::mt19937& rng, const char* part, T lo, T hi) {
  const int n = 333;
  std::vector<T> x, y;
  if constexpr (std::is_floating_point_v<T>) {
    x = RandReals<T>(rng, n, lo, hi);
    y = RandReals<T>(rng, n, lo, hi);
  } else {
    x = RandInts<T>(rng, n, lo, hi);
    y = RandInts<T>(rng, n, lo, hi);
  }
  T* dy = h.Alloc(y);
  const T a = static_cast<T>(3);
  ASSERT_TRUE(h.Launch(h.Kernel(part), {2}, {192}, Params().Add(h.Alloc(x)).Add(dy).Add(a).Add(n)).ok()) << part;
  for (int i = 0; i < n; ++i) {
    if constexpr (std::is_floating_point_v<T>) {
      ASSERT_EQ(dy[i], std::fma(x[i], a, y[i])) << part << " " << i;
    } else {
      ASSERT_EQ(dy[i], static_cast<T>(x[i] * a + y[i])) << part << " " << i;
    }
  }
}

TEST_F(interp, TemplatesAndNarrowTypes) {
  CheckScaleAdd<int>(h, rng, "scale_addIiE", -100000, 100000);
  CheckScaleAdd<double>(h, rng, "scale_addIdE", -10, 10);
  CheckScaleAdd<unsigned char>(h, rng, "scale_addIhE", 1, 255);
  CheckScaleAdd<short>(h, rng, "scale_addIsE", -3000, 3000);
  CheckScaleAdd<long long>(h, rng, "scale_addIxE", -(1ll << 40), 1ll << 40);
}

TEST_F(interp, Grid3DAndDynamicShared) {
  const Dim3 grid{3, 2, 2}, block{4, 3, 2};
  const int total = 3 * 2 * 2 * 4 * 3 * 2;
  unsigned* out = h.Alloc(RandInts<unsigned>(rng, total, 1, 9));
  ASSERT_TRUE(h.Launch(h.Kernel("ids3d"), grid, block, Params().Add(out)).ok());
  int idx = 0;
  for (unsigned bz = 0; bz < 2; ++bz)
    for (unsigned by = 0; by < 2; ++by)
      for (unsigned bx = 0; bx < 3; ++bx)
        for (unsigned tz = 0; tz < 2; ++tz)
          for (unsigned ty = 0; ty < 3; ++ty)
            for (unsigned tx = 0; tx < 4; ++tx, ++idx)
              EXPECT_EQ(out[idx], (bz << 24) | (by << 16) | (tz << 12) | (ty << 8) | (tx << 2) | (bx & 3)) << idx;
  const int bs = 96, blocks = 5;
  auto in = RandInts<int>(rng, bs * blocks, -1000, 1000);
  int* rev = h.Alloc(RandInts<int>(rng, bs * blocks, 1, 9));
  ASSERT_TRUE(h.Launch(h.Kernel("reverse_dyn"), {blocks}, {bs}, Params().Add(h.Alloc(in)).Add(rev), bs * 4).ok());
  for (int b = 0; b < blocks; ++b)
    for (int t = 0; t < bs; ++t) EXPECT_EQ(rev[b * bs + t], in[b * bs + bs - 1 - t]);
}

// ---- errors

constexpr const char* kUnsupportedPtx = R"(
.version 8.0
.target sm_90
.address_size 64
.visible .entry weird(.param .u64 p)
{
  .reg .b64 %rd<3>;
  .reg .b32 %r<3>;
  ld.param.u64 %rd1, [p];
  mov.u32 %r1, 1;
  .loc 1 42 0
  sust.p.1d.b32.trap [%rd1, {%r1}], {%r1};
  st.global.u32 [%rd1], %r2;
  ret;
}
)";

// A module of several kernels: each reports the static shared memory it
// reaches (its own, its callee's, the module-level variable it names), not
// the module's total — CUB's modules have dozens of kernels, and a summed
// size made each look unlaunchable (occupancy 0, then a division by zero in
// CUB's host code).
TEST(interp_shared, EachKernelReportsTheSharedMemoryItReaches) {
  Harness h;
  ASSERT_TRUE(h.LoadText(R"(
.version 8.0
.target sm_90
.address_size 64
.shared .align 8 .b8 module_tile[1000];
.extern .shared .align 16 .b8 dynamic_smem[];
.func helper()
{
  .shared .align 4 .b8 helper_buf[300];
  .reg .b32 %r<2>;
  mov.u32 %r1, helper_buf;
  ret;
}
.visible .entry small()
{
  .shared .align 4 .b8 small_buf[64];
  .reg .b32 %r<2>;
  mov.u32 %r1, small_buf;
  ret;
}
.visible .entry big()
{
  .shared .align 16 .b8 big_buf[4096];
  .reg .b64 %rd<2>;
  mov.u64 %rd1, module_tile;
  call.uni helper, ();
  ret;
}
.visible .entry dyn_only()
{
  .reg .b64 %rd<2>;
  mov.u64 %rd1, dynamic_smem;
  ret;
}
)"));
  const Program& p = h.program();
  EXPECT_EQ(p.static_shared_bytes("small"), 64u);
  // big_buf 4096, then module_tile (align 8) 1000, then helper_buf (align 4) 300.
  EXPECT_EQ(p.static_shared_bytes("big"), 4096u + 1000u + 300u);
  EXPECT_EQ(p.static_shared_bytes("dyn_only"), 0u);  // dynamic shared is not static
  EXPECT_GE(p.static_shared_bytes(), 64u + 4096u + 1000u + 300u);  // one layout for the whole program
  EXPECT_EQ(p.static_shared_bytes("no_such_kernel"), p.static_shared_bytes());
}

// Surfaces through a handle (ops_texture.cc): .clamp moves an outside
// access to the nearest element, .zero reads 0, .trap fails the launch
// naming it; suq answers the extent; a handle that names no object fails.
class OneObject final : public TextureTable {
 public:
  explicit OneObject(const TextureDesc& d) : d_(d) {}
  const TextureDesc* Find(uint64_t handle) const override { return handle == 77 ? &d_ : nullptr; }

 private:
  TextureDesc d_;
};

constexpr const char* kSurfacePtx = R"(
.version 8.0
.target sm_90
.address_size 64
.visible .entry modes(.param .u64 s, .param .u64 out)
{
  .reg .b32 %r<10>;
  .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [s];
  ld.param.u64 %rd2, [out];
  mov.u32 %r5, 400;
  mov.s32 %r6, -1;
  suld.b.2d.b32.clamp {%r1}, [%rd1, {%r5, %r6}];
  suld.b.2d.b32.zero {%r2}, [%rd1, {%r5, %r6}];
  suq.width.b32 %r3, [%rd1];
  mov.u32 %r7, 8;
  mov.u32 %r8, 2;
  suld.b.2d.b32.trap {%r4}, [%rd1, {%r7, %r8}];
  st.global.u32 [%rd2], %r1;
  st.global.u32 [%rd2+4], %r2;
  st.global.u32 [%rd2+8], %r3;
  st.global.u32 [%rd2+12], %r4;
  ret;
}
.visible .entry trap(.param .u64 s)
{
  .reg .b32 %r<4>;
  .reg .b64 %rd<2>;
  ld.param.u64 %rd1, [s];
  mov.u32 %r1, 20;
  mov.u32 %r2, 0;
  sust.b.2d.b32.trap [%rd1, {%r1, %r2}], {%r2};
  ret;
}
)";

TEST(interp_textures, SurfaceBoundaryModesAndQueries) {
  Harness h;
  ASSERT_TRUE(h.LoadText(kSurfacePtx));
  std::vector<uint32_t> texels(15);  // 5 x 3, row pitch 20 bytes
  for (uint32_t i = 0; i < texels.size(); ++i) texels[i] = 1000 + i;
  TextureDesc d;
  d.surface = true;
  d.base = reinterpret_cast<uint64_t>(h.Alloc(texels));
  d.pitch = 20;
  d.slice_pitch = 60;
  d.width = 5;
  d.height = 3;
  d.dims = 2;
  d.channels = 1;
  d.channel_bytes = 4;
  d.kind = TextureDesc::Kind::kUnsigned;
  OneObject table(d);
  std::vector<uint32_t> out(4, 0xdeadbeef);
  uint32_t* dout = h.Alloc(out);
  // No table: the handle names nothing.
  Status st = h.Launch("modes", {1}, {1}, Params().Add(uint64_t{77}).Add(dout));
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("not a live surface object"), std::string::npos) << st.message();
  h.textures = &table;
  st = h.Launch("modes", {1}, {1}, Params().Add(uint64_t{77}).Add(dout));
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(dout[0], 1004u);  // byte x 400 -> the last element of row 0 (y -1 -> 0)
  EXPECT_EQ(dout[1], 0u);     // .zero outside
  EXPECT_EQ(dout[2], 5u);     // suq.width
  EXPECT_EQ(dout[3], 1012u);  // byte 8 = element 2 of row 2
  st = h.Launch("trap", {1}, {1}, Params().Add(uint64_t{77}));
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("outside the surface"), std::string::npos) << st.message();
  // Another handle: no such object.
  st = h.Launch("trap", {1}, {1}, Params().Add(uint64_t{78}));
  EXPECT_NE(st.message().find("not a live surface object"), std::string::npos) << st.message();
}

// The scalar video instructions (cuSPARSE's binary searches use
// vshr.u32.u32.u32.clamp.add) and griddepcontrol, each case worked out by
// hand from the PTX ISA's semantics: operands sign- or zero-extended by
// their own types, shift counts clamped to 32 or taken modulo 32, .sat
// clamping to the destination type, then the secondary add/min/max with c.
TEST(interp_video, InstructionsAndGridDependencyControl) {
  struct Case {
    const char* op;
    uint32_t a, b, c, want;
  };
  const Case cases[] = {
      {"vshr.u32.u32.u32.clamp.add", 0x80000000u, 4, 10, 0x0800000Au},
      {"vshr.u32.u32.u32.clamp.add", 0xFFFFFFFFu, 40, 7, 7},            // count 40 clamps to 32
      {"vshr.s32.s32.u32.wrap", 0xFFFFFF00u, 36, 0, 0xFFFFFFF0u},        // -256 >> (36 & 31)
      {"vshl.u32.u32.u32.clamp", 1, 33, 0, 0},                           // 1 << 32: low word
      {"vshl.u32.u32.u32.sat.clamp", 1, 33, 0, 0xFFFFFFFFu},             // saturated
      {"vadd.s32.s32.s32.sat", 0x7FFFFFFFu, 1, 0, 0x7FFFFFFFu},
      {"vadd.u32.u32.u32", 0xFFFFFFFFu, 2, 0, 1},
      {"vsub.u32.u32.u32.sat", 1, 2, 0, 0},
      {"vabsdiff.u32.s32.s32", static_cast<uint32_t>(-5), 7, 0, 12},
      {"vmin.s32.u32.s32", 0xFFFFFFFFu, static_cast<uint32_t>(-1), 0, 0xFFFFFFFFu},  // min(4294967295, -1)
      {"vmax.s32.s32.s32.max", 3, 9, 20, 20},
      {"vmax.s32.s32.s32.min", 3, 9, static_cast<uint32_t>(-4), static_cast<uint32_t>(-4)},
      {"vadd.s32.s32.s32.add", 5, 6, static_cast<uint32_t>(-1), 10},
  };
  const size_t n = std::size(cases);
  std::string body;
  for (size_t i = 0; i < n; ++i) {
    const std::string a = std::to_string(12 * i), b = std::to_string(12 * i + 4), c = std::to_string(12 * i + 8);
    const std::string out = std::to_string(4 * i);
    const bool three = std::string(cases[i].op).find(".add") != std::string::npos ||
                       std::string(cases[i].op).find(".min") != std::string::npos ||
                       std::string(cases[i].op).find(".max") != std::string::npos;
    body += "  ld.global.u32 %a, [%in+" + a + "];\n  ld.global.u32 %b, [%in+" + b + "];\n" +
            "  ld.global.u32 %c, [%in+" + c + "];\n  " + cases[i].op + " %d, %a, %b" + (three ? ", %c" : "") +
            ";\n  st.global.u32 [%out+" + out + "], %d;\n";
  }
  const std::string ptx = R"(.version 8.0
.target sm_90
.address_size 64
.visible .entry video(.param .u64 pin, .param .u64 pout) {
  .reg .b32 %a, %b, %c, %d;
  .reg .b64 %in, %out;
  ld.param.u64 %in, [pin];
  ld.param.u64 %out, [pout];
  griddepcontrol.wait;
)" + body + R"(  griddepcontrol.launch_dependents;
  ret;
}
)";
  Harness h;
  ASSERT_TRUE(h.LoadText(ptx));
  std::vector<uint32_t> in;
  for (const Case& c : cases) in.insert(in.end(), {c.a, c.b, c.c});
  uint32_t* out = h.Alloc(std::vector<uint32_t>(n, 0xDEADBEEFu));
  ASSERT_TRUE(h.Launch("video", {1}, {1}, Params().Add(h.Alloc(in)).Add(out)).ok());
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(out[i], cases[i].want) << cases[i].op << " " << cases[i].a << ", " << cases[i].b << ", " << cases[i].c;
  }
}

// A byte selector on a video operand (a.b0) is not run: the kernel is
// refused at launch, naming the instruction, rather than computed wrongly.
TEST(interp_errors, VideoByteSelectorsAreRefusedByName) {
  Harness h;
  ASSERT_TRUE(h.LoadText(R"(.version 8.0
.target sm_90
.address_size 64
.visible .entry sel(.param .u64 pout) {
  .reg .b32 %a, %d;
  .reg .b64 %out;
  ld.param.u64 %out, [pout];
  mov.u32 %a, 7;
  vadd.u32.u32.u32 %d, %a.b0, %a;
  st.global.u32 [%out], %d;
  ret;
}
)"));
  uint32_t* out = h.Alloc(std::vector<uint32_t>(1, 0));
  const Status st = h.Launch("sel", {1}, {1}, Params().Add(out));
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("vadd.u32.u32.u32"), std::string::npos) << st.message();
  EXPECT_EQ(out[0], 0u);
}

TEST(interp_errors, UnsupportedInstructionIsNamed) {
  Harness h;
  ASSERT_TRUE(h.LoadText(std::string(".file 1 \"x.cu\"\n") + kUnsupportedPtx));
  std::vector<unsigned> v = {1, 2};
  Status st = h.Launch("weird", {1}, {1}, Params().Add(h.Alloc(v)));
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Status::Code::kNotSupported) << st.ToString();
  EXPECT_NE(st.message().find("sust.p.1d.b32.trap"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("weird"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("line 42"), std::string::npos) << st.message();
  EXPECT_EQ(v[0], 1u);  // nothing ran
}

TEST(interp_errors, IllegalGlobalAddressIsReported) {
  Harness h;
  ASSERT_TRUE(h.Load("vector_add"));
  std::vector<float> a = {1, 2, 3};
  float* da = h.Alloc(a);
  Status st = h.Launch(h.Kernel("vector_add"), {1}, {32},
                       Params().Add(da).Add(da).Add(reinterpret_cast<float*>(0x1000)).Add(3));
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("illegal address"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("0x1000"), std::string::npos) << st.message();
}

TEST(interp_errors, UnknownKernelAndBadDims) {
  Harness h;
  ASSERT_TRUE(h.Load("vector_add"));
  EXPECT_EQ(h.Launch("nope", {1}, {1}, Params()).code(), Status::Code::kNotFound);
  EXPECT_EQ(h.Launch(h.Kernel("vector_add"), {1}, {2048}, Params().Add(0ll).Add(0ll).Add(0ll).Add(0)).code(),
            Status::Code::kInvalidArgument);
}

}  // namespace
}  // namespace phos::interp::test
