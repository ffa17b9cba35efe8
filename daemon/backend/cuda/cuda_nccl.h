// NCCL, loaded at run time for the cuda backend's collectives
// (cuda_collectives.h; docs/backends.md "Collectives on the cuda backend").
//
// Like the driver and cuBLAS, NCCL is dlopen'ed, never linked: phosd must
// start where no NCCL is installed (it then refuses ncclCommInitRank by
// name, with the reason). The library phosd loads is its own choice
// (`phosd --nccl-library`): apps' calls reach libphos.so, never the NCCL
// beside the app, so phosd's NCCL is the one that runs every rank of this
// phosd, and all of them must be the same NCCL (NCCL refuses ranks of
// different versions).
//
// nccl.h is used for its types only.
#pragma once

#include <nccl.h>

#include <memory>
#include <string>

#include "common/status.h"

namespace phos::backend::cuda {

/// "libnccl.so.2" for NCCL 2 (the soname NCCL's packages install).
std::string DefaultNcclLibrary();

/// The oldest NCCL phosd runs collectives with (ncclGetVersion's code):
/// 2.14, the first with non-blocking communicators (ncclConfig_t's
/// `blocking = 0`) and ncclCommFinalize, which phosd's waits are built on.
inline constexpr int kMinimumNcclVersion = 21400;

/// The resolved library. Immutable after LoadNccl returns, so shared by
/// every context without a lock.
struct NcclLibrary {
  std::string library;     // what was dlopen'ed
  int version = 0;         // ncclGetVersion, e.g. 22809
  void* handle = nullptr;  // never dlclose'd (NCCL's threads may outlive any owner)

  decltype(&::ncclGetVersion) GetVersion = nullptr;
  decltype(&::ncclGetUniqueId) GetUniqueId = nullptr;
  decltype(&::ncclCommInitRankConfig) CommInitRankConfig = nullptr;
  decltype(&::ncclCommFinalize) CommFinalize = nullptr;
  decltype(&::ncclCommDestroy) CommDestroy = nullptr;
  decltype(&::ncclCommAbort) CommAbort = nullptr;
  decltype(&::ncclCommGetAsyncError) CommGetAsyncError = nullptr;
  decltype(&::ncclGetErrorString) GetErrorString = nullptr;
  decltype(&::ncclGetLastError) GetLastError = nullptr;
  decltype(&::ncclGroupStart) GroupStart = nullptr;
  decltype(&::ncclGroupEnd) GroupEnd = nullptr;
  decltype(&::ncclAllReduce) AllReduce = nullptr;
  decltype(&::ncclBroadcast) Broadcast = nullptr;
  decltype(&::ncclReduce) Reduce = nullptr;
  decltype(&::ncclAllGather) AllGather = nullptr;
  decltype(&::ncclReduceScatter) ReduceScatter = nullptr;
  decltype(&::ncclSend) Send = nullptr;
  decltype(&::ncclRecv) Recv = nullptr;
  decltype(&::ncclRedOpCreatePreMulSum) RedOpCreatePreMulSum = nullptr;
  decltype(&::ncclRedOpDestroy) RedOpDestroy = nullptr;
};

/// dlopens `library` and resolves every entry point above. Unavailable,
/// with the reason, when the library is absent, lacks one of them, or is
/// older than kMinimumNcclVersion.
Status LoadNccl(const std::string& library, std::shared_ptr<const NcclLibrary>* out);

/// OK for ncclSuccess; otherwise a Status naming `what`, the result's name
/// and NCCL's last error text (when `lib` is given). ncclRemoteError (a
/// peer failed) is Unavailable, ncclInvalidArgument/InvalidUsage
/// InvalidArgument, ncclSystemError/InternalError/UnhandledCudaError
/// Internal, ncclInProgress Unavailable (callers wait for it themselves).
Status NcclStatus(ncclResult_t result, const std::string& what, const NcclLibrary* lib);

/// "ncclRemoteError" for ncclRemoteError, "ncclResult 42" for a number
/// nccl.h does not name.
std::string NcclResultName(ncclResult_t result);

/// "2.28.9" for 22809 (and 2.3.7 for the old encoding 2307).
std::string NcclVersionText(int code);

}  // namespace phos::backend::cuda
