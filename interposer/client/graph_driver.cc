// The driver's graph and capture calls (cuStreamBeginCapture_v2,
// cuStreamEndCapture, cuGraphCreate, cuGraphAdd*Node, cuGraphInstantiate*,
// cuGraphLaunch, ...): the same graphs as the runtime's (a CUgraph is a
// cudaGraph_t), so each calls its runtime twin (graphs.cc) and converts the
// result. Kernel nodes of driver functions (cuGraphAddKernelNode with a
// CUfunction) stay refused by name: the generated stub.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstddef>

#include "interposer/client/client_internal.h"
#include "interposer/client/driver_internal.h"
#include "interposer/client/graphs.h"
#include "interposer/client/handles.h"

using namespace phos::client;  // NOLINT

namespace {

cudaStream_t Stream(CUstream s) { return reinterpret_cast<cudaStream_t>(s); }
cudaEvent_t Event(CUevent e) { return reinterpret_cast<cudaEvent_t>(e); }

static_assert(static_cast<int>(CU_GRAPH_NODE_TYPE_EVENT_RECORD) == static_cast<int>(cudaGraphNodeTypeEventRecord));
static_assert(static_cast<int>(CU_STREAM_CAPTURE_MODE_RELAXED) == static_cast<int>(cudaStreamCaptureModeRelaxed));
static_assert(static_cast<int>(CU_STREAM_SET_CAPTURE_DEPENDENCIES) ==
              static_cast<int>(cudaStreamSetCaptureDependencies));
static_assert(sizeof(CUgraphExecUpdateResultInfo) == sizeof(cudaGraphExecUpdateResultInfo));

template <typename F>
CUresult InContext(F&& f) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  return ToCu(f());
}

}  // namespace

extern "C" {
cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t, cudaStreamCaptureMode);
cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t, cudaGraph_t*);
cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t, cudaStream_t);
cudaError_t cudaGraphUpload_ptsz(cudaGraphExec_t, cudaStream_t);
cudaError_t cudaStreamUpdateCaptureDependencies_ptsz(cudaStream_t, cudaGraphNode_t*, const cudaGraphEdgeData*,
                                                      size_t, unsigned int);
}

PHOS_EXPORT CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode mode) {
  return InContext([&] { return cudaStreamBeginCapture(Stream(s), static_cast<cudaStreamCaptureMode>(mode)); });
}
PHOS_EXPORT CUresult cuStreamBeginCapture_v2_ptsz(CUstream s, CUstreamCaptureMode mode) {
  return InContext([&] { return cudaStreamBeginCapture_ptsz(Stream(s), static_cast<cudaStreamCaptureMode>(mode)); });
}
extern "C" cudaError_t cudaStreamBeginCaptureToGraph_ptsz(cudaStream_t, cudaGraph_t, const cudaGraphNode_t*,
                                                          const cudaGraphEdgeData*, size_t, cudaStreamCaptureMode);
