// Decoding and executing wire calls (interposer/protocol/wire.h) against a
// session's backend Context. Every call is a row of the table of forwarded
// calls (interposer/protocol/calls.def), which names its handler;
// Dispatch() runs the row of a record's api id (handlers.h lists the
// handler files). Everything here runs on the session's consumer thread
// only: SessionState has no lock because exactly one thread touches it.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "common/status.h"
#include "protocol/calls.h"
#include "protocol/wire.h"
#include "ring/channel.h"
#include "ring/record.h"
#include "ring/ring.h"
#include "session/buffer_map.h"
#include "session/communicator_book.h"
#include "session/executor.h"
#include "session/host_functions.h"
#include "session/host_segments.h"
#include "session/kernel_access.h"

namespace phos::session {

/// The per-session state the handlers work on. Owned by the Session;
/// touched only by its consumer thread (and by Teardown on that same
/// thread), so no lock.
struct SessionState {
  uint64_t session_id = 0;
  // The session's home GPU (phosd's ordinal) and its context: the GPU the
  // process started on, or moved to while it held nothing (MoveToDevice).
  // Checkpoints, restores and `phos ps` know this one.
  int device = 0;
  backend::Backend* backend = nullptr;  // not owned; outlives the session
  // The context the handlers work in: the home context between calls; during
  // a call, the context of the call's GPU (SelectCallDevice). Owned by the
  // Session.
  backend::Context* ctx = nullptr;
  // The home context while a call runs on another GPU (ctx points there
  // then); null between calls. HomeContext() reads whichever holds it.
  backend::Context* home_ctx = nullptr;
  // Several GPUs in one process (docs/interposer.md "Several GPUs in one
  // process"): the contexts of the other GPUs it used (phosd's ordinal ->
  // context, owned by the Session; made by `add_context` when a call first
  // names that GPU), and where each object of theirs lives. Objects of the
  // home GPU are in none of the *_devices maps, so a one-GPU session (every
  // checkpoint and restore) never reads them.
  std::map<int, backend::Context*> other_contexts;
  int call_device = 0;                                // the GPU of the call being executed
  std::map<uint64_t, int> buffer_devices;             // buffer start -> GPU (not home)
  std::unordered_map<uint32_t, int> stream_devices;   // virtual stream id -> GPU (not home)
  std::unordered_map<uint32_t, int> event_devices;    // virtual event id -> GPU (not home)
  // Modules and functions loaded on another GPU, lazily when first used
  // there (as CUDA's lazy loading): (GPU, module id) -> handle, (GPU,
  // function id) -> handle. The home handles are in `modules`/`functions`.
  std::map<std::pair<int, uint32_t>, backend::ModuleHandle> device_modules;
  std::map<std::pair<int, uint32_t>, backend::FunctionHandle> device_functions;
  // The app names GPUs by the ordinals phosd had when the process started
  // (libphos.so resolved them once): after a restore with --device-map its
  // GPU k is phosd's device_aliases[k] (app ordinal -> phosd ordinal; only
  // those that differ). Every ordinal a call names goes through PhosdDevice.
  std::map<int, int> device_aliases;
  // Set by the Session: makes a context on GPU `device` (not the home one,
  // none there yet) and records it in other_contexts.
  std::function<Status(int device)> add_context;
  ring::RingServer* ring = nullptr;     // owned by the Session
  std::byte* region_base = nullptr;     // the mapped region (SharedRegion owns it)
  ring::RingGeometry geometry;          // phosd's private copy
  Executor* executor = nullptr;
  // Kernel signatures for access sets (BuildModuleKernels); not owned: the
  // Daemon's, shared by every session (it locks itself). Null: per call.
  signature::SignatureCache* signature_cache = nullptr;

