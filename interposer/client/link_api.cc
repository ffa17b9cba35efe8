// The driver's JIT linker (cuLinkCreate_v2, cuLinkAddData_v2,
// cuLinkAddFile_v2, cuLinkComplete, cuLinkDestroy; docs/interposer.md
// "The JIT linker") on top of the module path.
//
// phos loads what a link would produce directly: a module image may be
// PTX text, a cubin or a fatbin (cuModuleLoadData takes each, and phosd
// keeps the PTX for twins). So a link of ONE input completes with that
// input as its "cubin": PTX stays PTX (with its terminating NUL), which is
// what the app then loads. Several PTX inputs are linked as PTX by phos
// (instrument/ptx/ptx_link.h): the output is one PTX text. Several inputs
// with a cubin or fatbin among them need a device linker phos does not
// have: cuLinkComplete refuses them with CUDA_ERROR_NOT_SUPPORTED and says
// why, in the error log buffer the app gave (CU_JIT_ERROR_LOG_BUFFER) and
// once on stderr. Object files, libraries (libcudadevrt.a) and NVVM IR are
// refused when added.
#include <cuda.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "interposer/client/client_internal.h"
#include "interposer/client/driver_internal.h"
#include "ptx/ptx_link.h"

// The handle the app holds (CUlinkState).
struct CUlinkState_st {
  struct Input {
    std::vector<std::byte> bytes;
    bool ptx = false;
  };
  std::vector<Input> inputs;
  std::vector<std::byte> output;  // cuLinkComplete's, owned until cuLinkDestroy
  char* error_log = nullptr;      // CU_JIT_ERROR_LOG_BUFFER (the app's)
  size_t error_log_bytes = 0;
  char* info_log = nullptr;       // CU_JIT_INFO_LOG_BUFFER
  size_t info_log_bytes = 0;
};

namespace phos::client {
namespace {

// Live link states. Lock: mu.
struct Links {
  std::mutex mu;
  std::set<CUlinkState> live;
};
Links& L() {
  static auto* l = new Links;  // never destroyed: calls may come during exit
  return *l;
}

bool IsLive(CUlinkState s) {
  Links& l = L();
  std::lock_guard<std::mutex> lock(l.mu);
  return s != nullptr && l.live.count(s) != 0;
}

// Says why once on stderr, and every time in the app's error log buffer.
void Say(CUlinkState s, const std::string& why) {
  SayOnce(why);
  if (s->error_log != nullptr && s->error_log_bytes > 0) {
    std::snprintf(s->error_log, s->error_log_bytes, "%s", why.c_str());
  }
}

// The log buffers the options name (their sizes are in-out: CUDA writes
// back how much it used).
void ReadOptions(CUlinkState s, unsigned n, const CUjit_option* options, void** values) {
  if (options == nullptr || values == nullptr) return;
  for (unsigned i = 0; i < n; ++i) {
    switch (options[i]) {
      case CU_JIT_ERROR_LOG_BUFFER: s->error_log = static_cast<char*>(values[i]); break;
      case CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES:
        s->error_log_bytes = static_cast<size_t>(reinterpret_cast<uintptr_t>(values[i]));
        break;
      case CU_JIT_INFO_LOG_BUFFER: s->info_log = static_cast<char*>(values[i]); break;
      case CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES:
        s->info_log_bytes = static_cast<size_t>(reinterpret_cast<uintptr_t>(values[i]));
        break;
      default: break;  // optimisation levels, targets...: hints for a compiler phos does not run here
    }
  }
  if (s->error_log && s->error_log_bytes) s->error_log[0] = '\0';
  if (s->info_log && s->info_log_bytes) s->info_log[0] = '\0';
}

CUresult Add(CUlinkState s, CUjitInputType type, std::vector<std::byte> bytes, const char* name) {
  switch (type) {
    case CU_JIT_INPUT_PTX:
      // PTX text must end with its NUL when loaded as a module.
      if (bytes.empty() || bytes.back() != std::byte{0}) bytes.push_back(std::byte{0});
      break;
    case CU_JIT_INPUT_CUBIN:
    case CU_JIT_INPUT_FATBINARY: break;
    default:
      Say(s, std::string("cuLinkAdd: input ") + (name ? name : "?") +
                 " is an object, a library or NVVM IR; phos links single PTX, cubin or fatbin modules only "
                 "(docs/interposer.md \"The JIT linker\")");
      return CUDA_ERROR_NOT_SUPPORTED;
  }
  if (bytes.empty()) return CUDA_ERROR_INVALID_IMAGE;
  s->inputs.push_back({std::move(bytes), type == CU_JIT_INPUT_PTX});
  return CUDA_SUCCESS;
}

}  // namespace
}  // namespace phos::client

