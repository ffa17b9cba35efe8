// Kernels for the PTX ISA features third-party code uses (issue #16): warp
// collectives under independent thread scheduling, packed half arithmetic,
// dp4a, cp.async, wmma, indirect calls. Compiled to PTX for sm_90 at build
// time and checked against CPU references by isa_test.cc.
#pragma nv_diag_suppress static_var_with_dynamic_init
#include <cooperative_groups.h>
#include <cuda/barrier>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_pipeline.h>
#include <mma.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;

// Aggregated atomics over the lanes that take the branch (coalesced_threads:
// activemask, then a shuffle of the leader's old value).
__global__ void coalesced_inc(const int* in, int* counter, int* slot, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  if (in[i] % 3 != 0) {
    cg::coalesced_group g = cg::coalesced_threads();
    int base = 0;
    if (g.thread_rank() == 0) base = atomicAdd(counter, (int)g.size());
    base = g.shfl(base, 0);
    slot[i] = base + (int)g.thread_rank();
  } else {
    slot[i] = -1;
  }
}

// Per-key maxima: lanes with the same key (match.any) reduce together
// (redux.sync.max over each lane's own member mask).
__global__ void keyed_max(const int* key, const int* val, int* out_max, int* out_count, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  cg::coalesced_group active = cg::coalesced_threads();
  auto part = cg::labeled_partition(active, key[i]);
  int m = cg::reduce(part, val[i], cg::greater<int>());
  int s = cg::reduce(part, 1, cg::plus<int>());
  out_max[i] = m;
  out_count[i] = s;
}

// Lanes of one warp at two different shuffle sites with the full mask.
__global__ void split_shfl(const int* in, int* out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int v = in[i];
  int r;
  if (threadIdx.x & 1) r = __shfl_sync(0xffffffffu, v * 3, (threadIdx.x + 5) & 31);
  else r = __shfl_sync(0xffffffffu, v + 1000, (threadIdx.x + 5) & 31);
  out[i] = r;
}

__global__ void dot_int8(const int* a, const int* b, const unsigned* ua, const unsigned* ub, int* out_s, unsigned* out_u, int* out_2, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  out_s[i] = __dp4a(a[i], b[i], i);
  out_u[i] = __dp4a(ua[i], ub[i], (unsigned)i);
  out_2[i] = __dp2a_lo(a[i], b[i], 7) + __dp2a_hi(ua[i], ub[i], 3u);
}

__global__ void half2_math(const __half2* a, const __half2* b, const __half2* c, __half2* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  __half2 x = __hfma2(a[i], b[i], c[i]);
  x = __hadd2(x, __hmul2(a[i], c[i]));
  x = __hsub2(x, __hneg2(b[i]));
  x = __hmax2(x, __habs2(c[i]));
  x = __hmin2(x, __float2half2_rn(100.0f));
  out[i] = x;
}

__global__ void bf162_math(const __nv_bfloat162* a, const __nv_bfloat162* b, __nv_bfloat162* out, float* f, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  __nv_bfloat162 x = __hfma2(a[i], b[i], a[i]);
  x = __hmul2(x, b[i]);
  x = __hadd2(x, a[i]);
  out[i] = x;
  float2 g = __bfloat1622float2(x);
  f[i] = g.x - g.y;
}

__global__ void async_copy(const float* in, float* out, int n) {
  extern __shared__ float tile[];
  int base = blockIdx.x * blockDim.x * 4;
  for (int k = 0; k < 4; ++k) {
    int j = base + k * blockDim.x + threadIdx.x;
    if (j < n) __pipeline_memcpy_async(&tile[k * blockDim.x + threadIdx.x], &in[j], sizeof(float));
  }
  __pipeline_commit();
  __pipeline_wait_prior(0);
  __syncthreads();
  for (int k = 0; k < 4; ++k) {
    int j = base + k * blockDim.x + threadIdx.x;
    if (j < n) out[j] = tile[(k * blockDim.x + threadIdx.x + 1) % (4 * blockDim.x)] * 2.0f;
  }
}

