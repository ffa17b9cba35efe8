// A strong definition of one CUDA function, linked together with the whole
// generated export layer: it must win over the weak generated stub.
#include <cuda_runtime_api.h>

extern "C" __attribute__((visibility("default"))) cudaError_t cudaGetDeviceCount(int* count) {
  *count = 42;
  return cudaSuccess;
}
