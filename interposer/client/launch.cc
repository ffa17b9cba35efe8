// Kernel launches: cudaLaunchKernel (host stub), __cudaLaunchKernel (CUDA
// 13's generated launch path, with the handle from __cudaGetKernel) and
// cudaLaunchKernelExC (a configuration with launch attributes).
// Packs each argument at its parameter offset and posts one wire launch
// (no round trip); errors surface at the next synchronising call.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstring>
#include <vector>

#include "interposer/client/client_internal.h"
#include "interposer/client/connection.h"
#include "interposer/client/driver_internal.h"
#include "interposer/client/graphs.h"
#include "interposer/client/handles.h"
#include "interposer/client/launch_attributes.h"

namespace phos::client {
namespace {

// The device's launch limits, fetched once (a launch is posted, so a bad
// configuration must be caught here to be reported by the launch itself,
// as CUDA does, rather than at the next synchronising call).
struct LaunchLimits {
  bool ok = false;
  int max_threads = 0;
  int max_block[3] = {};
  int max_grid[3] = {};
};
const LaunchLimits& Limits() {
  static const LaunchLimits limits = [] {
    LaunchLimits l;
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) return l;
    l.ok = true;
    l.max_threads = p.maxThreadsPerBlock;
    for (int i = 0; i < 3; ++i) {
      l.max_block[i] = p.maxThreadsDim[i];
      l.max_grid[i] = p.maxGridSize[i];
    }
    return l;
  }();
  return limits;
}

bool ConfigFits(dim3 grid, dim3 block) {
  const LaunchLimits& l = Limits();
  if (!l.ok) return true;  // phosd checks again (and reports unavailability)
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  return threads <= static_cast<uint64_t>(l.max_threads) && block.x <= static_cast<unsigned>(l.max_block[0]) &&
         block.y <= static_cast<unsigned>(l.max_block[1]) && block.z <= static_cast<unsigned>(l.max_block[2]) &&
         grid.x <= static_cast<unsigned>(l.max_grid[0]) && grid.y <= static_cast<unsigned>(l.max_grid[1]) &&
         grid.z <= static_cast<unsigned>(l.max_grid[2]);
}

// Dynamic shared memory a launch may use without cudaFuncSetAttribute.
constexpr size_t kDefaultDynamicSharedLimit = 48 * 1024;

// The wire launch of registered kernel `k`: LaunchRequest + parameter
// block; *call when it must be called rather than posted (above 48 KiB of
// dynamic shared memory phosd refuses the launch unless cudaFuncSetAttribute
// raised the function's limit; a cooperative grid too large for the device
// fails the launch itself — either refusal is the launch's own result, as
// in CUDA).
cudaError_t Pack(KernelRec* k, dim3 grid, dim3 block, void** args, size_t shmem, bool cooperative,
                 std::vector<std::byte>* payload, bool* call) {
  if (k == nullptr) return cudaErrorInvalidDeviceFunction;
  if (!k->params_known) return cudaErrorInvalidDeviceFunction;
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || block.x == 0 || block.y == 0 || block.z == 0)
    return cudaErrorInvalidConfiguration;
  if (!ConfigFits(grid, block)) return cudaErrorInvalidConfiguration;
  WireStatus w = EnsureKernel(k);
  if (w != WireStatus::kSuccess) return static_cast<cudaError_t>(w);
  if (k->param_bytes > wire::kMaxParamBytes) return cudaErrorInvalidValue;
  wire::LaunchRequest req{k->function_id, {grid.x, grid.y, grid.z}, {block.x, block.y, block.z},
                          static_cast<uint32_t>(shmem), k->param_bytes,
                          cooperative ? uint32_t{wire::kLaunchCooperative} : 0u};
  payload->assign(sizeof(req) + k->param_bytes, std::byte{0});
  std::memcpy(payload->data(), &req, sizeof(req));
  std::byte* params = payload->data() + sizeof(req);
  for (size_t i = 0; i < k->params.size(); ++i) {
    if (args == nullptr || args[i] == nullptr) return cudaErrorInvalidValue;
    std::memcpy(params + k->params[i].offset, args[i], k->params[i].size);
  }
  *call = shmem > kDefaultDynamicSharedLimit || cooperative;
  return cudaSuccess;
}

