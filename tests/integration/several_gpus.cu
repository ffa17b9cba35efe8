// One process on two GPUs (docs/interposer.md "Several GPUs in one
// process"), run by integration_apps_test OneProcessUsesTwoGpus on
// `phos daemon --sim-gpus 2`:
//
//   several_gpus [HOLDFILE]
//
// buffers, kernels, streams and events on each GPU, a peer copy each way, a
// stream of GPU 0 waiting for an event of GPU 1, a module variable with a
// value per GPU, a thread that never chose a GPU working on GPU 0, a buffer
// freed from the other GPU, a per-thread default stream on each GPU. With
// HOLDFILE it prints "several: holding"
// once everything is set up, waits until HOLDFILE exists (the test
// checkpoints it meanwhile, and restores it from the image) and checks
// that nothing was lost and that both GPUs work on.
// Prints "several: OK" at the end. A program of its own: its module
// variable would change the module layout of the NCCL test program, whose
// job images a fresh phosd restores.
#define PHOS_PROGRAM_NAME "several_gpus"
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "program_checks.h"

namespace {

__device__ int g_per_gpu;  // one instance per GPU (a module is loaded on each)

__global__ void Iota(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = static_cast<float>(i);
}

__global__ void ScaleBy(float* x, int n, float by) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= by;
}

__global__ void ReadPerGpu(int* out) { *out = g_per_gpu; }

