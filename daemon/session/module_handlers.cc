// Modules, functions, globals and launches: kModuleLoad (inline, or staged
// pieces + commit), kModuleUnload, kModuleGetFunction, kModuleGetGlobal,
// kLaunchKernel (rows in interposer/protocol/calls.def), and the module
// state changes a restore into a fresh session shares (call_handlers.h).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "session/handlers.h"

namespace phos::session {

using wire::WireStatus;

namespace {

void LoadImage(SessionState& st, uint32_t module_id, std::span<const std::byte> image, CallView& v, Outcome* out) {
  Status s = LoadModuleWithId(st, module_id, image, &v);
  if (s.ok()) RecordModuleVariables(st, module_id);
  out->Fail(s);
}

/// The name after a GetFunction / GetGlobal request: exactly `name_bytes`
/// bytes, 1 to kMaxNameBytes; false after out->Fail.
bool SymbolName(const CallContext& call, uint32_t name_bytes, std::string* name, Outcome* out) {
  if (name_bytes != call.tail.size() || name_bytes == 0 || name_bytes > wire::kMaxNameBytes) {
    out->Fail(WireStatus::kInvalidValue, "bad symbol name length");
    return false;
  }
  name->assign(reinterpret_cast<const char*>(call.tail.data()), call.tail.size());
  return true;
}

}  // namespace

void HandleModuleLoad(SessionState& st, const CallContext& call, const wire::ModuleLoadRequest& req, Outcome* out) {
  CallView v = ViewOf(st, call);
  const auto phase = static_cast<wire::ModuleLoadPhase>(req.phase);
  if (req.module_id == 0 || st.modules.count(req.module_id)) {
    return out->Fail(WireStatus::kInvalidValue, "module id " + std::to_string(req.module_id) + " is in use");
  }
  if (Status s = CheckRoom(st.modules.size() + st.pending_images.size(), "modules"); !s.ok()) {
    return out->Fail(s);
  }
  if (req.total_bytes > wire::kMaxModuleImageBytes) {
    return out->Fail(WireStatus::kInvalidValue, "module image larger than phos accepts");
  }
  if (phase == wire::ModuleLoadPhase::kInline) {
    if (call.tail.size() != req.total_bytes) return out->Fail(WireStatus::kInvalidValue, "module image size mismatch");
    return LoadImage(st, req.module_id, call.tail, v, out);
  }
  if (phase == wire::ModuleLoadPhase::kPiece) {
    if (!call.rec.has_staging) return out->Fail(WireStatus::kInvalidValue, "module piece without staging");
    const ring::StagingRef& ref = call.rec.staging;
    if (ref.offset > req.total_bytes || ref.bytes > req.total_bytes - ref.offset) {
      return out->Fail(WireStatus::kInvalidValue, "module piece outside its image");
    }
    auto it = st.pending_images.find(req.module_id);
    if (it == st.pending_images.end()) {
      if (st.pending_image_bytes + req.total_bytes > kMaxPendingImageBytes) {
        return out->Fail(WireStatus::kMemoryAllocation, "too many module images in flight");
      }
      it = st.pending_images.emplace(req.module_id, SessionState::PendingImage{}).first;
      it->second.bytes.resize(req.total_bytes);
      st.pending_image_bytes += req.total_bytes;
    }
    if (it->second.bytes.size() != req.total_bytes) {
      return out->Fail(WireStatus::kInvalidValue, "module pieces disagree on the image size");
    }
    std::span<const std::byte> src = st.ring->StagingBytes(ref);
    if (!src.empty()) std::memcpy(it->second.bytes.data() + ref.offset, src.data(), src.size());
    it->second.received += src.size();
    return;
  }
  if (phase == wire::ModuleLoadPhase::kCommit) {
    auto it = st.pending_images.find(req.module_id);
    if (it == st.pending_images.end()) {
      return out->Fail(WireStatus::kInvalidValue, "module commit without pieces");
    }
    SessionState::PendingImage image = std::move(it->second);
    st.pending_images.erase(it);
    st.pending_image_bytes -= image.bytes.size();
    if (image.received != image.bytes.size()) {
      return out->Fail(WireStatus::kInvalidValue, "module image incomplete (" + std::to_string(image.received) +
                                                      " of " + std::to_string(image.bytes.size()) + " bytes)");
    }
    return LoadImage(st, req.module_id, image.bytes, v, out);
  }
  return out->Fail(WireStatus::kInvalidValue, "module load: unknown phase");
}

void HandleModuleUnload(SessionState& st, const CallContext& call, const wire::HandleRequest& req, Outcome* out) {
  CallView v = ViewOf(st, call);
  auto it = st.modules.find(req.id);
  if (it == st.modules.end()) return out->Fail(Status::NotFound("unknown module id " + std::to_string(req.id)));
  Status s = st.executor->Run(v, [&] {
    // Kernels of the module finish first, on every GPU it was loaded on.
    st.Defer(HomeContext(st)->Synchronize());
    for (auto m = st.device_modules.begin(); m != st.device_modules.end();) {
      if (m->first.second != req.id) {
        ++m;
        continue;
      }
      backend::Context* ctx = ContextOf(st, m->first.first);
      st.Defer(ctx->Synchronize());
      PHOS_RETURN_IF_ERROR(ctx->UnloadModule(m->second));
      m = st.device_modules.erase(m);
    }
    return HomeContext(st)->UnloadModule(it->second);
  });
  if (!s.ok()) return out->Fail(s);
  std::erase_if(st.device_functions, [&](const auto& f) {
    auto fit = st.functions.find(f.first.second);
    return fit == st.functions.end() || fit->second.module_id == req.id;
  });
  st.modules.erase(it);
  st.module_images.erase(req.id);
  st.module_load_order.erase(req.id);
  st.module_kernels.erase(req.id);
  std::erase_if(st.functions, [&](const auto& f) { return f.second.module_id == req.id; });
  // Its globals went with it: their ranges are no longer the session's.
  ForgetModuleGlobals(st, req.id);
}

void HandleModuleGetFunction(SessionState& st, const CallContext& call, const wire::GetFunctionRequest& req,
                             Outcome* out) {
  CallView v = ViewOf(st, call);
  if (req.function_id == 0 || st.functions.count(req.function_id)) {
    return out->Fail(WireStatus::kInvalidValue, "function id " + std::to_string(req.function_id) + " is in use");
  }
  if (Status s = CheckRoom(st.functions.size(), "functions"); !s.ok()) return out->Fail(s);
  std::string name;
  if (!SymbolName(call, req.name_bytes, &name, out)) return;
  if (!st.modules.count(req.module_id)) {
    return out->Fail(Status::NotFound("unknown module id " + std::to_string(req.module_id)));
  }
  Status s = GetFunctionWithId(st, req.module_id, req.function_id, name, &v);
  if (!s.ok()) return out->Fail(WireStatus::kNotFound, s.message());
}

void HandleModuleGetGlobal(SessionState& st, const CallContext& call, const wire::GetGlobalRequest& req,
                           Outcome* out) {
  CallView v = ViewOf(st, call);
  if ((req.flags & ~uint32_t{wire::kGlobalAddressToApp}) != 0 || req.pad != 0) {
    return out->Fail(WireStatus::kInvalidValue, "module global: unknown flags " + std::to_string(req.flags));
  }
  std::string name;
  if (!SymbolName(call, req.name_bytes, &name, out)) return;
  if (!st.modules.count(req.module_id)) {
    return out->Fail(Status::NotFound("unknown module id " + std::to_string(req.module_id)));
  }
  uint64_t ptr = 0, bytes = 0;
  Status s = GetGlobalOf(st, req.module_id, name, &ptr, &bytes, &v);
  if (!s.ok()) return out->Fail(WireStatus::kNotFound, s.message());
  if (req.flags & wire::kGlobalAddressToApp) st.global_symbols[ptr].address_to_app = true;
  out->Set(wire::GetGlobalReply{ptr, bytes});
}

void HandleLaunchKernel(SessionState& st, const CallContext& call, const wire::LaunchRequest& req, Outcome* out) {
  CallView v = ViewOf(st, call);
  const std::span<const std::byte> tail = call.tail;
  if (req.param_bytes != tail.size() || req.param_bytes > wire::kMaxParamBytes) {
    return out->Fail(WireStatus::kInvalidValue, "launch: bad parameter block size");
  }
  if ((req.flags & ~uint32_t{wire::kLaunchCooperative}) != 0) {
    return out->Fail(WireStatus::kInvalidValue, "launch: unknown flags " + std::to_string(req.flags));
  }
  const bool cooperative = (req.flags & wire::kLaunchCooperative) != 0;
  auto fit = st.functions.find(req.function_id);
  if (fit == st.functions.end()) {
    return out->Fail(Status::NotFound("unknown function id " + std::to_string(req.function_id)));
  }
  bool sets_conditionals = false;  // this kernel calls cudaGraphSetConditional
  if (fit->second.access) {
    sets_conditionals = fit->second.access->sets_graph_conditionals;
  } else if (auto mk = st.module_kernels.find(fit->second.module_id); mk != st.module_kernels.end()) {
    sets_conditionals = mk->second.sets_graph_conditionals;
  }
  if (sets_conditionals && (st.backend == nullptr || !st.backend->ImplementsConditionalHandles())) {
    return out->Fail(WireStatus::kNotSupported,
                     "launch: kernel " + (fit->second.access ? fit->second.access->name : std::string("?")) +
                         " calls cudaGraphSetConditional: phos's conditional graph handles are set by kernels on "
                         "the sim backend only (docs/interposer.md \"CUDA graphs\")");
  }
  backend::StreamHandle stream = 0;
  if (Status s = FindStream(st, call.rec.header.stream_id, &stream); !s.ok()) return out->Fail(s);
  v.stream_id = call.rec.header.stream_id;
  v.stream = stream;
  std::vector<uint8_t> params(req.param_bytes);
  if (!params.empty()) std::memcpy(params.data(), tail.data(), params.size());
  if (cooperative) {
    // Its blocks wait for each other: no twin can replay it block by block,
    // so a C/R protocol treats it as of unknown access (it waits for the
    // checkpoint to finish, as a kernel without PTX does).
    v.kind = AccessKind::kUnknown;
  } else if (fit->second.access) {
    auto mk = st.module_kernels.find(fit->second.module_id);
    std::span<const std::pair<uint64_t, uint64_t>> variables;
    if (mk == st.module_kernels.end() || mk->second.may_have_variables) {
      if (auto mg = st.module_globals.find(fit->second.module_id); mg != st.module_globals.end()) {
        variables = mg->second;
      }
    }
    ComputeLaunchAccess(*fit->second.access, params, st.buffers, st.globals, &v, variables);
    const bool textures = mk == st.module_kernels.end() || mk->second.may_use_textures;
    if (textures && v.kind != AccessKind::kUnknown) AddTextureAccess(st, &v);
    if (!st.reserved_ranges.empty() && v.kind != AccessKind::kUnknown) AddMappedRangeAccess(st, &v);
    const bool heap = mk == st.module_kernels.end() || mk->second.uses_device_heap;
    if (heap && st.device_heap == 0) {
      if (Status h = EnsureDeviceHeap(st, &v); !h.ok()) return out->Fail(h);
    }
    if (v.kind != AccessKind::kUnknown) AddDeviceHeapAccess(st, &v);
  } else {
    v.kind = AccessKind::kUnknown;  // a function recreated without its plan (defensive)
  }
  LaunchArgs launch;
  launch.function_id = req.function_id;
  launch.module_id = fit->second.module_id;
  launch.kernel = fit->second.access ? &fit->second.access->name : nullptr;
  if (Status f = FunctionOnCallDevice(st, req.function_id, &launch.function); !f.ok()) return out->Fail(f);
  launch.grid = backend::Dim3{req.grid[0], req.grid[1], req.grid[2]};
  launch.block = backend::Dim3{req.block[0], req.block[1], req.block[2]};
  launch.shared_bytes = req.shared_bytes;
  launch.params = &params;
  v.launch = &launch;
  // `phos daemon --log-level trace`: every launch, for finding which kernel
  // of a library went wrong.
  if (spdlog::should_log(spdlog::level::trace)) {
    spdlog::trace("session {}: launch {} grid ({},{},{}) block ({},{},{}) shared {} params {}", st.session_id,
                  launch.kernel != nullptr ? *launch.kernel : std::string("?"), req.grid[0], req.grid[1], req.grid[2],
                  req.block[0], req.block[1], req.block[2], req.shared_bytes, req.param_bytes);
  }
  Status s = st.executor->Run(v, [&] {
    if (cooperative) {
      return st.ctx->LaunchCooperativeKernel(launch.function, launch.grid, launch.block, launch.shared_bytes, stream,
                                             params);
    }
    return st.ctx->LaunchKernel(launch.function, launch.grid, launch.block, launch.shared_bytes, stream, params);
  });
  out->Fail(s);
}

// ---------------------------------------------------------------- shared with a restore (call_handlers.h)

Status LoadModuleWithId(SessionState& st, uint32_t module_id, std::span<const std::byte> image,
                        const CallView* admit) {
  if (module_id == 0 || st.modules.count(module_id)) {
    return Status::InvalidArgument("module id " + std::to_string(module_id) + " is in use");
  }
  backend::ModuleHandle h = 0;
  // Loaded on the home GPU whichever GPU asked (its handles live there;
  // another GPU loads it when it first uses it: ModuleOnCallDevice).
  PHOS_RETURN_IF_ERROR(
      RunMaybeAdmitted(st, admit, [&] { return HomeContext(st)->LoadModule(image.data(), image.size(), &h); }));
  st.modules[module_id] = h;
  st.module_images[module_id] = std::make_shared<const std::vector<std::byte>>(image.begin(), image.end());
  st.module_load_order[module_id] = st.next_module_load++;
  // Kernel access plans (kernel_access.h); an image phos cannot read still
  // loads, its launches have no access set (kUnknown).
  ModuleKernels& mk = st.module_kernels[module_id];
  if (Status a = BuildModuleKernels(image, st.signature_cache, &mk); !a.ok()) {
    spdlog::warn("session {}: module {}: no kernel access sets: {}", st.session_id, module_id, a.ToString());
  }
  for (const auto& [name, plan] : mk.kernels) {
    if (plan->kind == AccessKind::kUnvalidatable) st.executor->NoteUnvalidatable(name, plan->unvalidatable_reason);
  }
  return Status::Ok();
}

void RecordModuleVariables(SessionState& st, uint32_t module_id) {
  auto it = st.modules.find(module_id);
  if (it == st.modules.end()) return;
  RecordModuleVariablesOf(st, module_id, st.device, HomeContext(st), it->second);
}

void RecordModuleVariablesOf(SessionState& st, uint32_t module_id, int device, backend::Context* ctx,
                             backend::ModuleHandle h) {
  auto mk = st.module_kernels.find(module_id);
  if (mk == st.module_kernels.end()) return;
  for (const std::string& name : mk->second.variables) {
    backend::DevicePtr p = 0;
    size_t n = 0;
    // A name the backend does not resolve (a static variable its loader
    // keeps private) stays unrecorded, as before.
    if (Status g = ctx->GetGlobal(h, name, &p, &n); !g.ok() || n == 0) {
      spdlog::debug("session {}: module {} on GPU {}: variable {} not recorded: {}", st.session_id, module_id,
                    device, name, g.ok() ? std::string("0 bytes") : g.ToString());
      continue;
    }
    RecordGlobal(st, p, n, module_id, name, device);  // address_to_app stays false until the app asks
  }
}

SessionState::GlobalSymbol& RecordGlobal(SessionState& st, uint64_t ptr, uint64_t bytes, uint32_t module_id,
                                         const std::string& name, int device) {
  st.globals[ptr] = bytes;
  auto [it, added] = st.global_symbols.try_emplace(ptr);
  SessionState::GlobalSymbol& sym = it->second;  // keeps address_to_app
  if (!added && sym.module_id != module_id) {
    // The address was another module's (defensive: an unload forgets its
    // globals): it leaves that module's list.
    if (auto old = st.module_globals.find(sym.module_id); old != st.module_globals.end()) {
      std::erase_if(old->second, [&](const auto& g) { return g.first == ptr; });
    }
  }
  auto& list = st.module_globals[module_id];
  auto at = std::find_if(list.begin(), list.end(), [&](const auto& g) { return g.first == ptr; });
  if (at == list.end()) {
    list.emplace_back(ptr, bytes);
  } else {
    at->second = bytes;
  }
  sym.module_id = module_id;
  sym.name = name;
  sym.device = device;
  return sym;
}

void ForgetModuleGlobals(SessionState& st, uint32_t module_id) {
  for (auto g = st.global_symbols.begin(); g != st.global_symbols.end();) {
    if (g->second.module_id != module_id) {
      ++g;
      continue;
    }
    st.globals.erase(g->first);
    g = st.global_symbols.erase(g);
  }
  st.module_globals.erase(module_id);
}

Status GetFunctionWithId(SessionState& st, uint32_t module_id, uint32_t function_id, const std::string& name,
                         const CallView* admit) {
  if (function_id == 0 || st.functions.count(function_id)) {
    return Status::InvalidArgument("function id " + std::to_string(function_id) + " is in use");
  }
  auto it = st.modules.find(module_id);
  if (it == st.modules.end()) return Status::NotFound("unknown module id " + std::to_string(module_id));
  backend::FunctionHandle f = 0;
  PHOS_RETURN_IF_ERROR(RunMaybeAdmitted(st, admit, [&] { return HomeContext(st)->GetFunction(it->second, name, &f); }));
  std::shared_ptr<KernelAccessPlan> plan;
  if (auto mk = st.module_kernels.find(module_id); mk != st.module_kernels.end()) {
    if (auto k = mk->second.kernels.find(name); k != mk->second.kernels.end()) plan = k->second;
  }
  st.functions[function_id] = {module_id, f, plan ? std::move(plan) : UnknownKernelPlan(name), {}};
  return Status::Ok();
}

Status GetGlobalOf(SessionState& st, uint32_t module_id, const std::string& name, uint64_t* ptr, uint64_t* bytes,
                   const CallView* admit) {
  auto it = st.modules.find(module_id);
  if (it == st.modules.end()) return Status::NotFound("unknown module id " + std::to_string(module_id));
  backend::DevicePtr p = 0;
  size_t n = 0;
  // The variable's instance on the call's GPU (each GPU has its own).
  backend::ModuleHandle module = it->second;
  if (st.call_device != st.device) PHOS_RETURN_IF_ERROR(ModuleOnCallDevice(st, module_id, &module));
  PHOS_RETURN_IF_ERROR(RunMaybeAdmitted(st, admit, [&] { return st.ctx->GetGlobal(module, name, &p, &n); }));
  RecordGlobal(st, p, n, module_id, name, st.call_device);
  *ptr = p;
  *bytes = n;
  return Status::Ok();
}

}  // namespace phos::session
