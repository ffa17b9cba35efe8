// A CUDA driver API program (no runtime kernel launches, no <<<>>>): cuInit,
// device queries, primary and created contexts, modules loaded from PTX
// text (embedded) and from an nvcc -fatbin image (argv[1], as bytes and as
// a file), kernels launched with kernelParams and with `extra`, memory,
// memsets, streams, events, module globals, error paths, cuGetProcAddress
// and cudaGetDriverEntryPoint. Results are checked against CPU references
// on random data. Prints "driver_api: OK" and exits 0; else prints what
// failed and exits 1 (a wrong result) or 2 (a call failed).
#include <cuda.h>
#include <cudaProfiler.h>
#include <dlfcn.h>
#include <cuda_runtime_api.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "driver_kernels_ptx.h"       // kDriverKernelsPtx (generated from driver_kernels.cu)
#include "phos_device_attributes.h"  // every CUdevice_attribute, generated from cuda.h

// cudaGetDriverEntryPoint is deprecated in CUDA 13 but apps still call it.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace {

const char* Name(CUresult r) {
  const char* s = nullptr;
  return cuGetErrorName(r, &s) == CUDA_SUCCESS ? s : "(unknown CUresult)";
}

#define CHECK(x)                                                                           \
  do {                                                                                     \
    CUresult r_ = (x);                                                                     \
    if (r_ != CUDA_SUCCESS) {                                                              \
      std::printf("driver_api: line %d: %s failed: %s (%d)\n", __LINE__, #x, Name(r_), r_); \
      return 2;                                                                            \
    }                                                                                      \
  } while (0)
#define EXPECT(c)                                                     \
  do {                                                                \
    if (!(c)) {                                                       \
      std::printf("driver_api: line %d: expected %s\n", __LINE__, #c); \
      return 1;                                                       \
    }                                                                 \
  } while (0)
#define EXPECT_RESULT(x, want)                                                                                \
  do {                                                                                                        \
    CUresult r_ = (x);                                                                                        \
    if (r_ != (want)) {                                                                                       \
      std::printf("driver_api: line %d: %s gave %s (%d), expected %s\n", __LINE__, #x, Name(r_), r_, #want); \
      return 1;                                                                                               \
    }                                                                                                         \
  } while (0)
#define RUN(x)                \
  do {                        \
    if (int rc_ = (x)) return rc_; \
  } while (0)

// The `mixed` kernel's struct parameter (driver_kernels.cu).
struct Mixed {
  double scale;
  int offset;
  char tag;
  long long bias;
};

std::mt19937 g_rng;

std::vector<float> RandomFloats(size_t n) {
  std::uniform_real_distribution<float> d(-100.f, 100.f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g_rng);
  return v;
}

bool Close(float a, float b) { return std::fabs(a - b) <= 1e-4f * (1.f + std::fabs(b)); }

// Host -> device -> host of `bytes` random bytes (inline and staged copies).
int RoundTrip(size_t bytes) {
  std::vector<unsigned char> in(bytes), out(bytes, 0);
  for (auto& b : in) b = static_cast<unsigned char>(g_rng());
  CUdeviceptr d = 0;
  CHECK(cuMemAlloc(&d, bytes));
  CHECK(cuMemcpyHtoD(d, in.data(), bytes));
  CHECK(cuMemcpyDtoH(out.data(), d, bytes));
  EXPECT(in == out);
  // Device to device, then back.
  CUdeviceptr d2 = 0;
  CHECK(cuMemAlloc(&d2, bytes));
  CHECK(cuMemcpyDtoD(d2, d, bytes));
  std::fill(out.begin(), out.end(), 0);
  CHECK(cuMemcpyDtoH(out.data(), d2, bytes));
  EXPECT(in == out);
  // Unified addressing: cuMemcpy classifies the pointers itself.
  CHECK(cuMemsetD8(d2, 0, bytes));
  CHECK(cuMemcpy(d2, d, bytes));
  std::fill(out.begin(), out.end(), 0);
  CHECK(cuMemcpyDtoH(out.data(), d2, bytes));
  EXPECT(in == out);
  CHECK(cuMemFree(d2));
  CHECK(cuMemFree(d));
  // Freeing 0 is a successful no-op (cudaFree(nullptr) likewise): the CUDA
  // runtime statically linked into libcurand calls cuMemFree_v2(0) while it
  // sets up its context, and gives up on an error.
  CHECK(cuMemFree(0));
  return 0;
}

int Memsets() {
  const size_t n = 4096 + 3;
  CUdeviceptr d = 0;
  CHECK(cuMemAlloc(&d, n * 4));
  const unsigned v32 = static_cast<unsigned>(g_rng());
  CHECK(cuMemsetD32(d, v32, n));
  std::vector<unsigned> w(n);
  CHECK(cuMemcpyDtoH(w.data(), d, n * 4));
  for (unsigned x : w) EXPECT(x == v32);
  const unsigned short v16 = static_cast<unsigned short>(g_rng());
  CHECK(cuMemsetD16(d + 4, v16, 5));  // halves 2..6
  const unsigned char v8 = static_cast<unsigned char>(g_rng());
  CHECK(cuMemsetD8(d + 1, v8, 2));  // bytes 1..2
  std::vector<unsigned char> b(32);
  CHECK(cuMemcpyDtoH(b.data(), d, b.size()));
  std::vector<unsigned char> want(32);
  for (size_t i = 0; i < 8; ++i) std::memcpy(&want[i * 4], &v32, 4);
  for (size_t i = 2; i < 7; ++i) std::memcpy(&want[i * 2], &v16, 2);
  want[1] = want[2] = v8;
  EXPECT(b == want);
  EXPECT_RESULT(cuMemsetD32(d + 2, 0, 1), CUDA_ERROR_INVALID_VALUE);  // misaligned

  // 2D: rows of `width` elements `pitch` bytes apart; the bytes between
  // rows stay as they were (cuSPARSE's runtime uses cuMemsetD2D8Async).
  const size_t pitch = 64, rows = 3;
  CHECK(cuMemsetD8(d, 0x5a, pitch * rows));
  CHECK(cuMemsetD2D16(d, pitch, v16, 10, rows));                // bytes 0..19 of each row
  CUstream s2 = nullptr;
  CHECK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
  CHECK(cuMemsetD2D32Async(d + 24, pitch, v32, 4, rows - 1, s2));  // bytes 24..39 of rows 0..1
  CHECK(cuMemsetD2D8Async(d + 44, pitch, v8, 3, rows, s2));       // bytes 44..46
  CHECK(cuStreamSynchronize(s2));
  std::vector<unsigned char> got(pitch * rows), expect(pitch * rows, 0x5a);
  CHECK(cuMemcpyDtoH(got.data(), d, got.size()));
  for (size_t r = 0; r < rows; ++r) {
    unsigned char* row = &expect[r * pitch];
    for (size_t i = 0; i < 10; ++i) std::memcpy(row + 2 * i, &v16, 2);
    if (r + 1 < rows) {
      for (size_t i = 0; i < 4; ++i) std::memcpy(row + 24 + 4 * i, &v32, 4);
    }
    for (size_t i = 0; i < 3; ++i) row[44 + i] = v8;
  }
  EXPECT(got == expect);
  EXPECT_RESULT(cuMemsetD2D32(d, 62, 0, 4, 2), CUDA_ERROR_INVALID_VALUE);  // pitch not a multiple of 4
  EXPECT_RESULT(cuMemsetD2D16(d + 1, pitch, 0, 4, 2), CUDA_ERROR_INVALID_VALUE);  // misaligned
  EXPECT_RESULT(cuMemsetD2D8(d, 8, 0, 9, 2), CUDA_ERROR_INVALID_VALUE);  // wider than the pitch
  CHECK(cuStreamDestroy(s2));
  CHECK(cuMemFree(d));
  return 0;
}

// Stream-ordered allocation through the driver: cuMemAllocAsync /
// cuMemFreeAsync around copies on a stream, an explicit pool, the device's
// default pool's accounting.
int StreamOrderedAllocation(CUdevice dev) {
  const size_t bytes = 2u << 20;
  std::vector<unsigned char> in(bytes), out(bytes, 0);
  for (auto& b : in) b = static_cast<unsigned char>(g_rng());
  CUstream s = nullptr;
  CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUmemoryPool def = nullptr;
  CHECK(cuDeviceGetDefaultMemPool(&def, dev));
  cuuint64_t used0 = 0, used = 0;
  CHECK(cuMemPoolGetAttribute(def, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used0));
  CUdeviceptr a = 0, b = 0;
  CHECK(cuMemAllocAsync(&a, bytes, s));
  CHECK(cuMemcpyHtoDAsync(a, in.data(), bytes, s));
  CHECK(cuMemAllocAsync(&b, bytes, s));
  CHECK(cuMemcpyDtoDAsync(b, a, bytes, s));
  CHECK(cuMemFreeAsync(a, s));
  CHECK(cuMemcpyDtoHAsync(out.data(), b, bytes, s));
  CHECK(cuStreamSynchronize(s));
  EXPECT(in == out);
  CHECK(cuMemPoolGetAttribute(def, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used));
  EXPECT(used == used0 + bytes);
  CHECK(cuMemFreeAsync(b, s));
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = dev;
  CUmemoryPool pool = nullptr;
  CHECK(cuMemPoolCreate(&pool, &props));
  CUdeviceptr c = 0;
  CHECK(cuMemAllocFromPoolAsync(&c, bytes, pool, s));
  CHECK(cuMemsetD8Async(c, 0x3c, bytes, s));
  CHECK(cuMemcpyDtoHAsync(out.data(), c, bytes, s));
  CHECK(cuStreamSynchronize(s));
  for (unsigned char x : out) EXPECT(x == 0x3c);
  CHECK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used));
  EXPECT(used == bytes);
  CHECK(cuMemFreeAsync(c, s));
  CHECK(cuStreamSynchronize(s));
  CHECK(cuMemPoolDestroy(pool));
  CHECK(cuMemPoolGetAttribute(def, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used));
  EXPECT(used == used0);
  CHECK(cuStreamDestroy(s));
  return 0;
}

// The driver's stream capture and graph launch: a memset and a copy
// captured, instantiated and launched twice.
int Graphs() {
  const size_t n = 4096;
  CUstream s = nullptr;
  CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUdeviceptr a = 0, b = 0;
  CHECK(cuMemAlloc(&a, n * 4));
  CHECK(cuMemAlloc(&b, n * 4));
  const unsigned v = static_cast<unsigned>(g_rng());
  CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  CHECK(cuStreamIsCapturing(s, &st));
  EXPECT(st == CU_STREAM_CAPTURE_STATUS_ACTIVE);
  CHECK(cuMemsetD32Async(a, v, n, s));
  CHECK(cuMemcpyDtoDAsync(b, a, n * 4, s));
  CUgraph graph = nullptr;
  CHECK(cuStreamEndCapture(s, &graph));
  CUgraphNode nodes[4] = {};
  size_t count = 4;
  CHECK(cuGraphGetNodes(graph, nodes, &count));
  EXPECT(count == 2);
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  CHECK(cuGraphNodeGetType(nodes[0], &type));
  EXPECT(type == CU_GRAPH_NODE_TYPE_MEMSET);
  CUgraphExec exec = nullptr;
  CHECK(cuGraphInstantiate(&exec, graph, 0));
  for (int launch = 0; launch < 2; ++launch) {
    CHECK(cuMemsetD32(b, 0, n));
    CHECK(cuGraphLaunch(exec, s));
    CHECK(cuStreamSynchronize(s));
    std::vector<unsigned> got(n);
    CHECK(cuMemcpyDtoH(got.data(), b, n * 4));
    for (unsigned x : got) EXPECT(x == v);
  }
  CHECK(cuGraphExecDestroy(exec));
  CHECK(cuGraphDestroy(graph));
  CHECK(cuMemFree(a));
  CHECK(cuMemFree(b));
  CHECK(cuStreamDestroy(s));
  return 0;
}

// cuLaunchHostFunc / cuStreamAddCallback: in stream order, with the
// results of the copy before them.
struct DriverHostFn {
  const unsigned char* pinned = nullptr;
  size_t bytes = 0;
  unsigned long long sum = 0;
  CUstream stream = nullptr;
  bool callback_ok = false;
};
void CUDA_CB DriverSum(void* p) {
  auto* h = static_cast<DriverHostFn*>(p);
  for (size_t i = 0; i < h->bytes; ++i) h->sum += h->pinned[i];
}
void CUDA_CB DriverCallback(CUstream s, CUresult status, void* p) {
  auto* h = static_cast<DriverHostFn*>(p);
  h->callback_ok = s == h->stream && status == CUDA_SUCCESS;
}
int HostFunctions() {
  const size_t bytes = 1 << 16;
  std::vector<unsigned char> in(bytes);
  unsigned long long want = 0;
  for (auto& b : in) want += (b = static_cast<unsigned char>(g_rng()));
  CUstream s = nullptr;
  CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  void* pinned = nullptr;
  CHECK(cuMemAllocHost(&pinned, bytes));
  CUdeviceptr d = 0;
  CHECK(cuMemAlloc(&d, bytes));
  CHECK(cuMemcpyHtoDAsync(d, in.data(), bytes, s));
  CHECK(cuMemcpyDtoHAsync(pinned, d, bytes, s));
  DriverHostFn h{static_cast<const unsigned char*>(pinned), bytes, 0, s, false};
  CHECK(cuLaunchHostFunc(s, DriverSum, &h));
  CHECK(cuStreamAddCallback(s, DriverCallback, &h, 0));
  CHECK(cuStreamSynchronize(s));
  EXPECT(h.sum == want);
  EXPECT(h.callback_ok);
  CHECK(cuMemFree(d));
  CHECK(cuMemFreeHost(pinned));
  CHECK(cuStreamDestroy(s));
  return 0;
}

// saxpy, mixed (kernelParams), saxpy again (extra), the `counters` global.
int RunKernels(CUmodule mod, const char* what) {
  std::printf("driver_api: kernels from %s\n", what);
  CUfunction saxpy = nullptr, mixed = nullptr, bump = nullptr, again = nullptr;
  CHECK(cuModuleGetFunction(&saxpy, mod, "saxpy"));
  CHECK(cuModuleGetFunction(&mixed, mod, "mixed"));
  CHECK(cuModuleGetFunction(&bump, mod, "bump"));
  CHECK(cuModuleGetFunction(&again, mod, "saxpy"));
  EXPECT(again == saxpy);
  CUfunction none = nullptr;
  EXPECT_RESULT(cuModuleGetFunction(&none, mod, "no_such_kernel"), CUDA_ERROR_NOT_FOUND);

  // saxpy with kernelParams.
  int n = 1000 + static_cast<int>(g_rng() % 1000);
  float a = 2.5f;
  std::vector<float> x = RandomFloats(n), y = RandomFloats(n), ref(n), out(n);
  CUdeviceptr dx = 0, dy = 0;
  CHECK(cuMemAlloc(&dx, n * sizeof(float)));
  CHECK(cuMemAlloc(&dy, n * sizeof(float)));
  CHECK(cuMemcpyHtoD(dx, x.data(), n * sizeof(float)));
  CHECK(cuMemcpyHtoD(dy, y.data(), n * sizeof(float)));
  void* args[] = {&n, &a, &dx, &dy};
  CHECK(cuLaunchKernel(saxpy, (n + 127) / 128, 1, 1, 128, 1, 1, 0, nullptr, args, nullptr));
  CHECK(cuCtxSynchronize());
  CHECK(cuMemcpyDtoH(out.data(), dy, n * sizeof(float)));
  for (int i = 0; i < n; ++i) ref[i] = a * x[i] + y[i];
  for (int i = 0; i < n; ++i) EXPECT(Close(out[i], ref[i]));

  // The driver's explicit graph nodes (as XLA builds graphs): saxpy as a
  // kernel node (its parameters copied when the node is made), then a
  // memcpy node of y into host memory; relaunched after the exec's kernel
  // node got another `a`.
  {
    CHECK(cuMemcpyHtoD(dy, y.data(), n * sizeof(float)));
    CUgraph graph = nullptr;
    CHECK(cuGraphCreate(&graph, 0));
    float a_node = 1.5f;
    void* node_args[] = {&n, &a_node, &dx, &dy};
    CUDA_KERNEL_NODE_PARAMS kp{};
    kp.func = saxpy;
    kp.gridDimX = (n + 127) / 128;
    kp.gridDimY = kp.gridDimZ = 1;
    kp.blockDimX = 128;
    kp.blockDimY = kp.blockDimZ = 1;
    kp.kernelParams = node_args;
    CUgraphNode kn = nullptr, cn = nullptr;
    CHECK(cuGraphAddKernelNode(&kn, graph, nullptr, 0, &kp));
    a_node = 99.0f;  // the node took its own copy
    std::vector<float> host(n, 0.0f);
    CUDA_MEMCPY3D cp{};
    cp.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    cp.srcDevice = dy;
    cp.srcPitch = n * sizeof(float);
    cp.srcHeight = 1;
    cp.dstMemoryType = CU_MEMORYTYPE_HOST;
    cp.dstHost = host.data();
    cp.dstPitch = n * sizeof(float);
    cp.dstHeight = 1;
    cp.WidthInBytes = n * sizeof(float);
    cp.Height = 1;
    cp.Depth = 1;
    CHECK(cuGraphAddMemcpyNode(&cn, graph, &kn, 1, &cp, nullptr));
    CUgraphExec exec = nullptr;
    CHECK(cuGraphInstantiate(&exec, graph, 0));
    CHECK(cuGraphLaunch(exec, nullptr));
    CHECK(cuCtxSynchronize());
    for (int i = 0; i < n; ++i) EXPECT(Close(host[i], 1.5f * x[i] + y[i]));
    // The exec's kernel node with a = 2 applies to what y holds now.
    float a2 = 2.0f;
    void* args2[] = {&n, &a2, &dx, &dy};
    kp.kernelParams = args2;
    CHECK(cuGraphExecKernelNodeSetParams(exec, kn, &kp));
    CHECK(cuGraphLaunch(exec, nullptr));
    CHECK(cuCtxSynchronize());
    for (int i = 0; i < n; ++i) EXPECT(Close(host[i], 2.0f * x[i] + (1.5f * x[i] + y[i])));
    CHECK(cuGraphExecDestroy(exec));
    CHECK(cuGraphDestroy(graph));
    CHECK(cuMemcpyHtoD(dy, ref.data(), n * sizeof(float)));  // y as the steps below expect it
  }

  // saxpy again, its parameters packed by hand and passed with `extra`.
  struct {
    int n;
    float a;
    CUdeviceptr x, y;
  } packed{n, -1.5f, dx, dy};
  size_t packed_size = sizeof(packed);
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &packed, CU_LAUNCH_PARAM_BUFFER_SIZE, &packed_size,
                   CU_LAUNCH_PARAM_END};
  CHECK(cuLaunchKernel(saxpy, (n + 63) / 64, 1, 1, 64, 1, 1, 0, nullptr, nullptr, extra));
  CHECK(cuMemcpyDtoH(out.data(), dy, n * sizeof(float)));
  for (int i = 0; i < n; ++i) ref[i] = packed.a * x[i] + ref[i];
  for (int i = 0; i < n; ++i) EXPECT(Close(out[i], ref[i]));
  EXPECT_RESULT(cuLaunchKernel(saxpy, 1, 1, 1, 1, 1, 1, 0, nullptr, args, extra), CUDA_ERROR_INVALID_VALUE);

  // cuLaunchKernelEx (numba-cuda's launch): hint attributes and a 1x1x1
  // cluster are honoured; what the device attributes say is not offered is
  // refused.
  {
    CUlaunchAttribute attrs[3] = {};
    attrs[0].id = CU_LAUNCH_ATTRIBUTE_PRIORITY;
    attrs[0].value.priority = 0;
    attrs[1].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attrs[1].value.clusterDim.x = attrs[1].value.clusterDim.y = attrs[1].value.clusterDim.z = 1;
    attrs[2].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
    attrs[2].value.cooperative = 0;
    CUlaunchConfig cfg = {};
    cfg.gridDimX = (n + 127) / 128;
    cfg.gridDimY = cfg.gridDimZ = 1;
    cfg.blockDimX = 128;
    cfg.blockDimY = cfg.blockDimZ = 1;
    cfg.attrs = attrs;
    cfg.numAttrs = 3;
    float a2 = 0.5f;
    void* args2[] = {&n, &a2, &dx, &dy};
    CHECK(cuLaunchKernelEx(&cfg, saxpy, args2, nullptr));
    CHECK(cuCtxSynchronize());
    CHECK(cuMemcpyDtoH(out.data(), dy, n * sizeof(float)));
    for (int i = 0; i < n; ++i) ref[i] = a2 * x[i] + ref[i];
    for (int i = 0; i < n; ++i) EXPECT(Close(out[i], ref[i]));
    int coop = 0;
    CHECK(cuDeviceGetAttribute(&coop, CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH, 0));
    if (coop == 1) {
      // Cooperative, through the attribute and cuLaunchCooperativeKernel;
      // a grid beyond what the device holds at once is refused at launch.
      attrs[2].value.cooperative = 1;
      CHECK(cuLaunchKernelEx(&cfg, saxpy, args2, nullptr));
      attrs[2].value.cooperative = 0;
      CHECK(cuLaunchCooperativeKernel(saxpy, cfg.gridDimX, 1, 1, 128, 1, 1, 0, nullptr, args2));
      CHECK(cuCtxSynchronize());
      CHECK(cuMemcpyDtoH(out.data(), dy, n * sizeof(float)));
      for (int i = 0; i < n; ++i) ref[i] = a2 * x[i] + ref[i];
      for (int i = 0; i < n; ++i) ref[i] = a2 * x[i] + ref[i];
      for (int i = 0; i < n; ++i) EXPECT(Close(out[i], ref[i]));
      int sms = 0;
      CHECK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0));
      EXPECT_RESULT(cuLaunchCooperativeKernel(saxpy, static_cast<unsigned>(sms) * 64 + 1, 1, 1, 128, 1, 1, 0,
                                              nullptr, args2),
                    CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE);
      std::printf("driver_api: cooperative launches OK\n");
    }
    EXPECT_RESULT(cuLaunchKernelEx(nullptr, saxpy, args2, nullptr), CUDA_ERROR_INVALID_VALUE);
    std::printf("driver_api: cuLaunchKernelEx OK\n");
  }
  size_t short_size = 8;
  void* short_extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &packed, CU_LAUNCH_PARAM_BUFFER_SIZE, &short_size,
                         CU_LAUNCH_PARAM_END};
  EXPECT_RESULT(cuLaunchKernel(saxpy, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, short_extra), CUDA_ERROR_INVALID_VALUE);

  // mixed: 8-, 64-, 32-bit, struct, 16-bit and 64-bit parameters.
  char c = static_cast<char>(-3 - static_cast<int>(g_rng() % 5));
  int k = 37;
  Mixed m{0.5 + (g_rng() % 7), static_cast<int>(g_rng() % 900), static_cast<char>(g_rng() % 100),
          (1LL << 40) + static_cast<long long>(g_rng() % 1000)};
  short s = static_cast<short>(-2 - static_cast<int>(g_rng() % 50));
  CUdeviceptr dout = 0, ddout = 0;
  CHECK(cuMemAlloc(&dout, k * sizeof(long long)));
  CHECK(cuMemAlloc(&ddout, k * sizeof(double)));
  void* margs[] = {&c, &dout, &k, &m, &s, &ddout};
  CHECK(cuLaunchKernel(mixed, 1, 1, 1, 64, 1, 1, 0, nullptr, margs, nullptr));
  std::vector<long long> lo(k);
  std::vector<double> dd(k);
  CHECK(cuMemcpyDtoH(lo.data(), dout, k * sizeof(long long)));
  CHECK(cuMemcpyDtoH(dd.data(), ddout, k * sizeof(double)));
  for (int i = 0; i < k; ++i) {
    const long long want = static_cast<long long>(c) * 1000000 + static_cast<long long>(m.offset) * 1000 + m.tag +
                           m.bias * i + s;
    if (lo[i] != want) std::printf("driver_api: mixed[%d] = %lld, want %lld\n", i, lo[i], want);
    EXPECT(lo[i] == want);
    EXPECT(dd[i] == m.scale * i);
  }

  // The module's __device__ int counters[4].
  CUdeviceptr g = 0;
  size_t gsize = 0;
  CHECK(cuModuleGetGlobal(&g, &gsize, mod, "counters"));
  EXPECT(g != 0 && gsize == 4 * sizeof(int));
  EXPECT_RESULT(cuModuleGetGlobal(&g, &gsize, mod, "no_such_global"), CUDA_ERROR_NOT_FOUND);
  int init[4] = {10, 20, 30, 40};
  CHECK(cuMemcpyHtoD(g, init, sizeof init));
  int v = 1 + static_cast<int>(g_rng() % 9);
  void* bargs[] = {&v};
  CHECK(cuLaunchKernel(bump, 1, 1, 1, 4, 1, 1, 0, nullptr, bargs, nullptr));
  int got[4] = {};
  CHECK(cuMemcpyDtoH(got, g, sizeof got));
  for (int i = 0; i < 4; ++i) EXPECT(got[i] == init[i] + v * (i + 1));

  CHECK(cuMemFree(dout));
  CHECK(cuMemFree(ddout));
  CHECK(cuMemFree(dx));
  CHECK(cuMemFree(dy));
  return 0;
}