int SeveralGpus(const char* hold_file) {
  int count = 0;
  CHECK(cudaGetDeviceCount(&count));
  if (count < 2) PHOS_CHECK_FAIL(2, "several: needs 2 GPUs, sees %d", count);
  constexpr int n = 1 << 16;
  const size_t bytes = n * sizeof(float);
  float *a = nullptr, *b = nullptr;
  CHECK(cudaSetDevice(0));
  CHECK(cudaMalloc(&a, bytes));
  Iota<<<n / 256, 256>>>(a, n);
  CHECK(cudaGetLastError());
  const int zero_value = 5, one_value = 7;
  CHECK(cudaMemcpyToSymbol(g_per_gpu, &zero_value, sizeof zero_value));
  CHECK(cudaSetDevice(1));
  int current = -1;
  CHECK(cudaGetDevice(&current));
  EXPECT(current == 1);
  CHECK(cudaMalloc(&b, bytes));
  CHECK(cudaMemcpyToSymbol(g_per_gpu, &one_value, sizeof one_value));
  CHECK(cudaMemcpyPeer(b, 1, a, 0, bytes));
  cudaStream_t s1;
  cudaEvent_t done1;
  CHECK(cudaStreamCreate(&s1));
  CHECK(cudaEventCreateWithFlags(&done1, cudaEventDisableTiming));
  ScaleBy<<<n / 256, 256, 0, s1>>>(b, n, 2.0f);
  CHECK(cudaGetLastError());
  CHECK(cudaEventRecord(done1, s1));
  // GPU 0's stream copies b back after GPU 1's kernel, ordered by the event.
  CHECK(cudaSetDevice(0));
  cudaStream_t s0;
  CHECK(cudaStreamCreate(&s0));
  CHECK(cudaStreamWaitEvent(s0, done1, 0));
  CHECK(cudaMemcpyPeerAsync(a, 0, b, 1, bytes, s0));
  CHECK(cudaStreamSynchronize(s0));
  // A stream belongs to the GPU it was made on; the per-thread default
  // stream is one per thread and GPU.
  int on = -1;
  CHECK(cudaStreamGetDevice(s0, &on));
  EXPECT(on == 0);
  CHECK(cudaStreamGetDevice(s1, &on));
  EXPECT(on == 1);
  CHECK(cudaStreamGetDevice(cudaStreamPerThread, &on));
  EXPECT(on == 0);
  ScaleBy<<<n / 256, 256, 0, cudaStreamPerThread>>>(a, n, 1.0f);
  CHECK(cudaGetLastError());
  CHECK(cudaStreamSynchronize(cudaStreamPerThread));
  CHECK(cudaSetDevice(1));
  CHECK(cudaStreamGetDevice(cudaStreamPerThread, &on));
  EXPECT(on == 1);
  ScaleBy<<<n / 256, 256, 0, cudaStreamPerThread>>>(b, n, 1.0f);
  CHECK(cudaGetLastError());
  CHECK(cudaStreamSynchronize(cudaStreamPerThread));
  CHECK(cudaSetDevice(0));
  std::vector<float> host(n);
  CHECK(cudaMemcpy(host.data(), a, bytes, cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) EXPECT(host[i] == 2.0f * static_cast<float>(i));
  // The module variable has a value per GPU.
  int* out = nullptr;
  CHECK(cudaMalloc(&out, sizeof(int)));
  ReadPerGpu<<<1, 1>>>(out);
  int got = 0;
  CHECK(cudaMemcpy(&got, out, sizeof got, cudaMemcpyDeviceToHost));
  EXPECT(got == zero_value);
  CHECK(cudaSetDevice(1));
  int* out1 = nullptr;
  CHECK(cudaMalloc(&out1, sizeof(int)));
  ReadPerGpu<<<1, 1, 0, s1>>>(out1);
  CHECK(cudaMemcpyAsync(&got, out1, sizeof got, cudaMemcpyDeviceToHost, s1));
  CHECK(cudaStreamSynchronize(s1));
  EXPECT(got == one_value);
  // A thread that never calls cudaSetDevice works on GPU 0.
  int worker_rc = -1;
  std::thread worker([&] {
    worker_rc = [&]() -> int {
      int dev = -1;
      CHECK(cudaGetDevice(&dev));
      EXPECT(dev == 0);
      ScaleBy<<<n / 256, 256>>>(a, n, 0.5f);
      CHECK(cudaGetLastError());
      CHECK(cudaDeviceSynchronize());
      return 0;
    }();
  });
  worker.join();
  EXPECT(worker_rc == 0);
  CHECK(cudaMemcpy(host.data(), a, bytes, cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) EXPECT(host[i] == static_cast<float>(i));
  if (hold_file != nullptr) {
    std::printf("several: holding\n");
    std::fflush(stdout);
    while (access(hold_file, F_OK) != 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    // Nothing was lost while it was checkpointed (or restored from the
    // image): a holds i on GPU 0, b 2i on GPU 1, the variable its value
    // on each GPU; streams, events and kernels of both GPUs work on.
    CHECK(cudaSetDevice(1));
    CHECK(cudaGetDevice(&current));
    EXPECT(current == 1);
    CHECK(cudaMemcpy(host.data(), b, bytes, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; ++i) EXPECT(host[i] == 2.0f * static_cast<float>(i));
    ReadPerGpu<<<1, 1, 0, s1>>>(out1);
    CHECK(cudaMemcpyAsync(&got, out1, sizeof got, cudaMemcpyDeviceToHost, s1));
    CHECK(cudaStreamSynchronize(s1));
    EXPECT(got == one_value);
    ScaleBy<<<n / 256, 256, 0, s1>>>(b, n, 3.0f);
    CHECK(cudaGetLastError());
    CHECK(cudaEventRecord(done1, s1));
    CHECK(cudaSetDevice(0));
    CHECK(cudaMemcpy(host.data(), a, bytes, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; ++i) EXPECT(host[i] == static_cast<float>(i));
    ReadPerGpu<<<1, 1>>>(out);
    CHECK(cudaMemcpy(&got, out, sizeof got, cudaMemcpyDeviceToHost));
    EXPECT(got == zero_value);
    CHECK(cudaStreamWaitEvent(s0, done1, 0));
    CHECK(cudaMemcpyPeerAsync(a, 0, b, 1, bytes, s0));
    CHECK(cudaStreamSynchronize(s0));
    CHECK(cudaMemcpy(host.data(), a, bytes, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; ++i) EXPECT(host[i] == 6.0f * static_cast<float>(i));
    std::printf("several: state intact after the hold\n");
  }
  // Freed from the other GPU, as CUDA allows.
  CHECK(cudaSetDevice(1));
  CHECK(cudaFree(a));
  CHECK(cudaFree(out));
  CHECK(cudaSetDevice(0));
  CHECK(cudaFree(b));
  CHECK(cudaFree(out1));
  CHECK(cudaEventDestroy(done1));
  CHECK(cudaStreamDestroy(s1));
  CHECK(cudaStreamDestroy(s0));
  std::printf("several: OK\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return SeveralGpus(argc >= 2 ? argv[1] : nullptr); }
