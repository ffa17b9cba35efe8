// Driver API contexts (docs/interposer.md "Driver API", "Contexts").
//
// phosd gives each app process ONE session (with a context per GPU it
// uses), so every CUcontext the app creates or retains is a handle aliasing
// that session: all share one memory space, one set of modules/streams/
// events; making one current makes its GPU the thread's current GPU, which
// every call then carries to phosd. There is one primary context per GPU.
// What is kept per handle is only what the app can observe of a context:
// its device, its flags, whether it is primary, whether it is destroyed.
// Per thread there is a context stack with the driver's semantics
// (cuCtxPush/Pop/SetCurrent/GetCurrent).
//
// The runtime API never names a context: it works in the primary context
// (as the CUDA runtime does). When the runtime contacted phosd before the
// driver's cuInit (an app that started with the runtime and then uses the
// driver), an empty stack means the primary context, as the CUDA runtime
// has made it current; otherwise a call that needs a context with none
// current answers CUDA_ERROR_INVALID_CONTEXT.
#include <atomic>
#include <mutex>
#include <vector>

#include "interposer/client/connection.h"
#include "interposer/client/devices.h"
#include "interposer/client/driver_internal.h"

namespace phos::client {
namespace {

struct ContextRec {
  int device = 0;
  unsigned flags = 0;              // guarded by Contexts::mu
  bool primary = false;
  std::atomic<bool> destroyed{false};  // set once, under Contexts::mu; read lock-free by CheckContext
  int primary_refs = 0;            // primary ones: cuDevicePrimaryCtxRetain minus Release (Contexts::mu)
};

// One primary context record per GPU the app may name (CUDA's ordinals are
// small; a GPU beyond this is refused by CheckDevice).
constexpr int kMaxPrimaryContexts = 64;

// All context records. Records are never freed: a destroyed context's
// handle may still sit on another thread's stack, where it must read as
// invalid rather than dangle (a handful of bytes per cuCtxCreate).
struct Contexts {
  std::mutex mu;                 // guards every ContextRec's fields
  ContextRec primaries[kMaxPrimaryContexts];  // device and primary set at construction
  std::vector<ContextRec*> created;
  Contexts() {
    for (int d = 0; d < kMaxPrimaryContexts; ++d) {
      primaries[d].device = d;
      primaries[d].primary = true;
    }
  }
  ContextRec* primary(int device) { return &primaries[device]; }
  bool IsPrimary(const ContextRec* r) const { return r >= primaries && r < primaries + kMaxPrimaryContexts; }
};
Contexts& Ctx() {
  static Contexts* c = new Contexts();  // leaked: contexts outlive static destructors
  return *c;
}

thread_local std::vector<ContextRec*> t_stack;  // this thread's context stack (top = back)

std::atomic<bool> g_driver_init_seen{false};
std::atomic<bool> g_runtime_first{false};

ContextRec* AsRec(CUcontext c) { return reinterpret_cast<ContextRec*>(c); }
CUcontext AsHandle(ContextRec* r) { return reinterpret_cast<CUcontext>(r); }

// Whether `r` is a context handle phos made and not destroyed.
bool Live(ContextRec* r) {
  if (r == nullptr) return false;
  Contexts& c = Ctx();
  if (c.IsPrimary(r)) return true;
  std::lock_guard<std::mutex> lock(c.mu);
  for (ContextRec* x : c.created)
    if (x == r) return !x->destroyed.load();
  return false;
}

// The current context of this thread (see the file comment), or null.
ContextRec* Current() {
  if (!t_stack.empty()) return t_stack.back();
  return RuntimeCameFirst() ? Ctx().primary(CurrentDevice()) : nullptr;
}

// The thread's current GPU follows its current context, as the runtime's
// follows the driver's (its calls then carry that GPU to phosd).
void FollowTop() {
  if (!t_stack.empty()) (void)SelectDevice(t_stack.back()->device);
}

// A GPU the app sees. Making or retaining a context on it (BindDevice)
// makes it the process's GPU (devices.h).
CUresult CheckDevice(CUdevice dev) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  int physical = 0;
  if (dev < 0 || dev >= kMaxPrimaryContexts) return CUDA_ERROR_INVALID_DEVICE;
  return PhysicalDevice(dev, &physical) == cudaSuccess ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

// The calling thread's GPU becomes `dev` (its context's).
CUresult BindDevice(CUdevice dev) {
  if (IsCurrentDevice(dev)) return CUDA_SUCCESS;
  return ToCu(SelectDevice(dev));
}

CUresult CreateContext(CUcontext* pctx, unsigned flags, CUdevice dev) {
  if (CUresult r = CheckDevice(dev); r != CUDA_SUCCESS) return r;
  if (pctx == nullptr || (flags & ~static_cast<unsigned>(CU_CTX_FLAGS_MASK)) != 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = BindDevice(dev); r != CUDA_SUCCESS) return r;
  auto* rec = new ContextRec{dev, flags, false};
  {
    Contexts& c = Ctx();
    std::lock_guard<std::mutex> lock(c.mu);
    c.created.push_back(rec);
  }
  t_stack.push_back(rec);  // cuCtxCreate makes the new context current
  *pctx = AsHandle(rec);
  return CUDA_SUCCESS;
}

// The context `ctx` names, or the current one for null.
CUresult Resolve(CUcontext ctx, ContextRec** out) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  ContextRec* rec = ctx != nullptr ? AsRec(ctx) : Current();
  if (!Live(rec)) return CUDA_ERROR_INVALID_CONTEXT;
  *out = rec;
  return CUDA_SUCCESS;
}

CUresult SynchronizeSession() { return ToCu(cudaDeviceSynchronize()); }

}  // namespace

