#include "backend/cuda/cuda_cublas.h"

#include <dlfcn.h>

#include <type_traits>

namespace phos::backend::cuda {

std::string DefaultCublasLibrary() { return "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR); }

Status LoadCublas(const std::string& library, std::shared_ptr<const CublasLibrary>* out) {
  // RTLD_LOCAL, as for the driver: its symbols are nobody else's business.
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* err = dlerror();
    return Status::Unavailable("dlopen " + library + " failed: " + (err ? err : "unknown error"));
  }
  auto lib = std::make_shared<CublasLibrary>();
  lib->library = library;
  lib->handle = handle;
  auto resolve = [&](const char* symbol, auto* slot) -> Status {
    dlerror();
    void* p = dlsym(handle, symbol);
    if (p == nullptr) {
      const char* err = dlerror();
      return Status::Unavailable(library + " has no symbol " + symbol + (err ? std::string(": ") + err : ""));
    }
    *slot = reinterpret_cast<std::remove_pointer_t<decltype(slot)>>(p);
    return Status::Ok();
  };
  PHOS_RETURN_IF_ERROR(resolve("cublasCreate_v2", &lib->Create));
  PHOS_RETURN_IF_ERROR(resolve("cublasDestroy_v2", &lib->Destroy));
  PHOS_RETURN_IF_ERROR(resolve("cublasGetVersion_v2", &lib->GetVersion));
  PHOS_RETURN_IF_ERROR(resolve("cublasGetStatusString", &lib->GetStatusString));
  *out = std::move(lib);
  return Status::Ok();
}

Status CublasStatus(cublasStatus_t status, const std::string& what, const CublasLibrary* lib) {
  if (status == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  std::string text = "cuBLAS status " + std::to_string(static_cast<int>(status));
  if (lib != nullptr && lib->GetStatusString != nullptr) {
    const char* s = lib->GetStatusString(status);
    if (s != nullptr) text += " (" + std::string(s) + ")";
  }
  const std::string message = what + ": " + text;
  switch (status) {
    case CUBLAS_STATUS_ALLOC_FAILED: return Status::OutOfMemory(message);
    case CUBLAS_STATUS_NOT_INITIALIZED: return Status::Unavailable(message);
    default: return Status::Internal(message);
  }
}

}  // namespace phos::backend::cuda
