// Device queries: kGetDeviceCount, kGetDeviceProperties,
// kDeviceGetAttribute, kMemGetInfo (rows in interposer/protocol/calls.def).
//
// A session sees exactly one device, ordinal 0 = the GPU it is bound to
// (st.device), like CUDA_VISIBLE_DEVICES=<that GPU>: its allocations,
// streams and modules all live in one backend context, so offering the
// other GPUs of a multi-GPU daemon would promise what cudaSetDevice(1)
// cannot keep (docs/interposer.md "Devices").
#include <cstdio>
#include <cstring>
#include <string>

#include "session/handlers.h"

namespace phos::session {

using wire::WireStatus;

namespace {

/// The properties of `device` (which must be 0); false after out->Fail.
bool GetProps(SessionState& st, int device, backend::DeviceProperties* props, Outcome* out) {
  if (device != 0) {
    out->Fail(WireStatus::kInvalidDevice,
              "no device " + std::to_string(device) + " (a phos session sees one device, ordinal 0)");
    return false;
  }
  Status s = st.backend->GetDeviceProperties(st.device, props);
  if (!s.ok()) out->Fail(s);
  return s.ok();
}

}  // namespace

void HandleGetDeviceCount(SessionState& st, const CallContext& call, const wire::NoPayload& req, Outcome* out) {
  out->Set(wire::DeviceCountReply{1, 0});
}

void HandleMemGetInfo(SessionState& st, const CallContext& call, const wire::NoPayload& req, Outcome* out) {
  wire::MemGetInfoReply r{};
  Status s = st.ctx->GetMemoryInfo(&r.free_bytes, &r.total_bytes);
  if (!s.ok()) return out->Fail(s);
  out->Set(r);
}

void HandleGetDeviceProperties(SessionState& st, const CallContext& call, const wire::DevicePropsRequest& req,
                               Outcome* out) {
  if (req.reply_chunk >= st.geometry.chunk_count || st.geometry.chunk_bytes < sizeof(wire::WireDeviceProps)) {
    return out->Fail(WireStatus::kInvalidValue, "bad reply chunk " + std::to_string(req.reply_chunk));
  }
  backend::DeviceProperties d;
  if (!GetProps(st, req.device, &d, out)) return;
  wire::WireDeviceProps w{};
  std::snprintf(w.name, sizeof w.name, "%s", d.name.c_str());
  std::snprintf(w.uuid, sizeof w.uuid, "%s", d.uuid.c_str());
  w.total_memory = d.total_memory;
  w.shared_memory_per_block = d.shared_memory_per_block;
  w.shared_memory_per_block_optin = d.shared_memory_per_block_optin;
  w.shared_memory_per_multiprocessor = d.shared_memory_per_multiprocessor;
  w.total_constant_memory = d.total_constant_memory;
  w.ordinal = d.ordinal;
  w.compute_capability_major = d.compute_capability_major;
  w.compute_capability_minor = d.compute_capability_minor;
  w.multiprocessor_count = d.multiprocessor_count;
  w.max_threads_per_block = d.max_threads_per_block;
  w.max_threads_per_multiprocessor = d.max_threads_per_multiprocessor;
  for (int i = 0; i < 3; ++i) {
    w.max_block_dim[i] = d.max_block_dim[i];
    w.max_grid_dim[i] = d.max_grid_dim[i];
  }
  w.warp_size = d.warp_size;
  w.registers_per_block = d.registers_per_block;
  w.clock_rate_khz = d.clock_rate_khz;
  w.memory_clock_rate_khz = d.memory_clock_rate_khz;
  w.memory_bus_width_bits = d.memory_bus_width_bits;
  w.l2_cache_bytes = d.l2_cache_bytes;
  w.async_engine_count = d.async_engine_count;
  w.pci_bus_id = d.pci_bus_id;
  w.pci_device_id = d.pci_device_id;
  w.pci_domain_id = d.pci_domain_id;
  w.concurrent_kernels = d.concurrent_kernels;
  w.unified_addressing = d.unified_addressing;
  std::memcpy(wire::ChunkBytes(st.region_base, st.geometry, req.reply_chunk), &w, sizeof w);
  out->Set(wire::ChunkReply{sizeof w});
}

void HandleDeviceGetAttribute(SessionState& st, const CallContext& call, const wire::DeviceAttributeRequest& req,
                              Outcome* out) {
  backend::DeviceProperties d;
  if (!GetProps(st, req.device, &d, out)) return;
  int64_t v = 0;
  switch (req.attribute) {
    case 1: v = d.max_threads_per_block; break;
    case 2: case 3: case 4: v = d.max_block_dim[req.attribute - 2]; break;
    case 5: case 6: case 7: v = d.max_grid_dim[req.attribute - 5]; break;
    case 8: v = static_cast<int64_t>(d.shared_memory_per_block); break;
    case 9: v = static_cast<int64_t>(d.total_constant_memory); break;
    case 10: v = d.warp_size; break;
    case 12: v = d.registers_per_block; break;
    case 13: v = d.clock_rate_khz; break;
    case 16: v = d.multiprocessor_count; break;
    case 31: v = d.concurrent_kernels; break;
    case 33: v = d.pci_bus_id; break;
    case 34: v = d.pci_device_id; break;
    case 36: v = d.memory_clock_rate_khz; break;
    case 37: v = d.memory_bus_width_bits; break;
    case 38: v = d.l2_cache_bytes; break;
    case 39: v = d.max_threads_per_multiprocessor; break;
    case 40: v = d.async_engine_count; break;
    case 41: v = d.unified_addressing; break;
    case 50: v = d.pci_domain_id; break;
    case 75: v = d.compute_capability_major; break;
    case 76: v = d.compute_capability_minor; break;
    case 81: v = static_cast<int64_t>(d.shared_memory_per_multiprocessor); break;
    case 97: v = static_cast<int64_t>(d.shared_memory_per_block_optin); break;
    default:
      return out->Fail(WireStatus::kInvalidValue,
                       "device attribute " + std::to_string(req.attribute) + " is not supported by phos");
  }
  out->Set(wire::ValueReply{v});
}

}  // namespace phos::session
