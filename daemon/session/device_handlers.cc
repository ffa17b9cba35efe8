// Device queries: kGetDeviceCount, kGetDeviceProperties,
// kDeviceGetAttribute, kMemGetInfo, the choice of the session's GPU
// (kSetDevice), and the device's printf output (kTakeDeviceOutput) (rows in
// interposer/protocol/calls.def).
//
// Every query names phosd's ordinal of a GPU (libphos.so maps the app's
// ordinals through CUDA_VISIBLE_DEVICES); any GPU of the daemon may be
// asked about. A session runs on ONE of them (st.device): its allocations,
// streams and modules all live in one backend context. kSetDevice moves a
// session that holds nothing yet to another GPU — what a process of a
// multi-GPU job does with cudaSetDevice(local_rank) before its first
// allocation; a process that already holds device state on one GPU is
// refused a second one by name (docs/interposer.md "Devices").
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
    w->attributes[a] = SessionDeviceAttribute(*st.backend, req.device, a, &v).ok() ? v : wire::kNoAttribute;
  }
  std::memcpy(wire::ChunkBytes(st.region_base, st.geometry, req.reply_chunk), w.get(), sizeof *w);
  out->Set(wire::ChunkReply{sizeof *w});
}

void HandleDeviceGetAttribute(SessionState& st, const CallContext& call, const wire::DeviceAttributeRequest& req,
                              Outcome* out) {
  if (!IsDaemonDevice(st, req.device, out)) return;
  std::int64_t v = 0;
  if (!SessionDeviceAttribute(*st.backend, req.device, req.attribute, &v).ok()) {
    return out->Fail(WireStatus::kInvalidValue, "device attribute " + std::to_string(req.attribute) +
                                                    " is not one CUDA defines for this device");
  }
  out->Set(wire::ValueReply{v});
}

static std::string DeviceStateHeld(const SessionState& st) {
  if (!st.buffers.empty()) return std::to_string(st.buffers.size()) + " allocation(s)";
  if (!st.streams.empty()) return std::to_string(st.streams.size()) + " stream(s)";
  if (!st.events.empty()) return std::to_string(st.events.size()) + " event(s)";
  if (!st.modules.empty() || !st.pending_images.empty()) return "loaded modules";
  if (!st.texture_objects.empty()) return "texture or surface objects";
  if (st.host_segments.count() != 0) return "pinned host memory";
  if (!st.comms.empty()) return "NCCL communicators";
  return "";
}

void HandleSetDevice(SessionState& st, const CallContext& call, const wire::DeviceRequest& req, Outcome* out) {
  if (!IsDaemonDevice(st, req.device, out)) return;
  if (req.device == st.device) return;
  if (const std::string held = DeviceStateHeld(st); !held.empty()) {
    return out->Fail(WireStatus::kNotSupported,
                     "cudaSetDevice to GPU " + std::to_string(req.device) + ": this process already holds " + held +
                         " on GPU " + std::to_string(st.device) +
                         "; a process under phos uses one GPU (call cudaSetDevice before its first allocation)");
  }
  CallView v = ViewOf(st, call);
  v.kind = AccessKind::kUnknown;  // the context changes under everything
  out->Fail(st.executor->Run(v, [&] { return MoveToDevice(st, req.device); }));
}

Status MoveToDevice(SessionState& st, int device) {
  if (device == st.device) return Status::Ok();
  if (!st.replace_context) return Status::FailedPrecondition("this session cannot change its GPU");
  const int old = st.device;
  st.device = device;
  Status r = st.replace_context();
  if (!r.ok()) st.device = old;  // the old context stays
  return r;
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