PHOS_EXPORT CUresult cuStreamBeginCaptureToGraph(CUstream s, CUgraph graph, const CUgraphNode* deps,
                                                 const CUgraphEdgeData* edges, size_t n, CUstreamCaptureMode mode) {
  return InContext([&] {
    return cudaStreamBeginCaptureToGraph(Stream(s), graph, deps, reinterpret_cast<const cudaGraphEdgeData*>(edges), n,
                                         static_cast<cudaStreamCaptureMode>(mode));
  });
}
PHOS_EXPORT CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream s, CUgraph graph, const CUgraphNode* deps,
                                                      const CUgraphEdgeData* edges, size_t n,
                                                      CUstreamCaptureMode mode) {
  return InContext([&] {
    return cudaStreamBeginCaptureToGraph_ptsz(Stream(s), graph, deps,
                                              reinterpret_cast<const cudaGraphEdgeData*>(edges), n,
                                              static_cast<cudaStreamCaptureMode>(mode));
  });
}
PHOS_EXPORT CUresult cuStreamEndCapture(CUstream s, CUgraph* graph) {
  return InContext([&] { return cudaStreamEndCapture(Stream(s), graph); });
}
PHOS_EXPORT CUresult cuStreamEndCapture_ptsz(CUstream s, CUgraph* graph) {
  return InContext([&] { return cudaStreamEndCapture_ptsz(Stream(s), graph); });
}
PHOS_EXPORT CUresult cuStreamUpdateCaptureDependencies_v2(CUstream s, CUgraphNode* deps, const CUgraphEdgeData* edges,
                                                          size_t n, unsigned int flags) {
  return InContext([&] {
    return cudaStreamUpdateCaptureDependencies(Stream(s), deps, reinterpret_cast<const cudaGraphEdgeData*>(edges), n,
                                               flags);
  });
}
PHOS_EXPORT CUresult cuStreamUpdateCaptureDependencies_v2_ptsz(CUstream s, CUgraphNode* deps,
                                                               const CUgraphEdgeData* edges, size_t n,
                                                               unsigned int flags) {
  return InContext([&] {
    return cudaStreamUpdateCaptureDependencies_ptsz(Stream(s), deps,
                                                    reinterpret_cast<const cudaGraphEdgeData*>(edges), n, flags);
  });
}

PHOS_EXPORT CUresult cuGraphCreate(CUgraph* graph, unsigned int flags) {
  return InContext([&] { return cudaGraphCreate(graph, flags); });
}
PHOS_EXPORT CUresult cuGraphDestroy(CUgraph graph) {
  return InContext([&] { return cudaGraphDestroy(graph); });
}
PHOS_EXPORT CUresult cuGraphClone(CUgraph* clone, CUgraph graph) {
  return InContext([&] { return cudaGraphClone(clone, graph); });
}
PHOS_EXPORT CUresult cuGraphAddEmptyNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps, size_t n) {
  return InContext([&] { return cudaGraphAddEmptyNode(node, graph, deps, n); });
}
PHOS_EXPORT CUresult cuGraphAddHostNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps, size_t n,
                                        const CUDA_HOST_NODE_PARAMS* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const cudaHostNodeParams rp{p->fn, p->userData};
  return InContext([&] { return cudaGraphAddHostNode(node, graph, deps, n, &rp); });
}
PHOS_EXPORT CUresult cuGraphAddMemsetNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps, size_t n,
                                          const CUDA_MEMSET_NODE_PARAMS* p, CUcontext /*ctx: the current one*/) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  cudaMemsetParams rp{};
  rp.dst = reinterpret_cast<void*>(static_cast<uintptr_t>(p->dst));
  rp.pitch = p->pitch;
  rp.value = p->value;
  rp.elementSize = p->elementSize;
  rp.width = p->width;
  rp.height = p->height;
  return InContext([&] { return cudaGraphAddMemsetNode(node, graph, deps, n, &rp); });
}
PHOS_EXPORT CUresult cuGraphAddEventRecordNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps, size_t n,
                                               CUevent e) {
  return InContext([&] { return cudaGraphAddEventRecordNode(node, graph, deps, n, Event(e)); });
}
PHOS_EXPORT CUresult cuGraphAddEventWaitNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps, size_t n,
                                             CUevent e) {
  return InContext([&] { return cudaGraphAddEventWaitNode(node, graph, deps, n, Event(e)); });
}
PHOS_EXPORT CUresult cuGraphAddChildGraphNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps, size_t n,
                                              CUgraph child) {
  return InContext([&] { return cudaGraphAddChildGraphNode(node, graph, deps, n, child); });
}
PHOS_EXPORT CUresult cuGraphAddDependencies_v2(CUgraph graph, const CUgraphNode* from, const CUgraphNode* to,
                                               const CUgraphEdgeData* edges, size_t n) {
  return InContext([&] {
    return cudaGraphAddDependencies(graph, from, to, reinterpret_cast<const cudaGraphEdgeData*>(edges), n);
  });
}
PHOS_EXPORT CUresult cuGraphGetNodes(CUgraph graph, CUgraphNode* nodes, size_t* n) {
  return InContext([&] { return cudaGraphGetNodes(graph, nodes, n); });
}
PHOS_EXPORT CUresult cuGraphGetRootNodes(CUgraph graph, CUgraphNode* nodes, size_t* n) {
  return InContext([&] { return cudaGraphGetRootNodes(graph, nodes, n); });
}
PHOS_EXPORT CUresult cuGraphNodeGetType(CUgraphNode node, CUgraphNodeType* type) {
  if (type == nullptr) return CUDA_ERROR_INVALID_VALUE;
  cudaGraphNodeType t{};
  CUresult r = InContext([&] { return cudaGraphNodeGetType(node, &t); });
  if (r == CUDA_SUCCESS) *type = static_cast<CUgraphNodeType>(t);
  return r;
}

