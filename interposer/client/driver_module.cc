// Driver API modules and launches: cuModuleLoad*/Unload/GetFunction/
// GetGlobal and cuLaunchKernel. A CUmodule is a DriverModule* and a
// CUfunction a KernelRec* (the records nvcc's registration path uses, so
// EnsureModule / EnsureKernel send kModuleLoad / kModuleGetFunction for
// both APIs). Modules load eagerly, so a bad image fails cuModuleLoad*; the
// parameter layouts that cuLaunchKernel packs `kernelParams` with come from
// the image (image_layouts.h).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "interposer/client/connection.h"
#include "interposer/client/driver_internal.h"
#include "interposer/client/graphs.h"
#include "interposer/client/handles.h"
#include "interposer/client/launch_attributes.h"
#include "interposer/client/image_layouts.h"
#include "interposer/client/jit_ptx.h"

namespace phos::client {
namespace {

namespace op = wire::op;

struct DriverModule {
  // A library (cuLibraryLoad*) holding no code this GPU runs: nothing was
  // loaded in phosd; its kernels and variables answer
  // CUDA_ERROR_NO_BINARY_FOR_GPU when asked for (LoadDriverLibrary).
  bool no_binary = false;
  ModuleRec rec;         // id and load state; the image is dropped once loaded
  ImageLayouts layouts;  // parameter tables of its kernels
  std::map<std::string, std::unique_ptr<KernelRec>, std::less<>> functions;  // by name: one CUfunction per name
};

// Every live driver module and function. One mutex serialises module
// loads, unloads and function lookups (rare calls) and guards the records
// while a launch reads a function's id and parameter layout, so an unload
// on another thread cannot free them mid-launch.
struct DriverModules {
  std::mutex mu;
  std::unordered_map<const void*, std::unique_ptr<DriverModule>> modules;  // by CUmodule
  std::unordered_set<const void*> functions;                                // live CUfunctions
};
DriverModules& Mods() {
  static DriverModules* m = new DriverModules();  // leaked: handles outlive static destructors
  return *m;
}

DriverModule* FindModuleLocked(CUmodule h) {
  auto it = Mods().modules.find(h);
  return it == Mods().modules.end() ? nullptr : it->second.get();
}

// Loads `image` in phosd as a new module. A load phosd refuses as invalid
// input is a bad image for the app (CUDA_ERROR_INVALID_IMAGE).
CUresult Load(CUmodule* out, std::span<const std::byte> image) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (image.empty() || image.size() > wire::kMaxModuleImageBytes) return CUDA_ERROR_INVALID_IMAGE;
  auto m = std::make_unique<DriverModule>();
  m->rec.id = NewModuleId();
  // A JIT-linked cubin goes to phosd together with the PTX it came from
  // (jit_ptx.h); its parameter layouts still come from the cubin.
  if (std::vector<std::byte> with_ptx; ImageWithAttachedPtx(image, &with_ptx)) {
    m->rec.image = std::move(with_ptx);
  } else {
    m->rec.image.assign(image.begin(), image.end());
  }
  ReadImageLayouts(image, &m->layouts);  // a failure here leaves the verdict to phosd
  WireStatus w = EnsureModule(&m->rec);
  if (w == WireStatus::kInvalidValue || w == WireStatus::kInvalidImage) return CUDA_ERROR_INVALID_IMAGE;
  if (w != WireStatus::kSuccess) return ToCu(w);
  std::vector<std::byte>().swap(m->rec.image);  // phosd has it; keep only the layouts
  DriverModules& d = Mods();
  std::lock_guard<std::mutex> lock(d.mu);
  *out = reinterpret_cast<CUmodule>(m.get());
  d.modules.emplace(m.get(), std::move(m));
  return CUDA_SUCCESS;
}

// JIT options ask for logs and timings back: phos does no JIT of its own
// (phosd's backend does), so report empty logs (a NUL in each buffer that
// has room, 0 bytes written) and no time.
void AnswerJitOptions(unsigned n, CUjit_option* options, void** values) {
  if (options == nullptr || values == nullptr) return;
  const auto buffer_size = [&](CUjit_option size_option) -> uintptr_t {
    for (unsigned j = 0; j < n; ++j)
      if (options[j] == size_option) return reinterpret_cast<uintptr_t>(values[j]);
    return 0;
  };
  for (unsigned i = 0; i < n; ++i) {
    if (options[i] == CU_JIT_INFO_LOG_BUFFER && values[i] != nullptr &&
        buffer_size(CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES) > 0)
      static_cast<char*>(values[i])[0] = '\0';
    if (options[i] == CU_JIT_ERROR_LOG_BUFFER && values[i] != nullptr &&
        buffer_size(CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES) > 0)
      static_cast<char*>(values[i])[0] = '\0';
  }
  for (unsigned i = 0; i < n; ++i) {
    if (options[i] == CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES || options[i] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES ||
        options[i] == CU_JIT_WALL_TIME)
      values[i] = nullptr;  // 0 bytes written / 0.0f ms
  }
}

// Builds the parameter block of a launch of `k` from either `kernelParams`
// (one pointer per parameter, copied at each parameter's offset) or `extra`
// (CU_LAUNCH_PARAM_BUFFER_POINTER/_SIZE: an already packed block, passed
// as is).
CUresult PackParams(const KernelRec& k, void** kernelParams, void** extra, std::vector<std::byte>* block) {
  if (kernelParams != nullptr && extra != nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (extra != nullptr) {
    const void* buffer = nullptr;
    size_t size = 0;
    bool have_size = false;
    for (size_t i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
      if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) {
        buffer = extra[i + 1];
      } else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) {
        if (extra[i + 1] == nullptr) return CUDA_ERROR_INVALID_VALUE;
        size = *static_cast<const size_t*>(extra[i + 1]);
        have_size = true;
      } else {
        return CUDA_ERROR_INVALID_VALUE;  // unknown key
      }
    }
    if (!have_size || buffer == nullptr) size = 0;  // the pointer has no effect without a size
    if (k.params_known) {
      if (size < k.param_bytes) return CUDA_ERROR_INVALID_VALUE;
      size = k.param_bytes;  // a larger buffer's tail is not part of the parameters
    }
    if (size > wire::kMaxParamBytes) return CUDA_ERROR_INVALID_VALUE;
    block->resize(size);
    if (size != 0) std::memcpy(block->data(), buffer, size);
    return CUDA_SUCCESS;
  }
  if (!k.params_known) return CUDA_ERROR_INVALID_VALUE;  // no layout to pack kernelParams with: use `extra`
  if (k.param_bytes > wire::kMaxParamBytes) return CUDA_ERROR_INVALID_VALUE;
  block->assign(k.param_bytes, std::byte{0});
  for (size_t i = 0; i < k.params.size(); ++i) {
    if (kernelParams == nullptr || kernelParams[i] == nullptr) return CUDA_ERROR_INVALID_VALUE;
    std::memcpy(block->data() + k.params[i].offset, kernelParams[i], k.params[i].size);
  }
  return CUDA_SUCCESS;
}

}  // namespace

