// Validation without a GPU (docs/instrument.md "Validation without a GPU";
// DESIGN §3 "Validation"): the twin kernels MakeTwin builds are run in the
// PTX interpreter and must
//  1. compute bit-identically what the original kernel computes and report
//     nothing when the ranges cover every buffer the kernel touches (every
//     kernel of tests/apps and of validation_kernels.cu, both modes);
//  2. report the writes of pointer_table's `scatter` through its pointer
//     table when the ranges hold only its direct pointer arguments;
//  3. report loads outside the ranges in read+write mode only;
//  4. count every miss but write at most `capacity` records;
//  5. not report stores whose guard is false, nor generic stores that land
//     in shared or local memory, but report generic stores to global memory;
//  6. name the launching kernel in records made inside device functions.
// Every test draws fresh random inputs (the seed is printed on failure;
// PHOS_TEST_SEED=<seed> replays it) and checks results against a CPU
// reference.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "validation_harness.h"

namespace phos::validation::test {
namespace {

using twin::Range;
using twin::TwinMode;

constexpr TwinMode kModes[] = {TwinMode::kWrites, TwinMode::kReadsAndWrites};

#define PHOS_SEEDED_RNG(rng)                                                     \
  const uint32_t rng##_seed = FreshSeed();                                       \
  SCOPED_TRACE(::testing::Message() << "PHOS_TEST_SEED=" << rng##_seed);         \
  std::mt19937 rng(rng##_seed)

uint32_t Blocks(int n, int block) { return static_cast<uint32_t>((n + block - 1) / block); }

template <typename T>
uint64_t Addr(const T* p) {
  return reinterpret_cast<uint64_t>(p);
}

bool Inside(uint64_t addr, uint64_t bytes, const Range& r) { return addr >= r.begin && addr + bytes <= r.end; }

std::vector<uint64_t> SortedAddresses(const twin::Report& r) {
  std::vector<uint64_t> v;
  for (const auto& rec : r.records) v.push_back(rec.address);
  std::sort(v.begin(), v.end());
  return v;
}

// The report holds exactly the misses `want` (any order), all made by
// `kernel_id` with the given is_write, and nothing was dropped.
void ExpectMisses(const ReportBuffer& buf, uint32_t kernel_id, uint32_t is_write, std::vector<uint64_t> want) {
  EXPECT_TRUE(buf.CanaryIntact());
  twin::Report r;
  Status st = buf.Decode(&r);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_FALSE(r.overflowed());
  ASSERT_EQ(r.header.count, want.size());
  ASSERT_EQ(r.records.size(), want.size());
  for (const auto& rec : r.records) {
    EXPECT_EQ(rec.kernel_id, kernel_id);
    EXPECT_EQ(rec.is_write, is_write);
  }
  std::sort(want.begin(), want.end());
  EXPECT_EQ(SortedAddresses(r), want);
}

// ---------------------------------------------------------------------------
// 1. Every kernel of every tests/apps program: twin == original, no misses.

TEST(validation_apps, VectorAdd) {
  PHOS_SEEDED_RNG(rng);
  Kernels k;
  ASSERT_TRUE(k.Load("vector_add"));
  ASSERT_EQ(k.Names().size(), 1u);
  Device dev;
  const int n = 3000 + static_cast<int>(rng() % 5000);
  const auto a = RandReals<float>(rng, n, -100, 100), b = RandReals<float>(rng, n, -100, 100);
  float* da = dev.Alloc(a);
  float* db = dev.Alloc(b);
  float* dc = dev.Alloc(RandReals<float>(rng, n, -1, 1));
  ExpectTwinsMatchOriginal(k, dev, k.Kernel("vector_add"), {Blocks(n, 256)}, {256},
                           Params().Add(da).Add(db).Add(dc).Add(n),
                           {dev.RangeOf(da), dev.RangeOf(db), dev.RangeOf(dc)});
  for (int i = 0; i < n; ++i) ASSERT_EQ(dc[i], a[i] + b[i]) << i;
}

TEST(validation_apps, Saxpy) {
  PHOS_SEEDED_RNG(rng);
  Kernels k;
  ASSERT_TRUE(k.Load("saxpy_loop"));
  ASSERT_EQ(k.Names().size(), 1u);
  Device dev;
  const int n = 2000 + static_cast<int>(rng() % 4000);
  const auto x = RandReals<float>(rng, n, -1, 1), y = RandReals<float>(rng, n, -1, 1);
  const float a = RandReals<float>(rng, 1, 0.25, 4)[0];
  float* dx = dev.Alloc(x);
  float* dy = dev.Alloc(y);
  ExpectTwinsMatchOriginal(k, dev, k.Kernel("saxpy"), {Blocks(n, 128)}, {128}, Params().Add(a).Add(dx).Add(dy).Add(n),
                           {dev.RangeOf(dx), dev.RangeOf(dy)});
  for (int i = 0; i < n; ++i) ASSERT_EQ(dy[i], std::fmaf(a, x[i], y[i])) << i;
}

TEST(validation_apps, ReduceSumAndBlockMax) {
  PHOS_SEEDED_RNG(rng);
  Kernels k;
  ASSERT_TRUE(k.Load("reduce_shared"));
  ASSERT_EQ(k.Names().size(), 2u);
  Device dev;
  const int n = 4096 + static_cast<int>(rng() % 4096);
  const auto in = RandInts<unsigned>(rng, n, 1, 0xFFFFFFFFu);
  const auto sum0 = RandInts<unsigned long long>(rng, 1, 1, 1ull << 62);
  const int blocks = static_cast<int>(Blocks(n, 256));
  unsigned* din = dev.Alloc(in);
  unsigned long long* dsum = dev.Alloc(sum0);
  unsigned* dmax = dev.Alloc(RandInts<unsigned>(rng, blocks, 1, 100));
  ExpectTwinsMatchOriginal(k, dev, k.Kernel("reduce_sum"), {8}, {256}, Params().Add(din).Add(dsum).Add(n),
                           {dev.RangeOf(din), dev.RangeOf(dsum)});
  unsigned long long ref = sum0[0];
  for (unsigned v : in) ref += v;
  EXPECT_EQ(*dsum, ref);
  ExpectTwinsMatchOriginal(k, dev, k.Kernel("block_max"), {static_cast<uint32_t>(blocks)}, {256},
                           Params().Add(din).Add(dmax).Add(n), {dev.RangeOf(din), dev.RangeOf(dmax)});
  for (int b = 0; b < blocks; ++b) {
    unsigned m = 0;
    for (int i = b * 256; i < (b + 1) * 256 && i < n; ++i) m = std::max(m, in[i]);
    ASSERT_EQ(dmax[b], m) << b;
  }
}

struct Operands {
  const int* x;
  const int* y;
  int* out;
  int* histogram;
  int n;
  int scale;
};

TEST(validation_apps, StructOfPointers) {
  PHOS_SEEDED_RNG(rng);
  Kernels k;
  ASSERT_TRUE(k.Load("struct_of_pointers"));
  ASSERT_EQ(k.Names().size(), 1u);
  Device dev;
  const int n = 1000 + static_cast<int>(rng() % 3000), bins = 16;
  const int scale = 1 + static_cast<int>(rng() % 13);
  const auto x = RandInts<int>(rng, n, -50000, 50000), y = RandInts<int>(rng, n, -50000, 50000);
  const auto hist0 = RandInts<int>(rng, bins, 1, 1000);
  Operands op{dev.Alloc(x), dev.Alloc(y), dev.Alloc(RandInts<int>(rng, n, 1, 9)), dev.Alloc(hist0), n, scale};
  ExpectTwinsMatchOriginal(k, dev, k.Kernel("combine"), {Blocks(n, 128)}, {128}, Params().Add(op).Add(bins),
                           {dev.RangeOf(op.x), dev.RangeOf(op.y), dev.RangeOf(op.out), dev.RangeOf(op.histogram)});
  std::vector<int> hist = hist0;
  for (int i = 0; i < n; ++i) {
    const int v = x[i] * scale + y[i];
    ASSERT_EQ(op.out[i], v) << i;
    ++hist[static_cast<unsigned>(v) % bins];
  }
  for (int b = 0; b < bins; ++b) EXPECT_EQ(op.histogram[b], hist[b]) << b;
}

// pointer_table's buffers: `tables` targets, the table of their addresses
// and the source.
struct PointerTable {
  int tables = 0, per = 0, n = 0;
  std::vector<int> src;
  std::vector<int*> targets;
  int** table = nullptr;
  int* dsrc = nullptr;

  PointerTable(Device& dev, std::mt19937& rng) {
    tables = 2 + static_cast<int>(rng() % 4);
    per = 200 + static_cast<int>(rng() % 300);
    n = tables * per;
    src = RandInts<int>(rng, n, -(1 << 26), 1 << 26);
    for (int t = 0; t < tables; ++t) targets.push_back(dev.Alloc(RandInts<int>(rng, per, 1, 1000)));
    table = dev.Alloc(targets);
    dsrc = dev.Alloc(src);
  }
  Params ScatterParams() const { return Params().Add(table).Add(tables).Add(static_cast<const int*>(dsrc)).Add(n); }
  std::vector<Range> Direct(const Device& dev) const { return {dev.RangeOf(table), dev.RangeOf(dsrc)}; }
  std::vector<Range> All(const Device& dev) const {
    auto r = Direct(dev);
    for (int* t : targets) r.push_back(dev.RangeOf(t));
    return r;
  }
  int* Slot(int i) const { return targets[i % tables] + i / tables; }
  std::vector<uint64_t> SlotAddresses() const {
    std::vector<uint64_t> v;
    for (int i = 0; i < n; ++i) v.push_back(Addr(Slot(i)));
    return v;
  }
  // Index of the target buffer holding [addr, addr+4), -1 if none.
  int TargetOf(const Device& dev, uint64_t addr) const {
    for (int t = 0; t < tables; ++t)
      if (Inside(addr, 4, dev.RangeOf(targets[t]))) return t;
    return -1;
  }
};

TEST(validation_apps, PointerTableWithTargetsInRanges) {
  PHOS_SEEDED_RNG(rng);
  Kernels k;
  ASSERT_TRUE(k.Load("pointer_table"));
  ASSERT_EQ(k.Names().size(), 1u);
  Device dev;
  PointerTable pt(dev, rng);
  ExpectTwinsMatchOriginal(k, dev, k.Kernel("scatter"), {Blocks(pt.n, 128)}, {128}, pt.ScatterParams(), pt.All(dev));
  for (int i = 0; i < pt.n; ++i) ASSERT_EQ(*pt.Slot(i), pt.src[i] * 3 + 1) << i;
}

TEST(validation_apps, MultiStreamKernels) {
  PHOS_SEEDED_RNG(rng);
  Kernels k;
  ASSERT_TRUE(k.Load("multi_stream"));
  ASSERT_EQ(k.Names().size(), 2u);
  Device dev;
  const int chunks = 4 + static_cast<int>(rng() % 8), chunk = 200 + static_cast<int>(rng() % 600);
  const int n = chunks * chunk;
  const unsigned salt = static_cast<unsigned>(rng()) | 1u;
  const auto in = RandInts<unsigned>(rng, n, 1, 0xFFFFFFFFu);
  unsigned* din = dev.Alloc(in);
  unsigned* dout = dev.Alloc(RandInts<unsigned>(rng, n, 1, 9));
  ExpectTwinsMatchOriginal(k, dev, k.Kernel("transform"), {Blocks(n, 256)}, {256},
                           Params().Add(din).Add(dout).Add(n).Add(salt), {dev.RangeOf(din), dev.RangeOf(dout)});
  std::vector<unsigned> ref(n);
  for (int i = 0; i < n; ++i) {
    unsigned v = in[i] ^ salt;
    ref[i] = v * 2654435761u + (v >> 13);
    ASSERT_EQ(dout[i], ref[i]) << i;
  }
  // chunk_sums over transform's output (a buffer of its own: every run starts
  // from the buffers' initial contents).
  unsigned* ddata = dev.Alloc(ref);
  unsigned long long* dsums = dev.Alloc(RandInts<unsigned long long>(rng, chunks, 1, 9));
  ExpectTwinsMatchOriginal(k, dev, k.Kernel("chunk_sums"), {static_cast<uint32_t>(chunks)}, {128},
                           Params().Add(ddata).Add(chunk).Add(dsums), {dev.RangeOf(ddata), dev.RangeOf(dsums)});
  for (int c = 0; c < chunks; ++c) {
    unsigned long long s = 0;
    for (int i = 0; i < chunk; ++i) s += ref[static_cast<size_t>(c) * chunk + i];
    ASSERT_EQ(dsums[c], s) << c;
  }
}

// Hand-written: one store under a guard, one under its negation (nvcc turns
// `if`s into branches, so only hand-written PTX is sure to have guarded
// stores). flags[i] odd: odd_out[i] = 3i+1; even: even_out[i] = flags[i].
constexpr const char* kGuardedPtx = R"(
.version 7.0
.target sm_80
.address_size 64

.visible .entry guarded_store(
	.param .u64 guarded_store_param_0,
	.param .u64 guarded_store_param_1,
	.param .u64 guarded_store_param_2,
	.param .u32 guarded_store_param_3
)
{
	.reg .pred %p<3>;
	.reg .b32 %r<10>;
	.reg .b64 %rd<10>;

	ld.param.u64 %rd1, [guarded_store_param_0];
	ld.param.u64 %rd2, [guarded_store_param_1];
	ld.param.u64 %rd3, [guarded_store_param_2];
	ld.param.u32 %r1, [guarded_store_param_3];
	mov.u32 %r2, %ctaid.x;
	mov.u32 %r3, %ntid.x;
	mov.u32 %r4, %tid.x;
	mad.lo.s32 %r5, %r2, %r3, %r4;
	setp.ge.s32 %p1, %r5, %r1;
	@%p1 bra $L_done;
	cvta.to.global.u64 %rd4, %rd1;
	mul.wide.s32 %rd5, %r5, 4;
	add.s64 %rd6, %rd4, %rd5;
	ld.global.u32 %r6, [%rd6];
	and.b32 %r7, %r6, 1;
	setp.ne.u32 %p2, %r7, 0;
	mad.lo.s32 %r8, %r5, 3, 1;
	add.s64 %rd7, %rd2, %rd5;
	add.s64 %rd8, %rd3, %rd5;
	@%p2 st.global.u32 [%rd7], %r8;
	@!%p2 st.global.u32 [%rd8], %r6;
$L_done:
	ret;
}
)";

// Our own kernels (validation_kernels.cu and kGuardedPtx) with ranges that
// cover everything they touch: twin == original, no misses.
TEST(validation_own, AllKernelsWithFullRanges) {
  PHOS_SEEDED_RNG(rng);
  Kernels k;
  ASSERT_TRUE(k.Load("validation_kernels"));
  ASSERT_EQ(k.Names().size(), 6u);  // wmma_tile: validation_wmma
  Device dev;
  PointerTable pt(dev, rng);
  const int n = pt.n;
  int* out = dev.Alloc(RandInts<int>(rng, n, 1, 9));
  int* unspec = dev.Alloc(RandInts<int>(rng, n, 1, 9));
  int* flags = dev.Alloc(RandInts<int>(rng, n, 1, 1 << 20));
  int* in = dev.Alloc(RandInts<int>(rng, n, -(1 << 20), 1 << 20));
  const std::vector<int> in_v(in, in + n), flags_v(flags, flags + n), out0(out, out + n);

  // gather: out[i] = src_table[i % T][i / T] * 5 - 3 (the targets hold the data).
  std::vector<std::vector<int>> tgt0;
  for (int* t : pt.targets) tgt0.emplace_back(t, t + pt.per);
  ExpectTwinsMatchOriginal(k, dev, k.Kernel("gather"), {Blocks(n, 128)}, {128},
                           Params().Add(pt.table).Add(pt.tables).Add(out).Add(n),
                           [&] {
                             auto r = pt.All(dev);
                             r.push_back(dev.RangeOf(out));
                             return r;
                           }());
  for (int i = 0; i < n; ++i) ASSERT_EQ(out[i], tgt0[i % pt.tables][i / pt.tables] * 5 - 3) << i;

  ExpectTwinsMatchOriginal(k, dev, k.Kernel("store_if"), {Blocks(n, 256)}, {256},
                           Params().Add(flags).Add(in).Add(out).Add(n),
                           {dev.RangeOf(flags), dev.RangeOf(in), dev.RangeOf(out)});
  for (int i = 0; i < n; ++i) ASSERT_EQ(out[i], (flags_v[i] & 1) ? (in_v[i] ^ 0x5a5a) : out0[i]) << i;

  ExpectTwinsMatchOriginal(k, dev, k.Kernel("generic_spaces"), {Blocks(n, 256)}, {256},
                           Params().Add(in).Add(out).Add(unspec).Add(n),
                           {dev.RangeOf(in), dev.RangeOf(out), dev.RangeOf(unspec)});
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(unspec[i], in_v[i] * 5) << i;
    ASSERT_EQ(out[i], in_v[i] + 1 + in_v[i] + (in_v[i] & 7)) << i;
  }

  for (const char* name : {"scatter_via_func_a", "scatter_via_func_b"}) {
    ExpectTwinsMatchOriginal(k, dev, k.Kernel(name), {Blocks(n, 128)}, {128}, pt.ScatterParams(), pt.All(dev));
    const int delta = name[17] == 'a' ? 11 : -7;
    for (int i = 0; i < n; ++i) ASSERT_EQ(*pt.Slot(i), pt.src[i] + delta) << name << " " << i;
  }

  Kernels g;
  ASSERT_TRUE(g.LoadText(kGuardedPtx));
  int* odd_out = dev.Alloc(RandInts<int>(rng, n, 1, 9));
  int* even_out = dev.Alloc(RandInts<int>(rng, n, 1, 9));
  const std::vector<int> odd0(odd_out, odd_out + n), even0(even_out, even_out + n);
  ExpectTwinsMatchOriginal(g, dev, "guarded_store", {Blocks(n, 128)}, {128},
                           Params().Add(flags).Add(odd_out).Add(even_out).Add(n),
                           {dev.RangeOf(flags), dev.RangeOf(odd_out), dev.RangeOf(even_out)});
  for (int i = 0; i < n; ++i) {
    const bool odd = flags_v[i] & 1;
    ASSERT_EQ(odd_out[i], odd ? 3 * i + 1 : odd0[i]) << i;
    ASSERT_EQ(even_out[i], odd ? even0[i] : flags_v[i]) << i;
  }
}

// ---------------------------------------------------------------------------
// 2. The planted mis-speculation: scatter writes through its pointer table.

TEST(validation_misspeculation, PointerTableWritesAreReported) {
  PHOS_SEEDED_RNG(rng);
  Kernels k;
  ASSERT_TRUE(k.Load("pointer_table"));
  Device dev;
  PointerTable pt(dev, rng);
  const std::string kernel = k.Kernel("scatter");
  for (TwinMode mode : kModes) {
    SCOPED_TRACE(ModeName(mode));
    // Ranges: the direct pointer arguments only (the table and the source).
    dev.Reset();
    ReportBuffer report(dev, static_cast<uint32_t>(pt.n) + 8, k.Id(kernel), ModeFlags(mode));
    Status st = k.RunTwin(dev, mode, kernel, {Blocks(pt.n, 128)}, {128}, pt.ScatterParams(), pt.Direct(dev), report);
    ASSERT_TRUE(st.ok()) << st.ToString();
    // The twin still does every store.
    for (int i = 0; i < pt.n; ++i) ASSERT_EQ(*pt.Slot(i), pt.src[i] * 3 + 1) << i;
    // One write miss per element, at exactly the slot it wrote, inside the
    // (un-speculated) target buffer and outside the speculated ranges.
    ExpectMisses(report, k.Id(kernel), 1, pt.SlotAddresses());
    twin::Report r;
    ASSERT_TRUE(report.Decode(&r).ok());
    std::vector<int> per_target(pt.tables, 0);
    for (const auto& rec : r.records) {
      const int t = pt.TargetOf(dev, rec.address);
      ASSERT_GE(t, 0) << std::hex << rec.address;
      ++per_target[t];
      for (const Range& s : pt.Direct(dev)) EXPECT_FALSE(Inside(rec.address, 1, s));
    }
    for (int t = 0; t < pt.tables; ++t) EXPECT_EQ(per_target[t], pt.per) << t;
    EXPECT_EQ(r.header.kernel_id, k.Id(kernel));
    EXPECT_EQ(r.header.flags, ModeFlags(mode));

    // With the targets speculated too: nothing to report.
    dev.Reset();
    ReportBuffer clean(dev, 16, k.Id(kernel), ModeFlags(mode));
    st = k.RunTwin(dev, mode, kernel, {Blocks(pt.n, 128)}, {128}, pt.ScatterParams(), pt.All(dev), clean);
    ASSERT_TRUE(st.ok()) << st.ToString();
    ExpectMisses(clean, k.Id(kernel), 1, {});
    for (int i = 0; i < pt.n; ++i) ASSERT_EQ(*pt.Slot(i), pt.src[i] * 3 + 1) << i;
  }
}

// ---------------------------------------------------------------------------
// 3. Read mode: loads outside the ranges are reported only in read+write mode.

TEST(validation_read_mode, LoadsOutsideRangesReportedOnlyWithReads) {
  PHOS_SEEDED_RNG(rng);
  Kernels k;
  ASSERT_TRUE(k.Load("validation_kernels"));
  Device dev;
  PointerTable pt(dev, rng);  // the targets are gather's sources here
  const int n = pt.n;
  int* out = dev.Alloc(RandInts<int>(rng, n, 1, 9));
  const std::string kernel = k.Kernel("gather");
  const Params p = Params().Add(pt.table).Add(pt.tables).Add(out).Add(n);
  const std::vector<Range> ranges = {dev.RangeOf(pt.table), dev.RangeOf(out)};
  for (TwinMode mode : kModes) {
    SCOPED_TRACE(ModeName(mode));
    dev.Reset();
    ReportBuffer report(dev, static_cast<uint32_t>(n), k.Id(kernel), ModeFlags(mode));
    Status st = k.RunTwin(dev, mode, kernel, {Blocks(n, 128)}, {128}, p, ranges, report);
    ASSERT_TRUE(st.ok()) << st.ToString();
    for (int i = 0; i < n; ++i) ASSERT_EQ(out[i], *pt.Slot(i) * 5 - 3) << i;
    if (mode == TwinMode::kWrites)
      ExpectMisses(report, k.Id(kernel), 0, {});
    else
      ExpectMisses(report, k.Id(kernel), 0, pt.SlotAddresses());
  }
}

// ---------------------------------------------------------------------------
// 4. Report overflow: count keeps counting, only `capacity` records written.

TEST(validation_report, OverflowWritesOnlyCapacityRecords) {
  PHOS_SEEDED_RNG(rng);
  Kernels k;
  ASSERT_TRUE(k.Load("pointer_table"));
  Device dev;
  PointerTable pt(dev, rng);
  const std::string kernel = k.Kernel("scatter");
  const std::vector<uint64_t> slots = pt.SlotAddresses();
  const std::set<uint64_t> slot_set(slots.begin(), slots.end());
  const uint32_t n = static_cast<uint32_t>(pt.n);
  for (uint32_t cap : {0u, 1u, 2u + static_cast<uint32_t>(rng() % (n / 2)), n - 1}) {
    SCOPED_TRACE(::testing::Message() << "capacity " << cap);
    dev.Reset();
    ReportBuffer report(dev, cap, k.Id(kernel), 0);
    Status st = k.RunTwin(dev, TwinMode::kWrites, kernel, {Blocks(pt.n, 128)}, {128}, pt.ScatterParams(),
                          pt.Direct(dev), report);
    ASSERT_TRUE(st.ok()) << st.ToString();
    for (int i = 0; i < pt.n; ++i) ASSERT_EQ(*pt.Slot(i), pt.src[i] * 3 + 1) << i;
    EXPECT_TRUE(report.CanaryIntact()) << "the twin wrote past the report buffer";
    EXPECT_EQ(report.header().count, n);
    EXPECT_EQ(report.header().capacity, cap);
    twin::Report r;
    st = report.Decode(&r);
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_TRUE(r.overflowed());
    EXPECT_EQ(r.dropped, n - cap);
    EXPECT_EQ(r.misses(), n);
    ASSERT_EQ(r.records.size(), cap);
    std::set<uint64_t> seen;
    for (const auto& rec : r.records) {
      EXPECT_EQ(rec.kernel_id, k.Id(kernel));
      EXPECT_EQ(rec.is_write, 1u);
      EXPECT_TRUE(slot_set.count(rec.address)) << std::hex << rec.address;
      EXPECT_TRUE(seen.insert(rec.address).second) << "duplicate record " << std::hex << rec.address;
    }
  }
}

// ---------------------------------------------------------------------------
// 5. Guards and address spaces.

TEST(validation_guards, StoresUnderFalseGuardsAreNotReported) {
  PHOS_SEEDED_RNG(rng);
  Device dev;
  const int n = 500 + static_cast<int>(rng() % 2000);
  int* flags = dev.Alloc(RandInts<int>(rng, n, 1, 1 << 20));
  int* in = dev.Alloc(RandInts<int>(rng, n, 1, 1 << 20));
  int* out = dev.Alloc(RandInts<int>(rng, n, 1, 9));
  int* even_out = dev.Alloc(RandInts<int>(rng, n, 1, 9));
  const std::vector<int> out0(out, out + n), even0(even_out, even_out + n);
  std::vector<uint64_t> odd_slots, even_slots;
  for (int i = 0; i < n; ++i) ((flags[i] & 1) ? odd_slots : even_slots).push_back(Addr(out + i));
  ASSERT_FALSE(odd_slots.empty());
  ASSERT_FALSE(even_slots.empty());

  // nvcc's `if (flags[i] & 1) out[i] = ...`, out not speculated.
  Kernels k;
  ASSERT_TRUE(k.Load("validation_kernels"));
  const std::string store_if = k.Kernel("store_if");
  for (TwinMode mode : kModes) {
    SCOPED_TRACE(ModeName(mode));
    dev.Reset();
    ReportBuffer report(dev, static_cast<uint32_t>(n), k.Id(store_if), ModeFlags(mode));
    Status st = k.RunTwin(dev, mode, store_if, {Blocks(n, 256)}, {256}, Params().Add(flags).Add(in).Add(out).Add(n),
                          {dev.RangeOf(flags), dev.RangeOf(in)}, report);
    ASSERT_TRUE(st.ok()) << st.ToString();
    ExpectMisses(report, k.Id(store_if), 1, odd_slots);
  }

  // Hand-written guarded stores: @%p st -> odd_out (= out), @!%p st -> even_out.
  Kernels g;
  ASSERT_TRUE(g.LoadText(kGuardedPtx));
  std::vector<uint64_t> even_out_slots;
  for (uint64_t a : even_slots) even_out_slots.push_back(a - Addr(out) + Addr(even_out));
  const Params p = Params().Add(flags).Add(out).Add(even_out).Add(n);
  for (TwinMode mode : kModes) {
    SCOPED_TRACE(ModeName(mode));
    // Only the @%p store's buffer is un-speculated: reports where flags[i] is odd.
    dev.Reset();
    ReportBuffer r1(dev, static_cast<uint32_t>(n), g.Id("guarded_store"), ModeFlags(mode));
    Status st = g.RunTwin(dev, mode, "guarded_store", {Blocks(n, 128)}, {128}, p,
                          {dev.RangeOf(flags), dev.RangeOf(even_out)}, r1);
    ASSERT_TRUE(st.ok()) << st.ToString();
    ExpectMisses(r1, g.Id("guarded_store"), 1, odd_slots);
    // Only the @!%p store's buffer is un-speculated: reports where it is even.
    dev.Reset();
    ReportBuffer r2(dev, static_cast<uint32_t>(n), g.Id("guarded_store"), ModeFlags(mode));
    st = g.RunTwin(dev, mode, "guarded_store", {Blocks(n, 128)}, {128}, p, {dev.RangeOf(flags), dev.RangeOf(out)},
                   r2);
    ASSERT_TRUE(st.ok()) << st.ToString();
    ExpectMisses(r2, g.Id("guarded_store"), 1, even_out_slots);
    for (int i = 0; i < n; ++i) {
      const bool odd = flags[i] & 1;
      ASSERT_EQ(out[i], odd ? 3 * i + 1 : out0[i]) << i;
      ASSERT_EQ(even_out[i], odd ? even0[i] : flags[i]) << i;
    }
  }
}

TEST(validation_spaces, GenericStoresToSharedAndLocalAreNotReported) {
  PHOS_SEEDED_RNG(rng);
  Kernels k;
  ASSERT_TRUE(k.Load("validation_kernels"));
  const std::string kernel = k.Kernel("generic_spaces");
  // Every store of generic_spaces goes through put(): generic addresses.
  const twin::FunctionTwinInfo* put = k.info(TwinMode::kWrites).Find("_Z3putPii");
  ASSERT_NE(put, nullptr);
  EXPECT_EQ(put->stores, 1u);
  EXPECT_EQ(put->generic, 1u);
  Device dev;
  const int n = 300 + static_cast<int>(rng() % 2000);
  const auto in_v = RandInts<int>(rng, n, -(1 << 20), 1 << 20);
  int* in = dev.Alloc(in_v);
  int* out = dev.Alloc(RandInts<int>(rng, n, 1, 9));
  int* unspec = dev.Alloc(RandInts<int>(rng, n, 1, 9));
  std::vector<uint64_t> unspec_slots;
  for (int i = 0; i < n; ++i) unspec_slots.push_back(Addr(unspec + i));
  for (TwinMode mode : kModes) {
    SCOPED_TRACE(ModeName(mode));
    dev.Reset();
    // Per thread: 1 shared + 8 local + 1 speculated global + 1 un-speculated
    // global generic store; only the last may be reported.
    ReportBuffer report(dev, static_cast<uint32_t>(11 * n), k.Id(kernel), ModeFlags(mode));
    Status st = k.RunTwin(dev, mode, kernel, {Blocks(n, 256)}, {256}, Params().Add(in).Add(out).Add(unspec).Add(n),
                          {dev.RangeOf(in), dev.RangeOf(out)}, report);
    ASSERT_TRUE(st.ok()) << st.ToString();
    for (int i = 0; i < n; ++i) {
      ASSERT_EQ(unspec[i], in_v[i] * 5) << i;
      ASSERT_EQ(out[i], in_v[i] + 1 + in_v[i] + (in_v[i] & 7)) << i;
    }
    // Made inside put(): records name the launching kernel.
    ExpectMisses(report, k.Id(kernel), 1, unspec_slots);
  }
}

// ---------------------------------------------------------------------------
// 6. Device functions: records name the kernel whose launch made the access.

TEST(validation_functions, MissInDeviceFunctionCarriesLaunchingKernelId) {
  PHOS_SEEDED_RNG(rng);
  Kernels k;
  ASSERT_TRUE(k.Load("validation_kernels"));
  const std::string a = k.Kernel("scatter_via_func_a"), b = k.Kernel("scatter_via_func_b");
  ASSERT_NE(k.Id(a), k.Id(b));
  Device dev;
  PointerTable pt(dev, rng);
  const std::vector<uint64_t> slots = pt.SlotAddresses();
  for (TwinMode mode : kModes) {
    SCOPED_TRACE(ModeName(mode));
    dev.Reset();
    // One report buffer shared by both launches (as phosd may do).
    ReportBuffer report(dev, static_cast<uint32_t>(2 * pt.n), twin::kUnknownKernelId, ModeFlags(mode));
    Status st = k.RunTwin(dev, mode, a, {Blocks(pt.n, 128)}, {128}, pt.ScatterParams(), pt.Direct(dev), report);
    ASSERT_TRUE(st.ok()) << st.ToString();
    for (int i = 0; i < pt.n; ++i) ASSERT_EQ(*pt.Slot(i), pt.src[i] + 11) << i;
    EXPECT_EQ(report.header().count, static_cast<uint32_t>(pt.n));
    st = k.RunTwin(dev, mode, b, {Blocks(pt.n, 128)}, {128}, pt.ScatterParams(), pt.Direct(dev), report);
    ASSERT_TRUE(st.ok()) << st.ToString();
    for (int i = 0; i < pt.n; ++i) ASSERT_EQ(*pt.Slot(i), pt.src[i] - 7) << i;

    EXPECT_TRUE(report.CanaryIntact());
    twin::Report r;
    ASSERT_TRUE(report.Decode(&r).ok());
    ASSERT_EQ(r.header.count, static_cast<uint32_t>(2 * pt.n));
    ASSERT_EQ(r.records.size(), static_cast<size_t>(2 * pt.n));
    std::vector<uint64_t> by_a, by_b;
    for (const auto& rec : r.records) {
      EXPECT_EQ(rec.is_write, 1u);
      if (rec.kernel_id == k.Id(a))
        by_a.push_back(rec.address);
      else if (rec.kernel_id == k.Id(b))
        by_b.push_back(rec.address);
      else
        ADD_FAILURE() << "record with kernel id " << std::hex << rec.kernel_id;
    }
    std::sort(by_a.begin(), by_a.end());
    std::sort(by_b.begin(), by_b.end());
    std::vector<uint64_t> want = slots;
    std::sort(want.begin(), want.end());
    EXPECT_EQ(by_a, want);
    EXPECT_EQ(by_b, want);
  }
}

// ---------------------------------------------------------------------------
// 7. wmma: a tile store is checked over its whole footprint (16 rows of 16
// floats, `n` apart), a tile load too in read+write mode.

uint16_t HalfBits(double v) {
  const _Float16 h = static_cast<_Float16>(v);
  uint16_t u;
  std::memcpy(&u, &h, 2);
  return u;
}

TEST(validation_wmma, TileFootprintsAreChecked) {
  PHOS_SEEDED_RNG(rng);
  Kernels k;
  ASSERT_TRUE(k.Load("validation_kernels"));
  Device dev;
  const int m = 32, n = 48, kk = 32;
  std::uniform_int_distribution<int> d(-64, 64);
  std::vector<uint16_t> a(m * kk), b(n * kk);
  for (auto& v : a) v = HalfBits(d(rng) / 16.0);
  for (auto& v : b) v = HalfBits(d(rng) / 16.0);
  uint16_t* da = dev.Alloc(a);
  uint16_t* db = dev.Alloc(b);
  float* dc = dev.Alloc(RandReals<float>(rng, m * n, -10, 10));
  const std::string kernel = k.Kernel("wmma_tile");
  const Params p = Params().Add(da).Add(db).Add(dc).Add(n).Add(kk);
  const interp::Dim3 grid{n / 16, m / 16}, block{32};
  const twin::Range rc = dev.RangeOf(dc);
  ExpectTwinsMatchOriginal(k, dev, kernel, grid, block, p, {dev.RangeOf(da), dev.RangeOf(db), rc});
  // C speculated short of its last float: only the last tile's footprint
  // reaches it — one miss per lane of that warp, at the tile's start.
  const uint64_t last_tile = Addr(dc) + ((m - 16) * n + (n - 16)) * sizeof(float);
  for (TwinMode mode : kModes) {
    SCOPED_TRACE(ModeName(mode));
    dev.Reset();
    ReportBuffer report(dev, 256, k.Id(kernel), ModeFlags(mode));
    const std::vector<Range> ranges = {dev.RangeOf(da), dev.RangeOf(db), {rc.begin, rc.end - sizeof(float)}};
    Status st = k.RunTwin(dev, mode, kernel, grid, block, p, ranges, report);
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_TRUE(report.CanaryIntact());
    twin::Report r;
    ASSERT_TRUE(report.Decode(&r).ok());
    size_t writes = 0, reads = 0;
    for (const auto& rec : r.records) {
      EXPECT_EQ(rec.address, last_tile);
      (rec.is_write ? writes : reads) += 1;
    }
    EXPECT_EQ(writes, 32u);
    EXPECT_EQ(reads, mode == TwinMode::kReadsAndWrites ? 32u : 0u);  // the accumulator's wmma.load.c
    EXPECT_EQ(r.header.count, writes + reads);
  }
}

}  // namespace
}  // namespace phos::validation::test
