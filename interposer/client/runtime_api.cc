// Strong definitions of the CUDA runtime functions the wire protocol covers
// (protocol/wire.h). They override the generated weak stubs
// (interposer/export). Everything else stays a stub: it logs once and
// returns cudaErrorNotSupported.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <vector>

#include "interposer/client/client_internal.h"
#include "interposer/client/connection.h"
#include "interposer/client/devices.h"
#include "interposer/client/graphs.h"
#include "interposer/client/handles.h"

namespace phos::client {
namespace {

namespace op = wire::op;

thread_local cudaError_t t_last_error = cudaSuccess;
std::atomic<int> g_sticky{0};

bool IsSticky(cudaError_t e) {
  return wire::IsKernelFault(static_cast<WireStatus>(e)) || e == cudaErrorDevicesUnavailable;
}

template <typename T>
bool ReadReply(const ring::Reply& r, T* out) {
  if (r.bytes != sizeof(T)) return false;
  std::memcpy(out, r.data.data(), sizeof(T));
  return true;
}

// The client's own map of device buffers (from phosd). Pinned host memory
// is host_memory.cc's (HostArena).
struct AllocMap {
  std::mutex mu;  // guards `device`
  std::map<uintptr_t, size_t> device;
};
AllocMap& Allocs() {
  static AllocMap* m = new AllocMap();
  return *m;
}

bool Contains(const std::map<uintptr_t, size_t>& m, uintptr_t p) {
  auto it = m.upper_bound(p);
  if (it == m.begin()) return false;
  --it;
  return p < it->first + std::max<size_t>(it->second, 1);
}

#define PHOS_CHECK_STICKY()                      \
  do {                                           \
    if (cudaError_t _s = StickyError(); _s != cudaSuccess) return SetError(_s); \
  } while (0)

cudaError_t SimpleCall(wire::ApiId api, uint32_t stream, std::span<const std::byte> payload = {}) {
  PHOS_CHECK_STICKY();
  return Finish(Connection::Get().Call(api, stream, payload));
}

// NotReady is an answer, not an error: it is not recorded as the last error.
cudaError_t QueryCall(wire::ApiId api, uint32_t stream, std::span<const std::byte> payload = {}) {
  PHOS_CHECK_STICKY();
  WireStatus w = Connection::Get().Call(api, stream, payload);
  if (w == WireStatus::kNotReady) return cudaErrorNotReady;
  return Finish(w);
}

cudaError_t StreamCreate(cudaStream_t* s, unsigned flags, int priority) {
  PHOS_CHECK_STICKY();
  if (s == nullptr) return SetError(cudaErrorInvalidValue);
  const uint32_t id = NewStreamId();
  priority = ClampStreamPriority(priority);
  WireStatus w = Connection::Get().Call(op::kStreamCreate, 0, Bytes(wire::StreamCreateRequest{id, flags, priority, 0}));
  if (w == WireStatus::kSuccess) {
    *s = static_cast<cudaStream_t>(StreamHandleOf(id));
    NoteStreamCreated(id, flags, priority);
  }
  return Finish(w);
}

cudaError_t EventCreate(cudaEvent_t* e, unsigned flags) {
  PHOS_CHECK_STICKY();
  if (e == nullptr) return SetError(cudaErrorInvalidValue);
  const uint32_t id = NewEventId();
  WireStatus w = Connection::Get().Call(op::kEventCreate, 0, Bytes(wire::EventCreateRequest{id, flags}));
  if (w == WireStatus::kSuccess) *e = static_cast<cudaEvent_t>(EventHandleOf(id));
  return Finish(w);
}

cudaError_t LastError(bool clear) {
  cudaError_t e = t_last_error;
  if (clear) t_last_error = cudaSuccess;
  Connection& c = Connection::Get();
  if (c.connected()) {
    WireStatus w = c.Call(clear ? op::kGetLastError : op::kPeekAtLastError, 0, {});
    if (e == cudaSuccess) e = static_cast<cudaError_t>(w);
    if (IsSticky(static_cast<cudaError_t>(w))) {
      int zero = 0;
      g_sticky.compare_exchange_strong(zero, static_cast<int>(w));
    }
  }
  if (e == cudaSuccess) e = StickyError();
  return e;
}

struct ErrorText {
  cudaError_t code;
  const char* name;
  const char* text;
};
constexpr ErrorText kErrors[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {cudaErrorInitializationError, "cudaErrorInitializationError", "initialization error"},
    {cudaErrorInvalidConfiguration, "cudaErrorInvalidConfiguration", "invalid configuration argument"},
    {cudaErrorInvalidMemcpyDirection, "cudaErrorInvalidMemcpyDirection", "invalid copy direction for memcpy"},
    {cudaErrorInvalidPitchValue, "cudaErrorInvalidPitchValue", "invalid pitch argument"},
    {cudaErrorHostMemoryAlreadyRegistered, "cudaErrorHostMemoryAlreadyRegistered",
     "part or all of the requested memory range is already mapped"},
    {cudaErrorHostMemoryNotRegistered, "cudaErrorHostMemoryNotRegistered",
     "pointer does not correspond to a registered memory region"},
    {cudaErrorDevicesUnavailable, "cudaErrorDevicesUnavailable",
     "CUDA-capable device(s) is/are busy or unavailable (phos: phosd is unavailable)"},
    {cudaErrorInvalidDeviceFunction, "cudaErrorInvalidDeviceFunction", "invalid device function"},
    {cudaErrorNoDevice, "cudaErrorNoDevice", "no CUDA-capable device is detected"},
    {cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {cudaErrorInvalidKernelImage, "cudaErrorInvalidKernelImage", "device kernel image is invalid"},
    {cudaErrorNoKernelImageForDevice, "cudaErrorNoKernelImageForDevice",
     "no kernel image is available for execution on the device"},
    {cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle", "invalid resource handle"},
    {cudaErrorSymbolNotFound, "cudaErrorSymbolNotFound", "named symbol not found"},
    {cudaErrorNotReady, "cudaErrorNotReady", "device not ready"},
    {cudaErrorIllegalAddress, "cudaErrorIllegalAddress", "an illegal memory access was encountered"},
    {cudaErrorLaunchFailure, "cudaErrorLaunchFailure", "unspecified launch failure"},
    {cudaErrorNotSupported, "cudaErrorNotSupported", "operation not supported"},
    {cudaErrorUnknown, "cudaErrorUnknown", "unknown error"},
    {cudaErrorCudartUnloading, "cudaErrorCudartUnloading", "driver shutting down"},
    {cudaErrorMissingConfiguration, "cudaErrorMissingConfiguration", "__global__ function call is not configured"},
    {cudaErrorInvalidSymbol, "cudaErrorInvalidSymbol", "invalid device symbol"},
    {cudaErrorInvalidHostPointer, "cudaErrorInvalidHostPointer", "invalid host pointer"},
    {cudaErrorInvalidDevicePointer, "cudaErrorInvalidDevicePointer", "invalid device pointer"},
    {cudaErrorInsufficientDriver, "cudaErrorInsufficientDriver",
     "CUDA driver version is insufficient for CUDA runtime version"},
    {cudaErrorIllegalState, "cudaErrorIllegalState", "the operation cannot be performed in the present state"},
    {cudaErrorLaunchOutOfResources, "cudaErrorLaunchOutOfResources", "too many resources requested for launch"},
    {cudaErrorLaunchTimeout, "cudaErrorLaunchTimeout", "the launch timed out and was terminated"},
    {cudaErrorPeerAccessAlreadyEnabled, "cudaErrorPeerAccessAlreadyEnabled", "peer access is already enabled"},
    {cudaErrorPeerAccessNotEnabled, "cudaErrorPeerAccessNotEnabled", "peer access has not been enabled"},
    {cudaErrorContextIsDestroyed, "cudaErrorContextIsDestroyed", "context is destroyed"},
    {cudaErrorAssert, "cudaErrorAssert", "device-side assert triggered"},
    {cudaErrorHardwareStackError, "cudaErrorHardwareStackError", "hardware stack error"},
    {cudaErrorIllegalInstruction, "cudaErrorIllegalInstruction", "an illegal instruction was encountered"},
    {cudaErrorMisalignedAddress, "cudaErrorMisalignedAddress", "misaligned address"},
    {cudaErrorInvalidPc, "cudaErrorInvalidPc", "invalid program counter"},
    {cudaErrorCooperativeLaunchTooLarge, "cudaErrorCooperativeLaunchTooLarge",
     "too many blocks in cooperative launch"},
    {cudaErrorNotPermitted, "cudaErrorNotPermitted", "operation not permitted"},
    {cudaErrorStreamCaptureUnsupported, "cudaErrorStreamCaptureUnsupported",
     "operation not permitted when stream is capturing"},
    {cudaErrorStreamCaptureInvalidated, "cudaErrorStreamCaptureInvalidated",
     "operation failed due to a previous error during capture"},
    {cudaErrorTimeout, "cudaErrorTimeout", "timeout reached"},
};

const ErrorText* FindError(cudaError_t e) {
  for (const auto& t : kErrors)
    if (t.code == e) return &t;
  return nullptr;
}

// cudaDeviceProp from phosd's answer: every field is the attribute CUDA's
// own runtime reads it from, so cudaGetDeviceProperties and
// cudaDeviceGetAttribute never disagree. An attribute phosd has no answer for
// leaves its field 0.
void FillProps(const wire::WireDeviceProps& w, cudaDeviceProp* p) {
  std::memset(p, 0, sizeof(*p));
  std::memcpy(p->name, w.name, sizeof(p->name));
  p->name[sizeof(p->name) - 1] = '\0';
  static_assert(sizeof(p->uuid.bytes) == 16);
  ParseUuidText(w.uuid, reinterpret_cast<unsigned char*>(p->uuid.bytes));
  p->totalGlobalMem = w.total_memory;
  auto a = [&w](cudaDeviceAttr attr) -> int64_t {
    const int64_t v = w.attributes[static_cast<int>(attr)];
    return v == wire::kNoAttribute ? 0 : v;
  };
  auto i = [&a](cudaDeviceAttr attr) { return static_cast<int>(a(attr)); };
  auto z = [&a](cudaDeviceAttr attr) { return static_cast<size_t>(a(attr)); };
  auto u = [&a](cudaDeviceAttr attr) { return static_cast<unsigned>(a(attr)); };
  p->sharedMemPerBlock = z(cudaDevAttrMaxSharedMemoryPerBlock);
  p->regsPerBlock = i(cudaDevAttrMaxRegistersPerBlock);
  p->warpSize = i(cudaDevAttrWarpSize);
  p->memPitch = z(cudaDevAttrMaxPitch);
  p->maxThreadsPerBlock = i(cudaDevAttrMaxThreadsPerBlock);
  p->maxThreadsDim[0] = i(cudaDevAttrMaxBlockDimX);
  p->maxThreadsDim[1] = i(cudaDevAttrMaxBlockDimY);
  p->maxThreadsDim[2] = i(cudaDevAttrMaxBlockDimZ);
  p->maxGridSize[0] = i(cudaDevAttrMaxGridDimX);
  p->maxGridSize[1] = i(cudaDevAttrMaxGridDimY);
  p->maxGridSize[2] = i(cudaDevAttrMaxGridDimZ);
  p->totalConstMem = z(cudaDevAttrTotalConstantMemory);
  p->major = i(cudaDevAttrComputeCapabilityMajor);
  p->minor = i(cudaDevAttrComputeCapabilityMinor);
  p->textureAlignment = z(cudaDevAttrTextureAlignment);
  p->texturePitchAlignment = z(cudaDevAttrTexturePitchAlignment);
  p->multiProcessorCount = i(cudaDevAttrMultiProcessorCount);
  p->integrated = i(cudaDevAttrIntegrated);
  p->canMapHostMemory = i(cudaDevAttrCanMapHostMemory);
  p->maxTexture1D = i(cudaDevAttrMaxTexture1DWidth);
  p->maxTexture1DMipmap = i(cudaDevAttrMaxTexture1DMipmappedWidth);
  p->maxTexture2D[0] = i(cudaDevAttrMaxTexture2DWidth);
  p->maxTexture2D[1] = i(cudaDevAttrMaxTexture2DHeight);
  p->maxTexture2DMipmap[0] = i(cudaDevAttrMaxTexture2DMipmappedWidth);
  p->maxTexture2DMipmap[1] = i(cudaDevAttrMaxTexture2DMipmappedHeight);
  p->maxTexture2DLinear[0] = i(cudaDevAttrMaxTexture2DLinearWidth);
  p->maxTexture2DLinear[1] = i(cudaDevAttrMaxTexture2DLinearHeight);
  p->maxTexture2DLinear[2] = i(cudaDevAttrMaxTexture2DLinearPitch);
  p->maxTexture2DGather[0] = i(cudaDevAttrMaxTexture2DGatherWidth);
  p->maxTexture2DGather[1] = i(cudaDevAttrMaxTexture2DGatherHeight);
  p->maxTexture3D[0] = i(cudaDevAttrMaxTexture3DWidth);
  p->maxTexture3D[1] = i(cudaDevAttrMaxTexture3DHeight);
  p->maxTexture3D[2] = i(cudaDevAttrMaxTexture3DDepth);
  p->maxTexture3DAlt[0] = i(cudaDevAttrMaxTexture3DWidthAlt);
  p->maxTexture3DAlt[1] = i(cudaDevAttrMaxTexture3DHeightAlt);
  p->maxTexture3DAlt[2] = i(cudaDevAttrMaxTexture3DDepthAlt);
  p->maxTextureCubemap = i(cudaDevAttrMaxTextureCubemapWidth);
  p->maxTexture1DLayered[0] = i(cudaDevAttrMaxTexture1DLayeredWidth);
  p->maxTexture1DLayered[1] = i(cudaDevAttrMaxTexture1DLayeredLayers);
  p->maxTexture2DLayered[0] = i(cudaDevAttrMaxTexture2DLayeredWidth);
  p->maxTexture2DLayered[1] = i(cudaDevAttrMaxTexture2DLayeredHeight);
  p->maxTexture2DLayered[2] = i(cudaDevAttrMaxTexture2DLayeredLayers);
  p->maxTextureCubemapLayered[0] = i(cudaDevAttrMaxTextureCubemapLayeredWidth);
  p->maxTextureCubemapLayered[1] = i(cudaDevAttrMaxTextureCubemapLayeredLayers);
  p->maxSurface1D = i(cudaDevAttrMaxSurface1DWidth);
  p->maxSurface2D[0] = i(cudaDevAttrMaxSurface2DWidth);
  p->maxSurface2D[1] = i(cudaDevAttrMaxSurface2DHeight);
  p->maxSurface3D[0] = i(cudaDevAttrMaxSurface3DWidth);
  p->maxSurface3D[1] = i(cudaDevAttrMaxSurface3DHeight);
  p->maxSurface3D[2] = i(cudaDevAttrMaxSurface3DDepth);
  p->maxSurface1DLayered[0] = i(cudaDevAttrMaxSurface1DLayeredWidth);
  p->maxSurface1DLayered[1] = i(cudaDevAttrMaxSurface1DLayeredLayers);
  p->maxSurface2DLayered[0] = i(cudaDevAttrMaxSurface2DLayeredWidth);
  p->maxSurface2DLayered[1] = i(cudaDevAttrMaxSurface2DLayeredHeight);
  p->maxSurface2DLayered[2] = i(cudaDevAttrMaxSurface2DLayeredLayers);
  p->maxSurfaceCubemap = i(cudaDevAttrMaxSurfaceCubemapWidth);
  p->maxSurfaceCubemapLayered[0] = i(cudaDevAttrMaxSurfaceCubemapLayeredWidth);
  p->maxSurfaceCubemapLayered[1] = i(cudaDevAttrMaxSurfaceCubemapLayeredLayers);
  p->surfaceAlignment = z(cudaDevAttrSurfaceAlignment);
  p->concurrentKernels = i(cudaDevAttrConcurrentKernels);
  p->ECCEnabled = i(cudaDevAttrEccEnabled);
  p->pciBusID = i(cudaDevAttrPciBusId);
  p->pciDeviceID = i(cudaDevAttrPciDeviceId);
  p->pciDomainID = i(cudaDevAttrPciDomainId);
  p->tccDriver = i(cudaDevAttrTccDriver);
  p->asyncEngineCount = i(cudaDevAttrAsyncEngineCount);
  p->unifiedAddressing = i(cudaDevAttrUnifiedAddressing);
  p->memoryBusWidth = i(cudaDevAttrGlobalMemoryBusWidth);
  p->l2CacheSize = i(cudaDevAttrL2CacheSize);
  p->persistingL2CacheMaxSize = i(cudaDevAttrMaxPersistingL2CacheSize);
  p->maxThreadsPerMultiProcessor = i(cudaDevAttrMaxThreadsPerMultiProcessor);
  p->streamPrioritiesSupported = i(cudaDevAttrStreamPrioritiesSupported);
  p->globalL1CacheSupported = i(cudaDevAttrGlobalL1CacheSupported);
  p->localL1CacheSupported = i(cudaDevAttrLocalL1CacheSupported);
  p->sharedMemPerMultiprocessor = z(cudaDevAttrMaxSharedMemoryPerMultiprocessor);
  p->regsPerMultiprocessor = i(cudaDevAttrMaxRegistersPerMultiprocessor);
  p->managedMemory = i(cudaDevAttrManagedMemory);
  p->isMultiGpuBoard = i(cudaDevAttrIsMultiGpuBoard);
  p->multiGpuBoardGroupID = i(cudaDevAttrMultiGpuBoardGroupID);
  p->hostNativeAtomicSupported = i(cudaDevAttrHostNativeAtomicSupported);
  p->pageableMemoryAccess = i(cudaDevAttrPageableMemoryAccess);
  p->concurrentManagedAccess = i(cudaDevAttrConcurrentManagedAccess);
  p->computePreemptionSupported = i(cudaDevAttrComputePreemptionSupported);
  p->canUseHostPointerForRegisteredMem = i(cudaDevAttrCanUseHostPointerForRegisteredMem);
  p->cooperativeLaunch = i(cudaDevAttrCooperativeLaunch);
  p->sharedMemPerBlockOptin = z(cudaDevAttrMaxSharedMemoryPerBlockOptin);
  p->pageableMemoryAccessUsesHostPageTables = i(cudaDevAttrPageableMemoryAccessUsesHostPageTables);
  p->directManagedMemAccessFromHost = i(cudaDevAttrDirectManagedMemAccessFromHost);
  p->maxBlocksPerMultiProcessor = i(cudaDevAttrMaxBlocksPerMultiprocessor);
  p->accessPolicyMaxWindowSize = i(cudaDevAttrMaxAccessPolicyWindowSize);
  p->reservedSharedMemPerBlock = z(cudaDevAttrReservedSharedMemoryPerBlock);
  p->hostRegisterSupported = i(cudaDevAttrHostRegisterSupported);
  p->sparseCudaArraySupported = i(cudaDevAttrSparseCudaArraySupported);
  p->hostRegisterReadOnlySupported = i(cudaDevAttrHostRegisterReadOnlySupported);
  p->timelineSemaphoreInteropSupported = i(cudaDevAttrTimelineSemaphoreInteropSupported);
  p->memoryPoolsSupported = i(cudaDevAttrMemoryPoolsSupported);
  p->gpuDirectRDMASupported = i(cudaDevAttrGPUDirectRDMASupported);
  p->gpuDirectRDMAFlushWritesOptions = u(cudaDevAttrGPUDirectRDMAFlushWritesOptions);
  p->gpuDirectRDMAWritesOrdering = i(cudaDevAttrGPUDirectRDMAWritesOrdering);
  p->memoryPoolSupportedHandleTypes = u(cudaDevAttrMemoryPoolSupportedHandleTypes);
  p->deferredMappingCudaArraySupported = i(cudaDevAttrDeferredMappingCudaArraySupported);
  p->ipcEventSupported = i(cudaDevAttrIpcEventSupport);
  p->clusterLaunch = i(cudaDevAttrClusterLaunch);
  p->unifiedFunctionPointers = i(static_cast<cudaDeviceAttr>(129));  // CU_DEVICE_ATTRIBUTE_UNIFIED_FUNCTION_POINTERS (cudaDevAttrReserved129)
  p->deviceNumaConfig = i(cudaDevAttrNumaConfig);
  p->deviceNumaId = i(cudaDevAttrNumaId);
  p->mpsEnabled = i(cudaDevAttrMpsEnabled);
  p->hostNumaId = i(cudaDevAttrHostNumaId);
  p->gpuPciDeviceID = u(cudaDevAttrGpuPciDeviceId);
  p->gpuPciSubsystemID = u(cudaDevAttrGpuPciSubsystemId);
  p->hostNumaMultinodeIpcSupported = i(cudaDevAttrHostNumaMultinodeIpcSupported);
}

}  // namespace

cudaError_t SetError(cudaError_t e) {
  if (e != cudaSuccess) {
    t_last_error = e;
    if (IsSticky(e)) {
      int zero = 0;
      g_sticky.compare_exchange_strong(zero, static_cast<int>(e));
    }
  }
  return e;
}

cudaError_t StickyError() { return static_cast<cudaError_t>(g_sticky.load(std::memory_order_relaxed)); }

void ClearErrorsForReset() {
  g_sticky.store(0, std::memory_order_relaxed);
  t_last_error = cudaSuccess;
}

void SayOnce(const std::string& text) {
  static std::mutex mu;
  static auto* said = new std::set<std::string>;  // guarded by mu; never destroyed: calls may come during exit
  std::lock_guard<std::mutex> lock(mu);
  if (said->insert(text).second) std::fprintf(stderr, "phos: %s\n", text.c_str());
}

void ForgetDeviceAllocations() {
  AllocMap& a = Allocs();
  std::lock_guard<std::mutex> lock(a.mu);
  a.device.clear();
}

void NoteDeviceAllocation(uintptr_t ptr, size_t bytes) {
  AllocMap& a = Allocs();
  std::lock_guard<std::mutex> lock(a.mu);
  a.device[ptr] = bytes;
}

void ForgetDeviceAllocation(uintptr_t ptr) {
  AllocMap& a = Allocs();
  std::lock_guard<std::mutex> lock(a.mu);
  a.device.erase(ptr);
}

bool IsDevicePtr(const void* p) {
  AllocMap& a = Allocs();
  std::lock_guard<std::mutex> lock(a.mu);
  return Contains(a.device, reinterpret_cast<uintptr_t>(p));
}

bool FindDeviceBuffer(const void* ptr, uintptr_t* base, size_t* bytes) {
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  AllocMap& a = Allocs();
  std::lock_guard<std::mutex> lock(a.mu);
  auto it = a.device.upper_bound(p);
  if (it == a.device.begin()) return false;
  --it;
  if (p - it->first >= std::max<size_t>(it->second, 1)) return false;
  *base = it->first;
  *bytes = it->second;
  return true;
}

}  // namespace phos::client

using namespace phos::client;  // NOLINT
namespace op = phos::wire::op;
namespace wire = phos::wire;
using phos::ring::Reply;

// ---------------------------------------------------------------- device

PHOS_EXPORT cudaError_t cudaGetDeviceCount(int* count) {
  PHOS_CHECK_STICKY();
  if (count == nullptr) return SetError(cudaErrorInvalidValue);
  int n = 0;
  if (cudaError_t e = VisibleDeviceCount(&n); e != cudaSuccess) return SetError(e);
  *count = n;
  return n == 0 ? SetError(cudaErrorNoDevice) : cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaGetDevice(int* device) {
  if (device == nullptr) return SetError(cudaErrorInvalidValue);
  *device = CurrentDevice();
  return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaSetDevice(int device) {
  PHOS_CHECK_STICKY();
  cudaError_t e = SelectDevice(device);
  return e == cudaSuccess ? e : SetError(e);
}

PHOS_EXPORT cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  PHOS_CHECK_STICKY();
  if (prop == nullptr) return SetError(cudaErrorInvalidValue);
  int physical = 0;
  if (cudaError_t e = PhysicalDevice(device, &physical); e != cudaSuccess) return SetError(e);
  Connection& c = Connection::Get();
  uint32_t chunk = 0;
  if (WireStatus w = c.AcquireChunk(&chunk); w != WireStatus::kSuccess) return Finish(w);
  Reply r;
  WireStatus w = c.Call(op::kGetDeviceProperties, 0, Bytes(wire::DevicePropsRequest{physical, chunk}), &r);
  wire::ChunkReply cr{};
  if (w == WireStatus::kSuccess) {
    wire::WireDeviceProps props{};
    if (ReadReply(r, &cr) && cr.bytes == sizeof(props)) {
      std::memcpy(&props, c.ChunkBytes(chunk), sizeof(props));
      FillProps(props, prop);
    } else {
      w = WireStatus::kUnknown;
    }
  }
  c.ReleaseChunk(chunk);
  return Finish(w);
}

PHOS_EXPORT cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  PHOS_CHECK_STICKY();
  if (value == nullptr) return SetError(cudaErrorInvalidValue);
  int physical = 0;
  if (cudaError_t e = PhysicalDevice(device, &physical); e != cudaSuccess) return SetError(e);
  Reply r;
  WireStatus w = Connection::Get().Call(op::kDeviceGetAttribute, 0,
                                        Bytes(wire::DeviceAttributeRequest{physical, static_cast<int32_t>(attr)}), &r);
  wire::ValueReply v{};
  if (w == WireStatus::kSuccess && ReadReply(r, &v)) *value = static_cast<int>(v.value);
  return Finish(w);
}

PHOS_EXPORT cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  PHOS_CHECK_STICKY();
  Reply r;
  WireStatus w = Connection::Get().Call(op::kMemGetInfo, 0, {}, &r);
  wire::MemGetInfoReply v{};
  if (w == WireStatus::kSuccess && ReadReply(r, &v)) {
    if (free_bytes) *free_bytes = v.free_bytes;
    if (total_bytes) *total_bytes = v.total_bytes;
  }
  return Finish(w);
}

PHOS_EXPORT cudaError_t cudaDeviceSynchronize(void) { return SimpleCall(op::kDeviceSynchronize, 0); }

PHOS_EXPORT cudaError_t cudaGetLastError(void) { return LastError(true); }
PHOS_EXPORT cudaError_t cudaPeekAtLastError(void) { return LastError(false); }

PHOS_EXPORT const char* cudaGetErrorString(cudaError_t error) {
  const auto* t = FindError(error);
  if (t != nullptr) return t->text;
  // The runtime's codes of device and launch errors are the driver's
  // numbers, with the driver's texts.
  const char* text = nullptr;
  if (cuGetErrorString(static_cast<CUresult>(error), &text) == CUDA_SUCCESS && text != nullptr) return text;
  return "unrecognized error code";
}
PHOS_EXPORT const char* cudaGetErrorName(cudaError_t error) {
  const auto* t = FindError(error);
  return t ? t->name : "cudaErrorUnknown";
}

// ---------------------------------------------------------------- memory

PHOS_EXPORT cudaError_t cudaMalloc(void** ptr, size_t size) {
  PHOS_CHECK_STICKY();
  if (ptr == nullptr) return SetError(cudaErrorInvalidValue);
  if (size == 0) {
    *ptr = nullptr;
    return cudaSuccess;
  }
  Reply r;
  WireStatus w = Connection::Get().Call(op::kMalloc, 0, Bytes(wire::MallocRequest{size}), &r);
  wire::MallocReply v{};
  if (w == WireStatus::kSuccess && ReadReply(r, &v)) {
    *ptr = reinterpret_cast<void*>(v.ptr);
    AllocMap& a = Allocs();
    std::lock_guard<std::mutex> lock(a.mu);
    a.device[v.ptr] = size;
  }
  return Finish(w);
}

PHOS_EXPORT cudaError_t cudaFree(void* ptr) {
  PHOS_CHECK_STICKY();
  // cudaFree(nullptr) is the idiom that initialises CUDA: connect, so a
  // missing phosd (or a forked child) shows here.
  if (ptr == nullptr) return Finish(Connection::Get().Ensure());
  // Graph memory stays with its graph until the graph goes (graphs.h).
  if (IsGraphAllocation(ptr)) return cudaSuccess;
  WireStatus w = Connection::Get().Call(op::kFree, 0, Bytes(wire::PointerRequest{reinterpret_cast<uint64_t>(ptr)}));
  if (w == WireStatus::kSuccess) {
    ForgetDeviceAllocation(reinterpret_cast<uintptr_t>(ptr));
    NotePoolAllocationFreed(reinterpret_cast<uintptr_t>(ptr));  // cudaMallocAsync's may be freed so
  }
  return Finish(w);
}

// cudaMallocHost, cudaHostAlloc, cudaFreeHost, cudaHostRegister...: host_memory.cc.
// Copies (DoMemcpy, DoMemset, 2D): memory_copy.cc.

PHOS_EXPORT cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  return DoMemcpy(dst, src, count, kind, 0, true);
}
PHOS_EXPORT cudaError_t cudaMemcpy_ptds(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  return DoMemcpy(dst, src, count, kind, PerThreadStreamId(), true);
}
PHOS_EXPORT cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                                        cudaStream_t stream) {
  return DoMemcpy(dst, src, count, kind, StreamIdOf(stream), false);
}
PHOS_EXPORT cudaError_t cudaMemcpyAsync_ptsz(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                                             cudaStream_t stream) {
  return DoMemcpy(dst, src, count, kind, StreamIdOf(stream, DefaultStream::kPerThread), false);
}
PHOS_EXPORT cudaError_t cudaMemset(void* dst, int value, size_t count) { return DoMemset(dst, value, count, 0, true); }
PHOS_EXPORT cudaError_t cudaMemset_ptds(void* dst, int value, size_t count) {
  return DoMemset(dst, value, count, PerThreadStreamId(), true);
}
PHOS_EXPORT cudaError_t cudaMemsetAsync(void* dst, int value, size_t count, cudaStream_t stream) {
  return DoMemset(dst, value, count, StreamIdOf(stream), false);
}
PHOS_EXPORT cudaError_t cudaMemsetAsync_ptsz(void* dst, int value, size_t count, cudaStream_t stream) {
  return DoMemset(dst, value, count, StreamIdOf(stream, DefaultStream::kPerThread), false);
}