  // Every allocation of this session (start address -> bytes), its total
  // and the republish flag, in one owner (buffer_map.h).
  BufferMap buffers;
  // The app's own reserved address ranges (cuMemAddressReserve: start ->
  // bytes; vmm_handlers.cc). The buffers inside them are the app's
  // mappings (cuMemMap) and nothing else is: cudaMalloc never lands there.
  // Back-to-back mappings of one range are one range for copies, and a
  // kernel given a pointer into a range may reach all of its mappings.
  std::map<uint64_t, uint64_t> reserved_ranges;
  // Texture and surface objects (backend handle, which the app and its
  // kernels hold -> what it samples; texture_handlers.cc). A launch of a
  // kernel that may use them reads (textures) or writes (surfaces) their
  // buffers (TextureAccess); a restore into a fresh session recreates them
  // under the same handles.
  struct TextureObject {
    wire::TextureDesc desc{};
    bool surface = false;
    uint64_t span = 0;  // bytes from desc.base its texels occupy
  };
  std::map<uint64_t, TextureObject> texture_objects;
  // The device heap kernels' malloc/free use (device_heap.cc): a buffer of
  // the session (so checkpoints carry it, allocator state included),
  // made at the first launch of a kernel whose module calls malloc; 0
  // until then. Its size is set by cudaDeviceSetLimit before that.
  static constexpr uint64_t kDefaultDeviceHeapBytes = 8ull << 20;  // CUDA's default cudaLimitMallocHeapSize
  uint64_t device_heap = 0;
  uint64_t device_heap_bytes = kDefaultDeviceHeapBytes;
  // Module globals (address -> bytes): device ranges the app may also copy.
  std::map<uint64_t, uint64_t> globals;
  // Where each global came from (address -> module id and symbol name, as
  // kModuleGetGlobal resolved it): a restore into a fresh session resolves
  // it again (engine/fresh_restore.h). Same keys as `globals`.
  struct GlobalSymbol {
    uint32_t module_id = 0;
    std::string name;
    // The app was given this address (wire::kGlobalAddressToApp) and may
    // hold it: a restore must put the variable back here. Once set, stays.
    bool address_to_app = false;
    // The GPU whose instance of the module holds it (each GPU a module is
    // used on has its own copy of its variables).
    int device = 0;
  };
  std::map<uint64_t, GlobalSymbol> global_symbols;
  // The same globals by module (module id -> (address, bytes)): what a
  // launch of one of its kernels adds to its access set
  // (ComputeLaunchAccess). Kept with the two above by RecordGlobal and
  // ForgetModuleGlobals (module_handlers.cc).
  std::unordered_map<uint32_t, std::vector<std::pair<uint64_t, uint64_t>>> module_globals;

  // Virtual id -> backend handle.
  std::unordered_map<uint32_t, backend::StreamHandle> streams;
  std::unordered_map<uint32_t, backend::EventHandle> events;
  // How each stream / event was created (virtual id -> creation flags),
  // kept for a restore into a fresh session. Same keys as streams/events.
  struct StreamFlags {
    uint32_t flags = 0;
    int32_t priority = 0;
  };
  std::unordered_map<uint32_t, StreamFlags> stream_flags;
  std::unordered_map<uint32_t, uint32_t> event_flags;
  std::unordered_map<uint32_t, backend::ModuleHandle> modules;
  struct Function {
    uint32_t module_id = 0;
    backend::FunctionHandle handle = 0;
    // Set by kModuleGetFunction (kernel_access.h; a kUnknown plan when
    // the module did not describe the kernel). A launch treats null as
    // kUnknown.
    std::shared_ptr<KernelAccessPlan> access;
    // Attributes the app set (kFuncSetAttribute: wire attribute id ->
    // value), re-applied by a restore into a fresh session.
    std::map<int32_t, int32_t> attributes;
  };
  std::unordered_map<uint32_t, Function> functions;
  // The image each module was loaded from (module id -> bytes, as the app
  // sent it): twins are built from its PTX (engine/twin_validator.h) and
  // a full restore reloads modules from it. Shared: immutable once loaded.
  std::unordered_map<uint32_t, std::shared_ptr<const std::vector<std::byte>>> module_images;
  // The order modules were loaded in (module id -> sequence number): a
  // fresh restore reloads them in that order, so a backend that places
  // module variables by allocation order puts them where they were.
  std::unordered_map<uint32_t, uint64_t> module_load_order;
  uint64_t next_module_load = 0;
  // Kernel access plans of each loaded module (module id -> plans).
  std::unordered_map<uint32_t, ModuleKernels> module_kernels;
  // Module images arriving in staged pieces: module id -> bytes so far.
  struct PendingImage {
    std::vector<std::byte> bytes;
    uint64_t received = 0;
  };
  std::unordered_map<uint32_t, PendingImage> pending_images;
  uint64_t pending_image_bytes = 0;

