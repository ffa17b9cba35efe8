// Function attributes and occupancy (docs/interposer.md "Streams, functions,
// reset and fork"): cudaFuncGetAttributes / cudaFuncSetAttribute /
// cudaFuncSetCacheConfig, cuFuncGetAttribute / cuFuncSetAttribute, and the
// occupancy calls, computed here from the kernel's attributes (one round
// trip) and the device's per-SM limits (fetched once) with
// common/occupancy.h. The header-only templates of cuda_runtime.h
// (cudaOccupancyMaxPotentialBlockSize...) are built on these.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "common/occupancy.h"
#include "interposer/client/client_internal.h"
#include "interposer/client/connection.h"
#include "interposer/client/driver_internal.h"

namespace phos::client {

WireStatus FunctionIdOf(const void* func, uint32_t* id) {
  if (KernelRec* k = FindKernelByStub(func)) {
    WireStatus w = EnsureKernel(k);
    if (w == WireStatus::kSuccess) *id = k->function_id;
    return w;
  }
  if (func != nullptr && DriverFunctionId(func, id)) return WireStatus::kSuccess;
  return WireStatus::kInvalidResourceHandle;
}

namespace {

namespace op = wire::op;

WireStatus GetAttributes(const void* func, wire::FunctionAttributesReply* out) {
  uint32_t id = 0;
  if (WireStatus w = FunctionIdOf(func, &id); w != WireStatus::kSuccess) return w;
  const wire::HandleRequest req{id, 0};
  ring::Reply r;
  WireStatus w = Connection::Get().Call(op::kFuncGetAttributes, 0,
                                        std::as_bytes(std::span<const wire::HandleRequest>(&req, 1)), &r);
  if (w != WireStatus::kSuccess) return w;
  if (r.bytes != sizeof(*out)) return WireStatus::kUnknown;
  std::memcpy(out, r.data.data(), sizeof(*out));
  return WireStatus::kSuccess;
}

WireStatus SetAttribute(const void* func, int32_t attribute, int value) {
  uint32_t id = 0;
  if (WireStatus w = FunctionIdOf(func, &id); w != WireStatus::kSuccess) return w;
  const wire::FuncSetAttributeRequest req{id, attribute, value, 0};
  return Connection::Get().Call(op::kFuncSetAttribute, 0,
                                std::as_bytes(std::span<const wire::FuncSetAttributeRequest>(&req, 1)));
}

// The device's per-SM limits, from cudaGetDeviceProperties once (they do
// not change, not even across cudaDeviceReset).
WireStatus DeviceLimits(occupancy::SmLimits* out) {
  static std::mutex mu;
  static bool have = false;
  static occupancy::SmLimits limits;
  std::lock_guard<std::mutex> lock(mu);
  if (!have) {
    cudaDeviceProp p;
    if (cudaError_t e = cudaGetDeviceProperties(&p, 0); e != cudaSuccess) return static_cast<WireStatus>(e);
    limits = occupancy::LimitsFor(p.major, p.minor, p.warpSize, p.maxThreadsPerMultiProcessor, p.maxThreadsPerBlock,
                                  p.regsPerMultiprocessor, p.regsPerBlock, p.sharedMemPerMultiprocessor,
                                  p.sharedMemPerBlockOptin);
    have = true;
  }
  *out = limits;
  return WireStatus::kSuccess;
}

WireStatus ActiveBlocks(const void* func, int block_size, size_t dynamic_shared, int* blocks) {
  if (blocks == nullptr || block_size <= 0) return WireStatus::kInvalidValue;
  wire::FunctionAttributesReply a{};
  if (WireStatus w = GetAttributes(func, &a); w != WireStatus::kSuccess) return w;
  occupancy::SmLimits l;
  if (WireStatus w = DeviceLimits(&l); w != WireStatus::kSuccess) return w;
  if (block_size > a.max_threads_per_block) {
    *blocks = 0;  // the kernel cannot be launched with this block size
    return WireStatus::kSuccess;
  }
  occupancy::BlockUse u;
  u.threads = block_size;
  u.registers_per_thread = a.num_regs;
  u.shared_bytes = a.shared_size_bytes + dynamic_shared;
  *blocks = occupancy::MaxActiveBlocks(l, u).blocks;
  return WireStatus::kSuccess;
}

// cudaFuncSetCacheConfig is a hint: phos records it (nothing reads it back
// through the runtime API) and does not forward it.
struct CacheConfigs {
  std::mutex mu;
  std::unordered_map<const void*, int> by_function;  // guarded by mu
};
CacheConfigs& CacheConfig() {
  static CacheConfigs* c = new CacheConfigs();  // leaked: CUDA calls may come during exit
  return *c;
}

cudaError_t Fail(WireStatus w) { return Finish(w); }

// The most dynamic shared memory each of `blocks` blocks of `block_size`
// threads can have while all of them stay resident on one SM (0 when that
// many blocks do not fit at all).
WireStatus AvailableDynamicShared(const void* func, int blocks, int block_size, size_t* out) {
  if (out == nullptr || blocks <= 0 || block_size <= 0) return WireStatus::kInvalidValue;
  wire::FunctionAttributesReply a{};
  if (WireStatus w = GetAttributes(func, &a); w != WireStatus::kSuccess) return w;
  phos::occupancy::SmLimits l;
  if (WireStatus w = DeviceLimits(&l); w != WireStatus::kSuccess) return w;
  phos::occupancy::BlockUse u{block_size, a.num_regs, a.shared_size_bytes};
  if (phos::occupancy::MaxActiveBlocks(l, u).blocks < blocks) {
    *out = 0;
    return WireStatus::kSuccess;
  }
  const uint64_t per_block = l.shared_per_sm / static_cast<uint64_t>(blocks) / l.shared_alloc_unit * l.shared_alloc_unit;
  const uint64_t used = a.shared_size_bytes + l.reserved_shared_per_block;
  uint64_t avail = per_block > used ? per_block - used : 0;
  avail = std::min<uint64_t>(avail, l.shared_per_block_optin - std::min<uint64_t>(a.shared_size_bytes, l.shared_per_block_optin));
  *out = avail;
  return WireStatus::kSuccess;
}

#define PHOS_RUNTIME_PRELUDE()                                                    \
  do {                                                                            \
    if (cudaError_t _s = StickyError(); _s != cudaSuccess) return SetError(_s);   \
  } while (0)

}  // namespace
}  // namespace phos::client