void NoteDriverInit() {
  if (!g_driver_init_seen.exchange(true)) g_runtime_first.store(Connection::Get().connected());
}

bool RuntimeCameFirst() { return g_runtime_first.load(std::memory_order_relaxed); }

CUcontext PrimaryContextHandle(CUdevice dev) {
  return dev >= 0 && dev < kMaxPrimaryContexts ? AsHandle(Ctx().primary(dev)) : nullptr;
}

// On every call's path: no lock. A stack entry was validated (Live) when it
// was pushed, so only its destroyed flag can have changed since.
CUresult CheckContext() {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  const ContextRec* rec = Current();
  return rec != nullptr && !rec->destroyed.load(std::memory_order_acquire) ? CUDA_SUCCESS
                                                                           : CUDA_ERROR_INVALID_CONTEXT;
}

}  // namespace phos::client

using namespace phos::client;  // NOLINT

// ---------------------------------------------------------------- primary context

PHOS_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  if (CUresult r = CheckDevice(dev); r != CUDA_SUCCESS) return r;
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Contexts& c = Ctx();
  std::lock_guard<std::mutex> lock(c.mu);
  ++c.primary(dev)->primary_refs;
  *pctx = AsHandle(c.primary(dev));
  return CUDA_SUCCESS;
}

PHOS_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  if (CUresult r = CheckDevice(dev); r != CUDA_SUCCESS) return r;
  Contexts& c = Ctx();
  std::lock_guard<std::mutex> lock(c.mu);
  if (c.primary(dev)->primary_refs == 0) return CUDA_ERROR_INVALID_CONTEXT;
  --c.primary(dev)->primary_refs;
  return CUDA_SUCCESS;
}

// The session is not torn down: its memory, modules, streams and events
// stay (they belong to the one session every context aliases). Only the
// primary context's retain count and flags are reset; work is synchronised.
PHOS_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  if (CUresult r = CheckDevice(dev); r != CUDA_SUCCESS) return r;
  if (CUresult r = SynchronizeSession(); r != CUDA_SUCCESS) return r;
  Contexts& c = Ctx();
  std::lock_guard<std::mutex> lock(c.mu);
  c.primary(dev)->primary_refs = 0;
  c.primary(dev)->flags = 0;
  return CUDA_SUCCESS;
}

