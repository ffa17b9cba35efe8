// Per-thread default streams, function attributes and occupancy, dynamic
// shared memory above 48 KiB, cudaDeviceReset, fork() and the small
// runtime calls (docs/interposer.md "Streams, functions, reset and fork").
//
// Built twice: plain (stream 0 is the legacy stream) and with
// `--default-stream per-thread` (runtime_more_ptds: stream 0 is the
// per-thread stream; CUDA_API_PER_THREAD_DEFAULT_STREAM is defined).
//   runtime_more              everything but the fork-before case
//   runtime_more fork-before  fork before any CUDA call; both processes use CUDA
#include <cuda.h>
#include <cuda_runtime.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#define PHOS_PROGRAM_NAME "runtime_more"
#include "program_checks.h"

#ifdef CUDA_API_PER_THREAD_DEFAULT_STREAM
constexpr bool kPerThreadBuild = true;
#else
constexpr bool kPerThreadBuild = false;
#endif

__global__ void fill(int* p, int n, int v) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = v + i;
}

__global__ void add_one(int* p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] += 1;
}

// Spins until *flag becomes nonzero, then writes `v` to *out.
__global__ void spin_then_write(volatile int* flag, int* out, int v) {
  while (*flag == 0) {
  }
  *out = v;
}

// out[0] = in[0] + 1 (orders after whatever wrote in[0]).
__global__ void plus_one(const int* in, int* out) { *out = *in + 1; }

// The only kernel with static shared memory in this module: 1 KiB.
__global__ void tiled(int* p) {
  __shared__ int tile[256];
  tile[threadIdx.x] = threadIdx.x;
  __syncthreads();
  p[threadIdx.x] = tile[255 - threadIdx.x];
}

__global__ void dyn_copy(unsigned char* out, int n) {
  extern __shared__ unsigned char buf[];
  for (int i = threadIdx.x; i < n; i += blockDim.x) buf[i] = static_cast<unsigned char>(i * 7);
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = buf[i];
}

__global__ void bad_write(int* p) { p[0] = 1; }

namespace {

// Sets *flag on the device through a non-blocking stream (which waits for
// neither the legacy nor any per-thread stream).
int Release(int* flag, cudaStream_t nonblocking) {
  const int one = 1;
  CHECK(cudaMemcpyAsync(flag, &one, sizeof one, cudaMemcpyHostToDevice, nonblocking));
  CHECK(cudaStreamSynchronize(nonblocking));
  return 0;
}

// Polls `s` until done or `seconds` passed: 0 done, 1 still busy.
int WaitDone(cudaStream_t s, int seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (std::chrono::steady_clock::now() < end) {
    cudaError_t e = cudaStreamQuery(s);
    if (e == cudaSuccess) return 0;
    if (e != cudaErrorNotReady) return 2;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return 1;
}

// Each of 4 threads runs fill + add_one + a D2H copy on its per-thread
// stream and checks the result.
int PerThreadChains() {
  constexpr int kThreads = 4, n = 4096;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, &failures] {
      int* d = nullptr;
      std::vector<int> h(n, -1);
      if (cudaMalloc(&d, n * sizeof(int)) != cudaSuccess) return (void)++failures;
      fill<<<(n + 255) / 256, 256, 0, cudaStreamPerThread>>>(d, n, t * 100000);
      add_one<<<(n + 255) / 256, 256, 0, cudaStreamPerThread>>>(d, n);
      if (cudaMemcpyAsync(h.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost, cudaStreamPerThread) != cudaSuccess ||
          cudaStreamSynchronize(cudaStreamPerThread) != cudaSuccess) {
        return (void)++failures;
      }
      for (int i = 0; i < n; ++i) {
        if (h[i] != t * 100000 + i + 1) {
          std::printf("runtime_more: thread %d element %d is %d\n", t, i, h[i]);
          return (void)++failures;
        }
      }
      if (cudaFree(d) != cudaSuccess) ++failures;
    });
  }
  for (auto& th : threads) th.join();
  EXPECT(failures.load() == 0);
  return 0;
}

