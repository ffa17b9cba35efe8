// phos's libnvrtc.so.13: every NVRTC entry point, forwarded to the real
// library (real_library.h), with one addition — when the app takes the
// cubin of a program compiled for a real architecture (nvrtcGetCUBIN),
// NVRTC kept no PTX of it, so the shim compiles the same program once more
// for the matching virtual architecture and hands the cubin and that PTX to
// libphos.so (phosJitAttachPtx): the module the app then loads reaches
// phosd with its PTX (docs/interposer.md "JIT-compiled kernels keep their
// PTX"). Results, outputs and logs are the real library's, unchanged.
//
// What a program was created with is recorded per nvrtcProgram (the real
// handle; phos does not wrap it). `phos run` preloads this library.
#include <dlfcn.h>
#include <nvrtc.h>

#include <cstddef>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "nvrtc_options.h"
#include "real_library.h"

namespace phos::jit {
namespace {

RealLibrary& Nvrtc() {
  static RealLibrary* real = new RealLibrary("libnvrtc.so.13", "PHOS_NVRTC");  // leaked: used until exit
  return *real;
}

template <typename Fn>
Fn Real(const char* name) {
  return reinterpret_cast<Fn>(Nvrtc().Symbol(name));
}

// What recompiling a program needs.
struct ProgramRecord {
  std::string source, name;
  std::vector<std::string> headers, include_names;
  std::vector<std::string> name_expressions;
  std::vector<std::string> options;  // of the last successful compile
  bool attached = false;             // its PTX went to libphos.so
};

// Every live program's record. `mu` guards the map and the records; NVRTC
// programs are used from any thread (one at a time each, as NVRTC requires).
struct Programs {
  std::mutex mu;
  std::unordered_map<nvrtcProgram, ProgramRecord> by_handle;
};
Programs& Recorded() {
  static Programs* p = new Programs();  // leaked: used until exit
  return *p;
}

std::vector<const char*> Pointers(const std::vector<std::string>& v) {
  std::vector<const char*> out;
  for (const std::string& s : v) out.push_back(s.c_str());
  return out;
}

// Compiles `rec` again for the virtual architecture of its real one and
// returns the PTX ("" when that cannot be done; said once).
std::string PtxOf(const ProgramRecord& rec) {
  const auto options = OptionsForPtx(rec.options);
  if (!options) {
    LogOnce("NVRTC", "a program compiled without a real -arch gave a cubin; phos does not know its PTX");
    return "";
  }
  const auto create = Real<nvrtcResult (*)(nvrtcProgram*, const char*, const char*, int, const char* const*,
                                           const char* const*)>("nvrtcCreateProgram");
  const auto add = Real<nvrtcResult (*)(nvrtcProgram, const char*)>("nvrtcAddNameExpression");
  const auto compile = Real<nvrtcResult (*)(nvrtcProgram, int, const char* const*)>("nvrtcCompileProgram");
  const auto ptx_size = Real<nvrtcResult (*)(nvrtcProgram, size_t*)>("nvrtcGetPTXSize");
  const auto get_ptx = Real<nvrtcResult (*)(nvrtcProgram, char*)>("nvrtcGetPTX");
  const auto destroy = Real<nvrtcResult (*)(nvrtcProgram*)>("nvrtcDestroyProgram");
  if (!create || !add || !compile || !ptx_size || !get_ptx || !destroy) return "";
  const std::vector<const char*> headers = Pointers(rec.headers), includes = Pointers(rec.include_names);
  nvrtcProgram p = nullptr;
  if (create(&p, rec.source.c_str(), rec.name.empty() ? nullptr : rec.name.c_str(), static_cast<int>(headers.size()),
             headers.empty() ? nullptr : headers.data(), includes.empty() ? nullptr : includes.data()) !=
      NVRTC_SUCCESS)
    return "";
  std::string ptx;
  bool ok = true;
  for (const std::string& e : rec.name_expressions) ok = ok && add(p, e.c_str()) == NVRTC_SUCCESS;
  const std::vector<const char*> opts = Pointers(*options);
  size_t size = 0;
  if (ok && compile(p, static_cast<int>(opts.size()), opts.data()) == NVRTC_SUCCESS &&
      ptx_size(p, &size) == NVRTC_SUCCESS && size > 1) {
    ptx.resize(size);
    if (get_ptx(p, ptx.data()) != NVRTC_SUCCESS) ptx.clear();
  } else {
    LogOnce("NVRTC", "compiling a program again for its PTX failed; its kernels reach phosd as SASS only");
  }
  destroy(&p);
  return ptx;
}

using AttachFn = int (*)(const void*, size_t, const char*, size_t);

// After the app took `prog`'s cubin: gives libphos.so its PTX, once.
void AttachPtx(nvrtcProgram prog, const char* cubin) {
  static const auto attach = reinterpret_cast<AttachFn>(dlsym(RTLD_DEFAULT, "phosJitAttachPtx"));
  if (attach == nullptr) return;  // not under phos run: nothing to attach to
  ProgramRecord rec;
  {
    Programs& p = Recorded();
    std::lock_guard<std::mutex> lock(p.mu);
    auto it = p.by_handle.find(prog);
    if (it == p.by_handle.end() || it->second.attached) return;
    it->second.attached = true;
    rec = it->second;
  }
  size_t size = 0;
  const auto cubin_size = Real<nvrtcResult (*)(nvrtcProgram, size_t*)>("nvrtcGetCUBINSize");
  if (cubin_size == nullptr || cubin_size(prog, &size) != NVRTC_SUCCESS || size == 0) return;
  const std::string ptx = PtxOf(rec);
  if (!ptx.empty()) attach(cubin, size, ptx.data(), ptx.size());
}

}  // namespace
}  // namespace phos::jit

