// Device queries: kGetDeviceCount, kGetDeviceProperties,
// kDeviceGetAttribute, kMemGetInfo, the choice of the session's GPU
// (kSetDevice), and the device's printf output (kTakeDeviceOutput) (rows in
// interposer/protocol/calls.def).
//
// Every query names phosd's ordinal of a GPU (libphos.so maps the app's
// ordinals through CUDA_VISIBLE_DEVICES) as phosd numbered them when the
// process started (PhosdDevice translates them after a restore with
// --device-map); any GPU of the daemon may be asked about. A session has a
// context on each GPU its process uses (several_devices.cc): kSetDevice makes the one of the GPU named — by
// moving the session's only context while it holds nothing (what a rank
// process does with cudaSetDevice(local_rank) first), else by adding one
// (docs/interposer.md "Several GPUs in one process").
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

/// Whether `device` is one of phosd's GPUs; false after out->Fail.
bool IsDaemonDevice(const SessionState& st, int device, Outcome* out) {
  if (device >= 0 && device < st.backend->device_count()) return true;
  out->Fail(WireStatus::kInvalidDevice, "no device " + std::to_string(device) + " (phosd serves " +
                                            std::to_string(st.backend->device_count()) + ")");
  return false;
}

/// The properties of `device`; false after out->Fail.
bool GetProps(SessionState& st, int device, backend::DeviceProperties* props, Outcome* out) {
  if (!IsDaemonDevice(st, device, out)) return false;
  Status s = st.backend->GetDeviceProperties(device, props);
  if (!s.ok()) out->Fail(s);
  return s.ok();
}

}  // namespace

void HandleGetDeviceCount(SessionState& st, const CallContext& call, const wire::NoPayload& req, Outcome* out) {
  out->Set(wire::DeviceCountReply{st.backend->device_count(), 0});
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
  const int device = PhosdDevice(st, req.device);
  if (!GetProps(st, device, &d, out)) return;
  // Built here and copied whole: the chunk is the app's memory, read only
  // after this call completes.
  auto w = std::make_unique<wire::WireDeviceProps>();
  std::snprintf(w->name, sizeof w->name, "%s", d.name.c_str());
  std::snprintf(w->uuid, sizeof w->uuid, "%s", d.uuid.c_str());
  w->total_memory = d.total_memory;
  w->attributes[0] = wire::kNoAttribute;
  for (int a = 1; a < wire::kDeviceAttributeSlots; ++a) {
    std::int64_t v = 0;
    w->attributes[a] = SessionDeviceAttribute(*st.backend, device, a, &v).ok() ? v : wire::kNoAttribute;
  }
  std::memcpy(wire::ChunkBytes(st.region_base, st.geometry, req.reply_chunk), w.get(), sizeof *w);
  out->Set(wire::ChunkReply{sizeof *w});
}

void HandleDeviceGetAttribute(SessionState& st, const CallContext& call, const wire::DeviceAttributeRequest& req,
                              Outcome* out) {
  const int device = PhosdDevice(st, req.device);
  if (!IsDaemonDevice(st, device, out)) return;
  std::int64_t v = 0;
  if (!SessionDeviceAttribute(*st.backend, device, req.attribute, &v).ok()) {
    return out->Fail(WireStatus::kInvalidValue, "device attribute " + std::to_string(req.attribute) +
                                                    " is not one CUDA defines for this device");
  }
  out->Set(wire::ValueReply{v});
}

void HandleSetDevice(SessionState& st, const CallContext& call, const wire::DeviceRequest& req, Outcome* out) {
  const int device = PhosdDevice(st, req.device);
  if (!IsDaemonDevice(st, device, out)) return;
  if (ContextOf(st, device) != nullptr) return;
  // The context is made now, so that a GPU that cannot have one fails
  // cudaSetDevice rather than the next call; the thread's later calls name
  // the GPU themselves (the frame's device byte).
  CallView v = ViewOf(st, call);
  v.kind = AccessKind::kUnknown;  // a move replaces the context under everything
  out->Fail(st.executor->Run(v, [&] { return SelectCallDevice(st, device); }));
}

Status MoveToDevice(SessionState& st, int device) {
  if (device == st.device) return Status::Ok();
  if (!st.replace_context) return Status::FailedPrecondition("this session cannot change its GPU");
  const int old = st.device;
  st.device = device;
  Status r = st.replace_context();
  if (!r.ok()) st.device = old;  // the old context stays
  // Whatever the caller makes next is made on the (new) home GPU: a restore
  // recreating streams, or the call that named this GPU.
  st.call_device = st.device;
  return r;
}

void HandleTakeDeviceOutput(SessionState& st, const CallContext& call, const wire::DeviceOutputRequest& req,
                            Outcome* out) {
  if (req.reply_chunk >= st.geometry.chunk_count) {
    return out->Fail(WireStatus::kInvalidValue, "bad reply chunk " + std::to_string(req.reply_chunk));
  }
  std::string text;
  HomeContext(st)->TakeDeviceOutput(st.geometry.chunk_bytes, &text);
  for (const auto& [device, ctx] : st.other_contexts) {
    if (text.size() >= st.geometry.chunk_bytes) break;
    std::string more;
    ctx->TakeDeviceOutput(st.geometry.chunk_bytes - text.size(), &more);
    text += more;
  }
  std::memcpy(wire::ChunkBytes(st.region_base, st.geometry, req.reply_chunk), text.data(), text.size());
  out->Set(wire::ChunkReply{text.size()});
}

}  // namespace phos::session
