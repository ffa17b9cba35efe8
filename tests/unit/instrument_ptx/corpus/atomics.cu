// Integer and float atomics: add, CAS, exchange, min/max, and a reduction.
__global__ void atomics_int(int* counter, unsigned* u, int* mx, unsigned long long* big) {
  atomicAdd(counter, 1);
  atomicExch(u, threadIdx.x);
  atomicMax(mx, (int)threadIdx.x);
  atomicMin(mx + 1, -(int)threadIdx.x);
  int old = atomicCAS(counter + 1, 0, 7);
  if (old == 0) atomicAdd(big, 1ull);
  atomicAnd(u + 1, 0xF0u);
  atomicOr(u + 2, 1u);
  atomicXor(u + 3, 3u);
  atomicInc(u + 4, 100u);
}

__global__ void atomics_float(float* f, double* d, float v) {
  float prev = atomicAdd(f, v);
  atomicAdd(d, (double)prev);
  atomicExch(f + 1, v * 2.0f);
}

__device__ float atomic_max_float(float* addr, float value) {
  int* ai = (int*)addr;
  int old = *ai, assumed;
  do {
    assumed = old;
    old = atomicCAS(ai, assumed, __float_as_int(fmaxf(value, __int_as_float(assumed))));
  } while (assumed != old);
  return __int_as_float(old);
}

__global__ void atomics_cas_loop(float* m, const float* v) {
  atomic_max_float(m, v[threadIdx.x]);
}