#define PHOS_JIT_EXPORT extern "C" __attribute__((visibility("default")))

using phos::jit::Real;
using phos::jit::Recorded;

PHOS_JIT_EXPORT nvrtcResult nvrtcCreateProgram(nvrtcProgram* prog, const char* src, const char* name, int numHeaders,
                                               const char* const* headers, const char* const* includeNames) {
  const auto fn = Real<nvrtcResult (*)(nvrtcProgram*, const char*, const char*, int, const char* const*,
                                       const char* const*)>("nvrtcCreateProgram");
  if (fn == nullptr) return NVRTC_ERROR_INTERNAL_ERROR;
  const nvrtcResult r = fn(prog, src, name, numHeaders, headers, includeNames);
  if (r != NVRTC_SUCCESS || prog == nullptr || src == nullptr) return r;
  phos::jit::ProgramRecord rec;
  rec.source = src;
  if (name != nullptr) rec.name = name;
  for (int i = 0; i < numHeaders; ++i) {
    rec.headers.emplace_back(headers != nullptr && headers[i] != nullptr ? headers[i] : "");
    rec.include_names.emplace_back(includeNames != nullptr && includeNames[i] != nullptr ? includeNames[i] : "");
  }
  std::lock_guard<std::mutex> lock(Recorded().mu);
  Recorded().by_handle[*prog] = std::move(rec);
  return r;
}

PHOS_JIT_EXPORT nvrtcResult nvrtcDestroyProgram(nvrtcProgram* prog) {
  const auto fn = Real<nvrtcResult (*)(nvrtcProgram*)>("nvrtcDestroyProgram");
  if (fn == nullptr) return NVRTC_ERROR_INTERNAL_ERROR;
  if (prog != nullptr) {
    std::lock_guard<std::mutex> lock(Recorded().mu);
    Recorded().by_handle.erase(*prog);
  }
  return fn(prog);
}

PHOS_JIT_EXPORT nvrtcResult nvrtcAddNameExpression(nvrtcProgram prog, const char* const name_expression) {
  const auto fn = Real<nvrtcResult (*)(nvrtcProgram, const char*)>("nvrtcAddNameExpression");
  if (fn == nullptr) return NVRTC_ERROR_INTERNAL_ERROR;
  const nvrtcResult r = fn(prog, name_expression);
  if (r == NVRTC_SUCCESS && name_expression != nullptr) {
    std::lock_guard<std::mutex> lock(Recorded().mu);
    if (auto it = Recorded().by_handle.find(prog); it != Recorded().by_handle.end())
      it->second.name_expressions.emplace_back(name_expression);
  }
  return r;
}

PHOS_JIT_EXPORT nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int numOptions, const char* const* options) {
  const auto fn = Real<nvrtcResult (*)(nvrtcProgram, int, const char* const*)>("nvrtcCompileProgram");
  if (fn == nullptr) return NVRTC_ERROR_INTERNAL_ERROR;
  const nvrtcResult r = fn(prog, numOptions, options);
  if (r == NVRTC_SUCCESS) {
    std::lock_guard<std::mutex> lock(Recorded().mu);
    if (auto it = Recorded().by_handle.find(prog); it != Recorded().by_handle.end()) {
      it->second.options.clear();
      for (int i = 0; options != nullptr && i < numOptions; ++i)
        if (options[i] != nullptr) it->second.options.emplace_back(options[i]);
      it->second.attached = false;
    }
  }
  return r;
}

