// The twin validator (daemon/engine/twin_validator.h) on the sim backend:
// nvcc's tests/apps fatbins loaded into a sim context, launches speculated
// the way phosd speculates them (BuildModuleKernels + ComputeLaunchAccess),
// run as twins; the reports name exactly the accesses outside the
// speculated write set. No gRPC, no session: a SessionState filled here.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend_factory.h"
#include "engine/twin_validator.h"
#include "engine_test_env.h"
#include "session/call_handlers.h"
#include "session/kernel_access.h"
#include "twin/twin_cache.h"

namespace phos::engine {
namespace {

using session::AccessRange;
using session::LaunchArgs;

constexpr char kScatter[] = "_Z7scatterPKPiiPKii";    // scatter(int* const*, int, const int*, int)
constexpr char kVectorAdd[] = "_Z10vector_addPKfS0_Pfi";  // vector_add(const float*, const float*, float*, int)

#define ASSERT_OK(expr)                          \
  do {                                           \
    const ::phos::Status _s = (expr);            \
    ASSERT_TRUE(_s.ok()) << #expr << ": " << _s.ToString(); \
  } while (0)

using testing::ReadAppFixture;

// A kernel parameter block (the layout of the kernels' .nv.info tables).
struct Params {
  std::vector<uint8_t> bytes;
  explicit Params(size_t n) : bytes(n, 0) {}
  template <typename T>
  Params& At(size_t offset, T v) {
    std::memcpy(bytes.data() + offset, &v, sizeof v);
    return *this;
  }
};

class TwinValidatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    backend::SimOptions so;
    so.memory_bytes = 1ull << 30;
    ASSERT_OK(backend::CreateSimBackend(so, &backend_));
    ASSERT_OK(backend_->CreateContext(0, &ctx_));
    st_.backend = backend_.get();
    st_.ctx = ctx_.get();
    ASSERT_OK(ctx_->CreateStream(backend::kStreamNonBlocking, 0, &stream_));
    const unsigned seed = std::random_device{}();
    rng_.seed(seed);
    RecordProperty("seed", std::to_string(seed));
    seed_ = seed;
  }
  void TearDown() override {
    if (ctx_) (void)ctx_->Synchronize();
  }

  // Registers module `id` as the app loaded it: the image, and the access
  // plans phosd builds at load (the original is not needed for twins).
  void AddModule(uint32_t id, const std::string& fixture) {
    auto image = std::make_shared<const std::vector<std::byte>>(ReadAppFixture(fixture));
    ASSERT_FALSE(image->empty());
    st_.module_images[id] = image;
    (void)session::BuildModuleKernels(*image, nullptr, &st_.module_kernels[id]);
  }
  uint64_t Alloc(size_t bytes) {
    backend::DevicePtr p = 0;
    EXPECT_TRUE(ctx_->Allocate(bytes, 0, &p).ok());
    st_.buffers.Add(p, bytes);
    return p;
  }
  template <typename T>
  void Upload(uint64_t dst, const std::vector<T>& v) {
    ASSERT_OK(ctx_->MemcpyAsync(dst, reinterpret_cast<uint64_t>(v.data()), v.size() * sizeof(T),
                                backend::CopyKind::kHostToDevice, stream_));
    ASSERT_OK(ctx_->SynchronizeStream(stream_));
  }
  template <typename T>
  std::vector<T> Download(uint64_t src, size_t n) {
    std::vector<T> v(n);
    EXPECT_TRUE(ctx_->MemcpyAsync(reinterpret_cast<uint64_t>(v.data()), src, n * sizeof(T),
                                  backend::CopyKind::kDeviceToHost, stream_)
                    .ok());
    EXPECT_TRUE(ctx_->SynchronizeStream(stream_).ok());
    return v;
  }
  // The speculated access set phosd computes for this launch.
  std::vector<AccessRange> Speculate(uint32_t module_id, const std::string& kernel, const Params& p) {
    auto& mk = st_.module_kernels[module_id];
    auto it = mk.kernels.find(kernel);
    EXPECT_NE(it, mk.kernels.end()) << kernel;
    if (it == mk.kernels.end()) return {};
    session::CallView view;
    session::ComputeLaunchAccess(*it->second, p.bytes, st_.buffers, st_.globals, &view);
    EXPECT_EQ(view.kind, session::AccessKind::kSpeculated);
    return {view.ranges.begin(), view.ranges.end()};
  }
  LaunchArgs Args(uint32_t function_id, uint32_t module_id, const std::string* kernel, unsigned blocks,
                  unsigned threads, const Params& p) {
    LaunchArgs a;
    a.function_id = function_id;
    a.module_id = module_id;
    a.kernel = kernel;
    a.grid = backend::Dim3{blocks, 1, 1};
    a.block = backend::Dim3{threads, 1, 1};
    a.params = &p.bytes;
    return a;
  }