__global__ void async_copy16(const float4* in, float4* out, int n) {
  __shared__ float4 tile[128];
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  // The last (j % 4) floats of each element are zero-filled (src-size form).
  if (j < n) __pipeline_memcpy_async(&tile[threadIdx.x], &in[j], sizeof(float4), (j % 4) * sizeof(float));
  __pipeline_commit();
  __pipeline_wait_prior(0);
  __syncthreads();
  if (j < n) { float4 v = tile[blockDim.x - 1 - threadIdx.x]; out[j] = v; }
}

// Calls through function pointers: a module-scope table (an initializer
// naming functions, like a vtable) and a pointer chosen at run time.
__device__ int twice(int x) { return 2 * x; }
__device__ int square(int x) { return x * x; }
__device__ int negate(int x) { return -x; }
typedef int (*unary_fn)(int);
__device__ unary_fn table[3] = {twice, square, negate};

__global__ void indirect(const int* sel, const int* in, int* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  unary_fn f = (sel[i] & 8) ? table[sel[i] % 3] : &negate;
  out[i] = f(in[i]) + table[(sel[i] + 1) % 3](i);
}

using namespace nvcuda;

// One warp per 16x16 tile of C (+)= A(row-major m x k) * B(col-major: n x k rows).
template <typename TA, typename TC, int M, int N, int K, typename LA, typename LB>
__device__ void tile_gemm(const TA* a, const TA* b, TC* c, int m, int n, int k, TC scale) {
  int tile_m = blockIdx.y, tile_n = blockIdx.x;
  wmma::fragment<wmma::matrix_a, M, N, K, TA, LA> fa;
  wmma::fragment<wmma::matrix_b, M, N, K, TA, LB> fb;
  wmma::fragment<wmma::accumulator, M, N, K, TC> fc;
  wmma::load_matrix_sync(fc, c + tile_m * M * n + tile_n * N, n, wmma::mem_row_major);
  for (int kk = 0; kk < k; kk += K) {
    wmma::load_matrix_sync(fa, a + tile_m * M * k + kk, k);
    wmma::load_matrix_sync(fb, b + tile_n * N * k + kk, k);
    wmma::mma_sync(fc, fa, fb, fc);
  }
  for (int t = 0; t < fc.num_elements; ++t) fc.x[t] = fc.x[t] * scale;
  wmma::store_matrix_sync(c + tile_m * M * n + tile_n * N, fc, n, wmma::mem_row_major);
}
__global__ void wmma_f16(const half* a, const half* b, float* c, int m, int n, int k) {
  tile_gemm<half, float, 16, 16, 16, wmma::row_major, wmma::col_major>(a, b, c, m, n, k, 0.5f);
}
__global__ void wmma_f16_32x8(const half* a, const half* b, float* c, int m, int n, int k) {
  tile_gemm<half, float, 32, 8, 16, wmma::row_major, wmma::col_major>(a, b, c, m, n, k, 2.0f);
}
__global__ void wmma_bf16(const __nv_bfloat16* a, const __nv_bfloat16* b, float* c, int m, int n, int k) {
  tile_gemm<__nv_bfloat16, float, 16, 16, 16, wmma::row_major, wmma::col_major>(a, b, c, m, n, k, 1.0f);
}
__global__ void wmma_s8(const signed char* a, const signed char* b, int* c, int m, int n, int k) {
  tile_gemm<signed char, int, 16, 16, 16, wmma::row_major, wmma::col_major>(a, b, c, m, n, k, 3);
}
__global__ void wmma_f64(const double* a, const double* b, double* c, int m, int n, int k) {
  tile_gemm<double, double, 8, 8, 4, wmma::row_major, wmma::col_major>(a, b, c, m, n, k, 1.0);
}
__global__ void wmma_tf32(const float* a, const float* b, float* c, int m, int n, int k) {
  int tile_m = blockIdx.y, tile_n = blockIdx.x;
  wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::col_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 8, float> fc;
  wmma::fill_fragment(fc, 0.0f);
  for (int kk = 0; kk < k; kk += 8) {
    // A col-major: element (i, kk) at a[kk*m + i]; B row-major: (kk, j) at b[kk*n + j].
    wmma::load_matrix_sync(fa, a + kk * m + tile_m * 16, m);
    wmma::load_matrix_sync(fb, b + kk * n + tile_n * 16, n);
    for (int t = 0; t < fa.num_elements; ++t) fa.x[t] = wmma::__float_to_tf32(fa.x[t]);
    for (int t = 0; t < fb.num_elements; ++t) fb.x[t] = wmma::__float_to_tf32(fb.x[t]);
    wmma::mma_sync(fc, fa, fb, fc);
  }
  wmma::store_matrix_sync(c + tile_m * 16 + tile_n * 16 * m, fc, m, wmma::mem_col_major);
}

