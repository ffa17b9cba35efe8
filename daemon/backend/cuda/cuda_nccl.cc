#include "backend/cuda/cuda_nccl.h"

#include "backend/cuda/dl_library.h"

namespace phos::backend::cuda {

std::string DefaultNcclLibrary() { return "libnccl.so." + std::to_string(NCCL_MAJOR); }

std::string NcclVersionText(int code) {
  // NCCL_VERSION(X, Y, Z): X*10000 + Y*100 + Z from 2.9 on, X*1000 + Y*100 + Z before.
  const bool wide = code >= 20900;
  const int major = wide ? code / 10000 : code / 1000;
  const int rest = wide ? code % 10000 : code % 1000;
  return std::to_string(major) + "." + std::to_string(rest / 100) + "." + std::to_string(rest % 100);
}

std::string NcclResultName(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "ncclSuccess";
    case ncclUnhandledCudaError: return "ncclUnhandledCudaError";
    case ncclSystemError: return "ncclSystemError";
    case ncclInternalError: return "ncclInternalError";
    case ncclInvalidArgument: return "ncclInvalidArgument";
    case ncclInvalidUsage: return "ncclInvalidUsage";
    case ncclRemoteError: return "ncclRemoteError";
    case ncclInProgress: return "ncclInProgress";
    default: return "ncclResult " + std::to_string(static_cast<int>(result));
  }
}

Status NcclStatus(ncclResult_t result, const std::string& what, const NcclLibrary* lib) {
  if (result == ncclSuccess) return Status::Ok();
  std::string message = what + ": " + NcclResultName(result);
  if (lib != nullptr && lib->GetLastError != nullptr) {
    // NCCL's last error is per thread in recent versions and per process in
    // older ones; either way it is a hint, named as such.
    if (const char* last = lib->GetLastError(nullptr); last != nullptr && *last != '\0') {
      message += " (NCCL: " + std::string(last) + ")";
    }
  }
  switch (result) {
    case ncclRemoteError:
    case ncclInProgress: return Status::Unavailable(message);
    case ncclInvalidArgument:
    case ncclInvalidUsage: return Status::InvalidArgument(message);
    default: return Status::Internal(message);
  }
}

Status LoadNccl(const std::string& library, std::shared_ptr<const NcclLibrary>* out) {
  void* handle = nullptr;
  PHOS_RETURN_IF_ERROR(OpenLibrary(library, &handle));
  auto lib = std::make_shared<NcclLibrary>();
  lib->library = library;
  lib->handle = handle;
  auto resolve = [&](const char* symbol, auto* slot) { return ResolveSymbol(handle, library, symbol, slot); };
  PHOS_RETURN_IF_ERROR(resolve("ncclGetVersion", &lib->GetVersion));
  int version = 0;
  PHOS_RETURN_IF_ERROR(NcclStatus(lib->GetVersion(&version), "ncclGetVersion", nullptr));
  lib->version = version;
  if (version < kMinimumNcclVersion) {
    return Status::Unavailable(library + " is NCCL " + NcclVersionText(version) + "; phosd needs NCCL " +
                               NcclVersionText(kMinimumNcclVersion) + " or newer (non-blocking communicators)");
  }
  PHOS_RETURN_IF_ERROR(resolve("ncclGetUniqueId", &lib->GetUniqueId));
  PHOS_RETURN_IF_ERROR(resolve("ncclCommInitRankConfig", &lib->CommInitRankConfig));
  PHOS_RETURN_IF_ERROR(resolve("ncclCommFinalize", &lib->CommFinalize));
  PHOS_RETURN_IF_ERROR(resolve("ncclCommDestroy", &lib->CommDestroy));
  PHOS_RETURN_IF_ERROR(resolve("ncclCommAbort", &lib->CommAbort));
  PHOS_RETURN_IF_ERROR(resolve("ncclCommGetAsyncError", &lib->CommGetAsyncError));
  PHOS_RETURN_IF_ERROR(resolve("ncclGetErrorString", &lib->GetErrorString));
  PHOS_RETURN_IF_ERROR(resolve("ncclGetLastError", &lib->GetLastError));
  PHOS_RETURN_IF_ERROR(resolve("ncclGroupStart", &lib->GroupStart));
  PHOS_RETURN_IF_ERROR(resolve("ncclGroupEnd", &lib->GroupEnd));
  PHOS_RETURN_IF_ERROR(resolve("ncclAllReduce", &lib->AllReduce));
  PHOS_RETURN_IF_ERROR(resolve("ncclBroadcast", &lib->Broadcast));
  PHOS_RETURN_IF_ERROR(resolve("ncclReduce", &lib->Reduce));
  PHOS_RETURN_IF_ERROR(resolve("ncclAllGather", &lib->AllGather));
  PHOS_RETURN_IF_ERROR(resolve("ncclReduceScatter", &lib->ReduceScatter));
  PHOS_RETURN_IF_ERROR(resolve("ncclSend", &lib->Send));
  PHOS_RETURN_IF_ERROR(resolve("ncclRecv", &lib->Recv));
  PHOS_RETURN_IF_ERROR(resolve("ncclRedOpCreatePreMulSum", &lib->RedOpCreatePreMulSum));
  PHOS_RETURN_IF_ERROR(resolve("ncclRedOpDestroy", &lib->RedOpDestroy));
  *out = std::move(lib);
  return Status::Ok();
}

}  // namespace phos::backend::cuda
