// Identity queries and accepted hints that third-party programs make at
// start-up, answered in the app from what phosd already told it:
//   PCI bus ids         cudaDeviceGetPCIBusId / cuDeviceGetPCIBusId and the
//                       reverse lookups (from the PCI domain/bus/device
//                       attributes; "dddd:bb:dd.0" as CUDA formats it)
//   device set-up       cudaInitDevice, cudaSetValidDevices (the session's
//                       GPU only: a process under phos uses one, devices.h)
//   function identity   cudaFuncGetName / cuFuncGetName, cudaFuncGetParamInfo
//                       / cuFuncGetParamInfo, cuFuncGetModule
//   hints               shared-memory bank configuration (Get answers the
//                       4-byte banks every GPU since Maxwell has; Set is
//                       accepted: it has had no effect since Kepler), the
//                       persisting-L2 reset (nothing persists: the device
//                       attributes say persisting L2 is not offered)
//   logs                cudaLogsRegisterCallback / Unregister (as the
//                       driver's, capture_api.cc)
//   events              cuEventRecordWithFlags (cudaEventRecordWithFlags)
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>

#include "interposer/client/client_internal.h"
#include "interposer/client/devices.h"
#include "interposer/client/driver_internal.h"

namespace phos::client {

cudaError_t GetPciLocation(int device, PciLocation* out) {
  if (cudaError_t e = cudaDeviceGetAttribute(&out->domain, cudaDevAttrPciDomainId, device); e != cudaSuccess)
    return e;
  if (cudaError_t e = cudaDeviceGetAttribute(&out->bus, cudaDevAttrPciBusId, device); e != cudaSuccess) return e;
  return cudaDeviceGetAttribute(&out->device, cudaDevAttrPciDeviceId, device);
}

namespace {

// "dddd:bb:dd.0", as CUDA formats a bus id.
cudaError_t BusId(int device, char* out, int len) {
  PciLocation l;
  if (cudaError_t e = GetPciLocation(device, &l); e != cudaSuccess) return e;
  std::snprintf(out, static_cast<size_t>(len), "%04x:%02x:%02x.0", l.domain, l.bus, l.device);
  return cudaSuccess;
}

// Does `text` name the app's GPU `device`? Accepts the forms CUDA
// documents: [domain]:[bus]:[device].[function], domain and function
// optional.
bool NamesDevice(const char* text, int device) {
  PciLocation l;
  if (GetPciLocation(device, &l) != cudaSuccess) return false;
  unsigned domain = 0, bus = 0, dev = 0, fn = 0;
  if (std::sscanf(text, "%x:%x:%x.%x", &domain, &bus, &dev, &fn) >= 3) {
    return domain == static_cast<unsigned>(l.domain) && bus == static_cast<unsigned>(l.bus) &&
           dev == static_cast<unsigned>(l.device);
  }
  if (std::sscanf(text, "%x:%x.%x", &bus, &dev, &fn) >= 2) {
    return bus == static_cast<unsigned>(l.bus) && dev == static_cast<unsigned>(l.device);
  }
  return false;
}

// The app's ordinal of the GPU `text` names, or -1.
int DeviceNamed(const char* text) {
  int count = 0;
  if (VisibleDeviceCount(&count) != cudaSuccess) return -1;
  for (int d = 0; d < count; ++d)
    if (NamesDevice(text, d)) return d;
  return -1;
}

// The name and parameters of a runtime or driver function handle.
bool FunctionInfo(const void* f, const char** name, const std::vector<ParamSlot>** params, bool* known) {
  static thread_local DriverFunctionInfo info;  // the driver's answer is copied; its name lives with the function
  if (DescribeDriverFunction(f, &info)) {
    *name = info.name;
    *params = &info.params;
    *known = info.params_known;
    return true;
  }
  KernelRec* k = IsKernelRec(f) ? static_cast<KernelRec*>(const_cast<void*>(f)) : FindKernelByStub(f);
  if (k == nullptr) return false;
  *name = k->name.c_str();  // registered kernels live as long as the process
  *params = &k->params;
  *known = k->params_known;
  return true;
}

}  // namespace
}  // namespace phos::client

using namespace phos::client;  // NOLINT

