// The lockstep scheduler and its whole-warp handlers (warp_ops.cc) against
// the per-thread interpreter (LaunchOptions::thread_at_a_time), op form by
// op form: each case is one PTX instruction run by 8 warps over random
// operands — edge values mixed in (0, -1, the most negative integer, shift
// counts at and past the width, NaN, infinities, subnormals) — under a
// random guard, so warps run it with every lane, some, or none. Both
// schedulers must leave bit-identical results. A handler that computed
// anything the per-thread handler does not (a truncation, a sign, a NaN
// rule, a lane it should have left alone) fails here, naming the
// instruction.
#include <gtest/gtest.h>

#include <cstdint>
#include <algorithm>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "interp_harness.h"

namespace phos::interp::test {
namespace {

constexpr uint32_t kThreads = 256;  // 8 warps
constexpr uint32_t kInWords = 8;    // per thread, 64-bit
constexpr uint32_t kOutWords = 8;

// A kernel that loads thread i's eight 64-bit words into %x0..%x7, their
// low halves into %w0..%w7 (also as %f0..%f7), the words as %d0..%d7, the
// low quarters as %h0..%h3, a guard %p0 from bit 0 of word 7 and a second
// predicate %p1 from bit 1; runs `body` (which may use %p0 as its guard);
// then stores %x4..%x7, %w4..%w5 (zero-extended), %p2 and %p3 (as 0/1)
// and %d6..%d7 bits.
std::string KernelFor(const std::string& body) {
  return R"(.version 8.0
.target sm_90
.address_size 64
.visible .entry k(.param .u64 in, .param .u64 out) {
  .reg .b64 %x<8>;
  .reg .b32 %w<8>;
  .reg .f32 %f<8>;
  .reg .f64 %d<8>;
  .reg .b16 %h<4>;
  .reg .pred %p<4>;
  .reg .b64 %base, %obase, %t;
  .reg .b32 %tid, %bit;
  ld.param.u64 %base, [in];
  ld.param.u64 %obase, [out];
  mov.u32 %tid, %tid.x;
  mul.wide.u32 %t, %tid, 64;
  add.s64 %base, %base, %t;
  add.s64 %obase, %obase, %t;
  ld.global.u64 %x0, [%base];
  ld.global.u64 %x1, [%base+8];
  ld.global.u64 %x2, [%base+16];
  ld.global.u64 %x3, [%base+24];
  ld.global.u64 %x4, [%base+32];
  ld.global.u64 %x5, [%base+40];
  ld.global.u64 %x6, [%base+48];
  ld.global.u64 %x7, [%base+56];
  cvt.u32.u64 %w0, %x0;
  cvt.u32.u64 %w1, %x1;
  cvt.u32.u64 %w2, %x2;
  cvt.u32.u64 %w3, %x3;
  cvt.u32.u64 %w4, %x4;
  cvt.u32.u64 %w5, %x5;
  mov.b32 %f0, %w0;
  mov.b32 %f1, %w1;
  mov.b32 %f2, %w2;
  mov.b32 %f4, %w4;
  mov.b64 %d0, %x0;
  mov.b64 %d1, %x1;
  mov.b64 %d2, %x2;
  mov.b64 %d6, %x6;
  cvt.u16.u64 %h0, %x0;
  cvt.u16.u64 %h1, %x1;
  cvt.u16.u64 %h2, %x2;
  cvt.u32.u64 %bit, %x7;
  and.b32 %bit, %bit, 1;
  setp.ne.u32 %p0, %bit, 0;
  cvt.u32.u64 %bit, %x7;
  and.b32 %bit, %bit, 2;
  setp.ne.u32 %p1, %bit, 0;
  setp.eq.u32 %p2, %bit, 7;
  setp.eq.u32 %p3, %bit, 7;
)" + body + R"(
  mov.b32 %w6, %f4;
  cvt.u64.u32 %t, %w4;
  st.global.u64 [%obase], %t;
  cvt.u64.u32 %t, %w5;
  st.global.u64 [%obase+8], %t;
  cvt.u64.u32 %t, %w6;
  st.global.u64 [%obase+16], %t;
  st.global.u64 [%obase+24], %x4;
  st.global.u64 [%obase+32], %x5;
  selp.u64 %t, 1, 0, %p2;
  st.global.u64 [%obase+40], %t;
  selp.u64 %t, 1, 0, %p3;
  st.global.u64 [%obase+48], %t;
  mov.b64 %t, %d6;
  cvt.u64.u16 %x6, %h3;
  xor.b64 %t, %t, %x6;
  st.global.u64 [%obase+56], %t;
  ret;
}
)";
}

uint64_t EdgeOrRandom(std::mt19937_64& rng) {
  static const uint64_t kEdges[] = {
      0,
      1,
      ~0ull,
      0x7FFFFFFFull,
      0x80000000ull,
      0xFFFFFFFFull,
      0x8000000000000000ull,
      0x7FFFFFFFFFFFFFFFull,
      31,
      32,
      33,
      63,
      64,
      65,
      0x7FC00000ull,                // f32 NaN
      0xFF800000ull,                // f32 -inf
      0x00000001ull,                // f32 smallest subnormal
      0x80000000ull | 0x007FFFFFull,  // f32 -subnormal
      0x3F800000ull,                // 1.0f
      0x7FF8000000000000ull,        // f64 NaN
      0xFFF0000000000000ull,        // f64 -inf
      0x3FF0000000000000ull,        // 1.0
      0x0000000000000001ull,        // f64 subnormal
  };
  const uint64_t r = rng();
  if (r % 4 == 0) return kEdges[(r >> 8) % (sizeof(kEdges) / sizeof(kEdges[0]))];
  if (r % 4 == 1) return rng() & 0xFFFFFFFFull;            // 32-bit values
  if (r % 4 == 2) {                                        // plausible floats
    const float f = std::uniform_real_distribution<float>(-1e4f, 1e4f)(rng);
    uint32_t b;
    std::memcpy(&b, &f, 4);
    return b | (rng() & 0xFFFFFFFF00000000ull);
  }
  return rng();
}

// Runs `body` both ways over the same inputs; the results must agree.
void ExpectSameBothWays(const std::string& body, uint64_t seed) {
  SCOPED_TRACE(body);
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> in(kThreads * kInWords);
  for (auto& v : in) v = EdgeOrRandom(rng);
  // Whole warps guarded off and on, and mixed ones: bit 0 of word 7.
  for (uint32_t t = 0; t < kThreads; ++t) {
    const uint32_t warp = t / 32;
    uint64_t& w7 = in[t * kInWords + 7];
    if (warp == 0) w7 |= 1;        // every lane
    if (warp == 1) w7 &= ~1ull;    // none
  }
  std::vector<uint64_t> results[2];
  for (int mode = 0; mode < 2; ++mode) {
    Harness h;
    ASSERT_TRUE(h.LoadText(KernelFor(body)));
    h.thread_at_a_time = mode == 1;
    uint64_t* din = h.Alloc(in);
    uint64_t* dout = h.Alloc(std::vector<uint64_t>(kThreads * kOutWords, 0x5A5A5A5A5A5A5A5Aull));
    Params p;
    p.Add(din).Add(dout);
    const Status st = h.Launch("k", {1}, {kThreads}, p, 0, 1);
    ASSERT_TRUE(st.ok()) << (mode ? "thread at a time: " : "lockstep: ") << st.ToString();
    results[mode].assign(dout, dout + kThreads * kOutWords);
  }
  for (uint32_t i = 0; i < kThreads * kOutWords; ++i) {
    ASSERT_EQ(results[0][i], results[1][i]) << "thread " << i / kOutWords << " word " << i % kOutWords;
  }
}

struct Case {
  const char* body;
};

// One line per op form a warp handler covers (and a few it declines at run
// time), guarded by %p0 or not.
const Case kCases[] = {
    // integer arithmetic, 16/32/64 bits, signed and unsigned
    {"@%p0 add.s32 %w4, %w0, %w1;"},
    {"add.u64 %x4, %x0, %x1;"},
    {"@%p0 sub.s32 %w4, %w0, %w1;"},
    {"sub.u64 %x4, %x0, 5;"},
    {"@%p0 mul.lo.s32 %w4, %w0, %w1;"},
    {"mul.hi.s32 %w4, %w0, %w1;"},
    {"mul.hi.u32 %w4, %w0, %w1;"},
    {"mul.hi.s64 %x4, %x0, %x1;"},
    {"mul.hi.u64 %x4, %x0, %x1;"},
    {"mul.lo.u64 %x4, %x0, %x1;"},
    {"@%p0 mul.wide.s32 %x4, %w0, %w1;"},
    {"mul.wide.u32 %x4, %w0, %w1;"},
    {"mul.wide.s16 %w4, %h0, %h1;"},
    {"@%p0 mad.lo.s32 %w4, %w0, %w1, %w2;"},
    {"mad.hi.u32 %w4, %w0, %w1, %w2;"},
    {"mad.wide.s32 %x4, %w0, %w1, %x2;"},
    {"mad.wide.u32 %x4, %w0, %w1, %x2;"},
    {"mad.lo.u64 %x4, %x0, %x1, %x2;"},
    {"@%p0 shl.b32 %w4, %w0, %w1;"},
    {"shl.b64 %x4, %x0, %w1;"},
    {"shr.s32 %w4, %w0, %w1;"},
    {"shr.u32 %w4, %w0, %w1;"},
    {"shr.s64 %x4, %x0, %w1;"},
    {"shr.u16 %h3, %h0, %w1;"},
    {"and.b32 %w4, %w0, %w1;"},
    {"or.b64 %x4, %x0, %x1;"},
    {"xor.b32 %w4, %w0, 0x55;"},
    {"not.b64 %x4, %x0;"},
    {"neg.s32 %w4, %w0;"},
    {"min.s32 %w4, %w0, %w1;"},
    {"max.u32 %w4, %w0, %w1;"},
    {"min.s64 %x4, %x0, %x1;"},
    {"max.s16 %h3, %h0, %h1;"},
    {"add.s16 %h3, %h0, %h1;"},
    {"@%p0 div.s32 %w4, %w0, %w1;"},
    {"div.u32 %w4, %w0, %w1;"},
    {"rem.s64 %x4, %x0, %x1;"},
    {"rem.u64 %x4, %x0, %x1;"},
    {"div.s32 %w4, %w0, -1;"},
    {"rem.s32 %w4, %w0, 0;"},
    {"abs.s32 %w4, %w0;"},
    {"abs.s64 %x4, %x0;"},
    {"popc.b32 %w4, %w0;"},
    {"popc.b64 %w4, %x0;"},
    {"clz.b32 %w4, %w0;"},
    {"clz.b64 %w4, %x0;"},
    // floating point (round to nearest)
    {"@%p0 add.f32 %f4, %f0, %f1;"},
    {"add.rn.f64 %d6, %d0, %d1;"},
    {"sub.f32 %f4, %f0, %f1;"},
    {"mul.rn.f32 %f4, %f0, %f1;"},
    {"mul.f64 %d6, %d0, %d1;"},
    {"@%p0 fma.rn.f32 %f4, %f0, %f1, %f2;"},
    {"fma.rn.f64 %d6, %d0, %d1, %d2;"},
    {"mad.rn.f32 %f4, %f0, %f1, %f2;"},
    {"min.f32 %f4, %f0, %f1;"},
    {"max.f64 %d6, %d0, %d1;"},
    {"neg.f32 %f4, %f0;"},
    {"abs.f64 %d6, %d0;"},
    // comparisons and selection
    {"@%p0 setp.lt.s32 %p2, %w0, %w1;"},
    {"setp.ge.u32 %p2|%p3, %w0, %w1;"},
    {"setp.lo.s32 %p2, %w0, %w1;"},
    {"setp.hi.u64 %p2, %x0, %x1;"},
    {"setp.eq.s64 %p2, %x0, %x1;"},
    {"setp.ne.b32 %p2, %w0, %w1;"},
    {"setp.le.s16 %p2, %h0, %h1;"},
    {"setp.lt.f32 %p2, %f0, %f1;"},
    {"setp.gtu.f64 %p2, %d0, %d1;"},
    {"setp.nan.f32 %p2, %f0, %f1;"},
    {"setp.lt.and.s32 %p2|%p3, %w0, %w1, %p1;"},
    {"setp.eq.or.u32 %p2, %w0, %w1, !%p1;"},
    {"setp.gt.xor.f32 %p2|%p3, %f0, %f1, %p1;"},
    {"@%p0 selp.b32 %w4, %w0, %w1, %p1;"},
    {"selp.u64 %x4, %x0, 7, !%p1;"},
    // moves, conversions, cvta
    {"@%p0 mov.u32 %w4, %w0;"},
    {"mov.u64 %x4, 12345;"},
    {"mov.pred %p2, %p1;"},
    {"mov.u32 %w4, %tid.x;"},
    {"mov.u32 %w4, %laneid;"},
    {"mov.u32 %w4, %ctaid.x;"},
    {"mov.u32 %w4, %clock;"},
    {"mov.b64 {%w4, %w5}, %x0;"},
    {"mov.b64 %x4, {%w0, %w1};"},
    {"mov.b32 {%h3, %h2}, %w0;"},
    {"@%p0 cvt.u64.u32 %x4, %w0;"},
    {"cvt.s64.s32 %x4, %w0;"},
    {"cvt.u32.u64 %w4, %x0;"},
    {"cvt.s32.s16 %w4, %h0;"},
    {"cvt.u16.u32 %h3, %w0;"},
    {"cvt.s16.s64 %h3, %x0;"},
    {"cvt.sat.u32.s32 %w4, %w0;"},
    {"cvt.rn.f32.s32 %f4, %w0;"},
    {"cvt.rzi.s32.f32 %w4, %f0;"},
    {"cvt.f64.f32 %d6, %f0;"},
    {"cvt.rn.f32.f64 %f4, %d0;"},
    {"cvt.rni.f32.f32 %f4, %f0;"},
    {"@%p0 cvta.to.global.u64 %x4, %x0;"},
    {"cvta.shared.u64 %x4, %x0;"},
    {"cvta.to.shared.u32 %w4, %w0;"},
    {"cvta.local.u64 %x4, %x0;"},
};

TEST(interp_lockstep, EveryWarpHandlerMatchesThePerThreadInterpreter) {
  uint64_t seed = 1;
  for (const Case& c : kCases) ExpectSameBothWays(c.body, seed++);
}

// Loads and stores: global (one allocation; the span lookup), shared,
// guarded, signed narrow loads; and addresses outside any allocation,
// which both must refuse alike.
TEST(interp_lockstep, LoadsAndStoresMatch) {
  const char* kBodies[] = {
      // global: a scattered read within the input buffer (index from the data)
      "and.b64 %t, %x1, 255; shl.b64 %t, %t, 3; ld.param.u64 %x5, [in]; add.s64 %x5, %x5, %t;"
      " @%p0 ld.global.u64 %x4, [%x5]; ld.global.s32 %x5, [%x5+4];",
      "ld.global.s8 %x4, [%base+3]; ld.global.u16 %w4, [%base+6]; ld.global.s16 %w5, [%base+10];",
      // global store then load back (lanes store into their own slot of out)
      "@%p0 st.global.u32 [%obase+4], %w0; @%p0 st.global.u8 [%obase+1], %w1; ld.global.u64 %x4, [%obase];",
      // shared: every lane stores, then reads a neighbour's slot after bar.sync
      ".shared .align 8 .b8 sm[2048];\n mov.u32 %bit, sm; shl.b32 %w6, %tid, 3; add.u32 %w6, %w6, %bit;"
      " st.shared.u64 [%w6], %x0; bar.sync 0; xor.b32 %w7, %tid, 1; shl.b32 %w7, %w7, 3; add.u32 %w7, %w7, %bit;"
      " ld.shared.u64 %x4, [%w7]; @%p0 ld.shared.s16 %x5, [%w7+2];",
      // vectors, ldu/nc, generic addresses (global ones; a shared one goes per thread)
      "ld.global.v2.u32 {%w4, %w5}, [%base+8]; @%p0 ld.global.nc.v4.u16 {%h3, %h2, %h1, %h0}, [%base+16];"
      " ld.global.v2.u64 {%x4, %x5}, [%base+32]; ldu.global.u32 %w6, [%base+4];",
      "@%p0 st.global.v2.u32 [%obase+8], {%w0, %w1}; st.global.v4.u16 [%obase+16], {%h0, %h1, %h2, %h0};"
      " ld.global.v2.u64 {%x4, %x5}, [%obase+8];",
      "ld.u32 %w4, [%base+12]; @%p0 st.u64 [%obase+24], %x2; ld.v2.s32 {%w5, %w6}, [%obase+24];",
      ".shared .align 8 .b8 sg[2048];\n cvta.shared.u64 %x6, sg; mul.wide.u32 %t, %tid, 8; add.s64 %x6, %x6, %t;"
      " st.u64 [%x6], %x1; bar.sync 0; ld.u64 %x4, [%x6]; @%p0 ld.v2.u32 {%w4, %w5}, [%x6];",
      // kernel formals, and a .param load that is not a formal
      "ld.param.u64 %x4, [out]; sub.u64 %x4, %obase, %x4; ld.param.u32 %w6, [in]; cvt.u32.u64 %w4, %base;"
      " sub.u32 %w4, %w4, %w6;",
  };
  uint64_t seed = 1000;
  for (const char* body : kBodies) ExpectSameBothWays(body, seed++);
}

// Divergent control flow: branches some lanes take, a loop whose trip
// count differs per lane (they meet again after it), a call, and a
// full-warp shuffle chain after a divergent region.
TEST(interp_lockstep, DivergentBranchesLoopsCallsAndShufflesMatch) {
  const char* kBodies[] = {
      "@%p0 bra THEN; add.u64 %x4, %x0, 1; bra DONE; THEN: add.u64 %x4, %x0, 2; DONE: add.u64 %x4, %x4, %x1;",
      "and.b32 %w6, %w0, 15; mov.u64 %x4, 0; LOOP: setp.eq.u32 %p2, %w6, 0; @%p2 bra OUT; add.u64 %x4, %x4, %x1;"
      " sub.u32 %w6, %w6, 1; bra LOOP; OUT: add.u64 %x5, %x4, 3;",
      // lanes at two shfl.down sites with one mask meet (the ISA's "same
      // instruction"), then the first site's lanes go on to the second
      "@%p0 bra SKIP; shfl.sync.down.b32 %w4|%p3, %w0, 1, 31, 0xffffffff; SKIP: shfl.sync.down.b32 %w5|%p2, %w1, 3, 31,"
      " 0xffffffff;",
      "shfl.sync.bfly.b32 %w4, %w0, 5, 31, 0xffffffff; @%p0 bra OUT; vote.sync.ballot.b32 %w5, %p1, 0xffffffff; OUT:",
      "shfl.sync.idx.b32 %w4|%p3, %w0, %w1, 31, 0xffffffff; shfl.sync.up.b32 %w5, %w4, 2, 0, 0xffffffff;",
      // votes and activemask, converged and after a divergent branch
      "vote.sync.ballot.b32 %w4, %p0, 0xffffffff; vote.sync.all.pred %p2, %p1, 0xffffffff;"
      " vote.sync.any.pred %p3, !%p1, 0xffffffff; activemask.b32 %w5;",
      "vote.sync.uni.pred %p2, %p0, 0xffffffff; @%p0 bra L1; activemask.b32 %w4; bra L2; L1: activemask.b32 %w5; L2:",
  };
  uint64_t seed = 2000;
  for (const char* body : kBodies) ExpectSameBothWays(body, seed++);
}

// A block zeroes only the registers its kernel may read before setting
// them (entry_registers.cc); the rest keep the worker's previous block's
// values. A kernel that reads a register it set only on some paths must
// still read 0 in every block where it did not set it: block 0 sets %r1 in
// its even threads, later blocks never; every block's odd threads, and all
// threads of the later blocks, must read 0 — with one worker, so that the
// same warps run block after block.
TEST(interp_lockstep, ARegisterReadBeforeItIsSetIsZeroInEveryBlock) {
  const std::string ptx = R"(.version 8.0
.target sm_90
.address_size 64
.visible .entry k(.param .u64 out) {
  .reg .b32 %r<4>;
  .reg .b64 %a, %t;
  .reg .pred %p, %q;
  ld.param.u64 %a, [out];
  mov.u32 %r2, %tid.x;
  mov.u32 %r3, %ctaid.x;
  and.b32 %r0, %r2, 1;
  setp.eq.u32 %p, %r0, 0;
  setp.eq.u32 %q, %r3, 0;
  and.pred %p, %p, %q;
  @%p mov.u32 %r1, 7;
  mad.lo.u32 %r3, %r3, 64, %r2;
  mul.wide.u32 %t, %r3, 4;
  add.s64 %a, %a, %t;
  st.global.u32 [%a], %r1;
  ret;
}
)";
  for (int mode = 0; mode < 2; ++mode) {
    Harness h;
    ASSERT_TRUE(h.LoadText(ptx));
    const Function& k = h.program().function(h.program().FindFunction("k"));
    EXPECT_FALSE(k.zero_all_at_entry);
    EXPECT_NE(std::find(k.zero_at_entry.begin(), k.zero_at_entry.end(), 1u), k.zero_at_entry.end())
        << "%r1 is read where it may be unset";
    h.thread_at_a_time = mode == 1;
    const uint32_t blocks = 6;
    uint32_t* out = h.Alloc(std::vector<uint32_t>(blocks * 64, 0xDEAD));
    Params p;
    p.Add(out);
    ASSERT_TRUE(h.Launch("k", {blocks}, {64}, p, 0, 1).ok());
    for (uint32_t i = 0; i < blocks * 64; ++i) {
      const uint32_t want = (i < 64 && i % 2 == 0) ? 7 : 0;
      ASSERT_EQ(out[i], want) << (mode ? "thread at a time" : "lockstep") << ", block " << i / 64 << " thread "
                              << i % 64;
    }
  }
}

