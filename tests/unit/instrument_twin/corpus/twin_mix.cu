// Twin-pass corpus: the access shapes the twin pass must check (or skip).
// Compiled with nvcc -ptx -arch=sm_80 by the test build; never run.
#include <cuda_pipeline.h>

__device__ unsigned g_hits;
__device__ float g_lut[16];

// Generic accesses in a non-inlined function: isspacep.global tests.
__device__ __noinline__ void bump(unsigned* counter, float* out, float v) {
  atomicAdd(counter, 1u);  // generic atom
  *out = v;                // generic st
}

// Recursion: a stack frame in local memory, accessed generically.
__device__ __noinline__ int depth_sum(const int* p, int n) {
  if (n <= 0) return 0;
  int local[4] = {p[0], p[1], n, 1};
  return local[n & 3] + depth_sum(p + 1, n - 1);
}

typedef float (*unary_fn)(float);
__device__ __noinline__ float twice(float x) { return 2.0f * x; }
__device__ __noinline__ float half(float x) { return 0.5f * x; }
__device__ unary_fn g_fns[2] = {twice, half};

// Vector stores and loads, guarded stores, red (atomic without result),
// globals by symbol, ld.global.nc.
__global__ void vec_and_guards(float4* __restrict__ out, const float4* __restrict__ in, float* red_target,
                               int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i];
  if (i == 0) g_hits = n;
  atomicAdd(red_target, 1.0f);
  if (i < 16) g_lut[i] = __ldg(&red_target[i]);
}

// Pointers loaded from a table, then used generically.
__global__ void pointer_table(float** table, int which, float v, unsigned* counter) {
  float* p = table[which];
  bump(counter, p + threadIdx.x, v);
}

// cp.async global -> shared, then shared -> global stores.
__global__ void async_copy(const float4* in, float4* out) {
  __shared__ float4 tile[128];
  __pipeline_memcpy_async(&tile[threadIdx.x], &in[blockIdx.x * 128 + threadIdx.x], sizeof(float4));
  __pipeline_commit();
  __pipeline_wait_prior(0);
  __syncthreads();
  out[blockIdx.x * 128 + threadIdx.x] = tile[127 - threadIdx.x];
}

__global__ void recursion_and_pointers(const int* p, int n, float* out, int which) {
  out[threadIdx.x] = g_fns[which & 1](static_cast<float>(depth_sum(p, n)));
}

// Byte and 64-bit accesses, atomics of every width.
__global__ void widths(unsigned char* b, unsigned long long* q, double* d, short* s) {
  b[threadIdx.x] = static_cast<unsigned char>(threadIdx.x);
  atomicAdd(q, 1ull);
  atomicCAS(q + 1, 0ull, 5ull);
  atomicAdd(d, 1.0);
  s[threadIdx.x] = static_cast<short>(q[2]);
}

// Shapes nvcc rarely emits from plain C++: red, generic atom and a guarded
// generic store, written with inline PTX.
__global__ void inline_shapes(unsigned* global_ptr, unsigned* generic_ptr, int flag) {
  unsigned* g = global_ptr + threadIdx.x;
  asm volatile("red.global.add.u32 [%0], 1;" ::"l"(__cvta_generic_to_global(g)) : "memory");
  unsigned old;
  asm volatile("atom.add.u32 %0, [%1], 2;" : "=r"(old) : "l"(generic_ptr) : "memory");
  asm volatile(
      "{\n\t.reg .pred %%pf;\n\t"
      "setp.ne.s32 %%pf, %1, 0;\n\t"
      "@%%pf st.u32 [%0+4], %2;\n\t}" ::"l"(generic_ptr),
      "r"(flag), "r"(old)
      : "memory");
}