CUresult PackDriverLaunch(CUfunction f, dim3 grid, dim3 block, unsigned shmem, void** kernelParams, void** extra,
                          bool cooperative, std::vector<std::byte>* payload_out) {
  const unsigned gx = grid.x, gy = grid.y, gz = grid.z, bx = block.x, by = block.y, bz = block.z;
  if (f == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0) return CUDA_ERROR_INVALID_VALUE;
  std::vector<std::byte>& payload = *payload_out;
  {
    DriverModules& d = Mods();
    std::unique_lock<std::mutex> lock(d.mu);
    auto* k = reinterpret_cast<KernelRec*>(f);
    if (d.functions.count(f) == 0) {
      lock.unlock();
      // A runtime kernel handle (cudaKernel_t / cudaFunction_t of a
      // registered kernel) is a KernelRec too: it lives as long as the process.
      if (!IsKernelRec(f)) return CUDA_ERROR_INVALID_HANDLE;
      if (WireStatus w = EnsureKernel(k); w != WireStatus::kSuccess) return ToCu(w);
    }
    std::vector<std::byte> block;
    if (CUresult r = PackParams(*k, kernelParams, extra, &block); r != CUDA_SUCCESS) return r;
    const wire::LaunchRequest req{k->function_id, {gx, gy, gz}, {bx, by, bz}, shmem,
                                  static_cast<uint32_t>(block.size()),
                                  cooperative ? uint32_t{wire::kLaunchCooperative} : 0u};
    payload.resize(sizeof(req) + block.size());
    std::memcpy(payload.data(), &req, sizeof(req));
    if (!block.empty()) std::memcpy(payload.data() + sizeof(req), block.data(), block.size());
  }
  return CUDA_SUCCESS;
}