PHOS_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec* exec, CUgraph graph, unsigned long long flags) {
  return InContext([&] { return cudaGraphInstantiateWithFlags(exec, graph, flags); });
}
static_assert(sizeof(CUDA_GRAPH_INSTANTIATE_PARAMS) == sizeof(cudaGraphInstantiateParams) &&
                  offsetof(CUDA_GRAPH_INSTANTIATE_PARAMS, result_out) == offsetof(cudaGraphInstantiateParams, result_out),
              "the driver's and the runtime's instantiate parameters no longer share a layout");
PHOS_EXPORT CUresult cuGraphInstantiateWithParams(CUgraphExec* exec, CUgraph graph,
                                                  CUDA_GRAPH_INSTANTIATE_PARAMS* p) {
  return InContext([&] {
    return cudaGraphInstantiateWithParams(exec, graph, reinterpret_cast<cudaGraphInstantiateParams*>(p));
  });
}
PHOS_EXPORT CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec* exec, CUgraph graph,
                                                       CUDA_GRAPH_INSTANTIATE_PARAMS* p) {
  return cuGraphInstantiateWithParams(exec, graph, p);
}
PHOS_EXPORT CUresult cuGraphExecDestroy(CUgraphExec exec) {
  return InContext([&] { return cudaGraphExecDestroy(exec); });
}
PHOS_EXPORT CUresult cuGraphLaunch(CUgraphExec exec, CUstream s) {
  return InContext([&] { return cudaGraphLaunch(exec, Stream(s)); });
}
PHOS_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec exec, CUstream s) {
  return InContext([&] { return cudaGraphLaunch_ptsz(exec, Stream(s)); });
}
PHOS_EXPORT CUresult cuGraphUpload(CUgraphExec exec, CUstream s) {
  return InContext([&] { return cudaGraphUpload(exec, Stream(s)); });
}
PHOS_EXPORT CUresult cuGraphUpload_ptsz(CUgraphExec exec, CUstream s) {
  return InContext([&] { return cudaGraphUpload_ptsz(exec, Stream(s)); });
}
PHOS_EXPORT CUresult cuGraphExecUpdate_v2(CUgraphExec exec, CUgraph graph, CUgraphExecUpdateResultInfo* info) {
  return InContext([&] {
    return cudaGraphExecUpdate(exec, graph, reinterpret_cast<cudaGraphExecUpdateResultInfo*>(info));
  });
}