WireStatus Submit(const std::vector<std::byte>& payload, bool call, uint32_t stream_id) {
  Connection& c = Connection::Get();
  return call ? c.Call(wire::op::kLaunchKernel, stream_id, payload) : c.Post(wire::op::kLaunchKernel, stream_id, payload);
}

cudaError_t Launch(KernelRec* k, dim3 grid, dim3 block, void** args, size_t shmem, cudaStream_t stream,
                   DefaultStream zero = DefaultStream::kLegacy, bool cooperative = false) {
  if (cudaError_t s = StickyError(); s != cudaSuccess) return SetError(s);
  std::vector<std::byte> payload;
  bool call = false;
  if (cudaError_t e = Pack(k, grid, block, args, shmem, cooperative, &payload, &call); e != cudaSuccess) {
    return SetError(e);
  }
  const uint32_t stream_id = StreamIdOf(stream, zero);
  cudaError_t captured = cudaSuccess;
  if (AnyCapture()) {
    KernelNodeRecord record;
    const bool recorded = !cooperative && KernelRecordOf(k->host_stub != nullptr ? k->host_stub : static_cast<const void*>(k), grid, block, shmem, payload, &record);
    const bool in_capture = recorded ? CaptureKernel(stream_id, KernelLaunchOp(payload, call), std::move(record), &captured)
                                     : CaptureOp(stream_id, cudaGraphNodeTypeKernel, KernelLaunchOp(payload, call), &captured);
    if (in_capture) return captured == cudaSuccess ? cudaSuccess : SetError(captured);
  }
  return Finish(Submit(payload, call, stream_id));
}

// A cudaKernel_t from cudaLibraryGetKernel is the driver's CUfunction
// (runtime_library.cc, driver_library.cc): it launches the driver's way.
// Anything else is a registered kernel (a host stub or __cudaGetKernel's
// handle).
cudaError_t LaunchAny(const void* func, dim3 grid, dim3 block, void** args, size_t shmem, cudaStream_t stream,
                      DefaultStream zero = DefaultStream::kLegacy, bool cooperative = false) {
  KernelRec* k = FindKernelByStub(func);
  DriverFunctionInfo info;
  if (k == nullptr && func != nullptr && DescribeDriverFunction(func, &info)) {
    CUresult r = LaunchDriverFunction(reinterpret_cast<CUfunction>(const_cast<void*>(func)), grid, block,
                                      static_cast<unsigned>(shmem), reinterpret_cast<CUstream>(stream),
                                      zero == DefaultStream::kPerThread, args, cooperative);
    return r == CUDA_SUCCESS ? cudaSuccess : SetError(static_cast<cudaError_t>(r));
  }
  return Launch(k, grid, block, args, shmem, stream, zero, cooperative);
}

// cudaLaunchKernelExC: a launch with a configuration and attributes (Thrust
// and CUB launch this way). The attributes phos cannot honour are refused by
// name (launch_attributes.h); the rest are hints.
cudaError_t LaunchEx(const cudaLaunchConfig_t* config, const void* func, void** args, DefaultStream zero) {
  if (config == nullptr || (config->numAttrs > 0 && config->attrs == nullptr)) return SetError(cudaErrorInvalidValue);
  static_assert(sizeof(cudaLaunchAttribute) == sizeof(CUlaunchAttribute) &&
                    sizeof(cudaLaunchAttributeValue) == sizeof(CUlaunchAttributeValue),
                "the runtime's and the driver's launch attributes no longer share a layout");
  if (UnhonouredLaunchAttribute(reinterpret_cast<const CUlaunchAttribute*>(config->attrs), config->numAttrs)) {
    return SetError(cudaErrorNotSupported);
  }
  return LaunchAny(func, config->gridDim, config->blockDim, args, config->dynamicSmemBytes, config->stream, zero,
                   CooperativeLaunch(reinterpret_cast<const CUlaunchAttribute*>(config->attrs), config->numAttrs));
}

}  // namespace

