// Which CUDA errors are kernel faults: defined once for the layers that
// carry CUDA error numbers in their own types — the cuda backend's CUresult,
// the wire's WireStatus, the client's cudaError_t — whose numbers coincide.
// A kernel fault is sticky for the app's process, and on a GPU it ends CUDA
// for the process that owns the context (docs/backends.md "A kernel fault is
// the whole process's").
#pragma once

namespace phos {

/// CUDA_ERROR_ILLEGAL_ADDRESS (700), ASSERT (710), HARDWARE_STACK_ERROR
/// (714), ILLEGAL_INSTRUCTION (715), MISALIGNED_ADDRESS (716),
/// INVALID_ADDRESS_SPACE (717), INVALID_PC (718), LAUNCH_FAILED (719); the
/// runtime's cudaError_t uses the same numbers.
constexpr bool IsKernelFaultNumber(int error) { return error == 700 || error == 710 || (error >= 714 && error <= 719); }

}  // namespace phos