// ---------------------------------------------------------------- streams

PHOS_EXPORT cudaError_t cudaStreamCreate(cudaStream_t* s) { return StreamCreate(s, 0, 0); }
PHOS_EXPORT cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int flags) {
  return StreamCreate(s, flags, 0);
}
PHOS_EXPORT cudaError_t cudaStreamCreateWithPriority(cudaStream_t* s, unsigned int flags, int priority) {
  return StreamCreate(s, flags, priority);
}
PHOS_EXPORT cudaError_t cudaStreamDestroy(cudaStream_t s) {
  // The default streams (0, cudaStreamLegacy, cudaStreamPerThread) cannot be destroyed.
  if (reinterpret_cast<uintptr_t>(s) <= 2) return SetError(cudaErrorInvalidResourceHandle);
  cudaError_t e = SimpleCall(op::kStreamDestroy, 0, Bytes(wire::HandleRequest{StreamIdOf(s), 0}));
  if (e == cudaSuccess) {
    NoteStreamDestroyed(StreamIdOf(s));
    ForgetStreamAttributes(StreamIdOf(s));
  }
  return e;
}
// A stream being captured cannot be waited for (CUDA invalidates the capture).
static cudaError_t StreamSync(uint32_t id, bool query) {
  if (cudaError_t refused; RefuseInCapture(id, query ? "cudaStreamQuery" : "cudaStreamSynchronize", &refused)) {
    return SetError(refused);
  }
  return query ? QueryCall(op::kStreamQuery, id) : SimpleCall(op::kStreamSynchronize, id);
}
PHOS_EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t s) { return StreamSync(StreamIdOf(s), false); }
PHOS_EXPORT cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t s) {
  return StreamSync(StreamIdOf(s, DefaultStream::kPerThread), false);
}
PHOS_EXPORT cudaError_t cudaStreamQuery(cudaStream_t s) { return StreamSync(StreamIdOf(s), true); }
PHOS_EXPORT cudaError_t cudaStreamQuery_ptsz(cudaStream_t s) {
  return StreamSync(StreamIdOf(s, DefaultStream::kPerThread), true);
}

