#include "backend/cuda/cuda_backend.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

#include <spdlog/spdlog.h>

#include "backend/backend_factory.h"
#include "backend/cuda/cuda_context.h"
#include "backend/cuda/cuda_errors.h"

namespace phos::backend {

Status CreateCudaBackend(const CudaOptions& options, std::unique_ptr<Backend>* out) {
  // Read by the driver at cuInit, which LoadCudaDriver calls next; phosd
  // creates its backend before it starts any thread, so setenv is safe here.
  if (options.module_loading == "eager" || options.module_loading == "lazy") {
    const std::string value = options.module_loading == "eager" ? "EAGER" : "LAZY";
    if (const char* env = std::getenv("CUDA_MODULE_LOADING"); env != nullptr && *env != '\0') {
      if (value != env) {
        spdlog::info("CUDA_MODULE_LOADING={} from the environment (not {}: the environment wins)", env, value);
      }
    } else {
      setenv("CUDA_MODULE_LOADING", value.c_str(), 1);
    }
  } else if (!options.module_loading.empty()) {
    return Status::InvalidArgument("cuda module loading '" + options.module_loading + "': eager, lazy or empty");
  }
  return cuda::CudaBackend::Create(options.driver_library, options.cublas_library, options.nccl_library, out);
}

namespace cuda {

std::string FormatUuid(const CUuuid& uuid) {
  const auto* b = reinterpret_cast<const unsigned char*>(uuid.bytes);
  char buf[64];
  std::snprintf(buf, sizeof buf,
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  return buf;
}

Status ReadDeviceProperties(const CudaDriver& d, int ordinal, CUdevice device, DeviceProperties* out) {
  DeviceProperties p;
  p.ordinal = ordinal;
  char name[256] = {};
  PHOS_RETURN_IF_ERROR(CudaStatus(d.DeviceGetName(name, sizeof name - 1, device), "cuDeviceGetName", &d));
  p.name = name;
  std::size_t total = 0;
  PHOS_RETURN_IF_ERROR(CudaStatus(d.DeviceTotalMem(&total, device), "cuDeviceTotalMem", &d));
  p.total_memory = total;
  CUuuid uuid = {};
  PHOS_RETURN_IF_ERROR(CudaStatus(d.DeviceGetUuid(&uuid, device), "cuDeviceGetUuid", &d));
  p.uuid = FormatUuid(uuid);

  Status status;
  auto attr = [&](CUdevice_attribute a, const char* what) -> int {
    int v = 0;
    if (status.ok()) {
      CUresult rc = d.DeviceGetAttribute(&v, a, device);
      if (rc != CUDA_SUCCESS) status = CudaStatus(rc, std::string("cuDeviceGetAttribute(") + what + ")", &d);
    }
    return v;
  };
#define PHOS_ATTR(x) attr(CU_DEVICE_ATTRIBUTE_##x, #x)
  p.compute_capability_major = PHOS_ATTR(COMPUTE_CAPABILITY_MAJOR);
  p.compute_capability_minor = PHOS_ATTR(COMPUTE_CAPABILITY_MINOR);
  p.multiprocessor_count = PHOS_ATTR(MULTIPROCESSOR_COUNT);
  p.max_threads_per_block = PHOS_ATTR(MAX_THREADS_PER_BLOCK);
  p.max_threads_per_multiprocessor = PHOS_ATTR(MAX_THREADS_PER_MULTIPROCESSOR);
  p.max_block_dim[0] = PHOS_ATTR(MAX_BLOCK_DIM_X);
  p.max_block_dim[1] = PHOS_ATTR(MAX_BLOCK_DIM_Y);
  p.max_block_dim[2] = PHOS_ATTR(MAX_BLOCK_DIM_Z);
  p.max_grid_dim[0] = PHOS_ATTR(MAX_GRID_DIM_X);
  p.max_grid_dim[1] = PHOS_ATTR(MAX_GRID_DIM_Y);
  p.max_grid_dim[2] = PHOS_ATTR(MAX_GRID_DIM_Z);
  p.warp_size = PHOS_ATTR(WARP_SIZE);
  p.shared_memory_per_block = static_cast<std::uint64_t>(PHOS_ATTR(MAX_SHARED_MEMORY_PER_BLOCK));
  p.shared_memory_per_block_optin = static_cast<std::uint64_t>(PHOS_ATTR(MAX_SHARED_MEMORY_PER_BLOCK_OPTIN));
  p.shared_memory_per_multiprocessor =
      static_cast<std::uint64_t>(PHOS_ATTR(MAX_SHARED_MEMORY_PER_MULTIPROCESSOR));
  p.registers_per_block = PHOS_ATTR(MAX_REGISTERS_PER_BLOCK);
  p.clock_rate_khz = PHOS_ATTR(CLOCK_RATE);
  p.memory_clock_rate_khz = PHOS_ATTR(MEMORY_CLOCK_RATE);
  p.memory_bus_width_bits = PHOS_ATTR(GLOBAL_MEMORY_BUS_WIDTH);
  p.l2_cache_bytes = PHOS_ATTR(L2_CACHE_SIZE);
  p.async_engine_count = PHOS_ATTR(ASYNC_ENGINE_COUNT);
  p.pci_bus_id = PHOS_ATTR(PCI_BUS_ID);
  p.pci_device_id = PHOS_ATTR(PCI_DEVICE_ID);
  p.pci_domain_id = PHOS_ATTR(PCI_DOMAIN_ID);
  p.total_constant_memory = static_cast<std::uint64_t>(PHOS_ATTR(TOTAL_CONSTANT_MEMORY));
  p.concurrent_kernels = PHOS_ATTR(CONCURRENT_KERNELS);
  p.unified_addressing = PHOS_ATTR(UNIFIED_ADDRESSING);
#undef PHOS_ATTR
  PHOS_RETURN_IF_ERROR(status);
  *out = std::move(p);
  return Status::Ok();
}

Status CudaBackend::Create(const std::string& driver_library, const std::string& cublas_library,
                           const std::string& nccl_library, std::unique_ptr<Backend>* out) {
  std::shared_ptr<const CudaDriver> driver;
  PHOS_RETURN_IF_ERROR(LoadCudaDriver(driver_library, &driver));
  const CudaDriver& d = *driver;

  int count = 0;
  CUresult rc = d.DeviceGetCount(&count);
  if (rc != CUDA_SUCCESS) {
    return Status::Unavailable(CudaStatus(rc, "cuDeviceGetCount failed", &d).message());
  }
  if (count <= 0) {
    return Status::Unavailable("CUDA driver " + DriverVersionText(d.version) + " found no GPU (cuDeviceGetCount = 0)");
  }
  std::vector<CUdevice> devices(static_cast<std::size_t>(count));
  std::vector<DeviceProperties> properties(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) {
    rc = d.DeviceGet(&devices[i], i);
    if (rc != CUDA_SUCCESS) return CudaStatus(rc, "cuDeviceGet(" + std::to_string(i) + ")", &d);
    PHOS_RETURN_IF_ERROR(ReadDeviceProperties(d, i, devices[i], &properties[i]));
  }
  // cuBLAS is optional: without it contexts work, they just carry no
  // cuBLAS handle. Said once, here, not per context.
  std::shared_ptr<const CublasLibrary> cublas;
  if (cublas_library != "none") {
    const std::string lib = cublas_library.empty() ? DefaultCublasLibrary() : cublas_library;
    Status cs = LoadCublas(lib, &cublas);
    if (!cs.ok()) {
      spdlog::warn("cuda backend: no cuBLAS handles in contexts ({}); install the CUDA toolkit's "
                   "libcublas or set its path to get them",
                   cs.message());
      cublas.reset();
    }
  }
  // NCCL is optional too: without it every ncclCommInitRank is refused
  // with the reason. Loading it starts nothing (its threads start with the
  // first communicator).
  std::shared_ptr<const NcclLibrary> nccl;
  std::string nccl_why = "--nccl-library none";
  if (nccl_library != "none") {
    const std::string lib = nccl_library.empty() ? DefaultNcclLibrary() : nccl_library;
    Status ns = LoadNccl(lib, &nccl);
    if (ns.ok()) {
      spdlog::info("cuda backend: NCCL {} from {}", NcclVersionText(nccl->version), lib);
    } else {
      nccl_why = ns.message();
      spdlog::warn("cuda backend: no NCCL collectives ({}); install NCCL or give its path with --nccl-library", nccl_why);
      nccl.reset();
    }
  }
  auto collectives = std::make_shared<CudaCollectives>(driver, std::move(nccl), std::move(nccl_why));
  out->reset(new CudaBackend(std::move(driver), std::move(cublas), std::move(collectives), std::move(devices),
                             std::move(properties)));
  return Status::Ok();
}

CudaBackend::CudaBackend(std::shared_ptr<const CudaDriver> driver, std::shared_ptr<const CublasLibrary> cublas,
                         std::shared_ptr<CudaCollectives> collectives, std::vector<CUdevice> devices,
                         std::vector<DeviceProperties> properties)
    : driver_(std::move(driver)),
      cublas_(std::move(cublas)),
      collectives_(std::move(collectives)),
      devices_(std::move(devices)),
      properties_(std::move(properties)),
      primary_(devices_.size(), nullptr) {}

CudaBackend::~CudaBackend() {
  std::lock_guard<std::mutex> lock(primary_mutex_);
  for (std::size_t i = 0; i < primary_.size(); ++i) {
    if (primary_[i] != nullptr) driver_->DevicePrimaryCtxRelease(devices_[i]);
  }
}

std::string CudaBackend::detail() const {
  std::string d = "CUDA driver " + DriverVersionText(driver_->version);
  const NcclLibrary* nccl = collectives_->nccl();
  d += nccl != nullptr ? "; NCCL " + NcclVersionText(nccl->version) : "; no NCCL (collectives refused)";
  if (Status h = health_->Check(); !h.ok()) d += "; GPU LOST: " + h.message();
  return d;
}

Status CudaBackend::CheckDevice(int device) const {
  if (device < 0 || device >= device_count()) {
    return Status::InvalidArgument("no GPU " + std::to_string(device) + " (this machine has " +
                                   std::to_string(device_count()) + ")");
  }
  return Status::Ok();
}

Status CudaBackend::GetDeviceProperties(int device, DeviceProperties* out) const {
  PHOS_RETURN_IF_ERROR(CheckDevice(device));
  *out = properties_[static_cast<std::size_t>(device)];
  return Status::Ok();
}

Status CudaBackend::GetDeviceAttribute(int device, int attribute, std::int64_t* out) const {
  PHOS_RETURN_IF_ERROR(CheckDevice(device));
  if (out == nullptr) return Status::InvalidArgument("GetDeviceAttribute: null output pointer");
  int v = 0;
  CUresult rc = driver_->DeviceGetAttribute(&v, static_cast<CUdevice_attribute>(attribute),
                                            devices_[static_cast<std::size_t>(device)]);
  if (rc != CUDA_SUCCESS) {
    return CudaStatus(rc, "cuDeviceGetAttribute(" + std::to_string(attribute) + ")", driver_.get());
  }
  *out = v;
  return Status::Ok();
}

Status CudaBackend::GetMemoryInfo(int device, std::uint64_t* free_bytes, std::uint64_t* total_bytes) const {
  PHOS_RETURN_IF_ERROR(CheckDevice(device));
  const auto i = static_cast<std::size_t>(device);
  CUcontext ctx = nullptr;
  {
    std::lock_guard<std::mutex> lock(primary_mutex_);
    if (primary_[i] == nullptr) {
      CUresult rc = driver_->DevicePrimaryCtxRetain(&primary_[i], devices_[i]);
      if (rc != CUDA_SUCCESS) {
        primary_[i] = nullptr;
        return CudaStatus(rc, "cuDevicePrimaryCtxRetain", driver_.get());
      }
    }
    ctx = primary_[i];
  }
  PHOS_RETURN_IF_ERROR(CudaStatus(driver_->CtxSetCurrent(ctx), "cuCtxSetCurrent", driver_.get()));
  std::size_t free_b = 0, total_b = 0;
  PHOS_RETURN_IF_ERROR(CudaStatus(driver_->MemGetInfo(&free_b, &total_b), "cuMemGetInfo", driver_.get()));
  if (free_bytes) *free_bytes = free_b;
  if (total_bytes) *total_bytes = total_b;
  return Status::Ok();
}

Status CudaBackend::CreateContext(int device, std::unique_ptr<Context>* out) {
  PHOS_RETURN_IF_ERROR(CheckDevice(device));
  PHOS_RETURN_IF_ERROR(health_->Check());
  return CudaContext::Create(driver_, cublas_, health_, collectives_, device, devices_[static_cast<std::size_t>(device)],
                             out);
}

}  // namespace cuda
}  // namespace phos::backend