PHOS_JIT_EXPORT nvrtcResult nvrtcGetCUBIN(nvrtcProgram prog, char* cubin) {
  const auto fn = Real<nvrtcResult (*)(nvrtcProgram, char*)>("nvrtcGetCUBIN");
  if (fn == nullptr) return NVRTC_ERROR_INTERNAL_ERROR;
  const nvrtcResult r = fn(prog, cubin);
  if (r == NVRTC_SUCCESS && cubin != nullptr) phos::jit::AttachPtx(prog, cubin);
  return r;
}

PHOS_JIT_EXPORT const char* nvrtcGetErrorString(nvrtcResult result) {
  const auto fn = Real<const char* (*)(nvrtcResult)>("nvrtcGetErrorString");
  return fn == nullptr ? "NVRTC_ERROR_INTERNAL_ERROR (phos: the real NVRTC was not found)" : fn(result);
}

// The rest: forwarded as they are.
#define PHOS_NVRTC_FORWARD(Name, Params, Args)                     \
  PHOS_JIT_EXPORT nvrtcResult Name Params {                        \
    const auto fn = Real<nvrtcResult(*) Params>(#Name);            \
    return fn == nullptr ? NVRTC_ERROR_INTERNAL_ERROR : fn Args;   \
  }
PHOS_NVRTC_FORWARD(nvrtcVersion, (int* major, int* minor), (major, minor))
PHOS_NVRTC_FORWARD(nvrtcGetNumSupportedArchs, (int* n), (n))
PHOS_NVRTC_FORWARD(nvrtcGetSupportedArchs, (int* archs), (archs))
PHOS_NVRTC_FORWARD(nvrtcGetPTXSize, (nvrtcProgram p, size_t* s), (p, s))
PHOS_NVRTC_FORWARD(nvrtcGetPTX, (nvrtcProgram p, char* b), (p, b))
PHOS_NVRTC_FORWARD(nvrtcGetCUBINSize, (nvrtcProgram p, size_t* s), (p, s))
PHOS_NVRTC_FORWARD(nvrtcGetLTOIRSize, (nvrtcProgram p, size_t* s), (p, s))
PHOS_NVRTC_FORWARD(nvrtcGetLTOIR, (nvrtcProgram p, char* b), (p, b))
PHOS_NVRTC_FORWARD(nvrtcGetOptiXIRSize, (nvrtcProgram p, size_t* s), (p, s))
PHOS_NVRTC_FORWARD(nvrtcGetOptiXIR, (nvrtcProgram p, char* b), (p, b))
PHOS_NVRTC_FORWARD(nvrtcGetProgramLogSize, (nvrtcProgram p, size_t* s), (p, s))
PHOS_NVRTC_FORWARD(nvrtcGetProgramLog, (nvrtcProgram p, char* b), (p, b))
PHOS_NVRTC_FORWARD(nvrtcGetLoweredName, (nvrtcProgram p, const char* const e, const char** l), (p, e, l))
PHOS_NVRTC_FORWARD(nvrtcGetPCHHeapSize, (size_t* s), (s))
PHOS_NVRTC_FORWARD(nvrtcSetPCHHeapSize, (size_t s), (s))
PHOS_NVRTC_FORWARD(nvrtcGetPCHCreateStatus, (nvrtcProgram p), (p))
PHOS_NVRTC_FORWARD(nvrtcGetPCHHeapSizeRequired, (nvrtcProgram p, size_t* s), (p, s))
PHOS_NVRTC_FORWARD(nvrtcSetFlowCallback, (nvrtcProgram p, int (*cb)(void*, void*), void* payload), (p, cb, payload))
// CUDA 13.x additions (not in the 13.0 header this builds with): an older
// real NVRTC lacks them and the call answers NVRTC_ERROR_INTERNAL_ERROR.
PHOS_NVRTC_FORWARD(nvrtcGetTileIRSize, (nvrtcProgram p, size_t* s), (p, s))
PHOS_NVRTC_FORWARD(nvrtcGetTileIR, (nvrtcProgram p, char* b), (p, b))
PHOS_NVRTC_FORWARD(nvrtcGetBundledHeadersInfo, (void* info, const char** log), (info, log))
PHOS_NVRTC_FORWARD(nvrtcInstallBundledHeaders, (const char* path, unsigned int flags, const char** log),
                   (path, flags, log))
PHOS_NVRTC_FORWARD(nvrtcRemoveBundledHeaders, (const char* path, const char** log), (path, log))
