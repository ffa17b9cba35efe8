// CUDA graphs under phos (docs/interposer.md "CUDA graphs"), checked
// against CPU references on random data: stream capture (one stream, and a
// fork/join over two streams through events), the capture queries, a
// capture invalidated by a synchronisation, explicit graphs (kernel,
// memset, memcpy, host, empty, child-graph and event nodes with edges),
// relaunches that read host memory anew, kernel-node parameter updates on
// an executable graph, cudaGraphExecUpdate, a graph launched into a
// capture, and conditional nodes (if, if/else, while, switch; their values
// set by kernels with cudaGraphSetConditional or by the handle's default;
// bodies built explicitly and by capturing into them).
#define PHOS_PROGRAM_NAME "graphs"
#include <cuda.h>  // the driver's generic node form, through cudaGetDriverEntryPointByVersion
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "program_checks.h"

namespace {

__global__ void scale_add(const int* in, int* out, int n, int mul, int add) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * mul + add;
}

__global__ void add_arrays(const int* a, const int* b, int* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}

// Conditional nodes' kernels: the value comes from device data.
__global__ void set_if_positive(cudaGraphConditionalHandle h, const int* v) {
  if (threadIdx.x == 0 && blockIdx.x == 0) cudaGraphSetConditional(h, *v > 0 ? 1u : 0u);
}
__global__ void set_value(cudaGraphConditionalHandle h, const int* v) {
  if (threadIdx.x == 0 && blockIdx.x == 0) cudaGraphSetConditional(h, static_cast<unsigned>(*v));
}
// A while body: one step of a countdown; the loop goes on while it is > 0.
__global__ void count_down(cudaGraphConditionalHandle h, int* counter, int* acc, const int* in, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) acc[i] += in[i];
  __syncthreads();
  if (i == 0) {
    int left = --*counter;
    cudaGraphSetConditional(h, left > 0 ? 1u : 0u);
  }
}

constexpr int kN = 3000;
constexpr int kBlocks = (kN + 255) / 256;

std::mt19937 g_rng(20261126);

void Randomise(int* v, int n) {
  for (int i = 0; i < n; ++i) v[i] = static_cast<int>(g_rng() % 100000);
}

struct HostCount {
  int calls = 0;
  const int* seen = nullptr;  // pinned memory the node reads
  long long sum = 0;
};
void CUDART_CB CountAndSum(void* p) {
  auto* h = static_cast<HostCount*>(p);
  ++h->calls;
  h->sum = 0;
  for (int i = 0; i < kN; ++i) h->sum += h->seen[i];
}

// One stream captured: H2D from pinned memory, two kernels, a memset, a
// host function, D2H into pinned memory. Relaunched with new input: the
// copies read the host memory when the graph runs.
int CaptureOneStream() {
  int *in_h = nullptr, *out_h = nullptr;
  CHECK(cudaMallocHost(&in_h, kN * sizeof(int)));
  CHECK(cudaMallocHost(&out_h, kN * sizeof(int)));
  int *a = nullptr, *b = nullptr, *pad = nullptr;
  CHECK(cudaMalloc(&a, kN * sizeof(int)));
  CHECK(cudaMalloc(&b, kN * sizeof(int)));
  CHECK(cudaMalloc(&pad, 4096));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  HostCount host{0, out_h, 0};

  cudaStreamCaptureStatus status = cudaStreamCaptureStatusActive;
  CHECK(cudaStreamIsCapturing(s, &status));
  EXPECT(status == cudaStreamCaptureStatusNone);
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CHECK(cudaStreamIsCapturing(s, &status));
  EXPECT(status == cudaStreamCaptureStatusActive);
  CHECK(cudaMemcpyAsync(a, in_h, kN * sizeof(int), cudaMemcpyHostToDevice, s));
  scale_add<<<kBlocks, 256, 0, s>>>(a, b, kN, 3, 7);
  CHECK(cudaGetLastError());
  CHECK(cudaMemsetAsync(pad, 0x11, 4096, s));
  scale_add<<<kBlocks, 256, 0, s>>>(b, b, kN, 2, -1);
  CHECK(cudaMemcpyAsync(out_h, b, kN * sizeof(int), cudaMemcpyDeviceToHost, s));
  CHECK(cudaLaunchHostFunc(s, CountAndSum, &host));
  unsigned long long id = 0;
  const cudaGraphNode_t* deps = nullptr;
  size_t ndeps = 0;
  cudaGraph_t capturing = nullptr;
  CHECK(cudaStreamGetCaptureInfo(s, &status, &id, &capturing, &deps, nullptr, &ndeps));
  EXPECT(status == cudaStreamCaptureStatusActive && id != 0 && capturing != nullptr && ndeps == 1);
  cudaGraph_t graph = nullptr;
  CHECK(cudaStreamEndCapture(s, &graph));
  EXPECT(graph != nullptr);
  EXPECT(host.calls == 0);  // captured, not run
  size_t nodes = 0;
  CHECK(cudaGraphGetNodes(graph, nullptr, &nodes));
  EXPECT(nodes == 6);
  cudaGraphExec_t exec = nullptr;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int launch = 0; launch < 3; ++launch) {
    Randomise(in_h, kN);
    std::vector<int> in(in_h, in_h + kN);
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    long long want_sum = 0;
    for (int i = 0; i < kN; ++i) {
      const int want = (in[i] * 3 + 7) * 2 - 1;
      EXPECT(out_h[i] == want);
      want_sum += want;
    }
    EXPECT(host.calls == launch + 1 && host.sum == want_sum);
  }
  std::vector<unsigned char> padding(4096);
  CHECK(cudaMemcpy(padding.data(), pad, 4096, cudaMemcpyDeviceToHost));
  for (unsigned char c : padding) EXPECT(c == 0x11);
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(a));
  CHECK(cudaFree(b));
  CHECK(cudaFree(pad));
  CHECK(cudaFreeHost(in_h));
  CHECK(cudaFreeHost(out_h));
  return 0;
}