// A kernel spinning on one thread's per-thread stream does not hold up
// another thread's per-thread stream: the streams are distinct.
int PerThreadStreamsAreDistinct(int* flag, int* out, cudaStream_t nonblocking) {
  CHECK(cudaMemset(flag, 0, sizeof(int)));
  std::atomic<int> stage{0};
  int spinner_rc = 0;
  std::thread spinner([&] {
    spin_then_write<<<1, 1, 0, cudaStreamPerThread>>>(flag, out, 5);
    spinner_rc = cudaGetLastError() == cudaSuccess ? 0 : 1;
    stage = 1;
    while (stage.load() != 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (cudaStreamSynchronize(cudaStreamPerThread) != cudaSuccess) spinner_rc = 2;
  });
  while (stage.load() != 1) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  int rc = 0;
  int* d = nullptr;
  std::thread other([&] {
    if (cudaMalloc(&d, 1024 * sizeof(int)) != cudaSuccess) return (void)(rc = 2);
    fill<<<4, 256, 0, cudaStreamPerThread>>>(d, 1024, 0);
    rc = WaitDone(cudaStreamPerThread, 20);  // 1: it waited behind the spinner
  });
  other.join();
  if (Release(flag, nonblocking) != 0) rc = 3;
  stage = 2;
  spinner.join();
  // Only now: cudaFree synchronises the device, which waited for the spinner.
  if (d != nullptr) CHECK(cudaFree(d));
  EXPECT(spinner_rc == 0);
  EXPECT(rc == 0);
  return 0;
}

// The per-thread stream is blocking: legacy-stream work waits for it, and
// it waits for legacy-stream work.
int LegacyAndPerThreadOrdering(int* flag, int* out, cudaStream_t nonblocking) {
  int* out2 = out + 1;
  // per-thread first, legacy after
  CHECK(cudaMemset(flag, 0, sizeof(int)));
  CHECK(cudaMemset(out, 0, 2 * sizeof(int)));
  spin_then_write<<<1, 1, 0, cudaStreamPerThread>>>(flag, out, 41);
  plus_one<<<1, 1, 0, cudaStreamLegacy>>>(out, out2);
  EXPECT(cudaStreamQuery(cudaStreamLegacy) == cudaErrorNotReady);
  if (Release(flag, nonblocking) != 0) return 2;
  CHECK(cudaStreamSynchronize(cudaStreamLegacy));
  int h[2] = {0, 0};
  CHECK(cudaMemcpy(h, out, sizeof h, cudaMemcpyDeviceToHost));
  EXPECT(h[0] == 41 && h[1] == 42);
  // legacy first, per-thread after
  CHECK(cudaMemset(flag, 0, sizeof(int)));
  CHECK(cudaMemset(out, 0, 2 * sizeof(int)));
  spin_then_write<<<1, 1, 0, cudaStreamLegacy>>>(flag, out, 7);
  plus_one<<<1, 1, 0, cudaStreamPerThread>>>(out, out2);
  EXPECT(cudaStreamQuery(cudaStreamPerThread) == cudaErrorNotReady);
  if (Release(flag, nonblocking) != 0) return 2;
  CHECK(cudaStreamSynchronize(cudaStreamPerThread));
  CHECK(cudaMemcpy(h, out, sizeof h, cudaMemcpyDeviceToHost));
  EXPECT(h[0] == 7 && h[1] == 8);
  return 0;
}

// Stream 0 (a plain <<<>>> launch) is the legacy stream in the plain build
// and this thread's per-thread stream in the per-thread build.
int StreamZeroMeaning(int* flag, int* out, cudaStream_t nonblocking) {
  CHECK(cudaMemset(flag, 0, sizeof(int)));
  spin_then_write<<<1, 1>>>(flag, out, 3);
  const cudaError_t pts = cudaStreamQuery(cudaStreamPerThread);
  const cudaError_t legacy = cudaStreamQuery(cudaStreamLegacy);
  if (Release(flag, nonblocking) != 0) return 2;
  CHECK(cudaDeviceSynchronize());
  if (kPerThreadBuild) {
    EXPECT(pts == cudaErrorNotReady);
  } else {
    EXPECT(pts == cudaSuccess);  // a blocking stream does not wait for later legacy work
    EXPECT(legacy == cudaErrorNotReady);
  }
  return 0;
}

int FunctionAttributesAndOccupancy() {
  cudaFuncAttributes a;
  CHECK(cudaFuncGetAttributes(&a, tiled));
  EXPECT(a.sharedSizeBytes == 1024);
  EXPECT(a.numRegs > 0 && a.numRegs <= 255);
  EXPECT(a.maxThreadsPerBlock > 0 && a.maxThreadsPerBlock <= 1024 && a.maxThreadsPerBlock % 32 == 0);
  EXPECT(a.ptxVersion == 90 && a.binaryVersion == 90);
  EXPECT(a.maxDynamicSharedSizeBytes == 48 * 1024 - 1024);
  cudaFuncAttributes f;
  CHECK(cudaFuncGetAttributes(&f, fill));
  EXPECT(f.numRegs > 0 && f.maxThreadsPerBlock == 1024);
  EXPECT(cudaFuncGetAttributes(&f, reinterpret_cast<const void*>(&PerThreadChains)) ==
         cudaErrorInvalidDeviceFunction);
  EXPECT(cudaGetLastError() == cudaErrorInvalidDeviceFunction);

  // Occupancy of `fill` at 256 threads, worked out from its attributes and
  // the device's limits (registers per warp in units of 256, warps in
  // groups of 4, 1 KiB reserved shared memory per block on cc >= 8.0).
  cudaDeviceProp p;
  CHECK(cudaGetDeviceProperties(&p, 0));
  int blocks = -1;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, fill, 256, 0));
  const int warps = 256 / 32;
  const int by_warps = p.maxThreadsPerMultiProcessor / 32 / warps;
  const int regs_per_warp = (f.numRegs * 32 + 255) / 256 * 256;
  const int by_regs = p.regsPerMultiprocessor / regs_per_warp / 4 * 4 / warps;
  const size_t smem = (f.sharedSizeBytes + 1024 + 127) / 128 * 128;
  const int by_smem = static_cast<int>(p.sharedMemPerMultiprocessor / smem);
  int expected = by_warps < by_regs ? by_warps : by_regs;
  if (by_smem < expected) expected = by_smem;
  if (32 < expected) expected = 32;
  EXPECT(blocks == expected);
  // More dynamic shared memory means fewer blocks; beyond the opt-in none.
  int fewer = -1, none = -1;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fewer, fill, 256, 100 * 1024));
  EXPECT(fewer == 2);
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&none, fill, 256, p.sharedMemPerBlockOptin + 1));
  EXPECT(none == 0);

  // The driver's view through a cudaFunction_t (cudaGetFuncBySymbol).
  cudaFunction_t fn = nullptr;
  CHECK(cudaGetFuncBySymbol(&fn, reinterpret_cast<const void*>(fill)));
  void* init_p = nullptr;
  void* attr_p = nullptr;
  void* occ_p = nullptr;
  cudaDriverEntryPointQueryResult q;
  CHECK(cudaGetDriverEntryPointByVersion("cuInit", &init_p, CUDART_VERSION, cudaEnableDefault, &q));
  CHECK(cudaGetDriverEntryPointByVersion("cuFuncGetAttribute", &attr_p, CUDART_VERSION, cudaEnableDefault, &q));
  CHECK(cudaGetDriverEntryPointByVersion("cuOccupancyMaxActiveBlocksPerMultiprocessor", &occ_p, CUDART_VERSION, cudaEnableDefault, &q));
  EXPECT(init_p && attr_p && occ_p);
  EXPECT(reinterpret_cast<CUresult (*)(unsigned)>(init_p)(0) == CUDA_SUCCESS);
  int regs = -1, cu_blocks = -1;
  EXPECT(reinterpret_cast<CUresult (*)(int*, CUfunction_attribute, CUfunction)>(attr_p)(
             &regs, CU_FUNC_ATTRIBUTE_NUM_REGS, reinterpret_cast<CUfunction>(fn)) == CUDA_SUCCESS);
  EXPECT(regs == f.numRegs);
  EXPECT(reinterpret_cast<CUresult (*)(int*, CUfunction, int, size_t)>(occ_p)(
             &cu_blocks, reinterpret_cast<CUfunction>(fn), 256, 0) == CUDA_SUCCESS);
  EXPECT(cu_blocks == blocks);

  int min_grid = 0, block = 0;
  CHECK(cudaOccupancyMaxPotentialBlockSize(&min_grid, &block, fill, 0, 0));
  EXPECT(block > 0 && block <= 1024 && block % 32 == 0);
  int at_block = 0;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&at_block, fill, block, 0));
  EXPECT(min_grid == at_block * p.multiProcessorCount);
  EXPECT(block * at_block >= 256 * blocks);  // the best block size is at least as good as 256
  return 0;
}

