// cuBLAS, loaded at run time for the per-context handles the cuda backend
// prepares with every context (docs/backends.md "Context pool": a pooled context comes with its
// cuBLAS handle and workspace, so a session's first GEMM does not pay for
// cublasCreate).
//
// Like the driver, cuBLAS is dlopen'ed, never linked: phosd must start where
// the toolkit's libraries are absent. When it cannot be loaded the backend
// logs that once and contexts simply have no handle
// (Context::library_handle(Library::kCublas) == nullptr).
//
// The handle is created with the context current (cuBLAS's built-in CUDA
// runtime uses the current driver context), which also allocates cuBLAS's
// default workspace in that context; it is destroyed, with that context
// current, before the context is.
#pragma once

#include <cublasLt.h>
#include <cublas_api.h>

#include <memory>
#include <string>

#include "backend/blas_call.h"
#include "common/status.h"

namespace phos::backend::cuda {

/// The soname of the cuBLAS the toolkit headers describe
/// ("libcublas.so.13" for CUDA 13).
std::string DefaultCublasLibrary();

/// The routines cuda_blas_typed.cc picks by data type — the symmetric,
/// Hermitian and triangular ones, the banded and packed level 2, dgmm, rot,
/// the pointer-array gemv and
/// trsm batches, the batched LU, amax/amin's _64 forms — one
/// X(name) per entry point: CublasLibrary holds `name` as a pointer to
/// cublas<name>.
#define PHOS_CUBLAS_TYPED_ROUTINES(X) \
  X(Ssymm_v2) \
  X(Ssyr2k_v2) \
  X(Strmm_v2) \
  X(Ssymv_v2) \
  X(Strmv_v2) \
  X(Strsv_v2) \
  X(Ssyr_v2) \
  X(Ssyr2_v2) \
  X(Sdgmm) \
  X(Dsymm_v2) \
  X(Dsyr2k_v2) \
  X(Dtrmm_v2) \
  X(Dsymv_v2) \
  X(Dtrmv_v2) \
  X(Dtrsv_v2) \
  X(Dsyr_v2) \
  X(Dsyr2_v2) \
  X(Ddgmm) \
  X(Csymm_v2) \
  X(Csyr2k_v2) \
  X(Ctrmm_v2) \
  X(Csymv_v2) \
  X(Ctrmv_v2) \
  X(Ctrsv_v2) \
  X(Csyr_v2) \
  X(Csyr2_v2) \
  X(Cdgmm) \
  X(Zsymm_v2) \
  X(Zsyr2k_v2) \
  X(Ztrmm_v2) \
  X(Zsymv_v2) \
  X(Ztrmv_v2) \
  X(Ztrsv_v2) \
  X(Zsyr_v2) \
  X(Zsyr2_v2) \
  X(Zdgmm) \
  X(SgemvBatched) X(DgemvBatched) X(CgemvBatched) X(ZgemvBatched) \
  X(StrsmBatched) X(DtrsmBatched) X(CtrsmBatched) X(ZtrsmBatched) \
  X(Ssyrkx) X(Dsyrkx) X(Csyrkx) X(Zsyrkx) X(Cherkx) X(Zherkx) \
  X(Sgbmv_v2) X(Stbmv_v2) X(Stbsv_v2) X(Stpmv_v2) X(Stpsv_v2) X(Dgbmv_v2) \
  X(Dtbmv_v2) X(Dtbsv_v2) X(Dtpmv_v2) X(Dtpsv_v2) X(Cgbmv_v2) X(Ctbmv_v2) \
  X(Ctbsv_v2) X(Ctpmv_v2) X(Ctpsv_v2) X(Zgbmv_v2) X(Ztbmv_v2) X(Ztbsv_v2) \
  X(Ztpmv_v2) X(Ztpsv_v2) X(Ssbmv_v2) X(Sspmv_v2) X(Sspr_v2) X(Sspr2_v2) \
  X(Dsbmv_v2) X(Dspmv_v2) X(Dspr_v2) X(Dspr2_v2) X(Chbmv_v2) X(Chpmv_v2) \
  X(Chpr_v2) X(Chpr2_v2) X(Zhbmv_v2) X(Zhpmv_v2) X(Zhpr_v2) X(Zhpr2_v2) \
  X(SgetrfBatched) X(DgetrfBatched) X(CgetrfBatched) X(ZgetrfBatched) \
  X(SgetrsBatched) X(DgetrsBatched) X(CgetrsBatched) X(ZgetrsBatched) \
  X(SgetriBatched) X(DgetriBatched) X(CgetriBatched) X(ZgetriBatched) \
  X(Srot_v2) X(Drot_v2) X(Crot_v2) X(Csrot_v2) X(Zrot_v2) X(Zdrot_v2) \
  X(Isamax_v2_64) X(Idamax_v2_64) X(Icamax_v2_64) X(Izamax_v2_64) \
  X(Isamin_v2_64) X(Idamin_v2_64) X(Icamin_v2_64) X(Izamin_v2_64) \
  X(Chemm_v2) \
  X(Cher2k_v2) \
  X(Cherk_v2) \
  X(Chemv_v2) \
  X(Cher_v2) \
  X(Cher2_v2) \
  X(Zhemm_v2) \
  X(Zher2k_v2) \
  X(Zherk_v2) \
  X(Zhemv_v2) \
  X(Zher_v2) \
  X(Zher2_v2)

/// The resolved library. Immutable after LoadCublas: shared by the backend
/// and all its contexts without a lock.
struct CublasLibrary {
  std::string library;     // what was dlopen'ed
  void* handle = nullptr;  // never dlclose'd (it runs CUDA runtime code)
  cublasStatus_t (*Create)(cublasHandle_t*) = nullptr;       // cublasCreate_v2
  cublasStatus_t (*Destroy)(cublasHandle_t) = nullptr;       // cublasDestroy_v2
  cublasStatus_t (*GetVersion)(cublasHandle_t, int*) = nullptr;  // cublasGetVersion_v2
  const char* (*GetStatusString)(cublasStatus_t) = nullptr;  // cublasGetStatusString

