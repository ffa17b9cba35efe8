#include "backend/cuda/cuda_driver.h"

#include <dlfcn.h>

#include <algorithm>

#include "backend/cuda/cuda_errors.h"

namespace phos::backend::cuda {
namespace {

constexpr int MaxVersion() {
  int v = 0;
#define PHOS_CUDA_MAX_VERSION(name, ver) v = std::max(v, ver);
  PHOS_CUDA_DRIVER_ENTRY_POINTS(PHOS_CUDA_MAX_VERSION)
#undef PHOS_CUDA_MAX_VERSION
  return v;
}
static_assert(MaxVersion() == kMinimumDriverVersion,
              "kMinimumDriverVersion must be the highest version in the entry-point table");
static_assert(kMinimumDriverVersion <= CUDA_VERSION, "entry point newer than the toolkit headers");

template <typename Fn>
Status Bootstrap(void* handle, const std::string& library, const char* symbol, Fn* out) {
  dlerror();
  void* p = dlsym(handle, symbol);
  if (p == nullptr) {
    const char* err = dlerror();
    return Status::Unavailable(library + " has no symbol " + symbol + " (not a CUDA driver, or one " +
                               "older than CUDA 12.0)" + (err ? std::string(": ") + err : ""));
  }
  *out = reinterpret_cast<Fn>(p);
  return Status::Ok();
}

}  // namespace

std::string DriverVersionText(int version) {
  return std::to_string(version / 1000) + "." + std::to_string((version % 1000) / 10);
}

Status LoadCudaDriver(const std::string& library, std::shared_ptr<const CudaDriver>* out) {
  // RTLD_LOCAL: the driver's symbols must not satisfy anyone else's lookups
  // (libphos.so, loaded into apps, exports the same names; phosd does not
  // load it, but keep the driver to itself anyway).
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* err = dlerror();
    return Status::Unavailable("no NVIDIA driver: dlopen " + library + " failed: " +
                               (err ? err : "unknown error"));
  }
  // The handle is never dlclose'd, not even on the error paths below: once
  // cuInit has run, the driver has threads and atexit handlers inside the
  // library, and unloading it under them is what crashes processes at exit.
  // A leaked reference to an already-loaded library costs nothing.
  auto driver = std::make_shared<CudaDriver>();
  driver->library = library;
  driver->handle = handle;

  // Bootstrap: the few symbols needed before cuGetProcAddress can be used,
  // by their unversioned exported names (stable since CUDA 2.0 / 6.0 / 12.0).
  PFN_cuGetProcAddress_v12000 get_proc = nullptr;
  PHOS_RETURN_IF_ERROR(Bootstrap(handle, library, "cuInit", &driver->Init));
  PHOS_RETURN_IF_ERROR(Bootstrap(handle, library, "cuDriverGetVersion", &driver->DriverGetVersion));
  PHOS_RETURN_IF_ERROR(Bootstrap(handle, library, "cuGetErrorName", &driver->GetErrorName));
  PHOS_RETURN_IF_ERROR(Bootstrap(handle, library, "cuGetErrorString", &driver->GetErrorString));
  PHOS_RETURN_IF_ERROR(Bootstrap(handle, library, "cuGetProcAddress_v2", &get_proc));

  CUresult rc = driver->Init(0);
  if (rc != CUDA_SUCCESS) {
    Status s = CudaStatus(rc, "cuInit failed", driver.get());
    std::string where = " (driver library " + library + ")";
    if (rc == CUDA_ERROR_STUB_LIBRARY) where = "; " + library + " is the CUDA toolkit's stub, not a driver";
    if (rc == CUDA_ERROR_NO_DEVICE) where = "; no GPU is visible to this process (driver library " + library + ")";
    return Status::Unavailable(s.message() + where);
  }
  rc = driver->DriverGetVersion(&driver->version);
  if (rc != CUDA_SUCCESS) return Status::Unavailable(CudaStatus(rc, "cuDriverGetVersion failed", driver.get()).message());
  if (driver->version < kMinimumDriverVersion) {
    return Status::Unavailable("CUDA driver " + DriverVersionText(driver->version) + " in " + library +
                               " is too old: phos needs " + DriverVersionText(kMinimumDriverVersion) +
                               " or newer");
  }

  // Every entry point at the version its typedef names (see cuda_driver.h).
  auto resolve = [&](const char* symbol, int version, void** slot) -> Status {
    CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    CUresult r = get_proc(symbol, slot, version, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &found);
    if (r != CUDA_SUCCESS || *slot == nullptr || found != CU_GET_PROC_ADDRESS_SUCCESS) {
      *slot = nullptr;
      std::string why = found == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT ? "version not sufficient"
                        : found == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND    ? "symbol not found"
                                                                           : "not resolved";
      if (r != CUDA_SUCCESS) why = CudaStatus(r, "cuGetProcAddress", driver.get()).message();
      return Status::Unavailable("CUDA driver " + DriverVersionText(driver->version) + " (" + library +
                                 ") lacks " + symbol + " for CUDA " + DriverVersionText(version) +
                                 ": " + why);
    }
    return Status::Ok();
  };
#define PHOS_CUDA_RESOLVE_ENTRY(name, ver)                     \
  {                                                             \
    void* p = nullptr;                                          \
    PHOS_RETURN_IF_ERROR(resolve("cu" #name, ver, &p));         \
    driver->name = reinterpret_cast<PFN_cu##name##_v##ver>(p);  \
  }
  PHOS_CUDA_DRIVER_ENTRY_POINTS(PHOS_CUDA_RESOLVE_ENTRY)
#undef PHOS_CUDA_RESOLVE_ENTRY

  *out = std::move(driver);
  return Status::Ok();
}

}  // namespace phos::backend::cuda
