// cuBLAS handles and everything cuBLAS answers without the GPU
// (cublas_internal.h): create/destroy, stream, pointer/math/atomics modes,
// workspace, versions, status strings, the logger, and the host<->device
// vector/matrix helpers (cudaMemcpy2D underneath, so they take the copy
// paths and C/R rules of any copy).
#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include <cstdio>
#include <mutex>
#include <unordered_set>

#include "interposer/client/client_internal.h"
#include "interposer/client/cublas_internal.h"
#include "interposer/client/handles.h"

namespace phos::client {
namespace {

LiveHandles<BlasHandle>& Handles() {
  static auto* h = new LiveHandles<BlasHandle>;
  return *h;
}

struct Logger {
  std::mutex mu;  // guards the fields
  bool on = false, to_stdout = false, to_stderr = false;
  cublasLogCallback callback = nullptr;
};
Logger& Log() {
  static auto* l = new Logger;
  return *l;
}

}  // namespace

BlasHandle* FindBlasHandle(cublasHandle_t h) {
  auto* p = reinterpret_cast<BlasHandle*>(h);
  return Handles().Contains(p) ? p : nullptr;
}

uint32_t BlasStreamId(const BlasHandle& h) { return StreamIdOf(h.stream); }

}  // namespace phos::client

using namespace phos::client;  // NOLINT

#define PHOS_BLAS_HANDLE(h, var)                      \
  BlasHandle* var = FindBlasHandle(h);                \
  if (var == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED

// ---------------------------------------------------------------- life cycle

PHOS_EXPORT cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  // cuBLAS initialises the CUDA context here; without phosd there is none.
  if (Initialised() != cudaSuccess) return CUBLAS_STATUS_NOT_INITIALIZED;
  *handle = reinterpret_cast<cublasHandle_t>(Handles().Create());
  return CUBLAS_STATUS_SUCCESS;
}

PHOS_EXPORT cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  return Handles().Destroy(reinterpret_cast<BlasHandle*>(handle)) ? CUBLAS_STATUS_SUCCESS
                                                                  : CUBLAS_STATUS_NOT_INITIALIZED;
}

