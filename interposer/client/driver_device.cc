// Driver API: cuInit, versions and device queries. They send the runtime's
// wire ops (kGetDeviceCount, kDeviceGetAttribute, kGetDeviceProperties).
#include <atomic>
#include <cstdio>
#include <cstring>

#include "interposer/client/client_internal.h"
#include "interposer/client/connection.h"
#include "interposer/client/devices.h"
#include "interposer/client/driver_internal.h"

namespace phos::client {
namespace {

namespace op = wire::op;

std::atomic<bool> g_initialized{false};

// The device's properties as phosd reports them (a staging chunk carries
// the WireDeviceProps: it is larger than a completion slot).
CUresult FetchProps(CUdevice dev, wire::WireDeviceProps* props) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  int physical = 0;
  if (cudaError_t e = PhysicalDevice(dev, &physical); e != cudaSuccess) return ToCu(static_cast<WireStatus>(e));
  return ToCu(FetchDeviceProps(physical, props));
}

CUresult Attribute(int* value, CUdevice_attribute attrib, CUdevice dev) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int physical = 0;
  if (cudaError_t e = PhysicalDevice(dev, &physical); e != cudaSuccess) return ToCu(static_cast<WireStatus>(e));
  ring::Reply r;
  WireStatus w = Connection::Get().Call(
      op::kDeviceGetAttribute, 0, Bytes(wire::DeviceAttributeRequest{physical, static_cast<int32_t>(attrib)}), &r);
  wire::ValueReply v{};
  if (w == WireStatus::kSuccess && r.bytes == sizeof(v)) {
    std::memcpy(&v, r.data.data(), sizeof(v));
    *value = static_cast<int>(v.value);
  }
  return ToCu(w);
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

CUresult ParseUuid(const char* text, CUuuid* out) {
  static_assert(sizeof(out->bytes) == 16);
  return ParseUuidText(text, reinterpret_cast<unsigned char*>(out->bytes)) ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN;
}

}  // namespace

bool ParseUuidText(const char* text, unsigned char out[16]) {
  std::memset(out, 0, 16);
  const char* p = std::strncmp(text, "GPU-", 4) == 0 ? text + 4 : text;
  int n = 0;
  for (; *p != '\0' && n < 32; ++p) {
    if (*p == '-') continue;
    const int d = HexDigit(*p);
    if (d < 0) return false;
    out[n / 2] = static_cast<unsigned char>(out[n / 2] | (n % 2 == 0 ? d << 4 : d));
    ++n;
  }
  return n == 32;
}

CUresult CheckInit() {
  if (InForkedChild()) return CUDA_ERROR_NOT_INITIALIZED;  // fork_guard.cc: as the driver answers a forked child
  if (cudaError_t s = StickyError(); s != cudaSuccess) return ToCu(s);
  if (g_initialized.load(std::memory_order_acquire)) return CUDA_SUCCESS;
  // CUDA's runtime initialises the driver at its first call, so a program
  // whose runtime call came first may use the driver without cuInit
  // (PyTorch asks cuDevicePrimaryCtxGetState so). A runtime call connected
  // us: that is cuInit's work done.
  if (Connection::Get().connected()) {
    NoteDriverInit();
    g_initialized.store(true, std::memory_order_release);
    return CUDA_SUCCESS;
  }
  return CUDA_ERROR_NOT_INITIALIZED;
}

CUresult ToCu(cudaError_t e) {
  // Sticky errors (as runtime_api.cc's IsSticky) poison the process for
  // both APIs: SetError records them process-wide.
  if (wire::IsKernelFault(static_cast<WireStatus>(e)) || e == cudaErrorDevicesUnavailable) SetError(e);
  switch (e) {
    case cudaErrorInvalidConfiguration:
    case cudaErrorInvalidMemcpyDirection:
    case cudaErrorInvalidPitchValue:
      return CUDA_ERROR_INVALID_VALUE;
    case cudaErrorInvalidDeviceFunction:
      return CUDA_ERROR_INVALID_HANDLE;
    case cudaErrorInvalidSymbol:
      return CUDA_ERROR_NOT_FOUND;
    case cudaErrorInvalidDevicePointer:
      return CUDA_ERROR_INVALID_VALUE;
    default:
      return static_cast<CUresult>(e);  // the numbers phos produces coincide (wire.h)
  }
}

}  // namespace phos::client

using namespace phos::client;  // NOLINT
namespace wire = phos::wire;
namespace ring = phos::ring;

// cuInit contacts phosd at once, so a missing daemon shows at the first
// call (CUDA_ERROR_DEVICE_UNAVAILABLE with one message naming the socket).
PHOS_EXPORT CUresult cuInit(unsigned int Flags) {
  if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (InForkedChild()) return CUDA_ERROR_NOT_INITIALIZED;
  NoteDriverInit();
  if (WireStatus w = Connection::Get().Ensure(); w != WireStatus::kSuccess) return ToCu(w);
  g_initialized.store(true, std::memory_order_release);
  return CUDA_SUCCESS;
}

