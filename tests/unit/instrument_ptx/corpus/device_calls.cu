// Non-inlined device functions: scalar, pointer and struct returns.
struct Pair { int a; float b; };

__device__ __noinline__ int square(int x) { return x * x; }
__device__ __noinline__ Pair make_pair(int a, float b) { return Pair{a, b}; }
__device__ __noinline__ void store3(float* p, float a, float b, float c) {
  p[0] = a; p[1] = b; p[2] = c;
}

__global__ void device_calls(int* out, float* fout) {
  int t = threadIdx.x;
  out[t] = square(t);
  Pair p = make_pair(t, 1.5f);
  fout[t] = p.b * p.a;
  store3(fout + 64 + 3 * t, 1.0f, 2.0f, 3.0f);
}
