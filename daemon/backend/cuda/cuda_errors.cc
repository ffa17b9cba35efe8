#include "backend/cuda/cuda_errors.h"

#include "backend/cuda/cuda_driver.h"
#include "common/kernel_faults.h"

namespace phos::backend::cuda {
namespace {

// Names of the CUresult codes of CUDA 13's cuda.h, for when the driver's
// cuGetErrorName is unavailable (no driver, a stub library, a failed load).
const char* FallbackName(CUresult result) {
  switch (static_cast<int>(result)) {
    case 0: return "CUDA_SUCCESS";
    case 1: return "CUDA_ERROR_INVALID_VALUE";
    case 2: return "CUDA_ERROR_OUT_OF_MEMORY";
    case 3: return "CUDA_ERROR_NOT_INITIALIZED";
    case 4: return "CUDA_ERROR_DEINITIALIZED";
    case 5: return "CUDA_ERROR_PROFILER_DISABLED";
    case 6: return "CUDA_ERROR_PROFILER_NOT_INITIALIZED";
    case 7: return "CUDA_ERROR_PROFILER_ALREADY_STARTED";
    case 8: return "CUDA_ERROR_PROFILER_ALREADY_STOPPED";
    case 34: return "CUDA_ERROR_STUB_LIBRARY";
    case 36: return "CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER";
    case 46: return "CUDA_ERROR_DEVICE_UNAVAILABLE";
    case 100: return "CUDA_ERROR_NO_DEVICE";
    case 101: return "CUDA_ERROR_INVALID_DEVICE";
    case 102: return "CUDA_ERROR_DEVICE_NOT_LICENSED";
    case 200: return "CUDA_ERROR_INVALID_IMAGE";
    case 201: return "CUDA_ERROR_INVALID_CONTEXT";
    case 202: return "CUDA_ERROR_CONTEXT_ALREADY_CURRENT";
    case 205: return "CUDA_ERROR_MAP_FAILED";
    case 206: return "CUDA_ERROR_UNMAP_FAILED";
    case 207: return "CUDA_ERROR_ARRAY_IS_MAPPED";
    case 208: return "CUDA_ERROR_ALREADY_MAPPED";
    case 209: return "CUDA_ERROR_NO_BINARY_FOR_GPU";
    case 210: return "CUDA_ERROR_ALREADY_ACQUIRED";
    case 211: return "CUDA_ERROR_NOT_MAPPED";
    case 212: return "CUDA_ERROR_NOT_MAPPED_AS_ARRAY";
    case 213: return "CUDA_ERROR_NOT_MAPPED_AS_POINTER";
    case 214: return "CUDA_ERROR_ECC_UNCORRECTABLE";
    case 215: return "CUDA_ERROR_UNSUPPORTED_LIMIT";
    case 216: return "CUDA_ERROR_CONTEXT_ALREADY_IN_USE";
    case 217: return "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED";
    case 218: return "CUDA_ERROR_INVALID_PTX";
    case 219: return "CUDA_ERROR_INVALID_GRAPHICS_CONTEXT";
    case 220: return "CUDA_ERROR_NVLINK_UNCORRECTABLE";
    case 221: return "CUDA_ERROR_JIT_COMPILER_NOT_FOUND";
    case 222: return "CUDA_ERROR_UNSUPPORTED_PTX_VERSION";
    case 223: return "CUDA_ERROR_JIT_COMPILATION_DISABLED";
    case 224: return "CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY";
    case 225: return "CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC";
    case 226: return "CUDA_ERROR_CONTAINED";
    case 300: return "CUDA_ERROR_INVALID_SOURCE";
    case 301: return "CUDA_ERROR_FILE_NOT_FOUND";
    case 302: return "CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND";
    case 303: return "CUDA_ERROR_SHARED_OBJECT_INIT_FAILED";
    case 304: return "CUDA_ERROR_OPERATING_SYSTEM";
    case 400: return "CUDA_ERROR_INVALID_HANDLE";
    case 401: return "CUDA_ERROR_ILLEGAL_STATE";
    case 402: return "CUDA_ERROR_LOSSY_QUERY";
    case 500: return "CUDA_ERROR_NOT_FOUND";
    case 600: return "CUDA_ERROR_NOT_READY";
    case 700: return "CUDA_ERROR_ILLEGAL_ADDRESS";
    case 701: return "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES";
    case 702: return "CUDA_ERROR_LAUNCH_TIMEOUT";
    case 703: return "CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING";
    case 704: return "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED";
    case 705: return "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED";
    case 708: return "CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE";
    case 709: return "CUDA_ERROR_CONTEXT_IS_DESTROYED";
    case 710: return "CUDA_ERROR_ASSERT";
    case 711: return "CUDA_ERROR_TOO_MANY_PEERS";
    case 712: return "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED";
    case 713: return "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED";
    case 714: return "CUDA_ERROR_HARDWARE_STACK_ERROR";
    case 715: return "CUDA_ERROR_ILLEGAL_INSTRUCTION";
    case 716: return "CUDA_ERROR_MISALIGNED_ADDRESS";
    case 717: return "CUDA_ERROR_INVALID_ADDRESS_SPACE";
    case 718: return "CUDA_ERROR_INVALID_PC";
    case 719: return "CUDA_ERROR_LAUNCH_FAILED";
    case 720: return "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE";
    case 721: return "CUDA_ERROR_TENSOR_MEMORY_LEAK";
    case 800: return "CUDA_ERROR_NOT_PERMITTED";
    case 801: return "CUDA_ERROR_NOT_SUPPORTED";
    case 802: return "CUDA_ERROR_SYSTEM_NOT_READY";
    case 803: return "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH";
    case 804: return "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE";
    case 805: return "CUDA_ERROR_MPS_CONNECTION_FAILED";
    case 806: return "CUDA_ERROR_MPS_RPC_FAILURE";
    case 807: return "CUDA_ERROR_MPS_SERVER_NOT_READY";
    case 808: return "CUDA_ERROR_MPS_MAX_CLIENTS_REACHED";
    case 809: return "CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED";
    case 810: return "CUDA_ERROR_MPS_CLIENT_TERMINATED";
    case 811: return "CUDA_ERROR_CDP_NOT_SUPPORTED";
    case 812: return "CUDA_ERROR_CDP_VERSION_MISMATCH";
    case 900: return "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED";
    case 901: return "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED";
    case 902: return "CUDA_ERROR_STREAM_CAPTURE_MERGE";
    case 903: return "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED";
    case 904: return "CUDA_ERROR_STREAM_CAPTURE_UNJOINED";
    case 905: return "CUDA_ERROR_STREAM_CAPTURE_ISOLATION";
    case 906: return "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT";
    case 907: return "CUDA_ERROR_CAPTURED_EVENT";
    case 908: return "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD";
    case 909: return "CUDA_ERROR_TIMEOUT";
    case 910: return "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE";
    case 911: return "CUDA_ERROR_EXTERNAL_DEVICE";
    case 912: return "CUDA_ERROR_INVALID_CLUSTER_SIZE";
    case 913: return "CUDA_ERROR_FUNCTION_NOT_LOADED";
    case 914: return "CUDA_ERROR_INVALID_RESOURCE_TYPE";
    case 915: return "CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION";
    case 916: return "CUDA_ERROR_KEY_ROTATION";
    case 999: return "CUDA_ERROR_UNKNOWN";
    default: return nullptr;
  }
}

// Short descriptions of the codes phos most often reports, for when the
// driver's cuGetErrorString is unavailable.
const char* FallbackDescription(CUresult result) {
  switch (result) {
    case CUDA_SUCCESS: return "no error";
    case CUDA_ERROR_INVALID_VALUE: return "invalid argument";
    case CUDA_ERROR_OUT_OF_MEMORY: return "out of memory";
    case CUDA_ERROR_NOT_INITIALIZED: return "initialization error";
    case CUDA_ERROR_DEINITIALIZED: return "driver shutting down";
    case CUDA_ERROR_STUB_LIBRARY: return "CUDA driver is a stub library";
    case CUDA_ERROR_DEVICE_UNAVAILABLE: return "CUDA-capable device(s) is/are busy or unavailable";
    case CUDA_ERROR_NO_DEVICE: return "no CUDA-capable device is detected";
    case CUDA_ERROR_INVALID_DEVICE: return "invalid device ordinal";
    case CUDA_ERROR_INVALID_IMAGE: return "device kernel image is invalid";
    case CUDA_ERROR_INVALID_CONTEXT: return "invalid device context";
    case CUDA_ERROR_NO_BINARY_FOR_GPU: return "no kernel image is available for execution on the device";
    case CUDA_ERROR_INVALID_PTX: return "a PTX JIT compilation failed";
    case CUDA_ERROR_UNSUPPORTED_PTX_VERSION: return "the provided PTX was compiled with an unsupported toolchain";
    case CUDA_ERROR_INVALID_HANDLE: return "invalid resource handle";
    case CUDA_ERROR_NOT_FOUND: return "named symbol not found";
    case CUDA_ERROR_NOT_READY: return "device not ready";
    case CUDA_ERROR_ILLEGAL_ADDRESS: return "an illegal memory access was encountered";
    case CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES: return "too many resources requested for launch";
    case CUDA_ERROR_LAUNCH_FAILED: return "unspecified launch failure";
    case CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED: return "part or all of the requested memory range is already mapped";
    case CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED: return "pointer does not correspond to a registered memory region";
    case CUDA_ERROR_NOT_PERMITTED: return "operation not permitted";
    case CUDA_ERROR_NOT_SUPPORTED: return "operation not supported";
    case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH: return "system has unsupported display driver / cuda driver combination";
    case CUDA_ERROR_UNKNOWN: return "unknown error";
    default: return nullptr;
  }
}

}  // namespace

Status::Code CudaResultCode(CUresult result) {
  using Code = Status::Code;
  switch (result) {
    case CUDA_SUCCESS:
      return Code::kOk;
    case CUDA_ERROR_NOT_READY:
      return Code::kNotReady;
    case CUDA_ERROR_OUT_OF_MEMORY:
      return Code::kOutOfMemory;
    case CUDA_ERROR_INVALID_VALUE:
    case CUDA_ERROR_INVALID_HANDLE:
    case CUDA_ERROR_INVALID_CONTEXT:
    case CUDA_ERROR_INVALID_DEVICE:
    case CUDA_ERROR_INVALID_IMAGE:
    case CUDA_ERROR_INVALID_PTX:
    case CUDA_ERROR_INVALID_SOURCE:
    case CUDA_ERROR_UNSUPPORTED_PTX_VERSION:
    case CUDA_ERROR_NO_BINARY_FOR_GPU:
    case CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES:
    case CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE:
    case CUDA_ERROR_INVALID_CLUSTER_SIZE:
    case CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED:
    case CUDA_ERROR_CONTEXT_IS_DESTROYED:
      return Code::kInvalidArgument;
    case CUDA_ERROR_NOT_FOUND:
    case CUDA_ERROR_FILE_NOT_FOUND:
    case CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND:
      return Code::kNotFound;
    case CUDA_ERROR_ALREADY_MAPPED:
    case CUDA_ERROR_ALREADY_ACQUIRED:
    case CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED:
    case CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED:
      return Code::kAlreadyExists;
    case CUDA_ERROR_NOT_SUPPORTED:
    case CUDA_ERROR_NOT_PERMITTED:
    case CUDA_ERROR_PEER_ACCESS_UNSUPPORTED:
    case CUDA_ERROR_JIT_COMPILER_NOT_FOUND:
    case CUDA_ERROR_JIT_COMPILATION_DISABLED:
    case CUDA_ERROR_UNSUPPORTED_LIMIT:
    case CUDA_ERROR_CDP_NOT_SUPPORTED:
      return Code::kNotSupported;
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_STUB_LIBRARY:
    case CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER:
    case CUDA_ERROR_DEVICE_UNAVAILABLE:
    case CUDA_ERROR_DEVICE_NOT_LICENSED:
    case CUDA_ERROR_SYSTEM_NOT_READY:
    case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
    case CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE:
    case CUDA_ERROR_MPS_CONNECTION_FAILED:
    case CUDA_ERROR_MPS_SERVER_NOT_READY:
    case CUDA_ERROR_MPS_MAX_CLIENTS_REACHED:
    case CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED:
      return Code::kUnavailable;
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_DEINITIALIZED:
    case CUDA_ERROR_NOT_MAPPED:
    case CUDA_ERROR_NOT_MAPPED_AS_POINTER:
    case CUDA_ERROR_PEER_ACCESS_NOT_ENABLED:
    case CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE:
    case CUDA_ERROR_CONTEXT_ALREADY_IN_USE:
    case CUDA_ERROR_ILLEGAL_STATE:
    case CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED:
    case CUDA_ERROR_STREAM_CAPTURE_INVALIDATED:
    case CUDA_ERROR_STREAM_CAPTURE_IMPLICIT:
    case CUDA_ERROR_CAPTURED_EVENT:
    case CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD:
      return Code::kFailedPrecondition;
    default:
      // Errors of work that ran on the device (ILLEGAL_ADDRESS, LAUNCH_FAILED,
      // ASSERT, ECC, ...) leave the context unusable; nothing maps better.
      return Code::kInternal;
  }
}

std::string CudaResultName(CUresult result, const CudaDriver* driver) {
  if (driver != nullptr && driver->GetErrorName != nullptr) {
    const char* name = nullptr;
    if (driver->GetErrorName(result, &name) == CUDA_SUCCESS && name != nullptr) return name;
  }
  if (const char* name = FallbackName(result)) return name;
  return "CUDA_ERROR_" + std::to_string(static_cast<int>(result));
}

std::string CudaResultDescription(CUresult result, const CudaDriver* driver) {
  if (driver != nullptr && driver->GetErrorString != nullptr) {
    const char* text = nullptr;
    if (driver->GetErrorString(result, &text) == CUDA_SUCCESS && text != nullptr) return text;
  }
  if (const char* text = FallbackDescription(result)) return text;
  return {};
}

Status CudaStatus(CUresult result, std::string_view what, const CudaDriver* driver) {
  if (result == CUDA_SUCCESS) return Status::Ok();
  std::string message(what);
  message += ": ";
  message += CudaResultName(result, driver);
  std::string description = CudaResultDescription(result, driver);
  if (!description.empty()) {
    message += " (";
    message += description;
    message += ")";
  }
  Status status(CudaResultCode(result), std::move(message));
  // The app must see these exactly (Status::api_error): the runtime
  // tolerates NO_BINARY_FOR_GPU for a fatbin built for other GPUs (cuBLAS
  // ships hundreds), a kernel fault is sticky under its own name, and a
  // cooperative grid too large is the launch's own error.
  if (IsKernelFault(result) || result == CUDA_ERROR_NO_BINARY_FOR_GPU ||
      result == CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE) {
    return status.WithApiError(static_cast<int>(result));
  }
  return status;
}

bool IsKernelFault(CUresult result) { return IsKernelFaultNumber(static_cast<int>(result)); }
static_assert(IsKernelFaultNumber(CUDA_ERROR_ILLEGAL_ADDRESS) && IsKernelFaultNumber(CUDA_ERROR_ASSERT) &&
                  IsKernelFaultNumber(CUDA_ERROR_HARDWARE_STACK_ERROR) &&
                  IsKernelFaultNumber(CUDA_ERROR_ILLEGAL_INSTRUCTION) &&
                  IsKernelFaultNumber(CUDA_ERROR_MISALIGNED_ADDRESS) &&
                  IsKernelFaultNumber(CUDA_ERROR_INVALID_ADDRESS_SPACE) &&
                  IsKernelFaultNumber(CUDA_ERROR_INVALID_PC) && IsKernelFaultNumber(CUDA_ERROR_LAUNCH_FAILED) &&
                  !IsKernelFaultNumber(CUDA_ERROR_NO_BINARY_FOR_GPU) &&
                  !IsKernelFaultNumber(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE),
              "common/kernel_faults.h and cuda.h disagree");

}  // namespace phos::backend::cuda
