// cuBLAS routines (cublas_internal.h): each builds a wire::BlasRequest —
// the handle's stream in the frame, its pointer mode and the scalars in
// the request — checks it against the routine's specification
// (protocol/blas_spec.h: cuBLAS answers CUBLAS_STATUS_INVALID_VALUE at
// once, without touching the GPU) and sends its family's row of calls.def.
// Routines that leave their result in device memory are posted (stream
// order, as cuBLAS); reductions are called (their result comes back in the
// reply, or in device memory in device pointer mode).
//
// Inside a stream capture a routine becomes a kernel node that replays the
// same request (host-mode scalars are taken at capture, as cuBLAS bakes
// them into its kernels); a reduction in a capture is refused.
#include <cublas_api.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "interposer/client/client_internal.h"
#include "interposer/client/connection.h"
#include "interposer/client/cublas_internal.h"
#include "interposer/client/graphs.h"
#include "protocol/blas_spec.h"
#include "protocol/calls.h"

namespace phos::client {
namespace {

namespace op = wire::op;
using wire::BlasRequest;

static_assert(wire::kCudaR32F == CUDA_R_32F && wire::kCudaR64F == CUDA_R_64F && wire::kCudaR16F == CUDA_R_16F &&
              wire::kCudaC32F == CUDA_C_32F && wire::kCudaC64F == CUDA_C_64F && wire::kCudaR16BF == CUDA_R_16BF &&
              wire::kCudaR32I == CUDA_R_32I && wire::kCudaR8I == CUDA_R_8I);

/// Whether the host scalar `bytes` of cudaDataType_t `type` is exactly 1.
bool HostScalarIsOne(const uint8_t* bytes, int32_t type) {
  uint8_t one[16] = {};
  size_t n = 0;
  switch (type) {
    case CUDA_R_32F: case CUDA_C_32F: { const float f = 1.0f; std::memcpy(one, &f, 4); n = type == CUDA_R_32F ? 4 : 8; break; }
    case CUDA_R_64F: case CUDA_C_64F: { const double d = 1.0; std::memcpy(one, &d, 8); n = type == CUDA_R_64F ? 8 : 16; break; }
    case CUDA_R_16F: { const uint16_t h = 0x3c00; std::memcpy(one, &h, 2); n = 2; break; }
    case CUDA_R_16BF: { const uint16_t h = 0x3f80; std::memcpy(one, &h, 2); n = 2; break; }
    default: return false;
  }
  return std::memcmp(bytes, one, n) == 0;
}

}  // namespace

cublasStatus_t BlasStatusOf(WireStatus w) {
  switch (w) {
    case WireStatus::kSuccess: return CUBLAS_STATUS_SUCCESS;
    case WireStatus::kInvalidValue: return CUBLAS_STATUS_INVALID_VALUE;
    case WireStatus::kNotSupported: return CUBLAS_STATUS_NOT_SUPPORTED;
    case WireStatus::kMemoryAllocation: return CUBLAS_STATUS_ALLOC_FAILED;
    case WireStatus::kDaemonUnavailable: return CUBLAS_STATUS_NOT_INITIALIZED;
    default: return CUBLAS_STATUS_EXECUTION_FAILED;
  }
}

cublasStatus_t ProbeBlasOnce(wire::ApiId api, const wire::BlasLtRequest& call) {
  // One answer per routine and type combination, for the process's life
  // (phosd's backend does not change under a running app; after a restore
  // onto another backend a refused combination stays refused — safe).
  // cuBLASLt's bias gradients from an input are computed on the sim for
  // alpha 1 only: whether alpha is a host 1 is part of the combination.
  using Key = std::tuple<uint32_t, int32_t, int32_t, int32_t, int32_t, int32_t, int32_t, uint32_t, int32_t, int32_t, bool>;
  static std::mutex mu;  // guards `answers`
  static auto* answers = new std::map<Key, cublasStatus_t>;
  const wire::BlasRequest& g = call.gemm;
  const bool host_alpha_one = (g.flags & wire::kBlasDeviceScalars) == 0 && HostScalarIsOne(g.alpha, g.scalar_type);
  const Key key{static_cast<uint32_t>(api), g.type_a, g.type_b, g.type_c, g.compute, g.scalar_type, call.type_d,
                call.epilogue, call.bias_type, call.aux_type, host_alpha_one};
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = answers->find(key); it != answers->end()) return it->second;
  }
  wire::BlasProbeRequest probe{};
  probe.api = static_cast<uint32_t>(api);
  probe.call = call;
  const WireStatus w =
      Connection::Get().Call(op::kBlasProbe, 0, std::as_bytes(std::span<const wire::BlasProbeRequest>(&probe, 1)));
  const cublasStatus_t st = BlasStatusOf(w);
  if (w == WireStatus::kSuccess || w == WireStatus::kNotSupported) {
    std::lock_guard<std::mutex> lock(mu);
    answers->emplace(key, st);
  }
  if (w == WireStatus::kNotSupported) {
    const wire::CallRow* row = wire::FindCallRow(api);
    SayOnce(std::string(row != nullptr ? row->api : "cuBLAS") + " family with data types A=" +
            std::to_string(g.type_a) + " B=" + std::to_string(g.type_b) + " C=" + std::to_string(g.type_c) +
            " compute=" + std::to_string(g.compute) + " (cudaDataType/cublasComputeType values) is not supported "
            "by phos on this backend (phosd's log says why)");
  }
  return st;
}

cublasStatus_t PostBlas(wire::ApiId api, uint32_t stream, std::vector<std::byte> payload) {
  if (StickyError() != cudaSuccess) return CUBLAS_STATUS_EXECUTION_FAILED;
  cudaError_t captured = cudaSuccess;
  if (MaybeCapture(stream, cudaGraphNodeTypeKernel,
                   [api, payload](uint32_t s) { return Finish(Connection::Get().Post(api, s, payload)); },
                   &captured)) {
    return captured == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
  }
  return BlasStatusOf(Connection::Get().Post(api, stream, payload));
}

BlasRequest BlasBase(const BlasHandle& h) {
  BlasRequest r{};
  r.batch = 1;
  r.lda = r.ldb = r.ldc = 1;
  if (h.pointer_mode == CUBLAS_POINTER_MODE_DEVICE) r.flags |= wire::kBlasDeviceScalars;
  return r;
}

BlasHandle* BeginBlas(cublasHandle_t handle, int32_t type, BlasRequest* r, cublasStatus_t* status) {
  BlasHandle* h = FindBlasHandle(handle);
  if (h == nullptr) {
    *status = CUBLAS_STATUS_NOT_INITIALIZED;
    return nullptr;
  }
  *r = BlasBase(*h);
  r->type_a = r->type_b = r->type_c = r->compute = r->scalar_type = type;
  return h;
}

bool SetBlasScalars(BlasRequest* r, const void* alpha, const void* beta, bool has_beta) {
  const uint32_t es = wire::BlasTypeBytes(r->scalar_type);
  const uint32_t es_real = wire::BlasTypeBytes(wire::BlasRealTypeOf(r->scalar_type));
  if (alpha == nullptr || (has_beta && beta == nullptr) || es == 0) return false;
  if (r->flags & wire::kBlasDeviceScalars) {
    r->alpha_ptr = reinterpret_cast<uint64_t>(alpha);
    if (has_beta) r->beta_ptr = reinterpret_cast<uint64_t>(beta);
  } else {
    std::memcpy(r->alpha, alpha, (r->flags & wire::kBlasRealAlpha) ? es_real : es);
    if (has_beta) std::memcpy(r->beta, beta, (r->flags & wire::kBlasRealBeta) ? es_real : es);
  }
  return true;
}