  // The routines Context::Blas runs (cuda_blas.cc). Optional: a cuBLAS
  // without one leaves it null and that routine is NotSupported.
  decltype(&cublasSetStream_v2) SetStream = nullptr;
  decltype(&cublasSetPointerMode_v2) SetPointerMode = nullptr;
  // (spelled out: cublas_api.h overloads it in C++ with a cudaDataType compute type)
  cublasStatus_t (*GemmStridedBatchedEx)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                         const void*, const void*, cudaDataType, int, long long int, const void*,
                                         cudaDataType, int, long long int, const void*, void*, cudaDataType, int,
                                         long long int, int, cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
  cublasStatus_t (*GemmBatchedEx)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                                  const void* const[], cudaDataType, int, const void* const[], cudaDataType, int,
                                  const void*, void* const[], cudaDataType, int, int, cublasComputeType_t,
                                  cublasGemmAlgo_t) = nullptr;
  decltype(&cublasSgemvStridedBatched) SgemvStridedBatched = nullptr;
  decltype(&cublasDgemvStridedBatched) DgemvStridedBatched = nullptr;
  decltype(&cublasCgemvStridedBatched) CgemvStridedBatched = nullptr;
  decltype(&cublasZgemvStridedBatched) ZgemvStridedBatched = nullptr;
  decltype(&cublasSgeam) Sgeam = nullptr;
  decltype(&cublasDgeam) Dgeam = nullptr;
  decltype(&cublasCgeam) Cgeam = nullptr;
  decltype(&cublasZgeam) Zgeam = nullptr;
  decltype(&cublasSger_v2) Sger = nullptr;
  decltype(&cublasDger_v2) Dger = nullptr;
  decltype(&cublasCgeru_v2) Cgeru = nullptr;
  decltype(&cublasCgerc_v2) Cgerc = nullptr;
  decltype(&cublasZgeru_v2) Zgeru = nullptr;
  decltype(&cublasZgerc_v2) Zgerc = nullptr;
  decltype(&cublasSsyrk_v2) Ssyrk = nullptr;
  decltype(&cublasDsyrk_v2) Dsyrk = nullptr;
  decltype(&cublasCsyrk_v2) Csyrk = nullptr;
  decltype(&cublasZsyrk_v2) Zsyrk = nullptr;
  decltype(&cublasStrsm_v2) Strsm = nullptr;
  decltype(&cublasDtrsm_v2) Dtrsm = nullptr;
  decltype(&cublasCtrsm_v2) Ctrsm = nullptr;
  decltype(&cublasZtrsm_v2) Ztrsm = nullptr;
  decltype(&cublasAxpyEx) AxpyEx = nullptr;
  decltype(&cublasScalEx) ScalEx = nullptr;
  decltype(&cublasCopyEx) CopyEx = nullptr;
  decltype(&cublasSwapEx) SwapEx = nullptr;
  decltype(&cublasDotEx) DotEx = nullptr;
  decltype(&cublasDotcEx) DotcEx = nullptr;
  decltype(&cublasNrm2Ex) Nrm2Ex = nullptr;
  decltype(&cublasAsumEx) AsumEx = nullptr;
  decltype(&cublasIsamax_v2) Isamax = nullptr;
  decltype(&cublasIdamax_v2) Idamax = nullptr;
  decltype(&cublasIcamax_v2) Icamax = nullptr;
  decltype(&cublasIzamax_v2) Izamax = nullptr;
  decltype(&cublasIsamin_v2) Isamin = nullptr;
  decltype(&cublasIdamin_v2) Idamin = nullptr;
  decltype(&cublasIcamin_v2) Icamin = nullptr;
  decltype(&cublasIzamin_v2) Izamin = nullptr;
#define PHOS_CUBLAS_FIELD(name) decltype(&cublas##name) name = nullptr;
  PHOS_CUBLAS_TYPED_ROUTINES(PHOS_CUBLAS_FIELD)
#undef PHOS_CUBLAS_FIELD