  // Host bytes of H2D copies the backend has not run yet (the sim and a
  // pageable-memory driver read the source when the copy runs): kept with
  // an event recorded after the copy, dropped once the event completed.
  struct RetainedHost {
    backend::EventHandle event = 0;
    std::vector<std::byte> bytes;
    backend::Context* ctx = nullptr;  // the event's context (a session's, alive while the entry is)
  };
  std::deque<RetainedHost> retained;
  uint64_t retained_bytes = 0;
  // Buffers freed in stream order (kFreeAsync): gone from `buffers` when
  // the call ran, their memory released once the event recorded after the
  // stream's earlier work has completed (work queued before the free may
  // still use them). Reaped with `retained` (ReapRetained).
  struct PendingFree {
    backend::EventHandle event = 0;
    uint64_t ptr = 0;
    backend::Context* ctx = nullptr;  // the event's and the buffer's context
  };
  std::deque<PendingFree> pending_frees;
  // Buffers of reaped RetainedHost entries, reused by the next staged copy:
  // a fresh multi-MiB vector per staging chunk costs an mmap, page faults
  // on every page and an munmap — more than the copy itself. Bounded to
  // kMaxRetainedBytes of capacity in total.
  std::vector<std::vector<std::byte>> spare_host_buffers;
  uint64_t spare_host_bytes = 0;

  // Pinned host memory (docs/interposer.md "Pinned host memory and
  // copies"): the app's channel (host segment records arrive on it; owned
  // by the Session), its shared pinned segments, and how host<->device
  // copies travelled (kHostCopyStats).
  ring::ChannelConnection* channel = nullptr;
  HostSegmentTable host_segments;
  // The context the staging arena (the ring region's reply chunks) is
  // registered with, so that a pageable D2H lands there by DMA
  // (PinStagingArena); null: not yet tried with the current context.
  // Consumer thread only.
  const backend::Context* staging_pinned_for = nullptr;
  bool staging_pinned = false;  // the registration succeeded (ReleaseAll undoes it)
  // Gates of the app's host functions (kLaunchHostFunc): shared with the
  // gates queued on the backend's streams; cancelled by the Session when
  // the app is gone or phosd stops (any thread: the object is
  // thread-safe and this pointer never changes).
  const std::shared_ptr<HostFunctionGates> host_gates = std::make_shared<HostFunctionGates>();
  struct CopyStats {
    uint64_t pinned_copies = 0;
    uint64_t pinned_bytes = 0;
    uint64_t staged_copies = 0;
    uint64_t staged_bytes = 0;
  } copy_stats;

  // The first error of work the app did not wait for (a posted call's
  // enqueue error); returned (and cleared) by the next synchronising call.
  // Kernel faults stay sticky in the backend and surface from its
  // Synchronize* calls.
  Status deferred;

  void Defer(const Status& s) {
    if (!s.ok() && deferred.ok()) deferred = s;
  }

