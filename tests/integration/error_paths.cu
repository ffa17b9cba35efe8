// Error paths and isolation under phos (run by integration_apps_test).
//
//   error_paths errors      invalid pointers, invalid streams/events, a bad
//                           launch configuration, then a kernel that writes
//                           out of bounds: the fault surfaces at the next
//                           synchronising call as cudaErrorIllegalAddress and
//                           stays sticky. Prints "error_paths: OK".
//   error_paths assert      a kernel with assert(): runs while the asserts
//                           hold; a failing one ends in cudaErrorAssert,
//                           sticky. Prints "error_paths: assert OK".
//   error_paths printf-fifo a 256-byte cudaLimitPrintfFifoSize keeps some of
//                           64 lines, drops the rest
//   error_paths printf      a kernel prints (device printf) what it gets
//                           from functions called through a __device__
//                           table of function pointers: the lines appear
//                           between the host's "host: before" and "host:
//                           after" (printed at cudaDeviceSynchronize, as the
//                           driver prints its printf buffer). Prints
//                           "error_paths: printf OK".
//   error_paths owner N F   allocates N MiB, fills them with a pattern,
//                           prints "owner: ptr 0x... ready", then waits until
//                           the file F exists, checks its data is intact,
//                           prints "owner: intact" and exits 0.
//   error_paths intruder P  tries to read, write and free the device pointer
//                           P (another process's buffer), and to write it
//                           from a kernel: each must fail.
//                           Prints "intruder: refused".
//   error_paths hold N      allocates N MiB, prints "hold: ready", sleeps
//                           (killed by the test).
#include <cuda_runtime.h>
#include <cassert>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define PHOS_PROGRAM_NAME "error_paths"
#include "program_checks.h"

__global__ void write_at(int* p, long long index, int v) { p[index] = v; }
__global__ void fill(unsigned* p, size_t n, unsigned seed) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) p[i] = seed ^ (unsigned)(i * 2654435761u);
}

