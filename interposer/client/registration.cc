// The private registration entry points nvcc-generated host code calls
// (crt/host_runtime.h): fatbins, kernels, variables and the <<<>>> call
// configuration stack.
#include <cuda_runtime_api.h>

#include <cctype>
#include <cstring>
#include <memory>
#include <unordered_map>
#include <vector>

#include "fatbin/fatbin_reader.h"
#include "fatbin/nv_info.h"
#include "interposer/client/client_internal.h"
#include "interposer/client/connection.h"
#include "interposer/client/handles.h"

namespace phos::client {
namespace {

namespace op = wire::op;

struct Registry {
  std::mutex mu;
  std::vector<std::unique_ptr<ModuleRec>> modules;
  std::unordered_map<const void*, std::unique_ptr<KernelRec>> kernels;  // by host stub
  std::unordered_map<const void*, KernelRec*> by_rec;
  std::unordered_map<const void*, std::unique_ptr<VarRec>> vars;
  // Per module: parsed tables, used while its functions register.
  std::unordered_map<ModuleRec*, fatbin::CubinInfo> cubins;
  std::unordered_map<ModuleRec*, std::string> ptx;
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

uint32_t PtxTypeBytes(std::string_view t) {
  // ".u64" / ".b8" / ".f32": a type letter, then the width in bits.
  if (t.size() < 3 || t[0] != '.' || (t[1] != 'u' && t[1] != 's' && t[1] != 'b' && t[1] != 'f')) return 0;
  std::string_view digits = t.substr(2);
  if (digits == "8") return 1;
  if (digits == "16") return 2;
  if (digits == "32") return 4;
  if (digits == "64") return 8;
  return 0;
}

}  // namespace

bool PtxEntryParams(std::string_view ptx, std::string_view name, std::vector<ParamSlot>* out, uint32_t* bytes) {
  out->clear();
  size_t pos = 0;
  for (;;) {
    pos = ptx.find(".entry", pos);
    if (pos == std::string_view::npos) return false;
    size_t p = pos + 6;
    while (p < ptx.size() && std::isspace(static_cast<unsigned char>(ptx[p]))) ++p;
    if (ptx.substr(p, name.size()) == name) {
      size_t q = p + name.size();
      while (q < ptx.size() && std::isspace(static_cast<unsigned char>(ptx[q]))) ++q;
      if (q < ptx.size() && (ptx[q] == '(' || ptx[q] == '{')) {
        pos = q;
        break;
      }
    }
    pos = p;
  }
  uint32_t offset = 0;
  if (ptx[pos] == '(') {
    const size_t end = ptx.find(')', pos);
    if (end == std::string_view::npos) return false;
    std::string_view list = ptx.substr(pos + 1, end - pos - 1);
    size_t i = 0;
    while (i < list.size()) {
      size_t comma = list.find(',', i);
      if (comma == std::string_view::npos) comma = list.size();
      std::string_view decl = list.substr(i, comma - i);
      i = comma + 1;
      // tokens: .param .align N .b8 name[M]  |  .param .u64 [.ptr ...] name
      uint32_t align = 0, elem = 0, count = 1;
      bool ptr_attr = false;  // ".ptr .global .align N": N is the pointee's alignment
      size_t t = 0;
      while (t < decl.size()) {
        while (t < decl.size() && std::isspace(static_cast<unsigned char>(decl[t]))) ++t;
        size_t e = t;
        while (e < decl.size() && !std::isspace(static_cast<unsigned char>(decl[e]))) ++e;
        std::string_view tok = decl.substr(t, e - t);
        t = e;
        if (tok.empty()) continue;
        if (tok == ".ptr") {
          ptr_attr = true;
        } else if (tok == ".align") {
          while (t < decl.size() && std::isspace(static_cast<unsigned char>(decl[t]))) ++t;
          e = t;
          while (e < decl.size() && std::isdigit(static_cast<unsigned char>(decl[e]))) ++e;
          const auto n = static_cast<uint32_t>(std::strtoul(std::string(decl.substr(t, e - t)).c_str(), nullptr, 10));
          if (!ptr_attr) align = n;
          t = e;
        } else if (tok[0] == '.' && elem == 0 && PtxTypeBytes(tok) != 0 && tok != ".param") {
          elem = PtxTypeBytes(tok);
        } else if (tok[0] != '.') {
          const size_t br = tok.find('[');
          if (br != std::string_view::npos)
            count = static_cast<uint32_t>(std::strtoul(std::string(tok.substr(br + 1)).c_str(), nullptr, 10));
        }
      }
      if (elem == 0) continue;
      if (align == 0) align = elem;
      offset = (offset + align - 1) / align * align;
      out->push_back(ParamSlot{offset, elem * count});
      offset += elem * count;
    }
  }
  *bytes = offset;
  return true;
}

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
      std::lock_guard<std::mutex> lock(r.mu);
      fatbin::CubinInfo merged;
      for (const auto& e : fb.entries) {
        if (e.is_elf()) {
          fatbin::CubinInfo ci;
          if (fatbin::ReadCubinInfo(e.contents, &ci).ok())
            for (auto& k : ci.kernels)
              if (merged.Find(k.name) == nullptr) merged.kernels.push_back(std::move(k));
        } else if (e.is_ptx() && r.ptx[raw].empty()) {
          r.ptx[raw] = std::string(e.ptx_text());
        }
      }
      r.cubins[raw] = std::move(merged);
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
  r.cubins.erase(m);
  r.ptx.erase(m);
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
  if (auto it = r.cubins.find(m); it != r.cubins.end()) {
    if (const fatbin::KernelNvInfo* info = it->second.Find(k->name)) {
      uint32_t end = 0;
      for (const auto& p : info->params) {
        k->params.push_back(ParamSlot{p.offset, p.size});
        end = std::max(end, p.offset + p.size);
      }
      k->param_bytes = info->has_param_size ? std::max(info->param_size, end) : end;
      k->params_known = true;
    }
  }
  if (!k->params_known) {
    if (auto it = r.ptx.find(m); it != r.ptx.end())
      k->params_known = PtxEntryParams(it->second, k->name, &k->params, &k->param_bytes);
  }
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