  // NCCL communicators (the app's id -> this session's rank in it and the
  // unique id that names it; nccl_handlers.cc). A session's teardown aborts
  // those it still holds, so its peers fail instead of waiting for it.
  struct Communicator {
    std::shared_ptr<backend::CommRank> rank;
    backend::CommunicatorId unique_id{};
  };
  std::map<uint32_t, Communicator> comms;
  // phosd's book of every session's ranks and their counts (a job
  // checkpoint's cut); not owned, outlives the session. Null: not kept
  // (tests, the fuzzer).
  CommunicatorBook* comm_book = nullptr;
  // The Session's stop flag (its app ended, or phosd stops): a call that
  // blocks on other processes (ncclCommInitRank) gives up when it is set.
  // Null where no Session owns the state (tests): never set.
  const std::atomic<bool>* stopping = nullptr;

  // Set by the Session: replaces `ctx` with a fresh Context on the same
  // device (cudaDeviceReset; the old one must hold nothing any more). On
  // failure `ctx` is unchanged.
  std::function<Status()> replace_context;
};

/// A call's result: the wire status, and the reply bytes (the reply struct
/// on success, the error message on failure).
struct Outcome {
  wire::WireStatus status = wire::WireStatus::kSuccess;
  std::string message;  // on failure
  uint32_t bytes = 0;
  std::array<std::byte, ring::kSlotResultBytes> data{};

