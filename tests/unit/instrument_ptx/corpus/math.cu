// Single and double precision math library calls and intrinsics.
__global__ void math_f(const float* x, float* y) {
  int i = threadIdx.x;
  float a = x[i];
  y[i] = sqrtf(a) + expf(a) + sinf(a) + __fdividef(a, 3.0f) + fmaf(a, 2.0f, 1.0f) +
         logf(a + 1.0f) + __sinf(a) + __expf(a) + rsqrtf(a) + fabsf(a) + floorf(a) +
         powf(a, 1.5f) + tanhf(a) + a / (a + 2.0f);
}

__global__ void math_d(const double* x, double* y) {
  int i = threadIdx.x;
  double a = x[i];
  y[i] = sqrt(a) + exp(a) + sin(a) + fma(a, 2.0, 1.0) + log(a) + a / 7.0 + pow(a, 0.5);
}

__global__ void conversions(const float* f, int* i, double* d, unsigned short* h) {
  int t = threadIdx.x;
  i[t] = __float2int_rn(f[t]) + (int)f[t];
  d[t] = (double)f[t] + (double)i[t];
  h[t] = (unsigned short)(f[t] * 100.0f);
}