PHOS_EXPORT CUresult cuDriverGetVersion(int* driverVersion) {
  if (driverVersion == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *driverVersion = CUDA_VERSION;  // the toolkit libphos.so was built against
  return CUDA_SUCCESS;
}

PHOS_EXPORT CUresult cuDeviceGetCount(int* count) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int n = 0;
  if (cudaError_t e = VisibleDeviceCount(&n); e != cudaSuccess) return ToCu(static_cast<WireStatus>(e));
  *count = n;  // the driver answers 0 without an error when no GPU is visible
  return CUDA_SUCCESS;
}

PHOS_EXPORT CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int count = 0;
  if (CUresult r = cuDeviceGetCount(&count); r != CUDA_SUCCESS) return r;
  if (ordinal < 0 || ordinal >= count) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

PHOS_EXPORT CUresult cuDeviceGetAttribute(int* pi, CUdevice_attribute attrib, CUdevice dev) {
  return Attribute(pi, attrib, dev);
}

PHOS_EXPORT CUresult cuDeviceGetName(char* name, int len, CUdevice dev) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  wire::WireDeviceProps props{};
  if (CUresult r = FetchProps(dev, &props); r != CUDA_SUCCESS) return r;
  std::snprintf(name, static_cast<size_t>(len), "%s", props.name);
  return CUDA_SUCCESS;
}

PHOS_EXPORT CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  wire::WireDeviceProps props{};
  if (CUresult r = FetchProps(dev, &props); r != CUDA_SUCCESS) return r;
  *bytes = props.total_memory;
  return CUDA_SUCCESS;
}

PHOS_EXPORT CUresult cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  wire::WireDeviceProps props{};
  if (CUresult r = FetchProps(dev, &props); r != CUDA_SUCCESS) return r;
  return ParseUuid(props.uuid, uuid);
}

PHOS_EXPORT CUresult cuDeviceComputeCapability(int* major, int* minor, CUdevice dev) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (major == nullptr || minor == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = Attribute(major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev); r != CUDA_SUCCESS) return r;
  return Attribute(minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
}

PHOS_EXPORT CUresult cuDeviceGetProperties(CUdevprop* prop, CUdevice dev) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  wire::WireDeviceProps p{};
  if (CUresult r = FetchProps(dev, &p); r != CUDA_SUCCESS) return r;
  std::memset(prop, 0, sizeof(*prop));
  auto a = [&p](CUdevice_attribute attr) {
    const int64_t v = p.attributes[static_cast<int>(attr)];
    return v == wire::kNoAttribute ? 0 : static_cast<int>(v);
  };
  prop->maxThreadsPerBlock = a(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  prop->maxThreadsDim[0] = a(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X);
  prop->maxThreadsDim[1] = a(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y);
  prop->maxThreadsDim[2] = a(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z);
  prop->maxGridSize[0] = a(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X);
  prop->maxGridSize[1] = a(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y);
  prop->maxGridSize[2] = a(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z);
  prop->sharedMemPerBlock = a(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
  prop->totalConstantMemory = a(CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY);
  prop->SIMDWidth = a(CU_DEVICE_ATTRIBUTE_WARP_SIZE);
  prop->memPitch = a(CU_DEVICE_ATTRIBUTE_MAX_PITCH);
  prop->regsPerBlock = a(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK);
  prop->clockRate = a(CU_DEVICE_ATTRIBUTE_CLOCK_RATE);
  prop->textureAlign = a(CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT);
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------- peers
// docs/interposer.md "Several GPUs in one process": copies between GPUs are
// offered, kernels reaching another GPU's memory are not, so no pair of
// GPUs can access each other (what the driver answers for GPUs without a
// peer link).

namespace {
CUresult CheckPeerPair(CUdevice dev, CUdevice peer) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  int physical = 0;
  if (PhysicalDevice(dev, &physical) != cudaSuccess || PhysicalDevice(peer, &physical) != cudaSuccess) {
    return CUDA_ERROR_INVALID_DEVICE;
  }
  return CUDA_SUCCESS;
}
}  // namespace

PHOS_EXPORT CUresult cuDeviceCanAccessPeer(int* canAccessPeer, CUdevice dev, CUdevice peerDev) {
  if (canAccessPeer == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = CheckPeerPair(dev, peerDev); r != CUDA_SUCCESS) return r;
  *canAccessPeer = 0;
  return CUDA_SUCCESS;
}

PHOS_EXPORT CUresult cuDeviceGetP2PAttribute(int* value, CUdevice_P2PAttribute attrib, CUdevice srcDevice,
                                             CUdevice dstDevice) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = CheckPeerPair(srcDevice, dstDevice); r != CUDA_SUCCESS) return r;
  if (srcDevice == dstDevice) return CUDA_ERROR_INVALID_DEVICE;  // as the driver answers
  switch (attrib) {
    case CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK:
    case CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED:
    case CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED:
    case CU_DEVICE_P2P_ATTRIBUTE_CUDA_ARRAY_ACCESS_SUPPORTED:
      *value = 0;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}
