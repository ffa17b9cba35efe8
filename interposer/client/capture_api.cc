// Stream-capture queries and the driver's log callbacks.
//
// Whether a stream is being captured, and into what, is graphs.cc's
// (graphs.h CaptureStatusOf); the queries libraries make before every
// allocation or launch ("am I being captured?": PyTorch's caching
// allocator, CuPy, cuBLAS) answer from it:
//   cudaStreamIsCapturing / cuStreamIsCapturing     -> None/Active/Invalidated
//   cudaStreamGetCaptureInfo / cuStreamGetCaptureInfo_v2/_v3 -> status, the
//     capture's id and graph, the stream's current dependencies (no edge
//     data: phos records none). The legacy 3-argument cuStreamGetCaptureInfo:
//     driver_legacy.cc. The outputs CUDA leaves undefined for a stream that
//     is not capturing are zeroed, so a caller that reads them anyway sees
//     no graph.
//   cudaThreadExchangeStreamCaptureMode / cuThread... -> swaps this
//     thread's mode (recorded, so a save/restore pair gives back what was
//     saved; phos does not restrict calls by capture mode)
// each for the stream handles the other stream calls accept (an unknown
// stream is cudaErrorInvalidResourceHandle / CUDA_ERROR_INVALID_HANDLE).
//
// cuLogsRegisterCallback / cuLogsUnregisterCallback (PyTorch registers one
// at start): accepted and recorded; phos's driver has no log messages of
// its own to deliver (phos's errors go to stderr and phosd's log), so the
// callback is never called. The log iterator calls (cuLogsCurrent,
// cuLogsDump*) stay refused by name.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <mutex>
#include <set>

#include "interposer/client/client_internal.h"
#include "interposer/client/driver_internal.h"
#include "interposer/client/graphs.h"
#include "interposer/client/handles.h"

namespace phos::client {
namespace {

thread_local cudaStreamCaptureMode t_capture_mode = cudaStreamCaptureModeGlobal;

// The outputs CUDA leaves undefined for a stream that is not capturing,
// zeroed (either API's types).
template <typename Id, typename Graph, typename Node, typename Edge>
void ClearCaptureOutputs(Id* id, Graph* graph, Node** deps, Edge** edges, size_t* num_deps) {
  if (id) *id = 0;
  if (graph) *graph = nullptr;
  if (deps) *deps = nullptr;
  if (edges) *edges = nullptr;
  if (num_deps) *num_deps = 0;
}

cudaError_t RuntimeCaptureInfo(cudaStream_t s, DefaultStream zero, cudaStreamCaptureStatus* status,
                               unsigned long long* id, cudaGraph_t* graph, const cudaGraphNode_t** deps,
                               const cudaGraphEdgeData** edges, size_t* num_deps) {
  if (cudaError_t e = Initialised(); e != cudaSuccess) return e;
  if (status == nullptr) return SetError(cudaErrorInvalidValue);
  if (!IsKnownStream(StreamIdOf(s, zero))) return SetError(cudaErrorInvalidResourceHandle);
  ClearCaptureOutputs(id, graph, deps, edges, num_deps);
  *status = CaptureStatusOf(StreamIdOf(s, zero), id, graph, deps, num_deps);
  return cudaSuccess;
}

CUresult DriverCaptureInfo(CUstream s, DefaultStream zero, CUstreamCaptureStatus* status, cuuint64_t* id,
                           CUgraph* graph, const CUgraphNode** deps, const CUgraphEdgeData** edges,
                           size_t* num_deps) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!IsKnownStream(StreamIdOf(s, zero))) return CUDA_ERROR_INVALID_HANDLE;
  ClearCaptureOutputs(id, graph, deps, edges, num_deps);
  unsigned long long capture_id = 0;
  *status = static_cast<CUstreamCaptureStatus>(CaptureStatusOf(StreamIdOf(s, zero), &capture_id, graph, deps, num_deps));
  if (id) *id = capture_id;
  return CUDA_SUCCESS;
}

// Registered log callbacks: handles only (never called). Lock: mu.
struct LogCallbacks {
  std::mutex mu;
  std::set<CUlogsCallbackHandle> live;
  uintptr_t next = 1;
};
LogCallbacks& Logs() {
  static auto* l = new LogCallbacks;  // never destroyed: calls may come during exit
  return *l;
}

}  // namespace
}  // namespace phos::client

using namespace phos::client;  // NOLINT

