#include "protocol/nccl_wire.h"
#include "backend/sim/sim_context.h"

#include "common/hex.h"

#include <cuda.h>

#include <algorithm>
#include <deque>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <utility>

#include "backend/sim/sim_backend.h"
#include "backend/sim/sim_blas.h"
#include "backend/sim/sim_kernel_memory.h"
#include "common/occupancy.h"
#include "interp/launch.h"

namespace phos::backend::sim {
namespace {

bool IsDeviceDst(CopyKind k) {
  return k == CopyKind::kHostToDevice || k == CopyKind::kDeviceToDevice;
}
bool IsDeviceSrc(CopyKind k) {
  return k == CopyKind::kDeviceToHost || k == CopyKind::kDeviceToDevice;
}

void Fill(unsigned char* dst, std::uint32_t value, std::size_t element_size, std::size_t count) {
  if (element_size == 1) {
    std::memset(dst, static_cast<int>(value & 0xff), count);
    return;
  }
  unsigned char pattern[4];
  std::memcpy(pattern, &value, sizeof pattern);  // little-endian low bytes first
  for (std::size_t i = 0; i < count; ++i) {
    std::memcpy(dst + i * element_size, pattern, element_size);
  }
}

}  // namespace

SimContext::SimContext(std::shared_ptr<SimShared> shared, int device, std::uint64_t id)
    : shared_(std::move(shared)), device_(device), id_(id) {
  default_stream_.stream = NewStream();
  default_stream_.blocking = false;  // it is the one the others synchronise with
}

SimContext::~SimContext() {
  // No other thread may call into a context being destroyed, so no lock.
  // Each SimStream destructor lets its queued work finish; waits between
  // streams always target work enqueued earlier, which drains on its own.
  streams_.clear();
  retired_.clear();
  default_stream_.stream.reset();
  functions_.clear();
  modules_.clear();  // releases module variables while we still own them
  shared_->memory->FreeAllOwnedBy(id_);
}

std::unique_ptr<SimStream> SimContext::NewStream() const {
  return std::make_unique<SimStream>(static_cast<std::size_t>(std::max(0, shared_->options.stream_depth)), abandoned_);
}

std::uint64_t SimContext::NewHandleLocked() { return (id_ << 32) | ++next_handle_; }

// ---- memory ---------------------------------------------------------------

Status SimContext::Allocate(std::size_t bytes, DevicePtr at, DevicePtr* out) {
  if (out == nullptr) return Status::InvalidArgument("Allocate: null output pointer");
  return shared_->memory->Allocate(device_, id_, bytes, at, out);
}

Status SimContext::AllocateForDaemon(std::size_t bytes, DevicePtr* out) {
  if (out == nullptr) return Status::InvalidArgument("AllocateForDaemon: null output pointer");
  return shared_->memory->AllocateHigh(device_, id_, bytes, out);
}

Status SimContext::Free(DevicePtr ptr) { return shared_->memory->Free(id_, ptr); }

Status SimContext::ReserveAddressRange(std::size_t bytes, std::size_t alignment, DevicePtr at, DevicePtr* out) {
  if (out == nullptr) return Status::InvalidArgument("ReserveAddressRange: null output pointer");
  return shared_->memory->ReserveRange(id_, bytes, alignment, at, out);
}

Status SimContext::ReleaseAddressRange(DevicePtr start) { return shared_->memory->ReleaseRange(id_, start); }

Status SimContext::GetMemoryInfo(std::uint64_t* free_bytes, std::uint64_t* total_bytes) {
  if (free_bytes == nullptr || total_bytes == nullptr) {
    return Status::InvalidArgument("GetMemoryInfo: null output pointer");
  }
  shared_->memory->MemoryInfo(device_, free_bytes, total_bytes);
  return Status::Ok();
}

Status SimContext::RegisterHostMemory(void* ptr, std::size_t bytes) {
  if (ptr == nullptr || bytes == 0) {
    return Status::InvalidArgument("RegisterHostMemory: null pointer or 0 bytes");
  }
  const auto start = reinterpret_cast<std::uintptr_t>(ptr);
  if (start > UINTPTR_MAX - bytes) return Status::InvalidArgument("host range wraps around");
  std::lock_guard<std::mutex> lock(mu_);
  auto it = host_ranges_.lower_bound(start);
  bool overlap = it != host_ranges_.end() && it->first < start + bytes;
  if (!overlap && it != host_ranges_.begin()) {
    auto prev = std::prev(it);
    overlap = prev->first + prev->second > start;
  }
  if (overlap) {
    return Status::AlreadyExists("host range at " + Hex(start) + " (" + std::to_string(bytes) +
                                 " bytes) overlaps memory already registered");
  }
  host_ranges_.emplace(start, bytes);
  return Status::Ok();
}

// The alias is the app's address of the pages; it must not be one the
// sim's device memory can occupy, or a kernel's pointer would be ambiguous.
Status SimContext::MapHostMemoryForKernels(void* host, std::size_t bytes, DevicePtr device_address) {
  const SimAddressSpace& space = *shared_->memory;
  if (device_address < space.base() + space.size() && space.base() < device_address + bytes) {
    return Status::AlreadyExists("host range at " + Hex(device_address) + " (" + std::to_string(bytes) +
                                 " bytes) lies in the sim's device address range");
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto start = reinterpret_cast<std::uintptr_t>(host);
    auto it = host_ranges_.upper_bound(start);
    if (it == host_ranges_.begin() || (--it, start - it->first >= it->second) || bytes > it->second - (start - it->first))
      return Status::InvalidArgument("MapHostMemoryForKernels: the host memory is not registered");
  }
  return host_aliases_->Add(device_address, host, bytes);
}

Status SimContext::UnmapHostMemoryForKernels(DevicePtr device_address) { return host_aliases_->Remove(device_address); }

Status SimContext::UnregisterHostMemory(void* ptr) {
  std::lock_guard<std::mutex> lock(mu_);
  if (host_ranges_.erase(reinterpret_cast<std::uintptr_t>(ptr)) == 0) {
    return Status::InvalidArgument("host address " + Hex(reinterpret_cast<std::uintptr_t>(ptr)) +
                                   " is not the start of registered memory");
  }
  return Status::Ok();
}

// ---- streams ----------------------------------------------------------------

Status SimContext::FindStreamLocked(StreamHandle handle, StreamEntry** out) {
  if (handle == kDefaultStream) {
    *out = &default_stream_;
    return Status::Ok();
  }
  auto it = streams_.find(handle);
  if (it == streams_.end()) {
    return Status::InvalidArgument("unknown stream handle " + Hex(handle) +
                                   " (destroyed, or from another context)");
  }
  *out = &it->second;
  return Status::Ok();
}

void SimContext::BlockingMarksLocked(std::vector<Mark>* out) {
  auto add = [&](const StreamEntry& e) {
    if (!e.blocking) return;
    const std::uint64_t seq = e.stream->enqueued();
    SimStream::Progress p = e.stream->progress();
    if (!p.Done(seq)) out->push_back(Mark{std::move(p), seq});
  };
  for (const auto& [h, e] : streams_) add(e);
  for (const auto& e : retired_) add(e);
}

Status SimContext::StreamMarksLocked(StreamHandle handle, std::vector<Mark>* out) {
  StreamEntry* e = nullptr;
  PHOS_RETURN_IF_ERROR(FindStreamLocked(handle, &e));
  out->push_back(Mark{e->stream->progress(), e->stream->enqueued()});
  if (handle == kDefaultStream) BlockingMarksLocked(out);
  return Status::Ok();
}

Status SimContext::EnqueueLocked(StreamHandle handle, SimStream::Op op,
                                 std::function<void()> after) {
  StreamEntry* e = nullptr;
  PHOS_RETURN_IF_ERROR(FindStreamLocked(handle, &e));
  std::vector<Mark> deps;
  if (handle == kDefaultStream) {
    BlockingMarksLocked(&deps);  // legacy: waits for prior work on blocking streams
  } else if (e->blocking) {
    const std::uint64_t seq = default_stream_.stream->enqueued();
    SimStream::Progress p = default_stream_.stream->progress();
    if (!p.Done(seq)) deps.push_back(Mark{std::move(p), seq});  // and they wait for it
  }
  if (!deps.empty()) {
    op = [deps = std::move(deps), inner = std::move(op)]() {
      for (const Mark& m : deps) m.progress.WaitFor(m.seq);
      return inner();
    };
  }
  e->stream->Enqueue(std::move(op), std::move(after));
  return Status::Ok();
}

void SimContext::ReapRetiredLocked() {
  for (auto it = retired_.begin(); it != retired_.end();) {
    if (it->stream->Idle()) {
      it = retired_.erase(it);  // joins a worker that has nothing left to do
    } else {
      ++it;
    }
  }
}

Status SimContext::CreateStream(unsigned flags, int priority, StreamHandle* out) {
  if (out == nullptr) return Status::InvalidArgument("CreateStream: null output pointer");
  if ((flags & ~kStreamNonBlocking) != 0) {
    return Status::InvalidArgument("CreateStream: unknown flags " + Hex(flags));
  }
  std::lock_guard<std::mutex> lock(mu_);
  ReapRetiredLocked();
  StreamEntry e;
  e.stream = NewStream();
  e.blocking = (flags & kStreamNonBlocking) == 0;
  const StreamHandle h = NewHandleLocked();
  streams_.emplace(h, std::move(e));
  *out = h;
  return Status::Ok();
}

Status SimContext::DestroyStream(StreamHandle stream) {
  if (stream == kDefaultStream) {
    return Status::InvalidArgument("the default stream cannot be destroyed");
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = streams_.find(stream);
  if (it == streams_.end()) {
    return Status::InvalidArgument("unknown stream handle " + Hex(stream) +
                                   " (destroyed, or from another context)");
  }
  // Queued work still runs (and the default stream still orders after it);
  // the worker is joined once it has drained.
  retired_.push_back(std::move(it->second));
  streams_.erase(it);
  ReapRetiredLocked();
  return Status::Ok();
}

Status SimContext::SynchronizeStream(StreamHandle stream) {
  std::vector<Mark> marks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    PHOS_RETURN_IF_ERROR(StreamMarksLocked(stream, &marks));
  }
  for (const Mark& m : marks) m.progress.WaitFor(m.seq);
  return marks.front().progress.error();
}

Status SimContext::QueryStream(StreamHandle stream) {
  std::vector<Mark> marks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    PHOS_RETURN_IF_ERROR(StreamMarksLocked(stream, &marks));
  }
  Status error = marks.front().progress.error();
  if (!error.ok()) return error;
  for (const Mark& m : marks) {
    if (!m.progress.Done(m.seq)) return Status::NotReady("stream has pending work");
  }
  return Status::Ok();
}