cublasStatus_t SendBlas(const BlasHandle& h, wire::ApiId api, const BlasRequest& req, void* result,
                        size_t result_bytes) {
  if (StickyError() != cudaSuccess) return CUBLAS_STATUS_EXECUTION_FAILED;
  wire::BlasShape shape{};
  if (!wire::BlasShapeOf(api, &shape)) return CUBLAS_STATUS_INTERNAL_ERROR;
  wire::BlasOperands ops;
  if (const char* why = wire::CheckBlas(shape, req, &ops); why != nullptr) {
    if (std::getenv("PHOS_TRACE_ERRORS") != nullptr) {
      std::fprintf(stderr, "phos: cuBLAS %s: %s\n", wire::BlasShapeName(shape), why);
    }
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const uint32_t stream = BlasStreamId(h);
  const wire::CallRow* row = wire::FindCallRow(api);
  Connection& c = Connection::Get();
  if (row != nullptr && !row->synchronous()) {
    wire::BlasLtRequest probe{};
    probe.gemm = req;
    if (cublasStatus_t ps = ProbeBlasOnce(api, probe); ps != CUBLAS_STATUS_SUCCESS) return ps;
    const auto* p = reinterpret_cast<const std::byte*>(&req);
    return PostBlas(api, stream, std::vector<std::byte>(p, p + sizeof req));
  }
  cudaError_t refused = cudaSuccess;
  if (AnyCapture() && RefuseInCapture(stream, "a cuBLAS reduction (its result is read at once)", &refused)) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  ring::Reply reply;
  WireStatus w = c.Call(api, stream, std::as_bytes(std::span<const BlasRequest>(&req, 1)), &reply);
  if (w == WireStatus::kSuccess && (req.flags & wire::kBlasDeviceScalars) == 0 && result != nullptr) {
    if (reply.bytes != sizeof(wire::BlasResultReply)) return CUBLAS_STATUS_INTERNAL_ERROR;
    std::memcpy(result, reply.data.data(), result_bytes);
  }
  return BlasStatusOf(w);
}

namespace {

/// The scalar type of a GemmEx compute type (cublasComputeType_t, or a
/// cudaDataType_t in the legacy form), complex when C is.
int32_t ScalarTypeOfCompute(int32_t compute, int32_t ctype) {
  int32_t base = compute;
  switch (compute) {
    case CUBLAS_COMPUTE_16F: case CUBLAS_COMPUTE_16F_PEDANTIC: base = CUDA_R_16F; break;
    case CUBLAS_COMPUTE_32F: case CUBLAS_COMPUTE_32F_PEDANTIC: case CUBLAS_COMPUTE_32F_FAST_16F:
    case CUBLAS_COMPUTE_32F_FAST_16BF: case CUBLAS_COMPUTE_32F_FAST_TF32: case CUBLAS_COMPUTE_32F_EMULATED_16BFX9:
      base = CUDA_R_32F; break;
    case CUBLAS_COMPUTE_64F: case CUBLAS_COMPUTE_64F_PEDANTIC: case CUBLAS_COMPUTE_64F_EMULATED_FIXEDPOINT:
      base = CUDA_R_64F; break;
    case CUBLAS_COMPUTE_32I: case CUBLAS_COMPUTE_32I_PEDANTIC: base = CUDA_R_32I; break;
    default: return compute;  // a cudaDataType_t already
  }
  if (wire::BlasTypeIsComplex(ctype)) {
    if (base == CUDA_R_32F) return CUDA_C_32F;
    if (base == CUDA_R_64F) return CUDA_C_64F;
  }
  return base;
}

struct GemmArgs {
  cublasOperation_t ta, tb;
  int64_t m, n, k;
  const void* alpha;
  const void* a;
  int32_t atype;
  int64_t lda, stride_a;
  const void* b;
  int32_t btype;
  int64_t ldb, stride_b;
  const void* beta;
  void* c;
  int32_t ctype;
  int64_t ldc, stride_c;
  int64_t batch;
  int32_t compute;
  int32_t scalar_type;
  bool pointer_arrays = false;  // a, b, c are arrays of `batch` device pointers (kBlasGemmBatched)
};

cublasStatus_t Gemm(cublasHandle_t handle, const GemmArgs& g) {
  BlasHandle* h = FindBlasHandle(handle);
  if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  BlasRequest r = BlasBase(*h);
  r.type_a = g.atype;
  r.type_b = g.btype;
  r.type_c = g.ctype;
  r.compute = g.compute;
  r.scalar_type = g.scalar_type;
  r.op_a = static_cast<uint32_t>(g.ta);
  r.op_b = static_cast<uint32_t>(g.tb);
  r.m = g.m;
  r.n = g.n;
  r.k = g.k;
  r.batch = g.batch;
  r.a = reinterpret_cast<uint64_t>(g.a);
  r.b = reinterpret_cast<uint64_t>(g.b);
  r.c = reinterpret_cast<uint64_t>(g.c);
  r.lda = g.lda;
  r.ldb = g.ldb;
  r.ldc = g.ldc;
  r.stride_a = g.stride_a;
  r.stride_b = g.stride_b;
  r.stride_c = g.stride_c;
  if (!SetBlasScalars(&r, g.alpha, g.beta, true)) return CUBLAS_STATUS_INVALID_VALUE;
  return SendBlas(*h, g.pointer_arrays ? op::kBlasGemmBatched : op::kBlasGemm, r);
}

struct GemvArgs {
  cublasOperation_t trans;
  int64_t m, n;
  const void* alpha;
  const void* a;
  int64_t lda, stride_a;
  const void* x;
  int64_t incx, stride_x;
  const void* beta;
  void* y;
  int64_t incy, stride_y;
  int64_t batch;
  int32_t type;
  bool pointer_arrays = false;  // a, x, y are arrays of `batch` device pointers (kBlasGemvBatched)
};

cublasStatus_t Gemv(cublasHandle_t handle, const GemvArgs& g) {
  BlasHandle* h = FindBlasHandle(handle);
  if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  BlasRequest r = BlasBase(*h);
  r.type_a = r.type_b = r.type_c = r.compute = r.scalar_type = g.type;
  r.op_a = static_cast<uint32_t>(g.trans);
  r.m = g.m;
  r.n = g.n;
  r.batch = g.batch;
  r.a = reinterpret_cast<uint64_t>(g.a);
  r.b = reinterpret_cast<uint64_t>(g.x);
  r.c = reinterpret_cast<uint64_t>(g.y);
  r.lda = g.lda;
  r.ldb = g.incx;
  r.ldc = g.incy;
  r.stride_a = g.stride_a;
  r.stride_b = g.stride_x;
  r.stride_c = g.stride_y;
  if (!SetBlasScalars(&r, g.alpha, g.beta, true)) return CUBLAS_STATUS_INVALID_VALUE;
  return SendBlas(*h, g.pointer_arrays ? op::kBlasGemvBatched : op::kBlasGemv, r);
}

cublasStatus_t Geam(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n,
                    const void* alpha, const void* a, int64_t lda, const void* beta, const void* b, int64_t ldb,
                    void* c, int64_t ldc, int32_t type) {
  BlasHandle* h = FindBlasHandle(handle);
  if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  BlasRequest r = BlasBase(*h);
  r.type_a = r.type_b = r.type_c = r.compute = r.scalar_type = type;
  r.op_a = static_cast<uint32_t>(ta);
  r.op_b = static_cast<uint32_t>(tb);
  r.m = m;
  r.n = n;
  r.a = reinterpret_cast<uint64_t>(a);
  r.b = reinterpret_cast<uint64_t>(b);
  r.c = reinterpret_cast<uint64_t>(c);
  r.lda = lda;
  r.ldb = ldb;
  r.ldc = ldc;
  // cuSOLVER 13.0 transposes a matrix with geam and beta == NULL (host
  // pointer mode; seen in cupy.linalg.svd of a non-square matrix), which
  // cuBLAS takes as beta = 0. In device pointer mode a null beta stays an
  // error: nobody was seen relying on it.
  static constexpr std::byte kZeroScalar[16] = {};
  if (beta == nullptr && (r.flags & wire::kBlasDeviceScalars) == 0) beta = kZeroScalar;
  if (!SetBlasScalars(&r, alpha, beta, true)) return CUBLAS_STATUS_INVALID_VALUE;
  return SendBlas(*h, op::kBlasGeam, r);
}

cublasStatus_t Trsm(cublasHandle_t handle, cublasSideMode_t side, cublasFillMode_t uplo, cublasOperation_t trans,
                    cublasDiagType_t diag, int64_t m, int64_t n, const void* alpha, const void* a, int64_t lda,
                    void* b, int64_t ldb, int32_t type, int64_t batch = 1, bool pointer_arrays = false) {
  BlasHandle* h = FindBlasHandle(handle);
  if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!ValidSide(side) || !ValidUplo(uplo) || !ValidDiag(diag)) return CUBLAS_STATUS_INVALID_VALUE;
  BlasRequest r = BlasBase(*h);
  r.type_a = r.type_b = r.type_c = r.compute = r.scalar_type = type;
  if (side == CUBLAS_SIDE_RIGHT) r.flags |= wire::kBlasSideRight;
  if (uplo == CUBLAS_FILL_MODE_UPPER) r.flags |= wire::kBlasUpper;
  if (diag == CUBLAS_DIAG_UNIT) r.flags |= wire::kBlasUnitDiag;
  r.op_a = static_cast<uint32_t>(trans);
  r.m = m;
  r.n = n;
  r.a = reinterpret_cast<uint64_t>(a);
  r.c = reinterpret_cast<uint64_t>(b);
  r.lda = lda;
  r.ldc = ldb;
  r.batch = batch;
  if (!SetBlasScalars(&r, alpha, nullptr, false)) return CUBLAS_STATUS_INVALID_VALUE;
  return SendBlas(*h, pointer_arrays ? op::kBlasTrsmBatched : op::kBlasTrsm, r);
}

cublasStatus_t Ger(cublasHandle_t handle, int64_t m, int64_t n, const void* alpha, const void* x, int64_t incx,
                   const void* y, int64_t incy, void* a, int64_t lda, int32_t type, bool conjugate) {
  BlasHandle* h = FindBlasHandle(handle);
  if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  BlasRequest r = BlasBase(*h);
  r.type_a = r.type_b = r.type_c = r.compute = r.scalar_type = type;
  if (conjugate) r.flags |= wire::kBlasConjugate;
  r.m = m;
  r.n = n;
  r.a = reinterpret_cast<uint64_t>(x);
  r.lda = incx;
  r.b = reinterpret_cast<uint64_t>(y);
  r.ldb = incy;
  r.c = reinterpret_cast<uint64_t>(a);
  r.ldc = lda;
  if (!SetBlasScalars(&r, alpha, nullptr, false)) return CUBLAS_STATUS_INVALID_VALUE;
  return SendBlas(*h, op::kBlasGer, r);
}

cublasStatus_t Syrk(cublasHandle_t handle, cublasFillMode_t uplo, cublasOperation_t trans, int64_t n, int64_t k,
                    const void* alpha, const void* a, int64_t lda, const void* beta, void* c, int64_t ldc,
                    int32_t type) {
  BlasHandle* h = FindBlasHandle(handle);
  if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!ValidUplo(uplo) || (trans != CUBLAS_OP_N && trans != CUBLAS_OP_T)) return CUBLAS_STATUS_INVALID_VALUE;
  BlasRequest r = BlasBase(*h);
  r.type_a = r.type_b = r.type_c = r.compute = r.scalar_type = type;
  if (uplo == CUBLAS_FILL_MODE_UPPER) r.flags |= wire::kBlasUpper;
  r.op_a = static_cast<uint32_t>(trans);
  r.n = n;
  r.k = k;
  r.a = reinterpret_cast<uint64_t>(a);
  r.lda = lda;
  r.c = reinterpret_cast<uint64_t>(c);
  r.ldc = ldc;
  if (!SetBlasScalars(&r, alpha, beta, true)) return CUBLAS_STATUS_INVALID_VALUE;
  return SendBlas(*h, op::kBlasSyrk, r);
}

