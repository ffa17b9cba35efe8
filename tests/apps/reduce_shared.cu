// reduce_shared: block-wide sum with shared memory and bar.sync, finished
// with warp shuffles (shfl.sync.down), then one atomicAdd per block.
// Integer arithmetic (mod 2^64), so the result is independent of order.
#include <vector>

#include "common.h"

constexpr int kBlock = 256;

__global__ void reduce_sum(const unsigned int* in, unsigned long long* out, int n) {
  __shared__ unsigned long long partial[kBlock];
  const int tid = threadIdx.x;
  unsigned long long v = 0;
  // Grid-stride accumulate.
  for (int i = blockIdx.x * blockDim.x + tid; i < n; i += gridDim.x * blockDim.x) v += in[i];
  partial[tid] = v;
  __syncthreads();
  // Tree in shared memory down to one warp.
  for (int s = blockDim.x / 2; s >= 32; s >>= 1) {
    if (tid < s) partial[tid] += partial[tid + s];
    __syncthreads();
  }
  if (tid < 32) {
    v = partial[tid];
    for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
    if (tid == 0) atomicAdd(out, v);
  }
}

// Second kernel: per-block maxima with warp shuffles only (no shared memory
// tree), written to out[blockIdx.x].
__global__ void block_max(const unsigned int* in, unsigned int* out, int n) {
  __shared__ unsigned int warp_max[kBlock / 32];
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  unsigned int v = i < n ? in[i] : 0u;
  for (int off = 16; off > 0; off >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, off));
  if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned int m = 0;
    for (int w = 0; w < kBlock / 32; ++w) m = max(m, warp_max[w]);
    out[blockIdx.x] = m;
  }
}

int main() {
  const int n = 1 << 16;
  const int blocks = (n + kBlock - 1) / kBlock;
  AppRng rng(0x5eed0003);
  std::vector<unsigned int> in(n);
  for (int i = 0; i < n; ++i) in[i] = rng.NextU32();
  unsigned int* din;
  unsigned long long* dsum;
  unsigned int* dmax;
  APP_CHECK(cudaMalloc(&din, n * sizeof(unsigned int)));
  APP_CHECK(cudaMalloc(&dsum, sizeof(unsigned long long)));
  APP_CHECK(cudaMalloc(&dmax, blocks * sizeof(unsigned int)));
  APP_CHECK(cudaMemcpy(din, in.data(), n * sizeof(unsigned int), cudaMemcpyHostToDevice));
  APP_CHECK(cudaMemset(dsum, 0, sizeof(unsigned long long)));
  reduce_sum<<<64, kBlock>>>(din, dsum, n);
  APP_CHECK(cudaGetLastError());
  AppMidpoint("reduce_shared");  // the sum is on the device, the maxima not yet
  block_max<<<blocks, kBlock>>>(din, dmax, n);
  APP_CHECK(cudaGetLastError());
  unsigned long long sum = 0;
  std::vector<unsigned int> maxes(blocks);
  APP_CHECK(cudaMemcpy(&sum, dsum, sizeof(sum), cudaMemcpyDeviceToHost));
  APP_CHECK(cudaMemcpy(maxes.data(), dmax, blocks * sizeof(unsigned int), cudaMemcpyDeviceToHost));
  unsigned long long ref = 0;
  for (int i = 0; i < n; ++i) ref += in[i];
  size_t bad = sum == ref ? 0 : 1;
  for (int b = 0; b < blocks; ++b) {
    unsigned int m = 0;
    for (int i = b * kBlock; i < (b + 1) * kBlock && i < n; ++i) m = in[i] > m ? in[i] : m;
    if (maxes[b] != m) ++bad;
  }
  APP_CHECK(cudaFree(din));
  APP_CHECK(cudaFree(dsum));
  APP_CHECK(cudaFree(dmax));
  uint64_t h = AppFnv1a(&sum, sizeof(sum));
  h = AppFnv1a(maxes.data(), maxes.size() * sizeof(unsigned int), h);
  return AppReport("reduce_shared", h, bad);
}