// ---- copies -------------------------------------------------------------------

Status SimContext::MemcpyAsync(std::uint64_t dst, std::uint64_t src, std::size_t bytes,
                               CopyKind kind, StreamHandle stream) {
  switch (kind) {
    case CopyKind::kHostToDevice:
    case CopyKind::kDeviceToHost:
    case CopyKind::kDeviceToDevice:
    case CopyKind::kHostToHost:
      break;
    default:
      return Status::InvalidArgument("MemcpyAsync: unknown copy kind");
  }
  SimShared* shared = shared_.get();
  if (bytes > 0) {
    if (dst == 0 || src == 0) return Status::InvalidArgument("MemcpyAsync: null address");
    if (IsDeviceDst(kind)) PHOS_RETURN_IF_ERROR(shared->memory->CheckRange(dst, bytes));
    if (IsDeviceSrc(kind)) PHOS_RETURN_IF_ERROR(shared->memory->CheckRange(src, bytes));
  }
  const int device = device_;
  std::lock_guard<std::mutex> lock(mu_);
  if (bytes == 0) {
    StreamEntry* e = nullptr;
    return FindStreamLocked(stream, &e);  // nothing to copy; the handle must still be good
  }
  return EnqueueLocked(stream, [shared, device, dst, src, bytes, kind]() -> Status {
    SimAddressSpace::Pin pin;  // keeps the device ranges mapped while we copy
    if (IsDeviceDst(kind)) PHOS_RETURN_IF_ERROR(shared->memory->PinRange(dst, bytes, &pin));
    if (IsDeviceSrc(kind)) PHOS_RETURN_IF_ERROR(shared->memory->PinRange(src, bytes, &pin));
    void* d = reinterpret_cast<void*>(dst);
    const void* s = reinterpret_cast<const void*>(src);
    if (kind == CopyKind::kHostToDevice || kind == CopyKind::kDeviceToHost) {
      shared->engines[device]->Copy(d, s, bytes);  // bounded engines, link throttle
    } else {
      std::memmove(d, s, bytes);  // D2D and H2H: not throttled
    }
    return Status::Ok();
  });
}