int DynamicSharedAbove48KiB() {
  const int n = 64 * 1024;
  unsigned char* d = nullptr;
  CHECK(cudaMalloc(&d, n));
  CHECK(cudaMemset(d, 0, n));
  dyn_copy<<<1, 256, n>>>(d, n);
  EXPECT(cudaGetLastError() == cudaErrorInvalidValue);  // refused by the launch itself
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaFuncSetAttribute(dyn_copy, cudaFuncAttributeMaxDynamicSharedMemorySize, n));
  cudaFuncAttributes a;
  CHECK(cudaFuncGetAttributes(&a, dyn_copy));
  EXPECT(a.maxDynamicSharedSizeBytes == n);
  EXPECT(cudaFuncSetAttribute(dyn_copy, cudaFuncAttributeMaxDynamicSharedMemorySize, 1 << 30) ==
         cudaErrorInvalidValue);
  EXPECT(cudaGetLastError() == cudaErrorInvalidValue);
  CHECK(cudaFuncSetAttribute(dyn_copy, cudaFuncAttributePreferredSharedMemoryCarveout, 100));
  CHECK(cudaFuncSetCacheConfig(dyn_copy, cudaFuncCachePreferShared));
  dyn_copy<<<1, 256, n>>>(d, n);
  CHECK(cudaGetLastError());
  std::vector<unsigned char> h(n);
  CHECK(cudaMemcpy(h.data(), d, n, cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) EXPECT(h[i] == static_cast<unsigned char>(i * 7));
  CHECK(cudaFree(d));
  return 0;
}

