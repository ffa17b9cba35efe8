// slow_queue: an app that keeps the GPU busy far ahead of itself, as a
// training loop does: it launches slow kernels without waiting for them,
// so its ring and phosd's stream queue hold work that would take minutes
// on the sim. Tests kill it (or phosd) and check that nothing waits for
// that work: a dead app's queued work is abandoned (session_lifecycle_test).
//
// Usage: slow_queue [LAUNCHES [ITERS]]. Prints "slow_queue: queued N" after
// the first 16 launches (the queue is filling), "slow_queue: done" at the
// end (after a full synchronisation; tests never let it get there).
//
// slow_queue forever: one kernel that never ends (one thread spinning on a
// flag nobody sets, as a GPU kernel waiting for another can), then
// cudaDeviceSynchronize; prints "slow_queue: spinning" before the wait.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

// ~ITERS*3 instructions per thread; 64 blocks, so the sim's interpreter
// (which stops an abandoned kernel between blocks) can stop it early.
__global__ void spin(float* out, int iters) {
  float x = static_cast<float>(threadIdx.x);
  for (int i = 0; i < iters; ++i) x = x * 0.999f + 1.0f;
  out[blockIdx.x * blockDim.x + threadIdx.x] = x;
}

__global__ void spin_on(volatile int* flag) {
  while (*flag == 0) {
  }
}

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "forever") == 0) {
    int* flag = nullptr;
    if (cudaMalloc(&flag, sizeof(int)) != cudaSuccess || cudaMemset(flag, 0, sizeof(int)) != cudaSuccess) {
      std::fprintf(stderr, "slow_queue: cudaMalloc/cudaMemset failed\n");
      return 2;
    }
    spin_on<<<1, 1>>>(flag);
    std::printf("slow_queue: spinning\n");
    std::fflush(stdout);
    const cudaError_t e = cudaDeviceSynchronize();
    std::printf("slow_queue: the spinning kernel ended (%s)\n", cudaGetErrorString(e));
    return 2;
  }
  const int launches = argc > 1 ? std::atoi(argv[1]) : 100000;
  const int iters = argc > 2 ? std::atoi(argv[2]) : 20000;
  float* out = nullptr;
  if (cudaMalloc(&out, 64 * 32 * sizeof(float)) != cudaSuccess) {
    std::fprintf(stderr, "slow_queue: cudaMalloc failed\n");
    return 2;
  }
  for (int i = 0; i < launches; ++i) {
    spin<<<64, 32>>>(out, iters);
    if (i == 15) {
      std::printf("slow_queue: queued %d\n", i + 1);
      std::fflush(stdout);
    }
  }
  const cudaError_t e = cudaDeviceSynchronize();
  std::printf("slow_queue: done (%s)\n", cudaGetErrorString(e));
  return e == cudaSuccess ? 0 : 2;
}