Status SimContext::LaunchHostFunction(StreamHandle stream, std::function<void()> fn) {
  if (!fn) return Status::InvalidArgument("LaunchHostFunction: no function");
  std::lock_guard<std::mutex> lock(mu_);
  // The stream's worker runs it in order: later ops wait for it to return.
  return EnqueueLocked(stream, [fn = std::move(fn)]() -> Status {
    fn();
    return Status::Ok();
  });
}

Status SimContext::BlasSupports(const BlasCall& call) const { return CheckSimBlas(call); }

Status SimContext::Blas(const BlasCall& call, StreamHandle stream) {
  PHOS_RETURN_IF_ERROR(CheckSimBlas(call));
  SimShared* shared = shared_.get();
  for (std::uint32_t i = 0; i < call.range_count; ++i) {
    PHOS_RETURN_IF_ERROR(shared->memory->CheckRange(call.ranges[i].ptr, call.ranges[i].bytes));
  }
  const std::uint64_t owner = id_;
  std::lock_guard<std::mutex> lock(mu_);
  return EnqueueLocked(stream, [shared, call, owner]() -> Status {
    // One Pin per range: the buffers stay mapped while the routine runs.
    SimAddressSpace::Pin pins[std::size(call.ranges)];
    for (std::uint32_t i = 0; i < call.range_count; ++i) {
      PHOS_RETURN_IF_ERROR(shared->memory->PinRange(call.ranges[i].ptr, call.ranges[i].bytes, &pins[i]));
    }
    if (!IsPointerArrayBatch(call.op)) return RunBlas(call);
    // Each member's matrices: this context's memory only (an illegal
    // address otherwise, as a kernel's stray access would be).
    std::deque<SimAddressSpace::Pin> member_pins;
    return RunBlasBatched(call, [&](std::uint64_t ptr, std::uint64_t bytes) -> Status {
      DevicePtr start = 0;
      std::uint64_t size = 0;
      Status s = shared->memory->PinOwnedRange(ptr, bytes, owner, &member_pins.emplace_back(), &start, &size);
      if (!s.ok()) {
        return Status::FailedPrecondition("cuBLAS pointer-array batch: a member's operand at " + Hex(ptr) + " (" +
                                          std::to_string(bytes) + " bytes) is not this context's memory: illegal address");
      }
      return Status::Ok();
    });
  });
}

