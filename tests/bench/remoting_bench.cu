// Remoting benchmark: what an app sees of the data plane when it runs under
// `phos run` (tests/bench/remoting_bench.sh starts phosd and runs this).
// Plain timing loops, not Google Benchmark: the program is a CUDA app
// interposed by libphos.so, and each number is compared with a baseline
// measured in the same process, in the same run:
//
//   launch_issue      launches of an empty kernel posted per second (the
//                     app-side cost: no round trip)
//   launch_e2e        the same including phosd executing them (sim: the PTX
//                     interpreter) until cudaDeviceSynchronize returns
//   sync_call         synchronous round trips per second (cudaStreamQuery)
//   h2d/d2h pageable  cudaMemcpy from/to malloc'd memory (staged in chunks)
//   h2d/d2h pinned    cudaMemcpyAsync from/to cudaMallocHost memory + sync
//   host memcpy       memcpy between two host buffers of the same size: the
//                     baseline the copies are quoted against (on the sim the
//                     device is host memory, so this is the physical limit)
//
// Output: one line per measurement, "name value unit", then ratios.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define CHECK(x)                                                                               \
  do {                                                                                         \
    cudaError_t e = (x);                                                                       \
    if (e != cudaSuccess) {                                                                    \
      std::fprintf(stderr, "remoting_bench: %s failed: %s\n", #x, cudaGetErrorString(e));    \
      std::exit(2);                                                                            \
    }                                                                                          \
  } while (0)

__global__ void empty_kernel() {}

using Clock = std::chrono::steady_clock;
static double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Best of `reps` runs of fn() (seconds): the machine is shared, the minimum
// is the least disturbed.
template <typename F>
static double Best(int reps, F fn) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    fn();
    const double s = Seconds(t0, Clock::now());
    if (s < best) best = s;
  }
  return best;
}

int main(int argc, char** argv) {
  const int launches = argc > 1 ? std::atoi(argv[1]) : 20000;
  const size_t mib = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 256;
  const int reps = 3;
  const size_t bytes = mib << 20;

  CHECK(cudaFree(nullptr));
  empty_kernel<<<1, 1>>>();  // load the module before timing
  CHECK(cudaDeviceSynchronize());

  // Launch issue rate and end-to-end rate.
  double issue = 0, e2e = 0;
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    for (int i = 0; i < launches; ++i) empty_kernel<<<1, 1>>>();
    auto t1 = Clock::now();
    CHECK(cudaDeviceSynchronize());
    auto t2 = Clock::now();
    const double is = launches / Seconds(t0, t1), es = launches / Seconds(t0, t2);
    if (is > issue) issue = is;
    if (es > e2e) e2e = es;
  }
  CHECK(cudaGetLastError());
  const double sync_s = Best(reps, [&] {
    for (int i = 0; i < launches; ++i) CHECK(cudaStreamQuery(0));
  });
  const double sync_rate = launches / sync_s;

  // Copies.
  std::vector<char> src(bytes), dst(bytes);
  for (size_t i = 0; i < bytes; i += 4096) src[i] = static_cast<char>(i >> 12);
  std::memset(dst.data(), 0, bytes);  // fault the pages in before timing
  const double host_s = Best(reps, [&] { std::memcpy(dst.data(), src.data(), bytes); });
  void* dev = nullptr;
  CHECK(cudaMalloc(&dev, bytes));
  const double h2d_s = Best(reps, [&] { CHECK(cudaMemcpy(dev, src.data(), bytes, cudaMemcpyHostToDevice)); });
  const double d2h_s = Best(reps, [&] { CHECK(cudaMemcpy(dst.data(), dev, bytes, cudaMemcpyDeviceToHost)); });
  if (std::memcmp(src.data(), dst.data(), bytes) != 0) {
    std::fprintf(stderr, "remoting_bench: pageable round trip mismatch\n");
    return 1;
  }
  void* pin_src = nullptr;
  void* pin_dst = nullptr;
  CHECK(cudaMallocHost(&pin_src, bytes));
  CHECK(cudaMallocHost(&pin_dst, bytes));
  std::memcpy(pin_src, src.data(), bytes);
  std::memset(pin_dst, 0, bytes);
  const double h2d_pin_s = Best(reps, [&] {
    CHECK(cudaMemcpyAsync(dev, pin_src, bytes, cudaMemcpyHostToDevice, 0));
    CHECK(cudaStreamSynchronize(0));
  });
  const double d2h_pin_s = Best(reps, [&] {
    CHECK(cudaMemcpyAsync(pin_dst, dev, bytes, cudaMemcpyDeviceToHost, 0));
    CHECK(cudaStreamSynchronize(0));
  });
  if (std::memcmp(pin_src, pin_dst, bytes) != 0) {
    std::fprintf(stderr, "remoting_bench: pinned round trip mismatch\n");
    return 1;
  }
  CHECK(cudaFreeHost(pin_src));
  CHECK(cudaFreeHost(pin_dst));
  CHECK(cudaFree(dev));

  const double gb = bytes / 1e9;
  std::printf("launch_issue %.0f launches/s\n", issue);
  std::printf("launch_e2e %.0f launches/s\n", e2e);
  std::printf("sync_call %.0f calls/s\n", sync_rate);
  std::printf("host_memcpy %.2f GB/s\n", gb / host_s);
  std::printf("h2d_pageable %.2f GB/s\n", gb / h2d_s);
  std::printf("d2h_pageable %.2f GB/s\n", gb / d2h_s);
  std::printf("h2d_pinned %.2f GB/s\n", gb / h2d_pin_s);
  std::printf("d2h_pinned %.2f GB/s\n", gb / d2h_pin_s);
  std::printf("ratio launch_issue/sync_call %.1fx\n", issue / sync_rate);
  std::printf("ratio h2d_pageable/host_memcpy %.2f\n", host_s / h2d_s);
  std::printf("ratio d2h_pageable/host_memcpy %.2f\n", host_s / d2h_s);
  std::printf("ratio h2d_pinned/host_memcpy %.2f\n", host_s / h2d_pin_s);
  std::printf("ratio d2h_pinned/host_memcpy %.2f\n", host_s / d2h_pin_s);
  return 0;
}