using namespace phos::client;  // NOLINT
namespace wire = phos::wire;

// ---------------------------------------------------------------- runtime

PHOS_EXPORT cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attr, const void* func) {
  PHOS_RUNTIME_PRELUDE();
  if (attr == nullptr) return SetError(cudaErrorInvalidValue);
  wire::FunctionAttributesReply a{};
  WireStatus w = GetAttributes(func, &a);
  if (w == WireStatus::kInvalidResourceHandle) return SetError(cudaErrorInvalidDeviceFunction);
  if (w != WireStatus::kSuccess) return Fail(w);
  std::memset(attr, 0, sizeof(*attr));
  attr->sharedSizeBytes = a.shared_size_bytes;
  attr->constSizeBytes = a.const_size_bytes;
  attr->localSizeBytes = a.local_size_bytes;
  attr->maxThreadsPerBlock = a.max_threads_per_block;
  attr->numRegs = a.num_regs;
  attr->ptxVersion = a.ptx_version;
  attr->binaryVersion = a.binary_version;
  attr->cacheModeCA = a.cache_mode_ca;
  attr->maxDynamicSharedSizeBytes = a.max_dynamic_shared_size_bytes;
  attr->preferredShmemCarveout = a.preferred_shared_memory_carveout;
  return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  PHOS_RUNTIME_PRELUDE();
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize && attr != cudaFuncAttributePreferredSharedMemoryCarveout) {
    static std::once_flag once;
    std::call_once(once, [attr] {
      std::fprintf(stderr, "phos: cudaFuncSetAttribute(attribute %d) is not supported (only the dynamic shared "
                   "memory limit and the carveout are); it returns cudaErrorNotSupported\n", static_cast<int>(attr));
    });
    return SetError(cudaErrorNotSupported);
  }
  WireStatus w = SetAttribute(func, static_cast<int32_t>(attr), value);
  if (w == WireStatus::kInvalidResourceHandle) return SetError(cudaErrorInvalidDeviceFunction);
  return Fail(w);
}