PHOS_EXPORT cublasStatus_t cublasGetVersion_v2(cublasHandle_t handle, int* version) {
  PHOS_BLAS_HANDLE(handle, h);
  if (version == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *version = CUBLAS_VERSION;
  return CUBLAS_STATUS_SUCCESS;
}

PHOS_EXPORT cublasStatus_t cublasGetProperty(libraryPropertyType type, int* value) {
  if (value == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  switch (type) {
    case MAJOR_VERSION: *value = CUBLAS_VER_MAJOR; return CUBLAS_STATUS_SUCCESS;
    case MINOR_VERSION: *value = CUBLAS_VER_MINOR; return CUBLAS_STATUS_SUCCESS;
    case PATCH_LEVEL: *value = CUBLAS_VER_PATCH; return CUBLAS_STATUS_SUCCESS;
    default: return CUBLAS_STATUS_INVALID_VALUE;
  }
}

PHOS_EXPORT size_t cublasGetCudartVersion(void) { return CUDART_VERSION; }

// ---------------------------------------------------------------- configuration

PHOS_EXPORT cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  PHOS_BLAS_HANDLE(handle, h);
  h->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}
PHOS_EXPORT cublasStatus_t cublasGetStream_v2(cublasHandle_t handle, cudaStream_t* stream) {
  PHOS_BLAS_HANDLE(handle, h);
  if (stream == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *stream = h->stream;
  return CUBLAS_STATUS_SUCCESS;
}
PHOS_EXPORT cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void* workspace, size_t bytes) {
  PHOS_BLAS_HANDLE(handle, h);
  if (bytes > 0 && workspace == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  h->workspace = workspace;
  h->workspace_bytes = bytes;
  return CUBLAS_STATUS_SUCCESS;
}
PHOS_EXPORT cublasStatus_t cublasGetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t* mode) {
  PHOS_BLAS_HANDLE(handle, h);
  if (mode == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *mode = h->pointer_mode;
  return CUBLAS_STATUS_SUCCESS;
}
PHOS_EXPORT cublasStatus_t cublasSetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t mode) {
  PHOS_BLAS_HANDLE(handle, h);
  if (mode != CUBLAS_POINTER_MODE_HOST && mode != CUBLAS_POINTER_MODE_DEVICE) return CUBLAS_STATUS_INVALID_VALUE;
  h->pointer_mode = mode;
  return CUBLAS_STATUS_SUCCESS;
}
PHOS_EXPORT cublasStatus_t cublasGetAtomicsMode(cublasHandle_t handle, cublasAtomicsMode_t* mode) {
  PHOS_BLAS_HANDLE(handle, h);
  if (mode == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *mode = h->atomics_mode;
  return CUBLAS_STATUS_SUCCESS;
}
PHOS_EXPORT cublasStatus_t cublasSetAtomicsMode(cublasHandle_t handle, cublasAtomicsMode_t mode) {
  PHOS_BLAS_HANDLE(handle, h);
  if (mode != CUBLAS_ATOMICS_NOT_ALLOWED && mode != CUBLAS_ATOMICS_ALLOWED) return CUBLAS_STATUS_INVALID_VALUE;
  h->atomics_mode = mode;
  return CUBLAS_STATUS_SUCCESS;
}
PHOS_EXPORT cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t* mode) {
  PHOS_BLAS_HANDLE(handle, h);
  if (mode == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *mode = h->math_mode;
  return CUBLAS_STATUS_SUCCESS;
}
PHOS_EXPORT cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  PHOS_BLAS_HANDLE(handle, h);
  // The mode only permits faster reduced-precision paths; the sim always
  // computes in at least the documented precision, which every mode allows.
  h->math_mode = mode;
  return CUBLAS_STATUS_SUCCESS;
}
PHOS_EXPORT cublasStatus_t cublasGetSmCountTarget(cublasHandle_t handle, int* count) {
  PHOS_BLAS_HANDLE(handle, h);
  if (count == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *count = h->sm_count_target;
  return CUBLAS_STATUS_SUCCESS;
}
PHOS_EXPORT cublasStatus_t cublasSetSmCountTarget(cublasHandle_t handle, int count) {
  PHOS_BLAS_HANDLE(handle, h);
  if (count < 0) return CUBLAS_STATUS_INVALID_VALUE;
  h->sm_count_target = count;
  return CUBLAS_STATUS_SUCCESS;
}
PHOS_EXPORT cublasStatus_t cublasGetEmulationStrategy(cublasHandle_t handle, cublasEmulationStrategy_t* s) {
  PHOS_BLAS_HANDLE(handle, h);
  if (s == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *s = h->emulation;
  return CUBLAS_STATUS_SUCCESS;
}
PHOS_EXPORT cublasStatus_t cublasSetEmulationStrategy(cublasHandle_t handle, cublasEmulationStrategy_t s) {
  PHOS_BLAS_HANDLE(handle, h);
  h->emulation = s;  // a hint cuBLAS may ignore; phos computes without emulation
  return CUBLAS_STATUS_SUCCESS;
}

// ---------------------------------------------------------------- undocumented exports
// libcublas.so.13 exports handle-taking functions no header declares. A
// library that calls one (cuSOLVER 13's cusolverDnCreate calls
// cublasSetEnvironmentMode(handle, 1) on the handle it just created)
// would otherwise reach the real libcublas with a libphos.so handle, which
// reads it as its own struct: the byte at offset 0xb8 decided between
// CUBLAS_STATUS_NOT_INITIALIZED (cuSOLVER then fails with INTERNAL_ERROR,
// on about one heap layout in six) and a 4-byte store 67 KB past the
// handle (heap corruption). So every handle-taking export of
// libcublas.so.13 is answered here (docs/interposer.md "cuBLAS and
// cuBLASLt").

// The mode (0 or 1, found by disassembly): 1 makes the handle ignore the
// environment variables that override a routine's compute type (what a
// library wants of the cuBLAS handle it uses internally). phos reads none
// of those variables in the app, so both modes compute alike here; the
// mode is kept for cublasGetEnvironmentMode.
PHOS_EXPORT cublasStatus_t cublasSetEnvironmentMode(cublasHandle_t handle, int mode) {
  PHOS_BLAS_HANDLE(handle, h);
  if (mode != 0 && mode != 1) return CUBLAS_STATUS_INVALID_VALUE;
  h->environment_mode = mode;
  return CUBLAS_STATUS_SUCCESS;
}
PHOS_EXPORT cublasStatus_t cublasGetEnvironmentMode(cublasHandle_t handle, int* mode) {
  PHOS_BLAS_HANDLE(handle, h);
  if (mode == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *mode = h->environment_mode;
  return CUBLAS_STATUS_SUCCESS;
}

// cublas{S,D,C,Z}bdmm: routines of unknown arguments (the handle first);
// nothing in CUDA 13.0 calls them. Refused by name, the handle untouched;
// the arguments after it are not read, which the calling convention allows.
// Weak, as the generated refusals are, so docs/compatibility.md's table
// (scripts/compat_table.py) counts them as refused.
#define PHOS_BLAS_UNDOCUMENTED_ROUTINE(NAME)                                                  \
  PHOS_EXPORT __attribute__((weak)) cublasStatus_t NAME(cublasHandle_t) {                     \
    SayOnce(#NAME ": an undocumented cuBLAS routine phos does not offer (answered "           \
                  "CUBLAS_STATUS_NOT_SUPPORTED)");                                            \
    return CUBLAS_STATUS_NOT_SUPPORTED;                                                       \
  }
PHOS_BLAS_UNDOCUMENTED_ROUTINE(cublasSbdmm)
PHOS_BLAS_UNDOCUMENTED_ROUTINE(cublasDbdmm)
PHOS_BLAS_UNDOCUMENTED_ROUTINE(cublasCbdmm)
PHOS_BLAS_UNDOCUMENTED_ROUTINE(cublasZbdmm)
#undef PHOS_BLAS_UNDOCUMENTED_ROUTINE

// ---------------------------------------------------------------- status strings, logger

PHOS_EXPORT const char* cublasGetStatusName(cublasStatus_t status) {
  switch (status) {
#define PHOS_STATUS(s) \
  case s: return #s;
    PHOS_STATUS(CUBLAS_STATUS_SUCCESS)
    PHOS_STATUS(CUBLAS_STATUS_NOT_INITIALIZED)
    PHOS_STATUS(CUBLAS_STATUS_ALLOC_FAILED)
    PHOS_STATUS(CUBLAS_STATUS_INVALID_VALUE)
    PHOS_STATUS(CUBLAS_STATUS_ARCH_MISMATCH)
    PHOS_STATUS(CUBLAS_STATUS_MAPPING_ERROR)
    PHOS_STATUS(CUBLAS_STATUS_EXECUTION_FAILED)
    PHOS_STATUS(CUBLAS_STATUS_INTERNAL_ERROR)
    PHOS_STATUS(CUBLAS_STATUS_NOT_SUPPORTED)
    PHOS_STATUS(CUBLAS_STATUS_LICENSE_ERROR)
#undef PHOS_STATUS
  }
  return "<unrecognized>";
}

PHOS_EXPORT const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "an absent device architectural feature is required";
    case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    case CUBLAS_STATUS_LICENSE_ERROR: return "license error";
  }
  return "unknown error";
}

PHOS_EXPORT cublasStatus_t cublasLoggerConfigure(int log_is_on, int log_to_stdout, int log_to_stderr,
                                                 const char* log_file_name) {
  Logger& l = Log();
  std::lock_guard<std::mutex> lock(l.mu);
  l.on = log_is_on != 0;
  l.to_stdout = log_to_stdout != 0;
  l.to_stderr = log_to_stderr != 0;
  // phos logs nothing per call (a log file name is accepted and unused).
  (void)log_file_name;
  return CUBLAS_STATUS_SUCCESS;
}
PHOS_EXPORT cublasStatus_t cublasSetLoggerCallback(cublasLogCallback callback) {
  Logger& l = Log();
  std::lock_guard<std::mutex> lock(l.mu);
  l.callback = callback;
  return CUBLAS_STATUS_SUCCESS;
}
PHOS_EXPORT cublasStatus_t cublasGetLoggerCallback(cublasLogCallback* callback) {
  if (callback == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  Logger& l = Log();
  std::lock_guard<std::mutex> lock(l.mu);
  *callback = l.callback;
  return CUBLAS_STATUS_SUCCESS;
}

// ---------------------------------------------------------------- host <-> device helpers

namespace {

cublasStatus_t FromCopy(cudaError_t e) {
  if (e == cudaSuccess) return CUBLAS_STATUS_SUCCESS;
  if (e == cudaErrorInvalidValue) return CUBLAS_STATUS_INVALID_VALUE;
  return CUBLAS_STATUS_MAPPING_ERROR;
}

/// A strided vector or a column-major matrix copy as one 2D copy: `rows`
/// elements of `es` bytes per column, columns `ld*` elements apart.
cublasStatus_t Copy2D(int64_t rows, int64_t cols, int64_t es, const void* src, int64_t lds, void* dst, int64_t ldd,
                      cudaMemcpyKind kind, cudaStream_t stream, bool async) {
  if (rows < 0 || cols < 0 || es <= 0 || lds <= 0 || ldd <= 0) return CUBLAS_STATUS_INVALID_VALUE;
  if (rows == 0 || cols == 0) return CUBLAS_STATUS_SUCCESS;
  // The _64 forms: sizes whose byte counts would overflow are refused.
  constexpr int64_t kMax = int64_t{1} << 40;
  if (rows > kMax || cols > kMax || es > 4096 || lds > kMax || ldd > kMax) return CUBLAS_STATUS_INVALID_VALUE;
  const size_t width = static_cast<size_t>(rows) * static_cast<size_t>(es);
  const size_t spitch = static_cast<size_t>(lds) * static_cast<size_t>(es);
  const size_t dpitch = static_cast<size_t>(ldd) * static_cast<size_t>(es);
  if (width > spitch || width > dpitch) return CUBLAS_STATUS_INVALID_VALUE;
  const auto height = static_cast<size_t>(cols);
  return FromCopy(async ? cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, kind, stream)
                        : cudaMemcpy2D(dst, dpitch, src, spitch, width, height, kind));
}

}  // namespace

// A vector of n elements with increment inc is a 1-row matrix whose
// "columns" are inc elements apart. Each with int and int64_t sizes.
#define PHOS_VECTOR_COPY(NAME, IDX, KIND)                                                         \
  PHOS_EXPORT cublasStatus_t NAME(IDX n, IDX es, const void* x, IDX incx, void* y, IDX incy) {   \
    return Copy2D(1, n, es, x, incx, y, incy, KIND, nullptr, false);                            \
  }                                                                                             \
  PHOS_EXPORT cublasStatus_t NAME##Async(IDX n, IDX es, const void* x, IDX incx, void* y, IDX incy, \
                                         cudaStream_t stream) {                                  \
    return Copy2D(1, n, es, x, incx, y, incy, KIND, stream, true);                               \
  }
#define PHOS_MATRIX_COPY(NAME, IDX, KIND)                                                                        \
  PHOS_EXPORT cublasStatus_t NAME(IDX rows, IDX cols, IDX es, const void* a, IDX lda, void* b, IDX ldb) {       \
    return Copy2D(rows, cols, es, a, lda, b, ldb, KIND, nullptr, false);                                       \
  }                                                                                                            \
  PHOS_EXPORT cublasStatus_t NAME##Async(IDX rows, IDX cols, IDX es, const void* a, IDX lda, void* b, IDX ldb, \
                                         cudaStream_t stream) {                                                 \
    return Copy2D(rows, cols, es, a, lda, b, ldb, KIND, stream, true);                                          \
  }
