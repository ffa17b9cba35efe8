// extern "C" kernels keep unmangled names.
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

extern "C" __global__ void __launch_bounds__(128, 4) bounded(int* p) {
  p[threadIdx.x] = threadIdx.x;
}

extern "C" __global__ void vec_load(const float4* __restrict__ in, float4* out) {
  float4 v = in[threadIdx.x];
  out[threadIdx.x] = make_float4(v.w, v.z, v.y, v.x);
}