/// Level 1: x in (a, lda = incx), y in (b, ldb = incy).
cublasStatus_t Level1(cublasHandle_t handle, wire::ApiId api, int64_t n, const void* alpha, int32_t scalar_type,
                      const void* x, int32_t xtype, int64_t incx, const void* y, int32_t ytype, int64_t incy,
                      void* result = nullptr, uint32_t flags = 0) {
  BlasHandle* h = FindBlasHandle(handle);
  if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  const bool reduction = api == op::kBlasDot || api == op::kBlasNrm2 || api == op::kBlasAsum ||
                         api == op::kBlasIamax || api == op::kBlasIamin;
  // cuBLAS does nothing for n <= 0 (a reduction's result is 0).
  if (n <= 0 && !reduction) return CUBLAS_STATUS_SUCCESS;
  if (n < 0) n = 0;
  BlasRequest r = BlasBase(*h);
  r.flags |= flags;
  r.type_a = xtype;
  r.type_b = ytype;
  r.compute = r.scalar_type = scalar_type;
  r.n = n;
  r.a = reinterpret_cast<uint64_t>(x);
  r.b = reinterpret_cast<uint64_t>(y);
  r.lda = incx;
  r.ldb = incy;
  if (alpha != nullptr && !SetBlasScalars(&r, alpha, nullptr, false)) return CUBLAS_STATUS_INVALID_VALUE;
  if (!reduction) return SendBlas(*h, api, r);
  if (result == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  const bool index = api == op::kBlasIamax || api == op::kBlasIamin;
  r.result = reinterpret_cast<uint64_t>(result);
  const size_t index_bytes = (flags & wire::kBlasIndex64) ? sizeof(int64_t) : sizeof(int);
  return SendBlas(*h, api, r, result, index ? index_bytes : wire::BlasTypeBytes(scalar_type));
}

/// rot: x in (a, lda = incx), y in (b, ldb = incy); c (always real) as
/// alpha, s as beta (`flags` kBlasRealBeta when s is real too).
cublasStatus_t Rot(cublasHandle_t handle, int64_t n, void* x, int64_t incx, void* y, int64_t incy, const void* c,
                   const void* s, int32_t type, uint32_t flags) {
  BlasHandle* h = FindBlasHandle(handle);
  if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (n <= 0) return CUBLAS_STATUS_SUCCESS;  // cuBLAS does nothing (reads no scalar)
  BlasRequest r = BlasBase(*h);
  r.flags |= flags | wire::kBlasRealAlpha;
  r.type_a = r.type_b = r.type_c = r.compute = r.scalar_type = type;
  r.n = n;
  r.a = reinterpret_cast<uint64_t>(x);
  r.lda = incx;
  r.b = reinterpret_cast<uint64_t>(y);
  r.ldb = incy;
  if (!SetBlasScalars(&r, c, s, true)) return CUBLAS_STATUS_INVALID_VALUE;
  return SendBlas(*h, op::kBlasRot, r);
}

}  // namespace
}  // namespace phos::client

using namespace phos::client;  // NOLINT
namespace op = phos::wire::op;

// ---------------------------------------------------------------- gemm

// S/D/C/Z/H gemm, plain and strided-batched, with 32- and 64-bit sizes.
#define PHOS_GEMM(NAME, T, CT, IDX)                                                                                \
  PHOS_EXPORT cublasStatus_t NAME(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, IDX m, IDX n, \
                                  IDX k, const T* alpha, const T* A, IDX lda, const T* B, IDX ldb, const T* beta,  \
                                  T* C, IDX ldc) {                                                                 \
    return Gemm(handle, {ta, tb, m, n, k, alpha, A, CT, lda, 0, B, CT, ldb, 0, beta, C, CT, ldc, 0, 1, CT, CT});  \
  }
#define PHOS_GEMM_SB(NAME, T, CT, IDX)                                                                             \
  PHOS_EXPORT cublasStatus_t NAME(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, IDX m, IDX n, \
                                  IDX k, const T* alpha, const T* A, IDX lda, long long int sa, const T* B,        \
                                  IDX ldb, long long int sb, const T* beta, T* C, IDX ldc, long long int sc,      \
                                  IDX batch) {                                                                     \
    return Gemm(handle, {ta, tb, m, n, k, alpha, A, CT, lda, sa, B, CT, ldb, sb, beta, C, CT, ldc, sc, batch, CT,  \
                         CT});                                                                                     \
  }
PHOS_GEMM(cublasSgemm_v2, float, CUDA_R_32F, int)
PHOS_GEMM(cublasDgemm_v2, double, CUDA_R_64F, int)
PHOS_GEMM(cublasCgemm_v2, cuComplex, CUDA_C_32F, int)
PHOS_GEMM(cublasZgemm_v2, cuDoubleComplex, CUDA_C_64F, int)
PHOS_GEMM(cublasCgemm3m, cuComplex, CUDA_C_32F, int)
PHOS_GEMM(cublasZgemm3m, cuDoubleComplex, CUDA_C_64F, int)
PHOS_GEMM(cublasHgemm, __half, CUDA_R_16F, int)
PHOS_GEMM(cublasSgemm_v2_64, float, CUDA_R_32F, int64_t)
PHOS_GEMM(cublasDgemm_v2_64, double, CUDA_R_64F, int64_t)
PHOS_GEMM(cublasCgemm_v2_64, cuComplex, CUDA_C_32F, int64_t)
PHOS_GEMM(cublasZgemm_v2_64, cuDoubleComplex, CUDA_C_64F, int64_t)
PHOS_GEMM(cublasHgemm_64, __half, CUDA_R_16F, int64_t)
PHOS_GEMM_SB(cublasSgemmStridedBatched, float, CUDA_R_32F, int)
PHOS_GEMM_SB(cublasDgemmStridedBatched, double, CUDA_R_64F, int)
PHOS_GEMM_SB(cublasCgemmStridedBatched, cuComplex, CUDA_C_32F, int)
PHOS_GEMM_SB(cublasZgemmStridedBatched, cuDoubleComplex, CUDA_C_64F, int)
PHOS_GEMM_SB(cublasHgemmStridedBatched, __half, CUDA_R_16F, int)
PHOS_GEMM_SB(cublasSgemmStridedBatched_64, float, CUDA_R_32F, int64_t)
PHOS_GEMM_SB(cublasDgemmStridedBatched_64, double, CUDA_R_64F, int64_t)
PHOS_GEMM_SB(cublasCgemmStridedBatched_64, cuComplex, CUDA_C_32F, int64_t)
PHOS_GEMM_SB(cublasZgemmStridedBatched_64, cuDoubleComplex, CUDA_C_64F, int64_t)
PHOS_GEMM_SB(cublasHgemmStridedBatched_64, __half, CUDA_R_16F, int64_t)
#undef PHOS_GEMM
#undef PHOS_GEMM_SB

