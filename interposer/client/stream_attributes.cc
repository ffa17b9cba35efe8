// Stream attributes: cudaStreamGet/SetAttribute, cudaStreamCopyAttributes
// and the driver's cuStream* forms.
//
// The attributes a stream takes are hints to the hardware's scheduler and
// caches (access-policy window, synchronisation policy, priority, memory
// sync domain and its map): a stream that ignores them computes the same
// results. phos records what the app sets, per stream, and answers it back
// (a library that sets a window and reads it back sees its own value); it
// does not forward them. The device attributes say phos offers no
// access-policy windows, so well-behaved programs do not set one. Any other
// attribute id is not a stream attribute: cudaErrorInvalidValue, as CUDA.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <map>
#include <mutex>
#include <utility>

#include "interposer/client/client_internal.h"
#include "interposer/client/driver_internal.h"
#include "interposer/client/handles.h"

namespace phos::client {
namespace {

static_assert(sizeof(cudaStreamAttrValue) == sizeof(CUstreamAttrValue));

// (stream id, attribute id) -> the value the app set. Lock: mu.
struct StreamAttributes {
  std::mutex mu;
  std::map<std::pair<uint32_t, int>, cudaStreamAttrValue> values;
};
StreamAttributes& Attrs() {
  static auto* a = new StreamAttributes;  // never destroyed: calls may come during exit
  return *a;
}

bool IsStreamAttribute(int id) {
  return id == cudaLaunchAttributeAccessPolicyWindow || id == cudaLaunchAttributeSynchronizationPolicy ||
         id == cudaLaunchAttributePriority || id == cudaLaunchAttributeMemSyncDomainMap ||
         id == cudaLaunchAttributeMemSyncDomain;
}

// What every call checks first: phosd reachable, a stream attribute and
// an output, a stream phos knows (its id in *id).
cudaError_t Resolve(cudaStream_t s, DefaultStream zero, int attr, const void* value, uint32_t* id) {
  if (cudaError_t e = Initialised(); e != cudaSuccess) return e;
  if (value == nullptr || !IsStreamAttribute(attr)) return SetError(cudaErrorInvalidValue);
  *id = StreamIdOf(s, zero);
  if (!IsKnownStream(*id)) return SetError(cudaErrorInvalidResourceHandle);
  return cudaSuccess;
}

// Drops every value set on stream `id`. Caller holds a.mu.
void EraseLocked(StreamAttributes& a, uint32_t id) {
  for (auto it = a.values.lower_bound({id, 0}); it != a.values.end() && it->first.first == id;) it = a.values.erase(it);
}

cudaError_t Get(cudaStream_t s, DefaultStream zero, int attr, cudaStreamAttrValue* value) {
  uint32_t id = 0;
  if (cudaError_t e = Resolve(s, zero, attr, value, &id); e != cudaSuccess) return e;
  StreamAttributes& a = Attrs();
  std::lock_guard<std::mutex> lock(a.mu);
  auto it = a.values.find({id, attr});
  if (it != a.values.end()) {
    *value = it->second;
    return cudaSuccess;
  }
  *value = cudaStreamAttrValue{};
  if (attr == cudaLaunchAttributePriority) {
    unsigned flags = 0;
    int priority = 0;
    StreamInfo(id, &flags, &priority);
    value->priority = priority;
  }
  return cudaSuccess;
}

cudaError_t Set(cudaStream_t s, DefaultStream zero, int attr, const cudaStreamAttrValue* value) {
  uint32_t id = 0;
  if (cudaError_t e = Resolve(s, zero, attr, value, &id); e != cudaSuccess) return e;
  StreamAttributes& a = Attrs();
  std::lock_guard<std::mutex> lock(a.mu);
  a.values[{id, attr}] = *value;
  return cudaSuccess;
}

cudaError_t Copy(cudaStream_t dst, cudaStream_t src, DefaultStream zero) {
  if (cudaError_t e = Initialised(); e != cudaSuccess) return e;
  const uint32_t d = StreamIdOf(dst, zero);
  const uint32_t s = StreamIdOf(src, zero);
  if (!IsKnownStream(d) || !IsKnownStream(s)) return SetError(cudaErrorInvalidResourceHandle);
  if (d == s) return cudaSuccess;  // a stream copied onto itself keeps what it has
  StreamAttributes& a = Attrs();
  std::lock_guard<std::mutex> lock(a.mu);
  EraseLocked(a, d);
  std::map<std::pair<uint32_t, int>, cudaStreamAttrValue> copied;
  for (auto it = a.values.lower_bound({s, 0}); it != a.values.end() && it->first.first == s; ++it) {
    copied[{d, it->first.second}] = it->second;
  }
  a.values.insert(copied.begin(), copied.end());
  return cudaSuccess;
}

}  // namespace

void ForgetStreamAttributes(uint32_t id) {
  StreamAttributes& a = Attrs();
  std::lock_guard<std::mutex> lock(a.mu);
  EraseLocked(a, id);
}

void ForgetAllStreamAttributes() {
  StreamAttributes& a = Attrs();
  std::lock_guard<std::mutex> lock(a.mu);
  a.values.clear();
}

}  // namespace phos::client