namespace {

CUresult LaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                      unsigned shmem, const void* stream, void** kernelParams, void** extra,
                      bool cooperative = false) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  std::vector<std::byte> payload;
  if (CUresult r = PackDriverLaunch(f, dim3(gx, gy, gz), dim3(bx, by, bz), shmem, kernelParams, extra, cooperative,
                                    &payload);
      r != CUDA_SUCCESS) {
    return r;
  }
  // Posted: a launch error (and a fault of the kernel) surfaces at the next
  // synchronising call, as in CUDA. A cooperative launch is called: CUDA
  // refuses a grid too large for the device at the launch itself.
  const uint32_t stream_id = StreamIdOf(stream);
  cudaError_t captured = cudaSuccess;
  if (MaybeCapture(stream_id, cudaGraphNodeTypeKernel, KernelLaunchOp(payload, cooperative), &captured)) {
    return ToCu(captured);
  }
  if (cooperative) return ToCu(Connection::Get().Call(op::kLaunchKernel, stream_id, payload));
  return ToCu(Connection::Get().Post(op::kLaunchKernel, stream_id, payload));
}

}  // namespace

// A launch of a driver function (CUfunction/CUkernel) from the runtime API
// (launch.cc): the driver's path, per-thread default stream and cooperation
// as the caller says.
CUresult LaunchDriverFunction(CUfunction f, dim3 grid, dim3 block, unsigned shmem, CUstream stream, bool per_thread,
                              void** kernelParams, bool cooperative) {
  const void* s = per_thread && stream == nullptr ? CU_STREAM_PER_THREAD : static_cast<const void*>(stream);
  return LaunchKernel(f, grid.x, grid.y, grid.z, block.x, block.y, block.z, shmem, s, kernelParams, nullptr,
                      cooperative);
}

// The function id of a CUfunction this file minted (client_internal.h; used
// by cuFuncGetAttribute and cuOccupancy* in function_api.cc).
bool DriverFunctionId(const void* f, uint32_t* id) {
  DriverModules& d = Mods();
  std::lock_guard<std::mutex> lock(d.mu);
  if (d.functions.count(f) == 0) return false;
  *id = static_cast<const KernelRec*>(f)->function_id;
  return true;
}


void AnswerJitOptionsForLoad(unsigned n, CUjit_option* options, void** values) { AnswerJitOptions(n, options, values); }

CUresult ReadModuleFile(const char* fname, std::vector<std::byte>* out) {
  std::FILE* f = std::fopen(fname, "rb");
  if (f == nullptr) return CUDA_ERROR_FILE_NOT_FOUND;
  std::vector<std::byte>& bytes = *out;
  bytes.clear();
  std::byte buf[65536];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0 && bytes.size() <= wire::kMaxModuleImageBytes)
    bytes.insert(bytes.end(), buf, buf + n);
  std::fclose(f);
  // A PTX file has no NUL of its own and phosd's backends take PTX
  // NUL-terminated; a trailing zero byte is harmless padding after a fatbin
  // or cubin.
  if (!bytes.empty() && bytes.back() != std::byte{0}) bytes.push_back(std::byte{0});
  return CUDA_SUCCESS;
}

bool IsDriverModule(CUmodule module) {
  DriverModules& d = Mods();
  std::lock_guard<std::mutex> lock(d.mu);
  return FindModuleLocked(module) != nullptr;
}