// ---- node queries and parameters
PHOS_EXPORT CUresult cuGraphNodeGetDependencies_v2(CUgraphNode node, CUgraphNode* deps, CUgraphEdgeData* edges,
                                                   size_t* n) {
  return InContext([&] {
    return cudaGraphNodeGetDependencies(node, deps, reinterpret_cast<cudaGraphEdgeData*>(edges), n);
  });
}
PHOS_EXPORT CUresult cuGraphNodeGetDependentNodes_v2(CUgraphNode node, CUgraphNode* out, CUgraphEdgeData* edges,
                                                     size_t* n) {
  return InContext([&] {
    return cudaGraphNodeGetDependentNodes(node, out, reinterpret_cast<cudaGraphEdgeData*>(edges), n);
  });
}
PHOS_EXPORT CUresult cuGraphGetEdges_v2(CUgraph graph, CUgraphNode* from, CUgraphNode* to, CUgraphEdgeData* edges,
                                        size_t* n) {
  return InContext([&] { return cudaGraphGetEdges(graph, from, to, reinterpret_cast<cudaGraphEdgeData*>(edges), n); });
}
PHOS_EXPORT CUresult cuGraphRemoveDependencies_v2(CUgraph graph, const CUgraphNode* from, const CUgraphNode* to,
                                                  const CUgraphEdgeData* edges, size_t n) {
  return InContext([&] {
    return cudaGraphRemoveDependencies(graph, from, to, reinterpret_cast<const cudaGraphEdgeData*>(edges), n);
  });
}
PHOS_EXPORT CUresult cuGraphDestroyNode(CUgraphNode node) {
  return InContext([&] { return cudaGraphDestroyNode(node); });
}
PHOS_EXPORT CUresult cuGraphNodeFindInClone(CUgraphNode* out, CUgraphNode original, CUgraph clone) {
  return InContext([&] { return cudaGraphNodeFindInClone(out, original, clone); });
}
PHOS_EXPORT CUresult cuGraphChildGraphNodeGetGraph(CUgraphNode node, CUgraph* graph) {
  return InContext([&] { return cudaGraphChildGraphNodeGetGraph(node, graph); });
}
PHOS_EXPORT CUresult cuGraphHostNodeGetParams(CUgraphNode node, CUDA_HOST_NODE_PARAMS* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  cudaHostNodeParams rp{};
  CUresult r = InContext([&] { return cudaGraphHostNodeGetParams(node, &rp); });
  if (r == CUDA_SUCCESS) {
    p->fn = rp.fn;
    p->userData = rp.userData;
  }
  return r;
}
PHOS_EXPORT CUresult cuGraphHostNodeSetParams(CUgraphNode node, const CUDA_HOST_NODE_PARAMS* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const cudaHostNodeParams rp{p->fn, p->userData};
  return InContext([&] { return cudaGraphHostNodeSetParams(node, &rp); });
}
PHOS_EXPORT CUresult cuGraphEventRecordNodeGetEvent(CUgraphNode node, CUevent* e) {
  return InContext([&] { return cudaGraphEventRecordNodeGetEvent(node, reinterpret_cast<cudaEvent_t*>(e)); });
}
PHOS_EXPORT CUresult cuGraphEventWaitNodeGetEvent(CUgraphNode node, CUevent* e) {
  return InContext([&] { return cudaGraphEventWaitNodeGetEvent(node, reinterpret_cast<cudaEvent_t*>(e)); });
}
PHOS_EXPORT CUresult cuGraphExecHostNodeSetParams(CUgraphExec exec, CUgraphNode node, const CUDA_HOST_NODE_PARAMS* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const cudaHostNodeParams rp{p->fn, p->userData};
  return InContext([&] { return cudaGraphExecHostNodeSetParams(exec, node, &rp); });
}
PHOS_EXPORT CUresult cuGraphNodeSetEnabled(CUgraphExec exec, CUgraphNode node, unsigned int enabled) {
  return InContext([&] { return cudaGraphNodeSetEnabled(exec, node, enabled); });
}
PHOS_EXPORT CUresult cuGraphNodeGetEnabled(CUgraphExec exec, CUgraphNode node, unsigned int* enabled) {
  return InContext([&] { return cudaGraphNodeGetEnabled(exec, node, enabled); });
}
PHOS_EXPORT CUresult cuGraphExecGetFlags(CUgraphExec exec, cuuint64_t* flags) {
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  unsigned long long f = 0;
  CUresult r = InContext([&] { return cudaGraphExecGetFlags(exec, &f); });
  if (r == CUDA_SUCCESS) *flags = f;
  return r;
}
PHOS_EXPORT CUresult cuGraphDebugDotPrint(CUgraph graph, const char* path, unsigned int flags) {
  return InContext([&] { return cudaGraphDebugDotPrint(graph, path, flags); });
}