  template <typename T>
  void Set(const T& v) {
    static_assert(sizeof(T) <= ring::kSlotResultBytes);
    std::memcpy(data.data(), &v, sizeof(T));
    bytes = sizeof(T);
  }
  void SetBytes(const void* p, size_t n);
  /// Records a failure (no-op for OK).
  void Fail(const Status& s);
  void Fail(wire::WireStatus w, std::string message);
  bool ok() const { return status == wire::WireStatus::kSuccess; }
  std::span<const std::byte> reply() const;
};

/// Executes one decoded record. `payload` is a private copy of the frame's
/// payload (after the StagingRef for staged pieces). Never throws; any
/// malformed input becomes kInvalidValue, any unknown api id kNotSupported,
/// a staged record of a row that does not allow staging kNotSupported.
void Dispatch(SessionState& st, const ring::Record& record, std::span<const std::byte> payload,
              Outcome* out);
/// The row of calls.def Dispatch runs for `api` (nullptr: answered
/// kNotSupported). Tests check that it is wire::FindCallRow(api) for every row.
const wire::CallRow* DispatchedRow(wire::ApiId api);

/// Releases what the session keeps only until queued work has run: host
/// bytes of H2D copies that have run, and the memory of buffers freed in
/// stream order whose free point the stream has passed. `wait_all`:
/// synchronise the context first and release everything (teardown, memory
/// pressure, a restore).
void ReapRetained(SessionState& st, bool wait_all);


// ---- State changes shared by the wire handlers and the C/R engine's
// restore into a fresh session (engine/fresh_restore.h), which recreates an
// image's objects under the app's old virtual ids. Each does one handler's
// backend work and records the result in SessionState. `admit`: the wire
// call's view, the backend work runs through the executor (handlers); null
// from a control task (between two calls: nothing to admit). Refuse an id
// of 0 or one in use (InvalidArgument); backend errors are returned as is.

/// kModuleLoad: loads `image` as module `module_id` (keeps a copy of the
/// image and builds its kernel access plans).
Status LoadModuleWithId(SessionState& st, uint32_t module_id, std::span<const std::byte> image,
                        const CallView* admit);
/// Records every module-scope variable of module `module_id` (its PTX's,
/// ModuleKernels::variables) as a global of the session whose address the
/// app does not hold: a checkpoint then saves what kernels wrote into
/// them, and a restore puts it back, although the host never named them
/// (kModuleLoad does this; a restore takes them from the image's globals).
void RecordModuleVariables(SessionState& st, uint32_t module_id);
/// The same for the instance `h` of module `module_id` on GPU `device`
/// (context `ctx`): the home one at load, another when a GPU first uses it.
void RecordModuleVariablesOf(SessionState& st, uint32_t module_id, int device, backend::Context* ctx,
                             backend::ModuleHandle h);
/// Records the variable `name` of module `module_id`'s instance on GPU
/// `device` at [ptr, ptr+bytes) in globals, global_symbols (keeping its
/// address_to_app) and module_globals; returns its symbol.
SessionState::GlobalSymbol& RecordGlobal(SessionState& st, uint64_t ptr, uint64_t bytes, uint32_t module_id,
                                         const std::string& name, int device);
/// Forgets every global of module `module_id` (it was unloaded).
void ForgetModuleGlobals(SessionState& st, uint32_t module_id);
/// kModuleGetFunction: resolves `name` in module `module_id` as `function_id`.
Status GetFunctionWithId(SessionState& st, uint32_t module_id, uint32_t function_id, const std::string& name,
                         const CallView* admit);
/// kModuleGetGlobal: resolves the global `name` of module `module_id` and
/// records it (globals, global_symbols).
Status GetGlobalOf(SessionState& st, uint32_t module_id, const std::string& name, uint64_t* ptr, uint64_t* bytes,
                   const CallView* admit);
/// kStreamCreate / kEventCreate under a given virtual id.
Status CreateStreamWithId(SessionState& st, uint32_t stream_id, uint32_t flags, int32_t priority,
                          const CallView* admit);
Status CreateEventWithId(SessionState& st, uint32_t event_id, uint32_t flags, const CallView* admit);
/// kCreateTextureObject / kCreateSurfaceObject (texture_handlers.cc):
/// checks `desc` and that its texels lie in one buffer of the session,
/// creates the object (`requested` handle, or any when 0) and records it.
Status CreateTextureObjectOf(SessionState& st, const wire::TextureDesc& desc, bool surface, uint64_t requested,
                             uint64_t* handle, const CallView* admit);
/// Adds to a kernel launch's access set the buffers of every texture
/// (read) and surface (read+write) object of the session: a handle reaches
/// a kernel through its parameters or through memory, so phosd cannot tell
/// which ones a launch uses (texture_handlers.cc).
void AddTextureAccess(const SessionState& st, CallView* view);
/// A kernel given a pointer into a reserved range (cuMemAddressReserve)
/// may reach every mapping in it (a tensor spans the back-to-back mappings
/// of PyTorch's expandable segments): each range of `view` that starts in
/// a reserved range brings the whole reserved range in, with its role
/// (vmm_handlers.cc).
void AddMappedRangeAccess(const SessionState& st, CallView* view);
/// kMemAddressReserve at `at` exactly (a restore; `at` != 0), recorded in
/// reserved_ranges.
Status ReserveAddressRangeAt(SessionState& st, uint64_t at, uint64_t bytes);
/// A buffer of `bytes` at `at` exactly, on phosd's GPU `device` (a
/// restore), recorded in buffers (and buffer_devices off the home GPU).
/// The error names the range and GPU (memory_handlers.cc).
Status AllocateBufferAt(SessionState& st, int device, uint64_t at, uint64_t bytes);
/// The device heap (device_heap.cc): made (a buffer of the session, handed
/// to the backend) if a kernel of a module that calls malloc is launched
/// and there is none yet.
Status EnsureDeviceHeap(SessionState& st, const CallView* admit);
/// Adopts buffer `address` as the device heap (a restore into a fresh
/// session: the buffer came back with the image).
Status AdoptDeviceHeap(SessionState& st, uint64_t address);
/// A kernel may reach the heap through any pointer malloc returned (kept in
/// memory by an earlier kernel): once a heap exists, every launch reads
/// and writes it.
void AddDeviceHeapAccess(const SessionState& st, CallView* view);
/// kFuncSetAttribute (function_reset_handlers.cc): wire attribute id
/// (wire::kFuncAttr*), recorded in Function::attributes.
Status SetFunctionAttributeOf(SessionState& st, uint32_t function_id, int32_t attribute, int32_t value,
                              const CallView* admit);

/// `body` through the executor when `admit` is set, else directly.
template <typename Body>
Status RunMaybeAdmitted(SessionState& st, const CallView* admit, Body&& body) {
  return admit != nullptr ? st.executor->Run(*admit, std::forward<Body>(body)) : body();
}

/// The ring region's staging arena: where chunked copies' bytes pass.
struct StagingArenaRange {
  std::byte* base = nullptr;
  uint64_t bytes = 0;
};
StagingArenaRange StagingArena(const SessionState& st);
/// Registers the staging arena with st.ctx once per context (a pageable
/// D2H's reply chunk is then written by DMA, not through the driver's own
/// bounce buffer). A refusal leaves the arena pageable — correct, slower —
/// and is logged once per context.
void PinStagingArena(SessionState& st);
/// Releases everything the session holds (teardown): synchronise, drop
/// retained host bytes, destroy events and streams, unload modules, free
/// every buffer. Errors are logged, not returned.
void ReleaseAll(SessionState& st);
/// ReleaseAll's part for the objects on the session's other GPUs (each in
/// its own context): their events, streams, modules and buffers. The
/// contexts themselves stay (the Session drops them).
void ReleaseOtherDevices(SessionState& st);
/// Aborts every NCCL communicator rank the session holds (its peers' waits
/// fail with `why` instead of hanging) and forgets them (nccl_handlers.cc).
void AbortCommunicators(SessionState& st, const std::string& why);
/// The context of phosd's GPU `device` for this session (home or other),
/// or null when the session has none there.
backend::Context* ContextOf(const SessionState& st, int device);
/// The home context, also while a call runs on another GPU.
backend::Context* HomeContext(const SessionState& st);
/// The context of stream / event `id` (its GPU's; the home one for an id
/// the session does not know, which the caller's lookup then refuses).
backend::Context* StreamContext(const SessionState& st, uint32_t id);
backend::Context* EventContext(const SessionState& st, uint32_t id);
/// The GPU a buffer (by its start) lives on: the home GPU unless recorded.
int DeviceOfBuffer(const SessionState& st, uint64_t ptr);
/// Makes st.ctx the context of `device` for the call about to run
/// (Session::Run, per record): a GPU the session has no context on yet
/// gets one — the home one moves there while the session holds nothing,
/// else a further context is made (add_context).
Status SelectCallDevice(SessionState& st, int device);
/// Back to the home context after a call.
void SelectHomeDevice(SessionState& st);
/// Makes sure the session has a context on `device`, never moving the home
/// one (a restore recreating a process of several GPUs).
Status AddDeviceContext(SessionState& st, int device);
/// phosd's GPU for the ordinal `app_device` a call names (device_aliases).
int PhosdDevice(const SessionState& st, int app_device);
/// The GPU record `rec` runs on: its stream's for a call on a stream, else
/// the calling thread's (the frame's device byte); the home GPU for calls
/// that need no context (device queries, kSetDevice, device output).
int CallDevice(const SessionState& st, const ring::Record& rec);
/// Bytes of device printf output waiting in any of the session's contexts.
std::size_t PendingDeviceOutput(const SessionState& st);
/// Whether the session holds device state on more than its home GPU (a
/// checkpoint refuses it by name: not supported yet).
bool UsesSeveralDevices(const SessionState& st);
/// What the session holds on its GPUs, as words for a message ("" = nothing).
std::string DeviceStateHeld(const SessionState& st);

/// Puts the session on phosd's GPU `device` by replacing its context (it
/// must hold nothing on the GPU: cudaSetDevice before the first allocation,
/// a restore into a fresh session). On failure it stays where it was.
Status MoveToDevice(SessionState& st, int device);
/// Makes the session rank `rank` of the `nranks`-rank communicator
/// `unique_id`, under the app's id `app_id` (ncclCommInitRank, and a job
/// restore recreating it): blocks until every rank joined or the session
/// stops.
Status JoinCommunicator(SessionState& st, uint32_t app_id, const backend::CommunicatorId& unique_id, int nranks,
                        int rank);

}  // namespace phos::session