#define PHOS_GEMM_EX(NAME, IDX)                                                                                    \
  PHOS_EXPORT cublasStatus_t NAME(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, IDX m, IDX n, \
                                  IDX k, const void* alpha, const void* A, cudaDataType at, IDX lda, const void* B, \
                                  cudaDataType bt, IDX ldb, const void* beta, void* C, cudaDataType ct, IDX ldc,   \
                                  cublasComputeType_t compute, cublasGemmAlgo_t) {                                 \
    return Gemm(handle, {ta, tb, m, n, k, alpha, A, at, lda, 0, B, bt, ldb, 0, beta, C, ct, ldc, 0, 1, compute,    \
                         ScalarTypeOfCompute(compute, ct)});                                                       \
  }
#define PHOS_GEMM_SB_EX(NAME, IDX)                                                                                 \
  PHOS_EXPORT cublasStatus_t NAME(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, IDX m, IDX n, \
                                  IDX k, const void* alpha, const void* A, cudaDataType at, IDX lda,              \
                                  long long int sa, const void* B, cudaDataType bt, IDX ldb, long long int sb,     \
                                  const void* beta, void* C, cudaDataType ct, IDX ldc, long long int sc,          \
                                  IDX batch, cublasComputeType_t compute, cublasGemmAlgo_t) {                      \
    return Gemm(handle, {ta, tb, m, n, k, alpha, A, at, lda, sa, B, bt, ldb, sb, beta, C, ct, ldc, sc, batch,      \
                         compute, ScalarTypeOfCompute(compute, ct)});                                              \
  }
PHOS_GEMM_EX(cublasGemmEx, int)
PHOS_GEMM_EX(cublasGemmEx_64, int64_t)
PHOS_GEMM_SB_EX(cublasGemmStridedBatchedEx, int)
PHOS_GEMM_SB_EX(cublasGemmStridedBatchedEx_64, int64_t)
#undef PHOS_GEMM_EX
#undef PHOS_GEMM_SB_EX

#define PHOS_SGEMM_EX(NAME, IDX, T, ST, CT)                                                                        \
  PHOS_EXPORT cublasStatus_t NAME(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, IDX m, IDX n, \
                                  IDX k, const T* alpha, const void* A, cudaDataType at, IDX lda, const void* B,   \
                                  cudaDataType bt, IDX ldb, const T* beta, void* C, cudaDataType ct, IDX ldc) {    \
    return Gemm(handle, {ta, tb, m, n, k, alpha, A, at, lda, 0, B, bt, ldb, 0, beta, C, ct, ldc, 0, 1, CT, ST});  \
  }
PHOS_SGEMM_EX(cublasSgemmEx, int, float, CUDA_R_32F, CUBLAS_COMPUTE_32F)
PHOS_SGEMM_EX(cublasSgemmEx_64, int64_t, float, CUDA_R_32F, CUBLAS_COMPUTE_32F)
PHOS_SGEMM_EX(cublasCgemmEx, int, cuComplex, CUDA_C_32F, CUBLAS_COMPUTE_32F)
PHOS_SGEMM_EX(cublasCgemmEx_64, int64_t, cuComplex, CUDA_C_32F, CUBLAS_COMPUTE_32F)
#undef PHOS_SGEMM_EX

// Batched over arrays of device pointers. The array of C's pointers is
// only read (the matrices it names are written): GemmArgs' `c` field holds
// its address.
namespace {
template <typename T>
void* ArrayOf(T* const* array) {
  return const_cast<void*>(static_cast<const void*>(array));
}
}  // namespace
#define PHOS_GEMM_BATCHED(NAME, T, CT, IDX)                                                                        \
  PHOS_EXPORT cublasStatus_t NAME(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, IDX m, IDX n, \
                                  IDX k, const T* alpha, const T* const A[], IDX lda, const T* const B[], IDX ldb, \
                                  const T* beta, T* const C[], IDX ldc, IDX batch) {                               \
    return Gemm(handle, {ta, tb, m, n, k, alpha, A, CT, lda, 0, B, CT, ldb, 0, beta, ArrayOf(C), CT, ldc, 0, batch, \
                         CT, CT, true});                                                                           \
  }
PHOS_GEMM_BATCHED(cublasSgemmBatched, float, CUDA_R_32F, int)
PHOS_GEMM_BATCHED(cublasDgemmBatched, double, CUDA_R_64F, int)
PHOS_GEMM_BATCHED(cublasCgemmBatched, cuComplex, CUDA_C_32F, int)
PHOS_GEMM_BATCHED(cublasZgemmBatched, cuDoubleComplex, CUDA_C_64F, int)
PHOS_GEMM_BATCHED(cublasHgemmBatched, __half, CUDA_R_16F, int)
PHOS_GEMM_BATCHED(cublasSgemmBatched_64, float, CUDA_R_32F, int64_t)
PHOS_GEMM_BATCHED(cublasDgemmBatched_64, double, CUDA_R_64F, int64_t)
PHOS_GEMM_BATCHED(cublasCgemmBatched_64, cuComplex, CUDA_C_32F, int64_t)
PHOS_GEMM_BATCHED(cublasZgemmBatched_64, cuDoubleComplex, CUDA_C_64F, int64_t)
PHOS_GEMM_BATCHED(cublasHgemmBatched_64, __half, CUDA_R_16F, int64_t)
#undef PHOS_GEMM_BATCHED
#define PHOS_GEMM_BATCHED_EX(NAME, IDX)                                                                             \
  PHOS_EXPORT cublasStatus_t NAME(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, IDX m, IDX n, \
                                  IDX k, const void* alpha, const void* const A[], cudaDataType at, IDX lda,       \
                                  const void* const B[], cudaDataType bt, IDX ldb, const void* beta,               \
                                  void* const C[], cudaDataType ct, IDX ldc, IDX batch,                            \
                                  cublasComputeType_t compute, cublasGemmAlgo_t) {                                 \
    return Gemm(handle, {ta, tb, m, n, k, alpha, A, at, lda, 0, B, bt, ldb, 0, beta, ArrayOf(C), ct, ldc, 0, batch, \
                         compute, ScalarTypeOfCompute(compute, ct), true});                                        \
  }
PHOS_GEMM_BATCHED_EX(cublasGemmBatchedEx, int)
PHOS_GEMM_BATCHED_EX(cublasGemmBatchedEx_64, int64_t)
#undef PHOS_GEMM_BATCHED_EX

// ---------------------------------------------------------------- gemv, geam

#define PHOS_GEMV(NAME, T, CT, IDX)                                                                           \
  PHOS_EXPORT cublasStatus_t NAME(cublasHandle_t handle, cublasOperation_t trans, IDX m, IDX n, const T* alpha, \
                                  const T* A, IDX lda, const T* x, IDX incx, const T* beta, T* y, IDX incy) { \
    return Gemv(handle, {trans, m, n, alpha, A, lda, 0, x, incx, 0, beta, y, incy, 0, 1, CT});              \
  }
#define PHOS_GEMV_SB(NAME, T, CT, IDX)                                                                          \
  PHOS_EXPORT cublasStatus_t NAME(cublasHandle_t handle, cublasOperation_t trans, IDX m, IDX n, const T* alpha, \
                                  const T* A, IDX lda, long long int sa, const T* x, IDX incx, long long int sx, \
                                  const T* beta, T* y, IDX incy, long long int sy, IDX batch) {                \
    return Gemv(handle, {trans, m, n, alpha, A, lda, sa, x, incx, sx, beta, y, incy, sy, batch, CT});          \
  }