int SmallCalls() {
  int driver = 0, runtime = 0;
  CHECK(cudaDriverGetVersion(&driver));
  CHECK(cudaRuntimeGetVersion(&runtime));
  EXPECT(runtime == CUDART_VERSION);
  EXPECT(driver >= runtime);
  CHECK(cudaFree(nullptr));
  CHECK(cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync));
  unsigned flags = 0;
  CHECK(cudaGetDeviceFlags(&flags));
  EXPECT(flags == cudaDeviceScheduleBlockingSync);
  EXPECT(cudaSetDeviceFlags(0x1000) == cudaErrorInvalidValue);
  int least = 1, greatest = 1;
  CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  EXPECT(least == 0 && greatest < 0);
  cudaStream_t s1, s2;
  CHECK(cudaStreamCreateWithPriority(&s1, cudaStreamNonBlocking, greatest));
  CHECK(cudaStreamCreateWithPriority(&s2, cudaStreamDefault, greatest - 10));
  int prio = 1;
  CHECK(cudaStreamGetPriority(s1, &prio));
  EXPECT(prio == greatest);
  CHECK(cudaStreamGetPriority(s2, &prio));
  EXPECT(prio == greatest);  // clamped into the range
  CHECK(cudaStreamGetFlags(s1, &flags));
  EXPECT(flags == cudaStreamNonBlocking);
  CHECK(cudaStreamGetFlags(s2, &flags));
  EXPECT(flags == cudaStreamDefault);
  CHECK(cudaStreamGetFlags(cudaStreamPerThread, &flags));
  EXPECT(flags == cudaStreamDefault);
  unsigned long long id1 = 0, id2 = 0, id_pt = 0;
  int sdev = -1;
  CHECK(cudaStreamGetId(s1, &id1));
  CHECK(cudaStreamGetId(s2, &id2));
  CHECK(cudaStreamGetId(cudaStreamPerThread, &id_pt));
  EXPECT(id1 != id2 && id1 != id_pt && id2 != id_pt);
  CHECK(cudaStreamGetDevice(s1, &sdev));
  EXPECT(sdev == 0);
  cudaEvent_t ev;
  CHECK(cudaEventCreate(&ev));
  CHECK(cudaEventRecordWithFlags(ev, s1, cudaEventRecordDefault));
  CHECK(cudaEventSynchronize(ev));
  CHECK(cudaEventDestroy(ev));
  EXPECT(cudaStreamDestroy(cudaStreamPerThread) == cudaErrorInvalidResourceHandle);
  cudaGetLastError();
  CHECK(cudaStreamDestroy(s1));
  CHECK(cudaStreamDestroy(s2));
  EXPECT(cudaStreamGetFlags(s1, &flags) == cudaErrorInvalidResourceHandle);
  cudaGetLastError();
  size_t v = 0;
  CHECK(cudaDeviceGetLimit(&v, cudaLimitStackSize));
  EXPECT(v == 1024);
  CHECK(cudaDeviceSetLimit(cudaLimitStackSize, 4096));
  CHECK(cudaDeviceGetLimit(&v, cudaLimitStackSize));
  EXPECT(v == 4096);
  CHECK(cudaDeviceGetLimit(&v, cudaLimitMallocHeapSize));
  EXPECT(v == 8u << 20);
  CHECK(cudaDeviceGetLimit(&v, cudaLimitPrintfFifoSize));
  EXPECT(v == 1u << 20);
  EXPECT(cudaDeviceSetLimit(cudaLimitDevRuntimeSyncDepth, 4) == cudaErrorUnsupportedLimit);
  cudaGetLastError();
  int can = 1;
  CHECK(cudaDeviceCanAccessPeer(&can, 0, 0));
  EXPECT(can == 0);
  cudaDeviceProp want;
  std::memset(&want, 0, sizeof want);
  int chosen = -1;
  CHECK(cudaChooseDevice(&chosen, &want));
  EXPECT(chosen == 0);
  return 0;
}