Status SimContext::MemsetAsync(DevicePtr dst, std::uint32_t value, std::size_t element_size,
                               std::size_t count, StreamHandle stream) {
  if (element_size != 1 && element_size != 2 && element_size != 4) {
    return Status::InvalidArgument("MemsetAsync: element size must be 1, 2 or 4 (got " +
                                   std::to_string(element_size) + ")");
  }
  if (count > SIZE_MAX / element_size) return Status::InvalidArgument("MemsetAsync: too large");
  const std::size_t bytes = count * element_size;
  SimShared* shared = shared_.get();
  if (bytes > 0) PHOS_RETURN_IF_ERROR(shared->memory->CheckRange(dst, bytes));
  std::lock_guard<std::mutex> lock(mu_);
  if (bytes == 0) {
    StreamEntry* e = nullptr;
    return FindStreamLocked(stream, &e);
  }
  return EnqueueLocked(stream, [shared, dst, value, element_size, count, bytes]() -> Status {
    SimAddressSpace::Pin pin;
    PHOS_RETURN_IF_ERROR(shared->memory->PinRange(dst, bytes, &pin));
    Fill(reinterpret_cast<unsigned char*>(dst), value, element_size, count);
    return Status::Ok();
  });
}

// ---- events -------------------------------------------------------------------

Status SimContext::FindEventLocked(EventHandle handle, std::shared_ptr<SimEvent>* out) {
  auto it = events_.find(handle);
  if (it == events_.end()) {
    return Status::InvalidArgument("unknown event handle " + Hex(handle) +
                                   " (destroyed, or from another context)");
  }
  *out = it->second;
  return Status::Ok();
}

Status SimContext::CreateEvent(unsigned flags, EventHandle* out) {
  if (out == nullptr) return Status::InvalidArgument("CreateEvent: null output pointer");
  constexpr unsigned kInterprocess = 0x4;  // cudaEventInterprocess
  if ((flags & ~(kEventBlockingSync | kEventDisableTiming | kInterprocess)) != 0) {
    return Status::InvalidArgument("CreateEvent: unknown flags " + Hex(flags));
  }
  std::lock_guard<std::mutex> lock(mu_);
  const EventHandle h = NewHandleLocked();
  events_.emplace(h, std::make_shared<SimEvent>(flags));
  *out = h;
  return Status::Ok();
}

Status SimContext::DestroyEvent(EventHandle event) {
  std::lock_guard<std::mutex> lock(mu_);
  // Ops already enqueued keep the event object alive until they ran.
  if (events_.erase(event) == 0) {
    return Status::InvalidArgument("unknown event handle " + Hex(event) +
                                   " (destroyed, or from another context)");
  }
  return Status::Ok();
}