// Graph memory nodes: the driver's parameter block is the runtime's
// (CUDA_MEM_ALLOC_NODE_PARAMS and cudaMemAllocNodeParams share a layout).
static_assert(sizeof(CUDA_MEM_ALLOC_NODE_PARAMS) == sizeof(cudaMemAllocNodeParams));
PHOS_EXPORT CUresult cuGraphAddMemAllocNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps, size_t n,
                                            CUDA_MEM_ALLOC_NODE_PARAMS* p) {
  return InContext([&] {
    return AddMemAllocNode(node, graph, deps, n, reinterpret_cast<cudaMemAllocNodeParams*>(p));
  });
}
PHOS_EXPORT CUresult cuGraphAddMemFreeNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps, size_t n,
                                           CUdeviceptr dptr) {
  return InContext([&] { return AddMemFreeNode(node, graph, deps, n, reinterpret_cast<void*>(dptr)); });
}
PHOS_EXPORT CUresult cuGraphMemAllocNodeGetParams(CUgraphNode node, CUDA_MEM_ALLOC_NODE_PARAMS* out) {
  return InContext([&] { return MemAllocNodeParams(node, reinterpret_cast<cudaMemAllocNodeParams*>(out)); });
}
PHOS_EXPORT CUresult cuGraphMemFreeNodeGetParams(CUgraphNode node, CUdeviceptr* out) {
  return InContext([&] { return MemFreeNodePointer(node, reinterpret_cast<void**>(out)); });
}
PHOS_EXPORT CUresult cuDeviceGraphMemTrim(CUdevice device) {
  return InContext([&] { return cudaDeviceGraphMemTrim(device); });
}
PHOS_EXPORT CUresult cuDeviceGetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr, void* value) {
  return InContext([&] {
    return GraphMemAttribute(device, static_cast<int>(attr), static_cast<uint64_t*>(value), false);
  });
}
PHOS_EXPORT CUresult cuDeviceSetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr, void* value) {
  return InContext([&] {
    return GraphMemAttribute(device, static_cast<int>(attr), static_cast<uint64_t*>(value), true);
  });
}

// ---- kernel and memcpy nodes of the driver API (XLA builds its graphs so).

namespace {

// A kernel node's replay: the launch packed now (its kernelParams or
// `extra` copied, as CUDA copies them when the node is made).
CUresult DriverKernelOp(const CUDA_KERNEL_NODE_PARAMS* p, StreamOp* op) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUfunction f = p->func != nullptr ? p->func : reinterpret_cast<CUfunction>(p->kern);
  std::vector<std::byte> payload;
  if (CUresult r = PackDriverLaunch(f, dim3(p->gridDimX, p->gridDimY, p->gridDimZ),
                                    dim3(p->blockDimX, p->blockDimY, p->blockDimZ), p->sharedMemBytes,
                                    p->kernelParams, p->extra, false, &payload);
      r != CUDA_SUCCESS) {
    return r;
  }
  *op = KernelLaunchOp(std::move(payload), /*call=*/false);  // as a captured cuLaunchKernel
  return CUDA_SUCCESS;
}

// A memcpy node's replay: the driver's 3D copy on the launch stream (host
// memory read when the node runs).
StreamOp DriverCopyOp(const CUDA_MEMCPY3D& copy) {
  return [copy](uint32_t s) -> cudaError_t {
    const CUresult r = DriverCopy3D(&copy, static_cast<CUstream>(StreamHandleOf(s)), true);
    return static_cast<cudaError_t>(r);  // the numbers coincide for every code a copy returns
  };
}

}  // namespace