int DeviceReset() {
  const size_t big = 64u << 20;
  size_t free0 = 0, free1 = 0, free2 = 0, total = 0;
  CHECK(cudaMemGetInfo(&free0, &total));
  int* old = nullptr;
  CHECK(cudaMalloc(&old, big));
  CHECK(cudaMemGetInfo(&free1, &total));
  EXPECT(free1 + big <= free0 + (2u << 20));
  // A kernel fault is sticky until the reset.
  bad_write<<<1, 1>>>(reinterpret_cast<int*>(0x10));
  EXPECT(cudaDeviceSynchronize() == cudaErrorIllegalAddress);
  void* tmp = nullptr;
  EXPECT(cudaMalloc(&tmp, 16) == cudaErrorIllegalAddress);
  CHECK(cudaDeviceReset());
  CHECK(cudaGetLastError());
  CHECK(cudaMemGetInfo(&free2, &total));
  EXPECT(free2 >= free1 + big);
  size_t v = 0;
  CHECK(cudaDeviceGetLimit(&v, cudaLimitStackSize));
  EXPECT(v == 1024);  // back to its default
  // The old pointer is gone.
  EXPECT(cudaMemset(old, 0, 16) != cudaSuccess);
  cudaGetLastError();
  // Kernels reload lazily and run again; per-thread streams come back.
  const int n = 1000;
  int* d = nullptr;
  CHECK(cudaMalloc(&d, n * sizeof(int)));
  fill<<<4, 256, 0, cudaStreamPerThread>>>(d, n, 9);
  add_one<<<4, 256>>>(d, n);
  std::vector<int> h(n);
  CHECK(cudaMemcpy(h.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) EXPECT(h[i] == 9 + i + 1);
  CHECK(cudaFree(d));
  return 0;
}

// A child forked after CUDA was initialised cannot use it; the parent can.
int ForkAfterInit() {
  std::fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) return 3;
  if (pid == 0) {
    void* p = nullptr;
    int rc = 0;
    if (cudaMalloc(&p, 16) != cudaErrorInitializationError) rc = 10;
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaErrorInitializationError) rc = 11;
    fill<<<1, 1>>>(static_cast<int*>(p), 1, 0);
    if (cudaGetLastError() != cudaErrorInitializationError) rc = 12;
    if (cudaDeviceSynchronize() != cudaErrorInitializationError) rc = 13;
    if (cudaFree(nullptr) != cudaErrorInitializationError) rc = 14;  // the init idiom reports it too
    std::printf("runtime_more: child %d done rc=%d\n", static_cast<int>(getpid()), rc);
    std::fflush(stdout);
    std::exit(rc);
  }
  int status = 0;
  EXPECT(waitpid(pid, &status, 0) == pid);
  EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  // The parent's connection is intact.
  const int n = 512;
  int* d = nullptr;
  CHECK(cudaMalloc(&d, n * sizeof(int)));
  fill<<<2, 256>>>(d, n, 1);
  std::vector<int> h(n);
  CHECK(cudaMemcpy(h.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) EXPECT(h[i] == 1 + i);
  CHECK(cudaFree(d));
  return 0;
}

