#include "engine/fresh_restore.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/hex.h"
#include "engine/concurrent_restore.h"
#include "engine/engine_hook.h"
#include "engine/operation_util.h"
#include "engine/restore_devices.h"
#include "engine/restore_task.h"
#include "engine/session_sections.h"

namespace phos::engine {

namespace {

/// FailedPrecondition naming what the session holds, or OK when it holds
/// nothing a restore would collide with.
Status CheckEmpty(const session::SessionState& st) {
  const std::size_t held = st.buffers.size() + st.modules.size() + st.functions.size() + st.streams.size() +
                           st.events.size() + st.globals.size() + st.pending_images.size() +
                           st.texture_objects.size();
  if (held == 0) return Status::Ok();
  return Status::FailedPrecondition(
      "session " + std::to_string(st.session_id) + " is not empty (" + std::to_string(st.buffers.size()) +
      " buffers, " + std::to_string(st.modules.size() + st.pending_images.size()) + " modules, " +
      std::to_string(st.functions.size()) + " functions, " + std::to_string(st.streams.size()) + " streams, " +
      std::to_string(st.events.size()) + " events); a fresh restore needs a session that has not made any of "
      "them; it is unchanged");
}

/// Undoes Recreate on a session that was empty before it: what it created
/// goes, in ReleaseAll's order. Unlike ReleaseAll it leaves the app's own
/// things alone (pinned host segments it registered, retained copies).
void ReleaseCreated(session::SessionState& st) {
  Status s = st.ctx->Synchronize();
  if (!s.ok()) spdlog::warn("fresh restore rollback: pending work ended with: {}", s.ToString());
  session::ReapRetained(st, true);  // stream-ordered frees the app made since
  session::ReleaseOtherDevices(st);  // the objects on its other GPUs (their contexts stay)
  st.device_aliases.clear();
  for (auto& [h, obj] : st.texture_objects) (void)st.ctx->DestroyTextureObject(h);
  st.texture_objects.clear();
  st.device_heap = 0;  // one of the buffers freed below
  for (auto& [id, h] : st.events) (void)st.ctx->DestroyEvent(h);
  for (auto& [id, h] : st.streams) (void)st.ctx->DestroyStream(h);
  for (auto& [id, h] : st.modules) (void)st.ctx->UnloadModule(h);
  for (auto& [ptr, bytes] : st.buffers) {
    Status f = st.ctx->Free(ptr);
    if (!f.ok()) spdlog::warn("fresh restore rollback: freeing {}: {}", Hex(ptr), f.ToString());
  }
  for (auto& [start, bytes] : st.reserved_ranges) {
    Status f = st.ctx->ReleaseAddressRange(start);
    if (!f.ok()) spdlog::warn("fresh restore rollback: releasing reserved range {}: {}", Hex(start), f.ToString());
  }
  st.reserved_ranges.clear();
  st.events.clear();
  st.event_flags.clear();
  st.streams.clear();
  st.stream_flags.clear();
  st.modules.clear();
  st.module_kernels.clear();
  st.module_images.clear();
  st.functions.clear();
  st.globals.clear();
  st.global_symbols.clear();
  st.module_globals.clear();
  st.buffers.Clear();
}

/// The image's GPU of a stream, event or global record (the home one
/// unless it says).
template <typename Record>
int DeviceOf(const image::v1::SessionHandles& handles, const Record& r) {
  return r.has_device() ? r.device() : handles.device();
}

/// True when the app was never given the address of any recorded variable of
/// `module_id`'s instance on the image's GPU `device` (GlobalRecord::address_private).
bool AddressesPrivate(const image::v1::SessionHandles& handles, std::uint32_t module_id, int device) {
  for (const auto& g : handles.globals()) {
    if (g.module_id() == module_id && DeviceOf(handles, g) == device && !g.address_private()) return false;
  }
  return true;
}

/// The app may hold pointers to its modules' variables, so they come back
/// where the image has them. A backend that can place them (the sim) gets
/// the module instance `*h` (in `ctx`) reloaded with its variable block
/// moved by the difference between where `g`, one of its recorded globals,
/// is now and where it was; one block per instance, laid out the same from
/// the same image, so one shift fixes them all. Where the backend places
/// variables itself (cuda), or the place is taken, the variables stay where
/// the backend put them: Recreate relocates those whose address the app
/// never held and refuses the others, naming the addresses.
Status PlaceModuleInstance(backend::Context* ctx, const image::v1::ModuleImage& m, const image::v1::GlobalRecord& g,
                           bool addresses_private, backend::ModuleHandle* h) {
  backend::DevicePtr now = 0;
  std::size_t bytes = 0;
  PHOS_RETURN_IF_ERROR(ctx->GetGlobal(*h, g.name(), &now, &bytes)
                           .WithContext("resolving global '" + g.name() + "' of module " + std::to_string(m.id())));
  if (now == g.address()) return Status::Ok();
  backend::DevicePtr base = 0;
  if (!ctx->GetModuleGlobalsBase(*h, &base).ok() || base == 0) return Status::Ok();
  const backend::DevicePtr want = base + (g.address() - now);  // unsigned wrap-around gives the signed shift
  PHOS_RETURN_IF_ERROR(ctx->UnloadModule(*h));
  *h = 0;
  backend::ModuleHandle moved = 0;
  Status s = ctx->LoadModuleWithGlobalsAt(m.image().data(), m.image().size(), want, &moved);
  if (!s.ok() && addresses_private) {
    // The place is taken (another session of this phosd, say), but the app
    // never held any of these addresses: load the module where the backend
    // puts it; Recreate relocates the variables' bytes.
    spdlog::info("fresh restore: module {}'s variables cannot go back to {} ({}); the app never held their "
                 "addresses, so they load where the backend puts them", m.id(), Hex(want), s.ToString());
    s = ctx->LoadModule(m.image().data(), m.image().size(), &moved);
  }
  if (!s.ok()) {
    return s.WithContext("placing the variables of module " + std::to_string(m.id()) + " at " + Hex(want) +
                         ", where the image has them");
  }
  *h = moved;
  spdlog::debug("fresh restore: module {}'s variables moved from {} to {}", m.id(), Hex(base), Hex(want));
  return Status::Ok();
}

/// Every module instance with recorded globals where the image has them:
/// the home instances (loaded already) and those of the other GPUs (loaded
/// here, into device_modules, as a call there would have).
Status PlaceModuleGlobals(session::SessionState& st, const image::v1::SessionHandles& handles,
                          const image::v1::SessionModules& modules, const RestoreDevices& plan) {
  for (const auto& m : modules.modules()) {
    std::map<int, const image::v1::GlobalRecord*> first;  // image GPU -> a global of its instance
    for (const auto& g : handles.globals()) {
      if (g.module_id() == m.id()) first.emplace(DeviceOf(handles, g), &g);
    }
    for (const auto& [image_device, g] : first) {
      const bool addresses_private = AddressesPrivate(handles, m.id(), image_device);
      const int device = plan.Of(image_device);
      if (device == st.device) {
        backend::ModuleHandle& h = st.modules.at(m.id());
        Status s = PlaceModuleInstance(st.ctx, m, *g, addresses_private, &h);
        if (h == 0) st.modules.erase(m.id());  // unloaded: the caller empties the session
        PHOS_RETURN_IF_ERROR(s);
        continue;
      }
      backend::Context* ctx = session::ContextOf(st, device);
      if (ctx == nullptr) return Status::Internal("no context on GPU " + std::to_string(device));
      backend::ModuleHandle h = 0;
      PHOS_RETURN_IF_ERROR(ctx->LoadModule(m.image().data(), m.image().size(), &h)
                               .WithContext("loading module " + std::to_string(m.id()) + " on GPU " +
                                            std::to_string(device)));
      Status s = PlaceModuleInstance(ctx, m, *g, addresses_private, &h);
      if (h != 0) st.device_modules[{device, m.id()}] = h;  // released with the session's other GPUs
      PHOS_RETURN_IF_ERROR(s.WithContext("on GPU " + std::to_string(device)));
    }
  }
  return Status::Ok();
}

/// Runs `make` with the session's call context on phosd's GPU `device`, so
/// what it makes is that GPU's and recorded so (as a call there would).
Status OnDevice(session::SessionState& st, int device, const std::function<Status()>& make) {
  if (device == st.device) return make();
  PHOS_RETURN_IF_ERROR(session::SelectCallDevice(st, device));
  Status s = make();
  session::SelectHomeDevice(st);
  return s;
}

/// On the consumer thread, once the session is known to be empty: every
/// handle with its id, every buffer allocated at its address (no bytes
/// copied yet). On failure the caller releases what was created.
Status Recreate(session::SessionState& st, RestoreTask& task, const image::v1::SessionHandles& handles,
                const image::v1::SessionModules& modules, const RestoreDevices& plan, Progress* progress) {
  progress->SetPhase("recreate", "loading " + std::to_string(modules.modules_size()) + " modules, " +
                                     std::to_string(handles.functions_size()) + " functions, " +
                                     std::to_string(handles.streams_size()) + " streams and " +
                                     std::to_string(handles.events_size()) + " events with their ids");
  for (const auto& m : modules.modules()) {
    const auto* bytes = reinterpret_cast<const std::byte*>(m.image().data());
    PHOS_RETURN_IF_ERROR(session::LoadModuleWithId(st, m.id(), std::span<const std::byte>(bytes, m.image().size()),
                                                   nullptr)
                             .WithContext("loading module " + std::to_string(m.id())));
  }
  PHOS_RETURN_IF_ERROR(PlaceModuleGlobals(st, handles, modules, plan));
  for (const auto& f : handles.functions()) {
    PHOS_RETURN_IF_ERROR(session::GetFunctionWithId(st, f.module_id(), f.id(), f.name(), nullptr)
                             .WithContext("resolving function " + std::to_string(f.id()) + " ('" + f.name() +
                                          "' of module " + std::to_string(f.module_id()) + ")"));
    for (const auto& a : f.attributes()) {
      PHOS_RETURN_IF_ERROR(session::SetFunctionAttributeOf(st, f.id(), a.attribute(), a.value(), nullptr)
                               .WithContext("setting attribute " + std::to_string(a.attribute()) + " of function " +
                                            std::to_string(f.id())));
    }
  }
  for (const auto& g : handles.globals()) {
    std::uint64_t at = 0, bytes = 0;
    const int device = plan.Of(DeviceOf(handles, g));
    PHOS_RETURN_IF_ERROR(
        OnDevice(st, device, [&] { return session::GetGlobalOf(st, g.module_id(), g.name(), &at, &bytes, nullptr); })
            .WithContext("resolving global '" + g.name() + "' of module " + std::to_string(g.module_id()) +
                         " on GPU " + std::to_string(device)));
    if (at == g.address() && bytes == g.bytes()) continue;
    // Elsewhere. Fine when the app never held the address (it copies to and
    // from the variable by name, and libphos asks phosd every time): its
    // bytes are loaded at the new place. Otherwise the app's pointer would
    // be wrong: refuse, naming both addresses.
    if (bytes == g.bytes() && g.address_private()) {
      task.RelocateGlobal(g.address(), at);
      spdlog::info("fresh restore: module global '{}' of module {} moved from {} to {} (the app never held its "
                   "address)", g.name(), g.module_id(), Hex(g.address()), Hex(at));
      continue;
    }
    return Status::FailedPrecondition(
        "module global '" + g.name() + "' of module " + std::to_string(g.module_id()) + " is at " + Hex(at) + " (" +
        std::to_string(bytes) + " bytes) in this context, the image has it at " + Hex(g.address()) + " (" +
        std::to_string(g.bytes()) + " bytes), and the app holds that address (it asked for it with " +
        "cudaGetSymbolAddress or cuModuleGetGlobal), so its pointers would be wrong (the backend placed the " +
        "module's globals elsewhere)");
  }
  for (const auto& s : handles.streams()) {
    const int device = plan.Of(DeviceOf(handles, s));
    PHOS_RETURN_IF_ERROR(
        OnDevice(st, device, [&] { return session::CreateStreamWithId(st, s.id(), s.flags(), s.priority(), nullptr); })
            .WithContext("creating stream " + std::to_string(s.id()) + " on GPU " + std::to_string(device)));
  }
  for (const auto& e : handles.events()) {
    const int device = plan.Of(DeviceOf(handles, e));
    PHOS_RETURN_IF_ERROR(
        OnDevice(st, device, [&] { return session::CreateEventWithId(st, e.id(), e.flags(), nullptr); })
            .WithContext("creating event " + std::to_string(e.id()) + " on GPU " + std::to_string(device)));
  }

  progress->SetPhase("map", "allocating the image's buffers at their addresses");
  // The app's reserved ranges (cuMemAddressReserve) first: its mappings
  // (cuMemMap) are buffers inside them.
  for (const auto& rr : task.snapshot().reserved_ranges) {
    PHOS_RETURN_IF_ERROR(session::ReserveAddressRangeAt(st, rr.address, rr.bytes)
                             .WithContext("reserving " + std::to_string(rr.bytes) + " bytes of address space at " +
                                          Hex(rr.address) + " (the address may be taken)"));
  }
  RestoreResult* r = task.mutable_result();
  std::map<std::uint64_t, int> buffer_devices;  // image address -> image GPU (other GPUs only)
  for (const auto& b : handles.buffer_devices()) buffer_devices[b.address()] = b.device();
  for (const auto& b : task.snapshot().buffers) {
    auto on = buffer_devices.find(b.address);
    const int device = plan.Of(on == buffer_devices.end() ? handles.device() : on->second);
    PHOS_RETURN_IF_ERROR(session::AllocateBufferAt(st, device, b.address, b.bytes));
    ++r->allocated;
  }
  // Texture and surface objects last: each must name a buffer of the session.
  for (const auto& t : handles.textures()) {
    wire::TextureDesc desc;
    PHOS_RETURN_IF_ERROR(DecodeTextureObject(t, &desc));
    std::uint64_t got = 0;
    PHOS_RETURN_IF_ERROR(session::CreateTextureObjectOf(st, desc, t.surface(), t.handle(), &got, nullptr)
                             .WithContext(std::string("recreating ") + (t.surface() ? "surface" : "texture") +
                                          " object " + std::to_string(t.handle())));
  }
  // The device heap: one of the buffers, its allocator state inside it.
  if (handles.device_heap() != 0) {
    PHOS_RETURN_IF_ERROR(session::AdoptDeviceHeap(st, handles.device_heap()).WithContext("restoring the device heap"));
  }
  return Status::Ok();
}

/// Stop-the-world: every extent (buffers and globals) H2D.
Status CopyAll(session::SessionState& st, RestoreTask& task, Progress* progress) {
  std::vector<std::size_t> all(static_cast<std::size_t>(task.manifest().buffers_size()));
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
  progress->SetPhase("copy", "copying the image to the device", task.result().bytes);
  return task.LoadExtentsOnTheirDevices(st, all);
}

/// The session goes to the GPU its image was taken on, or where the plan
/// puts it (an empty session: its context is replaced, as cudaSetDevice
/// does before any allocation); its other GPUs get a context each, and the
/// app's GPU ordinals their translation.
Status MoveToImageDevices(session::SessionState& st, const image::v1::SessionHandles& handles,
                          const RestoreDevices& plan) {
  if (plan.home != st.device) {
    PHOS_RETURN_IF_ERROR(session::MoveToDevice(st, plan.home)
                             .WithContext("moving session " + std::to_string(st.session_id) + " to GPU " +
                                          std::to_string(plan.home)));
  }
  for (int image_device : handles.other_devices()) {
    PHOS_RETURN_IF_ERROR(session::AddDeviceContext(st, plan.Of(image_device))
                             .WithContext("the process also used GPU " + std::to_string(image_device)));
  }
  st.device_aliases = RestoredAliases(handles, plan);
  return Status::Ok();
}

/// Forms the image's communicators again with the job's other ranks, under
/// the app's ids; a new unique id per job restore (`generation` in the
/// last bytes), so a copy of a job never meets the original or another copy.
Status RejoinCommunicators(session::SessionState& st, const image::v1::SessionHandles& handles,
                           std::uint64_t generation, Progress* progress) {
  if (handles.communicators_size() == 0) return Status::Ok();
  progress->SetPhase("communicators", "forming " + std::to_string(handles.communicators_size()) +
                                          " NCCL communicator(s) again with the job's other ranks");
  for (const auto& c : handles.communicators()) {
    backend::CommunicatorId id{};
    if (c.unique_id().size() != id.size()) return Status::Corruption("a communicator record without its unique id");
    std::memcpy(id.data(), c.unique_id().data(), id.size());
    for (std::size_t i = 0; i < sizeof generation; ++i) {
      id[id.size() - sizeof generation + i] ^= static_cast<std::uint8_t>(generation >> (8 * i));
    }
    PHOS_RETURN_IF_ERROR(session::JoinCommunicator(st, c.app_id(), id, c.nranks(), c.rank())
                             .WithContext("forming NCCL communicator " + std::to_string(c.app_id()) + " (rank " +
                                          std::to_string(c.rank()) + " of " + std::to_string(c.nranks()) + ")"));
  }
  return Status::Ok();
}

/// The control task's common part: refuse a non-empty or faulted session
/// unchanged, recreate and map, then `finish` (copy everything, or hand
/// the buffers to the concurrent loader). A failure after the first change
/// releases what was created.
Status RecreateInto(session::SessionState& st, RestoreTask& task, const image::v1::SessionHandles& handles,
                    const image::v1::SessionModules& modules, Progress* progress, std::uint64_t comm_generation,
                    const std::map<int, int>& device_map, const std::function<Status()>& finish) {
  PHOS_RETURN_IF_ERROR(CheckEmpty(st));
  if (handles.communicators_size() > 0 && comm_generation == 0) {
    return Status::FailedPrecondition(
        "this image is rank " + std::to_string(handles.communicators(0).rank()) + " of a " +
        std::to_string(handles.communicators(0).nranks()) +
        "-rank NCCL job: it comes back only with the job's other ranks (restore the job's directory); the session "
        "is unchanged");
  }
  RestoreDevices plan;
  PHOS_RETURN_IF_ERROR(PlanRestoreDevices(*st.backend, handles, device_map, &plan));
  PHOS_RETURN_IF_ERROR(MoveToImageDevices(st, handles, plan));
  progress->SetPhase("quiesce", "waiting for the session's GPU work to finish");
  if (Status sync = st.ctx->Synchronize(); !sync.ok()) {
    return Status::FailedPrecondition("the session's GPU context has a sticky error (" + sync.message() +
                                      "); fresh restore refused, the session is unchanged");
  }
  Status r = Recreate(st, task, handles, modules, plan, progress);
  if (r.ok()) r = finish();
  // Communicators last: each waits for the job's other ranks.
  if (r.ok()) r = RejoinCommunicators(st, handles, comm_generation, progress);
  if (!r.ok()) {
    // Back to empty: the app can retry (another image) or start over.
    if (!st.comms.empty()) session::AbortCommunicators(st, "its restore failed");
    ReleaseCreated(st);
    r = r.WithContext("fresh restore failed; everything it had created was released, session " +
                      std::to_string(st.session_id) + " is empty again");
  }
  return r;
}

Status SessionExited(const Status& s, session::Session& session) {
  if (s.code() != Status::Code::kUnavailable) return s;
  return Status::Unavailable("pid " + std::to_string(session.pid()) + " exited during the fresh restore (" +
                             s.message() + ")");
}

}  // namespace

Status RestoreFresh(session::Session& session, const RestoreOptions& options, Progress* progress,
                    RestoreResult* result) {
  return RestoreFreshWithHooks(session, options, progress, result, {}, nullptr);
}

Status RestoreFreshWithHooks(session::Session& session, const RestoreOptions& options, Progress* progress,
                             RestoreResult* result, const ConcurrentRestoreHooks& hooks,
                             std::vector<std::uint64_t>* load_order) {
  *result = RestoreResult{};
  result->dir = options.dir;
  result->concurrent = options.concurrent;
  EngineHook* hook = EngineHook::Of(session.hook());
  OperationClaim claim;
  PHOS_RETURN_IF_ERROR(claim.Acquire(hook, session.id(), session.pid()));
  if (options.concurrent && hook == nullptr) {
    return Status::FailedPrecondition("a concurrent restore needs the engine's admission hook, which this "
                                      "session was created without");
  }
  const auto t0 = Clock::now();
  const std::string untouched = "fresh restore refused; session " + std::to_string(session.id()) + " is untouched";
  auto task = std::make_unique<RestoreTask>(progress);
  PHOS_RETURN_IF_ERROR(task->Prepare(options.dir, VerifiesFirst(options.verify, false)).WithContext(untouched));
  // Shared with the concurrent ControlStep (a copyable std::function).
  auto handles = std::make_shared<image::v1::SessionHandles>();
  auto modules = std::make_shared<image::v1::SessionModules>();
  PHOS_RETURN_IF_ERROR(ReadSessionSections(task->manifest(), task->snapshot(), handles.get(), modules.get())
                           .WithContext(options.dir + "/manifest")
                           .WithContext(untouched));

  if (options.concurrent) {
    // Recreate and map here; from there on it is the concurrent restore:
    // every image buffer ABSENT, globals loaded synchronously, the loader
    // in first-use order, calls touching an absent buffer wait.
    const std::uint64_t generation = options.comm_generation;
    const std::map<int, int> device_map = options.device_map;
    ControlStep step = [hook, handles, modules, progress, generation, device_map](session::SessionState& st,
                                                                                  ConcurrentRestore& op) {
      return RecreateInto(st, op.task(), *handles, *modules, progress, generation, device_map,
                          [&] { return op.StartMapped(st, hook); });
    };
    Status s = DriveConcurrentRestore(session, hook, std::move(task), step, options, progress, result, hooks,
                                      load_order, t0);
    if (s.ok()) {
      spdlog::info("fresh restore of {} into session {} (pid {}): {} buffers, {} globals, {} bytes; resumed after "
                   "{} us, every buffer present after {} us (concurrent)",
                   options.dir, session.id(), session.pid(), result->buffers, result->globals, result->bytes,
                   result->stall_us, result->total_us);
    }
    return s;  // an exited session already says so (DriveConcurrentRestore)
  }

  Status s = session.RunControl([&](session::SessionState& st) -> Status {
    const auto stall0 = Clock::now();
    Status r = RecreateInto(st, *task, *handles, *modules, progress, options.comm_generation, options.device_map,
                            [&] { return CopyAll(st, *task, progress); });
    task->mutable_result()->stall_us = MicrosSince(stall0);
    return r;
  });
  if (!s.ok()) return SessionExited(s, session);
  *result = task->result();
  result->concurrent = false;
  result->total_us = MicrosSince(t0);
  spdlog::info("fresh restore of {} into session {} (pid {}): {} buffers, {} globals, {} bytes, {} us", options.dir,
               session.id(), session.pid(), result->buffers, result->globals, result->bytes, result->total_us);
  return Status::Ok();
}

}  // namespace phos::engine
