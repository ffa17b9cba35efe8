// Kernels for the PTX ISA features third-party code uses (issue #16): warp
// collectives under independent thread scheduling, packed half arithmetic,
// dp4a, cp.async, wmma, indirect calls. Compiled to PTX for sm_90 at build
// time and checked against CPU references by isa_test.cc.
#include <cooperative_groups.h>
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