int UseCuda(int base) {
  const int n = 2048;
  int* d = nullptr;
  CHECK(cudaMalloc(&d, n * sizeof(int)));
  fill<<<8, 256>>>(d, n, base);
  std::vector<int> h(n);
  CHECK(cudaMemcpy(h.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) EXPECT(h[i] == base + i);
  CHECK(cudaFree(d));
  return 0;
}

// Stream-ordered allocation (docs/interposer.md "Stream-ordered
// allocation"): cudaMallocAsync / cudaFreeAsync on a stream with work that
// uses the buffers around the free, the default pool's accounting, an
// explicit pool with a size limit, the device's current pool. Random data
// against a CPU reference.
int StreamOrderedAllocation() {
  int supported = 0;
  CHECK(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, 0));
  EXPECT(supported == 1);
  cudaMemPool_t def = nullptr, cur = nullptr;
  CHECK(cudaDeviceGetDefaultMemPool(&def, 0));
  CHECK(cudaDeviceGetMemPool(&cur, 0));
  EXPECT(def != nullptr && cur == def);
  uint64_t used0 = 0;
  CHECK(cudaMemPoolGetAttribute(def, cudaMemPoolAttrUsedMemCurrent, &used0));

  const int n = 50000;
  const size_t bytes = n * sizeof(int);
  std::vector<int> in(n), out(n);
  unsigned seed = 12345;
  for (int& v : in) v = static_cast<int>((seed = seed * 1103515245u + 12345u) >> 8);
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int* a = nullptr;
  int* b = nullptr;
  CHECK(cudaMallocAsync(reinterpret_cast<void**>(&a), bytes, s));
  CHECK(cudaMemcpyAsync(a, in.data(), bytes, cudaMemcpyHostToDevice, s));
  add_one<<<(n + 255) / 256, 256, 0, s>>>(a, n);
  CHECK(cudaMallocAsync(reinterpret_cast<void**>(&b), bytes, s));
  CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s));
  CHECK(cudaFreeAsync(a, s));  // the copy queued before it still reads a
  add_one<<<(n + 255) / 256, 256, 0, s>>>(b, n);
  CHECK(cudaMemcpyAsync(out.data(), b, bytes, cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  for (int i = 0; i < n; ++i) EXPECT(out[i] == in[i] + 2);
  uint64_t used = 0, high = 0;
  CHECK(cudaMemPoolGetAttribute(def, cudaMemPoolAttrUsedMemCurrent, &used));
  EXPECT(used >= used0 + bytes);  // b is live, a is freed (a GPU rounds sizes up)
  CHECK(cudaMemPoolGetAttribute(def, cudaMemPoolAttrUsedMemHigh, &high));
  EXPECT(high >= used0 + 2 * bytes);
  CHECK(cudaFreeAsync(b, s));
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaMemPoolGetAttribute(def, cudaMemPoolAttrUsedMemCurrent, &used));
  EXPECT(used == used0);
  // The high-water mark resets to the current value; current values are read-only.
  uint64_t zero = 0;
  CHECK(cudaMemPoolSetAttribute(def, cudaMemPoolAttrUsedMemHigh, &zero));
  CHECK(cudaMemPoolGetAttribute(def, cudaMemPoolAttrUsedMemHigh, &high));
  EXPECT(high == used0);
  EXPECT_ERR(cudaMemPoolSetAttribute(def, cudaMemPoolAttrUsedMemCurrent, &zero), cudaErrorInvalidValue);
  (void)cudaGetLastError();
  uint64_t threshold = 64ull << 20, got = 0;
  CHECK(cudaMemPoolSetAttribute(def, cudaMemPoolAttrReleaseThreshold, &threshold));
  CHECK(cudaMemPoolGetAttribute(def, cudaMemPoolAttrReleaseThreshold, &got));
  EXPECT(got == threshold);
  CHECK(cudaMemPoolTrimTo(def, 0));
  cudaMemLocation here{cudaMemLocationTypeDevice, 0};
  cudaMemAccessFlags access = cudaMemAccessFlagsProtNone;
  CHECK(cudaMemPoolGetAccess(&access, def, &here));
  EXPECT(access == cudaMemAccessFlagsProtReadWrite);
  EXPECT_ERR(cudaMemPoolDestroy(def), cudaErrorInvalidValue);  // a device's default pool stays
  (void)cudaGetLastError();

  // An explicit pool of at most 64 MiB, made the device's current pool
  // (sizes in whole 2 MiB pages: what a GPU's pool accounts exactly).
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypeNone;
  props.location = here;
  props.maxSize = 64ull << 20;
  cudaMemPool_t pool = nullptr;
  CHECK(cudaMemPoolCreate(&pool, &props));
  cudaMemAccessDesc desc{here, cudaMemAccessFlagsProtReadWrite};
  CHECK(cudaMemPoolSetAccess(pool, &desc, 1));
  int* c = nullptr;
  int* d = nullptr;
  CHECK(cudaMallocFromPoolAsync(reinterpret_cast<void**>(&c), 32ull << 20, pool, s));
  EXPECT_ERR(cudaMallocFromPoolAsync(reinterpret_cast<void**>(&d), 48ull << 20, pool, s), cudaErrorMemoryAllocation);
  (void)cudaGetLastError();
  CHECK(cudaDeviceSetMemPool(0, pool));
  CHECK(cudaDeviceGetMemPool(&cur, 0));
  EXPECT(cur == pool);
  CHECK(cudaMallocAsync(reinterpret_cast<void**>(&d), 16ull << 20, s));  // from the current pool
  CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used));
  EXPECT(used == (48ull << 20));
  const int m = (256 << 10) / sizeof(int);
  fill<<<(m + 255) / 256, 256, 0, s>>>(c, m, 7);
  CHECK(cudaMemcpyAsync(d, c, 256 << 10, cudaMemcpyDeviceToDevice, s));
  std::vector<int> back(m);
  CHECK(cudaMemcpyAsync(back.data(), d, 256 << 10, cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  for (size_t i = 0; i < back.size(); ++i) EXPECT(back[i] == 7 + static_cast<int>(i));
  // Destroyed with allocations outstanding: they stay usable until freed;
  // the device's current pool is its default one again.
  CHECK(cudaMemPoolDestroy(pool));
  CHECK(cudaDeviceGetMemPool(&cur, 0));
  EXPECT(cur == def);
  CHECK(cudaFreeAsync(c, s));
  CHECK(cudaFree(d));  // cudaFree takes a stream-ordered allocation too
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaStreamDestroy(s));
  return 0;
}

