// What the wire handlers share (internal to daemon/session). Each row of
// interposer/protocol/calls.def names a handler, Handle<Handler>, declared
// here from the table and defined in the file of its concern:
//   device_handlers.cc          device queries
//   device_heap.cc              the device heap's size
//   memory_handlers.cc          allocation, copies, memsets, pinned segments
//   stream_event_handlers.cc    streams, events, device sync, last error
//   texture_handlers.cc         texture and surface objects
//   vmm_handlers.cc             the driver's virtual-memory API
//   module_handlers.cc          modules, functions, globals, launches
//   function_reset_handlers.cc  function attributes, cudaDeviceReset
//   blas_handlers.cc            cuBLAS routines
// Dispatch (call_handlers.cc) decodes the row's request struct before it
// calls the handler (a payload of the wrong size never reaches it), refuses
// staging the row does not allow and answers unknown ids.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "protocol/calls.h"
#include "session/call_handlers.h"

namespace phos::session {

/// A decoded call as its handler sees it.
struct CallContext {
  const wire::CallRow& row;
  const ring::Record& rec;
  std::span<const std::byte> tail;  // bytes after the request struct (Tail rows; else empty)

  wire::ApiId api() const { return row.id; }
  /// The row's Sync column: the op finishes its work before it answers.
  bool sync() const { return row.synchronous(); }
};

// One declaration per row (rows sharing a handler redeclare it).
#define PHOS_CALL(Op, Api, Request, Shape, Reply, Handler, Staging, Sync, Access) \
  void Handle##Handler(SessionState& st, const CallContext& call, const wire::Request& req, Outcome* out);
#include "protocol/calls.def"
#undef PHOS_CALL

// ---- limits on what one (untrusted) app can make phosd hold besides device memory
inline constexpr uint64_t kMaxRetainedBytes = 64ull << 20;
inline constexpr uint64_t kMaxPendingImageBytes = 1ull << 30;
inline constexpr size_t kMaxHandlesPerKind = 1u << 16;

/// OutOfMemory when a session already holds kMaxHandlesPerKind of `what`.
Status CheckRoom(size_t live, const char* what);
/// Virtual stream id -> backend stream (0 = the default stream).
Status FindStream(SessionState& st, uint32_t id, backend::StreamHandle* out);
Status FindEvent(SessionState& st, uint32_t id, backend::EventHandle* out);
/// Isolation: a device range a copy or memset names must lie inside one
/// buffer (or module global) of THIS session. (All contexts live in phosd's
/// one address space, so the backend alone would accept another session's
/// pointer.)
Status CheckDeviceRange(const SessionState& st, uint64_t ptr, uint64_t bytes);
/// An event recorded on `stream` now, which completes once the work the
/// stream holds so far has run (retained H2D bytes, stream-ordered frees).
/// On failure no event is left (*out = 0): the caller waits for the stream
/// instead.
Status RecordStreamPoint(SessionState& st, backend::StreamHandle stream, backend::EventHandle* out);
/// cudaFree's and cuMemUnmap's work (memory_handlers.cc): the buffer at `it`
/// (its whole range added to `view` as the Release operand) freed once the
/// device's work is done, then forgotten. The backend's error, if any.
Status FreeBufferSynchronously(SessionState& st, CallView view, BufferMap::const_iterator it);
/// A synchronising call's status: its own failure first, else the deferred
/// error of earlier posted work. Either way the deferred error is consumed.
Status SyncResult(SessionState& st, Status own);

/// One device-side piece of a retained H2D source: `bytes` bytes from
/// src[offset] to `dst`.
struct H2DPiece {
  uint64_t dst = 0;
  uint64_t offset = 0;
  uint64_t bytes = 0;
};
/// Enqueues H2D copies of pieces of `src`, which phosd keeps (one copy of
/// it, one event) until they have run.
Status EnqueueH2DPieces(SessionState& st, std::span<const std::byte> src, const std::vector<H2DPiece>& pieces,
                        backend::StreamHandle stream);
/// Enqueues an H2D copy from bytes phosd keeps until the copy has run.
Status EnqueueH2D(SessionState& st, uint64_t dst, std::span<const std::byte> src, backend::StreamHandle stream);

/// Records that object `id` (a buffer's start, a stream or event id) was
/// made on the call's GPU when that is not the home one: objects of the
/// home GPU are in no *_devices map (several_devices.cc).
template <typename DeviceMap>
void NoteObjectDevice(DeviceMap* devices, const SessionState& st, typename DeviceMap::key_type id) {
  if (st.call_device != st.device) (*devices)[id] = st.call_device;
}
/// The backend's attribute for a settable wire function attribute
/// (wire::kFuncAttr*: 8 and 9); InvalidArgument for any other.
Status SettableFunctionAttribute(int32_t attribute, backend::FunctionAttribute* out);
/// Pinned host segments are registered with the home context; a call on
/// another GPU copies from them as from pageable memory (phosd's mapping of
/// the same bytes either way).
Status EnsurePinnedSegments(SessionState& st);
/// NotSupported naming `what` when the call runs on a GPU other than the
/// session's home one: what phos does on the first GPU of a process only.
Status HomeDeviceOnly(const SessionState& st, const char* what);
/// Module `module_id` / function `function_id` in the context of the call's
/// GPU, loaded (resolved) there the first time it is used on it.
Status ModuleOnCallDevice(SessionState& st, uint32_t module_id, backend::ModuleHandle* out);
Status FunctionOnCallDevice(SessionState& st, uint32_t function_id, backend::FunctionHandle* out);

/// What the executor shows the admission hook about a call: api, session,
/// the frame's stream, synchronous when the app waits. The handler adds
/// the operands.
CallView ViewOf(const SessionState& st, const CallContext& call);
/// The same on the frame's stream (`stream` is its backend handle);
/// synchronous also when the op is (`sync`).
CallView ViewOnStream(const SessionState& st, const CallContext& call, backend::StreamHandle stream, bool sync);

}  // namespace phos::session
