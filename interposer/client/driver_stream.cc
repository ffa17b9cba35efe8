// Driver API streams and events: the runtime's exports do the work (same
// wire ops; CUstream/CUevent are the runtime's handles, CU_STREAM_LEGACY and
// CU_STREAM_PER_THREAD map through StreamIdOf like cudaStreamLegacy and
// cudaStreamPerThread; stream and event flags have the same values).
#include <mutex>
#include <unordered_map>

#include "interposer/client/driver_internal.h"
#include "interposer/client/handles.h"

using namespace phos::client;  // NOLINT

namespace {
cudaStream_t Stream(CUstream s) { return reinterpret_cast<cudaStream_t>(s); }

// The context each stream cuStreamCreate* made was created in, for
// cuStreamGetCtx (contexts alias one session, so this is all a stream's
// context is). Streams the runtime API made are absent: the runtime makes
// each stream in the primary context of its GPU.
struct StreamContexts {
  std::mutex mu;  // guards of
  std::unordered_map<CUstream, CUcontext> of;
};
StreamContexts& StreamCtx() {
  static auto* s = new StreamContexts();  // leaked: streams may be queried from atexit handlers
  return *s;
}

// NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD: "the context current to the
// calling thread" for cuStreamGetCtx.
bool SpecialStream(CUstream s) { return s == nullptr || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD; }
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
  if (r != CUDA_SUCCESS) return r;
  *phStream = reinterpret_cast<CUstream>(s);
  CUcontext current = nullptr;
  cuCtxGetCurrent(&current);  // there is one: PHOS_REQUIRE_CONTEXT passed
  std::lock_guard<std::mutex> lock(StreamCtx().mu);
  StreamCtx().of[*phStream] = current;
  return r;
}
PHOS_EXPORT CUresult cuStreamCreate(CUstream* phStream, unsigned int flags) {
  return cuStreamCreateWithPriority(phStream, flags, 0);
}
PHOS_EXPORT CUresult cuStreamDestroy_v2(CUstream s) {
  PHOS_REQUIRE_CONTEXT();
  const CUresult r = ToCu(cudaStreamDestroy(Stream(s)));
  if (r == CUDA_SUCCESS) {
    std::lock_guard<std::mutex> lock(StreamCtx().mu);
    StreamCtx().of.erase(s);
  }
  return r;
}

// ---------------------------------------------------------------- stream queries
// The runtime's queries answer them (the same handles and values); _ptsz
// differs only in what the NULL stream means.

namespace {
// One answer for both forms: the special handles, the only ones _ptsz reads
// otherwise, all mean the current context here.
CUresult StreamContext(CUstream s, CUcontext* pctx) {
  PHOS_REQUIRE_CONTEXT();
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (SpecialStream(s)) return cuCtxGetCurrent(pctx);
  unsigned flags = 0;  // is it a live stream?
  if (cudaStreamGetFlags(Stream(s), &flags) != cudaSuccess) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard<std::mutex> lock(StreamCtx().mu);
  auto it = StreamCtx().of.find(s);
  if (it != StreamCtx().of.end()) {
    *pctx = it->second;
    return CUDA_SUCCESS;
  }
  // Made by the runtime: in the primary context of its GPU.
  int device = 0;
  if (!StreamDevice(StreamIdOf(Stream(s), DefaultStream::kLegacy), &device)) return CUDA_ERROR_INVALID_HANDLE;
  *pctx = PrimaryContextHandle(device);
  return CUDA_SUCCESS;
}
}  // namespace

PHOS_EXPORT CUresult cuStreamGetCtx(CUstream s, CUcontext* pctx) { return StreamContext(s, pctx); }
PHOS_EXPORT CUresult cuStreamGetCtx_ptsz(CUstream s, CUcontext* pctx) { return StreamContext(s, pctx); }
// phos makes no green contexts: the second answer is always null.
PHOS_EXPORT CUresult cuStreamGetCtx_v2(CUstream s, CUcontext* pctx, CUgreenCtx* green) {
  if (green != nullptr) *green = nullptr;
  return StreamContext(s, pctx);
}
PHOS_EXPORT CUresult cuStreamGetCtx_v2_ptsz(CUstream s, CUcontext* pctx, CUgreenCtx* green) {
  return cuStreamGetCtx_v2(s, pctx, green);
}

// Each query in both forms.
#define PHOS_DRIVER_STREAM_QUERY(DRIVER, RUNTIME, T)      \
  PHOS_EXPORT CUresult DRIVER(CUstream s, T* out) {       \
    PHOS_REQUIRE_CONTEXT();                               \
    return ToCu(RUNTIME(Stream(s), out));                 \
  }                                                       \
  PHOS_EXPORT CUresult DRIVER##_ptsz(CUstream s, T* out) { \
    PHOS_REQUIRE_CONTEXT();                               \
    return ToCu(RUNTIME##_ptsz(Stream(s), out));          \
  }
PHOS_DRIVER_STREAM_QUERY(cuStreamGetFlags, cudaStreamGetFlags, unsigned int)
PHOS_DRIVER_STREAM_QUERY(cuStreamGetPriority, cudaStreamGetPriority, int)
PHOS_DRIVER_STREAM_QUERY(cuStreamGetDevice, cudaStreamGetDevice, CUdevice)  // CUdevice is the runtime's int
PHOS_DRIVER_STREAM_QUERY(cuStreamGetId, cudaStreamGetId, unsigned long long)
#undef PHOS_DRIVER_STREAM_QUERY

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
