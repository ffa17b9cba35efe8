// Several GPUs in one process (docs/interposer.md "Several GPUs in one
// process"): which context a call runs in, and where a session's objects of
// its other GPUs live.
//
// A session has a home context (SessionState::ctx between calls) on the GPU
// the process started on, and one more context per further GPU it used
// (other_contexts). Each record carries the GPU current on the app's calling
// thread (ring::FrameHeader::device); a call on a stream runs on that
// stream's GPU instead, as CUDA runs a copy on its stream's device. Before
// the call the consumer points st.ctx at that GPU's context; the handlers
// then work as for a one-GPU session, and record the objects they make on
// another GPU (buffer_devices, stream_devices, event_devices) so that later
// calls find them there. Everything here runs on the consumer thread.
#include <string>

#include "protocol/calls.h"
#include "session/handlers.h"

namespace phos::session {

namespace {
/// Calls that do not run in a context: device queries name their GPU in the
/// request, kSetDevice makes its context itself, device output is taken
/// from every context; and ids with no row, which Dispatch answers
/// NotSupported whatever GPU they name (found by dispatch_fuzz).
bool NeedsNoContext(uint32_t api) {
  namespace op = wire::op;
  if (DispatchedRow(static_cast<wire::ApiId>(api)) == nullptr) return true;
  return api == static_cast<uint32_t>(op::kGetDeviceCount) ||
         api == static_cast<uint32_t>(op::kGetDeviceProperties) ||
         api == static_cast<uint32_t>(op::kDeviceGetAttribute) || api == static_cast<uint32_t>(op::kSetDevice) ||
         api == static_cast<uint32_t>(op::kTakeDeviceOutput);
}
}  // namespace

backend::Context* ContextOf(const SessionState& st, int device) {
  if (device == st.device) return HomeContext(st);
  auto it = st.other_contexts.find(device);
  return it != st.other_contexts.end() ? it->second : nullptr;
}

backend::Context* HomeContext(const SessionState& st) { return st.home_ctx != nullptr ? st.home_ctx : st.ctx; }

int DeviceOfBuffer(const SessionState& st, uint64_t ptr) {
  auto it = st.buffer_devices.find(ptr);
  return it != st.buffer_devices.end() ? it->second : st.device;
}

int CallDevice(const SessionState& st, const ring::Record& rec) {
  if (NeedsNoContext(rec.header.api_id)) return st.device;
  if (rec.header.stream_id != 0) {
    auto it = st.stream_devices.find(rec.header.stream_id);
    return it != st.stream_devices.end() ? it->second : st.device;
  }
  return PhosdDevice(st, rec.header.device);
}

int PhosdDevice(const SessionState& st, int app_device) {
  auto it = st.device_aliases.find(app_device);
  return it != st.device_aliases.end() ? it->second : app_device;
}

Status AddDeviceContext(SessionState& st, int device) {
  if (ContextOf(st, device) != nullptr) return Status::Ok();
  if (st.backend == nullptr || device < 0 || device >= st.backend->device_count()) {
    return Status::InvalidArgument("no GPU " + std::to_string(device) + " in this phosd");
  }
  if (!st.add_context) return Status::FailedPrecondition("this session cannot use a second GPU");
  PHOS_RETURN_IF_ERROR(st.add_context(device).WithContext("a context on GPU " + std::to_string(device)));
  if (ContextOf(st, device) == nullptr) {
    return Status::Internal("no context on GPU " + std::to_string(device) + " after adding one");
  }
  return Status::Ok();
}

std::string DeviceStateHeld(const SessionState& st) {
  if (!st.buffers.empty()) return std::to_string(st.buffers.size()) + " allocation(s)";
  if (!st.streams.empty()) return std::to_string(st.streams.size()) + " stream(s)";
  if (!st.events.empty()) return std::to_string(st.events.size()) + " event(s)";
  if (!st.modules.empty() || !st.pending_images.empty()) return "loaded modules";
  if (!st.texture_objects.empty()) return "texture or surface objects";
  if (st.host_segments.count() != 0) return "pinned host memory";
  if (!st.comms.empty()) return "NCCL communicators";
  if (!st.reserved_ranges.empty()) return "reserved address ranges";
  return "";
}

Status SelectCallDevice(SessionState& st, int device) {
  st.call_device = st.device;
  if (device == st.device) return Status::Ok();
  if (st.backend == nullptr || device < 0 || device >= st.backend->device_count()) {
    return Status::InvalidArgument("the call names GPU " + std::to_string(device) + ", which phosd does not serve (" +
                                   std::to_string(st.backend != nullptr ? st.backend->device_count() : 0) +
                                   " GPUs)");
  }
  backend::Context* ctx = ContextOf(st, device);
  if (ctx == nullptr) {
    // A process that holds nothing yet moves its one context (the usual
    // cudaSetDevice(local_rank) of a rank process); else it gets one more.
    if (st.other_contexts.empty() && DeviceStateHeld(st).empty()) {
      return MoveToDevice(st, device);  // which makes it the call's GPU too
    }
    PHOS_RETURN_IF_ERROR(AddDeviceContext(st, device));
    ctx = ContextOf(st, device);
  }
  if (st.home_ctx == nullptr) st.home_ctx = st.ctx;
  st.ctx = ctx;
  st.call_device = device;
  return Status::Ok();
}

void SelectHomeDevice(SessionState& st) {
  if (st.home_ctx != nullptr) st.ctx = st.home_ctx;
  st.home_ctx = nullptr;
  st.call_device = st.device;
}

bool UsesSeveralDevices(const SessionState& st) {
  // Contexts, not only objects: a context of another GPU may run work on
  // the home GPU's buffers (a copy from a thread current there), which a
  // checkpoint's quiesce and copy-on-write do not order. A thread that
  // only visits another GPU (cudaSetDevice there and back, as device
  // guards do) makes no context: libphos.so tells phosd nothing until a
  // call runs there, and device queries need none.
  return !st.other_contexts.empty();
}

std::size_t PendingDeviceOutput(const SessionState& st) {
  std::size_t n = HomeContext(st) != nullptr ? HomeContext(st)->PendingDeviceOutput() : 0;
  for (const auto& [device, ctx] : st.other_contexts) n += ctx->PendingDeviceOutput();
  return n;
}

Status EnsurePinnedSegments(SessionState& st) {
  return st.ctx == HomeContext(st) ? st.host_segments.EnsureRegistered(st.ctx) : Status::Ok();
}

Status HomeDeviceOnly(const SessionState& st, const char* what) {
  if (st.call_device == st.device) return Status::Ok();
  // Short: the app sees the head and the tail of it (a completion slot).
  return Status::NotSupported(std::string(what) + " on GPU " + std::to_string(st.call_device) +
                              ": phos offers it on a process's first GPU (GPU " + std::to_string(st.device) +
                              ") only, not on its further GPUs yet");
}

backend::Context* StreamContext(const SessionState& st, uint32_t id) {
  auto it = st.stream_devices.find(id);
  return it != st.stream_devices.end() ? ContextOf(st, it->second) : HomeContext(st);
}

backend::Context* EventContext(const SessionState& st, uint32_t id) {
  auto it = st.event_devices.find(id);
  return it != st.event_devices.end() ? ContextOf(st, it->second) : HomeContext(st);
}

Status ModuleOnCallDevice(SessionState& st, uint32_t module_id, backend::ModuleHandle* out) {
  if (st.call_device == st.device) {
    auto it = st.modules.find(module_id);
    if (it == st.modules.end()) return Status::NotFound("unknown module id " + std::to_string(module_id));
    *out = it->second;
    return Status::Ok();
  }
  const auto key = std::make_pair(st.call_device, module_id);
  if (auto it = st.device_modules.find(key); it != st.device_modules.end()) {
    *out = it->second;
    return Status::Ok();
  }
  auto image = st.module_images.find(module_id);
  if (image == st.module_images.end() || !st.modules.count(module_id)) {
    return Status::NotFound("unknown module id " + std::to_string(module_id));
  }
  // Loaded on this GPU the first time it is used here, from the image the
  // app loaded (CUDA loads a module on each device it is used on).
  backend::ModuleHandle h = 0;
  PHOS_RETURN_IF_ERROR(st.ctx->LoadModule(image->second->data(), image->second->size(), &h)
                           .WithContext("loading module " + std::to_string(module_id) + " on GPU " +
                                        std::to_string(st.call_device)));
  st.device_modules[key] = h;
  // Its variables there are the process's too: a checkpoint saves them.
  RecordModuleVariablesOf(st, module_id, st.call_device, st.ctx, h);
  *out = h;
  return Status::Ok();
}

Status FunctionOnCallDevice(SessionState& st, uint32_t function_id, backend::FunctionHandle* out) {
  auto fit = st.functions.find(function_id);
  if (fit == st.functions.end()) return Status::NotFound("unknown function id " + std::to_string(function_id));
  if (st.call_device == st.device) {
    *out = fit->second.handle;
    return Status::Ok();
  }
  const auto key = std::make_pair(st.call_device, function_id);
  if (auto it = st.device_functions.find(key); it != st.device_functions.end()) {
    *out = it->second;
    return Status::Ok();
  }
  if (!fit->second.access) return Status::NotFound("function id " + std::to_string(function_id) + " has no name");
  backend::ModuleHandle module = 0;
  PHOS_RETURN_IF_ERROR(ModuleOnCallDevice(st, fit->second.module_id, &module));
  backend::FunctionHandle f = 0;
  PHOS_RETURN_IF_ERROR(st.ctx->GetFunction(module, fit->second.access->name, &f));
  // The attributes the app set apply on every GPU (cudaFuncSetAttribute
  // names the function, not a device).
  for (const auto& [attribute, value] : fit->second.attributes) {
    backend::FunctionAttribute attr{};
    PHOS_RETURN_IF_ERROR(SettableFunctionAttribute(attribute, &attr));
    PHOS_RETURN_IF_ERROR(st.ctx->SetFunctionAttribute(f, attr, value));
  }
  st.device_functions[key] = f;
  *out = f;
  return Status::Ok();
}

}  // namespace phos::session
