// Shared declarations of libphos.so's CUDA driver API (driver_*.cc,
// proc_address.cc): initialisation, the current-context check and the
// mapping of results to CUresult. docs/interposer.md "Driver API".
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "interposer/client/client_internal.h"

// The runtime's per-thread-default-stream exports (runtime_api.cc) that the
// driver's _ptds/_ptsz variants call: the headers declare them only when
// CUDA_API_PER_THREAD_DEFAULT_STREAM is defined.
extern "C" {
cudaError_t cudaMemcpy_ptds(void* dst, const void* src, size_t count, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync_ptsz(void* dst, const void* src, size_t count, cudaMemcpyKind kind, cudaStream_t stream);
cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t stream);
cudaError_t cudaStreamQuery_ptsz(cudaStream_t stream);
cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t stream, cudaEvent_t event, unsigned int flags);
cudaError_t cudaEventRecord_ptsz(cudaEvent_t event, cudaStream_t stream);
}

namespace phos::client {

// ---- initialisation (driver_device.cc)
/// CUDA_SUCCESS once cuInit(0) succeeded in this process, else
/// CUDA_ERROR_NOT_INITIALIZED; a sticky error (phosd lost, a kernel fault)
/// wins, as in the driver.
CUresult CheckInit();

// ---- contexts (driver_context.cc)
/// CheckInit(), then CUDA_ERROR_INVALID_CONTEXT when no (live) context is
/// current on this thread. Every call that works "in the current context"
/// (memory, modules, streams, events, launches) starts with it.
CUresult CheckContext();
/// Whether the runtime API contacted phosd before the driver API did: then
/// the primary context is this process's implicit current context, as the
/// CUDA runtime makes it (see driver_context.cc).
bool RuntimeCameFirst();
/// Called by cuInit: records whether the runtime came first.
void NoteDriverInit();

// ---- results
/// A runtime result (from the runtime exports the driver calls reuse) as the
/// driver's CUresult: equal numbers except the runtime-only codes.
CUresult ToCu(cudaError_t e);
/// A wire status as a CUresult (the numbers coincide, wire.h); sticky
/// errors are recorded process-wide like the runtime does.
inline CUresult ToCu(WireStatus w) { return ToCu(static_cast<cudaError_t>(w)); }

}  // namespace phos::client