// ---- PCI bus ids
PHOS_EXPORT cudaError_t cudaDeviceGetPCIBusId(char* pciBusId, int len, int device) {
  if (pciBusId == nullptr || len <= 0) return SetError(cudaErrorInvalidValue);
  return BusId(device, pciBusId, len);  // an attribute's failure is already this thread's last error
}
PHOS_EXPORT CUresult cuDeviceGetPCIBusId(char* pciBusId, int len, CUdevice dev) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (pciBusId == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  return ToCu(BusId(dev, pciBusId, len));
}
PHOS_EXPORT cudaError_t cudaDeviceGetByPCIBusId(int* device, const char* pciBusId) {
  if (device == nullptr || pciBusId == nullptr) return SetError(cudaErrorInvalidValue);
  const int d = DeviceNamed(pciBusId);
  if (d < 0) return SetError(cudaErrorInvalidDevice);
  *device = d;
  return cudaSuccess;
}
PHOS_EXPORT CUresult cuDeviceGetByPCIBusId(CUdevice* dev, const char* pciBusId) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (dev == nullptr || pciBusId == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const int d = DeviceNamed(pciBusId);
  if (d < 0) return CUDA_ERROR_INVALID_DEVICE;
  *dev = d;
  return CUDA_SUCCESS;
}

// ---- device set-up
PHOS_EXPORT cudaError_t cudaInitDevice(int device, unsigned int deviceFlags, unsigned int flags) {
  int count = 0;
  if (cudaError_t e = VisibleDeviceCount(&count); e != cudaSuccess) return SetError(e);
  if (device < 0 || device >= count) return SetError(cudaErrorInvalidDevice);
  if (flags != 0 && flags != cudaInitDeviceFlagsAreValid) return SetError(cudaErrorInvalidValue);
  if (flags == cudaInitDeviceFlagsAreValid) {
    if (cudaError_t e = cudaSetDeviceFlags(deviceFlags); e != cudaSuccess) return e;
  }
  // Under phos the GPU a process initialises is the one it runs on (devices.h).
  return cudaSetDevice(device);
}
PHOS_EXPORT cudaError_t cudaSetValidDevices(int* device_arr, int len) {
  if (len < 0 || (len > 0 && device_arr == nullptr)) return SetError(cudaErrorInvalidValue);
  for (int i = 0; i < len; ++i) {
    if (!IsCurrentDevice(device_arr[i])) return SetError(cudaErrorInvalidDevice);
  }
  return cudaSuccess;
}

// ---- function identity
PHOS_EXPORT cudaError_t cudaFuncGetName(const char** name, const void* func) {
  if (name == nullptr || func == nullptr) return SetError(cudaErrorInvalidValue);
  const std::vector<ParamSlot>* params = nullptr;
  bool known = false;
  if (!FunctionInfo(func, name, &params, &known)) return SetError(cudaErrorInvalidDeviceFunction);
  return cudaSuccess;
}
PHOS_EXPORT CUresult cuFuncGetName(const char** name, CUfunction hfunc) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (name == nullptr || hfunc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const std::vector<ParamSlot>* params = nullptr;
  bool known = false;
  return FunctionInfo(hfunc, name, &params, &known) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}
PHOS_EXPORT cudaError_t cudaFuncGetParamInfo(const void* func, size_t paramIndex, size_t* paramOffset,
                                             size_t* paramSize) {
  const char* name = nullptr;
  const std::vector<ParamSlot>* params = nullptr;
  bool known = false;
  if (func == nullptr || !FunctionInfo(func, &name, &params, &known)) return SetError(cudaErrorInvalidDeviceFunction);
  if (!known || paramIndex >= params->size()) return SetError(cudaErrorInvalidValue);
  if (paramOffset) *paramOffset = (*params)[paramIndex].offset;
  if (paramSize) *paramSize = (*params)[paramIndex].size;
  return cudaSuccess;
}
PHOS_EXPORT CUresult cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t* paramOffset, size_t* paramSize) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  const char* name = nullptr;
  const std::vector<ParamSlot>* params = nullptr;
  bool known = false;
  if (func == nullptr || !FunctionInfo(func, &name, &params, &known)) return CUDA_ERROR_INVALID_HANDLE;
  if (!known || paramIndex >= params->size()) return CUDA_ERROR_INVALID_VALUE;
  if (paramOffset) *paramOffset = (*params)[paramIndex].offset;
  if (paramSize) *paramSize = (*params)[paramIndex].size;
  return CUDA_SUCCESS;
}
PHOS_EXPORT CUresult cuFuncGetModule(CUmodule* hmod, CUfunction hfunc) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (hmod == nullptr) return CUDA_ERROR_INVALID_VALUE;
  DriverFunctionInfo info;
  if (!DescribeDriverFunction(hfunc, &info)) return CUDA_ERROR_INVALID_HANDLE;
  *hmod = info.module;
  return CUDA_SUCCESS;
}

