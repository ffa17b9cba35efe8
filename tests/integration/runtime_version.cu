// Prints the CUDA runtime version it was linked with and checks one kernel
// and its copies: built with nvcc's static runtime against other runtime
// releases than the toolkit's (tests/integration/CMakeLists.txt), it shows
// that release's embedded runtime working over phos's driver API (the
// export tables, docs/interposer.md).
#include <cstdio>
#include <cuda_runtime.h>
__global__ void add(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}
int main() {
  int rt = 0, drv = 0;
  cudaRuntimeGetVersion(&rt);
  cudaDriverGetVersion(&drv);
  const int n = 1000;
  float h[3][n];
  for (int i = 0; i < n; ++i) { h[0][i] = i; h[1][i] = 2 * i; }
  float *a, *b, *c;
  if (cudaMalloc(&a, n * 4) || cudaMalloc(&b, n * 4) || cudaMalloc(&c, n * 4)) { printf("runtime_version: cudaMalloc failed\n"); return 1; }
  cudaMemcpy(a, h[0], n * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(b, h[1], n * 4, cudaMemcpyHostToDevice);
  add<<<(n + 255) / 256, 256>>>(a, b, c, n);
  cudaError_t e = cudaMemcpy(h[2], c, n * 4, cudaMemcpyDeviceToHost);
  int bad = 0;
  for (int i = 0; i < n; ++i) bad += h[2][i] != 3.0f * i;
  printf("runtime_version: runtime %d driver %d: %s, %d wrong\n", rt, drv, cudaGetErrorString(e), bad);
  return e != cudaSuccess || bad;
}
