// dlopen/dlsym for the NVIDIA libraries the cuda backend loads at run time
// (cuBLAS, NCCL): phosd links none of them, so it starts where they are
// absent and says which one, and which symbol, was missing.
#pragma once

#include <dlfcn.h>

#include <string>

#include "common/status.h"

namespace phos::backend::cuda {

/// dlopen(library, RTLD_NOW | RTLD_LOCAL) — local: the library's symbols
/// must resolve nothing else in phosd. Unavailable naming the library and
/// dlerror() when it cannot be loaded. The handle is never dlclose'd.
inline Status OpenLibrary(const std::string& library, void** handle) {
  *handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (*handle != nullptr) return Status::Ok();
  const char* err = dlerror();
  return Status::Unavailable("dlopen " + library + " failed: " + (err ? err : "unknown error"));
}

/// `symbol` of the library `handle` (`library` names it in errors) as the
/// function pointer `*slot`: Unavailable when the library lacks it.
template <typename Fn>
Status ResolveSymbol(void* handle, const std::string& library, const char* symbol, Fn* slot) {
  dlerror();
  void* p = dlsym(handle, symbol);
  if (p == nullptr) {
    const char* err = dlerror();
    return Status::Unavailable(library + " has no symbol " + symbol + (err ? std::string(": ") + err : ""));
  }
  *slot = reinterpret_cast<Fn>(p);
  return Status::Ok();
}

/// The same for a symbol the caller can do without: null when absent.
template <typename Fn>
void ResolveOptionalSymbol(void* handle, const char* symbol, Fn* slot) {
  dlerror();
  *slot = reinterpret_cast<Fn>(dlsym(handle, symbol));
}

}  // namespace phos::backend::cuda
