// Twin corpus: wmma loads and stores through global, generic and shared
// addresses, with register and immediate strides (each global one a check
// over the tile's whole footprint).
#include <mma.h>
using namespace nvcuda;

__global__ void wmma_global(const half* a, const half* b, float* c, int n, int k) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
  wmma::fill_fragment(fc, 0.0f);
  for (int kk = 0; kk < k; kk += 16) {
    wmma::load_matrix_sync(fa, a + blockIdx.y * 16 * k + kk, k);
    wmma::load_matrix_sync(fb, b + blockIdx.x * 16 * k + kk, k);
    wmma::mma_sync(fc, fa, fb, fc);
  }
  wmma::store_matrix_sync(c + blockIdx.y * 16 * n + blockIdx.x * 16, fc, n, wmma::mem_col_major);
}

// Through shared memory (not checked) and a fixed stride.
__global__ void wmma_staged(const half* a, float* c) {
  __shared__ half tile[16 * 16];
  for (int i = threadIdx.x; i < 256; i += 32) tile[i] = a[blockIdx.x * 256 + i];
  __syncwarp();
  wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::row_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
  wmma::load_matrix_sync(fa, tile, 16);
  wmma::load_matrix_sync(fb, tile, 16);
  wmma::load_matrix_sync(fc, c + blockIdx.x * 256, 16, wmma::mem_row_major);
  wmma::mma_sync(fc, fa, fb, fc);
  wmma::store_matrix_sync(c + blockIdx.x * 256, fc, 16, wmma::mem_row_major);
}
