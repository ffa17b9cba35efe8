// Kernels for the validation tests (validation_test.cc): each exercises one
// way a kernel can reach memory its arguments do not name, or one access the
// twin must NOT report. Compiled with `nvcc -ptx -arch=sm_80` at build time;
// only the PTX is used (twinned by MakeTwin, run in the interpreter).

// Loads through a table of pointers held in global memory: with ranges
// covering only `src_table` and `out`, the loads from the pointed-to buffers
// are misses in read+write mode (and nothing is reported in write mode).
__global__ void gather(const int* const* src_table, int tables, int* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = src_table[i % tables][i / tables] * 5 - 3;
}

// Stores only where flags[i] is odd: nvcc emits a branch around the store;
// the untaken side must not be reported.
__global__ void store_if(const int* flags, const int* in, int* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n && (flags[i] & 1)) out[i] = in[i] ^ 0x5a5a;
}

// Generic stores (the pointer's space is unknown inside the function) to
// shared, local and global memory.
__device__ __noinline__ void put(int* p, int v) { *p = v; }

__global__ void generic_spaces(const int* in, int* out, int* unspec, int n) {
  __shared__ int sh[256];
  int loc[8];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int v = in[i];
  put(&sh[threadIdx.x], v + 1);                    // generic -> shared: not checked
  for (int k = 0; k < 8; ++k) put(&loc[k], v + k);  // generic -> local: not checked
  put(&unspec[i], v * 5);                          // generic -> global, not speculated: miss
  put(&out[i], sh[threadIdx.x] + loc[v & 7]);      // generic -> global, speculated: hit
}

// A miss inside a device function, called from two kernels: each record must
// carry the id of the kernel whose launch made the access.
__device__ __noinline__ void scatter_one(int* const* table, int tables, int i, int v) {
  table[i % tables][i / tables] = v;
}

__global__ void scatter_via_func_a(int* const* table, int tables, const int* src, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) scatter_one(table, tables, i, src[i] + 11);
}

__global__ void scatter_via_func_b(int* const* table, int tables, const int* src, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) scatter_one(table, tables, i, src[i] - 7);
}

// wmma tiles: C = C + A * B per 16x16 tile, one warp per tile (A row-major
// m x k, B as n rows of k, C row-major with leading dimension n). Its
// stores reach C only through wmma.store, its loads through wmma.load: the
// twin must check each whole tile footprint (16 rows, `n` elements apart).
#include <mma.h>
__global__ void wmma_tile(const half* a, const half* b, float* c, int n, int k) {
  using namespace nvcuda;
  wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
  float* tile = c + blockIdx.y * 16 * n + blockIdx.x * 16;
  wmma::load_matrix_sync(fc, tile, n, wmma::mem_row_major);
  for (int kk = 0; kk < k; kk += 16) {
    wmma::load_matrix_sync(fa, a + blockIdx.y * 16 * k + kk, k);
    wmma::load_matrix_sync(fb, b + blockIdx.x * 16 * k + kk, k);
    wmma::mma_sync(fc, fa, fb, fc);
  }
  wmma::store_matrix_sync(tile, fc, n, wmma::mem_row_major);
}
