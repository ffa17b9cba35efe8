// The private registration entry points nvcc-generated host code calls
// (crt/host_runtime.h): fatbins, kernels, variables and the <<<>>> call
// configuration stack.
#include <cuda_runtime_api.h>

#include <cstring>
#include <memory>
#include <unordered_map>
#include <vector>

#include "fatbin/fatbin_reader.h"
#include "interposer/client/client_internal.h"
#include "interposer/client/connection.h"
#include "interposer/client/handles.h"
#include "interposer/client/image_layouts.h"

namespace phos::client {
namespace {

namespace op = wire::op;

struct Registry {
  std::mutex mu;
  std::vector<std::unique_ptr<ModuleRec>> modules;
  std::unordered_map<const void*, std::unique_ptr<KernelRec>> kernels;  // by host stub
  std::unordered_map<const void*, KernelRec*> by_rec;
  std::unordered_map<const void*, std::unique_ptr<VarRec>> vars;
  // Per module: parsed parameter tables, used while its functions register.
  std::unordered_map<ModuleRec*, ImageLayouts> layouts;
};
Registry& Reg() {
  static Registry* r = new Registry();
  return *r;
}

struct CallConfig {
  dim3 grid, block;
  size_t shmem;
  void* stream;
};
thread_local std::vector<CallConfig> t_configs;


}  // namespace


KernelRec* FindKernelByStub(const void* stub) {
  Registry& r = Reg();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.kernels.find(stub);
  if (it != r.kernels.end()) return it->second.get();
  auto jt = r.by_rec.find(stub);
  return jt == r.by_rec.end() ? nullptr : jt->second;
}

bool IsKernelRec(const void* p) {
  Registry& r = Reg();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.by_rec.count(p) != 0;
}

VarRec* FindVar(const void* host) {
  Registry& r = Reg();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.vars.find(host);
  return it == r.vars.end() ? nullptr : it->second.get();
}

WireStatus EnsureModule(ModuleRec* m) {
  std::lock_guard<std::mutex> lock(m->mu);
  if (m->load_tried) return m->load_status;
  Connection& c = Connection::Get();
  WireStatus w = c.Ensure();
  if (w != WireStatus::kSuccess) return w;  // retried next time (stays unavailable)
  wire::ModuleLoadRequest req{m->id, static_cast<uint32_t>(wire::ModuleLoadPhase::kInline), m->image.size()};
  if (sizeof(req) + m->image.size() <= c.max_payload_bytes()) {
    std::vector<std::byte> payload(sizeof(req) + m->image.size());
    std::memcpy(payload.data(), &req, sizeof(req));
    std::memcpy(payload.data() + sizeof(req), m->image.data(), m->image.size());
    w = c.Call(op::kModuleLoad, 0, payload);
  } else {
    req.phase = static_cast<uint32_t>(wire::ModuleLoadPhase::kPiece);
    w = c.PostBulk(op::kModuleLoad, 0, std::as_bytes(std::span<const wire::ModuleLoadRequest>(&req, 1)), m->image);
    if (w == WireStatus::kSuccess) {
      req.phase = static_cast<uint32_t>(wire::ModuleLoadPhase::kCommit);
      w = c.Call(op::kModuleLoad, 0, std::as_bytes(std::span<const wire::ModuleLoadRequest>(&req, 1)));
    }
  }
  m->load_tried = true;
  m->load_status = w;
  return w;
}

void ForgetLoadedModules() {
  Registry& r = Reg();
  std::lock_guard<std::mutex> lock(r.mu);
  for (auto& m : r.modules) {
    std::lock_guard<std::mutex> ml(m->mu);
    m->load_tried = false;
    m->load_status = WireStatus::kSuccess;
  }
  for (auto& [stub, k] : r.kernels) {
    std::lock_guard<std::mutex> kl(k->mu);
    k->fetch_tried = false;
    k->fetch_status = WireStatus::kSuccess;
    k->function_id = 0;
  }
}

WireStatus EnsureKernel(KernelRec* k) {
  WireStatus w = EnsureModule(k->module);
  if (w != WireStatus::kSuccess) return w;
  std::lock_guard<std::mutex> lock(k->mu);
  if (k->fetch_tried) return k->fetch_status;
  const uint32_t fid = NewFunctionId();
  wire::GetFunctionRequest req{k->module->id, fid, static_cast<uint32_t>(k->name.size()), 0};
  std::vector<std::byte> payload(sizeof(req) + k->name.size());
  std::memcpy(payload.data(), &req, sizeof(req));
  std::memcpy(payload.data() + sizeof(req), k->name.data(), k->name.size());
  w = Connection::Get().Call(op::kModuleGetFunction, 0, payload);
  if (w == WireStatus::kDaemonUnavailable) return w;
  k->fetch_tried = true;
  k->fetch_status = w;
  k->function_id = fid;
  return w;
}

}  // namespace phos::client

