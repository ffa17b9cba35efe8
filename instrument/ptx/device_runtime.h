// The CUDA device runtime's external functions phos knows: what nvcc and
// NVRTC declare `.extern .func` for device-side printf, assert and the
// device heap. One list for the interpreter (which implements them), the
// twin pass (a call to one loses no check) and phosd (a module declaring a
// heap function needs the device heap).
#pragma once

#include <string_view>

namespace phos::ptx {

// __nv_aligned_device_malloc(size, align), and `new` of an over-aligned
// type: CUDA 13 lowers both to __cuda_syscall_aligned_malloc; earlier
// toolkits call __nv_aligned_device_malloc by its name.
inline bool IsAlignedDeviceMalloc(std::string_view name) {
  return name == "__cuda_syscall_aligned_malloc" || name == "__nv_aligned_device_malloc";
}

// malloc/free/new/delete in kernels (the device heap).
inline bool IsDeviceHeapFunction(std::string_view name) {
  return name == "malloc" || name == "free" || IsAlignedDeviceMalloc(name);
}

// cudaGraphSetConditional(handle, value): a kernel sets a conditional graph
// node's value. Under phos a handle is the address of a 4-byte slot of
// device memory (libphos.so's graphs.cc), where the sim's interpreter
// stores the value. Not a "known" function below: the write lands at an
// address no twin can check and no access set names, so phosd treats the
// kernels of a module that calls it as of unknown access.
inline bool IsGraphConditionalFunction(std::string_view name) { return name == "cudaGraphSetConditional"; }

// vprintf writes the device's printf buffer, the heap functions the device
// heap, __assertfail ends the launch: none writes the app's buffers outside
// what phosd already puts in a launch's access set.
inline bool IsKnownDeviceRuntimeFunction(std::string_view name) {
  return IsDeviceHeapFunction(name) || name == "vprintf" || name == "__assertfail";
}

}  // namespace phos::ptx
