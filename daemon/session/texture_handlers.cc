// Texture and surface objects: kCreateTextureObject, kCreateSurfaceObject,
// kDestroyTextureObject, kDestroySurfaceObject (rows in
// interposer/protocol/calls.def; the descriptor is protocol/texture_desc.h).
//
// The app is untrusted: a descriptor is checked (wire::CheckTextureDesc)
// and its texels must lie inside ONE buffer of this session, so a kernel
// sampling it can never reach another session's memory through it (the sim
// also bounds every texel read by the launching context's allocations).
#include <spdlog/fmt/fmt.h>

#include <string>

#include "session/handlers.h"

namespace phos::session {

using wire::WireStatus;

namespace {

bool IsSurfaceRow(const CallContext& call) {
  return call.api() == wire::op::kCreateSurfaceObject || call.api() == wire::op::kDestroySurfaceObject;
}

}  // namespace

Status CreateTextureObjectOf(SessionState& st, const wire::TextureDesc& desc, bool surface, uint64_t requested,
                             uint64_t* handle, const CallView* admit) {
  const char* what = surface ? "surface object" : "texture object";
  uint64_t span = 0;
  std::string why;
  if (!wire::CheckTextureDesc(desc, surface, &span, &why)) {
    return Status::InvalidArgument(std::string(what) + ": " + why);
  }
  uint64_t start = 0, size = 0;
  if (!FindHoldingRange(st.buffers, desc.base, span, &start, &size)) {
    return Status::InvalidArgument(fmt::format("{}: its texels [0x{:x}, +{}) are not inside one buffer of this session",
                                               what, desc.base, span));
  }
  PHOS_RETURN_IF_ERROR(CheckRoom(st.texture_objects.size(), "texture and surface objects"));
  uint64_t h = 0;
  PHOS_RETURN_IF_ERROR(RunMaybeAdmitted(st, admit, [&] { return st.ctx->CreateTextureObject(desc, surface, requested, &h); }));
  if (h == 0 || st.texture_objects.count(h)) {
    (void)st.ctx->DestroyTextureObject(h);
    return Status::Internal(fmt::format("{}: the backend answered handle {} (0 or in use)", what, h));
  }
  st.texture_objects[h] = {desc, surface, span};
  *handle = h;
  return Status::Ok();
}

void AddTextureAccess(const SessionState& st, CallView* view) {
  for (const auto& [handle, obj] : st.texture_objects) {
    uint64_t start = 0, size = 0;
    // A buffer freed under a live object: nothing of the session to protect.
    if (!FindHoldingRange(st.buffers, obj.desc.base, obj.span, &start, &size)) continue;
    view->AddOrMerge(start, size, obj.surface);
  }
}

void HandleCreateTextureObject(SessionState& st, const CallContext& call, const wire::TextureObjectRequest& req,
                               Outcome* out) {
  if (Status h = HomeDeviceOnly(st, "a texture or surface object"); !h.ok()) return out->Fail(h);
  CallView v = ViewOf(st, call);
  uint64_t handle = 0;
  Status s = CreateTextureObjectOf(st, req.desc, IsSurfaceRow(call), 0, &handle, &v);
  if (!s.ok()) return out->Fail(s);
  out->Set(wire::ValueReply{static_cast<int64_t>(handle)});
}

void HandleDestroyTextureObject(SessionState& st, const CallContext& call, const wire::TextureHandleRequest& req,
                                Outcome* out) {
  if (Status h = HomeDeviceOnly(st, "a texture or surface object"); !h.ok()) return out->Fail(h);
  CallView v = ViewOf(st, call);
  const bool surface = IsSurfaceRow(call);
  auto it = st.texture_objects.find(req.handle);
  if (it == st.texture_objects.end() || it->second.surface != surface) {
    return out->Fail(WireStatus::kInvalidValue, fmt::format("{} {} does not exist in this session",
                                                            surface ? "surface object" : "texture object", req.handle));
  }
  Status s = st.executor->Run(v, [&] { return st.ctx->DestroyTextureObject(req.handle); });
  if (!s.ok()) return out->Fail(s);
  st.texture_objects.erase(it);
}

}  // namespace phos::session
