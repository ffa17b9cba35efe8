// Device queries: kGetDeviceCount, kGetDeviceProperties,
// kDeviceGetAttribute, kMemGetInfo, and the device's printf output
// (kTakeDeviceOutput) (rows in interposer/protocol/calls.def).
//
// A session sees exactly one device, ordinal 0 = the GPU it is bound to
// (st.device), like CUDA_VISIBLE_DEVICES=<that GPU>: its allocations,
// streams and modules all live in one backend context, so offering the
// other GPUs of a multi-GPU daemon would promise what cudaSetDevice(1)
// cannot keep (docs/interposer.md "Devices").
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "phos_device_attributes.h"
#include "session/device_attributes.h"
#include "session/handlers.h"

namespace phos::session {

using wire::WireStatus;

static_assert(interposer::kDeviceAttributeSlots <= wire::kDeviceAttributeSlots,
              "CUDA's headers define attribute numbers beyond WireDeviceProps::attributes: grow "
              "wire::kDeviceAttributeSlots");

namespace {

/// Whether the app named its device (ordinal 0); false after out->Fail.
bool IsSessionDevice(int device, Outcome* out) {
  if (device == 0) return true;
  out->Fail(WireStatus::kInvalidDevice,
            "no device " + std::to_string(device) + " (a phos session sees one device, ordinal 0)");
  return false;
}

/// The properties of `device` (which must be 0); false after out->Fail.
bool GetProps(SessionState& st, int device, backend::DeviceProperties* props, Outcome* out) {
  if (!IsSessionDevice(device, out)) return false;
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
  // Built here and copied whole: the chunk is the app's memory, read only
  // after this call completes.
  auto w = std::make_unique<wire::WireDeviceProps>();
  std::snprintf(w->name, sizeof w->name, "%s", d.name.c_str());
  std::snprintf(w->uuid, sizeof w->uuid, "%s", d.uuid.c_str());
  w->total_memory = d.total_memory;
  w->attributes[0] = wire::kNoAttribute;
  for (int a = 1; a < wire::kDeviceAttributeSlots; ++a) {
    std::int64_t v = 0;
    w->attributes[a] = SessionDeviceAttribute(*st.backend, st.device, a, &v).ok() ? v : wire::kNoAttribute;
  }
  std::memcpy(wire::ChunkBytes(st.region_base, st.geometry, req.reply_chunk), w.get(), sizeof *w);
  out->Set(wire::ChunkReply{sizeof *w});
}

void HandleDeviceGetAttribute(SessionState& st, const CallContext& call, const wire::DeviceAttributeRequest& req,
                              Outcome* out) {
  if (!IsSessionDevice(req.device, out)) return;
  std::int64_t v = 0;
  if (!SessionDeviceAttribute(*st.backend, st.device, req.attribute, &v).ok()) {
    return out->Fail(WireStatus::kInvalidValue, "device attribute " + std::to_string(req.attribute) +
                                                    " is not one CUDA defines for this device");
  }
  out->Set(wire::ValueReply{v});
}

void HandleTakeDeviceOutput(SessionState& st, const CallContext& call, const wire::DeviceOutputRequest& req,
                            Outcome* out) {
  if (req.reply_chunk >= st.geometry.chunk_count) {
    return out->Fail(WireStatus::kInvalidValue, "bad reply chunk " + std::to_string(req.reply_chunk));
  }
  std::string text;
  st.ctx->TakeDeviceOutput(st.geometry.chunk_bytes, &text);
  std::memcpy(wire::ChunkBytes(st.region_base, st.geometry, req.reply_chunk), text.data(), text.size());
  out->Set(wire::ChunkReply{text.size()});
}

}  // namespace phos::session