bool KernelRecordOf(const void* func, dim3 grid, dim3 block, size_t shmem, const std::vector<std::byte>& payload,
                    KernelNodeRecord* out) {
  KernelRec* k = FindKernelByStub(func);
  if (k == nullptr && func != nullptr && IsKernelRec(func)) k = static_cast<KernelRec*>(const_cast<void*>(func));
  if (k == nullptr || !k->params_known || payload.size() != sizeof(wire::LaunchRequest) + k->param_bytes) return false;
  out->func = func;
  out->grid = grid;
  out->block = block;
  out->shared_bytes = static_cast<unsigned>(shmem);
  out->block_bytes.assign(payload.begin() + sizeof(wire::LaunchRequest), payload.end());
  out->offsets.clear();
  for (const ParamSlot& p : k->params) out->offsets.push_back(p.offset);
  return true;
}

StreamOp KernelLaunchOp(std::vector<std::byte> payload, bool call) {
  return [payload = std::move(payload), call](uint32_t stream_id) { return Finish(Submit(payload, call, stream_id)); };
}

cudaError_t PackKernelLaunch(const void* func, dim3 grid, dim3 block, void** args, size_t shmem,
                             std::vector<std::byte>* payload, bool* call) {
  KernelRec* k = FindKernelByStub(func);
  if (k == nullptr && func != nullptr && IsKernelRec(func)) k = static_cast<KernelRec*>(const_cast<void*>(func));
  if (k == nullptr) {
    // A driver function (cudaLibraryGetKernel): its graph nodes are not offered.
    return func == nullptr ? cudaErrorInvalidDeviceFunction : cudaErrorNotSupported;
  }
  return Pack(k, grid, block, args, shmem, /*cooperative=*/false, payload, call);
}

}  // namespace phos::client

using namespace phos::client;  // NOLINT

PHOS_EXPORT cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t* config, const void* func, void** args) {
  return LaunchEx(config, func, args, DefaultStream::kLegacy);
}
PHOS_EXPORT cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t* config, const void* func, void** args) {
  return LaunchEx(config, func, args, DefaultStream::kPerThread);
}

PHOS_EXPORT cudaError_t cudaLaunchKernel(const void* func, dim3 gridDim, dim3 blockDim, void** args,
                                         size_t sharedMem, cudaStream_t stream) {
  return LaunchAny(func, gridDim, blockDim, args, sharedMem, stream);
}
PHOS_EXPORT cudaError_t cudaLaunchKernel_ptsz(const void* func, dim3 gridDim, dim3 blockDim, void** args,
                                              size_t sharedMem, cudaStream_t stream) {
  return LaunchAny(func, gridDim, blockDim, args, sharedMem, stream, DefaultStream::kPerThread);
}
PHOS_EXPORT cudaError_t cudaLaunchCooperativeKernel(const void* func, dim3 gridDim, dim3 blockDim, void** args,
                                                    size_t sharedMem, cudaStream_t stream) {
  return LaunchAny(func, gridDim, blockDim, args, sharedMem, stream, DefaultStream::kLegacy, /*cooperative=*/true);
}
PHOS_EXPORT cudaError_t cudaLaunchCooperativeKernel_ptsz(const void* func, dim3 gridDim, dim3 blockDim, void** args,
                                                         size_t sharedMem, cudaStream_t stream) {
  return LaunchAny(func, gridDim, blockDim, args, sharedMem, stream, DefaultStream::kPerThread, /*cooperative=*/true);
}
PHOS_EXPORT cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void** args,
                                           size_t sharedMem, cudaStream_t stream) {
  return Launch(FindKernelByStub(kernel), gridDim, blockDim, args, sharedMem, stream);
}
PHOS_EXPORT cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void** args,
                                                size_t sharedMem, cudaStream_t stream) {
  return Launch(FindKernelByStub(kernel), gridDim, blockDim, args, sharedMem, stream, DefaultStream::kPerThread);
}