static cudaError_t StreamWaitEvent(cudaStream_t s, cudaEvent_t e, DefaultStream zero = DefaultStream::kLegacy) {
  PHOS_CHECK_STICKY();
  const uint32_t stream = StreamIdOf(s, zero);
  // An event recorded in a capture forks or joins streams of that capture.
  if (cudaError_t r; CaptureStreamWaitEvent(stream, EventIdOf(e), &r)) return r == cudaSuccess ? r : SetError(r);
  return Finish(Connection::Get().Post(op::kStreamWaitEvent, stream, Bytes(wire::HandleRequest{EventIdOf(e), 0})));
}
PHOS_EXPORT cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int /*flags*/) {
  return StreamWaitEvent(s, e);
}
PHOS_EXPORT cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t s, cudaEvent_t e, unsigned int /*flags*/) {
  return StreamWaitEvent(s, e, DefaultStream::kPerThread);
}

// ---------------------------------------------------------------- events

PHOS_EXPORT cudaError_t cudaEventCreate(cudaEvent_t* e) { return EventCreate(e, 0); }
PHOS_EXPORT cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int flags) { return EventCreate(e, flags); }

static cudaError_t EventRecord(cudaEvent_t e, cudaStream_t s, DefaultStream zero = DefaultStream::kLegacy) {
  PHOS_CHECK_STICKY();
  const uint32_t stream = StreamIdOf(s, zero);
  // On a stream being captured the event marks a point of the capture.
  if (cudaError_t r; CaptureEventRecord(EventIdOf(e), stream, &r)) return r == cudaSuccess ? r : SetError(r);
  return Finish(Connection::Get().Post(op::kEventRecord, stream, Bytes(wire::HandleRequest{EventIdOf(e), 0})));
}
PHOS_EXPORT cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) { return EventRecord(e, s); }
PHOS_EXPORT cudaError_t cudaEventRecord_ptsz(cudaEvent_t e, cudaStream_t s) {
  return EventRecord(e, s, DefaultStream::kPerThread);
}
PHOS_EXPORT cudaError_t cudaEventQuery(cudaEvent_t e) {
  return QueryCall(op::kEventQuery, 0, Bytes(wire::HandleRequest{EventIdOf(e), 0}));
}
PHOS_EXPORT cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  return SimpleCall(op::kEventSynchronize, 0, Bytes(wire::HandleRequest{EventIdOf(e), 0}));
}
PHOS_EXPORT cudaError_t cudaEventDestroy(cudaEvent_t e) {
  return SimpleCall(op::kEventDestroy, 0, Bytes(wire::HandleRequest{EventIdOf(e), 0}));
}
PHOS_EXPORT cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  PHOS_CHECK_STICKY();
  if (ms == nullptr) return SetError(cudaErrorInvalidValue);
  Reply r;
  WireStatus w = Connection::Get().Call(op::kEventElapsedTime, 0,
                                        Bytes(wire::ElapsedTimeRequest{EventIdOf(start), EventIdOf(end)}), &r);
  wire::ElapsedTimeReply v{};
  if (w == WireStatus::kSuccess && ReadReply(r, &v)) *ms = v.ms;
  return Finish(w);
}