// Device printf: integers of every width, floats, characters, strings,
// pointers, flags, widths and precisions (also given with '*').
__global__ void print_values(const int* in, const double* d, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  long long big = (long long)in[i] * 1000003LL;
  printf("t%d: %5d|%-4x|%08.3f|%lld|%c|%s|%+.2e|%u|%*d|%.*f|100%%\n", i, in[i], (unsigned)in[i] & 0xfff, d[i], big,
         'a' + (i % 26), (i & 1) ? "odd" : "even", d[i] * 1e10, (unsigned)i, 6, -i, 2, d[i]);
}

// cuda::barrier (mbarrier init/arrive/try_wait) used three rounds in a row:
// every thread writes, waits, reads its neighbour's value, waits again.
__global__ void barrier_rotate(const int* in, int* out, int n) {
  __shared__ int tile[128];
  __shared__ cuda::barrier<cuda::thread_scope_block> bar;
  if (threadIdx.x == 0) init(&bar, blockDim.x);
  __syncthreads();
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  for (int round = 0; round < 3; ++round) {
    tile[threadIdx.x] = (i < n ? in[i] : 0) + round;
    bar.arrive_and_wait();
    int v = tile[(threadIdx.x + 1 + round) % blockDim.x];
    bar.arrive_and_wait();
    if (i < n) out[i * 3 + round] = v;
  }
}

// cuda::memcpy_async of a whole tile with a barrier: on sm_90 a bulk copy
// (cp.async.bulk ... mbarrier::complete_tx::bytes) and mbarrier.expect_tx.
__global__ void bulk_copy_tile(const float* in, float* out) {
  __shared__ alignas(16) float tile[256];
  __shared__ cuda::barrier<cuda::thread_scope_block> bar;
  auto block = cooperative_groups::this_thread_block();
  if (block.thread_rank() == 0) init(&bar, block.size());
  block.sync();
  cuda::memcpy_async(block, tile, in + blockIdx.x * 256, cuda::aligned_size_t<16>(sizeof(float) * 256), bar);
  bar.arrive_and_wait();
  out[blockIdx.x * 256 + threadIdx.x] = tile[255 - threadIdx.x] * 3.0f;
}

// __syncthreads_count/_and/_or (bar.red.popc/and/or) over a partial block.
__global__ void block_votes(const int* in, int* count, int* all, int* any, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int v = i < n ? in[i] : 0;
  int c = __syncthreads_count(v > 0);
  int a = __syncthreads_and(v > -50);
  int o = __syncthreads_or(v > 90);
  if (threadIdx.x == 0) {
    count[blockIdx.x] = c;
    all[blockIdx.x] = a;
    any[blockIdx.x] = o;
  }
}

// Named barriers with thread counts: warps 0-1 produce and bar.arrive,
// warps 2-3 bar.sync on the same barrier, then read what was produced.
__global__ void producer_consumer(const int* in, int* out) {
  __shared__ int buf[64];
  int t = threadIdx.x;
  if (t < 64) {
    buf[t] = in[blockIdx.x * 64 + t] * 2;
    asm volatile("bar.arrive 1, 128;" ::: "memory");
  } else {
    asm volatile("bar.sync 1, 128;" ::: "memory");
    out[blockIdx.x * 64 + t - 64] = buf[63 - (t - 64)] + 1;
  }
}