Status SimContext::RecordEvent(EventHandle event, StreamHandle stream) {
  std::lock_guard<std::mutex> lock(mu_);
  std::shared_ptr<SimEvent> ev;
  PHOS_RETURN_IF_ERROR(FindEventLocked(event, &ev));
  StreamEntry* e = nullptr;
  PHOS_RETURN_IF_ERROR(FindStreamLocked(stream, &e));
  const std::uint64_t gen = ev->BeginRecord();
  return EnqueueLocked(
      stream, [] { return Status::Ok(); }, [ev, gen] { ev->Complete(gen); });
}

Status SimContext::StreamWaitEvent(StreamHandle stream, EventHandle event) {
  std::lock_guard<std::mutex> lock(mu_);
  std::shared_ptr<SimEvent> ev;
  PHOS_RETURN_IF_ERROR(FindEventLocked(event, &ev));
  StreamEntry* e = nullptr;
  PHOS_RETURN_IF_ERROR(FindStreamLocked(stream, &e));
  const std::uint64_t gen = ev->generation();
  if (gen == 0 || ev->IsComplete(gen)) return Status::Ok();  // nothing to wait for
  return EnqueueLocked(stream, [ev, gen]() {
    ev->WaitFor(gen);
    return Status::Ok();
  });
}

Status SimContext::QueryEvent(EventHandle event) {
  std::shared_ptr<SimEvent> ev;
  {
    std::lock_guard<std::mutex> lock(mu_);
    PHOS_RETURN_IF_ERROR(FindEventLocked(event, &ev));
  }
  return ev->IsComplete(ev->generation()) ? Status::Ok()
                                          : Status::NotReady("event is still pending");
}

Status SimContext::SynchronizeEvent(EventHandle event) {
  std::shared_ptr<SimEvent> ev;
  {
    std::lock_guard<std::mutex> lock(mu_);
    PHOS_RETURN_IF_ERROR(FindEventLocked(event, &ev));
  }
  ev->WaitFor(ev->generation());
  return Status::Ok();
}

Status SimContext::ElapsedTime(EventHandle start, EventHandle end, float* ms) {
  if (ms == nullptr) return Status::InvalidArgument("ElapsedTime: null output pointer");
  std::shared_ptr<SimEvent> a, b;
  {
    std::lock_guard<std::mutex> lock(mu_);
    PHOS_RETURN_IF_ERROR(FindEventLocked(start, &a));
    PHOS_RETURN_IF_ERROR(FindEventLocked(end, &b));
  }
  if ((a->flags() & kEventDisableTiming) || (b->flags() & kEventDisableTiming)) {
    return Status::InvalidArgument("ElapsedTime: an event was created with timing disabled");
  }
  SimEvent::Clock::time_point ta, tb;
  PHOS_RETURN_IF_ERROR(a->Timestamp(&ta).WithContext("ElapsedTime: start event"));
  PHOS_RETURN_IF_ERROR(b->Timestamp(&tb).WithContext("ElapsedTime: end event"));
  *ms = std::chrono::duration<float, std::milli>(tb - ta).count();
  return Status::Ok();
}

Status SimContext::Synchronize() {
  std::vector<Mark> marks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    marks.push_back(Mark{default_stream_.stream->progress(), default_stream_.stream->enqueued()});
    for (const auto& [h, e] : streams_) marks.push_back(Mark{e.stream->progress(), e.stream->enqueued()});
    for (const auto& e : retired_) marks.push_back(Mark{e.stream->progress(), e.stream->enqueued()});
  }
  Status first;
  for (const Mark& m : marks) {
    m.progress.WaitFor(m.seq);
    Status s = m.progress.error();
    if (first.ok() && !s.ok()) first = s;
  }
  return first;
}

void SimContext::Abandon() {
  // Streams and queued kernels share the flag: nothing else to do, and no
  // lock (a consumer may hold mu_ while it waits in Enqueue for room).
  abandoned_->store(true, std::memory_order_relaxed);
}

// ---- collectives (sim_collectives.h) --------------------------------------------

Status SimContext::JoinCommunicator(const CommunicatorId& unique_id, int nranks, int rank,
                                    const std::function<bool()>& cancelled, std::shared_ptr<CommRank>* out) {
  return shared_->comms.Join(unique_id, nranks, rank, device_, cancelled, out);
}

