// cuGetExportTable: the driver's private tables, which the CUDA runtime
// (statically linked into programs and libraries) and CUDA's libraries ask
// for by UUID (docs/interposer.md "Export tables";
// docs/export-tables-research.md). Every table phos serves is built here,
// in the app's process, on top of phos's own driver API: a table is a block
// of function pointers, which cannot cross to phosd.
//
// A table is { size in bytes (counting itself), slot 1, slot 2, ... }; slots
// phos does not implement are null. An unknown UUID answers
// CUDA_ERROR_NOT_FOUND with *ppExportTable = null.
// PHOS_TRACE_EXPORT_TABLES=1 prints each request and each slot call.
#include <cuda.h>
#include <pthread.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "fatbin/fatbin_reader.h"
#include "interposer/client/client_internal.h"
#include "interposer/client/driver_internal.h"
#include "interposer/client/integrity_check.h"

namespace phos::client {
namespace {

bool Trace() {
  static const bool on = [] {
    const char* v = std::getenv("PHOS_TRACE_EXPORT_TABLES");
    return v != nullptr && v[0] == '1';
  }();
  return on;
}

void TraceCall(const char* what) {
  if (Trace()) std::fprintf(stderr, "phos: export table call %s\n", what);
}

// "6bd5fb6c-5bf4-e74a-8987-d93912fd9df9", as the runtime prints a CUuuid.
void FormatUuid(const CUuuid* id, char out[37]) {
  const auto* b = reinterpret_cast<const unsigned char*>(id->bytes);
  std::snprintf(out, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2],
                b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

// ---- CUDART_INTERFACE 6bd5fb6c-5bf4-e74a-8987-d93912fd9df9 ---------------

// The fatbin container a __fatBinC_Wrapper_t points to, loaded as a module.
CUresult ModuleFromWrapper(CUmodule* module, const void* wrapper) {
  if (module == nullptr || wrapper == nullptr) return CUDA_ERROR_INVALID_VALUE;
  fatbin::WrapperInfo info;
  if (!fatbin::ReadWrapper(wrapper, &info).ok()) return CUDA_ERROR_INVALID_IMAGE;
  return cuModuleLoadData(module, info.data);
}

CUresult CudartGetModuleFromCubin(CUmodule* module, const void* wrapper) {
  TraceCall("CUDART_INTERFACE[1] get_module_from_cubin");
  return ModuleFromWrapper(module, wrapper);
}

CUresult CudartPrimaryContext(CUcontext* ctx, CUdevice dev) {
  TraceCall("CUDART_INTERFACE[2] primary_context");
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  *ctx = PrimaryContextHandle(dev);
  return *ctx != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

CUresult CudartGetModuleFromCubinExt1(CUmodule* module, const void* wrapper, void* a3, void* a4, uint32_t a5) {
  TraceCall("CUDART_INTERFACE[6] get_module_from_cubin_ext1");
  if (a3 != nullptr || a4 != nullptr || a5 != 0) return CUDA_ERROR_NOT_SUPPORTED;
  return ModuleFromWrapper(module, wrapper);
}

void CudartFn7(uintptr_t) { TraceCall("CUDART_INTERFACE[7]"); }

CUresult CudartGetModuleFromCubinExt2(const void* fatbin_header, CUmodule* module, void* a3, void* a4, uint32_t a5) {
  TraceCall("CUDART_INTERFACE[8] get_module_from_cubin_ext2");
  if (a3 != nullptr || a4 != nullptr || a5 != 0) return CUDA_ERROR_NOT_SUPPORTED;
  if (module == nullptr || fatbin_header == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return cuModuleLoadData(module, fatbin_header);
}

CUresult CudartLoadCompilers() {
  TraceCall("CUDART_INTERFACE[12] load_compilers");
  return CUDA_SUCCESS;
}

const void* const kCudartInterface[] = {
    reinterpret_cast<const void*>(uintptr_t{13 * sizeof(void*)}),
    reinterpret_cast<const void*>(&CudartGetModuleFromCubin),
    reinterpret_cast<const void*>(&CudartPrimaryContext),
    nullptr,
    nullptr,
    nullptr,
    reinterpret_cast<const void*>(&CudartGetModuleFromCubinExt1),
    reinterpret_cast<const void*>(&CudartFn7),
    reinterpret_cast<const void*>(&CudartGetModuleFromCubinExt2),
    nullptr,
    nullptr,
    nullptr,
    reinterpret_cast<const void*>(&CudartLoadCompilers),
};

// ---- TOOLS_RUNTIME_CALLBACK_HOOKS a094798c-2e74-2e74-93f2-0800200c0a66 ----
// Slots 2 and 6 hand out static buffers (1024 and 14 entries; zeroed, no
// tool hooks registered); the others are hooks with nothing to do.

uintptr_t HooksNothing() {
  TraceCall("TOOLS_RUNTIME_CALLBACK_HOOKS no-op slot");
  return 0;
}

void HooksBuffer2(void** ptr, size_t* size) {
  TraceCall("TOOLS_RUNTIME_CALLBACK_HOOKS[2] buffer");
  alignas(16) static uint64_t buffer[1024] = {};
  if (ptr != nullptr) *ptr = buffer;
  if (size != nullptr) *size = 1024;
}

void HooksBuffer6(void** ptr, size_t* size) {
  TraceCall("TOOLS_RUNTIME_CALLBACK_HOOKS[6] buffer");
  alignas(16) static uint64_t buffer[16] = {};
  if (ptr != nullptr) *ptr = buffer;
  if (size != nullptr) *size = 14;
}

const void* const kToolsRuntimeCallbackHooks[] = {
    reinterpret_cast<const void*>(uintptr_t{7 * sizeof(void*)}),
    reinterpret_cast<const void*>(&HooksNothing),
    reinterpret_cast<const void*>(&HooksBuffer2),
    reinterpret_cast<const void*>(&HooksNothing),
    reinterpret_cast<const void*>(&HooksNothing),
    reinterpret_cast<const void*>(&HooksNothing),
    reinterpret_cast<const void*>(&HooksBuffer6),
};

// ---- TOOLS_TLS 42d85a81-23f6-cb47-8298-f6e78a3aecdc ------------------------
// Tool thread-local state. Slot 2 answers the thread's current context
// (cuBLASLt's kernel registry asks, per GX); 1 and 3 have nothing to do.

uintptr_t ToolsTlsNothing() {
  TraceCall("TOOLS_TLS no-op slot");
  return 0;
}

CUcontext ToolsTlsCurrentContext() {
  TraceCall("TOOLS_TLS[2] current context");
  CUcontext ctx = nullptr;
  return cuCtxGetCurrent(&ctx) == CUDA_SUCCESS ? ctx : nullptr;
}

const void* const kToolsTls[] = {
    reinterpret_cast<const void*>(uintptr_t{4 * sizeof(void*)}),
    reinterpret_cast<const void*>(&ToolsTlsNothing),
    reinterpret_cast<const void*>(&ToolsTlsCurrentContext),
    reinterpret_cast<const void*>(&ToolsTlsNothing),
};

// ---- CONTEXT_LOCAL_STORAGE c693336e-1121-df11-a8c3-68f355d89593 ----------
// Values the runtime keeps per context and key (its per-context state; it
// asks on every launch). No size word: slot 0 is already a function. A
// null context means the current one. The destructor given with a value is
// for the driver to call when *it* destroys the context; the runtime's own
// delete (at exit) frees the value itself, so delete and replace do not
// call it (calling it there is a double free, seen with CUDA 13.0's
// runtime).

using ClsDestructor = void (*)(CUcontext, void*, void*);

struct ClsEntry {
  void* value = nullptr;
  ClsDestructor dtor = nullptr;
};

// Every entry, by (context, key). `mu` guards the map.
struct ContextLocalStorage {
  std::mutex mu;
  std::map<std::pair<CUcontext, void*>, ClsEntry> entries;
};
ContextLocalStorage& Cls() {
  static ContextLocalStorage* s = new ContextLocalStorage();  // leaked: used until exit
  return *s;
}

CUresult ClsContext(CUcontext* ctx) {
  if (*ctx != nullptr) return CUDA_SUCCESS;
  if (CUresult r = cuCtxGetCurrent(ctx); r != CUDA_SUCCESS) return r;
  return *ctx != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

// With PHOS_TRACE_EXPORT_TABLES=1: "CONTEXT_LOCAL_STORAGE[2] get ctx 0x.. key 0x.. -> 500".
CUresult TraceCls(const char* what, CUcontext ctx, const void* key, CUresult r) {
  if (Trace()) {
    std::fprintf(stderr, "phos: export table call CONTEXT_LOCAL_STORAGE%s ctx %p key %p -> %d\n", what,
                 static_cast<void*>(ctx), key, static_cast<int>(r));
  }
  return r;
}

CUresult ClsPut(CUcontext ctx, void* key, void* value, ClsDestructor dtor) {
  if (CUresult r = ClsContext(&ctx); r != CUDA_SUCCESS) return TraceCls("[0] put", ctx, key, r);
  std::lock_guard<std::mutex> lock(Cls().mu);
  Cls().entries[{ctx, key}] = ClsEntry{value, dtor};
  return TraceCls("[0] put", ctx, key, CUDA_SUCCESS);
}

CUresult ClsDelete(CUcontext ctx, void* key) {
  if (CUresult r = ClsContext(&ctx); r != CUDA_SUCCESS) return TraceCls("[1] delete", ctx, key, r);
  std::lock_guard<std::mutex> lock(Cls().mu);
  return TraceCls("[1] delete", ctx, key, Cls().entries.erase({ctx, key}) == 1 ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND);
}

CUresult ClsGet(void** value, CUcontext ctx, void* key) {
  if (value == nullptr) return TraceCls("[2] get", ctx, key, CUDA_ERROR_INVALID_VALUE);
  if (CUresult r = ClsContext(&ctx); r != CUDA_SUCCESS) return TraceCls("[2] get", ctx, key, r);
  std::lock_guard<std::mutex> lock(Cls().mu);
  auto it = Cls().entries.find({ctx, key});
  if (it == Cls().entries.end()) return TraceCls("[2] get", ctx, key, CUDA_ERROR_NOT_FOUND);
  *value = it->second.value;
  return TraceCls("[2] get", ctx, key, CUDA_SUCCESS);
}

const void* const kContextLocalStorage[] = {
    reinterpret_cast<const void*>(&ClsPut),
    reinterpret_cast<const void*>(&ClsDelete),
    reinterpret_cast<const void*>(&ClsGet),
    nullptr,
};

// ---- CONTEXT_CHECKS 263e8860-7cd2-6143-92f6-bbd5006dfa7e -----------------
// Whether a context is "wrapped" (another layer's): phos's never are.

uintptr_t ContextChecksNothing() {
  TraceCall("CONTEXT_CHECKS no-op slot");
  return 0;
}

CUresult ContextCheck(CUcontext, uint32_t* wrapped, const void** unwrapped) {
  TraceCall("CONTEXT_CHECKS[2] context_check");
  if (wrapped != nullptr) *wrapped = 0;
  if (unwrapped != nullptr) *unwrapped = nullptr;
  return CUDA_SUCCESS;
}

uint32_t ContextCheckFn3() {
  TraceCall("CONTEXT_CHECKS[3]");
  return 0;
}

const void* const kContextChecks[] = {
    reinterpret_cast<const void*>(uintptr_t{4 * sizeof(void*)}),
    reinterpret_cast<const void*>(&ContextChecksNothing),
    reinterpret_cast<const void*>(&ContextCheck),
    reinterpret_cast<const void*>(&ContextCheckFn3),
};

// ---- INTEGRITY_CHECK d4082055-bde6-704b-8d34-ba123c66e1f2 ----------------
// The runtime's check that it talks to a genuine driver
// (integrity_check.h); without the expected answer it refuses to work.

CUresult IntegrityCheck(uint32_t version, uint64_t unix_seconds, uint64_t out[2]);

const void* const kIntegrityCheck[] = {
    reinterpret_cast<const void*>(uintptr_t{3 * sizeof(void*)}),
    reinterpret_cast<const void*>(&IntegrityCheck),
    nullptr,
};

CUresult IntegrityCheck(uint32_t version, uint64_t unix_seconds, uint64_t out[2]) {
  TraceCall("INTEGRITY_CHECK[1]");
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  IntegrityInputs in{};
  int driver = 0;
  if (CUresult r = cuDriverGetVersion(&driver); r != CUDA_SUCCESS) return r;
  in.driver_version = static_cast<uint32_t>(driver);
  in.version = version;
  in.process = static_cast<uint32_t>(getpid());
  in.thread = static_cast<uint32_t>(pthread_self());
  in.cudart_table = kCudartInterface;
  in.integrity_table = kIntegrityCheck;
  in.function = reinterpret_cast<const void*>(&IntegrityCheck);
  in.unix_seconds = unix_seconds;
  int count = 0;
  if (CUresult r = cuDeviceGetCount(&count); r != CUDA_SUCCESS) return r;
  std::vector<IntegrityDevice> devices(static_cast<size_t>(count));
  for (int d = 0; d < count; ++d) {
    CUuuid uuid{};
    if (CUresult r = cuDeviceGetUuid_v2(&uuid, d); r != CUDA_SUCCESS) return r;
    std::memcpy(devices[d].uuid, uuid.bytes, 16);
    PciLocation pci;
    if (cudaError_t e = GetPciLocation(d, &pci); e != cudaSuccess) return ToCu(e);
    devices[d].pci_domain = pci.domain;
    devices[d].pci_bus = pci.bus;
    devices[d].pci_device = pci.device;
  }
  if (Trace()) {
    std::fprintf(stderr,
                 "phos: INTEGRITY_CHECK version %u, %d device(s), seconds %llu (now %lld), driver %u, pid %u, "
                 "thread %x, tables %p %p, function %p\n",
                 version, count, static_cast<unsigned long long>(unix_seconds), static_cast<long long>(time(nullptr)),
                 in.driver_version, in.process, in.thread, in.cudart_table, in.integrity_table, in.function);
  }
  IntegrityAnswer(in, devices, out);
  return CUDA_SUCCESS;
}

struct KnownTable {
  unsigned char uuid[16];
  const char* name;
  const void* table;
};

const KnownTable kTables[] = {
    {{0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a, 0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd, 0x9d, 0xf9},
     "CUDART_INTERFACE",
     kCudartInterface},
    {{0xa0, 0x94, 0x79, 0x8c, 0x2e, 0x74, 0x2e, 0x74, 0x93, 0xf2, 0x08, 0x00, 0x20, 0x0c, 0x0a, 0x66},
     "TOOLS_RUNTIME_CALLBACK_HOOKS",
     kToolsRuntimeCallbackHooks},
    {{0x42, 0xd8, 0x5a, 0x81, 0x23, 0xf6, 0xcb, 0x47, 0x82, 0x98, 0xf6, 0xe7, 0x8a, 0x3a, 0xec, 0xdc},
     "TOOLS_TLS",
     kToolsTls},
    {{0xc6, 0x93, 0x33, 0x6e, 0x11, 0x21, 0xdf, 0x11, 0xa8, 0xc3, 0x68, 0xf3, 0x55, 0xd8, 0x95, 0x93},
     "CONTEXT_LOCAL_STORAGE",
     kContextLocalStorage},
    {{0x26, 0x3e, 0x88, 0x60, 0x7c, 0xd2, 0x61, 0x43, 0x92, 0xf6, 0xbb, 0xd5, 0x00, 0x6d, 0xfa, 0x7e},
     "CONTEXT_CHECKS",
     kContextChecks},
    {{0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b, 0x8d, 0x34, 0xba, 0x12, 0x3c, 0x66, 0xe1, 0xf2},
     "INTEGRITY_CHECK",
     kIntegrityCheck},
};

// Probes whose NOT_FOUND the asker handles: f8cff951 (every CUDA 12.9+
// runtime; success would make it skip its CUDART_INTERFACE setup) and
// da9151d3 (nvJitLink).
bool ExpectedAbsent(const CUuuid* id) {
  static const unsigned char kProbes[][16] = {
      {0xf8, 0xcf, 0xf9, 0x51, 0x21, 0x46, 0x8b, 0x4e, 0xb9, 0xe2, 0xfb, 0x46, 0x9e, 0x7c, 0x0d, 0xd9},
      {0xda, 0x91, 0x51, 0xd3, 0x3a, 0xe6, 0xcc, 0x41, 0xa5, 0xc0, 0x4f, 0x26, 0xd5, 0x33, 0xe3, 0x28},
  };
  for (const auto& p : kProbes)
    if (std::memcmp(p, id->bytes, 16) == 0) return true;
  return false;
}

}  // namespace
}  // namespace phos::client

using namespace phos::client;  // NOLINT

PHOS_EXPORT CUresult cuGetExportTable(const void** ppExportTable, const CUuuid* pExportTableId) {
  if (ppExportTable == nullptr || pExportTableId == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *ppExportTable = nullptr;
  char id[37];
  FormatUuid(pExportTableId, id);
  for (const KnownTable& t : kTables) {
    if (std::memcmp(t.uuid, pExportTableId->bytes, 16) == 0) {
      if (Trace()) std::fprintf(stderr, "phos: cuGetExportTable %s: %s\n", id, t.name);
      *ppExportTable = t.table;
      return CUDA_SUCCESS;
    }
  }
  if (Trace()) std::fprintf(stderr, "phos: cuGetExportTable %s: not found\n", id);
  // Tables the runtime and libraries probe and go on without (the driver's
  // answer for those is NOT_FOUND too) are not worth a line; others are
  // named once, as every unsupported call is.
  if (!ExpectedAbsent(pExportTableId)) {
    SayOnce(std::string("cuGetExportTable: the driver's private table ") + id +
            " is not provided by phos (answered CUDA_ERROR_NOT_FOUND)");
  }
  return CUDA_ERROR_NOT_FOUND;
}
