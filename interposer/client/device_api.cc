// cudaDeviceReset and the small device/stream queries (docs/interposer.md
// "Streams, functions, reset and fork"): versions, device flags, limits,
// cache configuration, stream priorities and flags, peer access.
//
// Device flags, limits and the cache configuration are recorded app-side
// and read back; phos does not forward them (the sim has no such knobs;
// phosd owns the real context's settings). cudaDeviceReset puts them back
// to their defaults.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <array>
#include <mutex>
#include <string>

#include "interposer/client/client_internal.h"
#include "interposer/client/devices.h"
#include "interposer/client/connection.h"
#include "interposer/client/graphs.h"
#include "interposer/client/handles.h"

namespace phos::client {
namespace {

// cudaLimit values phos records, with CUDA's defaults on an H100.
struct Limits {
  std::mutex mu;  // guards everything below
  std::array<size_t, 7> value{};
  unsigned device_flags = 0;  // cudaDeviceScheduleAuto
  cudaFuncCache cache_config = cudaFuncCachePreferNone;

  void ResetLocked() {
    value = {};
    value[cudaLimitStackSize] = 1024;
    value[cudaLimitPrintfFifoSize] = 1 << 20;
    value[cudaLimitMallocHeapSize] = 8 << 20;
    value[cudaLimitMaxL2FetchGranularity] = 64;
    value[cudaLimitPersistingL2CacheSize] = 0;
    device_flags = 0;
    cache_config = cudaFuncCachePreferNone;
  }
  Limits() { ResetLocked(); }
};
Limits& DeviceSettings() {
  static Limits* l = new Limits();  // leaked: CUDA calls may come during exit
  return *l;
}

bool RecordedLimit(cudaLimit limit) {
  return limit == cudaLimitStackSize || limit == cudaLimitPrintfFifoSize || limit == cudaLimitMallocHeapSize ||
         limit == cudaLimitMaxL2FetchGranularity || limit == cudaLimitPersistingL2CacheSize;
}

}  // namespace

// Calls that only read app-side state still fail in a forked child (as
// with the real driver) and report an unavailable phosd like every call.
cudaError_t Initialised() {
  Connection& c = Connection::Get();
  if (WireStatus w = c.Ensure(); w != WireStatus::kSuccess) return Finish(w);
  return cudaSuccess;
}

}  // namespace phos::client

using namespace phos::client;  // NOLINT
namespace op = phos::wire::op;

// ---------------------------------------------------------------- reset

// phosd releases every buffer, stream, event and module of the session and
// gives it a fresh context; the app side forgets what it knew of them, so
// kernels reload on their next launch and old pointers are invalid.
PHOS_EXPORT cudaError_t cudaDeviceReset(void) {
  // No sticky-error check: clearing a sticky error is what reset is for.
  WireStatus w = Connection::Get().Call(op::kDeviceReset, 0, {});
  if (w != WireStatus::kSuccess) return Finish(w);
  ForgetDeviceAllocations();
  ForgetPoolAllocations();
  ForgetVirtualMemory();
  ForgetConditionalSlots();
  ForgetLoadedModules();
  ForgetPerThreadStreams();
  ForgetCreatedStreams();
  ForgetAllStreamAttributes();
  ClearErrorsForReset();
  Limits& l = DeviceSettings();
  std::lock_guard<std::mutex> lock(l.mu);
  l.ResetLocked();
  return cudaSuccess;
}

// ---------------------------------------------------------------- versions