Status SimContext::EnqueueCollectives(const std::shared_ptr<CommRank>& rank, const std::vector<CollectiveOp>& ops,
                                      StreamHandle stream) {
  auto sim_rank = std::dynamic_pointer_cast<SimCommRank>(rank);
  if (!sim_rank) return Status::InvalidArgument("EnqueueCollectives: not a communicator of this backend");
  std::uint64_t collectives = 0;
  for (const CollectiveOp& op : ops) {
    collectives += wire::NcclIsCollective(static_cast<std::uint8_t>(op.kind)) ? 1 : 0;
  }
  auto group = std::make_shared<const std::vector<CollectiveOp>>(ops);
  SimAddressSpace* memory = shared_->memory.get();
  const std::uint64_t owner = id_;
  std::shared_ptr<const std::atomic<bool>> abandoned = abandoned_;
  std::lock_guard<std::mutex> lock(mu_);
  // Sequence numbers are taken in stream-enqueue order, under mu_.
  const std::uint64_t first = sim_rank->ReserveCollectives(collectives);
  Status s = EnqueueLocked(stream, [sim_rank, group, memory, owner, first, abandoned]() -> Status {
    return sim_rank->RunGroup(memory, owner, *group, first, abandoned);
  });
  if (!s.ok()) {
    // Its sequence numbers will never arrive: the peers must not wait for them.
    sim_rank->Abort("rank " + std::to_string(sim_rank->rank()) + " could not enqueue a collective: " + s.message());
    sim_rank->Unreserve();
  }
  return s;
}

// ---- modules and kernels ---------------------------------------------------------

Status SimContext::LoadModule(const void* image, std::size_t size, ModuleHandle* out) {
  return LoadModuleWithGlobalsAt(image, size, 0, out);
}

Status SimContext::LoadModuleWithGlobalsAt(const void* image, std::size_t size, DevicePtr globals_at,
                                           ModuleHandle* out) {
  if (image == nullptr || size == 0 || out == nullptr) {
    return Status::InvalidArgument("LoadModule: null image, 0 bytes or null output pointer");
  }
  // Parse and decode outside mu_: it takes milliseconds for a big module.
  std::shared_ptr<SimModule> module;
  PHOS_RETURN_IF_ERROR(
      SimModule::Load(image, size, shared_->memory.get(), device_, id_, globals_at, &module));
  std::lock_guard<std::mutex> lock(mu_);
  const ModuleHandle h = NewHandleLocked();
  modules_.emplace(h, std::move(module));
  *out = h;
  return Status::Ok();
}