// Two streams in one capture: s1 forks to s2 through an event and joins it
// back; the branches run in parallel in CUDA, in order under phos.
int CaptureForkJoin() {
  int *x = nullptr, *y = nullptr, *z = nullptr;
  CHECK(cudaMalloc(&x, kN * sizeof(int)));
  CHECK(cudaMalloc(&y, kN * sizeof(int)));
  CHECK(cudaMalloc(&z, kN * sizeof(int)));
  std::vector<int> xs(kN);
  Randomise(xs.data(), kN);
  CHECK(cudaMemcpy(x, xs.data(), kN * sizeof(int), cudaMemcpyHostToDevice));
  cudaStream_t s1, s2;
  CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  cudaEvent_t fork, join;
  CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  CHECK(cudaStreamBeginCapture(s1, cudaStreamCaptureModeThreadLocal));
  CHECK(cudaEventRecord(fork, s1));
  CHECK(cudaStreamWaitEvent(s2, fork, 0));  // s2 joins the capture
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  CHECK(cudaStreamIsCapturing(s2, &status));
  EXPECT(status == cudaStreamCaptureStatusActive);
  scale_add<<<kBlocks, 256, 0, s1>>>(x, y, kN, 5, 0);    // branch 1
  scale_add<<<kBlocks, 256, 0, s2>>>(x, z, kN, 1, 100);  // branch 2
  CHECK(cudaEventRecord(join, s2));
  CHECK(cudaStreamWaitEvent(s1, join, 0));                // joined back
  add_arrays<<<kBlocks, 256, 0, s1>>>(y, z, y, kN);
  cudaGraph_t graph = nullptr;
  EXPECT_ERR(cudaStreamEndCapture(s2, &graph), cudaErrorStreamCaptureUnmatched);  // not the origin
  (void)cudaGetLastError();
  CHECK(cudaStreamEndCapture(s1, &graph));
  CHECK(cudaStreamIsCapturing(s2, &status));
  EXPECT(status == cudaStreamCaptureStatusNone);
  size_t roots = 0;
  CHECK(cudaGraphGetRootNodes(graph, nullptr, &roots));
  EXPECT(roots == 2);  // the two branches
  cudaGraphExec_t exec = nullptr;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CHECK(cudaGraphLaunch(exec, s2));  // any stream
  std::vector<int> out(kN);
  CHECK(cudaMemcpyAsync(out.data(), y, kN * sizeof(int), cudaMemcpyDeviceToHost, s2));
  CHECK(cudaStreamSynchronize(s2));
  for (int i = 0; i < kN; ++i) EXPECT(out[i] == xs[i] * 5 + xs[i] + 100);
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  CHECK(cudaEventDestroy(fork));
  CHECK(cudaEventDestroy(join));
  CHECK(cudaStreamDestroy(s1));
  CHECK(cudaStreamDestroy(s2));
  CHECK(cudaFree(x));
  CHECK(cudaFree(y));
  CHECK(cudaFree(z));
  return 0;
}

// A synchronisation inside a capture invalidates it (CUDA's rule).
int CaptureInvalidated() {
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int* d = nullptr;
  CHECK(cudaMalloc(&d, 256));
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  CHECK(cudaMemsetAsync(d, 1, 256, s));
  EXPECT_ERR(cudaStreamSynchronize(s), cudaErrorStreamCaptureUnsupported);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  CHECK(cudaStreamIsCapturing(s, &status));
  EXPECT(status == cudaStreamCaptureStatusInvalidated);
  cudaGraph_t graph = reinterpret_cast<cudaGraph_t>(1);
  EXPECT_ERR(cudaStreamEndCapture(s, &graph), cudaErrorStreamCaptureInvalidated);
  EXPECT(graph == nullptr);
  (void)cudaGetLastError();
  EXPECT_ERR(cudaStreamBeginCapture(0, cudaStreamCaptureModeGlobal), cudaErrorStreamCaptureUnsupported);
  (void)cudaGetLastError();
  CHECK(cudaStreamSynchronize(s));  // usable again
  CHECK(cudaFree(d));
  CHECK(cudaStreamDestroy(s));
  return 0;
}

