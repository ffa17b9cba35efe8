// The runtime calls the tests/apps programs do not make: device queries,
// memory info, streams with priority, event timing and queries, async
// memset/copies on a stream, cudaMemcpyDefault, error names, last error.
#include <cooperative_groups.h>
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <vector>

#define PHOS_PROGRAM_NAME "runtime_api"
#include "phos_device_attributes.h"  // every cudaDeviceAttr, generated from the headers
#include "program_checks.h"

__global__ void fill(int* p, int n, int v) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = v + i;
}

// A parameter as large as CUDA allows past 16 KiB (32,764 bytes in all since
// CUDA 12.1), with pointers after it: every byte must arrive.
struct Big {
  int v[8000];
};
// A cooperative kernel: each block reads what another block wrote before
// the grid-wide barrier (wrong without every block resident at once).
__global__ void grid_rotate(int* data, int* out, int n) {
  cooperative_groups::grid_group g = cooperative_groups::this_grid();
  const int i = static_cast<int>(g.thread_rank());
  if (i < n) data[i] = i * 3 + 1;
  g.sync();
  if (i < n) out[i] = data[(i + static_cast<int>(blockDim.x)) % n];
}

__global__ void big_param(Big b, int* out, int* out2) {
  out[threadIdx.x] = b.v[threadIdx.x] + b.v[7999];
  if (threadIdx.x == 0) *out2 = b.v[4000];
}

// A module loaded through cudaLibraryLoadData (hand-written PTX).
const char kLibPtx[] = R"PTX(
.version 8.0
.target sm_90
.address_size 64
.visible .global .align 4 .u32 lib_counter = 5;
.visible .entry lib_fill(.param .u64 p, .param .u32 v)
{
  .reg .b32 %r<4>;
  .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [p];
  ld.param.u32 %r1, [v];
  cvta.to.global.u64 %rd2, %rd1;
  mov.u32 %r2, %tid.x;
  add.s32 %r3, %r1, %r2;
  mul.wide.u32 %rd3, %r2, 4;
  add.s64 %rd2, %rd2, %rd3;
  st.global.u32 [%rd2], %r3;
  ret;
}
)PTX";

