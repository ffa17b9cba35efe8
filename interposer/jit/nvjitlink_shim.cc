// phos's libnvJitLink.so.13: every nvJitLink entry point, forwarded to the
// real library (real_library.h), with one addition — when the app takes a
// link's cubin (nvJitLinkGetLinkedCubin), that cubin and the PTX of the same
// code (link_record.h: the single PTX input, or an LTO link run again with
// -ptx) are handed to libphos.so (phosJitAttachPtx), so the module the app
// then loads reaches phosd with its PTX (docs/interposer.md "JIT-compiled
// kernels keep their PTX"). Results, outputs and logs are the real
// library's, unchanged.
//
// A handle the app holds is a ShimLink*, wrapping the real handle and the
// record of what was added to it. `phos run` preloads this library; its
// soname makes the program and CUDA Python's loader bind to it.
#include <dlfcn.h>

#include <cstddef>
#include <cstdint>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "link_record.h"
#include "ptx/ptx_link.h"
#include "real_library.h"

// The nvJitLink ABI (nvJitLink.h, CUDA 13), restated: the shim builds
// where the toolkit's nvJitLink header is not installed, and must not pull
// in the header's inline wrappers, whose names it defines itself.
typedef struct nvJitLink* nvJitLinkHandle;
typedef int nvJitLinkInputType;  // phos::jit::InputType's values
typedef int nvJitLinkResult;
constexpr nvJitLinkResult NVJITLINK_SUCCESS = 0;
constexpr nvJitLinkResult NVJITLINK_ERROR_INTERNAL = 6;
constexpr nvJitLinkInputType NVJITLINK_INPUT_PTX = 2;
constexpr nvJitLinkInputType NVJITLINK_INPUT_ANY = 10;