// Host functions in stream order (docs/interposer.md "Host functions in
// stream order"): a function sees the results of the work queued before it,
// work queued after it sees what it wrote, stream callbacks get their
// stream and status, functions of one stream run in order, and a function
// may wait for the launching thread (it runs on a thread of its own).
struct HostFnState {
  const int* pinned_in = nullptr;  // what the kernel's results were copied to
  int* pinned_out = nullptr;       // what the function writes for the next copy
  int n = 0;
  long long sum = 0;
  std::atomic<int> order{0};
  int order_bad = 0;
  std::atomic<bool> release{false};
  bool waited = false;
  cudaStream_t stream = nullptr;
  bool callback_ok = false;
};

void CUDART_CB SumThenWrite(void* p) {
  auto* st = static_cast<HostFnState*>(p);
  for (int i = 0; i < st->n; ++i) st->sum += st->pinned_in[i];
  for (int i = 0; i < st->n; ++i) st->pinned_out[i] = 3 * i;
}
void CUDART_CB Callback(cudaStream_t s, cudaError_t status, void* p) {
  auto* st = static_cast<HostFnState*>(p);
  st->callback_ok = s == st->stream && status == cudaSuccess;
}
struct Ordered {
  HostFnState* st;
  int index;
};
void CUDART_CB CheckOrder(void* p) {
  auto* o = static_cast<Ordered*>(p);
  if (o->st->order.fetch_add(1) != o->index) ++o->st->order_bad;
}
void CUDART_CB WaitForLauncher(void* p) {
  auto* st = static_cast<HostFnState*>(p);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!st->release.load() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  st->waited = st->release.load();
}

