// Kernels for the PTX interpreter tests, one or more per instruction family.
// Compiled with `nvcc -ptx -arch=sm_90` at build time; only the PTX is used.
#include <cooperative_groups.h>
#include <cuda_fp16.h>

// ---- atomics: contention across blocks (global) and within a block (shared)
__global__ void atomics(const unsigned* in, int n, unsigned* u32, unsigned long long* u64, float* f32,
                        double* f64, int* smin, int* smax, unsigned* bor, unsigned* band, unsigned* bxor,
                        unsigned* inc, unsigned* cas_max, unsigned* block_sums) {
  __shared__ unsigned sh;
  if (threadIdx.x == 0) sh = 0;
  __syncthreads();
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    unsigned v = in[i];
    atomicAdd(u32, v & 0xFFFF);
    atomicAdd(u64, (unsigned long long)v * 3);
    atomicAdd(f32, (float)(v & 0xFF));
    atomicAdd(f64, (double)(v & 0xFFF) * 0.5);
    atomicMin(smin, (int)v);
    atomicMax(smax, (int)v);
    atomicOr(bor, v & 0x0F0F0F0F);
    atomicAnd(band, v | 0x10101010);
    atomicXor(bxor, v);
    atomicInc(inc, 1000u);
    unsigned old = *cas_max, assumed;
    do {
      assumed = old;
      unsigned want = assumed > (v >> 1) ? assumed : (v >> 1);
      old = atomicCAS(cas_max, assumed, want);
    } while (old != assumed);
    atomicAdd(&sh, v & 0xFF);
  }
  __syncthreads();
  if (threadIdx.x == 0) block_sums[blockIdx.x] = sh;
}

// ---- warp collectives
__global__ void warp_ops(const int* in, int* sum_down, int* sum_xor, int* scan, int* bcast, unsigned* ballot,
                         int* all_pos, int* any_big, unsigned* active, int* redux, unsigned* match) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int v = in[i];
  int lane = threadIdx.x & 31;
  int s = v;
  for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
  sum_down[i] = s;
  int x = v;
  for (int o = 1; o < 32; o <<= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  sum_xor[i] = x;
  int sc = v;
  for (int o = 1; o < 32; o <<= 1) {
    int t = __shfl_up_sync(0xffffffffu, sc, o);
    if (lane >= o) sc += t;
  }
  scan[i] = sc;
  bcast[i] = __shfl_sync(0xffffffffu, v, (lane * 7 + 3) & 31);
  ballot[i] = __ballot_sync(0xffffffffu, v & 1);
  all_pos[i] = __all_sync(0xffffffffu, v >= 0);
  any_big[i] = __any_sync(0xffffffffu, v > 900);
  if (lane < 10) active[i] = __activemask();
  else active[i] = 0;
  redux[i] = __reduce_add_sync(0xffffffffu, v) ^ __reduce_max_sync(0xffffffffu, (unsigned)v);
  match[i] = __match_any_sync(0xffffffffu, v & 3);
}

// ---- f64 math through libdevice
__global__ void f64_math(const double* x, double* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    double a = x[i];
    y[i] = sqrt(a) * 1.5 + a / (a + 3.0) + fma(a, a, -2.0) + fabs(a - 4.0) + fmin(a, 2.0) + rsqrt(a + 1.0);
  }
}

// ---- f32 math (approximate instructions)
__global__ void f32_math(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    float a = x[i];
    y[i] = __fdividef(a, a + 1.0f) + __expf(a * 0.1f) + __logf(a + 1.0f) + __sinf(a) + __cosf(a) + sqrtf(a) +
           rsqrtf(a + 1.0f) + tanhf(a * 0.01f) + copysignf(1.0f, a - 5.0f) + __frcp_rn(a + 2.0f);
  }
}