PHOS_EXPORT cudaError_t cudaFuncSetCacheConfig(const void* func, cudaFuncCache config) {
  PHOS_RUNTIME_PRELUDE();
  if (config < cudaFuncCachePreferNone || config > cudaFuncCachePreferEqual) return SetError(cudaErrorInvalidValue);
  if (FindKernelByStub(func) == nullptr) return SetError(cudaErrorInvalidDeviceFunction);
  CacheConfigs& c = CacheConfig();
  std::lock_guard<std::mutex> lock(c.mu);
  c.by_function[func] = config;
  return cudaSuccess;
}

// A cudaFunction_t is the kernel's registry record (like cudaKernel_t).
PHOS_EXPORT cudaError_t cudaGetFuncBySymbol(cudaFunction_t* functionPtr, const void* symbolPtr) {
  if (functionPtr == nullptr) return SetError(cudaErrorInvalidValue);
  KernelRec* k = FindKernelByStub(symbolPtr);
  if (k == nullptr) return SetError(cudaErrorInvalidDeviceFunction);
  *functionPtr = reinterpret_cast<cudaFunction_t>(k);
  return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* numBlocks, const void* func,
                                                                                int blockSize, size_t dynamicSMemSize,
                                                                                unsigned int flags) {
  PHOS_RUNTIME_PRELUDE();
  if (flags != cudaOccupancyDefault && flags != cudaOccupancyDisableCachingOverride) {
    return SetError(cudaErrorInvalidValue);
  }
  WireStatus w = ActiveBlocks(func, blockSize, dynamicSMemSize, numBlocks);
  if (w == WireStatus::kInvalidResourceHandle) return SetError(cudaErrorInvalidDeviceFunction);
  return Fail(w);
}

PHOS_EXPORT cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* numBlocks, const void* func, int blockSize,
                                                                      size_t dynamicSMemSize) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(numBlocks, func, blockSize, dynamicSMemSize,
                                                                cudaOccupancyDefault);
}

PHOS_EXPORT cudaError_t cudaOccupancyAvailableDynamicSMemPerBlock(size_t* dynamicSmemSize, const void* func,
                                                                  int numBlocks, int blockSize) {
  PHOS_RUNTIME_PRELUDE();
  WireStatus w = AvailableDynamicShared(func, numBlocks, blockSize, dynamicSmemSize);
  if (w == WireStatus::kInvalidResourceHandle) return SetError(cudaErrorInvalidDeviceFunction);
  return w == WireStatus::kSuccess ? cudaSuccess : Fail(w);
}

// ---------------------------------------------------------------- driver

namespace {
CUresult DriverPrelude() { return CheckInit(); }

// CUresult for a wire status: an unknown function handle is
// CUDA_ERROR_INVALID_HANDLE (= the wire's kInvalidResourceHandle).
CUresult Cu(WireStatus w) { return ToCu(w); }
}  // namespace

PHOS_EXPORT CUresult cuFuncGetAttribute(int* pi, CUfunction_attribute attrib, CUfunction hfunc) {
  if (CUresult r = DriverPrelude(); r != CUDA_SUCCESS) return r;
  if (pi == nullptr) return CUDA_ERROR_INVALID_VALUE;
  wire::FunctionAttributesReply a{};
  if (WireStatus w = GetAttributes(hfunc, &a); w != WireStatus::kSuccess) return Cu(w);
  switch (attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *pi = a.max_threads_per_block; break;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: *pi = static_cast<int>(a.shared_size_bytes); break;
    case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES: *pi = static_cast<int>(a.const_size_bytes); break;
    case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: *pi = static_cast<int>(a.local_size_bytes); break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS: *pi = a.num_regs; break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION: *pi = a.ptx_version; break;
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *pi = a.binary_version; break;
    case CU_FUNC_ATTRIBUTE_CACHE_MODE_CA: *pi = a.cache_mode_ca; break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *pi = a.max_dynamic_shared_size_bytes; break;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT: *pi = a.preferred_shared_memory_carveout; break;
    case CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
    case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE: *pi = 0; break;  // no clusters in phos
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

PHOS_EXPORT CUresult cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value) {
  if (CUresult r = DriverPrelude(); r != CUDA_SUCCESS) return r;
  if (attrib != CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES &&
      attrib != CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT) {
    static std::once_flag once;
    std::call_once(once, [attrib] {
      std::fprintf(stderr, "phos: cuFuncSetAttribute(attribute %d) is not supported (only the dynamic shared "
                   "memory limit and the carveout are); it returns CUDA_ERROR_NOT_SUPPORTED\n", static_cast<int>(attrib));
    });
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  return Cu(SetAttribute(hfunc, static_cast<int32_t>(attrib), value));
}

PHOS_EXPORT CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* numBlocks, CUfunction func,
                                                                          int blockSize, size_t dynamicSMemSize,
                                                                          unsigned int flags) {
  if (CUresult r = DriverPrelude(); r != CUDA_SUCCESS) return r;
  if (flags != CU_OCCUPANCY_DEFAULT && flags != CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE) return CUDA_ERROR_INVALID_VALUE;
  return Cu(ActiveBlocks(func, blockSize, dynamicSMemSize, numBlocks));
}

PHOS_EXPORT CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int* numBlocks, CUfunction func, int blockSize,
                                                                 size_t dynamicSMemSize) {
  return cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(numBlocks, func, blockSize, dynamicSMemSize,
                                                              CU_OCCUPANCY_DEFAULT);
}