PHOS_VECTOR_COPY(cublasSetVector, int, cudaMemcpyHostToDevice)
PHOS_VECTOR_COPY(cublasGetVector, int, cudaMemcpyDeviceToHost)
PHOS_MATRIX_COPY(cublasSetMatrix, int, cudaMemcpyHostToDevice)
PHOS_MATRIX_COPY(cublasGetMatrix, int, cudaMemcpyDeviceToHost)
#undef PHOS_VECTOR_COPY
#undef PHOS_MATRIX_COPY
// The _64 forms put _64 after Async (cublasSetVectorAsync_64).
#define PHOS_VECTOR_COPY_64(NAME, ASYNC, KIND)                                                            \
  PHOS_EXPORT cublasStatus_t NAME(int64_t n, int64_t es, const void* x, int64_t incx, void* y, int64_t incy) { \
    return Copy2D(1, n, es, x, incx, y, incy, KIND, nullptr, false);                                     \
  }                                                                                                      \
  PHOS_EXPORT cublasStatus_t ASYNC(int64_t n, int64_t es, const void* x, int64_t incx, void* y, int64_t incy, \
                                   cudaStream_t stream) {                                                \
    return Copy2D(1, n, es, x, incx, y, incy, KIND, stream, true);                                       \
  }
#define PHOS_MATRIX_COPY_64(NAME, ASYNC, KIND)                                                                  \
  PHOS_EXPORT cublasStatus_t NAME(int64_t rows, int64_t cols, int64_t es, const void* a, int64_t lda, void* b, \
                                  int64_t ldb) {                                                               \
    return Copy2D(rows, cols, es, a, lda, b, ldb, KIND, nullptr, false);                                      \
  }                                                                                                            \
  PHOS_EXPORT cublasStatus_t ASYNC(int64_t rows, int64_t cols, int64_t es, const void* a, int64_t lda, void* b, \
                                   int64_t ldb, cudaStream_t stream) {                                         \
    return Copy2D(rows, cols, es, a, lda, b, ldb, KIND, stream, true);                                         \
  }
PHOS_VECTOR_COPY_64(cublasSetVector_64, cublasSetVectorAsync_64, cudaMemcpyHostToDevice)
PHOS_VECTOR_COPY_64(cublasGetVector_64, cublasGetVectorAsync_64, cudaMemcpyDeviceToHost)
PHOS_MATRIX_COPY_64(cublasSetMatrix_64, cublasSetMatrixAsync_64, cudaMemcpyHostToDevice)
PHOS_MATRIX_COPY_64(cublasGetMatrix_64, cublasGetMatrixAsync_64, cudaMemcpyDeviceToHost)
#undef PHOS_VECTOR_COPY_64
#undef PHOS_MATRIX_COPY_64