// ---- conversions with rounding modes
__global__ void conversions(const float* f, const double* d, const int* k, int* out_i, float* out_f,
                            unsigned short* out_h, float* out_hf, long long* out_ll, unsigned* out_u, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    float a = f[i];
    double b = d[i];
    int c = k[i];
    out_i[i * 4 + 0] = __float2int_rn(a);
    out_i[i * 4 + 1] = __float2int_rz(a);
    out_i[i * 4 + 2] = __float2int_rd(a);
    out_i[i * 4 + 3] = __float2int_ru(a);
    out_f[i * 8 + 0] = __double2float_rn(b);
    out_f[i * 8 + 1] = __double2float_rz(b);
    out_f[i * 8 + 2] = __double2float_rd(b);
    out_f[i * 8 + 3] = __double2float_ru(b);
    out_f[i * 8 + 4] = __int2float_rz(c);
    out_f[i * 8 + 5] = __int2float_rn(c);
    out_f[i * 8 + 6] = __saturatef(a * 0.01f);
    out_f[i * 8 + 7] = rintf(a * 0.5f) + truncf(a * 0.25f) + floorf(a) + ceilf(a);
    __half h = __float2half_rn(a * 1e-3f);
    out_h[i] = __half_as_ushort(h);
    out_hf[i] = __half2float(__ushort_as_half((unsigned short)(c & 0xFFFF)));
    out_ll[i] = __double2ll_rz(b * 1e6) + (long long)(signed char)c + (long long)(short)(c >> 3);
    out_u[i] = __float2uint_rn(a);  // saturates negatives to 0
  }
}

// ---- integer and bit operations
__global__ void int_ops(const unsigned* a, const unsigned* b, unsigned* out, unsigned long long* out64, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    unsigned x = a[i], y = b[i] | 1;
    int sx = (int)x, sy = (int)(y >> 3) + 1;
    unsigned* o = out + i * 16;
    o[0] = __popc(x) + (__clz(y) << 8);
    o[1] = __brev(x);
    o[2] = __byte_perm(x, y, 0x5140);
    o[3] = __funnelshift_l(x, y, y & 31);
    o[4] = __funnelshift_r(x, y, x & 63);
    o[5] = __umulhi(x, y);
    o[6] = (unsigned)__mulhi(sx, sy);
    o[7] = x / y + x % y;
    o[8] = (unsigned)(sx / sy) ^ (unsigned)(sx % sy);
    o[9] = (x >> 5) & 0x3F;
    o[10] = __ffs(x) + (__clzll((unsigned long long)x) << 16);
    o[11] = (x & y) ^ (~x | (y >> 2)) ^ ((x ^ y) & 0xF0F0F0F0u);
    o[12] = __sad(sx, sy, 7u);
    o[13] = (unsigned)__mul24(sx, sy);
    o[14] = (unsigned)min(sx, sy) + (unsigned)max(x, y) + (unsigned)abs(sx);
    o[15] = (unsigned)(((int)x) >> (y & 31)) + (x << (y & 15));
    out64[i * 2] = (unsigned long long)x * y + __umul64hi((unsigned long long)x << 20, (unsigned long long)y << 30);
    out64[i * 2 + 1] = ((unsigned long long)x << 32 | y) / ((unsigned long long)y + 1) +
                       __popcll((unsigned long long)x * 0x9E3779B97F4A7C15ull);
  }
}

// ---- extended-precision multiply-add: a 64x64 -> 128-bit product from
// 32-bit limbs chained through the carry flag (mad.cc / madc), the way
// libdevice's sin/cos range reduction multiplies by 2/pi.
__global__ void wide_mul(const unsigned long long* a, const unsigned long long* b, unsigned* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  unsigned a0 = (unsigned)a[i], a1 = (unsigned)(a[i] >> 32), b0 = (unsigned)b[i], b1 = (unsigned)(b[i] >> 32);
  unsigned r0, r1, r2, r3;
  asm("{\n\t"
      "mul.lo.u32 %0, %4, %6;\n\t"
      "mul.hi.u32 %1, %4, %6;\n\t"
      "mad.lo.cc.u32 %1, %5, %6, %1;\n\t"
      "madc.hi.u32 %2, %5, %6, 0;\n\t"
      "mad.lo.cc.u32 %1, %4, %7, %1;\n\t"
      "madc.hi.cc.u32 %2, %4, %7, %2;\n\t"
      "addc.u32 %3, 0, 0;\n\t"
      "mad.lo.cc.u32 %2, %5, %7, %2;\n\t"
      "madc.hi.u32 %3, %5, %7, %3;\n\t"
      "}"
      : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
      : "r"(a0), "r"(a1), "r"(b0), "r"(b1));
  out[i * 4] = r0;
  out[i * 4 + 1] = r1;
  out[i * 4 + 2] = r2;
  out[i * 4 + 3] = r3;
}

