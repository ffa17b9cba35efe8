// CUresult -> phos::Status.
#pragma once

#include <cuda.h>

#include <string>
#include <string_view>

#include "common/status.h"

namespace phos::backend::cuda {

struct CudaDriver;

/// The Status code a CUresult maps to (kOk for CUDA_SUCCESS):
///   NOT_READY -> NotReady; OUT_OF_MEMORY -> OutOfMemory;
///   INVALID_VALUE/HANDLE/CONTEXT/DEVICE/PTX/IMAGE, launch geometry -> InvalidArgument;
///   NOT_FOUND -> NotFound; ALREADY_MAPPED, HOST_MEMORY_ALREADY_REGISTERED -> AlreadyExists;
///   NOT_SUPPORTED, NOT_PERMITTED -> NotSupported;
///   NO_DEVICE, STUB_LIBRARY, INSUFFICIENT_DRIVER, DEVICE_UNAVAILABLE, ... -> Unavailable;
///   NOT_INITIALIZED, DEINITIALIZED, NOT_MAPPED, ... -> FailedPrecondition;
///   errors of work on the device (ILLEGAL_ADDRESS, LAUNCH_FAILED, ...) and
///   anything else -> Internal.
Status::Code CudaResultCode(CUresult result);

/// A kernel fault: ILLEGAL_ADDRESS, ASSERT, HARDWARE_STACK_ERROR,
/// ILLEGAL_INSTRUCTION, MISALIGNED_ADDRESS, INVALID_ADDRESS_SPACE,
/// INVALID_PC, LAUNCH_FAILED (700, 710, 714..719). Sticky for the app; on a
/// GPU it ends CUDA for the whole process (cuda_process_health.h).
bool IsKernelFault(CUresult result);

/// "CUDA_ERROR_OUT_OF_MEMORY". Asks the driver (cuGetErrorName) when `driver`
/// has it; otherwise, or when the driver does not know the code, uses a
/// built-in table of the common codes; unknown codes give "CUDA_ERROR_<n>".
std::string CudaResultName(CUresult result, const CudaDriver* driver);

/// "out of memory" (cuGetErrorString); empty when unknown.
std::string CudaResultDescription(CUresult result, const CudaDriver* driver);

/// OK for CUDA_SUCCESS, else a Status with CudaResultCode(result) and the
/// message "<what>: CUDA_ERROR_X (description)". `driver` may be null.
Status CudaStatus(CUresult result, std::string_view what, const CudaDriver* driver);

}  // namespace phos::backend::cuda