  // pointer_table's buffers: `tables` targets of `per` ints, the table of
  // their addresses and a random source of tables*per ints.
  struct Scatter {
    int tables = 0, per = 0;
    std::vector<uint64_t> targets;
    uint64_t table = 0, src = 0;
    std::vector<int> src_host;
    Params params{28};  // (u64 table, s32 tables, u64 src, s32 n): offsets 0, 8, 16, 24
    int n() const { return tables * per; }
  };
  void MakeScatter(int tables, int per, Scatter* s) {
    s->tables = tables;
    s->per = per;
    for (int t = 0; t < tables; ++t) s->targets.push_back(Alloc(per * sizeof(int)));
    s->table = Alloc(tables * sizeof(uint64_t));
    s->src = Alloc(s->n() * sizeof(int));
    s->src_host.resize(s->n());
    for (int& v : s->src_host) v = static_cast<int>(rng_() >> 4);
    Upload(s->table, s->targets);
    Upload(s->src, s->src_host);
    for (uint64_t t : s->targets) Upload(t, std::vector<int>(per, 0));
    s->params.At<uint64_t>(0, s->table).At<int32_t>(8, tables).At<uint64_t>(16, s->src).At<int32_t>(24, s->n());
  }
  // Every element of scatter's output: target buffer slot addresses.
  std::set<uint64_t> ScatterTargets(const Scatter& s) {
    std::set<uint64_t> out;
    for (int i = 0; i < s.n(); ++i) out.insert(s.targets[i % s.tables] + static_cast<uint64_t>(i / s.tables) * 4);
    return out;
  }
  void ExpectScatterResult(const Scatter& s) {
    for (int t = 0; t < s.tables; ++t) {
      auto got = Download<int>(s.targets[t], s.per);
      for (int j = 0; j < s.per; ++j) {
        ASSERT_EQ(got[j], s.src_host[j * s.tables + t] * 3 + 1) << "target " << t << " slot " << j << " seed " << seed_;
      }
    }
  }

  std::unique_ptr<backend::Backend> backend_;
  std::unique_ptr<backend::Context> ctx_;
  session::SessionState st_;
  backend::StreamHandle stream_ = 0;
  std::mt19937 rng_;
  unsigned seed_ = 0;
  twin::TwinCache cache_;  // a private cache: hit/miss counts are this test's
};

TEST_F(TwinValidatorTest, PointerTableMissesNameTheScatteredToBuffers) {
  AddModule(1, "pointer_table.fatbin");
  Scatter s;
  MakeScatter(4, 32, &s);
  const std::string kernel = kScatter;
  auto speculated = Speculate(1, kernel, s.params);
  // The speculation sees the table and the source only.
  std::set<uint64_t> seen;
  for (const auto& r : speculated) seen.insert(r.ptr);
  EXPECT_EQ(seen, (std::set<uint64_t>{s.table, s.src}));

  TwinValidator v(ctx_.get(), 256, &cache_);
  uint64_t ticket = 0;
  ASSERT_OK(v.Launch(st_, Args(7, 1, &kernel, 1, 128, s.params), stream_, speculated, false, &ticket));
  EXPECT_EQ(v.pending(), 1u);
  std::vector<TwinValidator::Collected> got;
  ASSERT_OK(v.Drain(true, &got));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].ticket, ticket);
  EXPECT_EQ(got[0].dropped, 0u);
  EXPECT_EQ(v.pending(), 0u);
  // One write miss per element, at exactly the slot it stored to.
  std::set<uint64_t> addrs;
  for (const TwinAccess& a : got[0].misses) {
    EXPECT_TRUE(a.write);
    EXPECT_EQ(a.kernel_id, 7u);
    addrs.insert(a.address);
  }
  EXPECT_EQ(got[0].misses.size(), static_cast<size_t>(s.n()));
  EXPECT_EQ(addrs, ScatterTargets(s));
  // The twin computes what the original does.
  ExpectScatterResult(s);

  // With the targets in the allowed set: nothing to report.
  for (uint64_t t : s.targets) speculated.push_back({t, s.per * sizeof(int), true});
  ASSERT_OK(v.Launch(st_, Args(7, 1, &kernel, 1, 128, s.params), stream_, speculated, false, &ticket));
  got.clear();
  ASSERT_OK(v.Drain(true, &got));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(got[0].misses.empty());
  EXPECT_EQ(got[0].dropped, 0u);
}