// Streams and events: async copies, a launch on a stream, timing.
int StreamsAndEvents(CUmodule mod) {
  CUfunction saxpy = nullptr;
  CHECK(cuModuleGetFunction(&saxpy, mod, "saxpy"));
  CUstream st = nullptr, st2 = nullptr;
  CHECK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
  CHECK(cuStreamCreateWithPriority(&st2, 0, 0));
  CUstreamCaptureStatus cap = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  CHECK(cuStreamIsCapturing(st, &cap));
  EXPECT(cap == CU_STREAM_CAPTURE_STATUS_NONE);
  cap = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  cuuint64_t capture_id = 0;
  CHECK(cuStreamGetCaptureInfo(st2, &cap, &capture_id, nullptr, nullptr, nullptr, nullptr));
  EXPECT(cap == CU_STREAM_CAPTURE_STATUS_NONE);
  CUevent start = nullptr, stop = nullptr;
  CHECK(cuEventCreate(&start, CU_EVENT_DEFAULT));
  CHECK(cuEventCreate(&stop, CU_EVENT_DEFAULT));
  int n = 50000;
  float a = 0.25f;
  std::vector<float> x = RandomFloats(n), y = RandomFloats(n), out(n);
  CUdeviceptr dx = 0, dy = 0;
  CHECK(cuMemAlloc(&dx, n * sizeof(float)));
  CHECK(cuMemAlloc(&dy, n * sizeof(float)));
  CHECK(cuEventRecord(start, st));
  CHECK(cuMemsetD32Async(dy, 0, n, st));
  CHECK(cuMemcpyHtoDAsync(dx, x.data(), n * sizeof(float), st));
  CHECK(cuMemcpyHtoDAsync(dy, y.data(), n * sizeof(float), st));
  void* args[] = {&n, &a, &dx, &dy};
  CHECK(cuLaunchKernel(saxpy, (n + 255) / 256, 1, 1, 256, 1, 1, 0, st, args, nullptr));
  CHECK(cuEventRecord(stop, st));
  // st2 waits for st's work, then copies the result back.
  CHECK(cuStreamWaitEvent(st2, stop, 0));
  CHECK(cuMemcpyDtoHAsync(out.data(), dy, n * sizeof(float), st2));
  CHECK(cuStreamSynchronize(st2));
  CHECK(cuEventSynchronize(stop));
  EXPECT_RESULT(cuEventQuery(stop), CUDA_SUCCESS);
  EXPECT_RESULT(cuStreamQuery(st), CUDA_SUCCESS);
  float ms = -1.f;
  CHECK(cuEventElapsedTime(&ms, start, stop));
  EXPECT(ms >= 0.f);
  for (int i = 0; i < n; ++i) EXPECT(Close(out[i], a * x[i] + y[i]));
  CHECK(cuEventDestroy(start));
  CHECK(cuEventDestroy(stop));
  CHECK(cuStreamDestroy(st));
  CHECK(cuStreamDestroy(st2));
  CHECK(cuMemFree(dx));
  CHECK(cuMemFree(dy));
  return 0;
}