Status SimContext::GetModuleGlobalsBase(ModuleHandle module, DevicePtr* base) {
  if (base == nullptr) return Status::InvalidArgument("GetModuleGlobalsBase: null output pointer");
  if (!shared_->options.places_module_variables) {
    return Status::NotSupported("this sim places module variables itself, as a GPU's driver does");
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = modules_.find(module);
  if (it == modules_.end()) return Status::InvalidArgument("unknown module handle " + Hex(module));
  *base = it->second->globals_base();
  return Status::Ok();
}

Status SimContext::UnloadModule(ModuleHandle module) {
  std::lock_guard<std::mutex> lock(mu_);
  if (modules_.erase(module) == 0) {
    return Status::InvalidArgument("unknown module handle " + Hex(module));
  }
  for (auto it = functions_.begin(); it != functions_.end();) {
    it = it->second.module == module ? functions_.erase(it) : std::next(it);
  }
  return Status::Ok();
}

Status SimContext::GetFunction(ModuleHandle module, const std::string& name,
                               FunctionHandle* out) {
  if (out == nullptr) return Status::InvalidArgument("GetFunction: null output pointer");
  std::lock_guard<std::mutex> lock(mu_);
  auto it = modules_.find(module);
  if (it == modules_.end()) return Status::InvalidArgument("unknown module handle " + Hex(module));
  Status runnable = it->second->CheckKernel(name);
  if (runnable.code() == Status::Code::kNotFound) {
    return Status::NotFound("GetFunction: no kernel named '" + name + "' in module " +
                            Hex(module));
  }
  FunctionAttributes attributes;
  PHOS_RETURN_IF_ERROR(it->second->KernelAttributes(name, &attributes).WithContext("GetFunction"));
  const FunctionHandle h = NewHandleLocked();
  functions_.emplace(h, KernelEntry{module, it->second, name, std::move(runnable), attributes});
  *out = h;
  return Status::Ok();
}

Status SimContext::GetGlobal(ModuleHandle module, const std::string& name, DevicePtr* ptr,
                             std::size_t* bytes) {
  if (ptr == nullptr || bytes == nullptr) {
    return Status::InvalidArgument("GetGlobal: null output pointer");
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = modules_.find(module);
  if (it == modules_.end()) return Status::InvalidArgument("unknown module handle " + Hex(module));
  Status found = it->second->GetGlobal(name, ptr, bytes);
  if (found.code() == Status::Code::kNotFound) {
    return Status::NotFound("GetGlobal: no variable named '" + name + "' in module " + Hex(module));
  }
  return found.WithContext("GetGlobal");
}

Status SimContext::LaunchKernel(FunctionHandle function, Dim3 grid, Dim3 block,
                                unsigned shared_memory_bytes, StreamHandle stream,
                                const std::vector<std::uint8_t>& params) {
  return Launch(function, grid, block, shared_memory_bytes, stream, params, /*cooperative=*/false);
}

Status SimContext::LaunchCooperativeKernel(FunctionHandle function, Dim3 grid, Dim3 block,
                                           unsigned shared_memory_bytes, StreamHandle stream,
                                           const std::vector<std::uint8_t>& params) {
  return Launch(function, grid, block, shared_memory_bytes, stream, params, /*cooperative=*/true);
}

Status SimContext::Launch(FunctionHandle function, Dim3 grid, Dim3 block, unsigned shared_memory_bytes,
                          StreamHandle stream, const std::vector<std::uint8_t>& params, bool cooperative) {
  std::shared_ptr<SimModule> module;
  std::string name;
  Status runnable;
  FunctionAttributes attributes;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = functions_.find(function);
    if (it == functions_.end()) {
      return Status::InvalidArgument("unknown function handle " + Hex(function));
    }
    module = it->second.program;
    name = it->second.name;
    runnable = it->second.runnable;
    attributes = it->second.attributes;
  }
  // As CUDA: more dynamic shared memory than the function's limit (48 KiB
  // minus static shared unless cuFuncSetAttribute raised it) is refused.
  if (shared_memory_bytes > static_cast<unsigned>(attributes.max_dynamic_shared_size_bytes)) {
    return Status::InvalidArgument(
        "LaunchKernel '" + name + "': " + std::to_string(shared_memory_bytes) +
        " bytes of dynamic shared memory exceed the function's limit of " +
        std::to_string(attributes.max_dynamic_shared_size_bytes) +
        " (raise it with cudaFuncSetAttribute(cudaFuncAttributeMaxDynamicSharedMemorySize))");
  }

  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || block.x == 0 || block.y == 0 ||
      block.z == 0) {
    return Status::InvalidArgument("LaunchKernel '" + name + "': zero grid or block dimension");
  }
  // An instruction the interpreter cannot run is an error now, at launch,
  // naming the instruction — not a sticky failure discovered later.
  PHOS_RETURN_IF_ERROR(runnable.WithContext("LaunchKernel '" + name + "'"));
  SimShared* shared = shared_.get();
  DevicePtr workspace = 0;
  if (cooperative) {
    // As the device: the whole grid must fit on the GPU at once (the
    // modelled H100's occupancy for this block), else
    // COOPERATIVE_LAUNCH_TOO_LARGE. The interpreter then runs every block on
    // a host thread of its own.
    const DeviceProperties& props = shared->devices[static_cast<std::size_t>(device_)];
    occupancy::BlockUse use;
    use.threads = static_cast<int>(block.x * block.y * block.z);
    use.registers_per_thread = attributes.num_regs;
    use.shared_bytes = attributes.shared_size_bytes + shared_memory_bytes;
    const std::uint64_t per_sm = static_cast<std::uint64_t>(occupancy::MaxActiveBlocks(occupancy::SmLimits{}, use).blocks);
    const std::uint64_t fits = per_sm * static_cast<std::uint64_t>(props.multiprocessor_count);
    const std::uint64_t blocks = std::uint64_t{grid.x} * grid.y * grid.z;
    if (blocks > fits) {
      return Status::InvalidArgument("cooperative launch of '" + name + "': " + std::to_string(blocks) +
                                     " blocks, the device holds " + std::to_string(fits) + " at once (" +
                                     std::to_string(per_sm) + " per SM x " +
                                     std::to_string(props.multiprocessor_count) + " SMs)")
          .WithApiError(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE);
    }
    // The grid workspace grid.sync() counts arrivals in (%envreg1:%envreg2):
    // device memory of this context for the launch, freed when it ends.
    PHOS_RETURN_IF_ERROR(shared->memory->Allocate(device_, id_, 256, 0, &workspace)
                             .WithContext("cooperative launch of '" + name + "': grid workspace"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  const std::uint64_t owner = id_;
  std::shared_ptr<std::atomic<bool>> cancel = abandoned_;
  Status queued = EnqueueLocked(stream, [shared, module, name, grid, block, shared_memory_bytes, params, owner,
                                         cancel, aliases = host_aliases_, cooperative, workspace,
                                         output = device_output_, textures = textures_, heap = heap_base_,
                                         heap_bytes = heap_bytes_]() -> Status {
    SimKernelMemory memory(shared->memory.get(), owner, aliases.get());
    interp::LaunchOptions options;
    options.heap_base = heap;
    options.heap_bytes = heap_bytes;
    options.textures = textures->empty() ? nullptr : textures.get();
    options.cancel = cancel.get();
    options.cooperative = cooperative;
    options.thread_at_a_time = shared->options.interp_thread_at_a_time;
    options.device_output = output.get();
    if (workspace != 0) {
      std::memset(reinterpret_cast<void*>(workspace), 0, 8);  // the sim's device memory is phosd's
      options.grid_workspace = workspace;
    }
    Status s = interp::LaunchKernel(module->program(), name, {grid.x, grid.y, grid.z},
                                    {block.x, block.y, block.z}, shared_memory_bytes, params.data(),
                                    params.size(), &memory, options)
                   .WithContext("kernel " + name);
    if (workspace != 0) (void)shared->memory->Free(owner, workspace);
    return s;
  });
  if (!queued.ok() && workspace != 0) (void)shared->memory->Free(owner, workspace);
  return queued;
}

Status SimContext::SetDeviceHeap(DevicePtr base, std::size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  heap_base_ = base;
  heap_bytes_ = bytes;
  return Status::Ok();
}

Status SimContext::CreateTextureObject(const wire::TextureDesc& desc, bool surface, std::uint64_t requested,
                                       std::uint64_t* handle) {
  std::lock_guard<std::mutex> lock(mu_);
  std::uint64_t h = requested;
  if (h == 0) {
    while (textures_->Contains(next_texture_)) ++next_texture_;
    h = next_texture_++;
  } else if (textures_->Contains(h)) {
    return Status::FailedPrecondition("texture/surface handle " + std::to_string(h) + " is in use in this context");
  } else {
    next_texture_ = std::max(next_texture_, h + 1);
  }
  textures_ = textures_->With(h, ToInterpTexture(desc, surface));
  *handle = h;
  return Status::Ok();
}

Status SimContext::DestroyTextureObject(std::uint64_t handle) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!textures_->Contains(handle)) {
    return Status::NotFound("texture/surface handle " + std::to_string(handle) + " does not exist");
  }
  textures_ = textures_->Without(handle);
  return Status::Ok();
}

Status SimContext::GetFunctionAttributes(FunctionHandle function, FunctionAttributes* out) {
  if (out == nullptr) return Status::InvalidArgument("GetFunctionAttributes: null output pointer");
  std::lock_guard<std::mutex> lock(mu_);
  auto it = functions_.find(function);
  if (it == functions_.end()) return Status::InvalidArgument("unknown function handle " + Hex(function));
  *out = it->second.attributes;
  return Status::Ok();
}

Status SimContext::SetFunctionAttribute(FunctionHandle function, FunctionAttribute attribute, int value) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = functions_.find(function);
  if (it == functions_.end()) return Status::InvalidArgument("unknown function handle " + Hex(function));
  FunctionAttributes& a = it->second.attributes;
  switch (attribute) {
    case FunctionAttribute::kMaxDynamicSharedSizeBytes: {
      // The modelled device's opt-in limit, less static shared.
      const std::int64_t optin =
          static_cast<std::int64_t>(shared_->devices[static_cast<std::size_t>(device_)].shared_memory_per_block_optin);
      const std::int64_t room = optin - static_cast<std::int64_t>(a.shared_size_bytes);
      if (value < 0 || value > room) {
        return Status::InvalidArgument("SetFunctionAttribute '" + it->second.name +
                                       "': max dynamic shared memory " + std::to_string(value) +
                                       " is outside 0.." + std::to_string(room));
      }
      a.max_dynamic_shared_size_bytes = value;
      return Status::Ok();
    }
    case FunctionAttribute::kPreferredSharedMemoryCarveout:
      if (value < -1 || value > 100) {
        return Status::InvalidArgument("SetFunctionAttribute '" + it->second.name + "': carveout " +
                                       std::to_string(value) + " is outside -1..100");
      }
      a.preferred_shared_memory_carveout = value;
      return Status::Ok();
  }
  return Status::InvalidArgument("SetFunctionAttribute: unknown attribute");
}

}  // namespace phos::backend::sim