static int Errors() {
  int* d = nullptr;
  CHECK(cudaMalloc(&d, 1024 * sizeof(int)));
  std::vector<int> host(1024, 7);
  // Pointers phos never handed out.
  void* bogus = reinterpret_cast<void*>(0x1000);
  EXPECT_ERR(cudaMemcpy(host.data(), bogus, 64, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
  EXPECT_ERR(cudaMemcpy(bogus, host.data(), 64, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  // A copy running past the end of a real buffer.
  EXPECT_ERR(cudaMemcpy(host.data(), d + 1000, 100 * sizeof(int), cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
  EXPECT_ERR(cudaMemset(d + 1020, 0, 64), cudaErrorInvalidValue);
  EXPECT_ERR(cudaFree(d + 1), cudaErrorInvalidValue);
  EXPECT_ERR(cudaFree(bogus), cudaErrorInvalidValue);
  CHECK(cudaDeviceSynchronize());  // none of the above is sticky
  (void)cudaGetLastError();
  // Handles that do not exist.
  cudaStream_t bad_stream = reinterpret_cast<cudaStream_t>(0xdead0);
  cudaEvent_t bad_event = reinterpret_cast<cudaEvent_t>(0xbeef0);
  EXPECT_ERR(cudaStreamSynchronize(bad_stream), cudaErrorInvalidResourceHandle);
  EXPECT_ERR(cudaEventSynchronize(bad_event), cudaErrorInvalidResourceHandle);
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  CHECK(cudaStreamDestroy(s));
  EXPECT_ERR(cudaStreamSynchronize(s), cudaErrorInvalidResourceHandle);  // destroyed
  (void)cudaGetLastError();
  // A launch configuration the device cannot run: reported at launch, not sticky.
  write_at<<<1, 4096>>>(d, 0, 1);
  EXPECT_ERR(cudaGetLastError(), cudaErrorInvalidConfiguration);
  CHECK(cudaDeviceSynchronize());
  // A kernel fault: deferred to the next synchronising call, then sticky.
  write_at<<<1, 1>>>(d, 1LL << 36, 1);
  EXPECT_ERR(cudaDeviceSynchronize(), cudaErrorIllegalAddress);
  EXPECT_ERR(cudaMalloc(&d, 16), cudaErrorIllegalAddress);
  EXPECT_ERR(cudaMemcpy(host.data(), d, 16, cudaMemcpyDeviceToHost), cudaErrorIllegalAddress);
  std::printf("error_paths: OK\n");
  return 0;
}

// Device-side assert(): a kernel whose asserts hold runs and computes; one
// whose assert fails ends with cudaErrorAssert, sticky like a fault.
__global__ void doubled_checked(const int* in, int* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    assert(in[i] >= 0);
    out[i] = in[i] * 2;
  }
}

static int Assert() {
  const int n = 1000;
  std::vector<int> host(n);
  for (int i = 0; i < n; ++i) host[i] = (i * 7919) % 1000;
  int *in = nullptr, *out = nullptr;
  CHECK(cudaMalloc(&in, n * sizeof(int)));
  CHECK(cudaMalloc(&out, n * sizeof(int)));
  CHECK(cudaMemcpy(in, host.data(), n * sizeof(int), cudaMemcpyHostToDevice));
  doubled_checked<<<(n + 255) / 256, 256>>>(in, out, n);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::vector<int> back(n);
  CHECK(cudaMemcpy(back.data(), out, n * sizeof(int), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) EXPECT(back[i] == host[i] * 2);
  host[617] = -5;  // one element breaks the kernel's assertion
  CHECK(cudaMemcpy(in, host.data(), n * sizeof(int), cudaMemcpyHostToDevice));
  doubled_checked<<<(n + 255) / 256, 256>>>(in, out, n);
  EXPECT_ERR(cudaDeviceSynchronize(), cudaErrorAssert);
  EXPECT_ERR(cudaMalloc(&in, 16), cudaErrorAssert);  // sticky
  EXPECT(std::strcmp(cudaGetErrorString(cudaErrorAssert), "device-side assert triggered") == 0);
  std::printf("error_paths: assert OK\n");
  return 0;
}

// Device printf, and calls through a table of function pointers that the
// module's initializer fills (a vtable's shape).
__device__ int add_one(int v) { return v + 1; }
__device__ int times_ten(int v) { return v * 10; }
__device__ int (*ops_table[2])(int) = {add_one, times_ten};

__global__ void greet(int base) {
  const int i = threadIdx.x;
  printf("kernel %d: %d %s %.2f\n", i, ops_table[i & 1](base + i), (i & 1) ? "odd" : "even", i * 0.25);
}

// cudaLimitPrintfFifoSize: a FIFO too small for every line keeps some and
// drops the rest (whole lines), as a GPU does.
static int PrintfFifo() {
  CHECK(cudaDeviceSetLimit(cudaLimitPrintfFifoSize, 256));
  size_t got = 0;
  CHECK(cudaDeviceGetLimit(&got, cudaLimitPrintfFifoSize));
  EXPECT(got == 256);
  greet<<<1, 64>>>(0);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::printf("error_paths: printf-fifo OK\n");
  return 0;
}

static int Printf() {
  std::printf("host: before\n");
  greet<<<1, 4>>>(100);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::printf("host: after\n");
  std::printf("error_paths: printf OK\n");
  return 0;
}

static int Owner(size_t mib, const char* go_file) {
  const size_t n = mib * (1u << 20) / sizeof(unsigned);
  unsigned* d = nullptr;
  CHECK(cudaMalloc(&d, n * sizeof(unsigned)));
  fill<<<(unsigned)((n + 255) / 256), 256>>>(d, n, 0x5eed);
  CHECK(cudaDeviceSynchronize());
  std::printf("owner: ptr %p ready\n", static_cast<void*>(d));
  std::fflush(stdout);
  for (int i = 0; i < 120 * 20 && access(go_file, F_OK) != 0; ++i) usleep(50 * 1000);
  std::vector<unsigned> h(n);
  CHECK(cudaMemcpy(h.data(), d, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n; ++i) {
    if (h[i] != (0x5eedu ^ (unsigned)(i * 2654435761u))) {
      std::printf("owner: corrupted at %zu\n", i);
      return 1;
    }
  }
  std::printf("owner: intact\n");
  return 0;
}

static int Intruder(const char* ptr_text) {
  void* p = reinterpret_cast<void*>(std::strtoull(ptr_text, nullptr, 16));
  std::vector<unsigned> h(256, 0xffffffffu);
  EXPECT_ERR(cudaMemcpy(h.data(), p, h.size() * 4, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
  EXPECT_ERR(cudaMemcpy(p, h.data(), h.size() * 4, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  EXPECT_ERR(cudaMemset(p, 0, 4096), cudaErrorInvalidValue);
  EXPECT_ERR(cudaFree(p), cudaErrorInvalidValue);
  // A kernel handed the other process's pointer faults like any wild
  // pointer (contexts do not share memory) and the owner's data stays intact.
  write_at<<<1, 1>>>(static_cast<int*>(p), 0, 0x0bad);
  EXPECT_ERR(cudaDeviceSynchronize(), cudaErrorIllegalAddress);
  std::printf("intruder: refused\n");
  return 0;
}

static int Hold(size_t mib) {
  void* d = nullptr;
  CHECK(cudaMalloc(&d, mib << 20));
  CHECK(cudaMemset(d, 1, mib << 20));
  std::printf("hold: ready\n");
  std::fflush(stdout);
  for (;;) pause();
}

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "errors";
  if (mode == "errors") return Errors();
  if (mode == "assert") return Assert();
  if (mode == "printf") return Printf();
  if (mode == "printf-fifo") return PrintfFifo();
  if (mode == "owner" && argc > 3) return Owner(std::strtoull(argv[2], nullptr, 10), argv[3]);
  if (mode == "intruder" && argc > 2) return Intruder(argv[2]);
  if (mode == "hold" && argc > 2) return Hold(std::strtoull(argv[2], nullptr, 10));
  std::printf("usage: error_paths errors | assert | printf | printf-fifo | owner MIB GOFILE | intruder PTR | hold MIB\n");
  return 2;
}