using namespace phos::client;  // NOLINT
namespace fatbin = phos::fatbin;

PHOS_EXPORT void** __cudaRegisterFatBinary(void* fatCubin) {
  auto m = std::make_unique<ModuleRec>();
  m->id = NewModuleId();
  ModuleRec* raw = m.get();
  fatbin::WrapperInfo info;
  size_t size = 0;
  fatbin::Fatbin fb;
  Registry& r = Reg();
  if (fatbin::ReadWrapper(fatCubin, &info).ok() && fatbin::ContainerSizeInMemory(info.data, &size).ok()) {
    const auto* p = static_cast<const std::byte*>(info.data);
    m->image.assign(p, p + size);
    if (fatbin::ParseFatbinFromWrapper(fatCubin, &fb).ok()) {
      ImageLayouts layouts;
      ReadFatbinLayouts(fb, &layouts);
      std::lock_guard<std::mutex> lock(r.mu);
      r.layouts[raw] = std::move(layouts);
    }
  }
  std::lock_guard<std::mutex> lock(r.mu);
  r.modules.push_back(std::move(m));
  return reinterpret_cast<void**>(raw);
}

PHOS_EXPORT void __cudaRegisterFatBinaryEnd(void** /*handle*/) {
  // The module is loaded in phosd at the first launch of one of its kernels
  // (EnsureModule): a program that makes no CUDA call never contacts phosd.
}

PHOS_EXPORT void __cudaUnregisterFatBinary(void** handle) {
  // Runs from atexit: the process is ending and phosd frees the session's
  // modules when the connection closes. Only drop the parse tables.
  Registry& r = Reg();
  std::lock_guard<std::mutex> lock(r.mu);
  auto* m = reinterpret_cast<ModuleRec*>(handle);
  r.layouts.erase(m);
}

PHOS_EXPORT void __cudaRegisterFunction(void** handle, const char* hostFun, char* /*deviceFun*/,
                                        const char* deviceName, int /*thread_limit*/, uint3* /*tid*/,
                                        uint3* /*bid*/, dim3* /*bDim*/, dim3* /*gDim*/, int* /*wSize*/) {
  auto* m = reinterpret_cast<ModuleRec*>(handle);
  auto k = std::make_unique<KernelRec>();
  k->module = m;
  k->host_stub = hostFun;
  k->name = deviceName ? deviceName : "";
  Registry& r = Reg();
  std::lock_guard<std::mutex> lock(r.mu);
  if (auto it = r.layouts.find(m); it != r.layouts.end())
    k->params_known = FindParamLayout(it->second, k->name, &k->params, &k->param_bytes);
  KernelRec* raw = k.get();
  r.by_rec[raw] = raw;
  r.kernels[hostFun] = std::move(k);
}

PHOS_EXPORT void __cudaRegisterVar(void** handle, char* hostVar, char* /*deviceAddress*/, const char* deviceName,
                                   int /*ext*/, size_t size, int /*constant*/, int /*global*/) {
  auto v = std::make_unique<VarRec>();
  v->module = reinterpret_cast<ModuleRec*>(handle);
  v->name = deviceName ? deviceName : "";
  v->size = size;
  Registry& r = Reg();
  std::lock_guard<std::mutex> lock(r.mu);
  r.vars[hostVar] = std::move(v);
}

PHOS_EXPORT char __cudaInitModule(void** /*handle*/) { return 1; }

PHOS_EXPORT unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem,
                                                 struct CUstream_st* stream) {
  t_configs.push_back(CallConfig{gridDim, blockDim, sharedMem, stream});
  return 0;
}

PHOS_EXPORT cudaError_t __cudaPopCallConfiguration(dim3* gridDim, dim3* blockDim, size_t* sharedMem, void* stream) {
  if (t_configs.empty()) return SetError(cudaErrorInvalidConfiguration);
  const CallConfig c = t_configs.back();
  t_configs.pop_back();
  *gridDim = c.grid;
  *blockDim = c.block;
  *sharedMem = c.shmem;
  *static_cast<void**>(stream) = c.stream;
  return cudaSuccess;
}

PHOS_EXPORT cudaError_t __cudaGetKernel(cudaKernel_t* kernel, const void* func) {
  KernelRec* k = FindKernelByStub(func);
  if (kernel) *kernel = reinterpret_cast<cudaKernel_t>(k);
  return k ? cudaSuccess : SetError(cudaErrorInvalidDeviceFunction);
}