// ---- runtime
PHOS_EXPORT cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* pCaptureStatus) {
  return RuntimeCaptureInfo(stream, DefaultStream::kLegacy, pCaptureStatus, nullptr, nullptr, nullptr, nullptr,
                            nullptr);
}
PHOS_EXPORT cudaError_t cudaStreamIsCapturing_ptsz(cudaStream_t stream, cudaStreamCaptureStatus* pCaptureStatus) {
  return RuntimeCaptureInfo(stream, DefaultStream::kPerThread, pCaptureStatus, nullptr, nullptr, nullptr, nullptr,
                            nullptr);
}
PHOS_EXPORT cudaError_t cudaStreamGetCaptureInfo(cudaStream_t stream, cudaStreamCaptureStatus* captureStatus_out,
                                                 unsigned long long* id_out, cudaGraph_t* graph_out,
                                                 const cudaGraphNode_t** dependencies_out,
                                                 const cudaGraphEdgeData** edgeData_out,
                                                 size_t* numDependencies_out) {
  return RuntimeCaptureInfo(stream, DefaultStream::kLegacy, captureStatus_out, id_out, graph_out, dependencies_out,
                            edgeData_out, numDependencies_out);
}
PHOS_EXPORT cudaError_t cudaStreamGetCaptureInfo_ptsz(cudaStream_t stream,
                                                      cudaStreamCaptureStatus* captureStatus_out,
                                                      unsigned long long* id_out, cudaGraph_t* graph_out,
                                                      const cudaGraphNode_t** dependencies_out,
                                                      const cudaGraphEdgeData** edgeData_out,
                                                      size_t* numDependencies_out) {
  return RuntimeCaptureInfo(stream, DefaultStream::kPerThread, captureStatus_out, id_out, graph_out,
                            dependencies_out, edgeData_out, numDependencies_out);
}
PHOS_EXPORT cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
  if (mode == nullptr) return SetError(cudaErrorInvalidValue);
  if (*mode != cudaStreamCaptureModeGlobal && *mode != cudaStreamCaptureModeThreadLocal &&
      *mode != cudaStreamCaptureModeRelaxed) {
    return SetError(cudaErrorInvalidValue);
  }
  std::swap(*mode, t_capture_mode);
  return cudaSuccess;
}

// ---- driver
PHOS_EXPORT CUresult cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus* captureStatus) {
  return DriverCaptureInfo(hStream, DefaultStream::kLegacy, captureStatus, nullptr, nullptr, nullptr, nullptr,
                           nullptr);
}
PHOS_EXPORT CUresult cuStreamIsCapturing_ptsz(CUstream hStream, CUstreamCaptureStatus* captureStatus) {
  return DriverCaptureInfo(hStream, DefaultStream::kPerThread, captureStatus, nullptr, nullptr, nullptr, nullptr,
                           nullptr);
}
PHOS_EXPORT CUresult cuStreamGetCaptureInfo_v2(CUstream hStream, CUstreamCaptureStatus* captureStatus_out,
                                               cuuint64_t* id_out, CUgraph* graph_out,
                                               const CUgraphNode** dependencies_out, size_t* numDependencies_out) {
  return DriverCaptureInfo(hStream, DefaultStream::kLegacy, captureStatus_out, id_out, graph_out, dependencies_out,
                           nullptr, numDependencies_out);
}
PHOS_EXPORT CUresult cuStreamGetCaptureInfo_v2_ptsz(CUstream hStream, CUstreamCaptureStatus* captureStatus_out,
                                                    cuuint64_t* id_out, CUgraph* graph_out,
                                                    const CUgraphNode** dependencies_out,
                                                    size_t* numDependencies_out) {
  return DriverCaptureInfo(hStream, DefaultStream::kPerThread, captureStatus_out, id_out, graph_out,
                           dependencies_out, nullptr, numDependencies_out);
}
PHOS_EXPORT CUresult cuStreamGetCaptureInfo_v3(CUstream hStream, CUstreamCaptureStatus* captureStatus_out,
                                               cuuint64_t* id_out, CUgraph* graph_out,
                                               const CUgraphNode** dependencies_out,
                                               const CUgraphEdgeData** edgeData_out, size_t* numDependencies_out) {
  return DriverCaptureInfo(hStream, DefaultStream::kLegacy, captureStatus_out, id_out, graph_out, dependencies_out,
                           edgeData_out, numDependencies_out);
}
PHOS_EXPORT CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream hStream, CUstreamCaptureStatus* captureStatus_out,
                                                    cuuint64_t* id_out, CUgraph* graph_out,
                                                    const CUgraphNode** dependencies_out,
                                                    const CUgraphEdgeData** edgeData_out,
                                                    size_t* numDependencies_out) {
  return DriverCaptureInfo(hStream, DefaultStream::kPerThread, captureStatus_out, id_out, graph_out,
                           dependencies_out, edgeData_out, numDependencies_out);
}
PHOS_EXPORT CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (mode == nullptr) return CUDA_ERROR_INVALID_VALUE;
  static_assert(static_cast<int>(CU_STREAM_CAPTURE_MODE_RELAXED) == static_cast<int>(cudaStreamCaptureModeRelaxed));
  auto m = static_cast<cudaStreamCaptureMode>(*mode);
  if (cudaThreadExchangeStreamCaptureMode(&m) != cudaSuccess) return CUDA_ERROR_INVALID_VALUE;
  *mode = static_cast<CUstreamCaptureMode>(m);
  return CUDA_SUCCESS;
}

PHOS_EXPORT CUresult cuLogsRegisterCallback(CUlogsCallback callbackFunc, void* userData,
                                            CUlogsCallbackHandle* callback_out) {
  if (callbackFunc == nullptr || callback_out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  LogCallbacks& l = Logs();
  std::lock_guard<std::mutex> lock(l.mu);
  auto handle = reinterpret_cast<CUlogsCallbackHandle>(l.next++);
  l.live.insert(handle);
  *callback_out = handle;
  return CUDA_SUCCESS;
}
PHOS_EXPORT CUresult cuLogsUnregisterCallback(CUlogsCallbackHandle callback) {
  LogCallbacks& l = Logs();
  std::lock_guard<std::mutex> lock(l.mu);
  return l.live.erase(callback) == 1 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