CUresult GetDriverGlobal(CUdeviceptr* dptr, size_t* bytes, CUmodule hmod, const char* name) {
  if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  uint32_t module_id = 0;
  {
    DriverModules& d = Mods();
    std::lock_guard<std::mutex> lock(d.mu);
    DriverModule* m = FindModuleLocked(hmod);
    if (m == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    if (m->no_binary) return CUDA_ERROR_NO_BINARY_FOR_GPU;
    module_id = m->rec.id;
  }
  const size_t len = std::strlen(name);
  if (len == 0 || len > wire::kMaxNameBytes) return CUDA_ERROR_NOT_FOUND;
  // Only a dptr the app asked for makes the address the app's (wire.h).
  wire::GetGlobalRequest req{module_id, static_cast<uint32_t>(len),
                             dptr != nullptr ? uint32_t{wire::kGlobalAddressToApp} : 0u, 0};
  std::vector<std::byte> payload(sizeof(req) + len);
  std::memcpy(payload.data(), &req, sizeof(req));
  std::memcpy(payload.data() + sizeof(req), name, len);
  ring::Reply r;
  WireStatus w = Connection::Get().Call(op::kModuleGetGlobal, 0, payload, &r);
  if (w == WireStatus::kNotFound) return CUDA_ERROR_NOT_FOUND;
  wire::GetGlobalReply g{};
  if (w == WireStatus::kSuccess && r.bytes != sizeof(g)) w = WireStatus::kUnknown;
  if (w != WireStatus::kSuccess) return ToCu(w);
  std::memcpy(&g, r.data.data(), sizeof(g));
  if (dptr != nullptr) *dptr = g.ptr;
  if (bytes != nullptr) *bytes = g.bytes;
  return CUDA_SUCCESS;
}

CUresult LoadDriverModule(CUmodule* out, std::span<const std::byte> image) { return Load(out, image); }

CUresult LoadDriverLibrary(CUmodule* out, std::span<const std::byte> image) {
  const CUresult r = Load(out, image);
  if (r != CUDA_ERROR_NO_BINARY_FOR_GPU) return r;
  auto m = std::make_unique<DriverModule>();
  m->no_binary = true;
  DriverModules& d = Mods();
  std::lock_guard<std::mutex> lock(d.mu);
  *out = reinterpret_cast<CUmodule>(m.get());
  d.modules.emplace(m.get(), std::move(m));
  return CUDA_SUCCESS;
}

// The handles die first, then phosd unloads the module (it waits for the
// module's kernels: a device synchronisation, not done under the lock).
CUresult UnloadDriverModule(CUmodule hmod) {
  std::unique_ptr<DriverModule> m;
  {
    DriverModules& d = Mods();
    std::lock_guard<std::mutex> lock(d.mu);
    auto it = d.modules.find(hmod);
    if (it == d.modules.end()) return CUDA_ERROR_INVALID_HANDLE;
    m = std::move(it->second);
    d.modules.erase(it);
    for (const auto& [name, k] : m->functions) d.functions.erase(k.get());
  }
  if (m->no_binary) return CUDA_SUCCESS;  // nothing in phosd
  return ToCu(Connection::Get().Call(op::kModuleUnload, 0, Bytes(wire::HandleRequest{m->rec.id, 0})));
}

CUresult GetDriverFunction(CUfunction* hfunc, CUmodule hmod, const char* name) {
  if (hfunc == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  DriverModules& d = Mods();
  std::lock_guard<std::mutex> lock(d.mu);
  DriverModule* m = FindModuleLocked(hmod);
  if (m == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (m->no_binary) return CUDA_ERROR_NO_BINARY_FOR_GPU;
  if (auto it = m->functions.find(std::string_view(name)); it != m->functions.end()) {
    *hfunc = reinterpret_cast<CUfunction>(it->second.get());
    return CUDA_SUCCESS;
  }
  auto k = std::make_unique<KernelRec>();
  k->module = &m->rec;
  k->name = name;
  k->params_known = FindParamLayout(m->layouts, k->name, &k->params, &k->param_bytes);
  WireStatus w = EnsureKernel(k.get());
  if (w == WireStatus::kNotFound) return CUDA_ERROR_NOT_FOUND;
  if (w != WireStatus::kSuccess) return ToCu(w);
  *hfunc = reinterpret_cast<CUfunction>(k.get());
  d.functions.insert(k.get());
  m->functions.emplace(k->name, std::move(k));
  return CUDA_SUCCESS;
}

bool DescribeDriverFunction(const void* f, DriverFunctionInfo* out) {
  DriverModules& d = Mods();
  std::lock_guard<std::mutex> lock(d.mu);
  if (d.functions.count(f) == 0) return false;
  const auto* k = static_cast<const KernelRec*>(f);
  for (const auto& [handle, m] : d.modules) {
    if (&m->rec != k->module) continue;
    out->module = reinterpret_cast<CUmodule>(const_cast<void*>(handle));
    out->name = k->name.c_str();  // lives as long as the function
    out->params_known = k->params_known;
    out->params = k->params;
    return true;
  }
  return false;
}

}  // namespace phos::client

using namespace phos::client;  // NOLINT
namespace wire = phos::wire;
namespace ring = phos::ring;

PHOS_EXPORT CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  if (image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Load(module, ImageInMemory(image));
}

PHOS_EXPORT CUresult cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int numOptions,
                                        CUjit_option* options, void** optionValues) {
  if (numOptions != 0 && (options == nullptr || optionValues == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = cuModuleLoadData(module, image);
  if (r == CUDA_SUCCESS) AnswerJitOptions(numOptions, options, optionValues);
  return r;
}

PHOS_EXPORT CUresult cuModuleLoadFatBinary(CUmodule* module, const void* fatCubin) {
  return cuModuleLoadData(module, fatCubin);
}

PHOS_EXPORT CUresult cuModuleLoad(CUmodule* module, const char* fname) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  if (fname == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::vector<std::byte> bytes;
  if (CUresult r = ReadModuleFile(fname, &bytes); r != CUDA_SUCCESS) return r;
  return Load(module, bytes);
}

PHOS_EXPORT CUresult cuModuleUnload(CUmodule hmod) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  return UnloadDriverModule(hmod);
}

PHOS_EXPORT CUresult cuModuleGetFunction(CUfunction* hfunc, CUmodule hmod, const char* name) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  return GetDriverFunction(hfunc, hmod, name);
}

PHOS_EXPORT CUresult cuModuleGetGlobal_v2(CUdeviceptr* dptr, size_t* bytes, CUmodule hmod, const char* name) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  return GetDriverGlobal(dptr, bytes, hmod, name);
}