// An explicit graph:   memset(acc) --+
//                      kernel(b = a*2+1) --> kernel(acc = b + a) --> memcpy(acc -> host) --> host
// plus an empty node, a child graph (kernel c = a*mul+add) and event nodes.
int ExplicitGraph() {
  int *a = nullptr, *b = nullptr, *acc = nullptr, *c = nullptr;
  CHECK(cudaMalloc(&a, kN * sizeof(int)));
  CHECK(cudaMalloc(&b, kN * sizeof(int)));
  CHECK(cudaMalloc(&acc, kN * sizeof(int)));
  CHECK(cudaMalloc(&c, kN * sizeof(int)));
  std::vector<int> as(kN);
  Randomise(as.data(), kN);
  CHECK(cudaMemcpy(a, as.data(), kN * sizeof(int), cudaMemcpyHostToDevice));
  std::vector<int> out(kN, -1);
  HostCount host{0, nullptr, 0};
  int n = kN, two = 2, one = 1;

  cudaGraph_t graph = nullptr;
  CHECK(cudaGraphCreate(&graph, 0));
  cudaGraphNode_t memset_node, k1, k2, copy, hostn, empty, child_node, rec, wait;
  cudaMemsetParams mp{};
  mp.dst = acc;
  mp.value = 0;
  mp.elementSize = 4;
  mp.width = kN;
  mp.height = 1;
  CHECK(cudaGraphAddMemsetNode(&memset_node, graph, nullptr, 0, &mp));
  void* args1[] = {&a, &b, &n, &two, &one};
  cudaKernelNodeParams kp{};
  kp.func = reinterpret_cast<void*>(scale_add);
  kp.gridDim = dim3(kBlocks);
  kp.blockDim = dim3(256);
  kp.kernelParams = args1;
  CHECK(cudaGraphAddKernelNode(&k1, graph, nullptr, 0, &kp));
  void* args2[] = {&b, &a, &acc, &n};
  cudaKernelNodeParams kp2 = kp;
  kp2.func = reinterpret_cast<void*>(add_arrays);
  kp2.kernelParams = args2;
  const cudaGraphNode_t k2_deps[] = {memset_node, k1};
  CHECK(cudaGraphAddKernelNode(&k2, graph, k2_deps, 2, &kp2));
  CHECK(cudaGraphAddMemcpyNode1D(&copy, graph, &k2, 1, out.data(), acc, kN * sizeof(int), cudaMemcpyDeviceToHost));
  cudaHostNodeParams hp{[](void* p) { ++static_cast<HostCount*>(p)->calls; }, &host};
  CHECK(cudaGraphAddHostNode(&hostn, graph, &copy, 1, &hp));
  CHECK(cudaGraphAddEmptyNode(&empty, graph, nullptr, 0));
  // The child: c = a * 4 + 9.
  cudaGraph_t child = nullptr;
  CHECK(cudaGraphCreate(&child, 0));
  int four = 4, nine = 9;
  void* args3[] = {&a, &c, &n, &four, &nine};
  cudaKernelNodeParams kp3 = kp;
  kp3.kernelParams = args3;
  cudaGraphNode_t ck;
  CHECK(cudaGraphAddKernelNode(&ck, child, nullptr, 0, &kp3));
  CHECK(cudaGraphAddChildGraphNode(&child_node, graph, &empty, 1, child));
  CHECK(cudaGraphDestroy(child));  // the node holds its own copy
  cudaEvent_t ev;
  CHECK(cudaEventCreate(&ev));
  CHECK(cudaGraphAddEventRecordNode(&rec, graph, &child_node, 1, ev));
  CHECK(cudaGraphAddEventWaitNode(&wait, graph, &rec, 1, ev));
  CHECK(cudaGraphAddDependencies(graph, &wait, &copy, nullptr, 1));  // copy also after the child branch
  EXPECT_ERR(cudaGraphAddDependencies(graph, &wait, &copy, nullptr, 1), cudaErrorInvalidValue);  // exists
  (void)cudaGetLastError();
  size_t count = 0;
  CHECK(cudaGraphGetNodes(graph, nullptr, &count));
  EXPECT(count == 9);
  size_t roots = 0;
  CHECK(cudaGraphGetRootNodes(graph, nullptr, &roots));
  EXPECT(roots == 3);
  cudaGraphNodeType type = cudaGraphNodeTypeEmpty;
  CHECK(cudaGraphNodeGetType(child_node, &type));
  EXPECT(type == cudaGraphNodeTypeGraph);
  // Queries: dependencies both ways, edges, parameters, the child graph.
  cudaGraphNode_t got[4] = {};
  size_t ng = 4;
  CHECK(cudaGraphNodeGetDependencies(k2, got, nullptr, &ng));
  EXPECT(ng == 2 && ((got[0] == memset_node && got[1] == k1) || (got[0] == k1 && got[1] == memset_node)));
  ng = 4;
  CHECK(cudaGraphNodeGetDependentNodes(k1, got, nullptr, &ng));
  EXPECT(ng == 1 && got[0] == k2);
  size_t edges = 0;
  CHECK(cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &edges));
  EXPECT(edges == 8);
  cudaHostNodeParams hp_back{};
  CHECK(cudaGraphHostNodeGetParams(hostn, &hp_back));
  EXPECT(hp_back.fn == hp.fn && hp_back.userData == &host);
  cudaMemsetParams mp_back{};
  CHECK(cudaGraphMemsetNodeGetParams(memset_node, &mp_back));
  EXPECT(mp_back.dst == acc && mp_back.width == static_cast<size_t>(kN) && mp_back.elementSize == 4);
  cudaEvent_t ev_back = nullptr;
  CHECK(cudaGraphEventRecordNodeGetEvent(rec, &ev_back));
  EXPECT(ev_back == ev);
  cudaGraph_t inner = nullptr;
  CHECK(cudaGraphChildGraphNodeGetGraph(child_node, &inner));
  size_t inner_nodes = 0;
  CHECK(cudaGraphGetNodes(inner, nullptr, &inner_nodes));
  EXPECT(inner_nodes == 1);
  cudaGraph_t copy_of = nullptr;
  CHECK(cudaGraphClone(&copy_of, graph));
  cudaGraphNode_t k1_in_clone = nullptr;
  CHECK(cudaGraphNodeFindInClone(&k1_in_clone, k1, copy_of));
  CHECK(cudaGraphNodeGetType(k1_in_clone, &type));
  EXPECT(k1_in_clone != k1 && type == cudaGraphNodeTypeKernel);
  CHECK(cudaGraphDestroy(copy_of));
  const char* dot_path = "/tmp/phos-graphs-test.dot";
  CHECK(cudaGraphDebugDotPrint(graph, dot_path, 0));
  {
    std::FILE* f = std::fopen(dot_path, "r");
    EXPECT(f != nullptr);
    char text[4096] = {};
    const size_t got_bytes = std::fread(text, 1, sizeof text - 1, f);
    std::fclose(f);
    std::remove(dot_path);
    EXPECT(got_bytes > 0 && std::strstr(text, "digraph") != nullptr && std::strstr(text, "->") != nullptr);
  }
  // Edges removed, a node destroyed (in a graph of their own).
  {
    cudaGraph_t small = nullptr;
    CHECK(cudaGraphCreate(&small, 0));
    cudaGraphNode_t first, second;
    CHECK(cudaGraphAddEmptyNode(&first, small, nullptr, 0));
    CHECK(cudaGraphAddEmptyNode(&second, small, &first, 1));
    CHECK(cudaGraphRemoveDependencies(small, &first, &second, nullptr, 1));
    size_t small_edges = 9;
    CHECK(cudaGraphGetEdges(small, nullptr, nullptr, nullptr, &small_edges));
    EXPECT(small_edges == 0);
    EXPECT_ERR(cudaGraphRemoveDependencies(small, &first, &second, nullptr, 1), cudaErrorInvalidValue);
    (void)cudaGetLastError();
    CHECK(cudaGraphDestroyNode(second));
    // Under phos a destroyed node's handle is refused, never read (CUDA
    // leaves it undefined).
    if (dlsym(RTLD_DEFAULT, "phosGetHostCopyStats") != nullptr) {
      cudaGraphNodeType gone = cudaGraphNodeTypeEmpty;
      EXPECT_ERR(cudaGraphNodeGetType(second, &gone), cudaErrorInvalidValue);
      (void)cudaGetLastError();
    }
    size_t small_nodes = 0;
    CHECK(cudaGraphGetNodes(small, nullptr, &small_nodes));
    EXPECT(small_nodes == 1);
    CHECK(cudaGraphDestroy(small));
  }

  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraphExec_t exec = nullptr;
  CHECK(cudaGraphInstantiateWithFlags(&exec, graph, 0));
  CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaStreamSynchronize(s));
  for (int i = 0; i < kN; ++i) EXPECT(out[i] == as[i] * 2 + 1 + as[i]);
  EXPECT(host.calls == 1);
  std::vector<int> cs(kN);
  CHECK(cudaMemcpy(cs.data(), c, kN * sizeof(int), cudaMemcpyDeviceToHost));
  for (int i = 0; i < kN; ++i) EXPECT(cs[i] == as[i] * 4 + 9);

  // New parameters for k1 in the executable graph only: b = a*10+3.
  int ten = 10, three = 3;
  void* args1b[] = {&a, &b, &n, &ten, &three};
  cudaKernelNodeParams kpb = kp;
  kpb.kernelParams = args1b;
  CHECK(cudaGraphExecKernelNodeSetParams(exec, k1, &kpb));
  CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaStreamSynchronize(s));
  for (int i = 0; i < kN; ++i) EXPECT(out[i] == as[i] * 10 + 3 + as[i]);
  EXPECT(host.calls == 2);

  // cudaGraphExecUpdate: the same shape with the graph's own (old)
  // parameters puts them back; another shape is refused.
  cudaGraphExecUpdateResultInfo info{};
  CHECK(cudaGraphExecUpdate(exec, graph, &info));
  EXPECT(info.result == cudaGraphExecUpdateSuccess);
  CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaStreamSynchronize(s));
  for (int i = 0; i < kN; ++i) EXPECT(out[i] == as[i] * 2 + 1 + as[i]);
  cudaGraph_t other = nullptr;
  CHECK(cudaGraphCreate(&other, 0));
  cudaGraphNode_t lone;
  CHECK(cudaGraphAddEmptyNode(&lone, other, nullptr, 0));
  EXPECT_ERR(cudaGraphExecUpdate(exec, other, &info), cudaErrorGraphExecUpdateFailure);
  EXPECT(info.result == cudaGraphExecUpdateErrorTopologyChanged);
  (void)cudaGetLastError();

  // The executable graph launched into a capture: one node of the new graph.
  cudaStream_t cap;
  CHECK(cudaStreamCreateWithFlags(&cap, cudaStreamNonBlocking));
  CHECK(cudaStreamBeginCapture(cap, cudaStreamCaptureModeGlobal));
  CHECK(cudaGraphLaunch(exec, cap));
  cudaGraph_t outer = nullptr;
  CHECK(cudaStreamEndCapture(cap, &outer));
  size_t outer_nodes = 0;
  CHECK(cudaGraphGetNodes(outer, nullptr, &outer_nodes));
  EXPECT(outer_nodes == 1);
  cudaGraphExec_t outer_exec = nullptr;
  CHECK(cudaGraphInstantiate(&outer_exec, outer, 0));
  std::fill(out.begin(), out.end(), -1);
  CHECK(cudaGraphLaunch(outer_exec, cap));
  CHECK(cudaStreamSynchronize(cap));
  for (int i = 0; i < kN; ++i) EXPECT(out[i] == as[i] * 2 + 1 + as[i]);
  EXPECT(host.calls == 4);

  // Capture into an existing graph, after one of its nodes.
  {
    cudaGraph_t target = nullptr;
    CHECK(cudaGraphCreate(&target, 0));
    cudaGraphNode_t first;
    cudaMemsetParams zero{};
    zero.dst = acc;
    zero.value = 0;
    zero.elementSize = 4;
    zero.width = kN;
    zero.height = 1;
    CHECK(cudaGraphAddMemsetNode(&first, target, nullptr, 0, &zero));
    cudaStream_t cs;
    CHECK(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
    CHECK(cudaStreamBeginCaptureToGraph(cs, target, &first, nullptr, 1, cudaStreamCaptureModeGlobal));
    add_arrays<<<kBlocks, 256, 0, cs>>>(acc, a, acc, kN);  // acc = 0 + a
    cudaGraph_t same = nullptr;
    CHECK(cudaStreamEndCapture(cs, &same));
    EXPECT(same == target);
    size_t tn = 0;
    CHECK(cudaGraphGetNodes(target, nullptr, &tn));
    EXPECT(tn == 2);
    cudaGraphExec_t te = nullptr;
    CHECK(cudaGraphInstantiate(&te, target, 0));
    CHECK(cudaGraphLaunch(te, cs));
    std::vector<int> accs(kN);
    CHECK(cudaMemcpyAsync(accs.data(), acc, kN * sizeof(int), cudaMemcpyDeviceToHost, cs));
    CHECK(cudaStreamSynchronize(cs));
    for (int i = 0; i < kN; ++i) EXPECT(accs[i] == as[i]);
    CHECK(cudaGraphExecDestroy(te));
    CHECK(cudaGraphDestroy(target));
    CHECK(cudaStreamDestroy(cs));
  }

  // A disabled memcpy node does nothing until enabled again.
  unsigned long long exec_flags = 1;
  CHECK(cudaGraphExecGetFlags(exec, &exec_flags));
  EXPECT(exec_flags == 0);
  CHECK(cudaGraphNodeSetEnabled(exec, copy, 0));
  unsigned int on = 1;
  CHECK(cudaGraphNodeGetEnabled(exec, copy, &on));
  EXPECT(on == 0);
  std::fill(out.begin(), out.end(), -1);
  CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaStreamSynchronize(s));
  for (int i = 0; i < kN; ++i) EXPECT(out[i] == -1);
  EXPECT(host.calls == 5);
  CHECK(cudaGraphNodeSetEnabled(exec, copy, 1));
  CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaStreamSynchronize(s));
  for (int i = 0; i < kN; ++i) EXPECT(out[i] == as[i] * 2 + 1 + as[i]);
  EXPECT(host.calls == 6);

  CHECK(cudaGraphExecDestroy(outer_exec));
  CHECK(cudaGraphDestroy(outer));
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(other));
  CHECK(cudaGraphDestroy(graph));
  CHECK(cudaEventDestroy(ev));
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaStreamDestroy(cap));
  CHECK(cudaFree(a));
  CHECK(cudaFree(b));
  CHECK(cudaFree(acc));
  CHECK(cudaFree(c));
  return 0;
}