int HostFunctions() {
  const int n = 4096;
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int* d = nullptr;
  int* pin_in = nullptr;
  int* pin_out = nullptr;
  CHECK(cudaMalloc(&d, n * sizeof(int)));
  CHECK(cudaMallocHost(&pin_in, n * sizeof(int)));
  CHECK(cudaMallocHost(&pin_out, n * sizeof(int)));
  HostFnState st;
  st.pinned_in = pin_in;
  st.pinned_out = pin_out;
  st.n = n;
  st.stream = s;
  const int base = 1000;
  fill<<<(n + 255) / 256, 256, 0, s>>>(d, n, base);
  CHECK(cudaMemcpyAsync(pin_in, d, n * sizeof(int), cudaMemcpyDeviceToHost, s));
  CHECK(cudaLaunchHostFunc(s, SumThenWrite, &st));
  CHECK(cudaMemcpyAsync(d, pin_out, n * sizeof(int), cudaMemcpyHostToDevice, s));
  add_one<<<(n + 255) / 256, 256, 0, s>>>(d, n);
  CHECK(cudaStreamAddCallback(s, Callback, &st, 0));
  std::vector<int> back(n);
  CHECK(cudaMemcpyAsync(back.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  long long want = 0;
  for (int i = 0; i < n; ++i) want += base + i;
  EXPECT(st.sum == want);                                // saw the kernel's results
  for (int i = 0; i < n; ++i) EXPECT(back[i] == 3 * i + 1);  // the copy after it saw its writes
  EXPECT(st.callback_ok);
  EXPECT_ERR(cudaStreamAddCallback(s, Callback, &st, 1), cudaErrorInvalidValue);  // flags must be 0
  (void)cudaGetLastError();

  // In order: 64 functions on one stream.
  std::vector<Ordered> ordered(64);
  for (int i = 0; i < 64; ++i) {
    ordered[i] = {&st, i};
    CHECK(cudaLaunchHostFunc(s, CheckOrder, &ordered[i]));
  }
  // A function that waits for the launching thread: it runs elsewhere, so
  // the launch returns and the thread can release it.
  CHECK(cudaLaunchHostFunc(s, WaitForLauncher, &st));
  st.release.store(true);
  CHECK(cudaStreamSynchronize(s));
  EXPECT(st.order.load() == 64 && st.order_bad == 0);
  EXPECT(st.waited);
  CHECK(cudaFreeHost(pin_in));
  CHECK(cudaFreeHost(pin_out));
  CHECK(cudaFree(d));
  CHECK(cudaStreamDestroy(s));
  return 0;
}

// fork() before any CUDA call: the child connects on its own.
int ForkBeforeInit() {
  std::fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) return 3;
  if (pid == 0) {
    const int rc = UseCuda(1000);
    std::printf("runtime_more: fork-before child rc=%d\n", rc);
    std::fflush(stdout);
    std::exit(rc);
  }
  int status = 0;
  EXPECT(waitpid(pid, &status, 0) == pid);
  EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  return UseCuda(5);
}

}  // namespace

// Each step says that it starts (stdout is line-buffered: program_checks.h),
// so a hang shows where it is.
#define STEP(call)                                         \
  do {                                                     \
    std::printf("runtime_more: %s ...\n", #call);         \
    int rc_ = (call);                                      \
    if (rc_ != 0) {                                        \
      std::printf("runtime_more: %s failed\n", #call);     \
      return rc_;                                          \
    }                                                      \
  } while (0)

int main(int argc, char** argv) {
  const char* name = kPerThreadBuild ? "runtime_more_ptds" : "runtime_more";
  if (argc > 1 && std::string(argv[1]) == "fork-before") {
    STEP(ForkBeforeInit());
    std::printf("%s: fork-before OK\n", name);
    return 0;
  }
  STEP(SmallCalls());
  int* flag = nullptr;
  int* out = nullptr;
  CHECK(cudaMalloc(&flag, sizeof(int)));
  CHECK(cudaMalloc(&out, 2 * sizeof(int)));
  cudaStream_t nonblocking;
  CHECK(cudaStreamCreateWithFlags(&nonblocking, cudaStreamNonBlocking));
  STEP(PerThreadChains());
  STEP(PerThreadStreamsAreDistinct(flag, out, nonblocking));
  STEP(LegacyAndPerThreadOrdering(flag, out, nonblocking));
  STEP(StreamZeroMeaning(flag, out, nonblocking));
  CHECK(cudaStreamDestroy(nonblocking));
  STEP(FunctionAttributesAndOccupancy());
  STEP(DynamicSharedAbove48KiB());
  STEP(StreamOrderedAllocation());
  STEP(HostFunctions());
  STEP(ForkAfterInit());
  STEP(DeviceReset());
  std::printf("%s: OK\n", name);
  return 0;
}