int EntryPoints(CUmodule mod) {
  using MemAllocFn = CUresult (*)(CUdeviceptr*, size_t);
  using MemFreeFn = CUresult (*)(CUdeviceptr);
  using LaunchFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                CUstream, void**, void**);
  using HtoDFn = CUresult (*)(CUdeviceptr, const void*, size_t);
  void* p = nullptr;
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  CHECK(cuGetProcAddress("cuMemAlloc", &p, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &status));
  EXPECT(status == CU_GET_PROC_ADDRESS_SUCCESS && p != nullptr);
  auto mem_alloc = reinterpret_cast<MemAllocFn>(p);
  CHECK(cuGetProcAddress("cuLaunchKernel", &p, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &status));
  EXPECT(status == CU_GET_PROC_ADDRESS_SUCCESS && p != nullptr);
  auto launch = reinterpret_cast<LaunchFn>(p);
  CHECK(cuGetProcAddress("cuMemcpyHtoD", &p, CUDA_VERSION, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &status));
  EXPECT(status == CU_GET_PROC_ADDRESS_SUCCESS && p != nullptr);
  auto htod_ptds = reinterpret_cast<HtoDFn>(p);
  p = reinterpret_cast<void*>(1);
  CHECK(cuGetProcAddress("cuNoSuchFunction", &p, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &status));
  EXPECT(status == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND && p == nullptr);
  CHECK(cuGetProcAddress("cudaMalloc", &p, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &status));
  EXPECT(status == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND && p == nullptr);  // a runtime name is no driver symbol
  void* free_fn = nullptr;
  cudaDriverEntryPointQueryResult rt_status = cudaDriverEntryPointSymbolNotFound;
  EXPECT(cudaGetDriverEntryPoint("cuMemFree", &free_fn, cudaEnableDefault, &rt_status) == cudaSuccess);
  EXPECT(rt_status == cudaDriverEntryPointSuccess && free_fn != nullptr);
  EXPECT(cudaGetDriverEntryPoint("cuNoSuchFunction", &free_fn, cudaEnableDefault, &rt_status) == cudaSuccess);
  EXPECT(rt_status == cudaDriverEntryPointSymbolNotFound && free_fn == nullptr);
  EXPECT(cudaGetDriverEntryPoint("cuMemFree", &free_fn, cudaEnableDefault, &rt_status) == cudaSuccess);
  void* by_version = nullptr;
  EXPECT(cudaGetDriverEntryPointByVersion("cuMemFree", &by_version, CUDA_VERSION, cudaEnableDefault, &rt_status) ==
         cudaSuccess);
  EXPECT(rt_status == cudaDriverEntryPointSuccess && by_version == free_fn);

  // Call through the pointers: allocate, copy, launch, read back, free.
  CUfunction saxpy = nullptr;
  CHECK(cuModuleGetFunction(&saxpy, mod, "saxpy"));
  int n = 300;
  float a = 3.f;
  std::vector<float> x = RandomFloats(n), y = RandomFloats(n), out(n);
  CUdeviceptr dx = 0, dy = 0;
  CHECK(mem_alloc(&dx, n * sizeof(float)));
  CHECK(mem_alloc(&dy, n * sizeof(float)));
  CHECK(htod_ptds(dx, x.data(), n * sizeof(float)));
  CHECK(htod_ptds(dy, y.data(), n * sizeof(float)));
  void* args[] = {&n, &a, &dx, &dy};
  CHECK(launch(saxpy, 3, 1, 1, 128, 1, 1, 0, nullptr, args, nullptr));
  CHECK(cuMemcpyDtoH(out.data(), dy, n * sizeof(float)));
  for (int i = 0; i < n; ++i) EXPECT(Close(out[i], a * x[i] + y[i]));
  CHECK(reinterpret_cast<MemFreeFn>(free_fn)(dx));
  CHECK(reinterpret_cast<MemFreeFn>(free_fn)(dy));
  return 0;
}

