// The kernels of tests/apps/*.cu, run in the interpreter against CPU
// references (exact for integers, fma-exact for saxpy).
#include <cmath>

#include "interp_harness.h"

namespace phos::interp::test {
namespace {

TEST(interp_apps, VectorAdd) {
  Harness h;
  ASSERT_TRUE(h.Load("vector_add"));
  std::mt19937 rng(1);
  const int n = 10007;
  auto a = RandReals<float>(rng, n, -100, 100), b = RandReals<float>(rng, n, -100, 100);
  auto c0 = RandReals<float>(rng, n, -1, 1);
  float* da = h.Alloc(a);
  float* db = h.Alloc(b);
  float* dc = h.Alloc(c0);
  ASSERT_TRUE(h.Launch(h.Kernel("vector_add"), {(n + 255) / 256}, {256}, Params().Add(da).Add(db).Add(dc).Add(n)).ok());
  for (int i = 0; i < n; ++i) ASSERT_EQ(dc[i], a[i] + b[i]) << i;
}

TEST(interp_apps, SaxpyLoop) {
  Harness h;
  ASSERT_TRUE(h.Load("saxpy_loop"));
  std::mt19937 rng(2);
  const int n = 5000;
  auto x = RandReals<float>(rng, n, -1, 1), y = RandReals<float>(rng, n, -1, 1);
  float* dx = h.Alloc(x);
  float* dy = h.Alloc(y);
  const float a = 1.25f;
  for (int it = 0; it < 3; ++it) {
    ASSERT_TRUE(h.Launch(h.Kernel("saxpy"), {(n + 127) / 128}, {128}, Params().Add(a).Add(dx).Add(dy).Add(n)).ok());
    for (int i = 0; i < n; ++i) y[i] = std::fmaf(a, x[i], y[i]);
  }
  for (int i = 0; i < n; ++i) ASSERT_EQ(dy[i], y[i]) << i;
}

TEST(interp_apps, ReduceSharedAndBlockMax) {
  Harness h;
  ASSERT_TRUE(h.Load("reduce_shared"));
  std::mt19937 rng(3);
  const int n = 1 << 14;
  auto in = RandInts<unsigned>(rng, n, 1, 0xFFFFFFFFu);
  unsigned* din = h.Alloc(in);
  unsigned long long* dsum = h.Alloc(std::vector<unsigned long long>{0});
  const int blocks = n / 256;
  unsigned* dmax = h.Alloc(RandInts<unsigned>(rng, blocks, 1, 100));
  ASSERT_TRUE(h.Launch(h.Kernel("reduce_sum"), {16}, {256}, Params().Add(din).Add(dsum).Add(n)).ok());
  ASSERT_TRUE(h.Launch(h.Kernel("block_max"), {static_cast<uint32_t>(blocks)}, {256}, Params().Add(din).Add(dmax).Add(n)).ok());
  unsigned long long ref = 0;
  for (unsigned v : in) ref += v;
  EXPECT_EQ(*dsum, ref);
  for (int b = 0; b < blocks; ++b) {
    unsigned m = 0;
    for (int i = b * 256; i < (b + 1) * 256; ++i) m = std::max(m, in[i]);
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

TEST(interp_apps, StructOfPointers) {
  Harness h;
  ASSERT_TRUE(h.Load("struct_of_pointers"));
  std::mt19937 rng(4);
  const int n = 3000, bins = 16;
  auto x = RandInts<int>(rng, n, -50000, 50000), y = RandInts<int>(rng, n, -50000, 50000);
  Operands op{h.Alloc(x), h.Alloc(y), h.Alloc(RandInts<int>(rng, n, 1, 9)), h.Alloc(std::vector<int>(bins, 0)), n, 7};
  ASSERT_TRUE(h.Launch(h.Kernel("combine"), {(n + 255) / 256}, {256}, Params().Add(op).Add(bins)).ok());
  std::vector<int> hist(bins);
  for (int i = 0; i < n; ++i) {
    const int v = x[i] * 7 + y[i];
    ASSERT_EQ(op.out[i], v);
    ++hist[static_cast<unsigned>(v) % bins];
  }
  for (int b = 0; b < bins; ++b) EXPECT_EQ(op.histogram[b], hist[b]);
}

TEST(interp_apps, PointerTable) {
  Harness h;
  ASSERT_TRUE(h.Load("pointer_table"));
  std::mt19937 rng(5);
  const int tables = 4, per = 700, n = tables * per;
  auto src = RandInts<int>(rng, n, 0, 1 << 27);
  std::vector<int*> table;
  for (int t = 0; t < tables; ++t) table.push_back(h.Alloc(RandInts<int>(rng, per, 1, 5)));
  int** dtable = h.Alloc(table);
  ASSERT_TRUE(h.Launch(h.Kernel("scatter"), {(n + 127) / 128}, {128},
                       Params().Add(dtable).Add(tables).Add(h.Alloc(src)).Add(n)).ok());
  for (int i = 0; i < n; ++i) ASSERT_EQ(table[i % tables][i / tables], src[i] * 3 + 1) << i;
}

TEST(interp_apps, MultiStreamKernels) {
  Harness h;
  ASSERT_TRUE(h.Load("multi_stream"));
  std::mt19937 rng(6);
  const int n = 4096, chunk = 512, chunks = n / chunk;
  auto in = RandInts<unsigned>(rng, n, 1, 0xFFFFFFFFu);
  unsigned* din = h.Alloc(in);
  unsigned* dout = h.Alloc(RandInts<unsigned>(rng, n, 1, 9));
  unsigned long long* dsums = h.Alloc(RandInts<unsigned long long>(rng, chunks, 1, 9));
  const unsigned salt = 0x9e3779b9u;
  ASSERT_TRUE(h.Launch(h.Kernel("transform"), {n / 256}, {256}, Params().Add(din).Add(dout).Add(n).Add(salt)).ok());
  ASSERT_TRUE(h.Launch(h.Kernel("chunk_sums"), {chunks}, {128}, Params().Add(din).Add(chunk).Add(dsums)).ok());
  for (int i = 0; i < n; ++i) {
    unsigned v = in[i] ^ salt;
    v = v * 2654435761u + (v >> 13);
    ASSERT_EQ(dout[i], v) << i;
  }
  for (int c = 0; c < chunks; ++c) {
    unsigned long long s = 0;
    for (int i = 0; i < chunk; ++i) s += in[c * chunk + i];
    EXPECT_EQ(dsums[c], s) << c;
  }
}

}  // namespace
}  // namespace phos::interp::test
