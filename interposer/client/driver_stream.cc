// Driver API streams and events: the runtime's exports do the work (same
// wire ops; CUstream/CUevent are the runtime's handles, CU_STREAM_LEGACY and
// CU_STREAM_PER_THREAD map through StreamIdOf like cudaStreamLegacy and
// cudaStreamPerThread; stream and event flags have the same values).
#include "interposer/client/driver_internal.h"

using namespace phos::client;  // NOLINT

namespace {
cudaStream_t Stream(CUstream s) { return reinterpret_cast<cudaStream_t>(s); }
cudaEvent_t Event(CUevent e) { return reinterpret_cast<cudaEvent_t>(e); }

// cudaErrorNotReady is an answer of Query, not a failure.
CUresult Query(cudaError_t e) { return e == cudaErrorNotReady ? CUDA_ERROR_NOT_READY : ToCu(e); }

#define PHOS_REQUIRE_CONTEXT()                                           \
  do {                                                                   \
    if (CUresult _r = CheckContext(); _r != CUDA_SUCCESS) return _r;     \
  } while (0)
}  // namespace

// ---------------------------------------------------------------- streams

PHOS_EXPORT CUresult cuStreamCreateWithPriority(CUstream* phStream, unsigned int flags, int priority) {
  PHOS_REQUIRE_CONTEXT();
  if (phStream == nullptr || (flags & ~static_cast<unsigned>(CU_STREAM_NON_BLOCKING)) != 0)
    return CUDA_ERROR_INVALID_VALUE;
  cudaStream_t s = nullptr;
  CUresult r = ToCu(cudaStreamCreateWithPriority(&s, flags, priority));
  if (r == CUDA_SUCCESS) *phStream = reinterpret_cast<CUstream>(s);
  return r;
}
PHOS_EXPORT CUresult cuStreamCreate(CUstream* phStream, unsigned int flags) {
  return cuStreamCreateWithPriority(phStream, flags, 0);
}
PHOS_EXPORT CUresult cuStreamDestroy_v2(CUstream s) {
  PHOS_REQUIRE_CONTEXT();
  return ToCu(cudaStreamDestroy(Stream(s)));
}
PHOS_EXPORT CUresult cuStreamSynchronize(CUstream s) {
  PHOS_REQUIRE_CONTEXT();
  return ToCu(cudaStreamSynchronize(Stream(s)));
}
PHOS_EXPORT CUresult cuStreamSynchronize_ptsz(CUstream s) {
  PHOS_REQUIRE_CONTEXT();
  return ToCu(cudaStreamSynchronize_ptsz(Stream(s)));
}
PHOS_EXPORT CUresult cuStreamQuery(CUstream s) {
  PHOS_REQUIRE_CONTEXT();
  return Query(cudaStreamQuery(Stream(s)));
}
PHOS_EXPORT CUresult cuStreamQuery_ptsz(CUstream s) {
  PHOS_REQUIRE_CONTEXT();
  return Query(cudaStreamQuery_ptsz(Stream(s)));
}
PHOS_EXPORT CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned int flags) {
  PHOS_REQUIRE_CONTEXT();
  return ToCu(cudaStreamWaitEvent(Stream(s), Event(e), flags));
}
PHOS_EXPORT CUresult cuStreamWaitEvent_ptsz(CUstream s, CUevent e, unsigned int flags) {
  PHOS_REQUIRE_CONTEXT();
  return ToCu(cudaStreamWaitEvent_ptsz(Stream(s), Event(e), flags));
}

// ---------------------------------------------------------------- events

PHOS_EXPORT CUresult cuEventCreate(CUevent* phEvent, unsigned int flags) {
  PHOS_REQUIRE_CONTEXT();
  if (phEvent == nullptr) return CUDA_ERROR_INVALID_VALUE;
  cudaEvent_t e = nullptr;
  CUresult r = ToCu(cudaEventCreateWithFlags(&e, flags));  // CU_EVENT_* == cudaEvent* values
  if (r == CUDA_SUCCESS) *phEvent = reinterpret_cast<CUevent>(e);
  return r;
}
PHOS_EXPORT CUresult cuEventRecord(CUevent e, CUstream s) {
  PHOS_REQUIRE_CONTEXT();
  return ToCu(cudaEventRecord(Event(e), Stream(s)));
}
PHOS_EXPORT CUresult cuEventRecord_ptsz(CUevent e, CUstream s) {
  PHOS_REQUIRE_CONTEXT();
  return ToCu(cudaEventRecord_ptsz(Event(e), Stream(s)));
}
PHOS_EXPORT CUresult cuEventQuery(CUevent e) {
  PHOS_REQUIRE_CONTEXT();
  return Query(cudaEventQuery(Event(e)));
}
PHOS_EXPORT CUresult cuEventSynchronize(CUevent e) {
  PHOS_REQUIRE_CONTEXT();
  return ToCu(cudaEventSynchronize(Event(e)));
}
PHOS_EXPORT CUresult cuEventDestroy_v2(CUevent e) {
  PHOS_REQUIRE_CONTEXT();
  return ToCu(cudaEventDestroy(Event(e)));
}
PHOS_EXPORT CUresult cuEventElapsedTime_v2(float* ms, CUevent start, CUevent end) {
  PHOS_REQUIRE_CONTEXT();
  if (ms == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return ToCu(cudaEventElapsedTime(ms, Event(start), Event(end)));
}
