// Calls a CUDA runtime function phos does not implement (twice): under
// `phos run` it must return cudaErrorNotSupported and phos must log it once.
#include <cuda_runtime.h>

#include <cstdio>

int main() {
  void* p = nullptr;
  cudaError_t a = cudaMallocManaged(&p, 4096, cudaMemAttachGlobal);
  cudaError_t b = cudaMallocManaged(&p, 4096, cudaMemAttachGlobal);
  std::printf("unsupported_api: %d %d\n", static_cast<int>(a), static_cast<int>(b));
  if (a != cudaErrorNotSupported || b != cudaErrorNotSupported) return 1;
  // The process keeps working after an unsupported call.
  void* d = nullptr;
  if (cudaMalloc(&d, 256) != cudaSuccess || cudaFree(d) != cudaSuccess) return 2;
  std::printf("unsupported_api: OK\n");
  return 0;
}