PHOS_EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) {
  if (CUresult r = CheckDevice(dev); r != CUDA_SUCCESS) return r;
  if (flags == nullptr || active == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Contexts& c = Ctx();
  std::lock_guard<std::mutex> lock(c.mu);
  *flags = c.primary(dev)->flags;
  *active = c.primary(dev)->primary_refs > 0 || RuntimeCameFirst() ? 1 : 0;
  return CUDA_SUCCESS;
}

PHOS_EXPORT CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags) {
  if (CUresult r = CheckDevice(dev); r != CUDA_SUCCESS) return r;
  if ((flags & ~static_cast<unsigned>(CU_CTX_FLAGS_MASK)) != 0) return CUDA_ERROR_INVALID_VALUE;
  Contexts& c = Ctx();
  std::lock_guard<std::mutex> lock(c.mu);
  c.primary(dev)->flags = flags;
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------- created contexts

PHOS_EXPORT CUresult cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* params, unsigned int flags, CUdevice dev) {
  if (params != nullptr && (params->execAffinityParams != nullptr || params->numExecAffinityParams != 0 ||
                            params->cigParams != nullptr)) {
    return CUDA_ERROR_NOT_SUPPORTED;  // execution affinity and CIG are not modelled by phos
  }
  return CreateContext(pctx, flags, dev);
}

PHOS_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ContextRec* rec = AsRec(ctx);
  Contexts& c = Ctx();
  if (c.IsPrimary(rec) || !Live(rec)) return CUDA_ERROR_INVALID_CONTEXT;
  if (CUresult r = SynchronizeSession(); r != CUDA_SUCCESS) return r;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    rec->destroyed.store(true);
  }
  std::erase(t_stack, rec);  // other threads see it as invalid (Live)
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------- the stack

PHOS_EXPORT CUresult cuCtxGetCurrent(CUcontext* pctx) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pctx = AsHandle(Current());
  return CUDA_SUCCESS;
}

PHOS_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (ctx == nullptr) {  // unbinds the current context
    if (!t_stack.empty()) t_stack.pop_back();
    return CUDA_SUCCESS;
  }
  if (!Live(AsRec(ctx))) return CUDA_ERROR_INVALID_CONTEXT;
  if (t_stack.empty()) {
    t_stack.push_back(AsRec(ctx));
  } else {
    t_stack.back() = AsRec(ctx);
  }
  FollowTop();
  return CUDA_SUCCESS;
}

PHOS_EXPORT CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!Live(AsRec(ctx))) return CUDA_ERROR_INVALID_CONTEXT;
  t_stack.push_back(AsRec(ctx));
  FollowTop();
  return CUDA_SUCCESS;
}

PHOS_EXPORT CUresult cuCtxPopCurrent_v2(CUcontext* pctx) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (t_stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  ContextRec* top = t_stack.back();
  t_stack.pop_back();
  FollowTop();
  if (pctx != nullptr) *pctx = AsHandle(top);
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------- peers
// Kernels reaching another GPU's memory are not offered (docs/interposer.md
// "Several GPUs in one process"): cuDeviceCanAccessPeer says 0, and
// enabling it answers what the driver answers then.

PHOS_EXPORT CUresult cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags) {
  ContextRec* self = nullptr;
  ContextRec* peer = nullptr;
  if (CUresult r = Resolve(nullptr, &self); r != CUDA_SUCCESS) return r;
  if (peerContext == nullptr || Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = Resolve(peerContext, &peer); r != CUDA_SUCCESS) return r;
  if (peer->device == self->device) return CUDA_ERROR_INVALID_DEVICE;
  return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
}

PHOS_EXPORT CUresult cuCtxDisablePeerAccess(CUcontext peerContext) {
  ContextRec* self = nullptr;
  ContextRec* peer = nullptr;
  if (CUresult r = Resolve(nullptr, &self); r != CUDA_SUCCESS) return r;
  if (CUresult r = Resolve(peerContext, &peer); r != CUDA_SUCCESS) return r;
  return CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;  // it never was
}

namespace phos::client {
CUresult CheckContextHandle(CUcontext ctx) {
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  ContextRec* rec = nullptr;
  return Resolve(ctx, &rec);
}
}  // namespace phos::client

// ---------------------------------------------------------------- queries

PHOS_EXPORT CUresult cuCtxSynchronize(void) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  return SynchronizeSession();
}

