// A pointer reaches a __noinline__ function that cannot tell which space it is
// in, so loads and stores stay generic.
__device__ __noinline__ void bump(int* p, int v) { *p += v; }

__global__ void generic_addr(int* g, int which) {
  __shared__ int s[32];
  s[threadIdx.x % 32] = 0;
  __syncthreads();
  int* p = which ? g + threadIdx.x : s + (threadIdx.x % 32);
  bump(p, 5);
  __syncthreads();
  if (threadIdx.x < 32) g[threadIdx.x] += s[threadIdx.x];
}