// Independent thread scheduling: a lane spinning on a flag that another
// lane of its warp, or a lane of another warp, sets (no barrier between)
// must let that lane run. The lockstep scheduler yields a group's turn
// after kGroupTurn ops and a warp's after kWarpTurn, so both finish; the
// per-thread scheduler runs thread 0 until its instruction limit (which is
// why this test names the lockstep scheduler instead of following
// PHOS_INTERP_THREAD_AT_A_TIME).
TEST(interp_lockstep, ALaneSpinningOnAnotherLanesFlagLetsItRun) {
  const char* kPtx = R"(.version 8.0
.target sm_90
.address_size 64
.visible .entry k(.param .u64 out, .param .u32 setter) {
  .reg .b32 %r<4>;
  .reg .b64 %a;
  .reg .pred %p<3>;
  .shared .align 4 .b32 flag;
  ld.param.u64 %a, [out];
  ld.param.u32 %r3, [setter];
  mov.u32 %r0, %tid.x;
  setp.ne.u32 %p0, %r0, 0;
  @%p0 bra SETTER;
SPIN:
  ld.volatile.shared.u32 %r1, [flag];
  setp.eq.u32 %p1, %r1, 0;
  @%p1 bra SPIN;
  st.global.u32 [%a], %r1;
  bra DONE;
SETTER:
  setp.ne.u32 %p2, %r0, %r3;
  @%p2 bra DONE;
  mov.u32 %r2, 5;
  st.volatile.shared.u32 [flag], %r2;
DONE:
  ret;
}
)";
  for (uint32_t setter : {1u, 33u}) {  // the same warp, the next one
    Harness h;
    ASSERT_TRUE(h.LoadText(kPtx));
    h.thread_at_a_time = false;
    uint32_t* out = h.Alloc(std::vector<uint32_t>(1, 0));
    Params p;
    p.Add(out).Add(setter);
    const Status st = h.Launch("k", {1}, {64}, p, 0, 1);
    ASSERT_TRUE(st.ok()) << "setter thread " << setter << ": " << st.ToString();
    EXPECT_EQ(out[0], 5u) << "setter thread " << setter;
  }
}