using namespace phos::client;  // NOLINT

PHOS_EXPORT CUresult cuLinkCreate_v2(unsigned int numOptions, CUjit_option* options, void** optionValues,
                                     CUlinkState* stateOut) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  if (stateOut == nullptr || (numOptions > 0 && (options == nullptr || optionValues == nullptr))) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto* s = new CUlinkState_st;
  ReadOptions(s, numOptions, options, optionValues);
  Links& l = L();
  std::lock_guard<std::mutex> lock(l.mu);
  l.live.insert(s);
  *stateOut = s;
  return CUDA_SUCCESS;
}

PHOS_EXPORT CUresult cuLinkAddData_v2(CUlinkState state, CUjitInputType type, void* data, size_t size,
                                      const char* name, unsigned int /*numOptions*/, CUjit_option* /*options*/,
                                      void** /*optionValues*/) {
  if (!IsLive(state) || data == nullptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
  const auto* p = static_cast<const std::byte*>(data);
  return Add(state, type, std::vector<std::byte>(p, p + size), name);
}

PHOS_EXPORT CUresult cuLinkAddFile_v2(CUlinkState state, CUjitInputType type, const char* path,
                                      unsigned int /*numOptions*/, CUjit_option* /*options*/,
                                      void** /*optionValues*/) {
  if (!IsLive(state) || path == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::ifstream f(path, std::ios::binary);
  if (!f.good()) return CUDA_ERROR_FILE_NOT_FOUND;
  std::vector<char> c((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const auto* p = reinterpret_cast<const std::byte*>(c.data());
  return Add(state, type, std::vector<std::byte>(p, p + c.size()), path);
}

PHOS_EXPORT CUresult cuLinkComplete(CUlinkState state, void** cubinOut, size_t* sizeOut) {
  if (!IsLive(state) || cubinOut == nullptr || sizeOut == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (state->inputs.empty()) return CUDA_ERROR_INVALID_IMAGE;  // nothing to link
  if (state->inputs.size() > 1) {
    if (!std::all_of(state->inputs.begin(), state->inputs.end(), [](const auto& in) { return in.ptx; })) {
      Say(state, "cuLinkComplete: linking a cubin or fatbin with other modules needs a device linker phos does "
                 "not offer; link PTX, or load each module on its own (docs/interposer.md \"The JIT linker\")");
      return CUDA_ERROR_NOT_SUPPORTED;
    }
    std::vector<std::string> texts;
    for (const auto& in : state->inputs) {
      texts.emplace_back(reinterpret_cast<const char*>(in.bytes.data()), in.bytes.size());  // read to the NUL
    }
    std::string linked;
    if (const phos::Status st = phos::ptx::LinkPtxTexts(texts, &linked); !st.ok()) {
      Say(state, "cuLinkComplete: " + st.message());
      return CUDA_ERROR_INVALID_IMAGE;
    }
    const auto* p = reinterpret_cast<const std::byte*>(linked.c_str());
    state->output.assign(p, p + linked.size() + 1);  // with its NUL, as a module image
  } else {
    state->output = state->inputs.front().bytes;
  }
  *cubinOut = state->output.data();
  *sizeOut = state->output.size();
  return CUDA_SUCCESS;
}

PHOS_EXPORT CUresult cuLinkDestroy(CUlinkState state) {
  {
    Links& l = L();
    std::lock_guard<std::mutex> lock(l.mu);
    if (state == nullptr || !l.live.erase(state)) return CUDA_ERROR_INVALID_HANDLE;
  }
  delete state;
  return CUDA_SUCCESS;
}