PHOS_GEMV(cublasSgemv_v2, float, CUDA_R_32F, int)
PHOS_GEMV(cublasDgemv_v2, double, CUDA_R_64F, int)
PHOS_GEMV(cublasCgemv_v2, cuComplex, CUDA_C_32F, int)
PHOS_GEMV(cublasZgemv_v2, cuDoubleComplex, CUDA_C_64F, int)
PHOS_GEMV(cublasSgemv_v2_64, float, CUDA_R_32F, int64_t)
PHOS_GEMV(cublasDgemv_v2_64, double, CUDA_R_64F, int64_t)
PHOS_GEMV(cublasCgemv_v2_64, cuComplex, CUDA_C_32F, int64_t)
PHOS_GEMV(cublasZgemv_v2_64, cuDoubleComplex, CUDA_C_64F, int64_t)
PHOS_GEMV_SB(cublasSgemvStridedBatched, float, CUDA_R_32F, int)
PHOS_GEMV_SB(cublasDgemvStridedBatched, double, CUDA_R_64F, int)
PHOS_GEMV_SB(cublasCgemvStridedBatched, cuComplex, CUDA_C_32F, int)
PHOS_GEMV_SB(cublasZgemvStridedBatched, cuDoubleComplex, CUDA_C_64F, int)
PHOS_GEMV_SB(cublasSgemvStridedBatched_64, float, CUDA_R_32F, int64_t)
PHOS_GEMV_SB(cublasDgemvStridedBatched_64, double, CUDA_R_64F, int64_t)
PHOS_GEMV_SB(cublasCgemvStridedBatched_64, cuComplex, CUDA_C_32F, int64_t)
PHOS_GEMV_SB(cublasZgemvStridedBatched_64, cuDoubleComplex, CUDA_C_64F, int64_t)
// Over arrays of device pointers (kBlasGemvBatched).
#define PHOS_GEMV_BATCHED(NAME, T, CT, IDX)                                                                      \
  PHOS_EXPORT cublasStatus_t NAME(cublasHandle_t handle, cublasOperation_t trans, IDX m, IDX n, const T* alpha,  \
                                  const T* const A[], IDX lda, const T* const x[], IDX incx, const T* beta,      \
                                  T* const y[], IDX incy, IDX batch) {                                           \
    return Gemv(handle, {trans, m, n, alpha, A, lda, 0, x, incx, 0, beta, const_cast<T**>(y), incy, 0, batch, CT, \
                         true});                                                                                  \
  }
PHOS_GEMV_BATCHED(cublasSgemvBatched, float, CUDA_R_32F, int)
PHOS_GEMV_BATCHED(cublasDgemvBatched, double, CUDA_R_64F, int)
PHOS_GEMV_BATCHED(cublasCgemvBatched, cuComplex, CUDA_C_32F, int)
PHOS_GEMV_BATCHED(cublasZgemvBatched, cuDoubleComplex, CUDA_C_64F, int)
PHOS_GEMV_BATCHED(cublasSgemvBatched_64, float, CUDA_R_32F, int64_t)
PHOS_GEMV_BATCHED(cublasDgemvBatched_64, double, CUDA_R_64F, int64_t)
PHOS_GEMV_BATCHED(cublasCgemvBatched_64, cuComplex, CUDA_C_32F, int64_t)
PHOS_GEMV_BATCHED(cublasZgemvBatched_64, cuDoubleComplex, CUDA_C_64F, int64_t)
#undef PHOS_GEMV_BATCHED
#undef PHOS_GEMV
#undef PHOS_GEMV_SB

#define PHOS_GEAM(NAME, T, CT, IDX)                                                                                \
  PHOS_EXPORT cublasStatus_t NAME(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, IDX m, IDX n, \
                                  const T* alpha, const T* A, IDX lda, const T* beta, const T* B, IDX ldb, T* C,   \
                                  IDX ldc) {                                                                       \
    return Geam(handle, ta, tb, m, n, alpha, A, lda, beta, B, ldb, C, ldc, CT);                                    \
  }
PHOS_GEAM(cublasSgeam, float, CUDA_R_32F, int)
PHOS_GEAM(cublasDgeam, double, CUDA_R_64F, int)
PHOS_GEAM(cublasCgeam, cuComplex, CUDA_C_32F, int)
PHOS_GEAM(cublasZgeam, cuDoubleComplex, CUDA_C_64F, int)
PHOS_GEAM(cublasSgeam_64, float, CUDA_R_32F, int64_t)
PHOS_GEAM(cublasDgeam_64, double, CUDA_R_64F, int64_t)
PHOS_GEAM(cublasCgeam_64, cuComplex, CUDA_C_32F, int64_t)
PHOS_GEAM(cublasZgeam_64, cuDoubleComplex, CUDA_C_64F, int64_t)
#undef PHOS_GEAM

#define PHOS_GER(NAME, T, CT, CONJ, IDX)                                                                           \
  PHOS_EXPORT cublasStatus_t NAME(cublasHandle_t handle, IDX m, IDX n, const T* alpha, const T* x, IDX incx,       \
                                  const T* y, IDX incy, T* A, IDX lda) {                                           \
    return Ger(handle, m, n, alpha, x, incx, y, incy, A, lda, CT, CONJ);                                           \
  }
PHOS_GER(cublasSger_v2, float, CUDA_R_32F, false, int)
PHOS_GER(cublasDger_v2, double, CUDA_R_64F, false, int)
PHOS_GER(cublasCgeru_v2, cuComplex, CUDA_C_32F, false, int)
PHOS_GER(cublasCgerc_v2, cuComplex, CUDA_C_32F, true, int)
PHOS_GER(cublasZgeru_v2, cuDoubleComplex, CUDA_C_64F, false, int)
PHOS_GER(cublasZgerc_v2, cuDoubleComplex, CUDA_C_64F, true, int)
PHOS_GER(cublasSger_v2_64, float, CUDA_R_32F, false, int64_t)
PHOS_GER(cublasDger_v2_64, double, CUDA_R_64F, false, int64_t)
PHOS_GER(cublasCgeru_v2_64, cuComplex, CUDA_C_32F, false, int64_t)
PHOS_GER(cublasCgerc_v2_64, cuComplex, CUDA_C_32F, true, int64_t)
PHOS_GER(cublasZgeru_v2_64, cuDoubleComplex, CUDA_C_64F, false, int64_t)
PHOS_GER(cublasZgerc_v2_64, cuDoubleComplex, CUDA_C_64F, true, int64_t)
#undef PHOS_GER

#define PHOS_SYRK(NAME, T, CT, IDX)                                                                                \
  PHOS_EXPORT cublasStatus_t NAME(cublasHandle_t handle, cublasFillMode_t uplo, cublasOperation_t trans, IDX n,    \
                                  IDX k, const T* alpha, const T* A, IDX lda, const T* beta, T* C, IDX ldc) {      \
    return Syrk(handle, uplo, trans, n, k, alpha, A, lda, beta, C, ldc, CT);                                       \
  }
PHOS_SYRK(cublasSsyrk_v2, float, CUDA_R_32F, int)
PHOS_SYRK(cublasDsyrk_v2, double, CUDA_R_64F, int)
PHOS_SYRK(cublasCsyrk_v2, cuComplex, CUDA_C_32F, int)
PHOS_SYRK(cublasZsyrk_v2, cuDoubleComplex, CUDA_C_64F, int)
PHOS_SYRK(cublasSsyrk_v2_64, float, CUDA_R_32F, int64_t)
PHOS_SYRK(cublasDsyrk_v2_64, double, CUDA_R_64F, int64_t)
PHOS_SYRK(cublasCsyrk_v2_64, cuComplex, CUDA_C_32F, int64_t)
PHOS_SYRK(cublasZsyrk_v2_64, cuDoubleComplex, CUDA_C_64F, int64_t)
#undef PHOS_SYRK

#define PHOS_TRSM(NAME, T, CT, IDX)                                                                                \
  PHOS_EXPORT cublasStatus_t NAME(cublasHandle_t handle, cublasSideMode_t side, cublasFillMode_t uplo,            \
                                  cublasOperation_t trans, cublasDiagType_t diag, IDX m, IDX n, const T* alpha,   \
                                  const T* A, IDX lda, T* B, IDX ldb) {                                           \
    return Trsm(handle, side, uplo, trans, diag, m, n, alpha, A, lda, B, ldb, CT);                                 \
  }