namespace phos::jit {
namespace {

struct ShimLink {
  nvJitLinkHandle real = nullptr;
  LinkRecord record;
  bool attached = false;  // the linked cubin's PTX went to libphos.so
};

nvJitLinkHandle RealOf(nvJitLinkHandle h) {
  return h == nullptr ? nullptr : reinterpret_cast<ShimLink*>(h)->real;
}

RealLibrary& NvJitLink() {
  static RealLibrary* real = new RealLibrary("libnvJitLink.so.13", "PHOS_NVJITLINK");  // leaked: used until exit
  return *real;
}

template <typename Fn>
Fn Real(const char* name) {
  return reinterpret_cast<Fn>(NvJitLink().Symbol(name));
}

using AttachFn = int (*)(const void*, size_t, const char*, size_t);

// Runs the link of `record` again with -ptx (nvJitLink emits PTX instead of
// a cubin for an LTO link) and returns that PTX, or "" on any failure.
std::string RelinkForPtx(const LinkRecord& record) {
  const auto create = Real<nvJitLinkResult (*)(nvJitLinkHandle*, uint32_t, const char* const*)>("nvJitLinkCreate");
  const auto destroy = Real<nvJitLinkResult (*)(nvJitLinkHandle*)>("nvJitLinkDestroy");
  const auto add_data =
      Real<nvJitLinkResult (*)(nvJitLinkHandle, nvJitLinkInputType, const void*, size_t, const char*)>(
          "nvJitLinkAddData");
  const auto add_file = Real<nvJitLinkResult (*)(nvJitLinkHandle, nvJitLinkInputType, const char*)>("nvJitLinkAddFile");
  const auto complete = Real<nvJitLinkResult (*)(nvJitLinkHandle)>("nvJitLinkComplete");
  const auto ptx_size = Real<nvJitLinkResult (*)(nvJitLinkHandle, size_t*)>("nvJitLinkGetLinkedPtxSize");
  const auto get_ptx = Real<nvJitLinkResult (*)(nvJitLinkHandle, char*)>("nvJitLinkGetLinkedPtx");
  if (!create || !destroy || !add_data || !add_file || !complete || !ptx_size || !get_ptx) return "";
  std::vector<const char*> options;
  for (const std::string& o : record.options()) options.push_back(o.c_str());
  options.push_back("-ptx");
  nvJitLinkHandle h = nullptr;
  if (create(&h, static_cast<uint32_t>(options.size()), options.data()) != NVJITLINK_SUCCESS) return "";
  std::string ptx;
  bool ok = true;
  for (const LinkInput& in : record.inputs()) {
    // libcudadevrt is SASS: its functions stay external in the PTX, and the
    // sim's interpreter supplies those it knows (device_runtime_ptx.h).
    // PTX inputs cannot join an -lto -ptx link (INCORRECT_INPUT_TYPE): the
    // LTO-IR's calls into them stay external, and phos links the texts.
    if (in.is_device_runtime || in.is_ptx) continue;
    const auto type = static_cast<nvJitLinkInputType>(in.type);
    const nvJitLinkResult r = in.file.empty()
                                  ? add_data(h, type, in.bytes.data(), in.bytes.size(),
                                             in.name.empty() ? nullptr : in.name.c_str())
                                  : add_file(h, type, in.file.c_str());
    ok = ok && r == NVJITLINK_SUCCESS;
  }
  size_t size = 0;
  if (ok && complete(h) == NVJITLINK_SUCCESS && ptx_size(h, &size) == NVJITLINK_SUCCESS && size > 0) {
    ptx.resize(size);
    if (get_ptx(h, ptx.data()) != NVJITLINK_SUCCESS) ptx.clear();
  }
  destroy(&h);
  return ptx;
}

// Hands the linked cubin (the app's copy, just taken) and the PTX of the
// same code to libphos.so.
void AttachPtx(const ShimLink& link, const void* cubin) {
  static const auto attach = reinterpret_cast<AttachFn>(dlsym(RTLD_DEFAULT, "phosJitAttachPtx"));
  if (attach == nullptr) return;  // not under phos run: nothing to attach to
  std::string relinked;
  std::string_view ptx;
  switch (link.record.Source()) {
    case PtxSource::kSinglePtx:
      ptx = link.record.single_ptx();
      break;
    case PtxSource::kLtoRelink:
      relinked = RelinkForPtx(link.record);
      if (relinked.empty()) {
        LogOnce("nvJitLink", "an LTO link did not link again with -ptx: its kernels reach phosd as SASS only "
                "(the sim cannot run them; on a GPU they are unvalidated)");
        return;
      }
      ptx = relinked;
      break;
    case PtxSource::kPtxLink: {
      // The PTX inputs and (once, where the first one stood) the LTO-IR
      // inputs linked again with -ptx, linked by phos in link order.
      std::vector<std::string> texts;
      bool lto_done = false;
      for (const LinkInput& in : link.record.inputs()) {
        if (in.is_ptx) {
          texts.push_back(in.bytes);
        } else if (in.is_ltoir && !lto_done) {
          lto_done = true;
          texts.push_back(RelinkForPtx(link.record));
          if (texts.back().empty()) {
            LogOnce("nvJitLink", "an LTO link with PTX inputs did not link again with -ptx: its kernels reach phosd "
                    "as SASS only (the sim cannot run them; on a GPU they are unvalidated)");
            return;
          }
        }
      }
      const Status s = ptx::LinkPtxTexts(texts, &relinked);
      if (!s.ok()) {
        LogOnce("nvJitLink", "a link of " + link.record.Why() + " could not be linked as PTX by phos (" + s.message() +
                "): its kernels reach phosd as SASS only (the sim cannot run them; on a GPU they are unvalidated)");
        return;
      }
      ptx = relinked;
      break;
    }
    case PtxSource::kNone:
      LogOnce("nvJitLink", "a link of " + link.record.Why() + " has no PTX source phos can obtain: its kernels reach phosd as "
              "SASS only (the sim cannot run them; on a GPU they are unvalidated)");
      return;
  }
  const auto size_fn = Real<nvJitLinkResult (*)(nvJitLinkHandle, size_t*)>("nvJitLinkGetLinkedCubinSize");
  size_t size = 0;
  if (size_fn == nullptr || size_fn(link.real, &size) != NVJITLINK_SUCCESS || size == 0) return;
  attach(cubin, size, ptx.data(), ptx.size());
}

std::string ReadWholeFile(const char* path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// ---- one shim per entry point; `name` is the real symbol to call --------

nvJitLinkResult Create(const char* name, nvJitLinkHandle* handle, uint32_t n, const char* const* options) {
  const auto fn = Real<nvJitLinkResult (*)(nvJitLinkHandle*, uint32_t, const char* const*)>(name);
  if (fn == nullptr) return NVJITLINK_ERROR_INTERNAL;
  if (handle == nullptr) return fn(handle, n, options);  // the real library's answer to a null output
  auto* link = new ShimLink();
  const nvJitLinkResult r = fn(&link->real, n, options);
  if (r != NVJITLINK_SUCCESS) {
    delete link;
    *handle = nullptr;
    return r;
  }
  link->record.SetOptions(n, options);
  *handle = reinterpret_cast<nvJitLinkHandle>(link);
  return r;
}

nvJitLinkResult Destroy(const char* name, nvJitLinkHandle* handle) {
  const auto fn = Real<nvJitLinkResult (*)(nvJitLinkHandle*)>(name);
  if (fn == nullptr) return NVJITLINK_ERROR_INTERNAL;
  if (handle == nullptr || *handle == nullptr) return fn(handle);
  auto* link = reinterpret_cast<ShimLink*>(*handle);
  const nvJitLinkResult r = fn(&link->real);
  delete link;
  *handle = nullptr;
  return r;
}

nvJitLinkResult AddData(const char* name, nvJitLinkHandle h, nvJitLinkInputType type, const void* data, size_t size,
                        const char* input_name) {
  const auto fn = Real<nvJitLinkResult (*)(nvJitLinkHandle, nvJitLinkInputType, const void*, size_t, const char*)>(name);
  if (fn == nullptr) return NVJITLINK_ERROR_INTERNAL;
  const nvJitLinkResult r = fn(RealOf(h), type, data, size, input_name);
  if (r == NVJITLINK_SUCCESS && h != nullptr && data != nullptr)
    reinterpret_cast<ShimLink*>(h)->record.Add(static_cast<InputType>(type),
                                               std::string_view(static_cast<const char*>(data), size), input_name,
                                               nullptr);
  return r;
}

nvJitLinkResult AddFile(const char* name, nvJitLinkHandle h, nvJitLinkInputType type, const char* file) {
  const auto fn = Real<nvJitLinkResult (*)(nvJitLinkHandle, nvJitLinkInputType, const char*)>(name);
  if (fn == nullptr) return NVJITLINK_ERROR_INTERNAL;
  const nvJitLinkResult r = fn(RealOf(h), type, file);
  if (r == NVJITLINK_SUCCESS && h != nullptr && file != nullptr) {
    const bool may_be_ptx = type == NVJITLINK_INPUT_PTX || type == NVJITLINK_INPUT_ANY;
    reinterpret_cast<ShimLink*>(h)->record.Add(static_cast<InputType>(type),
                                               may_be_ptx ? ReadWholeFile(file) : std::string(), nullptr, file);
  }
  return r;
}

nvJitLinkResult Complete(const char* name, nvJitLinkHandle h) {
  const auto fn = Real<nvJitLinkResult (*)(nvJitLinkHandle)>(name);
  return fn == nullptr ? NVJITLINK_ERROR_INTERNAL : fn(RealOf(h));
}

// The app takes the linked cubin: that copy and the link's PTX go to
// libphos.so, once per link (a link whose cubin is never taken costs
// nothing more, as NVRTC's shim does at nvrtcGetCUBIN).
nvJitLinkResult GetLinkedCubin(const char* name, nvJitLinkHandle h, void* cubin) {
  const auto fn = Real<nvJitLinkResult (*)(nvJitLinkHandle, void*)>(name);
  if (fn == nullptr) return NVJITLINK_ERROR_INTERNAL;
  const nvJitLinkResult r = fn(RealOf(h), cubin);
  if (r == NVJITLINK_SUCCESS && h != nullptr && cubin != nullptr) {
    auto* link = reinterpret_cast<ShimLink*>(h);
    if (!link->attached) {
      link->attached = true;
      AttachPtx(*link, cubin);
    }
  }
  return r;
}

// The getters: (handle, out) forwarded with the real handle.
template <typename Out>
nvJitLinkResult Get(const char* name, nvJitLinkHandle h, Out out) {
  const auto fn = Real<nvJitLinkResult (*)(nvJitLinkHandle, Out)>(name);
  if (fn == nullptr) return NVJITLINK_ERROR_INTERNAL;
  return fn(RealOf(h), out);
}

}  // namespace
}  // namespace phos::jit

#define PHOS_JIT_EXPORT extern "C" __attribute__((visibility("default")))

using phos::jit::Get;

// The names the library exports unversioned (what dlsym-based callers such
// as CUDA Python use) and, below, the versioned names the header's inline
// wrappers call (what programs linked with -lnvJitLink import).
PHOS_JIT_EXPORT nvJitLinkResult nvJitLinkCreate(nvJitLinkHandle* h, uint32_t n, const char** o) {
  return phos::jit::Create("nvJitLinkCreate", h, n, o);
}
PHOS_JIT_EXPORT nvJitLinkResult nvJitLinkDestroy(nvJitLinkHandle* h) {
  return phos::jit::Destroy("nvJitLinkDestroy", h);
}
PHOS_JIT_EXPORT nvJitLinkResult nvJitLinkAddData(nvJitLinkHandle h, nvJitLinkInputType t, const void* d, size_t s,
                                                 const char* n) {
  return phos::jit::AddData("nvJitLinkAddData", h, t, d, s, n);
}
PHOS_JIT_EXPORT nvJitLinkResult nvJitLinkAddFile(nvJitLinkHandle h, nvJitLinkInputType t, const char* f) {
  return phos::jit::AddFile("nvJitLinkAddFile", h, t, f);
}
PHOS_JIT_EXPORT nvJitLinkResult nvJitLinkComplete(nvJitLinkHandle h) {
  return phos::jit::Complete("nvJitLinkComplete", h);
}
#define PHOS_JIT_GETTER(Name, Out) \
  PHOS_JIT_EXPORT nvJitLinkResult nvJitLink##Name(nvJitLinkHandle h, Out o) { return Get("nvJitLink" #Name, h, o); }
PHOS_JIT_GETTER(GetLinkedCubinSize, size_t*)
PHOS_JIT_EXPORT nvJitLinkResult nvJitLinkGetLinkedCubin(nvJitLinkHandle h, void* cubin) {
  return phos::jit::GetLinkedCubin("nvJitLinkGetLinkedCubin", h, cubin);
}
PHOS_JIT_GETTER(GetLinkedPtxSize, size_t*)
PHOS_JIT_GETTER(GetLinkedPtx, char*)
PHOS_JIT_GETTER(GetLinkedLTOIRSize, size_t*)
PHOS_JIT_GETTER(GetLinkedLTOIR, void*)
PHOS_JIT_GETTER(GetErrorLogSize, size_t*)
PHOS_JIT_GETTER(GetErrorLog, char*)
PHOS_JIT_GETTER(GetInfoLogSize, size_t*)
PHOS_JIT_GETTER(GetInfoLog, char*)

PHOS_JIT_EXPORT nvJitLinkResult nvJitLinkVersion(unsigned int* major, unsigned int* minor) {
  const auto fn = phos::jit::Real<nvJitLinkResult (*)(unsigned int*, unsigned int*)>("nvJitLinkVersion");
  return fn == nullptr ? NVJITLINK_ERROR_INTERNAL : fn(major, minor);
}

// __nvJitLink<Name>_13_<minor> for every CUDA 13 minor release the shim
// knows; each calls the same-named symbol of the real library (a program
// built with newer headers than the real library fails there, by name, as
// it would without phos).
#define PHOS_JIT_VERSIONED_GETTER(Name, Out, V)                                                      \
  PHOS_JIT_EXPORT nvJitLinkResult __nvJitLink##Name##_##V(nvJitLinkHandle h, Out o) {               \
    return Get("__nvJitLink" #Name "_" #V, h, o);                                                   \
  }
#define PHOS_JIT_VERSION(V)                                                                          \
  PHOS_JIT_EXPORT nvJitLinkResult __nvJitLinkCreate_##V(nvJitLinkHandle* h, uint32_t n, const char* const* o) { \
    return phos::jit::Create("__nvJitLinkCreate_" #V, h, n, o);                                     \
  }                                                                                                  \
  PHOS_JIT_EXPORT nvJitLinkResult __nvJitLinkDestroy_##V(nvJitLinkHandle* h) {                       \
    return phos::jit::Destroy("__nvJitLinkDestroy_" #V, h);                                         \
  }                                                                                                  \
  PHOS_JIT_EXPORT nvJitLinkResult __nvJitLinkAddData_##V(nvJitLinkHandle h, nvJitLinkInputType t, const void* d, \
                                                         size_t s, const char* n) {                  \
    return phos::jit::AddData("__nvJitLinkAddData_" #V, h, t, d, s, n);                             \
  }                                                                                                  \
  PHOS_JIT_EXPORT nvJitLinkResult __nvJitLinkAddFile_##V(nvJitLinkHandle h, nvJitLinkInputType t, const char* f) { \
    return phos::jit::AddFile("__nvJitLinkAddFile_" #V, h, t, f);                                   \
  }                                                                                                  \
  PHOS_JIT_EXPORT nvJitLinkResult __nvJitLinkComplete_##V(nvJitLinkHandle h) {                       \
    return phos::jit::Complete("__nvJitLinkComplete_" #V, h);                                       \
  }                                                                                                  \
  PHOS_JIT_VERSIONED_GETTER(GetLinkedCubinSize, size_t*, V)                                          \
  PHOS_JIT_EXPORT nvJitLinkResult __nvJitLinkGetLinkedCubin_##V(nvJitLinkHandle h, void* cubin) {   \
    return phos::jit::GetLinkedCubin("__nvJitLinkGetLinkedCubin_" #V, h, cubin);                     \
  }                                                                                                  \
  PHOS_JIT_VERSIONED_GETTER(GetLinkedPtxSize, size_t*, V)                                            \
  PHOS_JIT_VERSIONED_GETTER(GetLinkedPtx, char*, V)                                                  \
  PHOS_JIT_VERSIONED_GETTER(GetLinkedLTOIRSize, size_t*, V)                                          \
  PHOS_JIT_VERSIONED_GETTER(GetLinkedLTOIR, void*, V)                                                \
  PHOS_JIT_VERSIONED_GETTER(GetErrorLogSize, size_t*, V)                                             \
  PHOS_JIT_VERSIONED_GETTER(GetErrorLog, char*, V)                                                   \
  PHOS_JIT_VERSIONED_GETTER(GetInfoLogSize, size_t*, V)                                              \
  PHOS_JIT_VERSIONED_GETTER(GetInfoLog, char*, V)

PHOS_JIT_VERSION(13_0)
PHOS_JIT_VERSION(13_1)
PHOS_JIT_VERSION(13_2)
PHOS_JIT_VERSION(13_3)
PHOS_JIT_VERSION(13_4)
PHOS_JIT_VERSION(13_5)
PHOS_JIT_VERSION(13_6)
PHOS_JIT_VERSION(13_7)
PHOS_JIT_VERSION(13_8)
PHOS_JIT_VERSION(13_9)