// The block size with the most resident threads per SM, and the grid that
// fills the device with it: every warp-multiple block size from the largest
// the kernel allows down, the first best one kept (the search CUDA's own
// cudaOccupancyMaxPotentialBlockSize template makes), stopping early once an
// SM is full. `per_block` gives the dynamic shared memory of a block size
// when the caller passes one.
PHOS_EXPORT CUresult cuOccupancyMaxPotentialBlockSizeWithFlags(int* minGridSize, int* blockSize, CUfunction func,
                                                               CUoccupancyB2DSize blockSizeToDynamicSMemSize,
                                                               size_t dynamicSMemSize, int blockSizeLimit,
                                                               unsigned int flags) {
  if (CUresult r = DriverPrelude(); r != CUDA_SUCCESS) return r;
  if (minGridSize == nullptr || blockSize == nullptr || blockSizeLimit < 0) return CUDA_ERROR_INVALID_VALUE;
  if (flags != CU_OCCUPANCY_DEFAULT && flags != CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE) return CUDA_ERROR_INVALID_VALUE;
  wire::FunctionAttributesReply a{};
  if (WireStatus w = GetAttributes(func, &a); w != WireStatus::kSuccess) return Cu(w);
  phos::occupancy::SmLimits l;
  if (WireStatus w = DeviceLimits(&l); w != WireStatus::kSuccess) return Cu(w);
  int sms = 0;
  if (cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0); e != cudaSuccess) return ToCu(e);
  int limit = std::min(a.max_threads_per_block, l.max_threads_per_block);
  if (blockSizeLimit > 0) limit = std::min(limit, blockSizeLimit);
  const int granularity = l.warp_size;
  int best_threads = 0, best_block = 0, best_blocks = 0;
  for (int aligned = (limit + granularity - 1) / granularity * granularity; aligned > 0; aligned -= granularity) {
    const int size = std::min(limit, aligned);
    const size_t dynamic = blockSizeToDynamicSMemSize ? blockSizeToDynamicSMemSize(size) : dynamicSMemSize;
    int blocks = 0;
    if (WireStatus w = ActiveBlocks(func, size, dynamic, &blocks); w != WireStatus::kSuccess) return Cu(w);
    if (blocks * size > best_threads) {
      best_threads = blocks * size;
      best_block = size;
      best_blocks = blocks;
    }
    if (best_threads == l.max_threads_per_sm) break;
  }
  *minGridSize = best_blocks * sms;
  *blockSize = best_block;
  return CUDA_SUCCESS;
}

PHOS_EXPORT CUresult cuOccupancyAvailableDynamicSMemPerBlock(size_t* dynamicSmemSize, CUfunction func, int numBlocks,
                                                             int blockSize) {
  if (CUresult r = DriverPrelude(); r != CUDA_SUCCESS) return r;
  return Cu(AvailableDynamicShared(func, numBlocks, blockSize, dynamicSmemSize));
}

PHOS_EXPORT CUresult cuOccupancyMaxPotentialBlockSize(int* minGridSize, int* blockSize, CUfunction func,
                                                      CUoccupancyB2DSize blockSizeToDynamicSMemSize,
                                                      size_t dynamicSMemSize, int blockSizeLimit) {
  return cuOccupancyMaxPotentialBlockSizeWithFlags(minGridSize, blockSize, func, blockSizeToDynamicSMemSize,
                                                   dynamicSMemSize, blockSizeLimit, CU_OCCUPANCY_DEFAULT);
}