PHOS_EXPORT CUresult cuCtxSynchronize_v2(CUcontext ctx) {
  ContextRec* rec = nullptr;
  if (CUresult r = Resolve(ctx, &rec); r != CUDA_SUCCESS) return r;
  return SynchronizeSession();
}

PHOS_EXPORT CUresult cuCtxGetDevice(CUdevice* device) {
  ContextRec* rec = nullptr;
  if (CUresult r = Resolve(nullptr, &rec); r != CUDA_SUCCESS) return r;
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *device = rec->device;
  return CUDA_SUCCESS;
}

PHOS_EXPORT CUresult cuCtxGetDevice_v2(CUdevice* device, CUcontext ctx) {
  ContextRec* rec = nullptr;
  if (CUresult r = Resolve(ctx, &rec); r != CUDA_SUCCESS) return r;
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *device = rec->device;
  return CUDA_SUCCESS;
}

PHOS_EXPORT CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int* version) {
  ContextRec* rec = nullptr;
  if (CUresult r = Resolve(ctx, &rec); r != CUDA_SUCCESS) return r;
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *version = 3020;  // what the driver reports for contexts of the v2 (3.2+) API
  return CUDA_SUCCESS;
}

PHOS_EXPORT CUresult cuCtxGetFlags(unsigned int* flags) {
  ContextRec* rec = nullptr;
  if (CUresult r = Resolve(nullptr, &rec); r != CUDA_SUCCESS) return r;
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(Ctx().mu);
  *flags = rec->flags;
  return CUDA_SUCCESS;
}

PHOS_EXPORT CUresult cuCtxSetFlags(unsigned int flags) {
  ContextRec* rec = nullptr;
  if (CUresult r = Resolve(nullptr, &rec); r != CUDA_SUCCESS) return r;
  if ((flags & ~static_cast<unsigned>(CU_CTX_FLAGS_MASK)) != 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(Ctx().mu);
  rec->flags = flags;
  return CUDA_SUCCESS;
}

// A context-unique id: contexts are records that are never freed, so the
// address is unique for the process's lifetime.
PHOS_EXPORT CUresult cuCtxGetId(CUcontext ctx, unsigned long long* ctxId) {
  ContextRec* rec = nullptr;
  if (CUresult r = Resolve(ctx, &rec); r != CUDA_SUCCESS) return r;
  if (ctxId == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *ctxId = reinterpret_cast<uintptr_t>(rec);
  return CUDA_SUCCESS;
}

// Limits, cache configuration and priorities are the session's: the
// runtime's implementations answer (CUlimit / CUfunc_cache have the
// cudaLimit / cudaFuncCache values).
PHOS_EXPORT CUresult cuCtxGetStreamPriorityRange(int* leastPriority, int* greatestPriority) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  if (leastPriority != nullptr) *leastPriority = kLeastStreamPriority;
  if (greatestPriority != nullptr) *greatestPriority = kGreatestStreamPriority;
  return CUDA_SUCCESS;
}
PHOS_EXPORT CUresult cuCtxSetLimit(CUlimit limit, size_t value) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  return ToCu(cudaDeviceSetLimit(static_cast<cudaLimit>(limit), value));
}
PHOS_EXPORT CUresult cuCtxGetLimit(size_t* pvalue, CUlimit limit) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  if (pvalue == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return ToCu(cudaDeviceGetLimit(pvalue, static_cast<cudaLimit>(limit)));
}
PHOS_EXPORT CUresult cuCtxSetCacheConfig(CUfunc_cache config) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  return ToCu(cudaDeviceSetCacheConfig(static_cast<cudaFuncCache>(config)));
}
PHOS_EXPORT CUresult cuCtxGetCacheConfig(CUfunc_cache* pconfig) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  if (pconfig == nullptr) return CUDA_ERROR_INVALID_VALUE;
  cudaFuncCache c = cudaFuncCachePreferNone;
  CUresult r = ToCu(cudaDeviceGetCacheConfig(&c));
  if (r == CUDA_SUCCESS) *pconfig = static_cast<CUfunc_cache>(c);
  return r;
}
