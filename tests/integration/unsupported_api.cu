// Calls CUDA runtime functions phos does not offer, each twice: under
// `phos run` they must return cudaErrorNotSupported and phos must log each
// once — managed memory (refused by hand, with its reason) and IPC of
// events (a generated refusal: "X is not supported by phos yet").
#include <cuda_runtime.h>

#include <cstdio>

int main() {
  void* p = nullptr;
  cudaError_t a = cudaMallocManaged(&p, 4096, cudaMemAttachGlobal);
  cudaError_t b = cudaMallocManaged(&p, 4096, cudaMemAttachGlobal);
  std::printf("unsupported_api: %d %d\n", static_cast<int>(a), static_cast<int>(b));
  if (a != cudaErrorNotSupported || b != cudaErrorNotSupported) return 1;
  cudaEvent_t e = nullptr;
  if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming | cudaEventInterprocess) != cudaSuccess) return 3;
  cudaIpcEventHandle_t h;
  cudaError_t c = cudaIpcGetEventHandle(&h, e);
  cudaError_t d = cudaIpcGetEventHandle(&h, e);
  std::printf("unsupported_api: ipc %d %d\n", static_cast<int>(c), static_cast<int>(d));
  if (c != cudaErrorNotSupported || d != cudaErrorNotSupported) return 4;
  cudaGetLastError();
  // The process keeps working after an unsupported call.
  void* dev = nullptr;
  if (cudaMalloc(&dev, 256) != cudaSuccess || cudaFree(dev) != cudaSuccess) return 2;
  std::printf("unsupported_api: OK\n");
  return 0;
}