TEST_F(TwinValidatorTest, CorrectlySpeculatedVectorAddReportsNothing) {
  AddModule(2, "vector_add.fatbin");
  const int n = 300;  // two partial blocks of 256
  const uint64_t a = Alloc(n * 4), b = Alloc(n * 4), c = Alloc(n * 4);
  std::vector<float> ha(n), hb(n);
  for (int i = 0; i < n; ++i) {
    ha[i] = static_cast<float>(rng_() % 1000);
    hb[i] = static_cast<float>(rng_() % 1000);
  }
  Upload(a, ha);
  Upload(b, hb);
  Upload(c, std::vector<float>(n, -1.0f));
  Params p(28);
  p.At<uint64_t>(0, a).At<uint64_t>(8, b).At<uint64_t>(16, c).At<int32_t>(24, n);
  const std::string kernel = kVectorAdd;
  const auto speculated = Speculate(2, kernel, p);
  ASSERT_EQ(speculated.size(), 3u);

  TwinValidator v(ctx_.get(), 512, &cache_);  // room for a miss per element below
  std::vector<uint64_t> tickets(2);
  // Write mode, then read+write mode (a second twin module).
  ASSERT_OK(v.Launch(st_, Args(3, 2, &kernel, 2, 256, p), stream_, speculated, false, &tickets[0]));
  ASSERT_OK(v.Launch(st_, Args(3, 2, &kernel, 2, 256, p), stream_, speculated, true, &tickets[1]));
  EXPECT_EQ(v.loaded_twins(), 2u);
  std::vector<TwinValidator::Collected> got;
  ASSERT_OK(v.Drain(true, &got));
  ASSERT_EQ(got.size(), 2u);
  for (const auto& g : got) {
    EXPECT_TRUE(g.misses.empty()) << "ticket " << g.ticket << ": first miss at 0x" << std::hex
                                  << (g.misses.empty() ? 0 : g.misses[0].address);
    EXPECT_EQ(g.dropped, 0u);
  }
  auto hc = Download<float>(c, n);
  for (int i = 0; i < n; ++i) ASSERT_EQ(hc[i], ha[i] + hb[i]) << i << " seed " << seed_;

  // `c` speculated read-only: every store to it is a miss in write mode.
  auto ro = speculated;
  for (auto& r : ro) r.write = false;
  uint64_t t = 0;
  ASSERT_OK(v.Launch(st_, Args(3, 2, &kernel, 2, 256, p), stream_, ro, false, &t));
  got.clear();
  ASSERT_OK(v.Drain(true, &got));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].dropped, 0u);
  std::set<uint64_t> addrs;
  for (const auto& m : got[0].misses) {
    EXPECT_TRUE(m.write);
    addrs.insert(m.address);
  }
  std::set<uint64_t> want;
  for (int i = 0; i < n; ++i) want.insert(c + 4ull * i);
  EXPECT_EQ(addrs, want);
  // One twin build per (PTX, mode), one load per (module, mode).
  EXPECT_EQ(cache_.misses(), 2u);
  EXPECT_EQ(v.loaded_twins(), 2u);
}