// Explicit memcpy nodes of pitched linear memory (cudaMemcpy3DParms, as
// CUDA's simpleCudaGraphs sample builds them): host -> pitched device ->
// host, then the exec's copy redirected to another host buffer.
int MemcpyNodes() {
  const size_t rows = 37, cols = 100;  // ints per row
  std::vector<int> in(rows * cols), out(rows * cols, -1), other(rows * cols, -1);
  Randomise(in.data(), static_cast<int>(in.size()));
  int* dev = nullptr;
  size_t pitch = 0;
  CHECK(cudaMallocPitch(reinterpret_cast<void**>(&dev), &pitch, cols * sizeof(int), rows));
  cudaGraph_t graph = nullptr;
  CHECK(cudaGraphCreate(&graph, 0));
  cudaMemcpy3DParms up{};
  up.srcPtr = make_cudaPitchedPtr(in.data(), cols * sizeof(int), cols, rows);
  up.dstPtr = make_cudaPitchedPtr(dev, pitch, cols, rows);
  up.extent = make_cudaExtent(cols * sizeof(int), rows, 1);
  up.kind = cudaMemcpyHostToDevice;
  cudaMemcpy3DParms down = up;
  down.srcPtr = up.dstPtr;
  down.dstPtr = make_cudaPitchedPtr(out.data(), cols * sizeof(int), cols, rows);
  down.kind = cudaMemcpyDeviceToHost;
  cudaGraphNode_t n_up, n_down;
  CHECK(cudaGraphAddMemcpyNode(&n_up, graph, nullptr, 0, &up));
  CHECK(cudaGraphAddMemcpyNode(&n_down, graph, &n_up, 1, &down));
  cudaMemcpy3DParms back{};
  CHECK(cudaGraphMemcpyNodeGetParams(n_down, &back));
  EXPECT(back.dstPtr.ptr == out.data() && back.extent.height == rows && back.kind == cudaMemcpyDeviceToHost);
  cudaGraphExec_t exec = nullptr;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaStreamSynchronize(s));
  EXPECT(out == in);
  // The exec's download now goes to `other`; the graph keeps `out`.
  cudaMemcpy3DParms redirected = down;
  redirected.dstPtr.ptr = other.data();
  CHECK(cudaGraphExecMemcpyNodeSetParams(exec, n_down, &redirected));
  Randomise(in.data(), static_cast<int>(in.size()));  // the upload reads the host memory at launch
  CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaStreamSynchronize(s));
  EXPECT(other == in);
  EXPECT(out != in);
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(dev));
  return 0;
}

// The generic forms (cudaGraphAddNode / cudaGraphExecNodeSetParams).
int GenericNodes() {
  int *x = nullptr, *y = nullptr;
  CHECK(cudaMalloc(&x, kN * sizeof(int)));
  CHECK(cudaMalloc(&y, kN * sizeof(int)));
  std::vector<int> xs(kN), out(kN);
  Randomise(xs.data(), kN);
  CHECK(cudaMemcpy(x, xs.data(), kN * sizeof(int), cudaMemcpyHostToDevice));
  cudaGraph_t graph = nullptr;
  CHECK(cudaGraphCreate(&graph, 0));
  cudaGraphNodeParams mp{};
  mp.type = cudaGraphNodeTypeMemset;
  mp.memset.dst = y;
  mp.memset.value = 0;
  mp.memset.elementSize = 4;
  mp.memset.width = kN;
  mp.memset.height = 1;
  cudaGraphNode_t n_memset, n_kernel;
  CHECK(cudaGraphAddNode(&n_memset, graph, nullptr, nullptr, 0, &mp));
  int n = kN, mul = 5, add = 2;
  void* args[] = {&x, &y, &n, &mul, &add};
  cudaGraphNodeParams kp{};
  kp.type = cudaGraphNodeTypeKernel;
  kp.kernel.func = reinterpret_cast<void*>(scale_add);
  kp.kernel.gridDim = dim3(kBlocks);
  kp.kernel.blockDim = dim3(256);
  kp.kernel.kernelParams = args;
  CHECK(cudaGraphAddNode(&n_kernel, graph, &n_memset, nullptr, 1, &kp));
  cudaGraphExec_t exec = nullptr;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CHECK(cudaGraphLaunch(exec, 0));
  CHECK(cudaMemcpy(out.data(), y, kN * sizeof(int), cudaMemcpyDeviceToHost));
  for (int i = 0; i < kN; ++i) EXPECT(out[i] == xs[i] * 5 + 2);
  mul = 9;  // the parameters are copied when set: change, then set again
  CHECK(cudaGraphExecNodeSetParams(exec, n_kernel, &kp));
  CHECK(cudaGraphLaunch(exec, 0));
  CHECK(cudaMemcpy(out.data(), y, kN * sizeof(int), cudaMemcpyDeviceToHost));
  for (int i = 0; i < kN; ++i) EXPECT(out[i] == xs[i] * 9 + 2);
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  CHECK(cudaFree(x));
  CHECK(cudaFree(y));
  return 0;
}

}  // namespace

