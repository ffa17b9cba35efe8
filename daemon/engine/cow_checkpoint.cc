#include "engine/cow_checkpoint.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "common/hex.h"
#include "engine/session_sections.h"
#include "engine/operation_util.h"
#include "engine/session_snapshot.h"
#include "engine/shadow_pool.h"

namespace phos::engine {

CowCheckpoint::CowCheckpoint(const CheckpointOptions& options, Progress* progress, image::ImageWriter* writer,
                             CheckpointResult* result)
    : SoftOperation(progress, "checkpoint", "copier", /*check_reads=*/false, "its speculated access set is trusted"),
      options_(options),
      writer_(writer),
      result_(result) {}

CowCheckpoint::~CowCheckpoint() = default;

Status CowCheckpoint::Start(session::SessionState& st, EngineHook* hook) {
  Bind(st);
  progress_->SetPhase("quiesce", "waiting for the session's GPU work to finish (t1)");
  // Every GPU the process uses: a sticky fault in any refuses (the message
  // names the GPU and says the state cannot be checkpointed).
  PHOS_RETURN_IF_ERROR(QuiesceAllDevices(st));
  snapshot_ = CaptureSnapshot(st);
  std::set<int> devices{st.device};
  std::uint64_t total = 0;
  std::vector<TrackedBuffer> tracked;
  std::vector<std::uint64_t> order;
  // One entry per image chunk of each buffer (a piece): a write shadows,
  // or waits for, only the pieces it overlaps — an 8 MiB memset into a
  // 1 GiB buffer costs the app's stream an 8 MiB D2D, not 1 GiB, and holds
  // that much of the reserve. Kernels (whose access set is whole buffers)
  // still shadow every unsaved piece of what they may write.
  const std::uint64_t piece = options_.image.chunk_bytes;  // the writer takes whole chunks
  auto track = [&](const DeviceRange& r, bool global) -> Status {
    const int device = snapshot_.objects.DeviceOf(r.address);
    devices.insert(device);
    std::size_t image_index = 0;
    PHOS_RETURN_IF_ERROR(writer_->AddBuffer(r.address, r.bytes, &image_index));
    for (std::uint64_t off = 0; off < r.bytes || off == 0; off += piece) {
      TrackedBuffer b;
      b.address = r.address + off;
      b.bytes = std::min(piece, r.bytes - off);
      b.piece_offset = off;
      b.global = global;
      b.device = device;
      b.state = kPending;
      b.image_index = image_index;
      order.push_back(b.address);
      tracked.push_back(std::move(b));
      if (r.bytes == 0) break;
    }
    total += r.bytes;
    return Status::Ok();
  };
  for (const auto& r : snapshot_.buffers) PHOS_RETURN_IF_ERROR(track(r, false));
  for (const auto& r : snapshot_.globals) PHOS_RETURN_IF_ERROR(track(r, true));
  Track(std::move(tracked));
  {
    std::lock_guard<std::mutex> lock(table_.mu);
    order_ = std::move(order);
  }
  result_->admitted_at_capture = st.executor->admitted();
  result_->buffers = static_cast<std::uint32_t>(snapshot_.buffers.size());
  result_->globals = static_cast<std::uint32_t>(snapshot_.globals.size());
  PHOS_RETURN_IF_ERROR(OpenWorker());
  PHOS_RETURN_IF_ERROR(OpenOtherLanes(st, devices));
  InstallOperation(hook);
  progress_->SetPhase("copy",
                      "copying " + std::to_string(snapshot_.buffers.size()) + " buffers and " +
                          std::to_string(snapshot_.globals.size()) + " globals while the app runs (copy-on-write)",
                      total);
  // Live migration freezes the app here: t1, nothing admitted since.
  if (options_.at_capture) PHOS_RETURN_IF_ERROR(options_.at_capture(st));
  return Status::Ok();
}

// ---------------------------------------------------------------- admission (consumer thread)

Status CowCheckpoint::Admit(const session::CallView& call) {
  std::unique_lock<std::mutex> lock(table_.mu);
  const std::uint64_t seq = ++seq_;
  NoteFirstUseLocked(call);
  if (abandoned_) return Status::Ok();
  const bool unvalidatable = call.kind == session::AccessKind::kUnvalidatable;
  if (unvalidatable) ++counters_.unvalidated_kernels;
  if (!call.access_known() || (unvalidatable && options_.unvalidated == UnvalidatedPolicy::kStop)) {
    // The call may write any buffer: handle it stop-the-world.
    const auto t0 = Clock::now();
    ++counters_.writer_waits;
    for (auto& [addr, b] : table_.by_address) b.urgent = b.state != kSaved;
    table_.cv.notify_all();
    WaitLocked(lock, [&] { return saved_ == table_.by_address.size(); });
    AddBlocked(t0);
    if (call.api == wire::op::kDeviceReset && !abandoned_) {
      // The context is replaced by the call: nothing of ours may stay in it.
      lock.unlock();
      DropDeviceState();
    }
    return Status::Ok();
  }
  for (const auto& r : call.ranges) {
    if (!r.write) continue;
    std::vector<TrackedBuffer*> hit;
    table_.ForEachOverlapping(r.ptr, r.bytes, [&](TrackedBuffer& b) { hit.push_back(&b); });
    for (TrackedBuffer* b : hit) PHOS_RETURN_IF_ERROR(MakeWritable(lock, *b, call, seq));
  }
  return Status::Ok();
}

Status CowCheckpoint::TakeShadow(int device, std::uint64_t bytes, backend::DevicePtr* out) {
  std::uint64_t& used = reserve_used_[device];
  if (options_.shadow_pool != nullptr) {
    // phosd's reserve, allocated and written when it started: no
    // allocation now, only the D2D the caller queues.
    if (used + bytes > options_.cow_reserve_bytes) {
      return Status::OutOfMemory("copy-on-write reserve is full");
    }
    Status s = options_.shadow_pool->Take(device, bytes, out);
    if (s.ok()) {
      pooled_.emplace(*out, bytes);
      used += bytes;
      return s;
    }
    if (s.code() != Status::Code::kUnavailable) return s;  // full now: the caller waits
    if (!pool_unavailable_logged_) {
      pool_unavailable_logged_ = true;
      spdlog::info("checkpoint: {}; this checkpoint allocates its shadows as it needs them", s.message());
    }
  }
  // A shadow the copier already saved and gave back, of the same size: no
  // allocation (on the sim a fresh allocation costs page faults on every
  // page; on a GPU an allocation can synchronise the device).
  if (auto it = spare_shadows_.find({device, bytes}); it != spare_shadows_.end()) {
    *out = it->second;
    spare_shadows_.erase(it);
    return Status::Ok();
  }
  backend::Context* ctx = LaneOf(device).ctx;
  if (used + bytes > options_.cow_reserve_bytes) {
    // Spares of other sizes on this GPU hold its reserve: give them back first.
    for (auto it = spare_shadows_.begin(); it != spare_shadows_.end();) {
      if (it->first.first != device) {
        ++it;
        continue;
      }
      (void)ctx->Free(it->second);
      used -= it->first.second;
      it = spare_shadows_.erase(it);
    }
  }
  if (used + bytes > options_.cow_reserve_bytes) return Status::OutOfMemory("copy-on-write reserve is full");
  PHOS_RETURN_IF_ERROR(ctx->Allocate(bytes, 0, out));
  used += bytes;
  return Status::Ok();
}

void CowCheckpoint::GiveBackShadow(int device, std::uint64_t bytes, backend::DevicePtr shadow) {
  if (pooled_.erase(shadow) > 0) {
    reserve_used_[device] -= bytes;
    options_.shadow_pool->GiveBack(device, shadow);
    return;
  }
  spare_shadows_.emplace(std::make_pair(device, bytes), shadow);  // still counted in reserve_used_
}

void CowCheckpoint::ReleaseLaterLocked(int device, backend::DevicePtr shadow, DeviceLeftovers* out) {
  if (pooled_.erase(shadow) > 0) {
    out->pool = options_.shadow_pool;
    out->pool_ranges.push_back({device, shadow});
  } else {
    out->allocations.push_back({LaneOf(device).ctx, shadow});
  }
}

Status CowCheckpoint::MakeWritable(std::unique_lock<std::mutex>& lock, TrackedBuffer& b,
                                   const session::CallView& call, std::uint64_t seq) {
  const auto t0 = Clock::now();
  bool waited = false;
  backend::Context* const cctx = ContextOfCall(call);  // the D2D and its event go to the call's stream there
  while (!abandoned_) {
    if (b.state == kSaved) break;
    if (b.shadow != 0 && (b.state == kShadowed || b.state == kSaving)) {
      // Shadowed by an earlier writer, whose D2D into the shadow is queued
      // on ITS stream: a write on another stream could run before that copy
      // and put post-t1 bytes into the shadow. Order this call's stream
      // after the shadow copy (an enqueue, no wait). Found by
      // engine_consistency_test (two streams bumping one __device__ counter).
      // (A shadow copy queued in another context is waited for here, on
      // the host: rare — two GPUs' streams writing one buffer during a
      // checkpoint — and the one device wait under mu on this path.)
      if (b.shadow_ready != 0) (void)WaitEventOn(cctx, call.stream, b.shadow_ctx, b.shadow_ready);
      break;
    }
    if (b.state == kSaving && saving_ == &b && chunk_busy_) {
      // The copier is reading one chunk of B right now: a write may not
      // start before that chunk is in host memory. At most one chunk.
      if (!waited) {
        waited = true;
        ++counters_.writer_waits;
      }
      WaitLocked(lock, [&] { return !(saving_ == &b && chunk_busy_) || b.state == kSaved; });
      continue;
    }
    if (b.state == kPending || b.state == kSaving) {
      // The t1 content of B (for a buffer being saved: of its chunks not
      // yet saved) goes to a shadow first; the copier reads the rest there.
      backend::DevicePtr shadow = 0;
      backend::EventHandle ready = 0;
      Status s = TakeShadow(b.device, b.bytes, &shadow);
      if (s.ok()) {
        // Same stream as the call, before it: the call's write cannot
        // overtake the copy of the t1 content.
        s = cctx->MemcpyAsync(shadow, b.address, b.bytes, backend::CopyKind::kDeviceToDevice, call.stream);
        if (s.ok()) s = cctx->CreateEvent(backend::kEventDisableTiming, &ready);
        if (s.ok()) s = cctx->RecordEvent(ready, call.stream);
        if (!s.ok()) {
          if (ready != 0) (void)cctx->DestroyEvent(ready);
          // The D2D may have been enqueued: let it finish before reuse.
          (void)cctx->SynchronizeStream(call.stream);
          GiveBackShadow(b.device, b.bytes, shadow);
        }
      }
      if (s.ok()) {
        b.shadow = shadow;
        b.shadow_ready = ready;
        b.shadow_ctx = cctx;
        if (b.state == kSaving) ++counters_.shadows_while_saving;
        if (pooled_.count(shadow) > 0) ++counters_.shadows_from_reserve;
        if (b.state == kPending) b.state = kShadowed;
        b.safe_from = seq;
        ++counters_.shadows;
        counters_.shadow_bytes += b.bytes;
        break;
      }
      spdlog::debug("checkpoint: no shadow for {} ({} bytes): {}; the call waits", Hex(b.address), b.bytes,
                    s.ToString());
    }
    // No room in the reserve: the copier takes this buffer next; the call
    // waits until it is saved.
    if (!waited) {
      waited = true;
      ++counters_.reserve_waits;
    }
    b.urgent = true;
    table_.cv.notify_all();
    WaitLocked(lock, [&] { return b.state == kSaved || b.state == kShadowed; });
  }
  if (waited) AddBlocked(t0);
  return Status::Ok();
}

void CowCheckpoint::TwinLaunchedLocked(std::uint64_t ticket) {
  // A report of this twin is judged against the admission it ran at.
  ticket_seq_[ticket] = seq_;
}

// ---------------------------------------------------------------- the copier (caller's thread)

TrackedBuffer* CowCheckpoint::NextToSave() {
  for (auto& [addr, b] : table_.by_address) {
    if (b.urgent && (b.state == kPending || b.state == kShadowed)) return &b;
  }
  while (next_ < order_.size()) {
    TrackedBuffer& b = table_.by_address.at(order_[next_]);
    if (b.state == kPending || b.state == kShadowed) return &b;
    ++next_;
  }
  return nullptr;
}

Status CowCheckpoint::CopyAll() {
  const std::size_t chunk = static_cast<std::size_t>(options_.image.chunk_bytes);
  std::vector<std::byte> host(chunk);
  bool pinned = false;
  UseContext([&] { pinned = ctx_->RegisterHostMemory(host.data(), host.size()).ok(); });
  Status status;
  std::vector<TwinValidator::Collected> reports;
  for (;;) {
    TrackedBuffer* b = nullptr;
    backend::DevicePtr src = 0;
    Lane lane;
    // A shadow copy queued in another context than the copier's lane is
    // waited for on the host, after mu is released (soft_operation.h).
    backend::Context* wait_ctx = nullptr;
    backend::EventHandle wait_event = 0;
    {
      std::lock_guard<std::mutex> lock(table_.mu);
      if (abandoned_) {
        status = cancelled_ ? Status::Unavailable("the process exited during the checkpoint")
                            : Status::Internal("checkpoint abandoned");
        break;
      }
      b = NextToSave();
      if (b == nullptr) break;
      lane = LaneOf(b->device);
      src = b->state == kShadowed ? b->shadow : b->address;
      if (b->state == kShadowed) {
        if (b->shadow_ctx == nullptr || b->shadow_ctx == lane.ctx) {
          UseContext([&] { (void)lane.ctx->StreamWaitEvent(lane.stream, b->shadow_ready); });
        } else {
          wait_ctx = b->shadow_ctx;
          wait_event = b->shadow_ready;
        }
      }
      b->state = kSaving;
    }
    if (wait_event != 0) UseContext([&] { (void)wait_ctx->SynchronizeEvent(wait_event); });
    status = SaveOne(*b, lane, src, host.data(), chunk);
    backend::DevicePtr shadow = 0;
    backend::EventHandle ready = 0;
    backend::Context* ready_ctx = nullptr;
    {
      std::lock_guard<std::mutex> lock(table_.mu);
      b->state = kSaved;
      b->urgent = false;
      b->safe_from = seq_ + 1;
      ++saved_;
      // The shadow stays attached until its D2D is known complete: a writer
      // may have shadowed B after the copier had read B itself (the copy
      // into the shadow can still be queued on the app's stream); reusing
      // the shadow before that copy ran would let it overwrite the next
      // buffer's t1 content (found by engine_consistency_test under load).
      shadow = b->shadow;
      ready = b->shadow_ready;
      ready_ctx = b->shadow_ctx != nullptr ? b->shadow_ctx : ctx_;
      if (!status.ok()) abandoned_ = true;  // waiters go on; the image is discarded
      table_.cv.notify_all();
    }
    bool shadow_idle = false;
    UseContext([&] {
      if (ready != 0) {
        shadow_idle = ready_ctx->SynchronizeEvent(ready).ok();
        (void)ready_ctx->DestroyEvent(ready);
      } else {
        shadow_idle = true;
      }
      (void)DrainValidators(false, &reports);
    });
    if (shadow != 0) {
      std::lock_guard<std::mutex> lock(table_.mu);
      if (b->shadow == shadow) {  // not already released by DropDeviceState
        b->shadow = 0;
        b->shadow_ready = 0;
        b->shadow_ctx = nullptr;
        if (shadow_idle) {
          GiveBackShadow(b->device, b->bytes, shadow);
        } else {
          shadows_to_free_.emplace_back(b->device, shadow);  // freed with the device state
        }
      }
    }
    if (!status.ok()) break;
    CheckReports(reports);
    reports.clear();
  }
  if (pinned) UseContext([&] { (void)ctx_->UnregisterHostMemory(host.data()); });
  return status;
}

Status CowCheckpoint::SaveOne(TrackedBuffer& b, const Lane& lane, backend::DevicePtr src, std::byte* host,
                             std::size_t chunk) {
  Status status;
  for (std::uint64_t off = 0; off < b.bytes && status.ok(); off += chunk) {
    const std::size_t len = static_cast<std::size_t>(std::min<std::uint64_t>(chunk, b.bytes - off));
    backend::Context* wait_ctx = nullptr;
    backend::EventHandle wait_event = 0;
    {
      // A writer may have shadowed B since the last chunk: read the rest
      // from the shadow. While a chunk is read from B itself, writers of B
      // wait (chunk_busy_) — one chunk at most.
      std::lock_guard<std::mutex> lock(table_.mu);
      if (b.shadow != 0 && src != b.shadow) {
        src = b.shadow;
        // Ordered below, before the chunk's copy: the shadow and its event
        // stay attached until this copier detaches them.
        wait_ctx = b.shadow_ctx;
        wait_event = b.shadow_ready;
      }
      saving_ = &b;
      chunk_busy_ = src == b.address;
    }
    const bool used = UseContext([&] {
      if (wait_event != 0) (void)WaitEventOn(lane.ctx, lane.stream, wait_ctx, wait_event);
      YieldToAppCopies(lane);
      status = lane.ctx->MemcpyAsync(reinterpret_cast<std::uint64_t>(host), src + off, len,
                                     backend::CopyKind::kDeviceToHost, lane.stream);
      if (status.ok()) status = lane.ctx->SynchronizeStream(lane.stream);
      if (!status.ok()) {
        status = status.WithContext("copying buffer " + Hex(b.address) + " at offset " + std::to_string(off) +
                                    " to the host");
      }
    });
    if (!used) status = Status::Unavailable("the process exited during the checkpoint");
    {
      std::lock_guard<std::mutex> lock(table_.mu);
      chunk_busy_ = false;
      saving_ = nullptr;
      table_.cv.notify_all();
    }
    if (!status.ok()) break;
    status = writer_->Write(b.image_index, b.piece_offset + off, host, len);
    progress_->AddBytes(len);
  }
  return status;
}

void CowCheckpoint::CheckReports(std::vector<TwinValidator::Collected>& reports) {
  if (reports.empty()) return;
  std::lock_guard<std::mutex> lock(table_.mu);
  for (const auto& r : reports) {
    std::uint64_t seq = 0;
    if (auto it = ticket_seq_.find(r.ticket); it != ticket_seq_.end()) {
      seq = it->second;
      ticket_seq_.erase(it);
    }
    counters_.twin_misses += r.misses.size();
    auto fall_back = [&](const std::string& why) {
      if (!fallback_) {
        fallback_ = true;
        fallback_why_ = why;
      }
    };
    if (r.overflowed()) {
      fall_back("a kernel's twin report overflowed (" + std::to_string(r.dropped) + " accesses unrecorded)");
      continue;
    }
    for (const auto& m : r.misses) {
      if (!m.write) continue;
      TrackedBuffer* b = table_.Find(m.address);
      if (b == nullptr) continue;  // a buffer allocated after t1: not in the image
      if (seq < b->safe_from) {
        fall_back("kernel (function id " + std::to_string(m.kernel_id) + ") wrote " + Hex(m.address) +
                  " in buffer " + Hex(b->address) + " outside its speculated access set before that buffer was saved");
      }
    }
  }
}

// ---------------------------------------------------------------- end (consumer thread)

Status CowCheckpoint::Finish(session::SessionState& st, EngineHook* hook, const Status& /*worked*/) {
  // Also after a failed copy: the image is aborted by the driver's caller,
  // but the device state must go and the reports say nothing then.
  hook->Remove();
  Abandon();
  if (validator_ && st.ctx == ctx_) {
    std::vector<TwinValidator::Collected> reports;
    if (Status s = DrainValidators(true, &reports); !s.ok()) {
      spdlog::warn("checkpoint: collecting twin reports: {}", s.ToString());
    }
    CheckReports(reports);
  }
  DropDeviceState();
  // The first-use order seen since t1: a restore loads buffers in it.
  {
    std::lock_guard<std::mutex> lock(table_.mu);
    // Pieces -> buffers: a buffer's first use is its earliest piece's.
    std::map<std::uint64_t, std::uint32_t> first_by_buffer;
    for (const auto& [addr, b] : table_.by_address) {
      if (b.first_use == 0 || b.global) continue;
      auto [it, added] = first_by_buffer.emplace(addr - b.piece_offset, b.first_use);
      if (!added) it->second = std::min(it->second, b.first_use);
    }
    std::vector<std::pair<std::uint32_t, std::uint64_t>> used;
    for (const auto& [buffer, first] : first_by_buffer) used.emplace_back(first, buffer);
    std::sort(used.begin(), used.end());
    snapshot_.first_use.clear();
    for (const auto& [order, addr] : used) snapshot_.first_use.push_back(addr);
    if (fallback_) spdlog::warn("checkpoint: copy-on-write image discarded: {}", fallback_why_);
  }
  SetSessionSections(snapshot_, writer_->mutable_metadata());
  return Status::Ok();
}

bool CowCheckpoint::fallback() {
  std::lock_guard<std::mutex> lock(table_.mu);
  return fallback_;
}

void CowCheckpoint::DetachLeftoversLocked(DeviceLeftovers* out) {
  // Spare shadows, shadows whose D2D was not confirmed, and shadows still
  // attached (their D2D may be queued on an app stream: wait for its event).
  for (const auto& [key, p] : spare_shadows_) out->allocations.push_back({LaneOf(key.first).ctx, p});
  spare_shadows_.clear();
  for (const auto& [device, p] : shadows_to_free_) ReleaseLaterLocked(device, p, out);
  shadows_to_free_.clear();
  for (auto& [addr, b] : table_.by_address) {
    if (b.shadow != 0) ReleaseLaterLocked(b.device, b.shadow, out);
    if (b.shadow_ready != 0) out->events_to_wait.push_back({b.shadow_ctx, b.shadow_ready});
    b.shadow = 0;
    b.shadow_ready = 0;
    b.shadow_ctx = nullptr;
  }
}

}  // namespace phos::engine
