#include "backend/cuda/cuda_cublas.h"

#include <dlfcn.h>

#include "backend/cuda/dl_library.h"

namespace phos::backend::cuda {

std::string DefaultCublasLibrary() { return "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR); }

Status LoadCublas(const std::string& library, std::shared_ptr<const CublasLibrary>* out) {
  void* handle = nullptr;
  PHOS_RETURN_IF_ERROR(OpenLibrary(library, &handle));
  auto lib = std::make_shared<CublasLibrary>();
  lib->library = library;
  lib->handle = handle;
  auto resolve = [&](const char* symbol, auto* slot) { return ResolveSymbol(handle, library, symbol, slot); };
  PHOS_RETURN_IF_ERROR(resolve("cublasCreate_v2", &lib->Create));
  PHOS_RETURN_IF_ERROR(resolve("cublasDestroy_v2", &lib->Destroy));
  PHOS_RETURN_IF_ERROR(resolve("cublasGetVersion_v2", &lib->GetVersion));
  PHOS_RETURN_IF_ERROR(resolve("cublasGetStatusString", &lib->GetStatusString));
  // The routines: a missing one only disables itself.
  auto optional = [&](const char* symbol, auto* slot) { ResolveOptionalSymbol(handle, symbol, slot); };
  optional("cublasSetStream_v2", &lib->SetStream);
  optional("cublasSetPointerMode_v2", &lib->SetPointerMode);
  optional("cublasGemmStridedBatchedEx", &lib->GemmStridedBatchedEx);
  optional("cublasGemmBatchedEx", &lib->GemmBatchedEx);
  optional("cublasSgemvStridedBatched", &lib->SgemvStridedBatched);
  optional("cublasDgemvStridedBatched", &lib->DgemvStridedBatched);
  optional("cublasCgemvStridedBatched", &lib->CgemvStridedBatched);
  optional("cublasZgemvStridedBatched", &lib->ZgemvStridedBatched);
  optional("cublasSgeam", &lib->Sgeam);
  optional("cublasDgeam", &lib->Dgeam);
  optional("cublasCgeam", &lib->Cgeam);
  optional("cublasZgeam", &lib->Zgeam);
  optional("cublasSger_v2", &lib->Sger);
  optional("cublasDger_v2", &lib->Dger);
  optional("cublasCgeru_v2", &lib->Cgeru);
  optional("cublasCgerc_v2", &lib->Cgerc);
  optional("cublasZgeru_v2", &lib->Zgeru);
  optional("cublasZgerc_v2", &lib->Zgerc);
  optional("cublasSsyrk_v2", &lib->Ssyrk);
  optional("cublasDsyrk_v2", &lib->Dsyrk);
  optional("cublasCsyrk_v2", &lib->Csyrk);
  optional("cublasZsyrk_v2", &lib->Zsyrk);
  optional("cublasStrsm_v2", &lib->Strsm);
  optional("cublasDtrsm_v2", &lib->Dtrsm);
  optional("cublasCtrsm_v2", &lib->Ctrsm);
  optional("cublasZtrsm_v2", &lib->Ztrsm);
  optional("cublasAxpyEx", &lib->AxpyEx);
  optional("cublasScalEx", &lib->ScalEx);
  optional("cublasCopyEx", &lib->CopyEx);
  optional("cublasSwapEx", &lib->SwapEx);
  optional("cublasDotEx", &lib->DotEx);
  optional("cublasDotcEx", &lib->DotcEx);
  optional("cublasNrm2Ex", &lib->Nrm2Ex);
  optional("cublasAsumEx", &lib->AsumEx);
  optional("cublasIsamax_v2", &lib->Isamax);
  optional("cublasIdamax_v2", &lib->Idamax);
#define PHOS_CUBLAS_LOAD(name) optional("cublas" #name, &lib->name);
  PHOS_CUBLAS_TYPED_ROUTINES(PHOS_CUBLAS_LOAD)
#undef PHOS_CUBLAS_LOAD
  optional("cublasIcamax_v2", &lib->Icamax);
  optional("cublasIzamax_v2", &lib->Izamax);
  optional("cublasIsamin_v2", &lib->Isamin);
  optional("cublasIdamin_v2", &lib->Idamin);
  optional("cublasIcamin_v2", &lib->Icamin);
  optional("cublasIzamin_v2", &lib->Izamin);
  // cuBLASLt: the library beside it (libcublas.so.13 -> libcublasLt.so.13).
  std::string lt = library;
  if (size_t at = lt.find("libcublas"); at != std::string::npos) lt.replace(at, 9, "libcublasLt");
  lib->lt_library = dlopen(lt.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib->lt_library != nullptr) {
    auto lt_optional = [&](const char* symbol, auto* slot) { ResolveOptionalSymbol(lib->lt_library, symbol, slot); };
    lt_optional("cublasLtCreate", &lib->LtCreate);
    lt_optional("cublasLtDestroy", &lib->LtDestroy);
    lt_optional("cublasLtMatmulDescCreate", &lib->LtMatmulDescCreate);
    lt_optional("cublasLtMatmulDescDestroy", &lib->LtMatmulDescDestroy);
    lt_optional("cublasLtMatmulDescSetAttribute", &lib->LtMatmulDescSetAttribute);
    lt_optional("cublasLtMatrixLayoutCreate", &lib->LtMatrixLayoutCreate);
    lt_optional("cublasLtMatrixLayoutDestroy", &lib->LtMatrixLayoutDestroy);
    lt_optional("cublasLtMatrixLayoutSetAttribute", &lib->LtMatrixLayoutSetAttribute);
    lt_optional("cublasLtMatmulPreferenceCreate", &lib->LtMatmulPreferenceCreate);
    lt_optional("cublasLtMatmulPreferenceDestroy", &lib->LtMatmulPreferenceDestroy);
    lt_optional("cublasLtMatmulAlgoGetHeuristic", &lib->LtMatmulAlgoGetHeuristic);
    lt_optional("cublasLtMatmul", &lib->LtMatmul);
  }
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