// elect.sync over the lanes that take a branch: one leader per warp
// counts them.
__global__ void elect_leaders(const int* in, int* counts, int* leaders, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n && (in[i] & 1)) {
    unsigned mask = __activemask();
    unsigned leader;
    int is_leader;
#if __CUDA_ARCH__ >= 900
    asm volatile("{ .reg .pred p; elect.sync %0|p, %2; selp.s32 %1, 1, 0, p; }"
                 : "=r"(leader), "=r"(is_leader) : "r"(mask));
#else  // the twin corpus builds this file for sm_80 too
    leader = __ffs(mask) - 1;
    is_leader = (threadIdx.x % 32) == leader;
#endif
    if (is_leader) atomicAdd(&counts[i / 32], __popc(mask));
    leaders[i] = (int)leader;
  }
}

// mma.sync as CUTLASS-style code writes it: fragments of A (16x16,
// row-major) through ldmatrix.x4 and of B (16x8, k by n, row-major) through
// ldmatrix.x2.trans from shared memory, one m16n8k16 f16 -> f32 per warp,
// accumulating into C (16x8) stored from the ISA's accumulator layout.
__global__ void mma_f16_tile(const __half* A, const __half* B, float* C) {
  __shared__ alignas(16) __half sa[16 * 16];
  __shared__ alignas(16) __half sb[16 * 8];
  const int l = threadIdx.x, g = l >> 2, t = l & 3;
  for (int i = l; i < 256; i += 32) sa[i] = A[blockIdx.x * 256 + i];
  for (int i = l; i < 128; i += 32) sb[i] = B[blockIdx.x * 128 + i];
  __syncwarp();
  unsigned a0, a1, a2, a3, b0, b1;
  const unsigned sa_addr = static_cast<unsigned>(__cvta_generic_to_shared(&sa[(l % 16) * 16 + (l / 16) * 8]));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(a0), "=r"(a1), "=r"(a2), "=r"(a3) : "r"(sa_addr));
  const unsigned sb_addr = static_cast<unsigned>(__cvta_generic_to_shared(&sb[(l % 16) * 8]));
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];" : "=r"(b0), "=r"(b1) : "r"(sb_addr));
  float* out = C + blockIdx.x * 128;
  float c[4];
  for (int i = 0; i < 4; ++i) c[i] = out[(g + 8 * (i >> 1)) * 8 + 2 * t + (i & 1)];
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  for (int i = 0; i < 4; ++i) out[(g + 8 * (i >> 1)) * 8 + 2 * t + (i & 1)] = c[i];
}

// mma.sync m8n8k4 f64: each lane holds A[g][t], B[t][g], C[g][2t..2t+1].
__global__ void mma_f64_tile(const double* A, const double* B, double* C) {
  const int l = threadIdx.x, g = l >> 2, t = l & 3;
  const double a = A[blockIdx.x * 32 + g * 4 + t], b = B[blockIdx.x * 32 + t * 8 + g];
  double* out = C + blockIdx.x * 64;
  double c0 = out[g * 8 + 2 * t], c1 = out[g * 8 + 2 * t + 1];
  asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0,%1}, {%2}, {%3}, {%0,%1};"
               : "+d"(c0), "+d"(c1) : "d"(a), "d"(b));
  out[g * 8 + 2 * t] = c0;
  out[g * 8 + 2 * t + 1] = c1;
}

// stmatrix (sm_90): a 16x16 tile goes through ldmatrix.x4.trans into
// registers and back through stmatrix.x4 — the transpose lands in shared.
__global__ void stmatrix_transpose(const __half* in, __half* out) {
  __shared__ alignas(16) __half src[16 * 16];
  __shared__ alignas(16) __half dst[16 * 16];
  const int l = threadIdx.x;
  for (int i = l; i < 256; i += 32) src[i] = in[i];
  __syncwarp();
  // Lane l addresses row (l % 8) of matrix l / 8: matrices in the order
  // (rows 0-7, cols 0-7), (rows 8-15, cols 0-7), (0-7, 8-15), (8-15, 8-15).
  const int mat = l / 8, row = (mat & 1) * 8 + (l % 8), col = (mat >> 1) * 8;
  unsigned r0 = 0, r1 = 0, r2 = 0, r3 = 0;
#if __CUDA_ARCH__ >= 900
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(&src[row * 16 + col]));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(s));
  // Matrix (a, b) transposed belongs at block (b, a): swap the middle two.
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(&dst[row * 16 + col]));
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1,%2,%3,%4};"
               :: "r"(d), "r"(r0), "r"(r2), "r"(r1), "r"(r3) : "memory");