// The driver's version as the runtime sees it: the CUDA API level phos
// implements (the toolkit libphos.so was built with), as cuDriverGetVersion.
PHOS_EXPORT cudaError_t cudaDriverGetVersion(int* driverVersion) {
  if (driverVersion == nullptr) return SetError(cudaErrorInvalidValue);
  *driverVersion = CUDA_VERSION;
  return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaRuntimeGetVersion(int* runtimeVersion) {
  if (runtimeVersion == nullptr) return SetError(cudaErrorInvalidValue);
  *runtimeVersion = CUDART_VERSION;
  return cudaSuccess;
}

// ---------------------------------------------------------------- device settings

PHOS_EXPORT cudaError_t cudaSetDeviceFlags(unsigned int flags) {
  if (cudaError_t e = Initialised(); e != cudaSuccess) return e;
  const unsigned schedule = flags & cudaDeviceScheduleMask;
  if ((flags & ~static_cast<unsigned>(cudaDeviceMask)) != 0 ||
      (schedule != cudaDeviceScheduleAuto && schedule != cudaDeviceScheduleSpin &&
       schedule != cudaDeviceScheduleYield && schedule != cudaDeviceScheduleBlockingSync)) {
    return SetError(cudaErrorInvalidValue);
  }
  Limits& l = DeviceSettings();
  std::lock_guard<std::mutex> lock(l.mu);
  l.device_flags = flags;
  return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaGetDeviceFlags(unsigned int* flags) {
  if (flags == nullptr) return SetError(cudaErrorInvalidValue);
  if (cudaError_t e = Initialised(); e != cudaSuccess) return e;
  Limits& l = DeviceSettings();
  std::lock_guard<std::mutex> lock(l.mu);
  *flags = l.device_flags;
  return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaDeviceSetLimit(cudaLimit limit, size_t value) {
  if (cudaError_t e = Initialised(); e != cudaSuccess) return e;
  if (!RecordedLimit(limit)) return SetError(cudaErrorUnsupportedLimit);
  if (limit == cudaLimitMaxL2FetchGranularity && (value > 128 || (value & (value - 1)) != 0)) {
    return SetError(cudaErrorInvalidValue);
  }
  if (limit == cudaLimitMallocHeapSize || limit == cudaLimitPrintfFifoSize) {
    // phosd makes the device heap and keeps the printf FIFO
    // (daemon/session/device_heap.cc): it must know their sizes, and
    // refuses a heap size once the heap exists.
    const phos::wire::DeviceLimitRequest req{static_cast<uint32_t>(limit), 0, value};
    WireStatus w = Connection::Get().Call(phos::wire::op::kDeviceSetLimit, 0,
                                          std::as_bytes(std::span<const phos::wire::DeviceLimitRequest>(&req, 1)));
    if (w != WireStatus::kSuccess) return Finish(w);
  }
  Limits& l = DeviceSettings();
  std::lock_guard<std::mutex> lock(l.mu);
  l.value[limit] = value;
  return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaDeviceGetLimit(size_t* pValue, cudaLimit limit) {
  if (pValue == nullptr) return SetError(cudaErrorInvalidValue);
  if (cudaError_t e = Initialised(); e != cudaSuccess) return e;
  if (!RecordedLimit(limit)) return SetError(cudaErrorUnsupportedLimit);
  Limits& l = DeviceSettings();
  std::lock_guard<std::mutex> lock(l.mu);
  *pValue = l.value[limit];
  return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaDeviceSetCacheConfig(cudaFuncCache cacheConfig) {
  if (cudaError_t e = Initialised(); e != cudaSuccess) return e;
  if (cacheConfig < cudaFuncCachePreferNone || cacheConfig > cudaFuncCachePreferEqual) {
    return SetError(cudaErrorInvalidValue);
  }
  Limits& l = DeviceSettings();
  std::lock_guard<std::mutex> lock(l.mu);
  l.cache_config = cacheConfig;
  return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaDeviceGetCacheConfig(cudaFuncCache* pCacheConfig) {
  if (pCacheConfig == nullptr) return SetError(cudaErrorInvalidValue);
  if (cudaError_t e = Initialised(); e != cudaSuccess) return e;
  Limits& l = DeviceSettings();
  std::lock_guard<std::mutex> lock(l.mu);
  *pCacheConfig = l.cache_config;
  return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaDeviceGetStreamPriorityRange(int* leastPriority, int* greatestPriority) {
  if (cudaError_t e = Initialised(); e != cudaSuccess) return e;
  if (leastPriority) *leastPriority = kLeastStreamPriority;
  if (greatestPriority) *greatestPriority = kGreatestStreamPriority;
  return cudaSuccess;
}

// Kernels reaching another GPU's memory are not offered (peer copies are, below).
PHOS_EXPORT cudaError_t cudaDeviceCanAccessPeer(int* canAccessPeer, int device, int peerDevice) {
  if (canAccessPeer == nullptr) return SetError(cudaErrorInvalidValue);
  int count = 0;
  if (cudaError_t e = VisibleDeviceCount(&count); e != cudaSuccess) return SetError(e);
  if (device < 0 || device >= count || peerDevice < 0 || peerDevice >= count) {
    return SetError(cudaErrorInvalidDevice);
  }
  *canAccessPeer = 0;
  return cudaSuccess;
}

// Peer access and peer copies (docs/interposer.md "Several GPUs in one
// process"): a copy between two GPUs of the process is a device-to-device
// copy (with unified addressing the pointers say where each side lives, as
// CUDA's own peer copies without peer access stage through the host);
// kernels reaching another GPU's memory (peer access) are not offered:
// cudaDeviceCanAccessPeer answers 0 and enabling it answers what CUDA
// answers then.
namespace {
cudaError_t CheckPeerDevices(int a, int b) {
  int count = 0;
  if (cudaError_t e = VisibleDeviceCount(&count); e != cudaSuccess) return e;
  if (a < 0 || a >= count || b < 0 || b >= count) return cudaErrorInvalidDevice;
  return cudaSuccess;
}
}  // namespace

// No pair of GPUs accesses each other (as cuDeviceGetP2PAttribute answers).
PHOS_EXPORT cudaError_t cudaDeviceGetP2PAttribute(int* value, cudaDeviceP2PAttr attr, int srcDevice, int dstDevice) {
  if (value == nullptr) return SetError(cudaErrorInvalidValue);
  if (cudaError_t e = CheckPeerDevices(srcDevice, dstDevice); e != cudaSuccess) return SetError(e);
  if (srcDevice == dstDevice) return SetError(cudaErrorInvalidDevice);  // as CUDA answers
  switch (attr) {
    case cudaDevP2PAttrPerformanceRank:
    case cudaDevP2PAttrAccessSupported:
    case cudaDevP2PAttrNativeAtomicSupported:
    case cudaDevP2PAttrCudaArrayAccessSupported:
      *value = 0;
      return cudaSuccess;
    default:
      return SetError(cudaErrorInvalidValue);
  }
}

PHOS_EXPORT cudaError_t cudaDeviceEnablePeerAccess(int peerDevice, unsigned int flags) {
  if (flags != 0) return SetError(cudaErrorInvalidValue);
  int count = 0;
  if (cudaError_t e = VisibleDeviceCount(&count); e != cudaSuccess) return SetError(e);
  if (peerDevice < 0 || peerDevice >= count || IsCurrentDevice(peerDevice)) return SetError(cudaErrorInvalidDevice);
  SayOnce("cudaDeviceEnablePeerAccess: kernels reaching another GPU's memory are not offered by phos yet "
          "(peer copies are); answering cudaErrorPeerAccessUnsupported as CUDA does where cudaDeviceCanAccessPeer "
          "says 0");
  return SetError(cudaErrorPeerAccessUnsupported);  // as CUDA answers where cudaDeviceCanAccessPeer says 0
}

PHOS_EXPORT cudaError_t cudaDeviceDisablePeerAccess(int peerDevice) {
  int count = 0;
  if (cudaError_t e = VisibleDeviceCount(&count); e != cudaSuccess) return SetError(e);
  if (peerDevice < 0 || peerDevice >= count || IsCurrentDevice(peerDevice)) return SetError(cudaErrorInvalidDevice);
  return SetError(cudaErrorPeerAccessNotEnabled);  // it never was
}

PHOS_EXPORT cudaError_t cudaMemcpyPeer(void* dst, int dstDevice, const void* src, int srcDevice, size_t count) {
  if (cudaError_t e = CheckPeerDevices(dstDevice, srcDevice); e != cudaSuccess) return SetError(e);
  return cudaMemcpy(dst, src, count, cudaMemcpyDeviceToDevice);
}

PHOS_EXPORT cudaError_t cudaMemcpyPeerAsync(void* dst, int dstDevice, const void* src, int srcDevice, size_t count,
                                            cudaStream_t stream) {
  if (cudaError_t e = CheckPeerDevices(dstDevice, srcDevice); e != cudaSuccess) {
    return SetError(e);
  }
  return cudaMemcpyAsync(dst, src, count, cudaMemcpyDeviceToDevice, stream);
}

// The calling thread's current GPU (every GPU phosd serves is of one kind).
PHOS_EXPORT cudaError_t cudaChooseDevice(int* device, const cudaDeviceProp* prop) {
  if (device == nullptr || prop == nullptr) return SetError(cudaErrorInvalidValue);
  if (cudaError_t e = Initialised(); e != cudaSuccess) return e;
  *device = CurrentDevice();
  return cudaSuccess;
}

// ---------------------------------------------------------------- stream queries

namespace {
cudaError_t StreamQueryInfo(cudaStream_t s, DefaultStream zero, unsigned* flags, int* priority) {
  if (cudaError_t e = Initialised(); e != cudaSuccess) return e;
  unsigned f = 0;
  int p = 0;
  if (!StreamInfo(StreamIdOf(s, zero), &f, &p)) return SetError(cudaErrorInvalidResourceHandle);
  if (flags) *flags = f;
  if (priority) *priority = p;
  return cudaSuccess;
}
}  // namespace

PHOS_EXPORT cudaError_t cudaStreamGetFlags(cudaStream_t hStream, unsigned int* flags) {
  if (flags == nullptr) return SetError(cudaErrorInvalidValue);
  return StreamQueryInfo(hStream, DefaultStream::kLegacy, flags, nullptr);
}
PHOS_EXPORT cudaError_t cudaStreamGetFlags_ptsz(cudaStream_t hStream, unsigned int* flags) {
  if (flags == nullptr) return SetError(cudaErrorInvalidValue);
  return StreamQueryInfo(hStream, DefaultStream::kPerThread, flags, nullptr);
}
PHOS_EXPORT cudaError_t cudaStreamGetPriority(cudaStream_t hStream, int* priority) {
  if (priority == nullptr) return SetError(cudaErrorInvalidValue);
  return StreamQueryInfo(hStream, DefaultStream::kLegacy, nullptr, priority);
}
PHOS_EXPORT cudaError_t cudaStreamGetPriority_ptsz(cudaStream_t hStream, int* priority) {
  if (priority == nullptr) return SetError(cudaErrorInvalidValue);
  return StreamQueryInfo(hStream, DefaultStream::kPerThread, nullptr, priority);
}

namespace {
// The stream's device (the app's ordinal of the GPU it was made on) and its
// id (the virtual id: unique among live streams of the process; 0 for the
// legacy stream).
cudaError_t StreamIdentity(cudaStream_t s, DefaultStream zero, int* device, unsigned long long* id) {
  if (cudaError_t e = Initialised(); e != cudaSuccess) return e;
  const uint32_t sid = StreamIdOf(s, zero);
  int d = 0;
  if (!StreamDevice(sid, &d)) return SetError(cudaErrorInvalidResourceHandle);
  if (device) *device = d;
  if (id) *id = sid;
  return cudaSuccess;
}
}  // namespace

PHOS_EXPORT cudaError_t cudaStreamGetDevice(cudaStream_t hStream, int* device) {
  if (device == nullptr) return SetError(cudaErrorInvalidValue);
  return StreamIdentity(hStream, DefaultStream::kLegacy, device, nullptr);
}
PHOS_EXPORT cudaError_t cudaStreamGetDevice_ptsz(cudaStream_t hStream, int* device) {
  if (device == nullptr) return SetError(cudaErrorInvalidValue);
  return StreamIdentity(hStream, DefaultStream::kPerThread, device, nullptr);
}
PHOS_EXPORT cudaError_t cudaStreamGetId(cudaStream_t hStream, unsigned long long* streamId) {
  if (streamId == nullptr) return SetError(cudaErrorInvalidValue);
  return StreamIdentity(hStream, DefaultStream::kLegacy, nullptr, streamId);
}
PHOS_EXPORT cudaError_t cudaStreamGetId_ptsz(cudaStream_t hStream, unsigned long long* streamId) {
  if (streamId == nullptr) return SetError(cudaErrorInvalidValue);
  return StreamIdentity(hStream, DefaultStream::kPerThread, nullptr, streamId);
}

extern "C" cudaError_t cudaEventRecord_ptsz(cudaEvent_t event, cudaStream_t stream);  // runtime_api.cc

// cudaEventRecordExternal matters inside a capture only: there the record
// becomes an event-record node of the graph (graphs.h); elsewhere it is a
// plain record.
static cudaError_t RecordWithFlags(cudaEvent_t event, cudaStream_t stream, unsigned flags, DefaultStream zero) {
  if (flags != cudaEventRecordDefault && flags != cudaEventRecordExternal) return SetError(cudaErrorInvalidValue);
  if (flags == cudaEventRecordExternal) {
    cudaError_t captured = cudaSuccess;
    if (MaybeCapture(StreamIdOf(stream, zero), cudaGraphNodeTypeEventRecord,
                     [event](uint32_t s) { return cudaEventRecord(event, static_cast<cudaStream_t>(StreamHandleOf(s))); },
                     &captured)) {
      return captured == cudaSuccess ? cudaSuccess : SetError(captured);
    }
  }
  return zero == DefaultStream::kPerThread ? cudaEventRecord_ptsz(event, stream) : cudaEventRecord(event, stream);
}
PHOS_EXPORT cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream, unsigned int flags) {
  return RecordWithFlags(event, stream, flags, DefaultStream::kLegacy);
}
PHOS_EXPORT cudaError_t cudaEventRecordWithFlags_ptsz(cudaEvent_t event, cudaStream_t stream, unsigned int flags) {
  return RecordWithFlags(event, stream, flags, DefaultStream::kPerThread);
}