PHOS_EXPORT CUresult cuGraphAddKernelNode_v2(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps, size_t n,
                                             const CUDA_KERNEL_NODE_PARAMS* p) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  StreamOp op;
  if (CUresult r = DriverKernelOp(p, &op); r != CUDA_SUCCESS) return r;
  return ToCu(AddOpNode(node, graph, deps, n, cudaGraphNodeTypeKernel, std::move(op)));
}
PHOS_EXPORT CUresult cuGraphKernelNodeSetParams_v2(CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS* p) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  StreamOp op;
  if (CUresult r = DriverKernelOp(p, &op); r != CUDA_SUCCESS) return r;
  return ToCu(SetNodeOp(node, cudaGraphNodeTypeKernel, std::move(op)));
}
PHOS_EXPORT CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec exec, CUgraphNode node,
                                                       const CUDA_KERNEL_NODE_PARAMS* p) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  StreamOp op;
  if (CUresult r = DriverKernelOp(p, &op); r != CUDA_SUCCESS) return r;
  return ToCu(SetExecNodeOp(exec, node, cudaGraphNodeTypeKernel, std::move(op)));
}
PHOS_EXPORT CUresult cuGraphAddMemcpyNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps, size_t n,
                                          const CUDA_MEMCPY3D* copy, CUcontext /*ctx: the current one*/) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  if (copy == nullptr || copy->srcLOD != 0 || copy->dstLOD != 0) return CUDA_ERROR_INVALID_VALUE;
  return ToCu(AddOpNode(node, graph, deps, n, cudaGraphNodeTypeMemcpy, DriverCopyOp(*copy)));
}
PHOS_EXPORT CUresult cuGraphExecMemcpyNodeSetParams(CUgraphExec exec, CUgraphNode node, const CUDA_MEMCPY3D* copy,
                                                    CUcontext /*ctx*/) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  if (copy == nullptr || copy->srcLOD != 0 || copy->dstLOD != 0) return CUDA_ERROR_INVALID_VALUE;
  return ToCu(SetExecNodeOp(exec, node, cudaGraphNodeTypeMemcpy, DriverCopyOp(*copy)));
}

PHOS_EXPORT CUresult cuGraphRetainUserObject(CUgraph graph, CUuserObject obj, unsigned int count, unsigned int flags) {
  return InContext([&] { return cudaGraphRetainUserObject(graph, obj, count, flags); });
}
PHOS_EXPORT CUresult cuGraphReleaseUserObject(CUgraph graph, CUuserObject obj, unsigned int count) {
  return InContext([&] { return cudaGraphReleaseUserObject(graph, obj, count); });
}

// ---- the driver's generic node form (cuGraphAddNode, CUDA 12.2+) and its
// conditional handles: each node type goes to the typed call above (or the
// runtime's conditional node); external-semaphore and batch memory-operation
// nodes stay refused by name.

PHOS_EXPORT CUresult cuGraphConditionalHandleCreate(CUgraphConditionalHandle* out, CUgraph graph,
                                                    CUcontext /*ctx: the current one*/, unsigned int default_value,
                                                    unsigned int flags) {
  static_assert(CU_GRAPH_COND_ASSIGN_DEFAULT == cudaGraphCondAssignDefault);
  static_assert(static_cast<int>(CU_GRAPH_COND_TYPE_IF) == static_cast<int>(cudaGraphCondTypeIf) &&
                static_cast<int>(CU_GRAPH_COND_TYPE_WHILE) == static_cast<int>(cudaGraphCondTypeWhile) &&
                static_cast<int>(CU_GRAPH_COND_TYPE_SWITCH) == static_cast<int>(cudaGraphCondTypeSwitch));
  return InContext([&] {
    return cudaGraphConditionalHandleCreate(reinterpret_cast<cudaGraphConditionalHandle*>(out), graph,
                                            default_value, flags);
  });
}

