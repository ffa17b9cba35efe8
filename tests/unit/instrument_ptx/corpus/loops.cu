// Loops: grid-stride, nested, while with break, unrolled.
__global__ void saxpy(int n, float a, const float* x, float* y) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
    y[i] = a * x[i] + y[i];
}

__global__ void matmul(const float* A, const float* B, float* C, int N) {
  int r = blockIdx.y * blockDim.y + threadIdx.y;
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= N || c >= N) return;
  float acc = 0;
  for (int k = 0; k < N; ++k) acc += A[r * N + k] * B[k * N + c];
  C[r * N + c] = acc;
}

__global__ void collatz(unsigned* v) {
  unsigned x = v[threadIdx.x], steps = 0;
  while (x != 1) {
    x = (x & 1) ? 3 * x + 1 : x / 2;
    if (++steps > 1000) break;
  }
  v[threadIdx.x] = steps;
}

__global__ void unrolled(float* v) {
  float s = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) s += v[threadIdx.x * 8 + i];
  v[threadIdx.x] = s;
}