#endif
  __syncwarp();
  for (int i = l; i < 256; i += 32) out[i] = dst[i];
}

// Aligned device allocations: __nv_aligned_device_malloc (CUDA 13 lowers it
// to __cuda_syscall_aligned_malloc) and `new` of an over-aligned type (the
// same call), each thread its own blocks, read back, freed.
struct alignas(128) Aligned128 {
  float v[40];
};
__global__ void aligned_allocs(unsigned long long* ptrs, const float* in, float* out, unsigned long long align) {
  const int t = threadIdx.x;
  float* p = static_cast<float*>(__nv_aligned_device_malloc((t + 1) * sizeof(float), align));
  Aligned128* q = new Aligned128;
  ptrs[2 * t] = reinterpret_cast<unsigned long long>(p);
  ptrs[2 * t + 1] = reinterpret_cast<unsigned long long>(q);
  if (p == nullptr || q == nullptr) {
    free(p);
    delete q;
    return;
  }
  for (int i = 0; i <= t; ++i) p[i] = in[t] * static_cast<float>(i + 1);
  for (int i = 0; i < 40; ++i) q->v[i] = in[t] + static_cast<float>(i);
  float s = 0;
  for (int i = 0; i <= t; ++i) s += p[i];
  for (int i = 0; i < 40; ++i) s += q->v[i];
  out[t] = s;
  free(p);
  delete q;
}

// fp8 conversions as cuda_fp8.h compiles them for sm_89+: float -> e4m3 /
// e5m2 (cvt.rn.satfinite.e4m3x2.f32), a half2 -> an fp8 pair
// (cvt.rn.satfinite.e4m3x2.f16x2) and back to float through half
// (cvt.rn.f16x2.e4m3x2).
__global__ void fp8_convert(const float* in, unsigned char* e4, unsigned char* e5, float* back4, float* back5,
                            unsigned short* pair4, unsigned short* pair5, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const __nv_fp8_e4m3 a(in[i]);
  const __nv_fp8_e5m2 b(in[i]);
  e4[i] = a.__x;
  e5[i] = b.__x;
  back4[i] = static_cast<float>(a);
  back5[i] = static_cast<float>(b);
  const __half2 h = __floats2half2_rn(in[i], -in[i] * 0.5f);
  pair4[i] = __nv_fp8x2_e4m3(h).__x;
  pair5[i] = __nv_fp8x2_e5m2(h).__x;
}

// mma.sync m16n8k32 with fp8 inputs (sm_89+), f32 accumulators: the
// fragments built from A (16x32, row-major bytes) and B (32x8, k by n) as
// the ISA's figure for m16n8k32 8-bit types places them.
template <bool E5M2>
__device__ void mma_fp8(const unsigned char* A, const unsigned char* B, float* C) {
  const int l = threadIdx.x, g = l >> 2, t = l & 3;
  unsigned a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
  for (int i = 0; i < 16; ++i) {
    const int row = g + 8 * ((i >> 2) & 1), col = t * 4 + (i & 3) + 16 * (i >> 3);
    a[i / 4] |= static_cast<unsigned>(A[row * 32 + col]) << (8 * (i % 4));
  }
  for (int i = 0; i < 8; ++i) {
    const int k = t * 4 + (i & 3) + 16 * (i >> 2);
    b[i / 4] |= static_cast<unsigned>(B[k * 8 + g]) << (8 * (i % 4));
  }
  float c[4];
  for (int i = 0; i < 4; ++i) c[i] = C[(g + 8 * (i >> 1)) * 8 + 2 * t + (i & 1)];
#if __CUDA_ARCH__ >= 890
  if (E5M2) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e5m2.e5m2.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
#endif
  for (int i = 0; i < 4; ++i) C[(g + 8 * (i >> 1)) * 8 + 2 * t + (i & 1)] = c[i];
}
__global__ void mma_e4m3_tile(const unsigned char* A, const unsigned char* B, float* C) { mma_fp8<false>(A, B, C); }
__global__ void mma_e5m2_tile(const unsigned char* A, const unsigned char* B, float* C) { mma_fp8<true>(A, B, C); }
