// Shared declarations inside libphos.so (hidden): error bookkeeping
// (runtime_api.cc), the kernel / module / variable registry
// (registration.cc), used by launch.cc.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "protocol/wire.h"

#define PHOS_EXPORT extern "C" __attribute__((visibility("default")))

namespace phos::client {

using wire::WireStatus;

// ---- errors (runtime_api.cc)
/// Records `e` as this thread's last error (when not cudaSuccess; sticky
/// errors — illegal address, launch failure, daemon unavailable — are also
/// remembered process-wide) and returns it.
cudaError_t SetError(cudaError_t e);
inline cudaError_t Finish(WireStatus w) { return SetError(static_cast<cudaError_t>(w)); }
/// The process-wide sticky error, or cudaSuccess.
cudaError_t StickyError();

// ---- registry (registration.cc)
struct ModuleRec {
  uint32_t id = 0;
  std::vector<std::byte> image;  // the fatbin container, as cuModuleLoadData takes it
  std::mutex mu;
  bool load_tried = false;
  WireStatus load_status = WireStatus::kSuccess;
};

struct ParamSlot {
  uint32_t offset = 0;
  uint32_t size = 0;
};

struct KernelRec {
  ModuleRec* module = nullptr;
  const void* host_stub = nullptr;
  std::string name;                // mangled device name
  std::vector<ParamSlot> params;   // in signature order
  uint32_t param_bytes = 0;        // size of the packed block
  bool params_known = false;
  std::mutex mu;
  bool fetch_tried = false;
  WireStatus fetch_status = WireStatus::kSuccess;
  uint32_t function_id = 0;
};

struct VarRec {
  ModuleRec* module = nullptr;
  std::string name;
  size_t size = 0;
};

/// The kernel registered for a host stub (or the KernelRec* itself, as a
/// cudaKernel_t from __cudaGetKernel), or null.
KernelRec* FindKernelByStub(const void* stub);
bool IsKernelRec(const void* p);
VarRec* FindVar(const void* host_shadow);
/// Loads the kernel's module in phosd (once) and fetches its function id
/// (once). Thread-safe.
WireStatus EnsureKernel(KernelRec* k);
WireStatus EnsureModule(ModuleRec* m);

/// Parses the `.entry <name>(...)` parameter list of PTX text into slots
/// (exposed for tests). False if the entry is not found.
bool PtxEntryParams(std::string_view ptx, std::string_view name, std::vector<ParamSlot>* out, uint32_t* bytes);

}  // namespace phos::client
