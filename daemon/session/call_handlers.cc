// Dispatch: the table of forwarded calls (interposer/protocol/calls.def)
// turned into phosd's switch, plus what every handler shares (handlers.h)
// and the session-wide state changes (call_handlers.h). The handlers live
// in one file per concern (handlers.h lists them).
#include "session/call_handlers.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>

#include "session/handlers.h"

namespace phos::session {

using wire::ApiId;
using wire::WireStatus;
namespace op = wire::op;

void Outcome::SetBytes(const void* p, size_t n) {
  n = std::min(n, data.size());
  if (n) std::memcpy(data.data(), p, n);
  bytes = static_cast<uint32_t>(n);
}

void Outcome::Fail(const Status& s) {
  if (s.ok()) return;
  Fail(wire::ToWire(s), s.message());
}

void Outcome::Fail(WireStatus w, std::string m) {
  status = w;
  // The reply holds kSlotResultBytes: keep the head (what failed) and the
  // tail (the root cause, last in a "context: cause" chain).
  if (m.size() > ring::kSlotResultBytes) {
    constexpr size_t kHead = 40;
    m = m.substr(0, kHead) + "..." + m.substr(m.size() - (ring::kSlotResultBytes - kHead - 3));
  }
  message = std::move(m);
  bytes = 0;
}

std::span<const std::byte> Outcome::reply() const {
  if (ok()) return {data.data(), bytes};
  return std::as_bytes(std::span<const char>(message.data(), std::min(message.size(), data.size())));
}

// ---------------------------------------------------------------- dispatch

namespace {

/// Reads the row's request struct from the start of the payload; `tail`
/// gets the rest (Tail rows), which must be empty for Exact rows.
template <typename Req>
Status DecodeRequest(const wire::CallRow& row, std::span<const std::byte> payload, Req* out,
                     std::span<const std::byte>* tail) {
  if constexpr (std::is_empty_v<Req>) {
    if (!payload.empty()) return Status::InvalidArgument("wire: this call takes no payload");
    return Status::Ok();
  } else {
    const bool has_tail = row.shape == wire::PayloadShape::kTail;
    if (payload.size() < sizeof(Req) || (!has_tail && payload.size() != sizeof(Req))) {
      return Status::InvalidArgument("wire: payload of " + std::to_string(payload.size()) + " bytes, expected " +
                                     std::to_string(sizeof(Req)) + (has_tail ? " or more" : ""));
    }
    std::memcpy(out, payload.data(), sizeof(Req));
    *tail = payload.subspan(sizeof(Req));
    return Status::Ok();
  }
}

template <typename Req>
using Handler = void (*)(SessionState&, const CallContext&, const Req&, Outcome*);

/// One row: refuse staging it does not allow, decode its request, run its handler.
template <ApiId kId, typename Req, Handler<Req> kHandler>
void Run(SessionState& st, const ring::Record& rec, std::span<const std::byte> payload, Outcome* out) {
  static constexpr const wire::CallRow* kRow = wire::FindCallRow(kId);
  static_assert(kRow != nullptr);
  if (rec.has_staging && !kRow->staged()) {
    return out->Fail(WireStatus::kNotSupported, std::string("staged pieces are not accepted for ") + kRow->api +
                                                    " (api id " + std::to_string(rec.header.api_id) + ")");
  }
  Req req{};
  std::span<const std::byte> tail;
  if (Status s = DecodeRequest(*kRow, payload, &req, &tail); !s.ok()) return out->Fail(s);
  kHandler(st, CallContext{*kRow, rec, tail}, req, out);
}

}  // namespace

void Dispatch(SessionState& st, const ring::Record& rec, std::span<const std::byte> payload, Outcome* out) {
  // One case per row of calls.def (a duplicated id fails to compile).
  // Switched on the number: phos-private ids are outside the generated enum.
  switch (rec.header.api_id) {
#define PHOS_CALL(Op, Api, Request, Shape, Reply, Handler, Staging, Sync, Access) \
  case static_cast<uint32_t>(op::k##Op):                                        \
    return Run<op::k##Op, wire::Request, &Handle##Handler>(st, rec, payload, out);
#include "protocol/calls.def"
#undef PHOS_CALL
    default:
      return out->Fail(WireStatus::kNotSupported,
                       "phosd does not implement api id " + std::to_string(rec.header.api_id) + " yet");
  }
}

const wire::CallRow* DispatchedRow(ApiId api) {
  switch (static_cast<uint32_t>(api)) {
#define PHOS_CALL(Op, Api, Request, Shape, Reply, Handler, Staging, Sync, Access) \
  case static_cast<uint32_t>(op::k##Op): {                                      \
    static constexpr const wire::CallRow* kRow = wire::FindCallRow(op::k##Op);  \
    return kRow;                                                                \
  }
#include "protocol/calls.def"
#undef PHOS_CALL
    default: return nullptr;
  }
}

// ---------------------------------------------------------------- shared by the handlers (handlers.h)

Status CheckRoom(size_t live, const char* what) {
  if (live < kMaxHandlesPerKind) return Status::Ok();
  return Status::OutOfMemory(std::string("too many ") + what + " in this session (limit " +
                             std::to_string(kMaxHandlesPerKind) + ")");
}

Status FindStream(SessionState& st, uint32_t id, backend::StreamHandle* out) {
  if (id == 0) {
    *out = backend::kDefaultStream;
    return Status::Ok();
  }
  auto it = st.streams.find(id);
  if (it == st.streams.end()) return Status::NotFound("unknown stream id " + std::to_string(id));
  *out = it->second;
  return Status::Ok();
}

Status FindEvent(SessionState& st, uint32_t id, backend::EventHandle* out) {
  auto it = st.events.find(id);
  if (it == st.events.end()) return Status::NotFound("unknown event id " + std::to_string(id));
  *out = it->second;
  return Status::Ok();
}

Status CheckDeviceRange(const SessionState& st, uint64_t ptr, uint64_t bytes) {
  uint64_t start = 0, size = 0;
  if (FindHoldingRange(st.buffers, ptr, bytes, &start, &size) ||
      FindHoldingRange(st.globals, ptr, bytes, &start, &size) ||
      InMappedRun(st.buffers, st.reserved_ranges, ptr, bytes)) {
    return Status::Ok();
  }
  return Status::InvalidArgument(
      fmt::format("invalid device pointer: [0x{:x}, +{}) is not in a buffer of this session", ptr, bytes));
}

Status SyncResult(SessionState& st, Status own) {
  Status d = std::move(st.deferred);
  st.deferred = Status::Ok();
  if (!own.ok()) return own;
  return d;
}

Status RecordStreamPoint(SessionState& st, backend::StreamHandle stream, backend::EventHandle* out) {
  *out = 0;
  Status s = st.ctx->CreateEvent(backend::kEventDisableTiming, out);
  if (s.ok()) s = st.ctx->RecordEvent(*out, stream);
  if (!s.ok() && *out != 0) {
    (void)st.ctx->DestroyEvent(*out);
    *out = 0;
  }
  return s;
}

Status EnqueueH2DPieces(SessionState& st, std::span<const std::byte> src, const std::vector<H2DPiece>& pieces,
                        backend::StreamHandle stream) {
  if (src.empty()) return Status::Ok();
  if (st.retained_bytes + src.size() > kMaxRetainedBytes) ReapRetained(st, /*wait_all=*/false);
  if (st.retained_bytes + src.size() > kMaxRetainedBytes) ReapRetained(st, /*wait_all=*/true);
  SessionState::RetainedHost r;
  for (auto it = st.spare_host_buffers.begin(); it != st.spare_host_buffers.end(); ++it) {
    if (it->capacity() >= src.size()) {
      st.spare_host_bytes -= it->capacity();
      r.bytes = std::move(*it);
      st.spare_host_buffers.erase(it);
      break;
    }
  }
  r.bytes.assign(src.begin(), src.end());
  r.ctx = st.ctx;
  for (const H2DPiece& piece : pieces) {
    PHOS_RETURN_IF_ERROR(st.ctx->MemcpyAsync(piece.dst, reinterpret_cast<uint64_t>(r.bytes.data() + piece.offset),
                                             piece.bytes, backend::CopyKind::kHostToDevice, stream));
  }
  st.copy_stats.staged_copies += 1;
  st.copy_stats.staged_bytes += src.size();
  if (!RecordStreamPoint(st, stream, &r.event).ok()) {
    return st.ctx->SynchronizeStream(stream);  // cannot track the copy: wait for it instead
  }
  st.retained_bytes += r.bytes.size();
  st.retained.push_back(std::move(r));
  return Status::Ok();
}

Status EnqueueH2D(SessionState& st, uint64_t dst, std::span<const std::byte> src,
                  backend::StreamHandle stream) {
  return EnqueueH2DPieces(st, src, {H2DPiece{dst, 0, src.size()}}, stream);
}

CallView ViewOf(const SessionState& st, const CallContext& call) {
  CallView v;
  v.api = call.api();
  v.session_id = st.session_id;
  v.ctx = st.ctx;
  v.synchronous = call.rec.wants_reply();
  return v;
}

CallView ViewOnStream(const SessionState& st, const CallContext& call, backend::StreamHandle stream, bool sync) {
  CallView v = ViewOf(st, call);
  v.stream_id = call.rec.header.stream_id;
  v.stream = stream;
  v.synchronous = sync || call.rec.wants_reply();
  return v;
}

// ---------------------------------------------------------------- session-wide state (call_handlers.h)

void ReleaseOtherDevices(SessionState& st) {
  if (st.other_contexts.empty()) return;
  for (const auto& [device, ctx] : st.other_contexts) {
    if (Status s = ctx->Synchronize(); !s.ok()) {
      spdlog::info("session {}: pending work on GPU {} ended with: {}", st.session_id, device, s.ToString());
    }
  }
  auto in = [&](int device) { return st.other_contexts.at(device); };
  for (auto& [id, device] : st.event_devices) {
    if (auto e = st.events.find(id); e != st.events.end()) (void)in(device)->DestroyEvent(e->second);
    st.events.erase(id);
    st.event_flags.erase(id);
  }
  for (auto& [id, device] : st.stream_devices) {
    if (auto e = st.streams.find(id); e != st.streams.end()) (void)in(device)->DestroyStream(e->second);
    st.streams.erase(id);
    st.stream_flags.erase(id);
  }
  for (auto& [key, h] : st.device_modules) (void)in(key.first)->UnloadModule(h);
  for (auto it = st.buffer_devices.begin(); it != st.buffer_devices.end(); ++it) {
    if (Status f = in(it->second)->Free(it->first); !f.ok()) {
      spdlog::warn("session {}: freeing 0x{:x} on GPU {}: {}", st.session_id, it->first, it->second, f.ToString());
    }
    if (auto b = st.buffers.find(it->first); b != st.buffers.end()) st.buffers.Erase(b);
  }
  st.event_devices.clear();
  st.stream_devices.clear();
  st.device_modules.clear();
  st.device_functions.clear();
  st.buffer_devices.clear();
}

Status CreateStreamWithId(SessionState& st, uint32_t stream_id, uint32_t flags, int32_t priority,
                          const CallView* admit) {
  if (stream_id == 0 || st.streams.count(stream_id)) {
    return Status::InvalidArgument("stream id " + std::to_string(stream_id) + " is in use");
  }
  backend::StreamHandle h = 0;
  PHOS_RETURN_IF_ERROR(RunMaybeAdmitted(st, admit, [&] { return st.ctx->CreateStream(flags, priority, &h); }));
  st.streams[stream_id] = h;
  st.stream_flags[stream_id] = SessionState::StreamFlags{flags, priority};
  NoteObjectDevice(&st.stream_devices, st, stream_id);
  return Status::Ok();
}

Status CreateEventWithId(SessionState& st, uint32_t event_id, uint32_t flags, const CallView* admit) {
  if (event_id == 0 || st.events.count(event_id)) {
    return Status::InvalidArgument("event id " + std::to_string(event_id) + " is in use");
  }
  backend::EventHandle h = 0;
  PHOS_RETURN_IF_ERROR(RunMaybeAdmitted(st, admit, [&] { return st.ctx->CreateEvent(flags, &h); }));
  st.events[event_id] = h;
  st.event_flags[event_id] = flags;
  NoteObjectDevice(&st.event_devices, st, event_id);
  return Status::Ok();
}

void ReapRetained(SessionState& st, bool wait_all) {
  if (st.retained.empty() && st.pending_frees.empty()) return;
  if (wait_all) {
    st.Defer(HomeContext(st)->Synchronize());
    for (const auto& [device, ctx] : st.other_contexts) st.Defer(ctx->Synchronize());
  }
  for (auto it = st.pending_frees.begin(); it != st.pending_frees.end();) {
    backend::Context* ctx = it->ctx != nullptr ? it->ctx : HomeContext(st);
    if (wait_all || ctx->QueryEvent(it->event).ok()) {
      (void)ctx->DestroyEvent(it->event);
      if (Status f = ctx->Free(it->ptr); !f.ok()) {
        spdlog::warn("session {}: releasing 0x{:x} (freed in stream order): {}", st.session_id, it->ptr,
                     f.ToString());
      }
      it = st.pending_frees.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = st.retained.begin(); it != st.retained.end();) {
    backend::Context* ctx = it->ctx != nullptr ? it->ctx : HomeContext(st);
    if (wait_all || ctx->QueryEvent(it->event).ok()) {
      (void)ctx->DestroyEvent(it->event);
      st.retained_bytes -= it->bytes.size();
      if (st.spare_host_bytes + it->bytes.capacity() <= kMaxRetainedBytes) {
        st.spare_host_bytes += it->bytes.capacity();
        st.spare_host_buffers.push_back(std::move(it->bytes));
      }
      it = st.retained.erase(it);
    } else {
      ++it;
    }
  }
}

StagingArenaRange StagingArena(const SessionState& st) {
  if (st.region_base == nullptr) return {};
  return {wire::ChunkBytes(st.region_base, st.geometry, 0), uint64_t{st.geometry.chunk_count} * st.geometry.chunk_bytes};
}

void PinStagingArena(SessionState& st) {
  // Pinned with the home context only: a context of another GPU copies
  // through it pageable (correct, slower), and teardown knows what to undo.
  if (st.ctx == nullptr || st.ctx != HomeContext(st)) return;
  if (st.staging_pinned_for == st.ctx || st.region_base == nullptr) return;
  st.staging_pinned_for = st.ctx;
  const StagingArenaRange arena = StagingArena(st);
  if (arena.bytes == 0) return;
  if (Status s = st.ctx->RegisterHostMemory(arena.base, arena.bytes); !s.ok()) {
    spdlog::info("session {}: staging arena ({} bytes) not pinned, device-to-host copies into it stay pageable: {}",
                 st.session_id, arena.bytes, s.ToString());
    return;
  }
  st.staging_pinned = true;
}

void ReleaseAll(SessionState& st) {
  if (st.ctx == nullptr) return;
  // First: a group of this session waiting for its peers would hold up the
  // synchronisation below, and the peers would wait for it forever.
  if (!st.comms.empty()) AbortCommunicators(st, "its process ended or reset its device");
  Status s = st.ctx->Synchronize();
  if (!s.ok()) spdlog::info("session {}: pending work ended with: {}", st.session_id, s.ToString());
  ReapRetained(st, true);
  ReleaseOtherDevices(st);
  // Nothing runs any more: the segments' registrations can go (the
  // mappings stay for a context made after a device reset).
  st.host_segments.Unregister(st.ctx);
  if (st.staging_pinned) {
    if (Status u = st.ctx->UnregisterHostMemory(StagingArena(st).base); !u.ok())
      spdlog::warn("session {}: unregistering the staging arena: {}", st.session_id, u.ToString());
  }
  st.staging_pinned = false;
  st.staging_pinned_for = nullptr;
  for (auto& [h, obj] : st.texture_objects) (void)st.ctx->DestroyTextureObject(h);
  for (auto& [id, h] : st.events) (void)st.ctx->DestroyEvent(h);
  for (auto& [id, h] : st.streams) (void)st.ctx->DestroyStream(h);
  for (auto& [id, h] : st.modules) (void)st.ctx->UnloadModule(h);
  for (auto& [ptr, bytes] : st.buffers) {
    Status f = st.ctx->Free(ptr);
    if (!f.ok()) spdlog::warn("session {}: freeing 0x{:x}: {}", st.session_id, ptr, f.ToString());
  }
  for (auto& [start, bytes] : st.reserved_ranges) {  // after the mappings inside them
    Status f = st.ctx->ReleaseAddressRange(start);
    if (!f.ok()) spdlog::warn("session {}: releasing reserved range 0x{:x}: {}", st.session_id, start, f.ToString());
  }
  st.reserved_ranges.clear();
  st.texture_objects.clear();
  st.device_heap = 0;  // freed with the buffers
  st.device_heap_bytes = SessionState::kDefaultDeviceHeapBytes;  // cudaDeviceReset resets the limits too
  st.events.clear();
  st.streams.clear();
  st.event_flags.clear();
  st.stream_flags.clear();
  st.global_symbols.clear();
  st.module_globals.clear();
  st.modules.clear();
  st.module_kernels.clear();
  st.module_images.clear();
  st.module_load_order.clear();
  st.functions.clear();
  st.pending_images.clear();
  st.pending_image_bytes = 0;
  st.buffers.Clear();
  st.globals.clear();
}

}  // namespace phos::session