// Lanes that branched apart run on together from where their paths join,
// as a GPU reconverges them there: the lanes that took the shorter path
// (lower pc first) stop at the join instead of running past it alone. Here
// the odd lanes fall through to the join first; had they gone on, they
// would have overwritten slot 31 before lane 0 (an even lane, waiting at
// the join) read it. cuSPARSE's csrgeam kernel does this (a running count
// read from the last lane's slot after a divergent store), and wrote wrong
// column indices before the fix.
TEST(interp_lockstep, LanesThatBranchedApartRunTogetherFromWhereTheirPathsJoin) {
  const char* kPtx = R"(.version 8.0
.target sm_90
.address_size 64
.visible .entry k(.param .u64 out) {
  .reg .b32 %r<6>;
  .reg .b64 %a;
  .reg .pred %p<3>;
  .shared .align 4 .b32 slot[32];
  ld.param.u64 %a, [out];
  mov.u32 %r0, %tid.x;
  mov.u32 %r1, slot;
  shl.b32 %r2, %r0, 2;
  add.s32 %r1, %r1, %r2;
  add.s32 %r3, %r0, 1;
  st.volatile.shared.u32 [%r1], %r3;
  bar.warp.sync -1;
  and.b32 %r4, %r0, 1;
  setp.eq.u32 %p0, %r4, 0;
  @%p0 bra JOIN;
  add.s32 %r3, %r3, 0;
JOIN:
  setp.ne.u32 %p1, %r0, 0;
  @%p1 bra AFTER;
  mov.u32 %r5, slot;
  ld.volatile.shared.u32 %r5, [%r5+124];
  st.global.u32 [%a], %r5;
AFTER:
  mov.u32 %r5, 1000;
  st.volatile.shared.u32 [%r1], %r5;
  bar.warp.sync -1;
  ret;
}
)";
  Harness h;
  ASSERT_TRUE(h.LoadText(kPtx));
  h.thread_at_a_time = false;
  uint32_t* out = h.Alloc(std::vector<uint32_t>(1, 0));
  Params p;
  p.Add(out);
  const Status st = h.Launch("k", {1}, {32}, p, 0, 1);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(out[0], 32u) << "lane 0 read slot 31 after the odd lanes, run on alone past the join, rewrote it";
}

// Registers every path sets before reading are not zeroed per block.
TEST(interp_lockstep, RegistersSetOnEveryPathAreNotZeroedPerBlock) {
  const std::string ptx = R"(.version 8.0
.target sm_90
.address_size 64
.visible .entry k(.param .u64 out) {
  .reg .b32 %r<4>;
  .reg .b64 %a;
  .reg .pred %p;
  ld.param.u64 %a, [out];
  mov.u32 %r0, %tid.x;
  setp.eq.u32 %p, %r0, 0;
  @%p bra ELSE;
  mov.u32 %r1, 1;
  bra JOIN;
ELSE:
  mov.u32 %r1, 2;
JOIN:
  add.u32 %r2, %r1, %r0;
  st.global.u32 [%a], %r2;
  ret;
}
)";
  Harness h;
  ASSERT_TRUE(h.LoadText(ptx));
  const Function& k = h.program().function(h.program().FindFunction("k"));
  EXPECT_FALSE(k.zero_all_at_entry);
  EXPECT_TRUE(k.zero_at_entry.empty()) << "first: register " << k.zero_at_entry.front();
}

}  // namespace
}  // namespace phos::interp::test
