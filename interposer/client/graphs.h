// CUDA graphs in libphos.so (docs/interposer.md "CUDA graphs"): stream
// capture and explicit graphs are built app-side as lists of stream
// operations; a graph launch replays them, in an order that respects every
// edge, as ordinary forwarded calls on the launch stream. phosd never sees
// a graph: each node reaches it as the call it would have been, with that
// call's own access set, so every checkpoint protocol handles a graph
// launch exactly like the same calls made one by one.
//
// The stream-ordered entry points (launches, copies, memsets, host
// functions, event record/wait, stream-ordered allocation, stream
// synchronisation) ask this module first whether their stream is being
// captured. The check costs one relaxed atomic load while no capture runs.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <vector>

namespace phos::client {

/// A stream-ordered operation as a node replays it: issue it on the
/// (wire) stream id given; the result is what the original call returns.
using StreamOp = std::function<cudaError_t(uint32_t stream_id)>;

/// Number of captures in progress in this process (any thread).
extern std::atomic<int> g_active_captures;
inline bool AnyCapture() { return g_active_captures.load(std::memory_order_relaxed) != 0; }

/// If stream `stream_id` is being captured: appends `op` (a node of
/// `type`) to its graph after the stream's current dependencies and returns
/// true with *result = cudaSuccess, or the capture's error (an invalidated
/// capture: cudaErrorStreamCaptureInvalidated). Else false: the caller
/// issues the call itself.
bool CaptureOp(uint32_t stream_id, cudaGraphNodeType type, StreamOp op, cudaError_t* result);
inline bool MaybeCapture(uint32_t stream_id, cudaGraphNodeType type, StreamOp op, cudaError_t* result) {
  return AnyCapture() && CaptureOp(stream_id, type, std::move(op), result);
}

/// If stream `stream_id` is being captured: `what` cannot be captured (a
/// synchronisation, a synchronous copy, stream-ordered allocation): the
/// capture is invalidated (CUDA's rule) and true is returned with *result =
/// cudaErrorStreamCaptureUnsupported. Else false.
bool RefuseInCapture(uint32_t stream_id, const char* what, cudaError_t* result);

/// cudaEventRecord on a captured stream: the event now names the stream's
/// current dependencies in its capture (no node). True if so (the caller
/// does not record the event in phosd).
bool CaptureEventRecord(uint32_t event_id, uint32_t stream_id, cudaError_t* result);
/// cudaStreamWaitEvent: an event recorded in a capture makes the stream
/// join that capture (a fork) or merges its dependencies (a join). True if
/// handled here; a captured stream waiting for an event recorded outside
/// any capture is refused (cudaErrorStreamCaptureIsolation).
bool CaptureStreamWaitEvent(uint32_t stream_id, uint32_t event_id, cudaError_t* result);

/// The capture status of a stream (capture_api.cc's queries): its
/// capture's id and graph and the stream's current dependencies (valid
/// until the stream's next captured call). Outputs may be null.
cudaStreamCaptureStatus CaptureStatusOf(uint32_t stream_id, unsigned long long* id, cudaGraph_t* graph,
                                        const cudaGraphNode_t** deps, size_t* num_deps);
/// cudaStreamUpdateCaptureDependencies (flags: add or set).
cudaError_t UpdateCaptureDependencies(uint32_t stream_id, const cudaGraphNode_t* deps, size_t n, unsigned flags);

// ---- graph memory nodes (graphs.cc): an allocation lives as long as a
// graph or executable graph holding its node; frees are no-ops.
/// If `stream_id` is captured: a memory alloc node of `bytes` (the memory
/// exists from now on, at its final address *ptr). False: not captured.
bool CaptureMemAlloc(uint32_t stream_id, size_t bytes, void** ptr, cudaError_t* result);
/// If captured: a memory free node of graph allocation `ptr`.
bool CaptureMemFree(uint32_t stream_id, void* ptr, cudaError_t* result);
/// `ptr` is the start of a live graph allocation (cudaFree/cudaFreeAsync of
/// it outside a graph do nothing: it stays with its graph).
bool IsGraphAllocation(const void* ptr);
cudaError_t AddMemAllocNode(cudaGraphNode_t* node, cudaGraph_t graph, const cudaGraphNode_t* deps, size_t ndeps,
                            cudaMemAllocNodeParams* p);
cudaError_t AddMemFreeNode(cudaGraphNode_t* node, cudaGraph_t graph, const cudaGraphNode_t* deps, size_t ndeps,
                           void* dptr);
cudaError_t MemAllocNodeParams(cudaGraphNode_t node, cudaMemAllocNodeParams* out);
cudaError_t MemFreeNodePointer(cudaGraphNode_t node, void** out);
/// cudaDeviceGet/SetGraphMemAttribute (cudaGraphMemAttributeType).
cudaError_t GraphMemAttribute(int device, int attr, uint64_t* value, bool set);

/// Explicit nodes whose replay the caller built (graph_driver.cc's kernel
/// and memcpy nodes): added after `deps`, or given a new operation on the
/// graph / on an executable graph's steps. cudaErrorInvalidValue for a node
/// that is not of `type`.
cudaError_t AddOpNode(cudaGraphNode_t* node, cudaGraph_t graph, const cudaGraphNode_t* deps, size_t ndeps,
                      cudaGraphNodeType type, StreamOp op);
cudaError_t SetNodeOp(cudaGraphNode_t node, cudaGraphNodeType type, StreamOp op);
cudaError_t SetExecNodeOp(cudaGraphExec_t exec, cudaGraphNode_t node, cudaGraphNodeType type, StreamOp op);

/// A kernel launch as a node replays it: the packed wire launch (launch.cc).
StreamOp KernelLaunchOp(std::vector<std::byte> payload, bool call);

/// What cudaGraphKernelNodeGetParams answers for a kernel node of a
/// registered kernel: the launch's parameters and a copy of its argument
/// values (the packed parameter block, each argument at its offset).
struct KernelNodeRecord {
  const void* func = nullptr;
  dim3 grid, block;
  unsigned shared_bytes = 0;
  std::vector<std::byte> block_bytes;  // the packed parameters
  std::vector<uint32_t> offsets;       // each argument's offset in it
};
/// The record of a packed launch (launch.cc; false for a kernel phos did
/// not register, e.g. a driver function).
bool KernelRecordOf(const void* func, dim3 grid, dim3 block, size_t shmem, const std::vector<std::byte>& payload,
                    KernelNodeRecord* out);
/// CaptureOp for a kernel launch, keeping its record for the getter.
bool CaptureKernel(uint32_t stream_id, StreamOp op, KernelNodeRecord record, cudaError_t* result);

}  // namespace phos::client