// ---- hints
PHOS_EXPORT cudaError_t cudaDeviceGetSharedMemConfig(cudaSharedMemConfig* pConfig) {
  if (pConfig == nullptr) return SetError(cudaErrorInvalidValue);
  *pConfig = cudaSharedMemBankSizeFourByte;
  return cudaSuccess;
}
PHOS_EXPORT cudaError_t cudaDeviceSetSharedMemConfig(cudaSharedMemConfig config) {
  if (config < cudaSharedMemBankSizeDefault || config > cudaSharedMemBankSizeEightByte) {
    return SetError(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}
PHOS_EXPORT cudaError_t cudaFuncSetSharedMemConfig(const void* func, cudaSharedMemConfig config) {
  if (func == nullptr || (!IsKernelRec(func) && FindKernelByStub(func) == nullptr)) {
    return SetError(cudaErrorInvalidDeviceFunction);
  }
  return cudaDeviceSetSharedMemConfig(config);
}
PHOS_EXPORT CUresult cuCtxGetSharedMemConfig(CUsharedconfig* pConfig) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  if (pConfig == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pConfig = CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE;
  return CUDA_SUCCESS;
}
PHOS_EXPORT CUresult cuCtxSetSharedMemConfig(CUsharedconfig config) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  if (config < CU_SHARED_MEM_CONFIG_DEFAULT_BANK_SIZE || config > CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}
PHOS_EXPORT CUresult cuFuncSetSharedMemConfig(CUfunction hfunc, CUsharedconfig config) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  const char* name = nullptr;
  const std::vector<ParamSlot>* params = nullptr;
  bool known = false;
  if (hfunc == nullptr || !FunctionInfo(hfunc, &name, &params, &known)) return CUDA_ERROR_INVALID_HANDLE;
  return cuCtxSetSharedMemConfig(config);
}
PHOS_EXPORT cudaError_t cudaCtxResetPersistingL2Cache(void) { return cudaSuccess; }
PHOS_EXPORT CUresult cuCtxResetPersistingL2Cache(void) { return CheckContext(); }

// ---- logs and events
PHOS_EXPORT cudaError_t cudaLogsRegisterCallback(cudaLogsCallback_t callbackFunc, void* userData,
                                                 cudaLogsCallbackHandle* callback_out) {
  static_assert(sizeof(cudaLogsCallbackHandle) == sizeof(CUlogsCallbackHandle));
  CUresult r = cuLogsRegisterCallback(reinterpret_cast<CUlogsCallback>(callbackFunc), userData,
                                      reinterpret_cast<CUlogsCallbackHandle*>(callback_out));
  return r == CUDA_SUCCESS ? cudaSuccess : SetError(cudaErrorInvalidValue);
}
PHOS_EXPORT cudaError_t cudaLogsUnregisterCallback(cudaLogsCallbackHandle callback) {
  CUresult r = cuLogsUnregisterCallback(reinterpret_cast<CUlogsCallbackHandle>(callback));
  return r == CUDA_SUCCESS ? cudaSuccess : SetError(cudaErrorInvalidValue);
}
PHOS_EXPORT CUresult cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  return ToCu(cudaEventRecordWithFlags(reinterpret_cast<cudaEvent_t>(hEvent), reinterpret_cast<cudaStream_t>(hStream),
                                       flags));
}
PHOS_EXPORT CUresult cuEventRecordWithFlags_ptsz(CUevent hEvent, CUstream hStream, unsigned int flags) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  return ToCu(cudaEventRecordWithFlags_ptsz(reinterpret_cast<cudaEvent_t>(hEvent),
                                            reinterpret_cast<cudaStream_t>(hStream), flags));
}
