// Streams, events, device synchronisation and the deferred error:
// kStreamCreate/Destroy/Synchronize/Query/WaitEvent, kEventCreate/Record/
// Query/Synchronize/ElapsedTime/Destroy, kDeviceSynchronize, kGetLastError,
// kPeekAtLastError, kLaunchHostFunc (rows in interposer/protocol/calls.def). The frame's
// stream_id names the stream of stream-ordered calls.
#include <string>

#include "session/handlers.h"

namespace phos::session {

using wire::WireStatus;

namespace {

/// The view of a stream or event call: the frame's stream id (its backend
/// handle is added once the handler found it).
CallView StreamView(const SessionState& st, const CallContext& call) {
  CallView v = ViewOf(st, call);
  v.stream_id = call.rec.header.stream_id;
  return v;
}

/// The frame's stream, into `v`; false after out->Fail.
bool FrameStream(SessionState& st, const CallContext& call, CallView* v, backend::StreamHandle* stream,
                 Outcome* out) {
  if (Status s = FindStream(st, call.rec.header.stream_id, stream); !s.ok()) {
    out->Fail(s);
    return false;
  }
  v->stream = *stream;
  return true;
}

/// An event call on the frame's stream: finds both, then runs
/// `body(stream, event, event's context)` (an event lives on the GPU it was
/// made on, which may not be the call's: several_devices.cc).
template <typename Body>
void OnEvent(SessionState& st, const CallContext& call, uint32_t event_id, Outcome* out, Body&& body) {
  CallView v = StreamView(st, call);
  backend::StreamHandle stream = 0;
  if (!FrameStream(st, call, &v, &stream, out)) return;
  backend::EventHandle ev = 0;
  if (Status s = FindEvent(st, event_id, &ev); !s.ok()) return out->Fail(s);
  backend::Context* ectx = EventContext(st, event_id);
  out->Fail(st.executor->Run(v, [&] { return body(stream, ev, ectx); }));
}

}  // namespace

// ---------------------------------------------------------------- streams

void HandleStreamCreate(SessionState& st, const CallContext& call, const wire::StreamCreateRequest& req,
                        Outcome* out) {
  CallView v = StreamView(st, call);
  if (req.stream_id == 0 || st.streams.count(req.stream_id)) {
    return out->Fail(WireStatus::kInvalidValue, "stream id " + std::to_string(req.stream_id) + " is in use");
  }
  if (Status s = CheckRoom(st.streams.size(), "streams"); !s.ok()) return out->Fail(s);
  out->Fail(CreateStreamWithId(st, req.stream_id, req.flags, req.priority, &v));
}

void HandleStreamDestroy(SessionState& st, const CallContext& call, const wire::HandleRequest& req, Outcome* out) {
  CallView v = StreamView(st, call);
  backend::StreamHandle frame_stream = 0;
  if (!FrameStream(st, call, &v, &frame_stream, out)) return;
  auto it = st.streams.find(req.id);
  if (it == st.streams.end()) return out->Fail(Status::NotFound("unknown stream id " + std::to_string(req.id)));
  v.stream_id = req.id;
  v.stream = it->second;
  backend::Context* sctx = StreamContext(st, req.id);
  Status s = st.executor->Run(v, [&] { return sctx->DestroyStream(it->second); });
  if (!s.ok()) return out->Fail(s);
  st.streams.erase(it);
  st.stream_flags.erase(req.id);
  st.stream_devices.erase(req.id);
}

namespace {
void SyncOrQuery(SessionState& st, const CallContext& call, bool sync, Outcome* out) {
  CallView v = StreamView(st, call);
  backend::StreamHandle stream = 0;
  if (!FrameStream(st, call, &v, &stream, out)) return;
  Status s = st.executor->Run(v, [&] {
    return sync ? SyncResult(st, st.ctx->SynchronizeStream(stream)) : st.ctx->QueryStream(stream);
  });
  ReapRetained(st, false);
  out->Fail(s);
}
}  // namespace

void HandleStreamSynchronize(SessionState& st, const CallContext& call, const wire::NoPayload& req, Outcome* out) {
  SyncOrQuery(st, call, /*sync=*/true, out);
}

void HandleStreamQuery(SessionState& st, const CallContext& call, const wire::NoPayload& req, Outcome* out) {
  SyncOrQuery(st, call, /*sync=*/false, out);
}

void HandleStreamWaitEvent(SessionState& st, const CallContext& call, const wire::HandleRequest& req,
                           Outcome* out) {
  OnEvent(st, call, req.id, out, [&](backend::StreamHandle stream, backend::EventHandle ev, backend::Context* ectx) {
    if (ectx == st.ctx) return st.ctx->StreamWaitEvent(stream, ev);
    // An event of another GPU: the stream's later work must follow it.
    // phosd waits for the event here, before it queues that work — the
    // same order, without a cross-context wait in the backend. The other
    // GPU's own errors surface at its own synchronising calls.
    Status w = ectx->SynchronizeEvent(ev);
    return backend::IsAbandoned(w) ? w : Status::Ok();
  });
}

// ---------------------------------------------------------------- host functions

void HandleLaunchHostFunc(SessionState& st, const CallContext& call, const wire::HostFuncRequest& req,
                          Outcome* out) {
  CallView v = StreamView(st, call);
  backend::StreamHandle stream = 0;
  if (!FrameStream(st, call, &v, &stream, out)) return;
  if (req.word % 4 != 0 || req.doorbell % 4 != 0) {
    return out->Fail(WireStatus::kInvalidValue, "host function: the gate words must be 4-byte aligned");
  }
  // Both words must lie in the app's shared pinned segments: phosd's
  // mapping of them stays until the session ends, after its streams.
  std::byte* word = nullptr;
  std::byte* doorbell = nullptr;
  if (Status s = st.host_segments.Translate(req.word, 4, &word); !s.ok()) {
    return out->Fail(s.WithContext("host function gate word"));
  }
  if (Status s = st.host_segments.Translate(req.doorbell, 4, &doorbell); !s.ok()) {
    return out->Fail(s.WithContext("host function doorbell"));
  }
  auto* w = reinterpret_cast<std::atomic<uint32_t>*>(word);
  auto* d = reinterpret_cast<std::atomic<uint32_t>*>(doorbell);
  std::shared_ptr<const HostFunctionGates> gates = st.host_gates;
  out->Fail(st.executor->Run(v, [&] {
    return st.ctx->LaunchHostFunction(stream, [gates, w, d] { gates->Pass(w, d); });
  }));
}

// ---------------------------------------------------------------- events

void HandleEventCreate(SessionState& st, const CallContext& call, const wire::EventCreateRequest& req,
                       Outcome* out) {
  CallView v = StreamView(st, call);
  if (req.event_id == 0 || st.events.count(req.event_id)) {
    return out->Fail(WireStatus::kInvalidValue, "event id " + std::to_string(req.event_id) + " is in use");
  }
  if (Status s = CheckRoom(st.events.size(), "events"); !s.ok()) return out->Fail(s);
  out->Fail(CreateEventWithId(st, req.event_id, req.flags, &v));
}

void HandleEventRecord(SessionState& st, const CallContext& call, const wire::HandleRequest& req, Outcome* out) {
  OnEvent(st, call, req.id, out, [&](backend::StreamHandle stream, backend::EventHandle ev, backend::Context* ectx) {
    if (ectx != st.ctx) {
      return Status::NotFound("cudaEventRecord: event " + std::to_string(req.id) +
                              " was made on another GPU than the stream's (CUDA refuses it too)");
    }
    return st.ctx->RecordEvent(ev, stream);
  });
}

void HandleEventQuery(SessionState& st, const CallContext& call, const wire::HandleRequest& req, Outcome* out) {
  OnEvent(st, call, req.id, out,
          [&](backend::StreamHandle, backend::EventHandle ev, backend::Context* ectx) { return ectx->QueryEvent(ev); });
}

void HandleEventSynchronize(SessionState& st, const CallContext& call, const wire::HandleRequest& req,
                            Outcome* out) {
  OnEvent(st, call, req.id, out, [&](backend::StreamHandle, backend::EventHandle ev, backend::Context* ectx) {
    return SyncResult(st, ectx->SynchronizeEvent(ev));
  });
}

void HandleEventElapsedTime(SessionState& st, const CallContext& call, const wire::ElapsedTimeRequest& req,
                            Outcome* out) {
  CallView v = StreamView(st, call);
  backend::EventHandle a = 0, b = 0;
  if (Status s = FindEvent(st, req.start_event, &a); !s.ok()) return out->Fail(s);
  if (Status s = FindEvent(st, req.end_event, &b); !s.ok()) return out->Fail(s);
  backend::Context* ectx = EventContext(st, req.start_event);
  if (ectx != EventContext(st, req.end_event)) {
    return out->Fail(WireStatus::kInvalidResourceHandle, "cudaEventElapsedTime: the two events are on different GPUs");
  }
  float ms = 0;
  Status s = st.executor->Run(v, [&] { return ectx->ElapsedTime(a, b, &ms); });
  if (!s.ok()) return out->Fail(s);
  out->Set(wire::ElapsedTimeReply{ms, 0});
}

void HandleEventDestroy(SessionState& st, const CallContext& call, const wire::HandleRequest& req, Outcome* out) {
  OnEvent(st, call, req.id, out,
          [&](backend::StreamHandle, backend::EventHandle ev, backend::Context* ectx) { return ectx->DestroyEvent(ev); });
  if (out->ok()) {
    st.events.erase(req.id);
    st.event_flags.erase(req.id);
    st.event_devices.erase(req.id);
  }
}

// ---------------------------------------------------------------- device sync, last error

void HandleDeviceSynchronize(SessionState& st, const CallContext& call, const wire::NoPayload& req,
                             Outcome* out) {
  CallView v = StreamView(st, call);
  Status s = st.executor->Run(v, [&] { return SyncResult(st, st.ctx->Synchronize()); });
  ReapRetained(st, false);
  out->Fail(s);
}

void HandleGetLastError(SessionState& st, const CallContext& call, const wire::NoPayload& req, Outcome* out) {
  out->Fail(SyncResult(st, Status::Ok()));
}

void HandlePeekAtLastError(SessionState& st, const CallContext& call, const wire::NoPayload& req, Outcome* out) {
  out->Fail(st.deferred);
}

}  // namespace phos::session
