#include "backend/sim/sim_backend.h"

#include <cmath>
#include <cstdio>
#include <utility>

#include "backend/backend_factory.h"
#include "backend/sim/sim_context.h"
#include "backend/sim/sim_device_attributes.h"

namespace phos::backend {
namespace sim {
namespace {

std::string Hex(std::uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

Status ValidateOptions(const SimOptions& o) {
  if (o.device_count < 1 || o.device_count > 64) {
    return Status::InvalidArgument("sim backend: device_count must be 1..64 (got " +
                                   std::to_string(o.device_count) + ")");
  }
  if (o.memory_bytes == 0) {
    return Status::InvalidArgument("sim backend: memory_bytes must be positive");
  }
  if (!(o.link_gbps >= 0.0) || !std::isfinite(o.link_gbps)) {
    return Status::InvalidArgument("sim backend: link_gbps must be >= 0 (0 = unthrottled)");
  }
  if (o.copy_engines < 1 || o.copy_engines > 64) {
    return Status::InvalidArgument("sim backend: copy_engines must be 1..64 (got " +
                                   std::to_string(o.copy_engines) + ")");
  }
  return Status::Ok();
}

}  // namespace

DeviceProperties ModelDeviceProperties(const SimOptions& options, int ordinal) {
  DeviceProperties p;
  p.ordinal = ordinal;
  p.name = "NVIDIA H100 80GB HBM3 (phos sim)";
  char uuid[64];
  // The ordinal early in the text, so a short prefix names one GPU (as
  // CUDA_VISIBLE_DEVICES=GPU-<prefix> allows).
  std::snprintf(uuid, sizeof uuid, "GPU-5105d0e0-%04x-4000-8000-000000000000", ordinal & 0xffff);
  p.uuid = uuid;
  p.total_memory = options.memory_bytes;
  p.compute_capability_major = 9;
  p.compute_capability_minor = 0;
  p.multiprocessor_count = 132;
  p.max_threads_per_block = 1024;
  p.max_threads_per_multiprocessor = 2048;
  p.max_block_dim[0] = 1024;
  p.max_block_dim[1] = 1024;
  p.max_block_dim[2] = 64;
  p.max_grid_dim[0] = 2147483647;
  p.max_grid_dim[1] = 65535;
  p.max_grid_dim[2] = 65535;
  p.warp_size = 32;
  p.shared_memory_per_block = 48 * 1024;
  p.shared_memory_per_block_optin = 227 * 1024;
  p.shared_memory_per_multiprocessor = 228 * 1024;
  p.registers_per_block = 65536;
  p.clock_rate_khz = 1980000;
  p.memory_clock_rate_khz = 2619000;
  p.memory_bus_width_bits = 5120;
  p.l2_cache_bytes = 50 * 1024 * 1024;
  p.async_engine_count = options.copy_engines;
  p.pci_bus_id = 0x18 + ordinal;
  p.pci_device_id = 0;
  p.pci_domain_id = 0;
  p.total_constant_memory = 64 * 1024;
  p.concurrent_kernels = 1;
  p.unified_addressing = 1;
  return p;
}

SimBackend::SimBackend(std::shared_ptr<SimShared> shared) : shared_(std::move(shared)) {}

std::string SimBackend::detail() const {
  const SimOptions& o = shared_->options;
  char link[64] = "unthrottled";
  if (o.link_gbps > 0) std::snprintf(link, sizeof link, "%g GB/s per engine", o.link_gbps);
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "phos sim: %d x H100 SXM model, %.1f GiB each, device VA [%s, %s), "
                "%d copy engines, link %s",
                o.device_count, static_cast<double>(o.memory_bytes) / (1ull << 30),
                Hex(o.va_base).c_str(), Hex(o.va_base + o.va_size).c_str(), o.copy_engines,
                link);
  return buf;
}

Status SimBackend::CheckDevice(int device) const {
  if (device < 0 || device >= shared_->options.device_count) {
    return Status::InvalidArgument("no sim device " + std::to_string(device) + " (there are " +
                                   std::to_string(shared_->options.device_count) + ")");
  }
  return Status::Ok();
}

Status SimBackend::GetDeviceProperties(int device, DeviceProperties* out) const {
  PHOS_RETURN_IF_ERROR(CheckDevice(device));
  if (out == nullptr) return Status::InvalidArgument("GetDeviceProperties: null output pointer");
  *out = shared_->devices[static_cast<std::size_t>(device)];
  return Status::Ok();
}

Status SimBackend::GetDeviceAttribute(int device, int attribute, std::int64_t* out) const {
  PHOS_RETURN_IF_ERROR(CheckDevice(device));
  return ModelDeviceAttribute(shared_->devices[static_cast<std::size_t>(device)], attribute, out);
}

Status SimBackend::GetMemoryInfo(int device, std::uint64_t* free_bytes,
                                 std::uint64_t* total_bytes) const {
  PHOS_RETURN_IF_ERROR(CheckDevice(device));
  if (free_bytes == nullptr || total_bytes == nullptr) {
    return Status::InvalidArgument("GetMemoryInfo: null output pointer");
  }
  shared_->memory->MemoryInfo(device, free_bytes, total_bytes);
  return Status::Ok();
}

Status SimBackend::CreateContext(int device, std::unique_ptr<Context>* out) {
  PHOS_RETURN_IF_ERROR(CheckDevice(device));
  if (out == nullptr) return Status::InvalidArgument("CreateContext: null output pointer");
  const std::uint64_t id = shared_->next_context_id.fetch_add(1);
  out->reset(new SimContext(shared_, device, id));
  return Status::Ok();
}

}  // namespace sim

Status CreateSimBackend(const SimOptions& options, std::unique_ptr<Backend>* out) {
  if (out == nullptr) return Status::InvalidArgument("CreateSimBackend: null output pointer");
  PHOS_RETURN_IF_ERROR(sim::ValidateOptions(options));
  auto shared = std::make_shared<sim::SimShared>(options);
  PHOS_RETURN_IF_ERROR(sim::SimAddressSpace::Reserve(options.va_base, options.va_size,
                                                     options.device_count,
                                                     options.memory_bytes, &shared->memory));
  for (int d = 0; d < options.device_count; ++d) {
    shared->devices.push_back(sim::ModelDeviceProperties(options, d));
    shared->engines.push_back(
        std::make_unique<sim::SimCopyEngines>(options.copy_engines, options.link_gbps));
  }
  *out = std::make_unique<sim::SimBackend>(std::move(shared));
  return Status::Ok();
}

}  // namespace phos::backend
