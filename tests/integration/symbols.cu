// __constant__ and __device__ variables through cudaMemcpyToSymbol /
// cudaMemcpyFromSymbol / cudaGetSymbolAddress, and a kernel that reads the
// constant and writes the global. Built with PTX only (no SASS), so libphos
// must size the kernel's parameters from the PTX `.entry` list.
#include <cuda_runtime.h>

#include <cstdio>

__constant__ float scale[4];
__device__ float out_sum[256];

struct Pair {
  float a;
  double b;
};

__global__ void apply(const float* in, int n, Pair p, char tag) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out_sum[i] = in[i] * scale[i % 4] + p.a + static_cast<float>(p.b) + tag;
}

#define CHECK(x)                                                                                     \
  do {                                                                                               \
    cudaError_t e = (x);                                                                             \
    if (e != cudaSuccess) {                                                                          \
      std::printf("symbols: %s failed: %s\n", #x, cudaGetErrorName(e));                              \
      return 2;                                                                                      \
    }                                                                                                \
  } while (0)

int main() {
  const int n = 256;
  float h_scale[4] = {1.f, 2.f, 3.f, 4.f};
  float in[n], out[n];
  for (int i = 0; i < n; ++i) in[i] = static_cast<float>(i);
  CHECK(cudaMemcpyToSymbol(scale, h_scale, sizeof h_scale));
  float* d_in = nullptr;
  CHECK(cudaMalloc(&d_in, sizeof in));
  CHECK(cudaMemcpy(d_in, in, sizeof in, cudaMemcpyHostToDevice));
  apply<<<1, n>>>(d_in, n, Pair{0.5f, 0.25}, 1);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpyFromSymbol(out, out_sum, sizeof out));
  void* addr = nullptr;
  CHECK(cudaGetSymbolAddress(&addr, out_sum));
  float first = 0;
  CHECK(cudaMemcpy(&first, addr, sizeof first, cudaMemcpyDeviceToHost));
  int bad = first != out[0];
  for (int i = 0; i < n; ++i)
    if (out[i] != in[i] * h_scale[i % 4] + 0.5f + 0.25f + 1) ++bad;
  CHECK(cudaFree(d_in));
  std::printf("symbols: %s\n", bad ? "MISMATCH" : "OK");
  return bad ? 1 : 0;
}
