// The `cuda` backend: phos::backend::Backend over the CUDA driver API,
// dlopen'ed at start (docs/backends.md). CreateCudaBackend (backend_factory.h) is
// the only way in; it returns Unavailable, with the reason, where there is no
// driver or no GPU, so the same phosd binary runs on machines without one.
#pragma once

#include <cuda.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_collectives.h"
#include "backend/cuda/cuda_cublas.h"
#include "backend/cuda/cuda_driver.h"
#include "backend/cuda/cuda_process_health.h"

namespace phos::backend::cuda {

class CudaBackend final : public Backend {
 public:
  /// Loads the driver, enumerates devices and reads their properties; loads
  /// cuBLAS (`cublas_library`: empty = DefaultCublasLibrary(), "none" = skip)
  /// for the per-context handles, logging once and going on without it when
  /// it cannot be loaded; loads NCCL (`nccl_library`: empty =
  /// DefaultNcclLibrary(), "none" = skip) for the collectives, likewise.
  static Status Create(const std::string& driver_library, const std::string& cublas_library,
                       const std::string& nccl_library, std::unique_ptr<Backend>* out);
  ~CudaBackend() override;

  std::string name() const override { return "cuda"; }
  /// "CUDA driver 13.0; NCCL 2.28.9" (or "no NCCL ..."); after a kernel
  /// fault ended CUDA for phosd, also that, with what to do (ProcessHealth).
  std::string detail() const override;
  int device_count() const override { return static_cast<int>(devices_.size()); }
  Status GetDeviceProperties(int device, DeviceProperties* out) const override;
  /// cuDeviceGetAttribute, whatever the driver knows.
  Status GetDeviceAttribute(int device, int attribute, std::int64_t* out) const override;
  /// Uses the device's primary context (retained on first use, released with
  /// the backend): cuMemGetInfo needs a current context, and reporting must
  /// not depend on some session's context being alive.
  Status GetMemoryInfo(int device, std::uint64_t* free_bytes, std::uint64_t* total_bytes) const override;
  /// Unavailable, naming the cause, once a kernel fault ended CUDA for
  /// this process (ProcessHealth): cuCtxCreate would fail anyway.
  Status CreateContext(int device, std::unique_ptr<Context>* out) override;

 private:
  CudaBackend(std::shared_ptr<const CudaDriver> driver, std::shared_ptr<const CublasLibrary> cublas,
              std::shared_ptr<CudaCollectives> collectives, std::vector<CUdevice> devices,
              std::vector<DeviceProperties> properties);
  Status CheckDevice(int device) const;

  // Immutable after Create: read without a lock.
  const std::shared_ptr<const CudaDriver> driver_;
  const std::shared_ptr<const CublasLibrary> cublas_;  // null: no cuBLAS handles
  const std::shared_ptr<CudaCollectives> collectives_;  // thread-safe; shared with every context
  const std::vector<CUdevice> devices_;              // by ordinal
  const std::vector<DeviceProperties> properties_;   // by ordinal
  // Shared with every context; thread-safe.
  const std::shared_ptr<ProcessHealth> health_ = std::make_shared<ProcessHealth>();

  // primary_mutex_ guards primary_ (one lazily retained primary context per
  // device, nullptr until GetMemoryInfo first needs it).
  mutable std::mutex primary_mutex_;
  mutable std::vector<CUcontext> primary_;
};

/// Reads every DeviceProperties field of one device.
Status ReadDeviceProperties(const CudaDriver& driver, int ordinal, CUdevice device, DeviceProperties* out);

/// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi prints it.
std::string FormatUuid(const CUuuid& uuid);

}  // namespace phos::backend::cuda