PHOS_TRSM(cublasStrsm_v2, float, CUDA_R_32F, int)
PHOS_TRSM(cublasDtrsm_v2, double, CUDA_R_64F, int)
PHOS_TRSM(cublasCtrsm_v2, cuComplex, CUDA_C_32F, int)
PHOS_TRSM(cublasZtrsm_v2, cuDoubleComplex, CUDA_C_64F, int)
PHOS_TRSM(cublasStrsm_v2_64, float, CUDA_R_32F, int64_t)
PHOS_TRSM(cublasDtrsm_v2_64, double, CUDA_R_64F, int64_t)
PHOS_TRSM(cublasCtrsm_v2_64, cuComplex, CUDA_C_32F, int64_t)
PHOS_TRSM(cublasZtrsm_v2_64, cuDoubleComplex, CUDA_C_64F, int64_t)
#undef PHOS_TRSM
// Over arrays of device pointers (kBlasTrsmBatched).
#define PHOS_TRSM_BATCHED(NAME, T, CT, IDX)                                                                       \
  PHOS_EXPORT cublasStatus_t NAME(cublasHandle_t handle, cublasSideMode_t side, cublasFillMode_t uplo,           \
                                  cublasOperation_t trans, cublasDiagType_t diag, IDX m, IDX n, const T* alpha,  \
                                  const T* const A[], IDX lda, T* const B[], IDX ldb, IDX batch) {               \
    return Trsm(handle, side, uplo, trans, diag, m, n, alpha, A, lda, const_cast<T**>(B), ldb, CT, batch, true); \
  }
PHOS_TRSM_BATCHED(cublasStrsmBatched, float, CUDA_R_32F, int)
PHOS_TRSM_BATCHED(cublasDtrsmBatched, double, CUDA_R_64F, int)
PHOS_TRSM_BATCHED(cublasCtrsmBatched, cuComplex, CUDA_C_32F, int)
PHOS_TRSM_BATCHED(cublasZtrsmBatched, cuDoubleComplex, CUDA_C_64F, int)
PHOS_TRSM_BATCHED(cublasStrsmBatched_64, float, CUDA_R_32F, int64_t)
PHOS_TRSM_BATCHED(cublasDtrsmBatched_64, double, CUDA_R_64F, int64_t)
PHOS_TRSM_BATCHED(cublasCtrsmBatched_64, cuComplex, CUDA_C_32F, int64_t)
PHOS_TRSM_BATCHED(cublasZtrsmBatched_64, cuDoubleComplex, CUDA_C_64F, int64_t)
#undef PHOS_TRSM_BATCHED

// ---------------------------------------------------------------- level 1

#define PHOS_AXPY(NAME, T, CT, IDX)                                                                                   \
  PHOS_EXPORT cublasStatus_t NAME(cublasHandle_t handle, IDX n, const T* alpha, const T* x, IDX incx, T* y,      \
                                  IDX incy) {                                                                    \
    return Level1(handle, op::kBlasAxpy, n, alpha, CT, x, CT, incx, y, CT, incy);                                \
  }
PHOS_AXPY(cublasSaxpy_v2, float, CUDA_R_32F, int)
PHOS_AXPY(cublasSaxpy_v2_64, float, CUDA_R_32F, int64_t)
PHOS_AXPY(cublasDaxpy_v2, double, CUDA_R_64F, int)
PHOS_AXPY(cublasDaxpy_v2_64, double, CUDA_R_64F, int64_t)
PHOS_AXPY(cublasCaxpy_v2, cuComplex, CUDA_C_32F, int)
PHOS_AXPY(cublasCaxpy_v2_64, cuComplex, CUDA_C_32F, int64_t)
PHOS_AXPY(cublasZaxpy_v2, cuDoubleComplex, CUDA_C_64F, int)
PHOS_AXPY(cublasZaxpy_v2_64, cuDoubleComplex, CUDA_C_64F, int64_t)
#undef PHOS_AXPY
// The Ex forms take their types as arguments; each with int and int64_t sizes.
#define PHOS_AXPY_EX(NAME, IDX)                                                                                  \
  PHOS_EXPORT cublasStatus_t NAME(cublasHandle_t handle, IDX n, const void* alpha, cudaDataType alpha_type,    \
                                  const void* x, cudaDataType xt, IDX incx, void* y, cudaDataType yt, IDX incy, \
                                  cudaDataType) {                                                              \
    return Level1(handle, op::kBlasAxpy, n, alpha, alpha_type, x, xt, incx, y, yt, incy);                      \
  }
PHOS_AXPY_EX(cublasAxpyEx, int)
PHOS_AXPY_EX(cublasAxpyEx_64, int64_t)
#undef PHOS_AXPY_EX