using namespace phos::client;  // NOLINT

PHOS_EXPORT cudaError_t cudaStreamGetAttribute(cudaStream_t hStream, cudaStreamAttrID attr,
                                               cudaStreamAttrValue* value_out) {
  return Get(hStream, DefaultStream::kLegacy, attr, value_out);
}
PHOS_EXPORT cudaError_t cudaStreamGetAttribute_ptsz(cudaStream_t hStream, cudaStreamAttrID attr,
                                                    cudaStreamAttrValue* value_out) {
  return Get(hStream, DefaultStream::kPerThread, attr, value_out);
}
PHOS_EXPORT cudaError_t cudaStreamSetAttribute(cudaStream_t hStream, cudaStreamAttrID attr,
                                               const cudaStreamAttrValue* value) {
  return Set(hStream, DefaultStream::kLegacy, attr, value);
}
PHOS_EXPORT cudaError_t cudaStreamSetAttribute_ptsz(cudaStream_t hStream, cudaStreamAttrID attr,
                                                    const cudaStreamAttrValue* value) {
  return Set(hStream, DefaultStream::kPerThread, attr, value);
}
PHOS_EXPORT cudaError_t cudaStreamCopyAttributes(cudaStream_t dst, cudaStream_t src) {
  return Copy(dst, src, DefaultStream::kLegacy);
}
PHOS_EXPORT cudaError_t cudaStreamCopyAttributes_ptsz(cudaStream_t dst, cudaStream_t src) {
  return Copy(dst, src, DefaultStream::kPerThread);
}

PHOS_EXPORT CUresult cuStreamGetAttribute(CUstream hStream, CUstreamAttrID attr, CUstreamAttrValue* value_out) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  return ToCu(Get(reinterpret_cast<cudaStream_t>(hStream), DefaultStream::kLegacy, attr,
                          reinterpret_cast<cudaStreamAttrValue*>(value_out)));
}
PHOS_EXPORT CUresult cuStreamGetAttribute_ptsz(CUstream hStream, CUstreamAttrID attr, CUstreamAttrValue* value_out) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  return ToCu(Get(reinterpret_cast<cudaStream_t>(hStream), DefaultStream::kPerThread, attr,
                          reinterpret_cast<cudaStreamAttrValue*>(value_out)));
}
PHOS_EXPORT CUresult cuStreamSetAttribute(CUstream hStream, CUstreamAttrID attr, const CUstreamAttrValue* value) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  return ToCu(Set(reinterpret_cast<cudaStream_t>(hStream), DefaultStream::kLegacy, attr,
                          reinterpret_cast<const cudaStreamAttrValue*>(value)));
}
PHOS_EXPORT CUresult cuStreamSetAttribute_ptsz(CUstream hStream, CUstreamAttrID attr,
                                               const CUstreamAttrValue* value) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  return ToCu(Set(reinterpret_cast<cudaStream_t>(hStream), DefaultStream::kPerThread, attr,
                          reinterpret_cast<const cudaStreamAttrValue*>(value)));
}
PHOS_EXPORT CUresult cuStreamCopyAttributes(CUstream dst, CUstream src) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  return ToCu(
      Copy(reinterpret_cast<cudaStream_t>(dst), reinterpret_cast<cudaStream_t>(src), DefaultStream::kLegacy));
}
PHOS_EXPORT CUresult cuStreamCopyAttributes_ptsz(CUstream dst, CUstream src) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  return ToCu(
      Copy(reinterpret_cast<cudaStream_t>(dst), reinterpret_cast<cudaStream_t>(src), DefaultStream::kPerThread));
}