TEST_F(TwinValidatorTest, NoTwinWithoutPtx) {
  AddModule(3, "pointer_table.sass.fatbin");  // SASS only: no PTX entry
  AddModule(4, "vector_add.fatbin");
  Scatter s;
  MakeScatter(2, 8, &s);
  const std::string kernel = kScatter;
  TwinValidator v(ctx_.get(), 64, &cache_);
  uint64_t ticket = 0;
  Status st = v.Launch(st_, Args(1, 3, &kernel, 1, 16, s.params), stream_, {}, false, &ticket);
  EXPECT_EQ(st.code(), Status::Code::kNotSupported) << st.ToString();
  // Remembered: the second launch fails the same way without a rebuild.
  st = v.Launch(st_, Args(1, 3, &kernel, 1, 16, s.params), stream_, {}, false, &ticket);
  EXPECT_EQ(st.code(), Status::Code::kNotSupported) << st.ToString();
  EXPECT_EQ(cache_.misses(), 0u);
  // A kernel its module's PTX does not have; a module id with no image.
  const std::string other = "_Z5otherv";
  st = v.Launch(st_, Args(2, 4, &other, 1, 16, s.params), stream_, {}, false, &ticket);
  EXPECT_EQ(st.code(), Status::Code::kNotSupported) << st.ToString();
  st = v.Launch(st_, Args(2, 99, &kernel, 1, 16, s.params), stream_, {}, false, &ticket);
  EXPECT_EQ(st.code(), Status::Code::kNotSupported) << st.ToString();
  EXPECT_EQ(v.pending(), 0u);
  // Nothing ran: the targets are untouched.
  for (uint64_t t : s.targets) {
    auto got = Download<int>(t, s.per);
    EXPECT_TRUE(std::all_of(got.begin(), got.end(), [](int x) { return x == 0; }));
  }
}

// A kernel whose twin cannot check an access it may make (here a
// tensor-map load, unchecked in read mode) gets NotSupported with the
// reason, and nothing runs; in write mode the same kernel has a twin.
TEST_F(TwinValidatorTest, AKernelWithAnAccessItsTwinCannotCheckIsRefusedWithTheReason) {
  static const char kPtx[] = R"(
.version 8.0
.target sm_90
.address_size 64
.visible .entry tensor_load(.param .u64 tm, .param .u64 out, .param .u32 use_tma)
{
  .shared .align 128 .b8 tile[256];
  .shared .align 8 .b64 bar;
  .reg .pred %p<2>;
  .reg .b32 %r<5>;
  .reg .b64 %rd<3>;
  ld.param.u64 %rd1, [tm];
  ld.param.u64 %rd2, [out];
  ld.param.u32 %r4, [use_tma];
  setp.eq.u32 %p1, %r4, 0;
  @%p1 bra $L_done;
  mov.u32 %r1, 0;
  mov.u32 %r2, tile;
  mov.u32 %r3, bar;
  cp.async.bulk.tensor.1d.shared::cluster.global.mbarrier::complete_tx::bytes [%r2], [%rd1, {%r1}], [%r3];
$L_done:
  ret;
}
)";
  auto image = std::make_shared<const std::vector<std::byte>>(
      std::as_bytes(std::span<const char>(kPtx, sizeof kPtx)).begin(),
      std::as_bytes(std::span<const char>(kPtx, sizeof kPtx)).end());
  st_.module_images[5] = image;
  ASSERT_OK(session::BuildModuleKernels(*image, nullptr, &st_.module_kernels[5]));
  const uint64_t buf = Alloc(256);
  Params p{20};
  p.At<uint64_t>(0, buf).At<uint64_t>(8, buf).At<uint32_t>(16, 0);
  const std::string kernel = "tensor_load";
  TwinValidator v(ctx_.get(), 64, &cache_);
  uint64_t ticket = 0;
  Status st = v.Launch(st_, Args(1, 5, &kernel, 1, 1, p), stream_, {}, /*check_reads=*/true, &ticket);
  EXPECT_EQ(st.code(), Status::Code::kNotSupported) << st.ToString();
  EXPECT_NE(st.message().find("cannot be validated"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("cp.async.bulk.tensor"), std::string::npos) << st.ToString();
  EXPECT_EQ(v.pending(), 0u);
  // Writes only: a tensor load writes shared memory, nothing unchecked, so
  // the validator goes on to launch the twin (which the sim then refuses:
  // it does not run tensor-map copies).
  const std::vector<session::AccessRange> allowed{{buf, 256, true}};
  st = v.Launch(st_, Args(1, 5, &kernel, 1, 1, p), stream_, allowed, false, &ticket);
  EXPECT_EQ(st.message().find("cannot be validated"), std::string::npos) << st.ToString();
}