#define PHOS_SCAL(NAME, T, ST, XT, IDX)                                                                    \
  PHOS_EXPORT cublasStatus_t NAME(cublasHandle_t handle, IDX n, const T* alpha, XT* x, IDX incx) {  \
    return Level1(handle, op::kBlasScal, n, alpha, ST, x, XTYPE_##XT, incx, nullptr, ST, 1);          \
  }
#define XTYPE_float CUDA_R_32F
#define XTYPE_double CUDA_R_64F
#define XTYPE_cuComplex CUDA_C_32F
#define XTYPE_cuDoubleComplex CUDA_C_64F
PHOS_SCAL(cublasSscal_v2, float, CUDA_R_32F, float, int)
PHOS_SCAL(cublasSscal_v2_64, float, CUDA_R_32F, float, int64_t)
PHOS_SCAL(cublasDscal_v2, double, CUDA_R_64F, double, int)
PHOS_SCAL(cublasDscal_v2_64, double, CUDA_R_64F, double, int64_t)
PHOS_SCAL(cublasCscal_v2, cuComplex, CUDA_C_32F, cuComplex, int)
PHOS_SCAL(cublasCscal_v2_64, cuComplex, CUDA_C_32F, cuComplex, int64_t)
PHOS_SCAL(cublasCsscal_v2, float, CUDA_R_32F, cuComplex, int)
PHOS_SCAL(cublasCsscal_v2_64, float, CUDA_R_32F, cuComplex, int64_t)
PHOS_SCAL(cublasZscal_v2, cuDoubleComplex, CUDA_C_64F, cuDoubleComplex, int)
PHOS_SCAL(cublasZscal_v2_64, cuDoubleComplex, CUDA_C_64F, cuDoubleComplex, int64_t)
PHOS_SCAL(cublasZdscal_v2, double, CUDA_R_64F, cuDoubleComplex, int)
PHOS_SCAL(cublasZdscal_v2_64, double, CUDA_R_64F, cuDoubleComplex, int64_t)
#undef PHOS_SCAL
#define PHOS_SCAL_EX(NAME, IDX)                                                                             \
  PHOS_EXPORT cublasStatus_t NAME(cublasHandle_t handle, IDX n, const void* alpha, cudaDataType alpha_type, \
                                  void* x, cudaDataType xt, IDX incx, cudaDataType) {                      \
    return Level1(handle, op::kBlasScal, n, alpha, alpha_type, x, xt, incx, nullptr, alpha_type, 1);        \
  }
PHOS_SCAL_EX(cublasScalEx, int)
PHOS_SCAL_EX(cublasScalEx_64, int64_t)
#undef PHOS_SCAL_EX

#define PHOS_COPY_SWAP(NAME, API, T, CT, CONST, IDX)                                                              \
  PHOS_EXPORT cublasStatus_t NAME(cublasHandle_t handle, IDX n, CONST T* x, IDX incx, T* y, IDX incy) {      \
    return Level1(handle, API, n, nullptr, CT, x, CT, incx, y, CT, incy);                                      \
  }
PHOS_COPY_SWAP(cublasScopy_v2, op::kBlasCopy, float, CUDA_R_32F, const, int)
PHOS_COPY_SWAP(cublasScopy_v2_64, op::kBlasCopy, float, CUDA_R_32F, const, int64_t)
PHOS_COPY_SWAP(cublasDcopy_v2, op::kBlasCopy, double, CUDA_R_64F, const, int)
PHOS_COPY_SWAP(cublasDcopy_v2_64, op::kBlasCopy, double, CUDA_R_64F, const, int64_t)
PHOS_COPY_SWAP(cublasCcopy_v2, op::kBlasCopy, cuComplex, CUDA_C_32F, const, int)
PHOS_COPY_SWAP(cublasCcopy_v2_64, op::kBlasCopy, cuComplex, CUDA_C_32F, const, int64_t)
PHOS_COPY_SWAP(cublasZcopy_v2, op::kBlasCopy, cuDoubleComplex, CUDA_C_64F, const, int)
PHOS_COPY_SWAP(cublasZcopy_v2_64, op::kBlasCopy, cuDoubleComplex, CUDA_C_64F, const, int64_t)
PHOS_COPY_SWAP(cublasSswap_v2, op::kBlasSwap, float, CUDA_R_32F, , int)
PHOS_COPY_SWAP(cublasSswap_v2_64, op::kBlasSwap, float, CUDA_R_32F, , int64_t)
PHOS_COPY_SWAP(cublasDswap_v2, op::kBlasSwap, double, CUDA_R_64F, , int)
PHOS_COPY_SWAP(cublasDswap_v2_64, op::kBlasSwap, double, CUDA_R_64F, , int64_t)
PHOS_COPY_SWAP(cublasCswap_v2, op::kBlasSwap, cuComplex, CUDA_C_32F, , int)
PHOS_COPY_SWAP(cublasCswap_v2_64, op::kBlasSwap, cuComplex, CUDA_C_32F, , int64_t)
PHOS_COPY_SWAP(cublasZswap_v2, op::kBlasSwap, cuDoubleComplex, CUDA_C_64F, , int)
PHOS_COPY_SWAP(cublasZswap_v2_64, op::kBlasSwap, cuDoubleComplex, CUDA_C_64F, , int64_t)
#undef PHOS_COPY_SWAP
#define PHOS_COPY_SWAP_EX(NAME, API, CONST, IDX)                                                             \
  PHOS_EXPORT cublasStatus_t NAME(cublasHandle_t handle, IDX n, CONST void* x, cudaDataType xt, IDX incx,    \
                                  void* y, cudaDataType yt, IDX incy) {                                      \
    return Level1(handle, API, n, nullptr, xt, x, xt, incx, y, yt, incy);                                    \
  }
PHOS_COPY_SWAP_EX(cublasCopyEx, op::kBlasCopy, const, int)
PHOS_COPY_SWAP_EX(cublasCopyEx_64, op::kBlasCopy, const, int64_t)
PHOS_COPY_SWAP_EX(cublasSwapEx, op::kBlasSwap, , int)
PHOS_COPY_SWAP_EX(cublasSwapEx_64, op::kBlasSwap, , int64_t)
#undef PHOS_COPY_SWAP_EX

// rot: c (real) travels as alpha, s as beta; csrot/zdrot's s is real too.
#define PHOS_ROT(NAME, T, CT, ST, FLAGS, IDX)                                                                   \
  PHOS_EXPORT cublasStatus_t NAME(cublasHandle_t handle, IDX n, T* x, IDX incx, T* y, IDX incy, const RTYPE_##T* c, \
                                  const ST* s) {                                                               \
    return Rot(handle, n, x, incx, y, incy, c, s, CT, FLAGS);                                                  \
  }
#define RTYPE_float float
#define RTYPE_double double
#define RTYPE_cuComplex float
#define RTYPE_cuDoubleComplex double
PHOS_ROT(cublasSrot_v2, float, CUDA_R_32F, float, 0, int)
PHOS_ROT(cublasSrot_v2_64, float, CUDA_R_32F, float, 0, int64_t)
PHOS_ROT(cublasDrot_v2, double, CUDA_R_64F, double, 0, int)
PHOS_ROT(cublasDrot_v2_64, double, CUDA_R_64F, double, 0, int64_t)
PHOS_ROT(cublasCrot_v2, cuComplex, CUDA_C_32F, cuComplex, 0, int)
PHOS_ROT(cublasCrot_v2_64, cuComplex, CUDA_C_32F, cuComplex, 0, int64_t)
PHOS_ROT(cublasCsrot_v2, cuComplex, CUDA_C_32F, float, phos::wire::kBlasRealBeta, int)
PHOS_ROT(cublasCsrot_v2_64, cuComplex, CUDA_C_32F, float, phos::wire::kBlasRealBeta, int64_t)
PHOS_ROT(cublasZrot_v2, cuDoubleComplex, CUDA_C_64F, cuDoubleComplex, 0, int)
PHOS_ROT(cublasZrot_v2_64, cuDoubleComplex, CUDA_C_64F, cuDoubleComplex, 0, int64_t)
PHOS_ROT(cublasZdrot_v2, cuDoubleComplex, CUDA_C_64F, double, phos::wire::kBlasRealBeta, int)
PHOS_ROT(cublasZdrot_v2_64, cuDoubleComplex, CUDA_C_64F, double, phos::wire::kBlasRealBeta, int64_t)
#undef PHOS_ROT
// RotEx with a real csType (c and s real: srot, drot, csrot, zdrot); a
// complex csType is refused by name (whether its c is read as complex is
// not documented).
#define PHOS_ROT_EX(NAME, IDX)                                                                                   \
  PHOS_EXPORT cublasStatus_t NAME(cublasHandle_t handle, IDX n, void* x, cudaDataType xt, IDX incx, void* y,  \
                                  cudaDataType yt, IDX incy, const void* c, const void* s, cudaDataType cst,   \
                                  cudaDataType) {                                                              \
    if (yt != xt || phos::wire::BlasTypeIsComplex(cst) || phos::wire::BlasRealTypeOf(xt) != cst) {             \
      if (phos::wire::BlasTypeIsComplex(cst)) SayOnce(#NAME " with a complex csType is not supported by phos yet"); \
      return phos::wire::BlasTypeIsComplex(cst) ? CUBLAS_STATUS_NOT_SUPPORTED : CUBLAS_STATUS_INVALID_VALUE;     \
    }                                                                                                          \
    return Rot(handle, n, x, incx, y, incy, c, s, xt, phos::wire::kBlasRealBeta);                             \
  }
PHOS_ROT_EX(cublasRotEx, int)
PHOS_ROT_EX(cublasRotEx_64, int64_t)
#undef PHOS_ROT_EX

#define PHOS_DOT(NAME, T, CT, FLAGS, IDX)                                                                               \
  PHOS_EXPORT cublasStatus_t NAME(cublasHandle_t handle, IDX n, const T* x, IDX incx, const T* y, IDX incy,        \
                                  T* result) {                                                                     \
    return Level1(handle, op::kBlasDot, n, nullptr, CT, x, CT, incx, y, CT, incy, result, FLAGS);                 \
  }
PHOS_DOT(cublasSdot_v2, float, CUDA_R_32F, 0, int)
PHOS_DOT(cublasSdot_v2_64, float, CUDA_R_32F, 0, int64_t)
PHOS_DOT(cublasDdot_v2, double, CUDA_R_64F, 0, int)
PHOS_DOT(cublasDdot_v2_64, double, CUDA_R_64F, 0, int64_t)
PHOS_DOT(cublasCdotu_v2, cuComplex, CUDA_C_32F, 0, int)
PHOS_DOT(cublasCdotu_v2_64, cuComplex, CUDA_C_32F, 0, int64_t)
PHOS_DOT(cublasCdotc_v2, cuComplex, CUDA_C_32F, phos::wire::kBlasConjugate, int)
PHOS_DOT(cublasCdotc_v2_64, cuComplex, CUDA_C_32F, phos::wire::kBlasConjugate, int64_t)
PHOS_DOT(cublasZdotu_v2, cuDoubleComplex, CUDA_C_64F, 0, int)
PHOS_DOT(cublasZdotu_v2_64, cuDoubleComplex, CUDA_C_64F, 0, int64_t)
PHOS_DOT(cublasZdotc_v2, cuDoubleComplex, CUDA_C_64F, phos::wire::kBlasConjugate, int)
PHOS_DOT(cublasZdotc_v2_64, cuDoubleComplex, CUDA_C_64F, phos::wire::kBlasConjugate, int64_t)
#undef PHOS_DOT
#define PHOS_DOT_EX(NAME, FLAGS, IDX)                                                                          \
  PHOS_EXPORT cublasStatus_t NAME(cublasHandle_t handle, IDX n, const void* x, cudaDataType xt, IDX incx,      \
                                  const void* y, cudaDataType yt, IDX incy, void* result, cudaDataType rt,     \
                                  cudaDataType) {                                                              \
    return Level1(handle, op::kBlasDot, n, nullptr, rt, x, xt, incx, y, yt, incy, result, FLAGS);              \
  }
PHOS_DOT_EX(cublasDotEx, 0, int)
PHOS_DOT_EX(cublasDotEx_64, 0, int64_t)
PHOS_DOT_EX(cublasDotcEx, phos::wire::kBlasConjugate, int)
PHOS_DOT_EX(cublasDotcEx_64, phos::wire::kBlasConjugate, int64_t)
#undef PHOS_DOT_EX

#define PHOS_REDUCE(NAME, API, T, XT, RT, R, IDX)                                                               \
  PHOS_EXPORT cublasStatus_t NAME(cublasHandle_t handle, IDX n, const T* x, IDX incx, R* result) {         \
    return Level1(handle, API, n, nullptr, RT, x, XT, incx, nullptr, XT, 1, result);                         \
  }
PHOS_REDUCE(cublasSnrm2_v2, op::kBlasNrm2, float, CUDA_R_32F, CUDA_R_32F, float, int)
PHOS_REDUCE(cublasSnrm2_v2_64, op::kBlasNrm2, float, CUDA_R_32F, CUDA_R_32F, float, int64_t)
PHOS_REDUCE(cublasDnrm2_v2, op::kBlasNrm2, double, CUDA_R_64F, CUDA_R_64F, double, int)
PHOS_REDUCE(cublasDnrm2_v2_64, op::kBlasNrm2, double, CUDA_R_64F, CUDA_R_64F, double, int64_t)
PHOS_REDUCE(cublasScnrm2_v2, op::kBlasNrm2, cuComplex, CUDA_C_32F, CUDA_R_32F, float, int)
PHOS_REDUCE(cublasScnrm2_v2_64, op::kBlasNrm2, cuComplex, CUDA_C_32F, CUDA_R_32F, float, int64_t)
PHOS_REDUCE(cublasDznrm2_v2, op::kBlasNrm2, cuDoubleComplex, CUDA_C_64F, CUDA_R_64F, double, int)
PHOS_REDUCE(cublasDznrm2_v2_64, op::kBlasNrm2, cuDoubleComplex, CUDA_C_64F, CUDA_R_64F, double, int64_t)
PHOS_REDUCE(cublasSasum_v2, op::kBlasAsum, float, CUDA_R_32F, CUDA_R_32F, float, int)
PHOS_REDUCE(cublasSasum_v2_64, op::kBlasAsum, float, CUDA_R_32F, CUDA_R_32F, float, int64_t)
PHOS_REDUCE(cublasDasum_v2, op::kBlasAsum, double, CUDA_R_64F, CUDA_R_64F, double, int)
PHOS_REDUCE(cublasDasum_v2_64, op::kBlasAsum, double, CUDA_R_64F, CUDA_R_64F, double, int64_t)
PHOS_REDUCE(cublasScasum_v2, op::kBlasAsum, cuComplex, CUDA_C_32F, CUDA_R_32F, float, int)
PHOS_REDUCE(cublasScasum_v2_64, op::kBlasAsum, cuComplex, CUDA_C_32F, CUDA_R_32F, float, int64_t)
PHOS_REDUCE(cublasDzasum_v2, op::kBlasAsum, cuDoubleComplex, CUDA_C_64F, CUDA_R_64F, double, int)
PHOS_REDUCE(cublasDzasum_v2_64, op::kBlasAsum, cuDoubleComplex, CUDA_C_64F, CUDA_R_64F, double, int64_t)
PHOS_REDUCE(cublasIsamax_v2, op::kBlasIamax, float, CUDA_R_32F, CUDA_R_32I, int, int)
PHOS_REDUCE(cublasIdamax_v2, op::kBlasIamax, double, CUDA_R_64F, CUDA_R_32I, int, int)
PHOS_REDUCE(cublasIcamax_v2, op::kBlasIamax, cuComplex, CUDA_C_32F, CUDA_R_32I, int, int)
PHOS_REDUCE(cublasIzamax_v2, op::kBlasIamax, cuDoubleComplex, CUDA_C_64F, CUDA_R_32I, int, int)
PHOS_REDUCE(cublasIsamin_v2, op::kBlasIamin, float, CUDA_R_32F, CUDA_R_32I, int, int)
PHOS_REDUCE(cublasIdamin_v2, op::kBlasIamin, double, CUDA_R_64F, CUDA_R_32I, int, int)
PHOS_REDUCE(cublasIcamin_v2, op::kBlasIamin, cuComplex, CUDA_C_32F, CUDA_R_32I, int, int)
PHOS_REDUCE(cublasIzamin_v2, op::kBlasIamin, cuDoubleComplex, CUDA_C_64F, CUDA_R_32I, int, int)
#undef PHOS_REDUCE
// amax/amin's _64 forms answer an int64_t index (kBlasIndex64).
#define PHOS_INDEX64(NAME, API, T, XT)                                                                       \
  PHOS_EXPORT cublasStatus_t NAME(cublasHandle_t handle, int64_t n, const T* x, int64_t incx, int64_t* result) { \
    return Level1(handle, API, n, nullptr, CUDA_R_32I, x, XT, incx, nullptr, XT, 1, result,                   \
                  phos::wire::kBlasIndex64);                                                                 \
  }
PHOS_INDEX64(cublasIsamax_v2_64, op::kBlasIamax, float, CUDA_R_32F)
PHOS_INDEX64(cublasIdamax_v2_64, op::kBlasIamax, double, CUDA_R_64F)
PHOS_INDEX64(cublasIcamax_v2_64, op::kBlasIamax, cuComplex, CUDA_C_32F)
PHOS_INDEX64(cublasIzamax_v2_64, op::kBlasIamax, cuDoubleComplex, CUDA_C_64F)
PHOS_INDEX64(cublasIsamin_v2_64, op::kBlasIamin, float, CUDA_R_32F)
PHOS_INDEX64(cublasIdamin_v2_64, op::kBlasIamin, double, CUDA_R_64F)
PHOS_INDEX64(cublasIcamin_v2_64, op::kBlasIamin, cuComplex, CUDA_C_32F)
PHOS_INDEX64(cublasIzamin_v2_64, op::kBlasIamin, cuDoubleComplex, CUDA_C_64F)
#undef PHOS_INDEX64
// The Ex forms of amax/amin: the type is an argument.
PHOS_EXPORT cublasStatus_t cublasIamaxEx(cublasHandle_t handle, int n, const void* x, cudaDataType xt, int incx,
                                         int* result) {
  return Level1(handle, op::kBlasIamax, n, nullptr, CUDA_R_32I, x, xt, incx, nullptr, xt, 1, result);
}
PHOS_EXPORT cublasStatus_t cublasIaminEx(cublasHandle_t handle, int n, const void* x, cudaDataType xt, int incx,
                                         int* result) {
  return Level1(handle, op::kBlasIamin, n, nullptr, CUDA_R_32I, x, xt, incx, nullptr, xt, 1, result);
}
PHOS_EXPORT cublasStatus_t cublasIamaxEx_64(cublasHandle_t handle, int64_t n, const void* x, cudaDataType xt,
                                            int64_t incx, int64_t* result) {
  return Level1(handle, op::kBlasIamax, n, nullptr, CUDA_R_32I, x, xt, incx, nullptr, xt, 1, result,
                phos::wire::kBlasIndex64);
}
PHOS_EXPORT cublasStatus_t cublasIaminEx_64(cublasHandle_t handle, int64_t n, const void* x, cudaDataType xt,
                                            int64_t incx, int64_t* result) {
  return Level1(handle, op::kBlasIamin, n, nullptr, CUDA_R_32I, x, xt, incx, nullptr, xt, 1, result,
                phos::wire::kBlasIndex64);
}
#define PHOS_REDUCE_EX(NAME, API, IDX)                                                                       \
  PHOS_EXPORT cublasStatus_t NAME(cublasHandle_t handle, IDX n, const void* x, cudaDataType xt, IDX incx,    \
                                  void* result, cudaDataType rt, cudaDataType) {                             \
    return Level1(handle, API, n, nullptr, rt, x, xt, incx, nullptr, xt, 1, result);                         \
  }
PHOS_REDUCE_EX(cublasNrm2Ex, op::kBlasNrm2, int)
PHOS_REDUCE_EX(cublasNrm2Ex_64, op::kBlasNrm2, int64_t)
PHOS_REDUCE_EX(cublasAsumEx, op::kBlasAsum, int)
PHOS_REDUCE_EX(cublasAsumEx_64, op::kBlasAsum, int64_t)
#undef PHOS_REDUCE_EX