// ---------------------------------------------------------------- symbols

namespace phos::client {
namespace {
// The device address of a registered __device__/__constant__ variable
// (loads its module in phosd first). `to_app`: the app gets the address
// (wire::kGlobalAddressToApp); libphos's own symbol copies ask each time.
cudaError_t SymbolAddress(const void* symbol, uint64_t* ptr, uint64_t* bytes, bool to_app = false) {
  VarRec* v = FindVar(symbol);
  if (v == nullptr) return SetError(cudaErrorInvalidSymbol);
  WireStatus w = EnsureModule(v->module);
  if (w != WireStatus::kSuccess) return Finish(w);
  wire::GetGlobalRequest req{v->module->id, static_cast<uint32_t>(v->name.size()),
                             to_app ? uint32_t{wire::kGlobalAddressToApp} : 0u, 0};
  std::vector<std::byte> payload(sizeof(req) + v->name.size());
  std::memcpy(payload.data(), &req, sizeof(req));
  std::memcpy(payload.data() + sizeof(req), v->name.data(), v->name.size());
  Reply r;
  w = Connection::Get().Call(op::kModuleGetGlobal, 0, payload, &r);
  wire::GetGlobalReply g{};
  if (w == WireStatus::kSuccess && !ReadReply(r, &g)) w = WireStatus::kUnknown;
  if (w == WireStatus::kNotFound) return SetError(cudaErrorInvalidSymbol);
  *ptr = g.ptr;
  *bytes = g.bytes;
  return Finish(w);
}

cudaError_t SymbolCopy(const void* symbol, void* host, size_t count, size_t offset, cudaMemcpyKind kind, bool to,
                       uint32_t stream, bool sync) {
  PHOS_CHECK_STICKY();
  uint64_t ptr = 0, bytes = 0;
  if (cudaError_t e = SymbolAddress(symbol, &ptr, &bytes); e != cudaSuccess) return e;
  if (offset > bytes || count > bytes - offset) return SetError(cudaErrorInvalidValue);
  void* dev = reinterpret_cast<void*>(ptr + offset);
  if (to) {
    const cudaMemcpyKind k = kind == cudaMemcpyDeviceToDevice ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice;
    return DoMemcpy(dev, host, count, k, stream, sync);
  }
  const cudaMemcpyKind k = kind == cudaMemcpyDeviceToDevice ? cudaMemcpyDeviceToDevice : cudaMemcpyDeviceToHost;
  return DoMemcpy(host, dev, count, k, stream, sync);
}
}  // namespace
}  // namespace phos::client