TEST_F(TwinValidatorTest, ReportOverflowIsReported) {
  AddModule(1, "pointer_table.fatbin");
  Scatter s;
  MakeScatter(4, 16, &s);  // 64 misses
  const std::string kernel = kScatter;
  const uint32_t capacity = 1 + rng_() % 40;  // 1..40 < 64
  TwinValidator v(ctx_.get(), capacity, &cache_);
  uint64_t ticket = 0;
  ASSERT_OK(v.Launch(st_, Args(5, 1, &kernel, 1, 64, s.params), stream_, Speculate(1, kernel, s.params), false,
                     &ticket));
  std::vector<TwinValidator::Collected> got;
  ASSERT_OK(v.Drain(true, &got));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(got[0].overflowed());
  EXPECT_EQ(got[0].misses.size(), capacity) << "seed " << seed_;
  EXPECT_EQ(got[0].dropped, static_cast<uint32_t>(s.n()) - capacity);
  const auto targets = ScatterTargets(s);
  std::set<uint64_t> distinct;
  for (const auto& m : got[0].misses) {
    EXPECT_TRUE(targets.count(m.address)) << std::hex << m.address;
    distinct.insert(m.address);
  }
  EXPECT_EQ(distinct.size(), capacity);
  ExpectScatterResult(s);
}

// More launches than slots, never drained in between: the validator reuses
// the oldest slot (keeping its result), every ticket comes back once.
TEST_F(TwinValidatorTest, SlotsAreReusedAndEveryLaunchIsCollected) {
  AddModule(1, "pointer_table.fatbin");
  Scatter s;
  MakeScatter(2, 8, &s);
  const std::string kernel = kScatter;
  const auto speculated = Speculate(1, kernel, s.params);
  TwinValidator v(ctx_.get(), 32, &cache_, /*max_slots=*/2);
  std::vector<uint64_t> tickets;
  for (int i = 0; i < 5; ++i) {
    uint64_t t = 0;
    ASSERT_OK(v.Launch(st_, Args(9, 1, &kernel, 1, 16, s.params), stream_, speculated, false, &t));
    tickets.push_back(t);
  }
  EXPECT_EQ(v.pending(), 5u);
  EXPECT_EQ(v.loaded_twins(), 1u);
  EXPECT_EQ(cache_.misses(), 1u);
  std::vector<TwinValidator::Collected> got;
  ASSERT_OK(v.Drain(true, &got));
  ASSERT_EQ(got.size(), 5u);
  std::vector<uint64_t> back;
  for (const auto& g : got) {
    back.push_back(g.ticket);
    EXPECT_EQ(g.misses.size(), static_cast<size_t>(s.n()));
    EXPECT_EQ(g.dropped, 0u);
  }
  std::sort(back.begin(), back.end());
  EXPECT_EQ(back, tickets);
  EXPECT_EQ(v.pending(), 0u);
}

// Drain(false) from another thread while the consumer thread launches:
// polling (QueryEvent) collects every launch exactly once.
TEST_F(TwinValidatorTest, ConcurrentPollingDrainCollectsEveryLaunchOnce) {
  AddModule(1, "pointer_table.fatbin");
  Scatter s;
  MakeScatter(4, 8, &s);
  const std::string kernel = kScatter;
  const auto speculated = Speculate(1, kernel, s.params);
  TwinValidator v(ctx_.get(), 64, &cache_, /*max_slots=*/4);
  constexpr int kLaunches = 12;
  std::atomic<bool> launching{true};
  std::vector<TwinValidator::Collected> polled;
  std::thread drainer([&] {
    while (launching.load() || v.pending() != 0) {
      std::vector<TwinValidator::Collected> got;
      EXPECT_TRUE(v.Drain(false, &got).ok());
      for (auto& g : got) polled.push_back(std::move(g));
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  std::vector<uint64_t> tickets;
  for (int i = 0; i < kLaunches; ++i) {
    uint64_t t = 0;
    const Status st = v.Launch(st_, Args(4, 1, &kernel, 1, 32, s.params), stream_, speculated, false, &t);
    EXPECT_TRUE(st.ok()) << st.ToString();
    if (!st.ok()) break;  // still stop and join the drainer
    tickets.push_back(t);
  }
  launching.store(false);
  drainer.join();
  ASSERT_EQ(polled.size(), static_cast<size_t>(kLaunches));
  ASSERT_EQ(tickets.size(), static_cast<size_t>(kLaunches));
  std::vector<uint64_t> back;
  for (const auto& g : polled) {
    back.push_back(g.ticket);
    EXPECT_EQ(g.misses.size(), static_cast<size_t>(s.n()));
  }
  std::sort(back.begin(), back.end());
  EXPECT_EQ(back, tickets);
}

}  // namespace
}  // namespace phos::engine
