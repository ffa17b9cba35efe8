// Handlers for function attributes (kFuncGetAttributes, kFuncSetAttribute)
// and cudaDeviceReset (kDeviceReset); rows in interposer/protocol/calls.def.
// Like every handler they run on the session's consumer thread only
// (call_handlers.h).
#include <spdlog/spdlog.h>

#include <string>

#include "session/handlers.h"

namespace phos::session {

using wire::WireStatus;

void HandleFuncGetAttributes(SessionState& st, const CallContext& call, const wire::HandleRequest& req,
                             Outcome* out) {
  CallView v = ViewOf(st, call);
  backend::FunctionHandle f = 0;
  if (Status s = FunctionOnCallDevice(st, req.id, &f); !s.ok()) return out->Fail(s);
  backend::FunctionAttributes a;
  Status s = st.executor->Run(v, [&] { return st.ctx->GetFunctionAttributes(f, &a); });
  if (!s.ok()) return out->Fail(s);
  wire::FunctionAttributesReply r{};
  r.shared_size_bytes = a.shared_size_bytes;
  r.const_size_bytes = a.const_size_bytes;
  r.local_size_bytes = a.local_size_bytes;
  r.max_threads_per_block = a.max_threads_per_block;
  r.num_regs = a.num_regs;
  r.ptx_version = a.ptx_version;
  r.binary_version = a.binary_version;
  r.cache_mode_ca = a.cache_mode_ca;
  r.max_dynamic_shared_size_bytes = a.max_dynamic_shared_size_bytes;
  r.preferred_shared_memory_carveout = a.preferred_shared_memory_carveout;
  out->Set(r);
}

void HandleFuncSetAttribute(SessionState& st, const CallContext& call, const wire::FuncSetAttributeRequest& req,
                            Outcome* out) {
  CallView v = ViewOf(st, call);
  out->Fail(SetFunctionAttributeOf(st, req.function_id, req.attribute, req.value, &v));
}

Status SettableFunctionAttribute(int32_t attribute, backend::FunctionAttribute* out) {
  if (attribute == wire::kFuncAttrMaxDynamicSharedSize) {
    *out = backend::FunctionAttribute::kMaxDynamicSharedSizeBytes;
  } else if (attribute == wire::kFuncAttrPreferredCarveout) {
    *out = backend::FunctionAttribute::kPreferredSharedMemoryCarveout;
  } else {
    return Status::InvalidArgument("function attribute " + std::to_string(attribute) +
                                   " cannot be set (only 8 and 9)");
  }
  return Status::Ok();
}

Status SetFunctionAttributeOf(SessionState& st, uint32_t function_id, int32_t attribute, int32_t value,
                              const CallView* admit) {
  auto it = st.functions.find(function_id);
  if (it == st.functions.end()) return Status::NotFound("unknown function id " + std::to_string(function_id));
  backend::FunctionAttribute attr{};
  PHOS_RETURN_IF_ERROR(SettableFunctionAttribute(attribute, &attr));
  const backend::FunctionHandle f = it->second.handle;
  PHOS_RETURN_IF_ERROR(RunMaybeAdmitted(st, admit, [&] {
    // The function on every GPU it was resolved on (the attribute names
    // the function, not a device); a GPU that resolves it later applies
    // `attributes` then (FunctionOnCallDevice).
    PHOS_RETURN_IF_ERROR(HomeContext(st)->SetFunctionAttribute(f, attr, value));
    for (const auto& [key, handle] : st.device_functions) {
      if (key.second != function_id) continue;
      PHOS_RETURN_IF_ERROR(ContextOf(st, key.first)->SetFunctionAttribute(handle, attr, value));
    }
    return Status::Ok();
  }));
  it->second.attributes[attribute] = value;
  return Status::Ok();
}

/// ReleaseAll, a fresh context (which also drops the old one's sticky kernel
/// faults), no deferred error; the session stays connected and usable.
void HandleDeviceReset(SessionState& st, const CallContext& call, const wire::NoPayload& req, Outcome* out) {
  if (UsesSeveralDevices(st)) {
    return out->Fail(WireStatus::kNotSupported,
                     "cudaDeviceReset in a process that uses several GPUs: phos resets the device of a one-GPU "
                     "process only (docs/interposer.md \"Several GPUs in one process\")");
  }
  CallView v = ViewOf(st, call);
  v.kind = AccessKind::kUnknown;  // it frees every buffer of the session
  Status s = st.executor->Run(v, [&] {
    ReleaseAll(st);  // waits for pending work (its errors are dropped, as the reset drops them)
    st.deferred = Status::Ok();
    if (st.replace_context) {
      Status r = st.replace_context();
      if (!r.ok()) {
        // The emptied old context stays: usable, but a kernel fault it saw
        // stays sticky.
        spdlog::warn("session {}: cudaDeviceReset kept the old context: {}", st.session_id, r.ToString());
      }
    }
    return Status::Ok();
  });
  out->Fail(s);
}

}  // namespace phos::session