PHOS_EXPORT CUresult cuGraphAddNode_v2(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps,
                                       const CUgraphEdgeData* edges, size_t n, CUgraphNodeParams* p) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (edges != nullptr) return ToCu(cudaErrorNotSupported);  // edge data (programmatic dependent launch)
  switch (p->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
      const CUDA_KERNEL_NODE_PARAMS_v3& k = p->kernel;
      CUDA_KERNEL_NODE_PARAMS v2{};
      v2.func = k.func;
      v2.gridDimX = k.gridDimX;
      v2.gridDimY = k.gridDimY;
      v2.gridDimZ = k.gridDimZ;
      v2.blockDimX = k.blockDimX;
      v2.blockDimY = k.blockDimY;
      v2.blockDimZ = k.blockDimZ;
      v2.sharedMemBytes = k.sharedMemBytes;
      v2.kernelParams = k.kernelParams;
      v2.extra = k.extra;
      v2.kern = k.kern;
      v2.ctx = k.ctx;
      return cuGraphAddKernelNode_v2(node, graph, deps, n, &v2);
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY:
      if (p->memcpy.flags != 0) return CUDA_ERROR_INVALID_VALUE;
      return cuGraphAddMemcpyNode(node, graph, deps, n, &p->memcpy.copyParams, p->memcpy.copyCtx);
    case CU_GRAPH_NODE_TYPE_MEMSET: {
      const CUDA_MEMSET_NODE_PARAMS_v2& m = p->memset;
      const CUDA_MEMSET_NODE_PARAMS v1{m.dst, m.pitch, m.value, m.elementSize, m.width, m.height};
      return cuGraphAddMemsetNode(node, graph, deps, n, &v1, m.ctx);
    }
    case CU_GRAPH_NODE_TYPE_HOST: {
      const CUDA_HOST_NODE_PARAMS v1{p->host.fn, p->host.userData};
      return cuGraphAddHostNode(node, graph, deps, n, &v1);
    }
    case CU_GRAPH_NODE_TYPE_GRAPH: {
      CUresult r = cuGraphAddChildGraphNode(node, graph, deps, n, p->graph.graph);
      // Move: the node owns the child now (phos's node holds its own copy).
      if (r == CUDA_SUCCESS && p->graph.ownership == CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE) {
        (void)cuGraphDestroy(p->graph.graph);
      }
      return r;
    }
    case CU_GRAPH_NODE_TYPE_EMPTY: return cuGraphAddEmptyNode(node, graph, deps, n);
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD: return cuGraphAddEventRecordNode(node, graph, deps, n, p->eventRecord.event);
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT: return cuGraphAddEventWaitNode(node, graph, deps, n, p->eventWait.event);
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC: {
      static_assert(sizeof(CUDA_MEM_ALLOC_NODE_PARAMS_v2) == sizeof(CUDA_MEM_ALLOC_NODE_PARAMS));
      auto* a = reinterpret_cast<CUDA_MEM_ALLOC_NODE_PARAMS*>(&p->alloc);  // same fields, same order
      return cuGraphAddMemAllocNode(node, graph, deps, n, a);
    }
    case CU_GRAPH_NODE_TYPE_MEM_FREE: return cuGraphAddMemFreeNode(node, graph, deps, n, p->free.dptr);
    case CU_GRAPH_NODE_TYPE_CONDITIONAL: {
      cudaGraphNodeParams rp{};
      rp.type = cudaGraphNodeTypeConditional;
      rp.conditional.handle = p->conditional.handle;
      rp.conditional.type = static_cast<cudaGraphConditionalNodeType>(p->conditional.type);
      rp.conditional.size = p->conditional.size;
      CUresult r = ToCu(cudaGraphAddNode(node, graph, deps, nullptr, n, &rp));
      if (r == CUDA_SUCCESS) p->conditional.phGraph_out = rp.conditional.phGraph_out;
      return r;
    }
    default: {
      cudaGraphNodeParams rp{};
      rp.type = static_cast<cudaGraphNodeType>(p->type);
      return ToCu(cudaGraphAddNode(node, graph, deps, nullptr, n, &rp));  // refused by name there
    }
  }
}