int ErrorPaths(CUmodule mod) {
  const char* s = nullptr;
  CHECK(cuGetErrorName(CUDA_ERROR_INVALID_CONTEXT, &s));
  EXPECT(std::strcmp(s, "CUDA_ERROR_INVALID_CONTEXT") == 0);
  CHECK(cuGetErrorString(CUDA_ERROR_NOT_FOUND, &s));
  EXPECT(s != nullptr && s[0] != '\0');
  EXPECT_RESULT(cuGetErrorName(static_cast<CUresult>(12345), &s), CUDA_ERROR_INVALID_VALUE);
  EXPECT_RESULT(cuGetErrorString(static_cast<CUresult>(12345), &s), CUDA_ERROR_INVALID_VALUE);

  // A handle phos never gave out.
  int dummy = 0;
  void* args[] = {&dummy};
  CUfunction bogus = reinterpret_cast<CUfunction>(&dummy);
  EXPECT_RESULT(cuLaunchKernel(bogus, 1, 1, 1, 1, 1, 1, 0, nullptr, args, nullptr), CUDA_ERROR_INVALID_HANDLE);
  CUfunction f = nullptr;
  EXPECT_RESULT(cuModuleGetFunction(&f, reinterpret_cast<CUmodule>(&dummy), "saxpy"), CUDA_ERROR_INVALID_HANDLE);
  // Bytes that are no fatbin, cubin or PTX.
  CUmodule bad = nullptr;
  EXPECT_RESULT(cuModuleLoadData(&bad, "this is not a module image"), CUDA_ERROR_INVALID_IMAGE);
  std::vector<unsigned char> junk(4096);
  for (auto& b : junk) b = static_cast<unsigned char>(1 + g_rng() % 255);
  junk.back() = 0;
  EXPECT_RESULT(cuModuleLoadData(&bad, junk.data()), CUDA_ERROR_INVALID_IMAGE);
  EXPECT_RESULT(cuModuleLoad(&bad, "/nonexistent/phos/module.fatbin"), CUDA_ERROR_FILE_NOT_FOUND);
  // A function of an unloaded module is a stale handle.
  CUmodule second = nullptr;
  CHECK(cuModuleLoadData(&second, kDriverKernelsPtx));
  CHECK(cuModuleGetFunction(&f, second, "bump"));
  CHECK(cuModuleUnload(second));
  EXPECT_RESULT(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, nullptr, args, nullptr), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_RESULT(cuModuleUnload(second), CUDA_ERROR_INVALID_HANDLE);
  (void)mod;
  return 0;
}

