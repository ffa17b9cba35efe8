// A program that uses only the CUDA driver API (as NVRTC-based programs do)
// and never loads the runtime. The build gives it a .nv_fatbin section, as
// nvcc's link stub does when a toolchain drops the unused libcudart
// (--as-needed): `phos run` must not take it for a statically linked runtime.
#include <cuda.h>

#include <cstdio>

int main() {
  if (cuInit(0) != CUDA_SUCCESS) {
    std::printf("driver_only: cuInit failed\n");
    return 2;
  }
  int n = 0;
  if (cuDeviceGetCount(&n) != CUDA_SUCCESS || n < 1) {
    std::printf("driver_only: no device\n");
    return 2;
  }
  CUdevice dev = 0;
  char name[128] = {};
  if (cuDeviceGet(&dev, 0) != CUDA_SUCCESS || cuDeviceGetName(name, sizeof name, dev) != CUDA_SUCCESS) {
    std::printf("driver_only: cannot name device 0\n");
    return 2;
  }
  std::printf("driver_only: OK (%s)\n", name);
  return 0;
}