  // cuBLASLt (libcublasLt, dlopen'ed beside libcublas; optional: without
  // it cublasLtMatmul is NotSupported).
  void* lt_library = nullptr;
  decltype(&cublasLtCreate) LtCreate = nullptr;
  decltype(&cublasLtDestroy) LtDestroy = nullptr;
  decltype(&cublasLtMatmulDescCreate) LtMatmulDescCreate = nullptr;
  decltype(&cublasLtMatmulDescDestroy) LtMatmulDescDestroy = nullptr;
  decltype(&cublasLtMatmulDescSetAttribute) LtMatmulDescSetAttribute = nullptr;
  decltype(&cublasLtMatrixLayoutCreate) LtMatrixLayoutCreate = nullptr;
  decltype(&cublasLtMatrixLayoutDestroy) LtMatrixLayoutDestroy = nullptr;
  decltype(&cublasLtMatrixLayoutSetAttribute) LtMatrixLayoutSetAttribute = nullptr;
  decltype(&cublasLtMatmulPreferenceCreate) LtMatmulPreferenceCreate = nullptr;
  decltype(&cublasLtMatmulPreferenceDestroy) LtMatmulPreferenceDestroy = nullptr;
  decltype(&cublasLtMatmulAlgoGetHeuristic) LtMatmulAlgoGetHeuristic = nullptr;
  decltype(&cublasLtMatmul) LtMatmul = nullptr;
  bool has_lt() const { return LtCreate != nullptr && LtMatmul != nullptr && LtMatmulAlgoGetHeuristic != nullptr; }
};

/// Enqueues one of the symmetric, Hermitian and triangular routines or dgmm
/// (BlasOp::kSymm … kDgmm, kRot, kGemvBatched, kTrsmBatched, herk: kSyrk
/// with `conjugate`, and amax/amin
/// with a 64-bit index: kIamax/kIamin with `index64`) on handle
/// `h`, already bound to the stream and pointer mode; `*what` names the
/// routine. CUBLAS_STATUS_NOT_SUPPORTED when this cuBLAS lacks it.
cublasStatus_t RunTypedCublas(const CublasLibrary& lib, cublasHandle_t h, const BlasCall& call,
                                  const char** what);

/// dlopens `library` and resolves the entry points above. Unavailable,
/// naming the library and the dlerror, when it cannot.
Status LoadCublas(const std::string& library, std::shared_ptr<const CublasLibrary>* out);

/// "cublasCreate_v2: CUBLAS_STATUS_ALLOC_FAILED (...)" as a Status
/// (ALLOC_FAILED -> OutOfMemory, NOT_INITIALIZED -> Unavailable, else
/// Internal); OK for CUBLAS_STATUS_SUCCESS.
Status CublasStatus(cublasStatus_t status, const std::string& what, const CublasLibrary* lib);

}  // namespace phos::backend::cuda