int Contexts(CUdevice dev, CUcontext primary) {
  CUcontext cur = nullptr;
  CHECK(cuCtxGetCurrent(&cur));
  EXPECT(cur == primary);
  CUdevice d = -1;
  CHECK(cuCtxGetDevice(&d));
  EXPECT(d == dev);
  unsigned api = 0;
  CHECK(cuCtxGetApiVersion(primary, &api));
  EXPECT(api > 0);
  int least = 1, greatest = 1;
  CHECK(cuCtxGetStreamPriorityRange(&least, &greatest));
  EXPECT(greatest <= least);
  size_t stack = 0;
  CHECK(cuCtxGetLimit(&stack, CU_LIMIT_STACK_SIZE));
  EXPECT(stack > 0);
  CHECK(cuCtxSetFlags(CU_CTX_SCHED_BLOCKING_SYNC));
  unsigned flags = 0;
  CHECK(cuCtxGetFlags(&flags));
  EXPECT(flags == CU_CTX_SCHED_BLOCKING_SYNC);
  CHECK(cuCtxSetFlags(0));
  CUcontext created = nullptr;
  CHECK(cuCtxCreate(&created, nullptr, 0, dev));  // pushed: now current
  unsigned long long id_created = 0, id_primary = 0;
  CHECK(cuCtxGetId(created, &id_created));
  CHECK(cuCtxGetId(primary, &id_primary));
  EXPECT(id_created != id_primary);
  EXPECT(created != nullptr && created != primary);
  CHECK(cuCtxGetCurrent(&cur));
  EXPECT(cur == created);
  // A stream belongs to the context it was created in; the special handles
  // answer the current context.
  CUstream in_created = nullptr;
  CHECK(cuStreamCreateWithPriority(&in_created, CU_STREAM_NON_BLOCKING, greatest));
  CUcontext of_stream = nullptr;
  CHECK(cuStreamGetCtx(in_created, &of_stream));
  EXPECT(of_stream == created);
  CUgreenCtx green = reinterpret_cast<CUgreenCtx>(1);
  CHECK(cuStreamGetCtx_v2(in_created, &of_stream, &green));
  EXPECT(of_stream == created && green == nullptr);
  unsigned stream_flags = 0;
  CHECK(cuStreamGetFlags(in_created, &stream_flags));
  EXPECT(stream_flags == CU_STREAM_NON_BLOCKING);
  int stream_priority = 1;
  CHECK(cuStreamGetPriority(in_created, &stream_priority));
  EXPECT(stream_priority == greatest);
  CUdevice stream_dev = -1;
  CHECK(cuStreamGetDevice(in_created, &stream_dev));
  EXPECT(stream_dev == dev);
  unsigned long long stream_id = 0, legacy_id = 0;
  CHECK(cuStreamGetId(in_created, &stream_id));
  CHECK(cuStreamGetId(CU_STREAM_LEGACY, &legacy_id));
  EXPECT(stream_id != legacy_id);
  EXPECT_RESULT(cuStreamGetCtx(in_created, nullptr), CUDA_ERROR_INVALID_VALUE);
  // Contexts alias one session: memory from one is usable in the other.
  CUdeviceptr p = 0;
  CHECK(cuMemAlloc(&p, 64));
  CHECK(cuCtxPopCurrent(&cur));
  EXPECT(cur == created);
  CHECK(cuCtxGetCurrent(&cur));
  EXPECT(cur == primary);
  CHECK(cuStreamGetCtx(in_created, &of_stream));
  EXPECT(of_stream == created);
  for (CUstream special : {static_cast<CUstream>(nullptr), CU_STREAM_LEGACY, CU_STREAM_PER_THREAD}) {
    CHECK(cuStreamGetCtx(special, &of_stream));
    EXPECT(of_stream == primary);
  }
  CHECK(cuStreamDestroy(in_created));
  CHECK(cuMemsetD32(p, 7, 16));
  CHECK(cuCtxPushCurrent(created));
  unsigned got[16] = {};
  CHECK(cuMemcpyDtoH(got, p, sizeof got));
  for (unsigned v : got) EXPECT(v == 7u);
  CHECK(cuMemFree(p));
  CHECK(cuCtxPopCurrent(nullptr));
  CHECK(cuCtxDestroy(created));
  EXPECT_RESULT(cuCtxPushCurrent(created), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_RESULT(cuCtxDestroy(primary), CUDA_ERROR_INVALID_CONTEXT);
  // Pop the primary: no context, then calls that need one fail.
  CHECK(cuCtxPopCurrent(&cur));
  EXPECT(cur == primary);
  EXPECT_RESULT(cuCtxPopCurrent(&cur), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_RESULT(cuMemAlloc(&p, 16), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_RESULT(cuCtxSynchronize(), CUDA_ERROR_INVALID_CONTEXT);
  CHECK(cuCtxSetCurrent(primary));

  // The stack is per thread: a new thread starts with no context.
  CUresult no_ctx = CUDA_SUCCESS, got_ctx = CUDA_ERROR_UNKNOWN;
  CUcontext seen = reinterpret_cast<CUcontext>(1);
  std::thread t([&] {
    cuCtxGetCurrent(&seen);
    CUdeviceptr q = 0;
    no_ctx = cuMemAlloc(&q, 16);
    if (cuCtxSetCurrent(primary) == CUDA_SUCCESS && cuMemAlloc(&q, 16) == CUDA_SUCCESS) got_ctx = cuMemFree(q);
  });
  t.join();
  EXPECT(seen == nullptr);
  EXPECT_RESULT(no_ctx, CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_RESULT(got_ctx, CUDA_SUCCESS);
  return 0;
}

std::vector<char> ReadFile(const char* path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// Context-independent loading (cuLibrary* / cuKernel*: numba-cuda, and
// CUDA 13's own runtime): the same kernels through a library.
// Two PTX modules for the JIT linker: a kernel that calls an external
// function, and that function.
const char* const kCallerPtx = R"(
.version 8.0
.target sm_90
.address_size 64
.extern .func (.param .b32 func_retval0) twice_plus_one(.param .b32 x);
.visible .entry apply_twice_plus_one(.param .u64 out, .param .u32 n)
{
  .reg .pred %p<2>;
  .reg .b32 %r<8>;
  .reg .b64 %rd<5>;
  ld.param.u64 %rd1, [out];
  ld.param.u32 %r1, [n];
  mov.u32 %r2, %tid.x;
  mov.u32 %r3, %ctaid.x;
  mov.u32 %r4, %ntid.x;
  mad.lo.u32 %r5, %r3, %r4, %r2;
  setp.ge.u32 %p1, %r5, %r1;
  @%p1 bra $L_done;
  {
  .param .b32 param0;
  st.param.b32 [param0+0], %r5;
  .param .b32 retval0;
  call.uni (retval0), twice_plus_one, (param0);
  ld.param.b32 %r6, [retval0+0];
  }
  cvta.to.global.u64 %rd2, %rd1;
  mul.wide.u32 %rd3, %r5, 4;
  add.u64 %rd4, %rd2, %rd3;
  st.global.u32 [%rd4], %r6;
$L_done:
  ret;
}
)";
const char* const kCalleePtx = R"(
.version 8.0
.target sm_90
.address_size 64
.visible .func (.param .b32 func_retval0) twice_plus_one(.param .b32 x)
{
  .reg .b32 %r<3>;
  ld.param.u32 %r1, [x];
  mad.lo.u32 %r2, %r1, 2, 1;
  st.param.b32 [func_retval0], %r2;
  ret;
}
)";

int Libraries(const char* fatbin_path, const char* other_gpu_fatbin_path) {
  // The loading mode the runtime asks for: LAZY unless CUDA_MODULE_LOADING=EAGER.
  CUmoduleLoadingMode loading;
  CHECK(cuModuleGetLoadingMode(&loading));
  const char* env_loading = std::getenv("CUDA_MODULE_LOADING");
  EXPECT(loading == (env_loading != nullptr && std::strcmp(env_loading, "EAGER") == 0 ? CU_MODULE_EAGER_LOADING
                                                                                       : CU_MODULE_LAZY_LOADING));
  EXPECT_RESULT(cuModuleGetLoadingMode(nullptr), CUDA_ERROR_INVALID_VALUE);
  CUlibrary lib = nullptr;
  CHECK(cuLibraryLoadData(&lib, kDriverKernelsPtx, nullptr, nullptr, 0, nullptr, nullptr, 0));
  CUmodule mod = nullptr;
  CHECK(cuLibraryGetModule(&mod, lib));
  RUN(RunKernels(mod, "a library's module"));
  CUkernel k = nullptr;
  CHECK(cuLibraryGetKernel(&k, lib, "saxpy"));
  CUfunction f = nullptr;
  CHECK(cuKernelGetFunction(&f, k));
  EXPECT(f != nullptr);
  const char* kname = nullptr;
  CHECK(cuKernelGetName(&kname, k));
  EXPECT(kname != nullptr && std::strcmp(kname, "saxpy") == 0);
  const char* fname = nullptr;
  CHECK(cuFuncGetName(&fname, f));
  EXPECT(fname != nullptr && std::strcmp(fname, "saxpy") == 0);
  size_t foff = 0, fsize = 0;
  CHECK(cuFuncGetParamInfo(f, 1, &foff, &fsize));
  EXPECT(foff == 4 && fsize == 4);
  CUmodule fmod = nullptr;
  CHECK(cuFuncGetModule(&fmod, f));
  EXPECT(fmod == mod);
  CUlibrary owner = nullptr;
  CHECK(cuKernelGetLibrary(&owner, k));
  EXPECT(owner == lib);
  int max_threads = 0;
  CHECK(cuKernelGetAttribute(&max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, k, 0));
  EXPECT(max_threads > 0);
  int min_grid = 0, best_block = 0;
  CHECK(cuOccupancyMaxPotentialBlockSize(&min_grid, &best_block, f, nullptr, 0, 0));
  EXPECT(best_block > 0 && best_block % 32 == 0 && best_block <= max_threads && min_grid > 0);
  CHECK(cuOccupancyMaxPotentialBlockSize(&min_grid, &best_block, f, [](int b) -> size_t { return b * 4; }, 0, 100));
  EXPECT(best_block > 0 && best_block <= 100 && min_grid > 0);
  // Dynamic shared memory per block that keeps N blocks resident: shrinks as
  // N grows, 0 once N blocks cannot fit at all.
  size_t smem1 = 0, smem8 = 0, smem_many = 1;
  CHECK(cuOccupancyAvailableDynamicSMemPerBlock(&smem1, f, 1, 128));
  CHECK(cuOccupancyAvailableDynamicSMemPerBlock(&smem8, f, 8, 128));
  CHECK(cuOccupancyAvailableDynamicSMemPerBlock(&smem_many, f, 1000, 128));
  EXPECT(smem1 > smem8 && smem8 > 0 && smem_many == 0);
  EXPECT_RESULT(cuOccupancyAvailableDynamicSMemPerBlock(&smem1, f, 0, 128), CUDA_ERROR_INVALID_VALUE);
  CHECK(cuProfilerStart());  // accepted: no profiler attaches under phos
  CHECK(cuProfilerStop());
  size_t off = 0, size = 0;
  CHECK(cuKernelGetParamInfo(k, 2, &off, &size));  // saxpy(int n, float a, const float* x, float* y)
  EXPECT(off == 8 && size == 8);
  CUdeviceptr g = 0;
  size_t gbytes = 0;
  CHECK(cuLibraryGetGlobal(&g, &gbytes, lib, "counters"));
  EXPECT(g != 0 && gbytes == 4 * sizeof(int));
  // The CUkernel itself launches (CUDA accepts it where a CUfunction goes).
  int n = 300;
  float a = 3.0f;
  std::vector<float> x = RandomFloats(n), y = RandomFloats(n), out(n);
  CUdeviceptr dx = 0, dy = 0;
  CHECK(cuMemAlloc(&dx, n * sizeof(float)));
  CHECK(cuMemAlloc(&dy, n * sizeof(float)));
  CHECK(cuMemcpyHtoD(dx, x.data(), n * sizeof(float)));
  CHECK(cuMemcpyHtoD(dy, y.data(), n * sizeof(float)));
  void* args[] = {&n, &a, &dx, &dy};
  CHECK(cuLaunchKernel(reinterpret_cast<CUfunction>(k), (n + 127) / 128, 1, 1, 128, 1, 1, 0, nullptr, args, nullptr));
  CHECK(cuMemcpyDtoH(out.data(), dy, n * sizeof(float)));
  for (int i = 0; i < n; ++i) EXPECT(Close(out[i], a * x[i] + y[i]));
  // What the driver says about these addresses (CuPy, numba, cuda.core ask).
  {
    unsigned mem_type = 0;
    CHECK(cuPointerGetAttribute(&mem_type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, dx + 16));
    EXPECT(mem_type == CU_MEMORYTYPE_DEVICE);
    int ordinal = -1;
    CHECK(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, dx));
    EXPECT(ordinal == 0);
    CUdeviceptr base = 0;
    size_t range = 0;
    CHECK(cuMemGetAddressRange(&base, &range, dx + 16));
    EXPECT(base == dx && range >= n * sizeof(float));
    CUpointer_attribute which[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                   CU_POINTER_ATTRIBUTE_IS_MANAGED};
    unsigned t2 = 0;
    CUdeviceptr start = 0;
    bool managed = true;
    void* vals[] = {&t2, &start, &managed};
    CHECK(cuPointerGetAttributes(3, which, vals, dy + 4));
    EXPECT(t2 == CU_MEMORYTYPE_DEVICE && start == dy && !managed);
    int on_stack = 0;
    t2 = 77;
    CHECK(cuPointerGetAttributes(3, which, vals, reinterpret_cast<CUdeviceptr>(&on_stack)));
    EXPECT(t2 == 0);  // not memory CUDA knows
    EXPECT_RESULT(cuPointerGetAttribute(&mem_type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                        reinterpret_cast<CUdeviceptr>(&on_stack)),
                  CUDA_ERROR_INVALID_VALUE);
  }
  CHECK(cuMemFree(dx));
  CHECK(cuMemFree(dy));
  CUkernel none = nullptr;
  EXPECT_RESULT(cuLibraryGetKernel(&none, lib, "no_such_kernel"), CUDA_ERROR_NOT_FOUND);
  CHECK(cuLibraryUnload(lib));
  if (fatbin_path != nullptr) {
    CHECK(cuLibraryLoadFromFile(&lib, fatbin_path, nullptr, nullptr, 0, nullptr, nullptr, 0));
    CHECK(cuLibraryGetModule(&mod, lib));
    RUN(RunKernels(mod, "a library from a fatbin file"));
    CHECK(cuLibraryUnload(lib));
  }
  if (other_gpu_fatbin_path != nullptr) {
    // Code for another GPU only (sm_80 SASS, on an sm_90 device): a module
    // load fails, a library (context independent) loads and its kernels
    // answer NO_BINARY_FOR_GPU — CUDA's runtime loads every fatbin of a
    // library such as cuSPARSE and stops at a load that fails.
    std::vector<char> other = ReadFile(other_gpu_fatbin_path);
    EXPECT(!other.empty());
    int major = 0;
    CUdevice dev = 0;
    CHECK(cuCtxGetDevice(&dev));
    CHECK(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
    if (major != 8) {
      CUmodule none_mod = nullptr;
      EXPECT_RESULT(cuModuleLoadData(&none_mod, other.data()), CUDA_ERROR_NO_BINARY_FOR_GPU);
      CHECK(cuLibraryLoadData(&lib, other.data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
      EXPECT_RESULT(cuLibraryGetKernel(&none, lib, "saxpy"), CUDA_ERROR_NO_BINARY_FOR_GPU);
      CUdeviceptr g = 0;
      size_t gbytes = 0;
      EXPECT_RESULT(cuLibraryGetGlobal(&g, &gbytes, lib, "anything"), CUDA_ERROR_NO_BINARY_FOR_GPU);
      CHECK(cuLibraryUnload(lib));
      std::printf("driver_api: a library for another GPU loads, its kernels answer NO_BINARY_FOR_GPU\n");
    }
  }
  std::printf("driver_api: libraries OK\n");
  return 0;
}

}  // namespace

// `driver_api --runtime-first`: the runtime API is used before cuInit, so
// (as the CUDA runtime makes the primary context current) driver calls work
// without the app setting a context.
int RuntimeFirst() {
  void* rt = nullptr;
  if (cudaMalloc(&rt, 256) != cudaSuccess) return 2;
  // The runtime's first call initialised the driver, as CUDA's runtime does:
  // no cuInit needed (PyTorch asks cuDevicePrimaryCtxGetState so).
  unsigned flags = 99;
  int active = -1;
  CHECK(cuDevicePrimaryCtxGetState(0, &flags, &active));
  EXPECT(active == 1);
  CHECK(cuInit(0));
  CUcontext cur = nullptr;
  CHECK(cuCtxGetCurrent(&cur));
  EXPECT(cur != nullptr);
  CUdevice dev = -1;
  CHECK(cuDeviceGet(&dev, 0));
  CUcontext primary = nullptr;
  CHECK(cuDevicePrimaryCtxRetain(&primary, dev));
  EXPECT(primary == cur);
  // Memory of either API is one space: the runtime's buffer, set by the driver.
  CHECK(cuMemsetD32(reinterpret_cast<CUdeviceptr>(rt), 0x01020304u, 64));
  unsigned got[64] = {};
  if (cudaMemcpy(got, rt, sizeof got, cudaMemcpyDeviceToHost) != cudaSuccess) return 2;
  for (unsigned v : got) EXPECT(v == 0x01020304u);
  EXPECT_RESULT(cuModuleLoadData(nullptr, kDriverKernelsPtx), CUDA_ERROR_INVALID_VALUE);
  CHECK(cuDevicePrimaryCtxRelease(dev));
  if (cudaFree(rt) != cudaSuccess) return 2;
  std::printf("driver_api: runtime first OK\n");
  return 0;
}

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--runtime-first") == 0) return RuntimeFirst();
  const auto seed = static_cast<unsigned>(std::chrono::steady_clock::now().time_since_epoch().count());
  g_rng.seed(seed);
  std::printf("driver_api: seed %u\n", seed);

  int count = 0;
  EXPECT_RESULT(cuDeviceGetCount(&count), CUDA_ERROR_NOT_INITIALIZED);
  EXPECT_RESULT(cuInit(1), CUDA_ERROR_INVALID_VALUE);
  CHECK(cuInit(0));
  int version = 0;
  CHECK(cuDriverGetVersion(&version));
  EXPECT(version >= 12000);
  CHECK(cuDeviceGetCount(&count));
  EXPECT(count >= 1);
  CUdevice dev = -1;
  CHECK(cuDeviceGet(&dev, 0));
  CUdevice other = -1;
  EXPECT_RESULT(cuDeviceGet(&other, count), CUDA_ERROR_INVALID_DEVICE);
  char name[256] = {};
  CHECK(cuDeviceGetName(name, sizeof name, dev));
  EXPECT(name[0] != '\0');
  size_t total = 0;
  CHECK(cuDeviceTotalMem(&total, dev));
  EXPECT(total > 0);
  int warp = 0, major = 0, minor = 0, ccmajor = 0, ccminor = 0;
  CHECK(cuDeviceGetAttribute(&warp, CU_DEVICE_ATTRIBUTE_WARP_SIZE, dev));
  EXPECT(warp == 32);
  CHECK(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
  CHECK(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
  CHECK(cuDeviceComputeCapability(&ccmajor, &ccminor, dev));
  EXPECT(major >= 7 && ccmajor == major && ccminor == minor);
  int answered = 0;
  for (const auto& e : phos::interposer::kCuDeviceAttributes) {
    int v = 0;
    CUresult r = cuDeviceGetAttribute(&v, static_cast<CUdevice_attribute>(e.value), dev);
    if (r != CUDA_SUCCESS) {
      std::printf("driver_api: line %d: cuDeviceGetAttribute(%s = %d) failed: %s\n", __LINE__, e.name, e.value, Name(r));
      return 1;
    }
    ++answered;
  }
  int junk = 0;
  EXPECT_RESULT(cuDeviceGetAttribute(&junk, static_cast<CUdevice_attribute>(0), dev), CUDA_ERROR_INVALID_VALUE);
  // A log callback is accepted (PyTorch registers one at start).
  CUlogsCallbackHandle log_handle = nullptr;
  CHECK(cuLogsRegisterCallback([](void*, CUlogLevel, char*, size_t) {}, nullptr, &log_handle));
  CHECK(cuLogsUnregisterCallback(log_handle));
  std::printf("driver_api: %d device attributes answered\n", answered);
  char bus_id[32] = {};
  CHECK(cuDeviceGetPCIBusId(bus_id, sizeof bus_id, dev));
  CUdevice by_bus = -1;
  CHECK(cuDeviceGetByPCIBusId(&by_bus, bus_id));
  EXPECT(by_bus == dev);
  CUuuid uuid{};
  CHECK(cuDeviceGetUuid(&uuid, dev));
  bool nonzero = false;
  for (char b : uuid.bytes) nonzero = nonzero || b != 0;
  EXPECT(nonzero);
  std::printf("driver_api: device %s, sm_%d%d, %zu MiB\n", name, major, minor, total >> 20);

  // No context is current yet.
  CUcontext cur = reinterpret_cast<CUcontext>(1);
  CHECK(cuCtxGetCurrent(&cur));
  EXPECT(cur == nullptr);
  CUdeviceptr p = 0;
  EXPECT_RESULT(cuMemAlloc(&p, 16), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_RESULT(cuCtxPopCurrent(&cur), CUDA_ERROR_INVALID_CONTEXT);

  CUcontext primary = nullptr;
  CHECK(cuDevicePrimaryCtxRetain(&primary, dev));
  unsigned flags = 0;
  int active = 0;
  CHECK(cuDevicePrimaryCtxGetState(dev, &flags, &active));
  EXPECT(active == 1);
  CHECK(cuCtxSetCurrent(primary));
  RUN(Contexts(dev, primary));

  size_t free_b = 0, total_b = 0;
  CHECK(cuMemGetInfo(&free_b, &total_b));
  EXPECT(total_b > 0 && free_b <= total_b);
  RUN(RoundTrip(16));
  RUN(RoundTrip(8u << 20));
  RUN(Memsets());
  RUN(StreamOrderedAllocation(dev));
  RUN(HostFunctions());
  RUN(Graphs());
  void* pinned = nullptr;
  CHECK(cuMemAllocHost(&pinned, 1 << 16));
  std::memset(pinned, 0x5a, 1 << 16);
  CHECK(cuMemFreeHost(pinned));
  {
    // Mapped pinned memory: with unified addressing its device pointer is
    // its host pointer.
    int can_map = 0;
    CHECK(cuDeviceGetAttribute(&can_map, CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, 0));
    void* mapped = nullptr;
    CHECK(cuMemHostAlloc(&mapped, 4096, CU_MEMHOSTALLOC_DEVICEMAP));
    CUdeviceptr d = 0;
    const CUresult r = cuMemHostGetDevicePointer(&d, mapped, 0);
    EXPECT(can_map ? r == CUDA_SUCCESS && d == reinterpret_cast<CUdeviceptr>(mapped) : r == CUDA_ERROR_NOT_SUPPORTED);
    CHECK(cuMemFreeHost(mapped));
  }
  {
    // The app's own memory, page-locked (numba's cuda.pinned).
    std::vector<unsigned> mine(4096, 0xabcd1234u);
    CHECK(cuMemHostRegister(mine.data(), mine.size() * sizeof(unsigned), CU_MEMHOSTREGISTER_PORTABLE));
    unsigned hflags = 99;
    CHECK(cuMemHostGetFlags(&hflags, mine.data()));
    EXPECT((hflags & CU_MEMHOSTREGISTER_PORTABLE) != 0);
    EXPECT_RESULT(cuMemHostRegister(mine.data(), 64, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
    CUdeviceptr dm = 0;
    CHECK(cuMemAlloc(&dm, mine.size() * sizeof(unsigned)));
    CHECK(cuMemcpyHtoD(dm, mine.data(), mine.size() * sizeof(unsigned)));
    std::vector<unsigned> back(mine.size(), 0);
    CHECK(cuMemcpyDtoH(back.data(), dm, back.size() * sizeof(unsigned)));
    EXPECT(back == mine);
    int can_map = 1;
    CHECK(cuDeviceGetAttribute(&can_map, CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, 0));
    CUdeviceptr alias = 0;
    CUresult r = cuMemHostGetDevicePointer(&alias, mine.data(), 0);
    // Under phos the app's own (registered) pages cannot be mapped for
    // kernels — only cuMemHostAlloc memory can (docs/interposer.md "Mapped
    // pinned memory"); a GPU maps both.
    const bool under_phos = dlsym(RTLD_DEFAULT, "phosGetHostCopyStats") != nullptr;
    EXPECT(can_map && !under_phos ? r == CUDA_SUCCESS : r == CUDA_ERROR_NOT_SUPPORTED);
    CHECK(cuMemFree(dm));
    CHECK(cuMemHostUnregister(mine.data()));
    EXPECT_RESULT(cuMemHostUnregister(mine.data()), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
  }

  // cuModuleLoadDataEx with JIT log options: the logs come back empty.
  char error_log[64], info_log[64];
  std::memset(error_log, 'x', sizeof error_log);
  std::memset(info_log, 'x', sizeof info_log);
  CUjit_option jit_options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, CU_JIT_INFO_LOG_BUFFER,
                                CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES};
  void* jit_values[] = {error_log, reinterpret_cast<void*>(sizeof error_log), info_log,
                        reinterpret_cast<void*>(sizeof info_log)};
  CUmodule ex = nullptr;
  CHECK(cuModuleLoadDataEx(&ex, kDriverKernelsPtx, 4, jit_options, jit_values));
  EXPECT(error_log[0] == '\0' && info_log[0] == '\0');
  RUN(RunKernels(ex, "cuModuleLoadDataEx"));
  CHECK(cuModuleUnload(ex));

  {
    // The JIT linker with one PTX input: its output loads as a module
    // (docs/interposer.md "The JIT linker").
    CUjit_option link_options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    char link_log[256];
    void* link_values[] = {link_log, reinterpret_cast<void*>(sizeof link_log)};
    CUlinkState link = nullptr;
    CHECK(cuLinkCreate(2, link_options, link_values, &link));
    CHECK(cuLinkAddData(link, CU_JIT_INPUT_PTX, const_cast<char*>(kDriverKernelsPtx), std::strlen(kDriverKernelsPtx),
                        "driver_kernels.ptx", 0, nullptr, nullptr));
    void* linked = nullptr;
    size_t linked_bytes = 0;
    CHECK(cuLinkComplete(link, &linked, &linked_bytes));
    EXPECT(linked != nullptr && linked_bytes > 0);
    CUmodule from_link = nullptr;
    CHECK(cuModuleLoadData(&from_link, linked));
    CHECK(cuLinkDestroy(link));  // the module stays
    RUN(RunKernels(from_link, "a cuLink of PTX"));
    CHECK(cuModuleUnload(from_link));
    EXPECT_RESULT(cuLinkDestroy(link), CUDA_ERROR_INVALID_HANDLE);
    // Two PTX inputs, a kernel calling a function of the other: linked
    // (under phos as PTX, docs/ptx-ir.md "Linking PTX"), loaded and run.
    CHECK(cuLinkCreate(2, link_options, link_values, &link));
    CHECK(cuLinkAddData(link, CU_JIT_INPUT_PTX, const_cast<char*>(kCallerPtx), std::strlen(kCallerPtx) + 1,
                        "caller.ptx", 0, nullptr, nullptr));
    CHECK(cuLinkAddData(link, CU_JIT_INPUT_PTX, const_cast<char*>(kCalleePtx), std::strlen(kCalleePtx) + 1,
                        "callee.ptx", 0, nullptr, nullptr));
    CHECK(cuLinkComplete(link, &linked, &linked_bytes));
    CUmodule two = nullptr;
    CHECK(cuModuleLoadData(&two, linked));
    CHECK(cuLinkDestroy(link));
    CUfunction apply = nullptr;
    CHECK(cuModuleGetFunction(&apply, two, "apply_twice_plus_one"));
    unsigned n = 200;
    CUdeviceptr values = 0;
    CHECK(cuMemAlloc(&values, n * sizeof(unsigned)));
    void* apply_args[] = {&values, &n};
    CHECK(cuLaunchKernel(apply, 1, 1, 1, 256, 1, 1, 0, nullptr, apply_args, nullptr));
    std::vector<unsigned> got(n);
    CHECK(cuMemcpyDtoH(got.data(), values, n * sizeof(unsigned)));
    for (unsigned i = 0; i < n; ++i) EXPECT(got[i] == 2 * i + 1);
    CHECK(cuMemFree(values));
    CHECK(cuModuleUnload(two));
    // The same definitions twice: refused under phos with the reason in
    // the app's error log (a GPU's linker refuses them too, its own way).
    if (dlsym(RTLD_DEFAULT, "phosGetHostCopyStats") != nullptr) {
      CHECK(cuLinkCreate(2, link_options, link_values, &link));
      CHECK(cuLinkAddData(link, CU_JIT_INPUT_PTX, const_cast<char*>(kDriverKernelsPtx),
                          std::strlen(kDriverKernelsPtx) + 1, "a.ptx", 0, nullptr, nullptr));
      CHECK(cuLinkAddData(link, CU_JIT_INPUT_PTX, const_cast<char*>(kDriverKernelsPtx),
                          std::strlen(kDriverKernelsPtx) + 1, "b.ptx", 0, nullptr, nullptr));
      EXPECT_RESULT(cuLinkComplete(link, &linked, &linked_bytes), CUDA_ERROR_INVALID_IMAGE);
      EXPECT(std::strstr(link_log, "is defined in input 0 and in input 1") != nullptr);
      CHECK(cuLinkDestroy(link));
    }
  }

  CUmodule mod = nullptr;
  CHECK(cuModuleLoadData(&mod, kDriverKernelsPtx));
  RUN(RunKernels(mod, "PTX text"));
  RUN(StreamsAndEvents(mod));
  RUN(EntryPoints(mod));
  RUN(ErrorPaths(mod));
  CHECK(cuModuleUnload(mod));

  if (argc > 1) {  // the nvcc -fatbin image of the same kernels
    std::vector<char> fatbin = ReadFile(argv[1]);
    EXPECT(!fatbin.empty());
    CHECK(cuModuleLoadData(&mod, fatbin.data()));
    RUN(RunKernels(mod, "a fatbin in memory"));
    CHECK(cuModuleUnload(mod));
    CHECK(cuModuleLoadFatBinary(&mod, fatbin.data()));
    RUN(RunKernels(mod, "cuModuleLoadFatBinary"));
    CHECK(cuModuleUnload(mod));
    CHECK(cuModuleLoad(&mod, argv[1]));
    RUN(RunKernels(mod, "a fatbin file"));
    CHECK(cuModuleUnload(mod));
  }
  RUN(Libraries(argc > 1 ? argv[1] : nullptr, argc > 2 ? argv[2] : nullptr));

  CHECK(cuCtxSynchronize());
  CHECK(cuDevicePrimaryCtxRelease(dev));
  std::printf("driver_api: OK\n");
  return 0;
}