// ---- device function calls, recursion, struct return, local arrays, generic addressing
struct Pair {
  int a;
  float b;
};
__device__ __noinline__ int fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }
__device__ __noinline__ Pair make_pair(int x, float y) { return Pair{x * 2, y * 0.5f}; }
__device__ __noinline__ void bump(int* p, int v) { *p += v; }  // generic pointer
__device__ __noinline__ int sum_local(const int* arr, int n) {
  int s = 0;
  for (int k = 0; k < n; ++k) s += arr[k];
  return s;
}

__global__ void calls(const int* in, int* out, int* gbuf, int n) {
  __shared__ int sh[128];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int v = in[i];
  int local[16];
  for (int k = 0; k < 16; ++k) local[k] = v * k + (k ^ (v & 7));
  local[v & 15] += 5;  // dynamic index keeps the array in .local
  sh[threadIdx.x] = v;
  bump(&sh[threadIdx.x], 3);        // shared via generic
  bump(&local[(v >> 4) & 15], 11);  // local via generic
  bump(&gbuf[i], v);                // global via generic
  Pair p = make_pair(v, (float)v);
  int spaces = __isShared(&sh[0]) + 2 * __isLocal(&local[0]) + 4 * __isGlobal(gbuf);
  out[i * 4 + 0] = fib(v & 15);
  out[i * 4 + 1] = p.a + (int)p.b;
  out[i * 4 + 2] = sum_local(local, 16) + sh[threadIdx.x];
  out[i * 4 + 3] = spaces;
}

// ---- __constant__ memory (initialized, and written by the host like cudaMemcpyToSymbol)
__constant__ int c_table[8] = {3, 1, 4, 1, 5, 9, 2, 6};
__constant__ float c_coeffs[4];
__device__ unsigned long long g_counter;

__global__ void constants(const int* in, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    int v = in[i];
    out[i] = c_table[v & 7] * c_coeffs[v & 3];
    atomicAdd(&g_counter, 1ull);
  }
}

// ---- templates and narrow types
template <typename T>
__global__ void scale_add(const T* x, T* y, T a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] * a + y[i];
}
template __global__ void scale_add<int>(const int*, int*, int, int);
template __global__ void scale_add<double>(const double*, double*, double, int);
template __global__ void scale_add<unsigned char>(const unsigned char*, unsigned char*, unsigned char, int);
template __global__ void scale_add<short>(const short*, short*, short, int);
template __global__ void scale_add<long long>(const long long*, long long*, long long, int);

// ---- 3D grid/block ids and dynamic shared memory
__global__ void ids3d(unsigned* out) {
  unsigned bx = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  unsigned tx = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  unsigned nt = blockDim.x * blockDim.y * blockDim.z;
  out[bx * nt + tx] = (blockIdx.z << 24) | (blockIdx.y << 16) | (threadIdx.z << 12) | (threadIdx.y << 8) |
                      (threadIdx.x << 2) | (blockIdx.x & 3);
}

__global__ void reverse_dyn(const int* in, int* out) {
  extern __shared__ int dyn[];
  int t = threadIdx.x;
  dyn[t] = in[blockIdx.x * blockDim.x + t];
  __syncthreads();
  out[blockIdx.x * blockDim.x + t] = dyn[blockDim.x - 1 - t];
}

// ---- cooperative launch: grid-wide barriers (cooperative_groups' grid.sync()
// polls a counter in the launch's grid workspace, %envreg1:%envreg2).
// Each round every thread bumps its element, then reads another block's.
__global__ void grid_sync_rounds(int* data, int* out, int n, int rounds) {
  cooperative_groups::grid_group g = cooperative_groups::this_grid();
  const int i = static_cast<int>(g.thread_rank());
  const int other = (i + static_cast<int>(blockDim.x)) % n;
  int acc = 0;
  for (int r = 0; r < rounds; ++r) {
    if (i < n) data[i] += i + r;
    g.sync();
    if (i < n) acc += data[other];
    g.sync();
  }
  if (i < n) out[i] = acc;
}
