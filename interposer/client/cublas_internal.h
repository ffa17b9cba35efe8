// cuBLAS inside libphos.so (docs/interposer.md "cuBLAS"): the app's
// handles live here (cublas_handles.cc), each routine is sent to phosd as
// one row of calls.def's cuBLAS section (cublas_routines.cc). A handle is
// only configuration — stream, pointer mode, math mode, workspace — that
// travels with every call, so phosd holds no cuBLAS state of the app and a
// checkpoint or restore has none to carry: the handle is app memory, kept
// by the app across a GPU-only checkpoint and by CRIU across a
// whole-process one.
#pragma once

#include <cublas_api.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_set>
#include <vector>

#include "protocol/wire.h"

namespace phos::client {

/// What a cublasHandle_t points to. Guarded by the handle registry's lock
/// for lookup; the fields are the app's to race on, as with cuBLAS (a
/// handle is documented as not thread-safe to reconfigure while in use).
struct BlasHandle {
  cudaStream_t stream = nullptr;  // as the app set it (0: the legacy default stream)
  cublasPointerMode_t pointer_mode = CUBLAS_POINTER_MODE_HOST;
  cublasAtomicsMode_t atomics_mode = CUBLAS_ATOMICS_NOT_ALLOWED;
  cublasMath_t math_mode = CUBLAS_DEFAULT_MATH;
  int sm_count_target = 0;
  void* workspace = nullptr;  // cublasSetWorkspace: recorded (phosd's handle has its own)
  size_t workspace_bytes = 0;
  cublasEmulationStrategy_t emulation = CUBLAS_EMULATION_STRATEGY_DEFAULT;
  int environment_mode = 0;  // cublasSetEnvironmentMode (undocumented; cublas_handles.cc)
};

/// The live handles of one kind (cuBLAS's, cuBLASLt's): every call checks
/// the handle the app passes against it, so a destroyed or stray pointer is
/// refused instead of dereferenced. Instances are never destroyed (handles
/// may be used from atexit handlers). Thread-safe.
template <typename T>
class LiveHandles {
 public:
  T* Create() {
    auto* h = new T;
    std::lock_guard<std::mutex> lock(mu_);
    live_.insert(h);
    return h;
  }
  /// False (nothing freed) for a pointer that is no live handle.
  bool Destroy(T* h) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (live_.erase(h) == 0) return false;
    }
    delete h;
    return true;
  }
  bool Contains(T* h) {
    std::lock_guard<std::mutex> lock(mu_);
    return live_.count(h) != 0;
  }

 private:
  std::mutex mu_;  // guards live_
  std::unordered_set<T*> live_;
};

/// The live handle `h` refers to, or nullptr (never created, destroyed).
/// The returned handle stays valid until the app destroys it.
BlasHandle* FindBlasHandle(cublasHandle_t h);

/// The wire stream id of `h`'s stream.
uint32_t BlasStreamId(const BlasHandle& h);

/// cuBLAS's status for a wire status (cublas_routines.cc).
cublasStatus_t BlasStatusOf(wire::WireStatus w);
/// Whether phosd's backend computes `api`'s routine with the types of
/// `call` (the kBlasProbe row, asked once per routine and type combination
/// and remembered): CUBLAS_STATUS_SUCCESS, or NOT_SUPPORTED (said once,
/// naming the routine and types), or the transport's status.
cublasStatus_t ProbeBlasOnce(wire::ApiId api, const wire::BlasLtRequest& call);
/// Posts one stream-ordered cuBLAS row (`payload`: its request) on wire
/// stream `stream`, or records it as a kernel node when the stream is being
/// captured (cublas_routines.cc). A sticky error fails it first.
cublasStatus_t PostBlas(wire::ApiId api, uint32_t stream, std::vector<std::byte> payload);

/// A request with the handle's pointer mode (batch 1, leading dimensions 1).
wire::BlasRequest BlasBase(const BlasHandle& h);

/// Whether an enum argument holds one of cuBLAS's values (a routine answers
/// CUBLAS_STATUS_INVALID_VALUE at once when not).
inline bool ValidUplo(cublasFillMode_t u) { return u == CUBLAS_FILL_MODE_LOWER || u == CUBLAS_FILL_MODE_UPPER; }
inline bool ValidSide(cublasSideMode_t s) { return s == CUBLAS_SIDE_LEFT || s == CUBLAS_SIDE_RIGHT; }
inline bool ValidDiag(cublasDiagType_t d) { return d == CUBLAS_DIAG_NON_UNIT || d == CUBLAS_DIAG_UNIT; }
inline bool ValidOp(cublasOperation_t t) { return t == CUBLAS_OP_N || t == CUBLAS_OP_T || t == CUBLAS_OP_C; }

/// BlasBase for a routine of one data type throughout (A, B, C, compute
/// and scalars of `type`); null, with *status NOT_INITIALIZED, for a
/// handle phos does not know.
BlasHandle* BeginBlas(cublasHandle_t handle, int32_t type, wire::BlasRequest* r, cublasStatus_t* status);

/// alpha (and beta, when the routine has one) into the request: their
/// addresses in device pointer mode, their values in host pointer mode
/// (of the request's scalar type, or its real type where kBlasRealAlpha /
/// kBlasRealBeta say so). False for a null scalar.
bool SetBlasScalars(wire::BlasRequest* r, const void* alpha, const void* beta, bool has_beta);

/// Checks `req` against `api`'s specification (CUBLAS_STATUS_INVALID_VALUE
/// at once when it fails) and sends it on `h`'s stream: posted for a
/// routine that writes device memory, called for a reduction, whose result
/// (host pointer mode) lands in `result` (`result_bytes`).
cublasStatus_t SendBlas(const BlasHandle& h, wire::ApiId api, const wire::BlasRequest& req, void* result = nullptr,
                        size_t result_bytes = 0);

}  // namespace phos::client
