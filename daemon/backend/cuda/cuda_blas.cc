// Context::Blas on the cuda backend: the routine runs in the real cuBLAS on
// the handle the context pool created with this context (docs/backends.md
// "Context pool"), bound per call to the session's stream and to the
// call's pointer mode. Device addresses are the app's (phosd and the app
// share them, docs/backends.md), host-mode scalars are the request's copy.
//
// Unverified on a GPU so far (no GPU was lent when this was written): the
// sim computes the same calls and tests/gpu/run.sh runs tests/integration's
// cublas program here when one is.
#include <climits>
#include <string>

#include "backend/cuda/cuda_context.h"

namespace phos::backend::cuda {
namespace {

// cudaDataType_t values (library_types.h).
constexpr int kR32F = CUDA_R_32F, kR64F = CUDA_R_64F, kC32F = CUDA_C_32F, kC64F = CUDA_C_64F;

/// GemmEx's legacy form passes a cudaDataType_t as the compute type.
cublasComputeType_t ComputeType(int compute) {
  switch (compute) {
    case CUDA_R_32F: case CUDA_C_32F: return CUBLAS_COMPUTE_32F;
    case CUDA_R_64F: case CUDA_C_64F: return CUBLAS_COMPUTE_64F;
    case CUDA_R_16F: case CUDA_C_16F: return CUBLAS_COMPUTE_16F;
    case CUDA_R_32I: case CUDA_C_32I: return CUBLAS_COMPUTE_32I;
    default: return static_cast<cublasComputeType_t>(compute);
  }
}

bool FitsInt(std::int64_t v) { return v >= INT_MIN && v <= INT_MAX; }

Status Missing(const char* symbol) {
  return Status::NotSupported(std::string("the cuBLAS phosd loaded has no ") + symbol);
}

}  // namespace

Status CudaContext::BlasSupports(const BlasCall& c) const {
  if (cublas_ == nullptr || cublas_handle_ == nullptr) {
    return Status::Unavailable("cuBLAS is not loaded in phosd (phosd's log says why)");
  }
  if (c.op == BlasOp::kLtMatmul && !cublas_->has_lt()) {
    return Status::NotSupported("cublasLtMatmul: phosd could not load libcublasLt");
  }
  return Status::Ok();
}

Status CudaContext::Blas(const BlasCall& c, StreamHandle stream) {
  PHOS_RETURN_IF_ERROR(CheckNotAbandoned("Blas"));
  CUstream s = nullptr;
  std::shared_ptr<StreamObject> keep;
  PHOS_RETURN_IF_ERROR(FindStream(stream, &s, &keep));
  const CublasLibrary* lib = cublas_.get();
  if (lib == nullptr || cublas_handle_ == nullptr) {
    return Status::Unavailable("cuBLAS is not loaded in phosd (no libcublas, or cublasCreate failed at context "
                               "creation: phosd's log says which)");
  }
  for (std::int64_t v : {c.m, c.n, c.k, c.batch, c.lda, c.ldb, c.ldc}) {
    if (!FitsInt(v)) return Status::NotSupported("cuBLAS: a dimension beyond 32 bits (the _64 routines are not used yet)");
  }
  if (lib->SetStream == nullptr || lib->SetPointerMode == nullptr) return Missing("cublasSetStream_v2");
  PHOS_RETURN_IF_ERROR(MakeCurrent());
  std::lock_guard<std::mutex> lock(blas_mutex_);
  cublasHandle_t h = cublas_handle_;
  PHOS_RETURN_IF_ERROR(CublasStatus(lib->SetStream(h, reinterpret_cast<cudaStream_t>(s)), "cublasSetStream", lib));
  PHOS_RETURN_IF_ERROR(CublasStatus(
      lib->SetPointerMode(h, c.device_scalars ? CUBLAS_POINTER_MODE_DEVICE : CUBLAS_POINTER_MODE_HOST),
      "cublasSetPointerMode", lib));
  const void* alpha = c.device_scalars ? reinterpret_cast<const void*>(c.alpha_ptr) : c.alpha;
  const void* beta = c.device_scalars ? reinterpret_cast<const void*>(c.beta_ptr) : c.beta;
  void* result = c.device_scalars ? reinterpret_cast<void*>(c.result)
                                  : (c.host_result ? static_cast<void*>(c.host_result->data()) : nullptr);
  auto* a = reinterpret_cast<void*>(c.a);
  auto* b = reinterpret_cast<void*>(c.b);
  auto* cc = reinterpret_cast<void*>(c.c);
  const int m = static_cast<int>(c.m), n = static_cast<int>(c.n), k = static_cast<int>(c.k);
  const int lda = static_cast<int>(c.lda), ldb = static_cast<int>(c.ldb), ldc = static_cast<int>(c.ldc);
  const auto ta = static_cast<cublasOperation_t>(c.op_a), tb = static_cast<cublasOperation_t>(c.op_b);
  const auto ct = [](int t) { return static_cast<cudaDataType>(t); };
  cublasStatus_t st = CUBLAS_STATUS_NOT_SUPPORTED;
  const char* what = "cuBLAS";
  switch (c.op) {
    case BlasOp::kGemm:
      what = "cublasGemmStridedBatchedEx";
      if (lib->GemmStridedBatchedEx == nullptr) return Missing(what);
      st = lib->GemmStridedBatchedEx(h, ta, tb, m, n, k, alpha, a, ct(c.type_a), lda, c.stride_a, b, ct(c.type_b), ldb,
                                     c.stride_b, beta, cc, ct(c.type_c), ldc, c.stride_c, static_cast<int>(c.batch),
                                     ComputeType(c.compute), CUBLAS_GEMM_DEFAULT);
      break;
    case BlasOp::kGemmBatched:
      // The arrays hold device pointers of the app, which are phosd's too.
      what = "cublasGemmBatchedEx";
      if (lib->GemmBatchedEx == nullptr) return Missing(what);
      st = lib->GemmBatchedEx(h, ta, tb, m, n, k, alpha, reinterpret_cast<const void* const*>(c.a), ct(c.type_a), lda,
                              reinterpret_cast<const void* const*>(c.b), ct(c.type_b), ldb, beta,
                              reinterpret_cast<void* const*>(c.c), ct(c.type_c), ldc, static_cast<int>(c.batch),
                              ComputeType(c.compute), CUBLAS_GEMM_DEFAULT);
      break;
    case BlasOp::kGemv: {
      what = "cublas?gemvStridedBatched";
      const int batch = static_cast<int>(c.batch);
      if (c.type_a == kR32F && lib->SgemvStridedBatched)
        st = lib->SgemvStridedBatched(h, ta, m, n, static_cast<const float*>(alpha), static_cast<const float*>(a), lda,
                                      c.stride_a, static_cast<const float*>(b), ldb, c.stride_b,
                                      static_cast<const float*>(beta), static_cast<float*>(cc), ldc, c.stride_c, batch);
      else if (c.type_a == kR64F && lib->DgemvStridedBatched)
        st = lib->DgemvStridedBatched(h, ta, m, n, static_cast<const double*>(alpha), static_cast<const double*>(a),
                                      lda, c.stride_a, static_cast<const double*>(b), ldb, c.stride_b,
                                      static_cast<const double*>(beta), static_cast<double*>(cc), ldc, c.stride_c,
                                      batch);
      else if (c.type_a == kC32F && lib->CgemvStridedBatched)
        st = lib->CgemvStridedBatched(h, ta, m, n, static_cast<const cuComplex*>(alpha),
                                      static_cast<const cuComplex*>(a), lda, c.stride_a,
                                      static_cast<const cuComplex*>(b), ldb, c.stride_b,
                                      static_cast<const cuComplex*>(beta), static_cast<cuComplex*>(cc), ldc,
                                      c.stride_c, batch);
      else if (c.type_a == kC64F && lib->ZgemvStridedBatched)
        st = lib->ZgemvStridedBatched(h, ta, m, n, static_cast<const cuDoubleComplex*>(alpha),
                                      static_cast<const cuDoubleComplex*>(a), lda, c.stride_a,
                                      static_cast<const cuDoubleComplex*>(b), ldb, c.stride_b,
                                      static_cast<const cuDoubleComplex*>(beta), static_cast<cuDoubleComplex*>(cc),
                                      ldc, c.stride_c, batch);
      else
        return Status::NotSupported("cuBLAS gemv of data type " + std::to_string(c.type_a));
      break;
    }
    case BlasOp::kGeam:
      what = "cublas?geam";
      if (c.type_a == kR32F && lib->Sgeam)
        st = lib->Sgeam(h, ta, tb, m, n, static_cast<const float*>(alpha), static_cast<const float*>(a), lda,
                        static_cast<const float*>(beta), static_cast<const float*>(b), ldb, static_cast<float*>(cc), ldc);
      else if (c.type_a == kR64F && lib->Dgeam)
        st = lib->Dgeam(h, ta, tb, m, n, static_cast<const double*>(alpha), static_cast<const double*>(a), lda,
                        static_cast<const double*>(beta), static_cast<const double*>(b), ldb, static_cast<double*>(cc),
                        ldc);
      else if (c.type_a == kC32F && lib->Cgeam)
        st = lib->Cgeam(h, ta, tb, m, n, static_cast<const cuComplex*>(alpha), static_cast<const cuComplex*>(a), lda,
                        static_cast<const cuComplex*>(beta), static_cast<const cuComplex*>(b), ldb,
                        static_cast<cuComplex*>(cc), ldc);
      else if (c.type_a == kC64F && lib->Zgeam)
        st = lib->Zgeam(h, ta, tb, m, n, static_cast<const cuDoubleComplex*>(alpha),
                        static_cast<const cuDoubleComplex*>(a), lda, static_cast<const cuDoubleComplex*>(beta),
                        static_cast<const cuDoubleComplex*>(b), ldb, static_cast<cuDoubleComplex*>(cc), ldc);
      else
        return Status::NotSupported("cuBLAS geam of data type " + std::to_string(c.type_a));
      break;
    case BlasOp::kGer: {
      what = "cublas?ger_v2";
      const int incx = lda, incy = ldb;
      auto* A = cc;
      if (c.type_a == kR32F && lib->Sger)
        st = lib->Sger(h, m, n, static_cast<const float*>(alpha), static_cast<const float*>(a), incx,
                       static_cast<const float*>(b), incy, static_cast<float*>(A), ldc);
      else if (c.type_a == kR64F && lib->Dger)
        st = lib->Dger(h, m, n, static_cast<const double*>(alpha), static_cast<const double*>(a), incx,
                       static_cast<const double*>(b), incy, static_cast<double*>(A), ldc);
      else if (c.type_a == kC32F && (c.conjugate ? lib->Cgerc : lib->Cgeru))
        st = (c.conjugate ? lib->Cgerc : lib->Cgeru)(h, m, n, static_cast<const cuComplex*>(alpha),
                                                     static_cast<const cuComplex*>(a), incx,
                                                     static_cast<const cuComplex*>(b), incy, static_cast<cuComplex*>(A),
                                                     ldc);
      else if (c.type_a == kC64F && (c.conjugate ? lib->Zgerc : lib->Zgeru))
        st = (c.conjugate ? lib->Zgerc : lib->Zgeru)(h, m, n, static_cast<const cuDoubleComplex*>(alpha),
                                                     static_cast<const cuDoubleComplex*>(a), incx,
                                                     static_cast<const cuDoubleComplex*>(b), incy,
                                                     static_cast<cuDoubleComplex*>(A), ldc);
      else
        return Status::NotSupported("cuBLAS ger of data type " + std::to_string(c.type_a));
      break;
    }
    case BlasOp::kGemvBatched:
    case BlasOp::kTrsmBatched:
    case BlasOp::kRot: st = RunTypedCublas(*lib, h, c, &what); break;
    default:  // the symmetric, banded and LU families: picked by data type
      if (!IsSymmetricFamily(c.op) && !IsBandedFamily(c.op) && !IsLuFamily(c.op)) {
        return Status::NotSupported(std::string("cuBLAS: no routine for op ") + std::to_string(static_cast<int>(c.op)));
      }
      st = RunTypedCublas(*lib, h, c, &what);
      break;
    case BlasOp::kSyrk: {
      if (c.conjugate) {  // herk
        st = RunTypedCublas(*lib, h, c, &what);
        break;
      }
      what = "cublas?syrk_v2";
      const auto uplo = c.upper ? CUBLAS_FILL_MODE_UPPER : CUBLAS_FILL_MODE_LOWER;
      if (c.type_a == kR32F && lib->Ssyrk)
        st = lib->Ssyrk(h, uplo, ta, n, k, static_cast<const float*>(alpha), static_cast<const float*>(a), lda,
                        static_cast<const float*>(beta), static_cast<float*>(cc), ldc);
      else if (c.type_a == kR64F && lib->Dsyrk)
        st = lib->Dsyrk(h, uplo, ta, n, k, static_cast<const double*>(alpha), static_cast<const double*>(a), lda,
                        static_cast<const double*>(beta), static_cast<double*>(cc), ldc);
      else if (c.type_a == kC32F && lib->Csyrk)
        st = lib->Csyrk(h, uplo, ta, n, k, static_cast<const cuComplex*>(alpha), static_cast<const cuComplex*>(a), lda,
                        static_cast<const cuComplex*>(beta), static_cast<cuComplex*>(cc), ldc);
      else if (c.type_a == kC64F && lib->Zsyrk)
        st = lib->Zsyrk(h, uplo, ta, n, k, static_cast<const cuDoubleComplex*>(alpha),
                        static_cast<const cuDoubleComplex*>(a), lda, static_cast<const cuDoubleComplex*>(beta),
                        static_cast<cuDoubleComplex*>(cc), ldc);
      else
        return Status::NotSupported("cuBLAS syrk of data type " + std::to_string(c.type_a));
      break;
    }
    case BlasOp::kTrsm: {
      what = "cublas?trsm_v2";
      const auto side = c.side_right ? CUBLAS_SIDE_RIGHT : CUBLAS_SIDE_LEFT;
      const auto uplo = c.upper ? CUBLAS_FILL_MODE_UPPER : CUBLAS_FILL_MODE_LOWER;
      const auto diag = c.unit_diag ? CUBLAS_DIAG_UNIT : CUBLAS_DIAG_NON_UNIT;
      if (c.type_a == kR32F && lib->Strsm)
        st = lib->Strsm(h, side, uplo, ta, diag, m, n, static_cast<const float*>(alpha), static_cast<const float*>(a),
                        lda, static_cast<float*>(cc), ldc);
      else if (c.type_a == kR64F && lib->Dtrsm)
        st = lib->Dtrsm(h, side, uplo, ta, diag, m, n, static_cast<const double*>(alpha), static_cast<const double*>(a),
                        lda, static_cast<double*>(cc), ldc);
      else if (c.type_a == kC32F && lib->Ctrsm)
        st = lib->Ctrsm(h, side, uplo, ta, diag, m, n, static_cast<const cuComplex*>(alpha),
                        static_cast<const cuComplex*>(a), lda, static_cast<cuComplex*>(cc), ldc);
      else if (c.type_a == kC64F && lib->Ztrsm)
        st = lib->Ztrsm(h, side, uplo, ta, diag, m, n, static_cast<const cuDoubleComplex*>(alpha),
                        static_cast<const cuDoubleComplex*>(a), lda, static_cast<cuDoubleComplex*>(cc), ldc);
      else
        return Status::NotSupported("cuBLAS trsm of data type " + std::to_string(c.type_a));
      break;
    }
    case BlasOp::kAxpy:
      what = "cublasAxpyEx";
      if (lib->AxpyEx == nullptr) return Missing(what);
      st = lib->AxpyEx(h, n, alpha, ct(c.scalar_type), a, ct(c.type_a), lda, b, ct(c.type_b), ldb, ct(c.scalar_type));
      break;
    case BlasOp::kScal:
      what = "cublasScalEx";
      if (lib->ScalEx == nullptr) return Missing(what);
      st = lib->ScalEx(h, n, alpha, ct(c.scalar_type), a, ct(c.type_a), lda, ct(c.type_a));
      break;
    case BlasOp::kCopy:
      what = "cublasCopyEx";
      if (lib->CopyEx == nullptr) return Missing(what);
      st = lib->CopyEx(h, n, a, ct(c.type_a), lda, b, ct(c.type_b), ldb);
      break;
    case BlasOp::kSwap:
      what = "cublasSwapEx";
      if (lib->SwapEx == nullptr) return Missing(what);
      st = lib->SwapEx(h, n, a, ct(c.type_a), lda, b, ct(c.type_b), ldb);
      break;
    case BlasOp::kDot: {
      what = c.conjugate ? "cublasDotcEx" : "cublasDotEx";
      auto fn = c.conjugate ? lib->DotcEx : lib->DotEx;
      if (fn == nullptr) return Missing(what);
      st = fn(h, n, a, ct(c.type_a), lda, b, ct(c.type_b), ldb, result, ct(c.scalar_type), ct(c.scalar_type));
      break;
    }
    case BlasOp::kNrm2:
    case BlasOp::kAsum: {
      what = c.op == BlasOp::kNrm2 ? "cublasNrm2Ex" : "cublasAsumEx";
      auto fn = c.op == BlasOp::kNrm2 ? lib->Nrm2Ex : lib->AsumEx;
      if (fn == nullptr) return Missing(what);
      st = fn(h, n, a, ct(c.type_a), lda, result, ct(c.scalar_type), ct(c.scalar_type));
      break;
    }
    case BlasOp::kLtMatmul: return LtMatmul(c, s);
    case BlasOp::kIamax:
    case BlasOp::kIamin: {
      if (c.index64) {
        st = RunTypedCublas(*lib, h, c, &what);
        break;
      }
      const bool max = c.op == BlasOp::kIamax;
      what = max ? "cublasI?amax" : "cublasI?amin";
      auto* r = static_cast<int*>(result);
      if (c.type_a == kR32F && (max ? lib->Isamax : lib->Isamin))
        st = (max ? lib->Isamax : lib->Isamin)(h, n, static_cast<const float*>(a), lda, r);
      else if (c.type_a == kR64F && (max ? lib->Idamax : lib->Idamin))
        st = (max ? lib->Idamax : lib->Idamin)(h, n, static_cast<const double*>(a), lda, r);
      else if (c.type_a == kC32F && (max ? lib->Icamax : lib->Icamin))
        st = (max ? lib->Icamax : lib->Icamin)(h, n, static_cast<const cuComplex*>(a), lda, r);
      else if (c.type_a == kC64F && (max ? lib->Izamax : lib->Izamin))
        st = (max ? lib->Izamax : lib->Izamin)(h, n, static_cast<const cuDoubleComplex*>(a), lda, r);
      else
        return Status::NotSupported("cuBLAS amax/amin of data type " + std::to_string(c.type_a));
      break;
    }
  }
  if (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE) {
    return Status::NotSupported(std::string(what) + ": cuBLAS refused this type combination or configuration");
  }
  return CublasStatus(st, what, lib);
}

Status CudaContext::LtMatmul(const BlasCall& c, CUstream stream) {
  const CublasLibrary* lib = cublas_.get();
  if (!lib->has_lt()) return Status::NotSupported("cublasLtMatmul: phosd could not load libcublasLt");
  if (lt_handle_ == nullptr) {
    PHOS_RETURN_IF_ERROR(CublasStatus(lib->LtCreate(&lt_handle_), "cublasLtCreate", lib));
  }
  // The descriptors of this one call (host-side objects: destroyed once
  // the matmul is enqueued).
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr, ld = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  struct Cleanup {
    const CublasLibrary* lib;
    cublasLtMatmulDesc_t* desc;
    cublasLtMatrixLayout_t* layouts[4];
    cublasLtMatmulPreference_t* pref;
    ~Cleanup() {
      if (*desc) lib->LtMatmulDescDestroy(*desc);
      for (auto* l : layouts)
        if (*l) lib->LtMatrixLayoutDestroy(*l);
      if (*pref) lib->LtMatmulPreferenceDestroy(*pref);
    }
  } cleanup{lib, &desc, {&la, &lb, &lc, &ld}, &pref};
  auto check = [&](cublasStatus_t st, const char* what) { return CublasStatus(st, what, lib); };
  PHOS_RETURN_IF_ERROR(check(lib->LtMatmulDescCreate(&desc, ComputeType(c.compute), static_cast<cudaDataType>(c.scalar_type)),
                             "cublasLtMatmulDescCreate"));
  auto set = [&](cublasLtMatmulDescAttributes_t a, const void* v, size_t n) {
    return check(lib->LtMatmulDescSetAttribute(desc, a, v, n), "cublasLtMatmulDescSetAttribute");
  };
  const auto ta = static_cast<cublasOperation_t>(c.op_a), tb = static_cast<cublasOperation_t>(c.op_b);
  const int32_t mode = c.device_scalars ? CUBLASLT_POINTER_MODE_DEVICE : CUBLASLT_POINTER_MODE_HOST;
  const auto epilogue = static_cast<cublasLtEpilogue_t>(c.epilogue);
  PHOS_RETURN_IF_ERROR(set(CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  PHOS_RETURN_IF_ERROR(set(CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  PHOS_RETURN_IF_ERROR(set(CUBLASLT_MATMUL_DESC_POINTER_MODE, &mode, sizeof mode));
  PHOS_RETURN_IF_ERROR(set(CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue));
  if (c.bias != 0) {
    const void* bias = reinterpret_cast<const void*>(c.bias);
    const int32_t bias_type = c.bias_type;
    PHOS_RETURN_IF_ERROR(set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    PHOS_RETURN_IF_ERROR(set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof bias_type));
    PHOS_RETURN_IF_ERROR(set(CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, &c.bias_stride, sizeof c.bias_stride));
  }
  if (c.aux != 0) {
    // ReLU's bit mask or GELU's input (checked by the handler: ld and
    // stride as cuBLASLt requires them).
    const void* aux = reinterpret_cast<const void*>(c.aux);
    PHOS_RETURN_IF_ERROR(set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
    PHOS_RETURN_IF_ERROR(set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &c.aux_ld, sizeof c.aux_ld));
    PHOS_RETURN_IF_ERROR(set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, &c.aux_stride, sizeof c.aux_stride));
    if (c.aux_type >= 0) {
      const int32_t aux_type = c.aux_type;
      PHOS_RETURN_IF_ERROR(set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &aux_type, sizeof aux_type));
    }
  }
  auto layout = [&](cublasLtMatrixLayout_t* l, int32_t type, int64_t rows, int64_t cols, int64_t ldim,
                    int64_t stride) -> Status {
    PHOS_RETURN_IF_ERROR(check(lib->LtMatrixLayoutCreate(l, static_cast<cudaDataType>(type), static_cast<uint64_t>(rows),
                                                         static_cast<uint64_t>(cols), ldim),
                               "cublasLtMatrixLayoutCreate"));
    const int32_t batch = static_cast<int32_t>(c.batch);
    PHOS_RETURN_IF_ERROR(check(lib->LtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch),
                               "cublasLtMatrixLayoutSetAttribute"));
    return check(lib->LtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride),
                 "cublasLtMatrixLayoutSetAttribute");
  };
  PHOS_RETURN_IF_ERROR(layout(&la, c.type_a, c.op_a ? c.k : c.m, c.op_a ? c.m : c.k, c.lda, c.stride_a));
  PHOS_RETURN_IF_ERROR(layout(&lb, c.type_b, c.op_b ? c.n : c.k, c.op_b ? c.k : c.n, c.ldb, c.stride_b));
  PHOS_RETURN_IF_ERROR(layout(&lc, c.type_c, c.m, c.n, c.ldc, c.stride_c));
  PHOS_RETURN_IF_ERROR(layout(&ld, c.type_d, c.m, c.n, c.ldd, c.stride_d));
  PHOS_RETURN_IF_ERROR(check(lib->LtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate"));
  // No workspace: the app's workspace buffer is not known to phosd, and
  // cuBLASLt has algorithms for every supported problem without one.
  cublasLtMatmulHeuristicResult_t heur{};
  int found = 0;
  PHOS_RETURN_IF_ERROR(check(lib->LtMatmulAlgoGetHeuristic(lt_handle_, desc, la, lb, lc, ld, pref, 1, &heur, &found),
                             "cublasLtMatmulAlgoGetHeuristic"));
  if (found < 1) return Status::NotSupported("cublasLtMatmul: cuBLASLt found no algorithm without workspace");
  const void* alpha = c.device_scalars ? reinterpret_cast<const void*>(c.alpha_ptr) : c.alpha;
  const void* beta = c.device_scalars ? reinterpret_cast<const void*>(c.beta_ptr) : c.beta;
  return check(lib->LtMatmul(lt_handle_, desc, alpha, reinterpret_cast<const void*>(c.a), la,
                             reinterpret_cast<const void*>(c.b), lb, beta, reinterpret_cast<const void*>(c.c), lc,
                             reinterpret_cast<void*>(c.d), ld, &heur.algo, nullptr, 0,
                             reinterpret_cast<cudaStream_t>(stream)),
               "cublasLtMatmul");
}

}  // namespace phos::backend::cuda