PHOS_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                                    unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                                    unsigned int sharedMemBytes, CUstream hStream, void** kernelParams, void** extra) {
  return LaunchKernel(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream,
                      kernelParams, extra);
}

namespace {
CUresult LaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** kernelParams, void** extra,
                        bool per_thread) {
  if (config == nullptr || (config->numAttrs > 0 && config->attrs == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  if (UnhonouredLaunchAttribute(config->attrs, config->numAttrs) != nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  const void* stream = config->hStream;
  if (per_thread && stream == nullptr) stream = CU_STREAM_PER_THREAD;
  return LaunchKernel(f, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX, config->blockDimY,
                      config->blockDimZ, config->sharedMemBytes, stream, kernelParams, extra,
                      CooperativeLaunch(config->attrs, config->numAttrs));
}
}  // namespace

// cuLaunchKernelEx: numba-cuda and CUTLASS launch this way. Attributes:
// launch_attributes.h.
PHOS_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** kernelParams, void** extra) {
  return LaunchKernelEx(config, f, kernelParams, extra, false);
}
PHOS_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void** kernelParams,
                                           void** extra) {
  return LaunchKernelEx(config, f, kernelParams, extra, true);
}

PHOS_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                         unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                         unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                         void** kernelParams, void** extra) {
  // Per-thread mode: the null stream is the per-thread default stream.
  const void* stream = hStream != nullptr ? static_cast<const void*>(hStream) : CU_STREAM_PER_THREAD;
  return LaunchKernel(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, stream,
                      kernelParams, extra);
}

// Cooperative launches: every block resident at once, so blocks may wait
// for each other (grid.sync()); phosd bounds the grid
// (CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE).
PHOS_EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                               unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                               unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                               void** kernelParams) {
  return LaunchKernel(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream,
                      kernelParams, nullptr, /*cooperative=*/true);
}
PHOS_EXPORT CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                                    unsigned int gridDimZ, unsigned int blockDimX,
                                                    unsigned int blockDimY, unsigned int blockDimZ,
                                                    unsigned int sharedMemBytes, CUstream hStream,
                                                    void** kernelParams) {
  const void* stream = hStream != nullptr ? static_cast<const void*>(hStream) : CU_STREAM_PER_THREAD;
  return LaunchKernel(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, stream,
                      kernelParams, nullptr, /*cooperative=*/true);
}

// The driver's rule: LAZY unless CUDA_MODULE_LOADING=EAGER (read once, as
// the driver reads it at cuInit). phos itself loads a module when
// cuModuleLoad* is called (see the file comment); the answer steers the CUDA
// runtime statically linked into programs and CUDA's libraries, which under
// LAZY loads a fatbin when one of its kernels is first used instead of all
// of them as it creates its context (cuSOLVER: 225, cuSPARSE: 168). EAGER was
// answered until 29 Nov 2026 because LAZY made cusolverDnCreate fail; that
// was cublasSetEnvironmentMode reaching the real libcublas with a libphos
// handle (cublas_handles.cc), whose outcome hung on the heap's layout.
PHOS_EXPORT CUresult cuModuleGetLoadingMode(CUmoduleLoadingMode* mode) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (mode == nullptr) return CUDA_ERROR_INVALID_VALUE;
  static const CUmoduleLoadingMode kMode = [] {
    const char* v = std::getenv("CUDA_MODULE_LOADING");
    return v != nullptr && std::strcmp(v, "EAGER") == 0 ? CU_MODULE_EAGER_LOADING : CU_MODULE_LAZY_LOADING;
  }();
  *mode = kMode;
  return CUDA_SUCCESS;
}