#define STEP(call)                                  \
  do {                                              \
    std::printf("graphs: %s ...\n", #call);         \
    int rc_ = (call);                               \
    if (rc_ != 0) {                                 \
      std::printf("graphs: %s failed\n", #call);    \
      return rc_;                                   \
    }                                               \
  } while (0)

// Graph memory nodes: cudaMallocAsync/cudaFreeAsync captured (an alloc
// node, a kernel using the memory, a free node) and explicit alloc/free
// nodes; every launch computes from the graph's own allocation, which keeps
// its address (CUDA's rule); the graph memory attributes count it; a
// capture freeing memory no graph allocated is refused; the memory goes
// when the graph and its exec are destroyed. Also a memcpy node of a CUDA
// array.
int MemoryNodes() {
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::vector<int> in(kN), out(kN);
  int *d_in = nullptr, *d_out = nullptr;
  CHECK(cudaMalloc(&d_in, kN * sizeof(int)));
  CHECK(cudaMalloc(&d_out, kN * sizeof(int)));
  uint64_t used0 = 0;
  CHECK(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemCurrent, &used0));
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  int* tmp = nullptr;
  CHECK(cudaMallocAsync(reinterpret_cast<void**>(&tmp), kN * sizeof(int), s));
  EXPECT(tmp != nullptr);
  scale_add<<<kBlocks, 256, 0, s>>>(d_in, tmp, kN, 3, 1);
  scale_add<<<kBlocks, 256, 0, s>>>(tmp, d_out, kN, 2, -5);
  CHECK(cudaFreeAsync(tmp, s));
  EXPECT_ERR(cudaFreeAsync(d_in, s), cudaErrorInvalidValue);  // not graph memory: refused, capture goes on
  (void)cudaGetLastError();
  cudaGraph_t graph = nullptr;
  CHECK(cudaStreamEndCapture(s, &graph));
  size_t n = 0;
  CHECK(cudaGraphGetNodes(graph, nullptr, &n));
  EXPECT(n == 4);
  std::vector<cudaGraphNode_t> nodes(n);
  CHECK(cudaGraphGetNodes(graph, nodes.data(), &n));
  cudaGraphNodeType t0, t3;
  CHECK(cudaGraphNodeGetType(nodes[0], &t0));
  CHECK(cudaGraphNodeGetType(nodes[3], &t3));
  EXPECT(t0 == cudaGraphNodeTypeMemAlloc && t3 == cudaGraphNodeTypeMemFree);
  cudaMemAllocNodeParams ap{};
  CHECK(cudaGraphMemAllocNodeGetParams(nodes[0], &ap));
  EXPECT(ap.dptr == tmp && ap.bytesize == kN * sizeof(int));
  void* freed = nullptr;
  CHECK(cudaGraphMemFreeNodeGetParams(nodes[3], &freed));
  EXPECT(freed == tmp);
  uint64_t used = 0;
  CHECK(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemCurrent, &used));
  EXPECT(used == used0 + kN * sizeof(int));
  cudaGraphExec_t exec = nullptr;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int launch = 0; launch < 3; ++launch) {
    Randomise(in.data(), kN);
    CHECK(cudaMemcpyAsync(d_in, in.data(), kN * sizeof(int), cudaMemcpyHostToDevice, s));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaMemcpyAsync(out.data(), d_out, kN * sizeof(int), cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    for (int i = 0; i < kN; ++i) {
      if (out[i] != (in[i] * 3 + 1) * 2 - 5) PHOS_CHECK_FAIL(1, "memory-node graph launch %d element %d", launch, i);
    }
  }
  // Explicit nodes: alloc -> memset -> copy out -> free.
  cudaGraph_t g2 = nullptr;
  CHECK(cudaGraphCreate(&g2, 0));
  cudaMemAllocNodeParams p{};
  p.poolProps.allocType = cudaMemAllocationTypePinned;
  p.poolProps.location.type = cudaMemLocationTypeDevice;
  p.poolProps.location.id = 0;
  p.bytesize = 4096;
  cudaGraphNode_t alloc = nullptr, set = nullptr, copy = nullptr, free_node = nullptr;
  CHECK(cudaGraphAddMemAllocNode(&alloc, g2, nullptr, 0, &p));
  EXPECT(p.dptr != nullptr);
  cudaMemsetParams ms{};
  ms.dst = p.dptr;
  ms.value = 0x5a;
  ms.elementSize = 1;
  ms.width = 4096;
  ms.height = 1;
  CHECK(cudaGraphAddMemsetNode(&set, g2, &alloc, 1, &ms));
  CHECK(cudaGraphAddMemcpyNode1D(&copy, g2, &set, 1, d_out, p.dptr, 4096, cudaMemcpyDeviceToDevice));
  CHECK(cudaGraphAddMemFreeNode(&free_node, g2, &copy, 1, p.dptr));
  cudaGraphExec_t e2 = nullptr;
  CHECK(cudaGraphInstantiate(&e2, g2, 0));
  CHECK(cudaGraphLaunch(e2, s));
  std::vector<unsigned char> bytes(4096);
  CHECK(cudaMemcpyAsync(bytes.data(), d_out, 4096, cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  for (unsigned char b : bytes) EXPECT(b == 0x5a);
  // A free after the launch, outside the graph: the memory stays the
  // graph's (the next launch brings it back at the same address).
  CHECK(cudaFree(p.dptr));
  CHECK(cudaGraphLaunch(e2, s));
  CHECK(cudaStreamSynchronize(s));
  // A memcpy node of a CUDA array: d_in -> array -> d_out.
  {
    cudaChannelFormatDesc fmt = cudaCreateChannelDesc<int>();
    cudaArray_t arr = nullptr;
    CHECK(cudaMallocArray(&arr, &fmt, 100, 30));
    Randomise(in.data(), 3000);
    CHECK(cudaMemcpy(d_in, in.data(), 3000 * sizeof(int), cudaMemcpyHostToDevice));
    cudaMemcpy3DParms to{}, from{};
    to.srcPtr = make_cudaPitchedPtr(d_in, 100 * sizeof(int), 100, 30);
    to.dstArray = arr;
    to.extent = make_cudaExtent(100, 30, 1);
    to.kind = cudaMemcpyDeviceToDevice;
    from.srcArray = arr;
    from.dstPtr = make_cudaPitchedPtr(d_out, 100 * sizeof(int), 100, 30);
    from.extent = make_cudaExtent(100, 30, 1);
    from.kind = cudaMemcpyDeviceToDevice;
    cudaGraph_t g3 = nullptr;
    CHECK(cudaGraphCreate(&g3, 0));
    cudaGraphNode_t c1 = nullptr, c2 = nullptr;
    CHECK(cudaGraphAddMemcpyNode(&c1, g3, nullptr, 0, &to));
    CHECK(cudaGraphAddMemcpyNode(&c2, g3, &c1, 1, &from));
    cudaGraphExec_t e3 = nullptr;
    CHECK(cudaGraphInstantiate(&e3, g3, 0));
    CHECK(cudaMemset(d_out, 0, 3000 * sizeof(int)));
    CHECK(cudaGraphLaunch(e3, s));
    CHECK(cudaMemcpyAsync(out.data(), d_out, 3000 * sizeof(int), cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    for (int i = 0; i < 3000; ++i) EXPECT(out[i] == in[i]);
    CHECK(cudaGraphExecDestroy(e3));
    CHECK(cudaGraphDestroy(g3));
    CHECK(cudaFreeArray(arr));
  }
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  CHECK(cudaGraphExecDestroy(e2));
  CHECK(cudaGraphDestroy(g2));
  CHECK(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemCurrent, &used));
  EXPECT(used == used0);  // both graphs' memory went with them
  uint64_t high = 0;
  CHECK(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemHigh, &high));
  EXPECT(high >= used0 + kN * sizeof(int) + 4096);
  CHECK(cudaFree(d_in));
  CHECK(cudaFree(d_out));
  CHECK(cudaStreamDestroy(s));
  std::printf("graphs: memory nodes (captured and explicit), array memcpy nodes: OK\n");
  return 0;
}

// User objects: a graph holds references (moved and retained), a clone and
// an exec hold their own; the destructor runs only once the last holder is
// gone, exactly once.
std::atomic<int> g_destroyed{0};
void CUDART_CB CountDestroy(void* p) { g_destroyed.fetch_add(*static_cast<int*>(p)); }

int UserObjects() {
  static int one = 1;
  cudaUserObject_t obj = nullptr;
  CHECK(cudaUserObjectCreate(&obj, &one, CountDestroy, 1, cudaUserObjectNoDestructorSync));
  cudaGraph_t graph = nullptr, clone = nullptr;
  CHECK(cudaGraphCreate(&graph, 0));
  cudaGraphNode_t empty = nullptr;
  CHECK(cudaGraphAddEmptyNode(&empty, graph, nullptr, 0));
  CHECK(cudaGraphRetainUserObject(graph, obj, 1, cudaGraphUserObjectMove));  // our reference moves
  CHECK(cudaGraphRetainUserObject(graph, obj, 2, 0));                        // two more, retained
  CHECK(cudaGraphReleaseUserObject(graph, obj, 1));
  EXPECT_ERR(cudaGraphReleaseUserObject(graph, obj, 5), cudaErrorInvalidValue);  // it holds 2
  (void)cudaGetLastError();
  CHECK(cudaGraphClone(&clone, graph));
  cudaGraphExec_t exec = nullptr;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CHECK(cudaGraphDestroy(graph));
  CHECK(cudaGraphDestroy(clone));
  EXPECT(g_destroyed.load() == 0);  // the exec still holds it
  CHECK(cudaGraphLaunch(exec, 0));
  CHECK(cudaStreamSynchronize(0));
  CHECK(cudaGraphExecDestroy(exec));
  // CUDA runs the destructor on a thread of its own, later: wait for it.
  for (int i = 0; i < 2000 && g_destroyed.load() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT(g_destroyed.load() == 1);
  std::printf("graphs: user objects: OK\n");
  return 0;
}

// Conditional nodes, each against the CPU: if (taken and not, the value
// set by a kernel from device data), if/else, while (a countdown set by its
// own body, which also starts from the handle's default each launch), and
// switch over three bodies (a value past them runs none). One body is made
// by capturing a stream into it, as inference servers build them.
int ConditionalNodes() {
  int *d_in = nullptr, *d_out = nullptr, *d_flag = nullptr, *d_counter = nullptr;
  CHECK(cudaMalloc(&d_in, kN * sizeof(int)));
  CHECK(cudaMalloc(&d_out, kN * sizeof(int)));
  CHECK(cudaMalloc(&d_flag, sizeof(int)));
  CHECK(cudaMalloc(&d_counter, sizeof(int)));
  std::vector<int> in(kN), out(kN), ref(kN);
  Randomise(in.data(), kN);
  CHECK(cudaMemcpy(d_in, in.data(), kN * sizeof(int), cudaMemcpyHostToDevice));
  cudaStream_t s = nullptr;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  // if / else: set_if_positive(*d_flag) -> body 0 computes in*3+1, body 1 in*5+2.
  {
    cudaGraph_t g = nullptr;
    CHECK(cudaGraphCreate(&g, 0));
    cudaGraphConditionalHandle h = 0;
    CHECK(cudaGraphConditionalHandleCreate(&h, g, 0, 0));
    cudaGraphNode_t set = nullptr, cond = nullptr;
    cudaKernelNodeParams kp{};
    void* set_args[] = {&h, &d_flag};
    kp.func = reinterpret_cast<void*>(set_if_positive);
    kp.gridDim = dim3(1);
    kp.blockDim = dim3(32);
    kp.kernelParams = set_args;
    CHECK(cudaGraphAddKernelNode(&set, g, nullptr, 0, &kp));
    cudaGraphNodeParams cp{};
    cp.type = cudaGraphNodeTypeConditional;
    cp.conditional.handle = h;
    cp.conditional.type = cudaGraphCondTypeIf;
    cp.conditional.size = 2;
    CHECK(cudaGraphAddNode(&cond, g, &set, nullptr, 1, &cp));
    cudaGraph_t then_body = cp.conditional.phGraph_out[0], else_body = cp.conditional.phGraph_out[1];
    cudaGraphNode_t k = nullptr;
    int n = kN, mul3 = 3, add1 = 1, mul5 = 5, add2 = 2;
    void* then_args[] = {&d_in, &d_out, &n, &mul3, &add1};
    kp.func = reinterpret_cast<void*>(scale_add);
    kp.gridDim = dim3(kBlocks);
    kp.blockDim = dim3(256);
    kp.kernelParams = then_args;
    CHECK(cudaGraphAddKernelNode(&k, then_body, nullptr, 0, &kp));
    // The else body by capture into it.
    CHECK(cudaStreamBeginCaptureToGraph(s, else_body, nullptr, nullptr, 0, cudaStreamCaptureModeGlobal));
    scale_add<<<kBlocks, 256, 0, s>>>(d_in, d_out, kN, mul5, add2);
    CHECK(cudaStreamEndCapture(s, &else_body));
    cudaGraphExec_t e = nullptr;
    CHECK(cudaGraphInstantiate(&e, g, 0));
    for (int flag : {7, -3, 0, 1}) {
      CHECK(cudaMemcpy(d_flag, &flag, sizeof flag, cudaMemcpyHostToDevice));
      CHECK(cudaMemset(d_out, 0, kN * sizeof(int)));
      CHECK(cudaGraphLaunch(e, s));
      CHECK(cudaStreamSynchronize(s));
      CHECK(cudaMemcpy(out.data(), d_out, kN * sizeof(int), cudaMemcpyDeviceToHost));
      for (int i = 0; i < kN; ++i) ref[i] = flag > 0 ? in[i] * 3 + 1 : in[i] * 5 + 2;
      EXPECT(out == ref);
    }
    cudaGraphNodeType t{};
    CHECK(cudaGraphNodeGetType(cond, &t));
    EXPECT(t == cudaGraphNodeTypeConditional);
    cudaGraph_t clone = nullptr;
    EXPECT_ERR(cudaGraphClone(&clone, g), cudaErrorNotSupported);  // CUDA clones no graph with conditionals
    (void)cudaGetLastError();
    CHECK(cudaGraphExecDestroy(e));
    CHECK(cudaGraphDestroy(g));
  }
  std::printf("graphs: conditional if/else: OK\n");

  // while: the counter starts at 5 (host), the handle's default is 1 each
  // launch (cudaGraphCondAssignDefault), the body adds `in` and counts down.
  {
    cudaGraph_t g = nullptr;
    CHECK(cudaGraphCreate(&g, 0));
    cudaGraphConditionalHandle h = 0;
    CHECK(cudaGraphConditionalHandleCreate(&h, g, 1, cudaGraphCondAssignDefault));
    cudaGraphNodeParams cp{};
    cp.type = cudaGraphNodeTypeConditional;
    cp.conditional.handle = h;
    cp.conditional.type = cudaGraphCondTypeWhile;
    cp.conditional.size = 1;
    cudaGraphNode_t cond = nullptr;
    CHECK(cudaGraphAddNode(&cond, g, nullptr, nullptr, 0, &cp));
    cudaGraph_t body = cp.conditional.phGraph_out[0];
    cudaKernelNodeParams kp{};
    int n = kN;
    void* args[] = {&h, &d_counter, &d_out, &d_in, &n};
    kp.func = reinterpret_cast<void*>(count_down);
    kp.gridDim = dim3(kBlocks);
    kp.blockDim = dim3(256);
    kp.kernelParams = args;
    cudaGraphNode_t k = nullptr;
    CHECK(cudaGraphAddKernelNode(&k, body, nullptr, 0, &kp));
    cudaGraphExec_t e = nullptr;
    CHECK(cudaGraphInstantiate(&e, g, 0));
    for (int times : {5, 1, 3}) {
      CHECK(cudaMemcpy(d_counter, &times, sizeof times, cudaMemcpyHostToDevice));
      CHECK(cudaMemset(d_out, 0, kN * sizeof(int)));
      CHECK(cudaGraphLaunch(e, s));
      CHECK(cudaStreamSynchronize(s));
      CHECK(cudaMemcpy(out.data(), d_out, kN * sizeof(int), cudaMemcpyDeviceToHost));
      for (int i = 0; i < kN; ++i) ref[i] = in[i] * times;
      EXPECT(out == ref);
      int left = -1;
      CHECK(cudaMemcpy(&left, d_counter, sizeof left, cudaMemcpyDeviceToHost));
      EXPECT(left == 0);
    }
    CHECK(cudaGraphExecDestroy(e));
    CHECK(cudaGraphDestroy(g));
  }
  std::printf("graphs: conditional while: OK\n");

  // switch over three bodies (in*k + k for body k); 3 and 9 run none.
  {
    cudaGraph_t g = nullptr;
    CHECK(cudaGraphCreate(&g, 0));
    cudaGraphConditionalHandle h = 0;
    CHECK(cudaGraphConditionalHandleCreate(&h, g, 0, 0));
    cudaKernelNodeParams kp{};
    void* set_args[] = {&h, &d_flag};
    kp.func = reinterpret_cast<void*>(set_value);
    kp.gridDim = dim3(1);
    kp.blockDim = dim3(1);
    kp.kernelParams = set_args;
    cudaGraphNode_t set = nullptr, cond = nullptr;
    CHECK(cudaGraphAddKernelNode(&set, g, nullptr, 0, &kp));
    cudaGraphNodeParams cp{};
    cp.type = cudaGraphNodeTypeConditional;
    cp.conditional.handle = h;
    cp.conditional.type = cudaGraphCondTypeSwitch;
    cp.conditional.size = 3;
    CHECK(cudaGraphAddNode(&cond, g, &set, nullptr, 1, &cp));
    int n = kN;
    int mul[3] = {1, 2, 3};
    void* args[3][5];
    for (int b = 0; b < 3; ++b) {
      args[b][0] = &d_in;
      args[b][1] = &d_out;
      args[b][2] = &n;
      args[b][3] = &mul[b];
      args[b][4] = &mul[b];
      kp.func = reinterpret_cast<void*>(scale_add);
      kp.gridDim = dim3(kBlocks);
      kp.blockDim = dim3(256);
      kp.kernelParams = args[b];
      cudaGraphNode_t k = nullptr;
      CHECK(cudaGraphAddKernelNode(&k, cp.conditional.phGraph_out[b], nullptr, 0, &kp));
    }
    cudaGraphExec_t e = nullptr;
    CHECK(cudaGraphInstantiate(&e, g, 0));
    for (int v : {2, 0, 3, 1, 9}) {
      CHECK(cudaMemcpy(d_flag, &v, sizeof v, cudaMemcpyHostToDevice));
      CHECK(cudaMemset(d_out, 0xff, kN * sizeof(int)));  // -1 everywhere: "no body ran"
      CHECK(cudaGraphLaunch(e, s));
      CHECK(cudaStreamSynchronize(s));
      CHECK(cudaMemcpy(out.data(), d_out, kN * sizeof(int), cudaMemcpyDeviceToHost));
      for (int i = 0; i < kN; ++i) ref[i] = v < 3 ? in[i] * (v + 1) + (v + 1) : -1;
      EXPECT(out == ref);
    }
    // A handle of another graph is refused.
    cudaGraph_t other = nullptr;
    CHECK(cudaGraphCreate(&other, 0));
    cudaGraphNode_t bad = nullptr;
    EXPECT_ERR(cudaGraphAddNode(&bad, other, nullptr, nullptr, 0, &cp), cudaErrorInvalidValue);
    (void)cudaGetLastError();
    CHECK(cudaGraphDestroy(other));
    CHECK(cudaGraphExecDestroy(e));
    CHECK(cudaGraphDestroy(g));
  }
  std::printf("graphs: conditional switch: OK\n");

  // The driver's forms (as cuda-python and XLA build graphs): a handle from
  // cuGraphConditionalHandleCreate, kernel and conditional nodes from the
  // generic cuGraphAddNode, the kernels as CUfunctions of registered ones.
  {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    CHECK(cudaGetDriverEntryPointByVersion("cuGraphConditionalHandleCreate", &p, 12030, cudaEnableDefault, &q));
    auto handle_create = reinterpret_cast<decltype(&cuGraphConditionalHandleCreate)>(p);
    CHECK(cudaGetDriverEntryPointByVersion("cuGraphAddNode", &p, 12030, cudaEnableDefault, &q));
    auto add_node = reinterpret_cast<decltype(&cuGraphAddNode_v2)>(p);
    EXPECT(handle_create != nullptr && add_node != nullptr);
    cudaFunction_t set_fn = nullptr, scale_fn = nullptr;
    CHECK(cudaGetFuncBySymbol(&set_fn, reinterpret_cast<const void*>(set_if_positive)));
    CHECK(cudaGetFuncBySymbol(&scale_fn, reinterpret_cast<const void*>(scale_add)));
    cudaGraph_t g = nullptr;
    CHECK(cudaGraphCreate(&g, 0));
    CUgraphConditionalHandle h = 0;
    EXPECT(handle_create(&h, g, nullptr, 0, 0) == CUDA_SUCCESS);
    CUgraphNodeParams np{};
    np.type = CU_GRAPH_NODE_TYPE_KERNEL;
    void* set_args[] = {&h, &d_flag};
    np.kernel.func = reinterpret_cast<CUfunction>(set_fn);
    np.kernel.gridDimX = np.kernel.gridDimY = np.kernel.gridDimZ = 1;
    np.kernel.blockDimX = 32;
    np.kernel.blockDimY = np.kernel.blockDimZ = 1;
    np.kernel.kernelParams = set_args;
    CUgraphNode set = nullptr, cond = nullptr, k = nullptr;
    EXPECT(add_node(&set, g, nullptr, nullptr, 0, &np) == CUDA_SUCCESS);
    CUgraphNodeParams cp{};
    cp.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
    cp.conditional.handle = h;
    cp.conditional.type = CU_GRAPH_COND_TYPE_IF;
    cp.conditional.size = 1;
    EXPECT(add_node(&cond, g, &set, nullptr, 1, &cp) == CUDA_SUCCESS);
    int n = kN, mul = 7, add = -4;
    void* scale_args[] = {&d_in, &d_out, &n, &mul, &add};
    np.kernel.func = reinterpret_cast<CUfunction>(scale_fn);
    np.kernel.gridDimX = kBlocks;
    np.kernel.blockDimX = 256;
    np.kernel.kernelParams = scale_args;
    EXPECT(add_node(&k, cp.conditional.phGraph_out[0], nullptr, nullptr, 0, &np) == CUDA_SUCCESS);
    cudaGraphExec_t e = nullptr;
    CHECK(cudaGraphInstantiate(&e, g, 0));
    for (int flag : {1, 0}) {
      CHECK(cudaMemcpy(d_flag, &flag, sizeof flag, cudaMemcpyHostToDevice));
      CHECK(cudaMemset(d_out, 0, kN * sizeof(int)));
      CHECK(cudaGraphLaunch(e, s));
      CHECK(cudaStreamSynchronize(s));
      CHECK(cudaMemcpy(out.data(), d_out, kN * sizeof(int), cudaMemcpyDeviceToHost));
      for (int i = 0; i < kN; ++i) ref[i] = flag ? in[i] * 7 - 4 : 0;
      EXPECT(out == ref);
    }
    CHECK(cudaGraphExecDestroy(e));
    CHECK(cudaGraphDestroy(g));
  }
  std::printf("graphs: conditional nodes through the driver's generic form: OK\n");
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(d_in));
  CHECK(cudaFree(d_out));
  CHECK(cudaFree(d_flag));
  CHECK(cudaFree(d_counter));
  return 0;
}

// cudaGraphKernelNodeGetParams: an explicit node and a captured one answer
// their kernel, geometry and argument values; a node's parameters read back,
// changed and set again run with the new values.
int KernelNodeGetters() {
  int *d_in = nullptr, *d_out = nullptr;
  CHECK(cudaMalloc(&d_in, kN * sizeof(int)));
  CHECK(cudaMalloc(&d_out, kN * sizeof(int)));
  std::vector<int> in(kN), out(kN);
  Randomise(in.data(), kN);
  CHECK(cudaMemcpy(d_in, in.data(), kN * sizeof(int), cudaMemcpyHostToDevice));
  cudaGraph_t g = nullptr;
  CHECK(cudaGraphCreate(&g, 0));
  int n = kN, mul = 3, add = 11;
  void* args[] = {&d_in, &d_out, &n, &mul, &add};
  cudaKernelNodeParams kp{};
  kp.func = reinterpret_cast<void*>(scale_add);
  kp.gridDim = dim3(kBlocks);
  kp.blockDim = dim3(256);
  kp.kernelParams = args;
  cudaGraphNode_t k = nullptr;
  CHECK(cudaGraphAddKernelNode(&k, g, nullptr, 0, &kp));
  mul = -1;  // the node copied the arguments when it was made
  cudaKernelNodeParams got{};
  CHECK(cudaGraphKernelNodeGetParams(k, &got));
  EXPECT(got.func == reinterpret_cast<void*>(scale_add));
  EXPECT(got.gridDim.x == static_cast<unsigned>(kBlocks) && got.blockDim.x == 256 && got.sharedMemBytes == 0);
  EXPECT(*static_cast<int**>(got.kernelParams[0]) == d_in && *static_cast<int**>(got.kernelParams[1]) == d_out);
  EXPECT(*static_cast<int*>(got.kernelParams[2]) == kN && *static_cast<int*>(got.kernelParams[3]) == 3 &&
         *static_cast<int*>(got.kernelParams[4]) == 11);
  // Read, change one argument, set again (an inference server's update).
  int new_add = 1000;
  void* new_args[] = {got.kernelParams[0], got.kernelParams[1], got.kernelParams[2], got.kernelParams[3], &new_add};
  got.kernelParams = new_args;
  CHECK(cudaGraphKernelNodeSetParams(k, &got));
  cudaGraphExec_t e = nullptr;
  CHECK(cudaGraphInstantiate(&e, g, 0));
  CHECK(cudaGraphLaunch(e, 0));
  CHECK(cudaStreamSynchronize(0));
  CHECK(cudaMemcpy(out.data(), d_out, kN * sizeof(int), cudaMemcpyDeviceToHost));
  for (int i = 0; i < kN; ++i) EXPECT(out[i] == in[i] * 3 + 1000);
  CHECK(cudaGraphExecDestroy(e));
  CHECK(cudaGraphDestroy(g));
  // A captured launch answers too.
  cudaStream_t s = nullptr;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t cg = nullptr;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  scale_add<<<kBlocks, 128, 64, s>>>(d_in, d_out, kN, 5, 6);
  CHECK(cudaStreamEndCapture(s, &cg));
  size_t count = 1;
  cudaGraphNode_t captured = nullptr;
  CHECK(cudaGraphGetNodes(cg, &captured, &count));
  EXPECT(count == 1);
  CHECK(cudaGraphKernelNodeGetParams(captured, &got));
  EXPECT(got.func == reinterpret_cast<void*>(scale_add) && got.blockDim.x == 128 && got.sharedMemBytes == 64);
  EXPECT(*static_cast<int*>(got.kernelParams[3]) == 5 && *static_cast<int*>(got.kernelParams[4]) == 6);
  CHECK(cudaGraphDestroy(cg));
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(d_in));
  CHECK(cudaFree(d_out));
  std::printf("graphs: kernel node getters: OK\n");
  return 0;
}

int main() {
  STEP(CaptureOneStream());
  STEP(CaptureForkJoin());
  STEP(CaptureInvalidated());
  STEP(ExplicitGraph());
  STEP(MemcpyNodes());
  STEP(GenericNodes());
  STEP(MemoryNodes());
  STEP(UserObjects());
  STEP(ConditionalNodes());
  STEP(KernelNodeGetters());
  std::printf("graphs: OK\n");
  return 0;
}
