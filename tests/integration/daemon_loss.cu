// Runs kernels and synchronises in a loop until a CUDA call fails; the
// integration test kills phosd meanwhile. Prints "daemon_loss: running"
// once the first round trip worked, then "daemon_loss: error <name>" and
// exits 3 when phosd is gone.
#include <cuda_runtime.h>

#include <cstdio>

__global__ void bump(int* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1;
}

int main() {
  const int n = 1024;
  int* d = nullptr;
  if (cudaMalloc(&d, n * sizeof(int)) != cudaSuccess) return 2;
  for (long iter = 0; iter < 100000000; ++iter) {
    bump<<<n / 256, 256>>>(d, n);
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
      std::printf("daemon_loss: error %s\n", cudaGetErrorName(e));
      std::fflush(stdout);
      return 3;
    }
    if (iter == 0) {
      std::printf("daemon_loss: running\n");
      std::fflush(stdout);
    }
  }
  return 0;
}