PHOS_EXPORT cudaError_t cudaGetSymbolAddress(void** devPtr, const void* symbol) {
  PHOS_CHECK_STICKY();
  if (devPtr == nullptr) return SetError(cudaErrorInvalidValue);
  uint64_t ptr = 0, bytes = 0;
  cudaError_t e = SymbolAddress(symbol, &ptr, &bytes, /*to_app=*/true);
  if (e == cudaSuccess) *devPtr = reinterpret_cast<void*>(ptr);
  return e;
}
PHOS_EXPORT cudaError_t cudaGetSymbolSize(size_t* size, const void* symbol) {
  PHOS_CHECK_STICKY();
  if (size == nullptr) return SetError(cudaErrorInvalidValue);
  uint64_t ptr = 0, bytes = 0;
  cudaError_t e = SymbolAddress(symbol, &ptr, &bytes);
  if (e == cudaSuccess) *size = bytes;
  return e;
}
PHOS_EXPORT cudaError_t cudaMemcpyToSymbol(const void* symbol, const void* src, size_t count, size_t offset,
                                           cudaMemcpyKind kind) {
  return SymbolCopy(symbol, const_cast<void*>(src), count, offset, kind, true, 0, true);
}
PHOS_EXPORT cudaError_t cudaMemcpyToSymbol_ptds(const void* symbol, const void* src, size_t count, size_t offset,
                                                cudaMemcpyKind kind) {
  return SymbolCopy(symbol, const_cast<void*>(src), count, offset, kind, true, PerThreadStreamId(), true);
}
PHOS_EXPORT cudaError_t cudaMemcpyFromSymbol(void* dst, const void* symbol, size_t count, size_t offset,
                                             cudaMemcpyKind kind) {
  return SymbolCopy(symbol, dst, count, offset, kind, false, 0, true);
}
PHOS_EXPORT cudaError_t cudaMemcpyFromSymbol_ptds(void* dst, const void* symbol, size_t count, size_t offset,
                                                  cudaMemcpyKind kind) {
  return SymbolCopy(symbol, dst, count, offset, kind, false, PerThreadStreamId(), true);
}
PHOS_EXPORT cudaError_t cudaMemcpyToSymbolAsync(const void* symbol, const void* src, size_t count, size_t offset,
                                                cudaMemcpyKind kind, cudaStream_t stream) {
  return SymbolCopy(symbol, const_cast<void*>(src), count, offset, kind, true, StreamIdOf(stream), false);
}
PHOS_EXPORT cudaError_t cudaMemcpyFromSymbolAsync(void* dst, const void* symbol, size_t count, size_t offset,
                                                  cudaMemcpyKind kind, cudaStream_t stream) {
  return SymbolCopy(symbol, dst, count, offset, kind, false, StreamIdOf(stream), false);
}
PHOS_EXPORT cudaError_t cudaMemcpyToSymbolAsync_ptsz(const void* symbol, const void* src, size_t count,
                                                     size_t offset, cudaMemcpyKind kind, cudaStream_t stream) {
  return SymbolCopy(symbol, const_cast<void*>(src), count, offset, kind, true,
                    StreamIdOf(stream, DefaultStream::kPerThread), false);
}
PHOS_EXPORT cudaError_t cudaMemcpyFromSymbolAsync_ptsz(void* dst, const void* symbol, size_t count, size_t offset,
                                                       cudaMemcpyKind kind, cudaStream_t stream) {
  return SymbolCopy(symbol, dst, count, offset, kind, false, StreamIdOf(stream, DefaultStream::kPerThread), false);
}