int main() {
  int count = 0, dev = -1;
  CHECK(cudaGetDeviceCount(&count));
  EXPECT(count >= 1);
  CHECK(cudaSetDevice(0));
  CHECK(cudaGetDevice(&dev));
  EXPECT(dev == 0);
  EXPECT(cudaSetDevice(count + 5) == cudaErrorInvalidDevice);
  EXPECT(cudaGetLastError() == cudaErrorInvalidDevice);
  EXPECT(cudaGetLastError() == cudaSuccess);
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  EXPECT(prop.name[0] != '\0' && prop.totalGlobalMem > 0 && prop.warpSize == 32 && prop.multiProcessorCount > 0);
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  EXPECT(sms == prop.multiProcessorCount);
  // Every attribute the headers define answers (device-selection helpers
  // read the compute mode, numba the exec timeout, PyTorch the pools), and
  // cudaGetDeviceProperties says the same.
  int answered = 0;
  for (const auto& e : phos::interposer::kCudaDeviceAttrs) {
    int v = 0;
    cudaError_t r = cudaDeviceGetAttribute(&v, static_cast<cudaDeviceAttr>(e.value), 0);
    if (r != cudaSuccess) PHOS_CHECK_FAIL(1, "cudaDeviceGetAttribute(%s = %d) failed: %s", e.name, e.value, cudaGetErrorName(r));
    ++answered;
  }
  auto attr = [](cudaDeviceAttr a) {
    int v = -1;
    return cudaDeviceGetAttribute(&v, a, 0) == cudaSuccess ? v : -1;
  };
  EXPECT(prop.major == attr(cudaDevAttrComputeCapabilityMajor) && prop.minor == attr(cudaDevAttrComputeCapabilityMinor));
  EXPECT(prop.l2CacheSize == attr(cudaDevAttrL2CacheSize));
  EXPECT(prop.canMapHostMemory == attr(cudaDevAttrCanMapHostMemory));
  EXPECT(prop.memoryPoolsSupported == attr(cudaDevAttrMemoryPoolsSupported));
  EXPECT(prop.cooperativeLaunch == attr(cudaDevAttrCooperativeLaunch));
  EXPECT(prop.maxBlocksPerMultiProcessor == attr(cudaDevAttrMaxBlocksPerMultiprocessor));
  EXPECT(prop.pciBusID == attr(cudaDevAttrPciBusId));
  EXPECT(static_cast<int>(prop.sharedMemPerBlockOptin) == attr(cudaDevAttrMaxSharedMemoryPerBlockOptin));
  EXPECT(prop.maxThreadsDim[2] == attr(cudaDevAttrMaxBlockDimZ));
  EXPECT(attr(cudaDevAttrComputeMode) == cudaComputeModeDefault || attr(cudaDevAttrComputeMode) >= 0);
  char bus_id[32] = {};
  CHECK(cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, 0));
  int by_bus = -1;
  CHECK(cudaDeviceGetByPCIBusId(&by_bus, bus_id));
  EXPECT(by_bus == 0);
  CHECK(cudaInitDevice(0, 0, 0));
  const char* fname = nullptr;
  CHECK(cudaFuncGetName(&fname, reinterpret_cast<const void*>(fill)));
  EXPECT(fname != nullptr && std::strstr(fname, "fill") != nullptr);
  size_t poff = 0, psize = 0;
  CHECK(cudaFuncGetParamInfo(reinterpret_cast<const void*>(fill), 1, &poff, &psize));  // fill(int* p, int n, int v)
  EXPECT(poff == 8 && psize == 4);
  int junk = 0;
  EXPECT(cudaDeviceGetAttribute(&junk, static_cast<cudaDeviceAttr>(0), 0) == cudaErrorInvalidValue);
  EXPECT(cudaGetLastError() == cudaErrorInvalidValue);
  std::printf("runtime_api: %d device attributes answered\n", answered);
  size_t free_b = 0, total_b = 0;
  CHECK(cudaMemGetInfo(&free_b, &total_b));
  EXPECT(total_b > 0 && free_b <= total_b);

  const int n = 100000;
  int* d = nullptr;
  CHECK(cudaMalloc(&d, n * sizeof(int)));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, 0));
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  // No stream is being captured, and the queries libraries make before
  // every allocation (PyTorch's caching allocator, CuPy) say so.
  cudaStreamCaptureStatus cap = cudaStreamCaptureStatusActive;
  CHECK(cudaStreamIsCapturing(s, &cap));
  EXPECT(cap == cudaStreamCaptureStatusNone);
  cap = cudaStreamCaptureStatusActive;
  CHECK(cudaStreamIsCapturing(0, &cap));
  EXPECT(cap == cudaStreamCaptureStatusNone);
  cap = cudaStreamCaptureStatusActive;
  unsigned long long capture_id = 77;
  CHECK(cudaStreamGetCaptureInfo(s, &cap, &capture_id));
  EXPECT(cap == cudaStreamCaptureStatusNone);
  // Stream attributes (hints): what is set is read back, and copied.
  cudaStreamAttrValue sval = {};
  sval.syncPolicy = cudaSyncPolicyYield;
  CHECK(cudaStreamSetAttribute(s, cudaStreamAttributeSynchronizationPolicy, &sval));
  cudaStreamAttrValue got = {};
  CHECK(cudaStreamGetAttribute(s, cudaStreamAttributeSynchronizationPolicy, &got));
  EXPECT(got.syncPolicy == cudaSyncPolicyYield);
  cudaStream_t s2;
  CHECK(cudaStreamCreate(&s2));
  CHECK(cudaStreamCopyAttributes(s2, s));
  got = {};
  CHECK(cudaStreamGetAttribute(s2, cudaStreamAttributeSynchronizationPolicy, &got));
  EXPECT(got.syncPolicy == cudaSyncPolicyYield);
  CHECK(cudaStreamCopyAttributes(s, s));  // onto itself: keeps what it has
  got = {};
  CHECK(cudaStreamGetAttribute(s, cudaStreamAttributeSynchronizationPolicy, &got));
  EXPECT(got.syncPolicy == cudaSyncPolicyYield);
  CHECK(cudaStreamDestroy(s2));
  EXPECT(cudaStreamGetAttribute(s, static_cast<cudaStreamAttrID>(cudaLaunchAttributeCooperative), &got) ==
         cudaErrorInvalidValue);
  EXPECT(cudaGetLastError() == cudaErrorInvalidValue);
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
  EXPECT(mode == cudaStreamCaptureModeGlobal);  // the default
  CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
  EXPECT(mode == cudaStreamCaptureModeRelaxed);  // what was set
  CHECK(cudaEventRecord(a, s));
  CHECK(cudaMemsetAsync(d, 0, n * sizeof(int), s));
  fill<<<(n + 255) / 256, 256, 0, s>>>(d, n, 7);
  CHECK(cudaEventRecord(b, s));
  CHECK(cudaEventSynchronize(b));
  EXPECT(cudaEventQuery(b) == cudaSuccess);
  EXPECT(cudaStreamQuery(s) == cudaSuccess);
  float ms = -1;
  CHECK(cudaEventElapsedTime(&ms, a, b));
  EXPECT(ms >= 0);
  std::vector<int> h(n, -1);
  CHECK(cudaMemcpyAsync(h.data(), d, n * sizeof(int), cudaMemcpyDefault, s));
  CHECK(cudaStreamSynchronize(s));
  for (int i = 0; i < n; ++i) EXPECT(h[i] == 7 + i);
  // Default-kind D2D and H2D.
  int* d2 = nullptr;
  CHECK(cudaMalloc(&d2, n * sizeof(int)));
  CHECK(cudaMemcpy(d2, d, n * sizeof(int), cudaMemcpyDefault));
  int small[3] = {1, 2, 3};
  CHECK(cudaMemcpy(d2 + 10, small, sizeof small, cudaMemcpyDefault));
  std::vector<int> h2(n);
  CHECK(cudaMemcpy(h2.data(), d2, n * sizeof(int), cudaMemcpyDefault));
  EXPECT(h2[9] == 16 && h2[10] == 1 && h2[12] == 3 && h2[13] == 20);
  CHECK(cudaDeviceSynchronize());
  {
    static Big big;
    for (int i = 0; i < 8000; ++i) big.v[i] = 3 * i;
    int *out = nullptr, *out2 = nullptr;
    CHECK(cudaMalloc(&out, 32 * sizeof(int)));
    CHECK(cudaMalloc(&out2, sizeof(int)));
    big_param<<<1, 32>>>(big, out, out2);
    CHECK(cudaGetLastError());
    int h_out[32] = {}, h_out2 = 0;
    CHECK(cudaMemcpy(h_out, out, sizeof h_out, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(&h_out2, out2, sizeof h_out2, cudaMemcpyDeviceToHost));
    for (int i = 0; i < 32; ++i) EXPECT(h_out[i] == 3 * i + 3 * 7999);
    EXPECT(h_out2 == 3 * 4000);
    CHECK(cudaFree(out));
    CHECK(cudaFree(out2));
    std::printf("runtime_api: a 32000-byte kernel parameter arrived whole\n");
  }
  {
    // cudaLaunchKernelEx (cudaLaunchKernelExC underneath: Thrust, CUB).
    int* e = nullptr;
    CHECK(cudaMalloc(&e, 256 * sizeof(int)));
    cudaLaunchAttribute attrs[2] = {};
    attrs[0].id = cudaLaunchAttributePriority;
    attrs[0].val.priority = 0;
    attrs[1].id = cudaLaunchAttributeClusterDimension;
    attrs[1].val.clusterDim.x = attrs[1].val.clusterDim.y = attrs[1].val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(2);
    cfg.blockDim = dim3(128);
    cfg.attrs = attrs;
    cfg.numAttrs = 2;
    CHECK(cudaLaunchKernelEx(&cfg, fill, e, 256, 40));
    std::vector<int> he(256);
    CHECK(cudaMemcpy(he.data(), e, 256 * sizeof(int), cudaMemcpyDeviceToHost));
    for (int i = 0; i < 256; ++i) EXPECT(he[i] == 40 + i);
    CHECK(cudaFree(e));
    std::printf("runtime_api: cudaLaunchKernelEx OK\n");
  }
  if (attr(cudaDevAttrCooperativeLaunch) == 1) {
    // Cooperative launches: cudaLaunchCooperativeKernel, then the launch
    // attribute; a grid larger than the device holds at once is refused at
    // the launch (cudaErrorCooperativeLaunchTooLarge), not run.
    const int bs = 64, blocks = 6, n = bs * blocks;
    int *data = nullptr, *out = nullptr;
    CHECK(cudaMalloc(&data, n * sizeof(int)));
    CHECK(cudaMalloc(&out, n * sizeof(int)));
    std::vector<int> h(n);
    for (int round = 0; round < 2; ++round) {
      CHECK(cudaMemset(out, 0xff, n * sizeof(int)));
      int nn = n;
      void* args[] = {&data, &out, &nn};
      if (round == 0) {
        CHECK(cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(grid_rotate), dim3(blocks), dim3(bs), args,
                                          0, nullptr));
      } else {
        cudaLaunchAttribute coop[1] = {};
        coop[0].id = cudaLaunchAttributeCooperative;
        coop[0].val.cooperative = 1;
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(blocks);
        cfg.blockDim = dim3(bs);
        cfg.attrs = coop;
        cfg.numAttrs = 1;
        CHECK(cudaLaunchKernelEx(&cfg, grid_rotate, data, out, n));
      }
      CHECK(cudaMemcpy(h.data(), out, n * sizeof(int), cudaMemcpyDeviceToHost));
      for (int i = 0; i < n; ++i) EXPECT(h[i] == ((i + bs) % n) * 3 + 1);
    }
    int per_sm = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, grid_rotate, bs, 0));
    const int too_many = per_sm * attr(cudaDevAttrMultiProcessorCount) + 1;
    int nn = n;
    void* args[] = {&data, &out, &nn};
    EXPECT(cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(grid_rotate), dim3(too_many), dim3(bs), args, 0,
                                       nullptr) == cudaErrorCooperativeLaunchTooLarge);
    EXPECT(cudaGetLastError() == cudaErrorCooperativeLaunchTooLarge);
    CHECK(cudaDeviceSynchronize());  // not sticky: the device still serves
    CHECK(cudaFree(data));
    CHECK(cudaFree(out));
    std::printf("runtime_api: cooperative launch OK\n");
  }
  {
    // cudaLibrary* / cudaKernel_t, and cudaGetKernel of a registered kernel.
    cudaLibrary_t lib = nullptr;
    CHECK(cudaLibraryLoadData(&lib, kLibPtx, nullptr, nullptr, 0, nullptr, nullptr, 0));
    cudaKernel_t lk = nullptr;
    CHECK(cudaLibraryGetKernel(&lk, lib, "lib_fill"));
    int* e = nullptr;
    CHECK(cudaMalloc(&e, 64 * sizeof(int)));
    int v = 1000;
    void* args[] = {&e, &v};
    CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(lk), dim3(1), dim3(64), args, 0, nullptr));
    int he[64] = {};
    CHECK(cudaMemcpy(he, e, sizeof he, cudaMemcpyDeviceToHost));
    for (int i = 0; i < 64; ++i) EXPECT(he[i] == 1000 + i);
    void* g = nullptr;
    size_t gbytes = 0;
    CHECK(cudaLibraryGetGlobal(&g, &gbytes, lib, "lib_counter"));
    int counter = 0;
    CHECK(cudaMemcpy(&counter, g, sizeof counter, cudaMemcpyDeviceToHost));
    EXPECT(gbytes == 4 && counter == 5);
    cudaKernel_t rk = nullptr;
    CHECK(cudaGetKernel(&rk, reinterpret_cast<const void*>(fill)));
    void* fargs[] = {&e, &v, &v};
    int n64 = 64;
    fargs[1] = &n64;
    CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(rk), dim3(1), dim3(64), fargs, 0, nullptr));
    CHECK(cudaMemcpy(he, e, sizeof he, cudaMemcpyDeviceToHost));
    for (int i = 0; i < 64; ++i) EXPECT(he[i] == 1000 + i);  // fill(p, n, v): p[i] = v + i
    CHECK(cudaFree(e));
    CHECK(cudaLibraryUnload(lib));
    std::printf("runtime_api: cudaLibrary OK\n");
  }
  EXPECT(std::strcmp(cudaGetErrorName(cudaErrorNotSupported), "cudaErrorNotSupported") == 0);
  EXPECT(std::strcmp(cudaGetErrorString(cudaSuccess), "no error") == 0);
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(d));
  CHECK(cudaFree(d2));
  CHECK(cudaPeekAtLastError());
  // The profiler API is accepted (no profiler attaches under phos; natively
  // without one these do nothing and succeed).
  CHECK(cudaProfilerStart());
  CHECK(cudaProfilerStop());
  std::printf("runtime_api: OK\n");
  return 0;
}
