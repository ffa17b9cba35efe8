// Warp shuffles and votes.
__global__ void warp_reduce(const float* in, float* out) {
  float v = in[blockIdx.x * blockDim.x + threadIdx.x];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  float b = __shfl_sync(0xffffffffu, v, 0);
  float x = __shfl_xor_sync(0xffffffffu, v, 1);
  float u = __shfl_up_sync(0xffffffffu, v, 2);
  if ((threadIdx.x & 31) == 0) out[blockIdx.x] = v + b + x + u;
}

__global__ void warp_vote(const int* in, unsigned* out) {
  int p = in[threadIdx.x] > 0;
  unsigned ballot = __ballot_sync(0xffffffffu, p);
  int all = __all_sync(0xffffffffu, p);
  int any = __any_sync(0xffffffffu, p);
  unsigned active = __activemask();
  out[threadIdx.x] = ballot + all * 2 + any * 4 + __popc(active) + __clz(ballot) + __ffs(ballot);
}
